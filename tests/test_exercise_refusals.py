"""A check may say, read from the function's source, that it calls the one library function
that does the exercise's whole job ("write this one yourself"). Nothing is patched: the library
is itself while a check runs, the reference passes, and a shortcut the source does not show
(a module called as model(x), a copied answer) passes and teaches nothing, as the README says."""

import pytest
import torch
import torch.nn.functional as F

import gptlib
import gptlib.exercises as ex
from gptlib.attention import CausalSelfAttention
from gptlib.bpe import merge_pair
from gptlib.config import microgpt, textbook
from gptlib.data import encode_documents
from gptlib.exercises.checking import _target, refusal_message, shortcut
from gptlib.exercises.table import REFUSALS
from gptlib.generate import filter_logits, generate, next_token_probs
from gptlib.model import GPT
from gptlib.train import train

CHECKS = {
    "encode_stream": ex.check_encode_stream,
    "causal_attention": ex.check_causal_attention,
    "split_heads": ex.check_split_heads,
    "temperature_probs": ex.check_temperature_probs,
    "log_softmax": ex.check_log_softmax,
    "lm_loss": ex.check_lm_loss,
    "train_loop": ex.check_train_loop,
    "adamw_step": ex.check_adamw_step,
    "clip_grad_norm": ex.check_clip_grad_norm,
    "validation_loss": ex.check_validation_loss,
    "filter_logits": ex.check_filter_logits,
    "sample_step": ex.check_sample_step,
    "decode_step": ex.check_decode_step,
    "rmsnorm": ex.check_rmsnorm,
    "forward": ex.check_forward,
    "cached_attention": ex.check_cached_attention,
    "forward_cached": ex.check_forward_cached,
    "merge": ex.check_merge,
    "learn_merges": ex.check_learn_merges,
    "to_gptlib": ex.check_to_gptlib,
}
ENTRIES = [(name, r) for name, refusals in REFUSALS.items() for r in refusals]
TINY = textbook(5, block_size=8, n_layer=1, n_head=2, n_embd=8)


def _message(name: str, shown_start: str) -> str:
    [refusal] = [r for r in REFUSALS[name] if r.named.startswith(shown_start)]
    return refusal_message(name, refusal)


def test_every_exercise_in_the_table_has_a_check_here():
    assert set(REFUSALS) <= set(CHECKS)


@pytest.mark.parametrize("path", sorted({r.path for _, r in ENTRIES}))
def test_every_refused_call_exists(path):
    assert callable(_target(path)), path


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_the_reference_still_passes(name):
    check = CHECKS[name]
    result = check(check.solution)
    assert result.passed, result.message


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


def _split_heads(x, n_head):
    cfg = textbook(5, block_size=8, n_layer=1, n_head=n_head, n_embd=x.size(-1))
    attn = CausalSelfAttention(cfg)
    return attn.split_heads(x)


def _temperature(logits, temperature):
    return next_token_probs(logits, temperature=temperature)


def _lm_loss(logits, labels):
    return GPT.loss(logits, labels)


def _train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    kw = {"max_lr": max_lr, "warmup": warmup, "clip": clip, "seed": seed, "optimizer": optimizer}
    return train(model, tokens, steps, batch_size, **kw).loss


def _validation_loss(model, tokens, batch_size, n_batches, seed):
    return gptlib.estimate_loss(model, tokens, batch_size, n_batches, seed)  # the re-export


def _filter(logits, top_k, top_p):
    return filter_logits(logits, top_k=top_k, top_p=top_p)


def _filter_through_probs(logits, top_k, top_p):
    probs = next_token_probs(logits, temperature=1.0, top_k=top_k, top_p=top_p)
    return logits.masked_fill(probs == 0, float("-inf"))


def _sample_step(model, idx, temperature, top_k, top_p, generator):
    return generate(
        model,
        idx,
        1,
        temperature=temperature,
        top_k=top_k,
        generator=generator,
        use_cache=False,
        top_p=top_p,
    )[:, -1:]


def _merge(ids, pair, new_id):
    return list(merge_pair(tuple(ids), pair, new_id))


def _rmsnorm(x, gain, eps=1e-5):
    return F.rms_norm(x, (x.size(-1),), gain, eps)


def _forward_cached(w, idx, cache, n_head):
    model = GPT(microgpt(w["tok_emb"].size(0), n_head=n_head))
    return model(idx)[0]


READER_SHORTCUTS = [
    ("encode_stream", _encode_stream, "gptlib.data.encode_documents"),
    ("causal_attention", _sdpa, "F.scaled_dot_product_attention"),
    ("causal_attention", _sdpa_behind_except, "F.scaled_dot_product_attention"),
    ("split_heads", _split_heads, "CausalSelfAttention.split_heads"),
    ("temperature_probs", _temperature, "gptlib.generate.next_token_probs"),
    ("log_softmax", lambda x: F.log_softmax(x, dim=-1), "F.log_softmax"),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), "torch.log_softmax"),
    ("log_softmax", lambda x: x.log_softmax(-1), "Tensor.log_softmax"),
    ("log_softmax", lambda x: torch.special.log_softmax(x, -1), "torch.special.log_softmax"),
    ("log_softmax", lambda x: -F.cross_entropy(x, x.argmax(-1)), "F.cross_entropy"),
    ("lm_loss", _lm_loss, "GPT.loss"),
    ("train_loop", _train_loop, "gptlib.train.train"),
    ("validation_loss", _validation_loss, "gptlib.train.estimate_loss"),
    ("filter_logits", _filter, "gptlib.generate.filter_logits"),
    ("filter_logits", _filter_through_probs, "gptlib.generate.next_token_probs"),
    ("sample_step", _sample_step, "gptlib.generate.generate"),
    ("merge", _merge, "gptlib.bpe.merge_pair"),
    ("rmsnorm", _rmsnorm, "F.rms_norm"),
    ("cached_attention", lambda x, w_qkv, w_proj, n_head, past: _sdpa(x, x, x), "F.scaled_dot"),
]


