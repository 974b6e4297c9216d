import pytest
import torch

from gptlib import GPT, microgpt
from gptlib.exercises import (
    check_qkv_split,
    solution_qkv_split,
)


def test_split_matches_the_attention_layer():
    torch.manual_seed(0)
    attn = GPT(microgpt(vocab_size=11)).blocks[0].attn
    x = torch.randn(2, 5, 16)
    q, k, v = solution_qkv_split(x, attn.qkv.weight)
    d = 16
    fused = attn.qkv(x)  # [B, n, 3d], laid out Q | K | V
    for got, part in zip((q, k, v), fused.split(d, dim=-1), strict=True):
        assert got.shape == (2, 5, 16)
        torch.testing.assert_close(got, part)
    w = attn.qkv.weight  # [3d, d]: rows 0..d-1 make q, d..2d-1 make k, 2d..3d-1 make v
    torch.testing.assert_close(k, x @ w[d : 2 * d].T)


def test_split_check_passes_the_solution_and_other_spellings():
    assert check_qkv_split(solution_qkv_split).passed

    def by_weight_rows(x, w_qkv):
        w_q, w_k, w_v = w_qkv.chunk(3, dim=0)  # three [d, d] weights
        return x @ w_q.T, x @ w_k.T, x @ w_v.T

    def by_view(x, w_qkv):
        B, n, d = x.shape
        return (x @ w_qkv.T).view(B, n, 3, d).unbind(2)

    assert check_qkv_split(by_weight_rows).passed
    assert check_qkv_split(by_view).passed


def _swap(i, j):
    def wrong(x, w):
        out = list(solution_qkv_split(x, w))
        out[i], out[j] = out[j], out[i]
        return tuple(out)

    return wrong


def _split_on_dim_1(x, w):
    q, k, v = (x @ w.T).split(x.size(-1), dim=1)  # the positions, not the features
    return q, k, v


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (_swap(0, 1), "q and k come out swapped"),
        (_swap(0, 2), "q and v come out swapped"),
        (
            lambda x, w: (x @ w.T).view(x.size(0), x.size(1), x.size(2), 3).unbind(-1),
            "d groups of (q, k, v)",
        ),
        (lambda x, w: tuple((x @ w.T).chunk(3, dim=1)), "along the positions"),
        (
            lambda x, w: tuple(x @ part for part in w.chunk(3, dim=0)),
            "multiplied x as it is stored",
        ),
        (
            lambda x, w: tuple((x @ w).split(x.size(-1), dim=-1)),
            "cannot multiply it as it is stored",
        ),
        (_split_on_dim_1, "three blocks of d features on its last axis"),
    ],
)
def test_split_check_names_the_mistake(wrong, hint):
    result = check_qkv_split(wrong)
    assert not result.passed
    assert hint in result.message, result.message


def test_a_list_of_three_is_accepted_where_the_tuple_is_asked():
    def as_list(x, w_qkv):
        return list(solution_qkv_split(x, w_qkv))

    assert check_qkv_split(as_list).passed


def test_no_message_gives_the_layout_as_a_fix():
    from gptlib.exercises import qkv

    for message, _ in qkv._SPLIT_MISTAKES:
        assert "the layout is" not in message, message
