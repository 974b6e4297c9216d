"""Notebook 04: `split_heads(x, n_head)`, [B, n, d] -> [B, h, n, d_h] with head i owning features
i*d_h..(i+1)*d_h-1, and its inverse `merge_heads(y)`, [B, h, n, d_h] -> [B, n, d]."""

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_merge_heads", "check_split_heads", "solution_merge_heads", "solution_split_heads"]


def solution_split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    B, n, d = x.shape
    # View the last axis as [h, d_h] first, so each position keeps its own features, then move
    # the head axis in front of the positions.
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)  # [B, h, n, d_h]


def solution_merge_heads(y: torch.Tensor) -> torch.Tensor:
    B, h, n, d_h = y.shape
    # reshape, not view: after the transpose the memory is no longer in [B, n, h, d_h] order.
    return y.transpose(1, 2).reshape(B, n, h * d_h)  # [B, n, d]


SPLIT_MISTAKES = [
    (N_("the shape is right but the contents are not: position 1 of head 0 holds features d_h .. "
        "2*d_h - 1 of position 0, so each of your heads holds every feature of a few positions (a "
        "reshape or view straight to [B, h, n, d_h] reads the numbers in memory order)"),
     lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)),
    (N_("your output is [B, n, h, d_h]: each head has its own d_h features, but the positions "
        "still come before the heads, so attention would treat one position's h heads as its "
        "sequence"),
     lambda x, h: x.reshape(*x.shape[:2], h, -1)),
    (N_("head 0 holds features 0, h, 2h, ... (feature f went to head f % h): the features were "
        "dealt out to the heads in turn, not cut into consecutive slices of d_h"),
     lambda x, h: x.reshape(*x.shape[:2], -1, h).permute(0, 3, 1, 2)),
]  # fmt: skip
MERGE_MISTAKES = [
    (N_("the shape is right but the contents are not: output position 0 is made of several "
        "positions of head 0 glued end to end, not of position 0 of every head (a reshape or view "
        "straight to [B, n, d] reads the heads in memory order)"),
     lambda y: y.reshape(y.shape[0], y.shape[2], -1)),
    (N_("the heads' features are interleaved: feature j of head i landed at j*h + i, not at "
        "i*d_h + j"), lambda y: y.permute(0, 2, 3, 1).reshape(y.shape[0], y.shape[2], -1)),
]  # fmt: skip


@solved_by(solution_split_heads)
def check_split_heads(split_heads) -> CheckResult:
    """Run `split_heads(x, n_head)` on random [2, 5, 12] inputs with 3 heads of d_h = 4."""
    inputs = lambda g: (torch.randn(2, 5, 12, generator=g), 3)  # noqa: E731
    return compare("split_heads", split_heads, solution_split_heads, inputs, SPLIT_MISTAKES)


@solved_by(solution_merge_heads)
def check_merge_heads(merge_heads) -> CheckResult:
    """Run `merge_heads(y)` on random [2, 3, 5, 4] inputs, [B, h, n, d_h]."""
    inputs = lambda g: (torch.randn(2, 3, 5, 4, generator=g),)  # noqa: E731
    return compare("merge_heads", merge_heads, solution_merge_heads, inputs, MERGE_MISTAKES)
