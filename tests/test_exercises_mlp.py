"""The MLP check agrees with gptlib's MLP and names the commonest slips."""

import pytest
import torch
import torch.nn.functional as F

from gptlib.config import microgpt
from gptlib.exercises import nb07_mlp as mlp
from gptlib.mlp import MLP


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_solution_matches_library_mlp(activation):
    torch.manual_seed(0)
    block_mlp = MLP(microgpt(activation=activation))
    x = torch.randn(2, 8, 16)  # [B, n, d]
    out = mlp.solution_mlp_forward(x, block_mlp.fc.weight, block_mlp.proj.weight, block_mlp.act)
    torch.testing.assert_close(out, block_mlp(x))


def test_the_last_trial_is_the_textbook_gelu_mlp_and_leaves_the_stream_alone():
    state = torch.random.get_rng_state()
    x, w_fc, w_proj, act = mlp._inputs(torch.Generator().manual_seed(1003))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert x.shape[-1] == 128 and w_fc.shape == (512, 128) and act is F.gelu


@pytest.mark.parametrize(("hint", "wrong"), mlp.MISTAKES)
def test_each_slip_is_named_by_its_row(hint, wrong):
    result = mlp.check_mlp_forward(wrong)
    assert not result.passed and result.message == f"✗ mlp_forward: {hint}"


def test_promised_both_activations_relu_only_is_caught():
    message = mlp.check_mlp_forward(
        lambda x, w_fc, w_proj, act: F.relu(x @ w_fc.T) @ w_proj.T
    ).message
    assert message == f"✗ mlp_forward: {mlp.MISTAKES[2][0]}"  # the row of the ReLU-only slip


def test_missing_transpose_names_the_layout():
    result = mlp.check_mlp_forward(lambda x, w_fc, w_proj, act: act(x @ w_fc) @ w_proj)
    assert not result.passed and mlp.ERRORS[0][1] in result.message  # the layout's row


def test_forgotten_second_layer_reports_the_shape():
    result = mlp.check_mlp_forward(lambda x, w_fc, w_proj, act: act(x @ w_fc.T))
    # The symptom: the shape it gave, [B, n, 4d], and the shape expected, [B, n, d].
    assert not result.passed and "[2, 5, 32]" in result.message and "[2, 5, 8]" in result.message


def test_gelu_hard_coded_is_named_as_relu_hard_coded_is():
    def mlp_forward(x, w_fc, w_proj, activation):
        return F.gelu(x @ w_fc.T) @ w_proj.T  # the activation handed in is never used

    message = mlp.check_mlp_forward(mlp_forward).message
    assert "your output is GELU's whatever activation is passed" in message
