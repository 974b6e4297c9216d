"""Notebook 12, generation: the top-k / top-p filter, and (optional) a whole sampling step.

`filter_logits(logits, top_k, top_p)`: logits [B, V] -> logits [B, V] with the removed tokens at
-inf (a very large negative number is accepted too). top_k keeps the k largest logits of each row,
with every token tied with the k-th; top_p (nucleus) then keeps, in the distribution that top_k
left, the most likely tokens until their probabilities reach p: the token that crosses p stays, and
so does every token tied with the last one kept. None leaves a filter out. The check compares
with `gptlib.generate.filter_logits`, the filter the library's sampler uses.

`sample_step(model, idx, temperature, top_k, top_p, generator)`: context idx [B, n] (n may exceed
block_size) -> next ids [B, 1]: crop, forward, last position, then temperature 0 is the argmax;
otherwise divide by the temperature, filter, softmax and draw with the generator. The check
compares with one step of `gptlib.generate.generate` (the same as `pick_next`) on models handed
over in training mode with dropout on: like `generate`, the step samples in eval mode and leaves
the model in the mode it found.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.generate import filter_logits as library_filter_logits
from gptlib.generate import generate
from gptlib.model import GPT

__all__ = [
    "check_filter_logits",
    "check_sample_step",
    "solution_filter_logits",
    "solution_sample_step",
]

NEG_INF = float("-inf")


# --- the filter ----------------------------------------------------------------------------------


def solution_filter_logits(
    logits: torch.Tensor, top_k: int | None, top_p: float | None
) -> torch.Tensor:
    """logits [B, V] -> logits [B, V], the tokens top_k and top_p remove set to -inf."""
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # [B, 1]: the k-th largest of each row
        logits = logits.masked_fill(logits < kth, float("-inf"))  # ties with the k-th stay
    if top_p is not None and top_p < 1:
        probs = logits.softmax(dim=-1)  # [B, V]: the distribution top_k left, renormalised
        ranked = probs.sort(dim=-1, descending=True).values  # [B, V], most likely first
        mass_before = ranked.cumsum(dim=-1) - ranked  # the mass ranked above each token
        n_keep = (mass_before < top_p).sum(dim=-1, keepdim=True)  # [B, 1]: crossing token in
        smallest_kept = ranked.gather(-1, n_keep - 1)  # [B, 1]
        logits = logits.masked_fill(probs < smallest_kept, float("-inf"))  # ties stay too
    return logits


def _filter(
    logits,
    top_k,
    top_p,
    *,
    k_shift=0,
    ascending=False,
    cut_crossing=False,
    p_before_k=False,
    by_index=False,
    k_dim=-1,
    fill=NEG_INF,
):
    """The filter with one switch per typical slip (all off: the reference)."""
    original = logits
    sign = -1.0 if ascending else 1.0  # ranking the smallest first = ranking -logits first
    V = logits.size(-1)
    if top_k is not None and top_k + k_shift < V:
        k = top_k + k_shift
        if by_index:  # exactly k positions by index: a tie at the k-th value loses some
            keep = torch.zeros_like(logits, dtype=torch.bool)
            keep.scatter_(-1, (sign * logits).topk(k, dim=-1).indices, True)
            logits = logits.masked_fill(~keep, fill)
        elif k_dim == 0:  # ranked down each column, across the batch: [1, V]
            kth = (sign * logits).topk(k, dim=0).values[-1:]
            logits = logits.masked_fill(sign * logits < kth, fill)
        else:
            kth = (sign * logits).topk(k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(sign * logits < kth, fill)
    if top_p is not None and top_p < 1:
        probs = (original if p_before_k else logits).softmax(dim=-1)
        ranked, order = (sign * probs).sort(dim=-1, descending=True)
        ranked = sign * ranked
        if cut_crossing:
            keep_sorted = ranked.cumsum(dim=-1) <= top_p  # the crossing token is dropped
        else:
            keep_sorted = ranked.cumsum(dim=-1) - ranked < top_p
        if by_index:
            keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        else:
            n_keep = keep_sorted.sum(dim=-1, keepdim=True).clamp_min(1)
            smallest = ranked.gather(-1, n_keep - 1)
            keep = sign * probs >= sign * smallest
            if cut_crossing:
                keep &= keep_sorted.any(dim=-1, keepdim=True)  # nothing under p: nothing kept
        logits = logits.masked_fill(~keep, fill)
    return logits


def _k_minus_one(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, k_shift=-1)


def _k_plus_one(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, k_shift=1)


def _ascending(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, ascending=True)


def _k_over_batch(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, k_dim=0)


def _zero_filled(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, fill=0.0)


def _probabilities_zeroed(logits, top_k, top_p):
    # The filter applied after the softmax: removed tokens at 0, the rest not renormalised.
    kept = torch.isfinite(library_filter_logits(logits, top_k, top_p))
    return logits.softmax(dim=-1) * kept


def _probabilities_renormalised(logits, top_k, top_p):
    return library_filter_logits(logits, top_k, top_p).softmax(dim=-1)


def _cut_crossing(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, cut_crossing=True)


def _p_before_k(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, p_before_k=True)


def _k_by_index(logits, top_k, top_p):
    return _filter(logits, top_k, top_p, by_index=True)


def _p_by_index(logits, top_k, top_p):
    return _filter(_filter(logits, top_k, None), None, top_p, by_index=True)


FILTER_MISTAKES = [
    (
        "top-k kept k - 1 tokens (off by one): the k-th largest logit of each row was removed too",
        _k_minus_one,
    ),
    (
        "top-k kept k + 1 tokens (off by one): the (k+1)-th largest logit of each row survived",
        _k_plus_one,
    ),
    (
        "you kept the least likely tokens: the ranking ran in ascending order, smallest first",
        _ascending,
    ),
    (
        "top-k ranked the logits along the batch axis (dim 0): each column kept the k rows where "
        "that token is largest, so a row keeps any number of tokens; the k largest are counted "
        "within each row, over the V tokens",
        _k_over_batch,
    ),
    (
        "removed tokens were set to 0, and exp(0) = 1 still gives them probability: for the sampler "
        "your filter removes almost nothing",
        _zero_filled,
    ),
    (
        "you returned probabilities with the removed tokens at 0 (the filter applied after the "
        "softmax), and the kept ones no longer sum to 1; this filter returns logits, with the "
        "removed ones at -inf",
        _probabilities_zeroed,
    ),
    (
        "you returned probabilities (a softmax of the filtered logits); this filter returns logits, "
        "and the sampler takes the softmax after it",
        _probabilities_renormalised,
    ),
    (
        "top-p dropped the token whose probability crosses p: your nucleus stops before its mass "
        "reaches p, so it holds less than p; the token that crosses p belongs to it",
        _cut_crossing,
    ),
    (
        "top-p measured the mass on the unfiltered distribution, before top-k; after top-k the kept "
        "tokens' probabilities are renormalised, and p is measured on those",
        _p_before_k,
    ),
    (
        "ties: top-p cut the nucleus by sorted position, so tokens tied with the last kept one were "
        "dropped",
        _p_by_index,
    ),
    (
        "ties: top-k kept exactly k positions, so a token tied with the k-th largest was dropped by "
        "index",
        _k_by_index,
    ),
]


def _filter_inputs() -> Callable[[torch.Generator], tuple]:
    """Trial 0 top-k alone, 1 top-p alone, 2 both, 3 and 4 rows with ties."""
    ties_k = torch.tensor([[3.0, 1.0, 3.0, 0.0, 3.0, -1.0, 0.5, 2.0]] * 2)  # 3 tied at the top
    ties_k[1] = ties_k[1].flip(0)
    ties_p = torch.tensor([[0.0, 2.0, 2.0, -1.0, 2.0, 2.0, 0.0, 1.0]] * 2)  # 4 tied at the top
    ties_p[1] = ties_p[1].roll(3)
    plans = iter([(4, None), (None, 0.7), (6, 0.8), (2, None), (None, 0.3)])
    rows = iter([None, None, None, ties_k, ties_p])

    def make(g: torch.Generator) -> tuple:
        top_k, top_p = next(plans)
        fixed = next(rows)
        logits = 1.5 * torch.randn(5, 10, generator=g) if fixed is None else fixed.clone()
        return logits, top_k, top_p

    return make


def _minus_inf_below(fn: Callable) -> Callable:
    """The reader's logits with anything below -1e8 read as -inf: -1e9 or finfo.min work too."""

    def run(logits, top_k, top_p):
        out = fn(logits.clone(), top_k, top_p)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            out = out.masked_fill(out < -1e8, NEG_INF)
        return out

    return run


