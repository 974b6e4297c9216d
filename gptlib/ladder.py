"""What each piece buys: microgpt-sized models that add one piece at a time.

Every rung is built from gptlib's own modules (the embedding tables, `CausalSelfAttention`, `MLP`,
the norms inside `Block`), at microgpt's sizes (d 16, block 8), and trained the same way:

1. `bigram`: token table -> output head; each prediction sees only the current token.
2. `one head`: + the position table and one causal attention head of width d, no residual.
3. `four heads`: the same attention cut into 4 heads of d / 4.
4. `+ MLP`: attention, then the position-wise MLP, still no residual and no norm.
5. `+ residuals and norms`: the full pre-norm microgpt, which is gptlib's `GPT` itself.

Notebook 14 (your gpt) teaches this module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from gptlib.attention import CausalSelfAttention
from gptlib.config import GPTConfig, microgpt
from gptlib.data import Corpus
from gptlib.mlp import MLP
from gptlib.model import GPT
from gptlib.train import estimate_loss, train

RUNGS = ("bigram", "one head", "four heads", "+ MLP", "+ residuals and norms")


class PartialGPT(nn.Module):
    """A GPT with pieces left out: embeddings -> [attention] -> [MLP] -> output head, with no
    residual path and no norm. Same interface as `GPT` (forward(idx, labels) -> logits, loss),
    so `train` and `estimate_loss` take it.

    Not taught in a notebook: notebook 14's ladder is built from it through gptlib.exercises."""

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

    Not taught in a notebook: notebook 14's ladder is built from it through gptlib.exercises."""
    if name not in RUNGS:
        raise ValueError(f"unknown rung {name!r}; the rungs are {', '.join(RUNGS)}")
    cfg = microgpt(vocab_size, n_head=1 if name == "one head" else 4)
    if name == "+ residuals and norms":
        return GPT(cfg)
    return PartialGPT(cfg, attention=name != "bigram", mlp=name == "+ MLP")


@dataclass
class Rung:
    """Not taught in a notebook: notebook 14's ladder is built from it through gptlib.exercises."""

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

    Not taught in a notebook: notebook 14's ladder is built from it through gptlib.exercises."""
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
