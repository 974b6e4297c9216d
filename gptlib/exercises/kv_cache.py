"""Notebook 13, the KV cache: one cached decode step of the whole model.

`decode_step(model, idx_new, cache)`: a `textbook`-preset GPT (post-norm blocks), a `KVCache`
holding `past` positions and the newest token ids idx_new [B, 1] -> the new position's logits
[B, 1, V], computed block by block: the token embedding plus row `past` of the position table;
in each block's attention q, k, v of the new position, k and v appended to that layer's cache
(`cache.update(layer, k, v)`), attention over every cached key with no mask; the MLP and norms;
`cache.advance(1)` once at the end; the final norm and the head. The check compares logits and
the cache afterwards with `model(idx_new, cache=cache)` on a copy of the cache, then lets the
reader's step write a few tokens and compares them with `generate(..., use_cache=True)`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, not_written, solved_by
from gptlib.generate import generate, pick_next
from gptlib.kvcache import KVCache
from gptlib.model import GPT

__all__ = ["check_decode_step", "solution_decode_step"]


# --- the whole decode step -----------------------------------------------------------------------


def solution_decode_step(model: GPT, idx_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """model: a `textbook`-preset GPT (post-norm blocks); cache: a KVCache holding `past` positions;
    idx_new [B, 1] -> logits [B, 1, V]. Every layer's cache gains the new position."""
    past = cache.length  # the new token sits at position `past`
    B, d = idx_new.size(0), model.cfg.n_embd
    with torch.no_grad():
        x = model.tok_emb(idx_new) + model.pos_emb.weight[past]  # [B, 1, d]: row `past`, not 0
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            q, k, v = attn.qkv(x).split(d, dim=2)  # each [B, 1, d]
            q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # [B,h,1,d_h]
            k_all, v_all = cache.update(layer, k, v)  # [B, h, past + 1, d_h]: appended
            scores = q @ k_all.transpose(-2, -1) / math.sqrt(attn.head_dim)  # [B, h, 1, past + 1]
            y = scores.softmax(dim=-1) @ v_all  # [B, h, 1, d_h]; no mask: no key is in the future
            y = attn.proj(y.transpose(1, 2).reshape(B, 1, d))  # heads side by side, then mixed
            x = block.ln1(x + y)  # post-norm: each norm follows its residual add
            x = block.ln2(x + block.mlp(x))
        cache.advance(1)  # once, after the last layer wrote position `past`
        return model.lm_head(model.ln_f(x))  # [B, 1, V]


@torch.no_grad()
def _decode(
    model,
    idx_new,
    cache,
    *,
    row=0,
    keys="all",
    causal=False,
    twice=False,
    advance="once",
    scale="d_h",
    norm="post",
    final_norm=True,
):
    """A decode step with one switch per typical slip (defaults: the reference). `row` is the
    position row relative to `past`; None reads row 0."""
    past = cache.length
    B, d = idx_new.size(0), model.cfg.n_embd
    x = model.tok_emb(idx_new) + model.pos_emb.weight[0 if row is None else past + row]
    for layer, block in enumerate(model.blocks):
        attn = block.attn

        def attend(x_in, layer=layer, attn=attn):
            q, k, v = (attn.split_heads(t) for t in attn.qkv(x_in).split(d, dim=2))
            if keys == "cache_only":  # never appended: the cached past alone
                k_all, v_all = cache.keys(layer), cache.values(layer)
            else:
                k_all, v_all = cache.update(layer, k, v)
                if keys == "new_only":
                    k_all, v_all = k, v
            if twice:
                k_all, v_all = torch.cat([k_all, k], dim=2), torch.cat([v_all, v], dim=2)
            if advance == "every_layer":
                cache.advance(1)
            divisor = {"d_h": math.sqrt(attn.head_dim), "d": math.sqrt(d), "none": 1.0}[scale]
            scores = q @ k_all.transpose(-2, -1) / divisor
            if causal:  # the causal mask's first row, as is_causal=True gives a single query
                n_keys = k_all.size(2)
                first_row = torch.ones(1, n_keys, dtype=torch.bool).triu(diagonal=1)
                scores = scores.masked_fill(first_row, float("-inf"))
            y = scores.softmax(dim=-1) @ v_all
            return attn.proj(y.transpose(1, 2).reshape(B, 1, d))

        if norm == "pre":
            x = x + attend(block.ln1(x))
            x = x + block.mlp(block.ln2(x))
        else:
            x = block.ln1(x + attend(x))
            x = block.ln2(x + block.mlp(x))
    if advance == "once":
        cache.advance(1)
    return model.lm_head(model.ln_f(x) if final_norm else x)


