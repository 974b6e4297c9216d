"""generate, next_token_probs, pick_next, sample_documents, complete: temperature, top-k, top-p,
stopping at BOS, cropping to block_size, and the same tokens with and without the KV cache."""

import math

import pytest
import torch
from builders import random_ids, sharp_model

from gptlib.config import textbook
from gptlib.generate import (
    complete,
    filter_logits,
    generate,
    next_token_probs,
    pick_next,
    sample_documents,
)
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer

ATTENTIONS = ["manual", "sdpa"]


_model = sharp_model
_ids = random_ids


def _logits(B=4, V=11, seed=0):
    return torch.randn(B, V, generator=torch.Generator().manual_seed(seed)) * 3


# --- temperature ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-0.5, -1, float("nan"), float("inf"), "1.0", None])
def test_bad_temperature_raises(small_textbook, bad):
    logits = _logits()
    with pytest.raises(ValueError, match="temperature"):
        next_token_probs(logits, temperature=bad)
    with pytest.raises(ValueError, match="temperature"):
        pick_next(logits, temperature=bad)
    with pytest.raises(ValueError, match="temperature"):
        generate(_model(small_textbook), _ids(small_textbook, 1, 2), 3, temperature=bad)


def test_negative_temperature_message_points_to_greedy():
    with pytest.raises(ValueError, match="use 0 for greedy"):
        next_token_probs(_logits(), temperature=-1.0)


@pytest.mark.parametrize("temperature", [0.25, 1.0, 2.0])
def test_temperature_divides_the_logits(temperature):
    logits = _logits()
    expected = (logits / temperature).softmax(-1)
    torch.testing.assert_close(next_token_probs(logits, temperature=temperature), expected)


def test_temperature_zero_is_the_argmax():
    logits = _logits()
    probs = next_token_probs(logits, temperature=0)
    assert torch.equal(probs.argmax(-1), logits.argmax(-1))
    assert torch.equal(probs.sum(-1), torch.ones(4))
    assert int((probs > 0).sum()) == 4  # all the mass on one token per row, no inf or nan
    g = torch.Generator().manual_seed(0)
    assert torch.equal(
        pick_next(logits, temperature=0, generator=g), logits.argmax(-1, keepdim=True)
    )


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_is_a_hand_argmax_loop_and_ignores_the_generator(
    small_textbook, use_cache
):
    model = _model(small_textbook)
    prompt = _ids(small_textbook, 2, 3)
    idx = prompt
    with torch.no_grad():
        for _ in range(6):
            logits, _ = model(idx)
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        out = generate(model, prompt, 6, temperature=0, generator=g, use_cache=use_cache)
        assert torch.equal(out, idx)


def test_lower_temperature_sharpens():
    logits = _logits(B=1)
    top = logits.argmax()
    ps = [float(next_token_probs(logits, temperature=t)[0, top]) for t in (2.0, 1.0, 0.5, 0.1)]
    assert ps == sorted(ps) and ps[-1] > 0.99


# --- top-k ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 5, 10])
def test_top_k_keeps_exactly_k(k):
    logits = _logits()
    probs = next_token_probs(logits, temperature=1.0, top_k=k)
    assert torch.equal((probs > 0).sum(-1), torch.full((4,), k))
    kept = torch.topk(logits, k, dim=-1).indices
    assert torch.equal(probs.gather(-1, kept) > 0, torch.ones(4, k, dtype=torch.bool))
    torch.testing.assert_close(probs.sum(-1), torch.ones(4))
    # The kept tokens keep their ratios: a renormalised softmax over the top k.
    expected = torch.zeros_like(probs).scatter(-1, kept, logits.gather(-1, kept).softmax(-1))
    torch.testing.assert_close(probs, expected)


def test_top_k_at_or_above_vocab_changes_nothing():
    logits = _logits()
    for k in (11, 50):
        torch.testing.assert_close(
            next_token_probs(logits, temperature=1.0, top_k=k), logits.softmax(-1)
        )


