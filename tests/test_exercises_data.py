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


def test_the_reference_passes():
    assert check_encode_stream(solution_encode_stream).passed


def test_the_trials_use_different_tokenizers():
    tokenizers = [exercise._inputs(torch.Generator().manual_seed(1000 + t))[1] for t in range(3)]
    assert tokenizers[0].itos == TOK.itos  # the names' own tokenizer first
    assert len({(t.bos, t.bos_id) for t in tokenizers}) == 3


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (exercise._no_opening, "no BOS at the start"),
        (exercise._no_closing, "no BOS at the end"),
        (exercise._joined, "BOS only between documents"),
        (exercise._no_bos, "no BOS at all"),
        (exercise._bos_as_zero, "every boundary in your stream is id 0"),
        (exercise._bos_as_26, "every boundary in your stream is id 26"),
    ],
)
def test_each_mistake_is_named(wrong, hint):
    result = check_encode_stream(wrong)
    assert not result.passed
    assert hint in result.message, result.message


def test_hints_are_listed_once_each():
    assert len(exercise.MISTAKES) == 6


def test_a_hard_coded_bos_symbol_is_named():
    def dot_as_bos(documents, tokenizer):  # the names' '.' whatever the tokenizer's BOS is
        return torch.tensor(tokenizer.encode("." + ".".join(documents) + "."))

    result = check_encode_stream(dot_as_bos)
    assert not result.passed
    assert "is not in the vocabulary" in result.message
    assert "tokenizer.bos is its symbol" in result.message, result.message


def test_a_list_instead_of_a_tensor_is_named_without_blaming_a_raise():
    def as_list(documents, tokenizer):
        return solution_encode_stream(documents, tokenizer).tolist()

    result = check_encode_stream(as_list)
    assert not result.passed
    assert "returned a list, where a torch tensor of ids is asked" in result.message
    assert "raised" not in result.message


def test_float_ids_are_named():
    def as_float(documents, tokenizer):
        return solution_encode_stream(documents, tokenizer).float()

    result = check_encode_stream(as_float)
    assert not result.passed and "dtype torch.float32" in result.message
    assert "raised" not in result.message


def test_a_stub_is_not_written_yet():
    def encode_stream(documents, tokenizer):
        raise NotImplementedError

    assert "is not written yet" in check_encode_stream(encode_stream).message


def test_a_failing_function_is_reported_as_its_own_error():
    def broken(documents, tokenizer):
        return documents[99]

    result = check_encode_stream(broken)
    assert not result.passed and "IndexError" in result.message
