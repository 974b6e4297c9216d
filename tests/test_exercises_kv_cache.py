"""The cached-attention check passes the solution and names each typical mistake."""

import math

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises
from gptlib.exercises import kv_cache


def test_solution_passes():
    result = kv_cache.check_attend_with_cache(kv_cache.solution_attend_with_cache)
    assert result.passed
    assert result.message.startswith("✓ attend_with_cache")


def test_exported_from_the_package():
    assert exercises.check_attend_with_cache is kv_cache.check_attend_with_cache
    assert exercises.solution_attend_with_cache is kv_cache.solution_attend_with_cache


def test_solution_is_the_last_row_of_full_causal_attention():
    g = torch.Generator().manual_seed(0)
    q_all, k_all, v_all = (torch.randn(2, 3, 7, 4, generator=g) for _ in range(3))
    full = F.scaled_dot_product_attention(q_all, k_all, v_all, is_causal=True)  # [2, 3, 7, 4]
    out = kv_cache.solution_attend_with_cache(
        q_all[:, :, -1:], k_all[:, :, -1:], v_all[:, :, -1:], k_all[:, :, :-1], v_all[:, :, :-1]
    )
    assert out.shape == (2, 3, 1, 4)
    torch.testing.assert_close(out, full[:, :, -1:])


def test_the_library_layer_computes_the_same_step():
    """The solution reproduces what CausalSelfAttention does with a KVCache, head by head."""
    from gptlib.attention import CausalSelfAttention
    from gptlib.config import textbook
    from gptlib.kvcache import KVCache

    cfg = textbook(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8, attention="manual")
    torch.manual_seed(0)
    attn = CausalSelfAttention(cfg).eval()
    x = torch.randn(1, 6, 8)
    cache = KVCache(cfg, 1)
    with torch.no_grad():
        attn(x[:, :5], cache)
        cache.advance(5)
        q, k, v = (attn.split_heads(t) for t in attn.qkv(x[:, 5:]).split(8, dim=2))
        y = kv_cache.solution_attend_with_cache(q, k, v, cache.keys(0), cache.values(0))
        expected = attn(x)[:, -1:]  # full recompute, last position
    torch.testing.assert_close(attn.proj(y.transpose(1, 2).reshape(1, 1, 8)), expected)


def test_sdpa_as_the_readers_answer_passes():
    def fused(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        return F.scaled_dot_product_attention(q, k, v)

    assert kv_cache.check_attend_with_cache(fused).passed


@pytest.mark.parametrize("hint, wrong", kv_cache.MISTAKES, ids=lambda m: getattr(m, "__name__", ""))
def test_each_mistake_gets_its_hint(hint, wrong):
    result = kv_cache.check_attend_with_cache(wrong)
    assert not result.passed
    assert result.message == f"✗ attend_with_cache: {hint}"


def test_readers_mistakes_written_out():
    def forgot_append(q, k_new, v_new, k_cache, v_cache):
        scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.size(-1))
        return scores.softmax(-1) @ v_cache

    def causal_flag(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def masked_new_key(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        scores[..., -1] = float("-inf")  # "the future": but the last key is the query's own
        return scores.softmax(-1) @ v

    def sqrt_d(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
        d = q.size(1) * q.size(-1)
        return (q @ k.transpose(-2, -1) / d**0.5).softmax(-1) @ v

    assert "append k_new and v_new" in kv_cache.check_attend_with_cache(forgot_append).message
    assert "first row of the causal mask" in kv_cache.check_attend_with_cache(causal_flag).message
    assert "append k_new and v_new" in kv_cache.check_attend_with_cache(masked_new_key).message
    assert "sqrt(d_h)" in kv_cache.check_attend_with_cache(sqrt_d).message


def test_stub_and_shape_messages():
    def stub(q, k_new, v_new, k_cache, v_cache):
        raise NotImplementedError

    assert "not written yet" in kv_cache.check_attend_with_cache(stub).message

    def all_rows(q, k_new, v_new, k_cache, v_cache):  # returns every position, not just the new
        return torch.cat([v_cache, v_new], 2)

    message = kv_cache.check_attend_with_cache(all_rows).message
    assert "shape" in message and "[2, 3, 1, 4]" in message
