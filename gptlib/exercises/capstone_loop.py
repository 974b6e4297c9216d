"""Notebook 14, second half: the reader's GPT learns, speaks and keeps a cache.

With a forward pass of their own (`gptlib.exercises.capstone`), the reader writes, still from
plain tensors:

- `gpt_loss(forward_fn, w, idx, labels, n_head)`: the shifted cross-entropy of notebook 09 on the
  logits of `forward_fn`; labels of -100 are not scored.
- `train_gpt(forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed,
  n_head)`: notebook 10's loop for a dict of tensors: each step the warmup + cosine rate on every
  group, a batch from one generator seeded `seed`, the loss, zero_grad, backward, the global
  gradient clipped, step. Returns the `steps` losses; it must give `gptlib.train.train`'s losses
  and final weights.
- `sample_names(forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None,
  max_len=40)`: notebook 12's sampler: every row starts at BOS, the last `T` tokens at most go
  through the forward, the last position's logits are divided by the temperature and cut to the
  `top_k` largest, one token is drawn per row, and the loop ends when every row has drawn BOS.
  Returns each name's ids (without the BOS around it): those of `gptlib.generate.sample_documents`.
- `cached_attention(x, w_qkv, w_proj, n_head, past)`: notebook 13's attention for new tokens
  only: their q, k, v, the keys and values `past` holds in front of theirs, every new query
  seeing every key up to its own position. Returns (output, (k, v)) with every key and value so
  far.
- `forward_cached(w, idx, cache, n_head)`: the forward for the new ids only, positions starting
  where the cache ends, each block's entry of the list `cache` replaced by its keys and values so
  far (appended on the first call). Its logits equal the plain forward's at the same positions.

The composite checks (the loss, the loop, the cached forward) first run the reader's own pieces
through their own checks and name the first that fails, then judge the reader's own lines with
the reference pieces standing in, as `check_gpt_forward` does. The loop is compared in float64,
where rounding stays near 1e-15, so that a right loop matches `train` to 1e-8 whatever the order
of its additions.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gptlib.checkpoint import load_asset
from gptlib.config import microgpt
from gptlib.data import sample_batch
from gptlib.exercises.capstone import (
    ASSET,
    _weights,
    _with_pieces,
    flat_names,
    forward,
    gpt_weights,
    mlp,
    rmsnorm,
    state_dict_key,
)
from gptlib.exercises.capstone import (
    check_gpt_mlp as _check_mlp,
)
from gptlib.exercises.capstone import (
    check_gpt_rmsnorm as _check_rmsnorm,
)
from gptlib.exercises.checking import (
    CheckResult,
    Refused,
    compare,
    guard,
    not_written,
    solved_by,
)
from gptlib.generate import generate
from gptlib.kvcache import KVCache
from gptlib.ladder import RUNGS, Rung, build_rung
from gptlib.model import GPT, IGNORE_INDEX
from gptlib.train import learning_rate, train

__all__ = [
    "check_gpt_cached_attention",
    "check_gpt_forward_cached",
    "check_gpt_loss",
    "check_gpt_sample",
    "check_gpt_train",
    "climb_yours",
    "gpt_optimizer",
    "library_stand_ins",
    "trainable",
]

# ---------------------------------------------------------------------------------------------
# The reference solutions


def gpt_loss(forward_fn, w, idx, labels, n_head):
    """Mean cross-entropy of position t's logits against labels[t + 1], -100 labels not scored."""
    logits = forward_fn(w, idx, n_head)  # [B, n, V]
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, V),  # positions 0..n-2 predict ...
        labels[:, 1:].reshape(-1),  # ... the tokens at 1..n-1
        ignore_index=IGNORE_INDEX,  # padding: neither scored nor counted in the mean
    )


def train_gpt(
    forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, n_head
):
    """Notebook 10's training loop for a dict of weights; returns the `steps` losses."""
    g = torch.Generator().manual_seed(seed)  # one generator, made once: train()'s batches
    T = w["pos_emb"].shape[0]
    params = [p for group in optimizer.param_groups for p in group["params"]]  # every weight
    losses = []
    for step in range(steps):
        lr = learning_rate(step, max_lr, warmup, steps, "cosine")  # warmup, then half a cosine
        for group in optimizer.param_groups:
            group["lr"] = lr
        idx, labels = sample_batch(tokens, batch_size, T, g)  # [B, T] twice
        loss = gpt_loss(forward_fn, w, idx, labels, n_head)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # a .grad on every tensor of w
        torch.nn.utils.clip_grad_norm_(params, clip)  # one norm over all of them
        optimizer.step()
        losses.append(loss.item())
    return losses


def sample_names(
    forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None, max_len=40
):
    """`num` names as lists of ids, drawn from forward_fn at `temperature`, from the top_k."""
    T = w["pos_emb"].shape[0]
    idx = torch.full((num, 1), bos)  # [num, 1]: every row starts at BOS
    with torch.no_grad():
        for _ in range(max_len):
            logits = forward_fn(w, idx[:, -T:], n_head)[:, -1] / temperature  # [num, V]
            if top_k is not None:
                kth = logits.topk(top_k, dim=-1).values[:, -1:]  # [num, 1]: k-th largest per row
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)  # [num, 1]
            idx = torch.cat([idx, nxt], dim=1)
            if (idx[:, 1:] == bos).any(dim=1).all():  # every row has ended its name
                break
    names = []
    for row in idx[:, 1:].tolist():
        names.append(row[: row.index(bos)] if bos in row else row)
    return names


