"""A check cannot be passed by the library: while the reader's function runs, the library calls
that do the exercise raise, and the check names the call. The reference still passes, and every
replaced function is back afterwards, also when the check ends in an exception."""

import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import gptlib
import gptlib.exercises as ex
from gptlib.attention import CausalSelfAttention
from gptlib.bpe import merge_pair
from gptlib.config import microgpt, textbook
from gptlib.data import encode_documents
from gptlib.exercises import kv_cache
from gptlib.exercises.checking import Refused, _resolve, refusal_message, refusing
from gptlib.exercises.refusals import REFUSALS
from gptlib.generate import filter_logits, generate, next_token_probs
from gptlib.mlp import MLP
from gptlib.model import GPT, Block
from gptlib.train import estimate_loss, train

CHECKS = {
    "encode_stream": ex.check_encode_stream,
    "causal_attention": ex.check_causal_attention,
    "split_heads": ex.check_split_heads,
    "temperature_probs": ex.check_temperature_probs,
    "log_softmax": ex.check_log_softmax,
    "lm_loss": ex.check_lm_loss,
    "train_loop": ex.check_train_loop,
    "validation_loss": ex.check_validation_loss,
    "filter_logits": ex.check_filter_logits,
    "sample_step": ex.check_sample_step,
    "decode_step": ex.check_decode_step,
    "rmsnorm": ex.check_gpt_rmsnorm,
    "attention": ex.check_gpt_attention,
    "mlp": ex.check_gpt_mlp,
    "block": ex.check_gpt_block,
    "forward": ex.check_gpt_forward,
    "gpt_loss": ex.check_gpt_loss,
    "train_gpt": ex.check_gpt_train,
    "sample_names": ex.check_gpt_sample,
    "cached_attention": ex.check_gpt_cached_attention,
    "forward_cached": ex.check_gpt_forward_cached,
    "merge": ex.check_merge,
    "to_gptlib": ex.check_to_gptlib,
}
ENTRIES = [(name, r) for name, refusals in REFUSALS.items() for r in refusals]
TINY = textbook(5, block_size=8, n_layer=1, n_head=2, n_embd=8)


def _message(name: str, shown_start: str) -> str:
    [refusal] = [r for r in REFUSALS[name] if r.shown.startswith(shown_start)]
    return refusal_message(name, refusal)


def _originals() -> dict[str, object]:
    """Every refused function where the library keeps it, as stored (a staticmethod as such)."""
    found = {}
    for _, r in ENTRIES:
        owner, attr = _resolve(r.path)
        found[r.path] = owner.__dict__.get(attr, "inherited")
    return found


ORIGINALS = _originals()


def _assert_restored():
    assert _originals() == ORIGINALS
    assert "log_softmax" not in torch.Tensor.__dict__
    assert encode_documents is sys.modules["gptlib.data"].encode_documents
    assert gptlib.estimate_loss is estimate_loss  # the package's re-export too
    q = torch.randn(1, 2, 3, 4)
    F.scaled_dot_product_attention(q, q, q)  # the library works again
    torch.randn(2, 3).log_softmax(-1)


def test_every_exercise_in_the_table_has_a_check_here():
    assert set(REFUSALS) == set(CHECKS)


@pytest.mark.parametrize("path", sorted({r.path for _, r in ENTRIES}))
def test_every_refused_call_exists(path):
    owner, attr = _resolve(path)
    assert callable(getattr(owner, attr))


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_the_reference_still_passes(name):
    check = CHECKS[name]
    result = check(check.solution)
    assert result.passed, result.message
    _assert_restored()


@pytest.mark.parametrize("name, refusal", ENTRIES, ids=[f"{n}-{r.shown}" for n, r in ENTRIES])
def test_a_call_where_the_library_keeps_it_is_refused(name, refusal):
    """The shortcut looks the function up where it lives, at call time, as `F.xxx(...)` or
    `model(...)` do; the check's inputs go straight in (the refusal comes before any use)."""

    def shortcut(*inputs):
        owner, attr = _resolve(refusal.path)
        return getattr(owner, attr)(*inputs)

    result = CHECKS[name](shortcut)
    assert not result.passed
    assert result.message == refusal_message(name, refusal)
    _assert_restored()


# --- the shortcuts a reader would write ----------------------------------------------------------


def _encode_stream(documents, tokenizer):
    return encode_documents(documents, tokenizer)  # the name this module imported


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _sdpa_behind_except(q, k, v):
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    except Exception:  # a reader's catch-all cannot hide the refusal
        return v


def _attention_module(q, k, v):
    CausalSelfAttention(TINY)(torch.zeros(1, 3, 8))
    return v


