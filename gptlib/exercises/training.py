"""Notebooks 10 and 11, training: the training step itself (notebook 10), and the validation loss
(notebook 11).

Notebook 10 shows the order of a step as a table and on one scalar weight, and trains through
`gptlib.train.train` as a black box; the loop around the step, with the warmup-cosine rate of its
section 2, its one generator and the model put in train mode, is the reader's. The check compares
the reader's loop with the reference loop below (which `gptlib.train.train` also matches, a test
says), not with `train` itself.

`train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed)` trains
`model` for `steps` steps on random windows of the 1-D id tensor `tokens` and returns the list of
the `steps` losses. Each step, in order: the learning rate of the warmup + cosine schedule on
every parameter group, a batch idx, labels [B, T] drawn with one generator seeded `seed`, the
forward pass with the loss, zero_grad, backward, clipping of the global gradient norm, step. It
must give the losses and the final weights of the reference loop with the same settings.

`validation_loss(model, tokens, batch_size, n_batches, seed)`, what `gptlib.train.estimate_loss`
does, returns the mean loss over `n_batches` batches of windows drawn with a generator seeded
`seed`: in eval mode (dropout off), without building a graph, and with the model's mode (train
or eval) as it was before the call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from gptlib.config import textbook
from gptlib.data import sample_batch
from gptlib.exercises.checking import CheckResult, not_written, refuses_shortcuts, solved_by
from gptlib.model import GPT
from gptlib.train import estimate_loss, learning_rate, make_optimizer

__all__ = [
    "check_validation_loss",
    "check_train_loop",
    "check_adamw_step",
    "check_clip_grad_norm",
    "solution_adamw_step",
    "solution_clip_grad_norm",
    "solution_validation_loss",
    "solution_train_loop",
]


# ---------------------------------------------------------------------------------------------
# The training loop


def solution_train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    g = torch.Generator().manual_seed(seed)  # one generator, made once: train()'s batches
    T = model.cfg.block_size
    model.train()  # dropout on, whatever mode the model arrived in
    losses = []
    for step in range(steps):
        lr = learning_rate(step, max_lr, warmup, steps, "cosine")  # warmup, then half a cosine
        for group in optimizer.param_groups:  # AdamW reads the rate from each group
            group["lr"] = lr
        idx, labels = sample_batch(tokens, batch_size, T, g)  # [B, T] twice: the same windows
        _, loss = model(idx, labels)  # logits [B, T, V]; the one-token shift is inside the loss
        optimizer.zero_grad(set_to_none=True)  # backward adds: drop the last step's gradients
        loss.backward()  # p.grad for every parameter
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)  # after backward, before step
        optimizer.step()  # the only line that moves the weights
        losses.append(loss.item())
    return losses


def _loop(
    model,
    optimizer,
    tokens,
    steps,
    batch_size,
    max_lr,
    warmup,
    clip,
    seed,
    *,
    order=("zero_grad", "backward", "clip", "step"),
    train_mode=True,
    lr="cosine",
    generator="once",
    shift_again=None,
    clip_each=False,
):
    """The training loop with one thing done wrong, to build the named mistakes from."""
    g = torch.Generator().manual_seed(seed)
    T = model.cfg.block_size
    if train_mode:
        model.train()
    losses = []
    for step in range(steps):
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, max_lr, warmup, steps, lr)
        if generator == "every step":
            g = torch.Generator().manual_seed(seed)
        idx, labels = sample_batch(tokens, batch_size, T, None if generator == "global" else g)
        if shift_again == "cropped":
            _, loss = model(idx[:, :-1], labels[:, 1:])
        elif shift_again == "padded":  # -100 in the freed last slot, as a shifting loader does
            pad = torch.full_like(labels[:, :1], -100)
            _, loss = model(idx, torch.cat([labels[:, 1:], pad], dim=1))
        elif shift_again == "rolled":
            _, loss = model(idx, labels.roll(-1, dims=1))
        elif shift_again == "none":  # the loss written by hand, without the shift
            logits, _ = model(idx)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
        else:
            _, loss = model(idx, labels)
        for action in order:
            if action == "zero_grad":
                optimizer.zero_grad(set_to_none=True)
            elif action == "backward":
                loss.backward()
            elif action == "clip" and clip_each:
                for p in model.parameters():
                    torch.nn.utils.clip_grad_norm_(p, clip)
            elif action == "clip":
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            elif action == "step":
                optimizer.step()
        losses.append(loss.item())
    return losses


def _no_zero_grad(*args):
    return _loop(*args, order=("backward", "clip", "step"))


def _zero_grad_after_backward(*args):
    return _loop(*args, order=("backward", "zero_grad", "clip", "step"))


def _step_right_after_zero_grad(*args):
    return _loop(*args, order=("zero_grad", "step", "backward", "clip"))


def _step_before_backward(*args):
    return _loop(*args, order=("step", "zero_grad", "backward", "clip"))


def _no_clip(*args):
    return _loop(*args, order=("zero_grad", "backward", "step"))


def _clip_after_step(*args):
    return _loop(*args, order=("zero_grad", "backward", "step", "clip"))


def _clip_each_parameter(*args):
    return _loop(*args, clip_each=True)


def _lr_never_set(*args):
    return _loop(*args, lr=None)


def _lr_without_cosine(*args):
    return _loop(*args, lr="constant")


def _generator_every_step(*args):
    return _loop(*args, generator="every step")


def _global_generator(*args):
    return _loop(*args, generator="global")


def _labels_shifted_twice(*args):
    return _loop(*args, shift_again="cropped")


def _labels_shifted_twice_padded(*args):
    return _loop(*args, shift_again="padded")


def _labels_rolled(*args):
    return _loop(*args, shift_again="rolled")


def _labels_not_shifted(*args):
    return _loop(*args, shift_again="none")


def _left_in_eval_mode(*args):
    return _loop(*args, train_mode=False)


SHIFTED_TWICE = (
    "the labels were shifted twice: model(idx, labels) already pairs position t with labels[t + "
    "1], and your loop shifted them once more, so each position is scored on the token after next"
)

LOOP_MISTAKES = [
    (
        "without zero_grad the gradients of every step add up: from the second step on, each of "
        "your updates follows the sum of all the batches so far, not the current batch",
        _no_zero_grad,
    ),
    (
        "the weights never moved: every p.grad was empty when optimizer.step() ran, so each step "
        "found no gradient to follow (zero_grad came between loss.backward() and the step, or the "
        "step came before loss.backward())",
        _zero_grad_after_backward,
    ),
    (
        "the weights never moved: every p.grad was empty when optimizer.step() ran, so each step "
        "found no gradient to follow (zero_grad came between loss.backward() and the step, or the "
        "step came before loss.backward())",
        _step_right_after_zero_grad,
    ),
    (
        "optimizer.step() runs before loss.backward(): every update uses the gradient of the "
        "previous batch, and the first step has none",
        _step_before_backward,
    ),
    (
        "the gradient is not clipped before the update: clip_grad_norm_ is missing, or comes after "
        "optimizer.step(), when the update is already made (and the next zero_grad throws the "
        "clipped gradients away)",
        _no_clip,
    ),
    (
        "each parameter's gradient was clipped on its own, each to the norm clip: your updates are "
        "larger than the reference's, whose clip scales all the gradients by one factor, from their "
        "norm taken together",
        _clip_each_parameter,
    ),
    (
        "the learning rate never changes: every step used the optimizer's initial rate, with no "
        "warmup and no cosine",
        _lr_never_set,
    ),
    (
        "after the warmup your learning rate stays at max_lr, so the later updates are larger than "
        "the reference's, whose rate falls along a cosine until the last step",
        _lr_without_cosine,
    ),
    (
        "every step trained on the same batch: the generator is seeded again inside the loop",
        _generator_every_step,
    ),
    (
        "the batches come from torch's global random stream (sample_batch without a generator), not "
        "from one generator seeded with seed, so they are not the reference's batches",
        _global_generator,
    ),
    (
        SHIFTED_TWICE,
        _labels_shifted_twice,
    ),
    (
        SHIFTED_TWICE,
        _labels_shifted_twice_padded,
    ),
    (
        SHIFTED_TWICE,
        _labels_rolled,
    ),
    (
        "no shift: the loss scores position t against labels[:, t], the token it is reading, so "
        "already the loss of step 0 is not the reference's",
        _labels_not_shifted,
    ),
    (
        "dropout stayed off: the model arrived in eval mode and your loop trained it in that mode",
        _left_in_eval_mode,
    ),
]

# Clipping at 0.2 acts on every step; warmup 2 of 6 steps leaves 4 for the cosine; dropout 0.1
# tells train mode from eval mode; a learning rate of 1e-2 makes each slip move the weights far.
LOOP_SETTINGS = {"steps": 6, "batch_size": 4, "max_lr": 1e-2, "warmup": 2, "clip": 0.2}
LOOP_SEEDS = (3, 11)


def _loop_setup(seed: int) -> tuple[GPT, torch.Tensor]:
    """A tiny dropout model (handed over in eval mode) and a random stream of ids."""
    g = torch.Generator().manual_seed(100 + seed)
    cfg = textbook(11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.1)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = GPT(cfg)
    model.eval()
    tokens = torch.randint(0, cfg.vocab_size, (300,), generator=g)
    return model, tokens


def _run_loop(fn: Callable, model: GPT, tokens: torch.Tensor, seed: int):
    """Run a loop on a copy of `model` with its own optimizer; dropout draws from a global stream
    seeded the same way for every run, and the caller's stream is left as it was."""
    model = copy.deepcopy(model)
    s = LOOP_SETTINGS
    optimizer = make_optimizer(model, lr=s["max_lr"], weight_decay=0.1)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        args = (s["steps"], s["batch_size"], s["max_lr"], s["warmup"], s["clip"], seed)
        losses = fn(model, optimizer, tokens, *args)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return losses, weights