def cached_attention(x, w_qkv, w_proj, n_head, past):
    """x [B, n, d] of the new tokens, past None or (k, v) each [B, h, p, d_h] ->
    (output [B, n, d], (k, v) each [B, h, p + n, d_h])."""
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)  # each [B, n, d]
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))  # [B, h, n, d_h]
    if past is not None:
        k = torch.cat([past[0], k], dim=2)  # [B, h, p + n, d_h]: the old keys first
        v = torch.cat([past[1], v], dim=2)
    p = k.size(2) - n  # the new tokens sit at positions p .. p + n - 1
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # [B, h, n, p + n]
    future = torch.triu(torch.ones(n, p + n, dtype=torch.bool), diagonal=p + 1)
    weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = (weights @ v).transpose(1, 2).reshape(B, n, d)
    return y @ w_proj.T, (k, v)


def forward_cached(w, idx, cache, n_head):
    """The new ids idx [B, n] -> their logits [B, n, V]; `cache` (a list, one (k, v) per block)
    gains their keys and values."""
    p = cache[0][0].size(2) if cache else 0  # positions already cached
    n = idx.size(1)
    x = w["tok_emb"][idx] + w["pos_emb"][p : p + n]  # rows p..p+n-1 of the position table
    for i, bw in enumerate(w["blocks"]):
        past = cache[i] if i < len(cache) else None
        a, kv = cached_attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head, past)
        if past is None:
            cache.append(kv)
        else:
            cache[i] = kv
        x = x + a
        x = x + mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


# ---------------------------------------------------------------------------------------------
# Weights that learn, the optimizer, and a GPT holding the same numbers


def trainable(w: dict) -> dict:
    """The same weights as leaf tensors that keep a gradient (copies)."""
    return {
        k: (
            [{n: t.detach().clone().requires_grad_() for n, t in bw.items()} for bw in v]
            if k == "blocks"
            else v.detach().clone().requires_grad_()
        )
        for k, v in w.items()
    }


