import pytest
import torch

from gptlib.data import encode_documents
from gptlib.exercises import check_encode_stream, solution_encode_stream
from gptlib.exercises import nb00_data_and_tokens as exercise
from gptlib.tokenizer import CharTokenizer

TOK = CharTokenizer("abcdefghijklmnopqrstuvwxyz", bos=".")


def test_solution_equals_the_library_stream():
    docs = ["emma", "olivia", "ava"]
    ids = solution_encode_stream(docs, TOK)
    assert ids.dtype == torch.long
    assert TOK.decode(ids.tolist()) == ".emma.olivia.ava."
    assert torch.equal(ids, encode_documents(docs, TOK))


def test_the_trials_use_different_tokenizers():
    tokenizers = [exercise._docs(torch.Generator().manual_seed(1000 + t))[1] for t in range(3)]
    assert tokenizers[0].itos == TOK.itos  # the names' own tokenizer first
    assert len({(t.bos, t.bos_id) for t in tokenizers}) == 3


@pytest.mark.parametrize(("hint", "wrong"), exercise.MISTAKES)
def test_each_slip_is_named_by_its_row(hint, wrong):
    result = check_encode_stream(wrong)
    assert not result.passed and result.message == f"✗ encode_stream: {hint}"


def test_promised_a_join_is_named():
    def joined(documents, tokenizer):
        return torch.tensor(tokenizer.encode(tokenizer.bos.join(documents)))

    assert check_encode_stream(joined).message == f"✗ encode_stream: {exercise.MISTAKES[0][0]}"


def test_promised_the_names_bos_symbol_is_named_on_another_tokenizer():
    def dot_as_bos(documents, tokenizer):  # the names' '.' whatever the tokenizer's BOS is
        return torch.tensor(tokenizer.encode("." + ".".join(documents) + "."))

    message = check_encode_stream(dot_as_bos).message
    assert "is not in the vocabulary" in message and "mark BOS with '.'" in message


@pytest.mark.parametrize(
    ("convert", "said"), [(lambda ids: ids.tolist(), "a list"), (torch.Tensor.float, "float32")]
)
def test_a_stream_that_is_not_long_ids_is_named_without_blaming_a_raise(convert, said):
    result = check_encode_stream(lambda docs, tok: convert(solution_encode_stream(docs, tok)))
    assert (
        not result.passed
        and said in result.message
        and "not a tensor of long ids" in result.message
    )
    assert "raised" not in result.message


def test_a_failing_function_is_reported_as_its_own_error():
    result = check_encode_stream(lambda documents, tokenizer: documents[99])
    assert not result.passed and "IndexError" in result.message


def test_other_ids_are_told_by_position_not_by_a_difference_of_ids():
    def shifted_bos(documents, tokenizer):  # BOS one id off: no row of the table
        ids = solution_encode_stream(documents, tokenizer)
        return ids.masked_fill(ids == tokenizer.bos_id, tokenizer.bos_id - 1)

    def one_more(documents, tokenizer):  # a BOS too many at the end
        ids = solution_encode_stream(documents, tokenizer)
        return torch.cat([ids, ids[:1]])

    message = check_encode_stream(shifted_bos).message
    assert "at index 0 yours is id" in message and "largest difference" not in message
    message = check_encode_stream(one_more).message
    assert "ids where the reference returns" in message and "the first" in message
    assert "shape" not in message