def _as_losses(losses) -> torch.Tensor:
    # loss.item() floats, or the loss tensors themselves
    values = [x.item() if isinstance(x, torch.Tensor) else float(x) for x in losses]
    return torch.tensor(values, dtype=torch.float64)


def _same(a: tuple, b: tuple, atol: float = 1e-6) -> bool:
    (la, wa), (lb, wb) = a, b
    return (
        la.shape == lb.shape
        and torch.allclose(la, lb, atol=atol, rtol=0.0)
        and torch.allclose(wa.double(), wb.double(), atol=atol, rtol=0.0)
    )


@solved_by(solution_train_loop)
@refuses_shortcuts("train_loop")
def check_train_loop(train_loop: Callable) -> CheckResult:
    """Run `train_loop` and the reference loop from the same initial weights and seed on a tiny
    dropout model handed over in eval mode, and compare the losses step by step and the final
    weights (to 1e-6)."""
    name = "train_loop"
    steps = LOOP_SETTINGS["steps"]
    for seed in LOOP_SEEDS:
        model, tokens = _loop_setup(seed)
        losses, weights = _run_loop(solution_train_loop, model, tokens, seed)
        expected = (_as_losses(losses), weights)
        try:
            got_losses, got_weights = _run_loop(train_loop, model, tokens, seed)
        except NotImplementedError:
            return not_written(name)
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        try:
            got = (_as_losses(got_losses), got_weights)
        except (TypeError, ValueError, RuntimeError):
            return CheckResult(
                False,
                f"✗ {name}: what your loop returned is not a list of {steps} numbers, one loss "
                "per step",
            )
        if len(got[0]) != steps:
            return CheckResult(False, f"✗ {name}: returned {len(got[0])} losses for {steps} steps")
        if _same(got, expected):
            continue
        first_losses = []  # each slip's loss of step 0, for a loop with more than one slip
        for hint, wrong_fn in LOOP_MISTAKES:
            wrong_losses, wrong_weights = _run_loop(wrong_fn, model, tokens, seed)
            wrong = (_as_losses(wrong_losses), wrong_weights)
            if _same(got, wrong):
                return CheckResult(False, f"✗ {name}: {hint}")
            first_losses.append((hint, float(wrong[0][0])))
        differs = (got[0] - expected[0]).abs() > 1e-6
        if bool(differs[0]):
            reference_first = float(expected[0][0])
            for hint, first in first_losses:
                if abs(first - reference_first) > 1e-6 and abs(first - float(got[0][0])) <= 1e-6:
                    return CheckResult(
                        False,
                        f"✗ {name}: {hint} (the later steps differ from that slip's as well: "
                        "something else is off too)",
                    )
            return CheckResult(
                False,
                f"✗ {name}: the loss of step 0 is already {got[0][0]:.4f} where the reference "
                f"has {reference_first:.4f}: before any update the two runs differ, so the first "
                "batch or the forward pass is not the reference's",
            )
        if bool(differs.any()):
            k = int(differs.nonzero()[0])
            return CheckResult(
                False,
                f"✗ {name}: the losses agree up to step {k - 1} and part at step {k} "
                f"({got[0][k]:.4f}, the reference has {expected[0][k]:.4f}): the batches and the "
                "forward pass agree, an update does not",
            )
        diff = float((got[1] - expected[1]).abs().max())
        return CheckResult(
            False,
            f"✗ {name}: the losses match but the final weights differ (by up to {diff:.3g}): "
            "the last update is not the reference's",
        )
    return CheckResult(
        True,
        f"✓ {name}: the same {steps} losses and the same final weights as the reference loop "
        f"(and gptlib.train.train), from {len(LOOP_SEEDS)} seeds",
    )


