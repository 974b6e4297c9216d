"""What each piece buys: microgpt-sized models that add one piece at a time.

Every rung is built from gptlib's own modules (the embedding tables, `CausalSelfAttention`, `MLP`,
the norms inside `Block`), at microgpt's sizes (d 16, block 8), and trained the same way:

1. `bigram`: token table -> output head; each prediction sees only the current token.
2. `one head`: + the position table and one causal attention head of width d, no residual.
3. `four heads`: the same attention cut into 4 heads of d / 4.
4. `+ MLP`: attention, then the position-wise MLP, still no residual and no norm.
5. `+ residuals and norms`: the full pre-norm microgpt, which is gptlib's `GPT` itself.

`climb_yours` climbs the same ladder on plain tensors (`gpt_weights`), each rung run and trained by
functions handed in (the reader's pieces, forward and loop); this module imports none of them.

Notebook 14 (your gpt) teaches this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

from gptlib.attention import CausalSelfAttention
from gptlib.config import GPTConfig, microgpt
from gptlib.data import Corpus, sample_batch
from gptlib.language import said
from gptlib.mlp import MLP
from gptlib.model import GPT
from gptlib.train import estimate_loss, train

# The rungs' names: English to the code, said in the reader's language where a table shows them.
RUNGS = ("bigram", said("one head"), said("four heads"), "+ MLP", said("+ residuals and norms"))


class PartialGPT(nn.Module):
    """A GPT with pieces left out: embeddings -> [attention] -> [MLP] -> output head, with no
    residual path and no norm. Same interface as `GPT` (forward(idx, labels) -> logits, loss),
    so `train` and `estimate_loss` take it.

    Not taught in a notebook: notebook 14's ladder is built from it by climb_yours."""

    def __init__(self, cfg: GPTConfig, attention: bool = True, mlp: bool = True):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # [V, d]
        # Without attention a position cannot see any other token, so its place is no use.
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd) if attention else None
        self.attn = CausalSelfAttention(cfg) if attention else None
        self.mlp = MLP(cfg) if mlp else None
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)  # [V, d]
        self.apply(GPT._init_weights)  # the same N(0, 0.02) start as GPT

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: torch.Tensor, labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.tok_emb(idx)  # [B, n, d]
        if self.attn is not None:
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.attn(x + self.pos_emb(pos))  # replaces x: nothing carries it around
        if self.mlp is not None:
            x = self.mlp(x)
        logits = self.lm_head(x)  # [B, n, V]
        return logits, None if labels is None else GPT.loss(logits, labels)


def build_rung(name: str, vocab_size: int = 27) -> nn.Module:
    """One rung of the ladder, freshly initialised (seed torch first for a repeatable start).

    Not taught in a notebook: notebook 14's ladder is built from it by climb_yours."""
    if name not in RUNGS:
        raise ValueError(f"unknown rung {name!r}; the rungs are {', '.join(RUNGS)}")
    cfg = microgpt(vocab_size, n_head=1 if name == "one head" else 4)
    if name == "+ residuals and norms":
        return GPT(cfg)
    return PartialGPT(cfg, attention=name != "bigram", mlp=name == "+ MLP")


@dataclass
class Rung:
    """Not taught in a notebook: notebook 14's ladder is built from it by climb_yours."""

    name: str
    parameters: int
    val_loss: float


def climb(
    corpus: Corpus,
    steps: int = 3000,
    batch_size: int = 32,
    max_lr: float = 1e-2,
    seed: int = 0,
    eval_batches: int = 50,
    min_lr: float | None = None,
) -> list[Rung]:
    """Train every rung with the same steps, batches, schedule (100 warmup steps, then a cosine
    down to `min_lr`, a tenth of max_lr by default) and seed, and measure each on the validation
    tokens.

    Not taught in a notebook: notebook 14's ladder is built from it by climb_yours."""
    results = []
    for name in RUNGS:
        torch.manual_seed(seed)
        model = build_rung(name, corpus.vocab_size)
        train(
            model,
            corpus.train,
            steps,
            batch_size,
            max_lr=max_lr,
            warmup=100,
            schedule="cosine",
            min_lr=max_lr / 10 if min_lr is None else min_lr,
            seed=seed,
            eval_every=0,
        )
        val = estimate_loss(model, corpus.val, n_batches=eval_batches)
        results.append(Rung(name, model.num_parameters(), val))
    return results


# ---------------------------------------------------------------------------------------------
# The weights as plain tensors, and the ladder climbed by the functions handed in

_INNER = dict(ln1="ln1", qkv="attn.qkv", attn_proj="attn.proj", ln2="ln2", fc="mlp.fc",
              mlp_proj="mlp.proj")  # fmt: skip


def gpt_weights(model: nn.Module) -> dict:
    """Copies of the weights of a `GPT` or a rung (one without attention gets a position table of
    zeros): {"tok_emb", "pos_emb", "blocks": [{"ln1", "qkv", "attn_proj", "ln2", "fc",
    "mlp_proj"}], "ln_f", "lm_head"}, those the model has, every matrix [out, in].

    Taught in notebook 14 (your gpt)."""
    cfg = model.cfg
    given = (cfg.norm, cfg.norm_placement, cfg.activation, cfg.bias)
    if given != ("rmsnorm", "pre", "relu", False):
        raise ValueError(
            "gpt_weights reads a microgpt-style model (pre-norm RMSNorm, ReLU, no biases), got "
            f"(norm, placement, activation, bias) = {given}; build it with gptlib.microgpt"
        )
    s = {k.removesuffix(".weight"): t.detach().clone() for k, t in model.state_dict().items()}
    s.setdefault("pos_emb", torch.zeros(cfg.block_size, cfg.n_embd))
    heads = [f"blocks.{i}." for i in range(cfg.n_layer)] if isinstance(model, GPT) else [""]
    blocks = [{k: s[b + m] for k, m in _INNER.items() if b + m in s} for b in heads]
    return {"tok_emb": s["tok_emb"], "pos_emb": s["pos_emb"], "blocks": blocks,
            **{k: s[k] for k in ("ln_f", "lm_head") if k in s}}  # fmt: skip


