"""Notebook 06: `rmsnorm` against gptlib's RMSNorm, `pre_norm_block` and `post_norm_block` against
random gptlib Blocks, and, optional, `rmsnorm_backward` against autograd."""

import torch

from gptlib.config import microgpt, textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.exercises.nb05_residual import autograd_refusal, calls_autograd, variant
from gptlib.language import N_
from gptlib.model import Block
from gptlib.norms import RMSNorm

__all__ = [f"{kind}_{name}" for kind in ("check", "solution") for name in
           ("rmsnorm", "pre_norm_block", "post_norm_block", "rmsnorm_backward")]  # fmt: skip


def solution_rmsnorm(x, gain, eps=1e-5):
    """x [..., d], gain [d] -> [..., d]: each token over its root mean square, times the gain."""
    ms = x.pow(2).mean(dim=-1, keepdim=True)  # [..., 1]: one number per token
    return x / torch.sqrt(ms + eps) * gain  # [..., d]


def _rms(x, gain, eps=1e-5, *, dim=-1, eps_out=False, centre=False, gained=True, over=0, std="",
         no_eps=False):  # fmt: skip
    x, eps = x - x.mean(dim=-1, keepdim=True) if centre else x, 0.0 if no_eps else eps
    ms = x.pow(2).sum(dim, keepdim=True) / (x.size(-1) - over) if over else x.pow(2).mean(dim, True)
    if std:  # the standard deviation: centred, over d - 1
        var = x.var(-1, keepdim=True)
        return x / ((var + eps).sqrt() if std == "var" else var.sqrt() + eps) * gain
    return x / (ms.sqrt() + eps if eps_out else (ms + eps).sqrt()) * (gain if gained else 1.0)


RMSNORM_MISTAKES = [
    (N_("only your near-zero token is off, at about full size: that is adding eps after the square "
        "root, sqrt(mean(x^2)) + eps"), variant(_rms, "eps_outside_the_root", eps_out=True)),
    (N_("each of your tokens comes out with mean 0 over its features: the mean was subtracted "
        "first, as LayerNorm does"), variant(_rms, "mean_subtracted", centre=True)),
    (N_("the mean square was taken over the tokens (dim=-2), not over each token's d features"),
     variant(_rms, "over_the_tokens", dim=-2)),
    (N_("the mean square was taken over the first axis, not over each "
        "token's d features: a token then depends on the other sequences of "
        "the batch"), variant(_rms, "over_the_first_axis", dim=0)),
    (N_("one mean square for the whole tensor: every token is divided by the same number, so the "
        "near-zero token stays near zero"), variant(_rms, "over_the_whole_tensor", dim=None)),
    (N_("the gain is not used: every feature of your output is at the same scale"),
     variant(_rms, "no_gain", gained=False)),
    (N_("only your near-zero token is off, blown up to the size of the others: eps is missing "
        "from the root, so nothing keeps a token near zero small"),
     variant(_rms, "no_eps", no_eps=True)),
    (N_("every token of yours is a little too small, by sqrt((d - 1) / d): the sum of squares was "
        "divided by d - 1 (the unbiased estimate), not by d"), variant(_rms, "unbiased", over=1)),
    *[(N_("your denominator is the standard deviation (x.std or x.var): it subtracts each token's "
          "mean before squaring and divides by d - 1, where RMSNorm's root mean square does "
          "neither"), variant(_rms, f"std_{std}", std=std)) for std in ("var", "std")],
]  # fmt: skip


def _rmsnorm_inputs(g: torch.Generator):
    leading = ((2, 6), (2, 3, 4), (5,))[g.initial_seed() % 3]  # [B, h, n] first
    x = 3.0 * torch.randn(*leading, 12, generator=g) + 0.5  # an offset, so centring shows
    x.view(-1, 12)[1] *= 1e-3  # one near-zero token: where the place of eps matters
    return x, 0.5 + torch.rand(12, generator=g), 1e-5


def _library_rmsnorm(x, gain, eps=1e-5):  # gptlib's RMSNorm, its gain the one given
    return torch.func.functional_call(RMSNorm(x.shape[-1], eps), {"weight": gain}, (x,))


