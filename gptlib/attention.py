"""Causal multi-head self-attention with one fused q/k/v projection.

Two paths side by side compute the same thing, as in nanoGPT: `sdpa` (the default) calls
PyTorch's fused kernel, and `manual` writes out softmax(Q K^T / sqrt(d_h) + mask) V. The manual
path passes its softmax weights through `weights`, an identity module that is there only to be
hooked: a forward hook on it sees them, which is how `GPT.attention_maps` and `shapes.shape_table`
read them (`model.attention_weights`).

Notebook 04 (multi head) teaches this module.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from gptlib.config import GPTConfig
from gptlib.kvcache import KVCache


class CausalSelfAttention(nn.Module):
    """Taught in notebook 04 (multi head)."""

    def __init__(self, cfg: GPTConfig, layer_idx: int = 0):
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.head_dim
        self.layer_idx = layer_idx  # which slot of a KVCache this layer writes
        self.use_sdpa = cfg.attention == "sdpa"
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # [d] -> [3d]
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)  # mixes the heads
        # The hook point of the softmax weights [B, h, n, n_keys] (readable path only): returns
        # them unchanged, has no parameters (the state_dict is the same), and a forward hook on
        # it catches them before dropout. See `model.attention_weights`.
        self.weights = nn.Identity()
        self.attn_drop = nn.Dropout(cfg.dropout)
        self.resid_drop = nn.Dropout(cfg.dropout)
        # True above the diagonal = a future position, hidden: its score becomes -inf.
        # A buffer moves with .to(device) and is not a parameter; not saved in checkpoints.
        future = torch.triu(torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool), 1)
        self.register_buffer("future", future, persistent=False)

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, n, _ = t.shape
        return t.view(B, n, self.n_head, self.head_dim).transpose(1, 2)  # [B, h, n, d_h]

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        B, n, d = x.shape  # [B, n, d]
        q, k, v = self.qkv(x).split(d, dim=2)  # each [B, n, d]
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # [B, h, n, d_h]
        past = cache.length if cache is not None else 0
        if cache is not None:
            k, v = cache.write(self.layer_idx, k, v)  # [B, h, past + n, d_h]; length stays
        # The n new queries sit at positions past..past+n-1 and may see keys 0..their own.
        hidden = self.future[past : past + n, : past + n]  # [n, past + n], True = hidden
        if self.use_sdpa:
            # sdpa's boolean mask means the opposite (True = may attend), so it gets ~hidden.
            # With nothing cached is_causal=True makes that mask itself; a single new query
            # (n == 1) sees every key, so it needs none.
            mask = ~hidden if past and n > 1 else None
            drop = self.dropout if self.training else 0.0
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=drop, is_causal=not past
            )
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)  # [B, h, n, past + n]
            scores = scores.masked_fill(hidden, float("-inf"))
            weights = self.weights(scores.softmax(dim=-1))  # each row sums to 1 over the keys
            y = self.attn_drop(weights) @ v  # [B, h, n, d_h]
        y = y.transpose(1, 2).contiguous().view(B, n, d)  # heads side by side again: [B, n, d]
        return self.resid_drop(self.proj(y))
