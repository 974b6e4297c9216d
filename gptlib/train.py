"""The training loop: batch, forward, zero_grad, backward, clip, step, in that order.

Notebook 10 (training loop) teaches this module."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from gptlib.data import sample_batch
from gptlib.language import N_, _
from gptlib.model import GPT, IGNORE_INDEX


def learning_rate(
    step: int,
    max_lr: float,
    warmup: int = 100,
    total_steps: int | None = None,
    schedule: str = "constant",
    min_lr: float = 0.0,
) -> float:
    """Linear warmup over `warmup` steps (step 0 already gets max_lr / warmup, never 0), then
    either constant or a cosine decay to `min_lr` at `total_steps`.

    Taught in notebook 10 (training loop)."""
    if schedule not in ("constant", "cosine"):
        raise ValueError(
            _("schedule must be 'constant' or 'cosine', got {schedule}").format(
                schedule=repr(schedule)
            )
        )
    if warmup > 0 and step < warmup:
        return max_lr * (step + 1) / warmup
    if schedule == "constant":
        return max_lr
    if total_steps is None:
        raise ValueError(_("a cosine schedule needs total_steps"))
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def parameter_groups(model: torch.nn.Module, weight_decay: float = 0.1) -> list[dict]:
    """Decay matrices and embeddings (>= 2-D); leave gains and biases (1-D) alone.

    `named_parameters()` yields a tied Parameter once, so it is optimised once.

    Taught in notebook 10 (training loop).
    """
    decay, no_decay = [], []
    for _name, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def make_optimizer(
    model: torch.nn.Module,
    lr: float = 3e-4,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95),
) -> torch.optim.AdamW:
    """Taught in notebook 10 (training loop)."""
    groups = parameter_groups(model, weight_decay)
    # The fused kernel updates every tensor in one pass (about 5x faster than the per-tensor
    # loop on a CPU); it exists for CPU and CUDA tensors.
    fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused or None)


@dataclass
class History:
    """What happened during training, one entry per step (val entries every `eval_every`).

    Not taught in a notebook: what train returns; notebooks read its fields."""

    step: list[int] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    clip: float | None = None
    interrupted: bool = False

    def record(self, step: int, lr: float, loss: float, grad_norm: float) -> None:
        self.step.append(step)
        self.lr.append(lr)
        self.loss.append(loss)
        self.grad_norm.append(grad_norm)

    def record_val(self, step: int, val_loss: float) -> None:
        self.val_step.append(step)
        self.val_loss.append(val_loss)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> History:
        return cls(**data)

    def __len__(self) -> int:
        return len(self.step)


@torch.no_grad()
def estimate_loss(
    model: GPT,
    tokens: torch.Tensor,
    batch_size: int = 32,
    n_batches: int = 50,
    seed: int = 1234,
) -> float:
    """Mean loss over `n_batches` random windows drawn with a fixed seed (same windows each call).

    Taught in notebook 11 (when training goes wrong)."""
    was_training = model.training
    model.eval()
    losses = [
        model(idx, labels)[1].item()
        for idx, labels in eval_batches(model, tokens, batch_size, n_batches, seed)
    ]
    model.train(was_training)
    return sum(losses) / len(losses)


def eval_batches(
    model: GPT, tokens: torch.Tensor, batch_size: int = 32, n_batches: int = 50, seed: int = 1234
):
    """The (idx, labels) batches `estimate_loss` scores: the same windows for the same seed, on the
    model's device, each as long as the model's window allows.

    Not taught in a notebook: estimate_loss's fixed windows, kept apart for the exercise checks."""
    g = torch.Generator().manual_seed(seed)
    block = min(model.cfg.block_size, tokens.numel() - 1)
    device = model.lm_head.weight.device
    for _unused in range(n_batches):
        yield sample_batch(tokens, batch_size, block, g, device)


StepCallback = Callable[[History], None]


# What Diverged names as not finite, shown translated in its message (`what` stays the key).
WHAT_DIVERGED = {"loss": N_("loss"), "gradients": N_("gradients")}


class Diverged(RuntimeError):
    """The loss (or, in the command line's check, the gradient norm) of step `step` was not finite.
    It is raised before that step's update, so the weights and the optimiser state are still
    those after the step before.

    Not taught in a notebook: the error train raises; notebook 11 reads its message."""

    def __init__(self, step: int, value: float, lr: float, what: str = "loss") -> None:
        self.step, self.value, self.lr, self.what = step, value, lr, what
        super().__init__(
            _(
                "step {step}: the {what} became {value} at lr={lr}. Lower max_lr by 10x, make "
                "sure warmup > 0, and check the causal mask and the label shift"
            ).format(step=step, what=_(WHAT_DIVERGED.get(what, what)), value=value, lr=f"{lr:.2e}")
        )