@pytest.mark.parametrize(
    "name, fn, shown",
    READER_SHORTCUTS,
    ids=[f"{n}-{getattr(f, '__name__', '')}-{s}" for n, f, s in READER_SHORTCUTS],
)
def test_a_readers_shortcut_is_named_from_its_source(name, fn, shown):
    assert shortcut(name, [fn]) == _message(name, shown)


@pytest.mark.parametrize(
    "name, fn, shown",
    [
        c
        for c in READER_SHORTCUTS
        if c[0]
        in (
            "causal_attention",
            "encode_stream",
            "log_softmax",
            "merge",
            "rmsnorm",
            "temperature_probs",
            "filter_logits",
        )
    ][:8],
)
def test_the_check_answers_with_the_refusal(name, fn, shown):
    result = CHECKS[name](fn)
    assert not result.passed and result.message == _message(name, shown)


def test_the_refusal_reads_as_one_line():
    message = ex.check_causal_attention(_sdpa).message
    assert message.startswith("✗ causal_attention:") and "\n" not in message
    assert "F.scaled_dot_product_attention" in message  # names the call it found


def test_nothing_is_patched_while_a_check_runs():
    seen = {}

    def looks(q, k, v):
        seen["sdpa"] = torch.nn.functional.__dict__["scaled_dot_product_attention"]
        seen["encode"] = gptlib.data.encode_documents
        n = q.size(-2)
        s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
        return (
            s.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -torch.inf).softmax(-1)
            @ v
        )

    assert ex.check_causal_attention(looks).passed
    assert seen["sdpa"] is F.scaled_dot_product_attention
    assert seen["encode"] is encode_documents


def test_a_name_of_the_readers_own_is_not_the_library():
    def log_softmax(x, dim=-1):  # the reader's own function of the same name, called by a helper
        m = x.max(dim=dim, keepdim=True).values
        return x - m - (x - m).exp().sum(dim=dim, keepdim=True).log()

    def uses_own(x, dim=-1):
        return log_softmax(x, dim)

    assert shortcut("log_softmax", [log_softmax]) is None
    assert shortcut("log_softmax", [uses_own]) is None
    assert ex.check_log_softmax(uses_own).passed


def test_what_an_exercise_allows_still_works():
    def lm_loss(logits, labels):  # log_softmax and gather are the exercise's own way
        logp = logits[:, :-1].log_softmax(-1)  # log_softmax is notebook 09's other exercise
        target = labels[:, 1:]
        keep = target != -100
        picked = logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return -(picked * keep).sum() / keep.sum()

    def with_cross_entropy(logits, labels):
        V = logits.size(-1)
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100
        )

    assert shortcut("lm_loss", [lm_loss]) is None
    assert ex.check_lm_loss(lm_loss).passed
    assert "F.cross_entropy" in ex.check_lm_loss(with_cross_entropy).message


def test_an_exercise_without_refusals_refuses_nothing():
    assert shortcut("merge_heads", [_sdpa]) is None


# --- a shortcut imported or built inside the body is the same shortcut ------------------------


def _adamw_built_in_the_body(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, wd):
    from torch.optim import AdamW

    p = torch.nn.Parameter(param.clone())
    p.grad = grad
    AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=wd).step()
    return p.detach(), exp_avg, exp_avg_sq


def _clip_imported_in_the_body(grads, max_norm):
    from torch.nn.utils import get_total_norm as total

    norm = total(grads)
    return norm, [g * min(1.0, max_norm / (float(norm) + 1e-6)) for g in grads]


def _rms_norm_imported_in_the_body(x, gain, eps=1e-5):
    import torch.nn.functional as G

    return G.rms_norm(x, (x.size(-1),), gain, eps)


def _attention_module_built_in_the_body(q, k, v):
    attn = CausalSelfAttention(TINY)
    return attn(q)


@pytest.mark.parametrize(
    "name, fn, shown",
    [
        ("adamw_step", _adamw_built_in_the_body, "torch.optim.AdamW"),
        ("clip_grad_norm", _clip_imported_in_the_body, "torch.nn.utils.get_total_norm"),
        ("rmsnorm", _rms_norm_imported_in_the_body, "F.rms_norm"),
        ("causal_attention", _attention_module_built_in_the_body, "CausalSelfAttention.forward"),
    ],
)
def test_a_shortcut_imported_or_built_in_the_body_is_refused(name, fn, shown):
    assert shortcut(name, [fn]) == _message(name, shown)


def test_a_hand_derived_backward_that_imports_autograd_in_its_body_is_refused():
    def rmsnorm_backward(x, weight, grad_out, eps):
        from torch.autograd import grad

        x = x.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        y = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * w
        return grad(y, (x, w), grad_out)

    message = ex.check_rmsnorm_backward(rmsnorm_backward).message
    assert message.startswith("✗ rmsnorm_backward: write this one by hand: it calls autograd")