def test_top_k_samples_only_from_the_top_k():
    logits = _logits(B=1, V=20)
    allowed = set(torch.topk(logits[0], 3).indices.tolist())
    g = torch.Generator().manual_seed(0)
    drawn = {int(pick_next(logits, temperature=1.5, top_k=3, generator=g)) for _ in range(300)}
    assert drawn == allowed


def test_top_k_one_is_greedy(small_textbook):
    model = _model(small_textbook)
    prompt = _ids(small_textbook, 2, 2)
    g = torch.Generator().manual_seed(3)
    sampled = generate(model, prompt, 8, temperature=1.3, top_k=1, generator=g)
    assert torch.equal(sampled, generate(model, prompt, 8, temperature=0))


@pytest.mark.parametrize("bad", [0, -2, 2.5, "3"])
def test_bad_top_k_raises(bad):
    with pytest.raises(ValueError, match="top_k"):
        next_token_probs(_logits(), temperature=1.0, top_k=bad)


# --- top-p (nucleus) ------------------------------------------------------------------------------


def _nucleus_by_hand(probs_row, p):
    """The smallest set of most likely tokens whose probabilities reach p, as a set of ids."""
    order = sorted(range(len(probs_row)), key=lambda i: -probs_row[i])
    kept, mass = set(), 0.0
    for i in order:
        kept.add(i)
        mass += probs_row[i]
        if mass >= p:
            break
    return kept


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.9, 0.99])
def test_top_p_keeps_the_smallest_nucleus_reaching_p(p):
    logits = _logits(B=6, V=15, seed=1)
    probs = next_token_probs(logits, temperature=1.0, top_p=p)
    full = logits.softmax(-1)
    for row in range(6):
        kept = set((probs[row] > 0).nonzero().flatten().tolist())
        assert kept == _nucleus_by_hand(full[row].tolist(), p)
        assert float(full[row, sorted(kept)].sum()) >= p - 1e-6  # the crossing token is in
    torch.testing.assert_close(probs.sum(-1), torch.ones(6))
    # Renormalised: the kept tokens keep their ratios.
    expected = torch.where(probs > 0, full, torch.zeros_like(full))
    torch.testing.assert_close(probs, expected / expected.sum(-1, keepdim=True))


def test_top_p_one_and_none_change_nothing():
    logits = _logits()
    for p in (None, 1, 1.0):
        torch.testing.assert_close(
            next_token_probs(logits, temperature=0.8, top_p=p), (logits / 0.8).softmax(-1)
        )


def test_top_p_always_keeps_the_most_likely_token():
    logits = _logits()
    probs = next_token_probs(logits, temperature=1.0, top_p=1e-6)
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(-1), 11).float())


def test_top_p_is_measured_after_the_temperature():
    logits = _logits(B=8, V=15, seed=2)
    sharp = (next_token_probs(logits, temperature=0.3, top_p=0.8) > 0).sum()
    flat = (next_token_probs(logits, temperature=3.0, top_p=0.8) > 0).sum()
    assert sharp < flat  # a flatter distribution needs more tokens to reach the same mass


def test_top_p_applies_to_the_distribution_left_by_top_k():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    # top_k=2 leaves e^3 : e^2 = 0.73 : 0.27, so p = 0.7 keeps the first token alone; measured on
    # the unfiltered distribution (0.64, 0.24, ...) it would keep two.
    kept = filter_logits(logits, top_k=2, top_p=0.7)
    assert torch.isfinite(kept).tolist() == [[True, False, False, False, False]]
    assert torch.equal(filter_logits(logits, top_p=0.7)[:, :2], logits[:, :2])


def test_filter_keeps_ties():
    logits = torch.tensor([[2.0, 2.0, 2.0, 0.0, 0.0]])
    assert torch.isfinite(filter_logits(logits, top_k=2)).sum() == 3  # tied with the 2nd: kept
    assert torch.isfinite(filter_logits(logits, top_p=0.3)).sum() == 3  # the crossing one's ties
    assert torch.equal(filter_logits(logits, top_k=2)[:, :3], logits[:, :3])


