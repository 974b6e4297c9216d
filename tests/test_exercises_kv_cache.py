"""Notebook 12's checks: the whole cached decode step and the cached attention line. The stubs say
they are not written yet, the references pass, and each typical mistake gets its own hint."""

import math

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises
from gptlib.config import textbook
from gptlib.exercises import kv_cache
from gptlib.exercises.checking import not_written
from gptlib.generate import generate
from gptlib.kvcache import KVCache
from gptlib.model import GPT


def test_solution_passes():
    result = kv_cache.check_attend_with_cache(kv_cache.solution_attend_with_cache)
    assert result.passed
    assert result.message.startswith("✓ attend_with_cache")


def test_exported_from_the_package_and_linked_to_the_solutions():
    assert exercises.check_attend_with_cache is kv_cache.check_attend_with_cache
    assert exercises.solution_attend_with_cache is kv_cache.solution_attend_with_cache
    assert exercises.check_decode_step is kv_cache.check_decode_step
    assert kv_cache.check_attend_with_cache.solution is kv_cache.solution_attend_with_cache
    assert kv_cache.check_decode_step.solution is kv_cache.solution_decode_step


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

    assert kv_cache.check_attend_with_cache(stub).message == (
        "attend_with_cache is not written yet: replace its body and run this cell again"
    )

    def all_rows(q, k_new, v_new, k_cache, v_cache):  # returns every position, not just the new
        return torch.cat([v_cache, v_new], 2)

    message = kv_cache.check_attend_with_cache(all_rows).message
    assert "shape" in message and "[2, 3, 1, 4]" in message


# --- decode_step ------------------------------------------------------------------------------------


def test_decode_stub_is_not_written_yet():
    def decode_stub(model, idx_new, cache):
        raise NotImplementedError  # your code here

    result = kv_cache.check_decode_step(decode_stub)
    assert not result.passed
    assert result.message == not_written("decode_step").message
    assert result.message == (
        "decode_step is not written yet: replace its body and run this cell again"
    )


def test_decode_solution_passes():
    result = kv_cache.check_decode_step(kv_cache.solution_decode_step)
    assert result.passed
    assert result.message.startswith("✓ decode_step: logits and cache match")


def test_decode_solution_equals_the_model_with_a_cache():
    cfg = textbook(vocab_size=11, block_size=12, n_layer=3, n_head=2, n_embd=16)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    ids = torch.randint(0, 11, (2, 7))
    mine, theirs = KVCache(cfg, 2), KVCache(cfg, 2)
    with torch.no_grad():
        model(ids[:, :6], cache=mine)
        model(ids[:, :6], cache=theirs)
        expected = model(ids[:, 6:], cache=theirs)[0]
        full = model(ids)[0][:, -1:]
    got = kv_cache.solution_decode_step(model, ids[:, 6:], mine)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got, full)
    assert mine.length == theirs.length == 7
    for layer in range(3):
        torch.testing.assert_close(mine.keys(layer), theirs.keys(layer))
        torch.testing.assert_close(mine.values(layer), theirs.values(layer))


def test_decode_solution_repeated_gives_the_tokens_of_generate():
    model = kv_cache._small_gpt(torch.Generator().manual_seed(1))
    prompt = torch.randint(0, 13, (3, 2), generator=torch.Generator().manual_seed(2))
    expected = generate(model, prompt, 8, generator=torch.Generator().manual_seed(3))
    got = kv_cache._tokens(model, prompt, 8, 3, decode_step=kv_cache.solution_decode_step)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("hint, wrong", kv_cache.DECODE_MISTAKES)
def test_each_decode_mistake_gets_its_hint(hint, wrong):
    result = kv_cache.check_decode_step(wrong)
    assert not result.passed
    assert result.message == f"✗ decode_step: {hint}"


def _step_with(attend, position):
    """A decode step written as a reader might, with the attention line and the position row
    as arguments."""

    def step(model, idx_new, cache):
        past = cache.length
        B, d = idx_new.size(0), model.cfg.n_embd
        with torch.no_grad():
            x = model.tok_emb(idx_new) + model.pos_emb(torch.tensor([position(past)]))
            for i, block in enumerate(model.blocks):
                a = block.attn
                q, k, v = (a.split_heads(t) for t in a.qkv(x).split(d, dim=2))
                y = attend(q, k, v, cache, i)
                x = block.ln1(x + a.proj(y.transpose(1, 2).reshape(B, 1, d)))
                x = block.ln2(x + block.mlp(x))
            cache.advance(1)
            return model.lm_head(model.ln_f(x))

    return step


def _update_then_sdpa(q, k, v, cache, layer, **kwargs):
    k_all, v_all = cache.update(layer, k, v)
    return F.scaled_dot_product_attention(q, k_all, v_all, **kwargs)


def test_readers_decode_steps_written_out():
    fused = _step_with(_update_then_sdpa, lambda past: past)
    assert kv_cache.check_decode_step(fused).passed

    causal_first_try = _step_with(
        lambda q, k, v, c, i: _update_then_sdpa(q, k, v, c, i, is_causal=True), lambda past: past
    )
    assert "only the first key" in kv_cache.check_decode_step(causal_first_try).message

    row_zero_slip = _step_with(_update_then_sdpa, lambda past: 0)
    assert "read row 0 of the position table" in kv_cache.check_decode_step(row_zero_slip).message

    def past_only(q, k, v, cache, layer):
        return F.scaled_dot_product_attention(q, cache.keys(layer), cache.values(layer))

    forgot_append_mistake = _step_with(past_only, lambda past: past)
    message = kv_cache.check_decode_step(forgot_append_mistake).message
    assert "attended only to the cached keys" in message


def test_decode_check_refuses_a_call_to_the_model():
    def shortcut_slip(model, idx_new, cache):
        return model(idx_new, cache=cache)[0]

    result = kv_cache.check_decode_step(shortcut_slip)
    assert not result.passed
    assert result.message == kv_cache.CALLED_THE_MODEL


def test_decode_check_reports_an_unknown_slip_and_a_wrong_shape():
    def doubled_slip(model, idx_new, cache):
        return 2 * kv_cache.solution_decode_step(model, idx_new, cache)

    assert "values differ" in kv_cache.check_decode_step(doubled_slip).message

    def flat_slip(model, idx_new, cache):
        return kv_cache.solution_decode_step(model, idx_new, cache)[:, 0]

    assert "shape [3, 13], expected [3, 1, 13]" in kv_cache.check_decode_step(flat_slip).message


def test_decode_check_leaves_the_global_random_stream_alone():
    torch.manual_seed(0)
    kv_cache.check_decode_step(kv_cache.solution_decode_step)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))
