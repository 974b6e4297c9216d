"""The KV cache: what it stores, its shapes and bytes, logits equal to the full forward pass, and
what happens when the sequence reaches block_size."""

import pytest
import torch
from builders import random_ids, sharp_model
from torch.utils.flop_counter import FlopCounterMode

from gptlib.config import microgpt, textbook
from gptlib.generate import generate, pick_next
from gptlib.kvcache import KVCache, forward_flops, memory_bytes
from gptlib.model import attention_weights

ATTENTIONS = ["manual", "sdpa"]


_model = sharp_model
_ids = random_ids


# --- what is stored, and its size --------------------------------------------------------------


def test_shapes_and_bytes_follow_the_formula(any_preset):
    cfg = any_preset
    model = _model(cfg)
    B, n0 = 2, 5
    cache = KVCache(cfg, B)
    assert cache.length == 0 and cache.nbytes == 0
    model(_ids(cfg, B, n0), cache=cache)
    for n in (n0, n0 + 1):
        for layer in range(cfg.n_layer):
            assert cache.keys(layer).shape == (B, cfg.n_head, n, cfg.head_dim)
            assert cache.values(layer).shape == (B, cfg.n_head, n, cfg.head_dim)
        assert cache.length == n
        expected = 2 * cfg.n_layer * B * cfg.n_head * n * cfg.head_dim * 4
        assert cache.nbytes == expected
        assert cache.nbytes == memory_bytes(cfg.n_layer, B, cfg.n_head, n, cfg.head_dim, 4)
        # What is filled equals what the keys and values of all layers really occupy.
        real = sum(
            cache.keys(i).numel() * 4 + cache.values(i).numel() * 4 for i in range(cfg.n_layer)
        )
        assert cache.nbytes == real
        model(_ids(cfg, B, 1, seed=1), cache=cache)


def test_memory_bytes_examples():
    # the `textbook` preset (L 4, h 4, d_h 32) with a full block of 64, batch 1, fp32: 256 KiB
    assert memory_bytes(4, 1, 4, 64, 32, 4) == 262_144
    # GPT-2-small-sized settings: L 12, h 12, d_h 64, n 1024 -> 72 MiB in fp32, 36 MiB in fp16
    assert memory_bytes(12, 1, 12, 1024, 64, 4) == 75_497_472 == 72 * 2**20
    assert memory_bytes(12, 1, 12, 1024, 64, 2) == 36 * 2**20
    cache = KVCache(textbook(), 3, dtype=torch.float16)
    k = torch.zeros(3, 4, 10, 32, dtype=torch.float16)
    for layer in range(4):
        cache.write(layer, k, k)
    cache.advance(10)
    assert cache.nbytes == memory_bytes(4, 3, 4, 10, 32, 2)


def test_write_keeps_the_length_and_advance_moves_it_once():
    cfg = textbook(n_layer=3)
    cache = KVCache(cfg, 2)
    k = torch.randn(2, cfg.n_head, 5, cfg.head_dim)
    for layer in range(3):
        keys, values = cache.write(layer, k, 2 * k)
        assert keys.shape == (2, cfg.n_head, 5, cfg.head_dim) and torch.equal(values, 2 * k)
        assert cache.length == 0  # writing stores the positions; only advance counts them
    cache.advance(5)
    assert cache.length == 5
    one = torch.randn(2, cfg.n_head, 1, cfg.head_dim)
    for layer in range(3):
        keys, _ = cache.write(layer, one, one)
        assert keys.shape[2] == 6 and cache.length == 5  # every layer sees the same 5 cached
        torch.testing.assert_close(keys, torch.cat([k, one], dim=2), rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"layer 3 is not in this cache: it holds layers 0\.\.2"):
        cache.write(3, one, one)
    with pytest.raises(ValueError, match="-1"):
        cache.advance(-1)
    cache.advance(1)
    assert cache.length == 6 and not hasattr(cache, "update")  # one way: write, then advance


