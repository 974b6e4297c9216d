import pytest
import torch

from gptlib.data import encode_documents
from gptlib.exercises import check_encode_stream, solution_encode_stream
from gptlib.exercises import data as exercise
from gptlib.tokenizer import CharTokenizer

TOK = CharTokenizer("abcdefghijklmnopqrstuvwxyz", bos=".")


def test_solution_equals_the_library_stream():
    docs = ["emma", "olivia", "ava"]
    ids = solution_encode_stream(docs, TOK)
    assert ids.dtype == torch.long
    assert TOK.decode(ids.tolist()) == ".emma.olivia.ava."
    assert torch.equal(ids, encode_documents(docs, TOK))


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (exercise._no_opening, "no BOS at the start"),
        (exercise._no_closing, "no BOS at the end"),
        (exercise._joined, "BOS only between documents"),
        (exercise._no_bos, "no BOS at all"),
        (exercise._bos_as_zero, "BOS was written as id 0"),
    ],
)
def test_each_mistake_is_named(wrong, hint):
    result = check_encode_stream(wrong)
    assert not result.passed
    assert hint in result.message, result.message


def test_hints_are_listed_once_each():
    assert len(exercise.MISTAKES) == 5


def test_a_list_instead_of_a_tensor_is_refused():
    def as_list(documents, tokenizer):
        return solution_encode_stream(documents, tokenizer).tolist()

    result = check_encode_stream(as_list)
    assert not result.passed and "return a torch tensor" in result.message


def test_float_ids_are_refused():
    def as_float(documents, tokenizer):
        return solution_encode_stream(documents, tokenizer).float()

    result = check_encode_stream(as_float)
    assert not result.passed and "torch.long" in result.message
