"""Notebook 12's checks: the top-k / top-p filter and the whole sampling step. The stubs say they
are not written yet, the references pass, and each typical mistake gets its own hint."""

import pytest
import torch

from gptlib import exercises
from gptlib.config import textbook
from gptlib.exercises import generation
from gptlib.exercises.checking import not_written
from gptlib.generate import filter_logits, generate
from gptlib.model import GPT

# --- filter_logits --------------------------------------------------------------------------------


def test_filter_stub_is_not_written_yet():
    def filter_stub(logits, top_k, top_p):
        raise NotImplementedError  # your code here

    result = generation.check_filter_logits(filter_stub)
    assert not result.passed
    assert result.message == not_written("filter_logits").message
    assert result.message == (
        "filter_logits is not written yet: replace its body and run this cell again"
    )


def test_filter_solution_passes_and_is_the_library_filter():
    result = generation.check_filter_logits(generation.solution_filter_logits)
    assert result.passed
    assert result.message == "✓ filter_logits: matches the reference on 5 random inputs"
    g = torch.Generator().manual_seed(0)
    for top_k, top_p in [(3, None), (None, 0.6), (5, 0.9), (20, 0.999), (None, None)]:
        logits = torch.randn(4, 12, generator=g) * 2
        assert torch.equal(
            generation.solution_filter_logits(logits, top_k, top_p),
            filter_logits(logits, top_k, top_p),
        )


@pytest.mark.parametrize(
    "hint, wrong", generation.FILTER_MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_filter_mistake_gets_its_hint(hint, wrong):
    result = generation.check_filter_logits(wrong)
    assert not result.passed
    assert result.message == f"✗ filter_logits: {hint}"


def test_a_large_negative_fill_is_accepted():
    def finite_fill(logits, top_k, top_p):
        out = generation.solution_filter_logits(logits, top_k, top_p)
        return out.masked_fill(out == float("-inf"), -1e9)

    assert generation.check_filter_logits(finite_fill).passed


def test_readers_filter_slips_written_out():
    def topk_minus_one_first_try(logits, top_k, top_p):  # sorted[:, k] as the k-th: k + 1 kept
        if top_k is not None:
            kth = logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p is not None:
            logits = generation.solution_filter_logits(logits, None, top_p)
        return logits

    def nucleus_without_crossing_slip(logits, top_k, top_p):
        logits = generation.solution_filter_logits(logits, top_k, None)
        if top_p is not None:
            probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
            remove = probs.cumsum(-1) > top_p
            logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
        return logits

    def hf_style_by_index_slip(logits, top_k, top_p):  # the shift, but no tie handling
        logits = generation.solution_filter_logits(logits, top_k, None)
        if top_p is not None:
            probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
            remove = probs.cumsum(-1) - probs >= top_p
            logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
        return logits

    def after_softmax_mistake(logits, top_k, top_p):
        probs = logits.softmax(-1)
        return probs * torch.isfinite(generation.solution_filter_logits(logits, top_k, top_p))

    message = generation.check_filter_logits(topk_minus_one_first_try).message
    assert "top-k kept k + 1 tokens" in message
    message = generation.check_filter_logits(nucleus_without_crossing_slip).message
    assert "dropped the token whose probability crosses p" in message
    message = generation.check_filter_logits(hf_style_by_index_slip).message
    assert "ties: top-p" in message
    message = generation.check_filter_logits(after_softmax_mistake).message
    assert "filter applied after the softmax" in message


def test_filter_check_can_fail_on_an_unknown_slip():
    def no_filter_slip(logits, top_k, top_p):
        return logits

    result = generation.check_filter_logits(no_filter_slip)
    assert not result.passed
    assert "values differ" in result.message


def test_top_k_over_the_batch_axis_is_named():
    def filter_logits(logits, top_k, top_p):
        if top_k is not None:
            kth = logits.sort(dim=0, descending=True).values[top_k - 1]  # down each column
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return logits

    assert generation.check_filter_logits(filter_logits).message == (
        "✗ filter_logits: top-k ranked the logits along the batch axis (dim 0): each column kept "
        "the k rows where that token is largest, so a row keeps any number of tokens; the k "
        "largest are counted within each row, over the V tokens"
    )


def test_values_differ_never_reports_a_nan_difference():
    def unknown(logits, top_k, top_p):  # top-k right, then every logit but the first halved
        out = generation.solution_filter_logits(logits, top_k, top_p)
        return torch.cat([out[:, :1], out[:, 1:] / 2], dim=-1)

    message = generation.check_filter_logits(unknown).message
    assert message == "✗ filter_logits: values differ from the reference (largest difference 2.09)"
    nan_out = generation.check_filter_logits(lambda logits, k, p: logits * float("nan")).message
    assert nan_out == (
        "✗ filter_logits: values differ from the reference (your output has NaN where the "
        "reference has none)"
    )
    kept_all = generation.check_filter_logits(lambda logits, k, p: logits).message
    assert kept_all == (
        "✗ filter_logits: values differ from the reference (your output has a finite value "
        "where the reference has an infinity)"
    )


def test_filter_check_does_not_let_the_reader_change_the_input():
    def in_place_first_try(logits, top_k, top_p):
        out = generation.solution_filter_logits(logits, top_k, top_p)
        logits.copy_(out)  # writes over the caller's tensor
        return logits

    assert generation.check_filter_logits(in_place_first_try).passed


# --- sample_step -----------------------------------------------------------------------------------


def test_step_stub_is_not_written_yet():
    def step_stub(model, idx, temperature, top_k, top_p, generator):
        raise NotImplementedError  # your code here

    result = generation.check_sample_step(step_stub)
    assert not result.passed
    assert result.message == not_written("sample_step").message


def test_step_solution_passes():
    result = generation.check_sample_step(generation.solution_sample_step)
    assert result.passed
    assert result.message == "✓ sample_step: matches the reference on 5 random inputs"


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(0.8, None, None), (1.2, 4, 0.7), (0, 3, 0.5)]
)
def test_step_solution_is_one_step_of_generate(temperature, top_k, top_p):
    torch.manual_seed(0)
    model = GPT(textbook(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=16)).eval()
    idx = torch.randint(0, 11, (3, 9))  # longer than the block: both crop
    out = generate(
        model,
        idx,
        1,
        temperature,
        top_k,
        generator=torch.Generator().manual_seed(5),
        use_cache=False,
        top_p=top_p,
    )
    nxt = generation.solution_sample_step(
        model, idx, temperature, top_k, top_p, torch.Generator().manual_seed(5)
    )
    assert nxt.shape == (3, 1)
    assert torch.equal(out[:, -1:], nxt)


