"""Notebook 14, the capstone: microgpt on a dict of plain tensors (`gpt_weights`), wired from the
reader's earlier pieces (PIECE_CHECKS, handed in as `pieces`), trained by the reader's loop of
notebook 10 and sampled by their step of notebook 12 (`train_gpt` and `sample_names` assemble them:
each hands its loop or step a `WeightsModel`, the dict and a forward shaped as the model those
exercises were written for), and cached."""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import (
    CheckResult,
    close,
    compare,
    mismatch,
    solved_by,
)
from gptlib.exercises.nb01_embeddings import check_embed
from gptlib.exercises.nb02_qkv import check_qkv_split
from gptlib.exercises.nb03_scaled_attention import check_causal_attention
from gptlib.exercises.nb04_multi_head import check_merge_heads, check_split_heads
from gptlib.exercises.nb06_normalisation import check_pre_norm_block, check_rmsnorm
from gptlib.exercises.nb07_mlp import check_mlp_forward
from gptlib.exercises.nb09_loss import check_lm_loss
from gptlib.exercises.nb10_training_loop import solution_train_loop
from gptlib.exercises.nb12_generation import solution_sample_step
from gptlib.language import N_, _

# The plain-tensor tools (gpt_weights, trainable, ...) and climb_yours are gptlib.classroom.ladder's.
__all__ = ["WeightsModel", "check_cached_attention", "check_forward", "check_forward_cached",
           "planted_slip", "sample_names", "sample_step_with", "train_gpt"]  # fmt: skip

ASSET = "names-microgpt-h4.pt"  # the trained microgpt the notebook loads
# The pieces the capstone brings, each with the check of the notebook that taught it.
PIECE_CHECKS = dict(embed=check_embed, qkv_split=check_qkv_split, split_heads=check_split_heads,
                    causal_attention=check_causal_attention, merge_heads=check_merge_heads,
                    rmsnorm=check_rmsnorm, pre_norm_block=check_pre_norm_block,
                    mlp_forward=check_mlp_forward, lm_loss=check_lm_loss)  # fmt: skip


# --- The reference solutions
def _attention(p, bw, n_head):
    """The attention sublayer made of the pieces: h [B, n, d] -> [B, n, d]."""

    def attend(h):
        q, k, v = (p.split_heads(t, n_head) for t in p.qkv_split(h, bw["qkv"]))  # [B, h, n, d_h]
        return p.merge_heads(p.causal_attention(q, k, v)) @ bw["attn_proj"].T

    return attend


def _sublayers(p, bw, attend):
    """One block's (norm, sublayer) pairs for pre_norm_block: attention, then the ReLU MLP."""
    mlp = lambda h: p.mlp_forward(h, bw["fc"], bw["mlp_proj"], torch.relu)  # noqa: E731
    return [(lambda h: p.rmsnorm(h, bw["ln1"]), attend), (lambda h: p.rmsnorm(h, bw["ln2"]), mlp)]


def forward(w, idx, n_head, pieces):
    """w from gpt_weights, idx [B, n] (n <= T) -> logits [B, n, V], made of `pieces` only."""
    p = pieces
    x = p.embed(idx, w["tok_emb"], w["pos_emb"])  # [B, n, d]
    for bw in w["blocks"]:
        x = p.pre_norm_block(x, _sublayers(p, bw, _attention(p, bw, n_head)))
    return p.rmsnorm(x, w["ln_f"]) @ w["lm_head"].T  # [B, n, V]


