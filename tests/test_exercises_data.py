import pytest
import torch
import torch.nn.functional as F

from gptlib import GPT
from gptlib.exercises import check_shifted_loss, solution_shifted_loss


def test_solution_is_the_model_loss():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    labels = torch.randint(0, 7, (2, 5), generator=g)
    labels[1, -1] = -100
    torch.testing.assert_close(solution_shifted_loss(logits, labels), GPT.loss(logits, labels))
    assert check_shifted_loss(solution_shifted_loss).passed
    assert check_shifted_loss(GPT.loss).passed


def _flat(logits, labels):
    return logits.reshape(-1, logits.size(-1)), labels.reshape(-1)


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (lambda lo, la: F.cross_entropy(*_flat(lo, la)), "no shift"),
        (lambda lo, la: F.cross_entropy(*_flat(lo[:, 1:], la[:, :-1])), "the wrong way"),
        (lambda lo, la: F.cross_entropy(*_flat(lo[:, :-2], la[:, 2:])), "shifted twice"),
        (
            lambda lo, la: F.cross_entropy(*_flat(lo[:, :-1], la[:, 1:]), reduction="sum"),
            "the mean",
        ),
        (lambda lo, la: F.cross_entropy(lo[:, :-1], la[:, 1:]), "reads dim 1 as the classes"),
        (
            lambda lo, la: -lo[:, :-1].log_softmax(-1).gather(-1, la[:, 1:, None]).mean(),
            "ignore_index=-100",
        ),
    ],
)
def test_check_names_the_mistake(wrong, hint):
    result = check_shifted_loss(wrong)
    assert not result.passed
    assert hint in result.message, result.message
