"""Corpora that need no download, a reader's own files, a deterministic train/val split, and
random training windows.

Notebook 00 (data and tokens) teaches this module."""

from __future__ import annotations

import hashlib
import os
import random
import re
import stat
import statistics
from dataclasses import dataclass
from importlib import resources

import torch

from gptlib.language import N_, _
from gptlib.tokenizer import CharTokenizer


def _names_file(filename: str) -> list[str]:
    text = resources.files("names").joinpath(filename).read_text(encoding="utf-8")
    return [line.split()[0].lower() for line in text.splitlines() if line.strip()]


def load_names() -> list[str]:
    """The 5,163 distinct US-census first names shipped with the `names` package, lower-case,
    sorted.

    Taught in notebook 00 (data and tokens)."""
    return sorted(set(_names_file("dist.female.first")) | set(_names_file("dist.male.first")))


def load_surnames() -> list[str]:
    """The 88,799 distinct US-census surnames from the same package, lower-case, sorted.

    Used in notebook 14 (your gpt), through load_corpus."""
    return sorted(set(_names_file("dist.all.last")))


# The 300 Tang poems of Debian's `fortunes-zh` package (a fortune(6) file: `%` between poems).
TANG300_PATH = "/usr/share/games/fortunes/tang300"
TANG300_INSTALL = "sudo apt-get install fortunes-zh"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the terminal colour codes fortune prints titles with


def load_tang300(path: str | os.PathLike | None = None) -> list[str]:
    """The Tang poems, one document per poem, in file order: `《title》author` as the first line,
    then the poem's lines (colour codes removed). `path` defaults to TANG300_PATH.

    Used in notebook 14 (your gpt), through load_corpus."""
    path = os.fspath(path) if path is not None else TANG300_PATH
    if not os.path.exists(path):
        raise FileNotFoundError(
            _(
                "the Tang poem corpus {path} is not installed; it comes with Debian's fortunes-zh "
                "package: run `{install}` once (or give a UTF-8 text file with --data PATH)"
            ).format(path=repr(path), install=TANG300_INSTALL)
        )
    with open(path, encoding="utf-8") as f:
        text = _ANSI.sub("", f.read())
    poems = []
    for entry in text.split("\n%\n"):
        lines = [line.strip() for line in entry.strip("%\n").splitlines() if line.strip()]
        if len(lines) < 3:
            continue
        title, author = lines[0], lines[1].removeprefix("作者：")
        poems.append("\n".join([title + author, *lines[2:]]))
    return poems


BUILT_IN = ("names", "surnames", "tang300")
_GIVE_A_FILE = N_(  # shown translated, as the {give} of load_text's refusals
    "give the path of a UTF-8 text file, or 'names' / 'surnames' / 'tang300' for a built-in corpus"
)


