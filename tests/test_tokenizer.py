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


def test_encode_tensor_equals_encode_across_chunks():
    import torch

    from gptlib.tokenizer import CharTokenizer

    text = "床前明月光，疑是地上霜。abc\n" * 37 + "😀"
    tok = CharTokenizer.from_text(text)
    ids = tok.encode_tensor(text, chunk=10)  # many chunks, one of them cut mid-line
    assert ids.dtype == torch.long and ids.tolist() == tok.encode(text)


def test_encode_tensor_names_the_unknown_character_and_its_position():
    import pytest

    from gptlib.tokenizer import CharTokenizer

    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"'z' at position 5 "):
        tok.encode_tensor("abcabz", chunk=4)
    with pytest.raises(ValueError, match=r"'\\u4e00' at position 1 |'一' at position 1 "):
        tok.encode_tensor("a一", chunk=4)  # a code point beyond the table


def test_a_text_corpus_is_encoded_without_a_python_list(tmp_path, monkeypatch):
    """load_corpus encodes running text with encode_tensor (8 bytes a character), never with
    encode's Python list of ints (about 36 bytes each): the list path is made to fail here."""
    import torch

    from gptlib.data import load_corpus
    from gptlib.tokenizer import CharTokenizer

    def refuse(self, text):
        if len(text) > 100:
            raise AssertionError("the whole text went through encode's Python list")
        return CharTokenizer.__dict__["_list_encode"](self, text)

    monkeypatch.setattr(CharTokenizer, "_list_encode", CharTokenizer.encode, raising=False)
    monkeypatch.setattr(CharTokenizer, "encode", refuse)
    path = tmp_path / "story.txt"
    path.write_text("Once upon a time there was a small model.\n\n" * 400, encoding="utf-8")
    corpus = load_corpus(str(path), reading="text")
    ids = torch.cat([corpus.train, corpus.val])
    assert ids.dtype == torch.long and len(ids) == len(path.read_text(encoding="utf-8"))
    assert corpus.tokenizer.decode(ids[:26].tolist()) == "Once upon a time there was"