@solved_by(solution_filter_logits)
def check_filter_logits(filter_logits: Callable) -> CheckResult:
    """Run `filter_logits(logits, top_k, top_p)` on [5, 10] random logits with top_k only, top_p
    only and both, and on rows with ties, against `gptlib.generate.filter_logits`."""
    return compare(
        "filter_logits",
        _minus_inf_below(filter_logits),
        library_filter_logits,
        _filter_inputs(),
        mistakes=[(hint, _minus_inf_below(fn)) for hint, fn in FILTER_MISTAKES],
        trials=5,
    )


# --- the whole sampling step (optional, harder) --------------------------------------------------


def solution_sample_step(
    model: GPT,
    idx: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator,
) -> torch.Tensor:
    """idx [B, n] -> next ids [B, 1]; the model is left in the mode it came in."""
    was_training = model.training
    model.eval()  # dropout off while sampling
    with torch.no_grad():
        logits, _ = model(idx[:, -model.cfg.block_size :])  # [B, n', V], n' <= T: crop first
    model.train(was_training)
    logits = logits[:, -1, :]  # [B, V]: only the last position predicts what comes next
    if temperature == 0:  # greedy: the limit of a shrinking temperature, not a division by 0
        return logits.argmax(dim=-1, keepdim=True)
    logits = solution_filter_logits(logits / temperature, top_k, top_p)  # temperature first
    probs = logits.softmax(dim=-1)  # [B, V], the kept tokens renormalised
    return torch.multinomial(probs, num_samples=1, generator=generator)  # [B, 1]


