"""The count-based bigram model: the baseline a trained GPT has to beat.

Notebook 09 (loss) teaches this module."""

from __future__ import annotations

import torch


def bigram_counts(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """counts[a, b] = how often token b follows token a, [V, V].

    Taught in notebook 09 (loss)."""
    pairs = tokens[:-1] * vocab_size + tokens[1:]
    return torch.bincount(pairs, minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)


def bigram_probs(tokens: torch.Tensor, vocab_size: int, smoothing: float = 1.0) -> torch.Tensor:
    """P(next | current) from counts, with add-`smoothing` so unseen pairs are not impossible.

    Not taught in a notebook: the smoothed step between bigram_counts and bigram_loss."""
    counts = bigram_counts(tokens, vocab_size).double() + smoothing
    return (counts / counts.sum(dim=1, keepdim=True)).float()


def bigram_loss(
    train_tokens: torch.Tensor, eval_tokens: torch.Tensor, vocab_size: int, smoothing: float = 1.0
) -> float:
    """Mean -log P(next | current) over `eval_tokens`, in nats per token.

    Taught in notebook 09 (loss)."""
    probs = bigram_probs(train_tokens, vocab_size, smoothing)
    return float(-probs[eval_tokens[:-1], eval_tokens[1:]].log().mean())
