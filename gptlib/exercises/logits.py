"""Notebook 08, the output head: turning logits into a sampling distribution with a temperature.

The reader writes `temperature_probs(logits, temperature)` for logits [B, V] and a temperature
>= 0 and returns probabilities [B, V]: softmax(logits / temperature) over the vocabulary, and for
temperature 0 (greedy decoding) a one-hot row at each row's argmax.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_temperature_probs", "solution_temperature_probs"]


def solution_temperature_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    if temperature == 0:
        # The limit τ -> 0 of softmax(logits / τ): all the mass on the largest logit.
        return F.one_hot(logits.argmax(dim=-1), logits.size(-1)).to(logits.dtype)  # [B, V]
    return (logits / temperature).softmax(dim=-1)  # [B, V], each row sums to 1


def _multiplied(logits, temperature):
    return (logits * temperature).softmax(dim=-1)


def _after_softmax(logits, temperature):
    return logits.softmax(dim=-1) / temperature


def _ignored(logits, temperature):
    return logits.softmax(dim=-1)


def _zero_divides(logits, temperature):
    return (logits / temperature).softmax(dim=-1)


def _zero_uniform(logits, temperature):
    if temperature == 0:
        return torch.full_like(logits, 1.0 / logits.size(-1))
    return (logits / temperature).softmax(dim=-1)


def _over_batch(logits, temperature):
    if temperature == 0:
        return solution_temperature_probs(logits, 0)
    return (logits / temperature).softmax(dim=0)


MISTAKES = [
    (
        "temperature 0 gave every token the same probability: 0 is the coldest setting, not the "
        "flattest, greedy decoding with all the mass on each row's largest logit",
        _zero_uniform,
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
        "the temperature has no effect: your output is the plain softmax whatever τ is",
        _ignored,
    ),
    (
        "temperature 0 divides by zero, and your rows hold inf or nan; τ = 0 stands for greedy "
        "decoding, not a division",
        _zero_divides,
    ),
    (
        "the softmax runs over the batch (dim=0): your columns sum to 1, not your rows; each row is "
        "a distribution over the V tokens",
        _over_batch,
    ),
]


def _inputs() -> Callable[[torch.Generator], tuple]:
    # A sharpening, a flattening and the greedy temperature, in that order.
    temperatures = iter([0.5, 2.0, 0.0])

    def make(g: torch.Generator) -> tuple:
        logits = torch.randn(4, 11, generator=g) * 2.0  # [B, V]
        return logits, next(temperatures)

    return make


@solved_by(solution_temperature_probs)
def check_temperature_probs(temperature_probs: Callable) -> CheckResult:
    """Run `temperature_probs(logits, τ)` on random [4, 11] logits at τ = 0.5, 2 and 0."""
    return compare(
        "temperature_probs",
        temperature_probs,
        solution_temperature_probs,
        _inputs(),
        mistakes=MISTAKES,
    )