def flat_names(w: dict) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every weight of `gpt_weights`, in `GPT.state_dict()`'s order.

    Taught in notebook 14 (your gpt)."""
    blocks = [(f"blocks.{i}.{k}", t) for i, bw in enumerate(w["blocks"]) for k, t in bw.items()]
    return [x for k, t in w.items() for x in (blocks if k == "blocks" else [(k, t)])]


def trainable(w: dict) -> dict:
    """Copies of the weights as leaf tensors that keep a gradient.

    Taught in notebook 14 (your gpt)."""
    leaf = lambda t: t.detach().clone().requires_grad_()  # noqa: E731
    return {k: [trainable(b) for b in v] if k == "blocks" else leaf(v) for k, v in w.items()}


def gpt_optimizer(w: dict, lr: float = 1e-2, weight_decay: float = 0.1) -> torch.optim.AdamW:
    """`gptlib.train.make_optimizer` for a dict of weights: AdamW, betas (0.9, 0.95), matrices and
    tables decayed, gains (1-D) not.

    Taught in notebook 14 (your gpt)."""
    ts = [t for _, t in flat_names(w)]
    groups = [dict(params=[t for t in ts if t.dim() >= 2], weight_decay=weight_decay),
              dict(params=[t for t in ts if t.dim() < 2], weight_decay=0.0)]  # fmt: skip
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=True)


@torch.no_grad()
def estimate_forward_loss(fn, w, tokens, n_head, batch_size=32, n_batches=50, seed=1234) -> float:
    """`gptlib.train.estimate_loss` for a fn(w, idx, n_head) -> logits: the same windows (same
    seed, same batches), scored by `GPT.loss`.

    Taught in notebook 14 (your gpt)."""
    g = torch.Generator().manual_seed(seed)
    block = min(w["pos_emb"].shape[0], tokens.numel() - 1)
    batches = [sample_batch(tokens, batch_size, block, g) for _ in range(n_batches)]
    return sum(float(GPT.loss(fn(w, idx, n_head), labels)) for idx, labels in batches) / n_batches


def rung_forwards(p, forward_fn: Callable) -> dict:
    """Each rung's fn(w, idx, n_head) -> logits, made of the pieces `p` (embed, qkv_split,
    split_heads, causal_attention, merge_heads, mlp_forward) and, for the last rung, forward_fn(w,
    idx, n_head, p).

    Not taught in a notebook: climb_yours builds the rungs of notebook 14 with it."""

    def attended(w, idx, n_head):  # no residual path: attention's output replaces x
        b, x = w["blocks"][0], p.embed(idx, w["tok_emb"], w["pos_emb"])
        q, k, v = (p.split_heads(t, n_head) for t in p.qkv_split(x, b["qkv"]))
        return p.merge_heads(p.causal_attention(q, k, v)) @ b["attn_proj"].T

    def with_mlp(w, idx, n_head):
        b = w["blocks"][0]
        return p.mlp_forward(attended(w, idx, n_head), b["fc"], b["mlp_proj"], torch.relu)

    def bigram(w, idx, n_head):
        return w["tok_emb"][idx]  # each position sees its own token only

    outs = (bigram, attended, attended, with_mlp)
    heads = [lambda w, idx, n_head, f=f: f(w, idx, n_head) @ w["lm_head"].T for f in outs]
    full = lambda w, idx, n_head: forward_fn(w, idx, n_head, p)  # noqa: E731
    return dict(zip(RUNGS, [*heads, full], strict=True))


def climb_yours(corpus: Corpus, *, pieces, forward: Callable, train_fn: Callable, steps=3000,
                batch_size=32, max_lr=1e-2, seed=0, eval_batches=50) -> list[Rung]:  # fmt: skip
    """`climb(..., min_lr=0.0)` with the pieces, forward and loop given: every rung starts from the
    library rung's initial weights (same seed), as plain tensors, is trained by
    train_fn(fn, pieces.lm_loss, w, optimizer, tokens, steps, batch_size, max_lr, 100, 1.0, seed,
    n_head) (100 warmup steps, cosine to 0, clip 1.0) and scored on the validation tokens.

    Taught in notebook 14 (your gpt)."""
    forwards, results = rung_forwards(pieces, forward), []
    for name in RUNGS:
        torch.manual_seed(seed)
        model = build_rung(name, corpus.vocab_size)
        w, h = trainable(gpt_weights(model)), model.cfg.n_head
        opt = gpt_optimizer(w, lr=max_lr)
        train_fn(forwards[name], pieces.lm_loss, w, opt, corpus.train, steps, batch_size, max_lr,
                 100, 1.0, seed, h)  # fmt: skip
        val = estimate_forward_loss(forwards[name], w, corpus.val, h, n_batches=eval_batches)
        results.append(Rung(name, model.num_parameters(), val))
    return results
