"""The log-softmax and language-model-loss references agree with PyTorch and gptlib, the checks
accept correct versions written differently, refuse the library's loss, and name each slip of
their tables (the promised ones: the missing maximum, no shift, a sum, the denominator, an
overflow)."""

import math

import pytest
import torch
import torch.nn.functional as F

from gptlib.exercises import nb09_loss as loss
from gptlib.model import GPT


def test_log_softmax_matches_torch_even_for_huge_logits():
    x = torch.tensor([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]])
    out = loss.solution_log_softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.log_softmax(x, dim=-1))
    assert out[0, 0].item() == 0.0


@pytest.mark.parametrize("shape, dim", [((3, 5), -1), ((4, 3), 0), ((2, 3, 4), 1), ((2, 3, 4), 2)])
def test_log_softmax_matches_torch_along_any_axis(shape, dim):
    x = torch.randn(*shape) * 300
    torch.testing.assert_close(loss.solution_log_softmax(x, dim), F.log_softmax(x, dim=dim))


def test_log_softmax_along_dim_written_differently_passes():
    def log_softmax(logits, dim=-1):
        moved = logits.movedim(dim, -1)  # the axis to normalise, last
        m = moved.max(dim=-1, keepdim=True).values.detach()
        out = moved - m - torch.log(torch.sum(torch.exp(moved - m), dim=-1, keepdim=True))
        return out.movedim(-1, dim)

    assert loss.check_log_softmax(log_softmax).passed


@pytest.mark.parametrize("two_steps", [False, True])
def test_promised_missing_maximum_is_named_not_values_differ(two_steps):
    def log_softmax(logits, dim=-1):
        if two_steps:  # exp, divide, then log
            return (logits.exp() / logits.exp().sum(dim=dim, keepdim=True)).log()
        return logits - torch.log(torch.exp(logits).sum(dim=dim, keepdim=True))

    message = loss.check_log_softmax(log_softmax).message
    assert message.startswith("✗ log_softmax: no maximum was taken away before exp")
    assert "values differ" not in message


def test_dim_ignored_is_named():
    def log_softmax(logits, dim=-1):
        m = logits.max(dim=-1, keepdim=True).values
        return logits - m - (logits - m).exp().sum(dim=-1, keepdim=True).log()

    assert "whatever dim says" in loss.check_log_softmax(log_softmax).message


def test_lost_axis_is_named():
    def log_softmax(logits, dim=-1):
        m = logits.amax(dim=dim)  # no keepdim
        return logits - m - (logits - m).exp().sum(dim=dim).log()

    assert "lost that axis" in loss.check_log_softmax(log_softmax).message


def test_lm_loss_from_the_readers_log_softmax_passes():
    def log_softmax(logits, dim=-1):
        m = logits.amax(dim=dim, keepdim=True)
        return logits - m - (logits - m).exp().sum(dim=dim, keepdim=True).log()

    def lm_loss(logits, labels):
        targets = labels[:, 1:]
        keep = targets != -100
        logp = log_softmax(logits[:, :-1])  # [B, n-1, V]
        picked = logp[keep].gather(1, targets[keep, None])  # [counted, 1]
        return -picked.mean()

    assert loss.check_lm_loss(lm_loss).passed


def test_lm_loss_handed_to_cross_entropy_or_nll_loss_is_refused():
    def lm_loss(logits, labels):
        V = logits.size(-1)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))

    def through_nll(logits, labels):
        logp = logits[:, :-1].log_softmax(-1).flatten(0, 1)
        return F.nll_loss(logp, labels[:, 1:].flatten())

    for fn, called in [(lm_loss, "F.cross_entropy"), (through_nll, "F.nll_loss")]:
        result = loss.check_lm_loss(fn)
        assert not result.passed and "write this one yourself" in result.message
        assert called in result.message


def _gathered(logp, targets):
    """-mean of logp at the targets, over the targets that are not -100: the reader's way."""
    keep = targets != -100
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(picked * keep).sum() / keep.sum()


def test_lm_loss_matches_model_loss_and_hand_count():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 4, generator=g)  # [B, n, V]
    labels = torch.randint(0, 4, (2, 5), generator=g)
    labels[1, 3:] = -100
    got = loss.solution_lm_loss(logits, labels)
    torch.testing.assert_close(got, GPT.loss(logits, labels))
    logp = F.log_softmax(logits, dim=-1)
    terms = [
        -logp[b, t, labels[b, t + 1]].item()
        for b in range(2)
        for t in range(4)
        if labels[b, t + 1] != -100
    ]
    assert len(terms) == 6  # 8 shifted positions, 2 of them ignored
    assert got.item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)


def test_lm_loss_of_all_ignored_is_nan():
    logits = torch.zeros(1, 4, 3)
    labels = torch.full((1, 4), -100)
    assert math.isnan(loss.solution_lm_loss(logits, labels).item())


@pytest.mark.parametrize("hint, wrong", loss.LOG_SOFTMAX_MISTAKES)
def test_each_log_softmax_mistake_gets_its_hint(hint, wrong):
    result = loss.check_log_softmax(wrong)
    assert not result.passed
    assert result.message == f"✗ log_softmax: {hint}"


@pytest.mark.parametrize("hint, wrong", loss.LM_LOSS_MISTAKES)
def test_each_lm_loss_mistake_gets_its_hint(hint, wrong):
    result = loss.check_lm_loss(wrong)
    assert not result.passed
    assert result.message == f"✗ lm_loss: {hint}"


def test_index_with_ignored_labels_names_ignore_index():
    def gather_everything(logits, labels):
        logp = F.log_softmax(logits[:, :-1], dim=-1)
        return -logp.gather(-1, labels[:, 1:, None]).mean()

    result = loss.check_lm_loss(gather_everything)
    assert not result.passed
    assert loss.IGNORE_HINT in result.message


def test_naive_reader_passes_small_logits_but_not_huge_ones():
    def naive(logits, labels):
        p = logits.exp() / logits.exp().sum(-1, keepdim=True)
        return _gathered(p[:, :-1].log(), labels[:, 1:])

    assert "overflows" in loss.check_lm_loss(naive).message


def test_padding_clamped_to_token_zero_is_named():
    def lm_loss(logits, labels):
        targets = labels[:, 1:].clone()
        targets[targets == -100] = 0  # padding scored as token 0
        return _gathered(logits[:, :-1].log_softmax(-1), targets)

    hint = loss.LM_LOSS_MISTAKES[-1][0]
    assert "token 0" in hint
    assert loss.check_lm_loss(lm_loss).message == f"✗ lm_loss: {hint}"


@pytest.mark.parametrize(
    "slip, words",
    [
        (lambda lg, lb: loss._lm(lg, lb, shift=False), "no shift"),
        (lambda lg, lb: loss._lm(lg, lb, total=True), "summed"),
        (lambda lg, lb: loss._lm(lg, lb, all_count=True), "in the denominator"),
        (lambda lg, lb: loss._lm(lg, lb, naive=True), "overflows"),
    ],
)
def test_promised_lm_loss_slips_are_named(slip, words):
    """The page promises: no shift, a sum, ignored labels in the denominator, an overflow."""
    message = loss.check_lm_loss(slip).message
    assert message.startswith("✗ lm_loss:") and words in message
