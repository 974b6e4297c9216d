"""Several training runs of one architecture as one batched computation.

`train_runs(models, tokens, steps, seeds=...)` trains R models that share their shapes (the same
model with R seeds, or R copies that differ only in their starting weights) as `train` would train
each of them, but every step is one computation over all R: the weights are stacked along a
leading run axis (`torch.func.stack_module_state`), the forward pass and the loss run for every
run at once (`torch.func.vmap` over `torch.func.functional_call`), one backward pass fills every
run's gradients, each run's gradient norm is clipped on its own, and one AdamW steps all the
stacked weights. Each run still draws its own batches from its own seed, so run r follows
`train(models[r], tokens, steps, seed=seeds[r], ...)`: the same batches, the same schedule, the
same optimiser, the same losses up to the rounding of the batched arithmetic.

Notebooks 02, 06 and 07 train their seeds with it; notebook 10 builds the loop it batches
(`gptlib.train.train`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from gptlib.attention import CausalSelfAttention
from gptlib.data import sample_batch
from gptlib.language import _
from gptlib.mlp import MLP
from gptlib.model import GPT, IGNORE_INDEX, Block
from gptlib.norms import LayerNorm, RMSNorm
from gptlib.train import (
    Diverged,
    History,
    _check_ids,
    learning_rate,
)
from gptlib.train import (
    eval_batches as _eval_windows,
)


def _per_run(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A per-run vector t [R, k] shaped to broadcast against x [R, ..., k]."""
    return t.view(t.size(0), *([1] * (x.dim() - 2)), t.size(-1))


