"""Chapter 02 exercises: queries, keys and values.

`check_qkv_split`: cut the output of the fused projection, [B, n, 3d], into per-head queries,
keys and values, each [B, h, n, d_h]. `check_soft_lookup`: one query reads a weighted average of
the values, the weights a softmax over its dot products with the keys.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_qkv_split", "check_soft_lookup", "solution_qkv_split", "solution_soft_lookup"]

# n != h and d_h != h, so that a missing transpose or a swapped (h, d_h) shows up.
_B, _N, _H, _DH = 2, 5, 3, 4
_D = _H * _DH


def solution_qkv_split(qkv: torch.Tensor, n_head: int):
    """qkv [B, n, 3d] (queries, then keys, then values along the last axis) -> q, k, v, each
    [B, h, n, d_h]."""
    B, n, three_d = qkv.shape
    d = three_d // 3
    q, k, v = qkv.split(d, dim=2)  # each [B, n, d]

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(B, n, n_head, d // n_head).transpose(1, 2)  # [B, n, h, d_h] -> [B, h, n, d_h]

    return heads(q), heads(k), heads(v)


def _make_split_inputs(g: torch.Generator):
    return torch.randn(_B, _N, 3 * _D, generator=g), _H


def _keys_first(qkv, n_head):
    q, k, v = solution_qkv_split(qkv, n_head)
    return k, q, v


def _interleaved(qkv, n_head):
    # Reads the 3d features as h groups of (q, k, v) instead of q | k | v.
    B, n, three_d = qkv.shape
    d_h = three_d // 3 // n_head
    t = qkv.view(B, n, n_head, 3, d_h).permute(3, 0, 2, 1, 4)  # [3, B, h, n, d_h]
    return t[0], t[1], t[2]


def _reshape_without_transpose(qkv, n_head):
    B, n, three_d = qkv.shape
    d = three_d // 3
    return tuple(t.reshape(B, n_head, n, d // n_head) for t in qkv.split(d, dim=2))


def _head_and_width_swapped(qkv, n_head):
    # view(B, n, d_h, h): feature j of head i taken from column j*h + i instead of i*d_h + j.
    B, n, three_d = qkv.shape
    d = three_d // 3
    return tuple(
        t.reshape(B, n, d // n_head, n_head).permute(0, 3, 1, 2) for t in qkv.split(d, dim=2)
    )


def _no_transpose(qkv, n_head):
    B, n, three_d = qkv.shape
    d = three_d // 3
    return tuple(t.reshape(B, n, n_head, d // n_head) for t in qkv.split(d, dim=2))


_SPLIT_MISTAKES = [
    (
        "q and k come out swapped: the fused projection stores queries first, then keys, then "
        "values (q, k, v = qkv.split(d, dim=2))",
        _keys_first,
    ),
    (
        "you split each head's features into (q, k, v); the layout is the other way round: "
        "first split the 3d features into q | k | v (d each), then each of those into h heads",
        _interleaved,
    ),
    (
        "reshape to [B, h, n, d_h] without a transpose mixes positions and heads; view as "
        "[B, n, h, d_h] first, then .transpose(1, 2)",
        _reshape_without_transpose,
    ),
    (
        "head and feature axes swapped: a head's d_h features sit side by side, so view as "
        "[B, n, h, d_h], not [B, n, d_h, h]",
        _head_and_width_swapped,
    ),
    (
        "the result is [B, n, h, d_h]; heads go before positions: .transpose(1, 2) gives "
        "[B, h, n, d_h]",
        _no_transpose,
    ),
]


@solved_by(solution_qkv_split)
def check_qkv_split(split_fn) -> CheckResult:
    """Check `split_fn(qkv [B, n, 3d], n_head) -> (q, k, v)`, each [B, h, n, d_h]."""
    return compare(
        "qkv_split", split_fn, solution_qkv_split, _make_split_inputs, mistakes=_SPLIT_MISTAKES
    )


# --- soft lookup -----------------------------------------------------------------------------

_NKEYS, _DK, _DV = 6, 4, 3


def solution_soft_lookup(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):
    """query [d_k], keys [m, d_k], values [m, d_v] -> (weights [m], result [d_v]).

    weights = softmax(keys @ query): how well each key matches; result = weights @ values.
    """
    weights = (keys @ query).softmax(dim=0)  # [m], sums to 1
    return weights, weights @ values  # [m], [d_v]


def _make_lookup_inputs(g: torch.Generator):
    query = torch.randn(_DK, generator=g)
    keys = torch.randn(_NKEYS, _DK, generator=g)
    values = torch.randn(_NKEYS, _DV, generator=g)
    return query, keys, values


def _hard_lookup(query, keys, values):
    scores = keys @ query
    weights = torch.nn.functional.one_hot(scores.argmax(), keys.size(0)).to(values.dtype)
    return weights, weights @ values


def _no_softmax(query, keys, values):
    scores = keys @ query
    return scores, scores @ values


def _plain_average(query, keys, values):
    weights = torch.full((keys.size(0),), 1.0 / keys.size(0))
    return weights, weights @ values


def _scaled(query, keys, values):
    weights = (keys @ query / keys.size(1) ** 0.5).softmax(dim=0)
    return weights, weights @ values


def _weighted_keys(query, keys, values):
    weights = (keys @ query).softmax(dim=0)
    return weights, weights @ keys  # [d_k]


_LOOKUP_MISTAKES = [
    (
        "that is a hard lookup: all the weight on the best-matching key (argmax); a soft lookup "
        "spreads it with softmax(keys @ query)",
        _hard_lookup,
    ),
    (
        "the weights are raw dot products; pass them through a softmax so they are positive and "
        "sum to 1",
        _no_softmax,
    ),
    (
        "every value got the same weight 1/m: the query and keys did not take part; weights = "
        "softmax(keys @ query)",
        _plain_average,
    ),
    (
        "the result averages the keys; keys only decide the weights, the result is weights @ "
        "values",
        _weighted_keys,
    ),
    (
        "you divided the scores by sqrt(d_k); that scale belongs to the next chapter, here the "
        "weights are softmax(keys @ query) as they are",
        _scaled,
    ),
]


@solved_by(solution_soft_lookup)
def check_soft_lookup(lookup_fn) -> CheckResult:
    """Check `lookup_fn(query [d_k], keys [m, d_k], values [m, d_v]) -> (weights [m], result
    [d_v])`, with weights = softmax(keys @ query) and result = weights @ values."""
    return compare(
        "soft_lookup",
        lookup_fn,
        solution_soft_lookup,
        _make_lookup_inputs,
        mistakes=_LOOKUP_MISTAKES,
    )
