"""Chapter 00 exercise: the loss on a batch whose labels are the same window as the input.

The prediction at position t is scored against the token at t + 1, so the shift happens here:
logits[:, :-1] against labels[:, 1:]. Labels equal to -100 (padding) do not count.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare

__all__ = ["check_shifted_loss", "solution_shifted_loss"]

_B, _N, _V = 3, 6, 7


def solution_shifted_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits [B, n, V], labels [B, n] (the same window as idx) -> mean cross-entropy, a scalar."""
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, V),  # [B(n-1), V]: positions 0..n-2 ...
        labels[:, 1:].reshape(-1),  # [B(n-1)]: ... predict tokens 1..n-1
        ignore_index=-100,
    )


def _make_inputs(g: torch.Generator):
    logits = torch.randn(_B, _N, _V, generator=g) * 2  # [B, n, V]
    labels = torch.randint(0, _V, (_B, _N), generator=g)  # [B, n]
    labels[0, -2:] = -100  # one padded row end: these positions must not count
    return logits, labels


def _no_shift(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def _shift_backwards(logits, labels):
    V = logits.size(-1)
    return F.cross_entropy(logits[:, 1:].reshape(-1, V), labels[:, :-1].reshape(-1))


def _shifted_twice(logits, labels):
    V = logits.size(-1)
    return F.cross_entropy(logits[:, :-2].reshape(-1, V), labels[:, 2:].reshape(-1))


def _summed(logits, labels):
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), reduction="sum"
    )


_MISTAKES = [
    (
        "no shift: each position was scored on its own token (a copy task); compare "
        "logits[:, :-1] with labels[:, 1:]",
        _no_shift,
    ),
    (
        "shifted the wrong way: logits[:, 1:] against labels[:, :-1] asks each position for the "
        "token before it; use logits[:, :-1] with labels[:, 1:]",
        _shift_backwards,
    ),
    (
        "shifted twice: that scores each position on the token two steps ahead (what happens "
        "when labels already arrive shifted and the loss shifts again)",
        _shifted_twice,
    ),
    (
        "that is the sum over positions; the loss is the mean, so it does not grow with B or n",
        _summed,
    ),
]

_ERROR_HINTS = [
    (
        "Expected target size",
        "F.cross_entropy reads dim 1 as the classes; flatten first: logits [B(n-1), V] with "
        ".reshape(-1, V) and labels [B(n-1)] with .reshape(-1)",
    ),
    (
        "out of bounds",
        "a label -100 (padding) reached an index; F.cross_entropy skips it with ignore_index=-100",
    ),
]


def check_shifted_loss(loss_fn) -> CheckResult:
    """Check `loss_fn(logits [B, n, V], labels [B, n]) -> scalar` (the shift inside the loss)."""
    return compare(
        "shifted loss",
        loss_fn,
        solution_shifted_loss,
        _make_inputs,
        _MISTAKES,
        error_hints=_ERROR_HINTS,
    )
