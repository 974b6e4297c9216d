import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from builders import random_ids

from gptlib.attention import CausalSelfAttention
from gptlib.config import GPTConfig, gpt2, microgpt, textbook
from gptlib.kvcache import KVCache
from gptlib.model import GPT, check_inputs, parameter_formula
from gptlib.norms import LayerNorm, RMSNorm
from gptlib.train import make_optimizer


def _ids(cfg, B=3, n=None, seed=0):
    return random_ids(cfg, B, n, seed)


@pytest.mark.parametrize("attention", ["manual", "sdpa"])
def test_causality(any_preset, attention):
    """Changing tokens after position t leaves the logits at positions <= t unchanged."""
    torch.manual_seed(0)
    cfg = any_preset.replace(attention=attention)
    model = GPT(cfg).eval()
    idx = _ids(cfg)
    t = cfg.block_size // 2
    changed = idx.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % cfg.vocab_size
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1])
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])


def test_manual_equals_sdpa(any_preset):
    torch.manual_seed(0)
    manual = GPT(any_preset.replace(attention="manual")).eval()
    sdpa = GPT(any_preset.replace(attention="sdpa")).eval()
    sdpa.load_state_dict(manual.state_dict())
    idx = _ids(any_preset)
    torch.testing.assert_close(manual(idx)[0], sdpa(idx)[0], atol=1e-5, rtol=0)


def test_attention_paths_agree_on_random_inputs():
    torch.manual_seed(1)
    cfg = textbook(block_size=16, n_embd=64, n_head=8)
    a = CausalSelfAttention(cfg.replace(attention="manual")).eval()
    b = CausalSelfAttention(cfg.replace(attention="sdpa")).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 16, 64)
    torch.testing.assert_close(a(x), b(x), atol=1e-5, rtol=0)


def test_multi_head_equals_loop_over_single_heads():
    torch.manual_seed(0)
    cfg = textbook(block_size=10, n_embd=32, n_head=4, attention="manual")
    attn = CausalSelfAttention(cfg).eval()
    x = torch.randn(2, 10, 32)
    d, dh = 32, 8
    Wq, Wk, Wv = attn.qkv.weight.split(d, dim=0)  # each [d, d]; rows of head i: i*dh..(i+1)*dh
    mask = torch.triu(torch.ones(10, 10, dtype=torch.bool), 1)
    heads = []
    for i in range(4):
        rows = slice(i * dh, (i + 1) * dh)
        q, k, v = x @ Wq[rows].T, x @ Wk[rows].T, x @ Wv[rows].T  # [B, n, dh]
        s = (q @ k.transpose(1, 2)) / math.sqrt(dh)
        heads.append(s.masked_fill(mask, float("-inf")).softmax(-1) @ v)
    expected = attn.proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(attn(x), expected, atol=1e-6, rtol=1e-5)


def test_attention_weights_are_causal_rows_summing_to_one(small_textbook):
    torch.manual_seed(0)
    model = GPT(small_textbook)
    idx = _ids(small_textbook, B=2)
    maps = model.attention_maps(idx)
    L, h, n = small_textbook.n_layer, small_textbook.n_head, small_textbook.block_size
    assert maps.shape == (L, 2, h, n, n)
    torch.testing.assert_close(maps.sum(-1), torch.ones(L, 2, h, n))
    assert maps.triu(1).abs().max() == 0
    assert all(b.attn.use_sdpa for b in model.blocks)  # the fused path is back after the pass
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks


def test_attention_maps_of_the_fused_model_are_the_readable_paths_weights(small_textbook):
    """attention_maps runs the readable path for its pass, whichever path the model uses, and
    its maps are the weights that path multiplies with v."""
    torch.manual_seed(0)
    fused = GPT(small_textbook.replace(attention="sdpa")).eval()
    readable = GPT(small_textbook.replace(attention="manual")).eval()
    readable.load_state_dict(fused.state_dict())
    idx = _ids(small_textbook, B=2, n=9)
    maps = fused.attention_maps(idx)
    assert maps.shape == (small_textbook.n_layer, 2, small_textbook.n_head, 9, 9)
    assert torch.equal(maps, readable.attention_maps(idx))
    attn = readable.blocks[0].attn
    with torch.no_grad():
        x = readable.drop(readable.tok_emb(idx) + readable.pos_emb(torch.arange(9)))
        h = x if readable.cfg.norm_placement == "post" else readable.blocks[0].ln1(x)
        _, _, v = (attn.split_heads(t) for t in attn.qkv(h).split(small_textbook.n_embd, dim=2))
        y = (maps[0] @ v).transpose(1, 2).reshape(2, 9, -1)
        torch.testing.assert_close(attn.proj(y), attn(h), atol=1e-6, rtol=1e-5)
    assert fused.blocks[0].attn.use_sdpa and not attn.use_sdpa  # each model's own path kept