def load_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file, read whole; a byte-order mark at its start is dropped ("utf-8-sig").

    Refuses, with one line that says what to give instead: a missing file, a folder, a file that
    cannot be read, one that is not UTF-8, and one with no text (empty, or only whitespace).

    Taught in notebook 10 (training loop).
    """
    shown = repr(os.fspath(path))
    if os.path.isdir(path):
        raise ValueError(
            _("{path} is a folder, not a text file; {give}").format(
                path=shown, give=_(_GIVE_A_FILE)
            )
        )
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a pipe would wait forever, a device never end
            raise ValueError(
                _("{path} is not a regular file (a pipe, a device, a socket); {give}").format(
                    path=shown, give=_(_GIVE_A_FILE)
                )
            )
        if info.st_size > MAX_TEXT_BYTES:
            raise ValueError(
                _(
                    "{path} holds {size} GB, more than the {limit} GB a text file may hold here "
                    "(each character becomes an 8-byte token in memory); give the first part of it"
                ).format(
                    path=shown,
                    size=f"{info.st_size / 1e9:,.1f}",
                    limit=f"{MAX_TEXT_BYTES / 1e9:.1f}",
                )
            )
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            _("text file {path} does not exist; {give}").format(path=shown, give=_(_GIVE_A_FILE))
        ) from None
    except UnicodeDecodeError as e:
        raise ValueError(
            _("{path} is not UTF-8 text ({reason} at byte {byte})").format(
                path=shown, reason=e.reason, byte=e.start
            )
        ) from None
    except OSError as e:  # no permission, a device, ...
        raise ValueError(
            _("cannot read {path} ({error}); make it readable, or {give}").format(
                path=shown, error=e.strerror or e, give=_(_GIVE_A_FILE)
            )
        ) from None
    _check_is_text(text, shown)
    return text


def _check_is_text(text: str, shown: str) -> None:
    """Refuse what load_text read from the file `shown` when it holds no text: empty, only
    whitespace, or mostly control characters (a binary file)."""
    if not text:
        raise ValueError(_("text file {path} is empty").format(path=shown))
    if not text.strip():
        raise ValueError(
            _("{path} holds only blank lines / whitespace; give a file with text").format(
                path=shown
            )
        )
    control = sum(text.count(c) for c in _CONTROL)
    if control > MAX_CONTROL_SHARE * len(text):
        raise ValueError(
            _(
                "{path} does not look like text: {control} of its {characters} characters "
                "({share}) are control characters such as NUL, more than {limit}; give a text file"
            ).format(
                path=shown,
                control=f"{control:,}",
                characters=f"{len(text):,}",
                share=f"{control / len(text):.0%}",
                limit=f"{MAX_CONTROL_SHARE:.0%}",
            )
        )


# A text file larger than this is refused (1 GB: a character-level model of it would train for
# months on a CPU, and its tokens alone take 8 GB).
MAX_TEXT_BYTES = 1_000_000_000
# Text has hardly any control characters besides tab and the line ends; a binary file, or one of
# NUL bytes, is mostly made of them.
_CONTROL = [chr(c) for c in range(32) if chr(c) not in "\t\n\r\x0b\x0c\x1b"] + ["\x7f"]
MAX_CONTROL_SHARE = 0.01


@dataclass
class Corpus:
    """A tokenizer plus the training and validation token streams (1-D LongTensors).

    What load_corpus returns; notebooks use its fields.

    Used in notebook 00 (data and tokens), through load_corpus."""

    name: str
    tokenizer: CharTokenizer
    train: torch.Tensor
    val: torch.Tensor
    documents: list[str] | None = None  # the training documents, for document corpora
    reading: str = "documents"  # documents (built-in) | lines (one per line) | text (running)
    reason: str = ""  # one line saying what was read and why

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def fingerprint(self) -> str:
        """A short hash of the vocabulary and both token streams: equal fingerprints, same data."""
        h = hashlib.sha256(repr(self.tokenizer.to_dict()).encode())
        for stream in (self.train, self.val):
            h.update(stream.to(torch.int64).cpu().numpy().tobytes())
            h.update(b"|")
        return h.hexdigest()[:16]

    def check_fits(self, block_size: int) -> None:
        """Raise before training when a window of `block_size` cannot be drawn from the data."""
        n_train, n_val = self.train.numel(), self.val.numel()
        if n_train < block_size + 1:
            raise ValueError(
                _(
                    "corpus {name} has {tokens} training tokens, but a window of "
                    "block_size={block_size} needs at least {needed}; use a longer text or "
                    "--block-size {most} or less"
                ).format(
                    name=repr(self.name),
                    tokens=f"{n_train:,}",
                    block_size=block_size,
                    needed=block_size + 1,
                    most=max(1, n_train - 1),
                )
            )
        if n_val < 3:
            raise ValueError(
                _(
                    "corpus {name} leaves {tokens} token(s) for validation, fewer than the 3 "
                    "a validation window needs; use a longer text"
                ).format(name=repr(self.name), tokens=n_val)
            )


def encode_documents(documents: list[str], tokenizer: CharTokenizer) -> torch.Tensor:
    """`.emma.olivia.` : every document preceded by BOS, one BOS closing the stream.

    Taught in notebook 00 (data and tokens)."""
    bos = tokenizer.bos_id
    if bos is None:
        raise ValueError(_("encoding documents needs a tokenizer with a BOS token"))
    ids = [bos]
    for doc in documents:
        ids.extend(tokenizer.encode(doc))
        ids.append(bos)
    return torch.tensor(ids, dtype=torch.long)


def split_documents(documents: list[str], val_fraction: float = 0.1, seed: int = 0):
    """Shuffle with a fixed seed and cut: the same documents land in val on every machine.

    The seeded train/val split load_corpus makes.

    Used in notebook 00 (data and tokens), through load_corpus."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(
            _("val_fraction must be in (0, 1), got {value}").format(value=val_fraction)
        )
    docs = list(documents)
    random.Random(seed).shuffle(docs)
    n_val = max(1, int(round(len(docs) * val_fraction)))
    return docs[n_val:], docs[:n_val]


