"""Notebook 14, the capstone: the whole microgpt forward pass, written from plain tensors.

The reader writes six functions, each checked on its own on random inputs, then all together:

- `embed(idx, tok_emb, pos_emb)`: ids [B, n], tables [V, d] and [T, d] -> x [B, n, d]
- `rmsnorm(x, gain, eps=1e-5)`: x [B, n, d], gain [d] -> [B, n, d]
- `attention(x, w_qkv, w_proj, n_head)`: x [B, n, d], w_qkv [3d, d], w_proj [d, d] ->
  (output [B, n, d], weights [B, h, n, n])
- `mlp(x, w_fc, w_proj)`: x [B, n, d], w_fc [4d, d], w_proj [d, 4d] -> [B, n, d] (ReLU)
- `block(x, bw, n_head)`: one pre-norm block, bw a dict of that block's weights -> [B, n, d]
- `forward(w, idx, n_head)`: the weights dict of `gpt_weights` and ids [B, n] -> logits [B, n, V]

Every matrix keeps nn.Linear's [out, in] layout, so a layer computes x @ W.T.

`check_gpt_forward` runs the reader's `forward` beside gptlib's `GPT` and compares them tensor by
tensor. On gptlib's side forward hooks catch each module's output; on the reader's side a profile
hook (`sys.setprofile`) catches what the reader's pieces return (the functions the reader's
`forward` finds under the names embed, rmsnorm, attention, mlp and block). The first tensor that
differs is named, with both shapes and, when the reader's piece equals a known slip, that slip.

A wrong piece changes every tensor after it, so two slips at once could make the first tensor
that differs sit in a correct piece. The composite checks (`check_gpt_block`, `check_gpt_forward`)
therefore first run each piece the reader's function calls through that piece's own check and
name the first that fails; only when they all pass is the wiring judged, by running the reader's
function with the reference pieces put in place of the reader's under the same names (the
reader's are put back afterwards). A forward that never calls its embed is named as such.

The reference solutions are the functions `embed` ... `forward` below, gathered in `reference`.
"""

from __future__ import annotations

import contextlib
import math
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gptlib.checkpoint import load_asset
from gptlib.data import sample_batch
from gptlib.exercises.checking import (
    CheckResult,
    Refused,
    _close,
    compare,
    difference,
    not_written,
    refusing,
    solved_by,
)
from gptlib.model import GPT

__all__ = [
    "check_gpt_attention",
    "check_gpt_block",
    "check_gpt_embed",
    "check_gpt_forward",
    "check_gpt_mlp",
    "check_gpt_rmsnorm",
    "estimate_forward_loss",
    "forward_with_pieces",
    "gpt_weights",
    "planted_slip",
    "trace_forward",
    "trace_gpt",
]

ASSET = "names-microgpt-h4.pt"
PIECES = ("embed", "rmsnorm", "attention", "mlp", "block")

# ---------------------------------------------------------------------------------------------
# The reference solutions


