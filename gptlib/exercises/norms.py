"""Notebook 06, normalisation and its placement: RMSNorm itself, the rule of one residual
sublayer in both placements, and RMSNorm's backward pass.

`rmsnorm(x, gain, eps=1e-5)` takes x [..., d] of any leading shape and a gain [d] and returns
x / sqrt(mean(x^2 over d) + eps) * gain, [..., d]; it is checked (outputs and the gradients of x
and gain) on three leading shapes, each with one near-zero token, where the place of eps shows.

`pre_norm_block(x, sublayers)` and `post_norm_block(x, sublayers)` take the residual stream
x [B, n, d] and a list of (norm, f) pairs, the sublayers in the order they run, each callable
[B, n, d] -> [B, n, d], and return the stream after the last one, [B, n, d]. One gptlib `Block`
is [(ln1, attn), (ln2, mlp)]; a stack of blocks is the list of all their pairs, block after
block. Each pair in turn:

    pre-norm:  x = x + f(norm(x))
    post-norm: x = norm(x + f(x))

Each is checked on one, two and three random `gptlib.model.Block`s run one after the other
(pre-norm with RMSNorm as in textbook chapter 2, post-norm with LayerNorm as in textbook
chapter 3), whose own modules make the list.

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
from gptlib.exercises.residual import autograd_refusal, calls_autograd
from gptlib.model import Block
from gptlib.norms import RMSNorm

__all__ = [
    "check_post_norm_block",
    "check_pre_norm_block",
    "check_rmsnorm",
    "check_rmsnorm_backward",
    "solution_post_norm_block",
    "solution_pre_norm_block",
    "solution_rmsnorm",
    "solution_rmsnorm_backward",
]


# ---------------------------------------------------------------------------------------------
# RMSNorm


def solution_rmsnorm(x, gain, eps=1e-5):
    """x [..., d], gain [d] -> [..., d]: each token divided by its root mean square over its d
    features (eps inside the root), then scaled feature by feature."""
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # [..., 1]: one number per token
    return x / torch.sqrt(ms + eps) * gain  # [..., d]


def _rms(x, gain, eps, *, dim=-1, eps_out=False, centre=False, root=True, gained=True,
         mean=True):  # fmt: skip
    """RMSNorm with one switch flipped: every slip below is one call."""
    if centre:
        x = x - x.mean(dim=-1, keepdim=True)
    sq = x.pow(2)
    if dim is None:
        ms = sq.mean() if mean else sq.sum()
    else:
        ms = sq.mean(dim, keepdim=True) if mean else sq.sum(dim, keepdim=True)
    scale = ms.sqrt() + eps if eps_out else (ms + eps).sqrt() if root else ms + eps
    return x / scale * (gain if gained else 1.0)


def _rms_slip(name: str, **switches) -> Callable:
    def slip(x, gain, eps=1e-5):
        return _rms(x, gain, eps, **switches)

    slip.__name__ = name
    return slip


# fmt: off
RMSNORM_MISTAKES = [
    ("your outputs differ from the reference on the near-zero token only: there yours comes out "
     "at about full size (RMS near 1), where the reference's stays small. That is what adding eps "
     "after the square root gives, sqrt(mean(x^2)) + eps",
     _rms_slip("eps_outside_the_root", eps_out=True)),
    ("each of your tokens comes out with mean 0 over its features: the features' mean was "
     "subtracted before the division, as LayerNorm does; RMSNorm keeps a shift that all the "
     "features of a token share", _rms_slip("mean_subtracted", centre=True)),
    ("the mean square was taken over the tokens (dim=-2), not over each token's d features: a "
     "token's output then depends on the other tokens of its sequence",
     _rms_slip("over_the_tokens", dim=-2)),
    ("the mean square was taken over the first axis, not over each token's d features: a "
     "token's output then depends on the other sequences of the batch",
     _rms_slip("over_the_first_axis", dim=0)),
    ("one mean square for the whole tensor: every token is divided by the same number, so a "
     "near-zero token stays near zero and a token's output depends on all the others",
     _rms_slip("over_the_whole_tensor", dim=None)),
    ("the gain is not used: your output is each token over its root mean square alone, every "
     "feature at the same scale whatever gain holds", _rms_slip("no_gain", gained=False)),
    ("your outputs are sqrt(d) times too small: the squares were summed over the features, not "
     "averaged", _rms_slip("sum_not_mean", mean=False)),
    ("x was divided by its mean square, not by its root: your output shrinks as the token grows "
     "(double a token and its output halves), where a norm's output keeps its size",
     _rms_slip("no_root", root=False)),
]
# fmt: on

# One leading shape per trial (picked by the seed): [B, h, n] first, then [N] and [B, n].
_RMS_LEADING = ((2, 6), (2, 3, 4), (5,))


def _rmsnorm_inputs(g: torch.Generator):
    d = 12
    leading = _RMS_LEADING[g.initial_seed() % len(_RMS_LEADING)]
    x = 3.0 * torch.randn(*leading, d, generator=g) + 0.5  # an offset, so centring shows
    x.view(-1, d)[1] *= 1e-3  # one near-zero token: where the place of eps matters
    return x, 0.5 + torch.rand(d, generator=g), 1e-5  # distinct gains, so a missing one shows


def _library_rmsnorm(x, gain, eps=1e-5):
    """The reference: gptlib's RMSNorm module with its gain set to `gain`."""
    norm = RMSNorm(x.shape[-1], eps)
    return torch.func.functional_call(norm, {"weight": gain}, (x,))  # the gain handed in


