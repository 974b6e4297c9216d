"""Chapter 10, generation: one step of the sampling loop.

The reader writes `sample_step(model, idx, temperature, generator)` for a context idx [B, n] (n
may exceed the model's block_size) and a temperature > 0, and returns the next ids [B, 1]:
crop the context to its last block_size tokens, run the model, keep the last position's logits,
divide them by the temperature, take the softmax over the vocabulary and draw one id per row with
`torch.multinomial(probs, num_samples=1, generator=generator)`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare
from gptlib.model import GPT

__all__ = ["check_sample_step", "solution_sample_step"]


@torch.no_grad()
def solution_sample_step(
    model: GPT, idx: torch.Tensor, temperature: float, generator: torch.Generator
) -> torch.Tensor:
    ctx = idx[:, -model.cfg.block_size :]  # [B, n'] with n' <= T: the position table has T rows
    logits, _ = model(ctx)  # [B, n', V]: the whole context, recomputed (no cache)
    logits = logits[:, -1, :] / temperature  # [B, V]: only the last position predicts what's next
    probs = logits.softmax(dim=-1)  # [B, V], each row sums to 1
    return torch.multinomial(probs, num_samples=1, generator=generator)  # [B, 1]


@torch.no_grad()
def _first_position(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    probs = (logits[:, 0, :] / temperature).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _kept_the_start(model, idx, temperature, generator):
    logits, _ = model(idx[:, : model.cfg.block_size])
    probs = (logits[:, -1, :] / temperature).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _not_cropped(model, idx, temperature, generator):
    logits, _ = model(idx)  # refused by the model once n > block_size
    probs = (logits[:, -1, :] / temperature).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _after_softmax(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    probs = logits[:, -1, :].softmax(dim=-1) / temperature
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _multiplied(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    probs = (logits[:, -1, :] * temperature).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _no_temperature(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    return torch.multinomial(logits[:, -1, :].softmax(dim=-1), num_samples=1, generator=generator)


@torch.no_grad()
def _argmax(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    return logits[:, -1, :].argmax(dim=-1, keepdim=True)


@torch.no_grad()
def _softmax_over_batch(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    probs = (logits[:, -1, :] / temperature).softmax(dim=0)
    return torch.multinomial(probs, num_samples=1, generator=generator)


@torch.no_grad()
def _global_generator(model, idx, temperature, generator):
    logits, _ = model(idx[:, -model.cfg.block_size :])
    probs = (logits[:, -1, :] / temperature).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1)  # torch's global random stream


MISTAKES = [
    (
        "the context was not cropped, so the model refused it (longer than block_size); keep "
        "its last block_size tokens: idx[:, -model.cfg.block_size:]",
        _not_cropped,
    ),
    (
        "the context was cropped to its first block_size tokens; keep the last ones, the ones "
        "next to the token being predicted: idx[:, -model.cfg.block_size:]",
        _kept_the_start,
    ),
    (
        "you sampled from the first position's distribution; the next token is predicted by "
        "the last position: logits[:, -1, :]",
        _first_position,
    ),
    (
        # Sampling renormalises, so this also catches a temperature left out altogether.
        "the temperature has no effect: dividing the probabilities after the softmax changes "
        "nothing, since sampling renormalises them; divide the last position's logits by T "
        "before the softmax",
        _after_softmax,
    ),
    (
        "the logits are multiplied by the temperature; divide them: a low temperature must "
        "sharpen the distribution",
        _multiplied,
    ),
    (
        "you took the argmax (greedy decoding); sample instead: "
        "torch.multinomial(probs, num_samples=1, generator=generator)",
        _argmax,
    ),
    (
        "the softmax runs over the batch (dim=0); each row is a distribution over the V "
        "tokens: softmax(dim=-1)",
        _softmax_over_batch,
    ),
    (
        "two calls with equally seeded generators gave different tokens: pass the generator to "
        "the sampler, torch.multinomial(probs, num_samples=1, generator=generator)",
        _global_generator,
    ),
]

# Outputs no real token id can take, standing for two failures the model itself reveals.
REFUSED = -1  # the model raised because the context was longer than its block_size
UNSEEDED = -2  # equal generators gave different samples: the generator was not used


def _seeded(fn: Callable) -> Callable:
    """Call `fn` with a fresh generator seeded by the input's seed, twice, so that every function
    draws from the same random stream, and so that ignoring the generator is visible."""

    def run(model: GPT, idx: torch.Tensor, temperature: float, seed: int) -> torch.Tensor:
        B = idx.size(0)
        try:
            first = fn(model, idx.clone(), temperature, torch.Generator().manual_seed(seed))
        except ValueError as e:
            if "exceeds block_size" in str(e):
                return torch.full((B, 1), REFUSED)
            raise
        second = fn(model, idx.clone(), temperature, torch.Generator().manual_seed(seed))
        if not torch.equal(torch.as_tensor(first), torch.as_tensor(second)):
            return torch.full((B, 1), UNSEEDED)
        return first

    return run


def _inputs() -> Callable[[torch.Generator], tuple]:
    # Contexts longer than the block, shorter than it, and twice as long; temperatures != 1.
    plans = iter([(5, 0.7), (-3, 1.6), (8, 0.4)])

    def make(g: torch.Generator) -> tuple:
        extra, temperature = next(plans)
        cfg = textbook(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=16)
        with torch.random.fork_rng():  # building a model must not move the notebook's stream
            model = GPT(cfg).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:  # large weights: peaked, position-dependent distributions
                    p.copy_(torch.randn(p.shape, generator=g))
        idx = torch.randint(0, cfg.vocab_size, (32, cfg.block_size + extra), generator=g)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
        return model, idx, temperature, seed

    return make


def check_sample_step(sample_step: Callable) -> CheckResult:
    """Run `sample_step(model, idx, temperature, generator)` on a small random GPT for contexts
    longer and shorter than its block_size, at temperatures 0.7, 1.6 and 0.4, with equally
    seeded generators, and compare the sampled ids [B, 1]."""
    return compare(
        "sample_step",
        _seeded(sample_step),
        _seeded(solution_sample_step),
        _inputs(),
        mistakes=[(hint, _seeded(fn)) for hint, fn in MISTAKES],
        atol=0.0,
        rtol=0.0,
    )
