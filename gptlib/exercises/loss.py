"""Notebook 09, cross-entropy: a stable log-softmax and the shifted, masked language-model loss.

`log_softmax(logits)`: logits [..., V] -> log-probabilities [..., V] computed with the
log-sum-exp trick, logits - m - log(sum(exp(logits - m))) with m the row maximum.

`lm_loss(logits, labels)`: logits [B, n, V] and labels [B, n], the same window as the input ids
(-100 marks a position to ignore) -> the mean of -log p(labels[:, t + 1]) under logits[:, t],
over every t = 0..n-2 whose label is not -100. A scalar.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_lm_loss", "check_log_softmax", "solution_lm_loss", "solution_log_softmax"]

IGNORE_INDEX = -100


def solution_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    m = logits.max(dim=-1, keepdim=True).values  # [..., 1]; exp(logits - m) <= 1 cannot overflow
    return logits - m - (logits - m).exp().sum(dim=-1, keepdim=True).log()


def solution_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, V),  # [B(n-1), V]: positions 0..n-2 predict ...
        labels[:, 1:].reshape(-1),  # [B(n-1)]: ... the token one step later
        ignore_index=IGNORE_INDEX,  # mean over the labels that are not -100
    )


# ---- log_softmax mistakes ------------------------------------------------------------------


def _lsm_naive(logits):
    e = logits.exp()
    return (e / e.sum(dim=-1, keepdim=True)).log()


def _lsm_softmax_then_log(logits):
    return logits.softmax(dim=-1).log()


def _lsm_max_not_added_back(logits):
    m = logits.max(dim=-1, keepdim=True).values
    return logits - (logits - m).exp().sum(dim=-1, keepdim=True).log()


def _lsm_over_rows(logits):
    m = logits.max(dim=0, keepdim=True).values
    return logits - m - (logits - m).exp().sum(dim=0, keepdim=True).log()


def _lsm_global_max(logits):
    m = logits.max()  # one maximum for the whole tensor
    return logits - m - (logits - m).exp().sum(dim=-1, keepdim=True).log()


LOG_SOFTMAX_MISTAKES = [
    (
        "exp(logits) overflows to inf for logits above about 88 (float32) and underflows to 0 far "
        "below zero, and inf / inf or log(0 / 0) is nan: your output is nan on the rows near 400 "
        "and -400",
        _lsm_naive,
    ),
    (
        "softmax and then log, in two steps: a probability below about 1e-45 rounds to 0, so your "
        "output is -inf for the very unlikely token of each row",
        _lsm_softmax_then_log,
    ),
    (
        "the maximum m was subtracted inside the exp but not from the logits outside it: each of "
        "your rows is off by its own maximum",
        _lsm_max_not_added_back,
    ),
    (
        "the maximum and the sum run over the rows (dim=0): your columns are normalised, not your "
        "rows; each row is one distribution over the V tokens",
        _lsm_over_rows,
    ),
    (
        "the maximum m was taken over the whole tensor, not per row: a row far below the largest "
        "logit anywhere has every exp(logits - m) underflow to 0, and its log is -inf",
        _lsm_global_max,
    ),
]


def _log_softmax_inputs(g: torch.Generator) -> tuple:
    logits = torch.randn(3, 7, generator=g) * 4.0 + 400.0  # [B, V]: exp(400) overflows float32
    logits[:, 0] -= 150.0  # one very unlikely token per row: its probability underflows to 0
    logits[2] -= 800.0  # a row near -400: exp(-800) underflows, so each row needs its own max
    return (logits,)


@solved_by(solution_log_softmax)
def check_log_softmax(log_softmax: Callable) -> CheckResult:
    """Run `log_softmax(logits)` on [3, 7] logits, two rows near 400 and one near -400, one
    logit 150 lower than the rest in each row."""
    return compare(
        "log_softmax",
        log_softmax,
        solution_log_softmax,
        _log_softmax_inputs,
        mistakes=LOG_SOFTMAX_MISTAKES,
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
    "labels equal to -100 mark positions to leave out, and one of them was used as a token id "
    "(F.cross_entropy has an argument for such labels)"
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
        "the losses are summed: your value grows with the number of positions; the loss is their "
        "mean over the counted positions",
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
    """Run `lm_loss(logits, labels)` on random [3, 6, 7] logits with some labels set to -100."""

    def run(*inputs):
        try:
            return lm_loss(*inputs)
        except (IndexError, RuntimeError) as e:
            # An id of -100 used as an index: the ignored labels were not left out.
            if "-100" in str(e) and not isinstance(e, NotImplementedError):
                raise type(e)(f"{e}. {IGNORE_HINT}") from None
            raise

    return compare("lm_loss", run, solution_lm_loss, _lm_loss_inputs(), mistakes=LM_LOSS_MISTAKES)
