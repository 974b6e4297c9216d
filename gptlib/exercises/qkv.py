"""Notebook 02 exercises: queries, keys and values.

`check_qkv_split`: one fused projection gives the queries, keys and values of every position at
once; cut them apart, q, k, v each [B, n, d] (the heads come in notebook 04). The notebook
works out single entries, one dot product each; the reader writes the whole batched product.
"""

from __future__ import annotations

import functools

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
        "q and k come out swapped: what you return as q are the keys, made by rows d..2d-1 of the "
        "weight, and what you return as k are the queries",
        _keys_first,
    ),
    (
        "q and v come out swapped: what you return as q are the values, made by the last d rows "
        "of the weight, and what you return as v are the queries",
        _values_first,
    ),
    (
        "you read the 3d features as d groups of (q, k, v), one feature of each in turn, so each of "
        "your q, k, v mixes features of all three projections",
        _interleaved,
    ),
    (
        "you cut along the positions (dim 1), so each of your q, k, v holds a third of the "
        "positions with all 3d features, queries, keys and values together",
        _split_positions,
    ),
    (
        "each [d, d] part of the weight multiplied x as it is stored, x @ W: nn.Linear keeps its "
        "weight as [out, in], so your feature j is x times column j of the part instead of row j; "
        "the shapes fit but every value of q, k and v is wrong",
        _weight_parts_not_transposed,
    ),
]

_SPLIT_ERROR_HINTS = [
    (
        "cannot be multiplied",
        "w_qkv is [3d, d], nn.Linear's [out, in] layout, and x [B, n, d] cannot multiply it as it "
        "is stored",
    ),
    (
        "not enough values to unpack",
        "fewer than three pieces came out: the fused [B, n, 3d] holds q, k and v as three blocks of "
        "d features on its last axis (the weight [3d, d] as three blocks of d rows)",
    ),
]


def _as_tuple(split_fn):
    """The reader's function, with a list of three tensors read as the tuple it unpacks to."""

    @functools.wraps(split_fn)
    def run(x, w_qkv):
        out = split_fn(x, w_qkv)
        return tuple(out) if isinstance(out, list) else out

    return run


@solved_by(solution_qkv_split)
def check_qkv_split(split_fn) -> CheckResult:
    """Check `split_fn(x [B, n, d], w_qkv [3d, d]) -> (q, k, v)`, each [B, n, d]."""
    return compare(
        "qkv_split",
        _as_tuple(split_fn),
        solution_qkv_split,
        _make_split_inputs,
        mistakes=_SPLIT_MISTAKES,
        error_hints=_SPLIT_ERROR_HINTS,
    )