def _decode_slip(**switches):
    def step(model, idx_new, cache):
        return _decode(model, idx_new, cache, **switches)

    return step


DECODE_MISTAKES = [
    (
        "the new token read row 0 of the position table: each step's token is embedded as if it "
        "stood at position 0, not at position past = cache.length",
        _decode_slip(row=None),
    ),
    (
        "the new token read row past + 1 of the position table, one place too far: positions count "
        "from 0",
        _decode_slip(row=1),
    ),
    (
        "the new position attended only to the cached keys and was never stored: its own key and "
        "value are missing from the attention and from the cache",
        _decode_slip(keys="cache_only"),
    ),
    (
        "the new position attended only to its own key, [B, h, 1, d_h]: the past keys the cache "
        "holds were left out",
        _decode_slip(keys="new_only"),
    ),
    (
        "a causal mask on the single new query (is_causal=True, or the mask's first row) leaves it "
        "only the first key, although every cached key lies in its past",
        _decode_slip(causal=True),
    ),
    (
        "the new key and value were appended twice: cache.update already returns them, and "
        "concatenating k again adds a second copy",
        _decode_slip(twice=True),
    ),
    (
        "the cache was advanced once per layer, so later layers wrote at the wrong position",
        _decode_slip(advance="every_layer"),
    ),
    (
        "the logits are right but the cache was not advanced (cache.length stays past), so the next "
        "step would overwrite this position",
        _decode_slip(advance="never"),
    ),
    (
        "the scores are not scaled: your softmax reads the raw dot products, which makes it too "
        "peaked",
        _decode_slip(scale="none"),
    ),
    (
        "you divided by sqrt(d), the model width; the scale uses one head's width, d_h",
        _decode_slip(scale="d"),
    ),
    (
        "the blocks were run pre-norm (x + attn(ln1(x))); the `textbook` preset is post-norm, where "
        "each norm follows its residual addition",
        _decode_slip(norm="pre"),
    ),
    (
        "the final norm is missing: the head read the last block's output directly",
        _decode_slip(final_norm=False),
    ),
]

CALLED_THE_MODEL = (
    "✗ decode_step: your step called model(...) itself; write the step out block by block "
    "(embeddings, each block's attention with the cache, MLP and norms, the head)"
)


