"""Autoregressive sampling: one new token per step, appended to the context.

Two paths give the same tokens for the same generator while the sequence fits in `block_size`:
`use_cache=True` (default) keeps every layer's keys and values in a `KVCache` and runs only the
new position each step; `use_cache=False` is the textbook's loop, which re-runs the whole
(cropped) context every step.

At `block_size` the two part ways, because learned absolute positions cannot slide. The
recompute path crops the context to its last `block_size` tokens every step (a sliding window,
every position re-numbered each step). The cache path cannot re-number what it stored, so when
the cache is full it is rebuilt by a fresh prefill of the last `block_size // 2` tokens and then
grows again; its context therefore shrinks to half a block and refills. Neither path ever indexes
past the position table.
"""

from __future__ import annotations

import math

import torch

from gptlib.kvcache import KVCache
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer


def _check_sampling(temperature: float, top_k: int | None) -> None:
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0, got {temperature!r}")
    if temperature < 0:
        raise ValueError(
            f"temperature must be >= 0, got {temperature}; use 0 for greedy (argmax) decoding "
            "and values above 0 to sample"
        )
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be a positive integer or None, got {top_k!r}")


def next_token_probs(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None
) -> torch.Tensor:
    """The distribution the next token is drawn from, [..., V]. Temperature 0 is greedy: all
    the mass on the argmax (dividing by 0 would give inf/nan)."""
    _check_sampling(temperature, top_k)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).to(logits.dtype)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # k-th largest per row
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(dim=-1)


def pick_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits [B, V] -> next ids [B, 1]."""
    if temperature == 0:
        _check_sampling(temperature, top_k)
        return logits.argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature, top_k)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Extend idx [B, n0] by up to `max_new_tokens` tokens and return [B, n0 + new].

    temperature > 0 samples, temperature == 0 takes the argmax, a negative one raises. With
    `stop_token`, a row that produced it keeps repeating it, and the loop ends once every row has.
    The model is put in eval mode (dropout off) and restored afterwards.
    """
    _check_sampling(temperature, top_k)
    if idx.dim() != 2 or idx.size(1) == 0:
        raise ValueError(f"idx must be [B, n0] with n0 >= 1 tokens of prompt, got {tuple(idx.shape)}")
    T = model.cfg.block_size
    was_training = model.training
    model.eval()
    try:
        finished = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
        cache = KVCache(model.cfg, idx.size(0), idx.device, model.lm_head.weight.dtype) if use_cache else None
        for step in range(max_new_tokens):
            if cache is None:
                logits, _ = model(idx[:, -T:])  # the whole context, every step
            elif step == 0 or cache.length == T:
                cache.reset()  # prefill; when full, rebuild from the last half block
                logits, _ = model(idx[:, -(T if step == 0 else T // 2) :], cache=cache)
            else:
                logits, _ = model(idx[:, -1:], cache=cache)  # one new position
            nxt = pick_next(logits[:, -1, :], temperature, top_k, generator)  # [B, 1]
            if stop_token is not None:
                nxt = nxt.masked_fill(finished[:, None], stop_token)
                finished |= nxt[:, 0] == stop_token
            idx = torch.cat([idx, nxt], dim=1)
            if stop_token is not None and bool(finished.all()):
                break
    finally:
        model.train(was_training)
    return idx


def sample_documents(
    model: GPT,
    tokenizer: CharTokenizer,
    num: int,
    max_len: int = 40,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> list[str]:
    """New documents (names, for the names corpus): start at BOS, stop at the next BOS."""
    bos = tokenizer.bos_id
    if bos is None:
        raise ValueError("sample_documents needs a tokenizer with a BOS token (a document corpus)")
    device = model.lm_head.weight.device
    start = torch.full((num, 1), bos, dtype=torch.long, device=device)
    out = generate(model, start, max_len, temperature, top_k, generator, bos, use_cache)
    docs = []
    for row in out[:, 1:].tolist():
        cut = row.index(bos) if bos in row else len(row)
        docs.append(tokenizer.decode(row[:cut]))
    return docs


def complete(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> str:
    """Continue a text prompt and return prompt + continuation, decoded."""
    device = model.lm_head.weight.device
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    out = generate(model, idx, max_new_tokens, temperature, top_k, generator, None, use_cache)
    return tokenizer.decode(out[0].tolist())
