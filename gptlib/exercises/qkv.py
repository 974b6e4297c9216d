"""Notebook 02 exercises: queries, keys and values.

`check_qkv_split`: one fused projection gives the queries, keys and values of every position at
once; cut them apart, q, k, v each [B, n, d] (the heads come in notebook 04). (The soft lookup
is written out in the notebook itself, a few lines above; it is not asked again.)
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_qkv_split", "solution_qkv_split"]

# n != d and 3d != n, so that a split along the positions or a transposed weight shows up.
_B, _N, _D = 2, 5, 6


def solution_qkv_split(x: torch.Tensor, w_qkv: torch.Tensor):
    """x [B, n, d], w_qkv [3d, d] (nn.Linear's [out, in] layout: the rows of W_Q, then W_K, then
    W_V) -> q, k, v, each [B, n, d]."""
    d = x.size(-1)
    fused = x @ w_qkv.T  # [B, n, d] @ [d, 3d] -> [B, n, 3d], laid out Q | K | V
    q, k, v = fused.split(d, dim=-1)  # each [B, n, d]
    return q, k, v


def _make_split_inputs(g: torch.Generator):
    return torch.randn(_B, _N, _D, generator=g), torch.randn(3 * _D, _D, generator=g)


def _keys_first(x, w_qkv):
    q, k, v = solution_qkv_split(x, w_qkv)
    return k, q, v


def _values_first(x, w_qkv):
    q, k, v = solution_qkv_split(x, w_qkv)
    return v, k, q


def _interleaved(x, w_qkv):
    # Reads the 3d features as d groups of (q, k, v) instead of q | k | v.
    B, n, d = x.shape
    return (x @ w_qkv.T).view(B, n, d, 3).unbind(-1)


def _split_positions(x, w_qkv):
    # chunk(3) along the positions instead of the features.
    return tuple((x @ w_qkv.T).chunk(3, dim=1))


def _weight_parts_not_transposed(x, w_qkv):
    # Each [d, d] part used as x @ W, where nn.Linear's [out, in] weight needs x @ W.T.
    d = x.size(-1)
    return tuple(x @ w for w in w_qkv.split(d, dim=0))


_SPLIT_MISTAKES = [
    (
        "q and k come out swapped: the fused projection stores queries first, then keys, then "
        "values (q, k, v = fused.split(d, dim=-1))",
        _keys_first,
    ),
    (
        "q and v come out swapped: the layout is Q | K | V, queries first",
        _values_first,
    ),
    (
        "you read the 3d features as d groups of (q, k, v); the layout is three blocks of d "
        "features side by side, Q | K | V: split(d, dim=-1)",
        _interleaved,
    ),
    (
        "you split along the positions (dim 1); q, k and v are three blocks of the last axis, "
        "the 3d features: split(d, dim=-1)",
        _split_positions,
    ),
    (
        "each part of the weight was used as x @ W; nn.Linear stores its weight as [out, in], "
        "so the projection is x @ W.T (x @ w_qkv.T for all three at once)",
        _weight_parts_not_transposed,
    ),
]

_SPLIT_ERROR_HINTS = [
    (
        "cannot be multiplied",
        "w_qkv is [3d, d], nn.Linear's [out, in] layout: multiply by its transpose, x @ w_qkv.T",
    ),
    (
        "not enough values to unpack",
        "the 3d outputs sit on the last axis: split the fused [B, n, 3d] with split(d, dim=-1), "
        "or the weight's rows with w_qkv.split(d, dim=0)",
    ),
]


@solved_by(solution_qkv_split)
def check_qkv_split(split_fn) -> CheckResult:
    """Check `split_fn(x [B, n, d], w_qkv [3d, d]) -> (q, k, v)`, each [B, n, d]."""
    return compare(
        "qkv_split",
        split_fn,
        solution_qkv_split,
        _make_split_inputs,
        mistakes=_SPLIT_MISTAKES,
        error_hints=_SPLIT_ERROR_HINTS,
    )