@solved_by(solution_rmsnorm)
def check_rmsnorm(rmsnorm) -> CheckResult:
    """Run `rmsnorm(x, gain, eps)` on x of shapes [2, 3, 4, 12], [5, 12] and [2, 6, 12] (each
    with one near-zero token) against gptlib's RMSNorm, outputs and the gradients of x and gain.
    A function whose source calls F.rms_norm, torch.rms_norm or an RMSNorm module is told to
    write it itself."""
    return compare("rmsnorm", rmsnorm, _library_rmsnorm, _rmsnorm_inputs, RMSNORM_MISTAKES)


# ---------------------------------------------------------------------------------------------
# Residual sublayers, in both placements


def solution_pre_norm_block(x, sublayers):
    """x [B, n, d], sublayers: [(norm, f), ...] in order -> [B, n, d]. Each f reads a normalised
    copy of the stream and adds its output to the stream; the stream itself stays raw."""
    for norm, f in sublayers:
        x = x + f(norm(x))  # [B, n, d]: the next sublayer reads this sum
    return x


def solution_post_norm_block(x, sublayers):
    """x [B, n, d], sublayers: [(norm, f), ...] in order -> [B, n, d]. Each f reads the stream as
    it is, and each sum is normalised."""
    for norm, f in sublayers:
        x = norm(x + f(x))  # [B, n, d]: the last sum is normalised too
    return x


def _no_norms(x, sublayers):
    for _, f in sublayers:
        x = x + f(x)
    return x


def _norm_on_output(x, sublayers):
    # The same slip in either placement: the norm wraps the sublayer's output, x + norm(f(x)).
    # Unpacking each pair as (f, norm) gives it too.
    for norm, f in sublayers:
        x = x + norm(f(x))
    return x


def _first_two_only(solution: Callable) -> Callable:
    def first_two_only(x, sublayers):
        return solution(x, sublayers[:2])

    return first_two_only


def _reversed_order(solution: Callable) -> Callable:
    def reversed_order(x, sublayers):
        return solution(x, sublayers[::-1])

    return reversed_order


def _pre_no_residual(x, sublayers):
    for norm, f in sublayers:
        x = f(norm(x))
    return x


def _pre_stream_normalised(x, sublayers):
    for norm, f in sublayers:
        x = norm(x)  # the stream itself replaced by its normalised copy
        x = x + f(x)
    return x


def _pre_reads_input(x, sublayers):
    stream = x
    for norm, f in sublayers:
        stream = stream + f(norm(x))  # every sublayer reads the block's input
    return stream


def _pre_residual_from_input(x, sublayers):
    stream = x
    for norm, f in sublayers:
        stream = x + f(norm(stream))  # every sum starts again from the block's input
    return stream


