import pytest

from gptlib.tokenizer import CharTokenizer


def test_sorted_unique_characters_and_roundtrip():
    tok = CharTokenizer.from_text("hello world")
    assert tok.itos == sorted(set("hello world"))
    assert tok.vocab_size == 8
    ids = tok.encode("hello")
    assert ids == [tok.stoi[c] for c in "hello"]
    assert tok.decode(ids) == "hello"


def test_bos_takes_the_last_id():
    tok = CharTokenizer.from_documents(["emma", "bob"])
    assert tok.itos == ["a", "b", "e", "m", "o", "."]
    assert tok.bos_id == tok.vocab_size - 1 == 5
    assert tok.encode(".emma.") == [5, 2, 3, 3, 0, 5]
    assert tok.decode([5, 1, 4, 1, 5]) == ".bob."


def test_unknown_character_names_character_and_position():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"'z' at position 2"):
        tok.encode("abz")


def test_bos_symbol_may_not_occur_in_corpus():
    with pytest.raises(ValueError, match="BOS"):
        CharTokenizer.from_documents(["a.b"], bos=".")


def test_decode_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CharTokenizer.from_text("ab").decode([2])


def test_save_load_json(tmp_path):
    tok = CharTokenizer.from_documents(["zoë", "anna"])
    path = tmp_path / "tok.json"
    tok.save(path)
    again = CharTokenizer.load(path)
    assert again == tok
    assert again.encode(".zoë.") == tok.encode(".zoë.")