def _step(
    model,
    idx,
    temperature,
    top_k,
    top_p,
    generator,
    *,
    crop="last",
    position=-1,
    greedy=True,
    divide=True,
    filter_first=False,
    sampler="multinomial",
    eval_mode=True,
    restore=True,
):
    """A sampling step with one switch per typical slip (defaults: the reference)."""
    T = model.cfg.block_size
    ctx = {"last": idx[:, -T:], "first": idx[:, :T], "none": idx}[crop]
    was_training = model.training
    if eval_mode:
        model.eval()
    logits = model(ctx)[0][:, position, :]
    if restore:
        model.train(was_training)
    if temperature == 0 and greedy:
        return logits.argmax(dim=-1, keepdim=True)
    if filter_first:
        logits = library_filter_logits(logits, top_k, top_p) / temperature
    elif divide:
        logits = library_filter_logits(logits / temperature, top_k, top_p)
    else:
        logits = library_filter_logits(logits * temperature, top_k, top_p)
    probs = logits.softmax(dim=-1)
    if sampler == "argmax":
        return probs.argmax(dim=-1, keepdim=True)
    if sampler == "global":
        return torch.multinomial(probs, num_samples=1)
    return torch.multinomial(probs, num_samples=1, generator=generator)


def _slip(**switches) -> Callable:
    @torch.no_grad()
    def step(model, idx, temperature, top_k, top_p, generator):
        return _step(model, idx, temperature, top_k, top_p, generator, **switches)

    return step


STEP_MISTAKES = [
    (
        "the context was not cropped, so the model refused it (longer than block_size)",
        _slip(crop="none"),
    ),
    (
        "the context was cropped to its first block_size tokens, the ones furthest from the token "
        "being predicted",
        _slip(crop="first"),
    ),
    (
        "you sampled from the first position's distribution; the next token is predicted by the "
        "last position",
        _slip(position=0),
    ),
    (
        "temperature 0 divided by zero (NaN probabilities, which torch.multinomial refuses); "
        "temperature 0 stands for greedy decoding",
        _slip(greedy=False),
    ),
    (
        "the filter ran before the temperature: top-p then measures the mass of the untempered "
        "distribution",
        _slip(filter_first=True),
    ),
    (
        "the logits are multiplied by the temperature: a low temperature flattens your distribution "
        "instead of sharpening it",
        _slip(divide=False),
    ),
    (
        "you took the argmax at a temperature above 0 (greedy decoding), so every call gives the "
        "most likely token instead of a sample",
        _slip(sampler="argmax"),
    ),
    (
        "your tokens are not the ones the generator you were handed draws: the sampler drew from "
        "torch's global random stream",
        _slip(sampler="global"),
    ),
    (
        "the model ran in training mode: with dropout on, every call thins the network at random, "
        "so your step samples from a noisier distribution than the model's own (section 6)",
        _slip(eval_mode=False),
    ),
    (
        "the model came in in training mode and your step left it in eval mode: a training loop "
        "that samples between its steps would go on training without dropout",
        _slip(restore=False),
    ),
]