PRE_MISTAKES = [
    (
        "the residual is missing: your stream after each sublayer is that sublayer's output "
        "alone, so the block's input x is lost after the first sublayer",
        _pre_no_residual,
    ),
    (
        "your output equals post-norm's, norm(x + f(x)): every sum was normalised, so each "
        "token of your output has the norm's scale, while a pre-norm stream grows as the sums "
        "add up",
        solution_post_norm_block,
    ),
    (
        "the stream itself was normalised (x = norm(x), then x + f(x)): each sublayer's output is "
        "added to the normalised copy, so the raw stream never reaches the output",
        _pre_stream_normalised,
    ),
    (
        "the norm was applied to what each sublayer returned, x + norm(f(x)) (unpacking each pair "
        "as (f, norm) gives the same): your sublayers read the raw stream",
        _norm_on_output,
    ),
    (
        "every sublayer reads the block's input x instead of the stream as the sublayers before it "
        "left it (feeding all of them from x is the 'parallel' block, a different design)",
        _pre_reads_input,
    ),
    (
        "each residual adds the block's input x, not the stream so far, so the output of every "
        "sublayer but the last is lost",
        _pre_residual_from_input,
    ),
    (
        "only the first two sublayers ran: for a stack of two or three blocks your output is "
        "what the first block alone gives",
        _first_two_only(solution_pre_norm_block),
    ),
    (
        "the sublayers ran from the last to the first: your output is what the list gives when "
        "it is run in reverse, the last MLP first",
        _reversed_order(solution_pre_norm_block),
    ),
    (
        "no norm is used: no sublayer reads a normalised copy of the stream",
        _no_norms,
    ),
]


def _post_final_norm_forgotten(x, sublayers):
    *first, (_, last) = sublayers
    x = solution_post_norm_block(x, first)
    return x + last(x)  # the last sum left as it is


def _post_no_residual(x, sublayers):
    for norm, f in sublayers:
        x = norm(f(x))
    return x


def _post_sublayers_read_norms(x, sublayers):
    for norm, f in sublayers:
        x = norm(x + f(norm(x)))
    return x


def _post_reads_input(x, sublayers):
    stream = x
    for norm, f in sublayers:
        stream = norm(stream + f(x))  # every sublayer reads the block's input
    return stream


def _post_residual_from_input(x, sublayers):
    stream = x
    for norm, f in sublayers:
        stream = norm(x + f(stream))  # every sum starts again from the block's input
    return stream


POST_MISTAKES = [
    (
        "the last sum is not normalised: every earlier sum went through its norm, but your "
        "output is the last sum as it is",
        _post_final_norm_forgotten,
    ),
    (
        "the residual is missing: each sum is the sublayer's output alone, without the stream",
        _post_no_residual,
    ),
    (
        "that is pre-norm, x + f(norm(x)): your sublayers read normalised copies and your sums are "
        "left as they are, the other way round from post-norm",
        solution_pre_norm_block,
    ),
    (
        "the norm ran twice per sublayer: your sublayers read a normalised copy of the stream, "
        "and each sum was normalised as well",
        _post_sublayers_read_norms,
    ),
    (
        "the norm was applied to what each sublayer returned, x + norm(f(x)) (unpacking each pair "
        "as (f, norm) gives the same): your sums themselves are left unnormalised",
        _norm_on_output,
    ),
    (
        "every sublayer reads the block's input x instead of the normalised stream the sublayers "
        "before it left",
        _post_reads_input,
    ),
    (
        "each residual adds the block's input x, not the stream so far, so the output of every "
        "sublayer but the last is lost",
        _post_residual_from_input,
    ),
    (
        "only the first two sublayers ran: for a stack of two or three blocks your output is "
        "what the first block alone gives",
        _first_two_only(solution_post_norm_block),
    ),
    (
        "the sublayers ran from the last to the first: your output is what the list gives when "
        "it is run in reverse, the last MLP first",
        _reversed_order(solution_post_norm_block),
    ),
    (
        "no norm is used: none of the sums is normalised",
        _no_norms,
    ),
]

# What a function written for exactly two pairs, (norm1, attn), (norm2, mlp) = sublayers, raises
# on a longer list.
UNPACK_HINT = (
    "your function handles exactly two (norm, f) pairs, one block; the check also hands it "
    "stacks of two and three blocks, 4 and 6 pairs"
)
ERROR_HINTS = [("too many values to unpack", UNPACK_HINT), ("list index out of range", UNPACK_HINT)]

