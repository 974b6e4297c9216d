import pytest
import torch

from gptlib import GPT, microgpt
from gptlib.exercises import (
    check_qkv_split,
    check_soft_lookup,
    solution_qkv_split,
    solution_soft_lookup,
)


def test_split_matches_the_attention_layer():
    torch.manual_seed(0)
    attn = GPT(microgpt(vocab_size=11)).blocks[0].attn
    x = torch.randn(2, 5, 16)
    q, k, v = solution_qkv_split(attn.qkv(x), 4)
    d = 16
    w = attn.qkv.weight  # [3d, d]: rows 0..d-1 make q, d..2d-1 make k, 2d..3d-1 make v
    for got, rows in ((q, w[:d]), (k, w[d : 2 * d]), (v, w[2 * d :])):
        assert got.shape == (2, 4, 5, 4)
        torch.testing.assert_close(got, attn.split_heads(x @ rows.T))


def test_split_check_passes_the_solution():
    assert check_qkv_split(solution_qkv_split).passed

    def with_chunk_and_permute(qkv, n_head):
        B, n, _ = qkv.shape
        t = qkv.view(B, n, 3, n_head, -1).permute(2, 0, 3, 1, 4)  # [3, B, h, n, d_h]
        return t[0], t[1], t[2]

    assert check_qkv_split(with_chunk_and_permute).passed


def _per_part(fn):
    def split(qkv, n_head):
        d = qkv.size(-1) // 3
        return tuple(fn(t, n_head) for t in qkv.split(d, dim=2))

    return split


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (lambda qkv, h: (lambda q, k, v: (k, q, v))(*solution_qkv_split(qkv, h)), "swapped"),
        (
            lambda qkv, h: tuple(
                qkv.view(qkv.size(0), qkv.size(1), h, 3, -1).permute(3, 0, 2, 1, 4)
            ),
            "first split the 3d features",
        ),
        (
            _per_part(lambda t, h: t.reshape(t.size(0), h, t.size(1), -1)),
            "without a transpose",
        ),
        (
            _per_part(lambda t, h: t.reshape(t.size(0), t.size(1), -1, h).permute(0, 3, 1, 2)),
            "not [B, n, d_h, h]",
        ),
        (_per_part(lambda t, h: t.reshape(t.size(0), t.size(1), h, -1)), "heads go before"),
    ],
)
def test_split_check_names_the_mistake(wrong, hint):
    result = check_qkv_split(wrong)
    assert not result.passed
    assert hint in result.message, result.message


def test_soft_lookup_solution():
    keys = torch.tensor([[10.0, 0.0], [0.0, 10.0]])
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    weights, result = solution_soft_lookup(torch.tensor([1.0, 0.0]), keys, values)
    assert weights.sum().item() == pytest.approx(1.0)
    assert weights[0].item() > 0.9999  # a query that matches key 0 much better reads value 0
    torch.testing.assert_close(result, values[0], atol=1e-3, rtol=0)
    assert check_soft_lookup(solution_soft_lookup).passed


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (
            lambda q, k, v: (
                w := torch.nn.functional.one_hot((k @ q).argmax(), k.size(0)).float(),
                w @ v,
            ),
            "hard lookup",
        ),
        (lambda q, k, v: (k @ q, (k @ q) @ v), "through a softmax"),
        (lambda q, k, v: (torch.full((k.size(0),), 1 / k.size(0)), v.mean(0)), "same weight"),
        (lambda q, k, v: ((k @ q).softmax(0), (k @ q).softmax(0) @ k), "averages the keys"),
        (
            lambda q, k, v: (w := (k @ q / k.size(1) ** 0.5).softmax(0), w @ v),
            "sqrt(d_k)",
        ),
    ],
)
def test_soft_lookup_check_names_the_mistake(wrong, hint):
    result = check_soft_lookup(wrong)
    assert not result.passed
    assert hint in result.message, result.message