def gpt_optimizer(w: dict, lr: float = 1e-2, weight_decay: float = 0.1) -> torch.optim.AdamW:
    """`gptlib.train.make_optimizer` for a dict of weights: AdamW, betas (0.9, 0.95), the
    matrices and tables decayed, the gains (1-D) not."""
    tensors = [t for _, t in flat_names(w)]
    groups = [
        {"params": [t for t in tensors if t.dim() >= 2], "weight_decay": weight_decay},
        {"params": [t for t in tensors if t.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)


def gpt_from_weights(w: dict, n_head: int) -> GPT:
    """A microgpt-style GPT holding copies of the weights (in their dtype)."""
    V, d = w["tok_emb"].shape
    cfg = microgpt(
        V, block_size=w["pos_emb"].shape[0], n_embd=d, n_head=n_head, n_layer=len(w["blocks"])
    )
    model = GPT(cfg).to(w["tok_emb"].dtype)
    state = {state_dict_key(name): t.detach().clone() for name, t in flat_names(w)}
    model.load_state_dict(state)
    return model


def library_stand_ins() -> types.SimpleNamespace:
    """gptlib doing each new exercise's job, under the exercise's signature, for the cells that
    run before the reader's own passes. Every one is refused by the exercise's check."""

    def forward_fn(w, idx, n_head):
        return gpt_from_weights(w, n_head)(idx)[0]

    def train_fn(
        forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, n_head
    ):
        net = gpt_from_weights(w, n_head)
        history = train(
            net,
            tokens,
            steps,
            batch_size,
            max_lr=max_lr,
            warmup=warmup,
            schedule="cosine",
            clip=clip,
            seed=seed,
            eval_every=0,
            weight_decay=optimizer.param_groups[0]["weight_decay"],
        )
        learned = dict(flat_names(gpt_weights(net)))
        with torch.no_grad():
            for name, t in flat_names(w):
                t.copy_(learned[name])
        return history.loss

    def sample_fn(
        forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None, max_len=40
    ):
        net = gpt_from_weights(w, n_head)
        start = torch.full((num, 1), bos)
        out = generate(net, start, max_len, temperature, top_k, generator, bos, use_cache=False)
        return [row[: row.index(bos)] if bos in row else row for row in out[:, 1:].tolist()]

    def forward_cached_fn(w, idx, cache, n_head):
        if not cache:
            net = gpt_from_weights(w, n_head).eval()
            cache.append((net, KVCache(net.cfg, idx.size(0), idx.device, net.lm_head.weight.dtype)))
        net, kv = cache[0]
        with torch.no_grad():
            return net(idx, cache=kv)[0]

    for f in (forward_fn, train_fn, sample_fn, forward_cached_fn):
        f.__module__ = "gptlib.stand_ins"  # not the exercises' own code: the checks refuse it
    return types.SimpleNamespace(
        forward=forward_fn,
        train_gpt=train_fn,
        sample_names=sample_fn,
        forward_cached=forward_cached_fn,
    )


# ---------------------------------------------------------------------------------------------
# The loss: slips and check


def _scored(forward_fn, w, idx, labels, n_head, cut=1, backwards=False):
    logits = forward_fn(w, idx, n_head)
    V = logits.size(-1)
    if backwards:
        logits, labels = logits[:, cut:], labels[:, :-cut]
    elif cut:
        logits, labels = logits[:, :-cut], labels[:, cut:]
    return logits.reshape(-1, V), labels.reshape(-1)


def _loss_no_shift(*args):
    return F.cross_entropy(*_scored(*args, cut=0), ignore_index=IGNORE_INDEX)


def _loss_shift_backwards(*args):
    return F.cross_entropy(*_scored(*args, backwards=True), ignore_index=IGNORE_INDEX)


def _loss_shifted_twice(*args):
    return F.cross_entropy(*_scored(*args, cut=2), ignore_index=IGNORE_INDEX)


def _loss_padding_counted(*args):
    logits, labels = _scored(*args)
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum") / len(labels)


def _loss_sum(*args):
    return F.cross_entropy(*_scored(*args), ignore_index=IGNORE_INDEX, reduction="sum")


def _loss_of_probabilities(*args):
    logits, labels = _scored(*args)
    return F.cross_entropy(logits.softmax(dim=-1), labels, ignore_index=IGNORE_INDEX)


def _loss_padding_as_token_0(*args):
    logits, labels = _scored(*args)
    return F.cross_entropy(logits, labels.clamp(min=0))


LOSS_MISTAKES = [
    (
        "position t is scored against its own token labels[t], which it already sees: the loss "
        "asks each position for the token after it",
        _loss_no_shift,
    ),
    (
        "the shift runs the wrong way: position t + 1 is scored against the token at t, so each "
        "position is asked for the token before it",
        _loss_shift_backwards,
    ),
    (
        "position t is scored against labels[t + 2]: the labels moved two places, one more than "
        "the one-token shift",
        _loss_shifted_twice,
    ),
    (
        "the mean counts the padding positions (label -100) too: they are left out of the sum, "
        "and so must they be out of the count",
        _loss_padding_counted,
    ),
    ("that is the sum of the per-position losses; the loss is their mean", _loss_sum),
    (
        "F.cross_entropy was given probabilities: it takes logits and applies the (log-)softmax "
        "itself, so your softmax ran twice",
        _loss_of_probabilities,
    ),
    (
        "the padding labels (-100) were turned into token 0 and scored as if the text held it",
        _loss_padding_as_token_0,
    ),
]

LOSS_ERRORS = [
    (
        "out of bounds",
        "some labels are -100, padding (notebook 00): they are not tokens and must not be scored",
    ),
]


def _loss_inputs(g: torch.Generator) -> tuple:
    from gptlib.exercises.capstone import _H, _ids

    w = _weights(g)
    idx = _ids(g)
    labels = idx.clone()
    labels[0, -2:] = IGNORE_INDEX  # a padded row: its last two positions are not scored
    return forward, w, idx, labels, _H


@solved_by(gpt_loss)
def check_gpt_loss(fn: Callable) -> CheckResult:
    """`gpt_loss(forward_fn, w, idx, labels, n_head)` with the reference forward, random weights
    (V=11, T=7, d=12, 3 heads) and [2, 6] ids whose first row ends in two -100 labels, against
    `GPT.loss` on the same logits."""
    return compare(
        "gpt_loss", fn, gpt_loss, _loss_inputs, mistakes=LOSS_MISTAKES, error_hints=LOSS_ERRORS
    )


# ---------------------------------------------------------------------------------------------
# The training loop: slips and check


def _plain_loop(
    forward_fn,
    w,
    optimizer,
    tokens,
    steps,
    batch_size,
    max_lr,
    warmup,
    clip,
    seed,
    n_head,
    *,
    order=("zero_grad", "backward", "clip", "step"),
    lr="cosine",
    generator="once",
    clip_each=False,
):
    """The training loop with one thing done wrong, to build the named slips from."""
    g = torch.Generator().manual_seed(seed)
    T = w["pos_emb"].shape[0]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    losses = []
    for step in range(steps):
        if lr is not None:
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, max_lr, warmup, steps, lr)
        if generator == "every step":
            g = torch.Generator().manual_seed(seed)
        idx, labels = sample_batch(tokens, batch_size, T, None if generator == "global" else g)
        loss = gpt_loss(forward_fn, w, idx, labels, n_head)
        for action in order:
            if action == "zero_grad":
                optimizer.zero_grad(set_to_none=True)
            elif action == "backward":
                loss.backward()
            elif action == "clip" and clip_each:
                for p in params:
                    torch.nn.utils.clip_grad_norm_(p, clip)
            elif action == "clip":
                torch.nn.utils.clip_grad_norm_(params, clip)
            elif action == "step":
                optimizer.step()
        losses.append(loss.item())
    return losses


def _train_mistakes() -> list[tuple[str, Callable]]:
    """Notebook 10's slips (the same words), made on a dict of weights."""
    from gptlib.exercises.training import LOOP_MISTAKES

    switches = {
        "_no_zero_grad": {"order": ("backward", "clip", "step")},
        "_zero_grad_after_backward": {"order": ("backward", "zero_grad", "clip", "step")},
        "_step_before_backward": {"order": ("step", "zero_grad", "backward", "clip")},
        "_no_clip": {"order": ("zero_grad", "backward", "step")},
        "_clip_each_parameter": {"clip_each": True},
        "_lr_never_set": {"lr": None},
        "_lr_without_cosine": {"lr": "constant"},
        "_generator_every_step": {"generator": "every step"},
        "_global_generator": {"generator": "global"},
    }
    out = []
    for hint, wrong in LOOP_MISTAKES:
        if wrong.__name__ in switches:
            kw = switches[wrong.__name__]
            out.append((hint, lambda *a, kw=kw: _plain_loop(*a, **kw)))
    no_clip = next(hint for hint, wrong in LOOP_MISTAKES if wrong.__name__ == "_no_clip")
    after_step = ("zero_grad", "backward", "step", "clip")  # its words cover this one too
    out.append((no_clip, lambda *a: _plain_loop(*a, order=after_step)))
    return out


TRAIN_SETTINGS = {"steps": 6, "batch_size": 4, "max_lr": 1e-2, "warmup": 2, "clip": 0.2}
TRAIN_SEEDS = (3, 11)


def _train_setup(seed: int) -> tuple[dict, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    w = _weights(g)
    w = {
        k: ([{n: t.double() for n, t in bw.items()} for bw in v] if k == "blocks" else v.double())
        for k, v in w.items()
    }
    tokens = torch.randint(0, w["tok_emb"].shape[0], (300,), generator=g)
    return w, tokens


def _run_train(fn: Callable | None, w: dict, tokens: torch.Tensor, seed: int, n_head: int):
    """fn on trainable copies of w with gpt_optimizer, or (fn None) gptlib.train.train on a GPT
    holding the same weights: (losses, final weights as one float64 vector)."""
    s = TRAIN_SETTINGS
    with torch.random.fork_rng():
        torch.manual_seed(seed + 1000)  # the global stream differs from the seeded generator
        if fn is None:
            net = gpt_from_weights(w, n_head)
            history = train(
                net,
                tokens,
                s["steps"],
                s["batch_size"],
                max_lr=s["max_lr"],
                warmup=s["warmup"],
                schedule="cosine",
                clip=s["clip"],
                weight_decay=0.1,
                seed=seed,
                eval_every=0,
            )
            losses, final = history.loss, gpt_weights(net)
        else:
            mine = trainable(w)
            optimizer = gpt_optimizer(mine, lr=s["max_lr"])
            args = (s["steps"], s["batch_size"], s["max_lr"], s["warmup"], s["clip"], seed)
            losses = fn(forward, mine, optimizer, tokens, *args, n_head)
            final = mine
    vector = torch.cat([t.detach().double().flatten() for _, t in flat_names(final)])
    return losses, vector


def _readers_piece(fn: Callable, name: str) -> Callable | None:
    """The function `fn` finds under `name` in its namespace, when fn calls that name and it is
    not the reference's."""
    names = getattr(fn, "__globals__", {})
    own = names.get(name)
    code = getattr(fn, "__code__", None)
    if code is None or name not in code.co_names or not isinstance(own, types.FunctionType):
        return None
    return None if own is globals()[name] else own


def _first(name: str, piece: str, result: CheckResult) -> CheckResult:
    if result.message == not_written(piece).message:
        return CheckResult(False, f"✗ {name}: it calls your {piece}, which is not written yet")
    lines = [
        f"✗ {name}: your {piece} does not pass its own check yet; fix it first, since every "
        f"number {name} makes goes through it",
        *(f"  {line}" for line in result.message.splitlines()),
    ]
    return CheckResult(False, "\n".join(lines))


@solved_by(train_gpt)
def check_gpt_train(fn: Callable) -> CheckResult:
    """`train_gpt(forward_fn, w, optimizer, ...)` with the reference forward, on trainable
    float64 copies of random weights and `gpt_optimizer`, beside `gptlib.train.train` on a GPT
    holding the same weights: 6 steps from two seeds, losses and final weights to 1e-8. Your
    `gpt_loss`, when the loop calls it, is checked first; the loop then runs with the reference
    loss in its place, so that what is compared is the loop's own lines."""
    name = "train_gpt"
    own_loss = _readers_piece(fn, "gpt_loss")
    if own_loss is not None:
        result = check_gpt_loss(own_loss)
        if not result:
            return _first(name, "gpt_loss", result)
    user = guard(name, _with_pieces(fn, {"gpt_loss": gpt_loss}) if own_loss else fn)
    steps = TRAIN_SETTINGS["steps"]
    for seed in TRAIN_SEEDS:
        w, tokens = _train_setup(seed)
        expected_losses, expected_w = _run_train(None, w, tokens, seed, 3)
        expected = torch.tensor(expected_losses, dtype=torch.float64)
        try:
            losses, got_w = _run_train(user, w, tokens, seed, 3)
        except NotImplementedError:
            return not_written(name)
        except Refused as e:
            return e.result
        except Exception as e:
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        try:
            got = torch.tensor([float(x) for x in losses], dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return CheckResult(False, f"✗ {name}: return a list of the {steps} losses as numbers")
        if got.shape != expected.shape:
            return CheckResult(
                False, f"✗ {name}: returned {len(got)} losses for {steps} steps; one per step"
            )
        if torch.allclose(got, expected, atol=1e-8, rtol=0) and torch.allclose(
            got_w, expected_w, atol=1e-8, rtol=0
        ):
            continue
        for hint, wrong in _train_mistakes():
            wrong_losses, wrong_w = _run_train(wrong, w, tokens, seed, 3)
            if torch.allclose(
                got, torch.tensor(wrong_losses, dtype=torch.float64), atol=1e-8, rtol=0
            ) and torch.allclose(got_w, wrong_w, atol=1e-8, rtol=0):
                return CheckResult(False, f"✗ {name}: {hint}")
        differs = (got - expected).abs() > 1e-8
        if bool(differs[0]):
            return CheckResult(
                False,
                f"✗ {name}: the loss of step 0 is already {got[0]:.6f}, train() has "
                f"{expected[0]:.6f}; before any update the two runs must agree, so look at the "
                "batch (sample_batch, one generator seeded `seed`, windows of T tokens) and the "
                "loss",
            )
        if bool(differs.any()):
            k = int(differs.nonzero()[0])
            return CheckResult(
                False,
                f"✗ {name}: the losses agree up to step {k - 1} and part at step {k} "
                f"({got[k]:.6f}, train() has {expected[k]:.6f}): the batches and the loss are "
                "right, the update is not; look at the learning rate, the clipping and the order "
                "of the four calls",
            )
        diff = float((got_w - expected_w).abs().max())
        return CheckResult(
            False,
            f"✗ {name}: the losses match but the final weights differ (by up to {diff:.3g}): "
            "the last update is not train()'s",
        )
    return CheckResult(
        True,
        f"✓ {name}: the same {steps} losses and final weights as gptlib.train.train (float64, "
        f"to 1e-8), from {len(TRAIN_SEEDS)} seeds",
    )


# ---------------------------------------------------------------------------------------------
# The sampler: slips and check


def _sample(
    forward_fn,
    w,
    n_head,
    bos,
    num,
    generator,
    temperature=1.0,
    top_k=None,
    max_len=40,
    *,
    times=False,
    k_shift=0,
    top_k_dim=-1,
    position=-1,
    greedy=False,
    stop="all",
    keep_bos=False,
):
    """The sampler with one thing done wrong, to build the named slips from."""
    T = w["pos_emb"].shape[0]
    idx = torch.full((num, 1), bos)
    with torch.no_grad():
        for _ in range(max_len):
            logits = forward_fn(w, idx[:, -T:], n_head)[:, position]
            logits = logits * temperature if times else logits / temperature
            if top_k is not None:
                k = top_k + k_shift
                if top_k_dim == 0:
                    kth = logits.topk(min(k, num), dim=0).values[-1:]  # [1, V]
                else:
                    kth = logits.topk(k, dim=-1).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            if greedy:
                nxt = logits.argmax(dim=-1, keepdim=True)
            else:
                nxt = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
            ended = (idx[:, 1:] == bos).any(dim=1)
            if ended.any() if stop == "any" else ended.all():
                break
    rows = idx.tolist() if keep_bos else idx[:, 1:].tolist()
    first = 1 if keep_bos else 0
    return [r[: r.index(bos, first)] if bos in r[first:] else r for r in rows]


def _sample_slip(**switches) -> Callable:
    return lambda *args, **kwargs: _sample(*args, **kwargs, **switches)


SAMPLE_MISTAKES = [
    (
        "the logits were multiplied by the temperature: a temperature below 1 then flattens the "
        "distribution and one above 1 sharpens it, the opposite of what it is for",
        _sample_slip(times=True),
    ),
    (
        "one token too many survives the top-k cut: the k-th largest logit of each row is the "
        "last one kept",
        _sample_slip(k_shift=1),
    ),
    ("one token too few survives the top-k cut", _sample_slip(k_shift=-1)),
    (
        "the top-k cut was taken along the batch axis (dim 0), across the rows; each row has its "
        "own k largest logits over the vocabulary",
        _sample_slip(top_k_dim=0),
    ),
    (
        "the next token was drawn from the first position's logits; the prediction for the next "
        "token is the last position's",
        _sample_slip(position=0),
    ),
    (
        "these names are greedy: the argmax at every step, the same name for every row; the "
        "sampler draws from the distribution with the generator",
        _sample_slip(greedy=True),
    ),
    (
        "the loop ended as soon as the first name ended; the others were cut short, and must go "
        "on until every row has drawn BOS",
        _sample_slip(stop="any"),
    ),
    ("each name still starts with the BOS id it was started from", _sample_slip(keep_bos=True)),
]

SAMPLE_SETTINGS = ((1.0, None), (0.7, 5), (1.5, 3))
SAMPLE_NUM, SAMPLE_LEN = 6, 12  # longer than the block of 8: the context must be cropped


def _sample_inputs() -> tuple[dict, GPT, int, int]:
    model = load_asset(ASSET).model.double().eval()
    w = gpt_weights(model)
    return w, model, model.cfg.n_head, load_asset(ASSET).tokenizer.bos_id


def _library_names(model, bos, generator, temperature, top_k) -> list[list[int]]:
    start = torch.full((SAMPLE_NUM, 1), bos)
    out = generate(model, start, SAMPLE_LEN, temperature, top_k, generator, bos, use_cache=False)
    return [row[: row.index(bos)] if bos in row else row for row in out[:, 1:].tolist()]


def _as_names(got) -> list[list[int]] | None:
    try:
        return [[int(t) for t in row] for row in got]
    except (TypeError, ValueError):
        return None


@solved_by(sample_names)
def check_gpt_sample(fn: Callable) -> CheckResult:
    """`sample_names(forward_fn, w, n_head, bos, num, generator, temperature, top_k, max_len)`
    with the reference forward and the trained microgpt (float64), at three settings of
    temperature and top_k, 6 names of up to 12 tokens each; the ids must be those of
    `gptlib.generate.generate` (the recompute path, BOS as the stop token) with equal
    generators."""
    name = "sample_names"
    w, model, n_head, bos = _sample_inputs()
    user = guard(name, fn)
    for temperature, top_k in SAMPLE_SETTINGS:
        expected = _library_names(model, bos, torch.Generator().manual_seed(5), temperature, top_k)
        runs = []
        for _ in range(2):
            try:
                g = torch.Generator().manual_seed(5)
                got = user(forward, w, n_head, bos, SAMPLE_NUM, g, temperature, top_k, SAMPLE_LEN)
            except NotImplementedError:
                return not_written(name)
            except Refused as e:
                return e.result
            except Exception as e:
                text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                if "must match the size" in text or "out of range" in text:
                    text += (
                        ". Hint: the context grew longer than the block of T = "
                        f"{w['pos_emb'].shape[0]} tokens, the rows the position table has"
                    )
                return CheckResult(False, f"✗ {name}: your function raised {text}")
            runs.append(_as_names(got))
        got = runs[0]
        setting = f"temperature {temperature}, top_k {top_k}"
        if got is None:
            return CheckResult(
                False, f"✗ {name}: return one list of token ids per name (ints, no BOS)"
            )
        if got == expected:
            continue
        if runs[0] != runs[1]:
            return CheckResult(
                False,
                f"✗ {name}: two runs with equal generators gave different names: the draws do "
                "not come from the generator passed in",
            )
        for hint, wrong in SAMPLE_MISTAKES:
            wrong_names = wrong(
                forward,
                w,
                n_head,
                bos,
                SAMPLE_NUM,
                torch.Generator().manual_seed(5),
                temperature=temperature,
                top_k=top_k,
                max_len=SAMPLE_LEN,
            )
            if got == wrong_names:
                return CheckResult(False, f"✗ {name}: {hint} ({setting})")
        if len(got) != len(expected):
            return CheckResult(False, f"✗ {name}: returned {len(got)} names for num = {SAMPLE_NUM}")
        row = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
        at = next(
            (j for j, (a, b) in enumerate(zip(got[row], expected[row], strict=False)) if a != b),
            min(len(got[row]), len(expected[row])),
        )
        return CheckResult(
            False,
            f"✗ {name}: at {setting}, name {row} parts from the library's at token {at} "
            f"({got[row][: at + 1]} against {expected[row][: at + 1]})",
        )
    return CheckResult(
        True,
        f"✓ {name}: the same names as gptlib's generate with equal generators, at "
        f"{len(SAMPLE_SETTINGS)} settings of temperature and top_k",
    )


# ---------------------------------------------------------------------------------------------
# The cache: slips and checks


def _cached(
    x,
    w_qkv,
    w_proj,
    n_head,
    past,
    *,
    mask="offset",
    use_past=True,
    past_after=False,
    keep="all",
    swap=False,
):
    B, n, d = x.shape
    d_h = d // n_head
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, d_h).transpose(1, 2) for t in (q, k, v))
    k_new, v_new = k, v
    if past is not None and use_past:
        k = torch.cat([k, past[0]] if past_after else [past[0], k], dim=2)
        v = torch.cat([v, past[1]] if past_after else [past[1], v], dim=2)
    p = k.size(2) - n
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)
    if mask != "none":
        future = torch.triu(
            torch.ones(n, p + n, dtype=torch.bool), diagonal=p + 1 if mask == "offset" else 1
        )
        scores = scores.masked_fill(future, float("-inf"))
    y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, n, d) @ w_proj.T
    kv = (k_new, v_new) if keep == "new" else (k, v)
    return y, (kv[1], kv[0]) if swap else kv