# Outputs no real token id can take, standing for failures the check observes itself.
REFUSED = -1  # the model raised because the context was longer than its block_size
UNSEEDED = -2  # equal generators gave different samples: the generator was not used
NAN_PROBS = -3  # the step failed on inf or nan probabilities: a division by temperature 0
MODE_CHANGED = -4  # the model came in in training mode and left in another one


def _seeded(fn: Callable) -> Callable:
    """Call `fn` twice with fresh generators seeded alike and torch's global stream seeded alike
    (dropout draws from it), so that every function draws the same random numbers and ignoring
    the generator shows; failures and a changed model mode become sentinel ids."""

    def run(model, idx, temperature, top_k, top_p, seed):
        B = idx.size(0)

        def once():
            model.train()  # every step is handed a model in training mode, dropout on
            g = torch.Generator().manual_seed(seed)
            with torch.random.fork_rng():
                torch.manual_seed(seed + 1)
                out = fn(model, idx.clone(), temperature, top_k, top_p, g)
            return out, model.training

        try:
            first, still_training = once()
        except NotImplementedError:
            raise
        except (ValueError, RuntimeError) as e:
            if "exceeds block_size" in str(e):
                return torch.full((B, 1), REFUSED)
            if "probability tensor contains" in str(e) or temperature == 0:
                return torch.full((B, 1), NAN_PROBS)  # inf and nan from a division by 0
            raise
        if not still_training:
            return torch.full((B, 1), MODE_CHANGED)
        if not torch.equal(torch.as_tensor(first), torch.as_tensor(once()[0])):
            return torch.full((B, 1), UNSEEDED)
        return first

    return run


def _library_step(model, idx, temperature, top_k, top_p, generator):
    """One step of gptlib's own sampling loop, the recompute path."""
    out = generate(model, idx, 1, temperature, top_k, generator, use_cache=False, top_p=top_p)
    return out[:, -1:]


def _step_inputs() -> Callable[[torch.Generator], tuple]:
    # (context beyond the block, temperature, top_k, top_p): longer than the block, shorter,
    # temperature 0, top-p with a temperature, twice the block.
    plans = iter(
        [
            (5, 0.7, None, None),
            (-3, 1.6, 5, None),
            (2, 0.0, 3, 0.9),
            (0, 0.5, None, 0.8),
            (8, 2.0, 8, 0.6),
        ]
    )

    def make(g: torch.Generator) -> tuple:
        extra, temperature, top_k, top_p = next(plans)
        cfg = textbook(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.3)
        with torch.random.fork_rng():  # building a model must not move the notebook's stream
            model = GPT(cfg).train()  # training mode, dropout on: the step must switch it off
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:  # large weights: peaked, position-dependent distributions
                    p.copy_(torch.randn(p.shape, generator=g))
        idx = torch.randint(0, cfg.vocab_size, (32, cfg.block_size + extra), generator=g)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
        return model, idx, temperature, top_k, top_p, seed

    return make


@solved_by(solution_sample_step)
def check_sample_step(sample_step: Callable) -> CheckResult:
    """Run `sample_step(model, idx, temperature, top_k, top_p, generator)` on small random GPTs in
    training mode with dropout 0.3, contexts longer and shorter than the block, temperatures 0 to
    2, with and without top-k and top-p, and equally seeded generators, against one step of
    `gptlib.generate.generate`."""
    return compare(
        "sample_step",
        _seeded(sample_step),
        _seeded(_library_step),
        _step_inputs(),
        mistakes=[(hint, _seeded(fn)) for hint, fn in STEP_MISTAKES],
        trials=5,
        atol=0.0,
        rtol=0.0,
    )