class WeightsModel:
    """A dict of weights and a forward, shaped as the model notebooks 10 and 12 hand a loop and a
    sampling step: `model(idx, labels)` is (logits, loss_fn's loss or None), `model.parameters()`
    the tensors to train (`model.zero_grad()` clears theirs), `model.cfg.block_size` the rows of
    the position table. The forward has no dropout, so `train()` and `eval()` only note the mode.

    Taught in notebook 14 (your gpt)."""

    def __init__(self, forward_fn, w, n_head, loss_fn=None, params=()):
        self.forward_fn, self.w, self.n_head, self.loss_fn = forward_fn, w, n_head, loss_fn
        self.params, self.training = list(params), True
        vocab_size = w["tok_emb"].shape[0]
        self.cfg = types.SimpleNamespace(block_size=w["pos_emb"].shape[0], vocab_size=vocab_size,
                                         n_head=n_head)  # fmt: skip

    def __call__(self, idx, labels=None):
        logits = self.forward_fn(self.w, idx, self.n_head)  # [B, n, V]
        return logits, None if labels is None else self.loss_fn(logits, labels)

    def parameters(self):
        return iter(self.params)

    def zero_grad(self, set_to_none: bool = True):
        """What `nn.Module.zero_grad` does, for a loop that clears the gradients on the model."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)


def train_gpt(forward_fn, loss_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip,
              seed, n_head, loop: Callable = solution_train_loop) -> list:  # fmt: skip
    """Notebook 10's training loop `loop` (the course's unless handed the reader's) run on a dict of
    weights: `loss_fn(forward_fn(w, idx, n_head), labels)` is each batch's loss, the tensors the
    optimizer holds are the ones clipped; the list of the steps' losses.

    Taught in notebook 14 (your gpt)."""
    params = [t for group in optimizer.param_groups for t in group["params"]]  # what it trains
    model = WeightsModel(forward_fn, w, n_head, loss_fn, params)  # what notebook 10's loop reads
    return loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed)


def sample_names(forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None,
                 max_len=40, step: Callable = solution_sample_step) -> list:  # fmt: skip
    """`num` names as lists of ids (no BOS), notebook 12's sampling step `step` (the course's unless
    handed the reader's) drawn for all the rows at once until every row has a BOS, or `max_len`
    steps; a row that has drawn BOS is cut there.

    Taught in notebook 14 (your gpt)."""
    model = WeightsModel(forward_fn, w, n_head)  # what notebook 12's step reads
    idx = torch.full((num, 1), bos)  # [num, 1]
    for _step in range(max_len):
        nxt = step(model, idx, temperature, top_k, None, generator)  # [num, 1]
        idx = torch.cat([idx, nxt], dim=1)
        if (idx[:, 1:] == bos).any(dim=1).all():  # every row has drawn BOS: all names ended
            break
    return [row[: row.index(bos)] if bos in row else row for row in idx[:, 1:].tolist()]


def sample_step_with(filter_logits: Callable) -> Callable:
    """Notebook 12's reference `sample_step` with `filter_logits` (the reader's, say) in the place
    of the course's filter: what stands in for a reader who wrote the filter but not the step.

    Not taught in a notebook: how notebook 14 uses notebook 12's filter when the step is not kept."""

    def step(model, idx, temperature, top_k, top_p, generator):
        was_training = model.training
        model.eval()
        with torch.no_grad():
            logits = model(idx[:, -model.cfg.block_size :])[0][:, -1]  # [B, V]
        model.train(was_training)
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        probs = filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1)
        return torch.multinomial(probs, 1, generator=generator)  # [B, 1]

    step.__qualname__ = "sample_step_with(filter_in_use)"  # how yours.use names it
    return step


def cached_attention(x, w_qkv, w_proj, n_head, past):
    """x [B, n, d] (the new tokens), past None or (k, v) each [B, h, p, d_h] ->
    (output [B, n, d], (k, v) each [B, h, p + n, d_h])."""
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)  # each [B, n, d]
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))  # [B, h, n, d_h]
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # [B, h, p+n, d_h]
    p = k.size(2) - n
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # [B, h, n, p + n]
    hidden = torch.ones(n, p + n, dtype=torch.bool, device=x.device).triu(p + 1)  # j > p + i
    weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T, (k, v)


def forward_cached(w, idx, cache, n_head, pieces):
    """The new ids idx [B, n] -> logits [B, n, V]; `cache` (a (k, v) per block) updated in place."""
    p, at = pieces, cache[0][0].size(2) if cache else 0
    x = p.embed(idx, w["tok_emb"], w["pos_emb"][at:])  # positions at .. at + n - 1
    for i, bw in enumerate(w["blocks"]):

        def attend(h, i=i, bw=bw):
            past = cache[i] if at else None
            y, kv = p.cached_attention(h, bw["qkv"], bw["attn_proj"], n_head, past)
            cache[i : i + 1] = [kv]  # block i's entry: added the first time, then replaced
            return y

        x = p.pre_norm_block(x, _sublayers(p, bw, attend))
    return p.rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


# The course's pieces: each earlier exercise's reference, and this notebook's cached attention.
reference = types.SimpleNamespace(**{n: c.solution for n, c in PIECE_CHECKS.items()},
                                  cached_attention=cached_attention)  # fmt: skip


