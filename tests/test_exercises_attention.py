"""The causal-attention check names the slips notebook 03 discusses and the commonest others."""

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from gptlib.exercises import nb03_scaled_attention as attention

check = attention.check_causal_attention


def _reader(*, dim=-1, scale=None, mask="triu1"):
    """A reader's attention written out, as the page's cells write it."""

    def causal_attention(q, k, v):
        n, d_h = q.size(-2), q.size(-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_h if scale is None else scale(q))
        ones = torch.ones(n, n)
        hidden = {"triu1": torch.triu(ones, 1) == 1, "tril-1": torch.tril(ones, -1) == 1,
                  "tril==1": torch.tril(ones) == 1}[mask]  # fmt: skip
        return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=dim) @ v

    return causal_attention


def test_solution_equals_pytorch_causal_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=g) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(attention.solution_causal_attention(q, k, v), expected)
    assert check(_reader()).passed


def test_sdpa_as_the_readers_answer_is_refused():
    result = check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert not result.passed and "write this one yourself" in result.message
    assert "F.scaled_dot_product_attention" in result.message


@pytest.mark.parametrize(("hint", "wrong"), attention.MISTAKES)
def test_each_slip_is_named_by_its_row(hint, wrong):
    result = check(wrong)
    assert not result.passed and result.message == f"✗ causal_attention: {hint}"


def test_promised_softmax_over_the_queries():  # also what tests/browser types into the page
    message = check(_reader(dim=2)).message  # dim 2 of [B, h, n, n] is the query axis
    assert message == f"✗ causal_attention: {attention.MISTAKES[0][0]}"
    assert "dim=-2, the queries" in message and "column" in message


def test_promised_dividing_by_sqrt_d_model():
    message = check(_reader(scale=lambda q: q.size(-3) * q.size(-1))).message
    assert "sqrt(d_model)" in message and "flatter" in message


def test_promised_the_mask_facing_the_wrong_way():
    message = check(_reader(mask="tril-1")).message
    assert "hides the wrong side" in message and "the past is hidden" in message


def test_promised_the_tril_idiom_inverted():
    message = check(_reader(mask="tril==1")).message
    assert "hides the past and the position itself" in message


def test_dot_T_on_4d_keys_gets_its_hint():
    def wrong(q, k, v):
        n = q.size(-2)
        scores = q @ k.T / q.size(-1) ** 0.5  # .T reverses all four axes
        scores = scores.masked_fill(torch.triu(torch.ones(n, n), 1).bool(), float("-inf"))
        return scores.softmax(dim=-1) @ v

    with warnings.catch_warnings():  # torch deprecates .T on tensors that are not 2-D
        warnings.simplefilter("ignore", UserWarning)
        message = check(wrong).message
    assert "raised RuntimeError" in message and attention.ERRORS[0][1] in message


def test_an_unknown_slip_reports_the_difference_and_a_shape():
    assert "largest difference" in check(_reader(scale=lambda q: 3.0)).message
    message = check(lambda q, k, v: q[..., :1]).message
    assert "[2, 3, 6, 1]" in message and "[2, 3, 6, 4]" in message  # given and expected shapes


def _future(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), 1)


def _zero_filled(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    return scores.masked_fill(_future(q.size(-2)), 0.0).softmax(-1) @ v


def _tril(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).tril().softmax(dim=-1) @ v


def _by_d_h(q, k, v):
    scores = q @ k.transpose(-2, -1) / q.size(-1)
    return scores.masked_fill(_future(q.size(-2)), float("-inf")).softmax(-1) @ v


def _k_q(q, k, v):
    scores = k @ q.transpose(-2, -1) / q.size(-1) ** 0.5
    return scores.masked_fill(_future(q.size(-2)), float("-inf")).softmax(-1) @ v


def _q_v_k(q, v, k):  # the arguments read in another order than they are handed
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    return scores.masked_fill(_future(q.size(-2)), float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize(
    "wrong, meaning",
    [
        (_zero_filled, "set to 0, not -inf"),
        (_tril, "set to 0, not -inf"),
        (_by_d_h, "divided by d_h, not by sqrt(d_h)"),
        (_k_q, "score matrix is transposed"),
        (_q_v_k, "k and v played each other's roles"),
    ],
)
def test_promised_common_slips_as_a_reader_writes_them(wrong, meaning):
    result = check(wrong)
    assert not result.passed and meaning in result.message, result.message


def test_transposing_the_heads_and_positions_is_not_told_dot_t():
    def wrong(q, k, v):
        scores = q @ k.transpose(1, 2) / q.size(-1) ** 0.5  # [B, n, h, d_h]: not the last two
        return scores.masked_fill(_future(q.size(-2)), float("-inf")).softmax(-1) @ v

    message = check(wrong).message
    assert "k.transpose(1, 2) swaps the heads with the positions" in message
    assert "if you wrote k.T" not in message


def test_an_unknown_slip_is_told_by_head_and_position():
    def one_head_off(q, k, v):  # head 1 scaled by 3 where the others are right
        scale = torch.tensor([1.0, 3.0, 1.0]).view(1, 3, 1, 1)
        return attention.solution_causal_attention(q * scale, k, v)

    message = check(one_head_off).message
    assert "in head 1 of sequence 0" in message and "largest difference" in message