READINGS = ("auto", "lines", "text")
# A file reads as one item per line when its median line is this short: names, words and titles
# are far shorter, hard-wrapped prose (65-80 characters) is longer.
MAX_MEDIAN_LINE = 50
# Blank lines mark paragraphs (running text) when at least this share of the lines are blank:
# prose and verse have one every few lines (10-30%), a list has none, or a few strays (one in
# 32,033 names, say) that must not turn it into running text.
MIN_BLANK_SHARE = 0.01


def detect_reading(text: str) -> tuple[str, str]:
    """("lines" | "text", why): one document per line, or running text.

    Running text when the blank lines are at least MIN_BLANK_SHARE (1%) of the lines (trailing
    ones not counted): they separate paragraphs. Fewer are strays and are ignored (why says how
    many); the file is then one document per line when its median non-blank line has at most
    MAX_MEDIAN_LINE characters, running text otherwise.

    How load_corpus reads a text file, by lines or as running text: the first line notebook 14's
    project prints when TEXT is a file of yours.

    Used in notebook 14 (your gpt), through load_corpus.
    """
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    filled = [line for line in lines if line.strip()]
    blank = len(lines) - len(filled)
    if len(filled) < 2:
        return "text", _("a single line")
    share = blank / len(lines)
    if share >= MIN_BLANK_SHARE:
        return "text", _(
            "{blank} blank line(s) between paragraphs, {share} of {lines} lines (at least {least})"
        ).format(
            blank=f"{blank:,}",
            share=f"{share:.0%}",
            lines=f"{len(lines):,}",
            least=f"{MIN_BLANK_SHARE:.0%}",
        )
    median = statistics.median(len(line) for line in filled)
    if median > MAX_MEDIAN_LINE:
        return "text", _("median line of {median} characters, more than {most}").format(
            median=f"{median:g}", most=MAX_MEDIAN_LINE
        )
    blanks = (
        _("{blank} blank line(s) ignored (under {least} of the lines)").format(
            blank=f"{blank:,}", least=f"{MIN_BLANK_SHARE:.0%}"
        )
        if blank
        else _("no blank line")
    )
    return "lines", _(
        "{lines} lines, {blanks}, median line of {median} characters (at most {most})"
    ).format(lines=f"{len(filled):,}", blanks=blanks, median=f"{median:g}", most=MAX_MEDIAN_LINE)


def _bos_symbol(documents: list[str]) -> str:
    """`.` as in the names corpus, unless the documents use it; then a symbol they do not use."""
    used = set("".join(documents))
    for symbol in (".", "\n", "|", "~", "\x00"):
        if symbol not in used:
            return symbol
    raise ValueError(_("the documents use every candidate BOS symbol (. newline | ~ NUL)"))


