"""A training run that loses nothing: where it saves, Ctrl-C at any moment, and exact resuming.

`python -m gptlib train` is these steps, in this order:

    out = output_path(args.out, data=..., resume=..., overwrite=...)  # refused before any work
    with claim(out):                         # one writer per checkpoint path at a time
        ...load the data, build the model...
        run = TrainingRun(model, corpus, settings, ranks, device, compile=..., dtype=...)
        run.resume(checkpoint)               # with --resume: step, history, optimiser, RNG
        signals.mode = "defer"               # Ctrl-C, SIGTERM, SIGHUP: finish the step, stop
        hist = run.train(signals.requested)  # gptlib.train.train_step, step after step
        signals.mode = "hold"                # a signal now waits for the save
        run.save(out, ...)                   # atomic; never replaces a file it may not replace
        ...final evaluation, skipped by a second signal; then the checkpoint is updated...

Why Ctrl-C is deferred: a KeyboardInterrupt raised in the middle of a step lands after the batch
was drawn (the generator moved on) but before the optimiser stepped, so the saved random state and
the saved weights would disagree and a resumed run would not be the run that never stopped. A
step is either done, or it never happened.

Random states (`random_states` / `restore_random_states`): the generator that draws the windows,
torch's CPU generator (dropout on the CPU) and, on CUDA, the GPU's generator (dropout there). All
are kept as CPU tensors, as `torch.Generator.set_state` needs, so a checkpoint resumes on any
device.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable

import torch

from gptlib import distributed
from gptlib.checkpoint import CheckpointError, save_checkpoint
from gptlib.data import sample_batch
from gptlib.language import _
from gptlib.train import (
    Diverged,
    History,
    estimate_loss,
    eval_batches,
    learning_rate,
    make_optimizer,
    train_step,
)

# -- random states --------------------------------------------------------------------------------


def random_states(batches: torch.Generator, device: torch.device) -> dict:
    """This process's random states, as CPU tensors: the windows' generator, torch's CPU
    generator and, on CUDA, the current GPU's generator."""
    states = {"batches": batches.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_random_states(
    states: dict, batches: torch.Generator, device: torch.device
) -> str | None:
    """Put back what `random_states` saved (for this rank). Returns a note when part of it does
    not apply here (a run saved on CUDA resumed on a CPU, say), else None."""
    batches.set_state(states["batches"].cpu())
    torch.set_rng_state(states["torch"].cpu())
    saved_cuda = states.get("cuda")
    if device.type == "cuda" and saved_cuda is not None:
        torch.cuda.set_rng_state(saved_cuda.cpu(), device)
        return None
    if device.type == "cuda" or saved_cuda is not None:
        said = _("note: the run was saved on {where} and continues on {device}: dropout draws "
                 "differ from the run that never stopped")  # fmt: skip
        where = "CUDA" if saved_cuda is not None else _("a CPU")
        return said.format(where=where, device=device.type)
    return None


# -- the run ----------------------------------------------------------------------------------------

CLIP = 1.0  # the global gradient norm is clipped to 1.0, as `gptlib.train.train` does by default
EVAL_BATCHES = 10  # batches of each validation loss during training, as in `train`


class TrainingRun:
    """The command line's training: steps `start` .. `settings["steps"] - 1` of one schedule, each
    of them `gptlib.train.train_step`, the step notebook 10 teaches, with what a long run adds:

    - the forward pass through DistributedDataParallel under torchrun, `torch.compile`
      (`compile`) and autocast (`dtype`, e.g. torch.bfloat16); the weights stay float32;
    - each rank's windows from its own generator (`distributed.rank_seed`): the ranks' batches
      together are the global batch, and DDP averages their gradients;
    - `resume` puts back a saved run's step, history, optimiser state and random states, so the
      steps that follow are those of the run that never stopped;
    - a stop asked for by a signal, polled after each step, never inside one (`train`);
    - a non-finite loss or gradient norm raised as `Diverged` before the update that would spread
      it; `states_to_save` then gives the random states after the last finished step.
    """

    def __init__(self, model, corpus, settings, ranks, device, *, compile=False, dtype=None):
        self.model, self.corpus, self.settings = model, corpus, settings
        self.ranks, self.device, self.compile, self.dtype = ranks, device, compile, dtype
        self.optimizer = make_optimizer(model, settings["lr"])
        seed = distributed.rank_seed(settings["seed"], ranks.rank)
        self.batches = torch.Generator().manual_seed(seed)
        self.start, self.step, self.history = 0, 0, History()
        self.total = settings["steps"]
        self.kept = random_states(self.batches, device)
        # The last state whose validation loss was healthy (see `healthy`), in CPU memory, kept
        # for a divergence to fall back on; a single process only (under torchrun a divergence
        # saves nothing).
        self.healthy: dict | None = None
        self.left = False  # a training loss has left its range

    @property
    def done(self) -> int:
        """The steps finished so far, the ones before this run's included."""
        return self.history.step[-1] + 1 if self.history.step else self.start

    def resume(self, ck) -> str | None:
        """Continue the run saved in the checkpoint `ck`; a note when its random states do not
        all apply here (another number of processes, another kind of device), else None."""
        self.start, self.history = ck.step, ck.history
        self.optimizer.load_state_dict(ck.optimizer_state)
        states = ck.training["rng"]
        if isinstance(states, dict):  # older checkpoints: one list per kind of state
            kinds = zip(states["batches"], states["torch"], strict=True)
            states = [{"batches": b, "torch": t} for b, t in kinds]
        if len(states) != self.ranks.world_size:
            said = _("note: the run had {before} process(es), this one has {now}: windows are "
                     "drawn afresh from the seed")  # fmt: skip
            return said.format(before=len(states), now=self.ranks.world_size)
        return restore_random_states(states[self.ranks.rank], self.batches, self.device)

    def reseed(self, seed: int) -> None:
        """Draw the windows and dropout afresh from `seed` (a resumed run given a new --seed)."""
        torch.manual_seed(seed)
        self.batches.manual_seed(distributed.rank_seed(seed, self.ranks.rank))

    def lr(self, step: int) -> float:
        """Warmup, then the schedule down to a tenth of the peak at the run's last step."""
        s = self.settings
        return learning_rate(step, s["lr"], s["warmup"], self.total, s["schedule"], s["lr"] / 10)

    def train(self, should_stop: Callable[[], bool], on_step=None) -> History:
        """Run the steps left, calling `on_step(history)` after each; stop after a step once
        `should_stop()` says so (then `history.interrupted`). Only rank 0 measures the
        validation loss."""
        s, model, hist, last = self.settings, self.model, self.history, self.total - 1
        tokens = self.corpus.train.to(self.device)
        val = self.corpus.val.to(self.device) if self.ranks.is_main else None
        forward = self._forward()
        hook = self.optimizer.register_step_pre_hook(self._finite_gradients)
        hist.clip, hist.interrupted = CLIP, False
        self.kept = random_states(self.batches, self.device)
        model.train()
        try:
            for step in range(self.start, self.total):
                self.step = step
                B, T = s["batch_size"], model.cfg.block_size
                idx, labels = sample_batch(tokens, B, T, self.batches, self.device)
                if idx.dtype != torch.long:  # a large text's compact tokens (`cli._load`)
                    idx, labels = idx.long(), labels.long()
                lr = self.lr(step)
                step_out = train_step(
                    model, self.optimizer, idx, labels, lr, CLIP, step=step, forward=forward
                )
                hist.record(step, lr, *step_out)
                evaluated = val is not None and (step % s["eval_every"] == 0 or step == last)
                if evaluated:
                    hist.record_val(step, mean_loss(model, val, B, EVAL_BATCHES))
                self.kept = random_states(self.batches, self.device)  # kept if the next diverges
                loss = hist.loss[-1]
                if not math.isfinite(loss) or loss > math.log(self.corpus.vocab_size) + 1.0:
                    self.left = True  # out of range: no later state of this run counts as healthy
                if evaluated and self.ranks.world_size == 1 and self.is_healthy(hist.val_loss):
                    self._keep_healthy(step + 1, hist.val_loss[-1])
                if on_step is not None:
                    on_step(hist)
                if step < last and should_stop():  # under torchrun, every rank polls here
                    hist.interrupted = True
                    break
        finally:
            hook.remove()
        return hist

    def is_healthy(self, val_losses: list[float]) -> bool:
        """A validation loss (the last of `val_losses`) is healthy when it is finite, no worse
        than a uniform guess over the vocabulary (ln V) by more than HEALTHY_MARGIN, no worse
        than the best one before it by more than HEALTHY_MARGIN, and no training loss of this
        run has left its range so far (worse than ln V by more than a nat): a model that blew up
        and collapsed into a uniform guess, or into repeating one character, is finite but not
        healthy."""
        *before, val = val_losses
        if (
            self.left
            or not math.isfinite(val)
            or val > math.log(self.corpus.vocab_size) + HEALTHY_MARGIN
        ):
            return False
        best = min((v for v in before if math.isfinite(v)), default=math.inf)
        return val <= best + HEALTHY_MARGIN

    def _keep_healthy(self, done: int, val_loss: float) -> None:
        hist = self.history
        self.healthy = {
            "done": done,
            "val_loss": val_loss,
            "model": _cpu_copy(self.model.state_dict()),
            "optimizer": _cpu_copy(self.optimizer.state_dict()),
            "rng": self.kept,
            "lengths": (len(hist.step), len(hist.val_step)),
        }

    def keep_start_as_healthy(self) -> None:
        """The resumed state is the healthy one to fall back on until an evaluation is."""
        if self.ranks.world_size == 1:
            self.healthy = {"done": self.start, "val_loss": None, "model": None}

    def back_to_healthy(self) -> bool:
        """Put back the last healthy state (weights, optimiser, random states, history); False
        when there is none newer than the start of this run."""
        kept = self.healthy
        if kept is None or kept["model"] is None:
            return False
        self.model.load_state_dict(kept["model"])
        self.optimizer.load_state_dict(kept["optimizer"])
        self.kept = kept["rng"]
        n, m = kept["lengths"]
        hist = self.history
        for name in ("step", "lr", "loss", "grad_norm"):
            del getattr(hist, name)[n:]
        del hist.val_step[m:], hist.val_loss[m:]
        return True

    def left_range(self, diverged: Diverged) -> tuple[int, float, float]:
        """(step, loss, lr): the first step after the last healthy state whose training loss was
        out of range (not finite, or worse than a uniform guess, ln V, by more than a nat), at
        the rate the schedule gave it; the diverging step itself when none was before it."""
        since = self.healthy["done"] if self.healthy is not None else self.start
        ceiling = math.log(self.corpus.vocab_size) + 1.0
        hist = self.history
        for step, loss, lr in zip(hist.step, hist.loss, hist.lr, strict=True):
            if step >= since and (not math.isfinite(loss) or loss > ceiling):
                return step, loss, lr
        return diverged.step, diverged.value, self.lr(diverged.step)

    def _forward(self):
        """The module the forward pass runs through: DDP, compiled, under autocast."""
        forward = distributed.wrap(self.model, self.ranks, self.device)
        if self.compile:
            forward = torch.compile(forward)
        if self.dtype is None:
            return forward
        device_type, dtype = self.device.type, self.dtype

        def autocast(idx, labels):
            with torch.autocast(device_type, dtype=dtype):
                return forward(idx, labels)

        return autocast

    def _finite_gradients(self, optimizer, args, kwargs) -> None:
        """Before each update: a finite loss can still overflow its gradients, and a step taken
        with them would make every weight NaN."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
        if not torch.isfinite(norm):
            lr = optimizer.param_groups[0]["lr"]
            raise Diverged(self.step, norm.item(), lr, what="gradients")

    def states_to_save(self, diverged: bool) -> list[dict]:
        """Every rank's random states, in rank order; after a divergence, this rank's after the
        last finished step (a single process: under torchrun nothing is saved then)."""
        if diverged:
            return [self.kept]
        return distributed.gather(random_states(self.batches, self.device))

    def save(self, out, summary, states, *, overwrite=False, with_optimizer=True) -> str:
        """Save everything `--resume` needs and return the path written: `out`, or, if a file
        appeared at `out` during the run and may not be replaced, the first free `OUT-N.pt`
        beside it (the run's work is kept either way)."""
        s, corpus = self.settings, self.corpus
        fingerprint = corpus_fingerprint(corpus)
        training = {
            "settings": s,
            "corpus": {"name": corpus.name, "reading": corpus.reading,
                       "vocab_size": corpus.vocab_size, "fingerprint": fingerprint},
            "world_size": self.ranks.world_size,
            "rng": states,
        }  # fmt: skip
        extra = {"data": s["data"], "preset": s["preset"], **summary}
        optimizer = self.optimizer if with_optimizer else None
        stem, ext = os.path.splitext(out)
        for path in [out, *(f"{stem}-{n}{ext or '.pt'}" for n in range(1, 1000))]:
            try:
                save_checkpoint(path, self.model, corpus.tokenizer, optimizer, self.done,
                                self.history, extra=extra, training=training,
                                overwrite=overwrite and path == out)  # fmt: skip
                return path
            except FileExistsError:
                continue
        raise CheckpointError(f"could not find a free name beside {out!r} to save the run")


def mean_loss(model, tokens: torch.Tensor, batch_size: int, n_batches: int, seed=1234) -> float:
    """`gptlib.train.estimate_loss`, also for tokens kept in a smaller integer type than the
    model reads (a large text read by the command line): the same windows, made long integers
    one batch at a time."""
    if tokens.dtype == torch.long:
        return estimate_loss(model, tokens, batch_size, n_batches, seed)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        losses = [
            model(idx.long(), labels.long())[1].item()
            for idx, labels in eval_batches(model, tokens, batch_size, n_batches, seed)
        ]
    model.train(was_training)
    return sum(losses) / len(losses)


def corpus_fingerprint(corpus, chunk: int = 1 << 20) -> str:
    """`corpus.fingerprint()`, the same hash, read a million tokens at a time: the whole-stream
    copy it makes would double the memory of a large text's tokens at each save."""
    h = hashlib.sha256(repr(corpus.tokenizer.to_dict()).encode())
    for stream in (corpus.train, corpus.val):
        for start in range(0, stream.numel(), chunk):
            h.update(stream[start : start + chunk].to(torch.int64).cpu().numpy().tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


HEALTHY_MARGIN = 0.5  # nats: how much worse than the best, or than ln V, is still healthy


def _cpu_copy(value):
    """A copy of a state dict (nested dicts and lists of tensors) on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _cpu_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu_copy(v) for v in value)
    return value
