"""Notebook 13, the KV cache: `decode_step(model, idx_new, cache)`, one cached step of a
`textbook` (post-norm) GPT written out block by block, idx_new [B, 1] -> logits [B, 1, V]; the
logits and the cache it leaves are compared with `model(idx_new, cache=cache)`'s, on a copy. As in
GPT.forward, each block writes its keys and values with `cache.write`, and `cache.advance(1)` after
the last block is the one place the cache's length moves."""

from __future__ import annotations

import copy
from functools import partial

import torch
import torch.nn.functional as F

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.kvcache import KVCache
from gptlib.language import N_
from gptlib.model import GPT

__all__ = ["check_decode_step", "solution_decode_step"]


def solution_decode_step(model: GPT, idx_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """idx_new [B, 1], cache holding `past` positions -> logits [B, 1, V]; the cache gains one
    (each block writes position `past`, then one `cache.advance(1)` after the last block)."""
    past = cache.length  # the new token sits at position `past`
    B, d = idx_new.size(0), model.cfg.n_embd
    with torch.no_grad():
        x = model.tok_emb(idx_new) + model.pos_emb.weight[past]  # [B, 1, d]: row `past`, not 0
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            q, k, v = attn.qkv(x).split(d, dim=2)  # each [B, 1, d]
            q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # [B,h,1,d_h]
            k_all, v_all = cache.write(layer, k, v)  # [B, h, past + 1, d_h]; length stays past
            scores = q @ k_all.transpose(-2, -1) / attn.head_dim**0.5  # [B, h, 1, past + 1]
            y = scores.softmax(dim=-1) @ v_all  # [B, h, 1, d_h]; no mask: no key is in the future
            y = attn.proj(y.transpose(1, 2).reshape(B, 1, d))  # heads side by side, then mixed
            x = block.ln1(x + y)  # post-norm: each norm follows its residual add
            x = block.ln2(x + block.mlp(x))
        cache.advance(1)  # every layer has written position `past`: the cache now holds past + 1
        return model.lm_head(model.ln_f(x))  # [B, 1, V]


def _on_a_copy(fn, model, idx_new, cache):
    """A decode step on a copy of the cache: (logits, length, every layer's keys, values)."""
    mine = copy.deepcopy(cache)
    logits = fn(model, idx_new, mine)
    return logits, torch.tensor(mine.length), torch.stack(mine._k), torch.stack(mine._v)


def _decode(model, idx_new, cache, *, row0=False, append=True, causal=False, pre_norm=False,
            scale=None, advance="once"):  # fmt: skip
    """A decode step with one switch flipped (none: the reference)."""
    past, B, d = cache.length, idx_new.size(0), model.cfg.n_embd
    x = model.tok_emb(idx_new) + model.pos_emb.weight[0 if row0 else past]
    for layer, block in enumerate(model.blocks):
        a = block.attn
        h = block.ln1(x) if pre_norm else x
        q, k, v = (a.split_heads(t) for t in a.qkv(h).split(d, dim=2))
        k, v = cache.write(layer, k, v) if append else (cache.keys(layer), cache.values(layer))
        y = a.proj(F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                   .transpose(1, 2).reshape(B, 1, d))  # fmt: skip
        x = x + y if pre_norm else block.ln1(x + y)
        x = x + block.mlp(block.ln2(x)) if pre_norm else block.ln2(x + block.mlp(x))
        if advance == "each":
            cache.advance(1)
    if advance == "once":
        cache.advance(1)
    return model.lm_head(model.ln_f(x))


DECODE_MISTAKES = [
    (N_("the new token read row 0 of the position table: each step's token is embedded as if it "
        "stood at position 0, not at position past = cache.length"), partial(_decode, row0=True)),
    (N_("the new position attended only to the cached keys and was never stored: its own key and "
        "value are missing from the attention and from the cache"), partial(_decode, append=False)),
    (N_("a causal mask on the single new query (is_causal=True, or the mask's first row) leaves it "
        "only the first key, though every cached key lies in its past"),
     partial(_decode, causal=True)),
    (N_("the blocks were run pre-norm (x + attn(ln1(x))), where the `textbook` preset is "
        "post-norm: each norm follows its residual addition"), partial(_decode, pre_norm=True)),
    (N_("the scores are not scaled: each is sqrt(d_h) times too large, so the new token's softmax "
        "over the cached keys is sharper than the model's"), partial(_decode, scale=1.0)),
    (N_("the cache was advanced in every block: from the second block on, each writes one position "
        "further on and its query meets a key and value never written; advance it once, after the "
        "last block"), partial(_decode, advance="each")),
    (N_("the cache was never advanced: the logits are right, but its length still counts only the "
        "positions it held before, so the next step would overwrite this one; call "
        "cache.advance(1) once, after the last block"), partial(_decode, advance="never")),
]  # fmt: skip


def _decode_inputs(g: torch.Generator) -> tuple:
    past = (3, 8, 5)[g.initial_seed() % 3]  # cached positions before the step
    cfg = textbook(vocab_size=13, block_size=10, n_layer=2, n_head=2, n_embd=16)
    with torch.random.fork_rng():  # building a model must not move the notebook's stream
        model = GPT(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # larger weights, norms away from the identity
            noise = torch.randn(p.shape, generator=g)
            p.copy_(0.7 * noise if p.dim() >= 2 else 0.3 * noise + ("weight" in name))
        ids = torch.randint(0, cfg.vocab_size, (3, past + 1), generator=g)
        cache = KVCache(cfg, 3)
        model(ids[:, :past], cache=cache)  # prefill: `past` positions cached
    return model, ids[:, past:], cache


@solved_by(solution_decode_step)
def check_decode_step(decode_step) -> CheckResult:
    """Run `decode_step(model, idx_new, cache)` on small random `textbook` GPTs (2 layers, 3
    sequences, 3 to 8 cached positions) against `model(idx_new, cache=cache)`, logits and cache."""
    readers = lambda *inputs: _on_a_copy(decode_step, *inputs)  # noqa: E731 (its refusals are read)
    return compare("decode_step", readers, partial(_on_a_copy, solution_decode_step),
                   _decode_inputs, [(m, partial(_on_a_copy, f)) for m, f in DECODE_MISTAKES],
                   grads=False, no_grad=True)  # fmt: skip
