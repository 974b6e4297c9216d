"""Notebook 01: `embed(ids, wte, wpe)`, the vectors the first block reads: the token table's row
of each id plus the position table's row of each place in the window, 0..n-1 whatever the ids."""

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_embed", "solution_embed"]


def solution_embed(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor) -> torch.Tensor:
    """ids [B, n] (n <= T), wte [V, d], wpe [T, d] -> x [B, n, d]."""
    n = ids.size(1)
    pos = torch.arange(n, device=ids.device)  # [n]: places in the window, not token ids
    return wte[ids] + wpe[pos]  # [B, n, d] + [n, d] broadcasts over the batch


MISTAKES = [
    (N_("the positions are missing: your x is the token rows alone, so a token gets the same "
        "vector wherever it stands in the window"), lambda ids, wte, wpe: wte[ids]),
    (N_("the position rows were chosen by the token ids (wpe[ids]): a token id is a symbol, not a "
        "place in the window, so two equal letters at different places got the same position "
        "vector"),
     lambda ids, wte, wpe: wte[ids] + wpe[ids]),
    (N_("the positions are off by one: the first token got row 1 of the position table and row 0 "
        "was never used (the places were counted from 1)"),
     lambda ids, wte, wpe: wte[ids] + wpe[1 : ids.size(1) + 1]),
    (N_("your x is 2d wide: the token and position vectors were put side by side (concatenated) "
        "rather than added, so every layer after them would have to be twice as wide"),
     lambda ids, wte, wpe: torch.cat([wte[ids], wpe[: ids.size(1)].expand_as(wte[ids])], -1)),
]  # fmt: skip
ERRORS = [
    ("must match the size of tensor", N_("the position rows you added do not line up with the "
                                         "window: the check's windows hold n = 5 tokens, its "
                                         "position table has T = 7 rows")),
    ("cannot be multiplied", N_("if you multiplied one-hot vectors by a table: a one-hot is as "
                                "wide as its num_classes, which without num_classes is "
                                "max(ids) + 1, not the table's rows")),
    ("dtype", N_("F.one_hot returns integers (torch.long), and a matrix product of integers with "
                 "the float table fails")),
]  # fmt: skip


def _inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # V = 11, T = 7, d = 6 tell the tables apart; ids stay below T - 1 < V - 1, so a one-hot
    # built without num_classes is too narrow and wpe[ids] still has a row to return.
    ids = torch.randint(0, 6, (3, 5), generator=g)  # [B, n]
    return ids, torch.randn(11, 6, generator=g), torch.randn(7, 6, generator=g)


@solved_by(solution_embed)
def check_embed(embed_fn) -> CheckResult:
    """Check `embed_fn(ids [B, n], wte [V, d], wpe [T, d]) -> x [B, n, d]` on random tables."""
    return compare("embed", embed_fn, solution_embed, _inputs, MISTAKES, error_hints=ERRORS)