def _split_heads(x, n_head):
    cfg = textbook(5, block_size=8, n_layer=1, n_head=n_head, n_embd=x.size(-1))
    attn = CausalSelfAttention(cfg)
    return attn.split_heads(x)


def _temperature(logits, temperature):
    return next_token_probs(logits, temperature)


def _lm_loss(logits, labels):
    return GPT.loss(logits, labels)


def _train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    kw = {"max_lr": max_lr, "warmup": warmup, "clip": clip, "seed": seed, "optimizer": optimizer}
    return train(model, tokens, steps, batch_size, **kw).loss


def _validation_loss(model, tokens, batch_size, n_batches, seed):
    return gptlib.estimate_loss(model, tokens, batch_size, n_batches, seed)  # the re-export


def _filter(logits, top_k, top_p):
    return filter_logits(logits, top_k, top_p)


def _filter_through_probs(logits, top_k, top_p):
    probs = next_token_probs(logits, 1.0, top_k, top_p)
    return logits.masked_fill(probs == 0, float("-inf"))


def _sample_step(model, idx, temperature, top_k, top_p, generator):
    return generate(model, idx, 1, temperature, top_k, generator, use_cache=False, top_p=top_p)[
        :, -1:
    ]


def _decode_with_blocks(model, idx_new, cache):
    x = model.tok_emb(idx_new) + model.pos_emb.weight[cache.length]
    for block in model.blocks:
        x = block(x, cache)
    cache.advance(1)
    return model.lm_head(model.ln_f(x))


def _merge(ids, pair, new_id):
    return list(merge_pair(tuple(ids), pair, new_id))


def _rmsnorm(x, gain, eps=1e-5):
    return F.rms_norm(x, (x.size(-1),), gain, eps)


def _rmsnorm_module(x, gain, eps=1e-5):
    norm = nn.RMSNorm(x.size(-1), eps=eps)
    norm.weight.data.copy_(gain)
    return norm(x)


def _mlp(x, w_fc, w_proj):
    return MLP(microgpt(5, n_embd=x.size(-1)))(x)


def _block(x, bw, n_head):
    return Block(microgpt(5, n_embd=x.size(-1), n_head=n_head))(x)


def _forward(w, idx, n_head):
    cfg = microgpt(w["tok_emb"].size(0), n_head=n_head)
    return GPT(cfg)(idx)[0]


def _gpt_loss(forward_fn, w, idx, labels, n_head):
    return GPT.loss(forward_fn(w, idx, n_head), labels)


def _train_gpt(forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, h):
    model = GPT(microgpt(w["tok_emb"].size(0), n_embd=w["tok_emb"].size(1), n_head=h))
    return train(model, tokens, steps, batch_size, max_lr=max_lr, seed=seed).loss


def _sample_names(forward_fn, w, n_head, bos, num, generator, temperature, top_k, max_len):
    model = GPT(microgpt(w["tok_emb"].size(0), n_head=n_head))
    start = torch.full((num, 1), bos)
    return generate(model, start, max_len, temperature, top_k, generator, bos).tolist()


def _forward_cached(w, idx, cache, n_head):
    model = GPT(microgpt(w["tok_emb"].size(0), n_head=n_head))
    return model(idx)[0]


READER_SHORTCUTS = [
    ("encode_stream", _encode_stream, "gptlib.data.encode_documents"),
    ("causal_attention", _sdpa, "F.scaled_dot_product_attention"),
    ("causal_attention", _sdpa_behind_except, "F.scaled_dot_product_attention"),
    ("causal_attention", _attention_module, "CausalSelfAttention.forward"),
    ("split_heads", _split_heads, "CausalSelfAttention.split_heads"),
    ("temperature_probs", _temperature, "gptlib.generate.next_token_probs"),
    ("log_softmax", lambda x: F.log_softmax(x, dim=-1), "F.log_softmax"),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), "torch.log_softmax"),
    ("log_softmax", lambda x: x.log_softmax(-1), "Tensor.log_softmax"),
    ("log_softmax", lambda x: torch.special.log_softmax(x, -1), "torch.special.log_softmax"),
    ("log_softmax", lambda x: nn.LogSoftmax(dim=-1)(x), "F.log_softmax"),
    ("log_softmax", lambda x: -F.cross_entropy(x, x.argmax(-1)), "F.cross_entropy"),
    ("lm_loss", _lm_loss, "GPT.loss"),
    ("train_loop", _train_loop, "gptlib.train.train"),
    ("validation_loss", _validation_loss, "gptlib.train.estimate_loss"),
    ("filter_logits", _filter, "gptlib.generate.filter_logits"),
    ("filter_logits", _filter_through_probs, "gptlib.generate.next_token_probs"),
    ("sample_step", _sample_step, "gptlib.generate.generate"),
    ("decode_step", _decode_with_blocks, "Block.forward"),
    ("merge", _merge, "gptlib.bpe.merge_pair"),
    ("rmsnorm", _rmsnorm, "F.rms_norm"),
    ("rmsnorm", _rmsnorm_module, "nn.RMSNorm"),
    ("attention", lambda x, w_qkv, w_proj, n_head: _sdpa(x, x, x), "F.scaled_dot_product"),
    ("mlp", _mlp, "gptlib.mlp.MLP"),
    ("block", _block, "Block.forward"),
    ("forward", _forward, "GPT.forward"),
    ("gpt_loss", _gpt_loss, "GPT.loss"),
    ("train_gpt", _train_gpt, "gptlib.train.train"),
    ("sample_names", _sample_names, "gptlib.generate.generate"),
    ("cached_attention", lambda x, w_qkv, w_proj, n_head, past: _sdpa(x, x, x), "F.scaled_dot"),
    ("forward_cached", _forward_cached, "GPT.forward"),
]


