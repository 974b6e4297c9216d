"""Notebooks 10 and 11: the training loop, AdamW's update and the global gradient clip by hand
(notebook 10, the last two optional), and the validation loss (notebook 11)."""

import copy
from functools import partial

import torch

from gptlib.config import textbook
from gptlib.data import sample_batch
from gptlib.exercises.checking import compare, solved_by, steps_differ
from gptlib.language import N_
from gptlib.model import GPT
from gptlib.train import estimate_loss, learning_rate, make_optimizer, train

__all__ = ["check_adamw_step", "check_clip_grad_norm", "check_train_loop", "check_validation_loss",
           "solution_adamw_step", "solution_clip_grad_norm", "solution_train_loop",
           "solution_validation_loss"]  # fmt: skip


def _tiny(g, dropout, evaluate=True):  # a one-layer model with dropout, and 300 ids
    with torch.random.fork_rng():
        torch.manual_seed(g.initial_seed())
        model = GPT(textbook(11, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=dropout))
    return model.train(not evaluate), torch.randint(0, 11, (300,), generator=g)


def solution_train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    g = torch.Generator().manual_seed(seed)  # one generator, made once: every step's batch
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


def slipped_loop(loss_of, params, T, opt, tokens, steps, batch_size, max_lr, warmup, clip, seed, *,
           order="zbcs", lr="cosine", reseed=False, shift=None, each=False):  # fmt: skip
    """The loop with slips by switch: `order` spells zero_grad, backward,
    clip, step; loss_of(idx, labels) is a batch's loss, T its window."""
    g = torch.Generator().manual_seed(seed)
    groups = [[p] for p in params] if each else [params]
    losses = []
    for step in range(steps):
        for group in opt.param_groups if lr else ():
            group["lr"] = learning_rate(step, max_lr, warmup, steps, lr)
        g = torch.Generator().manual_seed(seed) if reseed else g
        idx, labels = sample_batch(tokens, batch_size, T, g)
        idx = idx[:, :-1] if shift == "cropped" else idx  # the labels shifted once more:
        labels = {"cropped": labels[:, 1:], "rolled": labels.roll(-1, dims=1),
                  "padded": torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)}.get(shift, labels)  # fmt: skip
        loss = loss_of(idx, labels)
        do = {"z": opt.zero_grad, "b": loss.backward, "s": opt.step,
              "c": lambda: [torch.nn.utils.clip_grad_norm_(ps, clip) for ps in groups]}  # fmt: skip
        for action in order:
            do[action]()
        losses.append(loss.item())
    return losses


def _loop(model, opt, *args, train=True, **slips):
    model.train(train or model.training)
    loss_of = lambda idx, labels: model(idx, labels)[1]  # noqa: E731
    return slipped_loop(
        loss_of, list(model.parameters()), model.cfg.block_size, opt, *args, **slips
    )


def _run_loop(fn, model, tokens, seed):  # on a copy, its own AdamW: (losses, final weights)
    model = copy.deepcopy(model).eval()
    optimizer = make_optimizer(model, lr=1e-2, weight_decay=0.1)
    with torch.random.fork_rng():  # lr 1e-2 moves the weights far; clip 0.2 acts on every step
        torch.manual_seed(seed)
        losses = fn(model, optimizer, tokens, 6, 4, 1e-2, 2, 0.2, seed)  # 6 steps, warmup 2
    losses = torch.tensor([float(torch.as_tensor(x).detach()) for x in losses], dtype=torch.float64)
    return losses, torch.cat([p.detach().flatten() for p in model.parameters()])


