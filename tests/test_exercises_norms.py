"""The RMSNorm / LayerNorm checks pass the solutions and name each typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.exercises import norms
from gptlib.norms import LayerNorm, RMSNorm


def test_solutions_pass():
    assert norms.check_rmsnorm(norms.solution_rmsnorm).passed
    assert norms.check_layernorm(norms.solution_layernorm).passed


def test_solutions_match_library_and_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 8, generator=g)
    w, b = torch.rand(8, generator=g) + 0.5, torch.randn(8, generator=g)
    rms = RMSNorm(8)
    ln = LayerNorm(8)
    with torch.no_grad():
        rms.weight.copy_(w)
        ln.weight.copy_(w)
        ln.bias.copy_(b)
    torch.testing.assert_close(norms.solution_rmsnorm(x, w, 1e-5), rms(x))
    torch.testing.assert_close(norms.solution_layernorm(x, w, b, 1e-5), ln(x))
    torch.testing.assert_close(
        norms.solution_rmsnorm(x, w, 1e-5), torch.nn.functional.rms_norm(x, (8,), w, 1e-5)
    )
    torch.testing.assert_close(
        norms.solution_layernorm(x, w, b, 1e-5), torch.nn.functional.layer_norm(x, (8,), w, b, 1e-5)
    )


@pytest.mark.parametrize(
    "hint, wrong", norms.RMS_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_rmsnorm_mistake_gets_its_hint(hint, wrong):
    result = norms.check_rmsnorm(wrong)
    assert not result.passed
    assert result.message == f"✗ rmsnorm: {hint}"


@pytest.mark.parametrize("hint, wrong", norms.LN_MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_each_layernorm_mistake_gets_its_hint(hint, wrong):
    result = norms.check_layernorm(wrong)
    assert not result.passed
    assert result.message == f"✗ layernorm: {hint}"


def test_eps_outside_written_by_a_reader():
    def rmsnorm(x, weight, eps):
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True))
        return weight * x / (rms + eps)

    assert "inside" in norms.check_rmsnorm(rmsnorm).message


def test_reexported_from_package():
    assert exercises.check_rmsnorm is norms.check_rmsnorm
    assert exercises.check_layernorm is norms.check_layernorm
