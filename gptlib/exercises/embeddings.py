"""Notebook 01 exercise: turn token ids into the vectors the first block reads.

`x = wte[ids] + wpe[positions]`: one row of the token table per id, one row of the position
table per place in the window (0..n-1, whatever the ids are), added, not concatenated.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_embed", "solution_embed"]

# Small on purpose, and V != T != d so that a mixed-up table or axis changes a shape or a value.
_B, _N, _V, _T, _D = 3, 5, 11, 7, 6


def solution_embed(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor) -> torch.Tensor:
    """ids [B, n] (n <= T), wte [V, d], wpe [T, d] -> x [B, n, d]."""
    n = ids.size(1)
    pos = torch.arange(n, device=ids.device)  # [n]: places in the window, not token ids
    return wte[ids] + wpe[pos]  # [B, n, d] + [n, d] broadcasts over the batch


def _make_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # ids stay below V - 1 (and below T) so that a one-hot built without num_classes comes out
    # too narrow, and a position table indexed with token ids still has a row to return.
    ids = torch.randint(0, _T - 1, (_B, _N), generator=g)  # [B, n]
    wte = torch.randn(_V, _D, generator=g)  # [V, d]
    wpe = torch.randn(_T, _D, generator=g)  # [T, d]
    return ids, wte, wpe


def _forgot_positions(ids, wte, wpe):
    return wte[ids]


def _positions_from_ids(ids, wte, wpe):
    return wte[ids] + wpe[ids]


def _position_zero_everywhere(ids, wte, wpe):
    return wte[ids] + wpe[0]


def _positions_from_one(ids, wte, wpe):
    return wte[ids] + wpe[1 : ids.size(1) + 1]  # places counted 1..n


def _concatenated(ids, wte, wpe):
    pos = torch.arange(ids.size(1))
    return torch.cat([wte[ids], wpe[pos].expand(ids.size(0), -1, -1)], dim=-1)  # [B, n, 2d]


_MISTAKES = [
    (
        "the positions are missing: your x is the token rows alone, so a token gets the same "
        "vector wherever it stands in the window",
        _forgot_positions,
    ),
    (
        "the position rows were chosen by the token ids (wpe[ids]): a token id is a symbol, not a "
        "place in the window, so two equal letters at different places got the same position "
        "vector, and a letter changes the position it is given",
        _positions_from_ids,
    ),
    (
        "every token got the position vector of place 0 (wpe[0]): all places of your window share "
        "one row of the position table, so the places are not told apart",
        _position_zero_everywhere,
    ),
    (
        "the positions are off by one: the first token got row 1 of the position table and row 0 "
        "was never used (the places were counted from 1)",
        _positions_from_one,
    ),
    (
        "your x is 2d wide: the token and position vectors were put side by side (concatenated) "
        "rather than added, so every layer after them would have to be twice as wide",
        _concatenated,
    ),
]

# Failures whose message says what went wrong with the positions or a one-hot product.
_ERROR_HINTS = [
    (
        "must match the size of tensor",
        "the position rows you added do not line up with the window: the check's windows hold "
        "n = 5 tokens and its position table has T = 7 rows, and a window of n tokens has n places",
    ),
    (
        "cannot be multiplied",
        "if you multiplied one-hot vectors by a table: a one-hot is as wide as its num_classes, "
        "which without num_classes is max(ids) + 1, and here that is not the number of rows of the "
        "table it multiplies",
    ),
    (
        "dtype",
        "F.one_hot returns integers (torch.long), and a matrix product of integers with the float "
        "table fails",
    ),
]


@solved_by(solution_embed)
def check_embed(embed_fn) -> CheckResult:
    """Check `embed_fn(ids [B, n], wte [V, d], wpe [T, d]) -> x [B, n, d]` on random tables."""
    return compare(
        "embed", embed_fn, solution_embed, _make_inputs, _MISTAKES, error_hints=_ERROR_HINTS
    )
