"""The temperature check: the reference agrees with gptlib row by row, a version written
differently passes, each kept slip is named by its row, and the promised slips are named."""

import pytest
import torch

from gptlib.exercises import nb08_logits as logits
from gptlib.generate import next_token_probs

check = logits.check_temperature_probs


def test_solution_is_the_library_row_by_row():
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(1)) * 3  # [B, V]
    taus = torch.tensor([0.0, 0.5, 1.0, 3.0])
    probs = logits.solution_temperature_probs(x, taus)
    for row, tau in enumerate(taus.tolist()):
        torch.testing.assert_close(probs[row], next_token_probs(x[row], temperature=tau))
    torch.testing.assert_close(
        logits.solution_temperature_probs(x, 0.3), next_token_probs(x, temperature=0.3)
    )
    exact = logits.solution_temperature_probs(torch.tensor([[0.1, 3.0, -2.0]]), 0)
    assert exact.tolist() == [[0.0, 1.0, 0.0]]


@pytest.mark.parametrize("message, wrong", logits.MISTAKES)
def test_each_slip_is_named_by_its_row(message, wrong):
    result = check(wrong)
    assert not result.passed
    assert result.message == f"✗ temperature_probs: {message}"


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

    assert check(temperature_probs).passed


def test_promised_zero_read_as_one_is_named_not_as_no_effect():
    def temperature_probs(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        t = t.reshape(-1, 1) if t.dim() else t
        return torch.softmax(x / torch.where(t == 0, torch.ones_like(t), t), dim=-1)

    message = check(temperature_probs).message
    assert "came out as the plain softmax, the distribution of τ = 1" in message


def test_promised_division_by_zero_is_named():
    def naive(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        return torch.softmax(x / (t.reshape(-1, 1) if t.dim() else t), dim=-1)

    assert "divided by 0, where τ = 0 stands for greedy decoding" in check(naive).message


def test_promised_python_if_on_a_tensor_of_temperatures_is_named():
    def one_number_only(x, temperature):
        if temperature == 0:
            return torch.nn.functional.one_hot(x.argmax(-1), x.size(-1)).float()
        return torch.softmax(x / temperature, dim=-1)

    assert "a Python `if` met the tensor of B temperatures" in check(one_number_only).message


def test_promised_temperatures_along_the_columns_are_named():
    def columns(x, temperature):
        t = torch.as_tensor(temperature, dtype=x.dtype)
        if t.dim() == 0 and t == 0:
            return torch.nn.functional.one_hot(x.argmax(-1), x.size(-1)).float()
        return torch.softmax(x / t, dim=-1)  # [B] meets [B, V] along V

    assert "lined up with the V columns" in check(columns).message


def test_argmax_index_instead_of_one_hot_reports_the_shape():
    def index_at_zero(x, temperature):
        return x.argmax(-1) if temperature == 0 else torch.softmax(x / temperature, dim=-1)

    message = check(index_at_zero).message  # the shape it gave, [B], and the one expected
    assert message.startswith("✗ temperature_probs:") and "[4]" in message and "[4, 11]" in message
