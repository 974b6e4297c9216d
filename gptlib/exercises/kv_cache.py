"""Chapter 11, the KV cache: one decode step of attention against cached keys and values.

The reader writes `attend_with_cache(q, k_new, v_new, k_cache, v_cache)`: the new position's
query, key and value q, k_new, v_new [B, h, 1, d_h] and the n cached keys and values
k_cache, v_cache [B, h, n, d_h]; it returns the new position's attention output [B, h, 1, d_h].
The check compares it with the last row of a full causal recompute over all n + 1 positions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare

__all__ = ["check_attend_with_cache", "solution_attend_with_cache"]


def solution_attend_with_cache(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
) -> torch.Tensor:
    """q, k_new, v_new [B, h, 1, d_h]; k_cache, v_cache [B, h, n, d_h] -> [B, h, 1, d_h]."""
    k = torch.cat([k_cache, k_new], dim=2)  # [B, h, n + 1, d_h]: the past and the new position
    v = torch.cat([v_cache, v_new], dim=2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # [B, h, 1, n + 1]
    # No mask: the newest query is the last position, every key is at or before it.
    return scores.softmax(dim=-1) @ v  # [B, h, 1, d_h]


def _full_recompute_last_row(q, k_new, v_new, k_cache, v_cache):
    """What the model without a cache computes: causal attention over all n + 1 positions, of
    which only the last row is the new position's output. The earlier queries were never kept,
    so random ones stand in for them: the last row does not read them."""
    B, h, n, d_h = k_cache.shape
    past_q = torch.randn(B, h, n, d_h, generator=torch.Generator().manual_seed(n))
    q_all = torch.cat([past_q, q], dim=2)  # [B, h, n + 1, d_h]
    k_all = torch.cat([k_cache, k_new], dim=2)
    v_all = torch.cat([v_cache, v_new], dim=2)
    out = F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=True)  # [B, h, n+1, d_h]
    return out[:, :, -1:]  # [B, h, 1, d_h]


def _attend(q, k, v, scale, masked=None):
    scores = q @ k.transpose(-2, -1) / scale
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _without_the_new_key(q, k_new, v_new, k_cache, v_cache):
    # k_new, v_new never appended (or the new key masked out): only the past is visible.
    return _attend(q, k_cache, v_cache, math.sqrt(q.size(-1)))


def _mask_row_zero(q, k_new, v_new, k_cache, v_cache):
    # The causal mask sliced from its top, future[:1, :n+1]: the row of position 0, not of n.
    k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    n_keys = k.size(2)
    future = torch.triu(torch.ones(n_keys, n_keys, dtype=torch.bool), diagonal=1)
    return _attend(q, k, v, math.sqrt(q.size(-1)), future[:1])


def _scale_by_d_model(q, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    return _attend(q, k, v, math.sqrt(q.size(1) * q.size(-1)))  # sqrt(h * d_h) = sqrt(d)


def _no_scale(q, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    return _attend(q, k, v, 1.0)


MISTAKES = [
    (
        "the new position attends only to the cached past: append k_new and v_new to the cache "
        "first (and do not mask the last column) - a position always sees its own key",
        _without_the_new_key,
    ),
    (
        "you used the first row of the causal mask (future[:1, ...], or is_causal=True with one "
        "query, which aligns the mask to the top left): that is position 0's row; the new query "
        "sits at position n, after every cached key, and needs no mask at all",
        _mask_row_zero,
    ),
    (
        "you divided by sqrt(d) = sqrt(h * d_h), the model width; the scale is one head's width, "
        "sqrt(d_h) = sqrt(q.size(-1))",
        _scale_by_d_model,
    ),
    ("the scores are not scaled: divide q @ k^T by sqrt(d_h) before the softmax", _no_scale),
]


def _inputs(g: torch.Generator):
    # h = 3 heads of d_h = 4 tell sqrt(d_h) = 2 from sqrt(d) = sqrt(12); n varies per trial.
    B, h, d_h = 2, 3, 4
    n = int(torch.randint(2, 9, (1,), generator=g))
    q, k_new, v_new = (2.0 * torch.randn(B, h, 1, d_h, generator=g) for _ in range(3))
    k_cache, v_cache = (2.0 * torch.randn(B, h, n, d_h, generator=g) for _ in range(2))
    return q, k_new, v_new, k_cache, v_cache


def check_attend_with_cache(attend_with_cache) -> CheckResult:
    """Run `attend_with_cache(q, k_new, v_new, k_cache, v_cache)` on random inputs (2 sequences,
    3 heads of width 4, 2 to 8 cached positions) against the full recompute's last row."""
    return compare(
        "attend_with_cache",
        attend_with_cache,
        _full_recompute_last_row,
        _inputs,
        mistakes=MISTAKES,
    )