def _with(**changed) -> types.SimpleNamespace:
    return types.SimpleNamespace(**{**vars(reference), **changed})


def reference_forward(w, idx, n_head):
    return forward(w, idx, n_head, reference)


# --- The forward, on random weights
_B, _V, _T, _D, _H = 2, 11, 7, 12, 3  # V != T != d, h > 1: a mixed-up axis changes a shape


def _weights(g: torch.Generator, n_layer: int = 2, dtype=torch.float32) -> dict:
    r = lambda *shape, scale=0.3: (scale * torch.randn(*shape, generator=g)).to(dtype)  # noqa: E731
    gain = lambda: (0.5 + torch.rand(_D, generator=g)).to(dtype)  # noqa: E731  (distinct gains)
    blocks = [dict(ln1=gain(), qkv=r(3 * _D, _D, scale=0.6), attn_proj=r(_D, _D), ln2=gain(),
                   fc=r(4 * _D, _D), mlp_proj=r(_D, 4 * _D)) for _layer in range(n_layer)]  # fmt: skip
    return dict(tok_emb=r(_V, _D, scale=1.0), pos_emb=r(_T, _D, scale=1.0), blocks=blocks,
                ln_f=gain(), lm_head=r(_V, _D))  # fmt: skip


def _unscaled(q, k, v):
    future = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).triu(1)
    return (q @ k.transpose(-2, -1)).masked_fill(future, float("-inf")).softmax(-1) @ v


def _no_first_residual(x, sublayers):
    (norm, f), *rest = sublayers
    return reference.pre_norm_block(f(norm(x)), rest)


def _fwd(w, idx, n_head, pieces, *, act=torch.relu, final_norm=True, project=True, probs=False,
         **slip):  # fmt: skip
    """The reference forward on the reference pieces, one thing done wrong."""
    p = _with(mlp_forward=lambda h, w_fc, w_proj, _: reference.mlp_forward(h, w_fc, w_proj, act),
              **slip)  # fmt: skip
    if not final_norm:
        p.rmsnorm = lambda h, g: h if g is w["ln_f"] else reference.rmsnorm(h, g)
    if not project:
        w = {**w, "blocks": [{**bw, "attn_proj": torch.eye(_D)} for bw in w["blocks"]]}
    logits = forward(w, idx, n_head, p)
    return logits.softmax(-1) if probs else logits


SLIPS = {"no scale": dict(causal_attention=_unscaled),
         "no residual": dict(pre_norm_block=_no_first_residual)}  # fmt: skip
# fmt: off
FORWARD_MISTAKES = [
    (N_("the final norm is missing: the head reads the last block's output as it is, and w['ln_f'] "
        "is never used"), partial(_fwd, final_norm=False)),
    (N_("the MLP runs GELU, not microgpt's ReLU: small negative values get through where the model "
        "has zeros"), partial(_fwd, act=F.gelu)),
    (N_("attention's output is not projected: the heads side by side go straight into the residual "
        "sum, and attn_proj is never used"), partial(_fwd, project=False)),
    (N_("these are probabilities: your forward applies a softmax, so each row sums to 1, and the "
        "loss and the sampler would apply theirs a second time"), partial(_fwd, probs=True)),
    (N_("causal_attention does not scale its scores: each is sqrt(d_h) times too large, so its "
        "softmax is sharper than the model's"), partial(_fwd, **SLIPS["no scale"])),
    (N_("pre_norm_block adds no residual around attention: its output replaces x, so the block's "
        "input never reaches the MLP or the block's output"),
     partial(_fwd, **SLIPS["no residual"])),
]
# fmt: on


def planted_slip(name: str) -> types.SimpleNamespace:
    """The reference pieces with one known slip (a key of SLIPS), to see what the check says."""
    if name not in SLIPS:
        said = _("unknown slip {name}; choose one of {slips}")
        raise ValueError(said.format(name=repr(name), slips=", ".join(SLIPS)))
    return _with(**SLIPS[name])


def _forward_inputs(g: torch.Generator, pieces=None) -> tuple:
    n = (_T, _T - 3, _T)[g.initial_seed() % 3]  # a full window, then a shorter one (n < T)
    return _weights(g), torch.randint(0, _V, (_B, n), generator=g), _H, pieces or reference