def train_step(
    model: GPT,
    optimizer: torch.optim.Optimizer,
    idx: torch.Tensor,
    labels: torch.Tensor,
    lr: float,
    clip: float | None = 1.0,
    *,
    step: int = 0,
    forward: Callable | None = None,
) -> tuple[float, float]:
    """One step on the batch (idx, labels), in its fixed order: forward and loss, zero_grad,
    backward, clip the global gradient norm to `clip` (None: no clip), the learning rate `lr`
    into every parameter group, step. Returns the loss and the gradient norm before the clip.

    `forward` runs the forward pass (default: `model`; the command line passes a
    DistributedDataParallel, torch.compile or autocast wrapper of it). A batch whose labels are
    all ignored raises ValueError; a non-finite loss raises `Diverged`, naming `step`.

    Not taught in a notebook: the body of train's loop, kept apart for the command line's run."""
    if not (labels[:, 1:] != IGNORE_INDEX).any():
        raise ValueError(
            _(
                "step {step}: every label in the batch is ignored (-100), so the mean loss would "
                "be 0/0 = NaN; check the padding / masking of the labels"
            ).format(step=step)
        )
    _logits, loss = (forward or model)(
        idx, labels
    )  # logits [B, T, V]; the shift is inside the loss
    if not torch.isfinite(loss):
        raise Diverged(step, loss.item(), lr)
    optimizer.zero_grad(set_to_none=True)  # backward adds to .grad: drop the last step's
    loss.backward()
    if clip is not None:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    else:
        norm = torch.nn.utils.get_total_norm(
            [p.grad for p in model.parameters() if p.grad is not None]
        )
    for group in optimizer.param_groups:  # AdamW reads the rate from each group
        group["lr"] = lr
    optimizer.step()
    return loss.item(), float(norm)


def _check_ids(vocab_size: int, **tensors: torch.Tensor | None) -> None:
    """Refuse ids outside 0..vocab_size-1, once per run: GPT.forward checks them on CPU only,
    where the check costs no host sync."""
    for name, ids in tensors.items():
        if ids is None or ids.numel() == 0:
            continue
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            raise ValueError(
                _(
                    "{name} must hold ids in 0..{last} (the model's vocab_size), got ids from "
                    "{low} to {high}; was the text encoded with this model's tokenizer?"
                ).format(name=name, last=vocab_size - 1, low=low, high=high)
            )


def log_line(hist: History) -> str:
    """The textbook's log line for the last step of `hist`: step, learning rate, loss, gradient
    norm before the clip.

    Not taught in a notebook: what `train(..., log_every=n)` prints."""
    return _("step {step:4d}  lr {lr:.2e}  loss {loss:.4f}  grad {grad:.2f}").format(
        step=hist.step[-1], lr=hist.lr[-1], loss=hist.loss[-1], grad=hist.grad_norm[-1]
    )


def _check_run(model: GPT, tokens, val_tokens, steps: int, log_every: int) -> None:
    """What `train` refuses before its first step, each with what was given and what to do."""
    if steps < 0:
        raise ValueError(_("steps must be >= 0, got {steps}").format(steps=steps))
    if isinstance(log_every, bool) or not isinstance(log_every, int) or log_every < 0:
        raise ValueError(
            _(
                "log_every must be a whole number of steps >= 0, got {log_every}: 50 prints a "
                "line every 50 steps, 0 (the default) prints nothing"
            ).format(log_every=repr(log_every))
        )
    block = model.cfg.block_size
    if tokens.numel() < block + 1:
        raise ValueError(
            _(
                "training corpus has {tokens} tokens; block_size={block_size} needs at least "
                "{needed}: use a longer text or a smaller block_size"
            ).format(tokens=tokens.numel(), block_size=block, needed=block + 1)
        )
    _check_ids(model.cfg.vocab_size, tokens=tokens, val_tokens=val_tokens)


def train(
    model: GPT,
    tokens: torch.Tensor,
    steps: int,
    batch_size: int = 16,
    *,
    val_tokens: torch.Tensor | None = None,
    max_lr: float = 3e-4,
    warmup: int = 100,
    schedule: str = "constant",
    min_lr: float = 0.0,
    clip: float | None = 1.0,
    weight_decay: float = 0.1,
    eval_every: int = 100,
    eval_batches: int = 10,
    seed: int = 0,
    optimizer: torch.optim.Optimizer | None = None,
    callback: StepCallback | None = None,
    log_every: int = 0,
) -> History:
    """Train `model` for `steps` steps on random windows of `tokens` and return the History.

    Each step: a batch from one generator seeded with `seed`, this step's learning rate (warmup,
    then `schedule` over the `steps`), then `train_step`. The validation loss on `val_tokens` is
    measured every `eval_every` steps and after the last; `callback(history)` runs after every
    step. The optimiser defaults to `make_optimizer`'s AdamW with its two parameter groups.
    `log_every` > 0 prints the textbook's log line (step, learning rate, loss, gradient norm
    before the clip) at every step that is a multiple of it, step 0 included; 0 prints nothing.

    A non-finite loss raises `Diverged` (a RuntimeError) naming the step; Ctrl-C stops cleanly
    and returns the history so far (`interrupted=True`). Same model init + same seed -> same
    history. The command line (torchrun, resuming) drives `train_step` from `gptlib.commandline.run`.

    Taught in notebook 10 (training loop).
    """
    _check_run(model, tokens, val_tokens, steps, log_every)
    block, device = model.cfg.block_size, model.lm_head.weight.device
    opt = optimizer or make_optimizer(model, max_lr, weight_decay)
    g = torch.Generator().manual_seed(seed)  # one generator, made once: every step's windows
    hist = History(clip=clip)
    evaluate = val_tokens is not None and bool(eval_every)
    model.train()  # dropout on
    try:
        for step in range(steps):
            idx, labels = sample_batch(tokens, batch_size, block, g, device)  # [B, T] twice
            lr = learning_rate(step, max_lr, warmup, steps, schedule, min_lr)
            hist.record(step, lr, *train_step(model, opt, idx, labels, lr, clip, step=step))
            if log_every and step % log_every == 0:
                print(log_line(hist))
            if evaluate and (step % eval_every == 0 or step == steps - 1):
                hist.record_val(step, estimate_loss(model, val_tokens, batch_size, eval_batches))
            if callback is not None:
                callback(hist)
    except KeyboardInterrupt:
        hist.interrupted = True
    return hist
