"""The training run of `python -m gptlib train`, which loses nothing: Ctrl-C at any moment, a
divergence, a full disk, and an exact resume.

`train_command` is the command's steps, in this order, each a function of this module:

    plan = plan_run(options, ranks, device)  # settings settled; refused before any work
    with claim(plan.out):                    # one writer per checkpoint path at a time
        run = build(plan)                    # the data read, the model built or resumed
        signals.mode = "defer"               # Ctrl-C, SIGTERM, SIGHUP: finish the step, stop
        diverged = fit(run, plan, signals)   # TrainingRun.train: train_step, step after step
        signals.mode = "hold"                # a signal now waits for the save
        outcome = save(run, plan, diverged)  # atomic; never replaces a file it may not replace
        report(run, plan, signals, outcome)  # final evaluation (a second signal skips it), samples

`TrainingRun` holds the model, the optimiser, the schedule and the random states; its settings are
a `gptlib.commandline.settings.TrainSettings`, saved in the checkpoint and read back on --resume.

Random states (`random_states` / `restore_random_states`): the generator that draws the windows,
torch's CPU generator (dropout on the CPU) and, on CUDA, the GPU's generator (dropout there). All
are kept as CPU tensors, as `torch.Generator.set_state` needs, so a checkpoint resumes on any
device.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial

import torch

from gptlib.checkpoint import (
    Checkpoint,
    CheckpointError,
    checkpoint_size,
    free_bytes,
    load_checkpoint,
    save_checkpoint,
    save_error,
)
from gptlib.commandline import distributed
from gptlib.commandline.claim import claim, output_path, same_file
from gptlib.commandline.large_text import mean_loss, read_corpus
from gptlib.commandline.needs import check_memory, check_space, check_step_time, no_space
from gptlib.commandline.report import (
    EXIT_DIVERGED,
    PROG,
    after_save,
    check_saveable,
    diverged_line,
    divergence,
)
from gptlib.commandline.settings import (
    DEFAULT_OUT,
    RESUMABLE,
    TrainOptions,
    TrainSettings,
    check_resume_shape,
    chosen_device,
    early_config,
    model_config,
    resolve_settings,
    resume_changes,
    shadowed_corpus_note,
    warmup_note,
)
from gptlib.commandline.signals import StopSignals
from gptlib.data import sample_batch
from gptlib.device import DTYPES
from gptlib.language import _
from gptlib.model import GPT
from gptlib.train import (
    Diverged,
    History,
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
    """The command line's training: steps `start` .. `settings.steps - 1` of one schedule, each
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

    def __init__(
        self,
        model,
        corpus,
        settings: TrainSettings,
        *,
        ranks: distributed.Ranks,
        device: torch.device,
        compile: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        self.model, self.corpus, self.settings = model, corpus, settings
        self.ranks, self.device, self.compile, self.dtype = ranks, device, compile, dtype
        self.optimizer = make_optimizer(model, settings.lr)
        seed = distributed.rank_seed(settings.seed, ranks.rank)
        self.batches = torch.Generator().manual_seed(seed)
        self.start, self.step, self.history = 0, 0, History()
        self.total = settings.steps
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
        return learning_rate(step, s.lr, s.warmup, self.total, s.schedule, s.lr / 10)

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
                B, T = s.batch_size, model.cfg.block_size
                idx, labels = sample_batch(tokens, B, T, self.batches, self.device)
                if (
                    idx.dtype != torch.long
                ):  # a large text's compact tokens (`gptlib.commandline.large_text`)
                    idx, labels = idx.long(), labels.long()
                lr = self.lr(step)
                step_out = train_step(
                    model, self.optimizer, idx, labels, lr, CLIP, step=step, forward=forward
                )
                hist.record(step, lr, *step_out)
                evaluated = val is not None and (step % s.eval_every == 0 or step == last)
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
            "settings": s.as_saved(),
            "corpus": {"name": corpus.name, "reading": corpus.reading,
                       "vocab_size": corpus.vocab_size, "fingerprint": fingerprint},
            "world_size": self.ranks.world_size,
            "rng": states,
        }  # fmt: skip
        extra = {"data": s.data, "preset": s.preset, **summary}
        optimizer = self.optimizer if with_optimizer else None
        stem, ext = os.path.splitext(out)
        for path in [out, *(f"{stem}-{n}{ext or '.pt'}" for n in range(1, 1000))]:
            try:
                save_checkpoint(path, self.model, corpus.tokenizer, optimizer=optimizer,
                                step=self.done, history=self.history, extra=extra,
                                training=training, overwrite=overwrite and path == out)  # fmt: skip
                return path
            except FileExistsError:
                continue
        said = _("could not find a free name beside {out} to save the run (tried {out} and 999 "
                 "numbered names beside it); free one of them or pass another --out")  # fmt: skip
        raise CheckpointError(said.format(out=repr(out)))


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


