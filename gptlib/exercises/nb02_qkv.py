"""Notebook 02: `qkv_split(x, w_qkv)`, the fused projection (nn.Linear's [out, in] layout: the rows
of W_Q, then W_K, then W_V) cut into q, k, v; a list of three passes as the tuple."""

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_qkv_split", "solution_qkv_split"]


def solution_qkv_split(x: torch.Tensor, w_qkv: torch.Tensor):
    """x [B, n, d], w_qkv [3d, d] -> q, k, v, each [B, n, d]."""
    d = x.size(-1)
    fused = x @ w_qkv.T  # [B, n, d] @ [d, 3d] -> [B, n, 3d], laid out Q | K | V
    q, k, v = fused.split(d, dim=-1)  # each [B, n, d]
    return q, k, v


def _order(order: str):  # the three parts returned in another order: "kqv" swaps q and k
    def split(x, w_qkv):
        parts = dict(zip("qkv", solution_qkv_split(x, w_qkv), strict=True))
        return tuple(parts[c] for c in order)

    return split


MISTAKES = [
    (N_("each [d, d] part of the weight multiplied x as it is stored, x @ W: nn.Linear keeps its "
        "weight as [out, in], so your feature j is x times column j of the part instead of row j; "
        "the shapes fit but every value of q, k and v is wrong"),
     lambda x, w: tuple(x @ part for part in w.split(x.size(-1)))),
    (N_("q and k come out swapped: what you return as q are the keys, made by rows d..2d-1 of the "
        "weight, and what you return as k are the queries"), _order("kqv")),
    (N_("k and v come out swapped: what you return as k are the values, made by rows 2d..3d-1 of "
        "the weight, and what you return as v are the keys"), _order("qvk")),
    (N_("q and v come out swapped: what you return as q are the values, made by the last d rows of "
        "the weight, and what you return as v are the queries"), _order("vkq")),
    *[(N_("your q, k and v are the weight's three parts in another order: its rows hold W_Q, then "
          "W_K, then W_V"), _order(order)) for order in ("kvq", "vqk")],
    (N_("you cut along the positions (dim 1), so each of your q, k, v holds a third of the "
        "positions with all 3d features, queries, keys and values together"),
     lambda x, w: tuple((x @ w.T).chunk(3, dim=1))),
]  # fmt: skip
ERRORS = [
    ("cannot be multiplied", N_("w_qkv is [3d, d], nn.Linear's [out, in] layout, and x [B, n, d] "
                                "cannot multiply it as it is stored")),
]  # fmt: skip


@solved_by(solution_qkv_split)
def check_qkv_split(split_fn) -> CheckResult:
    """Check `split_fn(x [B, n, d], w_qkv [3d, d]) -> (q, k, v)`, each [B, n, d], with n = 5 and
    d = 6, so that a split along the positions or a stored-as-is weight shows."""

    def inputs(g):
        return torch.randn(2, 5, 6, generator=g), torch.randn(18, 6, generator=g)

    return compare("qkv_split", split_fn, solution_qkv_split, inputs, MISTAKES, error_hints=ERRORS)
