import pytest
import torch

from gptlib.data import load_corpus, load_names, load_surnames, sample_batch


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
    corpus = load_corpus(str(path))
    assert corpus.tokenizer.bos is None
    assert corpus.train.numel() + corpus.val.numel() == len(path.read_text())
    assert corpus.tokenizer.decode(corpus.train[:11].tolist()) == "hello world"


def test_missing_and_non_utf8_text(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus(str(tmp_path / "nope.txt"))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        load_corpus(str(bad))


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