# -- the train command ----------------------------------------------------------------------------

EXIT_NOT_SAVED = 1
RESCUE_PREFIX = "gptlib-rescued-"


@dataclass(kw_only=True)
class TrainPlan:
    """What the train command settled before any work: the options as given, the settings, the
    checkpoint it resumes (None for a new run), where it saves, its processes and device, the
    notes printed before the first step and {setting: (saved, given)} a resumed run changes."""

    options: TrainOptions
    settings: TrainSettings
    resumed: Checkpoint | None
    out: str
    ranks: distributed.Ranks
    device: torch.device
    notes: list[str | None]
    changes: dict[str, tuple]

    @property
    def with_optimizer(self) -> bool:
        return not self.options.no_optimizer_state

    def say(self, *args, **kwargs) -> None:
        """`print`, in the main process only (the one that prints, evaluates and saves)."""
        if self.ranks.is_main:
            print(*args, **kwargs)


@dataclass(kw_only=True)
class Outcome:
    """How the steps ended: the divergence that stopped them, if one did, with where the loss left
    its range (step, loss, lr); the random states saved; the path saved (None: nowhere)."""

    diverged: Diverged | None = None
    left: tuple[int, float, float] | None = None
    states: list[dict] = field(default_factory=list)
    saved: str | None = None


def train_command(options: TrainOptions, signals: StopSignals) -> int:
    """`python -m gptlib train`, its steps in order: settle the settings and check what can be
    checked before the data is read (`plan_run`), claim the checkpoint's path, read the data and
    build the model (`build`), train (`fit`), save (`save`), report (`report`). Every check that
    can fail runs before the first step. Ctrl-C, SIGTERM and SIGHUP stop the steps after the
    current one (`signals.mode`), and wait for the save."""
    try:
        ranks, device = distributed.setup(chosen_device(options.device))
        plan = plan_run(options, ranks, device)
        with _claimed(plan):
            run = build(plan)
            if ranks.is_main:  # room for the checkpoint, before the first step
                check_space(plan.out, checkpoint_size(run.model, plan.with_optimizer, run.total))
                signals.kept = partial(_kept_line, plan.out)
            signals.mode = "defer"
            try:
                said = _("training: Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT) stops after the current "
                         "step and saves to {out}")  # fmt: skip
                plan.say(said.format(out=plan.out))
                diverged = fit(run, plan, signals)
                signals.mode = "hold"  # from here to the end of the save, a signal waits for it
                outcome = save(run, plan, diverged)
            finally:
                signals.mode = "raise"
            code = report(run, plan, signals, outcome) if ranks.is_main else 0
        distributed.finish()  # only after success: a failed rank must not wait for the others
        return code
    finally:
        distributed.teardown()


def plan_run(options: TrainOptions, ranks: distributed.Ranks, device: torch.device) -> TrainPlan:
    """The settings settled, and the checks that need no data done, before the data is read."""
    ck = _resumed(options.resume, device) if options.resume else None
    before = ck.training["settings"] if ck is not None else None
    settings = resolve_settings(options, before)
    notes = [shadowed_corpus_note(settings.data), warmup_note(settings)]
    changes = resume_changes(options, before) if ck is not None else {}
    if ck is not None:
        check_resume_shape(options, ck)
    check_memory(early_config(options, settings, ck), settings.batch_size, device)
    out = options.out or (options.resume if options.resume else DEFAULT_OUT)
    if ranks.is_main:
        out = output_path(
            out, data=settings.data, resume=options.resume, overwrite=options.overwrite
        )
    return TrainPlan(
        options=options,
        settings=settings,
        resumed=ck,
        out=out,
        ranks=ranks,
        device=device,
        notes=notes,
        changes=changes,
    )


