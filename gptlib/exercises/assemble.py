"""A trained `GPT` run piece by piece, so that any piece can be the reader's own.

`forward(model, idx, **pieces)` computes what `model(idx)` computes, from the model's own
weights, one exercise-sized step at a time; a keyword argument replaces a step with the reader's
function, so a notebook can run the reader's `causal_attention` inside the trained microgpt and
print the validation loss it gives beside the library's (`validation_loss`). The pieces, each
with the signature of its notebook's exercise:

    embed(ids, wte, wpe)                     -> x [B, n, d]               (notebook 01)
    qkv_split(x, w_qkv)                      -> q, k, v, each [B, n, d]   (02)
    split_heads(x, n_head)                   -> [B, h, n, d_h]            (04)
    causal_attention(q, k, v)                -> [B, h, n, d_h]            (03)
    merge_heads(y)                           -> [B, n, d]                 (04)
    mlp_forward(x, w_fc, w_proj, activation) -> [B, n, d]                 (07)
    pre_norm_block(x, sublayers) or post_norm_block(x, sublayers), by the model's placement (06)
    lm_loss(logits, labels)                  -> the mean loss (validation_loss only; 09)

A model with biases in its Linear layers (GPT-2) adds them around the pieces, which take none.
Dropout is not applied: this is the model in eval mode.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.exercises.nb01_embeddings import solution_embed
from gptlib.exercises.nb02_qkv import solution_qkv_split
from gptlib.exercises.nb04_multi_head import solution_merge_heads, solution_split_heads
from gptlib.exercises.nb06_normalisation import solution_post_norm_block, solution_pre_norm_block
from gptlib.exercises.nb07_mlp import solution_mlp_forward
from gptlib.language import _
from gptlib.mlp import ACTIVATIONS
from gptlib.model import GPT
from gptlib.train import eval_batches

__all__: list[str] = []  # used as a module: `from gptlib.exercises import assemble`


# The reference pieces: the exercises' own solutions; attention through the fused kernel, so the
# whole forward equals `model(idx)` to the last bit; the loss is the model's.


def _causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, h, n, d_h]


PIECES: dict[str, Callable] = {
    "embed": solution_embed,
    "qkv_split": solution_qkv_split,
    "split_heads": solution_split_heads,
    "causal_attention": _causal_attention,
    "merge_heads": solution_merge_heads,
    "mlp_forward": solution_mlp_forward,
    "pre_norm_block": solution_pre_norm_block,
    "post_norm_block": solution_post_norm_block,
    "lm_loss": GPT.loss,
}


def _pieces(given: dict[str, Callable | None]) -> dict[str, Callable]:
    unknown = sorted(set(given) - set(PIECES))
    if unknown:
        said = _("no piece called {unknown}; the pieces are {pieces}")
        raise TypeError(said.format(unknown=", ".join(unknown), pieces=", ".join(PIECES)))
    return {name: given.get(name) or ref for name, ref in PIECES.items()}


def _bias(linear: torch.nn.Linear) -> torch.Tensor | float:
    return 0.0 if linear.bias is None else linear.bias


def forward(model: GPT, idx: torch.Tensor, **pieces: Callable | None) -> torch.Tensor:
    """`model(idx)[0]`, the logits [B, n, V], computed piece by piece from the model's weights;
    each keyword (see the module's docstring) replaces one piece. Notebooks 01-07."""
    p = _pieces(pieces)
    cfg = model.cfg
    if idx.size(1) > cfg.block_size:
        said = _("idx has {n} positions; the model's window is {block_size}")
        raise ValueError(said.format(n=idx.size(1), block_size=cfg.block_size))
    activation = ACTIVATIONS[cfg.activation]
    block_fn = p["pre_norm_block"] if cfg.norm_placement == "pre" else p["post_norm_block"]
    x = p["embed"](idx, model.tok_emb.weight, model.pos_emb.weight)  # [B, n, d]
    for block in model.blocks:
        a, m = block.attn, block.mlp

        def attend(h, a=a):
            q, k, v = p["qkv_split"](h, a.qkv.weight)
            if a.qkv.bias is not None:
                q, k, v = (t + b for t, b in zip((q, k, v), a.qkv.bias.chunk(3), strict=True))
            q, k, v = (p["split_heads"](t, a.n_head) for t in (q, k, v))
            y = p["merge_heads"](p["causal_attention"](q, k, v))  # [B, n, d]
            return y @ a.proj.weight.T + _bias(a.proj)

        def feed(h, m=m):
            if m.fc.bias is None:
                return p["mlp_forward"](h, m.fc.weight, m.proj.weight, activation)
            # With biases the pieces of the MLP are not enough: run the module's own.
            return m.proj(activation(m.fc(h)))

        x = block_fn(x, [(block.ln1, attend), (block.ln2, feed)])
    return model.lm_head(model.ln_f(x))  # [B, n, V]


@torch.no_grad()
def validation_loss(
    model: GPT,
    tokens: torch.Tensor,
    batch_size: int = 32,
    n_batches: int = 50,
    seed: int = 1234,
    **pieces: Callable | None,
) -> float:
    """The mean loss over the windows `gptlib.train.estimate_loss(model, tokens)` draws (same
    seed, same batches), with the forward pass run piece by piece (`forward`) and scored by
    `lm_loss` (a piece too). Equal to `estimate_loss` to about 1e-6 when every piece is the
    library's."""
    p = _pieces(pieces)
    losses = [
        float(p["lm_loss"](forward(model, idx, **pieces), labels))
        for idx, labels in eval_batches(model, tokens, batch_size, n_batches, seed)
    ]
    loss = sum(losses) / len(losses)
    return loss if math.isfinite(loss) else float("nan")
