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


# ---------------------------------------------------------------------------------------------
# adamw_step (optional)


def test_adamw_stub_is_not_written_yet():
    def adamw_step(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, weight_decay):
        raise NotImplementedError  # your code here

    assert training.check_adamw_step(adamw_step).message == not_written("adamw_step").message


def test_adamw_solution_passes():
    result = training.check_adamw_step(training.solution_adamw_step)
    assert result.passed, result.message
    assert "torch.optim.AdamW" in result.message


def test_adamw_reference_is_torchs_adamw():
    # The check compares with torch itself; the printed solution must agree with it.
    for seed, case in enumerate(training.ADAMW_CASES):
        params, grads = training._adamw_inputs(seed)
        expected = training._torch_adamw(case, params, grads)
        got = training._run_adamw(training.solution_adamw_step, case, params, grads)
        assert training._same_path(got, expected)


@pytest.mark.parametrize(
    "hint, wrong", training.ADAMW_MISTAKES, ids=[f"adamw-{i}" for i in range(10)]
)
def test_each_adamw_mistake_gets_its_hint(hint, wrong):
    result = training.check_adamw_step(wrong)
    assert not result.passed
    assert result.message == f"✗ adamw_step: {hint}"


def test_adamw_hints_are_distinct():
    hints = [hint for hint, _ in training.ADAMW_MISTAKES]
    assert len(set(hints)) == len(hints)


def test_adamw_slips_the_page_promises_are_named():
    # The exercise's text names these slips; each has its own message.
    promised = {
        "no bias correction": "not corrected for having started at zero",
        "L2 in the gradient": "the weight decay was added to the gradient",
        "decay after the update": "the decay shrank the weight after the update",
        "eps under the root": "eps was added under the square root",
        "betas swapped": "the betas are swapped",
        "count from 0": "counted it as update 0",
    }
    hints = " | ".join(hint for hint, _ in training.ADAMW_MISTAKES)
    for phrase in promised.values():
        assert phrase in hints


def _adamw_in_place(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, weight_decay):
    # Another correct update, written as torch writes it: in place, the corrections folded into
    # the step size, and a list returned.
    beta1, beta2 = betas
    t = steps_done + 1
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = exp_avg_sq.sqrt() / (1 - beta2**t) ** 0.5 + eps
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**t))
    return [param, exp_avg, exp_avg_sq]


def test_a_correct_adamw_written_differently_passes():
    assert training.check_adamw_step(_adamw_in_place).passed


def test_adamw_wrong_shape_and_count_are_reported():
    def two_values(*args):
        return training.solution_adamw_step(*args)[:2]

    message = training.check_adamw_step(two_values).message
    assert "returned 2 values, where the check reads three" in message

    def flattened(*args):
        return tuple(x.flatten() for x in training.solution_adamw_step(*args))

    assert "of shape [12] for a parameter of shape [4, 3]" in (
        training.check_adamw_step(flattened).message
    )


def test_an_unknown_adamw_slip_names_the_update_and_the_part():
    def half_lr(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, weight_decay):
        return training.solution_adamw_step(
            param, grad, exp_avg, exp_avg_sq, steps_done, lr / 2, betas, eps, weight_decay
        )

    message = training.check_adamw_step(half_lr).message
    assert "your param part from torch.optim.AdamW's at update 1" in message
    assert "while the moments agree" in message


def test_adamw_refuses_torchs_optimizer():
    def by_torch(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, weight_decay):
        p = torch.nn.Parameter(param.clone())
        opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        p.grad = grad
        opt.step()
        return p.detach(), exp_avg, exp_avg_sq

    message = training.check_adamw_step(by_torch).message
    assert message.startswith("✗ adamw_step: write this one yourself: it calls torch.optim.AdamW")


# ---------------------------------------------------------------------------------------------
# clip_grad_norm (optional)


def test_clip_stub_is_not_written_yet():
    def clip_grad_norm(grads, max_norm):
        raise NotImplementedError  # your code here

    assert training.check_clip_grad_norm(clip_grad_norm).message == (
        not_written("clip_grad_norm").message
    )


def test_clip_solution_passes_and_is_torchs():
    assert training.check_clip_grad_norm(training.solution_clip_grad_norm).passed
    for case in range(len(training.CLIP_CASES)):
        grads, max_norm = training._clip_inputs(case)
        torch.testing.assert_close(
            training._run_clip(training.solution_clip_grad_norm, grads, max_norm),
            training._run_clip(training._torch_clip, grads, max_norm),
        )


def test_clip_cases_cover_above_under_and_zero():
    norms = []
    for case in range(len(training.CLIP_CASES)):
        grads, max_norm = training._clip_inputs(case)
        norms.append(float(training._torch_clip(grads, max_norm)[0]) / max_norm)
    assert norms[0] > 1 and norms[1] < 1 and norms[2] > 1 and norms[3] == 0


@pytest.mark.parametrize("hint, wrong", training.CLIP_MISTAKES, ids=[f"clip-{i}" for i in range(6)])
def test_each_clip_mistake_gets_its_hint(hint, wrong):
    result = training.check_clip_grad_norm(wrong)
    assert not result.passed
    assert result.message == f"✗ clip_grad_norm: {hint}"


def test_clip_slips_the_page_promises_are_named():
    hints = " | ".join(hint for hint, _ in training.CLIP_MISTAKES)
    for phrase in (
        "each tensor was clipped by its own norm",
        "were scaled too, up to max_norm",
        "the total norm you returned is the one after clipping",
        "every gradient zero your clipped gradients are NaN",
    ):
        assert phrase in hints


def test_clip_without_torchs_epsilon_passes():
    # torch adds 1e-6 to the norm before dividing; at the check's tolerance it does not show.
    def no_epsilon(grads, max_norm):
        total = sum((g * g).sum() for g in grads) ** 0.5
        if total <= max_norm:
            return total, list(grads)
        return total, tuple(g * (max_norm / total) for g in grads)

    assert training.check_clip_grad_norm(no_epsilon).passed


def test_clip_a_float_norm_and_a_tuple_are_accepted():
    def as_float(grads, max_norm):
        total, clipped = training.solution_clip_grad_norm(grads, max_norm)
        return float(total), tuple(clipped)

    assert training.check_clip_grad_norm(as_float).passed


def test_clip_refuses_torchs_clip():
    def by_torch(grads, max_norm):
        ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(ps, grads, strict=True):
            p.grad = g
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
        return total, [p.grad for p in ps]

    message = training.check_clip_grad_norm(by_torch).message
    assert "write this one yourself: it calls torch.nn.utils.clip_grad_norm_" in message

    def by_total_norm(grads, max_norm):
        total = torch.nn.utils.get_total_norm(grads)
        return total, [g * min(1.0, max_norm / float(total)) for g in grads]

    message = training.check_clip_grad_norm(by_total_norm).message
    assert "it calls torch.nn.utils.get_total_norm" in message


def test_clip_wrong_structure_is_reported_not_raised():
    def norm_only(grads, max_norm):
        return training.solution_clip_grad_norm(grads, max_norm)[0]

    message = training.check_clip_grad_norm(norm_only).message
    assert "where the check reads two: (total_norm, clipped gradients)" in message


@pytest.mark.parametrize("check", [training.check_adamw_step, training.check_clip_grad_norm])
def test_optional_show_solution_prints_only_the_reference(check, capsys):
    show_solution(check)
    out = capsys.readouterr().out
    assert f"def {check.solution.__name__}(" in out
    assert "def _adamw(" not in out and "def _clip(" not in out
