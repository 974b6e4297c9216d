"""What the Chinese edition prints is read in Chinese: its stored outputs hold few English words
per Chinese character, answer yes or no as 是/否, and carry no English sentence beyond code, data
and PyTorch's own error lines, each of which is printed under a gloss in Chinese
(`gptlib.language.gloss`).

A word here is a run of three or more Latin letters that a Chinese reader has to read as English:
not code (a dotted or underscored name, a keyword argument, a name glued to digits such as float32,
or a name of the notebook's code that is no word of English prose: idx, qkv, wte), and not one of
the English terms the Chinese prose itself writes (token, loss, logits, batch, warmup, MLP).
`True` and `False` are words: printed as an answer they are English. Sampled names and PyTorch's
error lines count; the model's own English (GPT-2 writing, test_translations.GENERATED_TEXT) is
data and does not.
"""

from __future__ import annotations

import html
import re
from functools import cache

import pytest
from test_translations import (
    ENGLISH,
    GENERATED_TEXT,
    ROOT,
    VOCABULARY,
    _load,
    _outputs,
    _terms_the_chinese_prose_keeps,
    _text,
)

from gptlib import language
from i18n.build import source

HAN = re.compile(r"[\u4e00-\u9fff]")
LATIN_WORD = re.compile(r"[A-Za-z]{3,}")
# Code in an output: dotted or underscored names (blocks.0.attn.proj.weight, set_to_none), keyword
# arguments (is_causal=True), names glued to digits (float32, mat1): names, whatever their letters.
CODE_SPAN = re.compile(r"\b\w+=\w+|\b[A-Za-z]+\d\w*|\b\w+(?:\.\w+)+\b|\b\w*_\w*\b")
# Python's answers, which count as English words wherever they are printed.
ANSWERS = {"True", "False"}
# The stored zh outputs may hold at most this many English words per Han character (issue 39).
MOST_ENGLISH_PER_HAN = 0.10


def _lines(cell: dict) -> list[list[str]]:
    """The text a reader sees in each of `cell`'s outputs, line by line: streams, tables (HTML
    cells and headings as lines), errors (name and message); pictures left out."""
    found = []
    if cell["cell_type"] != "code":
        return found
    for output in _outputs(cell):
        if "image/png" in output.get("data", {}):
            continue  # its text/plain is matplotlib's "<Figure size ...>"
        text = _text(output)
        if output["output_type"] == "error":
            text = f"{output['ename']}: {text}"
        text = html.unescape(re.sub(r"<[^>]+>", "\n", text))
        found.append(text.splitlines())
    return found


