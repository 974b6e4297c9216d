"""Notebook 14, the capstone: microgpt from plain tensors, trained, sampled and cached.

The pieces `embed` (notebook 01), `rmsnorm` (06) and the MLP (07) are the reader's earlier
exercises, taken with `yours.use`; on a dict of tensors (`gpt_weights`, every matrix [out, in])
the reader writes what is new: `attention` and `cached_attention`; the wiring
`block(x, bw, n_head, pieces)`, `forward(w, idx, n_head, pieces)` and
`forward_cached(w, idx, cache, n_head, pieces)`, which call the pieces they are handed
(`pieces.rmsnorm(...)`); and `gpt_loss`, `train_gpt`, `sample_names` around any
`forward_fn(w, idx, n_head)`. Each check compares values on random inputs, then the
gradients of every input and weight. `check_gpt_forward` hands the reader's forward recording
pieces and compares what they return with forward hooks on gptlib's `GPT`, naming the first
tensor that differs; `check_gpt_train` trains the forward it is given.
"""

from __future__ import annotations

import inspect
import math
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.checkpoint import load_asset
from gptlib.config import microgpt
from gptlib.data import sample_batch
from gptlib.exercises.checking import (
    CheckResult,
    Refused,
    _close,
    compare,
    difference,
    guard,
    not_written,
    solved_by,
)
from gptlib.exercises.embeddings import check_embed
from gptlib.exercises.mlp import check_mlp
from gptlib.exercises.norms import RMSNORM_MISTAKES, check_rmsnorm
from gptlib.generate import generate
from gptlib.ladder import RUNGS, Rung, build_rung
from gptlib.model import GPT, IGNORE_INDEX
from gptlib.train import learning_rate, train

__all__ = [
    "check_gpt_attention",
    "check_gpt_block",
    "check_gpt_cached_attention",
    "check_gpt_forward",
    "check_gpt_forward_cached",
    "check_gpt_loss",
    "check_gpt_sample",
    "check_gpt_train",
    "climb_yours",
    "estimate_forward_loss",
    "gpt_optimizer",
    "gpt_weights",
    "mlp_relu",
    "planted_slip",
    "trace_forward",
    "trace_gpt",
    "trainable",
]

ASSET = "names-microgpt-h4.pt"
PIECES = ("embed", "rmsnorm", "attention", "mlp", "block", "cached_attention")

# ---------------------------------------------------------------------------------------------
# The reference solutions


def embed(idx, tok_emb, pos_emb):
    """idx [B, n] (n <= T), tok_emb [V, d], pos_emb [T, d] -> x [B, n, d]."""
    return tok_emb[idx] + pos_emb[: idx.shape[1]]  # rows 0..n-1 of the position table


def rmsnorm(x, gain, eps=1e-5):
    """x [B, n, d], gain [d] -> x / sqrt(mean(x^2 over d) + eps) * gain, [B, n, d]."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def attention(x, w_qkv, w_proj, n_head):
    """x [B, n, d], w_qkv [3d, d], w_proj [d, d] -> (output [B, n, d], weights [B, h, n, n])."""
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    future = torch.ones(n, n, dtype=torch.bool, device=x.device).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T, weights


def mlp(x, w_fc, w_proj):
    """x [B, n, d], w_fc [4d, d], w_proj [d, 4d] -> [B, n, d], ReLU in between."""
    return torch.relu(x @ w_fc.T) @ w_proj.T


def mlp_relu(mlp_forward: Callable) -> Callable:
    """Notebook 07's mlp_forward(x, w_fc, w_proj, activation) as the capstone's piece
    mlp(x, w_fc, w_proj), with microgpt's ReLU."""

    def mlp(x, w_fc, w_proj):
        return mlp_forward(x, w_fc, w_proj, torch.relu)

    mlp.mlp_forward = mlp_forward
    return mlp


def block(x, bw, n_head, pieces):
    """One pre-norm block made of pieces.rmsnorm, pieces.attention and pieces.mlp."""
    a, _ = pieces.attention(pieces.rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)
    x = x + a
    return x + pieces.mlp(pieces.rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])


def forward(w, idx, n_head, pieces):
    """The weights of gpt_weights and ids [B, n] -> logits [B, n, V], made of `pieces`."""
    x = pieces.embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = pieces.block(x, bw, n_head, pieces)
    return pieces.rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


def gpt_loss(forward_fn, w, idx, labels, n_head):
    """Mean cross-entropy of position t's logits against labels[t + 1], -100 labels not scored."""
    logits = forward_fn(w, idx, n_head)
    V = logits.size(-1)
    flat = logits[:, :-1].reshape(-1, V)
    return F.cross_entropy(flat, labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX)


