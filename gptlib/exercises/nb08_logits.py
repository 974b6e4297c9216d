"""Notebook 08, the sampling distribution: `temperature_probs(logits, τ)` is softmax(logits / τ)
row by row, τ one number or one per row, and a row with τ = 0 is one-hot at its largest logit."""

from functools import partial

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_temperature_probs", "solution_temperature_probs"]


def solution_temperature_probs(logits: torch.Tensor, temperature) -> torch.Tensor:
    """logits [B, V], temperature a number or [B], each >= 0 -> probabilities [B, V]."""
    tau = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
    if tau.dim() > 0:
        tau = tau.reshape(-1, 1)  # [B, 1]: each row's temperature, broadcast over its V logits
    greedy = tau == 0  # [B, 1] (or one truth value for the whole batch)
    safe = torch.where(greedy, torch.ones_like(tau), tau)  # no row is divided by 0
    sampled = (logits / safe).softmax(dim=-1)  # [B, V], each row sums to 1
    # The limit τ -> 0 of softmax(logits / τ): all the mass on the row's largest logit.
    one_hot = F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(logits.dtype)  # [B, V]
    return torch.where(greedy, one_hot, sampled)  # [B, V]


def _slip(logits, temperature, *, zero="greedy", multiply=False, all_greedy=False, dim=-1):
    """temperature_probs with one switch flipped; `zero` says what a row with τ = 0 becomes."""
    tau = torch.as_tensor(temperature, dtype=logits.dtype).reshape(-1, 1)  # [B, 1] or [1, 1]
    greedy = (tau == 0) | (all_greedy and bool((tau == 0).any()))
    safe = tau if zero == "divided" else torch.where(tau == 0, torch.ones_like(tau), tau)
    sampled = (logits * safe if multiply else logits / safe).softmax(dim)
    one_hot = F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(logits.dtype)
    return torch.where(greedy & (zero == "greedy"), one_hot, sampled)


MISTAKES = [
    (N_("rows whose temperature is 0 came out as the plain softmax, the distribution of τ = 1, not "
        "the limit τ -> 0 (all the mass on the row's largest logit)"), partial(_slip, zero="one")),
    (N_("rows whose temperature is 0 hold inf or nan: they were divided by 0, where τ = 0 stands "
        "for greedy decoding"), partial(_slip, zero="divided")),
    (N_("every row of the batch came out one-hot, the rows with τ > 0 too, because one row's "
        "temperature was 0"), partial(_slip, all_greedy=True)),
    (N_("the logits were multiplied by the temperature: your distribution gets flatter as τ falls "
        "and sharper as it rises, the opposite of a temperature"), partial(_slip, multiply=True)),
    (N_("your probabilities sum to 1 down each column, over the batch: the softmax ran over dim=0, "
        "the B rows, not over each row's V logits"), partial(_slip, dim=0)),
]  # fmt: skip
ERROR_HINTS = [
    ("Boolean value of Tensor with more than one value is ambiguous",
     N_("a Python `if` met the tensor of B temperatures, one truth value per row")),
    ("must match the size of tensor b",
     N_("the B temperatures were lined up with the V columns of the logits, not with the B rows")),
]  # fmt: skip


def _inputs(g: torch.Generator) -> tuple:
    # One number for the batch (sharper, then greedy), then one per row, greedy among sampled.
    t = (0.5, 0.0, (2.0, 0.0, 0.5, 1.0), (0.0, 0.25, 0.0, 5.0))[g.initial_seed() % 4]
    return torch.randn(4, 11, generator=g) * 2.0, torch.tensor(t) if isinstance(t, tuple) else t


@solved_by(solution_temperature_probs)
def check_temperature_probs(temperature_probs) -> CheckResult:
    """On random [4, 11] logits: τ = 0.5, then 0, for the batch, then one τ per row, some 0; the
    probabilities, then the gradient the logits get through them."""
    return compare("temperature_probs", temperature_probs, solution_temperature_probs, _inputs,
                   MISTAKES, 4, error_hints=ERROR_HINTS)  # fmt: skip