# ---------------------------------------------------------------------------------------------
# The validation loss


def solution_validation_loss(model, tokens, batch_size, n_batches, seed):
    was_training = model.training  # give the model back in the mode it came in
    model.eval()  # dropout off: the same windows give the same loss on every call
    g = torch.Generator().manual_seed(seed)  # the same windows on every call
    T = model.cfg.block_size
    total = 0.0
    with torch.no_grad():  # nothing here is backpropagated: build no graph
        for _ in range(n_batches):
            idx, labels = sample_batch(tokens, batch_size, T, g)  # [B, T] twice
            total += model(idx, labels)[1].item()
    model.train(was_training)
    return total / n_batches


def _estimate(
    model,
    tokens,
    batch_size,
    n_batches,
    seed,
    *,
    evaluate=True,
    restore="as it was",
    no_grad=True,
    generator="once",
):
    """The validation loss with one thing done wrong, to build the named mistakes from."""
    was_training = model.training
    if evaluate:
        model.eval()
    g = torch.Generator().manual_seed(seed)
    T = model.cfg.block_size
    total = 0.0
    with torch.set_grad_enabled(not no_grad):
        for _ in range(n_batches):
            if generator == "every batch":
                g = torch.Generator().manual_seed(seed)
            idx, labels = sample_batch(tokens, batch_size, T, None if generator == "global" else g)
            total += model(idx, labels)[1].item()
    if restore == "as it was":
        model.train(was_training)
    elif restore == "train":
        model.train()
    return total / n_batches


