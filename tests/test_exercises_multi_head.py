"""The split/merge-heads checks name the slips notebook 04 shows and the commonest others."""

import pytest
import torch

from gptlib.attention import CausalSelfAttention
from gptlib.config import microgpt
from gptlib.exercises import nb04_multi_head as multi_head


def test_solutions_are_inverse_and_match_the_library():
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
    heads = multi_head.solution_split_heads(x, 4)
    torch.testing.assert_close(heads[:, 1], x[:, :, 4:8])  # head 1 owns features 4..7
    torch.testing.assert_close(multi_head.solution_merge_heads(heads), x)
    torch.testing.assert_close(CausalSelfAttention(microgpt()).split_heads(x), heads)


@pytest.mark.parametrize(("hint", "wrong"), multi_head.SPLIT_MISTAKES)
def test_each_split_slip_is_named_by_its_row(hint, wrong):
    result = multi_head.check_split_heads(wrong)
    assert not result.passed and result.message == f"✗ split_heads: {hint}"


@pytest.mark.parametrize(("hint", "wrong"), multi_head.MERGE_MISTAKES)
def test_each_merge_slip_is_named_by_its_row(hint, wrong):
    result = multi_head.check_merge_heads(wrong)
    assert not result.passed and result.message == f"✗ merge_heads: {hint}"


def test_promised_view_straight_to_the_heads():  # the page's pitfall
    def split(x, n_head):
        B, n, d = x.shape
        return x.view(B, n_head, n, d // n_head)

    message = multi_head.check_split_heads(split).message
    assert "position 1 of head 0 holds features d_h .. 2*d_h - 1 of position 0" in message


def test_promised_merge_in_memory_order():  # "check_merge_heads names it by that symptom"
    def merge(y):
        B, h, n, d_h = y.shape
        return y.reshape(B, n, h * d_h)

    message = multi_head.check_merge_heads(merge).message
    assert "output position 0 is made of several positions of head 0" in message


@pytest.mark.parametrize(
    "hint", [h for h, _ in multi_head.SPLIT_MISTAKES + multi_head.MERGE_MISTAKES]
)
def test_hints_name_the_slip_without_writing_the_fix(hint):
    for code in ("transpose", "view(", "reshape(", "permute", "move", "swap"):
        assert code not in hint


def test_view_after_transpose_reports_the_error():
    def merge(y):
        B, h, n, d_h = y.shape
        return y.transpose(1, 2).view(B, n, h * d_h)  # not contiguous: view refuses

    assert "raised RuntimeError" in multi_head.check_merge_heads(merge).message
