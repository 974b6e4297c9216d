"""The corpus of a training run, and a large file of running text read in pieces: its tokens
kept in the smallest integer type that holds the vocabulary (one byte a character for up to 256
symbols) rather than 8 bytes each, the same corpus `gptlib.data.load_corpus` reads whole."""

from __future__ import annotations

import collections
import os

import torch

from gptlib.commandline.settings import TrainSettings
from gptlib.data import (
    _CONTROL,
    BUILT_IN,
    MAX_CONTROL_SHARE,
    MAX_MEDIAN_LINE,
    MAX_TEXT_BYTES,
    MIN_BLANK_SHARE,
    Corpus,
    load_corpus,
)
from gptlib.language import _
from gptlib.tokenizer import CharTokenizer
from gptlib.train import estimate_loss, eval_batches


def read_corpus(settings: TrainSettings, say) -> Corpus:
    """The corpus, with a line first when the file is large enough to take a while; a large file
    of running text is read in pieces (`_stream_text_corpus`)."""
    data = settings.data
    if data not in BUILT_IN and os.path.isfile(data):
        size = os.path.getsize(data)
        if size > STREAM_BYTES:
            say(
                _("reading {data} ({size} MB)...").format(data=data, size=f"{size / 1e6:,.0f}"),
                flush=True,
            )
            if size <= MAX_TEXT_BYTES and settings.format in ("auto", "text"):
                corpus = _stream_text_corpus(data, settings.format)
                if corpus is not None:
                    return corpus
    return load_corpus(data, reading=settings.format)


# A text file larger than this is read in pieces, its tokens kept in the smallest integer type
# that holds the vocabulary (one byte a character for up to 256 symbols) rather than 8 bytes each.
STREAM_BYTES = 20_000_000


STREAM_CHARS = 1 << 22  # characters read and encoded at a time


def _pieces(path: str):
    """The text of `path` (UTF-8, a byte-order mark dropped), STREAM_CHARS characters at a time;
    load_text's one-line refusal for a file that is not UTF-8."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            while piece := f.read(STREAM_CHARS):
                yield piece
    except UnicodeDecodeError as e:
        said = _("{path} is not UTF-8 text ({reason} at byte {byte})")
        raise ValueError(said.format(path=repr(path), reason=e.reason, byte=e.start)) from None


class _Lines:
    """What `gptlib.data.detect_reading` counts, gathered a piece at a time: the lines (as
    `str.splitlines` cuts them), the blank ones, and how many non-blank lines have each length."""

    def __init__(self) -> None:
        self.lines = self.blank = self.trailing = 0
        self.lengths: collections.Counter = collections.Counter()
        self.carry = ""

    def add(self, piece: str, last: bool = False) -> None:
        lines = (self.carry + piece).splitlines(keepends=True)
        self.carry = ""
        if lines and not last and (lines[-1] == lines[-1].rstrip("\r\n") or lines[-1][-1] == "\r"):
            self.carry = lines.pop()  # a line (or a \r\n) cut by the end of the piece
        for line in lines:
            line = line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
            self.lines += 1
            if line.strip():
                self.lengths[len(line)] += 1
                self.trailing = 0
            else:
                self.blank += 1
                self.trailing += 1

    def reading(self) -> str:
        """ "lines" or "text", as detect_reading decides it for the whole text."""
        lines, blank = self.lines - self.trailing, self.blank - self.trailing
        filled = lines - blank
        if filled < 2 or blank / lines >= MIN_BLANK_SHARE:
            return "text"
        return "lines" if self._median(filled) <= MAX_MEDIAN_LINE else "text"

    def why(self) -> str:
        """detect_reading's reason for "text", in its own words."""
        lines, blank = self.lines - self.trailing, self.blank - self.trailing
        if lines - blank < 2:
            return _("a single line")
        share = blank / lines
        if share >= MIN_BLANK_SHARE:
            said = _("{blank} blank line(s) between paragraphs, {share} of {lines} lines (at least "
                     "{least})")  # fmt: skip
            return said.format(
                blank=f"{blank:,}",
                share=f"{share:.0%}",
                lines=f"{lines:,}",
                least=f"{MIN_BLANK_SHARE:.0%}",
            )
        said = _("median line of {median} characters, more than {most}")
        return said.format(median=f"{self._median(lines - blank):g}", most=MAX_MEDIAN_LINE)

    def _median(self, n: int) -> float:
        middle, seen, low = (n - 1) // 2, 0, None
        for length in sorted(self.lengths):
            seen += self.lengths[length]
            if low is None and seen > middle:
                low = length
            if seen > n // 2:
                return (low + length) / 2
        return float(low)


def _stream_text_corpus(path: str, reading: str):
    """A large file of running text as `load_corpus` reads it (the same vocabulary, tokens,
    split and fingerprint), read twice in pieces instead of whole: first its characters and
    lines, then its tokens, kept in the smallest integer type the vocabulary fits (the windows
    are made long integers one batch at a time). None when the file reads as one document per line (`load_corpus` reads it)."""
    chars, lines, control, size, filled = set(), _Lines(), 0, 0, False
    for piece in _pieces(path):
        chars.update(piece)
        control += sum(piece.count(c) for c in _CONTROL)
        filled = filled or bool(piece.strip())
        size += len(piece)
        if reading == "auto":
            lines.add(piece)
    lines.add("", last=True)
    if not size or not filled or control > MAX_CONTROL_SHARE * size:
        return None  # load_corpus refuses it, in its own words
    if reading == "auto" and lines.reading() == "lines":
        return None
    if reading == "auto":
        why = _("{why}; --format lines reads each line as a document").format(why=lines.why())
    else:
        why = _("as --format {reading} asks").format(reading=reading)
    tokenizer = CharTokenizer.from_text("".join(sorted(chars)))
    kind = torch.uint8 if tokenizer.vocab_size <= 256 else torch.int16
    kind = kind if tokenizer.vocab_size <= 32767 else torch.int32
    top = max(ord(c) for c in tokenizer.itos)
    table = torch.zeros(top + 1, dtype=kind)
    for c, i in tokenizer.stoi.items():
        table[ord(c)] = i
    ids = torch.empty(size, dtype=kind)
    start = 0
    for piece in _pieces(path):
        codes = torch.frombuffer(bytearray(piece.encode("utf-32-le")), dtype=torch.int32)
        ids[start : start + len(piece)] = table[codes.long()]
        start += len(piece)
    cut = int(size * 0.9)
    return Corpus(
        os.path.basename(path),
        tokenizer,
        ids[:cut],
        ids[cut:],
        reading="text",
        reason=_("running text, {why}").format(why=why),
    )


def mean_loss(model, tokens: torch.Tensor, batch_size: int, n_batches: int, seed=1234) -> float:
    """`gptlib.train.estimate_loss`, also for tokens kept in a smaller integer type than the
    model reads (a large text read by the command line): the same windows, made long integers
    one batch at a time."""
    if tokens.dtype == torch.long:
        return estimate_loss(model, tokens, batch_size, n_batches, seed)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        losses = [
            model(idx.long(), labels.long())[1].item()
            for idx, labels in eval_batches(model, tokens, batch_size, n_batches, seed)
        ]
    model.train(was_training)
    return sum(losses) / len(losses)
