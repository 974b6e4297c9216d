"""The GPT: embeddings, L identical blocks, a final norm and the output head.

Notebook 14 (your gpt) teaches this module."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F

from gptlib.attention import CausalSelfAttention
from gptlib.config import GPTConfig
from gptlib.kvcache import KVCache
from gptlib.language import _
from gptlib.mlp import MLP
from gptlib.norms import make_norm

IGNORE_INDEX = -100


class Block(nn.Module):
    """Attention then MLP, each wrapped in a residual connection and a norm.

    pre-norm (textbook chapter 2):  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    post-norm (textbook chapter 3): x = norm1(x + attn(x));  x = norm2(x + mlp(x))

    Taught in notebook 05 (residual).
    """

    def __init__(self, cfg: GPTConfig, layer_idx: int = 0):
        super().__init__()
        self.pre_norm = cfg.norm_placement == "pre"
        self.ln1 = make_norm(cfg)
        self.attn = CausalSelfAttention(cfg, layer_idx)
        self.ln2 = make_norm(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.attn(self.ln1(x), cache)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, cache))
        return self.ln2(x + self.mlp(x))


class GPT(nn.Module):
    """Taught in notebook 14 (your gpt)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # [V, d]
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)  # [T, d]
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.ln_f = make_norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)  # [V, d]
        if cfg.tie_embeddings:
            # One Parameter object in two places: counted once, optimised once.
            self.lm_head.weight = self.tok_emb.weight
        # Tie first, then initialise: the shared table is drawn from N(0, 0.02) like the rest.
        self.apply(self._init_weights)
        if cfg.scale_residual_init:  # GPT-2's start (the gpt2 preset): see GPTConfig
            with torch.no_grad():  # N(0, 0.02) times s is N(0, 0.02 s): no other random draw
                for block in self.blocks:
                    block.attn.proj.weight.mul_(1 / math.sqrt(2 * cfg.n_layer))
                    block.mlp.proj.weight.mul_(1 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Trainable numbers, each shared Parameter counted once."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self,
        idx: torch.Tensor,
        labels: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx [B, n] -> logits [B, n, V], and the loss when labels [B, n] are given.

        The loss compares the prediction at position t with labels[t + 1]: idx and labels may be
        the same window. Labels equal to -100 are ignored. With a `cache`, idx holds only the new
        positions, which follow the `cache.length` positions already stored. What is refused, and
        when, is `check_inputs`'s to say.
        """
        past = cache.length if cache is not None else 0  # positions already in the cache
        n = check_inputs(idx, self.cfg, past)
        pos = torch.arange(past, past + n, device=idx.device)  # [n]
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # [B, n, d] + [n, d] -> [B, n, d]
        for block in self.blocks:
            x = block(x, cache)  # [B, n, d] throughout; each layer writes K, V at past..past+n-1
        if cache is not None:
            cache.advance(n)  # every layer has written the n new positions: now they are cached
        logits = self.lm_head(self.ln_f(x))  # [B, n, V]
        loss = None if labels is None else self.loss(logits, labels)
        return logits, loss

    @staticmethod
    def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of position t's logits against labels[:, t + 1] (the shift lives
        here): the same as logits[:, :-1] against labels[:, 1:]."""
        if labels.shape != logits.shape[:2]:
            raise ValueError(
                _(
                    "labels must have the shape of idx, {shape}, got {got}; pass the same window "
                    "as idx (the shift is done here)"
                ).format(shape=tuple(logits.shape[:2]), got=tuple(labels.shape))
            )
        V = logits.size(-1)
        # Position t is scored against token t + 1. Moving the labels one place left (the last
        # position has nothing to predict: ignored) scores the same pairs as cutting the logits'
        # last position, without copying B x (n-1) x V logits.
        targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)  # [B, n]: token t+1 at t
        return F.cross_entropy(
            logits.reshape(-1, V),  # [Bn, V]: every position's prediction ...
            targets.reshape(-1),  # [Bn]: ... of the next token (-100 at each last position)
            ignore_index=IGNORE_INDEX,
        )

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Every layer's attention weights from one forward pass: [L, B, h, n, n].

        The pass runs the readable attention path and the weights are caught at each layer's hook
        point `attn.weights`, before dropout (see `attention_weights`)."""
        with attention_weights(self) as weights:
            self(idx)
        return torch.stack(weights)


def check_inputs(idx: torch.Tensor, cfg: GPTConfig, past: int = 0) -> int:
    """Refuse what `GPT.forward` cannot read, before it runs; return n, the new positions.

    idx must be [B, n] token ids, and the `past` cached positions plus the n new ones must fit
    the position table (block_size rows). Token ids are checked only where that costs nothing:
    CPU tensors, on the way in (no cache, or a prefill; decode steps feed back the model's own
    samples). On a GPU, int(idx.min()) would make the host wait for the device at every training
    step, so there the check is left to where the ids are made: the tokenizer refuses characters
    outside its vocabulary (encode, encode_tensor). Under torch.compile the check would break the
    graph (a Python int from a tensor), so it is skipped there too.

    Used in notebook 14 (your gpt), through GPT.
    """
    if idx.dim() != 2:
        raise ValueError(
            _("idx must be [B, n] token ids, got shape {shape}").format(shape=tuple(idx.shape))
        )
    n, T = idx.size(1), cfg.block_size
    if past + n > T:
        if past:
            where = _("{past} cached + {new} new = {total}").format(
                past=past, new=n, total=past + n
            )
        else:
            where = f"n={n}"
        raise ValueError(
            _(
                "sequence length {where} exceeds block_size={T}: the position table has only "
                "{T} rows; crop the input to its last {T} tokens (idx[:, -{T}:]) or use a "
                "config with a larger block_size"
            ).format(where=where, T=T)
        )
    checked = n and not past and idx.device.type == "cpu"
    if checked and not torch.compiler.is_compiling():
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= cfg.vocab_size:
            raise ValueError(
                _(
                    "token ids must lie in 0..{last} (vocab_size), got ids from {low} to "
                    "{high}; was the text encoded with this model's tokenizer?"
                ).format(last=cfg.vocab_size - 1, low=low, high=high)
            )
    return n


@contextmanager
def attention_weights(model: GPT) -> Iterator[list[torch.Tensor]]:
    """While on, every attention layer of `model` runs its readable path (`use_sdpa` off), and
    the list it yields receives each layer's softmax weights [B, h, n, n_keys], in the order the
    layers compute them. A forward hook on the layer's `weights`, the identity module the readable
    path passes its softmax weights through before dropout, catches them. On exit the hooks are
    removed and each layer's path is put back.

    How `GPT.attention_maps` and `shapes.shape_table` see the weights.

    Used in notebook 03 (scaled attention), through GPT.attention_maps.
    """
    attns = [block.attn for block in model.blocks]
    fused = [a.use_sdpa for a in attns]
    weights: list[torch.Tensor] = []
    handles = [
        a.weights.register_forward_hook(lambda m, args, out: weights.append(out.detach()))
        for a in attns
    ]
    try:
        for a in attns:
            a.use_sdpa = False
        yield weights
    finally:
        for a, was in zip(attns, fused, strict=True):
            a.use_sdpa = was
        for h in handles:
            h.remove()


def parameter_formula(cfg: GPTConfig) -> int:
    """The parameter count in closed form. For the `textbook` preset (tied, no Linear biases,
    LayerNorm with bias) it is V*d + T*d + 12*L*d^2 + (4L+2)*d.

    Taught in notebook 08 (logits)."""
    V, T, d, L = cfg.vocab_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    per_norm = d * (2 if cfg.norm == "layernorm" and cfg.norm_bias else 1)
    linear_bias = (3 * d + d + 4 * d + d) if cfg.bias else 0  # qkv, proj, fc, proj
    total = V * d + T * d + L * (12 * d * d + linear_bias + 2 * per_norm) + per_norm
    if not cfg.tie_embeddings:
        total += V * d
    return total