def identifiers(nb: dict) -> set[str]:
    """The names `nb`'s code defines or uses (variables, functions, attributes, keyword
    arguments), whole (`attention_maps`, not `attention`); not Python's keywords (`and`, `for`,
    `with`, `True`), of which English sentences are made too."""
    import io
    import keyword
    import tokenize

    names = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(
            line for line in source(cell).splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type == tokenize.NAME and not keyword.iskeyword(token.string):
                names.add(token.string)
    return names


def not_english(nb: dict) -> set[str]:
    """Words of `nb`'s outputs that a Chinese reader does not read as English: the notebook's
    identifiers that are no word of English prose (`idx`, `qkv`, `wte`; `hidden` or `seed` is
    read as English, whatever the code calls a variable), and the English terms the Chinese prose
    itself writes (token, loss, logits, batch, warmup, MLP). True and False are English."""
    names = {n for n in identifiers(nb) if n.lower() not in VOCABULARY}
    return (names | _terms_kept()) - ANSWERS


@cache
def _terms_kept() -> frozenset[str]:
    return frozenset(_terms_the_chinese_prose_keeps())


def english_and_han(nb: dict, name: str) -> tuple[int, int]:
    """(English words, Han characters) in the stored outputs of notebook `nb` (file `name`)."""
    names = not_english(nb)
    words = han = 0
    for cell in nb["cells"]:
        if cell.get("id") in GENERATED_TEXT.get(name, ()):
            continue
        for output in _lines(cell):
            for line in output:
                han += len(HAN.findall(line))
                words += sum(w not in names for w in LATIN_WORD.findall(CODE_SPAN.sub(" ", line)))
    return words, han


@pytest.fixture(scope="module")
def zh_notebooks() -> dict[str, dict]:
    return {p.name: _load(ROOT / "notebooks" / "zh" / p.name) for p in ENGLISH}


def test_the_chinese_outputs_hold_at_most_one_english_word_per_ten_han_characters(zh_notebooks):
    counts = {name: english_and_han(nb, name) for name, nb in zh_notebooks.items()}
    words = sum(w for w, _ in counts.values())
    han = sum(h for _, h in counts.values())
    assert han > 10_000, han  # the edition's outputs are there, and Chinese
    by_notebook = ", ".join(f"{n[:2]} {w / max(h, 1):.2f}" for n, (w, h) in counts.items())
    assert words / han <= MOST_ENGLISH_PER_HAN, (
        f"{words} English words to {han} Han characters ({words / han:.3f} a character; "
        f"at most {MOST_ENGLISH_PER_HAN}): {by_notebook}"
    )


# Where True or False in a Chinese line is not an answer but the value of a bool tensor the sentence
# names, reviewed: "future 有 21 个为 True", "对角线以上为 True", "（True = 遮住）"; and keyword arguments
# (set_to_none=True), which are code.
CODE_ANSWERED = re.compile(r"[A-Za-z0-9_]=\s*[是否](?![\u4e00-\u9fff])")
VALUE_NAMED = re.compile(r"\w+\s*=\s*(True|False)\b|为 (True|False)\b|\b(True|False) = ")


def answers_in_chinese_lines(nb: dict, name: str) -> list[str]:
    """Lines of `nb`'s outputs that hold Han characters and a True or False that is not code (a
    keyword argument such as set_to_none=True, or a reviewed value named by the sentence)."""
    found = []
    for cell in nb["cells"]:
        for output in _lines(cell):
            for line in output:
                bare = VALUE_NAMED.sub(" ", line)
                if HAN.search(line) and re.search(r"\b(True|False)\b", bare):
                    found.append(f"{name} cell {cell.get('id')}: {line.strip()[:100]}")
                elif CODE_ANSWERED.search(line):  # use_cache=是: code is Python's, not Chinese
                    found.append(f"{name} cell {cell.get('id')}: {line.strip()[:100]}")
    return found


def test_no_chinese_sentence_answers_true_or_false(zh_notebooks):
    found = [line for n, nb in zh_notebooks.items() for line in answers_in_chinese_lines(nb, n)]
    assert not found, f"{len(found)} lines:\n" + "\n".join(found[:20])


def _gloss_prefix() -> str:
    """How a gloss line starts in Chinese (`in short: ...` as the catalogue writes it)."""
    language.set_language("zh")
    try:
        return language._("in short: {meaning}").split("{meaning}")[0]
    finally:
        language.set_language("en")


# A run of English words: four or more words of English prose (VOCABULARY, the words the English
# notebooks' prose is made of), separated by nothing but spaces and light punctuation.
RUN = re.compile(r"[A-Za-z]+(?:[ ,;:'\-]+[A-Za-z]+)*")


def english_sentences(nb: dict, name: str, prefix: str) -> list[str]:
    """Lines of `nb`'s outputs with four or more English words in a row that are not code (the
    notebook's names, dotted or keyword names, quoted strings), not the English terms the Chinese
    prose keeps (token, loss), and not PyTorch's own words on the line under a gloss."""
    allowed = not_english(nb)
    found = []
    for cell in nb["cells"]:
        if cell.get("id") in GENERATED_TEXT.get(name, ()):
            continue
        for output in _lines(cell):
            for i, line in enumerate(output):
                if i and output[i - 1].lstrip().startswith(prefix):
                    continue  # PyTorch's error as it wrote it, under its gloss
                text = CODE_SPAN.sub(" ", re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", " ", line))
                for run in RUN.findall(text):
                    words = re.findall(r"[A-Za-z]+", run)
                    english = [w for w in words if w.lower() in VOCABULARY and w not in allowed]
                    if len(english) >= 4:
                        found.append(f"{name} cell {cell.get('id')}: {line.strip()[:110]}")
                        break
    return found


def test_the_chinese_outputs_hold_no_english_sentence(zh_notebooks):
    prefix = _gloss_prefix()
    assert prefix.strip() and HAN.search(prefix), prefix
    found = [line for n, nb in zh_notebooks.items() for line in english_sentences(nb, n, prefix)]
    assert not found, f"{len(found)} lines:\n" + "\n".join(found[:30])


def test_the_scans_find_english_in_the_english_edition():
    """Each scan can fail: on the English edition's outputs it finds what it looks for."""
    counts = [english_and_han(_load(path), path.name) for path in ENGLISH]
    words, han = sum(w for w, _ in counts), sum(h for _, h in counts)
    assert words > 4000 and words > 10 * han, (words, han)  # Han: 08's poems, 15's text
    nb = _load(ROOT / "notebooks" / "03_scaled_attention.ipynb")
    name = "03_scaled_attention.ipynb"
    assert (
        len(english_sentences(nb, name, _gloss_prefix())) >= 12
    )  # 16 today: the stand-in lines, the verdicts, the errors
    answered = [
        line
        for cell in nb["cells"]
        for output in _lines(cell)
        for line in output
        if re.search(r"\b(True|False)\b", VALUE_NAMED.sub(" ", line))
    ]
    assert len(answered) >= 10, answered


def test_no_widget_is_stored_as_its_repr(zh_notebooks):
    """Where no widget is drawn (a page, a diff, a terminal), an explorer says what it is in the
    reader's language, in both editions, not `VBox(children=(HBox(...`."""
    shown = {}
    for path in ENGLISH:
        for edition, nb in (("en", _load(path)), ("zh", zh_notebooks[path.name])):
            for cell in nb["cells"]:
                for output in cell.get("outputs", []):
                    data = output.get("data", {})
                    if "application/vnd.jupyter.widget-view+json" in data:
                        text = source({"source": data.get("text/plain", "")})
                        shown[f"{edition} {path.stem} {cell.get('id')}"] = text
    assert len(shown) >= 6, shown  # the explorers of 03, 04 and 08, in both editions
    reprs = {k: t for k, t in shown.items() if re.match(r"\w+\(\w+=", t)}
    assert not reprs, reprs
    assert all(HAN.search(t) for k, t in shown.items() if k.startswith("zh")), shown