@solved_by(solution_rmsnorm)
def check_rmsnorm(rmsnorm) -> CheckResult:
    """Outputs and gradients against gptlib's RMSNorm on x [2, 3, 4, 12], [5, 12], [2, 6, 12]."""
    return compare("rmsnorm", rmsnorm, _library_rmsnorm, _rmsnorm_inputs, RMSNORM_MISTAKES)


def solution_pre_norm_block(x, sublayers):
    """x [B, n, d], sublayers [(norm, f), ...] -> [B, n, d]: each f reads a normalised copy."""
    for norm, f in sublayers:
        x = x + f(norm(x))  # [B, n, d]: the stream itself stays raw
    return x


def solution_post_norm_block(x, sublayers):
    """x [B, n, d], sublayers [(norm, f), ...] -> [B, n, d]: each sum is normalised."""
    for norm, f in sublayers:
        x = norm(x + f(x))  # [B, n, d]: the last sum is normalised too
    return x


def _block(x, sublayers, *, post, res=True, on_output=False, from_input=False,
           stream_normed=False, last_raw=False, pick=slice(None), final=False):  # fmt: skip
    x0, pairs = x, sublayers[pick]
    for i, (norm, f) in enumerate(pairs):
        x = norm(x) if stream_normed else x
        read = x0 if from_input else x
        fx = f(read) if post or stream_normed or on_output else f(norm(read))
        s = (x if res else 0) + (norm(fx) if on_output else fx)
        x = norm(s) if post and not on_output and not (last_raw and i == len(pairs) - 1) else s
    return pairs[-1][0](x) if final else x


_BOTH = [  # (message, switches of _block): the same slips in either placement
    (N_("the residual is missing: your stream after each sublayer is that sublayer's output alone"),
     dict(res=False)),
    (N_("every sublayer reads the block's input x, not the stream the sublayers before it left"),
     dict(from_input=True)),
    (N_("the norm was applied to what each sublayer returned, x + norm(f(x)) (unpacking each pair "
        "as (f, norm) gives the same)"), dict(on_output=True)),
    (N_("only the first two sublayers ran: for a stack of blocks your output is what the first "
        "block alone gives"), dict(pick=slice(2))),
    (N_("the sublayers ran from the last to the first: the last MLP first"),
     dict(pick=slice(None, None, -1))),
]  # fmt: skip
PRE_MISTAKES = [
    (N_("your output equals post-norm's, norm(x + f(x)): every sum was normalised, while a "
        "pre-norm stream grows as the sums add up"), solution_post_norm_block),
    (N_("the stream itself was normalised (x = norm(x), then x + f(x)): the raw stream never "
        "reaches the output"), variant(_block, "stream_normed", post=False, stream_normed=True)),
    (N_("your output is normalised: the stream went through a norm after the last sublayer, where "
        "a pre-norm block hands it on raw"), variant(_block, "final_norm", post=False, final=True)),
    *((m, variant(_block, f"pre_{i}", post=False, **s)) for i, (m, s) in enumerate(_BOTH)),
]  # fmt: skip
POST_MISTAKES = [
    (N_("the last sum is not normalised: every earlier sum went through its norm, but your output "
        "is the last sum as it is"), variant(_block, "last_raw", post=True, last_raw=True)),
    (N_("that is pre-norm, x + f(norm(x)): your sublayers read normalised copies and your sums are "
        "left as they are"), solution_pre_norm_block),
    *((m, variant(_block, f"post_{i}", post=True, **s)) for i, (m, s) in enumerate(_BOTH)),
]  # fmt: skip
ERROR_HINTS = [(e, N_("your function handles exactly two (norm, f) pairs, one block; the check "
                      "also hands it stacks of two and three blocks, 4 and 6 pairs"))
               for e in ("too many values to unpack", "list index out of range")]  # fmt: skip


def _check_block(name: str, user_fn, placement: str, mistakes) -> CheckResult:
    preset, blocks = microgpt if placement == "pre" else textbook, []

    def make_inputs(g: torch.Generator):
        cfg = preset(n_embd=8, n_head=2, block_size=8, n_layer=1, norm_placement=placement)
        with torch.random.fork_rng(devices=[]):  # building a module draws from the global RNG
            blocks[:] = [Block(cfg).eval() for _ in range((3, 1, 2)[g.initial_seed() % 3])]
        with torch.no_grad():  # stream-sized outputs, gains and biases away from 1 and 0
            for p in (p for b in blocks for p in b.parameters()):
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5 + p.dim() % 2)
        pairs = [pair for b in blocks for pair in ((b.ln1, b.attn), (b.ln2, b.mlp))]
        return 2.0 * torch.randn(2, 6, 8, generator=g), pairs

    library = lambda x, sublayers: torch.nn.Sequential(*blocks)(x)  # noqa: E731
    return compare(name, user_fn, library, make_inputs, mistakes, error_hints=ERROR_HINTS)


