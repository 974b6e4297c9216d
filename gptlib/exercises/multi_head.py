"""Notebook 04, multi-head attention: cutting [B, n, d] into heads and gluing them back.

`split_heads(x, n_head)`: [B, n, d] -> [B, h, n, d_h], head i owning features i*d_h..(i+1)*d_h-1.
`merge_heads(y)`: [B, h, n, d_h] -> [B, n, d], the inverse.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = [
    "check_merge_heads",
    "check_split_heads",
    "solution_merge_heads",
    "solution_split_heads",
]


def solution_split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    B, n, d = x.shape
    # View the last axis as [h, d_h] first, so each position keeps its own features, then move
    # the head axis in front of the positions.
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)  # [B, h, n, d_h]


def solution_merge_heads(y: torch.Tensor) -> torch.Tensor:
    B, h, n, d_h = y.shape
    # reshape, not view: after the transpose the memory is no longer in [B, n, h, d_h] order.
    return y.transpose(1, 2).reshape(B, n, h * d_h)  # [B, n, d]


def _split_without_transpose(x, n_head):
    B, n, d = x.shape
    return x.reshape(B, n_head, n, d // n_head)


def _split_interleaved(x, n_head):
    # Feature f goes to head f % h instead of head f // d_h.
    B, n, d = x.shape
    return x.view(B, n, d // n_head, n_head).permute(0, 3, 1, 2)


def _merge_without_transpose(y):
    B, h, n, d_h = y.shape
    return y.reshape(B, n, h * d_h)


def _merge_interleaved(y):
    B, h, n, d_h = y.shape
    return y.permute(0, 2, 3, 1).reshape(B, n, h * d_h)


def _split_heads_not_moved(x, n_head):
    B, n, d = x.shape
    return x.reshape(B, n, n_head, d // n_head)  # [B, n, h, d_h]: the head axis left behind


SPLIT_MISTAKES = [
    (
        "the shape is right but the contents are not: position 1 of head 0 holds features "
        "d_h .. 2*d_h - 1 of position 0, so each of your heads holds every feature of a few "
        "positions, not its own d_h features of every position (a reshape or view straight to "
        "[B, h, n, d_h] reads the numbers in memory order)",
        _split_without_transpose,
    ),
    (
        "your output is [B, n, h, d_h]: each head has its own d_h features, but the positions "
        "still come before the heads, and attention then treats the h heads of one position as "
        "its sequence; split_heads returns [B, h, n, d_h]",
        _split_heads_not_moved,
    ),
    (
        "head 0 holds features 0, h, 2h, ... (feature f went to head f % h): the features are "
        "dealt out to the heads in turn, while head i owns the consecutive features "
        "i*d_h .. (i+1)*d_h - 1",
        _split_interleaved,
    ),
]

MERGE_MISTAKES = [
    (
        "the shape is right but the contents are not: output position 0 is made of several "
        "positions of head 0 glued end to end, where it should hold position 0 of every head "
        "(a reshape or view straight to [B, n, d] reads the heads in memory order)",
        _merge_without_transpose,
    ),
    (
        "the heads' features are interleaved: feature j of head i landed at j*h + i, where it "
        "belongs at i*d_h + j (head 0's d_h features first, then head 1's, ...)",
        _merge_interleaved,
    ),
]


def _split_inputs(g: torch.Generator) -> tuple[torch.Tensor, int]:
    return torch.randn(2, 5, 12, generator=g), 3  # [B, n, d], h = 3 heads of d_h = 4


def _merge_inputs(g: torch.Generator) -> tuple[torch.Tensor]:
    return (torch.randn(2, 3, 5, 4, generator=g),)  # [B, h, n, d_h]


@solved_by(solution_split_heads)
def check_split_heads(split_heads) -> CheckResult:
    """Run `split_heads(x, n_head)` on random [2, 5, 12] inputs with 3 heads."""
    return compare(
        "split_heads", split_heads, solution_split_heads, _split_inputs, mistakes=SPLIT_MISTAKES
    )


@solved_by(solution_merge_heads)
def check_merge_heads(merge_heads) -> CheckResult:
    """Run `merge_heads(y)` on random [2, 3, 5, 4] inputs."""
    return compare(
        "merge_heads", merge_heads, solution_merge_heads, _merge_inputs, mistakes=MERGE_MISTAKES
    )
