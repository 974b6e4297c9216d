"""Notebook 00 exercise: many documents, one stream of ids.

The reader writes `encode_stream(documents, tokenizer)`: every document is preceded by BOS and
one BOS closes the stream, so ".emma.olivia." becomes one 1-D tensor of ids. The model then
learns how documents start (the token after BOS) and where they end (predicting BOS).
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.tokenizer import CharTokenizer

__all__ = ["check_encode_stream", "solution_encode_stream"]


def solution_encode_stream(documents: list[str], tokenizer: CharTokenizer) -> torch.Tensor:
    """documents (list of str), tokenizer with a BOS token -> ids [N], dtype long, where
    N = sum(len(doc) for doc in documents) + len(documents) + 1."""
    bos = tokenizer.bos_id
    ids = [bos]  # the stream opens with BOS: the first document has a start too
    for doc in documents:
        ids += tokenizer.encode(doc) + [bos]  # each document is closed by BOS
    return torch.tensor(ids, dtype=torch.long)


def _ids(documents, tokenizer, opening: bool, closing: bool, between: bool = True):
    bos = tokenizer.bos_id
    ids = [bos] if opening else []
    for i, doc in enumerate(documents):
        ids += tokenizer.encode(doc)
        last = i == len(documents) - 1
        if (between and not last) or (last and closing):
            ids.append(bos)
    return torch.tensor(ids, dtype=torch.long)


def _joined(documents, tokenizer):
    return _ids(documents, tokenizer, opening=False, closing=False)


def _no_opening(documents, tokenizer):
    return _ids(documents, tokenizer, opening=False, closing=True)


def _no_closing(documents, tokenizer):
    return _ids(documents, tokenizer, opening=True, closing=False)


def _no_bos(documents, tokenizer):
    return _ids(documents, tokenizer, opening=False, closing=False, between=False)


def _bos_as_zero(documents, tokenizer):
    ids = solution_encode_stream(documents, tokenizer)
    return ids.masked_fill(ids == tokenizer.bos_id, 0)


MISTAKES = [
    (
        "no BOS at the start of the stream: yours begins with the first document's letters, so "
        "nothing marks where that document starts and the model never learns from it how a document "
        "begins",
        _no_opening,
    ),
    (
        "no BOS at the end of the stream: yours stops after the last document's letters, so the "
        "last document is never closed and the model misses one 'the document ends here' example",
        _no_closing,
    ),
    (
        "BOS only between documents (a join): your stream starts with the first document's letters "
        "and ends with the last one's, so the first document has no start marker and the last one "
        "no end marker",
        _joined,
    ),
    (
        "the documents run into each other with no BOS at all: your stream is the letters alone, so "
        "nothing marks where one name ends and the next begins",
        _no_bos,
    ),
    (
        "BOS was written as id 0, which is the letter 'a' in this tokenizer: your stream marks "
        "every boundary with an 'a'; the tokenizer knows its own BOS id (here the last one)",
        _bos_as_zero,
    ),
]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _inputs(g: torch.Generator) -> tuple[list[str], CharTokenizer]:
    n_docs = int(torch.randint(3, 7, (1,), generator=g))
    docs = []
    for _ in range(n_docs):
        length = int(torch.randint(2, 8, (1,), generator=g))
        picks = torch.randint(0, len(_LETTERS), (length,), generator=g).tolist()
        docs.append("".join(_LETTERS[i] for i in picks))
    return docs, CharTokenizer(_LETTERS, bos=".")


def _as_long(encode_stream):
    """Run the reader's function and insist on a 1-D integer tensor (embedding lookups need it)."""

    def run(documents, tokenizer):
        ids = encode_stream(documents, tokenizer)
        if not isinstance(ids, torch.Tensor):
            raise TypeError(
                f"return a torch tensor of ids (torch.tensor(ids, dtype=torch.long)), got "
                f"{type(ids).__name__}"
            )
        if ids.dtype != torch.long:
            raise TypeError(f"the ids must have dtype torch.long, got {ids.dtype}")
        return ids

    return run


@solved_by(solution_encode_stream)
def check_encode_stream(encode_stream) -> CheckResult:
    """Run `encode_stream(documents, tokenizer)` on random lists of short names."""
    return compare(
        "encode_stream", _as_long(encode_stream), solution_encode_stream, _inputs, mistakes=MISTAKES
    )
