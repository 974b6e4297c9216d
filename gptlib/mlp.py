"""The position-wise feed-forward network: d -> 4d -> d with a nonlinearity in between.

Notebook 07 (mlp) teaches this module."""

from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from gptlib.config import GPTConfig

# gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the approximation GPT-2 was trained
# with; it differs from the exact (erf) GELU by at most about 5e-4.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


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
