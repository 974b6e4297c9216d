"""Notebook 08, the output head: turning logits into a sampling distribution with a temperature,
one temperature per row.

The reader writes `temperature_probs(logits, temperature)` for logits [B, V] and returns
probabilities [B, V]. `temperature` is either one number >= 0 for the whole batch or a tensor [B]
of temperatures >= 0, one per row (a batch of requests, each asking for its own temperature).
A row with temperature 0 is greedy decoding: one-hot at that row's largest logit; every other row
is softmax(logits / τ) over the vocabulary. The notebook shows only the one-number case, through
`gptlib.generate.next_token_probs`; lining a temperature up with its row, and greedy rows mixed
with sampled ones in one batch, are the reader's.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_temperature_probs", "solution_temperature_probs"]


def solution_temperature_probs(logits: torch.Tensor, temperature) -> torch.Tensor:
    tau = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
    if tau.dim() > 0:
        tau = tau.reshape(-1, 1)  # [B, 1]: each row's temperature, broadcast over its V logits
    greedy = tau == 0  # [B, 1] (or one truth value for the whole batch)
    safe = torch.where(greedy, torch.ones_like(tau), tau)  # no row is divided by 0
    sampled = (logits / safe).softmax(dim=-1)  # [B, V], each row sums to 1
    # The limit τ -> 0 of softmax(logits / τ): all the mass on the row's largest logit.
    one_hot = F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(logits.dtype)  # [B, V]
    return torch.where(greedy, one_hot, sampled)  # [B, V]


def _tau(logits, temperature):
    t = torch.as_tensor(temperature, dtype=logits.dtype)
    return t.reshape(-1, 1) if t.dim() else t


def _per_row(logits, temperature, zero_rows, other_rows):
    """A slip's output: rows with τ = 0 from `zero_rows`, the others from `other_rows`."""
    tau = _tau(logits, temperature)
    zero = (tau == 0).expand_as(logits)
    return torch.where(zero, zero_rows(logits, tau), other_rows(logits, tau))


def _softmax_over(tau, logits):
    safe = torch.where(tau == 0, torch.ones_like(tau), tau)
    return (logits / safe).softmax(dim=-1)


def _one_hot(logits, tau):
    return solution_temperature_probs(logits, 0.0)


def _multiplied(logits, temperature):
    return (logits * _tau(logits, temperature)).softmax(dim=-1)


def _after_softmax(logits, temperature):
    return logits.softmax(dim=-1) / _tau(logits, temperature)


def _ignored(logits, temperature):
    return logits.softmax(dim=-1)


def _zero_as_one(logits, temperature):
    return _per_row(
        logits, temperature, lambda x, t: x.softmax(dim=-1), lambda x, t: _softmax_over(t, x)
    )


def _zero_divides(logits, temperature):
    return (logits / _tau(logits, temperature)).softmax(dim=-1)


def _zero_uniform(logits, temperature):
    return _per_row(
        logits,
        temperature,
        lambda x, t: torch.full_like(x, 1.0 / x.size(-1)),
        lambda x, t: _softmax_over(t, x),
    )


def _one_zero_makes_all_greedy(logits, temperature):
    tau = _tau(logits, temperature)
    if bool((tau == 0).any()):
        return _one_hot(logits, tau)
    return (logits / tau).softmax(dim=-1)


def _over_batch(logits, temperature):
    return _per_row(
        logits,
        temperature,
        _one_hot,
        lambda x, t: (x / torch.where(t == 0, torch.ones_like(t), t)).softmax(dim=0),
    )


MISTAKES = [
    (
        "rows whose temperature is 0 gave every token the same probability 1/V: that is the limit "
        "τ -> ∞, the flattest setting, and 0 is the coldest, where all the mass sits on the row's "
        "largest logit",
        _zero_uniform,
    ),
    (
        "rows whose temperature is 0 came out as the plain softmax, the distribution of τ = 1, not "
        "the limit τ -> 0 (all the mass on the row's largest logit)",
        _zero_as_one,
    ),
    (
        "every row of the batch came out one-hot, the rows with τ > 0 too, because one row's "
        "temperature was 0",
        _one_zero_makes_all_greedy,
    ),
    (
        "the logits are multiplied by the temperature: your distribution gets flatter as τ falls "
        "and sharper as it rises, the opposite of what a temperature does",
        _multiplied,
    ),
    (
        "the temperature is applied after the softmax: your rows no longer sum to 1 (they sum to 1 "
        "/ τ) and their shape is that of τ = 1",
        _after_softmax,
    ),
    (
        "the temperature has no effect: every row is the plain softmax, whatever its τ",
        _ignored,
    ),
    (
        "rows whose temperature is 0 divide by zero, and they hold inf or nan; τ = 0 stands for "
        "greedy decoding, not a division",
        _zero_divides,
    ),
    (
        "the softmax runs over the batch (dim=0): your columns sum to 1, not your rows; each row is "
        "a distribution over the V tokens",
        _over_batch,
    ),
]

ERROR_HINTS = [
    (
        "Boolean value of Tensor with more than one value is ambiguous",
        "a Python `if` met the tensor of B temperatures: `temperature == 0` is then one truth "
        "value per row, and `if` cannot turn B of them into one",
    ),
    (
        "must match the size of tensor b",
        "the B temperatures were lined up with the V columns of the logits, not with the B rows",
    ),
]

# One number for the batch (sharper, then greedy), then one temperature per row, greedy rows among
# sampled ones.
TEMPERATURES = (0.5, 0.0, (2.0, 0.0, 0.5, 1.0), (0.0, 0.25, 0.0, 5.0))


def _inputs() -> Callable[[torch.Generator], tuple]:
    temperatures = iter(TEMPERATURES)

    def make(g: torch.Generator) -> tuple:
        logits = torch.randn(4, 11, generator=g) * 2.0  # [B, V]
        t = next(temperatures)
        return logits, (torch.tensor(t) if isinstance(t, tuple) else t)

    return make


@solved_by(solution_temperature_probs)
def check_temperature_probs(temperature_probs: Callable) -> CheckResult:
    """Run `temperature_probs(logits, τ)` on random [4, 11] logits: τ = 0.5 and 0 for the whole
    batch, then a tensor of four temperatures, one per row, with zeros among them."""
    return compare(
        "temperature_probs",
        temperature_probs,
        solution_temperature_probs,
        _inputs(),
        mistakes=MISTAKES,
        trials=len(TEMPERATURES),
        error_hints=ERROR_HINTS,
        grads=False,  # a distribution to sample from: nothing is trained through it
    )
