"""Characters to integer ids and back: the simplest tokenizer a language model can have.

Notebook 00 (data and tokens) teaches this module."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import torch

from gptlib.language import _


class CharTokenizer:
    """One id per character, ids given in sorted character order.

    For a corpus made of separate documents (names, say) an extra BOS ("beginning of sequence")
    token marks where one document ends and the next begins. It is shown as `bos` (default ".")
    when decoding and takes the last id, so the 26 letters keep ids 0..25 and BOS is 26.

    Taught in notebook 00 (data and tokens).
    """

    def __init__(self, chars: Iterable[str], bos: str | None = None):
        chars = sorted(set(chars))
        if any(len(c) != 1 for c in chars):
            raise ValueError(_("CharTokenizer takes single characters"))
        if not chars:
            raise ValueError(_("cannot build a tokenizer from an empty corpus"))
        if bos is not None and bos in chars:
            raise ValueError(
                _(
                    "the BOS symbol {bos} also occurs in the corpus; pass another symbol as bos="
                ).format(bos=repr(bos))
            )
        self.chars = chars
        self.bos = bos
        self.itos = list(chars) + ([bos] if bos is not None else [])
        self.stoi = {s: i for i, s in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str, bos: str | None = None) -> CharTokenizer:
        return cls(text, bos=bos)

    @classmethod
    def from_documents(cls, documents: Iterable[str], bos: str = ".") -> CharTokenizer:
        return cls("".join(documents), bos=bos)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def bos_id(self) -> int | None:
        return None if self.bos is None else self.stoi[self.bos]

    def encode(self, text: str) -> list[int]:
        ids = []
        for position, ch in enumerate(text):
            i = self.stoi.get(ch)
            if i is None:
                raise self._unknown(ch, position)
            ids.append(i)
        return ids

    def _unknown(self, ch: str, position: int) -> ValueError:
        shown = "".join(self.itos)
        return ValueError(
            _(
                "character {char} at position {position} is not in the vocabulary of "
                "{vocab_size} symbols ({shown}); remove it or build the tokenizer "
                "from text that contains it"
            ).format(
                char=repr(ch), position=position, vocab_size=self.vocab_size, shown=repr(shown)
            )
        )

    def encode_tensor(self, text: str, chunk: int = 1 << 22) -> torch.Tensor:
        """`encode(text)` as a 1-D long tensor, for a large text: read `chunk` characters at a
        time as code points and looked up in a table, so the memory it needs is the result (8
        bytes per character) and one chunk, not a Python list of ints (about 36 bytes each)."""
        top = max(ord(c) for c in self.itos)
        table = torch.full((top + 2,), -1, dtype=torch.long)  # the last entry: beyond the table
        for c, i in self.stoi.items():
            table[ord(c)] = i
        out = torch.empty(len(text), dtype=torch.long)
        for start in range(0, len(text), chunk):
            piece = text[start : start + chunk]
            codes = torch.frombuffer(bytearray(piece.encode("utf-32-le")), dtype=torch.int32)
            ids = table[codes.long().clamp(max=top + 1)]
            unknown = (ids < 0).nonzero()
            if len(unknown):
                where = start + int(unknown[0])
                raise self._unknown(text[where], where)
            out[start : start + len(piece)] = ids
        return out

    def decode(self, ids: Sequence[int] | Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(
                    _("id {id} is outside the vocabulary 0..{last}").format(
                        id=i, last=self.vocab_size - 1
                    )
                )
            out.append(self.itos[i])
        return "".join(out)

    def to_dict(self) -> dict:
        return {"type": "char", "chars": self.chars, "bos": self.bos}

    @classmethod
    def from_dict(cls, data: dict) -> CharTokenizer:
        if data.get("type") != "char" or "chars" not in data:
            raise ValueError(
                _("not a CharTokenizer description: keys {keys}").format(keys=sorted(data))
            )
        return cls(data["chars"], bos=data.get("bos"))

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, ensure_ascii=False, indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> CharTokenizer:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        bos = f", bos={self.bos!r}" if self.bos is not None else ""
        return f"CharTokenizer(vocab_size={self.vocab_size}{bos})"
