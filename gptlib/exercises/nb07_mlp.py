"""Notebook 07: the position-wise MLP, `mlp_forward(x, w_fc, w_proj, activation)` with nn.Linear's
[out, in] weights: activation(x @ w_fc^T) @ w_proj^T."""

import torch
import torch.nn.functional as F

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_
from gptlib.mlp import MLP

__all__ = ["check_mlp_forward", "solution_mlp_forward"]


def solution_mlp_forward(x, w_fc, w_proj, activation):
    """x [B, n, d], w_fc [4d, d], w_proj [d, 4d], activation -> [B, n, d]."""
    hidden = activation(x @ w_fc.T)  # [B, n, d] @ [d, 4d] -> [B, n, 4d]
    return hidden @ w_proj.T  # [B, n, 4d] @ [4d, d] -> [B, n, d]


MISTAKES = [
    (N_("the activation is missing: nothing happens between the two layers, so they collapse "
        "into a single d x d matrix and your output is linear in x"),
     lambda x, a, b, act: x @ a.T @ b.T),
    (N_("the activation comes after the second layer: your output went "
        "through it, and the hidden [B, n, 4d] tensor between the two layers "
        "did not"), lambda x, a, b, act: act(x @ a.T @ b.T)),
    (N_("your output is ReLU's whatever activation is passed: the ReLU trials pass and the GELU "
        "trials come out wrong"), lambda x, a, b, act: F.relu(x @ a.T) @ b.T),
    (N_("your output is GELU's whatever activation is passed: the GELU trials pass and the ReLU "
        "trials come out wrong"), lambda x, a, b, act: F.gelu(x @ a.T) @ b.T),
    (N_("the two weight tables play swapped roles: the shapes happen to fit, but your first layer "
        "used w_proj and the second w_fc"), lambda x, a, b, act: act(x @ b) @ a),
]  # fmt: skip
ERRORS = [
    ("cannot be multiplied", N_("the weights are in nn.Linear's [out, in] layout: w_fc is [4d, d] "
                                "(the layer that widens d to 4d) and w_proj is [d, 4d]")),
]  # fmt: skip


def _inputs(g: torch.Generator) -> tuple:
    if g.initial_seed() == 1003:  # the fourth trial: gptlib's own MLP, its weights as set up
        with torch.random.fork_rng():  # building it must not move the notebook's stream
            torch.manual_seed(0)
            module = MLP(textbook())
        weights = module.fc.weight.detach(), module.proj.weight.detach()
        return torch.randn(2, 4, 128, generator=g), *weights, F.gelu
    w_fc = torch.randn(32, 8, generator=g) / 8**0.5
    w_proj = torch.randn(8, 32, generator=g) / 32**0.5
    act = F.gelu if g.initial_seed() % 2 else F.relu  # trials 0, 2: ReLU; 1: GELU
    return torch.randn(2, 5, 8, generator=g), w_fc, w_proj, act  # d = 8


@solved_by(solution_mlp_forward)
def check_mlp_forward(mlp_forward) -> CheckResult:
    """ReLU and GELU on random [2, 5, 8] inputs, then the textbook preset's GELU MLP (d = 128)."""
    return compare("mlp_forward", mlp_forward, solution_mlp_forward, _inputs, MISTAKES, 4,
                   error_hints=ERRORS)  # fmt: skip
