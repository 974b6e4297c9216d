"""Notebook 07, the position-wise MLP: d -> 4d -> d with a nonlinearity in between.

The reader writes `mlp_forward(x, w_fc, w_proj, activation)` for x [B, n, d], the weights in
nn.Linear's [out, in] layout (w_fc [4d, d], w_proj [d, 4d]) and an activation function such as
`F.relu` or `F.gelu`, and returns activation(x @ w_fc^T) @ w_proj^T, shape [B, n, d].
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.mlp import MLP

__all__ = ["check_mlp", "solution_mlp"]

Activation = Callable[[torch.Tensor], torch.Tensor]


def solution_mlp(
    x: torch.Tensor, w_fc: torch.Tensor, w_proj: torch.Tensor, activation: Activation
) -> torch.Tensor:
    hidden = activation(x @ w_fc.T)  # [B, n, d] @ [d, 4d] -> [B, n, 4d]
    return hidden @ w_proj.T  # [B, n, 4d] @ [4d, d] -> [B, n, d]


def _no_activation(x, w_fc, w_proj, activation):
    return x @ w_fc.T @ w_proj.T


def _activation_after_second(x, w_fc, w_proj, activation):
    return activation(x @ w_fc.T @ w_proj.T)


def _activation_twice(x, w_fc, w_proj, activation):
    return activation(activation(x @ w_fc.T) @ w_proj.T)


def _always_relu(x, w_fc, w_proj, activation):
    return F.relu(x @ w_fc.T) @ w_proj.T


def _swapped_weights(x, w_fc, w_proj, activation):
    # Shapes happen to fit: [B, n, d] @ [d, 4d] @ [4d, d]; the roles of the two tables are wrong.
    return activation(x @ w_proj) @ w_fc


TRANSPOSE_HINT = (
    "the weights are in nn.Linear's [out, in] layout: w_fc is [4d, d] (the layer that widens d "
    "to 4d) and w_proj is [d, 4d]"
)

MISTAKES = [
    (
        "the activation is missing: nothing happens between the two layers, so they collapse into a "
        "single d x d matrix and your output is linear in x",
        _no_activation,
    ),
    (
        "the activation comes after the second layer: your output went through it, and the hidden "
        "[B, n, 4d] tensor between the two layers did not",
        _activation_after_second,
    ),
    (
        "the activation is applied twice: on the hidden [B, n, 4d] tensor and again on the output",
        _activation_twice,
    ),
    (
        "your output is ReLU's whatever `activation` is passed: the ReLU trials pass and the "
        "GELU trials come out wrong",
        _always_relu,
    ),
    (
        f"the two weight tables play swapped roles: the shapes happen to fit, but "
        f"your first layer used w_proj and the second w_fc; {TRANSPOSE_HINT}",
        _swapped_weights,
    ),
]


def _inputs() -> Callable[[torch.Generator], tuple]:
    # Trials alternate ReLU and GELU, so ignoring the given activation is caught.
    activations = iter([F.relu, F.gelu, F.relu, F.gelu])

    def make(g: torch.Generator) -> tuple:
        d = 8
        x = torch.randn(2, 5, d, generator=g)  # [B, n, d]
        w_fc = torch.randn(4 * d, d, generator=g) / d**0.5  # [4d, d]
        w_proj = torch.randn(d, 4 * d, generator=g) / (4 * d) ** 0.5  # [d, 4d]
        return x, w_fc, w_proj, next(activations)

    return make


@solved_by(solution_mlp)
def check_mlp(mlp_forward: Callable) -> CheckResult:
    """Run `mlp_forward(x, w_fc, w_proj, activation)` on random [2, 5, 8] inputs with ReLU and
    GELU."""

    def run(*inputs):
        try:
            return mlp_forward(*inputs)
        except RuntimeError as e:
            # Forgetting the transpose makes the matmul shapes disagree: name the cause.
            if "cannot be multiplied" in str(e):
                raise RuntimeError(f"{e}. {TRANSPOSE_HINT}") from None
            raise

    result = compare("mlp_forward", run, solution_mlp, _inputs(), mistakes=MISTAKES, trials=4)
    if not result:
        return result
    # The same function must reproduce the library's module: the textbook preset's GELU MLP.
    with torch.random.fork_rng():  # building the module must not move the notebook's stream
        torch.manual_seed(0)
        module = MLP(textbook())
        x = torch.randn(2, 4, module.fc.in_features)  # [B, n, d], d = 128
    with torch.no_grad():
        expected = module(x)
        got = run(x, module.fc.weight, module.proj.weight, F.gelu)
    if torch.as_tensor(got).shape != expected.shape or not torch.allclose(got, expected, atol=1e-5):
        return CheckResult(
            False, "✗ mlp_forward: passes the random checks but differs from gptlib's GELU MLP"
        )
    return CheckResult(
        True,
        "✓ mlp_forward: matches the reference on 4 random inputs and equals gptlib's GELU MLP "
        "(textbook preset, d = 128)",
    )
