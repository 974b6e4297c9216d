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
