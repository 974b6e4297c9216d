import os
from pathlib import Path

import pytest
import torch

import gptlib.data
from gptlib.data import (
    READINGS,
    TANG300_PATH,
    detect_reading,
    load_corpus,
    load_names,
    load_surnames,
    load_tang300,
    sample_batch,
)

HAS_TANG300 = os.path.exists(TANG300_PATH)


def test_names_corpus_mirrors_microgpt():
    names = load_names()
    assert len(names) == 5163 == len(set(names))
    assert all(n.islower() and n.isalpha() for n in names)
    corpus = load_corpus("names")
    assert corpus.vocab_size == 27 and corpus.tokenizer.bos_id == 26
    # documents are separated by BOS and the stream starts and ends with one
    for stream in (corpus.train, corpus.val):
        assert stream[0] == 26 and stream[-1] == 26
    n_docs = int((corpus.train == 26).sum() + (corpus.val == 26).sum()) - 2
    assert n_docs == 5163


def test_surnames_count():
    assert len(load_surnames()) == 88799


def test_split_is_deterministic_and_disjoint():
    a, b = load_corpus("names"), load_corpus("names")
    assert torch.equal(a.train, b.train) and torch.equal(a.val, b.val)
    val_names = set(a.tokenizer.decode(a.val.tolist()).strip(".").split("."))
    train_names = set(a.tokenizer.decode(a.train.tolist()).strip(".").split("."))
    assert not val_names & train_names
    assert 0.08 < len(val_names) / 5163 < 0.12


