"""The training-loop and validation-loss checks: a stub is 'not written yet', the reference
solutions pass, and each typical mistake gets its own hint."""

import pytest
import torch
import torch.nn.functional as F

from gptlib import exercises
from gptlib.data import sample_batch
from gptlib.exercises import training
from gptlib.exercises.checking import not_written, show_solution
from gptlib.train import learning_rate

# ---------------------------------------------------------------------------------------------
# train_loop


def test_loop_stub_is_not_written_yet():
    def train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        raise NotImplementedError  # your code here

    result = training.check_train_loop(train_loop)
    assert not result.passed
    assert result.message == not_written("train_loop").message
    assert result.message == (
        "train_loop is not written yet: replace its body and run this cell again"
    )


def test_loop_solution_passes():
    result = training.check_train_loop(training.solution_train_loop)
    assert result.passed
    assert result.message.startswith("✓ train_loop: the same 6 losses and the same final weights")
    assert "model.train(" not in result.message


@pytest.mark.parametrize(
    "hint, wrong", training.LOOP_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_loop_mistake_gets_its_hint(hint, wrong):
    result = training.check_train_loop(wrong)
    assert not result.passed
    assert result.message == f"✗ train_loop: {hint}"


def test_loop_hints_are_distinct():
    # Three ways of shifting twice share one message, and so do the two orders that leave every
    # p.grad empty at the step.
    hints = [hint for hint, _ in training.LOOP_MISTAKES]
    assert len(set(hints)) == len(hints) - 3
    assert hints.count(training.SHIFTED_TWICE) == 3


def test_reference_loop_is_what_train_does():
    # The check compares with the reference loop; gptlib.train.train must still agree with it.
    from gptlib.train import train

    s = training.LOOP_SETTINGS

    def library(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        history = train(
            model,
            tokens,
            steps,
            batch_size,
            max_lr=max_lr,
            warmup=warmup,
            schedule="cosine",
            min_lr=0.0,
            clip=clip,
            seed=seed,
            optimizer=optimizer,
        )
        return history.loss

    for seed in training.LOOP_SEEDS:
        model, tokens = training._loop_setup(seed)
        ref_losses, ref_weights = training._run_loop(
            training.solution_train_loop, model, tokens, seed
        )
        lib_losses, lib_weights = training._run_loop(library, model, tokens, seed)
        assert len(lib_losses) == s["steps"]
        torch.testing.assert_close(torch.tensor(lib_losses), torch.tensor(ref_losses))
        torch.testing.assert_close(lib_weights, ref_weights)


def test_step_before_backward_is_not_blamed_on_zero_grad_alone():
    result = training.check_train_loop(training._step_right_after_zero_grad)
    assert "every p.grad was empty when optimizer.step() ran" in result.message
    assert "or the step came before loss.backward()" in result.message


def _shifting_loader_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    # A reader's loop that shifts the labels itself, as a shifting data loader would.
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        idx, labels = sample_batch(tokens, batch_size, model.cfg.block_size, g)
        targets = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
        _, loss = model(idx, targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_labels_shifted_twice_by_a_reader_are_named():
    result = training.check_train_loop(_shifting_loader_loop)
    assert result.message == f"✗ train_loop: {training.SHIFTED_TWICE}"


def test_labels_shifted_twice_with_another_slip_are_still_named():
    def two_slips(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        return _shifting_loader_loop(
            model, optimizer, tokens, steps, batch_size, max_lr, 0, clip, seed
        )

    result = training.check_train_loop(two_slips)
    assert result.message.startswith(f"✗ train_loop: {training.SHIFTED_TWICE}")
    assert "something else is off too" in result.message
    assert "the loss of step 0 is already" not in result.message


def test_clip_after_step_is_named_like_no_clip():
    result = training.check_train_loop(training._clip_after_step)
    assert not result.passed
    assert "comes after optimizer.step()" in result.message


def _written_differently(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    # Another correct loop: zero_grad at the end of the step, the loss computed by hand.
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        idx, labels = sample_batch(tokens, batch_size, model.cfg.block_size, g)
        logits, _ = model(idx)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        optimizer.step()
        model.zero_grad()
        losses.append(loss)  # tensors are fine too
    return losses


def test_a_correct_loop_written_differently_passes():
    assert training.check_train_loop(_written_differently).passed


def test_readers_first_try_without_zero_grad():
    def train_loop_first_try(
        model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed
    ):
        g = torch.Generator().manual_seed(seed)
        model.train()
        losses = []
        for step in range(steps):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
            idx, labels = sample_batch(tokens, batch_size, model.cfg.block_size, g)
            loss = model(idx, labels)[1]
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            losses.append(loss.item())
        return losses

    result = training.check_train_loop(train_loop_first_try)
    assert "without zero_grad the gradients" in result.message


def test_unknown_slip_in_the_forward_names_step_0():
    def doubled_loss(*args):
        model = args[0]
        original = model.forward

        def forward(idx, labels=None, cache=None):
            logits, loss = original(idx, labels, cache)
            return logits, 2 * loss

        model.forward = forward
        return training.solution_train_loop(*args)

    result = training.check_train_loop(doubled_loss)
    assert not result.passed
    assert "the loss of step 0 is already" in result.message


def test_unknown_slip_in_the_update_names_the_step():
    def half_lr(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        return training.solution_train_loop(
            model, optimizer, tokens, steps, batch_size, max_lr / 2, warmup, clip, seed
        )

    result = training.check_train_loop(half_lr)
    assert not result.passed
    assert "the losses agree up to step 0 and part at step 1" in result.message


def test_wrong_number_of_losses_and_errors_are_reported():
    def last_loss_only(*args):
        return training.solution_train_loop(*args)[-1:]

    assert "returned 1 losses for 6 steps" in training.check_train_loop(last_loss_only).message

    def crashes(*args):
        raise RuntimeError("boom")

    assert training.check_train_loop(crashes).message == (
        "✗ train_loop: your function raised RuntimeError: boom"
    )


def test_loop_check_leaves_global_random_stream_alone():
    torch.manual_seed(0)
    training.check_train_loop(training.solution_train_loop)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


def test_clipping_acts_in_the_check():
    # If no step were clipped, the clip mistakes could not be told from the right answer.
    model, tokens = training._loop_setup(training.LOOP_SEEDS[0])
    losses, weights = training._run_loop(
        training.solution_train_loop, model, tokens, training.LOOP_SEEDS[0]
    )
    _, unclipped = training._run_loop(training._no_clip, model, tokens, training.LOOP_SEEDS[0])
    assert (weights - unclipped).abs().max() > 1e-4


# ---------------------------------------------------------------------------------------------
# validation_loss


def test_estimate_stub_is_not_written_yet():
    def validation_loss(model, tokens, batch_size, n_batches, seed):
        raise NotImplementedError  # your code here

    result = training.check_validation_loss(validation_loss)
    assert not result.passed
    assert result.message == (
        "validation_loss is not written yet: replace its body and run this cell again"
    )


def test_estimate_solution_passes():
    result = training.check_validation_loss(training.solution_validation_loss)
    assert result.passed
    assert result.message.startswith("✓ validation_loss: ")


@pytest.mark.parametrize(
    "hint, wrong", training.ESTIMATE_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_estimate_mistake_gets_its_hint(hint, wrong):
    result = training.check_validation_loss(wrong)
    assert not result.passed
    assert result.message == f"✗ validation_loss: {hint}"


def test_mode_not_given_back_names_the_symptom_not_the_fix():
    def flips_the_mode(model, tokens, batch_size, n_batches, seed):
        was = model.training
        value = training.solution_validation_loss(model, tokens, batch_size, n_batches, seed)
        model.train(not was)
        return value

    result = training.check_validation_loss(flips_the_mode)
    assert not result.passed
    assert "one that came in train mode left in eval mode" in result.message
    assert "one that came in eval mode left in train mode" in result.message
    assert "model.train(" not in result.message


def test_estimate_wrong_average_is_reported():
    def summed(model, tokens, batch_size, n_batches, seed):
        return n_batches * training.solution_validation_loss(
            model, tokens, batch_size, n_batches, seed
        )

    result = training.check_validation_loss(summed)
    assert not result.passed
    assert "gptlib.train.estimate_loss gives" in result.message


# ---------------------------------------------------------------------------------------------
# Both


@pytest.mark.parametrize("check", [training.check_train_loop, training.check_validation_loss])
def test_show_solution_prints_the_reference(check, capsys):
    show_solution(check)
    out = capsys.readouterr().out
    assert f"def {check.solution.__name__}(" in out
    assert "def _loop(" not in out and "def _estimate(" not in out  # the wrong versions stay hidden


def test_reexported_from_package():
    assert exercises.check_train_loop is training.check_train_loop
    assert exercises.check_validation_loss is training.check_validation_loss
    assert exercises.solution_train_loop is training.solution_train_loop
    assert "solution_validation_loss" in exercises.__all__
