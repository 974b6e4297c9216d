"""The sampling-step check passes its solution, matches gptlib's generation loop, and names each
typical mistake."""

import pytest
import torch

from gptlib import exercises
from gptlib.config import textbook
from gptlib.exercises import generation
from gptlib.generate import generate
from gptlib.model import GPT


def test_solution_passes():
    result = generation.check_sample_step(generation.solution_sample_step)
    assert result.passed
    assert result.message == "✓ sample_step: matches the reference on 3 random inputs"


def test_solution_is_one_step_of_generate():
    torch.manual_seed(0)
    model = GPT(textbook(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=16)).eval()
    idx = torch.randint(0, 11, (3, 9))  # longer than the block: both crop
    out = generate(
        model, idx, 1, temperature=0.8, generator=torch.Generator().manual_seed(5), use_cache=False
    )
    nxt = generation.solution_sample_step(model, idx, 0.8, torch.Generator().manual_seed(5))
    assert nxt.shape == (3, 1)
    assert torch.equal(out[:, -1:], nxt)


@pytest.mark.parametrize(
    "hint, wrong", generation.MISTAKES, ids=lambda m: getattr(m, "__name__", "")
)
def test_each_mistake_gets_its_hint(hint, wrong):
    result = generation.check_sample_step(wrong)
    assert not result.passed
    assert result.message == f"✗ sample_step: {hint}"


def test_flat_output_reports_the_shape():
    def flat(model, idx, temperature, generator):
        return generation.solution_sample_step(model, idx, temperature, generator)[:, 0]

    result = generation.check_sample_step(flat)
    assert result.message == "✗ sample_step: output has shape [32], expected [32, 1]"


def test_not_written_yet():
    def stub(model, idx, temperature, generator):
        raise NotImplementedError

    assert "not written yet" in generation.check_sample_step(stub).message


def test_check_leaves_global_random_stream_alone():
    torch.manual_seed(0)
    generation.check_sample_step(generation.solution_sample_step)
    after = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(1))


def test_reexported_from_package():
    assert exercises.check_sample_step is generation.check_sample_step
    assert exercises.solution_sample_step is generation.solution_sample_step


def test_temperature_left_out_gets_the_no_effect_hint():
    result = generation.check_sample_step(generation._no_temperature)
    assert "the temperature has no effect" in result.message