def embed(idx: torch.Tensor, tok_emb: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
    """idx [B, n] (n <= T), tok_emb [V, d], pos_emb [T, d] -> x [B, n, d]."""
    n = idx.shape[1]
    return tok_emb[idx] + pos_emb[:n]  # [B, n, d] + [n, d]: rows 0..n-1 of the position table


def rmsnorm(x: torch.Tensor, gain: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """x [B, n, d], gain [d] -> x / sqrt(mean(x^2 over d) + eps) * gain, [B, n, d]."""
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # [B, n, 1]: one statistic per token
    return x / torch.sqrt(ms + eps) * gain


def attention(
    x: torch.Tensor, w_qkv: torch.Tensor, w_proj: torch.Tensor, n_head: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal multi-head self-attention. x [B, n, d], w_qkv [3d, d], w_proj [d, d] ->
    (output [B, n, d], attention weights [B, h, n, n])."""
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)  # each [B, n, d], in the order q, k, v
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))  # [B, h, n, d_h]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # [B, h, n, n]: rows queries, cols keys
    future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), diagonal=1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)  # rows sum to 1
    y = (weights @ v).transpose(1, 2).reshape(B, n, d)  # heads side by side again: [B, n, d]
    return y @ w_proj.T, weights


def mlp(x: torch.Tensor, w_fc: torch.Tensor, w_proj: torch.Tensor) -> torch.Tensor:
    """x [B, n, d], w_fc [4d, d], w_proj [d, 4d] -> relu(x @ w_fc.T) @ w_proj.T, [B, n, d]."""
    return torch.relu(x @ w_fc.T) @ w_proj.T  # [B, n, 4d] in between


def block(x: torch.Tensor, bw: dict, n_head: int) -> torch.Tensor:
    """One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)). x [B, n, d]."""
    a, _ = attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)
    x = x + a  # the first residual path
    return x + mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])  # the second


def forward(w: dict, idx: torch.Tensor, n_head: int) -> torch.Tensor:
    """The weights of `gpt_weights` and ids [B, n] -> logits [B, n, V]."""
    x = embed(idx, w["tok_emb"], w["pos_emb"])  # [B, n, d]
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T  # [B, n, d] @ [d, V] -> [B, n, V]


reference = types.SimpleNamespace(
    embed=embed, rmsnorm=rmsnorm, attention=attention, mlp=mlp, block=block, forward=forward
)


# ---------------------------------------------------------------------------------------------
# The weights as plain tensors


def gpt_weights(model: GPT) -> dict:
    """The weights of a pre-norm RMSNorm GPT without biases as plain tensors (copies):
    {"tok_emb", "pos_emb", "blocks": [{"ln1", "qkv", "attn_proj", "ln2", "fc", "mlp_proj"}, ...],
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

    def t(p: torch.Tensor) -> torch.Tensor:
        return p.detach().clone()

    return {
        "tok_emb": t(model.tok_emb.weight),
        "pos_emb": t(model.pos_emb.weight),
        "blocks": [
            {
                "ln1": t(b.ln1.weight),
                "qkv": t(b.attn.qkv.weight),
                "attn_proj": t(b.attn.proj.weight),
                "ln2": t(b.ln2.weight),
                "fc": t(b.mlp.fc.weight),
                "mlp_proj": t(b.mlp.proj.weight),
            }
            for b in model.blocks
        ],
        "ln_f": t(model.ln_f.weight),
        "lm_head": t(model.lm_head.weight),
    }


def state_dict_key(name: str) -> str:
    """Where a weight of `gpt_weights` lives in GPT.state_dict(): "blocks.0.qkv" ->
    "blocks.0.attn.qkv.weight"."""
    inner = {
        "ln1": "ln1",
        "qkv": "attn.qkv",
        "attn_proj": "attn.proj",
        "ln2": "ln2",
        "fc": "mlp.fc",
        "mlp_proj": "mlp.proj",
    }
    parts = name.split(".")
    if parts[0] == "blocks":
        return f"blocks.{parts[1]}.{inner[parts[2]]}.weight"
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


# ---------------------------------------------------------------------------------------------
# Typical slips, one list per piece. Each wrong function has its piece's signature; the piece
# checks and the layer-by-layer checker both use them.


def _embed_no_positions(idx, tok_emb, pos_emb):
    return tok_emb[idx]


def _embed_positions_from_ids(idx, tok_emb, pos_emb):
    return tok_emb[idx] + pos_emb[idx]


def _embed_positions_from_one(idx, tok_emb, pos_emb):
    n = idx.shape[1]
    return tok_emb[idx] + pos_emb[1 : n + 1]  # places counted 1..n


def _embed_concatenated(idx, tok_emb, pos_emb):
    B, n = idx.shape
    return torch.cat([tok_emb[idx], pos_emb[:n].expand(B, n, -1)], dim=-1)


EMBED_MISTAKES = [
    (
        "the position embeddings are missing: your x is the token embeddings alone, so a token "
        "gets the same vector wherever it sits in the window and the model cannot tell 'ab' "
        "from 'ba'",
        _embed_no_positions,
    ),
    (
        "the position table was indexed with the token ids: each token got the row of its id "
        "wherever it stands (a token 5 always gets row 5), so your position embeddings say "
        "nothing about places, only a second thing about tokens",
        _embed_positions_from_ids,
    ),
    (
        "the positions are off by one: the window's places were counted from 1, so the first "
        "token got row 1 of pos_emb and row 0 was never used; the first place in the window is "
        "place 0",
        _embed_positions_from_one,
    ),
    (
        "the two embeddings were concatenated along the features: your x is [B, n, 2d], twice "
        "as wide as the d features every later layer reads",
        _embed_concatenated,
    ),
]

EMBED_ERRORS = [
    (
        "must match the size of tensor",
        "pos_emb has T rows, one per place a window can have, and this window holds n tokens: "
        "the whole table puts T position rows against n token rows",
    ),
]


def _rms_eps_outside(x, gain, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * gain


def _rms_no_gain(x, gain, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rms_over_tokens(x, gain, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean(dim=-2, keepdim=True) + eps) * gain


def _rms_over_everything(x, gain, eps=1e-5):
    return x / torch.sqrt(x.pow(2).mean() + eps) * gain


def _rms_centred(x, gain, eps=1e-5):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * gain


def _rms_no_sqrt(x, gain, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * gain


RMSNORM_MISTAKES = [
    (
        "eps is added after the square root: your norm divides by rms + eps, so a token whose "
        "features are all near zero is blown up to about unit size, where the model's eps keeps "
        "it smaller",
        _rms_eps_outside,
    ),
    (
        "the gain is never used: your output is x over its root mean square alone, so every "
        "feature keeps the same scale whatever the learnt gain holds",
        _rms_no_gain,
    ),
    (
        "the mean square runs over the tokens (dim=-2), not over each token's features: each "
        "feature is scaled by its size across the window, so a token's output depends on the "
        "other tokens, later ones included",
        _rms_over_tokens,
    ),
    (
        "one mean square for the whole tensor: every token of every sequence is divided by the "
        "same number, so a token's output depends on the whole batch and a small token stays "
        "small",
        _rms_over_everything,
    ),
    (
        "the features' mean was subtracted before the division (LayerNorm's centring, which "
        "RMSNorm does not do): each of your tokens comes out with mean zero, so a shift shared "
        "by all its features is lost",
        _rms_centred,
    ),
    (
        "x is divided by the mean square itself, not by its root: your output shrinks as the "
        "token grows (double a token and its output halves), where a norm's output keeps the "
        "same size",
        _rms_no_sqrt,
    ),
]


def _heads(t, n_head):
    B, n, d = t.shape
    return t.view(B, n, n_head, d // n_head).transpose(1, 2)  # [B, h, n, d_h]


def _attend(
    x,
    w_qkv,
    w_proj,
    n_head,
    *,
    scale=None,
    mask="future",
    fill=float("-inf"),
    dim=-1,
    split=_heads,
    order=(0, 1, 2),
    proj_t=True,
    merge_t=True,
    project=True,
    mask_after=False,
):
    """The reference attention with one switch flipped: every attention slip is one call."""
    B, n, d = x.shape
    parts = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (split(parts[i], n_head) for i in order)
    d_h = d // n_head
    scores = q @ k.transpose(-2, -1) / (math.sqrt(d_h) if scale is None else scale)
    ones = torch.ones(n, n, dtype=torch.bool, device=x.device)
    hidden = torch.triu(ones, 1) if mask == "future" else torch.tril(ones, -1)
    if mask is not None and not mask_after:
        scores = scores.masked_fill(hidden, fill)
    weights = scores.softmax(dim=dim)
    if mask_after:  # the future weights zeroed after the softmax, the rest not renormalised
        weights = weights.masked_fill(hidden, 0.0)
    out = weights @ v  # [B, h, n, d_h]
    y = out.transpose(1, 2).reshape(B, n, d) if merge_t else out.reshape(B, n, d)
    if project:
        y = y @ (w_proj.T if proj_t else w_proj)
    return y, weights


def _att_softmax_over_queries(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, dim=-2)


def _att_no_scale(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, scale=1.0)


def _att_scale_by_d(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, scale=math.sqrt(x.shape[-1]))


def _att_scale_by_d_h(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, scale=float(x.shape[-1] // n_head))


def _att_no_mask(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, mask=None)


def _att_past_masked(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, mask="past")


def _att_zero_filled(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, fill=0.0)


def _att_proj_transposed(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, proj_t=False)


def _att_no_proj(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, project=False)


def _att_q_k_swapped(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, order=(1, 0, 2))


def _att_k_v_swapped(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, order=(0, 2, 1))


def _att_masked_after_softmax(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, mask_after=True)


def _split_without_transpose(t, n_head):
    B, n, d = t.shape
    return t.reshape(B, n_head, n, d // n_head)


def _att_split_without_transpose(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, split=_split_without_transpose)


def _att_merge_without_transpose(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, merge_t=False)


def _att_heads_reshaped_both_ways(x, w_qkv, w_proj, n_head):
    return _attend(x, w_qkv, w_proj, n_head, split=_split_without_transpose, merge_t=False)


TRANSPOSE_HINT = (
    "every matrix is stored as nn.Linear keeps it, [out, in] (w_qkv is [3d, d], w_fc [4d, d]): "
    "multiplied as it is stored, a matrix lines x's features up with its out axis, not its in axis"
)

ATTENTION_MISTAKES = [
    (
        "the softmax runs over dim=-2, the queries: your weights sum to 1 down each key's "
        "column, not along each query's row, so a query's weights over the keys it sees do not "
        "add up to 1",
        _att_softmax_over_queries,
    ),
    (
        "the scores are not scaled: each is sqrt(d_h) times too large, so your softmax is "
        "sharper than the model's and piles the weight onto fewer keys",
        _att_no_scale,
    ),
    (
        "the scores were divided by sqrt(d) = sqrt(h * d_h), the width of all the heads "
        "together: each is sqrt(h) times too small, so your weights are flatter than the "
        "model's",
        _att_scale_by_d,
    ),
    (
        "the scores were divided by d_h itself: each is sqrt(d_h) times too small, so your "
        "weights are flatter than the model's",
        _att_scale_by_d_h,
    ),
    (
        "there is no causal mask: each query's weights also go to the keys after it, so a "
        "position reads tokens from its own future",
        _att_no_mask,
    ),
    (
        "the mask hides the wrong side: each query sees itself and the keys after it, and the "
        "past is hidden (your weights are zero below the diagonal instead of above it)",
        _att_past_masked,
    ),
    (
        "the hidden scores were set to 0: a score of 0 still counts exp(0) = 1 in the softmax, "
        "so your weights above the diagonal are not zero and the future keys still take a "
        "share",
        _att_zero_filled,
    ),
    (
        "the output projection multiplies by w_proj as it is stored, [out, in]: it is square, "
        "so the shapes fit and nothing raises, but each output feature is made with a column "
        "of w_proj instead of its row",
        _att_proj_transposed,
    ),
    (
        "the output projection is missing: your output is the heads glued side by side, never "
        "mixed by w_proj, so each output feature comes from one head alone",
        _att_no_proj,
    ),
    (
        "q and k are swapped: your scores compare the keys with the queries, so before the mask "
        "your score for query i and key j is the model's for query j and key i",
        _att_q_k_swapped,
    ),
    (
        "k and v are swapped: the scores compare the queries with v, and the weights average k; "
        "the fused projection gives q, k, v in that order along its last axis",
        _att_k_v_swapped,
    ),
    (
        "the mask was applied after the softmax: the future weights were zeroed, but the weights "
        "left were not renormalised, so each query's row sums to less than 1; the mask belongs "
        "on the scores, before the softmax",
        _att_masked_after_softmax,
    ),
    (
        "the heads were cut with a reshape alone to [B, h, n, d_h]: head 0 then holds all the "
        "features of the first few positions instead of its own d_h features of every position, "
        "so positions are mixed; the head axis has to be moved next to the batch axis, a "
        "reshape cannot put it there",
        _att_split_without_transpose,
    ),
    (
        "the heads were glued back with a reshape alone, the head axis still in front of the "
        "positions: each output position is then made of several positions of one head; the "
        "head axis has to move back behind the positions first",
        _att_merge_without_transpose,
    ),
    (
        "the heads were cut and glued back with reshapes alone: the two undo each other, but in "
        "between each head held whole positions' features, not its d_h-feature slice of every "
        "position, so the scores mixed positions; the head axis has to be moved, not reshaped "
        "into place",
        _att_heads_reshaped_both_ways,
    ),
]

MATMUL_ERRORS = [
    ("mat1 and mat2 shapes cannot be multiplied", TRANSPOSE_HINT),
    ("size mismatch", TRANSPOSE_HINT),
]

ATTENTION_ERRORS = [
    (
        "must match the size of tensor",
        "if you wrote k.T: on a tensor with more than two dimensions .T reverses all of them "
        "([B, h, n, d_h] becomes [d_h, n, h, B]), so the batch and head axes of the product no "
        "longer line up; the scores need only the last two axes of k swapped",
    ),
    *MATMUL_ERRORS,
]

# The error hints of each piece; the layer-by-layer checker picks those of the piece that raised.
PIECE_ERRORS = {"attention": ATTENTION_ERRORS}


def _mlp_no_activation(x, w_fc, w_proj):
    return x @ w_fc.T @ w_proj.T


def _mlp_gelu(x, w_fc, w_proj):
    return F.gelu(x @ w_fc.T) @ w_proj.T


def _mlp_activation_after(x, w_fc, w_proj):
    return torch.relu(x @ w_fc.T @ w_proj.T)


def _mlp_swapped(x, w_fc, w_proj):
    return torch.relu(x @ w_proj) @ w_fc


def _mlp_adds_its_input(x, w_fc, w_proj):
    return x + torch.relu(x @ w_fc.T) @ w_proj.T


MLP_MISTAKES = [
    (
        "the ReLU is missing: nothing happens between the two layers, so they collapse into a "
        "single d x d matrix and your output is linear in x",
        _mlp_no_activation,
    ),
    (
        "this is GELU, not microgpt's ReLU: your hidden [B, n, 4d] tensor lets small negative "
        "values through where the model's has zeros",
        _mlp_gelu,
    ),
    (
        "the ReLU comes after the second layer: your output went through it (no output feature "
        "is negative), and the hidden [B, n, 4d] tensor between the two layers did not",
        _mlp_activation_after,
    ),
    (
        "the two weight matrices swapped roles: your first layer used w_proj and the second "
        "w_fc, each as it is stored ([out, in]); the shapes happen to fit, so nothing raises",
        _mlp_swapped,
    ),
    (
        "the MLP adds its own input back (a residual inside mlp): the residual belongs to the "
        "block, which adds x around the MLP, so here it would be added twice; mlp returns the "
        "second layer's output alone",
        _mlp_adds_its_input,
    ),
]


def _attn_of(x, bw, n_head):
    return attention(x, bw["qkv"], bw["attn_proj"], n_head)[0]


def _mlp_of(x, bw):
    return mlp(x, bw["fc"], bw["mlp_proj"])


def _block_no_first_residual(x, bw, n_head):
    x = _attn_of(rmsnorm(x, bw["ln1"]), bw, n_head)
    return x + _mlp_of(rmsnorm(x, bw["ln2"]), bw)


def _block_no_second_residual(x, bw, n_head):
    x = x + _attn_of(rmsnorm(x, bw["ln1"]), bw, n_head)
    return _mlp_of(rmsnorm(x, bw["ln2"]), bw)


def _block_no_residuals(x, bw, n_head):
    x = _attn_of(rmsnorm(x, bw["ln1"]), bw, n_head)
    return _mlp_of(rmsnorm(x, bw["ln2"]), bw)


def _block_adds_normalised(x, bw, n_head):
    h = rmsnorm(x, bw["ln1"])
    x = h + _attn_of(h, bw, n_head)
    h = rmsnorm(x, bw["ln2"])
    return h + _mlp_of(h, bw)


def _block_mlp_residual_twice(x, bw, n_head):
    # An mlp that returns its input plus its output, inside a block that adds x again.
    x = x + _attn_of(rmsnorm(x, bw["ln1"]), bw, n_head)
    h = rmsnorm(x, bw["ln2"])
    return x + h + _mlp_of(h, bw)


def _block_post_norm(x, bw, n_head):
    x = rmsnorm(x + _attn_of(x, bw, n_head), bw["ln1"])
    return rmsnorm(x + _mlp_of(x, bw), bw["ln2"])


def _block_no_norms(x, bw, n_head):
    x = x + _attn_of(x, bw, n_head)
    return x + _mlp_of(x, bw)


def _block_gains_swapped(x, bw, n_head):
    x = x + _attn_of(rmsnorm(x, bw["ln2"]), bw, n_head)
    return x + _mlp_of(rmsnorm(x, bw["ln1"]), bw)


def _block_parallel(x, bw, n_head):
    return x + _attn_of(rmsnorm(x, bw["ln1"]), bw, n_head) + _mlp_of(rmsnorm(x, bw["ln2"]), bw)


BLOCK_MISTAKES = [
    (
        "the residual around attention is missing: your x is replaced by the attention's "
        "output, so the block's input never reaches the MLP or the block's output",
        _block_no_first_residual,
    ),
    (
        "the residual around the MLP is missing: your block returns the MLP's output alone, so "
        "x after attention is dropped from the block's output",
        _block_no_second_residual,
    ),
    (
        "both residual paths are missing: each sub-layer's output replaces x, so nothing of the "
        "block's input reaches its output",
        _block_no_residuals,
    ),
    (
        "the residual paths carry the normalised x (gain included), not the x the block was "
        "given: your stream loses its own scale at every sub-layer",
        _block_adds_normalised,
    ),
    (
        "this is post-norm: each sub-layer reads x unnormalised and the norm comes after the "
        "residual sum, so your block's output is itself normalised",
        _block_post_norm,
    ),
    (
        "the norms are missing: attention and the MLP read x unnormalised, and the gains ln1 "
        "and ln2 are never used",
        _block_no_norms,
    ),
    (
        "the two gains are swapped: the norm before attention uses bw['ln2'] and the norm "
        "before the MLP bw['ln1']",
        _block_gains_swapped,
    ),
    (
        "the MLP reads the block's input, not x after attention's residual: your attention and "
        "MLP run side by side, so the MLP never sees what attention added",
        _block_parallel,
    ),
    (
        "the MLP's residual is added twice: your mlp adds its own (normalised) input back, and "
        "the block adds x around it again; the residual belongs to the block alone, so mlp "
        "returns the second layer's output alone",
        _block_mlp_residual_twice,
    ),
]


def _forward_no_final_norm(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return x @ w["lm_head"].T


def _forward_tied(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["tok_emb"].T


def _forward_probabilities(w, idx, n_head):
    return forward(w, idx, n_head).softmax(dim=-1)


def _forward_residual_around_block(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = x + block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


def _forward_no_blocks(w, idx, n_head):
    return rmsnorm(embed(idx, w["tok_emb"], w["pos_emb"]), w["ln_f"]) @ w["lm_head"].T


FORWARD_MISTAKES = [
    (
        "the final norm is missing: the head reads the last block's output unnormalised, and "
        "ln_f's gain is never used",
        _forward_no_final_norm,
    ),
    (
        "the head used the token table: your logits compare x with the token embeddings, but "
        "microgpt's head is untied",
        _forward_tied,
    ),
    (
        "these are probabilities: your forward applies a softmax, so each row sums to 1, and "
        "the loss and the sampler would apply theirs a second time",
        _forward_probabilities,
    ),
    (
        "the blocks were skipped: your forward goes from the embeddings straight to the final "
        "norm, and w['blocks'] is never used",
        _forward_no_blocks,
    ),
    (
        "the loop adds x around each block, but the block already adds its own residuals: x is "
        "counted twice, so after each block your stream holds the block's input once too "
        "many",
        _forward_residual_around_block,
    ),
]

MISTAKES = {
    "embed": EMBED_MISTAKES,
    "rmsnorm": RMSNORM_MISTAKES,
    "attention": ATTENTION_MISTAKES,
    "mlp": MLP_MISTAKES,
    "block": BLOCK_MISTAKES,
    "forward": FORWARD_MISTAKES,
}

# ---------------------------------------------------------------------------------------------
# One check per piece, on random inputs. The sizes differ (V != T != d, h > 1, n < T) so that
# a mixed-up axis or table changes a shape or a value.

_B, _N, _V, _T, _D, _H = 2, 6, 11, 7, 12, 3


def _weights(g: torch.Generator, n_layer: int = 1) -> dict:
    def r(*shape, scale=0.3):
        return scale * torch.randn(*shape, generator=g)

    def gain():
        return 0.5 + torch.rand(_D, generator=g)  # distinct gains, so a missing one shows

    return {
        "tok_emb": r(_V, _D, scale=1.0),
        "pos_emb": r(_T, _D, scale=1.0),
        "blocks": [
            {
                "ln1": gain(),
                "qkv": r(3 * _D, _D),
                "attn_proj": r(_D, _D),
                "ln2": gain(),
                "fc": r(4 * _D, _D),
                "mlp_proj": r(_D, 4 * _D),
            }
            for _ in range(n_layer)
        ],
        "ln_f": gain(),
        "lm_head": r(_V, _D),
    }


def _ids(g):
    return torch.randint(0, _T - 1, (_B, _N), generator=g)  # ids < T: wrong lookups still run


def _embed_inputs(g):
    w = _weights(g)
    return _ids(g), w["tok_emb"], w["pos_emb"]


def _rmsnorm_inputs(g):
    x = 3.0 * torch.randn(_B, _N, _D, generator=g)
    x[:, 0] *= 1e-3  # a near-zero token: where the place of eps matters
    return x, 0.5 + torch.rand(_D, generator=g), 1e-5


def _attention_inputs(g):
    x = torch.randn(_B, _N, _D, generator=g)
    bw = _weights(g)["blocks"][0]
    w_qkv = 2.0 * bw["qkv"]  # sharper scores, so a missing scale changes the weights a lot
    return x, w_qkv, bw["attn_proj"], _H


def _mlp_inputs(g):
    bw = _weights(g)["blocks"][0]
    return torch.randn(_B, _N, _D, generator=g), bw["fc"], bw["mlp_proj"]


def _block_inputs(g):
    x = 2.0 * torch.randn(_B, _N, _D, generator=g) + 0.5
    return x, _weights(g)["blocks"][0], _H


def _forward_inputs(g):
    return _weights(g, n_layer=2), _ids(g), _H


@solved_by(embed)
def check_gpt_embed(fn) -> CheckResult:
    """`embed(idx, tok_emb, pos_emb)` on random [2, 6] ids, V=11, T=7, d=12."""
    return compare(
        "embed", fn, embed, _embed_inputs, mistakes=EMBED_MISTAKES, error_hints=EMBED_ERRORS
    )


@solved_by(rmsnorm)
def check_gpt_rmsnorm(fn) -> CheckResult:
    """`rmsnorm(x, gain, eps)` on random [2, 6, 12] inputs with one near-zero token each."""
    return compare("rmsnorm", fn, rmsnorm, _rmsnorm_inputs, mistakes=RMSNORM_MISTAKES)


@solved_by(attention)
def check_gpt_attention(fn) -> CheckResult:
    """`attention(x, w_qkv, w_proj, n_head)` on random [2, 6, 12] inputs, 3 heads of 4."""
    return compare(
        "attention",
        fn,
        attention,
        _attention_inputs,
        mistakes=ATTENTION_MISTAKES,
        error_hints=ATTENTION_ERRORS,
    )


@solved_by(mlp)
def check_gpt_mlp(fn) -> CheckResult:
    """`mlp(x, w_fc, w_proj)` on random [2, 6, 12] inputs."""
    return compare("mlp", fn, mlp, _mlp_inputs, mistakes=MLP_MISTAKES, error_hints=MATMUL_ERRORS)


# ---------------------------------------------------------------------------------------------
# The layer-by-layer checker


def _steps(n_layer: int) -> list[tuple[str, str, int, str]]:
    """Every tensor compared, in the order the forward pass makes them:
    (label, piece, which call of that piece, what of the call: "out", "out0", "out1", "in")."""
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
    steps += [("final norm", "rmsnorm", 2 * n_layer, "out"), ("logits", "forward", 0, "out")]
    return steps


def _expected_calls(n_layer: int) -> dict[str, int]:
    return {
        "embed": 1,
        "rmsnorm": 2 * n_layer + 1,
        "attention": n_layer,
        "mlp": n_layer,
        "block": n_layer,
        "forward": 1,
    }


@torch.no_grad()
def trace_gpt(model: GPT, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """Run gptlib's GPT on idx [B, n] with forward hooks and return every tensor of `_steps`,
    label -> tensor, in order. Also: "inputs" of each norm, for the checker."""
    caught: dict[str, torch.Tensor] = {}
    hooks = []

    def keep(label, which="out"):
        def hook(module, args, output):
            caught[label] = (args[0] if which == "in" else output).detach().clone()

        return hook

    def keep_input(label):
        def pre_hook(module, args):
            caught[label] = args[0].detach().clone()

        return pre_hook

    for i, b in enumerate(model.blocks):
        hooks += [
            b.register_forward_pre_hook(keep_input(f"block {i} · input")),
            b.ln1.register_forward_hook(keep(f"block {i} · norm 1")),
            b.attn.register_forward_hook(keep(f"block {i} · attention output")),
            b.ln2.register_forward_pre_hook(keep_input(f"block {i} · x + attention")),
            b.ln2.register_forward_hook(keep(f"block {i} · norm 2")),
            b.mlp.register_forward_hook(keep(f"block {i} · mlp")),
            b.register_forward_hook(keep(f"block {i} · x + mlp (block output)")),
        ]
        b.attn.keep_weights = True  # the readable path, which keeps its softmax weights
    hooks += [
        model.ln_f.register_forward_pre_hook(keep_input("final norm · input")),
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


def _piece_codes(fn: Callable) -> dict:
    """The code object of each piece the function `fn` can call by name, -> piece name."""
    codes = {}
    names = getattr(fn, "__globals__", {})
    for name in PIECES:
        f = names.get(name)
        if isinstance(f, types.FunctionType):
            codes[f.__code__] = name
    if isinstance(fn, types.FunctionType):
        codes[fn.__code__] = "forward"
    return codes


def _record_calls(
    fn: Callable, args: tuple, entered: list | None = None
) -> tuple[object, list[tuple[str, object, object]]]:
    """Call fn(*args) and record (piece, first argument, return value) of every call of a
    piece, in the order the calls return (the order the tensors are made). `entered`, when
    given, receives (piece, first argument) of every call in the order the calls begin; it
    keeps them when fn raises."""
    codes = _piece_codes(fn)
    calls: list[tuple[str, object, object]] = []
    first_args: dict[int, object] = {}

    def profile(frame, event, arg):
        piece = codes.get(frame.f_code)
        if piece is None:
            return
        if event == "call":
            names = frame.f_code.co_varnames
            first = frame.f_locals.get(names[0]) if names else None
            first_args[id(frame)] = first
            if entered is not None:
                entered.append((piece, first))
        elif event == "return":
            calls.append((piece, first_args.pop(id(frame), None), arg))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(previous)
    return result, calls


def trace_forward(fn: Callable, w: dict, idx: torch.Tensor, n_head: int) -> dict:
    """Run `fn(w, idx, n_head)` and return the tensors its pieces made, label -> tensor, with the
    labels of `trace_gpt`. A tensor is missing when fn did not make the expected calls of that
    piece (a piece written inline, say)."""
    with torch.no_grad():
        logits, calls = _record_calls(fn, (w, idx, n_head))
    return _label_calls(calls, logits, len(w["blocks"]))[0]


def _label_calls(calls, logits, n_layer):
    by_piece: dict[str, list] = {}
    for piece, first, out in calls:
        by_piece.setdefault(piece, []).append((first, out))
    by_piece["forward"] = [(None, logits)]
    expected = _expected_calls(n_layer)
    counted = {p: len(by_piece.get(p, [])) for p in expected}
    labelled: dict[str, object] = {}
    for label, piece, k, what in _steps(n_layer):
        found = by_piece.get(piece, [])
        if len(found) != expected[piece]:
            continue  # calls cannot be matched to the model's one by one
        first, out = found[k]
        if what == "in":
            labelled[label] = first
        elif what in ("out0", "out1"):
            if isinstance(out, tuple) and len(out) == 2:
                labelled[label] = out[int(what[-1])]
        else:
            labelled[label] = out
    return labelled, by_piece, counted


def _shape(t) -> str:
    return str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def _piece_inputs(piece: str, k: int, w: dict, idx, n_head: int, lib: dict) -> tuple:
    """The arguments gptlib's model gave call k of this piece (the same weights, its tensors)."""
    L = len(w["blocks"])
    if piece == "embed":
        return idx, w["tok_emb"], w["pos_emb"]
    if piece == "rmsnorm":
        if k == 2 * L:
            return lib["final norm · input"], w["ln_f"], 1e-5
        i, second = divmod(k, 2)
        x = lib[f"block {i} · x + attention"] if second else lib[f"block {i} · input"]
        return x, w["blocks"][i]["ln2" if second else "ln1"], 1e-5
    if piece == "attention":
        bw = w["blocks"][k]
        return lib[f"block {k} · norm 1"], bw["qkv"], bw["attn_proj"], n_head
    if piece == "mlp":
        bw = w["blocks"][k]
        return lib[f"block {k} · norm 2"], bw["fc"], bw["mlp_proj"]
    if piece == "block":
        return lib[f"block {k} · input"], w["blocks"][k], n_head
    return w, idx, n_head


def _likely_slip(piece, k, what, block_i, w, idx, n_head, lib, by_piece, atol, rtol):
    """Try the known slips of the piece that made the differing tensor, then of the block around
    it, then of the whole forward: the first whose output equals the reader's names itself. (A
    tensor read as a piece's input was made by the code around that piece, not by the piece.)"""
    chain = [] if what == "in" else [(piece, k)]
    if block_i is not None and piece != "block":
        chain.append(("block", block_i))
    if piece != "forward":
        chain.append(("forward", 0))
    for p, j in chain:
        calls = by_piece.get(p, [])
        if len(calls) <= j:
            continue
        got = calls[j][1]
        args = _piece_inputs(p, j, w, idx, n_head, lib)
        for hint, wrong in MISTAKES[p]:
            try:
                with torch.no_grad():
                    expected_wrong = wrong(*args)
            except Exception:
                continue
            try:
                if _close(got, expected_wrong, atol, rtol):
                    return f"{p}: {hint}"
            except Exception:
                continue
    return None


def _inputs_for_forward(g: torch.Generator, V: int, T: int) -> list[torch.Tensor]:
    # A full block and a shorter window (n < T: the position table must be cut to n rows).
    return [torch.randint(0, V, (3, T), generator=g), torch.randint(0, V, (2, T - 3), generator=g)]


def _raised_in(tb, codes: dict) -> str:
    """The innermost piece in a traceback (codes: code object -> piece), or "forward"."""
    name = "forward"
    while tb is not None:
        name = codes.get(tb.tb_frame.f_code, name)
        tb = tb.tb_next
    return name


# ---------------------------------------------------------------------------------------------
# A composite checks the pieces it calls before its own lines. A wrong piece changes every
# tensor after it, so the first tensor that differs can sit in a correct piece (a mask-less
# attention read by a post-norm block shows first in the norm); the pieces are therefore
# checked on their own first, and the wiring is then compared with gptlib's pieces standing in
# for the reader's, so that its verdict does not depend on them.


@contextlib.contextmanager
def _pieces_replaced(fn: Callable, replacements: dict[str, Callable]) -> Iterator[None]:
    """While the block runs, the names in `replacements` point at those functions in the
    namespace `fn` reads its globals from (a notebook's); put back on the way out, also when
    the block raises."""
    names = getattr(fn, "__globals__", None)
    if names is None or not replacements:
        yield
        return
    saved = {name: names[name] for name in replacements}
    try:
        names.update(replacements)
        yield
    finally:
        names.update(saved)


def _reference_pieces(fn: Callable, order: tuple[str, ...]) -> dict[str, Callable]:
    """The reference of every piece in `order` that `fn` finds by name, where its own differs."""
    names = getattr(fn, "__globals__", {})
    found = {}
    for piece in order:
        own = names.get(piece)
        if isinstance(own, types.FunctionType) and own is not getattr(reference, piece):
            found[piece] = getattr(reference, piece)
    return found


def _pieces_entered(fn: Callable, name: str, args: tuple) -> list | CheckResult:
    """Run fn(*args) under the check's refusals and return (piece, first argument) of every
    piece call that began, also when fn raised (the checks that follow say how); a refused call
    is returned as the check's result."""
    entered: list = []
    try:
        with torch.no_grad(), refusing(name, fn):
            _record_calls(fn, args, entered)
    except Refused as e:
        return e.result
    except Exception:
        pass
    return entered


def _first_failing_piece(
    fn: Callable, entered: list, order: tuple[str, ...]
) -> tuple[str, CheckResult] | None:
    """Run the own check of every piece fn called, in `order`: the first that fails, with what
    its check said."""
    names = getattr(fn, "__globals__", {})
    called = {piece for piece, _ in entered}
    for piece in order:
        own = names.get(piece)
        if piece in called and isinstance(own, types.FunctionType):
            result = PIECE_CHECKS[piece](own)
            if not result:
                return piece, result
    return None


def _fix_first(name: str, piece: str, result: CheckResult) -> CheckResult:
    """`✗ forward: your attention does not pass its own check yet ...`, then that check's words."""
    if result.message == not_written(piece).message:
        return result
    lines = [
        f"✗ {name}: your {piece} does not pass its own check (check_gpt_{piece}) yet; fix it "
        f"first: a wrong piece changes every tensor after it, so checking the {name} now could "
        "point at a line that is right",
        *(f"  {line}" for line in result.message.splitlines()),
    ]
    return CheckResult(False, "\n".join(lines))


def _with_pieces(fn: Callable, replacements: dict[str, Callable]) -> Callable:
    """fn, each of whose calls finds `replacements` under the pieces' names."""

    def with_reference_pieces(*args):
        with _pieces_replaced(fn, replacements):
            return fn(*args)

    return with_reference_pieces


BLOCK_PIECES = ("rmsnorm", "attention", "mlp")
_BLOCK_HINTS = {f"✗ block: {hint}" for hint, _ in BLOCK_MISTAKES}


@solved_by(block)
def check_gpt_block(fn) -> CheckResult:
    """`block(x, bw, n_head)` on random [2, 6, 12] inputs with random block weights. First the
    pieces it calls by name (rmsnorm, attention, mlp) are checked on their own; then the block
    runs with gptlib's pieces in their place, so that what is compared is its own lines."""
    entered = _pieces_entered(fn, "block", _block_inputs(torch.Generator().manual_seed(1000)))
    if isinstance(entered, CheckResult):  # refused
        return entered
    failed = _first_failing_piece(fn, entered, BLOCK_PIECES)
    if failed is not None:
        return _fix_first("block", *failed)
    replacements = _reference_pieces(fn, BLOCK_PIECES)
    user = _with_pieces(fn, replacements) if replacements else fn
    result = compare(
        "block", user, block, _block_inputs, mistakes=BLOCK_MISTAKES, error_hints=MATMUL_ERRORS
    )
    unnamed = result.message.startswith(
        ("✗ block: values differ", "✗ block: output has", "✗ block: returned", "✗ block: your")
    )
    if replacements and unnamed and result.message not in _BLOCK_HINTS:
        pieces = ", ".join(p for p in BLOCK_PIECES if p in replacements)
        result = CheckResult(
            False,
            f"{result.message}\n  (this ran with gptlib's {pieces} in place of yours, which pass "
            "their own checks: the slip is in the block's own lines)",
        )
    return result


PIECE_CHECKS = {
    "embed": check_gpt_embed,
    "rmsnorm": check_gpt_rmsnorm,
    "attention": check_gpt_attention,
    "mlp": check_gpt_mlp,
    "block": check_gpt_block,
}


@dataclass
class _ForwardRun:
    """What one run of a forward beside gptlib's GPT found."""

    result: CheckResult
    kind: str  # "passed", "refused", "not written", "raised" or "differs"
    named: set[str]  # the pieces its message points at
    entered: list  # (piece, first argument) of every piece call, in the order they began
    lib: dict | None = None  # gptlib's tensors on the ids of the failing run
    idx: torch.Tensor | None = None


def _wiring_line(piece: str | None) -> str:
    where = f", in what it hands {piece}" if piece not in (None, "forward") else ""
    return (
        "  your pieces pass their own checks, and this run used gptlib's in their place: the "
        f"slip is in your forward's own lines{where}"
    )


def _run_forward(
    fn: Callable,
    model: GPT,
    w: dict,
    atol: float,
    rtol: float,
    replacements: dict[str, Callable] | None = None,
) -> _ForwardRun:
    """Run fn(w, idx, n_head) beside gptlib's GPT on a [3, 8] and a [2, 5] batch of ids and
    compare every tensor in the order the forward pass makes it; with `replacements`, the
    pieces fn finds by name are gptlib's for the run (the reader's are put back afterwards)."""
    cfg = model.cfg
    swapped = bool(replacements)
    g = torch.Generator().manual_seed(1200)
    first_report = None
    for idx in _inputs_for_forward(g, cfg.vocab_size, cfg.block_size):
        w_copy = {
            k: ([{n: t.clone() for n, t in bw.items()} for bw in v] if k == "blocks" else v.clone())
            for k, v in w.items()
        }
        lib = trace_gpt(model, idx)
        entered: list = []
        codes: dict = {}
        try:
            with (
                torch.no_grad(),
                refusing("forward", fn),
                _pieces_replaced(fn, replacements or {}),
            ):
                codes = _piece_codes(fn)  # gptlib's pieces, where they stand in
                logits, calls = _record_calls(fn, (w_copy, idx, cfg.n_head), entered)
        except Refused as e:  # the model or a block did the work
            return _ForwardRun(e.result, "refused", set(), entered)
        except NotImplementedError as e:
            where = _raised_in(e.__traceback__, codes)
            return _ForwardRun(not_written(where), "not written", {where}, entered)
        except Exception as e:
            where = _raised_in(e.__traceback__, codes)
            message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            for fragment, hint in PIECE_ERRORS.get(where, MATMUL_ERRORS + EMBED_ERRORS):
                if fragment in message:
                    message += f". Hint: {hint}"
                    break
            text = f"✗ forward: {where} raised {message}"
            if swapped:
                text += "\n" + _wiring_line(where)
            return _ForwardRun(CheckResult(False, text), "raised", {where}, entered, lib, idx)
        mine, by_piece, counted = _label_calls(calls, logits, cfg.n_layer)
        report = []
        for label, piece, k, what in _steps(cfg.n_layer):
            if label not in mine:
                continue
            got, expected = mine[label], lib[label]
            if isinstance(got, torch.Tensor) and _close(got, expected, atol, rtol):
                report.append(f"  ✓ {label} {_shape(expected)}")
                continue
            block_i = int(label.split()[1]) if label.startswith("block") else None
            if isinstance(got, torch.Tensor) and got.shape == expected.shape:
                how = difference(got, expected)
            else:
                how = "the shapes differ"
            slip = _likely_slip(
                piece, k, what, block_i, w, idx, cfg.n_head, lib, by_piece, atol, rtol
            )
            made_by = "block, read by rmsnorm" if what == "in" else piece
            blamed = "block" if what == "in" else piece
            if slip:
                likely = f"  likely slip in {slip}"
            elif swapped:
                likely = "  no known slip matches"
            else:
                likely = f"  no known slip matches; try check_gpt_{blamed}"
            lines = [
                f"✗ forward: the first tensor that differs is '{label}' (made by {made_by}), on "
                f"ids of shape {list(idx.shape)}",
                f"  expected shape {_shape(expected)}, got {_shape(got)}; {how}",
                likely,
                *_unseen(counted, cfg.n_layer),
            ]
            if swapped:
                lines.append(_wiring_line(None if what == "in" else piece))
            named = {blamed} | ({slip.split(":")[0]} if slip else set())
            result = CheckResult(False, "\n".join(lines))
            return _ForwardRun(result, "differs", named, entered, lib, idx)
        if first_report is None:
            first_report = report + _unseen(counted, cfg.n_layer)
            first_entered = entered
    lines = [
        f"✓ forward: every tensor equals gptlib's GPT (atol {atol:g}) on ids of shape [3, "
        f"{cfg.block_size}] and [2, {cfg.block_size - 3}]"
    ]
    return _ForwardRun(
        CheckResult(True, "\n".join(lines + first_report)), "passed", set(), first_entered
    )


def _embed_skipped(fn: Callable, run: _ForwardRun, w: dict) -> CheckResult | None:
    """When fn has an embed to call, never called it, and the first piece it called read
    something other than the embeddings: that is the slip, not the piece that read it."""
    own = getattr(fn, "__globals__", {}).get("embed")
    if not isinstance(own, types.FunctionType) or run.lib is None:
        return None
    if any(piece == "embed" for piece, _ in run.entered):
        return None
    first = next(((p, x) for p, x in run.entered if p != "forward"), None)
    if first is None:  # no piece called by name: nothing to say where the embeddings went
        return None
    piece, x = first
    expected = run.lib["embeddings"]
    if isinstance(x, torch.Tensor) and _close(x, expected, 1e-5, 1e-4):
        return None  # the embeddings, written out in the forward itself
    if not isinstance(x, torch.Tensor):
        what = f"a {type(x).__name__}"
    elif not x.is_floating_point():
        what = f"the token ids themselves ({_shape(x)}, whole numbers)"
    elif x.shape == expected.shape and _close(x, w["tok_emb"][run.idx], 1e-5, 1e-4):
        what = "the token embeddings alone (no position embeddings)"
    else:
        what = f"a tensor of shape {_shape(x)}"
    return CheckResult(
        False,
        f"✗ forward: your forward never calls embed: the first piece it calls, {piece}, is "
        f"handed {what} instead of the embeddings {_shape(expected)} that "
        "embed(idx, w['tok_emb'], w['pos_emb']) returns",
    )


@solved_by(forward)
def check_gpt_forward(fn: Callable, atol: float = 1e-5, rtol: float = 1e-4) -> CheckResult:
    """Run `fn(w, idx, n_head)` with the trained microgpt's weights (assets/names-microgpt-h4.pt)
    beside gptlib's GPT, on a [3, 8] and a [2, 5] batch of random ids, and compare every tensor
    in the order the forward pass makes it.

    Every piece fn calls by name is checked on its own first (embed, rmsnorm, attention, mlp,
    then block), and the first that fails is named. Only then is the wiring judged: when the
    pieces pass, fn runs again with gptlib's pieces in place of the reader's, and the first
    tensor that differs is named, with both shapes and the likely slip."""
    model = load_asset(ASSET).model
    w = gpt_weights(model)
    as_is = _run_forward(fn, model, w, atol, rtol)
    if as_is.kind == "refused":
        return as_is.result
    failed = _first_failing_piece(fn, as_is.entered, PIECES)
    if failed is not None:
        piece, result = failed
        if piece in as_is.named and result.message != not_written(piece).message:
            return as_is.result  # the forward's own report points at that piece too
        return _fix_first("forward", piece, result)
    if as_is.kind in ("passed", "not written"):
        return as_is.result
    replacements = _reference_pieces(fn, PIECES)
    run = _run_forward(fn, model, w, atol, rtol, replacements) if replacements else as_is
    if run.kind in ("refused", "not written"):
        return run.result
    if run.kind == "passed":  # the pieces pass on their own but not inside this forward
        return as_is.result
    skipped = _embed_skipped(fn, run, w)  # a CheckResult that failed is falsy: test for None
    return run.result if skipped is None else skipped


def _unseen(counted: dict[str, int], n_layer: int) -> list[str]:
    out = []
    for piece, n in _expected_calls(n_layer).items():
        if piece != "forward" and counted.get(piece, 0) != n:
            out.append(
                f"  (your forward called {piece} {counted.get(piece, 0)} time(s), the model has "
                f"{n}: its tensors were not compared one by one)"
            )
    return out


# ---------------------------------------------------------------------------------------------
# Running a forward: its validation loss, planted slips


@torch.no_grad()
def estimate_forward_loss(
    fn: Callable,
    w: dict,
    tokens: torch.Tensor,
    n_head: int,
    batch_size: int = 32,
    n_batches: int = 50,
    seed: int = 1234,
) -> float:
    """`gptlib.train.estimate_loss` for a forward function: the same windows (same seed, same
    batches), the same loss (`GPT.loss`, the shift inside)."""
    g = torch.Generator().manual_seed(seed)
    block = min(w["pos_emb"].shape[0], tokens.numel() - 1)
    losses = []
    for _ in range(n_batches):
        idx, labels = sample_batch(tokens, batch_size, block, g)
        losses.append(GPT.loss(fn(w, idx, n_head), labels).item())
    return sum(losses) / len(losses)


def forward_with_pieces(**pieces: Callable) -> Callable:
    """The reference `forward`, with some of its pieces replaced: `forward_with_pieces(
    attention=my_attention)` calls `my_attention` wherever the reference calls `attention`
    (the other pieces, and the replacement itself, look each other up by name)."""
    unknown = set(pieces) - set(PIECES)
    if unknown:
        raise ValueError(
            f"unknown piece(s) {', '.join(sorted(unknown))}; the pieces are {', '.join(PIECES)}"
        )
    made: dict[str, Callable] = {}
    namespaces = []

    def rebind(f: Callable) -> Callable:
        # Its own module's names, with the pieces' names pointing at the pieces used here.
        namespace = dict(f.__globals__)
        namespaces.append(namespace)
        return types.FunctionType(f.__code__, namespace, f.__name__, f.__defaults__, f.__closure__)

    for name in PIECES:
        made[name] = rebind(pieces.get(name, globals()[name]))
    made["forward"] = rebind(forward)
    for namespace in namespaces:
        namespace.update(made)
    return made["forward"]


SLIPS = {
    "no positions": ("embed", _embed_no_positions),
    "norm over tokens": ("rmsnorm", _rms_over_tokens),
    "softmax over queries": ("attention", _att_softmax_over_queries),
    "no scale": ("attention", _att_no_scale),
    "no mask": ("attention", _att_no_mask),
    "proj transposed": ("attention", _att_proj_transposed),
    "gelu": ("mlp", _mlp_gelu),
    "no residual": ("block", _block_no_first_residual),
    "post-norm": ("block", _block_post_norm),
}


def planted_slip(name: str) -> Callable:
    """A forward with one known slip planted in one piece, for seeing what the checker says:
    `check_gpt_forward(planted_slip("no scale"))`."""
    if name not in SLIPS:
        raise ValueError(f"unknown slip {name!r}; choose one of {', '.join(SLIPS)}")
    piece, wrong = SLIPS[name]
    return forward_with_pieces(**{piece: wrong})