def test_top_p_samples_only_from_the_nucleus(small_textbook):
    logits = _logits(B=1, V=20)
    allowed = _nucleus_by_hand(logits[0].softmax(-1).tolist(), 0.6)
    g = torch.Generator().manual_seed(0)
    drawn = {int(pick_next(logits, temperature=1.0, generator=g, top_p=0.6)) for _ in range(300)}
    assert drawn == allowed
    model = _model(small_textbook)
    prompt = _ids(small_textbook, 2, 2)
    tiny = generate(model, prompt, 8, temperature=1.3, generator=g, top_p=1e-6)
    assert torch.equal(tiny, generate(model, prompt, 8, temperature=0))


def test_top_p_reaches_sample_documents_and_complete(small_textbook):
    tok = CharTokenizer("abcdefghijklmnopqrstuvwxyz", bos=".")
    cfg = small_textbook.replace(vocab_size=tok.vocab_size)
    model = _model(cfg)
    g = torch.Generator().manual_seed(0)
    assert sample_documents(
        model, tok, 3, 6, temperature=1.0, generator=g, top_p=1e-6
    ) == sample_documents(model, tok, 3, 6, temperature=0.0)
    assert complete(model, tok, "ab", 5, temperature=1.0, generator=g, top_p=1e-6) == complete(
        model, tok, "ab", 5, temperature=0.0
    )


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, float("nan"), "0.9", True])
def test_bad_top_p_raises(small_textbook, bad):
    with pytest.raises(ValueError, match=r"top_p must be a number in \(0, 1\]"):
        next_token_probs(_logits(), temperature=1.0, top_p=bad)
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(_logits(), top_p=bad)
    with pytest.raises(ValueError, match="top_p"):
        pick_next(_logits(), temperature=0.0, top_p=bad)
    with pytest.raises(ValueError, match="top_p"):
        generate(_model(small_textbook), _ids(small_textbook, 1, 2), 3, top_p=bad)


# --- seeded sampling ------------------------------------------------------------------------------


def test_same_seed_same_tokens_other_seed_other_tokens(small_textbook):
    model = _model(small_textbook)
    prompt = _ids(small_textbook, 2, 1)

    def run(seed):
        return generate(model, prompt, 11, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(0), run(0))
    assert not torch.equal(run(0), run(1))


# --- stopping at BOS ------------------------------------------------------------------------------


@pytest.mark.parametrize("use_cache", [True, False])
def test_stop_token_ends_each_row_and_the_loop(use_cache):
    cfg = textbook(vocab_size=11, block_size=12, n_layer=2, n_head=4, n_embd=32)
    model = _model(cfg, seed=2)
    stop = 10
    g = torch.Generator().manual_seed(0)
    start = torch.full((4, 1), stop)
    out = generate(model, start, 200, generator=g, stop_token=stop, use_cache=use_cache)
    new = out[:, 1:]
    assert new.shape[1] < 200  # every row stopped, so the loop ended early
    for row in new.tolist():
        first = row.index(stop)
        assert all(t == stop for t in row[first:])  # a finished row repeats the stop token
    assert (new[:, -1] == stop).all()
    assert (new[:, -2] != stop).any()  # it ended at the step the last row stopped


def test_sample_documents_stops_at_bos_and_matches_the_recompute_path():
    tok = CharTokenizer.from_documents(["abcdefghij"])  # 10 letters + BOS "." = 11 symbols
    cfg = textbook(vocab_size=tok.vocab_size, block_size=12, n_layer=2, n_head=4, n_embd=32)
    model = _model(cfg, seed=2)
    # max_len = block_size: every prediction is made from at most block_size tokens.
    docs = sample_documents(model, tok, 6, max_len=12, generator=torch.Generator().manual_seed(0))
    assert len(docs) == 6
    assert all("." not in d and len(d) <= 12 for d in docs)
    assert any(len(d) < 12 for d in docs)
    again = sample_documents(
        model, tok, 6, max_len=12, generator=torch.Generator().manual_seed(0), use_cache=False
    )
    assert again == docs