def _resumed(path: str, device: torch.device) -> Checkpoint:
    """The checkpoint to continue, or refuse with the reason."""
    ck = load_checkpoint(path, device)
    if ck.training is None or ck.step is None or ck.history is None:
        said = _("{path} holds no training state (written by an older gptlib or by hand); it "
                 "can be sampled from, but a run cannot continue from it")  # fmt: skip
        raise ValueError(said.format(path=repr(path)))
    if ck.optimizer_state is None:
        said = _("{path} was saved with --no-optimizer-state, so its run cannot continue "
                 "exactly; start a new run, or train without --no-optimizer-state")  # fmt: skip
        raise ValueError(said.format(path=repr(path)))
    return ck


@contextmanager
def _claimed(plan: TrainPlan) -> Iterator[None]:
    """The checkpoint's path held by this run (`gptlib.commandline.claim.claim`, in the main process only),
    with a note for the temporary files an earlier run killed while saving left beside it."""
    if not plan.ranks.is_main:
        yield
        return
    with claim(plan.out) as removed:
        if removed:
            said = _("note: removed {n} temporary file(s) that an earlier run killed while "
                     "saving left beside {out}")  # fmt: skip
            plan.notes.append(said.format(n=len(removed), out=plan.out))
        yield


def build(plan: TrainPlan) -> TrainingRun:
    """The data read, the model built (or resumed), checked against this machine and described:
    a run ready for its first step."""
    options, settings, ck, device = plan.options, plan.settings, plan.resumed, plan.device
    corpus = read_corpus(settings, plan.say)
    if ck is not None:
        _check_same_data(options, corpus, ck.training)
    cfg = model_config(options, settings, corpus, ck)
    corpus.check_fits(cfg.block_size)
    check_memory(cfg, settings.batch_size, device)
    check_step_time(cfg, settings.batch_size, device, options.max_step_seconds)
    start, total = (ck.step if ck is not None else 0), settings.steps
    if start >= total:
        said = _("{run} is already at step {start} of its {total}; pass --steps with a larger "
                 "total (more than {start}) to train further")  # fmt: skip
        raise ValueError(said.format(run=repr(options.resume), start=start, total=total))
    torch.manual_seed(settings.seed)
    model = ck.model.train() if ck is not None else GPT(cfg).to(device)
    _describe(plan, corpus, model)
    run = TrainingRun(
        model,
        corpus,
        settings,
        ranks=plan.ranks,
        device=device,
        compile=options.compile,
        dtype=DTYPES[options.dtype],
    )
    if ck is not None:
        _resume_run(run, plan)
        run.keep_start_as_healthy()
    return run


def _check_same_data(options: TrainOptions, corpus, training: dict) -> None:
    if corpus_fingerprint(corpus) != training["corpus"]["fingerprint"]:
        was = training["corpus"]
        said = _("cannot resume {run} on different data: it was trained on {was} ({was_reading}, "
                 "vocab {was_vocab}), this command reads {now} ({now_reading}, vocab {now_vocab}) "
                 "and its tokens differ; resume with the same --data and --format, or start a "
                 "new run without --resume")  # fmt: skip
        raise ValueError(
            said.format(
                run=repr(options.resume),
                was=repr(was["name"]),
                was_reading=was["reading"],
                was_vocab=was["vocab_size"],
                now=repr(corpus.name),
                now_reading=corpus.reading,
                now_vocab=corpus.vocab_size,
            )
        )