def _small_gpt(g: torch.Generator) -> GPT:
    cfg = textbook(vocab_size=13, block_size=10, n_layer=2, n_head=2, n_embd=16)
    with torch.random.fork_rng():  # building a model must not move the notebook's stream
        model = GPT(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() >= 2:  # larger weights than the init: position-dependent, peaked logits
                p.copy_(0.7 * noise)
            else:  # norms away from the identity, so that leaving one out shows
                p.copy_(1 + 0.3 * noise if name.endswith("weight") else 0.2 * noise)
    return model


def _decode_inputs() -> Callable[[torch.Generator], tuple]:
    pasts = iter([3, 8, 5])  # cached positions before the step (past + n_layer <= block_size)

    def make(g: torch.Generator) -> tuple:
        past = next(pasts)
        model = _small_gpt(g)
        ids = torch.randint(0, model.cfg.vocab_size, (3, past + 1), generator=g)
        cache = KVCache(model.cfg, 3)
        with torch.no_grad():
            model(ids[:, :past], cache=cache)  # prefill: `past` positions cached
        return model, ids[:, past:], cache

    return make


def _on_a_copy(fn: Callable) -> Callable:
    """Run a decode step on a copy of the cache; return its logits and the cache it leaves:
    (logits, length, every layer's stored keys, stored values)."""

    def run(model, idx_new, cache):
        mine = copy.deepcopy(cache)
        logits = fn(model, idx_new.clone(), mine)
        return (
            logits,
            torch.tensor(mine.length),
            torch.stack(mine._k),  # [L, B, h, block_size, d_h], the whole storage
            torch.stack(mine._v),
        )

    return run


def _library_decode(model, idx_new, cache):
    with torch.no_grad():
        return model(idx_new, cache=cache)[0]


def _calls_the_model(decode_step: Callable) -> bool:
    model, idx_new, cache = _decode_inputs()(torch.Generator().manual_seed(0))
    called = []
    hook = model.register_forward_pre_hook(lambda module, args: called.append(True))
    try:
        decode_step(model, idx_new, copy.deepcopy(cache))
    except NotImplementedError:
        raise
    except Exception:  # compare reports the reader's errors
        return False
    finally:
        hook.remove()
    return bool(called)


def _tokens(model, prompt, steps, seed, decode_step=None) -> torch.Tensor:
    """Sample `steps` tokens after `prompt`: gptlib's generate, or a prefill then the step."""
    if decode_step is None:
        g = torch.Generator().manual_seed(seed)
        return generate(model, prompt, steps, 1.0, generator=g, use_cache=True)
    g = torch.Generator().manual_seed(seed)
    cache = KVCache(model.cfg, prompt.size(0))
    with torch.no_grad():
        logits = model(prompt, cache=cache)[0]  # prefill: the prompt in one pass
    idx = torch.cat([prompt, pick_next(logits[:, -1], 1.0, None, g)], dim=1)
    for _ in range(steps - 1):
        logits = decode_step(model, idx[:, -1:], cache)  # [B, 1, V]
        idx = torch.cat([idx, pick_next(logits[:, -1], 1.0, None, g)], dim=1)
    return idx


@solved_by(solution_decode_step)
def check_decode_step(decode_step: Callable) -> CheckResult:
    """Run `decode_step(model, idx_new, cache)` on small random `textbook`-preset GPTs (2 layers,
    2 heads, 3 sequences, 3 to 8 cached positions) against `model(idx_new, cache=cache)`: the
    logits, and the cache it leaves behind. Then sample 7 tokens with it and compare with
    `generate(..., use_cache=True)`."""
    try:
        if _calls_the_model(decode_step):
            return CheckResult(False, CALLED_THE_MODEL)
    except NotImplementedError:
        return not_written("decode_step")
    result = compare(
        "decode_step",
        _on_a_copy(decode_step),
        _on_a_copy(_library_decode),
        _decode_inputs(),
        mistakes=[(hint, _on_a_copy(fn)) for hint, fn in DECODE_MISTAKES],
    )
    if not result.passed:
        return result
    model = _small_gpt(torch.Generator().manual_seed(7))
    prompt = torch.randint(
        0, model.cfg.vocab_size, (4, 3), generator=torch.Generator().manual_seed(8)
    )
    expected = _tokens(model, prompt, 7, seed=9)
    try:
        got = _tokens(model, prompt, 7, seed=9, decode_step=decode_step)
    except Exception as e:
        return CheckResult(False, f"✗ decode_step: repeated steps raised {type(e).__name__}: {e}")
    if not torch.equal(got, expected):
        return CheckResult(
            False,
            "✗ decode_step: one step matches, but repeated steps wrote other tokens than "
            "generate(..., use_cache=True); does your step depend on anything but the cache?",
        )
    return CheckResult(
        True,
        "✓ decode_step: logits and cache match model(idx_new, cache=cache) on 3 random models, "
        "and 7 sampled tokens equal generate(..., use_cache=True)",
    )