# Blocks in the stack, one trial each (picked by the seed): one, two, then three.
_N_BLOCKS = (3, 1, 2)


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


def sublayers_of(blocks) -> list[tuple[Callable, Callable]]:
    """The (norm, f) pairs of gptlib blocks, in the order they run: [(ln1, attn), (ln2, mlp)]
    for each block, block after block."""
    return [pair for b in blocks for pair in ((b.ln1, b.attn), (b.ln2, b.mlp))]


def _check_block(name: str, user_fn: Callable, placement: str, mistakes) -> CheckResult:
    built: dict[str, list[Block]] = {}

    def make_inputs(g: torch.Generator):
        n_blocks = _N_BLOCKS[g.initial_seed() % len(_N_BLOCKS)]
        built["blocks"] = blocks = [_random_block(placement, g) for _ in range(n_blocks)]
        x = 2.0 * torch.randn(2, 6, 8, generator=g)  # [B, n, d], a stream not already normalised
        return x, sublayers_of(blocks)

    def library_blocks(x, sublayers):
        for block in built["blocks"]:  # gptlib.model.Block, the pairs are its own modules
            x = block(x)
        return x

    return compare(
        name, user_fn, library_blocks, make_inputs, mistakes=mistakes, error_hints=ERROR_HINTS
    )


@solved_by(solution_pre_norm_block)
def check_pre_norm_block(pre_norm_block) -> CheckResult:
    """Run `pre_norm_block(x, sublayers)` on the sublayers of one, two and three random pre-norm
    RMSNorm blocks and x [2, 6, 8], against `gptlib.model.Block(norm_placement="pre")` run block
    after block."""
    return _check_block("pre_norm_block", pre_norm_block, "pre", PRE_MISTAKES)


@solved_by(solution_post_norm_block)
def check_post_norm_block(post_norm_block) -> CheckResult:
    """Run `post_norm_block(x, sublayers)` on the sublayers of one, two and three random post-norm
    LayerNorm blocks and x [2, 6, 8], against `gptlib.model.Block(norm_placement="post")` run
    block after block."""
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
        "by rms; the path through rms itself, which depends on x as well, is missing",
        _bw_rms_constant,
    ),
    (
        "the part of grad_x that goes through rms is d times too large (a sum over the d features "
        "where there is one term per feature in an average)",
        _bw_sum_not_mean,
    ),
    (
        "the part of grad_x that goes through rms has the wrong sign",
        _bw_sign,
    ),
    (
        "your gradients are off for the near-zero token only, as they are with eps added after "
        "the square root: for ordinary tokens the two placements of eps agree, near zero they "
        "do not",
        _bw_eps_outside,
    ),
    (
        "the gain is missing from grad_x: yours is what grad_x would be with every gain equal to 1",
        _bw_no_gain,
    ),
    (
        "grad_weight has x's shape [..., d], one gradient per token, where weight, and so its "
        "gradient, is [d]",
        _bw_weight_not_summed,
    ),
    (
        "grad_weight is summed over the first dimension only: right when x is [N, d], wrong when "
        "x has more leading dimensions",
        _bw_weight_first_dim,
    ),
    (
        "grad_weight is summed over the first two dimensions only: right when x is [B, n, d], "
        "wrong when x has another number of leading dimensions",
        _bw_weight_first_two_dims,
    ),
    (
        "each token's part of grad_weight is rms times too large: it matches grad_out times x, "
        "without the division by rms",
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
    [2, 3, 2, 8] (float64, one near-zero token each) against autograd through gptlib's RMSNorm.
    A function that calls autograd itself (read from its source) is refused: the point is the
    derivation."""
    if calls_autograd(rmsnorm_backward):
        return autograd_refusal("rmsnorm_backward")
    return compare(
        "rmsnorm_backward",
        rmsnorm_backward,
        _autograd_rmsnorm_backward,
        _backward_inputs,
        mistakes=BACKWARD_MISTAKES,
        atol=1e-8,
        rtol=1e-6,
    )