def _taught(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    return train(model, tokens, steps, batch_size, max_lr=max_lr, warmup=warmup, schedule="cosine",
                 clip=clip, seed=seed, optimizer=optimizer).loss  # fmt: skip


@solved_by(solution_train_loop)
def check_train_loop(train_loop):
    """6 steps (clip 0.2, two seeds) from a model in eval mode, beside gptlib.train.train's loop:
    the losses and the final weights."""
    return compare("train_loop", lambda *inputs: _run_loop(train_loop, *inputs),
                   partial(_run_loop, _taught), lambda g: (*_tiny(g, 0.1), g.initial_seed()),
                   [(hint, partial(_run_loop, wrong)) for hint, wrong in LOOP_MISTAKES],
                   trials=2, atol=1e-6, rtol=1e-6, grads=False, describe=steps_differ)  # fmt: skip


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


def _estimate(model, tokens, batch_size, n_batches, seed, *, evaluate=True, back="as it came",
              gen="once"):  # fmt: skip
    was_training = model.training
    model.train(model.training and not evaluate)
    g = None if gen == "global" else torch.Generator().manual_seed(seed)
    with torch.no_grad():
        total = 0.0
        for _ in range(n_batches):
            g = torch.Generator().manual_seed(seed) if gen == "every batch" else g
            total += model(*sample_batch(tokens, batch_size, model.cfg.block_size, g))[1].item()
    model.train({"as it came": was_training, "train": True, "": model.training}[back])
    return total / n_batches


def _measure(fn, model, tokens):  # the loss, the mode left in (1 = train), on a copy
    model = copy.deepcopy(model)  # compare starts each run from one global random state
    loss = float(fn(model, tokens, 4, 3, 7))
    return torch.tensor([loss, model.training], dtype=torch.float64)


@solved_by(solution_validation_loss)
def check_validation_loss(validation_loss):
    """`validation_loss(model, tokens, 4, 3, 7)` beside estimate_loss, from train then eval mode."""
    return compare("validation_loss", lambda *inputs: _measure(validation_loss, *inputs),
                   partial(_measure, estimate_loss), lambda g: _tiny(g, 0.3, g.initial_seed() % 2),
                   [(hint, partial(_measure, wrong)) for hint, wrong in ESTIMATE_MISTAKES],
                   trials=2, atol=1e-6, rtol=0.0, grads=False, no_grad=True)  # fmt: skip


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


def _adamw(param, grad, m, v, steps_done, lr, betas, eps, weight_decay, *, correct=True,
           decay="decoupled", eps_inside=False, swap=False, t0=1, corrected_out=False):  # fmt: skip
    beta1, beta2 = betas[::-1] if swap else betas
    t = steps_done + t0
    grad = grad + weight_decay * param if decay == "L2" else grad
    param = param * (1 - lr * weight_decay) if decay == "decoupled" else param
    m, v = beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad * grad
    m_hat, v_hat = (m / (1 - beta1**t), v / (1 - beta2**t)) if correct else (m, v)
    param = param - lr * m_hat / ((v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps)
    param = param * (1 - lr * weight_decay) if decay == "after" else param
    return (param, m_hat, v_hat) if corrected_out else (param, m, v)


def _adamw_inputs(g):  # lr 0.1, decay 0.5, eps 1e-2: the order of decay and update shows
    shapes = ((4, 3), (5,))
    scales = [torch.empty(s).uniform_(-4.6, 0.7, generator=g).exp() for s in shapes]  # >= 1e-2
    grads = [torch.randn(6, *s, generator=g) * c for s, c in zip(shapes, scales, strict=True)]
    case = ((0.1, (0.9, 0.95), 1e-2, 0.5), (0.05, (0.8, 0.99), 1e-8, 0.1))[g.initial_seed() % 2]
    return [torch.randn(s, generator=g) for s in shapes], grads, case  # grads [6 updates, *shape]


def _torch_adamw_step(param, grad, m, v, steps_done, lr, betas, eps, weight_decay):
    p = torch.nn.Parameter(param)
    p.grad = grad
    opt = torch.optim.AdamW([p], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    opt.state[p] = {"step": torch.tensor(float(steps_done)), "exp_avg": m, "exp_avg_sq": v}
    opt.step()
    return p.detach(), m, v


def _chain(step, params, grads, case):  # 6 updates of each tensor, each on its last output
    states, path = [(p, torch.zeros_like(p), torch.zeros_like(p)) for p in params], []
    for k in range(6):
        states = [[torch.as_tensor(x).detach() for x in step(p.clone(), gr[k], m.clone(), v.clone(), k, *case)]
                  for (p, m, v), gr in zip(states, grads, strict=True)]  # fmt: skip
        path.append(states)
    return path


@solved_by(solution_adamw_step)
def check_adamw_step(adamw_step):
    """6 chained updates of two tensors beside torch.optim.AdamW, two settings."""
    return compare("adamw_step", lambda *inputs: _chain(adamw_step, *inputs),
                   partial(_chain, _torch_adamw_step), _adamw_inputs,
                   [(hint, partial(_chain, wrong)) for hint, wrong in ADAMW_MISTAKES],
                   trials=2, grads=False)  # fmt: skip


def solution_clip_grad_norm(grads, max_norm):
    total_norm = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()  # all entries at once
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)  # < 1 only above max_norm
    return total_norm, [g * scale for g in grads]  # one factor for every tensor


def _torch_clip(grads, max_norm):
    ps = [torch.nn.Parameter(g.clone()) for g in grads]
    for p in ps:
        p.grad = p.detach()
    return torch.nn.utils.clip_grad_norm_(ps, max_norm), [p.grad for p in ps]


def _clip(grads, max_norm, *, each=False, summed=False, always=False, zero_nan=False,
          after=False):  # fmt: skip
    norms = torch.stack([g.pow(2).sum().sqrt() for g in grads])
    total = norms.sum() if summed else norms.pow(2).sum().sqrt()
    scales = (max_norm / norms).clamp(max=1) if each else (max_norm / total).expand(len(grads))
    scales = scales if always or each else scales.clamp(max=1)
    clipped = [g / total * total.clamp(max=max_norm) if zero_nan else g * s
               for g, s in zip(grads, scales, strict=True)]  # fmt: skip
    return (torch.stack([c.norm() for c in clipped]).norm() if after else total), clipped


def _clip_inputs(g):  # above max_norm; under it; one tensor far larger than the others; all 0
    scales = ((2.0,) * 3, (0.05,) * 3, (10.0, 0.1, 0.3), (0.0,) * 3)[g.initial_seed() % 4]
    shapes = ((4, 3), (5,), (2, 2, 2))
    return [torch.randn(s, generator=g) * c for s, c in zip(shapes, scales, strict=True)], 1.0


@solved_by(solution_clip_grad_norm)
def check_clip_grad_norm(clip_grad_norm):
    """Beside clip_grad_norm_ on gradients above max_norm, under it, one tensor large, all zero."""
    return compare("clip_grad_norm", clip_grad_norm, _torch_clip, _clip_inputs, CLIP_MISTAKES,
                   trials=4, atol=1e-6, rtol=1e-5, grads=False)  # fmt: skip


# The slips each check names: one row each, a wrong version by its keyword switches.
LOOP_MISTAKES = [
    (N_("without zero_grad the gradients add up: from the second step on, each update follows the "
        "sum of all the batches so far, not the current batch"), partial(_loop, order="bcs")),
    *[(N_("the weights never moved: every p.grad was empty when optimizer.step() ran, as no "
          "loss.backward() came between zero_grad and the step"), partial(_loop, order=order))
      for order in ("bzcs", "zsbc")],
    (N_("optimizer.step() runs before loss.backward(): every update uses the gradient of the "
        "previous batch, and the first step has none"), partial(_loop, order="szbc")),
    (N_("the gradient is not clipped before the update: clip_grad_norm_ is missing, or comes after "
        "optimizer.step(), when the update is already made"), partial(_loop, order="zbs")),
    (N_("each parameter's gradient was clipped on its own to the norm clip: your updates are "
        "larger than those of one factor for all the gradients together"),
     partial(_loop, each=True)),
    (N_("the learning rate never changes: every step used the optimizer's initial rate, with no "
        "warmup and no cosine"), partial(_loop, lr=None)),
    (N_("after the warmup your learning rate stays at max_lr, where the reference's falls along a "
        "cosine: the later updates are too large"), partial(_loop, lr="constant")),
    (N_("every step trained on the same batch: the generator is seeded again inside the loop"),
     partial(_loop, reseed=True)),
    *[(N_("the labels were shifted twice: model(idx, labels) already pairs position t with "
          "labels[t + 1], so each position is scored on the token after next"),
       partial(_loop, shift=shift))
      for shift in ("cropped", "padded", "rolled")],
    (N_("dropout stayed off: the model arrived in eval mode and your loop trained it in that mode"),
     partial(_loop, train=False)),
]  # fmt: skip

ESTIMATE_MISTAKES = [
    (N_("dropout was on while measuring: the model stayed in train mode, so your loss changes from "
        "call to call"), partial(_estimate, evaluate=False)),
    (N_("the model came in training and went back in eval mode, so the training that follows runs "
        "without dropout: its mode was not given back"), partial(_estimate, back="")),
    (N_("a model that came in eval mode went back in train mode: yours always ends in train mode, "
        "not in the mode it came in"), partial(_estimate, back="train")),
    (N_("the windows come from torch's global random stream, so each call measures other windows, "
        "not the ones a generator seeded with seed gives"), partial(_estimate, gen="global")),
    (N_("every batch is the same set of windows: the generator is seeded again inside the loop"),
     partial(_estimate, gen="every batch")),
]  # fmt: skip

ADAMW_MISTAKES = [
    (N_("your first updates are smaller than torch's, and the gap closes as the steps go on: the "
        "moments were not corrected for having started at zero"), partial(_adamw, correct=False)),
    (N_("your moments differ from torch's from the first update on: the weight decay was added to "
        "the gradient (L2, as in Adam), so it went through the moments"),
     partial(_adamw, decay="L2")),
    (N_("your moments agree with torch's but the parameters are off a little at every update: the "
        "decay shrank the weight after the update"), partial(_adamw, decay="after")),
    (N_("the moments agree but where the gradients are small your updates are smaller than "
        "torch's: eps was added under the square root, √(v̂ + ε)"),
     partial(_adamw, eps_inside=True)),
    (N_("your moments are not torch's from the first update on: the betas are swapped, β2 averaged "
        "the gradient and β1 its square"), partial(_adamw, swap=True)),
    (N_("your parameters are NaN after the first update: the bias correction counted it as update "
        "0, and 1 - β⁰ = 0 divided it"), partial(_adamw, t0=0)),
    (N_("your first parameters are torch's but the moments you returned are the bias-corrected "
        "ones (m̂, v̂), corrected once more by the next update"),
     partial(_adamw, corrected_out=True)),
]  # fmt: skip

CLIP_MISTAKES = [
    (N_("each tensor was clipped by its own norm: a tensor under max_norm kept its size while "
        "another was cut, so the direction of the whole gradient changed"),
     partial(_clip, each=True)),
    (N_("with every gradient zero your clipped gradients are NaN: each was divided by the total "
        "norm, 0, before it was scaled"), partial(_clip, zero_nan=True)),
    (N_("gradients whose total norm was already under max_norm were scaled too, up to max_norm: "
        "small gradients grew"), partial(_clip, always=True)),
    (N_("the total norm you returned is the one after clipping: it never exceeds max_norm, so a "
        "log of it could not show how large the gradients were"), partial(_clip, after=True)),
    (N_("your total norm is the sum of the tensors' own norms, larger than the norm of all their "
        "entries together"), partial(_clip, summed=True)),
]  # fmt: skip
