"""gptlib.bpe against the reference implementations: HF `tokenizers` and tiktoken, both built
from the same local GPT-2 files (nothing is downloaded)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402
import random  # noqa: E402

import pytest  # noqa: E402
import tiktoken  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from gptlib.bpe import (  # noqa: E402
    END_OF_TEXT,
    BPETokenizer,
    bytes_to_unicode,
    gpt2_files,
    gpt2_tokenizer,
    merge_pair,
    train_bpe,
)
from gptlib.data import load_names  # noqa: E402
from gptlib.exercises import check_merge, solution_merge  # noqa: E402
from gptlib.exercises.checking import not_written, show_solution  # noqa: E402

# tiktoken's spelling of GPT-2's pattern (the contractions grouped); the same pieces.
TIKTOKEN_GPT2_PATTERN = (
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)

SUITE = {
    "english prose": "The model reads a window of tokens and predicts, at every position, "
    "which token comes next. Isn't that all? It's most of it; they'll see.",
    "code": 'def attention(q, k, v):\n    w = (q @ k.transpose(-2, -1)) / 8.0\n    return w.softmax(-1) @ v  # [B, h, n, d_h]\n\tif x != None: print("ok")\n',
    "numbers": "3.14159 2,718 1000000 -42 0x1F 1e-5 2026-11-30 12:34:56 $19.99 99%",
    "whitespace runs": "a  b   c    d\n\n\n  indented\t\ttabs \r\n trailing   ",
    "emoji": "hello 🙂🙂 👩‍💻 flags 🇫🇷🇯🇵 and ❤️ hearts",
    "chinese": "语言模型把一段文字切成词元，再根据前面的词元预测下一个词元。"
    "注意力让每个位置只看见它之前的位置；残差连接和层归一化让深层网络能够训练。",
    "mixed scripts": "GPT-2 的词表有 50257 个词元; русский текст, ελληνικά, العربية, "
    "हिन्दी, 日本語のテキスト, 한국어 문장.",
    "special token": f"first document{END_OF_TEXT}second document {END_OF_TEXT}\nthird",
    "edge": "",
}


@pytest.fixture(scope="module")
def ours():
    return gpt2_tokenizer()


@pytest.fixture(scope="module")
def hf_tokenizer():
    encoder_json, vocab_bpe = gpt2_files()
    tok = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([END_OF_TEXT])
    return tok


@pytest.fixture(scope="module")
def tiktoken_encoding():
    encoder_json, _ = gpt2_files()
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes(to_byte[c] for c in s): i for s, i in encoder.items() if s != END_OF_TEXT}
    return tiktoken.Encoding(
        name="gpt2_from_local_files",
        pat_str=TIKTOKEN_GPT2_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: encoder[END_OF_TEXT]},
    )


def test_vocabulary_size_and_special_token(ours):
    assert ours.vocab_size == 50257
    assert len(ours.merges) == 50000
    assert ours.encode(END_OF_TEXT) == [50256]
    assert ours.encode("Hello world") == [15496, 995]  # GPT-2's well-known ids


def test_bytes_to_unicode_table():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
    assert all(c.isprintable() and not c.isspace() for c in table.values())


@pytest.mark.parametrize("name", list(SUITE))
def test_ids_equal_hf_tokenizers_and_tiktoken(name, ours, hf_tokenizer, tiktoken_encoding):
    text = SUITE[name]
    ids = ours.encode(text)
    assert ids == hf_tokenizer.encode(text).ids
    assert ids == tiktoken_encoding.encode(text, allowed_special="all")
    assert ours.decode(ids) == text
    assert ours.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=False)


def _random_unicode(rng: random.Random) -> str:
    ranges = [
        (0x20, 0x7E),  # ASCII
        (0x09, 0x0D),  # tabs and newlines
        (0xA0, 0x24F),  # Latin-1 and Latin extended
        (0x370, 0x3FF),  # Greek
        (0x400, 0x4FF),  # Cyrillic
        (0x4E00, 0x9FFF),  # CJK
        (0x1F300, 0x1FAFF),  # emoji
        (0xE000, 0xF8FF),  # private use
        (0x10000, 0x10FFFF),  # anything above the BMP
    ]
    chars = []
    for _ in range(rng.randint(0, 40)):
        lo, hi = rng.choice(ranges)
        chars.append(chr(rng.randint(lo, hi)))
    return "".join(chars)


def test_roundtrip_on_random_unicode(ours, hf_tokenizer):
    rng = random.Random(0)
    for _ in range(300):
        text = _random_unicode(rng)
        ids = ours.encode(text)
        assert ours.decode(ids) == text
        assert ids == hf_tokenizer.encode(text).ids, repr(text)


def test_decode_of_a_cut_character_shows_replacement(ours):
    ids = ours.encode("词")  # one character, three UTF-8 bytes, more than one token
    assert len(ids) > 1
    assert ours.decode(ids[:1]) == "\ufffd"


def test_bad_input_errors(ours):
    with pytest.raises(ValueError, match="not in this tokenizer's vocabulary"):
        ours.decode([50257])
    with pytest.raises(ValueError, match="lone surrogate"):
        ours.encode("a\ud800b")
    with pytest.raises(TypeError, match="takes a str"):
        ours.encode(b"bytes")
    with pytest.raises(FileNotFoundError, match="encoder.json"):
        BPETokenizer.from_files("missing/encoder.json", "missing/vocab.bpe")


def hf_train(text: str, vocab_size: int):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=0,
        show_progress=False,
    )
    tok.train_from_iterator([text], trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    return model["vocab"], merges


TRAIN_TEXTS = {
    "names": (" ".join(load_names()[:1500]), 320),
    "chinese": (SUITE["chinese"] * 3, 300),
    "code and prose": (SUITE["code"] + SUITE["english prose"] + SUITE["numbers"], 330),
    "ties everywhere": ("aaaa bbbb aaaa ab ab ba", 270),
}


@pytest.mark.parametrize("name", list(TRAIN_TEXTS))
def test_trainer_learns_the_merges_hf_tokenizers_learns(name):
    text, vocab_size = TRAIN_TEXTS[name]
    mine = train_bpe(text, vocab_size)
    vocab, merges = hf_train(text, vocab_size)
    # Ties (equal counts) are broken the same way, smallest (left id, right id) first, so the
    # merges agree one for one, in order, and so do the ids.
    assert mine.merges == merges
    assert mine.vocab == vocab
    assert mine.vocab_size <= vocab_size


def test_trained_tokenizer_encodes_like_hf_and_round_trips():
    text = " ".join(load_names()[:1500])
    mine = train_bpe(text, 320)
    assert mine.vocab_size == 320  # 256 bytes + 64 merges
    vocab, merges = hf_train(text, 320)
    hf = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    sample = "emma olivia ava isabella sophia zzyzx"
    assert mine.encode(sample) == hf.encode(sample).ids
    assert mine.decode(mine.encode(sample)) == sample
    ids = mine.encode(text)
    assert ids == hf.encode(text).ids
    assert len(ids) < 0.6 * len(text.encode("utf-8"))  # 64 merges: about 1.9 bytes per token


def test_trainer_stops_when_nothing_is_left_to_merge():
    tok = train_bpe("ab ab", 1000)
    # pieces 'ab' and 'Ġab': merges a+b, Ġ+ab, then each piece is one symbol
    assert tok.merges == [("a", "b"), ("Ġ", "ab")]
    assert tok.vocab_size == 258


@pytest.mark.parametrize(
    "text, vocab_size, message",
    [("", 300, "non-empty text"), ("hello", 255, "below 256"), ("hello", 300.0, "below 256")],
)
def test_trainer_errors(text, vocab_size, message):
    with pytest.raises(ValueError, match=message):
        train_bpe(text, vocab_size)


def test_merge_pair_rules():
    assert merge_pair((1, 1, 1), (1, 1), 9) == (9, 1)
    assert merge_pair((1, 2, 1, 2, 3), (1, 2), 9) == (9, 9, 3)
    assert merge_pair((2, 1), (1, 2), 9) == (2, 1)


def test_merge_exercise_check():
    assert check_merge(solution_merge).passed
    shortcut = check_merge(lambda ids, pair, new_id: list(merge_pair(tuple(ids), pair, new_id)))
    assert not shortcut.passed and "write this one yourself" in shortcut.message

    def stub(ids, pair, new_id):
        raise NotImplementedError

    assert check_merge(stub).message == not_written("merge").message

    def first_only(ids, pair, new_id):
        for i in range(len(ids) - 1):
            if (ids[i], ids[i + 1]) == tuple(pair):
                return ids[:i] + [new_id] + ids[i + 2 :]
        return ids

    result = check_merge(first_only)
    assert not result.passed and "only the first occurrence" in result.message

    def keeps_second(ids, pair, new_id):
        return [
            new_id if i + 1 < len(ids) and (x, ids[i + 1]) == tuple(pair) else x
            for i, x in enumerate(ids)
        ]

    result = check_merge(keeps_second)
    assert not result.passed and "the second id was not used up" in result.message


def test_merge_check_accepts_a_tuple_and_names_overlaps():
    assert check_merge(lambda ids, pair, new_id: tuple(solution_merge(ids, pair, new_id))).passed

    def overlapping(ids, pair, new_id):  # a a a -> new new: the middle id used twice
        out = []
        for i in range(len(ids)):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                out.append(new_id)
            elif not (i and (ids[i - 1], ids[i]) == tuple(pair)):
                out.append(ids[i])
        return out

    result = check_merge(overlapping)
    assert not result.passed and "the middle a was used by two merges" in result.message


def test_show_solution_prints_the_reference(capsys):
    show_solution(check_merge)
    out = capsys.readouterr().out
    assert "def solution_merge" in out and "i += 2" in out


def test_the_merge_check_names_a_loop_that_drops_the_last_id():
    def last_dropped(ids, pair, new_id):  # i < len(ids) - 1, so that ids[i + 1] always exists
        out, i = [], 0
        while i < len(ids) - 1:
            if (ids[i], ids[i + 1]) == tuple(pair):
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        return out

    result = check_merge(last_dropped)
    assert not result.passed and "the last id of the list is missing" in result.message


def test_each_merge_slip_is_named_by_its_row():
    from gptlib.exercises import nb15_bpe as bpe

    for message, slip in bpe.MISTAKES:
        assert check_merge(slip).message == f"✗ merge: {message}"


# --- the optional exercise: learn_merges, the trainer on one list of byte ids ------------------

BYTE_ID = {b: i for i, b in enumerate(bytes_to_unicode())}


def _as_strings(merges):
    """[((a, b), new_id), ...] -> the merges as pairs of symbol strings, as train_bpe keeps them."""
    symbol = list(bytes_to_unicode().values())
    out = []
    for (a, b), new_id in merges:
        assert new_id == len(symbol)
        symbol.append(symbol[a] + symbol[b])
        out.append((symbol[a], symbol[b]))
    return out


def _random_texts():
    rng = random.Random(0)
    return ["".join(rng.choice("ab c") for _ in range(rng.randint(2, 40))) for _ in range(100)] + [
        "aaaa",
        "a",
        "banana bandana",
        "语言模型把一段文字切成词元",
    ]


@pytest.mark.parametrize("text", _random_texts())
def test_the_learn_merges_reference_learns_train_bpes_merges(text):
    """On one piece (a pattern that matches the whole text) gptlib's trainer and the exercise's
    reference learn the same merges in order and encode the text to the same ids."""
    from gptlib.exercises.nb15_bpe import solution_learn_merges

    k = 1 + len(text) % 12
    tok = train_bpe(text, 256 + k, pattern=r"[\s\S]+")
    ids = [BYTE_ID[b] for b in text.encode("utf-8")]
    merges = solution_learn_merges(ids, k, solution_merge)
    assert _as_strings(merges) == tok.merges
    encoded = ids
    for pair, new_id in merges:
        encoded = solution_merge(encoded, pair, new_id)
    assert encoded == tok.encode(text)


def test_the_learn_merges_reference_on_the_names():
    from gptlib.exercises.nb15_bpe import solution_learn_merges

    text = " ".join(load_names()[:800])
    tok = train_bpe(text, 256 + 25, pattern=r"[\s\S]+")
    ids = [BYTE_ID[b] for b in text.encode("utf-8")]
    assert _as_strings(solution_learn_merges(ids, 25, solution_merge)) == tok.merges


def test_learn_merges_check_passes_the_reference_lists_and_the_library_merge():
    from gptlib.exercises import check_learn_merges, solution_learn_merges

    assert check_learn_merges(solution_learn_merges).passed

    def as_lists(ids, num_merges, merge):  # [[a, b], new_id] entries unpack the same
        return [[list(p), n] for p, n in solution_learn_merges(ids, num_merges, merge)]

    assert check_learn_merges(as_lists).passed

    def with_merge_pair(ids, num_merges, merge):  # a merge that returns a tuple
        return solution_learn_merges(ids, num_merges, merge_pair)

    assert check_learn_merges(with_merge_pair).passed


def test_learn_merges_stub_and_refusal():
    from gptlib.exercises import check_learn_merges

    def learn_merges(ids, num_merges, merge):
        raise NotImplementedError

    assert check_learn_merges(learn_merges).message == not_written("learn_merges").message

    def through_the_library(ids, num_merges, merge):
        text = bytes(ids).decode("latin-1")
        tok = train_bpe(text, 256 + num_merges)
        return [((tok.vocab[a], tok.vocab[b]), tok.vocab[a + b]) for a, b in tok.merges]

    result = check_learn_merges(through_the_library)
    assert not result.passed and "gptlib.bpe.train_bpe" in result.message


def test_learn_merges_check_names_every_promised_slip():
    """Ties broken by first occurrence, runs counted without overlap, counts not taken again after
    a merge: each named by its row."""
    from gptlib.exercises import nb15_bpe as bpe

    for message, slip in bpe.LEARN_MISTAKES:
        result = bpe.check_learn_merges(slip)
        assert not result.passed and result.message == f"✗ learn_merges: {message}"
    words = {0: "occurs first in the list", 1: "a a a", 2: "before any merge"}
    for i, word in words.items():
        assert word in bpe.LEARN_MISTAKES[i][0]


def test_learn_merges_check_names_a_loop_that_does_not_stop():
    from collections import Counter

    from gptlib.exercises import check_learn_merges

    def never_stops(ids, num_merges, merge):
        merges = []
        for k in range(num_merges):
            counts = Counter(zip(ids, ids[1:], strict=False))
            best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))
            ids = merge(ids, best, 256 + k)
            merges.append((best, 256 + k))
        return merges

    result = check_learn_merges(never_stops)
    assert not result.passed and "merged down to one id" in result.message

    def most_common(ids, num_merges, merge):  # Counter's order: the first pair seen wins a tie
        merges = []
        for k in range(num_merges):
            counts = Counter(zip(ids, ids[1:], strict=False))
            if not counts:
                break
            best = counts.most_common(1)[0][0]
            ids = merge(ids, best, 256 + k)
            merges.append((best, 256 + k))
        return merges

    result = check_learn_merges(most_common)
    assert not result.passed and "occurs first in the list" in result.message


def test_learn_merges_check_says_what_it_got_when_the_result_is_not_merges():
    from gptlib.exercises import check_learn_merges

    result = check_learn_merges(lambda ids, num_merges, merge: {})
    assert not result.passed and "output has shape [0, 3]" in result.message
    result = check_learn_merges(lambda ids, num_merges, merge: [(1, 2, 256)])
    assert not result.passed and "too many values to unpack" in result.message
