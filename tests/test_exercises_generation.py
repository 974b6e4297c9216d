"""Notebook 12's checks: the filter and the sampling step. The references are the library's,
each kept slip is named by its row, and the promised slips are named."""

import pytest
import torch

from gptlib.config import textbook
from gptlib.exercises import nb12_generation as generation
from gptlib.generate import filter_logits, generate
from gptlib.model import GPT

check_filter, check_step = generation.check_filter_logits, generation.check_sample_step


def test_filter_solution_is_the_library_filter():
    g = torch.Generator().manual_seed(0)
    for top_k, top_p in [(3, None), (None, 0.6), (5, 0.9), (20, 0.999), (None, None)]:
        logits = torch.randn(4, 12, generator=g) * 2
        assert torch.equal(
            generation.solution_filter_logits(logits, top_k, top_p),
            filter_logits(logits, top_k=top_k, top_p=top_p),
        )


@pytest.mark.parametrize("message, wrong", generation.FILTER_MISTAKES)
def test_each_filter_slip_is_named_by_its_row(message, wrong):
    result = check_filter(wrong)
    assert not result.passed
    assert result.message == f"✗ filter_logits: {message}"


def test_a_large_negative_fill_passes_and_an_in_place_write_is_named():
    def finite_fill(logits, top_k, top_p):
        out = generation.solution_filter_logits(logits, top_k, top_p)
        return out.masked_fill(out == float("-inf"), -1e9)

    def in_place(logits, top_k, top_p):
        return logits.copy_(generation.solution_filter_logits(logits, top_k, top_p))

    assert check_filter(finite_fill).passed
    message = check_filter(in_place).message  # the one rule for side effects (README)
    assert message.startswith("✗ filter_logits: your function changed its input logits in place")


def _nucleus_by_index(logits, top_p, drop_crossing):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    remove = probs.cumsum(-1) > top_p if drop_crossing else probs.cumsum(-1) - probs >= top_p
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def test_promised_off_by_one_and_ties_written_by_a_reader():
    def kth_from_sorted(logits, top_k, top_p):  # sorted[:, k] as the k-th: k + 1 kept
        if top_k is not None:
            kth = logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return generation.solution_filter_logits(logits, None, top_p)

    def nucleus(drop_crossing):
        def filter_logits(logits, top_k, top_p):
            logits = generation.solution_filter_logits(logits, top_k, None)
            return logits if top_p is None else _nucleus_by_index(logits, top_p, drop_crossing)

        return filter_logits

    def exactly_k(logits, top_k, top_p):
        if top_k is not None:
            keep = torch.zeros_like(logits, dtype=torch.bool)
            keep.scatter_(-1, logits.topk(top_k, dim=-1).indices, True)
            logits = logits.masked_fill(~keep, float("-inf"))
        return generation.solution_filter_logits(logits, None, top_p)

    assert "top-k kept k + 1 tokens (off by one)" in check_filter(kth_from_sorted).message
    assert "dropped the token whose probability crosses p" in check_filter(nucleus(True)).message
    assert "ties: top-p cut the nucleus by sorted position" in check_filter(nucleus(False)).message
    assert "ties: top-k kept exactly k positions" in check_filter(exactly_k).message


def test_filter_unknown_slips_say_how_the_values_differ():
    message = check_filter(lambda logits, k, p: logits).message
    assert not message.startswith("✓") and "finite" in message and "infinity" in message


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(0.8, None, None), (1.2, 4, 0.7), (0, 3, 0.5)]
)
def test_step_solution_is_one_step_of_generate(temperature, top_k, top_p):
    torch.manual_seed(0)
    model = GPT(textbook(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=16)).eval()
    idx = torch.randint(0, 11, (3, 9))  # longer than the block: both crop
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    out = generate(
        model,
        idx,
        1,
        temperature=temperature,
        top_k=top_k,
        generator=g1,
        use_cache=False,
        top_p=top_p,
    )
    nxt = generation.solution_sample_step(model, idx, temperature, top_k, top_p, g2)
    assert torch.equal(out[:, -1:], nxt)


@pytest.mark.parametrize("message, wrong", generation.STEP_MISTAKES)
def test_each_step_slip_is_named_by_its_row(message, wrong):
    result = check_step(wrong)
    assert not result.passed
    assert result.message == f"✗ sample_step: {message}"


def _step(eval_mode, restore, crop=True, greedy=True):
    @torch.no_grad()
    def sample_step(model, idx, temperature, top_k, top_p, generator):
        if eval_mode:
            model.eval()
        logits = model(idx[:, -model.cfg.block_size :] if crop else idx)[0][:, -1, :]
        if restore:
            model.train()
        if temperature == 0 and greedy:
            return logits.argmax(dim=-1, keepdim=True)
        logits = filter_logits(logits / temperature, top_k=top_k, top_p=top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

    return sample_step


def test_promised_check_hands_over_a_training_model_with_dropout():
    model, *_ = generation._step_inputs(torch.Generator().manual_seed(1000))
    assert model.cfg.dropout > 0
    assert check_step(_step(eval_mode=True, restore=True)).passed


def test_promised_missing_eval_is_named():
    message = check_step(_step(eval_mode=False, restore=False)).message
    assert message.startswith("✗ sample_step: the model ran in training mode")


def test_promised_left_in_eval_mode_is_named():
    assert "left it in eval mode" in check_step(_step(eval_mode=True, restore=False)).message


def test_promised_missing_crop_and_division_by_zero_are_named():
    (_, uncropped), (_, divided) = generation.STEP_ERROR_HINTS
    message = check_step(_step(True, True, crop=False)).message
    assert "exceeds block_size" in message
    assert message.endswith(f"Hint: {uncropped}")
    assert "not cropped" in uncropped
    message = check_step(_step(True, True, greedy=False)).message
    assert message.endswith(f"Hint: {divided}")
    assert "temperature 0 was a division by zero" in divided


def test_step_solution_restores_the_mode():
    model, idx, *_ = generation._step_inputs(torch.Generator().manual_seed(1000))
    generation.solution_sample_step(model.train(), idx, 1.0, None, None, torch.Generator())
    assert model.training
    generation.solution_sample_step(model.eval(), idx, 1.0, None, None, torch.Generator())
    assert not model.training


def test_checks_leave_the_global_random_stream_alone():
    torch.manual_seed(0)
    check_step(generation.solution_sample_step)
    check_filter(generation.solution_filter_logits)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))
