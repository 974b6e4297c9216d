"""Autoregressive sampling: one new token per step, appended to the context.

Two paths give the same tokens for the same generator while the sequence fits in `block_size`:
`use_cache=True` (default) keeps every layer's keys and values in a `KVCache`: one prefill pass
over the prompt, then each step runs only the newest token, which attends to the cached K, V and
its own. `use_cache=False` is the textbook's loop, which re-runs the whole (cropped) context
every step and keeps nothing.

At `block_size` the two part ways, because learned absolute positions cannot slide: a cached key
was computed with its position's row of the position table baked in and cannot be re-numbered.
- The recompute path crops the context to its last `block_size` tokens every step: a sliding
  window, every position re-numbered each step.
- The cache path fills the cache up to `block_size` positions. At the next step it rebuilds it:
  `reset()`, then one prefill of the last `block_size // 2` tokens (at least 1) at positions
  0..block_size//2 - 1, the newest token included. The cache then holds `block_size // 2`
  positions, grows by one per step back to `block_size`, and is rebuilt again; a rebuild happens
  every `block_size - block_size // 2 + 1` steps, and each token is predicted from a context of
  `block_size // 2` to `block_size` tokens.
Neither path ever indexes past the position table.

The sampling options are keyword-only in every function here, after the tensors and lengths:
`generate(model, idx, 50, temperature=0.8, top_k=10)`, `next_token_probs(logits, temperature=0.5)`.

Notebook 12 (generation) teaches this module.
"""

from __future__ import annotations

import math

import torch

from gptlib.kvcache import KVCache
from gptlib.language import _
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None = None) -> None:
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise ValueError(
            _("temperature must be a finite number >= 0, got {value}").format(
                value=repr(temperature)
            )
        )
    if temperature < 0:
        raise ValueError(
            _(
                "temperature must be >= 0, got {value}; use 0 for greedy (argmax) decoding "
                "and values above 0 to sample"
            ).format(value=temperature)
        )
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(
            _("top_k must be a positive integer or None, got {value}").format(value=repr(top_k))
        )
    if top_p is not None and (
        isinstance(top_p, bool)
        or not isinstance(top_p, (int, float))
        or not (0 < top_p <= 1)  # also refuses nan
    ):
        raise ValueError(
            _(
                "top_p must be a number in (0, 1] or None, got {value}: the share of probability "
                "mass the kept tokens must reach (1 keeps every token)"
            ).format(value=repr(top_p))
        )