def _dropout_on(*args):
    return _estimate(*args, evaluate=False)


def _mode_not_restored(*args):
    return _estimate(*args, restore=None)


def _always_back_to_train(*args):
    return _estimate(*args, restore="train")


def _graph_built(*args):
    return _estimate(*args, no_grad=False)


def _windows_from_global_stream(*args):
    return _estimate(*args, generator="global")


def _same_window_every_batch(*args):
    return _estimate(*args, generator="every batch")


ESTIMATE_MISTAKES = [
    (
        "dropout was on while measuring: the model stayed in train mode, so your loss changes from "
        "call to call",
        _dropout_on,
    ),
    (
        "the model came in training and went back in eval mode, so the training that follows runs "
        "without dropout: its mode was not given back",
        _mode_not_restored,
    ),
    (
        "a model that came in eval mode went back in train mode: yours always ends in train mode, "
        "not in the mode it came in",
        _always_back_to_train,
    ),
    (
        "the forward passes built a graph for a backward that nobody calls, which costs memory and "
        "time",
        _graph_built,
    ),
    (
        "the windows come from torch's global random stream, so each call measures other windows, "
        "not the ones a generator seeded with seed gives",
        _windows_from_global_stream,
    ),
    (
        "every batch is the same set of windows: the generator is seeded again inside the loop",
        _same_window_every_batch,
    ),
]

ESTIMATE_SETTINGS = {"batch_size": 4, "n_batches": 3, "seed": 7}