# The piece each weight of gpt_weights belongs to, in the forward's order.
NORM, PIECE_OF = N_("the norm (rmsnorm)"), dict(tok_emb=N_("the embedding"), qkv=N_("attention"),
                                                fc=N_("the MLP"), lm_head=N_("the head"))  # fmt: skip
PIECE_OF.update(pos_emb=PIECE_OF["tok_emb"], attn_proj=PIECE_OF["qkv"], mlp_proj=PIECE_OF["fc"],
                ln1=NORM, ln2=NORM, ln_f=NORM)  # fmt: skip


def _piece(path: str) -> str:
    return PIECE_OF[re.findall(r"\['(\w+)'\]", path)[-1]]


def locate_cut(found: list) -> str:
    """Where the forward cuts the gradient, from each weight's: [(path, "missing" | "wrong" |
    "right", difference)] in the forward's order (see checking._gradient_problem)."""
    missing = [path for path, status, _d in found if status == "missing"]
    if missing and [path for path, _s, _d in found[: len(missing)]] == missing:  # all up to one
        said = _("no gradient reaches {weight} or any weight before it: the output is right, but "
                 "the path from {weight} to it is cut ({piece} or what follows it is detached or "
                 "under no_grad)")  # fmt: skip
        return said.format(weight=missing[-1], piece=_(_piece(missing[-1])))
    if missing:  # the cut piece's own weights get none; those before it, others
        cut = [path for path in missing if _piece(path) == _piece(missing[-1])]
        said = _("the weights of {piece} get no gradient ({weights}): the output is right, but "
                 "{piece} runs under no_grad or is detached, so it would not learn")  # fmt: skip
        weights = ", ".join(cut[:2]) + (", …" if len(cut) > 2 else "")
        return said.format(piece=_(_piece(cut[0])), weights=weights)
    i = max(i for i, (_p, status, _d) in enumerate(found) if status == "wrong")
    if i + 1 == len(found):
        said = _("the output is right, but the gradient of every weight is wrong ({difference}): "
                 "the cut lies after the head, in the logits")  # fmt: skip
        return said.format(difference=found[i][2])
    (bad, _s, diff), (good, _r, _e) = found[i], found[i + 1]
    where = _("inside {piece}")  # the cut piece's later weights get theirs right
    if _piece(good) == NORM:
        where = _("in the rmsnorm with gain {good}, or in the residual sum it reads")
    elif _piece(bad) == NORM:
        where = _("in {piece}, where it reads the output of the rmsnorm with gain {bad}")
    said = _("the output is right, but the gradients of {bad} and of weights before it are wrong "
             "({difference}), while {good} and every weight after it get the right ones: the cut "
             "lies {where}")  # fmt: skip
    where = where.format(good=good, bad=bad, piece=_(_piece(good)))
    return said.format(bad=bad, difference=diff, good=good, where=where)


@solved_by(forward)
def check_forward(fn: Callable, pieces=None) -> CheckResult:
    """`forward(w, idx, n_head, pieces)` (V=11, T=7, d=12, 3 heads, 2 blocks) on `pieces`, against
    the reference on the reference pieces: the logits, then every weight's gradient."""
    inputs = lambda g: _forward_inputs(g, pieces)  # noqa: E731
    return compare("forward", fn, _bound(reference_forward), inputs, FORWARD_MISTAKES,
                   locate=locate_cut)  # fmt: skip


def _bound(forward_fn):
    return lambda w, idx, n_head, pieces: forward_fn(w, idx, n_head)