def _describe(plan: TrainPlan, corpus, model) -> None:
    """The data, the device, the model and the notes, before the first step."""
    cfg, ranks = model.cfg, plan.ranks
    plan.say(_("data {name}: {reason}").format(name=corpus.name, reason=corpus.reason))
    procs = _("  processes {n}").format(n=ranks.world_size) if ranks.distributed else ""
    said = _("device {device}{processes}  vocab {vocab}  train/val tokens {train}/{val}")
    plan.say(
        said.format(
            device=plan.device,
            processes=procs,
            vocab=cfg.vocab_size,
            train=f"{corpus.train.numel():,}",
            val=f"{corpus.val.numel():,}",
        )
    )
    said = _("preset {preset}  parameters {n}  (L={L} d={d} h={h} T={T})")
    plan.say(
        said.format(
            preset=plan.settings.preset,
            n=f"{model.num_parameters():,}",
            L=cfg.n_layer,
            d=cfg.n_embd,
            h=cfg.n_head,
            T=cfg.block_size,
        )
    )
    for note in plan.notes:
        if note:
            plan.say(note)


def _resume_run(run: TrainingRun, plan: TrainPlan) -> None:
    """Continue the resumed run, saying at which step and with which settings changed."""
    note, changes = run.resume(plan.resumed), plan.changes
    if note:
        plan.say(note)
    said = _("resuming {run} at step {start} of {total}")
    plan.say(said.format(run=plan.options.resume, start=run.start, total=run.total))
    if changes:
        shown = ", ".join(
            f"{RESUMABLE[k]} {_shown(a)} -> {_shown(b)}" for k, (a, b) in changes.items()
        )
        plan.say(_("changed from step {start}: {changes}").format(start=run.start, changes=shown))
    if "seed" in changes:  # the saved random state gives way to the new seed's
        seed = run.settings.seed
        run.reseed(seed)
        said = _("note: windows and dropout are drawn afresh from seed {seed} from step "
                 "{start}, so the run is no longer the one that never stopped")  # fmt: skip
        plan.say(said.format(seed=seed, start=run.start))


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def fit(run: TrainingRun, plan: TrainPlan, signals: StopSignals) -> Diverged | None:
    """Train, with a progress bar, until the last step or a stop signal; the divergence that
    stopped the run, if one did."""
    from tqdm.auto import tqdm

    bar = tqdm(
        initial=run.start,
        total=run.total,
        disable=plan.options.no_progress or not plan.ranks.is_main,
        unit="step",
        file=sys.stderr,
    )

    def on_step(hist):
        post = {"loss": f"{hist.loss[-1]:.3f}"}
        if hist.val_loss:
            post[f"val@{hist.val_step[-1]}"] = f"{hist.val_loss[-1]:.3f}"
        bar.set_postfix(post, refresh=False)
        bar.update(1)  # shows this step's loss, set just above

    try:
        run.train(signals.requested, on_step)
    except Diverged as e:
        if plan.ranks.distributed:
            said = _("{what}; under torchrun nothing was saved").format(what=divergence(e))
            raise ValueError(said) from None
        return e
    finally:
        bar.close()
    return None


def save(run: TrainingRun, plan: TrainPlan, diverged: Diverged | None) -> Outcome:
    """After a divergence, back to the last healthy state; then the run saved (the main process),
    or refused when nothing healthy is newer than its start."""
    outcome = Outcome(diverged=diverged)
    restored = False
    if diverged is not None:
        outcome.left = run.left_range(diverged)
        restored = run.back_to_healthy()
    outcome.states = run.states_to_save(diverged is not None)
    if run.history.interrupted:
        said = _("interrupted at step {done} of {total}: keeping what was learned so far")
        plan.say(said.format(done=run.done, total=run.total))
    if not plan.ranks.is_main:
        return outcome
    check_saveable(run, diverged, outcome.left, restored, plan.out)
    resumed = plan.options.resume
    overwrite = plan.options.overwrite or (resumed is not None and same_file(plan.out, resumed))
    outcome.saved = _save_keeping_the_run(run, plan, outcome.states, overwrite)
    return outcome


def report(run: TrainingRun, plan: TrainPlan, signals: StopSignals, outcome: Outcome) -> int:
    """Where the run was saved, or why it stopped; then the final evaluation and the samples
    (`gptlib.commandline.report.after_save`). The exit code."""
    saved, out = outcome.saved, plan.out
    if saved is None:
        return EXIT_NOT_SAVED
    if saved != out and not os.path.basename(saved).startswith(RESCUE_PREFIX):
        said = _("{out} appeared while training (written by something else) and was left alone")
        print(said.format(out=out))
    print(_("saved {path}").format(path=saved))
    if outcome.diverged:
        print(diverged_line(run, outcome.diverged, outcome.left, saved), file=sys.stderr)
        return EXIT_DIVERGED
    save_again = partial(_save_again, run, saved, outcome.states, plan.with_optimizer)
    return after_save(run, plan.options, signals, saved, save_again)


