"""The position-wise feed-forward network: d -> 4d -> d with a nonlinearity in between.

Notebook 07 (mlp) teaches this module."""

from __future__ import annotations

import torch
import torch.nn as nn

# The nonlinearities by name: one registry, kept in config so that GPTConfig validates against it.
from gptlib.config import ACTIVATIONS, GPTConfig


class MLP(nn.Module):
    """Taught in notebook 07 (mlp)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.act = ACTIVATIONS[cfg.activation]
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.act(self.fc(x))  # [B, n, 4d]; each position on its own
        return self.drop(self.proj(hidden))  # [B, n, d]
