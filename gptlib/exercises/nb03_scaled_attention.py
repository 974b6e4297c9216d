"""Notebook 03: `causal_attention(q, k, v)` for every head at once, q, k, v [B, h, n, d_h]; the
check's h = 3 heads of d_h = 4 tell sqrt(d_h) = 2 from sqrt(d_model) = sqrt(12)."""

import math
from functools import partial

import torch

from gptlib.exercises.checking import CheckResult, compare, difference, solved_by
from gptlib.language import N_, _

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


def _slip(q, k, v, *, scale="d_h", dim=-1, hidden="future", after=False, fill=float("-inf"),
          kq=False, kv=False):  # fmt: skip
    """Causal attention with one switch flipped: every slip below is one row."""
    n, h, d_h = q.shape[-2], q.shape[-3], q.shape[-1]
    by = {"d_h": math.sqrt(d_h), "d_model": math.sqrt(h * d_h), "none": 1.0, "all": d_h}[scale]
    k, v = (v, k) if kv else (k, v)
    scores = (k @ q.transpose(-2, -1) if kq else q @ k.transpose(-2, -1)) / by
    ones = torch.ones(n, n, dtype=torch.bool)
    mask = {"future": _future(n), "past": ones.tril(-1), "past+self": ones.tril(), "none": ~ones}
    if after:  # the future zeroed in the weights, not hidden in the scores
        return scores.softmax(dim).masked_fill(mask[hidden], 0.0) @ v
    return scores.masked_fill(mask[hidden], fill).softmax(dim) @ v


MISTAKES = [  # the first row is the slip tests/browser types into the notebook
    (N_("the softmax runs over dim=-2, the queries: your weights sum to 1 down each key's column, "
        "not along each query's row over the keys it sees"), partial(_slip, dim=-2)),
    (N_("your scores are sqrt(h) times too small, so your weights are flatter than they should be: "
        "that is dividing by sqrt(d_model) = sqrt(h * d_h), the width of all the heads together"),
     partial(_slip, scale="d_model")),
    (N_("the scores are not scaled: each is sqrt(d_h) times too large, so your softmax is sharper "
        "than it should be and piles the weight onto fewer keys"), partial(_slip, scale="none")),
    (N_("there is no causal mask: each query's weights also go to the keys after it, so a position "
        "reads tokens from its own future"), partial(_slip, hidden="none")),
    (N_("the mask hides the wrong side: each query sees itself and the keys after it, and the past "
        "is hidden (your weights are zero below the diagonal instead of above it)"),
     partial(_slip, hidden="past")),
    (N_("the mask hides the past and the position itself: each query sees only the keys after it, "
        "the future, and nothing it is allowed to see"), partial(_slip, hidden="past+self")),
    (N_("the mask was applied after the softmax: the future weights were zeroed, but the weights "
        "left were not renormalised, so each query's row sums to less than 1"),
     partial(_slip, after=True)),
    (N_("the future scores were set to 0, not -inf (masked_fill with 0, or scores.tril()): exp(0) "
        "= 1, so each query still gives weight to the keys after it"), partial(_slip, fill=0.0)),
    (N_("your scores are divided by d_h, not by sqrt(d_h): each is sqrt(d_h) times too small, so "
        "your weights are flatter than they should be"), partial(_slip, scale="all")),
    (N_("your score matrix is transposed (k q^T, not q k^T): row i holds key i against every "
        "query, so each query's weights were read from a column"), partial(_slip, kq=True)),
    (N_("k and v played each other's roles: your scores compare the queries with v, and the "
        "weights average the rows of k"), partial(_slip, kv=True)),
]  # fmt: skip
ERRORS = [
    ("must match the size of tensor",
     N_("your transpose of k moved the batch or head axes too (k.T reverses all four axes, "
        "k.transpose(1, 2) swaps the heads with the positions), so q's and k's batch and head "
        "axes no longer line up")),
]  # fmt: skip


def _inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # A spread of 2 makes the unscaled scores visibly sharper than the scaled ones.
    return tuple(2.0 * torch.randn(2, 3, 6, 4, generator=g) for _i in range(3))  # [B, h, n, d_h]


def _where(got, expected) -> str | None:
    """Which head of which sequence differs first, and from which query position on."""
    got = torch.as_tensor(got)
    if got.shape != expected.shape:
        return None
    b, h, i = (int(j) for j in (~torch.isclose(got, expected, 1e-4, 1e-5)).any(-1).nonzero()[0])
    said = _("your output differs from the reference's first in head {h} of sequence {b}, at "
             "query position {i} ({difference})")  # fmt: skip
    return said.format(h=h, b=b, i=i, difference=difference(got[b, h, i], expected[b, h, i]))


@solved_by(solution_causal_attention)
def check_causal_attention(causal_attention) -> CheckResult:
    """Run `causal_attention(q, k, v)` on random [2, 3, 6, 4] inputs against the solution."""
    return compare("causal_attention", causal_attention, solution_causal_attention,
                   _inputs, MISTAKES, error_hints=ERRORS, describe=_where)  # fmt: skip
