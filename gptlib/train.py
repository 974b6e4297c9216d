"""The training loop: batch, forward, zero_grad, backward, clip, step, in that order.

Notebook 10 (training loop) teaches this module."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from gptlib.data import sample_batch
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
        raise ValueError(f"schedule must be 'constant' or 'cosine', got {schedule!r}")
    if warmup > 0 and step < warmup:
        return max_lr * (step + 1) / warmup
    if schedule == "constant":
        return max_lr
    if total_steps is None:
        raise ValueError("a cosine schedule needs total_steps")
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * progress))


def parameter_groups(model: torch.nn.Module, weight_decay: float = 0.1) -> list[dict]:
    """Decay matrices and embeddings (>= 2-D); leave gains and biases (1-D) alone.

    `named_parameters()` yields a tied Parameter once, so it is optimised once.

    Taught in notebook 10 (training loop).
    """
    decay, no_decay = [], []
    for _, p in model.named_parameters():
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
    for _ in range(n_batches):
        yield sample_batch(tokens, batch_size, block, g, device)


StepCallback = Callable[[History], None]


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
    history: History | None = None,
    callback: StepCallback | None = None,
    start_step: int = 0,
    total_steps: int | None = None,
    generators: Sequence[torch.Generator] | None = None,
    forward: torch.nn.Module | None = None,
    autocast_dtype: torch.dtype | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> History:
    """Train `model` on random windows of `tokens` and return the History.

    Steps `start_step .. start_step + steps - 1` are run; the learning-rate schedule spans
    `total_steps` (default: start_step + steps), so a run stopped early and continued from its
    checkpoint follows the schedule it started with.

    `generators` draw the windows (default: one, seeded with `seed`); with several, each draws
    `batch_size` windows and the step trains on all of them: the global batch of a run whose
    processes each hold one of the generators. Pass them in to keep their state afterwards.
    `forward` is the module that runs the training forward pass, a DistributedDataParallel or
    torch.compile wrapper of `model` (default: `model` itself); `autocast_dtype` (e.g.
    torch.bfloat16) runs it under autocast.

    A non-finite loss raises RuntimeError naming the step; Ctrl-C stops cleanly and returns the
    history so far (with `interrupted=True`). `should_stop`, polled after every step, stops the
    same way when it returns True: the command line turns Ctrl-C into that, so a run stops only
    between steps (see `gptlib.run`). Same model init + same seed -> same history.

    Taught in notebook 10 (training loop).
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    device = model.lm_head.weight.device
    block = model.cfg.block_size
    if tokens.numel() < block + 1:
        raise ValueError(
            f"training corpus has {tokens.numel()} tokens; block_size={block} needs at least "
            f"{block + 1}: use a longer text or a smaller block_size"
        )
    opt = optimizer or make_optimizer(model, max_lr, weight_decay)
    hist = history if history is not None else History()
    hist.clip = clip
    hist.interrupted = False
    gens = list(generators) if generators else [torch.Generator().manual_seed(seed)]
    total = start_step + steps if total_steps is None else total_steps
    run = forward if forward is not None else model
    model.train()
    try:
        for step in range(start_step, start_step + steps):
            lr = learning_rate(step, max_lr, warmup, total, schedule, min_lr)
            for group in opt.param_groups:
                group["lr"] = lr
            windows = [sample_batch(tokens, batch_size, block, g, device) for g in gens]
            idx = torch.cat([w[0] for w in windows]) if len(gens) > 1 else windows[0][0]
            labels = torch.cat([w[1] for w in windows]) if len(gens) > 1 else windows[0][1]
            if not (labels[:, 1:] != IGNORE_INDEX).any():
                raise ValueError(
                    f"step {step}: every label in the batch is ignored (-100), so the mean loss "
                    "would be 0/0 = NaN; check the padding / masking of the labels"
                )
            if autocast_dtype is not None:
                with torch.autocast(device.type, dtype=autocast_dtype):
                    _, loss = run(idx, labels)
            else:
                _, loss = run(idx, labels)
            if not torch.isfinite(loss):
                raise RuntimeError(
                    f"step {step}: the loss became {loss.item()} at lr={lr:.2e}. Lower max_lr by "
                    "10x, make sure warmup > 0, and check the causal mask and the label shift"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            else:
                norm = torch.nn.utils.get_total_norm(
                    [p.grad for p in model.parameters() if p.grad is not None]
                )
            opt.step()
            hist.step.append(step)
            hist.lr.append(lr)
            hist.loss.append(loss.item())
            hist.grad_norm.append(float(norm))
            last = step == start_step + steps - 1
            if val_tokens is not None and eval_every and (step % eval_every == 0 or last):
                hist.val_step.append(step)
                hist.val_loss.append(estimate_loss(model, val_tokens, batch_size, eval_batches))
            if callback is not None:
                callback(hist)
            if should_stop is not None and not last and should_stop():
                hist.interrupted = True
                break
    except KeyboardInterrupt:
        hist.interrupted = True
    return hist