def _kept_line(out: str) -> str:
    """What a run ended at once keeps: `out` as it was, with its step and age, or nothing."""
    try:
        age = max(0.0, time.time() - os.path.getmtime(out))
    except OSError:
        return _("nothing was saved, since this run had not saved yet")
    said = _("{out} is kept as it was, saved {age} ago; the steps since then are lost")
    return said.format(out=out, age=_age(age))


def _age(seconds: float) -> str:
    if seconds < 120:
        return _("{n} s").format(n=f"{seconds:.0f}")
    if seconds < 7200:
        return _("{n} min").format(n=f"{seconds / 60:.0f}")
    return _("{n} h").format(n=f"{seconds / 3600:.1f}")


def _save_keeping_the_run(run: TrainingRun, plan: TrainPlan, states, overwrite: bool) -> str | None:
    """Save the run to `out`; when that fails for want of space or of a name the file system
    takes, or of a folder, to a new file in `out`'s folder, then in the system's temporary
    folder, saying in one line what failed and where it went instead. Whatever was at `out`
    stays whole (a save is atomic). None, after one line, when nowhere would take it; in a
    terminal, the run waits in memory for space to be freed instead."""
    out, with_optimizer = plan.out, plan.with_optimizer
    need = checkpoint_size(run.model, with_optimizer, run.done)
    while True:
        failed = []
        for path, replace in _places(out, overwrite, run.done):
            free = free_bytes(path)
            if free is not None and free < need:
                failed.append((path, no_space(path, need, free)))
                continue
            try:
                saved = run.save(path, {}, states, overwrite=replace, with_optimizer=with_optimizer)
            except (OSError, RuntimeError) as e:
                why = save_error(e)
                if why is None:
                    raise
                failed.append((path, why))
                continue
            if failed:
                said = _("could not save {out} ({why}); the run was saved to {path} instead")
                print(said.format(out=failed[0][0], why=failed[0][1], path=saved), file=sys.stderr)
            return saved
        reasons = "; ".join(f"{path}: {why}" for path, why in failed)
        if not sys.stdin.isatty():
            said = _("{prog}: error: the run could not be saved anywhere ({reasons}); its "
                     "{done} steps are lost")  # fmt: skip
            print(
                said.format(prog=f"{PROG} train", reasons=reasons, done=run.done), file=sys.stderr
            )
            return None
        said = _("the run could not be saved anywhere ({reasons}); it is still in memory: free "
                 "some space and press Enter to try again, or Ctrl-C to end without saving")  # fmt: skip
        print(said.format(reasons=reasons), file=sys.stderr, flush=True)
        try:
            sys.stdin.readline()
        except KeyboardInterrupt:
            return None


def _places(out: str, overwrite: bool, done: int) -> list[tuple[str, bool]]:
    """Where a run is saved: `out`, then a new file in its folder, then in the system's
    temporary folder (each a short name, for a file system that refused a long one)."""
    name = f"{RESCUE_PREFIX}step{done}.pt"
    folders = dict.fromkeys([os.path.dirname(os.path.abspath(out)), tempfile.gettempdir()])
    return [(out, overwrite), *((os.path.join(folder, name), False) for folder in folders)]


def _save_again(run, saved, states, with_optimizer, summary) -> None:
    """Add the final evaluation to the checkpoint; a failure leaves the first save whole."""
    try:
        run.save(saved, summary, states, overwrite=True, with_optimizer=with_optimizer)
    except (OSError, RuntimeError) as e:
        why = save_error(e)
        if why is None:
            raise
        said = _("note: the final evaluation could not be added to {path} ({why}); the "
                 "checkpoint saved before it is kept whole")  # fmt: skip
        print(said.format(path=saved, why=why))