def _cached_slip(**switches) -> Callable:
    return lambda *args: _flat(_cached(*args, **switches))


def _flat(result):
    out, (k, v) = result
    return out, k, v


CACHED_MISTAKES = [
    (
        "no mask: when several new tokens come at once (the prefill), each sees the ones after it",
        _cached_slip(mask="none"),
    ),
    (
        "the mask is the plain square one, laid over the first keys: with p positions cached, "
        "new token i stands at position p + i and sees keys 0 .. p + i, the cached ones included",
        _cached_slip(mask="square"),
    ),
    (
        "the new tokens attend only to each other: the keys and values in `past` never joined "
        "theirs",
        _cached_slip(use_past=False),
    ),
    (
        "the cached keys and values went after the new ones: position order is the cache first",
        _cached_slip(past_after=True),
    ),
    (
        "the output is right, but the returned (k, v) hold only the new positions: the next call "
        "needs every position so far",
        _cached_slip(keep="new"),
    ),
    ("the output is right, but the returned pair is (v, k)", _cached_slip(swap=True)),
]

# (positions already cached, new tokens): a prefill, one decode step, a chunk of three.
CACHED_CASES = ((0, 5), (4, 1), (3, 3))


def _cached_inputs(case: tuple[int, int]) -> Callable[[torch.Generator], tuple]:
    from gptlib.exercises.capstone import _B, _D, _H

    p, n = case

    def make(g):
        bw = _weights(g)["blocks"][0]
        x = torch.randn(_B, n, _D, generator=g)
        d_h = _D // _H
        past = None
        if p:
            past = (
                torch.randn(_B, _H, p, d_h, generator=g),
                torch.randn(_B, _H, p, d_h, generator=g),
            )
        return x, 2.0 * bw["qkv"], bw["attn_proj"], _H, past

    return make