@pytest.mark.parametrize(
    "name, shortcut, shown",
    READER_SHORTCUTS,
    ids=[f"{n}-{getattr(f, '__name__', '')}-{s}" for n, f, s in READER_SHORTCUTS],
)
def test_a_readers_shortcut_gets_the_refusal(name, shortcut, shown):
    result = CHECKS[name](shortcut)
    assert not result.passed
    assert result.message == _message(name, shown)
    _assert_restored()


def test_the_refusal_reads_as_one_line():
    assert ex.check_causal_attention(_sdpa).message == (
        "✗ causal_attention: write this one yourself: it calls F.scaled_dot_product_attention, "
        "which does the whole exercise"
    )


def test_a_step_that_calls_the_model_is_still_refused():
    def whole_model(model, idx_new, cache):
        return model(idx_new, cache=cache)[0]

    result = ex.check_decode_step(whole_model)
    assert result.message == kv_cache.CALLED_THE_MODEL
    _assert_restored()


def test_what_an_exercise_allows_still_works():
    def lm_loss(logits, labels):  # F.cross_entropy around the shift is the reference's way
        V = logits.size(-1)
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100
        )

    def sample_step(model, idx, temperature, top_k, top_p, generator):  # the library's filter
        logits = model(idx[:, -model.cfg.block_size :])[0][:, -1, :]
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        probs = filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator)

    assert ex.check_lm_loss(lm_loss).passed
    assert ex.check_sample_step(sample_step).passed
    _assert_restored()


def test_only_the_readers_call_is_guarded():
    """The filter's reference is the library's own filter, and the slips of sample_step use it:
    both run while the check runs, outside the reader's call."""
    assert ex.check_filter_logits(ex.solution_filter_logits).passed
    assert (
        "filter ran before the temperature"
        in ex.check_sample_step(lambda *a: kv_filter_first(*a)).message
    )


def kv_filter_first(model, idx, temperature, top_k, top_p, generator):
    """sample_step with the filter before the temperature, written with the reader's own filter."""
    logits = model(idx[:, -model.cfg.block_size :])[0][:, -1, :]
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = ex.solution_filter_logits(logits, top_k, top_p) / temperature
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


# --- everything is put back ----------------------------------------------------------------------


def test_an_exception_inside_the_check_still_restores():
    def interrupted(q, k, v):
        raise KeyboardInterrupt  # not a failure of the reader's code: it ends the check

    with pytest.raises(KeyboardInterrupt):
        ex.check_causal_attention(interrupted)
    _assert_restored()


@pytest.mark.parametrize("error", [ValueError("in the block"), Refused("uncaught")])
def test_refusing_restores_when_its_block_raises(error):
    def reader():  # its __globals__ are this module's, whose encode_documents is replaced too
        pass

    with pytest.raises(type(error)):
        with refusing("encode_stream", reader):
            assert (
                sys.modules["gptlib.data"].encode_documents
                is not ORIGINALS["gptlib.data.encode_documents"]
            )
            with pytest.raises(Refused, match="write this one yourself"):
                encode_documents(["ab"], None)
            raise error
    _assert_restored()


def test_refusing_an_exercise_without_refusals_changes_nothing():
    with refusing("merge_heads"):
        assert (
            F.scaled_dot_product_attention
            is ORIGINALS["torch.nn.functional.scaled_dot_product_attention"]
        )
