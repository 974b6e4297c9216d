"""Notebook 00: `encode_stream(documents, tokenizer)`, BOS before each document and at the end,
".emma.olivia." as long ids; each trial's tokenizer has its own alphabet and BOS symbol."""

from functools import partial

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_
from gptlib.tokenizer import CharTokenizer

__all__ = ["check_encode_stream", "solution_encode_stream"]


def solution_encode_stream(documents: list[str], tokenizer: CharTokenizer) -> torch.Tensor:
    """N documents of total length L, a tokenizer with BOS -> ids [L + N + 1], dtype long."""
    bos = tokenizer.bos_id
    ids = [bos]  # the stream opens with BOS: the first document has a start too
    for doc in documents:
        ids += tokenizer.encode(doc) + [bos]  # each document is closed by BOS
    return torch.tensor(ids, dtype=torch.long)


def _slip(documents, tokenizer, *, opening=True, closing=True, bos=None):
    bos = tokenizer.bos_id if bos is None else bos
    ids = [bos] if opening else []
    for i, doc in enumerate(documents):
        ids += tokenizer.encode(doc) + ([bos] if closing or i < len(documents) - 1 else [])
    return torch.tensor(ids, dtype=torch.long)


MISTAKES = [
    (N_("BOS only between documents (a join): your stream starts with the first document's "
        "letters and ends with the last one's, so the first has no start marker and the last no "
        "end marker"),
     partial(_slip, opening=False, closing=False)),
    (N_("no BOS at the start of the stream: yours begins with the first document's "
        "letters, so the model never learns from that document how a document "
        "begins"), partial(_slip, opening=False)),
    (N_("no BOS at the end of the stream: yours stops after the last document's letters, so the "
        "last document is never closed"), partial(_slip, closing=False)),
    (N_("every boundary in your stream is id 26, BOS's id in the names' tokenizer; this tokenizer "
        "has another alphabet, so its BOS has another id and 26 is a letter or no id at all"),
     partial(_slip, bos=26)),
]  # fmt: skip
ERRORS = [
    ("is not in the vocabulary", N_("the character it names is not one of this tokenizer's "
                                    "symbols; the check's tokenizers do not all have the names' "
                                    "alphabet or mark BOS with '.'")),
]  # fmt: skip
_ALPHABETS = [("abcdefghijklmnopqrstuvwxyz", "."), ("aeiklmnorst", "|"), ("abdeilmnoruy", "#")]


def _docs(g: torch.Generator) -> tuple[list[str], CharTokenizer]:
    # Trial 0 is the names' tokenizer; the others have a shorter alphabet and another BOS.
    letters, bos = _ALPHABETS[(g.initial_seed() - 1000) % len(_ALPHABETS)]  # compare's seeds
    lengths = torch.randint(2, 8, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g)
    picks = [torch.randint(0, len(letters), (int(n),), generator=g).tolist() for n in lengths]
    return ["".join(letters[i] for i in p) for p in picks], CharTokenizer(letters, bos=bos)


@solved_by(solution_encode_stream)
def check_encode_stream(encode_stream) -> CheckResult:
    """Run `encode_stream` on random lists of short names, with another tokenizer in each trial;
    a list, or float ids, is not the tensor of long ids asked for."""
    return compare("encode_stream", encode_stream, solution_encode_stream, _docs,
                   MISTAKES, error_hints=ERRORS)  # fmt: skip