@solved_by(cached_attention)
def check_gpt_cached_attention(fn: Callable) -> CheckResult:
    """`cached_attention(x, w_qkv, w_proj, n_head, past)` on random inputs (d=12, 3 heads): a
    prefill of 5 tokens (past None), one new token after 4 cached, three after 3. The output and
    the returned keys and values are compared."""
    name = "cached_attention"

    def flat(*args):
        return _flat(fn(*args))

    result = None
    for case in CACHED_CASES:
        result = compare(
            name,
            flat,
            lambda *a: _flat(cached_attention(*a)),
            _cached_inputs(case),
            mistakes=CACHED_MISTAKES,
            trials=1,
        )
        if not result:
            if "cannot unpack" in result.message or "not iterable" in result.message:
                return CheckResult(
                    False, f"✗ {name}: return two things, the output and the pair (k, v)"
                )
            return result
    return CheckResult(
        True,
        f"✓ {name}: matches the reference for a prefill, a decode step and a chunk of three "
        "new tokens, output and cache",
    )


def _fc(w, idx, cache, n_head, *, positions="cached", store=True, append=False):
    p = cache[0][0].size(2) if cache else 0
    n = idx.size(1)
    first = p if positions == "cached" else 0
    x = w["tok_emb"][idx] + w["pos_emb"][first : first + n]
    for i, bw in enumerate(w["blocks"]):
        past = cache[i] if i < len(cache) else None
        a, kv = cached_attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head, past)
        if store and (past is None or append):
            cache.append(kv)
        elif store:
            cache[i] = kv
        x = x + a
        x = x + mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T