class _Runs:
    """The forward pass of R models of one architecture at once, every tensor with a leading run
    axis: x [R, B, n, d]. `p` maps each parameter's name (as in `model.named_parameters()`) to
    the R runs' values stacked, [R, ...].

    The library's layers are written out for the run axis: a Linear is one batched product per
    run (`bmm`), a norm's gain is one row per run, attention folds the runs into its batch, so
    each of them is a single operation over all R runs. Any other module (one a notebook put in
    place of a layer) runs once per run through `torch.func.vmap` over its own parameters, or,
    when it has none, once on every run's rows folded into its batch."""

    def __init__(self, model: GPT, p: dict[str, torch.Tensor]):
        self.model, self.p = model, p

    def __call__(self, idx: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """idx, labels [R, B, n] -> each run's mean loss [R], as `GPT.forward` computes it."""
        g, p = self.model, self.p
        R, n = idx.size(0), idx.size(-1)
        runs = torch.arange(R, device=idx.device).view(R, *([1] * (idx.dim() - 1)))
        x = p["tok_emb.weight"][runs, idx] + p["pos_emb.weight"][:, None, :n]  # [R, B, n, d]
        for i, block in enumerate(g.blocks):
            if type(block) is Block:
                x = self.block(block, f"blocks.{i}.", x)
            else:
                x = self.layer(block, f"blocks.{i}.", x)
        x = self.layer(g.ln_f, "ln_f.", x)
        head = "tok_emb.weight" if g.cfg.tie_embeddings else "lm_head.weight"
        logits = self.linear(x, p[head])  # [R, B, n, V]
        # GPT.loss for each run: position t against labels[t + 1], the last position ignored.
        targets = F.pad(labels[..., 1:], (0, 1), value=IGNORE_INDEX)  # [R, B, n]
        nll = F.cross_entropy(
            logits.flatten(0, -2), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="none"
        ).view(R, -1)  # [R, B * n], 0 where ignored
        return nll.sum(dim=1) / (targets != IGNORE_INDEX).view(R, -1).sum(dim=1)

    def block(self, block: nn.Module, prefix: str, x: torch.Tensor) -> torch.Tensor:
        attn = lambda h: self.attention(block.attn, prefix + "attn.", h)  # noqa: E731
        mlp = lambda h: self.layer(block.mlp, prefix + "mlp.", h)  # noqa: E731
        ln1 = lambda h: self.layer(block.ln1, prefix + "ln1.", h)  # noqa: E731
        ln2 = lambda h: self.layer(block.ln2, prefix + "ln2.", h)  # noqa: E731
        if block.pre_norm:
            x = x + attn(ln1(x))
            return x + mlp(ln2(x))
        x = ln1(x + attn(x))
        return ln2(x + mlp(x))

    def attention(self, attn: nn.Module, prefix: str, x: torch.Tensor) -> torch.Tensor:
        if type(attn) is not CausalSelfAttention:
            return self.layer(attn, prefix, x)
        R, B, n, d = x.shape
        q, k, v = self.layer(attn.qkv, prefix + "qkv.", x).split(d, dim=-1)  # [R, B, n, d] each
        heads = [t.reshape(R * B, n, attn.n_head, attn.head_dim).transpose(1, 2) for t in (q, k, v)]
        q, k, v = heads  # [R * B, h, n, d_h]: the runs folded into the batch
        if attn.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)
            y = scores.masked_fill(attn.future[:n, :n], float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(R, B, n, d)  # heads side by side again
        return self.layer(attn.proj, prefix + "proj.", y)

    def linear(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None):
        """x [R, ..., i] times each run's own weight w [R, o, i] (nn.Linear's layout)."""
        y = x.flatten(1, -2) @ w.transpose(1, 2)  # [R, rows, i] @ [R, i, o] -> [R, rows, o]
        if b is not None:
            y = y + b[:, None]
        return y.view(*x.shape[:-1], w.size(1))

    def layer(self, module: nn.Module, prefix: str, x: torch.Tensor) -> torch.Tensor:
        p, kind = self.p, type(module)
        if kind is nn.Linear:
            return self.linear(x, p[prefix + "weight"], p.get(prefix + "bias"))
        if kind is RMSNorm:
            ms = x.pow(2).mean(dim=-1, keepdim=True)
            return x * torch.rsqrt(ms + module.eps) * _per_run(p[prefix + "weight"], x)
        if kind is LayerNorm:
            y = F.layer_norm(x, x.shape[-1:], eps=module.eps) * _per_run(p[prefix + "weight"], x)
            return y if module.bias is None else y + _per_run(p[prefix + "bias"], x)
        if kind is MLP:
            h = module.act(self.layer(module.fc, prefix + "fc.", x))
            return self.layer(module.proj, prefix + "proj.", h)
        # Any other module: its own forward, once per run, on that run's parameters.
        own = {name: p[prefix + name] for name, _unused in module.named_parameters()}
        if not own:
            return module(x.flatten(0, 1)).unflatten(0, x.shape[:2])
        return vmap(lambda q, xr: functional_call(module, q, (xr,)))(own, x)


def _shape_of(model: nn.Module) -> list:
    """What has to be equal for two models to run as one: each module's class and each
    parameter's and buffer's name and shape."""
    return [
        [(name, type(m).__name__) for name, m in model.named_modules()],
        [(name, tuple(p.shape)) for name, p in model.named_parameters()],
        [(name, tuple(b.shape)) for name, b in model.named_buffers()],
    ]


def _check_runs(models: Sequence[GPT], seeds: Sequence[int]) -> None:
    if len(models) == 0:
        raise ValueError(_("train_runs needs at least one model, got none"))
    if len(seeds) != len(models):
        raise ValueError(
            _(
                "train_runs got {models} models and {seeds} seeds; give one seed per model (the "
                "seed that draws that run's batches)"
            ).format(models=len(models), seeds=len(seeds))
        )
    first = models[0]
    for r, model in enumerate(models):
        if type(model) is not GPT:  # a subclass may compute another forward pass
            raise TypeError(
                _("train_runs trains GPT models; model {run} is a {kind}").format(
                    run=r, kind=type(model).__name__
                )
            )
        if model.cfg != first.cfg or _shape_of(model) != _shape_of(first):
            raise ValueError(
                _(
                    "model {run} is built differently from model 0 (another config, another "
                    "module or another parameter shape); runs trained as one computation share "
                    "one architecture: train each architecture with its own train_runs call"
                ).format(run=r)
            )
        if any(
            p is q for p in model.parameters() for other in models[:r] for q in other.parameters()
        ):
            raise ValueError(
                _(
                    "model {run} shares a parameter with an earlier model; give every run its "
                    "own model (build one per seed)"
                ).format(run=r)
            )
    if first.cfg.dropout > 0:
        raise ValueError(
            _(
                "dropout={dropout}: a batched run would draw other dropout masks than a run of "
                "its own, so the runs would not be those of train; use dropout=0 or train the "
                "runs one by one with train"
            ).format(dropout=first.cfg.dropout)
        )


def _clip_per_run(grads: list[torch.Tensor], clip: float | None) -> torch.Tensor:
    """Each run's global gradient norm [R] (over all its parameters), and, with a `clip`, every
    run's gradients scaled as `torch.nn.utils.clip_grad_norm_` scales one model's."""
    per_tensor = torch.stack([g.flatten(1).norm(dim=1) for g in grads])  # [P, R]
    norms = per_tensor.norm(dim=0)  # [R]
    if clip is not None:
        scale = (clip / (norms + 1e-6)).clamp(max=1.0)  # [R]: 1 where the norm is within clip
        for g in grads:
            g.mul_(scale.view(-1, *([1] * (g.dim() - 1))))
    return norms


def train_runs(
    models: Sequence[GPT],
    tokens: torch.Tensor,
    steps: int,
    batch_size: int = 16,
    *,
    seeds: Sequence[int],
    val_tokens: torch.Tensor | None = None,
    max_lr: float = 3e-4,
    warmup: int = 100,
    schedule: str = "constant",
    min_lr: float = 0.0,
    clip: float | None = 1.0,
    weight_decay: float = 0.1,
    eval_every: int = 100,
    eval_batches: int = 10,
) -> list[History]:
    """Train every model of `models` for `steps` steps, run r on the batches of `seeds[r]`, all
    runs as one batched computation; return one History per run, each as `train` returns it.

    The arguments after `seeds` are `train`'s and mean what they mean there; the recipe is the
    same for every run. The models must share one architecture (same config, same modules, same
    parameter shapes; their weights differ) and have no dropout. On return each model holds its
    trained weights, as after `train`. A non-finite loss raises `Diverged` naming the run and the
    step; Ctrl-C stops every run cleanly and returns the histories so far (`interrupted=True`).

    Run r's losses equal `train(models[r], tokens, steps, batch_size, seed=seeds[r], ...)`'s up
    to rounding: the batched matrix products add in another order (tests/test_batched.py).

    Not taught in a notebook: notebooks 02, 06 and 07 train their seeds with it, as a black box.
    """
    if steps < 0:
        raise ValueError(_("steps must be >= 0, got {steps}").format(steps=steps))
    _check_runs(models, seeds)
    base = models[0]
    block, device = base.cfg.block_size, base.lm_head.weight.device
    if tokens.numel() < block + 1:
        raise ValueError(
            _(
                "training corpus has {tokens} tokens; block_size={block_size} needs at least "
                "{needed}: use a longer text or a smaller block_size"
            ).format(tokens=tokens.numel(), block_size=block, needed=block + 1)
        )
    _check_ids(base.cfg.vocab_size, tokens=tokens, val_tokens=val_tokens)

    runs = len(models)
    params, _buffers = stack_module_state(list(models))  # name -> [R, ...], leaves of their own
    names = list(params)
    forward = _Runs(base, params)

    # make_optimizer's two groups: decay what is a matrix or a table in one model (>= 2-D).
    one_model = dict(base.named_parameters())
    decay = [params[n] for n in names if one_model[n].dim() >= 2]
    no_decay = [params[n] for n in names if one_model[n].dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=max_lr,
        betas=(0.9, 0.95),
        fused=device.type in ("cpu", "cuda") or None,
    )

    generators = [torch.Generator().manual_seed(s) for s in seeds]  # one per run, as in train
    histories = [History(clip=clip) for _unused in models]
    evaluate = val_tokens is not None and bool(eval_every)

    def val_losses() -> list[float]:
        sums = [0.0] * runs
        with torch.no_grad():
            for idx, labels in _eval_windows(base, val_tokens, batch_size, n_batches):
                same = [t.expand(runs, *t.shape) for t in (idx, labels)]  # every run, one batch
                for r, v in enumerate(forward(*same).tolist()):
                    sums[r] += v
        return [s / n_batches for s in sums]

    n_batches = eval_batches
    try:
        for step in range(steps):
            batches = [sample_batch(tokens, batch_size, block, g, device) for g in generators]
            idx = torch.stack([i for i, _labels in batches])  # [R, B, T]
            labels = torch.stack([lab for _i, lab in batches])  # [R, B, T]
            lr = learning_rate(step, max_lr, warmup, steps, schedule, min_lr)
            losses = forward(idx, labels)  # [R]: each run's loss on its own batch
            values = losses.tolist()
            for r, value in enumerate(values):
                if not math.isfinite(value):
                    error = Diverged(step, value, lr)
                    error.args = (
                        _("run {run} (seed {seed}): {message}").format(
                            run=r, seed=seeds[r], message=error.args[0]
                        ),
                    )
                    raise error
            opt.zero_grad(set_to_none=True)
            losses.sum().backward()  # the runs share nothing: each gets its own loss's gradient
            norms = _clip_per_run([params[n].grad for n in names], clip).tolist()
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
            for r, hist in enumerate(histories):
                hist.record(step, lr, values[r], norms[r])
            if evaluate and (step % eval_every == 0 or step == steps - 1):
                for hist, v in zip(histories, val_losses(), strict=True):
                    hist.record_val(step, v)
    except KeyboardInterrupt:
        for hist in histories:
            hist.interrupted = True
    finally:
        with torch.no_grad():  # every model gets its run's weights, as after train
            for r, model in enumerate(models):
                for name, p in model.named_parameters():
                    p.copy_(params[name][r].detach())
    return histories
