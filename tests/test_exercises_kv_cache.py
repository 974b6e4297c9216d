"""Notebook 13's check: the whole cached decode step. The stub says it is not written yet, the
reference passes, and each typical mistake gets its own hint."""

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


def test_exported_from_the_package_and_linked_to_the_solution():
    assert exercises.check_decode_step is kv_cache.check_decode_step
    assert kv_cache.check_decode_step.solution is kv_cache.solution_decode_step


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