FORWARD_CACHED_MISTAKES = [
    (
        "every call numbered its tokens from 0: with p positions cached, the new tokens take rows "
        "p, p + 1, ... of the position table",
        lambda *a: _fc(*a, positions="zero"),
    ),
    (
        "the cache stays empty: each call sees only its own tokens, as if the text began there",
        lambda *a: _fc(*a, store=False),
    ),
    (
        "each call appended another entry to the cache; block i reads and writes its own entry "
        "cache[i], replaced by the keys and values so far",
        lambda *a: _fc(*a, append=True),
    ),
]

# How the 8 tokens are fed: a prefill, then pieces.
FORWARD_CACHED_SCHEDULES = ((4, 1, 1, 1, 1), (2, 3, 1, 1, 1))


def _feed(fn, w, idx, n_head, schedule) -> tuple[list[torch.Tensor], list]:
    cache: list = []
    outs, at = [], 0
    with torch.no_grad():
        for n in schedule:
            outs.append(fn(w, idx[:, at : at + n], cache, n_head))
            at += n
    return outs, cache


@solved_by(forward_cached)
def check_gpt_forward_cached(fn: Callable) -> CheckResult:
    """`forward_cached(w, idx, cache, n_head)` with the trained microgpt: 8 ids per row fed as a
    prefill then pieces, starting from an empty list; the logits of every call must equal the
    plain forward's at the same positions (1e-5). The pieces it calls by name (cached_attention,
    rmsnorm, mlp) are checked on their own first; then it runs with the reference pieces in
    their place, so that what is compared is its own lines."""
    name = "forward_cached"
    checks = {
        "cached_attention": check_gpt_cached_attention,
        "rmsnorm": _check_rmsnorm,
        "mlp": _check_mlp,
    }
    replacements = {}
    for piece, check in checks.items():
        own = _readers_piece(fn, piece)
        if own is None:
            continue
        result = check(own)
        if not result:
            return _first(name, piece, result)
        replacements[piece] = globals()[piece]
    user = guard(name, _with_pieces(fn, replacements) if replacements else fn)
    model = load_asset(ASSET).model
    w, n_head = gpt_weights(model), model.cfg.n_head
    idx = torch.randint(
        0, w["tok_emb"].shape[0], (3, 8), generator=torch.Generator().manual_seed(8)
    )
    expected_all = forward(w, idx, n_head)  # [3, 8, V]
    for schedule in FORWARD_CACHED_SCHEDULES:
        try:
            outs, cache = _feed(user, w, idx, n_head, schedule)
        except NotImplementedError:
            return not_written(name)
        except Refused as e:
            return e.result
        except Exception as e:
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        at = 0
        for call, (n, out) in enumerate(zip(schedule, outs, strict=True)):
            expected = expected_all[:, at : at + n]
            shape = tuple(getattr(out, "shape", ()))
            what = "the prefill" if call == 0 else f"call {call + 1} (positions {at}..{at + n - 1})"
            if shape != tuple(expected.shape):
                return CheckResult(
                    False,
                    f"✗ {name}: {what} returned shape {list(shape)}, expected "
                    f"{list(expected.shape)}: the logits of the new tokens only",
                )
            if not torch.allclose(out, expected, atol=1e-5, rtol=1e-4):
                for hint, wrong in FORWARD_CACHED_MISTAKES:
                    wrong_outs, _ = _feed(wrong, w, idx, n_head, schedule)
                    if all(
                        torch.allclose(a, b, atol=1e-5, rtol=1e-4)
                        for a, b in zip(outs, wrong_outs, strict=True)
                    ):
                        return CheckResult(False, f"✗ {name}: {hint}")
                diff = float((out - expected).abs().max())
                return CheckResult(
                    False,
                    f"✗ {name}: {what} differs from the plain forward at the same positions "
                    f"(largest difference {diff:.3g})"
                    + ("; the calls before it match" if call else ""),
                )
            at += n
        kv_shape = [3, n_head, 8, w["tok_emb"].shape[1] // n_head]
        if len(cache) != len(w["blocks"]) or list(cache[0][0].shape) != kv_shape:
            return CheckResult(
                False,
                f"✗ {name}: the logits match, but after 8 tokens the cache should hold one "
                f"(k, v) per block, each {kv_shape}",
            )
    return CheckResult(
        True,
        f"✓ {name}: fed as a prefill and then piece by piece ({len(FORWARD_CACHED_SCHEDULES)} "
        "ways), every call's logits equal the plain forward's at the same positions",
    )


# ---------------------------------------------------------------------------------------------
# The ladder, climbed with the reader's own pieces and loop


def rung_weights(model: torch.nn.Module) -> dict:
    """A rung of `gptlib.ladder` as a dict of trainable tensors in `gpt_weights`' layout. A rung
    without attention has no position table; it gets one of zeros, which its forward never
    reads (and so the optimizer never moves)."""
    if isinstance(model, GPT):
        return trainable(gpt_weights(model))
    d = model.cfg.n_embd
    bw = {}
    if model.attn is not None:
        bw.update(qkv=model.attn.qkv.weight, attn_proj=model.attn.proj.weight)
    if model.mlp is not None:
        bw.update(fc=model.mlp.fc.weight, mlp_proj=model.mlp.proj.weight)
    pos = (
        model.pos_emb.weight if model.pos_emb is not None else torch.zeros(model.cfg.block_size, d)
    )
    return trainable(
        {
            "tok_emb": model.tok_emb.weight,
            "pos_emb": pos,
            "blocks": [bw],
            "lm_head": model.lm_head.weight,
        }
    )


def rung_forwards(embed: Callable, attention: Callable, mlp: Callable, forward: Callable) -> dict:
    """Each rung's forward(w, idx, n_head), made of the pieces given."""

    def bigram(w, idx, n_head):
        return w["tok_emb"][idx] @ w["lm_head"].T  # each position sees its own token only

    def attention_only(w, idx, n_head):
        b = w["blocks"][0]
        x, _ = attention(embed(idx, w["tok_emb"], w["pos_emb"]), b["qkv"], b["attn_proj"], n_head)
        return x @ w["lm_head"].T  # no residual path: attention's output replaces x

    def with_mlp(w, idx, n_head):
        b = w["blocks"][0]
        x, _ = attention(embed(idx, w["tok_emb"], w["pos_emb"]), b["qkv"], b["attn_proj"], n_head)
        return mlp(x, b["fc"], b["mlp_proj"]) @ w["lm_head"].T

    return dict(
        zip(RUNGS, (bigram, attention_only, attention_only, with_mlp, forward), strict=True)
    )


def climb_yours(
    corpus,
    *,
    embed: Callable,
    attention: Callable,
    mlp: Callable,
    forward: Callable,
    train_fn: Callable,
    steps: int = 3000,
    batch_size: int = 32,
    max_lr: float = 1e-2,
    seed: int = 0,
    eval_batches: int = 50,
) -> list[Rung]:
    """`gptlib.ladder.climb(..., min_lr=0.0)` with the reader's pieces and loop: every rung
    starts from the library rung's initial weights (same seed), is trained by `train_fn` (100
    warmup steps, cosine to 0, clip 1.0) and scored on the validation tokens."""
    from gptlib.exercises.capstone import estimate_forward_loss

    forwards = rung_forwards(embed, attention, mlp, forward)
    results = []
    for name in RUNGS:
        torch.manual_seed(seed)
        model = build_rung(name, corpus.vocab_size)
        n_head = model.cfg.n_head
        w = rung_weights(model)
        optimizer = gpt_optimizer(w, lr=max_lr)
        train_fn(
            forwards[name],
            w,
            optimizer,
            corpus.train,
            steps,
            batch_size,
            max_lr,
            100,
            1.0,
            seed,
            n_head,
        )
        val = estimate_forward_loss(forwards[name], w, corpus.val, n_head, n_batches=eval_batches)
        results.append(Rung(name, sum(p.numel() for p in model.parameters()), val))
    return results
