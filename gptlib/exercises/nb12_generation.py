"""Notebook 12, generation: `filter_logits` (top-k, then top-p, ties kept) against the library's
filter; optional, `sample_step`, one step of `generate`, handed a training-mode model (dropout)."""

from functools import partial

import torch

from gptlib.config import textbook
from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.generate import filter_logits as library_filter_logits
from gptlib.language import N_
from gptlib.model import GPT

__all__ = ["check_filter_logits", "check_sample_step", "solution_filter_logits",
           "solution_sample_step"]  # fmt: skip


def solution_filter_logits(logits: torch.Tensor, top_k, top_p) -> torch.Tensor:
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


def _filter(logits, top_k, top_p, *, k_shift=0, k_ties=True, p_ties=True, crossing=True,
            fill=float("-inf")):  # fmt: skip
    """The filter with one switch flipped (none: the reference); ties cut by sorted position."""
    if top_k is not None and top_k + k_shift < logits.size(-1):
        top = logits.topk(top_k + k_shift, dim=-1)
        by_index = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top.indices, True)
        logits = logits.masked_fill(~(logits >= top.values[:, -1:] if k_ties else by_index), fill)
    if top_p is not None and top_p < 1:
        probs = logits.softmax(dim=-1)
        ranked, order = probs.sort(dim=-1, descending=True)
        in_sorted = ranked.cumsum(dim=-1) - (ranked if crossing else 0) < top_p
        keep = in_sorted.scatter(-1, order, in_sorted)  # by sorted position
        if p_ties and crossing:  # a token as likely as the last one in the nucleus stays
            keep = probs >= ranked.gather(-1, in_sorted.sum(dim=-1, keepdim=True) - 1)
        logits = logits.masked_fill(~keep, fill)
    return logits


FILTER_MISTAKES = [
    (N_("top-k kept k - 1 tokens (off by one): the k-th largest logit of each row was removed too"),
     partial(_filter, k_shift=-1)),
    (N_("top-k kept k + 1 tokens (off by one): the (k+1)-th largest logit of each row survived"),
     partial(_filter, k_shift=1)),
    (N_("ties: top-k kept exactly k positions, so a token tied with the k-th largest was dropped"),
     partial(_filter, k_ties=False)),
    (N_("ties: top-p cut the nucleus by sorted position, so tokens tied with the last kept one "
        "were dropped"), partial(_filter, p_ties=False)),
    (N_("top-p dropped the token whose probability crosses p: your nucleus stops short of p"),
     partial(_filter, crossing=False)),
    (N_("removed tokens were set to 0, and exp(0) = 1 still gives them probability: for the "
        "sampler your filter removes almost nothing"), partial(_filter, fill=0.0)),
    (N_("you returned probabilities (a softmax of the filtered logits), where the filter returns "
        "logits"), lambda *a: _library_filter(*a).softmax(dim=-1)),
]  # fmt: skip


def _library_filter(logits, top_k, top_p) -> torch.Tensor:  # called as the reader's filter is
    return library_filter_logits(logits, top_k=top_k, top_p=top_p)


def _filter_inputs(g: torch.Generator) -> tuple:
    plans = ((4, None, None), (None, 0.7, None), (6, 0.8, None),  # (top_k, top_p, tied rows)
             (2, None, [3.0, 1.0, 3.0, 0.0, 3.0, -1.0, 0.5, 2.0]),  # 3 tied at the top
             (None, 0.3, [0.0, 2.0, 2.0, -1.0, 2.0, 2.0, 0.0, 1.0]))  # 4 tied  # fmt: skip
    top_k, top_p, row = plans[g.initial_seed() % 5]
    random = 1.5 * torch.randn(5, 10, generator=g)
    return (random if row is None else torch.tensor([row, row[::-1]])), top_k, top_p


@solved_by(solution_filter_logits)
def check_filter_logits(filter_logits) -> CheckResult:
    """Against `gptlib.generate.filter_logits` on [5, 10] random logits and on rows with ties."""

    def readers(logits, top_k, top_p):  # below -1e8 reads as -inf: -1e9 is a fill too
        out = filter_logits(logits, top_k, top_p)
        floating = isinstance(out, torch.Tensor) and out.is_floating_point()
        return out.masked_fill(out < -1e8, float("-inf")) if floating else out

    return compare("filter_logits", readers, _library_filter, _filter_inputs,
                   FILTER_MISTAKES, trials=5)  # fmt: skip