def test_forward_advances_the_cache_once_after_the_last_block(small_textbook):
    """Each attention writes and leaves the length alone; GPT.forward moves it after the blocks."""
    model = _model(small_textbook)
    cache = KVCache(small_textbook, 1)
    model(_ids(small_textbook, 1, 4), cache=cache)
    seen = []
    hooks = [
        b.attn.register_forward_hook(lambda m, args, out: seen.append(cache.length))
        for b in model.blocks
    ]
    for part in (model.blocks[-1], model.ln_f):
        hooks.append(part.register_forward_hook(lambda m, args, out: seen.append(cache.length)))
    model(_ids(small_textbook, 1, 3, seed=1), cache=cache)
    for hook in hooks:
        hook.remove()
    # every attention and the whole last block see 4; the final norm, after the advance, 7
    assert seen == [4] * (small_textbook.n_layer + 1) + [7]
    assert cache.length == 7


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_cache_holds_the_keys_and_values_of_the_full_forward(any_preset, attention):
    """Fed in pieces, the cache ends up with exactly the K and V a single full pass computes."""
    cfg = any_preset.replace(attention=attention)
    model = _model(cfg)
    idx = _ids(cfg, 2, cfg.block_size)
    captured = {}

    def keep_qkv(layer):
        def hook(module, inputs, out):  # out [B, n, 3d]
            _, k, v = out.split(cfg.n_embd, dim=2)
            captured[layer] = (module_split(k), module_split(v))

        return hook

    def module_split(t):  # [B, n, d] -> [B, h, n, d_h]
        return t.view(t.shape[0], t.shape[1], cfg.n_head, cfg.head_dim).transpose(1, 2)

    handles = [b.attn.qkv.register_forward_hook(keep_qkv(i)) for i, b in enumerate(model.blocks)]
    try:
        model(idx)
    finally:
        for h in handles:
            h.remove()
    cache = KVCache(cfg, 2)
    model(idx[:, :3], cache=cache)
    for t in range(3, cfg.block_size):
        model(idx[:, t : t + 1], cache=cache)
    for layer in range(cfg.n_layer):
        k, v = captured[layer]
        torch.testing.assert_close(cache.keys(layer), k, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache.values(layer), v, atol=1e-5, rtol=1e-5)


# --- the cached step computes what the full forward computes -----------------------------------