def filter_logits(
    logits: torch.Tensor, *, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """logits [..., V] -> logits [..., V] with the removed tokens at -inf; the softmax of the
    result renormalises the kept ones.

    top_k keeps the k largest logits of each row (with every token tied with the k-th). top_p
    (nucleus) then keeps, in the distribution left by top_k, the most likely tokens until their
    probabilities add up to at least p: the token that crosses p is kept, and so is every token
    tied with the last one kept. None (or k >= V, p = 1) keeps every token.

    Taught in notebook 12 (generation).
    """
    _check_sampling(1.0, top_k, top_p)
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # k-th largest per row
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        probs = logits.softmax(dim=-1)  # renormalised over what top_k kept
        ranked = probs.sort(dim=-1, descending=True).values  # [..., V], largest first
        mass_before = ranked.cumsum(dim=-1) - ranked  # mass of the tokens ranked above each
        n_keep = (mass_before < top_p).sum(dim=-1, keepdim=True)  # >= 1: the first always stays
        smallest_kept = ranked.gather(-1, n_keep - 1)  # [..., 1]
        logits = logits.masked_fill(probs < smallest_kept, float("-inf"))
    return logits


def next_token_probs(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The distribution the next token is drawn from, [..., V]: the logits divided by the
    temperature, filtered by top_k and top_p (`filter_logits`), softmax. Temperature 0 is greedy:
    all the mass on the argmax (dividing by 0 would give inf/nan).

    Taught in notebook 08 (logits)."""
    _check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.size(-1)).to(logits.dtype)
    return filter_logits(logits / temperature, top_k=top_k, top_p=top_p).softmax(dim=-1)


def pick_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """logits [B, V] -> next ids [B, 1].

    Taught in notebook 08 (logits)."""
    if temperature == 0:
        _check_sampling(temperature, top_k, top_p)
        return logits.argmax(dim=-1, keepdim=True)
    probs = next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def generate(
    model: GPT,
    idx: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    stop_token: int | None = None,
    use_cache: bool = True,
) -> torch.Tensor:
    """Extend idx [B, n0] by up to `max_new_tokens` tokens and return [B, n0 + new].

    temperature > 0 samples (from the top_k / top_p filtered distribution when given, see
    `filter_logits`), temperature == 0 takes the argmax, a negative one raises. With
    `stop_token`, a row that produced it keeps repeating it, and the loop ends once every row has.
    The model is put in eval mode (dropout off) and restored afterwards.

    use_cache=True keeps K and V between steps; use_cache=False re-runs the context each step.
    Both give the same tokens while n0 + new <= block_size + 1 (every prediction made from at
    most block_size tokens); past that the recompute path slides a block_size window and the
    cache path rebuilds itself from the last block_size // 2 tokens (see the module docstring).

    Taught in notebook 12 (generation).
    """
    _check_sampling(temperature, top_k, top_p)
    if idx.dim() != 2 or idx.size(1) == 0:
        raise ValueError(
            _("idx must be [B, n0] with n0 >= 1 tokens of prompt, got {shape}").format(
                shape=tuple(idx.shape)
            )
        )
    was_training = model.training
    model.eval()
    try:
        out = _extend(
            model, idx, max_new_tokens, temperature, top_k, generator, stop_token, use_cache, top_p
        )
    finally:
        model.train(was_training)
    # Tensors made under inference_mode can never be saved for a backward pass; hand back an
    # ordinary copy so that the result can be fed to a training step like any other batch.
    return out.clone()


# inference_mode rather than no_grad: no autograd bookkeeping at all (no version counters, no
# view tracking), which a decode step of a few hundred tiny operations notices.
@torch.inference_mode()
def _extend(
    model, idx, max_new_tokens, temperature, top_k, generator, stop_token, use_cache, top_p=None
):
    """The sampling loop of `generate`, the model already in eval mode."""
    T = model.cfg.block_size
    keep = max(1, T // 2)  # a full cache is rebuilt from this many newest tokens
    B = idx.size(0)
    finished = torch.zeros(B, dtype=torch.bool, device=idx.device)
    dtype = model.lm_head.weight.dtype
    cache = KVCache(model.cfg, B, idx.device, dtype) if use_cache else None
    for step in range(max_new_tokens):
        if cache is None:
            logits, _unused = model(idx[:, -T:])  # the whole context, every step
        elif step == 0:
            logits, _unused = model(idx[:, -T:], cache=cache)  # prefill: the prompt in one pass
        elif cache.length == T:
            # Full, and positions cannot slide: start again from the newest `keep` tokens.
            cache.reset()
            logits, _unused = model(idx[:, -keep:], cache=cache)
        else:
            logits, _unused = model(idx[:, -1:], cache=cache)  # decode: the newest token only
        nxt = pick_next(  # [B, 1]
            logits[:, -1, :], temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )
        if stop_token is not None:
            nxt = nxt.masked_fill(finished[:, None], stop_token)
            finished |= nxt[:, 0] == stop_token
        idx = torch.cat([idx, nxt], dim=1)
        if stop_token is not None and bool(finished.all()):
            break
    return idx


def sample_documents(
    model: GPT,
    tokenizer: CharTokenizer,
    num: int,
    max_len: int = 40,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    prompt: str | None = None,
) -> list[str]:
    """New documents (names, for the names corpus): start at BOS, stop at the next BOS.

    With `prompt`, every document begins with it: the model is fed BOS + the prompt and continues
    from there, so it writes a document that starts that way ("em" -> "emma", "emily", ...). The
    returned documents include the prompt; up to `max_len` tokens are sampled after it. A prompt
    with a character outside the vocabulary, or with the BOS symbol (which ends a document), is
    refused.

    Taught in notebook 12 (generation).
    """
    bos = tokenizer.bos_id
    if bos is None:
        raise ValueError(
            _("sample_documents needs a tokenizer with a BOS token (a document corpus)")
        )
    prompt_ids = _document_prompt(tokenizer, prompt or "")
    device = model.lm_head.weight.device
    start = torch.tensor([bos, *prompt_ids], dtype=torch.long, device=device).repeat(num, 1)
    out = generate(
        model, start, max_len, temperature=temperature, top_k=top_k, top_p=top_p,
        generator=generator, stop_token=bos, use_cache=use_cache,
    )  # fmt: skip
    docs = []
    for row in out[:, 1:].tolist():  # the prompt holds no BOS: the first one ends the document
        cut = row.index(bos) if bos in row else len(row)
        docs.append(tokenizer.decode(row[:cut]))
    return docs


def _document_prompt(tokenizer: CharTokenizer, prompt: str) -> list[int]:
    """The ids of a prompt that starts a document, or a ValueError naming what cannot be in it."""
    unknown = [ch for ch in dict.fromkeys(prompt) if ch not in tokenizer.stoi]
    if unknown:
        known = "".join(tokenizer.chars)
        shown = repr(known) if len(known) <= 80 else f"{known[:80]!r}..."  # tang300 has 2,578
        raise ValueError(
            _(
                "prompt {prompt} has character(s) {chars} not in the vocabulary; a document can "
                "only use these {count}: {shown}"
            ).format(
                prompt=repr(prompt),
                chars=", ".join(map(repr, unknown)),
                count=f"{len(known):,}",
                shown=shown,
            )
        )
    if tokenizer.bos in prompt:
        raise ValueError(
            _(
                "prompt {prompt} contains the BOS symbol {bos}, which ends a document; "
                "a prompt is the start of one document"
            ).format(prompt=repr(prompt), bos=repr(tokenizer.bos))
        )
    return tokenizer.encode(prompt)


def complete(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> str:
    """Continue a text prompt and return prompt + continuation, decoded.

    Taught in notebook 12 (generation)."""
    device = model.lm_head.weight.device
    idx = torch.tensor([tokenizer.encode(prompt)], dtype=torch.long, device=device)
    out = generate(
        model, idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        generator=generator, use_cache=use_cache,
    )  # fmt: skip
    return tokenizer.decode(out[0].tolist())
