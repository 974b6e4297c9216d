"""The MLP check passes the solution, agrees with gptlib's MLP, and names each typical mistake."""

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises
from gptlib.config import microgpt
from gptlib.exercises import mlp
from gptlib.mlp import MLP


def test_solution_passes():
    result = mlp.check_mlp(mlp.solution_mlp)
    assert result.passed
    assert result.message == (
        "✓ mlp_forward: matches the reference on 4 random inputs and equals gptlib's GELU MLP "
        "(textbook preset, d = 128)"
    )


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_solution_matches_library_mlp(activation):
    torch.manual_seed(0)
    block_mlp = MLP(microgpt(activation=activation))
    x = torch.randn(2, 8, 16)  # [B, n, d]
    out = mlp.solution_mlp(x, block_mlp.fc.weight, block_mlp.proj.weight, block_mlp.act)
    assert out.shape == (2, 8, 16)
    torch.testing.assert_close(out, block_mlp(x))


@pytest.mark.parametrize("hint, wrong", mlp.MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_each_mistake_gets_its_hint(hint, wrong):
    result = mlp.check_mlp(wrong)
    assert not result.passed
    assert result.message == f"✗ mlp_forward: {hint}"


def test_missing_transpose_names_the_layout():
    def untransposed(x, w_fc, w_proj, activation):
        return activation(x @ w_fc) @ w_proj  # shapes do not fit: [.., 8] @ [32, 8]

    result = mlp.check_mlp(untransposed)
    assert not result.passed
    assert "cannot be multiplied" in result.message
    assert "[out, in]" in result.message


def test_forgotten_second_layer_reports_the_shape():
    result = mlp.check_mlp(lambda x, w_fc, w_proj, act: act(x @ w_fc.T))
    assert not result.passed
    assert result.message == "✗ mlp_forward: output has shape [2, 5, 32], expected [2, 5, 8]"


def test_stub_is_reported_as_not_written():
    def stub(x, w_fc, w_proj, activation):
        raise NotImplementedError

    assert "not written yet" in mlp.check_mlp(stub).message


def test_gelu_trial_is_reached():
    # A ReLU-only answer passes the first (ReLU) trial: the check must go on to a GELU one.
    def relu_only(x, w_fc, w_proj, activation):
        return F.relu(x @ w_fc.T) @ w_proj.T

    assert "your output is ReLU's whatever" in mlp.check_mlp(relu_only).message


def test_reexported_from_package():
    assert exercises.check_mlp is mlp.check_mlp
