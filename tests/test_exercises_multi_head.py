"""The split/merge-heads checks pass the solutions and name each typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.attention import CausalSelfAttention
from gptlib.config import microgpt
from gptlib.exercises import multi_head


def test_solutions_pass():
    assert multi_head.check_split_heads(multi_head.solution_split_heads).passed
    assert multi_head.check_merge_heads(multi_head.solution_merge_heads).passed


def test_solutions_are_inverse_and_match_the_library():
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
    heads = multi_head.solution_split_heads(x, 4)
    assert heads.shape == (2, 4, 5, 4)
    # head 1 owns features 4..7 of every position
    torch.testing.assert_close(heads[:, 1], x[:, :, 4:8])
    torch.testing.assert_close(multi_head.solution_merge_heads(heads), x)
    attn = CausalSelfAttention(microgpt())
    torch.testing.assert_close(attn.split_heads(x), heads)


@pytest.mark.parametrize(
    "hint, wrong", multi_head.SPLIT_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_split_mistake_gets_its_hint(hint, wrong):
    result = multi_head.check_split_heads(wrong)
    assert not result.passed
    assert result.message == f"✗ split_heads: {hint}"


@pytest.mark.parametrize(
    "hint, wrong", multi_head.MERGE_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_merge_mistake_gets_its_hint(hint, wrong):
    result = multi_head.check_merge_heads(wrong)
    assert not result.passed
    assert result.message == f"✗ merge_heads: {hint}"


def test_view_without_transpose_written_by_a_reader():
    def split(x, n_head):
        B, n, d = x.shape
        return x.view(B, n_head, n, d // n_head)

    result = multi_head.check_split_heads(split)
    assert result.message == f"✗ split_heads: {multi_head.SPLIT_MISTAKES[0][0]}"
    assert "position 1 of head 0 holds features d_h .. 2*d_h - 1 of position 0" in result.message


def test_reshape_to_heads_last_written_by_a_reader():
    def split(x, n_head):
        B, n, d = x.shape
        return x.reshape(B, n, n_head, d // n_head)  # the transpose forgotten

    result = multi_head.check_split_heads(split)
    assert result.message == (f"✗ split_heads: {multi_head.SPLIT_MISTAKES[1][0]}")
    assert "your output is [B, n, h, d_h]" in result.message


def test_merge_by_reshape_alone_written_by_a_reader():
    def merge(y):
        B, h, n, d_h = y.shape
        return y.reshape(B, n, h * d_h)

    result = multi_head.check_merge_heads(merge)
    assert result.message == f"✗ merge_heads: {multi_head.MERGE_MISTAKES[0][0]}"
    assert "output position 0 is made of several positions of head 0" in result.message


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

    result = multi_head.check_merge_heads(merge)
    assert not result.passed
    assert "raised RuntimeError" in result.message


def test_reexported_from_package():
    assert exercises.check_split_heads is multi_head.check_split_heads
    assert exercises.check_merge_heads is multi_head.check_merge_heads
