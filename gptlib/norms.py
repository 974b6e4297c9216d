"""Normalisation per token, over its d features: RMSNorm and LayerNorm written out."""

from __future__ import annotations

import torch
import torch.nn as nn

from gptlib.config import GPTConfig


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gain. No centring, no bias; one gain per feature."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # per-feature gain, not a scalar

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eps sits inside the square root: a near-zero vector is divided by about sqrt(eps),
        # not by eps itself.
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # [..., 1]
        return x * torch.rsqrt(ms + self.eps) * self.weight


class LayerNorm(nn.Module):
    """(x - mean) / sqrt(var + eps) * gain (+ bias), statistics over the last dimension."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)  # biased, as nn.LayerNorm
        y = (x - mean) * torch.rsqrt(var + self.eps) * self.weight
        return y if self.bias is None else y + self.bias


def make_norm(cfg: GPTConfig) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.n_embd)
    return LayerNorm(cfg.n_embd, bias=cfg.norm_bias)
