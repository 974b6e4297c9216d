"""Notebook 05, residual connections and normalisation: the block's two placements, and RMSNorm's
backward pass.

`pre_norm_block(x, attn, mlp, norm1, norm2)` and `post_norm_block(x, attn, mlp, norm1, norm2)`
take the residual stream x [B, n, d] and the four sublayers of one block as callables, each
[B, n, d] -> [B, n, d], and return the block's output [B, n, d]:

    pre-norm:  h = x + attn(norm1(x));  out = h + mlp(norm2(h))
    post-norm: h = norm1(x + attn(x));  out = norm2(h + mlp(h))

Each is checked against `gptlib.model.Block` built around the same four modules (pre-norm with
RMSNorm as in textbook chapter 2, post-norm with LayerNorm as in textbook chapter 3).

Optional, harder: `rmsnorm_backward(x, weight, grad_out, eps)` for x [..., d] of any leading
shape, weight [d] and grad_out = dL/dy [..., d] with y = x / sqrt(mean(x^2) + eps) * weight
returns (dL/dx [..., d], dL/dweight [d]), checked against autograd through `gptlib.norms.RMSNorm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gptlib.config import microgpt, textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.model import Block
from gptlib.norms import RMSNorm

__all__ = [
    "check_post_norm_block",
    "check_pre_norm_block",
    "check_rmsnorm_backward",
    "solution_post_norm_block",
    "solution_pre_norm_block",
    "solution_rmsnorm_backward",
]


# ---------------------------------------------------------------------------------------------
# The block, in both placements


def solution_pre_norm_block(x, attn, mlp, norm1, norm2):
    """x [B, n, d] -> [B, n, d]: each sublayer reads a normalised copy, the stream stays raw."""
    h = x + attn(norm1(x))  # [B, n, d]: attention's output is added to x itself
    return h + mlp(norm2(h))  # the MLP reads the stream after attention


def solution_post_norm_block(x, attn, mlp, norm1, norm2):
    """x [B, n, d] -> [B, n, d]: each sublayer reads the stream as it is, each sum is normalised."""
    h = norm1(x + attn(x))  # [B, n, d]
    return norm2(h + mlp(h))  # the block's output is a norm's output too


def _no_norms(x, attn, mlp, norm1, norm2):
    h = x + attn(x)
    return h + mlp(h)


def _pre_no_attn_residual(x, attn, mlp, norm1, norm2):
    h = attn(norm1(x))
    return h + mlp(norm2(h))


def _pre_no_mlp_residual(x, attn, mlp, norm1, norm2):
    h = x + attn(norm1(x))
    return mlp(norm2(h))


def _pre_no_residuals(x, attn, mlp, norm1, norm2):
    return mlp(norm2(attn(norm1(x))))


def _pre_stream_normalised(x, attn, mlp, norm1, norm2):
    x = norm1(x)  # the stream itself replaced by its normalised copy
    h = x + attn(x)
    h = norm2(h)
    return h + mlp(h)


def _norm_on_output(x, attn, mlp, norm1, norm2):
    # The same slip in either placement: the norm wraps the sublayer's output, x + norm(f(x)).
    h = x + norm1(attn(x))
    return h + norm2(mlp(h))


def _pre_norms_swapped(x, attn, mlp, norm1, norm2):
    return solution_pre_norm_block(x, attn, mlp, norm2, norm1)


def _pre_mlp_reads_input(x, attn, mlp, norm1, norm2):
    h = x + attn(norm1(x))
    return h + mlp(norm2(x))


def _pre_mlp_residual_from_input(x, attn, mlp, norm1, norm2):
    h = x + attn(norm1(x))
    return x + mlp(norm2(h))


def _pre_mlp_first(x, attn, mlp, norm1, norm2):
    h = x + mlp(norm2(x))
    return h + attn(norm1(h))


PRE_MISTAKES = [
    (
        "the residual around attention is missing: your h is attention's output alone, so the "
        "block's input x is lost after the first sublayer",
        _pre_no_attn_residual,
    ),
    (
        "the residual around the MLP is missing: your block returns the MLP's output alone, so the "
        "stream after attention is lost",
        _pre_no_mlp_residual,
    ),
    (
        "neither sublayer has its residual: your block is the two sublayers one after the other, "
        "and x never reaches the output",
        _pre_no_residuals,
    ),
    (
        "the norm is applied to the sum, norm(x + f(x)): that is post-norm. In pre-norm the stream "
        "itself is never normalised, only the copy each sublayer reads",
        solution_post_norm_block,
    ),
    (
        "the stream itself was normalised (x = norm1(x), then x + attn(x)): attention's output is "
        "added to the normalised copy, so the raw stream never reaches the block's output",
        _pre_stream_normalised,
    ),
    (
        "the norm is applied to the sublayer's output, x + norm(f(x)); in pre-norm the norm acts on "
        "what the sublayer reads, not on what it returns",
        _norm_on_output,
    ),
    (
        "norm1 and norm2 are swapped: your attention read the MLP's norm, and the MLP attention's",
        _pre_norms_swapped,
    ),
    (
        "the MLP reads the block's input x instead of the stream after attention (feeding both "
        "sublayers from x is the 'parallel' block, a different design)",
        _pre_mlp_reads_input,
    ),
    (
        "the MLP's residual adds the block's input x, not the stream after attention, so "
        "attention's contribution is lost from the output",
        _pre_mlp_residual_from_input,
    ),
    (
        "the MLP runs before attention; a block runs attention first, then the MLP",
        _pre_mlp_first,
    ),
    (
        "no norm is used: neither sublayer reads a normalised copy of the stream",
        _no_norms,
    ),
]


def _post_final_norm_forgotten(x, attn, mlp, norm1, norm2):
    h = norm1(x + attn(x))
    return h + mlp(h)


def _post_first_norm_forgotten(x, attn, mlp, norm1, norm2):
    h = x + attn(x)
    return norm2(h + mlp(h))


def _post_no_attn_residual(x, attn, mlp, norm1, norm2):
    h = norm1(attn(x))
    return norm2(h + mlp(h))


def _post_no_mlp_residual(x, attn, mlp, norm1, norm2):
    h = norm1(x + attn(x))
    return norm2(mlp(h))


def _post_sublayers_read_norms(x, attn, mlp, norm1, norm2):
    h = norm1(x + attn(norm1(x)))
    return norm2(h + mlp(norm2(h)))


def _post_norms_swapped(x, attn, mlp, norm1, norm2):
    return solution_post_norm_block(x, attn, mlp, norm2, norm1)


def _post_mlp_reads_input(x, attn, mlp, norm1, norm2):
    h = norm1(x + attn(x))
    return norm2(h + mlp(x))


def _post_mlp_residual_from_input(x, attn, mlp, norm1, norm2):
    h = norm1(x + attn(x))
    return norm2(x + mlp(h))


POST_MISTAKES = [
    (
        "the final norm is forgotten: your block returns the last sum itself; in post-norm every "
        "sum is normalised, the last one too",
        _post_final_norm_forgotten,
    ),
    (
        "the first sum is not normalised: the MLP reads x + attn(x) as it is, and so does the last "
        "residual",
        _post_first_norm_forgotten,
    ),
    (
        "the residual around attention is missing: your first sum is attention's output alone, "
        "without x",
        _post_no_attn_residual,
    ),
    (
        "the residual around the MLP is missing: your last norm reads the MLP's output alone, "
        "without h",
        _post_no_mlp_residual,
    ),
    (
        "that is pre-norm, x + f(norm(x)): your sublayers read normalised copies and your sums are "
        "left as they are, the other way round from post-norm",
        solution_pre_norm_block,
    ),
    (
        "the sublayers read a normalised copy as well; in post-norm attn and mlp read the stream as "
        "it is, and only the sums are normalised",
        _post_sublayers_read_norms,
    ),
    (
        "the norm is applied to the sublayer's output, x + norm(f(x)); post-norm normalises the "
        "whole sum instead",
        _norm_on_output,
    ),
    (
        "norm1 and norm2 are swapped: your first sum went through the MLP's norm, and the last one "
        "through attention's",
        _post_norms_swapped,
    ),
    (
        "the MLP reads the block's input x instead of the normalised stream after attention",
        _post_mlp_reads_input,
    ),
    (
        "the MLP's residual adds the block's input x, not the normalised stream after attention, so "
        "attention's contribution is lost",
        _post_mlp_residual_from_input,
    ),
    (
        "no norm is used: neither of the two sums is normalised",
        _no_norms,
    ),
]


def _random_block(placement: str, g: torch.Generator) -> Block:
    """A small gptlib Block (d 8, 2 heads) with every parameter drawn from `g`: pre-norm with
    RMSNorm as in textbook chapter 2, post-norm with LayerNorm as in textbook chapter 3."""
    preset = microgpt if placement == "pre" else textbook
    cfg = preset(n_embd=8, n_head=2, block_size=8, n_layer=1, norm_placement=placement)
    with torch.random.fork_rng(devices=[]):  # building a module draws from the global RNG
        block = Block(cfg).eval()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.startswith("ln"):  # distinct gains (and biases), so a swap shows
                p.copy_(
                    0.5 + torch.rand(p.shape, generator=g)
                    if name.endswith("weight")
                    else 0.5 * torch.randn(p.shape, generator=g)
                )
            else:  # a Linear weight [out, in]: outputs of the stream's size
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
    return block


def _check_block(name: str, user_fn: Callable, placement: str, mistakes) -> CheckResult:
    built: dict[str, Block] = {}

    def make_inputs(g: torch.Generator):
        built["block"] = block = _random_block(placement, g)
        x = 2.0 * torch.randn(2, 6, 8, generator=g)  # [B, n, d], a stream not already normalised
        return x, block.attn, block.mlp, block.ln1, block.ln2

    def library_block(x, attn, mlp, norm1, norm2):
        return built["block"](x)  # gptlib.model.Block, the four modules above are its own

    with torch.no_grad():
        return compare(name, user_fn, library_block, make_inputs, mistakes=mistakes)


@solved_by(solution_pre_norm_block)
def check_pre_norm_block(pre_norm_block) -> CheckResult:
    """Run `pre_norm_block(x, attn, mlp, norm1, norm2)` on random pre-norm RMSNorm blocks and
    x [2, 6, 8], against `gptlib.model.Block(norm_placement="pre")` made of the same modules."""
    return _check_block("pre_norm_block", pre_norm_block, "pre", PRE_MISTAKES)


@solved_by(solution_post_norm_block)
def check_post_norm_block(post_norm_block) -> CheckResult:
    """Run `post_norm_block(x, attn, mlp, norm1, norm2)` on random post-norm LayerNorm blocks and
    x [2, 6, 8], against `gptlib.model.Block(norm_placement="post")` made of the same modules."""
    return _check_block("post_norm_block", post_norm_block, "post", POST_MISTAKES)


# ---------------------------------------------------------------------------------------------
# Optional: RMSNorm's backward pass


def solution_rmsnorm_backward(x, weight, grad_out, eps):
    """x [..., d], weight [d], grad_out = dL/dy [..., d] -> (dL/dx [..., d], dL/dweight [d])
    for y = x / rms * weight with rms = sqrt(mean(x^2 over d) + eps)."""
    rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]: eps inside the root
    x_hat = x / rms  # [..., d]: the token scaled to RMS about 1, before the gain
    d = x.shape[-1]
    grad_weight = (grad_out * x_hat).reshape(-1, d).sum(dim=0)  # [d]: every token uses the gain
    g = grad_out * weight  # [..., d]: dL/dx_hat
    # rms depends on x as well: d rms / d x_j = x_j / (d * rms). That removes the part of g
    # along x_hat: scaling a token up or down leaves x_hat (almost, with eps) unchanged.
    grad_x = (g - x_hat * (g * x_hat).mean(dim=-1, keepdim=True)) / rms  # [..., d]
    return grad_x, grad_weight


def _bw_parts(x, weight, grad_out, eps):
    rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return rms, x / rms, grad_out * weight


def _bw_grad_weight(x_hat, grad_out):
    return (grad_out * x_hat).reshape(-1, x_hat.shape[-1]).sum(dim=0)


def _bw_rms_constant(x, weight, grad_out, eps):
    rms, x_hat, g = _bw_parts(x, weight, grad_out, eps)
    return g / rms, _bw_grad_weight(x_hat, grad_out)


def _bw_sum_not_mean(x, weight, grad_out, eps):
    rms, x_hat, g = _bw_parts(x, weight, grad_out, eps)
    return (g - x_hat * (g * x_hat).sum(-1, keepdim=True)) / rms, _bw_grad_weight(x_hat, grad_out)


def _bw_sign(x, weight, grad_out, eps):
    rms, x_hat, g = _bw_parts(x, weight, grad_out, eps)
    return (g + x_hat * (g * x_hat).mean(-1, keepdim=True)) / rms, _bw_grad_weight(x_hat, grad_out)


def _bw_eps_outside(x, weight, grad_out, eps):
    rms = x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps
    x_hat, g = x / rms, grad_out * weight
    return (g - x_hat * (g * x_hat).mean(-1, keepdim=True)) / rms, _bw_grad_weight(x_hat, grad_out)


def _bw_no_gain(x, weight, grad_out, eps):
    rms, x_hat, _ = _bw_parts(x, weight, grad_out, eps)
    g = grad_out
    return (g - x_hat * (g * x_hat).mean(-1, keepdim=True)) / rms, _bw_grad_weight(x_hat, grad_out)


def _bw_weight_not_summed(x, weight, grad_out, eps):
    grad_x, _ = solution_rmsnorm_backward(x, weight, grad_out, eps)
    return grad_x, grad_out * (x / _bw_parts(x, weight, grad_out, eps)[0])


def _bw_weight_first_dim(x, weight, grad_out, eps):
    grad_x, _ = solution_rmsnorm_backward(x, weight, grad_out, eps)
    return grad_x, (grad_out * (x / _bw_parts(x, weight, grad_out, eps)[0])).sum(dim=0)


def _bw_weight_first_two_dims(x, weight, grad_out, eps):
    grad_x, _ = solution_rmsnorm_backward(x, weight, grad_out, eps)
    return grad_x, (grad_out * (x / _bw_parts(x, weight, grad_out, eps)[0])).sum(dim=(0, 1))


def _bw_weight_uses_x(x, weight, grad_out, eps):
    grad_x, _ = solution_rmsnorm_backward(x, weight, grad_out, eps)
    return grad_x, (grad_out * x).reshape(-1, x.shape[-1]).sum(dim=0)


def _bw_swapped(x, weight, grad_out, eps):
    grad_x, grad_weight = solution_rmsnorm_backward(x, weight, grad_out, eps)
    return grad_weight, grad_x


BACKWARD_MISTAKES = [
    (
        "grad_x treats the RMS as a constant: yours has only the direct path through the division "
        "by rms, but rms depends on x too, and the path through rms is missing",
        _bw_rms_constant,
    ),
    (
        "the part of grad_x that goes through rms is d times too large: it sums over the d features "
        "where the derivative of rms gives an average",
        _bw_sum_not_mean,
    ),
    (
        "the part of grad_x that goes through rms has the wrong sign: yours adds it where it is "
        "taken away",
        _bw_sign,
    ),
    (
        "eps is added after the square root; it belongs inside the root, as in the forward pass. "
        "The near-zero token shows the difference",
        _bw_eps_outside,
    ),
    (
        "the gain is missing from grad_x: the gradient reaching x_hat passes through the "
        "multiplication by weight first",
        _bw_no_gain,
    ),
    (
        "grad_weight has x's shape [..., d]; one gain serves every token, so its gradient is [d] "
        "and collects every token's contribution",
        _bw_weight_not_summed,
    ),
    (
        "grad_weight is summed over the first dimension only; x may have any number of leading "
        "dimensions, and every one of them holds tokens that use the gain",
        _bw_weight_first_dim,
    ),
    (
        "grad_weight is summed over the first two dimensions only; x may have any number of leading "
        "dimensions, and every one of them holds tokens that use the gain",
        _bw_weight_first_two_dims,
    ),
    (
        "grad_weight uses x; the gain multiplies x_hat = x / rms, not x, so each token's part of "
        "your grad_weight is rms times too large",
        _bw_weight_uses_x,
    ),
    (
        "the two gradients are swapped: yours returns grad_weight first, then grad_x",
        _bw_swapped,
    ),
]

# Three leading shapes, one per trial (picked by the seed): [B, h, n], [B, n] and [N].
_LEADING = ((2, 3, 2), (2, 5), (7,))


def _backward_inputs(g: torch.Generator):
    d = 8
    leading = _LEADING[g.initial_seed() % len(_LEADING)]
    x = 3.0 * torch.randn(*leading, d, generator=g, dtype=torch.float64)
    x.view(-1, d)[0] *= 1e-3  # one near-zero token: where eps matters
    weight = 0.5 + torch.rand(d, generator=g, dtype=torch.float64)  # distinct gains
    grad_out = torch.randn(*leading, d, generator=g, dtype=torch.float64)
    return x, weight, grad_out, 1e-5


def _autograd_rmsnorm_backward(x, weight, grad_out, eps):
    """The reference: gptlib's RMSNorm forward, differentiated by autograd."""
    norm = RMSNorm(x.shape[-1], eps).double()
    with torch.no_grad():
        norm.weight.copy_(weight)
    x = x.detach().clone().requires_grad_(True)
    grad_x, grad_weight = torch.autograd.grad(norm(x), (x, norm.weight), grad_out)
    return grad_x, grad_weight


@solved_by(solution_rmsnorm_backward)
def check_rmsnorm_backward(rmsnorm_backward) -> CheckResult:
    """Run `rmsnorm_backward(x, weight, grad_out, eps)` on x of shapes [2, 5, 8], [7, 8] and
    [2, 3, 2, 8] (float64, one near-zero token each) against autograd through gptlib's RMSNorm."""
    return compare(
        "rmsnorm_backward",
        rmsnorm_backward,
        _autograd_rmsnorm_backward,
        _backward_inputs,
        mistakes=BACKWARD_MISTAKES,
        atol=1e-8,
        rtol=1e-6,
    )
