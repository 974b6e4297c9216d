"""Chapter 05, residual + normalisation: RMSNorm and LayerNorm written by hand.

`rmsnorm(x, weight, eps)`: x [B, n, d], weight [d] -> x / sqrt(mean(x^2 over d) + eps) * weight.
`layernorm(x, weight, bias, eps)`: (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare

__all__ = ["check_layernorm", "check_rmsnorm", "solution_layernorm", "solution_rmsnorm"]


def solution_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # [B, n, 1]: one statistic per token
    return x / torch.sqrt(ms + eps) * weight  # weight [d] broadcasts over B and n


def solution_layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)  # [B, n, 1]
    var = x.var(dim=-1, keepdim=True, unbiased=False)  # divide by d, as nn.LayerNorm does
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def _rms_eps_outside(x, weight, eps):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * weight


def _rms_no_gain(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rms_scalar_gain(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.mean()


def _rms_over_tokens(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(dim=-2, keepdim=True) + eps) * weight


def _rms_over_everything(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean() + eps) * weight


def _rms_centred(x, weight, eps):
    centred = x - x.mean(-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps) * weight


def _rms_sum(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * weight


def _rms_no_sqrt(x, weight, eps):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight


RMS_MISTAKES = [
    (
        "eps is added after the square root; it belongs inside: sqrt(mean(x^2) + eps). On a "
        "near-zero token the two differ a lot",
        _rms_eps_outside,
    ),
    ("the gain is missing: multiply by weight, one number per feature", _rms_no_gain),
    (
        "the gain is a single number; weight holds one gain per feature (shape [d]): multiply by "
        "weight itself",
        _rms_scalar_gain,
    ),
    (
        "the mean runs over the tokens (dim=-2); each token is normalised over its own d "
        "features: mean(dim=-1, keepdim=True)",
        _rms_over_tokens,
    ),
    (
        "one mean square for the whole tensor; each token needs its own, over the last "
        "dimension: mean(dim=-1, keepdim=True)",
        _rms_over_everything,
    ),
    (
        "the mean was subtracted: that is LayerNorm; RMSNorm divides x itself by its root mean "
        "square, with no centring",
        _rms_centred,
    ),
    ("sum of squares instead of their mean: use mean(dim=-1)", _rms_sum),
    ("x is divided by the mean square; take its square root", _rms_no_sqrt),
]


def _ln_eps_outside(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * weight + bias


def _ln_unbiased(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * weight + bias


def _ln_not_centred(x, weight, bias, eps):
    return solution_rmsnorm(x, weight, eps) + bias


def _ln_no_bias(x, weight, bias, eps):
    return solution_layernorm(x, weight, torch.zeros_like(bias), eps)


def _ln_over_tokens(x, weight, bias, eps):
    mean = x.mean(-2, keepdim=True)
    var = x.var(-2, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


LN_MISTAKES = [
    (
        "eps is added after the square root; it belongs inside: sqrt(var + eps)",
        _ln_eps_outside,
    ),
    (
        "x.var() divides by d - 1 by default; LayerNorm divides by d: var(unbiased=False)",
        _ln_unbiased,
    ),
    (
        "the mean is not subtracted (that is RMSNorm): use x - x.mean(-1, keepdim=True)",
        _ln_not_centred,
    ),
    ("the bias (beta) is missing: add bias after the gain", _ln_no_bias),
    (
        "the statistics run over the tokens (dim=-2); LayerNorm uses each token's own features: "
        "dim=-1",
        _ln_over_tokens,
    ),
]


def _rms_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, float]:
    x = torch.randn(2, 5, 8, generator=g) * 3.0  # [B, n, d]
    x[:, 0] *= 1e-3  # one near-zero token per sequence: where eps matters
    weight = 0.5 + torch.rand(8, generator=g)  # [d], distinct gains so a scalar is caught
    return x, weight, 1e-5


def _ln_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
    x = torch.randn(2, 5, 8, generator=g) * 3.0 + 1.0  # an offset, so centring matters
    x[:, 0] = x[:, 0] * 1e-3
    weight = 0.5 + torch.rand(8, generator=g)
    bias = torch.randn(8, generator=g)
    return x, weight, bias, 1e-5


def check_rmsnorm(rmsnorm) -> CheckResult:
    """Run `rmsnorm(x, weight, eps)` on random [2, 5, 8] inputs, one near-zero token each."""
    return compare("rmsnorm", rmsnorm, solution_rmsnorm, _rms_inputs, mistakes=RMS_MISTAKES)


def check_layernorm(layernorm) -> CheckResult:
    """Run `layernorm(x, weight, bias, eps)` on random [2, 5, 8] inputs."""
    return compare("layernorm", layernorm, solution_layernorm, _ln_inputs, mistakes=LN_MISTAKES)