@solved_by(solution_pre_norm_block)
def check_pre_norm_block(pre_norm_block) -> CheckResult:
    """Against one, two and three random pre-norm RMSNorm gptlib Blocks run in turn."""
    return _check_block("pre_norm_block", pre_norm_block, "pre", PRE_MISTAKES)


@solved_by(solution_post_norm_block)
def check_post_norm_block(post_norm_block) -> CheckResult:
    """Against one, two and three random post-norm LayerNorm gptlib Blocks run in turn."""
    return _check_block("post_norm_block", post_norm_block, "post", POST_MISTAKES)


def solution_rmsnorm_backward(x, weight, grad_out, eps):
    """x [..., d], weight [d], grad_out dL/dy [..., d] -> (dL/dx [..., d], dL/dweight [d])."""
    rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)  # [..., 1]
    x_hat = x / rms  # [..., d]
    grad_weight = (grad_out * x_hat).reshape(-1, x.shape[-1]).sum(dim=0)  # [d]: every token
    g = grad_out * weight  # [..., d]: dL/dx_hat
    # rms depends on x too (d rms / d x_j = x_j / (d * rms)): that removes g's part along x_hat.
    grad_x = (g - x_hat * (g * x_hat).mean(dim=-1, keepdim=True)) / rms  # [..., d]
    return grad_x, grad_weight


def _bw(x, weight, grad_out, eps, *, through_rms=1.0, mean=True, eps_out=False, gained=True):
    ms = x.pow(2).mean(dim=-1, keepdim=True)
    rms = ms.sqrt() + eps if eps_out else (ms + eps).sqrt()
    x_hat, g = x / rms, grad_out * weight if gained else grad_out
    dot = (g * x_hat).mean(-1, keepdim=True) if mean else (g * x_hat).sum(-1, keepdim=True)
    return (g - through_rms * x_hat * dot) / rms, (grad_out * x_hat).flatten(0, -2).sum(0)


BACKWARD_MISTAKES = [
    (N_("grad_x treats the RMS as a constant: the path through rms itself, which depends on x too, "
        "is missing"), variant(_bw, "rms_constant", through_rms=0.0)),
    (N_("the part of grad_x that goes through rms is d times too large, a sum over the d features "
        "where there is an average"), variant(_bw, "sum_not_mean", mean=False)),
    (N_("your gradients are off for the near-zero token only, as they are with eps added after the "
        "square root"), variant(_bw, "eps_outside", eps_out=True)),
    (N_("the gain is missing from grad_x: yours is what grad_x would be with every gain "
        "equal to 1"),
     variant(_bw, "no_gain", gained=False)),
]  # fmt: skip


def _backward_inputs(g: torch.Generator):  # rmsnorm's inputs in float64, and a grad_out
    x, weight, eps = _rmsnorm_inputs(g)
    return x.double(), weight.double(), torch.randn(x.shape, generator=g).double(), eps


def _autograd_rmsnorm_backward(x, weight, grad_out, eps):  # autograd through gptlib's RMSNorm
    x, weight = (t.detach().clone().requires_grad_(True) for t in (x, weight))
    return torch.autograd.grad(_library_rmsnorm(x, weight, eps), (x, weight), grad_out)


@solved_by(solution_rmsnorm_backward)
def check_rmsnorm_backward(rmsnorm_backward) -> CheckResult:
    """Against autograd on rmsnorm's inputs in float64; a function calling autograd is refused."""
    if calls_autograd(rmsnorm_backward):
        return autograd_refusal("rmsnorm_backward")
    return compare("rmsnorm_backward", rmsnorm_backward, _autograd_rmsnorm_backward,
                   _backward_inputs, BACKWARD_MISTAKES, atol=1e-8, rtol=1e-6)  # fmt: skip
