"""Corpora that need no download, a deterministic train/val split, and random training windows."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from importlib import resources

import torch

from gptlib.tokenizer import CharTokenizer


def _names_file(filename: str) -> list[str]:
    text = resources.files("names").joinpath(filename).read_text(encoding="utf-8")
    return [line.split()[0].lower() for line in text.splitlines() if line.strip()]


def load_names() -> list[str]:
    """The 5,163 distinct US-census first names shipped with the `names` package, lower-case,
    sorted."""
    return sorted(set(_names_file("dist.female.first")) | set(_names_file("dist.male.first")))


def load_surnames() -> list[str]:
    """The 88,799 distinct US-census surnames from the same package, lower-case, sorted."""
    return sorted(set(_names_file("dist.all.last")))


def load_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, read whole."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"text file {os.fspath(path)!r} does not exist; give the path of a UTF-8 text file, "
            "or 'names' / 'surnames' for a built-in corpus"
        ) from None
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{os.fspath(path)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    if not text:
        raise ValueError(f"text file {os.fspath(path)!r} is empty")
    return text


@dataclass
class Corpus:
    """A tokenizer plus the training and validation token streams (1-D LongTensors)."""

    name: str
    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor
    documents: list[str] | None = None  # the training documents, for document corpora

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def encode_documents(documents: list[str], tokenizer: CharTokenizer) -> torch.Tensor:
    """`.emma.olivia.` : every document preceded by BOS, one BOS closing the stream."""
    bos = tokenizer.bos_id
    if bos is None:
        raise ValueError("encoding documents needs a tokenizer with a BOS token")
    ids = [bos]
    for doc in documents:
        ids.extend(tokenizer.encode(doc))
        ids.append(bos)
    return torch.tensor(ids, dtype=torch.long)


def split_documents(documents: list[str], val_fraction: float = 0.1, seed: int = 0):
    """Shuffle with a fixed seed and cut: the same documents land in val on every machine."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    docs = list(documents)
    random.Random(seed).shuffle(docs)
    n_val = max(1, int(round(len(docs) * val_fraction)))
    return docs[n_val:], docs[:n_val]


def load_corpus(source: str = "names", val_fraction: float = 0.1, seed: int = 0) -> Corpus:
    """`names`, `surnames`, or the path of a UTF-8 text file (split 90/10 by position)."""
    if source in ("names", "surnames"):
        documents = load_names() if source == "names" else load_surnames()
        tokenizer = CharTokenizer.from_documents(documents)
        train_docs, val_docs = split_documents(documents, val_fraction, seed)
        return Corpus(
            source,
            tokenizer,
            encode_documents(train_docs, tokenizer),
            encode_documents(val_docs, tokenizer),
            documents=train_docs,
        )
    text = load_text(source)
    tokenizer = CharTokenizer.from_text(text)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    cut = int(len(ids) * (1 - val_fraction))
    return Corpus(os.path.basename(os.fspath(source)), tokenizer, ids[:cut], ids[cut:])


def sample_batch(
    tokens: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows of `block_size` tokens, returned twice: as `idx` and `labels`.

    They are the same window on purpose: the model's loss compares position t's prediction with
    labels[t + 1], so the one-token shift happens inside the loss, not here.
    """
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor of ids, got shape {tuple(tokens.shape)}")
    # A window needs a next token after it to be worth training on, hence block_size + 1.
    n_starts = tokens.numel() - block_size
    if n_starts < 1:
        raise ValueError(
            f"corpus has {tokens.numel()} tokens, but a window of block_size={block_size} needs at "
            f"least block_size + 1 = {block_size + 1}; use a longer text or a smaller block_size"
        )
    starts = torch.randint(0, n_starts, (batch_size,), generator=generator)  # [B]
    offsets = torch.arange(block_size)  # [T]
    windows = tokens[starts[:, None] + offsets[None, :]]  # [B, T]
    if device is not None:
        windows = windows.to(device)
    return windows, windows.clone()
