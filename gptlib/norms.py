"""Normalisation per token, over its d features: RMSNorm written out, LayerNorm on the fused kernel.

Notebook 06 (normalisation) teaches this module."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from gptlib.config import GPTConfig


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * gain. No centring, no bias; one gain per feature.

    Taught in notebook 06 (normalisation)."""

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
    """(x - mean) / sqrt(var + eps) * gain (+ bias), statistics over the last dimension.

    Taught in notebook 06 (normalisation)."""

    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Notebook 06 writes the formula out step by step and checks it equals this; here one
        # fused kernel computes it (a training step of the textbook-preset model spends about a
        # sixth of its time in nine LayerNorms when they are written as separate operations).
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def make_norm(cfg: GPTConfig) -> nn.Module:
    """The norm `cfg.norm` names, over d features: how Block and GPT pick theirs.

    Used in notebook 06 (normalisation), through GPT."""
    if cfg.norm == "rmsnorm":
        return RMSNorm(cfg.n_embd)
    return LayerNorm(cfg.n_embd, bias=cfg.norm_bias)
