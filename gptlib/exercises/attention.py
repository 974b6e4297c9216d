"""Notebook 03, scaled dot-product attention: causal attention for every head at once.

The reader writes `causal_attention(q, k, v)` for per-head tensors q, k, v of shape
[B, h, n, d_h] and returns softmax(Q K^T / sqrt(d_h) + causal mask) V, shape [B, h, n, d_h].
"""

from __future__ import annotations

import math

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_causal_attention", "solution_causal_attention"]


def _future(n: int) -> torch.Tensor:
    # True above the diagonal: key j lies in the future of query i when j > i.
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # [n, n]


def solution_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_h), masked above the diagonal) v; q, k, v [..., n, d_h]."""
    n, d_h = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # [..., n, n]: rows queries, columns keys
    scores = scores.masked_fill(_future(n), float("-inf"))
    return scores.softmax(dim=-1) @ v  # [..., n, d_h]


def _attend(q, k, v, scale: float, masked: torch.Tensor | None, dim: int = -1, fill=float("-inf")):
    scores = q @ k.transpose(-2, -1) / scale
    if masked is not None:
        scores = scores.masked_fill(masked, fill)
    return scores.softmax(dim=dim) @ v


def _softmax_over_queries(q, k, v):
    return _attend(q, k, v, math.sqrt(q.shape[-1]), _future(q.shape[-2]), dim=-2)


def _no_scale(q, k, v):
    return _attend(q, k, v, 1.0, _future(q.shape[-2]))


def _scale_by_d_model(q, k, v):
    d_model = q.shape[-3] * q.shape[-1]  # h * d_h
    return _attend(q, k, v, math.sqrt(d_model), _future(q.shape[-2]))


def _scale_by_d_h(q, k, v):
    return _attend(q, k, v, float(q.shape[-1]), _future(q.shape[-2]))


def _no_mask(q, k, v):
    return _attend(q, k, v, math.sqrt(q.shape[-1]), None)


def _past_masked(q, k, v):
    # The mask written with tril instead of triu: it hides the past and shows the future.
    n = q.shape[-2]
    past = torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
    return _attend(q, k, v, math.sqrt(q.shape[-1]), past)


def _past_and_self_masked(q, k, v):
    # The tril idiom with its test inverted, masked_fill(tril == 1): the last row has no key left.
    n = q.shape[-2]
    return _attend(q, k, v, math.sqrt(q.shape[-1]), torch.tril(torch.ones(n, n, dtype=torch.bool)))


def _diagonal_masked(q, k, v):
    n = q.shape[-2]
    return _attend(q, k, v, math.sqrt(q.shape[-1]), torch.triu(torch.ones(n, n, dtype=torch.bool)))


def _zero_filled(q, k, v):
    return _attend(q, k, v, math.sqrt(q.shape[-1]), _future(q.shape[-2]), fill=0.0)


def _masked_after_softmax(q, k, v):
    # The future weights zeroed after the softmax: each row now sums to less than 1.
    n = q.shape[-2]
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights.masked_fill(_future(n), 0.0) @ v


def _k_v_swapped(q, k, v):
    return solution_causal_attention(q, v, k)


MISTAKES = [
    (
        "the softmax runs over dim=-2, the queries: your weights sum to 1 down each key's column, "
        "not along each query's row, so a query's weights over the keys it sees do not add up to 1",
        _softmax_over_queries,
    ),
    (
        "the scores are not scaled: each is sqrt(d_h) times too large, so your softmax is sharper "
        "than it should be and piles the weight onto fewer keys",
        _no_scale,
    ),
    (
        "you divided by sqrt(d_model) = sqrt(h * d_h), the width of all the heads together: each "
        "score is sqrt(h) times too small, so your weights are flatter than they should be",
        _scale_by_d_model,
    ),
    (
        "you divided by d_h itself: each score is sqrt(d_h) times too small, so your weights are "
        "flatter than they should be",
        _scale_by_d_h,
    ),
    (
        "there is no causal mask: each query's weights also go to the keys after it, so a "
        "position reads tokens from its own future",
        _no_mask,
    ),
    (
        "the mask hides the wrong side: each query sees itself and the keys after it, and the "
        "past is hidden (your weights are zero below the diagonal instead of above it)",
        _past_masked,
    ),
    (
        "the mask hides the past and the position itself: each query sees only the keys after "
        "it, the future, and nothing it is allowed to see",
        _past_and_self_masked,
    ),
    (
        "the diagonal is masked too: no query sees its own key, and position 0, which has "
        "nothing before it, sees no key at all, so its row is NaN",
        _diagonal_masked,
    ),
    (
        "the hidden scores were set to 0: a score of 0 still counts exp(0) = 1 in the softmax, so "
        "your weights above the diagonal are not zero and the future keys still take a share",
        _zero_filled,
    ),
    (
        "the mask was applied after the softmax: the future weights were zeroed, but the weights "
        "left were not renormalised, so each query's row sums to less than 1",
        _masked_after_softmax,
    ),
    (
        "k and v are swapped: the scores compare the queries with v, and the weights average k",
        _k_v_swapped,
    ),
]

# Failures whose message says what went wrong with the scores.
ERROR_HINTS = [
    (
        "must match the size of tensor",
        "if you wrote k.T: on a tensor with more than two dimensions .T reverses all of them "
        "([B, h, n, d_h] becomes [d_h, n, h, B]), so the batch and head axes of the product no "
        "longer line up",
    ),
]


def _inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # h = 3 heads of d_h = 4 make sqrt(d_h) = 2 and sqrt(d_model) = sqrt(12) tell apart;
    # a spread of 2 makes the unscaled scores visibly sharper than the scaled ones.
    B, h, n, d_h = 2, 3, 6, 4
    q, k, v = (2.0 * torch.randn(B, h, n, d_h, generator=g) for _ in range(3))
    return q, k, v


@solved_by(solution_causal_attention)
def check_causal_attention(causal_attention) -> CheckResult:
    """Run `causal_attention(q, k, v)` on random [2, 3, 6, 4] inputs against the solution."""
    return compare(
        "causal_attention",
        causal_attention,
        solution_causal_attention,
        _inputs,
        mistakes=MISTAKES,
        error_hints=ERROR_HINTS,
    )
