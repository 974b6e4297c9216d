"""Notebook 00 exercise: many documents, one stream of ids.

The reader writes `encode_stream(documents, tokenizer)`: every document is preceded by BOS and
one BOS closes the stream, so ".emma.olivia." becomes one 1-D tensor of ids. The model then
learns how documents start (the token after BOS) and where they end (predicting BOS). The check's
tokenizers differ from trial to trial (their alphabets, so BOS's id, and their BOS symbols), so a
stream that only works for the names' tokenizer shows up.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, not_written, solved_by
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


def _bos_as_26(documents, tokenizer):
    ids = solution_encode_stream(documents, tokenizer)
    return ids.masked_fill(ids == tokenizer.bos_id, 26)  # the names' BOS id, whatever the tokenizer


MISTAKES = [
    (
        "no BOS at the start of the stream: yours begins with the first document's letters, so "
        "nothing marks where that document starts and the model never learns from it how a "
        "document begins",
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
        "every boundary in your stream is id 0, which is a letter of the tokenizer ('a' in the "
        "names' one), not its BOS: the model would read each boundary as that letter",
        _bos_as_zero,
    ),
    (
        "every boundary in your stream is id 26, BOS's id in the names' tokenizer; this tokenizer "
        "has another alphabet, so its BOS has another id and 26 is a letter or no id at all",
        _bos_as_26,
    ),
]

_ERROR_HINTS = [
    (
        "is not in the vocabulary",
        "the character it names is not one of this tokenizer's symbols; the check's tokenizers do "
        "not all have the names' alphabet or mark BOS with '.' (tokenizer.bos is its symbol)",
    ),
]

# Trial 0 is the names' tokenizer; the others have a shorter alphabet and another BOS symbol.
_ALPHABETS = [("abcdefghijklmnopqrstuvwxyz", "."), ("aeiklmnorst", "|"), ("abdeilmnoruy", "#")]


def _inputs(g: torch.Generator) -> tuple[list[str], CharTokenizer]:
    letters, bos = _ALPHABETS[(int(g.initial_seed()) - 1000) % len(_ALPHABETS)]  # compare's seeds
    n_docs = int(torch.randint(3, 7, (1,), generator=g))
    docs = []
    for _ in range(n_docs):
        length = int(torch.randint(2, 8, (1,), generator=g))
        picks = torch.randint(0, len(letters), (length,), generator=g).tolist()
        docs.append("".join(letters[i] for i in picks))
    return docs, CharTokenizer(letters, bos=bos)


def _not_ids(ids) -> str | None:
    """What is wrong with the type of a returned stream, or None when it is a tensor of ids."""
    if not isinstance(ids, torch.Tensor):
        return (
            f"encode_stream returned a {type(ids).__name__}, where a torch tensor of ids is asked "
            "(the embedding lookup of notebook 01 indexes with one)"
        )
    if ids.dtype != torch.long:
        return (
            f"encode_stream returned a tensor of dtype {ids.dtype}, where ids of dtype torch.long "
            "are asked (a table is indexed with integers)"
        )
    return None


@solved_by(solution_encode_stream)
def check_encode_stream(encode_stream) -> CheckResult:
    """Run `encode_stream(documents, tokenizer)` on random lists of short names, with a different
    tokenizer in each trial."""
    try:
        first = encode_stream(*_inputs(torch.Generator().manual_seed(1000)))
    except NotImplementedError:
        return not_written("encode_stream")
    except Exception:  # compare runs it again and says how it failed
        first = None
    if first is not None and (wrong := _not_ids(first)):
        return CheckResult(False, f"✗ {wrong}")
    return compare(
        "encode_stream",
        encode_stream,
        solution_encode_stream,
        _inputs,
        mistakes=MISTAKES,
        error_hints=_ERROR_HINTS,
    )