def solution_sample_step(model, idx, temperature, top_k, top_p, generator) -> torch.Tensor:
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


def _step(model, idx, temperature, top_k, top_p, generator, *, eval_mode=True, restore=True,
          at=-1, tau=True, filter_first=False):  # fmt: skip
    """A sampling step with one switch flipped (none: the reference)."""
    was_training = model.training
    model.train(was_training and not eval_mode)
    with torch.no_grad():
        logits = model(idx[:, -model.cfg.block_size :])[0][:, at]
    model.train(was_training if restore else model.training)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    if filter_first:
        logits = _library_filter(logits, top_k, top_p)
    scaled = logits / temperature if tau else logits
    probs = (scaled if filter_first else _library_filter(scaled, top_k, top_p)).softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


STEP_MISTAKES = [
    (N_("the model ran in training mode: with dropout on, each call thins the network at random, a "
        "noisier distribution than the model's own (section 6)"), partial(_step, eval_mode=False)),
    (N_("the model came in in training mode and your step left it in eval mode: a loop that "
        "samples between training steps would train on without dropout"),
     partial(_step, restore=False)),
    (N_("the next token was drawn from the first position's logits: every step predicts what "
        "follows the context's first token, whatever came after it"), partial(_step, at=0)),
    (N_("top-k and top-p ran before the temperature: the nucleus was cut from the distribution at "
        "τ = 1, not from the one the temperature makes"), partial(_step, filter_first=True)),
    (N_("the temperature is never applied: every temperature above 0 samples as τ = 1 would"),
     partial(_step, tau=False)),
]  # fmt: skip

STEP_ERROR_HINTS = [
    ("exceeds block_size", N_("the context was not cropped, so the model refused it")),
    ("probability tensor contains",
     N_("temperature 0 was a division by zero, not greedy decoding")),
]  # fmt: skip


def _seeded(fn, model, idx, temperature, top_k, top_p, seed):
    """`fn` handed a model in training mode and a generator seeded from `seed` (compare starts
    every run from one state of the global stream dropout draws from); ids of -1 when the
    model's mode changed."""
    model.train()
    out = fn(model, idx, temperature, top_k, top_p, torch.Generator().manual_seed(seed))
    return out if model.training else torch.full((idx.size(0), 1), -1)


def _step_inputs(g: torch.Generator) -> tuple:
    plans = ((5, 0.7, None, None), (-3, 1.6, 5, None), (2, 0.0, 3, None), (0, 0.5, None, 0.8),
             (8, 2.0, 8, 0.6))  # (context beyond the block, temperature, top_k, top_p)  # fmt: skip
    extra, temperature, top_k, top_p = plans[g.initial_seed() % 5]
    cfg = textbook(vocab_size=13, block_size=8, n_layer=1, n_head=2, n_embd=16, dropout=0.3)
    with torch.random.fork_rng():  # building a model must not move the notebook's stream
        model = GPT(cfg)
    with torch.no_grad():
        for p in (p for p in model.parameters() if p.dim() >= 2):  # large weights: peaked,
            p.copy_(torch.randn(p.shape, generator=g))  # position-dependent distributions
    idx = torch.randint(0, cfg.vocab_size, (32, cfg.block_size + extra), generator=g)
    return model, idx, temperature, top_k, top_p, g.initial_seed()


@solved_by(solution_sample_step)
def check_sample_step(sample_step) -> CheckResult:
    """Run `sample_step` on small random GPTs in training mode with dropout 0.3, contexts longer
    and shorter than the block, temperatures 0 to 2, top-k and top-p, equally seeded generators."""
    mistakes = [(message, partial(_seeded, fn)) for message, fn in STEP_MISTAKES]
    readers = lambda *inputs: _seeded(sample_step, *inputs)  # noqa: E731 (its refusals are read)
    return compare("sample_step", readers, partial(_seeded, solution_sample_step), _step_inputs,
                   mistakes, 5, 0.0, 0.0, STEP_ERROR_HINTS, grads=False, no_grad=True)  # fmt: skip
