"""Notebook 09, cross-entropy: a stable log-softmax along any axis, and the shifted, masked
language-model loss built on it.

`log_softmax(logits, dim=-1)`: logits of any shape -> log-probabilities of the same shape, each
slice along `dim` normalised, computed with the log-sum-exp trick: logits - m - log(sum(exp(logits
- m))) with m the maximum along `dim`. The notebook shows the trick on one row of Python numbers;
the tensor version, along any axis, is the reader's.

`lm_loss(logits, labels)`: logits [B, n, V] and labels [B, n], the same window as the input ids
(-100 marks a position to ignore) -> the mean of -log p(labels[:, t + 1]) under logits[:, t],
over every t = 0..n-2 whose label is not -100. A scalar. The notebook computes it only through
the library (`GPT.loss`, `F.cross_entropy`); the reader builds it from their own log-softmax:
the shift, picking each position's log-probability of its label, the mask and the mean.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_lm_loss", "check_log_softmax", "solution_lm_loss", "solution_log_softmax"]

IGNORE_INDEX = -100


def solution_log_softmax(logits: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = logits.amax(dim=dim, keepdim=True)  # the maximum along dim, kept as an axis of size 1
    # exp(logits - m) <= 1 cannot overflow, and the largest term is exactly 1, so the sum is >= 1
    return logits - m - (logits - m).exp().sum(dim=dim, keepdim=True).log()


def solution_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    targets = labels[:, 1:]  # [B, n-1]: position t is scored on the token at t + 1
    counted = targets != IGNORE_INDEX  # [B, n-1]: the labels that enter the mean
    logp = solution_log_softmax(
        logits[:, :-1], dim=-1
    )  # [B, n-1, V]; the last position has no label
    safe = torch.where(counted, targets, 0)  # -100 is no token id: look up any id, then drop it
    picked = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # [B, n-1]: log p of each label
    return -torch.where(counted, picked, 0.0).sum() / counted.sum()  # mean over counted labels


# ---- log_softmax mistakes ------------------------------------------------------------------


def _lsm_naive(logits, dim=-1):
    e = logits.exp()
    return (e / e.sum(dim=dim, keepdim=True)).log()


def _lsm_no_max(logits, dim=-1):
    return logits - logits.exp().sum(dim=dim, keepdim=True).log()


def _lsm_softmax_then_log(logits, dim=-1):
    return logits.softmax(dim=dim).log()


def _lsm_max_not_added_back(logits, dim=-1):
    m = logits.amax(dim=dim, keepdim=True)
    return logits - (logits - m).exp().sum(dim=dim, keepdim=True).log()


def _lsm_last_axis_always(logits, dim=-1):
    return solution_log_softmax(logits, -1)


def _lsm_global_max(logits, dim=-1):
    m = logits.max()  # one maximum for the whole tensor
    return logits - m - (logits - m).exp().sum(dim=dim, keepdim=True).log()


LOG_SOFTMAX_MISTAKES = [
    (
        "exp(logits) overflows to inf for logits above about 88 (float32) and underflows to 0 far "
        "below zero, and inf / inf or log(0 / 0) is nan: your output is nan on the slices near "
        "400 and -400",
        _lsm_naive,
    ),
    (
        "no maximum was taken away before exp: exp(logits) overflows to inf on the slices near 400 "
        "and underflows to 0 on the slice near -400, so your log-sum-exp is inf or -inf there and "
        "those entries come out -inf or inf",
        _lsm_no_max,
    ),
    (
        "softmax and then log, in two steps: a probability below about 1e-45 rounds to 0, so your "
        "output is -inf for the very unlikely token of each slice",
        _lsm_softmax_then_log,
    ),
    (
        "the maximum m was subtracted inside the exp but not from the logits outside it: each of "
        "your slices is off by its own maximum",
        _lsm_max_not_added_back,
    ),
    (
        "your output is normalised along the last axis whatever dim says: with dim=0, or dim=1 of "
        "a 3-D tensor, the slices along dim are the distributions, and yours do not sum to 1",
        _lsm_last_axis_always,
    ),
    (
        "the maximum m was taken over the whole tensor, not along dim: a slice far below the "
        "largest logit anywhere has every exp(logits - m) underflow to 0, and its log is -inf",
        _lsm_global_max,
    ),
]

LOG_SOFTMAX_ERROR_HINTS = [
    (
        "must match the size of tensor b",
        "a maximum or a sum taken along dim lost that axis, so it no longer lines up with the "
        "logits it was taken from",
    ),
]


def _hard_rows(g: torch.Generator, rows: int, size: int, low_row: int) -> torch.Tensor:
    """[rows, size] logits near 400, one of them 150 lower in each row (its probability
    underflows), and the row `low_row` near -400 instead (it needs a maximum of its own)."""
    logits = torch.randn(rows, size, generator=g) * 4.0 + 400.0  # exp(400) overflows float32
    logits[:, 0] -= 150.0
    logits[low_row] -= 800.0
    return logits


def _log_softmax_inputs() -> Callable[[torch.Generator], tuple]:
    # The last axis (dim left at its default), then the first axis, then the middle axis of a 3-D
    # tensor, then a 3-D tensor's last axis named as 2.
    trials = iter(range(4))

    def make(g: torch.Generator) -> tuple:
        trial = next(trials)
        if trial == 0:
            return (_hard_rows(g, 3, 7, 2),)  # [3, 7], rows normalised
        if trial == 1:
            return _hard_rows(g, 3, 7, 1).T.contiguous(), 0  # [7, 3], columns normalised
        x = _hard_rows(g, 2 * 6, 5, 7).view(2, 6, 5)  # 12 slices of 5, one near -400
        if trial == 2:
            return x.transpose(1, 2).contiguous(), 1  # [2, 5, 6], normalised along dim 1
        return x, 2  # [2, 6, 5], normalised along dim 2

    return make


@solved_by(solution_log_softmax)
def check_log_softmax(log_softmax: Callable) -> CheckResult:
    """Run `log_softmax(logits)` on [3, 7] logits, then `log_softmax(logits, dim)` along dim 0 of a
    [7, 3] tensor, dim 1 of a [2, 5, 6] one and dim 2 of a [2, 6, 5] one: slices near 400, one near
    -400, one logit 150 lower than the rest in each slice."""
    return compare(
        "log_softmax",
        log_softmax,
        solution_log_softmax,
        _log_softmax_inputs(),
        mistakes=LOG_SOFTMAX_MISTAKES,
        trials=4,
        error_hints=LOG_SOFTMAX_ERROR_HINTS,
    )


# ---- lm_loss mistakes ----------------------------------------------------------------------


def _per_position(logits, labels):
    """-log p of each shifted label, and which ones count: both [B, n-1]."""
    targets = labels[:, 1:]  # [B, n-1]
    keep = targets != IGNORE_INDEX
    logp = F.log_softmax(logits[:, :-1], dim=-1)  # [B, n-1, V]
    nll = -logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]  # [B, n-1]
    return nll * keep, keep


def _no_shift(logits, labels):
    V = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=IGNORE_INDEX)


def _shift_backwards(logits, labels):
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, 1:].reshape(-1, V), labels[:, :-1].reshape(-1), ignore_index=IGNORE_INDEX
    )


def _sum(logits, labels):
    nll, _ = _per_position(logits, labels)
    return nll.sum()


def _ignored_in_denominator(logits, labels):
    nll, keep = _per_position(logits, labels)
    return nll.sum() / keep.numel()


def _mean_of_row_means(logits, labels):
    nll, keep = _per_position(logits, labels)
    return (nll.sum(dim=1) / keep.sum(dim=1)).mean()


def _naive_log_softmax(logits, labels):
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    e = logits[:, :-1].exp()
    logp = (e / e.sum(dim=-1, keepdim=True)).log()
    nll = -logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return (nll * keep).sum() / keep.sum()


def _padding_as_token_zero(logits, labels):
    V = logits.size(-1)
    targets = labels[:, 1:].clamp(min=0)  # -100 turned into token 0, and counted
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), targets.reshape(-1))


def _softmax_then_log(logits, labels):
    targets = labels[:, 1:]
    keep = targets != IGNORE_INDEX
    logp = logits[:, :-1].softmax(dim=-1).log()
    nll = -logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    return torch.where(keep, nll, 0.0).sum() / keep.sum()


IGNORE_HINT = (
    "labels equal to -100 mark positions to leave out, and one of them was used as a token id, "
    "an index that no row of V log-probabilities has"
)

LM_LOSS_MISTAKES = [
    (
        "no shift: position t's logits are scored against labels[:, t], the token that position "
        "already reads, so your loss rewards copying the input instead of predicting the next token",
        _no_shift,
    ),
    (
        "shifted the wrong way round: your loss scores each position against the token before it, "
        "logits[:, t] with labels[:, t - 1]",
        _shift_backwards,
    ),
    (
        "the losses are summed: your value grows with the number of counted positions, where the "
        "reference's does not",
        _sum,
    ),
    (
        "the ignored (-100) positions are counted in the denominator: your mean is too small by the "
        "share of ignored labels",
        _ignored_in_denominator,
    ),
    (
        "each sequence is averaged first and then the sequences: with ignored labels the rows count "
        "different numbers of positions, so a position of a short row weighs more in your mean",
        _mean_of_row_means,
    ),
    (
        "exp(logits) overflows for logits above about 88 and inf / inf is nan: your loss is nan on "
        "the large logits",
        _naive_log_softmax,
    ),
    (
        "log(softmax(logits)) in two steps: a tiny probability rounds to 0 and its log is -inf, so "
        "your loss is inf where the true token is very unlikely",
        _softmax_then_log,
    ),
    (
        "the ignored labels (-100) were turned into token 0: those padding positions are scored as "
        "if token 0 came next, and counted in the mean",
        _padding_as_token_zero,
    ),
]


def _lm_loss_inputs() -> Callable[[torch.Generator], tuple]:
    # Two ordinary trials, then one with huge logits where only a log-space computation survives.
    huge = iter([False, False, True])

    def make(g: torch.Generator) -> tuple:
        B, n, V = 3, 6, 7
        logits = torch.randn(B, n, V, generator=g) * 2.0  # [B, n, V]
        labels = torch.randint(0, V, (B, n), generator=g)  # [B, n], the same window as idx
        labels[0, 4:] = IGNORE_INDEX  # a padded tail in one row
        labels[1, 2] = IGNORE_INDEX
        if next(huge):
            logits = logits + 100.0  # exp(100) overflows float32
            logits[2, 0, labels[2, 1]] -= 200.0  # the true token is given p ~ e^-200
        return logits, labels

    return make


@solved_by(solution_lm_loss)
def check_lm_loss(lm_loss: Callable) -> CheckResult:
    """Run `lm_loss(logits, labels)` on random [3, 6, 7] logits with some labels set to -100; the
    third time the logits are near 100 and one true token has a probability near e^-200."""
    return compare(
        "lm_loss",
        lm_loss,
        solution_lm_loss,
        _lm_loss_inputs(),
        mistakes=LM_LOSS_MISTAKES,
        error_hints=[("-100", IGNORE_HINT)],  # an id of -100 used as an index
    )