# --- The cache
def _cached(x, w_qkv, w_proj, n_head, past, *, mask="offset", use_past=True, keep_all=True):
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (x @ w_qkv.T).split(d, -1))
    k_new, v_new = k, v
    if past is not None and use_past:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    p = k.size(2) - n
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    if mask:
        hidden = torch.ones(n, p + n, dtype=torch.bool).triu(p + 1 if mask == "offset" else 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T
    return y, (k, v) if keep_all else (k_new, v_new)


# fmt: off
CACHED_MISTAKES = [
    (N_("no mask: when several new tokens come at once (the prefill), each sees the ones after it"),
     partial(_cached, mask=None)),
    (N_("the mask is the plain square one, laid over the first keys: with p positions cached, new "
        "token i is kept from keys it may see, cached ones among them"),
     partial(_cached, mask="square")),
    (N_("the new tokens attend only to each other: the keys and values in `past` never joined "
        "theirs"),
     partial(_cached, use_past=False)),
    (N_("the output is right, but the returned (k, v) hold only the new positions: the next call "
        "would forget every position before them"), partial(_cached, keep_all=False)),
]
# fmt: on
CACHED_CASES = ((0, 5), (4, 1), (3, 3))  # (cached, new): a prefill, a decode step, a chunk


def _cached_inputs(g: torch.Generator) -> tuple:
    p, n = CACHED_CASES[g.initial_seed() % 3]
    bw = _weights(g, 1)["blocks"][0]
    past = tuple(torch.randn(_B, _H, p, _D // _H, generator=g) for _kv in range(2)) if p else None
    return torch.randn(_B, n, _D, generator=g), bw["qkv"], bw["attn_proj"], _H, past


@solved_by(cached_attention)
def check_cached_attention(fn: Callable) -> CheckResult:
    """`cached_attention` (d=12, 3 heads): a prefill of 5, 1 new after 4 cached, 3 after 3."""
    return compare("cached_attention", fn, cached_attention, _cached_inputs, CACHED_MISTAKES)


# fmt: off
FORWARD_CACHED_MISTAKES = [
    (N_("every call numbered its tokens from 0: the new tokens of a later call got the first rows "
        "of the position table, as if the text began there"),
     lambda w, idx, cache, h, p: forward_cached(w, idx, cache, h, _with(
         embed=lambda ids, wte, wpe: reference.embed(ids, wte, w["pos_emb"])))),
    (N_("the cache stays empty: each call sees only its own tokens, as if the text began there"),
     lambda w, idx, cache, h, p: forward_cached(w, idx, [], h, p)),
]
# fmt: on
FORWARD_CACHED_SCHEDULES = ((4, 1, 1, 1), (2, 3, 1, 1), (7,))  # a prefill, then pieces


def _fed(fn: Callable, pieces, w, idx, n_head, schedule) -> tuple:
    """fn fed the ids by the trial's schedule from an empty cache: (every call's logits, cache)."""
    cache, outs, at = [], [], 0
    with torch.no_grad():
        for n in schedule:
            outs.append(fn(w, idx[:, at : at + n], cache, n_head, pieces))
            at += n
    return outs, cache


def _fed_inputs(g: torch.Generator) -> tuple:
    schedule = FORWARD_CACHED_SCHEDULES[g.initial_seed() % 3]
    return _weights(g), torch.randint(0, _V, (_B, _T), generator=g), _H, schedule


def _calls_differ(got, expected) -> str | None:
    """Which call's logits, or which block's cache entry, differ (the outputs of _fed)."""
    (outs, cache), (ref_outs, ref_cache), at = got, expected, 0
    if len(cache) != len(ref_cache):
        said = _("after the {calls} calls your cache holds {got} entries, where the model's "
                 "{blocks} blocks keep one (k, v) each")  # fmt: skip
        return said.format(calls=len(outs), got=len(cache), blocks=len(ref_cache))
    for i, (mine, ref) in enumerate(zip(outs, ref_outs, strict=True)):
        if not close(mine, ref, 1e-5, 1e-4):
            said = _("the logits of call {i} (positions {a} to {b}) differ from the reference's: "
                     "{difference}")  # fmt: skip
            how = mismatch(mine, ref, (), (), 1e-5, 1e-4, None, None)
            return said.format(i=i, a=at, b=at + ref.size(1) - 1, difference=how)
        at += ref.size(1)
    said = _("the logits are right, but the (k, v) your cache holds for block {i} after the last "
             "call differ from the reference's")  # fmt: skip
    return said.format(i=next(i for i, (a, b) in enumerate(zip(cache, ref_cache, strict=True))
                              if not close(a, b, 1e-5, 1e-4)))  # fmt: skip


@solved_by(forward_cached)
def check_forward_cached(fn: Callable, pieces=None) -> CheckResult:
    """`forward_cached` (2 blocks) fed 7 ids, a prefill then pieces: every call's logits, cache."""
    wrong = [(hint, partial(_fed, slip, reference)) for hint, slip in FORWARD_CACHED_MISTAKES]
    user, ref = partial(_fed, fn, pieces or reference), partial(_fed, forward_cached, reference)
    return compare("forward_cached", user, ref, _fed_inputs, wrong, grads=False,
                   describe=_calls_differ)  # fmt: skip
