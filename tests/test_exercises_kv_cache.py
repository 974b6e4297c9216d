"""Notebook 13's check: the cached decode step. The reference equals the model with a cache and
gives generate's tokens, each kept slip is named by its row, and the promised slips are named."""

import pytest
import torch
import torch.nn.functional as F

from gptlib.config import textbook
from gptlib.exercises import nb13_kv_cache as kv_cache
from gptlib.generate import generate
from gptlib.kvcache import KVCache
from gptlib.model import GPT

check = kv_cache.check_decode_step


def test_solution_equals_the_model_with_a_cache():
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


def test_solution_repeated_gives_the_tokens_of_generate():
    model, *_ = kv_cache._decode_inputs(torch.Generator().manual_seed(1))
    prompt = torch.randint(0, 13, (3, 2), generator=torch.Generator().manual_seed(2))
    expected = generate(model, prompt, 6, temperature=0)
    cache = KVCache(model.cfg, 3)
    with torch.no_grad():
        logits = model(prompt, cache=cache)[0][:, -1:]
    idx = prompt
    for _ in range(6):
        idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        logits = kv_cache.solution_decode_step(model, idx[:, -1:], cache)
    assert torch.equal(idx, expected)


@pytest.mark.parametrize("message, wrong", kv_cache.DECODE_MISTAKES)
def test_each_slip_is_named_by_its_row(message, wrong):
    result = check(wrong)
    assert not result.passed
    assert result.message == f"✗ decode_step: {message}"


def _step_with(attend, position, advance="once"):
    """A decode step written as a reader might, the attention line and position row given, the
    cache advanced once after the blocks, after each block, or never."""

    def step(model, idx_new, cache):
        past, B, d = cache.length, idx_new.size(0), model.cfg.n_embd
        with torch.no_grad():
            x = model.tok_emb(idx_new) + model.pos_emb(torch.tensor([position(past)]))
            for i, block in enumerate(model.blocks):
                a = block.attn
                q, k, v = (a.split_heads(t) for t in a.qkv(x).split(d, dim=2))
                y = attend(q, k, v, cache, i)
                x = block.ln1(x + a.proj(y.transpose(1, 2).reshape(B, 1, d)))
                x = block.ln2(x + block.mlp(x))
                if advance == "each":
                    cache.advance(1)
            if advance == "once":
                cache.advance(1)
            return model.lm_head(model.ln_f(x))

    return step


def _write_then_sdpa(q, k, v, cache, layer, **kwargs):
    k_all, v_all = cache.write(layer, k, v)
    return F.scaled_dot_product_attention(q, k_all, v_all, **kwargs)


def test_promised_slips_written_by_a_reader():
    assert check(_step_with(_write_then_sdpa, lambda past: past)).passed
    causal = _step_with(lambda *a: _write_then_sdpa(*a, is_causal=True), lambda past: past)
    assert "only the first key" in check(causal).message
    row_zero = _step_with(_write_then_sdpa, lambda past: 0)
    assert "read row 0 of the position table" in check(row_zero).message

    def past_only(q, k, v, cache, layer):
        return F.scaled_dot_product_attention(q, cache.keys(layer), cache.values(layer))

    message = check(_step_with(past_only, lambda past: past)).message
    assert "attended only to the cached keys" in message
    every_block = _step_with(_write_then_sdpa, lambda past: past, advance="each")
    assert "advanced in every block" in check(every_block).message
    never = _step_with(_write_then_sdpa, lambda past: past, advance="never")
    assert "never advanced" in check(never).message


def test_unknown_slip_and_wrong_shape_are_reported():
    def doubled(model, idx_new, cache):
        return 2 * kv_cache.solution_decode_step(model, idx_new, cache)

    def flat(model, idx_new, cache):
        return kv_cache.solution_decode_step(model, idx_new, cache)[:, 0]

    assert "values differ" in check(doubled).message
    assert "shape [3, 13], expected [3, 1, 13]" in check(flat).message


def test_check_leaves_the_global_random_stream_alone():
    torch.manual_seed(0)
    check(kv_cache.solution_decode_step)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))