def _letters_model(seed=2):
    tok = CharTokenizer.from_documents(["abcdefghij"])  # 10 letters + BOS "." = 11 symbols
    cfg = textbook(vocab_size=tok.vocab_size, block_size=12, n_layer=2, n_head=4, n_embd=32)
    return _model(cfg, seed=seed), tok


@pytest.mark.parametrize("use_cache", [True, False])
def test_sample_documents_with_a_prompt_gives_documents_that_start_with_it(use_cache):
    model, tok = _letters_model()
    g = torch.Generator().manual_seed(0)
    docs = sample_documents(
        model, tok, 8, max_len=9, generator=g, use_cache=use_cache, prompt="bad"
    )
    assert len(docs) == 8
    assert all(d.startswith("bad") and "." not in d and len(d) <= 3 + 9 for d in docs)
    assert len(set(docs)) > 1
    # The model reads BOS, then the prompt: the start of a document, not the middle of a stream.
    start = torch.tensor([[tok.bos_id, *tok.encode("bad")]] * 8)
    g = torch.Generator().manual_seed(0)
    out = generate(model, start, 9, generator=g, stop_token=tok.bos_id, use_cache=use_cache)
    assert docs == [tok.decode(row[1:]).split(".")[0] for row in out.tolist()]


def test_greedy_document_is_unchanged_when_prompted_with_its_own_start():
    model, tok = _letters_model(seed=3)
    (doc,) = sample_documents(model, tok, 1, max_len=12, temperature=0)
    assert 3 <= len(doc) < 12  # it ended at BOS
    for n in range(len(doc) + 1):
        assert sample_documents(model, tok, 1, 12, temperature=0, prompt=doc[:n]) == [doc]
    g = torch.Generator().manual_seed(0)
    no_prompt = sample_documents(model, tok, 4, 12, generator=g)
    g = torch.Generator().manual_seed(0)
    assert sample_documents(model, tok, 4, 12, generator=g, prompt="") == no_prompt


def test_sample_documents_refuses_a_prompt_no_document_can_start_with():
    model, tok = _letters_model()
    with pytest.raises(ValueError, match=r"'Z', '!' not in the vocabulary.*10: 'abcdefghij'"):
        sample_documents(model, tok, 2, prompt="aZb!Z")
    with pytest.raises(ValueError, match=r"the BOS symbol '\.', which ends a document"):
        sample_documents(model, tok, 2, prompt="ab.c")