def document_corpus(
    name: str, documents: list[str], val_fraction: float = 0.1, seed: int = 0, **kw
) -> Corpus:
    """Documents separated by BOS; a shuffled, seeded, document-level train/val split.

    The step of load_corpus that builds a Corpus from documents.

    Used in notebook 00 (data and tokens), through load_corpus."""
    if len(documents) < 2:
        raise ValueError(
            _(
                "corpus {name} has {documents} document(s); a train/val split needs at least 2"
            ).format(name=repr(name), documents=len(documents))
        )
    tokenizer = CharTokenizer.from_documents(documents, bos=_bos_symbol(documents))
    train_docs, val_docs = split_documents(documents, val_fraction, seed)
    return Corpus(
        name,
        tokenizer,
        encode_documents(train_docs, tokenizer),
        encode_documents(val_docs, tokenizer),
        documents=train_docs,
        **kw,
    )


def _built_in(source: str) -> tuple[list[str], str]:
    """The documents of the built-in corpus `source`, and the line that says what they are."""
    if source == "tang300":
        documents = load_tang300()
        why = _("{count} Tang poems from {path}, one document per poem").format(
            count=len(documents), path=TANG300_PATH
        )
        return documents, why
    if source == "names":
        documents = load_names()
        why = _("{count} US-census first names, one document per name")
    else:
        documents = load_surnames()
        why = _("{count} US-census surnames, one document per name")
    return documents, why.format(count=f"{len(documents):,}")


def load_corpus(
    source: str = "names", val_fraction: float = 0.1, seed: int = 0, reading: str = "auto"
) -> Corpus:
    """`names`, `surnames`, `tang300`, or the path of a UTF-8 text file.

    A file is read either as one document per line (each non-blank line a document, BOS between
    them, split by document like `names`) or as running text (split 90/10 by position).
    `reading="auto"` picks one with `detect_reading`; `"lines"` / `"text"` force it.

    Taught in notebook 00 (data and tokens).
    """
    if reading not in READINGS:
        raise ValueError(
            _("reading must be one of {readings}, got {reading}").format(
                readings=", ".join(READINGS), reading=repr(reading)
            )
        )
    if source in BUILT_IN:
        documents, why = _built_in(source)
        return document_corpus(source, documents, val_fraction, seed, reason=why)
    text = load_text(source)
    name = os.path.basename(os.fspath(source))
    if reading == "auto":
        reading, why = detect_reading(text)
        if reading == "lines":
            why = _("{why}; --format text reads it as running text").format(why=why)
        else:
            why = _("{why}; --format lines reads each line as a document").format(why=why)
    else:
        why = _("as --format {reading} asks").format(reading=reading)
    if reading == "lines":
        documents = [line.strip() for line in text.splitlines() if line.strip()]
        return document_corpus(
            name,
            documents,
            val_fraction,
            seed,
            reading="lines",
            reason=_("one document per line, {why}").format(why=why),
        )
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode_tensor(text)  # no Python list of ints: 8 bytes a character
    cut = int(len(ids) * (1 - val_fraction))
    return Corpus(
        name,
        tokenizer,
        ids[:cut],
        ids[cut:],
        reading="text",
        reason=_("running text, {why}").format(why=why),
    )


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

    Taught in notebook 00 (data and tokens).
    """
    if tokens.dim() != 1:
        raise ValueError(
            _("tokens must be a 1-D tensor of ids, got shape {shape}").format(
                shape=tuple(tokens.shape)
            )
        )
    # A window needs a next token after it to be worth training on, hence block_size + 1.
    n_starts = tokens.numel() - block_size
    if n_starts < 1:
        raise ValueError(
            _(
                "corpus has {tokens} tokens, but a window of block_size={block_size} needs at "
                "least block_size + 1 = {needed}; use a longer text or a smaller block_size"
            ).format(tokens=tokens.numel(), block_size=block_size, needed=block_size + 1)
        )
    starts = torch.randint(0, n_starts, (batch_size,), generator=generator)  # [B]
    offsets = torch.arange(block_size)  # [T]
    windows = tokens[starts[:, None] + offsets[None, :]]  # [B, T]
    if device is not None:
        windows = windows.to(device)
    return windows, windows.clone()
