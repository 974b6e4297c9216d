"""The temperature check passes the solution, agrees with gptlib's sampling distribution, and
names each typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.exercises import logits
from gptlib.generate import next_token_probs


def test_solution_passes():
    result = logits.check_temperature_probs(logits.solution_temperature_probs)
    assert result.passed
    assert result.message == "✓ temperature_probs: matches the reference on 3 random inputs"


@pytest.mark.parametrize("temperature", [0.0, 0.3, 1.0, 2.5])
def test_solution_matches_library(temperature):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 27, generator=g) * 3  # [B, V]
    probs = logits.solution_temperature_probs(x, temperature)
    torch.testing.assert_close(probs, next_token_probs(x, temperature))
    torch.testing.assert_close(probs.sum(-1), torch.ones(5))


def test_zero_temperature_is_one_hot_at_argmax():
    x = torch.tensor([[0.1, 3.0, -2.0], [5.0, 4.9, 0.0]])
    probs = logits.solution_temperature_probs(x, 0)
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    assert torch.isfinite(probs).all()


@pytest.mark.parametrize("hint, wrong", logits.MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_each_mistake_gets_its_hint(hint, wrong):
    result = logits.check_temperature_probs(wrong)
    assert not result.passed
    assert result.message == f"✗ temperature_probs: {hint}"


def test_division_by_zero_written_by_a_reader():
    def naive(x, temperature):
        return torch.softmax(x / temperature, dim=-1)

    assert "greedy" in logits.check_temperature_probs(naive).message


def test_argmax_index_instead_of_one_hot_reports_the_shape():
    def index_at_zero(x, temperature):
        if temperature == 0:
            return x.argmax(-1)
        return torch.softmax(x / temperature, dim=-1)

    result = logits.check_temperature_probs(index_at_zero)
    assert result.message == "✗ temperature_probs: output has shape [4], expected [4, 11]"


def test_reexported_from_package():
    assert exercises.check_temperature_probs is logits.check_temperature_probs