@pytest.mark.parametrize("hint, wrong", generation.STEP_MISTAKES)
def test_each_step_mistake_gets_its_hint(hint, wrong):
    result = generation.check_sample_step(wrong)
    assert not result.passed
    assert result.message == f"✗ sample_step: {hint}"


def test_step_written_by_hand_without_greedy_is_named():
    @torch.no_grad()
    def step_first_try(model, idx, temperature, top_k, top_p, generator):
        model.eval()
        logits, _ = model(idx[:, -model.cfg.block_size :])
        model.train()
        logits = filter_logits(logits[:, -1, :] / temperature, top_k, top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

    assert "temperature 0 divided by zero" in generation.check_sample_step(step_first_try).message


def test_step_handed_a_training_model_with_dropout():
    model, *_ = generation._step_inputs()(torch.Generator().manual_seed(0))
    assert model.training
    assert model.cfg.dropout > 0


def test_step_that_forgets_eval_is_named():
    @torch.no_grad()
    def step_first_try(model, idx, temperature, top_k, top_p, generator):  # no model.eval()
        logits = model(idx[:, -model.cfg.block_size :])[0][:, -1, :]
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = filter_logits(logits / temperature, top_k, top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

    message = generation.check_sample_step(step_first_try).message
    assert message.startswith("✗ sample_step: the model ran in training mode")


def test_step_that_leaves_the_model_in_eval_mode_is_named():
    def step_first_try(model, idx, temperature, top_k, top_p, generator):
        model.eval()
        with torch.no_grad():
            logits = model(idx[:, -model.cfg.block_size :])[0][:, -1, :]
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = filter_logits(logits / temperature, top_k, top_p)
        return torch.multinomial(logits.softmax(-1), 1, generator=generator)

    message = generation.check_sample_step(step_first_try).message
    assert "left it in eval mode" in message


def test_step_solution_restores_the_mode():
    model, idx, *_ = generation._step_inputs()(torch.Generator().manual_seed(0))
    generation.solution_sample_step(model, idx, 1.0, None, None, torch.Generator())
    assert model.training
    model.eval()
    generation.solution_sample_step(model, idx, 1.0, None, None, torch.Generator())
    assert not model.training


def test_flat_step_output_reports_the_shape():
    def flat_slip(model, idx, temperature, top_k, top_p, generator):
        return generation.solution_sample_step(model, idx, temperature, top_k, top_p, generator)[
            :, 0
        ]

    result = generation.check_sample_step(flat_slip)
    assert result.message == "✗ sample_step: output has shape [32], expected [32, 1]"


def test_checks_leave_the_global_random_stream_alone():
    torch.manual_seed(0)
    generation.check_sample_step(generation.solution_sample_step)
    generation.check_filter_logits(generation.solution_filter_logits)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


def test_reexported_and_linked_to_their_solutions(capsys):
    assert exercises.check_filter_logits is generation.check_filter_logits
    assert exercises.check_sample_step is generation.check_sample_step
    assert generation.check_filter_logits.solution is generation.solution_filter_logits
    assert generation.check_sample_step.solution is generation.solution_sample_step
    exercises.show_solution(exercises.check_sample_step)
    printed = capsys.readouterr().out
    assert "def solution_filter_logits" in printed  # the function it calls is printed too
    assert "def solution_sample_step" in printed
    assert "def _filter" not in printed