def test_sample_documents_needs_a_bos():
    tok = CharTokenizer.from_text("abc")
    model = _model(textbook(vocab_size=3, block_size=8, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="BOS"):
        sample_documents(model, tok, 2)


def test_complete_continues_the_prompt():
    tok = CharTokenizer.from_text("abcdefghijk")
    model = _model(textbook(vocab_size=tok.vocab_size, block_size=12, n_layer=2, n_embd=32))
    text = complete(model, tok, "abc", 7, temperature=0)
    assert text.startswith("abc") and len(text) == 10
    assert text == complete(model, tok, "abc", 7, temperature=0, use_cache=False)


# --- block_size on the recompute path -----------------------------------------------------------


def test_recompute_path_crops_to_block_size(small_textbook):
    model = _model(small_textbook)
    T = small_textbook.block_size
    lengths = []
    handle = model.register_forward_pre_hook(lambda m, args: lengths.append(args[0].shape[1]))
    try:
        long_prompt = _ids(small_textbook, 2, T + 5)
        out = generate(model, long_prompt, 2 * T, temperature=0, use_cache=False)
    finally:
        handle.remove()
    assert out.shape == (2, T + 5 + 2 * T)
    assert lengths == [T] * (2 * T)  # the whole window every step, never more
    # A sliding window: only the last T tokens matter, so the far past can be anything.
    tail = generate(model, long_prompt[:, -T:], 2 * T, temperature=0, use_cache=False)
    assert torch.equal(out[:, 5:], tail)
    short = []
    handle = model.register_forward_pre_hook(lambda m, args: short.append(args[0].shape[1]))
    try:
        generate(model, long_prompt[:, :3], T, temperature=0, use_cache=False)
    finally:
        handle.remove()
    assert short == [min(3 + t, T) for t in range(T)]  # grows, then stays at T


# --- model state, input checks ---------------------------------------------------------------------


def test_training_mode_is_restored_and_dropout_is_off_while_generating(small_textbook):
    cfg = small_textbook.replace(dropout=0.5)
    model = _model(cfg).train()
    prompt = _ids(cfg, 2, 2)
    a = generate(model, prompt, 8, temperature=0)
    assert model.training
    b = generate(model.eval(), prompt, 8, temperature=0)
    assert torch.equal(a, b)


@pytest.mark.parametrize("shape", [(5,), (2, 0)])
def test_prompt_must_be_a_non_empty_batch(small_textbook, shape):
    with pytest.raises(ValueError, match="idx must be"):
        generate(_model(small_textbook), torch.zeros(shape, dtype=torch.long), 3)


def test_generated_ids_can_feed_a_training_step(small_textbook):
    """The loop runs under inference_mode; what comes back is an ordinary tensor."""
    model = _model(small_textbook).train()
    out = generate(model, _ids(small_textbook, 2, 2), 6)
    assert not out.is_inference()
    _, loss = model(out, out)
    loss.backward()
    assert model.tok_emb.weight.grad is not None


def test_zero_new_tokens_returns_the_prompt(small_textbook):
    prompt = _ids(small_textbook, 2, 3)
    assert torch.equal(generate(_model(small_textbook), prompt, 0), prompt)


# --- the same tokens with and without the KV cache --------------------------------------------------


def _both_paths(model, prompt, new, temperature, top_k=None, seed=7):
    out = {}
    for use_cache in (True, False):
        g = torch.Generator().manual_seed(seed)
        out[use_cache] = generate(
            model,
            prompt,
            new,
            temperature=temperature,
            top_k=top_k,
            generator=g,
            use_cache=use_cache,
        )
    return out[True], out[False]


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("n0", [1, 2, 5])
@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (1.0, None), (0.8, 4)])
def test_cache_gives_the_same_tokens_up_to_block_size(
    any_preset, attention, n0, temperature, top_k
):
    """Every prediction made from at most block_size tokens: n0 + new = block_size + 1."""
    cfg = any_preset.replace(attention=attention)
    model = _model(cfg)
    new = cfg.block_size - n0 + 1
    cached, recomputed = _both_paths(model, _ids(cfg, 3, n0), new, temperature, top_k)
    assert cached.shape == (3, cfg.block_size + 1)
    assert torch.equal(cached, recomputed)


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cache_gives_the_same_tokens_at_textbook_preset_size(attention, temperature):
    cfg = textbook(vocab_size=27, attention=attention)  # block 64, d 128, 4 layers, 4 heads
    model = _model(cfg)
    cached, recomputed = _both_paths(model, _ids(cfg, 1, 1), cfg.block_size, temperature)
    assert torch.equal(cached, recomputed)


def test_untrained_init_also_gives_the_same_tokens(any_preset):
    torch.manual_seed(0)
    model = GPT(any_preset)  # the library's own init, logits close to uniform
    cached, recomputed = _both_paths(model, _ids(any_preset, 4, 1), any_preset.block_size, 1.0)
    assert torch.equal(cached, recomputed)


def test_paths_may_differ_only_after_block_size(small_textbook):
    """Past block_size they follow different documented rules; the tokens up to T + 1 agree."""
    model = _model(small_textbook)
    T = small_textbook.block_size
    cached, recomputed = _both_paths(model, _ids(small_textbook, 4, 1), 3 * T, 0.0)
    assert torch.equal(cached[:, : T + 1], recomputed[:, : T + 1])
    assert cached.shape == recomputed.shape == (4, 1 + 3 * T)


def test_probabilities_are_a_distribution():
    probs = next_token_probs(_logits(), temperature=0.7, top_k=5)
    assert not torch.isnan(probs).any()
    assert math.isclose(float(probs.sum()), 4.0, rel_tol=1e-6)