def test_the_attention_weights_pass_a_named_hook_point_that_adds_no_state(small_textbook):
    """`attn.weights` is an identity the readable path passes its softmax weights through before
    dropout: a hook there sees exactly attention_maps' weights, the fused path never calls it,
    and the state_dict has no key for it (the checkpoints in assets/ load as before). A pre-hook
    on `attn_drop` still sees the same weights."""
    torch.manual_seed(0)
    model = GPT(small_textbook.replace(attention="manual")).eval()
    attn = model.blocks[1].attn
    assert isinstance(attn.weights, torch.nn.Identity)
    assert not any(".weights" in k for k in model.state_dict())
    fresh = GPT(small_textbook)  # the same keys, whatever the path
    assert list(model.state_dict()) == list(fresh.state_dict())
    idx = _ids(small_textbook, B=2, n=7)
    seen, dropped = [], []
    h1 = attn.weights.register_forward_hook(lambda m, args, out: seen.append(out))
    h2 = attn.attn_drop.register_forward_pre_hook(lambda m, args: dropped.append(args[0]))
    with torch.no_grad():
        model(idx)
    maps = model.attention_maps(idx)
    assert len(seen) == 2 and torch.equal(seen[0], maps[1]) and torch.equal(dropped[0], maps[1])
    fresh.load_state_dict(model.state_dict())  # strict: no key missing or left over
    h1.remove(), h2.remove()
    called = []
    fused = fresh.blocks[1].attn
    fused.weights.register_forward_hook(lambda m, args, out: called.append(out))
    with torch.no_grad():
        fresh(idx)
    assert fused.use_sdpa and called == []  # the fused kernel never forms the weights


def test_the_checkpoints_in_assets_load_with_the_hook_point():
    from gptlib.checkpoint import load_checkpoint

    model = load_checkpoint(Path(__file__).parent.parent / "assets" / "names-textbook.pt").model
    assert all(isinstance(b.attn.weights, torch.nn.Identity) for b in model.blocks)
    maps = model.attention_maps(torch.zeros(1, 4, dtype=torch.long))
    torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]))


def test_attention_maps_restore_the_path_after_an_error(small_textbook):
    model = GPT(small_textbook)
    with pytest.raises(ValueError, match="exceeds block_size"):
        model.attention_maps(torch.zeros(1, small_textbook.block_size + 1, dtype=torch.long))
    assert all(b.attn.use_sdpa for b in model.blocks)
    for m in model.modules():
        assert not m._forward_pre_hooks and not m._forward_hooks


def _fused_step(cfg, past, n, seed=0):
    """One sdpa attention layer after `past` cached positions, fed n new ones: its output, and
    the new queries and every key and value (from the cache) it attended with."""
    torch.manual_seed(seed)
    attn = CausalSelfAttention(cfg.replace(attention="sdpa")).eval()
    cache = KVCache(cfg, 2)
    x = torch.randn(2, past + n, cfg.n_embd)
    with torch.no_grad():
        if past:
            attn(x[:, :past], cache)
            cache.advance(past)  # what GPT.forward does after its blocks
        out = attn(x[:, past:], cache)
        cache.advance(n)
        q = attn.split_heads(attn.qkv(x[:, past:]).split(cfg.n_embd, dim=2)[0])
    assert cache.length == past + n
    return attn, out, q, cache.keys(0), cache.values(0)


@pytest.mark.parametrize("past, n", [(0, 1), (0, 6), (5, 1), (5, 3)])
def test_the_fused_path_is_one_sdpa_call_with_the_mask_it_needs(past, n):
    """Nothing cached: is_causal=True; one new query: no mask; a prefill after cached
    positions: the buffer's rows past..past+n-1, inverted (sdpa's True means "may attend")."""
    cfg = textbook(block_size=12, n_layer=1, n_embd=32, n_head=4)
    attn, out, q, k, v = _fused_step(cfg, past, n)
    if past == 0:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    elif n == 1:
        y = F.scaled_dot_product_attention(q, k, v)
    else:
        allowed = ~attn.future[past : past + n, : past + n]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    with torch.no_grad():
        expected = attn.proj(y.transpose(1, 2).reshape(2, n, cfg.n_embd))
    assert torch.equal(out, expected)  # bit for bit: the very call, not a near one
    if past and n > 1:  # the mask is needed: without it the new queries would see their future
        with torch.no_grad():
            unmasked = F.scaled_dot_product_attention(q, k, v)
            unmasked = attn.proj(unmasked.transpose(1, 2).reshape(2, n, cfg.n_embd))
        assert not torch.allclose(out, unmasked)


