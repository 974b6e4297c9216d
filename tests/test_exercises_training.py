"""The checks of notebooks 10 and 11: each kept slip is named by its table row, the slips the
pages promise are named, and correct answers written another way pass."""

import pytest
import torch
import torch.nn.functional as F

from gptlib.data import sample_batch
from gptlib.exercises import nb10_training_loop as training
from gptlib.train import learning_rate, train


def _message(check, table, i):
    return f"✗ {check.__name__.removeprefix('check_')}: {table[i][0]}"


# ---------------------------------------------------------------------------------------------
# train_loop


@pytest.mark.parametrize("i", range(len(training.LOOP_MISTAKES)))
def test_each_loop_slip_is_named_by_its_row(i):
    result = training.check_train_loop(training.LOOP_MISTAKES[i][1])
    assert not result.passed
    assert result.message == _message(training.check_train_loop, training.LOOP_MISTAKES, i)


@pytest.mark.parametrize(
    "switches, meaning",
    [
        ({"order": "bcs"}, "without zero_grad the gradients add up"),  # zero_grad missing
        ({"order": "bzcs"}, "no loss.backward() came between zero_grad and the step"),  # late
        ({"order": "zsbc"}, "no loss.backward() came between zero_grad and the step"),  # step early
        ({"order": "szbc"}, "optimizer.step() runs before loss.backward()"),
        ({"order": "zbsc"}, "comes after optimizer.step()"),  # the clip too late
        ({"each": True}, "clipped on its own"),  # the clip per parameter
        ({"lr": None}, "the learning rate never changes"),
        ({"lr": "constant"}, "stays at max_lr"),  # no cosine
        ({"reseed": True}, "the generator is seeded again inside the loop"),
        ({"shift": "cropped"}, "the labels were shifted twice"),
        ({"shift": "padded"}, "the labels were shifted twice"),
        ({"shift": "rolled"}, "the labels were shifted twice"),
        ({"train": False}, "the model arrived in eval mode"),  # dropout left off
    ],
)
def test_promised_loop_slips_are_named(switches, meaning):
    def loop(*args):
        return training._loop(*args, **switches)

    result = training.check_train_loop(loop)
    assert not result.passed and meaning in result.message


def _loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, *, pad=False):
    # A reader's loop: zero_grad at the end of the step, loss tensors returned, and (pad) the
    # labels shifted once more, as a shifting data loader would.
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        idx, labels = sample_batch(tokens, batch_size, model.cfg.block_size, g)
        if pad:
            labels = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1)
            loss = model(idx, labels)[1]
        else:
            logits, _ = model(idx)
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)
        optimizer.step()
        model.zero_grad()
        losses.append(loss)
    return losses


def test_promised_labels_shifted_twice_by_a_readers_loader():
    message = training.check_train_loop(lambda *a: _loop(*a, pad=True)).message
    assert "the labels were shifted twice" in message


def test_a_correct_loop_written_differently_passes():
    assert training.check_train_loop(_loop).passed


def test_the_reference_loop_is_what_train_does():
    def library(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        return train(model, tokens, steps, batch_size, max_lr=max_lr, warmup=warmup,
                     schedule="cosine", min_lr=0.0, clip=clip, seed=seed, optimizer=optimizer).loss  # fmt: skip

    for seed in (3, 11):
        model, tokens = training._tiny(torch.Generator().manual_seed(seed), 0.1)
        torch.testing.assert_close(
            training._run_loop(library, model, tokens, seed),
            training._run_loop(training.solution_train_loop, model, tokens, seed),
        )


def test_train_itself_is_refused():
    def by_train(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        return train(model, tokens, steps, batch_size, max_lr=max_lr, warmup=warmup, clip=clip,
                     seed=seed, optimizer=optimizer).loss  # fmt: skip

    message = training.check_train_loop(by_train).message
    assert "write this one yourself: it calls gptlib.train.train" in message


def test_wrong_number_of_losses_is_reported():
    message = training.check_train_loop(lambda *a: training.solution_train_loop(*a)[-1:]).message
    assert "your loop returned 1 loss value(s) for the 6 steps" in message


def test_an_unknown_loop_slip_is_told_by_the_step_where_the_losses_part():
    def late_lr(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
        return training.solution_train_loop(model, optimizer, tokens, steps, batch_size,
                                            max_lr * 1.5, warmup, clip, seed)  # fmt: skip

    message = training.check_train_loop(late_lr).message
    assert "your losses part from the reference's at step 1:" in message, message


def test_loop_check_leaves_the_global_random_stream_alone():
    torch.manual_seed(0)
    training.check_train_loop(training.solution_train_loop)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


# ---------------------------------------------------------------------------------------------
# validation_loss: every row is a slip the page promises


@pytest.mark.parametrize("i", range(len(training.ESTIMATE_MISTAKES)))
def test_promised_validation_slips_are_named_by_their_rows(i):
    result = training.check_validation_loss(training.ESTIMATE_MISTAKES[i][1])
    assert not result.passed
    check = training.check_validation_loss
    assert result.message == _message(check, training.ESTIMATE_MISTAKES, i)


def test_validation_tried_in_train_and_in_eval_mode():
    modes = [training._tiny(torch.Generator().manual_seed(1000 + t), 0.3, t % 2)[0].training
             for t in range(2)]  # fmt: skip
    assert modes == [True, False]


def test_a_wrong_average_is_reported():
    def summed(model, tokens, batch_size, n_batches, seed):
        value = training.solution_validation_loss(model, tokens, batch_size, n_batches, seed)
        return n_batches * value

    message = training.check_validation_loss(summed).message
    assert "values differ from the reference" in message


# ---------------------------------------------------------------------------------------------
# adamw_step (optional): every row is a slip the page promises


@pytest.mark.parametrize("i", range(len(training.ADAMW_MISTAKES)))
def test_promised_adamw_slips_are_named_by_their_rows(i):
    result = training.check_adamw_step(training.ADAMW_MISTAKES[i][1])
    assert not result.passed
    assert result.message == _message(training.check_adamw_step, training.ADAMW_MISTAKES, i)


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


def test_adamw_with_two_values_is_reported():
    message = training.check_adamw_step(lambda *a: training.solution_adamw_step(*a)[:2]).message
    assert "your function raised ValueError" in message


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
# clip_grad_norm (optional): every row is a slip the page promises


@pytest.mark.parametrize("i", range(len(training.CLIP_MISTAKES)))
def test_promised_clip_slips_are_named_by_their_rows(i):
    result = training.check_clip_grad_norm(training.CLIP_MISTAKES[i][1])
    assert not result.passed
    check = training.check_clip_grad_norm
    assert result.message == _message(check, training.CLIP_MISTAKES, i)


def test_clip_cases_cover_above_under_and_zero():
    norms = []
    for t in range(4):
        grads, max_norm = training._clip_inputs(torch.Generator().manual_seed(1000 + t))
        norms.append(float(training._torch_clip(grads, max_norm)[0]) / max_norm)
    assert norms[0] > 1 and norms[1] < 1 and norms[2] > 1 and norms[3] == 0


def test_clip_without_torchs_epsilon_a_float_and_a_tuple_pass():
    # torch adds 1e-6 to the norm before dividing; at the check's tolerance it does not show.
    def no_epsilon(grads, max_norm):
        total = float(sum((g * g).sum() for g in grads) ** 0.5)
        if total <= max_norm:
            return total, list(grads)
        return total, tuple(g * (max_norm / total) for g in grads)

    assert training.check_clip_grad_norm(no_epsilon).passed


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