def _check_each_step(cfg, n0):
    """Prefill n0 positions, then decode one at a time to block_size; every step's logits must
    equal the last row of a full forward over the whole sequence so far, to 1e-5."""
    model = _model(cfg)
    idx = _ids(cfg, 2, cfg.block_size)
    cache = KVCache(cfg, 2)
    with torch.no_grad():
        prefill, _ = model(idx[:, :n0], cache=cache)  # [B, n0, V]
        full, _ = model(idx[:, :n0])
        torch.testing.assert_close(prefill, full, atol=1e-5, rtol=0)
        for t in range(n0, cfg.block_size):
            step, _ = model(idx[:, t : t + 1], cache=cache)  # [B, 1, V]
            assert step.shape == (2, 1, cfg.vocab_size)
            full, _ = model(idx[:, : t + 1])  # the recompute: every position again
            torch.testing.assert_close(step[:, 0], full[:, -1], atol=1e-5, rtol=0)
    assert cache.length == cfg.block_size


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("n0", [1, 4])
def test_each_cached_step_matches_the_full_forward(any_preset, attention, n0):
    _check_each_step(any_preset.replace(attention=attention), n0)


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_each_cached_step_matches_at_textbook_preset_size(attention):
    _check_each_step(textbook(vocab_size=27, attention=attention), 1)  # block 64, d 128, L 4


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_several_new_positions_after_a_cache(any_preset, attention):
    """n_new > 1 with a non-empty cache: the mask rows past..past+n_new-1 apply."""
    cfg = any_preset.replace(attention=attention)
    model = _model(cfg)
    idx = _ids(cfg, 3, cfg.block_size)
    full, _ = model(idx)
    cache = KVCache(cfg, 3)
    pieces = []
    for start in range(0, cfg.block_size, 3):
        logits, _ = model(idx[:, start : start + 3], cache=cache)
        pieces.append(logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_attention_weights_with_a_cache_are_rows_of_the_full_map(small_textbook):
    cfg = small_textbook.replace(attention="manual")
    model = _model(cfg)
    idx = _ids(cfg, 1, 7)
    full = model.attention_maps(idx)  # [L, B, h, n, n]
    cache = KVCache(cfg, 1)
    model(idx[:, :6], cache=cache)
    with attention_weights(model) as seen:
        model(idx[:, 6:], cache=cache)
    step = torch.stack(seen)  # [L, B, h, 1, 7]: one query, 7 keys
    assert step.shape == (cfg.n_layer, 1, cfg.n_head, 1, 7)
    torch.testing.assert_close(step[..., 0, :], full[..., -1, :], atol=1e-5, rtol=1e-5)


def test_reset_starts_again_with_the_same_storage(small_textbook):
    model = _model(small_textbook)
    idx = _ids(small_textbook, 1, 6)
    cache = KVCache(small_textbook, 1)
    first, _ = model(idx, cache=cache)
    storage = cache.keys(0).data_ptr()
    cache.reset()
    assert cache.length == 0 and cache.nbytes == 0
    again, _ = model(idx, cache=cache)
    torch.testing.assert_close(again, first)
    assert cache.keys(0).data_ptr() == storage  # no new allocation


# --- limits: the position table, the batch ------------------------------------------------------


def test_a_full_cache_refuses_one_more_position(any_preset):
    cfg = any_preset
    model = _model(cfg)
    T = cfg.block_size
    cache = KVCache(cfg, 1)
    model(_ids(cfg, 1, T), cache=cache)
    assert cache.length == T
    with pytest.raises(ValueError, match=f"exceeds block_size={T}"):
        model(_ids(cfg, 1, 1), cache=cache)
    assert cache.length == T  # unchanged by the refused call
    k = torch.zeros(1, cfg.n_head, 1, cfg.head_dim)
    with pytest.raises(ValueError, match="capacity"):
        cache.write(0, k, k)
    with pytest.raises(ValueError, match="capacity"):
        cache.advance(1)
    assert cache.length == T


def test_cache_of_another_batch_size_is_refused(small_textbook):
    model = _model(small_textbook)
    cache = KVCache(small_textbook, 2)
    with pytest.raises(ValueError, match="batch 2"):
        model(_ids(small_textbook, 3, 4), cache=cache)


# --- FLOPs per step -----------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [textbook(attention="manual"), microgpt(attention="manual")])
def test_forward_flops_equals_pytorchs_count(cfg):
    model = _model(cfg)
    n = cfg.block_size
    idx = _ids(cfg, 2, n)
    with FlopCounterMode(display=False) as full:
        model(idx)
    assert full.get_total_flops() == forward_flops(cfg, n, batch_size=2)
    cache = KVCache(cfg, 2)
    model(idx[:, : n - 1], cache=cache)
    with FlopCounterMode(display=False) as step:
        model(idx[:, n - 1 :], cache=cache)
    assert step.get_total_flops() == forward_flops(cfg, 1, n - 1, batch_size=2)


def test_cached_step_flops_grow_linearly_recompute_quadratically():
    cfg = textbook()
    d, L, V = cfg.n_embd, cfg.n_layer, cfg.vocab_size
    for t in (1, 16, 64):
        assert forward_flops(cfg, 1, t - 1) == L * (24 * d * d + 4 * t * d) + 2 * d * V
        assert forward_flops(cfg, t) == t * (L * 24 * d * d + 2 * d * V) + L * 4 * t * t * d
    assert forward_flops(cfg, 64) / forward_flops(cfg, 1, 63) > 60


# --- block_size: the documented rebuild ----------------------------------------------------------


def _record_calls(model):
    """Record (cached positions before the call, new positions) for every model call, and the
    largest position index the position table is asked for."""
    calls, positions = [], []

    def before(module, args, kwargs):
        cache = kwargs.get("cache")
        calls.append((cache.length if cache is not None else None, args[0].shape[1]))

    def on_pos(module, args, out):
        positions.append(int(args[0].max()))

    handles = [
        model.register_forward_pre_hook(before, with_kwargs=True),
        model.pos_emb.register_forward_hook(on_pos),
    ]
    return calls, positions, handles


def test_cache_lengths_at_block_size_follow_the_docstring():
    cfg = microgpt(vocab_size=11)  # block_size 8: rebuilt from the last 4 tokens
    model = _model(cfg)
    calls, positions, handles = _record_calls(model)
    try:
        generate(model, _ids(cfg, 1, 3), 20, temperature=0)
    finally:
        for h in handles:
            h.remove()
    cycle = [(0, 4), (4, 1), (5, 1), (6, 1), (7, 1)]  # rebuild: 4 positions, then grow to 8
    expected = [(0, 3), (3, 1), (4, 1), (5, 1), (6, 1), (7, 1)] + cycle + cycle + cycle[:4]
    assert calls == expected
    assert max(positions) == cfg.block_size - 1  # the last row of the table, never past it


@pytest.mark.parametrize("block_size, keep", [(1, 1), (2, 1), (5, 2), (8, 4)])
def test_rebuild_keeps_half_a_block_at_least_one_token(block_size, keep):
    cfg = textbook(vocab_size=11, block_size=block_size, n_layer=1, n_head=2, n_embd=8)
    model = _model(cfg)
    calls, positions, handles = _record_calls(model)
    try:
        out = generate(model, _ids(cfg, 1, 1), 3 * block_size + 2, temperature=0)
    finally:
        for h in handles:
            h.remove()
    assert out.shape == (1, 1 + 3 * block_size + 2)
    rebuilds = [n for past, n in calls[1:] if past == 0]
    assert rebuilds and set(rebuilds) == {keep}
    # Every call before a rebuild found the cache exactly full.
    for before, call in zip(calls, calls[1:], strict=False):
        if call[0] == 0:
            assert before[0] + before[1] == block_size
    assert max(positions) == block_size - 1


def _reference_cache_path(model, idx, max_new, temperature, generator):
    """The cache path's documented contexts, recomputed without a cache: the context starts at
    the prompt (its last T tokens), grows by one per step, and when it would exceed T it starts
    again at the newest T // 2 tokens."""
    T = model.cfg.block_size
    keep = max(1, T // 2)
    start = max(0, idx.size(1) - T)
    for _ in range(max_new):
        if idx.size(1) - start > T:
            start = idx.size(1) - keep
        logits, _ = model(idx[:, start:])
        nxt = pick_next(logits[:, -1], temperature=temperature, generator=generator)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("n0", [1, 3, 20])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_three_blocks_of_tokens_match_a_hand_rebuilt_reference(
    any_preset, attention, n0, temperature
):
    cfg = any_preset.replace(attention=attention)
    model = _model(cfg)
    T = cfg.block_size
    prompt = _ids(cfg, 2, n0)  # n0 = 20 is longer than either block: cropped to T first
    calls, positions, handles = _record_calls(model)
    try:
        out = generate(
            model,
            prompt,
            3 * T,
            temperature=temperature,
            generator=torch.Generator().manual_seed(5),
        )
    finally:
        for h in handles:
            h.remove()
    assert max(positions) <= T - 1
    with torch.no_grad():
        ref = _reference_cache_path(
            model, prompt, 3 * T, temperature, torch.Generator().manual_seed(5)
        )
    assert out.shape == (2, n0 + 3 * T)
    assert torch.equal(out, ref)


def test_generation_stays_in_the_table_for_many_blocks(any_preset):
    model = _model(any_preset)
    T = any_preset.block_size
    calls, positions, handles = _record_calls(model)
    try:
        out = generate(model, _ids(any_preset, 2, 2), 10 * T, generator=torch.Generator())
    finally:
        for h in handles:
            h.remove()
    assert out.shape == (2, 2 + 10 * T)
    assert max(positions) == T - 1
    assert all(past + n <= T for past, n in calls)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_cache_on_cuda(attention):
    cfg = textbook(vocab_size=11, block_size=16, n_layer=2, n_embd=32, attention=attention)
    model = _model(cfg).cuda()
    prompt = _ids(cfg, 2, 3).cuda()
    with_cache = generate(model, prompt, 14, temperature=0)
    without = generate(model, prompt, 14, temperature=0, use_cache=False)
    assert with_cache.device.type == "cuda"
    assert torch.equal(with_cache, without)
    cache = KVCache(cfg, 2, device="cuda")
    model(prompt, cache=cache)
    assert cache.keys(0).device.type == "cuda"
