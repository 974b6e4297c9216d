"""Notebook 09, cross-entropy. `log_softmax(logits, dim=-1)`: log-probabilities along dim, by the
log-sum-exp trick. `lm_loss(logits [B, n, V], labels [B, n])`: the mean of -log p(labels[:, t + 1])
under logits[:, t] over the labels that are not -100, built on the reader's log-softmax."""

from functools import partial

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_lm_loss", "check_log_softmax", "solution_lm_loss", "solution_log_softmax"]
IGNORE_INDEX = -100


def solution_log_softmax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = logits.amax(dim=dim, keepdim=True)  # the maximum along dim, kept as an axis of size 1
    # exp(logits - m) <= 1 cannot overflow, and the largest term is exactly 1, so the sum is >= 1
    return logits - m - (logits - m).exp().sum(dim=dim, keepdim=True).log()


def solution_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    targets = labels[:, 1:]  # [B, n-1]: position t is scored on the token at t + 1
    counted = targets != IGNORE_INDEX  # [B, n-1]: the labels that enter the mean
    logp = solution_log_softmax(logits[:, :-1], dim=-1)  # [B, n-1, V]; the last has no label
    safe = torch.where(counted, targets, 0)  # -100 is no token id: look up any id, then drop it
    picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # [B, n-1]: log p of each label
    return -torch.where(counted, picked, 0.0).sum() / counted.sum()  # mean over counted labels


def _lm(logits, labels, *, shift=True, total=False, all_count=False, naive=False, pad=False):
    """lm_loss with one switch flipped: every slip below is one row."""
    x, y = (logits[:, :-1], labels[:, 1:]) if shift else (logits, labels)
    keep = (y != IGNORE_INDEX) | pad  # pad: the -100 labels counted, as token 0
    logp = (x.exp() / x.exp().sum(-1, keepdim=True)).log() if naive else x.log_softmax(-1)
    nll = torch.where(keep, -logp.gather(-1, y.clamp(min=0)[..., None])[..., 0], 0.0)
    return nll.sum() / (1 if total else keep.numel() if all_count else keep.sum())


# fmt: off
LOG_SOFTMAX_MISTAKES = [  # each wrong log_softmax(x, dim=-1) in one lambda
    (N_("no maximum was taken away before exp: exp(logits) overflows to inf near 400 and "
        "underflows to 0 near -400, and inf / inf or 0 / 0 is nan there"),
     lambda x, dim=-1: (x.exp() / x.exp().sum(dim, keepdim=True)).log()),
    (N_("no maximum was taken away before exp: exp(logits) overflows to inf near 400 and "
        "underflows to 0 near -400, so your log-sum-exp is inf or -inf there"),
     lambda x, dim=-1: x - x.exp().sum(dim, keepdim=True).log()),
    (N_("softmax and then log, in two steps: a probability below about 1e-45 rounds to 0, so your "
        "output is -inf for the very unlikely token of each slice"),
     lambda x, dim=-1: x.softmax(dim).log()),
    (N_("your output is normalised along the last axis whatever dim says: "
        "with dim=0, or dim=1 of a 3-D tensor, your slices along dim do not "
        "sum to 1"), lambda x, dim=-1: x.log_softmax(-1)),
    (N_("the maximum was taken over the last axis whatever dim says: where dim is another axis, "
        "the entries of one slice along dim are shifted by different amounts, so its values "
        "change"),
     lambda x, dim=-1: (x - x.amax(-1, keepdim=True)) - (x - x.amax(-1, keepdim=True)).exp()
     .sum(dim, keepdim=True).log()),
]
LOST_AXIS = [("must match the size of tensor b", N_("a maximum or a sum along dim lost that axis"))]
LM_LOSS_MISTAKES = [
    (N_("no shift: position t's logits are scored against labels[:, t], the token that position "
        "already reads, so your loss rewards copying the input"), partial(_lm, shift=False)),
    (N_("the losses are summed: your value grows with the number of counted positions"),
     partial(_lm, total=True)),
    (N_("the ignored (-100) positions are counted in the denominator: your mean is too small by "
        "the share of ignored labels"), partial(_lm, all_count=True)),
    (N_("exp(logits) overflows for logits above about 88 and inf / inf is nan: your loss is nan on "
        "the large logits"), partial(_lm, naive=True)),
    (N_("the ignored labels (-100) were turned into token 0: those padding positions are scored as "
        "if token 0 came next, and counted in the mean"), partial(_lm, pad=True)),
]
# fmt: on
IGNORE_HINT = N_("a label of -100, which marks a position to leave out, was used as a token id")


def _log_softmax_inputs(g: torch.Generator) -> tuple:
    trial = g.initial_seed() % 4  # the default last axis, then dim 0, 1 and 2
    logits = torch.randn([(3, 7), (7, 3), (2, 5, 6), (2, 6, 5)][trial], generator=g) * 4 + 400
    x = logits.movedim(trial - 1 if trial else -1, -1)  # a view, the slices along its last axis
    x[..., 0] -= 150.0  # one very unlikely token in each slice (exp(400) overflows float32)
    x[(1,) * (x.dim() - 1)] -= 800.0  # one slice near -400: it needs a maximum of its own
    return (logits,) if trial == 0 else (logits, trial - 1)


@solved_by(solution_log_softmax)
def check_log_softmax(log_softmax) -> CheckResult:
    """Run `log_softmax` on [3, 7] logits, then along dim 0, 1, 2 (see `_log_softmax_inputs`)."""
    return compare("log_softmax", log_softmax, solution_log_softmax, _log_softmax_inputs,
                   LOG_SOFTMAX_MISTAKES, trials=4, error_hints=LOST_AXIS)  # fmt: skip


def _lm_loss_inputs(g: torch.Generator) -> tuple:
    logits = torch.randn(3, 6, 7, generator=g) * 2.0  # [B, n, V]
    labels = torch.randint(0, 7, (3, 6), generator=g)  # [B, n], the same window as idx
    labels[0, 4:] = labels[1, 2] = IGNORE_INDEX  # a padded tail, and one label inside a row
    if g.initial_seed() % 3 == 2:  # once, logits where only a log-space computation survives
        logits += 100.0  # exp(100) overflows float32
        logits[2, 0, labels[2, 1]] -= 200.0  # the true token is given p ~ e^-200
    return logits, labels


@solved_by(solution_lm_loss)
def check_lm_loss(lm_loss) -> CheckResult:
    """Run `lm_loss(logits, labels)` on [3, 6, 7] logits, some labels -100, once near 100."""
    return compare("lm_loss", lm_loss, solution_lm_loss, _lm_loss_inputs, LM_LOSS_MISTAKES,
                   error_hints=[("-100", IGNORE_HINT)])  # fmt: skip