def test_rmsnorm_equals_torch():
    x = torch.randn(4, 7, 16)
    ours = RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16))
    ref = torch.nn.RMSNorm(16, eps=1e-5)
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), ref(x))
    # eps is inside the square root: a zero vector stays finite and zero
    assert torch.equal(ours(torch.zeros(1, 16)), torch.zeros(1, 16))


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_equals_torch(bias):
    x = torch.randn(4, 7, 16) * 3 + 1
    ours = LayerNorm(16, bias=bias)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16))
        if bias:
            ours.bias.copy_(torch.randn(16))
    ref = torch.nn.LayerNorm(16, bias=bias)
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), ref(x))


@pytest.mark.parametrize("tie", [True, False])
def test_parameter_count_closed_form(tie):
    cfg = textbook(vocab_size=65, tie_embeddings=tie)
    V, T, d, L = 65, 64, 128, 4
    closed = V * d + T * d + 12 * L * d * d + (4 * L + 2) * d + (0 if tie else V * d)
    model = GPT(cfg)
    assert model.num_parameters() == closed == parameter_formula(cfg)


@pytest.mark.parametrize(
    "cfg",
    [
        microgpt(),
        textbook(bias=True),
        textbook(norm="rmsnorm", norm_placement="pre", norm_bias=False),
    ],
)
def test_parameter_formula_matches_other_configs(cfg):
    assert GPT(cfg).num_parameters() == parameter_formula(cfg)


def test_tied_head_is_one_parameter_counted_and_optimised_once(small_textbook):
    model = GPT(small_textbook)
    assert model.lm_head.weight is model.tok_emb.weight
    names = [n for n, _ in model.named_parameters()]
    assert "tok_emb.weight" in names and "lm_head.weight" not in names
    opt = make_optimizer(model)
    all_params = [p for g in opt.param_groups for p in g["params"]]
    assert len(all_params) == len({id(p) for p in all_params}) == len(list(model.parameters()))
    assert sum(p is model.tok_emb.weight for p in all_params) == 1
    untied = GPT(small_textbook.replace(tie_embeddings=False))
    assert untied.lm_head.weight is not untied.tok_emb.weight


def test_init_is_normal_002_after_tying():
    torch.manual_seed(0)
    model = GPT(textbook(vocab_size=65))
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            assert abs(p.std().item() - 0.02) < 0.002, name
        else:  # norm gains start at 1, biases at 0
            assert torch.all((p == 1) | (p == 0)), name


def test_gpt2_preset_starts_its_residual_projections_at_002_over_sqrt_2L():
    """The gpt2 preset draws attn.proj and mlp.proj with std 0.02/sqrt(2L) (GPT-2's start), every
    other matrix with 0.02; the scaling is a multiplication of the same draws (the random stream
    and every other weight are those of the unscaled start), and the other presets keep 0.02."""
    cfg = gpt2(vocab_size=97, block_size=16, n_layer=6, n_head=4, n_embd=96)
    assert cfg.scale_residual_init and not textbook().scale_residual_init
    assert not microgpt().scale_residual_init
    torch.manual_seed(0)
    model = GPT(cfg)
    after = torch.rand(1)
    torch.manual_seed(0)
    plain = GPT(cfg.replace(scale_residual_init=False))
    assert torch.equal(after, torch.rand(1))  # no extra draw
    want = 0.02 / math.sqrt(2 * cfg.n_layer)
    for name, p in model.named_parameters():
        if p.dim() < 2:
            continue
        if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
            assert abs(p.std().item() - want) < 0.1 * want, name
            assert torch.allclose(p, plain.get_parameter(name) / math.sqrt(2 * cfg.n_layer)), name
        else:
            assert abs(p.std().item() - 0.02) < 0.002, name
            assert torch.equal(p, plain.get_parameter(name)), name
    pooled = torch.cat([b.attn.proj.weight.flatten() for b in model.blocks])
    assert abs(pooled.std().item() - want) < 0.03 * want  # 55,296 numbers: a close estimate
    # How the weights start is not the architecture: the flag survives a checkpoint's dict but
    # does not make two configs of the same network unequal.
    assert GPTConfig.from_dict(cfg.to_dict()).scale_residual_init
    assert cfg == cfg.replace(scale_residual_init=False)


