"""The warmup and parameter-group checks pass their solutions, agree with gptlib.train, and name
each typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.config import textbook
from gptlib.exercises import training
from gptlib.model import GPT
from gptlib.train import learning_rate, parameter_groups


def test_warmup_solution_passes():
    result = training.check_warmup_lr(training.solution_warmup_lr)
    assert result.passed
    assert result.message == "✓ warmup_lr: matches the reference on 3 random inputs"


@pytest.mark.parametrize("warmup", [1, 5, 100])
def test_warmup_solution_matches_library(warmup):
    for step in range(3 * warmup + 2):
        assert training.solution_warmup_lr(step, warmup, 2e-3) == pytest.approx(
            learning_rate(step, 2e-3, warmup)
        )


def test_warmup_values():
    lrs = [training.solution_warmup_lr(s, 4, 1.0) for s in range(6)]
    assert lrs == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "hint, wrong", training.WARMUP_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_warmup_mistake_gets_its_hint(hint, wrong):
    result = training.check_warmup_lr(wrong)
    assert not result.passed
    assert result.message == f"✗ warmup_lr: {hint}"


def test_warmup_written_with_zero_start_by_a_reader():
    def first_try(step, warmup, max_lr):
        return min(max_lr, max_lr * step / warmup)

    assert "step 0 gets learning rate 0" in training.check_warmup_lr(first_try).message


def test_decay_solution_passes():
    result = training.check_decay_groups(training.solution_decay_groups)
    assert result.passed
    assert result.message == "✓ decay_groups: matches the reference on 3 random inputs"


def test_decay_solution_matches_library():
    model = GPT(textbook(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16))
    ours = training.solution_decay_groups(model, 0.1)
    theirs = parameter_groups(model, 0.1)
    for a, b in zip(ours, theirs, strict=True):
        assert a["weight_decay"] == b["weight_decay"]
        assert [id(p) for p in a["params"]] == [id(p) for p in b["params"]]
    # the tied table once, in the decaying group; the 1-D LayerNorm parameters undecayed
    assert sum(p is model.tok_emb.weight for p in ours[0]["params"]) == 1
    assert all(p.dim() == 1 for p in ours[1]["params"]) and len(ours[1]["params"]) == 2 * 5


@pytest.mark.parametrize(
    "hint, wrong", training.DECAY_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_decay_mistake_gets_its_hint(hint, wrong):
    result = training.check_decay_groups(wrong)
    assert not result.passed
    assert result.message == f"✗ decay_groups: {hint}"


def test_hand_written_list_with_both_tables():
    def both_tables(model, weight_decay):
        decay = [model.tok_emb.weight, model.lm_head.weight]
        decay += [p for n, p in model.named_parameters() if p.dim() >= 2 and "tok_emb" not in n]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    assert "twice" in training.check_decay_groups(both_tables).message


def test_wrong_decay_value_is_caught():
    def fixed_decay(model, weight_decay):
        groups = training.solution_decay_groups(model, weight_decay)
        groups[0]["weight_decay"] = 0.01
        return groups

    result = training.check_decay_groups(fixed_decay)
    assert not result.passed
    assert "values differ" in result.message


def test_check_leaves_global_random_stream_alone():
    torch.manual_seed(0)
    training.check_decay_groups(training.solution_decay_groups)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


def test_reexported_from_package():
    assert exercises.check_warmup_lr is training.check_warmup_lr
    assert exercises.check_decay_groups is training.check_decay_groups
    assert exercises.solution_decay_groups is training.solution_decay_groups