def _estimate_setup() -> tuple[GPT, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    cfg = textbook(11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.3)
    with torch.random.fork_rng():
        torch.manual_seed(5)
        model = GPT(cfg)
    return model, torch.randint(0, cfg.vocab_size, (300,), generator=g)


def _summarise(fn: Callable, model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """What a validation loss should get right, as numbers: the loss from a model in train mode
    and from one in eval mode, the mode each is left in (1 = train), and whether a forward pass
    ran with gradients enabled (1 = a graph was built)."""
    s = ESTIMATE_SETTINGS
    graph = []
    row = []
    for mode in (True, False):
        m = copy.deepcopy(model).train(mode)
        m.register_forward_pre_hook(lambda *_: graph.append(torch.is_grad_enabled()))
        with torch.random.fork_rng():
            torch.manual_seed(0)  # the same dropout draws for every run
            value = float(fn(m, tokens, s["batch_size"], s["n_batches"], s["seed"]))
        row += [value, float(m.training)]
    return torch.tensor([*row, float(any(graph))], dtype=torch.float64)


@solved_by(solution_validation_loss)
@refuses_shortcuts("validation_loss")
def check_validation_loss(validation_loss: Callable) -> CheckResult:
    """Run `validation_loss(model, tokens, batch_size, n_batches, seed)` on a tiny dropout model,
    coming in train mode and in eval mode, against `gptlib.train.estimate_loss`."""
    name = "validation_loss"
    model, tokens = _estimate_setup()
    s = ESTIMATE_SETTINGS

    def library(m, t, b, n, seed):
        return estimate_loss(m, t, batch_size=b, n_batches=n, seed=seed)

    expected = _summarise(library, model, tokens)
    try:
        got = _summarise(validation_loss, model, tokens)
    except NotImplementedError:
        return not_written(name)
    except Exception as e:  # the reader's code failed: say how
        return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
    if torch.allclose(got, expected, atol=1e-6, rtol=0.0):
        return CheckResult(
            True,
            f"✓ {name}: {got[0]:.4f}, the loss of gptlib.train.estimate_loss on {s['n_batches']} "
            "batches, no graph, and the model left in the mode it came in",
        )
    for hint, wrong_fn in ESTIMATE_MISTAKES:
        if torch.allclose(got, _summarise(wrong_fn, model, tokens), atol=1e-6, rtol=0.0):
            return CheckResult(False, f"✗ {name}: {hint}")
    # Not one known slip: name the first part that is off.
    if got[4] != expected[4]:
        return CheckResult(False, f"✗ {name}: {ESTIMATE_MISTAKES[3][0]}")
    if got[1] != expected[1] or got[3] != expected[3]:
        came = [("train", got[1]), ("eval", got[3])]
        left = ", ".join(
            f"one that came in {mode} mode left in {'train' if m else 'eval'} mode"
            for mode, m in came
        )
        return CheckResult(False, f"✗ {name}: the model is not given back as it came: {left}")
    return CheckResult(
        False,
        f"✗ {name}: the loss is {got[2]:.4f} where gptlib.train.estimate_loss gives "
        f"{expected[2]:.4f} on the same model in eval mode: the windows measured, or the mean "
        "taken over them, are not the reference's",
    )


# ---------------------------------------------------------------------------------------------
# AdamW's update by hand (notebook 10, optional)


def solution_adamw_step(param, grad, exp_avg, exp_avg_sq, steps_done, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    t = steps_done + 1  # this update's number: the first update is t = 1
    param = param * (1 - lr * weight_decay)  # decoupled decay: on the weight, not the gradient
    exp_avg = beta1 * exp_avg + (1 - beta1) * grad  # running mean of the gradient
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * grad * grad  # ... and of its square
    m_hat = exp_avg / (1 - beta1**t)  # both started at 0: undo the pull towards 0
    v_hat = exp_avg_sq / (1 - beta2**t)
    param = param - lr * m_hat / (v_hat.sqrt() + eps)
    return param, exp_avg, exp_avg_sq


def _adamw(
    param,
    grad,
    exp_avg,
    exp_avg_sq,
    steps_done,
    lr,
    betas,
    eps,
    weight_decay,
    *,
    correct=True,
    decay="decoupled",
    eps_inside=False,
    swap=False,
    t_offset=1,
    square=True,
    return_corrected=False,
):
    """AdamW's update with one thing done wrong, to build the named mistakes from."""
    beta1, beta2 = betas[::-1] if swap else betas
    t = steps_done + t_offset
    if decay == "L2":
        grad = grad + weight_decay * param
    elif decay == "decoupled":
        param = param * (1 - lr * weight_decay)
    elif decay == "without lr":
        param = param * (1 - weight_decay)
    exp_avg = beta1 * exp_avg + (1 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * (grad * grad if square else grad)
    m_hat = exp_avg / (1 - beta1**t) if correct else exp_avg
    v_hat = exp_avg_sq / (1 - beta2**t) if correct else exp_avg_sq
    denom = (v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps
    param = param - lr * m_hat / denom
    if decay == "after":
        param = param * (1 - lr * weight_decay)
    if return_corrected:
        return param, m_hat, v_hat
    return param, exp_avg, exp_avg_sq


def _adamw_slip(**how):
    def wrong(*args):
        return _adamw(*args, **how)

    return wrong


ADAMW_MISTAKES = [
    (
        "your first updates are smaller than torch's, most of all the very first, and the gap "
        "closes as the steps go on: the moments were used as they are, not corrected for having "
        "started at zero",
        _adamw_slip(correct=False),
    ),
    (
        "your moments differ from torch's from the first update on, although the gradients were "
        "the same: the weight decay was added to the gradient (L2, as in Adam), so it went "
        "through the moments and was divided by their root",
        _adamw_slip(decay="L2"),
    ),
    (
        "your moments agree with torch's but the parameters are off by a little at every update "
        "(about lr · weight_decay times the update): the decay shrank the weight after the "
        "update, not the weight the update starts from",
        _adamw_slip(decay="after"),
    ),
    (
        "your weights shrink far faster than torch's while the moments agree: each update "
        "multiplied them by 1 - weight_decay, a decay that lr does not scale",
        _adamw_slip(decay="without lr"),
    ),
    (
        "the moments agree but where the gradients are small your updates are smaller than "
        "torch's: eps was added under the square root, √(v̂ + ε), not to the root",
        _adamw_slip(eps_inside=True),
    ),
    (
        "your moments are not torch's from the first update on: the betas are swapped, β2 "
        "averaged the gradient and β1 its square",
        _adamw_slip(swap=True),
    ),
    (
        "your parameters are NaN after the first update: the bias correction counted it as "
        "update 0, and 1 - β⁰ = 0 divided it",
        _adamw_slip(t_offset=0),
    ),
    (
        "your first updates differ from torch's and the gap closes as the steps go on, while the "
        "moments agree: the bias correction counted each update one too far, the first as 2",
        _adamw_slip(t_offset=2),
    ),
    (
        "your exp_avg_sq is not torch's and can go negative: it averaged the gradient itself, "
        "not its square",
        _adamw_slip(square=False),
    ),
    (
        "your first parameters are torch's but the moments you returned are not: they are the "
        "bias-corrected ones (m̂, v̂), so the next update starts from them and corrects them "
        "once more",
        _adamw_slip(return_corrected=True),
    ),
]

# lr 0.1 and weight decay 0.5 make the order of decay and update show; eps 1e-2 with gradients
# as small as 1e-2 makes the place of eps show; 6 updates let the bias correction fade.
ADAMW_CASES = (
    {"lr": 0.1, "betas": (0.9, 0.95), "eps": 1e-2, "weight_decay": 0.5, "updates": 6},
    {"lr": 0.05, "betas": (0.8, 0.99), "eps": 1e-8, "weight_decay": 0.1, "updates": 6},
)
ADAMW_SHAPES = ((4, 3), (5,))


def _adamw_inputs(seed: int):
    """Parameters and a gradient for every update, of mixed sizes (some entries near 1e-2)."""
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g) for s in ADAMW_SHAPES]
    scale = [torch.exp(torch.empty(s).uniform_(-4.6, 0.7, generator=g)) for s in ADAMW_SHAPES]
    updates = ADAMW_CASES[seed % len(ADAMW_CASES)]["updates"]
    grads = [
        [torch.randn(s, generator=g) * c for s, c in zip(ADAMW_SHAPES, scale, strict=True)]
        for _ in range(updates)
    ]
    return params, grads


def _torch_adamw(case: dict, params, grads):
    """torch.optim.AdamW on copies of `params`: after each update, (param, exp_avg,
    exp_avg_sq) for every tensor."""
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = torch.optim.AdamW(
        ps,
        lr=case["lr"],
        betas=case["betas"],
        eps=case["eps"],
        weight_decay=case["weight_decay"],
        foreach=False,
    )
    trajectory = []
    for step_grads in grads:
        for p, gr in zip(ps, step_grads, strict=True):
            p.grad = gr.clone()
        opt.step()
        trajectory.append(
            [
                (
                    p.detach().clone(),
                    opt.state[p]["exp_avg"].clone(),
                    opt.state[p]["exp_avg_sq"].clone(),
                )
                for p in ps
            ]
        )
    return trajectory


class _Shape(Exception):
    """What the reader's function returned is not three tensors of the parameter's shape."""


def _run_adamw(fn: Callable, case: dict, params, grads):
    """`fn` called for every tensor and update, each time on its own last output (copies)."""
    states = [(p.clone(), torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    trajectory = []
    for k, step_grads in enumerate(grads):
        new_states = []
        for (p, m, v), gr in zip(states, step_grads, strict=True):
            out = fn(
                p.clone(),
                gr.clone(),
                m.clone(),
                v.clone(),
                k,
                case["lr"],
                case["betas"],
                case["eps"],
                case["weight_decay"],
            )
            if not isinstance(out, (tuple, list)) or len(out) != 3:
                raise _Shape(
                    "it returned "
                    + (
                        f"{len(out)} values"
                        if isinstance(out, (tuple, list))
                        else type(out).__name__
                    )
                    + ", where the check reads three: (param, exp_avg, exp_avg_sq)"
                )
            out = [torch.as_tensor(x, dtype=p.dtype) for x in out]
            for x in out:
                if x.shape != p.shape:
                    raise _Shape(
                        f"it returned a tensor of shape {list(x.shape)} for a parameter of shape "
                        f"{list(p.shape)}"
                    )
            new_states.append(tuple(x.detach() for x in out))
        states = new_states
        trajectory.append(states)
    return trajectory


def _same_path(a, b, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    return all(
        torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True)
        for step_a, step_b in zip(a, b, strict=True)
        for ta, tb in zip(step_a, step_b, strict=True)
        for x, y in zip(ta, tb, strict=True)
    )


@solved_by(solution_adamw_step)
@refuses_shortcuts("adamw_step")
def check_adamw_step(adamw_step: Callable) -> CheckResult:
    """Run `adamw_step` for 6 updates of two tensors, each update on its own last output, beside
    torch.optim.AdamW with the same settings and gradients; compare the parameters and both
    moments after every update (two settings)."""
    name = "adamw_step"
    total = 0
    for seed, case in enumerate(ADAMW_CASES):
        params, grads = _adamw_inputs(seed)
        expected = _torch_adamw(case, params, grads)
        try:
            got = _run_adamw(adamw_step, case, params, grads)
        except NotImplementedError:
            return not_written(name)
        except _Shape as e:
            return CheckResult(False, f"✗ {name}: {e}")
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        total += case["updates"]
        if _same_path(got, expected):
            continue
        for hint, wrong_fn in ADAMW_MISTAKES:
            if _same_path(got, _run_adamw(wrong_fn, case, params, grads)):
                return CheckResult(False, f"✗ {name}: {hint}")
        for k, (step_got, step_exp) in enumerate(zip(got, expected, strict=True)):
            parts = ("param", "exp_avg", "exp_avg_sq")
            off = [
                part
                for j, part in enumerate(parts)
                if not all(
                    torch.allclose(tg[j].double(), te[j].double(), atol=1e-5, rtol=1e-4)
                    for tg, te in zip(step_got, step_exp, strict=True)
                )
            ]
            if off:
                settings = ", ".join(f"{key}={case[key]}" for key in ("lr", "betas", "eps"))
                return CheckResult(
                    False,
                    f"✗ {name}: with {settings}, weight_decay={case['weight_decay']}, your "
                    f"{' and '.join(off)} part from torch.optim.AdamW's at update {k + 1} "
                    f"(steps_done={k})" + (" while the moments agree" if off == ["param"] else ""),
                )
    return CheckResult(
        True,
        f"✓ {name}: the parameters and both moments of torch.optim.AdamW after each of {total} "
        f"updates, with {len(ADAMW_CASES)} settings",
    )


# ---------------------------------------------------------------------------------------------
# Clipping the global gradient norm by hand (notebook 10, optional)


def solution_clip_grad_norm(grads, max_norm):
    total_norm = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()  # all entries at once
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # < 1 only above max_norm
    return total_norm, [g * scale for g in grads]  # one factor for every tensor


def _torch_clip(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_ on parameters whose .grad are copies of `grads`."""
    ps = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(ps, grads, strict=True):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm)
    return total, [p.grad for p in ps]


def _clip(grads, max_norm, *, norm="global", when="above", returned="before", order="scale"):
    """Clipping with one thing done wrong, to build the named mistakes from."""
    norms = torch.stack([g.pow(2).sum().sqrt() for g in grads])
    total = {
        "global": norms.pow(2).sum().sqrt(),
        "sum": norms.sum(),
        "squared": norms.pow(2).sum(),
    }.get(norm, norms.pow(2).sum().sqrt())
    if norm == "each":
        clipped = [
            g * min(1.0, max_norm / float(n)) if n > 0 else g
            for g, n in zip(grads, norms, strict=True)
        ]
    elif order == "divide first":
        clipped = [g / total * min(float(total), max_norm) for g in grads]
    elif when == "always":
        clipped = [g * (max_norm / total) for g in grads]
    else:
        scale = min(1.0, max_norm / float(total)) if total > 0 else 1.0
        clipped = [g * scale for g in grads]
    if returned == "after":
        total = torch.stack([g.pow(2).sum() for g in clipped]).sum().sqrt()
    return total, clipped


def _clip_slip(**how):
    def wrong(grads, max_norm):
        return _clip(grads, max_norm, **how)

    return wrong


CLIP_MISTAKES = [
    (
        "each tensor was clipped by its own norm: a tensor under max_norm kept its size while "
        "another was cut, so the direction of the whole gradient changed",
        _clip_slip(norm="each"),
    ),
    (
        "with every gradient zero your clipped gradients are NaN: each was divided by the total "
        "norm, 0, before it was scaled",
        _clip_slip(order="divide first"),
    ),
    (
        "gradients whose total norm was already under max_norm were scaled too, up to max_norm: "
        "small gradients grew",
        _clip_slip(when="always"),
    ),
    (
        "the total norm you returned is the one after clipping: it never exceeds max_norm, so a "
        "log of it could not show how large the gradients were",
        _clip_slip(returned="after"),
    ),
    (
        "your total norm is the sum of the tensors' own norms, larger than the norm of all their "
        "entries together",
        _clip_slip(norm="sum"),
    ),
    (
        "your total norm is the square of torch's: the sum of the squares, with no root",
        _clip_slip(norm="squared"),
    ),
]

# Above the limit; under it; one tensor far larger than the others; every gradient zero.
CLIP_CASES = (
    (((4, 3), (5,), (2, 2, 2)), (2.0, 2.0, 2.0), 1.0),
    (((4, 3), (5,), (2, 2, 2)), (0.05, 0.05, 0.05), 1.0),
    (((3,), (4, 4), (6,)), (10.0, 0.1, 0.3), 2.0),
    (((4, 3), (5,)), (0.0, 0.0), 1.0),
)


def _clip_inputs(case: int):
    shapes, scales, max_norm = CLIP_CASES[case]
    g = torch.Generator().manual_seed(40 + case)
    return [torch.randn(s, generator=g) * c for s, c in zip(shapes, scales, strict=True)], max_norm


def _run_clip(fn: Callable, grads, max_norm):
    out = fn([g.clone() for g in grads], max_norm)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise _Shape(
            "it returned "
            + (f"{len(out)} values" if isinstance(out, (tuple, list)) else type(out).__name__)
            + ", where the check reads two: (total_norm, clipped gradients)"
        )
    total, clipped = out
    clipped = list(clipped)
    if len(clipped) != len(grads):
        raise _Shape(f"it returned {len(clipped)} clipped gradients for {len(grads)} tensors")
    clipped = [torch.as_tensor(c).detach() for c in clipped]
    for c, g in zip(clipped, grads, strict=True):
        if c.shape != g.shape:
            raise _Shape(
                f"it returned a gradient of shape {list(c.shape)} for one of shape {list(g.shape)}"
            )
    total = torch.as_tensor(total).detach()
    if total.numel() != 1:
        raise _Shape(f"its total norm has {total.numel()} entries, where the check reads one")
    return torch.cat([total.reshape(1).double(), *(c.flatten().double() for c in clipped)])


def _same_clip(a, b) -> bool:
    return torch.allclose(a, b, atol=1e-6, rtol=1e-5, equal_nan=True)


@solved_by(solution_clip_grad_norm)
@refuses_shortcuts("clip_grad_norm")
def check_clip_grad_norm(clip_grad_norm: Callable) -> CheckResult:
    """Run `clip_grad_norm(grads, max_norm)` beside torch.nn.utils.clip_grad_norm_ on four sets
    of gradients (above the limit, under it, one tensor dominating, all zero) and compare the
    total norm and the clipped gradients."""
    name = "clip_grad_norm"
    for case in range(len(CLIP_CASES)):
        grads, max_norm = _clip_inputs(case)
        expected = _run_clip(_torch_clip, grads, max_norm)
        try:
            got = _run_clip(clip_grad_norm, grads, max_norm)
        except NotImplementedError:
            return not_written(name)
        except _Shape as e:
            return CheckResult(False, f"✗ {name}: {e}")
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        if _same_clip(got, expected):
            continue
        for hint, wrong_fn in CLIP_MISTAKES:
            if _same_clip(got, _run_clip(wrong_fn, grads, max_norm)):
                return CheckResult(False, f"✗ {name}: {hint}")
        what = "total norm" if not _same_clip(got[:1], expected[:1]) else "clipped gradients"
        return CheckResult(
            False,
            f"✗ {name}: your {what} differ from torch's on gradients of total norm "
            f"{float(expected[0]):.4g} with max_norm {max_norm}: your total norm is "
            f"{float(got[0]):.4g}",
        )
    return CheckResult(
        True,
        f"✓ {name}: the total norm and the clipped gradients of torch.nn.utils.clip_grad_norm_ "
        f"on {len(CLIP_CASES)} sets of gradients (above max_norm, under it, one tensor far "
        "larger, all zero)",
    )