def test_loss_at_init_is_near_ln_v():
    torch.manual_seed(0)
    cfg = textbook(vocab_size=65, block_size=32, n_layer=2)
    model = GPT(cfg)
    idx = _ids(cfg, B=8)
    _, loss = model(idx, idx)
    assert abs(loss.item() - math.log(65)) < 0.15


def test_shift_happens_inside_the_loss(small_textbook):
    torch.manual_seed(0)
    model = GPT(small_textbook)
    idx = _ids(small_textbook)
    logits, loss = model(idx, idx)
    V = small_textbook.vocab_size
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, expected)
    unshifted = F.cross_entropy(logits.reshape(-1, V), idx.reshape(-1))
    assert not torch.isclose(loss, unshifted)


def test_ignored_labels_leave_the_denominator(small_textbook):
    torch.manual_seed(0)
    model = GPT(small_textbook)
    idx = _ids(small_textbook)
    labels = idx.clone()
    labels[:, 6:] = -100
    logits, loss = model(idx, labels)
    V = small_textbook.vocab_size
    expected = F.cross_entropy(logits[:, :5].reshape(-1, V), idx[:, 1:6].reshape(-1))
    torch.testing.assert_close(loss, expected)


def test_too_long_sequence_names_both_lengths(small_textbook):
    model = GPT(small_textbook)
    with pytest.raises(ValueError, match=r"n=13 exceeds block_size=12"):
        model(torch.zeros(1, 13, dtype=torch.long))


def test_bad_inputs_are_rejected(small_textbook):
    model = GPT(small_textbook)
    with pytest.raises(ValueError, match=r"0\.\.10"):
        model(torch.tensor([[3, 11]]))
    with pytest.raises(ValueError, match=r"\[B, n\]"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="labels must have the shape"):
        model(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))


def test_check_inputs_counts_the_cached_positions(small_textbook):
    """The refusals live in one function: it returns n, counts `past` cached positions against
    block_size (naming both parts), and leaves a decode step's ids unread (only the way in)."""
    T = small_textbook.block_size
    idx = torch.zeros(2, 5, dtype=torch.long)
    assert check_inputs(idx, small_textbook) == 5
    assert check_inputs(idx, small_textbook, past=T - 5) == 5  # exactly fills the table
    with pytest.raises(ValueError, match=rf"{T - 4} cached \+ 5 new = {T + 1}.*block_size={T}"):
        check_inputs(idx, small_textbook, past=T - 4)
    bad = torch.full((1, 1), 99)
    with pytest.raises(ValueError, match=r"0\.\.10"):
        check_inputs(bad, small_textbook)  # the way in: read
    assert check_inputs(bad, small_textbook, past=3) == 1  # a decode step: not read back
    model, cache = GPT(small_textbook), KVCache(small_textbook, 1)
    model(torch.zeros(1, T - 1, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=rf"{T - 1} cached \+ 2 new"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=cache)  # forward refuses the same way
    assert cache.length == T - 1  # and refuses before anything is written


def test_token_ids_off_the_cpu_are_not_read_back(small_textbook):
    """On another device the ids are not checked: reading idx.min() back would make the host wait
    for the device at every step. A meta tensor has no values to read, so any read would raise;
    the same out-of-range ids on the CPU are refused (test_bad_inputs_are_rejected)."""
    model = GPT(small_textbook).to("meta")
    idx = torch.full((2, 5), small_textbook.vocab_size + 3, dtype=torch.long, device="meta")
    logits, loss = model(idx, idx)  # a training step's forward: no value is read back
    assert logits.device.type == "meta" and logits.shape == (2, 5, small_textbook.vocab_size)
    assert loss is not None and loss.device.type == "meta"


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_block_structure(placement):
    """pre: x + f(norm(x)); post: norm(x + f(x)) — checked against the block's own parts."""
    torch.manual_seed(0)
    cfg = textbook(block_size=6, n_embd=16, n_head=2, norm_placement=placement)
    block = GPT(cfg).blocks[0]
    x = torch.randn(2, 6, 16)
    if placement == "pre":
        h = x + block.attn(block.ln1(x))
        expected = h + block.mlp(block.ln2(h))
    else:
        h = block.ln1(x + block.attn(x))
        expected = block.ln2(h + block.mlp(h))
    torch.testing.assert_close(block(x), expected)


def test_dropout_only_in_train_mode(small_textbook):
    torch.manual_seed(0)
    model = GPT(small_textbook.replace(dropout=0.2))
    idx = _ids(small_textbook)
    model.train()
    assert not torch.allclose(model(idx)[0], model(idx)[0])
    model.eval()
    torch.testing.assert_close(model(idx)[0], model(idx)[0])