def train_gpt(
    forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, n_head
):
    """Notebook 10's training loop for a dict of weights; returns the `steps` losses."""
    g = torch.Generator().manual_seed(seed)
    T = w["pos_emb"].shape[0]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        idx, labels = sample_batch(tokens, batch_size, T, g)
        loss = gpt_loss(forward_fn, w, idx, labels, n_head)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def sample_names(
    forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None, max_len=40
):
    """`num` names as lists of ids, drawn from forward_fn at `temperature`, from the top_k."""
    T = w["pos_emb"].shape[0]
    idx = torch.full((num, 1), bos)
    with torch.no_grad():
        for _ in range(max_len):
            logits = forward_fn(w, idx[:, -T:], n_head)[:, -1] / temperature
            if top_k is not None:
                kth = logits.topk(top_k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
            if (idx[:, 1:] == bos).any(dim=1).all():
                break
    return [row[: row.index(bos)] if bos in row else row for row in idx[:, 1:].tolist()]


def cached_attention(x, w_qkv, w_proj, n_head, past):
    """x [B, n, d] of the new tokens, past None or (k, v) each [B, h, p, d_h] ->
    (output [B, n, d], (k, v) each [B, h, p + n, d_h])."""
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    p = k.size(2) - n
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    hidden = torch.ones(n, p + n, dtype=torch.bool, device=x.device).triu(p + 1)
    weights = scores.masked_fill(hidden, float("-inf")).softmax(dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T, (k, v)


def forward_cached(w, idx, cache, n_head, pieces):
    """The new ids idx [B, n] -> their logits [B, n, V]; `cache` (a list, one (k, v) per block)
    is extended or updated in place."""
    p = cache[0][0].size(2) if cache else 0
    x = w["tok_emb"][idx] + w["pos_emb"][p : p + idx.size(1)]
    for i, bw in enumerate(w["blocks"]):
        h = pieces.rmsnorm(x, bw["ln1"])
        a, kv = pieces.cached_attention(
            h, bw["qkv"], bw["attn_proj"], n_head, cache[i] if p else None
        )
        cache[i : i + 1] = [kv]
        x = x + a
        x = x + pieces.mlp(pieces.rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])
    return pieces.rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


_NAMES = ("embed rmsnorm attention mlp block cached_attention forward forward_cached gpt_loss "
          "train_gpt sample_names")  # fmt: skip
reference = types.SimpleNamespace(**{name: globals()[name] for name in _NAMES.split()})


def reference_forward(w, idx, n_head):
    """The reference forward with the reference pieces, as a forward_fn(w, idx, n_head)."""
    return forward(w, idx, n_head, reference)


# ---------------------------------------------------------------------------------------------
# The weights as plain tensors


_INNER = {
    "ln1": "ln1",
    "qkv": "attn.qkv",
    "attn_proj": "attn.proj",
    "ln2": "ln2",
    "fc": "mlp.fc",
    "mlp_proj": "mlp.proj",
}


def gpt_weights(model: GPT) -> dict:
    """Copies of a microgpt-style GPT's weights (pre-norm RMSNorm, ReLU, no biases):
    {"tok_emb", "pos_emb", "blocks": [{"ln1", "qkv", "attn_proj", "ln2", "fc", "mlp_proj"}],
    "ln_f", "lm_head"}."""
    cfg = model.cfg
    if (cfg.norm, cfg.norm_placement, cfg.activation, cfg.bias) != (
        "rmsnorm",
        "pre",
        "relu",
        False,
    ):
        raise ValueError(
            "gpt_weights reads a microgpt-style model (pre-norm RMSNorm, ReLU, no biases), got "
            f"norm={cfg.norm!r}, norm_placement={cfg.norm_placement!r}, "
            f"activation={cfg.activation!r}, bias={cfg.bias}; load assets/{ASSET} or build the "
            "model with gptlib.config.microgpt()"
        )
    state = {k: t.detach().clone() for k, t in model.state_dict().items()}
    w = {k: state[f"{k}.weight"] for k in ("tok_emb", "pos_emb", "ln_f", "lm_head")}
    w["blocks"] = [
        {k: state[f"blocks.{i}.{inner}.weight"] for k, inner in _INNER.items()}
        for i in range(cfg.n_layer)
    ]
    return {k: w[k] for k in ("tok_emb", "pos_emb", "blocks", "ln_f", "lm_head")}


def state_dict_key(name: str) -> str:
    """Where a weight of gpt_weights lives in GPT.state_dict(): "blocks.0.qkv" ->
    "blocks.0.attn.qkv.weight"."""
    parts = name.split(".")
    if parts[0] == "blocks":
        return f"blocks.{parts[1]}.{_INNER[parts[2]]}.weight"
    return f"{name}.weight"


def flat_names(w: dict) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every weight: "tok_emb", ..., "blocks.0.qkv", ..., "lm_head"."""
    out = []
    for name, value in w.items():
        if name == "blocks":
            for i, bw in enumerate(value):
                out.extend((f"blocks.{i}.{k}", v) for k, v in bw.items())
        else:
            out.append((name, value))
    return out


def _map(obj, f):
    """obj with f applied to every tensor inside its dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        return f(obj)
    if isinstance(obj, dict):
        return {k: _map(v, f) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map(v, f) for v in obj)
    return obj


def trainable(w: dict) -> dict:
    """The same weights as leaf tensors that keep a gradient (copies)."""
    return _map(w, lambda t: t.detach().clone().requires_grad_())


def gpt_optimizer(w: dict, lr: float = 1e-2, weight_decay: float = 0.1) -> torch.optim.AdamW:
    """gptlib.train.make_optimizer for a dict of weights: AdamW, betas (0.9, 0.95), matrices and
    tables decayed, gains (1-D) not."""
    tensors = [t for _, t in flat_names(w)]
    groups = [
        {"params": [t for t in tensors if t.dim() >= 2], "weight_decay": weight_decay},
        {"params": [t for t in tensors if t.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)


def gpt_from_weights(w: dict, n_head: int) -> GPT:
    """A microgpt-style GPT holding copies of the weights (in their dtype)."""
    V, d = w["tok_emb"].shape
    n_layer, T = len(w["blocks"]), w["pos_emb"].shape[0]
    cfg = microgpt(V, block_size=T, n_embd=d, n_head=n_head, n_layer=n_layer)
    model = GPT(cfg).to(w["tok_emb"].dtype)
    model.load_state_dict({state_dict_key(k): t.detach().clone() for k, t in flat_names(w)})
    return model


# ---------------------------------------------------------------------------------------------
# Gradients: the reader's function and the reference on the same leaves


def _leaves(obj, name: str, out: list):
    """A copy of obj whose floating tensors are fresh leaves keeping a gradient, listed in out
    as (name, leaf)."""
    if isinstance(obj, torch.Tensor):
        if not obj.is_floating_point():
            return obj
        leaf = obj.detach().clone().requires_grad_()
        out.append((name, leaf))
        return leaf
    if isinstance(obj, dict):
        return {k: _leaves(v, f"{name}['{k}']", out) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_leaves(v, f"{name}[{i}]", out) for i, v in enumerate(obj))
    return obj


def _outputs(obj) -> list[torch.Tensor]:
    found: list = []
    _map(obj, lambda t: found.append(t) if t.is_floating_point() else None)
    return found


def _gradients(fn: Callable, inputs: tuple, names: list[str]):
    leaves: list = []
    args = tuple(_leaves(a, n, leaves) for a, n in zip(inputs, names, strict=True))
    outs = _outputs(fn(*args))
    if not any(o.requires_grad for o in outs):
        return None, leaves
    g = torch.Generator().manual_seed(7)
    total = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    total.backward()
    return total, leaves


def gradient_slip(name: str, fn: Callable, ref: Callable, inputs: tuple) -> str | None:
    """None when fn's gradients with respect to every floating input equal ref's, else the
    sentence that names the first cut or differing one."""
    names = list(inspect.signature(ref).parameters)[: len(inputs)]
    _, expected = _gradients(ref, inputs, names)
    try:
        total, got = _gradients(fn, inputs, names)
    except Exception:
        return None  # the values check has already run this function
    if total is None:
        return (
            f"your {name} gives the right values, but its output carries no gradient: it was "
            "computed under torch.no_grad() or detached, so training would never change any "
            "weight through it"
        )
    pairs = [(label, e.grad, u.grad) for (label, e), (_, u) in zip(expected, got, strict=True)]
    pairs = [(label, e, u) for label, e, u in pairs if e is not None and bool(e.abs().max() > 0)]
    for label, _, u in pairs:  # a cut first: it says the most
        if u is None or not bool(u.abs().max() > 0):
            return (
                f"the gradient of {label} is missing: something in your {name} is detached or "
                f"under no_grad, so training would never change {label}"
            )
    for label, e, u in pairs:
        if not torch.allclose(u.double(), e.double(), atol=1e-5, rtol=1e-3):
            return (
                f"your {name} gives the right values but the gradient of {label} differs from "
                f"the reference's ({difference(u, e)}): part of what {label} feeds is "
                "detached or under no_grad, so training would follow another path"
            )
    return None


def _tupled(fn: Callable) -> Callable:
    """fn, a list it returns read as a tuple (a list that unpacks the same is accepted)."""

    def as_tuple(*args):
        out = fn(*args)
        return tuple(out) if isinstance(out, list) else out

    return as_tuple


def _check(name, fn, ref, make_inputs, mistakes=(), error_hints=(), trials=3) -> CheckResult:
    """compare, then the gradients on the first trial's inputs."""
    fn = _tupled(fn)
    result = compare(
        name, fn, ref, make_inputs, mistakes=mistakes, error_hints=error_hints, trials=trials
    )
    if not result:
        return result
    slip = gradient_slip(
        name, guard(name, fn), ref, make_inputs(torch.Generator().manual_seed(1000))
    )
    return CheckResult(False, f"✗ {name}: {slip}") if slip else result


# ---------------------------------------------------------------------------------------------
# The pieces' slips, each with its piece's signature. The messages say what the output shows.


def _embed_no_positions(idx, tok_emb, pos_emb):
    return tok_emb[idx]


def _embed_positions_from_ids(idx, tok_emb, pos_emb):
    return tok_emb[idx] + pos_emb[idx]


def _embed_positions_from_one(idx, tok_emb, pos_emb):
    return tok_emb[idx] + pos_emb[1 : idx.shape[1] + 1]


def _embed_concatenated(idx, tok_emb, pos_emb):
    B, n = idx.shape
    return torch.cat([tok_emb[idx], pos_emb[:n].expand(B, n, -1)], dim=-1)


# fmt: off
EMBED_MISTAKES = [
    ("the position embeddings are missing: your x is the token embeddings alone, so a token gets "
     "the same vector wherever it sits in the window and the model cannot tell 'ab' from 'ba'",
     _embed_no_positions),
    ("the position table was indexed with the token ids: each token got the row of its id wherever "
     "it stands (a token 5 always gets row 5), so your position embeddings say nothing about "
     "places, only a second thing about tokens", _embed_positions_from_ids),
    ("the positions are off by one: the first token of your window got row 1 of pos_emb, the second"
     " row 2, and row 0 was never used", _embed_positions_from_one),
    ("the two embeddings were concatenated along the features: your x is [B, n, 2d], twice as wide "
     "as the d features every later layer reads", _embed_concatenated),
]
# fmt: on

# fmt: off
EMBED_ERRORS = [("must match the size of tensor",
                 "pos_emb has T rows, one per place a window can have, and this window holds n "
                 "tokens: the whole table puts T position rows against n token rows")]
# fmt: on


def _attend(x, w_qkv, w_proj, n_head, *, scale=None, mask="future", fill=float("-inf"), dim=-1,
            split_t=True, order=(0, 1, 2), proj_t=True, merge_t=True, project=True,
            mask_after=False):  # fmt: skip
    """The reference attention with one switch flipped: every attention slip is one call."""
    B, n, d = x.shape
    d_h = d // n_head
    parts = (x @ w_qkv.T).split(d, dim=-1)
    heads = [
        parts[i].view(B, n, n_head, d_h).transpose(1, 2)
        if split_t
        else parts[i].reshape(B, n_head, n, d_h)
        for i in order
    ]
    q, k, v = heads
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_h) if scale is None else scale(d, d_h))
    ones = torch.ones(n, n, dtype=torch.bool)
    hidden = ones.triu(1) if mask == "future" else ones.tril(-1)
    if mask is not None and not mask_after:
        scores = scores.masked_fill(hidden, fill)
    weights = scores.softmax(dim=dim)
    if mask_after:
        weights = weights.masked_fill(hidden, 0.0)
    y = weights @ v
    y = y.transpose(1, 2).reshape(B, n, d) if merge_t else y.reshape(B, n, d)
    if project:
        y = y @ (w_proj.T if proj_t else w_proj)
    return y, weights


def _att_slip(**switches) -> Callable:
    return lambda x, w_qkv, w_proj, n_head: _attend(x, w_qkv, w_proj, n_head, **switches)


_att_no_scale = _att_slip(scale=lambda d, d_h: 1.0)
_att_no_mask = _att_slip(mask=None)
_att_softmax_over_queries = _att_slip(dim=-2)
_att_proj_transposed = _att_slip(proj_t=False)

TRANSPOSE_HINT = (
    "every matrix is stored as nn.Linear keeps it, [out, in] (w_qkv is [3d, d], w_fc [4d, d]): "
    "multiplied as it is stored, a matrix lines x's features up with its out axis, not its in axis"
)

# fmt: off
ATTENTION_MISTAKES = [
    ("the softmax runs over dim=-2, the queries: your weights sum to 1 down each key's column, not "
     "along each query's row, so a query's weights over the keys it sees do not add up to 1",
     _att_softmax_over_queries),
    ("the scores are not scaled: each is sqrt(d_h) times too large, so your softmax is sharper than"
     " the model's and piles the weight onto fewer keys", _att_no_scale),
    ("the scores were divided by sqrt(d) = sqrt(h * d_h), the width of all the heads together: each"
     " is sqrt(h) times too small, so your weights are flatter than the model's",
     _att_slip(scale=lambda d, d_h: math.sqrt(d))),
    ("the scores were divided by d_h itself: each is sqrt(d_h) times too small, so your weights are"
     " flatter than the model's", _att_slip(scale=lambda d, d_h: float(d_h))),
    ("there is no causal mask: each query's weights also go to the keys after it, so a position "
     "reads tokens from its own future", _att_no_mask),
    ("the mask hides the wrong side: each query sees itself and the keys after it, and the past is "
     "hidden (your weights are zero below the diagonal instead of above it)",
     _att_slip(mask="past")),
    ("the hidden scores were set to 0: a score of 0 still counts exp(0) = 1 in the softmax, so your"
     " weights above the diagonal are not zero and the future keys still take a share",
     _att_slip(fill=0.0)),
    ("the output projection multiplies by w_proj as it is stored, [out, in]: it is square, so the "
     "shapes fit and nothing raises, but each output feature is made with a column of w_proj "
     "instead of its row", _att_proj_transposed),
    ("the output projection is missing: your output is the heads glued side by side, never mixed by"
     " w_proj, so each output feature comes from one head alone", _att_slip(project=False)),
    ("q and k are swapped: your scores compare the keys with the queries, so before the mask your "
     "score for query i and key j is the model's for query j and key i",
     _att_slip(order=(1, 0, 2))),
    ("k and v are swapped: the scores compare the queries with v, and the weights average k (the "
     "fused projection's last axis holds q, k, v in that order)", _att_slip(order=(0, 2, 1))),
    ("the future weights were zeroed after the softmax: the weights left were not renormalised, so "
     "each query's row sums to less than 1", _att_slip(mask_after=True)),
    ("the heads were cut with a reshape alone to [B, h, n, d_h]: head 0 then holds all the features"
     " of the first few positions instead of its own d_h features of every position, so positions "
     "are mixed", _att_slip(split_t=False)),
    ("the heads were glued back with a reshape alone, the head axis still in front of the "
     "positions: each output position is then made of several positions of one head",
     _att_slip(merge_t=False)),
    ("the heads were cut and glued back with reshapes alone: the two undo each other, but in "
     "between each head held whole positions' features, not its d_h-feature slice of every "
     "position, so the scores mixed positions", _att_slip(split_t=False, merge_t=False)),
]
# fmt: on

MATMUL_ERRORS = [
    ("mat1 and mat2 shapes cannot be multiplied", TRANSPOSE_HINT),
    ("size mismatch", TRANSPOSE_HINT),
]

# fmt: off
ATTENTION_ERRORS = [("must match the size of tensor",
                     "if you wrote k.T: on a tensor with more than two dimensions .T reverses all "
                     "of them ([B, h, n, d_h] becomes [d_h, n, h, B]), so the batch and head axes "
                     "of the product no longer line up"), *MATMUL_ERRORS]
# fmt: on


def _mlp_gelu(x, w_fc, w_proj):
    return F.gelu(x @ w_fc.T) @ w_proj.T


# fmt: off
MLP_MISTAKES = [
    ("the ReLU is missing: nothing happens between the two layers, so they collapse into a single d"
     " x d matrix and your output is linear in x", lambda x, w_fc, w_proj: x @ w_fc.T @ w_proj.T),
    ("this is GELU, not microgpt's ReLU: your hidden [B, n, 4d] tensor lets small negative values "
     "through where the model's has zeros", _mlp_gelu),
    ("the ReLU comes after the second layer: your output went through it (no output feature is "
     "negative), and the hidden [B, n, 4d] tensor between the two layers did not",
     lambda x, w_fc, w_proj: torch.relu(x @ w_fc.T @ w_proj.T)),
    ("the two weight matrices swapped roles: your first layer used w_proj and the second w_fc, each"
     " as it is stored ([out, in]); the shapes happen to fit, so nothing raises",
     lambda x, w_fc, w_proj: torch.relu(x @ w_proj) @ w_fc),
    ("the MLP adds its own input back (a residual inside mlp): the block adds x around the MLP too,"
     " so in the model x would be counted twice", lambda x, w_fc, w_proj: x + mlp(x, w_fc, w_proj)),
]
# fmt: on


def _blk(x, bw, n_head, p, *, res=(True, True), norms=True, post=False, gains=("ln1", "ln2"),
         parallel=False, add_normalised=False):  # fmt: skip
    """The reference block with one thing done wrong."""

    def norm(t, g):
        return p.rmsnorm(t, bw[g]) if norms else t

    h = x if post else norm(x, gains[0])
    a = p.attention(h, bw["qkv"], bw["attn_proj"], n_head)[0]
    start = (h if add_normalised else x) if res[0] else 0
    y = start + a
    if post:
        y = p.rmsnorm(y, bw["ln1"])
    h2 = y if post else norm(x if parallel else y, gains[1])
    out = ((h2 if add_normalised else y) if res[1] else 0) + p.mlp(h2, bw["fc"], bw["mlp_proj"])
    return p.rmsnorm(out, bw["ln2"]) if post else out


def _blk_slip(**switches) -> Callable:
    return lambda x, bw, n_head, p: _blk(x, bw, n_head, p, **switches)


_block_no_first_residual = _blk_slip(res=(False, True))
_block_post_norm = _blk_slip(post=True)

# fmt: off
BLOCK_MISTAKES = [
    ("the residual around attention is missing: your x is replaced by the attention's output, so "
     "the block's input never reaches the MLP or the block's output", _block_no_first_residual),
    ("the residual around the MLP is missing: your block returns the MLP's output alone, so x after"
     " attention is dropped from the block's output", _blk_slip(res=(True, False))),
    ("both residual paths are missing: each sub-layer's output replaces x, so nothing of the "
     "block's input reaches its output", _blk_slip(res=(False, False))),
    ("the residual paths carry the normalised x (gain included), not the x the block was given: "
     "your stream loses its own scale at every sub-layer", _blk_slip(add_normalised=True)),
    ("this is post-norm: each sub-layer reads x unnormalised and the norm comes after the residual "
     "sum, so your block's output is itself normalised", _block_post_norm),
    ("the norms are missing: attention and the MLP read x unnormalised, and the gains ln1 and ln2 "
     "are never used", _blk_slip(norms=False)),
    ("the two gains are swapped: the norm before attention uses bw['ln2'] and the norm before the "
     "MLP bw['ln1']", _blk_slip(gains=("ln2", "ln1"))),
    ("the MLP reads the block's input, not x after attention's residual: your attention and MLP run"
     " side by side, so the MLP never sees what attention added", _blk_slip(parallel=True)),
]
# fmt: on


def _fwd(w, idx, n_head, p, *, final_norm=True, head="lm_head", softmax=False, blocks=True,
         around=False):  # fmt: skip
    x = p.embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"] if blocks else []:
        x = (x if around else 0) + p.block(x, bw, n_head, p)
    logits = (p.rmsnorm(x, w["ln_f"]) if final_norm else x) @ w[head].T
    return logits.softmax(-1) if softmax else logits


def _fwd_slip(**switches) -> Callable:
    return lambda w, idx, n_head, p: _fwd(w, idx, n_head, p, **switches)


# fmt: off
FORWARD_MISTAKES = [
    ("the final norm is missing: the head reads the last block's output unnormalised, and ln_f's "
     "gain is never used", _fwd_slip(final_norm=False)),
    ("the head used the token table: your logits compare x with the token embeddings, but "
     "microgpt's head is untied", _fwd_slip(head="tok_emb")),
    ("these are probabilities: your forward applies a softmax, so each row sums to 1, and the loss "
     "and the sampler would apply theirs a second time", _fwd_slip(softmax=True)),
    ("the blocks were skipped: your forward goes from the embeddings straight to the final norm, "
     "and w['blocks'] is never used", _fwd_slip(blocks=False)),
    ("the loop adds x around each block, but the block already adds its own residuals: x is counted"
     " twice, so after each block your stream holds the block's input once too many",
     _fwd_slip(around=True)),
]
# fmt: on

MISTAKES = {
    "embed": EMBED_MISTAKES,
    "rmsnorm": RMSNORM_MISTAKES,  # notebook 06's, the same signature
    "attention": ATTENTION_MISTAKES,
    "mlp": MLP_MISTAKES,
    "block": BLOCK_MISTAKES,
    "forward": FORWARD_MISTAKES,
}

# ---------------------------------------------------------------------------------------------
# One check per piece, on random inputs whose sizes differ (V != T != d, h > 1, n < T), so that
# a mixed-up axis or table changes a shape or a value.

_B, _N, _V, _T, _D, _H = 2, 6, 11, 7, 12, 3


def _weights(g: torch.Generator, n_layer: int = 1) -> dict:
    def r(*shape, scale=0.3):
        return scale * torch.randn(*shape, generator=g)

    def gain():
        return 0.5 + torch.rand(_D, generator=g)  # distinct gains, so a missing one shows

    blocks = [
        {
            "ln1": gain(),
            "qkv": r(3 * _D, _D),
            "attn_proj": r(_D, _D),
            "ln2": gain(),
            "fc": r(4 * _D, _D),
            "mlp_proj": r(_D, 4 * _D),
        }  # fmt: skip
        for _ in range(n_layer)
    ]
    return {"tok_emb": r(_V, _D, scale=1.0), "pos_emb": r(_T, _D, scale=1.0), "blocks": blocks,
            "ln_f": gain(), "lm_head": r(_V, _D)}  # fmt: skip


def _ids(g):
    return torch.randint(0, _T - 1, (_B, _N), generator=g)  # ids < T: wrong lookups still run


def _attention_inputs(g):
    bw = _weights(g)["blocks"][0]
    x = torch.randn(_B, _N, _D, generator=g)
    return x, 2.0 * bw["qkv"], bw["attn_proj"], _H  # sharper scores: a missing scale shows


def _block_inputs(g):
    bw = _weights(g)["blocks"][0]
    return 2.0 * torch.randn(_B, _N, _D, generator=g) + 0.5, bw, _H, reference


@solved_by(attention)
def check_gpt_attention(fn) -> CheckResult:
    """`attention(x, w_qkv, w_proj, n_head)` on random [2, 6, 12] inputs, 3 heads of 4."""
    return _check(
        "attention", fn, attention, _attention_inputs, ATTENTION_MISTAKES, ATTENTION_ERRORS
    )


@solved_by(block)
def check_gpt_block(fn) -> CheckResult:
    """`block(x, bw, n_head, pieces)` on random [2, 6, 12] inputs and block weights, handed the
    reference pieces: what is compared is the block's own wiring."""
    return _check("block", fn, block, _block_inputs, BLOCK_MISTAKES, MATMUL_ERRORS)


# ---------------------------------------------------------------------------------------------
# The forward pass, tensor by tensor beside gptlib's GPT


def _steps(n_layer: int) -> list[tuple[str, str, int, str]]:
    """Every tensor compared, in the order the pass makes it: (label, piece, which call of that
    piece, what of the call: "out", "out0", "out1" or "in", its first argument)."""
    steps = [("embeddings", "embed", 0, "out")]
    for i in range(n_layer):
        steps += [
            (f"block {i} · norm 1", "rmsnorm", 2 * i, "out"),
            (f"block {i} · attention weights", "attention", i, "out1"),
            (f"block {i} · attention output", "attention", i, "out0"),
            (f"block {i} · x + attention", "rmsnorm", 2 * i + 1, "in"),
            (f"block {i} · norm 2", "rmsnorm", 2 * i + 1, "out"),
            (f"block {i} · mlp", "mlp", i, "out"),
            (f"block {i} · x + mlp (block output)", "block", i, "out"),
        ]
    return steps + [("final norm", "rmsnorm", 2 * n_layer, "out"), ("logits", "forward", 0, "out")]


def _expected_calls(n_layer: int) -> dict[str, int]:
    return {"embed": 1, "rmsnorm": 2 * n_layer + 1, "attention": n_layer, "mlp": n_layer,
            "block": n_layer}  # fmt: skip


@torch.no_grad()
def trace_gpt(model: GPT, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """gptlib's GPT on idx [B, n] with forward hooks: every tensor of `_steps`, label -> tensor,
    and each norm's input."""
    caught: dict[str, torch.Tensor] = {}
    hooks = []

    def keep(label, inp=False):
        def hook(module, args, output=None):
            caught[label] = (args[0] if inp else output).detach().clone()

        return hook

    for i, b in enumerate(model.blocks):
        hooks += [
            b.register_forward_pre_hook(keep(f"block {i} · input", True)),
            b.ln1.register_forward_hook(keep(f"block {i} · norm 1")),
            b.attn.register_forward_hook(keep(f"block {i} · attention output")),
            b.ln2.register_forward_pre_hook(keep(f"block {i} · x + attention", True)),
            b.ln2.register_forward_hook(keep(f"block {i} · norm 2")),
            b.mlp.register_forward_hook(keep(f"block {i} · mlp")),
            b.register_forward_hook(keep(f"block {i} · x + mlp (block output)")),
        ]
        b.attn.keep_weights = True  # the readable path, which keeps its softmax weights
    hooks += [
        model.ln_f.register_forward_pre_hook(keep("final norm · input", True)),
        model.ln_f.register_forward_hook(keep("final norm")),
        model.lm_head.register_forward_hook(keep("logits")),
    ]
    try:
        model(idx)
        for i, b in enumerate(model.blocks):
            caught[f"block {i} · attention weights"] = b.attn.weights.clone()
    finally:
        for h in hooks:
            h.remove()
        for b in model.blocks:
            b.attn.keep_weights, b.attn.weights = False, None
    caught["embeddings"] = caught["block 0 · input"]
    return caught


class _Recorder(types.SimpleNamespace):
    """A pieces namespace whose every piece records (piece, arguments, result) as it returns."""

    def __init__(self, base):
        super().__init__()
        self.calls = []
        for name in PIECES:
            if hasattr(base, name):
                setattr(self, name, self._recording(name, getattr(base, name)))

    def _recording(self, name, fn):
        def piece(*args):
            try:
                out = fn(*args)
            except Exception as e:
                e.piece = getattr(e, "piece", name)  # the innermost piece that raised
                raise
            self.calls.append((name, args, out))
            return out

        return piece


def _label_calls(calls, logits, n_layer):
    """The recorded calls under trace_gpt's labels (a piece called another number of times
    than the model has is not labelled), and how often each piece was called."""
    by_piece: dict[str, list] = {}
    for piece, args, out in calls:
        by_piece.setdefault(piece, []).append((args, out))
    counted = {p: len(by_piece.get(p, [])) for p in _expected_calls(n_layer)}
    by_piece["forward"] = [((), logits)]
    labelled = {}
    for label, piece, k, what in _steps(n_layer):
        found = by_piece[piece] if piece == "forward" else by_piece.get(piece, [])
        if piece != "forward" and len(found) != _expected_calls(n_layer)[piece]:
            continue
        args, out = found[k]
        if what == "in":
            labelled[label] = args[0]
        elif what in ("out0", "out1"):
            if isinstance(out, (tuple, list)) and len(out) == 2:
                labelled[label] = out[int(what[-1])]
        else:
            labelled[label] = out
    return labelled, by_piece, counted


def trace_forward(fn: Callable, w: dict, idx: torch.Tensor, n_head: int, pieces) -> dict:
    """fn(w, idx, n_head, pieces) run with recording pieces: the tensors they made, label ->
    tensor, under trace_gpt's labels."""
    rec = _Recorder(pieces)
    with torch.no_grad():
        logits = fn(w, idx, n_head, rec)
    return _label_calls(rec.calls, logits, len(w["blocks"]))[0]


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _slip_in(piece: str, args: tuple, got) -> str | None:
    """The known slip of `piece` whose output on these arguments equals `got`."""
    if piece in ("block", "forward"):
        args = (*args[:3], reference)
    for hint, wrong in MISTAKES[piece]:
        try:
            with torch.no_grad():
                if _close(got, wrong(*args), 1e-5, 1e-4):
                    return f"{piece}: {hint}"
        except Exception:
            continue
    return None


def _piece_right(piece: str, args: tuple, got) -> bool:
    """Whether the reference piece, handed the same arguments, returns `got`."""
    ref = getattr(reference, piece)
    if piece == "block":
        args = (*args[:3], reference)
    with torch.no_grad():
        try:
            return _close(_as_pair(got), ref(*args), 1e-5, 1e-4)
        except Exception:
            return False


def _as_pair(out):
    return tuple(out) if isinstance(out, list) else out


def _forward_inputs(g: torch.Generator, V: int, T: int) -> list[torch.Tensor]:
    # A full block and a shorter window (n < T: the position table is cut to n rows).
    return [torch.randint(0, V, (3, T), generator=g), torch.randint(0, V, (2, T - 3), generator=g)]


def _first_difference(name, fn, w, idx, n_head, pieces, model, atol, rtol):
    """Run fn beside GPT on idx; a failing CheckResult at the first tensor that differs, or the
    list of ✓ lines."""
    lib = trace_gpt(model, idx)
    rec = _Recorder(pieces)
    try:
        with torch.no_grad():
            logits = fn(_map(w, torch.clone), idx, n_head, rec)
    except NotImplementedError as e:
        return not_written(getattr(e, "piece", name))
    except Refused as e:
        return e.result
    except Exception as e:
        where = getattr(e, "piece", "your forward")
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        hints = ATTENTION_ERRORS if where == "attention" else MATMUL_ERRORS + EMBED_ERRORS
        text += next((f". Hint: {hint}" for fragment, hint in hints if fragment in text), "")
        return CheckResult(False, f"✗ {name}: {where} raised {text}")
    L = len(w["blocks"])
    mine, by_piece, counted = _label_calls(rec.calls, logits, L)
    unseen = [
        f"  (your forward called {p} {counted[p]} time(s), the model has {n}: its tensors were "
        "not compared one by one)"
        for p, n in _expected_calls(L).items()
        if counted[p] != n
    ]
    report = []
    for label, piece, k, what in _steps(L):
        if label not in mine:
            continue
        got, expected = mine[label], lib[label]
        if isinstance(got, torch.Tensor) and _close(got, expected, atol, rtol):
            report.append(f"  ✓ {label} {_shape(expected)}")
            continue
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            how = difference(got, expected)
        else:
            how = "the shapes differ"
        # Who made it: a piece that is wrong on what it was handed, else the lines around it.
        chain, wrong_piece = [], False
        if what != "in" and piece != "forward":
            args, out = by_piece[piece][k]
            wrong_piece = not _piece_right(piece, args, out)
            chain += [(piece, args, out)] if wrong_piece else []
        i = int(label.split()[1]) if label.startswith("block") else None
        if i is not None and piece != "block" and counted["block"] == L:
            chain.append(("block", *by_piece["block"][i]))
        chain.append(("forward", (w, idx, n_head), logits))
        slip = next((s for p, a, o in chain if (s := _slip_in(p, a, o))), None)
        made_by = "block, read by rmsnorm" if what == "in" else piece
        if slip:
            likely = f"  likely slip in {slip}"
        elif wrong_piece:
            likely = f"  no known slip matches; {_CHECK_OF[piece]} looks at your {piece} alone"
        else:
            around = "block" if i is not None and piece != "block" else "forward"
            likely = (
                f"  no known slip matches; {piece} returns the right thing for what it was "
                f"handed, so the slip is in the {around}'s own lines"
            )
        lines = [
            f"✗ {name}: the first tensor that differs is '{label}' (made by {made_by}), on ids "
            f"of shape {list(idx.shape)}",
            f"  expected shape {_shape(expected)}, got {_shape(got)}; {how}",
            likely,
            *unseen,
        ]
        return CheckResult(False, "\n".join(lines))
    return report + unseen


# The check that looks at each piece alone: the earlier notebooks' for the pieces taken from them.
_CHECK_OF = {
    "embed": "check_embed (notebook 01)",
    "rmsnorm": "check_rmsnorm (notebook 06)",
    "mlp": "check_mlp (notebook 07)",
    "attention": "check_gpt_attention",
    "block": "check_gpt_block",
}


@solved_by(forward)
def check_gpt_forward(fn: Callable, pieces=None, atol: float = 1e-5, rtol: float = 1e-4):
    """Run `fn(w, idx, n_head, pieces)` with the trained microgpt's weights beside gptlib's GPT,
    on a [3, 8] and a [2, 5] batch of ids, handing it recording wrappers of `pieces` (the
    reference's when None); compare every tensor the pieces return, in the order the pass makes
    them, and name the first that differs with both shapes and the likely slip. Then the
    gradients of every weight."""
    name = "forward"
    model = load_asset(ASSET).model
    w, n_head = gpt_weights(model), model.cfg.n_head
    pieces = reference if pieces is None else pieces
    user = guard(name, fn)
    g = torch.Generator().manual_seed(1200)
    first = None
    for idx in _forward_inputs(g, model.cfg.vocab_size, model.cfg.block_size):
        found = _first_difference(name, user, w, idx, n_head, pieces, model, atol, rtol)
        if isinstance(found, CheckResult):
            return found
        first = found if first is None else first
    slip = gradient_slip(
        name,
        lambda w, idx: user(w, idx, n_head, pieces),
        lambda w, idx: forward(w, idx, n_head, reference),
        (w, idx),
    )
    if slip:  # a piece of the reader's whose gradient is cut, or the forward's own lines
        for piece in PIECES[:5]:
            own = getattr(pieces, piece, None)
            if own is None or own is getattr(reference, piece):
                continue
            if piece == "mlp":  # notebook 07's check reads the reader's mlp_forward
                own = getattr(own, "mlp_forward", None)
                if own is None:
                    continue
            own_check = {
                "embed": check_embed,
                "rmsnorm": check_rmsnorm,
                "mlp": check_mlp,
                "attention": check_gpt_attention,
                "block": check_gpt_block,
            }[piece]
            result = own_check(own)
            if not result:
                text = result.message.split(": ", 1)[-1]  # without "✗ its name: "
                return CheckResult(
                    False,
                    f"✗ {name}: the values equal gptlib's GPT, but your {piece} fails its own "
                    f"check: {text}",
                )
        return CheckResult(False, f"✗ {name}: {slip}")
    T = model.cfg.block_size
    head = (
        f"✓ {name}: every tensor equals gptlib's GPT (atol {atol:g}) on ids of shape [3, {T}] "
        f"and [2, {T - 3}], and so does the gradient of every weight"
    )
    return CheckResult(True, "\n".join([head, *first]))


@torch.no_grad()
def estimate_forward_loss(fn, w, tokens, n_head, batch_size=32, n_batches=50, seed=1234):
    """gptlib.train.estimate_loss for a forward_fn(w, idx, n_head): the same windows (same seed,
    same batches), the same loss (GPT.loss, the shift inside)."""
    g = torch.Generator().manual_seed(seed)
    block = min(w["pos_emb"].shape[0], tokens.numel() - 1)
    losses = []
    for _ in range(n_batches):
        idx, labels = sample_batch(tokens, batch_size, block, g)
        losses.append(GPT.loss(fn(w, idx, n_head), labels).item())
    return sum(losses) / len(losses)


SLIPS = {
    "no positions": ("embed", _embed_no_positions),
    "norm over tokens": (
        "rmsnorm",
        dict((w.__name__, w) for _, w in RMSNORM_MISTAKES)["over_the_tokens"],
    ),
    "softmax over queries": ("attention", _att_softmax_over_queries),
    "no scale": ("attention", _att_no_scale),
    "no mask": ("attention", _att_no_mask),
    "proj transposed": ("attention", _att_proj_transposed),
    "gelu": ("mlp", _mlp_gelu),
    "no residual": ("block", _block_no_first_residual),
    "post-norm": ("block", _block_post_norm),
}


def planted_slip(name: str) -> types.SimpleNamespace:
    """The reference pieces with one known slip planted in one of them, for seeing what the
    checker says: `check_gpt_forward(forward, planted_slip("no scale"))`."""
    if name not in SLIPS:
        raise ValueError(f"unknown slip {name!r}; choose one of {', '.join(SLIPS)}")
    piece, wrong = SLIPS[name]
    return types.SimpleNamespace(**{**vars(reference), piece: wrong})


# ---------------------------------------------------------------------------------------------
# The loss


def _scored(forward_fn, w, idx, labels, n_head, cut=1, backwards=False):
    logits = forward_fn(w, idx, n_head)
    V = logits.size(-1)
    if backwards:
        logits, labels = logits[:, cut:], labels[:, :-cut]
    elif cut:
        logits, labels = logits[:, :-cut], labels[:, cut:]
    return logits.reshape(-1, V), labels.reshape(-1)


def _loss_slip(cut=1, backwards=False, reduction="mean", per_row=False, probs=False, pad0=False):
    def loss(*args):
        logits, labels = _scored(*args, cut=cut, backwards=backwards)
        if probs:
            logits = logits.softmax(dim=-1)
        if pad0:
            return F.cross_entropy(logits, labels.clamp(min=0))
        total = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
        if reduction == "sum":
            return total
        return total / (len(labels) if per_row else (labels != IGNORE_INDEX).sum())

    return loss


# fmt: off
LOSS_MISTAKES = [
    ("position t is scored against its own token labels[t], which it already sees: your loss is far"
     " lower than a model that must guess the next token could reach", _loss_slip(cut=0)),
    ("the shift runs the wrong way: position t + 1 is scored against the token at t, so each "
     "position is asked for the token before it", _loss_slip(backwards=True)),
    ("labels shifted twice: position t is scored against labels[t + 2], two places ahead, the token"
     " after the one it must predict", _loss_slip(cut=2)),
    ("the mean counts the padding positions (label -100) too: they add nothing to the sum but still"
     " count in the denominator, so your loss is too small when a row is padded",
     _loss_slip(per_row=True)),
    ("that is the sum of the per-position losses: it grows with the batch and the window, where the"
     " reference's does not", _loss_slip(reduction="sum")),
    ("F.cross_entropy was given probabilities: it applies the (log-)softmax itself, so your softmax"
     " ran twice and every loss sits close to ln V", _loss_slip(probs=True)),
    ("the padding labels (-100) were turned into token 0 and scored as if the text held it",
     _loss_slip(pad0=True)),
]
# fmt: on

LOSS_ERRORS = [
    ("out of bounds", "some labels are -100, padding (notebook 00): they are not tokens"),
]


def _loss_inputs(g: torch.Generator) -> tuple:
    w, idx = _weights(g), _ids(g)
    labels = idx.clone()
    labels[0, -2:] = IGNORE_INDEX  # a padded row: its last two positions are not scored
    return reference_forward, w, idx, labels, _H


@solved_by(gpt_loss)
def check_gpt_loss(fn: Callable) -> CheckResult:
    """`gpt_loss(forward_fn, w, idx, labels, n_head)` with the reference forward, random weights
    (V=11, T=7, d=12, 3 heads) and [2, 6] ids whose first row ends in two -100 labels; then the
    gradient of every weight."""
    return _check("gpt_loss", fn, gpt_loss, _loss_inputs, LOSS_MISTAKES, LOSS_ERRORS)


# ---------------------------------------------------------------------------------------------
# The training loop


def _loop(forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed,
          n_head, *, order=("zero", "backward", "clip", "step"), lr="cosine", gen="once",
          clip_each=False):  # fmt: skip
    """The training loop with one thing done wrong, to build the named slips from."""
    g = torch.Generator().manual_seed(seed)
    T = w["pos_emb"].shape[0]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    losses = []
    for step in range(steps):
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, max_lr, warmup, steps, lr)
        if gen == "every step":
            g = torch.Generator().manual_seed(seed)
        idx, labels = sample_batch(tokens, batch_size, T, None if gen == "global" else g)
        loss = gpt_loss(forward_fn, w, idx, labels, n_head)
        for action in order:
            if action == "zero":
                optimizer.zero_grad(set_to_none=True)
            elif action == "backward":
                loss.backward()
            elif action == "clip":
                for group in [[p] for p in params] if clip_each else [params]:
                    torch.nn.utils.clip_grad_norm_(group, clip)
            else:
                optimizer.step()
        losses.append(loss.item())
    return losses


def _loop_slip(**switches) -> Callable:
    return lambda *args: _loop(*args, **switches)


_NO_CLIP = (
    "the gradients were not clipped before the step: your updates are those of a run with no "
    "clipping, larger than train()'s whenever the global norm is above clip"
)
# fmt: off
LOOP_MISTAKES = [
    ("the gradients are never zeroed: each step's gradient is added to all the earlier ones, so "
     "from step 1 on every update is pushed by old batches",
     _loop_slip(order=("backward", "clip", "step"))),
    ("the gradients were zeroed between backward and the step: the step finds no gradient, so no "
     "weight ever moves and the loss only follows the batches",
     _loop_slip(order=("backward", "zero", "clip", "step"))),
    ("the step comes before backward: each update uses the previous step's gradient (none at step "
     "0), one batch late", _loop_slip(order=("step", "zero", "backward", "clip"))),
    (_NO_CLIP, _loop_slip(order=("zero", "backward", "step"))),
    (_NO_CLIP, _loop_slip(order=("zero", "backward", "step", "clip"))),
    ("each tensor's gradient was clipped on its own: every tensor's norm is held under clip, where "
     "train() scales all of them by one factor from their global norm", _loop_slip(clip_each=True)),
    ("the learning rate is never set: every step uses the optimizer's starting rate, with no warmup"
     " and no decay", _loop_slip(lr=None)),
    ("the rate warms up but never decays: after warmup every step uses max_lr",
     _loop_slip(lr="constant")),
    ("a new generator seeded `seed` every step: every step draws the same batch",
     _loop_slip(gen="every step")),
    ("the batches come from torch's global generator, not one seeded `seed`: your windows are not "
     "train()'s", _loop_slip(gen="global")),
]
# fmt: on

TRAIN_SETTINGS = {"steps": 6, "batch_size": 4, "max_lr": 1e-2, "warmup": 2, "clip": 0.2}
TRAIN_SEEDS = (3, 11)


def _train_setup(seed: int) -> tuple[dict, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    w = _map(_weights(g), torch.Tensor.double)
    return w, torch.randint(0, _V, (300,), generator=g)


def _run_train(fn, forward_fn, w, tokens, seed):
    """fn on trainable copies of w with gpt_optimizer, or (fn None) gptlib.train.train on a GPT
    holding the same weights: (losses, final weights as one float64 vector)."""
    s = TRAIN_SETTINGS
    with torch.random.fork_rng():
        torch.manual_seed(seed + 1000)  # the global stream differs from the seeded generator
        if fn is None:
            net = gpt_from_weights(w, _H)
            losses = train(net, tokens, s["steps"], s["batch_size"], max_lr=s["max_lr"],
                           warmup=s["warmup"], schedule="cosine", clip=s["clip"],
                           weight_decay=0.1, seed=seed, eval_every=0).loss  # fmt: skip
            final = gpt_weights(net)
        else:
            final = trainable(w)
            optimizer = gpt_optimizer(final, lr=s["max_lr"])
            args = (s["steps"], s["batch_size"], s["max_lr"], s["warmup"], s["clip"], seed, _H)
            losses = fn(forward_fn, final, optimizer, tokens, *args)
    return losses, torch.cat([t.detach().double().flatten() for _, t in flat_names(final)])


def _run(name: str, fn: Callable, *args):
    """(fn(*args), None), or (None, the CheckResult that says why it did not return)."""
    try:
        return fn(*args), None
    except NotImplementedError:
        return None, not_written(name)
    except Refused as e:
        return None, e.result
    except Exception as e:
        text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return None, CheckResult(False, f"✗ {name}: your function raised {text}")


def _same(a, b) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=1e-8, rtol=0)


@solved_by(train_gpt)
def check_gpt_train(fn: Callable, forward_fn: Callable | None = None) -> CheckResult:
    """`train_gpt(forward_fn, w, optimizer, ...)` on trainable float64 copies of random weights
    with gpt_optimizer, beside gptlib.train.train on a GPT holding the same weights: 6 steps from
    two seeds, losses and final weights to 1e-8. It trains `forward_fn` (yours, say), whose
    values and gradients are compared with the reference forward's first; the reference
    forward when None."""
    name = "train_gpt"
    if forward_fn is not None:
        w, tokens = _train_setup(TRAIN_SEEDS[0])
        idx = tokens[: 2 * _N].view(2, _N)
        try:
            with torch.no_grad():
                same = _close(forward_fn(w, idx, _H), reference_forward(w, idx, _H), 1e-8, 1e-6)
        except Exception as e:
            return CheckResult(
                False, f"✗ {name}: the forward it trains raised {type(e).__name__}: {e}"
            )
        if not same:
            return CheckResult(
                False,
                f"✗ {name}: the forward it trains does not give the reference's logits: "
                "check_gpt_forward says where",
            )
        cut = gradient_slip(
            "forward",
            lambda w: forward_fn(w, idx, _H),
            lambda w: reference_forward(w, idx, _H),
            (w,),
        )
        if cut:
            return CheckResult(False, f"✗ {name}: the forward it trains: {cut}")
    forward_fn = reference_forward if forward_fn is None else forward_fn
    user = guard(name, fn)
    steps = TRAIN_SETTINGS["steps"]
    for seed in TRAIN_SEEDS:
        w, tokens = _train_setup(seed)
        expected_losses, expected_w = _run_train(None, None, w, tokens, seed)
        expected = torch.tensor(expected_losses, dtype=torch.float64)
        ran, failed = _run(name, _run_train, user, forward_fn, w, tokens, seed)
        if failed is not None:
            return failed
        losses, got_w = ran
        try:
            got = torch.tensor([float(x) for x in losses], dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return CheckResult(
                False,
                f"✗ {name}: it returned {type(losses).__name__}, not a list of the {steps} "
                "losses as numbers",
            )
        if got.shape != expected.shape:
            return CheckResult(False, f"✗ {name}: returned {len(got)} losses for {steps} steps")
        if _same(got, expected) and _same(got_w, expected_w):
            continue
        for hint, wrong in LOOP_MISTAKES:
            wrong_losses, wrong_w = _run_train(wrong, forward_fn, w, tokens, seed)
            if _same(got, torch.tensor(wrong_losses, dtype=torch.float64)) and _same(
                got_w, wrong_w
            ):
                return CheckResult(False, f"✗ {name}: {hint}")
        differs = (got - expected).abs() > 1e-8
        if bool(differs[0]):
            return CheckResult(
                False,
                f"✗ {name}: the loss of step 0 is already {got[0]:.6f}, train() has "
                f"{expected[0]:.6f}: before any update, so the batch or the loss differs "
                "(does check_gpt_loss pass?)",
            )
        if bool(differs.any()):
            k = int(differs.nonzero()[0])
            return CheckResult(
                False,
                f"✗ {name}: the losses agree up to step {k - 1} and part at step {k} "
                f"({got[k]:.6f}, train() has {expected[k]:.6f}): the batches and the loss are "
                f"train()'s, the update before step {k} is not",
            )
        diff = float((got_w - expected_w).abs().max())
        return CheckResult(
            False,
            f"✗ {name}: the losses match but the final weights differ (by up to {diff:.3g}): "
            "the last update is not train()'s",
        )
    return CheckResult(
        True,
        f"✓ {name}: the same {steps} losses and final weights as gptlib.train.train (float64, "
        f"to 1e-8), from {len(TRAIN_SEEDS)} seeds",
    )


# ---------------------------------------------------------------------------------------------
# The sampler


def _sample(forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None,
            max_len=40, *, times=False, k_shift=0, top_k_dim=-1, position=-1, greedy=False,
            stop="all", keep_bos=False):  # fmt: skip
    """The sampler with one thing done wrong, to build the named slips from."""
    T = w["pos_emb"].shape[0]
    idx = torch.full((num, 1), bos)
    with torch.no_grad():
        for _ in range(max_len):
            logits = forward_fn(w, idx[:, -T:], n_head)[:, position]
            logits = logits * temperature if times else logits / temperature
            if top_k is not None:
                k = top_k + k_shift
                dim = 0 if top_k_dim == 0 else -1
                kth = logits.topk(min(k, logits.size(dim)), dim=dim).values
                kth = kth[-1:] if dim == 0 else kth[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if greedy:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                nxt = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
            ended = (idx[:, 1:] == bos).any(dim=1)
            if ended.any() if stop == "any" else ended.all():
                break
    rows = idx.tolist() if keep_bos else idx[:, 1:].tolist()
    first = 1 if keep_bos else 0
    return [r[: r.index(bos, first)] if bos in r[first:] else r for r in rows]


def _sample_slip(**switches) -> Callable:
    return lambda *args, **kwargs: _sample(*args, **kwargs, **switches)


# fmt: off
SAMPLE_MISTAKES = [
    ("the logits were multiplied by the temperature: a temperature below 1 then flattens the "
     "distribution and one above 1 sharpens it, the opposite of what it is for",
     _sample_slip(times=True)),
    ("one token too many survives the top-k cut: k + 1 per row", _sample_slip(k_shift=1)),
    ("one token too few survives the top-k cut: k - 1 per row", _sample_slip(k_shift=-1)),
    ("the top-k cut was taken along the batch axis (dim 0), across the rows: a row keeps the "
     "letters that are large in other rows, not its own k largest", _sample_slip(top_k_dim=0)),
    ("the next token was drawn from the first position's logits: every step predicts what follows "
     "the row's first token, whatever came after it", _sample_slip(position=0)),
    ("these names are greedy: the argmax at every step, the same name for every row, and the "
     "generator never used", _sample_slip(greedy=True)),
    ("the loop ended as soon as the first name ended: the other names are cut short",
     _sample_slip(stop="any")),
    ("each name still starts with the BOS id it was started from", _sample_slip(keep_bos=True)),
]
# fmt: on

SAMPLE_SETTINGS = ((1.0, None), (0.7, 5), (1.5, 3))
SAMPLE_NUM, SAMPLE_LEN = 6, 12  # longer than the block of 8: the context must be cropped


def _library_names(model, bos, generator, temperature, top_k) -> list[list[int]]:
    start = torch.full((SAMPLE_NUM, 1), bos)
    out = generate(model, start, SAMPLE_LEN, temperature, top_k, generator, bos, use_cache=False)
    return [row[: row.index(bos)] if bos in row else row for row in out[:, 1:].tolist()]


def _as_names(got) -> list[list[int]] | None:
    try:
        return [[int(t) for t in row] for row in got]
    except (TypeError, ValueError):
        return None


@solved_by(sample_names)
def check_gpt_sample(fn: Callable) -> CheckResult:
    """`sample_names(forward_fn, w, n_head, bos, num, generator, temperature, top_k, max_len)`
    with the reference forward and the trained microgpt (float64), at three settings, 6 names of
    up to 12 tokens: the ids of gptlib's generate (recompute path, BOS as the stop token) with
    equal generators."""
    name = "sample_names"
    asset = load_asset(ASSET)
    model = asset.model.double().eval()
    w, n_head, bos = gpt_weights(model), model.cfg.n_head, asset.tokenizer.bos_id
    user = guard(name, fn)
    for temperature, top_k in SAMPLE_SETTINGS:
        expected = _library_names(model, bos, torch.Generator().manual_seed(5), temperature, top_k)
        args = (reference_forward, w, n_head, bos, SAMPLE_NUM)
        runs = []
        for _ in range(2):
            g = torch.Generator().manual_seed(5)
            got, failed = _run(name, user, *args, g, temperature, top_k, SAMPLE_LEN)
            if failed is not None and (
                "must match the size" in failed.message or "out of range" in failed.message
            ):
                failed.message += (
                    f". Hint: the context grew longer than the block of T = {w['pos_emb'].shape[0]} "
                    "tokens, the rows the position table has"
                )
            if failed is not None:
                return failed
            if _as_names(got) is None:
                return CheckResult(
                    False,
                    f"✗ {name}: it returned {type(got).__name__}, not a list of token ids per name",
                )
            runs.append(_as_names(got))
        got, setting = runs[0], f"temperature {temperature}, top_k {top_k}"
        if got == expected:
            continue
        if runs[0] != runs[1]:
            return CheckResult(
                False,
                f"✗ {name}: two runs with equal generators gave different names: the draws do "
                "not come from the generator passed in",
            )
        for hint, wrong in SAMPLE_MISTAKES:
            g = torch.Generator().manual_seed(5)
            if got == wrong(*args, g, temperature, top_k, SAMPLE_LEN):
                return CheckResult(False, f"✗ {name}: {hint} ({setting})")
        if len(got) != len(expected):
            return CheckResult(False, f"✗ {name}: {len(got)} names for num = {SAMPLE_NUM}")
        row = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
        a, b = got[row], expected[row]
        at = next(
            (j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        return CheckResult(
            False,
            f"✗ {name}: at {setting}, name {row} parts from the library's at token {at} "
            f"({a[: at + 1]} against {b[: at + 1]})",
        )
    return CheckResult(
        True,
        f"✓ {name}: the same names as gptlib's generate with equal generators, at "
        f"{len(SAMPLE_SETTINGS)} settings of temperature and top_k",
    )


# ---------------------------------------------------------------------------------------------
# The cache


def _cached(x, w_qkv, w_proj, n_head, past, *, mask="offset", use_past=True, past_after=False,
            keep="all", swap=False):  # fmt: skip
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))
    k_new, v_new = k, v
    if past is not None and use_past:
        k = torch.cat([k, past[0]] if past_after else [past[0], k], dim=2)
        v = torch.cat([v, past[1]] if past_after else [past[1], v], dim=2)
    p = k.size(2) - n
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    if mask != "none":
        hidden = torch.ones(n, p + n, dtype=torch.bool).triu(p + 1 if mask == "offset" else 1)
        scores = scores.masked_fill(hidden, float("-inf"))
    y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T
    kv = (k_new, v_new) if keep == "new" else (k, v)
    return y, (kv[1], kv[0]) if swap else kv


def _flat(result):
    out, (k, v) = result
    return out, k, v


def _cached_slip(**switches) -> Callable:
    return lambda *args: _flat(_cached(*args, **switches))


# fmt: off
CACHED_MISTAKES = [
    ("no mask: when several new tokens come at once (the prefill), each sees the ones after it",
     _cached_slip(mask="none")),
    ("the mask is the plain square one, laid over the first keys: with p positions cached, new "
     "token i is kept from keys it may see, cached ones among them, and the last new token sees "
     "only the first n keys", _cached_slip(mask="square")),
    ("the new tokens attend only to each other: the keys and values in `past` never joined theirs",
     _cached_slip(use_past=False)),
    ("the cached keys and values went after the new ones: your keys are out of position order, so "
     "the mask hides the wrong ones", _cached_slip(past_after=True)),
    ("the output is right, but the returned (k, v) hold only the new positions: the next call would"
     " forget every position before them", _cached_slip(keep="new")),
    ("the output is right, but the returned pair is (v, k)", _cached_slip(swap=True)),
]
# fmt: on

CACHED_CASES = ((0, 5), (4, 1), (3, 3))  # (cached, new): a prefill, a decode step, a chunk


def _cached_inputs(case: tuple[int, int]) -> Callable[[torch.Generator], tuple]:
    p, n = case

    def make(g):
        bw = _weights(g)["blocks"][0]
        x = torch.randn(_B, n, _D, generator=g)
        d_h = _D // _H
        past = None
        if p:
            past = tuple(torch.randn(_B, _H, p, d_h, generator=g) for _ in range(2))
        return x, 2.0 * bw["qkv"], bw["attn_proj"], _H, past

    return make


def _flat_cached(x, w_qkv, w_proj, n_head, past):
    return _flat(cached_attention(x, w_qkv, w_proj, n_head, past))


@solved_by(cached_attention)
def check_gpt_cached_attention(fn: Callable) -> CheckResult:
    """`cached_attention(x, w_qkv, w_proj, n_head, past)` on random inputs (d=12, 3 heads): a
    prefill of 5 tokens (past None), one new token after 4 cached, three after 3; the output
    and the returned keys and values, then their gradients."""
    name = "cached_attention"

    def flat(*args):
        try:
            return _flat(fn(*args))
        except (TypeError, ValueError) as e:
            if "unpack" in str(e) or "not iterable" in str(e):
                raise TypeError("return two things, the output and the pair (k, v)") from None
            raise

    for case in CACHED_CASES:
        result = _check(name, flat, _flat_cached, _cached_inputs(case), CACHED_MISTAKES, trials=1)
        if not result:
            return result
    return CheckResult(
        True,
        f"✓ {name}: matches the reference for a prefill, a decode step and a chunk of three "
        "new tokens, output, cache and gradients",
    )


def _fc(w, idx, cache, n_head, p, *, positions="cached", store=True, append=False):
    at = cache[0][0].size(2) if cache else 0
    n = idx.size(1)
    first = at if positions == "cached" else 0
    x = w["tok_emb"][idx] + w["pos_emb"][first : first + n]
    for i, bw in enumerate(w["blocks"]):
        past = cache[i] if i < len(cache) else None
        a, kv = p.cached_attention(
            p.rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head, past
        )
        if store and (past is None or append):
            cache.append(kv)
        elif store:
            cache[i] = kv
        x = x + a
        x = x + p.mlp(p.rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])
    return p.rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


# fmt: off
FORWARD_CACHED_MISTAKES = [
    ("every call numbered its tokens from 0: the new tokens of a later call got the rows of the "
     "first positions of the position table, as if the text began there",
     lambda *a: _fc(*a, positions="zero")),
    ("the cache stays empty: each call sees only its own tokens, as if the text began there",
     lambda *a: _fc(*a, store=False)),
    ("each call appended another entry to the cache: after the prefill, every block reads the entry"
     " of the first call again, and the cache grows by one entry per call",
     lambda *a: _fc(*a, append=True)),
]
# fmt: on

FORWARD_CACHED_SCHEDULES = ((4, 1, 1, 1, 1), (2, 3, 1, 1, 1))  # a prefill, then pieces


def _feed(fn, w, idx, n_head, schedule, pieces) -> tuple[list[torch.Tensor], list]:
    cache: list = []
    outs, at = [], 0
    with torch.no_grad():
        for n in schedule:
            outs.append(fn(w, idx[:, at : at + n], cache, n_head, pieces))
            at += n
    return outs, cache


@solved_by(forward_cached)
def check_gpt_forward_cached(fn: Callable, pieces=None) -> CheckResult:
    """`forward_cached(w, idx, cache, n_head, pieces)` with the trained microgpt and the
    reference pieces (or `pieces`): 8 ids per row fed as a prefill then pieces, from an empty
    list; the logits of every call must equal the plain forward's at the same positions."""
    name = "forward_cached"
    pieces = reference if pieces is None else pieces
    user = guard(name, fn)
    model = load_asset(ASSET).model
    w, n_head = gpt_weights(model), model.cfg.n_head
    idx = torch.randint(
        0, w["tok_emb"].shape[0], (3, 8), generator=torch.Generator().manual_seed(8)
    )
    expected_all = reference_forward(w, idx, n_head)
    for schedule in FORWARD_CACHED_SCHEDULES:
        ran, failed = _run(name, _feed, user, w, idx, n_head, schedule, pieces)
        if failed is not None:
            return failed
        outs, cache = ran
        at = 0
        for call, (n, out) in enumerate(zip(schedule, outs, strict=True)):
            expected = expected_all[:, at : at + n]
            shape = list(getattr(out, "shape", ()))
            what = "the prefill" if call == 0 else f"call {call + 1} (positions {at}..{at + n - 1})"
            if shape != list(expected.shape):
                return CheckResult(
                    False,
                    f"✗ {name}: {what} returned shape {shape}, expected {list(expected.shape)}, "
                    "the logits of its new tokens",
                )
            if not torch.allclose(out, expected, atol=1e-5, rtol=1e-4):
                for hint, wrong in FORWARD_CACHED_MISTAKES:
                    wrong_outs, _ = _feed(wrong, w, idx, n_head, schedule, reference)
                    if all(_close(a, b, 1e-5, 1e-4) for a, b in zip(outs, wrong_outs, strict=True)):
                        return CheckResult(False, f"✗ {name}: {hint}")
                return CheckResult(
                    False,
                    f"✗ {name}: {what} differs from the plain forward at the same positions "
                    f"({difference(out, expected)})"
                    + ("; the calls before it match" if call else ""),
                )
            at += n
        kv_shape = [3, n_head, 8, w["tok_emb"].shape[1] // n_head]
        if len(cache) != len(w["blocks"]) or list(cache[0][0].shape) != kv_shape:
            return CheckResult(
                False,
                f"✗ {name}: the logits match, but after 8 tokens the cache holds {len(cache)} "
                f"entries (the model has {len(w['blocks'])} block), or its keys are not {kv_shape}",
            )
    return CheckResult(
        True,
        f"✓ {name}: fed as a prefill and then piece by piece ({len(FORWARD_CACHED_SCHEDULES)} "
        "ways), every call's logits equal the plain forward's at the same positions",
    )


# ---------------------------------------------------------------------------------------------
# The ladder, climbed with the reader's pieces and loop


def rung_weights(model: torch.nn.Module) -> dict:
    """A rung of gptlib.ladder as a dict of trainable tensors in gpt_weights' layout (a rung
    without attention gets a position table of zeros, which its forward never reads)."""
    if isinstance(model, GPT):
        return trainable(gpt_weights(model))
    bw = {}
    if model.attn is not None:
        bw.update(qkv=model.attn.qkv.weight, attn_proj=model.attn.proj.weight)
    if model.mlp is not None:
        bw.update(fc=model.mlp.fc.weight, mlp_proj=model.mlp.proj.weight)
    cfg = model.cfg
    pos = (
        model.pos_emb.weight
        if model.pos_emb is not None
        else torch.zeros(cfg.block_size, cfg.n_embd)
    )
    return trainable({"tok_emb": model.tok_emb.weight, "pos_emb": pos, "blocks": [bw],
                      "lm_head": model.lm_head.weight})  # fmt: skip


def rung_forwards(pieces, forward: Callable) -> dict:
    """Each rung's forward_fn(w, idx, n_head), made of the pieces given."""

    def bigram(w, idx, n_head):
        return w["tok_emb"][idx] @ w["lm_head"].T  # each position sees its own token only

    def attended(w, idx, n_head):  # no residual path: attention's output replaces x
        b = w["blocks"][0]
        x = pieces.embed(idx, w["tok_emb"], w["pos_emb"])
        return pieces.attention(x, b["qkv"], b["attn_proj"], n_head)[0]

    def attention_only(w, idx, n_head):
        return attended(w, idx, n_head) @ w["lm_head"].T

    def with_mlp(w, idx, n_head):
        b = w["blocks"][0]
        return pieces.mlp(attended(w, idx, n_head), b["fc"], b["mlp_proj"]) @ w["lm_head"].T

    def full(w, idx, n_head):
        return forward(w, idx, n_head, pieces)

    return dict(zip(RUNGS, (bigram, attention_only, attention_only, with_mlp, full), strict=True))


def climb_yours(corpus, *, pieces, forward, train_fn, steps=3000, batch_size=32, max_lr=1e-2,
                seed=0, eval_batches=50) -> list[Rung]:  # fmt: skip
    """gptlib.ladder.climb(..., min_lr=0.0) with the given pieces, forward and loop: every rung
    starts from the library rung's initial weights (same seed), is trained by `train_fn` (100
    warmup steps, cosine to 0, clip 1.0) and scored on the validation tokens."""
    forwards = rung_forwards(pieces, forward)
    results = []
    for name in RUNGS:
        torch.manual_seed(seed)
        model = build_rung(name, corpus.vocab_size)
        n_head = model.cfg.n_head
        w = rung_weights(model)
        optimizer = gpt_optimizer(w, lr=max_lr)
        train_fn(forwards[name], w, optimizer, corpus.train, steps, batch_size, max_lr, 100, 1.0,
                 seed, n_head)  # fmt: skip
        val = estimate_forward_loss(forwards[name], w, corpus.val, n_head, n_batches=eval_batches)
        results.append(Rung(name, sum(p.numel() for p in model.parameters()), val))
    return results
