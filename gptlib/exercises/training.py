"""Chapter 09, the training loop: the warmup schedule and the AdamW parameter groups.

`warmup_lr(step, warmup, max_lr)` returns the learning rate of one step (counted from 0): it rises
linearly over the first `warmup` steps, starting above 0, reaches `max_lr` at step `warmup - 1`
and stays there.

`decay_groups(model, weight_decay)` returns the two AdamW parameter groups: every parameter with
two or more dimensions (matrices, embedding tables) with `weight_decay`, every 1-D one (norm
gains, biases) with 0.0, each Parameter exactly once even when it is shared (a tied embedding).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare
from gptlib.model import GPT

__all__ = [
    "check_decay_groups",
    "check_warmup_lr",
    "solution_decay_groups",
    "solution_warmup_lr",
]


# ---------------------------------------------------------------------------------------------
# Warmup


def solution_warmup_lr(step: int, warmup: int, max_lr: float) -> float:
    if step < warmup:
        # step + 1: the first update already moves the weights; step 0 with lr 0 would be wasted.
        return max_lr * (step + 1) / warmup
    return max_lr


def _starts_at_zero(step, warmup, max_lr):
    return max_lr * step / warmup if step < warmup else max_lr


def _one_step_too_long(step, warmup, max_lr):
    return max_lr * (step + 1) / warmup if step <= warmup else max_lr


def _never_levels_off(step, warmup, max_lr):
    return max_lr * (step + 1) / warmup


def _ramp_too_slow(step, warmup, max_lr):
    return max_lr * (step + 1) / (warmup + 1) if step < warmup else max_lr


def _no_warmup(step, warmup, max_lr):
    return max_lr


WARMUP_MISTAKES = [
    (
        "step 0 gets learning rate 0, so the first update does nothing; count the steps from 1 "
        "in the ramp: max_lr * (step + 1) / warmup",
        _starts_at_zero,
    ),
    (
        "at step == warmup the learning rate goes above max_lr: the ramp covers steps "
        "0..warmup-1, so test step < warmup, not step <= warmup",
        _one_step_too_long,
    ),
    (
        "the learning rate keeps rising after the warmup; from step `warmup` on it stays at max_lr",
        _never_levels_off,
    ),
    (
        "the ramp is one step too slow (it divides by warmup + 1), so it never reaches max_lr "
        "before jumping to it; at step warmup - 1 it should already be max_lr",
        _ramp_too_slow,
    ),
    (
        "there is no warmup: the learning rate should rise linearly over the first `warmup` steps",
        _no_warmup,
    ),
]


def _over_steps(fn: Callable) -> Callable:
    """Turn a one-step function into one over a list of steps, giving a tensor to compare."""

    def run(steps: list[int], warmup: int, max_lr: float) -> torch.Tensor:
        return torch.tensor([float(fn(s, warmup, max_lr)) for s in steps], dtype=torch.float64)

    return run


def _warmup_inputs(g: torch.Generator) -> tuple:
    warmup = int(torch.randint(3, 40, (1,), generator=g))
    max_lr = float(10 ** (-4 + 2 * torch.rand(1, generator=g)))  # 1e-4 .. 1e-2
    # Every step of the ramp, the boundary, and a few steps long after it.
    later = torch.randint(warmup + 1, 10 * warmup, (4,), generator=g).tolist()
    return list(range(warmup + 2)) + later, warmup, max_lr


def check_warmup_lr(warmup_lr: Callable) -> CheckResult:
    """Run `warmup_lr(step, warmup, max_lr)` over the ramp, its end and later steps."""
    return compare(
        "warmup_lr",
        _over_steps(warmup_lr),
        _over_steps(solution_warmup_lr),
        _warmup_inputs,
        mistakes=[(hint, _over_steps(fn)) for hint, fn in WARMUP_MISTAKES],
        atol=0.0,
        rtol=1e-9,
    )


# ---------------------------------------------------------------------------------------------
# Parameter groups


def solution_decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    # named_parameters() yields a shared (tied) Parameter once, so it is optimised once.
    for _, p in model.named_parameters():
        # >= 2-D: matrices and embedding tables; 1-D: norm gains and biases, which decay would
        # pull towards 0 and so squash the scale the norm is there to restore.
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _by_name(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if "weight" in name else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _tied_twice(model, weight_decay):
    decay, no_decay = [], []
    # Walking module by module lists the tied table under tok_emb and again under lm_head.
    for module in model.modules():
        for p in module.parameters(recurse=False):
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _everything_decays(model, weight_decay):
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]


def _embeddings_spared(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "emb" not in name else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _swapped(model, weight_decay):
    groups = solution_decay_groups(model, weight_decay)
    return [
        {"params": groups[1]["params"], "weight_decay": weight_decay},
        {"params": groups[0]["params"], "weight_decay": 0.0},
    ]


DECAY_MISTAKES = [
    (
        "the tied embedding table is in the groups twice (as tok_emb.weight and as "
        "lm_head.weight), so AdamW would update it twice per step; collect the parameters with "
        "model.named_parameters(), which yields a shared Parameter once",
        _tied_twice,
    ),
    (
        "norm gains are called 'weight' too, and they got weight decay: choose the group by "
        "shape (p.ndim >= 2), not by name",
        _by_name,
    ),
    (
        "every parameter is decayed, the 1-D norm gains and biases too; put the 1-D ones in a "
        "second group with weight_decay 0.0",
        _everything_decays,
    ),
    (
        "the embedding tables are 2-D and decay too in this recipe; only 1-D parameters are spared",
        _embeddings_spared,
    ),
    (
        "the groups are swapped: the >= 2-D parameters get weight_decay, the 1-D ones get 0.0",
        _swapped,
    ),
]


# AdamW's own default for a group that does not name its weight decay.
ADAMW_DEFAULT_DECAY = 0.01


def _summarise(fn: Callable) -> Callable:
    """Describe the groups as tensors: per unique parameter of the model, how often it occurs in
    a decaying group and in a non-decaying one, and the total weight decay it is given."""

    def run(model: GPT, weight_decay: float) -> tuple[torch.Tensor, torch.Tensor]:
        params = list(model.parameters())  # each shared Parameter once
        where = {id(p): i for i, p in enumerate(params)}
        counts = torch.zeros(len(params), 2)  # [P, 2]: in a decaying group, in a non-decaying one
        decay = torch.zeros(len(params), dtype=torch.float64)  # [P]
        for group in fn(model, weight_decay):
            wd = float(group.get("weight_decay", ADAMW_DEFAULT_DECAY))
            group_params = group["params"]
            if isinstance(group_params, torch.Tensor):
                group_params = [group_params]
            for p in group_params:
                if id(p) not in where:
                    raise ValueError("a group holds a tensor that is not one of model.parameters()")
                counts[where[id(p)], 0 if wd > 0 else 1] += 1
                decay[where[id(p)]] += wd
        return counts, decay

    return run


def _decay_inputs(g: torch.Generator) -> tuple:
    pick = torch.randint(0, 2, (3,), generator=g).tolist()
    cfg = textbook(
        vocab_size=int(torch.randint(7, 15, (1,), generator=g)),
        block_size=4,
        n_layer=1 + pick[0],
        n_head=2,
        n_embd=8,
        norm=("layernorm", "rmsnorm")[pick[1]],
        bias=bool(pick[2]),
        tie_embeddings=True,  # the case where a careless list holds one table twice
    )
    with torch.random.fork_rng():  # building a model must not move the notebook's random stream
        model = GPT(cfg)
    weight_decay = (0.05, 0.1, 0.2)[int(torch.randint(0, 3, (1,), generator=g))]
    return model, weight_decay


def check_decay_groups(decay_groups: Callable) -> CheckResult:
    """Run `decay_groups(model, weight_decay)` on small tied GPTs (LayerNorm or RMSNorm, with or
    without biases) and compare which parameters decay, how often each is listed, and by how
    much it decays."""
    return compare(
        "decay_groups",
        _summarise(decay_groups),
        _summarise(solution_decay_groups),
        _decay_inputs,
        mistakes=[(hint, _summarise(fn)) for hint, fn in DECAY_MISTAKES],
    )
