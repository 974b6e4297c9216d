"""The causal-attention check passes the solution and names each typical mistake."""

import warnings

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises
from gptlib.exercises import attention


def test_solution_passes():
    result = attention.check_causal_attention(attention.solution_causal_attention)
    assert result.passed
    assert result.message.startswith("✓ causal_attention")


def test_solution_equals_pytorch_causal_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attention.solution_causal_attention(q, k, v), expected)


def test_sdpa_as_the_readers_answer_is_refused():
    def fused(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    result = attention.check_causal_attention(fused)
    assert not result.passed
    assert "write this one yourself" in result.message
    assert "F.scaled_dot_product_attention" in result.message
    q = k = v = torch.randn(1, 1, 3, 4)
    assert torch.equal(fused(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize(
    "hint, wrong", attention.MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_mistake_gets_its_hint(hint, wrong):
    result = attention.check_causal_attention(wrong)
    assert not result.passed
    assert result.message == f"✗ causal_attention: {hint}"


def test_softmax_dim_hint_on_a_readers_version():
    def wrong(q, k, v):
        n = q.size(-2)
        scores = (q @ k.transpose(-2, -1)) / q.size(-1) ** 0.5
        scores = scores.masked_fill(torch.triu(torch.ones(n, n), 1).bool(), float("-inf"))
        return torch.softmax(scores, dim=2) @ v  # dim 2 of [B, h, n, n] is the query axis

    result = attention.check_causal_attention(wrong)
    assert not result.passed
    assert "the softmax runs over dim=-2, the queries" in result.message


def test_mask_after_softmax_written_by_a_reader():
    def wrong(q, k, v):
        n = q.size(-2)
        weights = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1)
        weights = weights.masked_fill(torch.triu(torch.ones(n, n), 1).bool(), 0.0)
        return weights @ v

    result = attention.check_causal_attention(wrong)
    assert result.message == (
        "✗ causal_attention: the mask was applied after the softmax: the future weights were "
        "zeroed, but the weights left were not renormalised, so each query's row sums to less "
        "than 1"
    )


def test_k_and_v_swapped_written_by_a_reader():
    def wrong(q, k, v):
        n = q.size(-2)
        scores = q @ v.transpose(-2, -1) / q.size(-1) ** 0.5
        scores = scores.masked_fill(torch.triu(torch.ones(n, n), 1).bool(), float("-inf"))
        return scores.softmax(dim=-1) @ k

    result = attention.check_causal_attention(wrong)
    assert result.message == (
        "✗ causal_attention: k and v are swapped: the scores compare the queries with v, and the "
        "weights average k"
    )


def test_dot_T_on_4d_keys_gets_its_hint():
    def wrong(q, k, v):
        n = q.size(-2)
        scores = q @ k.T / q.size(-1) ** 0.5  # .T reverses all four axes
        scores = scores.masked_fill(torch.triu(torch.ones(n, n), 1).bool(), float("-inf"))
        return scores.softmax(dim=-1) @ v

    with warnings.catch_warnings():  # torch deprecates .T on tensors that are not 2-D
        warnings.simplefilter("ignore", UserWarning)
        result = attention.check_causal_attention(wrong)
    assert result.message == (
        "✗ causal_attention: your function raised RuntimeError: The size of tensor a (3) must "
        "match the size of tensor b (6) at non-singleton dimension 1. Hint: "
        + attention.ERROR_HINTS[0][1]
    )
    assert "[B, h, n, d_h] becomes [d_h, n, h, B]" in result.message


def test_unrecognised_error_reports_the_difference():
    result = attention.check_causal_attention(
        lambda q, k, v: attention.solution_causal_attention(q, k, v) * 1.5
    )
    assert not result.passed
    assert "largest difference" in result.message


def test_stub_and_shape_messages():
    def stub(q, k, v):
        raise NotImplementedError

    assert "not written yet" in attention.check_causal_attention(stub).message
    msg = attention.check_causal_attention(lambda q, k, v: q[..., :1]).message
    assert msg == "✗ causal_attention: output has shape [2, 3, 6, 1], expected [2, 3, 6, 4]"


def test_reexported_from_package():
    assert exercises.check_causal_attention is attention.check_causal_attention
    assert "solution_causal_attention" in exercises.__all__


def test_slip_messages_do_not_write_the_fix():
    fixes = (
        "softmax(dim=-1)",
        "triu(",
        "tril ==",
        "float('-inf')",
        "sqrt(q.size(-1))",
        "divide q @ k",
    )
    for hint, _ in attention.MISTAKES:
        assert not any(fix in hint for fix in fixes), hint


def test_no_message_says_where_the_fix_goes():
    texts = [m for m, _ in attention.MISTAKES] + [h for _, h in attention.ERROR_HINTS]
    for fix in ("belongs on the scores", "need only the last two axes", "mix the values"):
        assert not [t for t in texts if fix in t], fix