def test_text_file_corpus(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("hello world\nhello torch\n" * 10, encoding="utf-8")
    corpus = load_corpus(str(path), reading="text")
    assert corpus.tokenizer.bos is None and corpus.reading == "text"
    assert corpus.train.numel() + corpus.val.numel() == len(path.read_text())
    assert corpus.tokenizer.decode(corpus.train[:11].tolist()) == "hello world"


def test_missing_and_non_utf8_text(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus(str(tmp_path / "nope.txt"))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        load_corpus(str(bad))


def test_a_folder_or_an_unreadable_file_is_refused_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(
        ValueError, match=r"is a folder, not a text file; give .*UTF-8 text file"
    ) as e:
        load_corpus(str(tmp_path))
    assert str(tmp_path) in str(e.value) and "'tang300'" in str(e.value)
    assert "\n" not in str(e.value)
    path = tmp_path / "secret.txt"
    path.write_text("emma\nolivia\n", encoding="utf-8")

    def no_permission(file, *args, **kwargs):
        raise PermissionError(13, "Permission denied", os.fspath(file))

    # chmod cannot keep root out, so the refusal is played by `open` itself
    monkeypatch.setattr(gptlib.data, "open", no_permission, raising=False)
    with pytest.raises(ValueError, match=r"cannot read '.*secret.txt' \(Permission denied\)"):
        load_corpus(str(path))


@pytest.mark.parametrize("reading", READINGS)
@pytest.mark.parametrize("content", ["\n\n\n", " \n\t\n  \r\n\n"])
def test_a_file_of_blank_lines_is_refused_at_once(tmp_path, content, reading):
    path = tmp_path / "blank.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="blank.txt' holds only blank lines / whitespace; give a"):
        load_corpus(str(path), reading=reading)


def test_a_byte_order_mark_is_dropped(tmp_path):
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text("emma\nolivia\nava\n", encoding="utf-8")
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())  # what Windows Notepad writes
    for reading in READINGS:
        a, b = load_corpus(str(plain), reading=reading), load_corpus(str(marked), reading=reading)
        assert "\ufeff" not in b.tokenizer.chars
        assert a.fingerprint() == b.fingerprint()


def test_sample_batch_gives_the_same_window_twice():
    tokens = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    idx, labels = sample_batch(tokens, 4, 8, g)
    assert idx.shape == labels.shape == (4, 8)
    assert torch.equal(idx, labels)
    # each row is a contiguous window of the corpus
    assert torch.equal(idx[:, 1:] - idx[:, :-1], torch.ones(4, 7, dtype=torch.long))
    assert int(idx.max()) <= 98  # a window must leave one token after it
    idx2, _ = sample_batch(tokens, 4, 8, torch.Generator().manual_seed(0))
    assert torch.equal(idx, idx2)


def test_sample_batch_rejects_short_corpus():
    with pytest.raises(ValueError, match=r"8 tokens.*block_size \+ 1 = 9"):
        sample_batch(torch.arange(8), 2, 8)
    idx, _ = sample_batch(torch.arange(9), 2, 8)  # exactly block_size + 1 is enough
    assert torch.equal(idx[0], torch.arange(8))


def test_one_name_per_line_reads_like_the_names_corpus(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("\n".join(load_names()) + "\n", encoding="utf-8")  # sorted, one per line
    corpus, names = load_corpus(str(path)), load_corpus("names")
    assert corpus.reading == "lines" and "5,163 lines" in corpus.reason
    assert "--format text" in corpus.reason  # says how to read it the other way
    # the same documents, the same seeded shuffle: the very token streams of the built-in corpus
    assert corpus.tokenizer == names.tokenizer
    assert torch.equal(corpus.train, names.train) and torch.equal(corpus.val, names.val)
    # validation names come from the whole alphabet, not from the end of the sorted file
    val = corpus.tokenizer.decode(corpus.val.tolist()).strip(".").split(".")
    assert len({n[0] for n in val}) > 20
    forced = load_corpus(str(path), reading="text")
    assert forced.reading == "text" and forced.tokenizer.bos is None


@pytest.mark.parametrize(
    "text, reading, why",
    [
        ("emma\nolivia\nava\n", "lines", "3 lines"),
        ("emma\r\nolivia\r\n", "lines", "2 lines"),
        ("one paragraph.\n\nanother one.\n", "text", "1 blank line"),
        ("x" * 70 + "\n" + "y" * 60 + "\n", "text", "median line of 65 characters"),
        ("a single line without newline", "text", "a single line"),
        ("\n\nonly one line\n\n", "text", "a single line"),
        # a blank line in 100 lines is 1%: paragraphs; in 101 lines it is a stray one
        ("emma\n" * 50 + "\n" + "ava\n" * 49, "text", "1 blank line(s) between paragraphs"),
        ("emma\n" * 50 + "\n" + "ava\n" * 50, "lines", "100 lines, 1 blank line(s) ignored"),
        (
            "\n".join(["emma"] * 16_000 + [""] + ["ava"] * 16_032),
            "lines",
            "1 blank line(s) ignored",
        ),
        # verse: short lines, a blank line after every stanza
        ("roses are red,\nviolets are blue,\n\n" * 30, "text", "29 blank line(s)"),
    ],
)
def test_detect_reading(text, reading, why):
    got, reason = detect_reading(text)
    assert got == reading and why in reason


def test_a_stray_blank_line_does_not_turn_a_list_into_running_text(tmp_path):
    names = load_names()
    path = tmp_path / "names.txt"
    path.write_text("\n".join([*names[:2000], "", *names[2000:]]) + "\n", encoding="utf-8")
    corpus = load_corpus(str(path))
    assert corpus.reading == "lines"
    assert "5,163 lines, 1 blank line(s) ignored" in corpus.reason
    assert corpus.fingerprint() == load_corpus("names").fingerprint()  # the blank line is gone


def test_lines_reading_picks_a_bos_the_data_does_not_use(tmp_path):
    path = tmp_path / "titles.txt"
    path.write_text("St. Louis\nNew York\nSan Jose\nLos Angeles\n", encoding="utf-8")
    corpus = load_corpus(str(path))
    assert corpus.reading == "lines" and corpus.tokenizer.bos == "\n"
    n_docs = int((corpus.train == corpus.tokenizer.bos_id).sum()) - 1
    n_docs += int((corpus.val == corpus.tokenizer.bos_id).sum()) - 1
    assert n_docs == 4
    with pytest.raises(ValueError, match="reading must be one of"):
        load_corpus(str(path), reading="csv")


def test_check_fits_before_training(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("abcdefghijklmnopqrstuvwxyz1234", encoding="utf-8")
    corpus = load_corpus(str(path))
    assert (corpus.train.numel(), corpus.val.numel()) == (27, 3)
    corpus.check_fits(26)
    with pytest.raises(ValueError, match=r"27 training tokens.*block_size=32.*--block-size 26"):
        corpus.check_fits(32)
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("abcdefghij", encoding="utf-8")
    with pytest.raises(ValueError, match="1 token.*validation"):
        load_corpus(str(tiny)).check_fits(4)


def test_fingerprint_tells_corpora_apart(tmp_path):
    names = load_corpus("names")
    assert names.fingerprint() == load_corpus("names").fingerprint()
    assert names.fingerprint() != load_corpus("names", seed=1).fingerprint()


def test_missing_tang300_names_the_file_and_the_install(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere/tang300.*apt-get install fortunes-zh"):
        load_tang300(tmp_path / "nowhere" / "tang300")


def test_tang300_parses_a_fortune_file(tmp_path):
    path = tmp_path / "tang300"
    path.write_text(
        "\x1b[32m《静夜思》\x1b[m\n\x1b[33m作者：李白\x1b[m\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\n%\n"
        "\x1b[32m《登鹳雀楼》\x1b[m\n\x1b[33m作者：王之涣\x1b[m\n白日依山尽，黄河入海流。\n%\n",
        encoding="utf-8",
    )
    poems = load_tang300(path)
    assert poems == [
        "《静夜思》李白\n床前明月光，疑是地上霜。\n举头望明月，低头思故乡。",
        "《登鹳雀楼》王之涣\n白日依山尽，黄河入海流。",
    ]


@pytest.mark.skipif(not HAS_TANG300, reason=f"{TANG300_PATH} missing: apt-get install fortunes-zh")
def test_tang300_corpus():
    corpus = load_corpus("tang300")
    poems = load_tang300()
    # Counted from the installed file itself, not pinned to one version of the package.
    entries = [
        e for e in Path(TANG300_PATH).read_text(encoding="utf-8").split("\n%\n") if e.strip()
    ]
    assert len(poems) == len(entries) > 300 and all("\x1b" not in p for p in poems)
    assert corpus.vocab_size == len(set("".join(poems))) + 1  # every character, and BOS
    assert corpus.tokenizer.bos == "|"  # "." occurs in one title
    n_val = int((corpus.val == corpus.tokenizer.bos_id).sum()) - 1
    assert len(corpus.documents) + n_val == len(poems)
