"""The temperature check passes the solution, agrees with gptlib's sampling distribution row by
row, accepts a correct version written differently, and names each typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.exercises import logits
from gptlib.generate import next_token_probs


def test_solution_passes():
    result = logits.check_temperature_probs(logits.solution_temperature_probs)
    assert result.passed
    assert result.message == "✓ temperature_probs: matches the reference on 4 random inputs"


@pytest.mark.parametrize("temperature", [0.0, 0.3, 1.0, 2.5])
def test_solution_matches_library(temperature):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 27, generator=g) * 3  # [B, V]
    probs = logits.solution_temperature_probs(x, temperature)
    torch.testing.assert_close(probs, next_token_probs(x, temperature))
    torch.testing.assert_close(probs.sum(-1), torch.ones(5))


def test_one_temperature_per_row_is_the_library_row_by_row():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 9, generator=g) * 3  # [B, V]
    taus = torch.tensor([0.0, 0.5, 1.0, 3.0])
    probs = logits.solution_temperature_probs(x, taus)
    for row, tau in enumerate(taus.tolist()):
        torch.testing.assert_close(probs[row], next_token_probs(x[row], tau))
    assert torch.isfinite(probs).all()


def test_zero_temperature_is_one_hot_at_argmax():
    x = torch.tensor([[0.1, 3.0, -2.0], [5.0, 4.9, 0.0]])
    probs = logits.solution_temperature_probs(x, 0)
    assert probs.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    assert torch.isfinite(probs).all()


def test_greedy_rows_have_no_nan_gradient():
    x = torch.randn(3, 5, requires_grad=True)
    out = logits.solution_temperature_probs(x, torch.tensor([0.0, 1.0, 0.5]))
    (out * torch.arange(5.0)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[0] == 0).all()


@pytest.mark.parametrize("hint, wrong", logits.MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_each_mistake_gets_its_hint(hint, wrong):
    result = logits.check_temperature_probs(wrong)
    assert not result.passed
    assert result.message == f"✗ temperature_probs: {hint}"


def test_hints_are_distinct():
    hints = [hint for hint, _ in logits.MISTAKES]
    assert len(set(hints)) == len(hints)


def test_written_differently_passes():
    def temperature_probs(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype).expand(x.size(0))  # [B]
        out = torch.empty_like(x)
        for row in range(x.size(0)):
            if t[row] == 0:
                out[row] = 0.0
                out[row, x[row].argmax()] = 1.0
            else:
                e = torch.exp(x[row] / t[row] - (x[row] / t[row]).max())
                out[row] = e / e.sum()
        return out

    assert logits.check_temperature_probs(temperature_probs).passed


def test_zero_read_as_one_is_named_not_as_no_effect():
    def temperature_probs(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        t = t.reshape(-1, 1) if t.dim() else t
        t = torch.where(t == 0, torch.ones_like(t), t)  # τ = 0 read as 1
        return torch.softmax(x / t, dim=-1)

    message = logits.check_temperature_probs(temperature_probs).message
    assert "came out as the plain softmax, the distribution of τ = 1" in message
    assert "no effect" not in message


def test_division_by_zero_written_by_a_reader():
    def naive(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        return torch.softmax(x / (t.reshape(-1, 1) if t.dim() else t), dim=-1)

    assert "greedy" in logits.check_temperature_probs(naive).message


def test_python_if_on_a_tensor_of_temperatures_is_named():
    def one_number_only(x, temperature):
        if temperature == 0:
            return torch.nn.functional.one_hot(x.argmax(-1), x.size(-1)).float()
        return torch.softmax(x / temperature, dim=-1)

    message = logits.check_temperature_probs(one_number_only).message
    assert "a Python `if` met the tensor of B temperatures" in message


def test_temperatures_along_the_columns_are_named():
    def columns(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        if t.dim() == 0 and t == 0:
            return torch.nn.functional.one_hot(x.argmax(-1), x.size(-1)).float()
        return torch.softmax(x / t, dim=-1)  # [B] meets [B, V] along V

    message = logits.check_temperature_probs(columns).message
    assert "lined up with the V columns" in message


def test_argmax_index_instead_of_one_hot_reports_the_shape():
    def index_at_zero(x, temperature):
        if temperature == 0:
            return x.argmax(-1)
        return torch.softmax(x / temperature, dim=-1)

    result = logits.check_temperature_probs(index_at_zero)
    assert result.message == "✗ temperature_probs: output has shape [4], expected [4, 11]"


def test_reexported_from_package():
    assert exercises.check_temperature_probs is logits.check_temperature_probs
