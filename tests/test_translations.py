"""The Chinese edition (notebooks/zh/) stays in step with the English notebooks.

Every English notebook has its twin, built from i18n/zh/NN_topic.md: the same cells in the same
order, the same code (but for the first code cell, which chooses the language of what gptlib and
the notebook's `tr("...")` say; comments and docstrings are each edition's own, the Chinese
ones from i18n/zh/comments/), outputs of its own run that print the same numbers as the
English, every markdown cell translated from the English text it now has (a translation of an
older text is named), headings, links and formulas kept, and the built notebook exactly what
`python -m i18n.build build` writes. Editing an English
markdown cell makes the check name its twin; links between the Chinese notebooks land on
Chinese headings.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import pytest

from i18n import build as i18n

ROOT = Path(__file__).resolve().parent.parent
ENGLISH = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_edition_is_in_step_with_the_english():
    assert i18n.problems("zh") == []


def _parses(code: str) -> bool:
    """Whether a cell's code is Python (its IPython lines, %magic and !shell, read as blank)."""
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.split("\n")]
    try:
        ast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def _zh_code_lines(en_code: str, zh_code: str) -> list[str]:
    """What the twin's first code cell says beyond the English: the language choice's lines."""
    en_lines, zh_lines = en_code.splitlines(), zh_code.splitlines()
    return [line for line in zh_lines if line not in en_lines]


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_the_code_is_the_english_code_plus_the_language_choice(english):
    twin = ROOT / "notebooks" / "zh" / english.name
    assert twin.is_file(), f"notebooks/zh/{english.name} is missing"
    en, zh = _load(english), _load(twin)
    assert [c.get("id") for c in zh["cells"]] == [c.get("id") for c in en["cells"]]
    first = next(c.get("id") for c in en["cells"] if c["cell_type"] == "code")
    for a, b in zip(en["cells"], zh["cells"], strict=True):
        assert a["cell_type"] == b["cell_type"], a.get("id")
        if a["cell_type"] == "code":
            assert _parses(i18n.source(b)), f"zh {english.name} cell {a.get('id')} is not Python"
        # the comments and docstrings are the edition's own: the code is compared without them
        if a["cell_type"] == "code" and a.get("id") == first:
            # the one difference: the first code cell imports set_language and calls it
            en_code = i18n.without_comments(i18n.source(a))
            zh_code = i18n.without_comments(i18n.source(b))
            added = _zh_code_lines(en_code, zh_code)
            assert added[-1] == i18n.without_comments(i18n.LANGUAGE_CALL["zh"]), added
            assert len(added) == 2 and "set_language" in added[0], added
            imported = next((ln for ln in en_code.splitlines() if "gptlib.language" in ln), None)
            kept = [line for line in zh_code.splitlines() if line not in added]
            assert kept == [ln for ln in en_code.splitlines() if ln != imported], added
        elif a["cell_type"] == "code":
            en_code, zh_code = i18n.source(a), i18n.source(b)
            assert i18n.without_comments(en_code) == i18n.without_comments(zh_code), a.get("id")
        else:
            text = i18n.source(b)
            assert CJK.search(text) or not re.search(r"[A-Za-z]{3,}", text), (
                f"{english.name} cell {a.get('id')} is not in Chinese"
            )


def test_code_compared_without_comments_is_still_compared():
    """The twin check's comparison sees every change but a comment's or a docstring's."""
    en = 'def f(x):\n    """Double x."""\n    # twice\n    return 2 * x  # [n]\n\n\ny = f("a#b")\n'
    zh = 'def f(x):\n    """把 x 翻倍。\n\n    两倍。\n    """\n    # 两倍\n    return 2 * x  # [n]\n\ny = f("a#b")\n'
    assert i18n.without_comments(en) == i18n.without_comments(zh)
    for changed in (zh.replace("2 * x", "3 * x"), zh.replace('"a#b"', '"a#c"'),
                    zh.replace("    return", "    x = 1\n    return")):  # fmt: skip
        assert i18n.without_comments(en) != i18n.without_comments(changed), changed


def _english_comment_lines(nb: dict) -> list[str]:
    """The comment and docstring lines of `nb`'s code cells that are neither Chinese nor of the
    kinds every edition keeps (shapes, directives, code)."""
    found = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        for comment in i18n.code_comments(i18n.source(cell), every=True):
            lines = comment.text.split("\n")
            if comment.kind == "docstring":
                lines = [ln.strip().strip("\"'") for ln in lines]
            else:
                lines = [ln[1:] for ln in lines]
            found += [
                f"cell {cell.get('id')}: {ln.strip()}"
                for ln in lines
                if not CJK.search(ln) and i18n._WORDS.search(ln) and not i18n.kept_comment(ln)
            ]
    return found


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_the_chinese_edition_comments_in_chinese(english):
    """Every comment and docstring line of a zh notebook's code is Chinese, or a shape, a
    directive or code, which every edition keeps."""
    found = _english_comment_lines(_load(ROOT / "notebooks" / "zh" / english.name))
    assert not found, "\n".join(found[:20])


def test_the_comment_scan_finds_an_english_comment():
    """The scan above can fail: an English comment or docstring line left in a zh cell is named;
    a shape, a directive and a line of code are not."""
    nb = _load(ROOT / "notebooks" / "zh" / "03_scaled_attention.ipynb")
    stub = next(c for c in nb["cells"] if "def causal_attention" in i18n.source(c))
    code = i18n.source(stub)
    assert _english_comment_lines({"cells": [stub]}) == []
    stub["source"] = code.replace("# 在这里写你的代码", "# your code here")
    assert _english_comment_lines({"cells": [stub]}) == [f"cell {stub['id']}: your code here"]
    english_doc = '"""q, k, v [B, h, n, d_h] -> output: masked attention."""'
    stub["source"] = re.sub(r'"""[^"]*"""', english_doc, code, count=1)
    assert len(_english_comment_lines({"cells": [stub]})) == 1
    kept = "x = 1  # [B, h, n, d_h]\ny = 2  # noqa: E731\n# w - lr * grad\n"
    assert _english_comment_lines({"cells": [{"cell_type": "code", "source": kept}]}) == []


NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?:e[+-]?\d+)?%?")


def _text(output: dict) -> str:
    if output["output_type"] == "stream":
        return i18n.source({"source": output["text"]})
    if output["output_type"] == "error":
        return output["evalue"]
    data = output.get("data", {})
    return i18n.source({"source": data.get("text/html", data.get("text/plain", ""))})


def _numbers(output: dict) -> list[str]:
    """The numbers an output prints, in sorted order (a translation may put them elsewhere)."""
    return sorted(NUMBER.findall(re.sub(r"<[^>]+>", " ", _text(output))))


def _outputs(cell: dict) -> list[dict]:
    """A cell's outputs with its stream pieces joined, as nbval compares them (how a stream is cut
    into pieces depends on timing)."""
    joined: list[dict] = []
    for output in cell.get("outputs", []):
        if (
            output["output_type"] == "stream"
            and joined
            and joined[-1].get("name") == output["name"]
        ):
            joined[-1] = {**joined[-1], "text": _text(joined[-1]) + _text(output)}
        else:
            joined.append(output)
    return joined


def _kind(output: dict) -> tuple:
    data = output.get("data", {})
    return output["output_type"], output.get("name"), output.get("ename"), sorted(data)


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_both_editions_ran_and_print_the_same_numbers(english):
    """Each edition's outputs are its own run, and the arithmetic is the same: every output of
    the Chinese run is of the English one's kind and prints the same numbers. (A zh output left
    over from before an English change fails here: run make notebooks.)"""
    en, zh = _load(english), _load(ROOT / "notebooks" / "zh" / english.name)
    differ, same_text, compared = [], 0, 0
    for a, b in zip(en["cells"], zh["cells"], strict=True):
        if a["cell_type"] != "code":
            continue
        assert (a["execution_count"] is None) == (b["execution_count"] is None), a.get("id")
        if "nbval-ignore-output" in a["metadata"].get("tags", []):
            continue  # a timing or a slider: nbval's tag, its numbers are the clock's
        outs_a, outs_b = _outputs(a), _outputs(b)
        assert [_kind(o) for o in outs_a] == [_kind(o) for o in outs_b], a.get("id")
        for oa, ob in zip(outs_a, outs_b, strict=True):
            if "image/png" in oa.get("data", {}):
                continue  # drawn with the same numbers; only the words differ
            compared += 1
            same_text += _text(oa) == _text(ob)
            if _numbers(oa) != _numbers(ob):
                differ.append(f"cell {a.get('id')}: {_numbers(oa)[:12]} vs {_numbers(ob)[:12]}")
    assert not differ, "\n".join(differ)
    assert same_text < compared, "every output is the English one's: was the edition executed?"
    assert (zh["metadata"].get("widgets") is None) == (en["metadata"].get("widgets") is None)


def test_links_between_chinese_notebooks_land_on_chinese_headings():
    anchors = {
        p.name: {i18n.anchor(h) for c in _load(p)["cells"] for h in i18n.headings(i18n.source(c))}
        for p in (ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb")
    }
    checked, problems = 0, []
    for name, _ in anchors.items():
        for cell in _load(ROOT / "notebooks" / "zh" / name)["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for target, fragment in re.findall(
                r"\]\((\d\d_\w+\.ipynb)?#((?:[^()\s]|\([^()\s]*\))+)\)", i18n.source(cell)
            ):
                checked += 1
                if fragment not in anchors.get(target or name, set()):
                    problems.append(f"zh/{name} cell {cell.get('id')}: {target}#{fragment}")
    assert checked >= 30, checked
    assert not problems, "\n".join(problems)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A copy of notebooks/ and i18n/zh/ that the test may edit, with i18n.build pointed at it."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "i18n" / "zh", tmp_path / "i18n" / "zh")  # comments/ included
    for document in i18n.DOCUMENTS:  # each document and its edition
        for path in (ROOT / document, i18n.document_edition(document, "zh")):
            shutil.copy(path, tmp_path / path.name)
    monkeypatch.setattr(i18n, "ROOT", tmp_path)
    monkeypatch.setattr(i18n, "NOTEBOOKS", tmp_path / "notebooks")
    return tmp_path


def test_editing_an_english_cell_names_its_translation(scratch):
    path = scratch / "notebooks" / "05_residual.ipynb"
    nb = _load(path)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and c["id"] == "r-saw")
    cell["source"] = i18n.source(cell) + "\n- One more thing we saw."
    path.write_text(i18n.dump(nb), encoding="utf-8")
    found = i18n.problems("zh")
    assert any(
        line.startswith("i18n/zh/05_residual.md: cell r-saw translates an older English text")
        for line in found
    ), found
    assert all("05_residual" in line for line in found), found


def test_editing_an_english_comment_names_its_translation_and_keeps_the_outputs(scratch):
    """A changed English comment makes its Chinese stale (check names the cell, as for prose);
    the rebuilt cell keeps its Chinese comment and its outputs: no cell waits for a run."""
    path = scratch / "notebooks" / "05_residual.ipynb"
    nb = _load(path)
    cell = next(c for c in nb["cells"] if "# one token" in i18n.source(c))
    cell["source"] = i18n.source(cell).replace("# one token", "# a single token")
    path.write_text(i18n.dump(nb), encoding="utf-8")
    i18n.build("zh", "05")
    found = i18n.problems("zh")
    assert found == [
        f"i18n/zh/comments/05_residual.md: cell {cell['id']} translates older English comments "
        f"(en {i18n.read_comments(path, 'zh')[cell['id']].en_hash}; the English comments are now "
        f"{i18n.comments_hash(i18n.code_comments(i18n.source(cell)))})"
    ], found
    zh = {
        c.get("id"): c for c in _load(scratch / "notebooks" / "zh" / "05_residual.ipynb")["cells"]
    }
    assert "# 一个 token" in i18n.source(zh[cell["id"]])
    assert zh[cell["id"]]["outputs"] and zh[cell["id"]]["execution_count"] is not None
    i18n.mark("05", cell["id"], "zh")
    assert i18n.comment_problems(path, "zh") == []


def test_a_comments_block_that_does_not_fit_is_named(scratch):
    """A block with a comment too few, or a comment where the English has a docstring, is named
    and the cell keeps its English comments."""
    path = scratch / "i18n" / "zh" / "comments" / "03_scaled_attention.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("\n# 在这里写你的代码\n", "\n", 1), encoding="utf-8")
    english = scratch / "notebooks" / "03_scaled_attention.ipynb"
    found = "\n".join(i18n.comment_problems(english, "zh"))
    assert "holds 1 comments, the English cell has 2" in found, found
    i18n.build("zh", "03")
    zh = _load(scratch / "notebooks" / "zh" / "03_scaled_attention.ipynb")
    stub = next(c for c in zh["cells"] if "def causal_attention" in i18n.source(c))
    assert "# your code here" in i18n.source(stub)


def test_a_new_english_cell_and_a_dropped_one_are_named(scratch):
    path = scratch / "notebooks" / "05_residual.ipynb"
    nb = _load(path)
    nb["cells"].insert(
        1, {"cell_type": "markdown", "id": "brand-new", "metadata": {}, "source": "New."}
    )
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != "r-next"]
    path.write_text(i18n.dump(nb), encoding="utf-8")
    found = i18n.problems("zh")
    assert "i18n/zh/05_residual.md: cell brand-new has no translation" in found
    assert (
        "i18n/zh/05_residual.md: cell r-next is not a markdown cell of notebooks/05_residual.ipynb"
        in found
    )


def test_a_translation_that_drops_a_link_or_a_formula_is_named(scratch):
    path = scratch / "i18n" / "zh" / "05_residual.md"
    text = path.read_text(encoding="utf-8")
    text = text.replace("(06_normalisation.ipynb)", "(07_mlp.ipynb)", 1).replace(
        "$x + f(x)$", "x+f(x)", 1
    )
    path.write_text(text, encoding="utf-8")
    found = "\n".join(i18n.problems("zh"))
    assert "links differ from the English" in found
    assert "formulas differ from the English" in found


def test_a_hand_edit_of_a_built_notebook_is_named(scratch):
    path = scratch / "notebooks" / "zh" / "05_residual.ipynb"
    nb = _load(path)
    nb["cells"][0]["source"] = ["# 05 · 改过了"]
    path.write_text(i18n.dump(nb), encoding="utf-8")
    assert i18n.problems("zh") == [
        "notebooks/zh/05_residual.ipynb: not what the translation builds "
        "(run python -m i18n.build build)"
    ]
    assert i18n.build("zh", "06") == []  # another notebook's number leaves it alone
    assert i18n.build("zh", "05") == [path]
    assert i18n.problems("zh") == []


def test_editing_a_section_of_errata_or_the_readme_names_its_translation(scratch):
    """ERRATA.zh-CN.md, README.zh-CN.md and MAINTAINING.zh-CN.md are kept in step by the
    notebooks' rule: an English section edited since its Chinese was written is named, and so is
    a hand edit of the build."""
    for document, anchor in (("ERRATA.md", "2-an-8-character-window-gives-7-losses-not-8"),
                             ("README.md", "gpt-2-offline"),
                             ("MAINTAINING.md", "benchmarks")):  # fmt: skip
        path = scratch / document
        text = path.read_text(encoding="utf-8")
        english = dict(i18n.sections(text))[anchor]
        path.write_text(text.replace(english, english + "\n\nOne more sentence."), "utf-8")
    found = i18n.problems("zh")
    assert any(
        line.startswith("i18n/zh/ERRATA.md: section 2-an-8-character-window-gives-7-losses-not-8 "
                        "translates an older English text") for line in found
    ), found  # fmt: skip
    for said in (
        "i18n/zh/README.md: section gpt-2-offline translates an older English text",
        "i18n/zh/MAINTAINING.md: section benchmarks translates an older English text",
    ):
        assert any(line.startswith(said) for line in found), found  # fmt: skip
    edition = scratch / "ERRATA.zh-CN.md"
    edition.write_text(edition.read_text(encoding="utf-8") + "手改的一行。\n", "utf-8")
    found = i18n.problems("zh")
    assert any(
        line.startswith("ERRATA.zh-CN.md: not what the translation builds") for line in found
    )


def test_a_block_can_be_read_back_as_written(tmp_path):
    blocks = [
        i18n.Block("a", "0" * 12, "# 标题\n\n正文，$x$。"),
        i18n.Block("b", "1" * 12, "第二块"),
    ]
    path = tmp_path / "t.md"
    i18n.write_translation(path, "00_x", "zh", blocks)
    assert list(i18n.read_translation(path).values()) == blocks


def test_both_readmes_link_each_other_and_every_edition():
    en = (ROOT / "README.md").read_text(encoding="utf-8")
    zh = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "](README.zh-CN.md)" in en and "](README.md)" in zh
    assert "](MAINTAINING.md)" in en and "](MAINTAINING.zh-CN.md)" in zh  # the maintainer's part
    for name, other in (("MAINTAINING.md", "MAINTAINING.zh-CN.md"),
                        ("MAINTAINING.zh-CN.md", "MAINTAINING.md")):  # fmt: skip
        text = (ROOT / name).read_text(encoding="utf-8")
        assert f"]({other})" in text, f"{name} does not link {other}"
        targets = re.findall(r"\]\(((?:[^()\s#]|\([^()\s]*\))+)(?:#[^)]*)?\)", text)
        missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
        assert not missing, f"{name} links to files that do not exist: {missing}"
    for text, name in ((en, "README.md"), (zh, "README.zh-CN.md")):
        targets = re.findall(r"\]\(((?:[^()\s#]|\([^()\s]*\))+)(?:#[^)]*)?\)", text)
        missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
        assert not missing, f"{name} links to files that do not exist: {missing}"
        for english in ENGLISH:
            assert f"notebooks/zh/{english.name}" in text, f"{name} does not link zh/{english.name}"
            assert f"notebooks/{english.name}" in text, f"{name} does not link {english.name}"


# Words that make a line English when they are not code: the function words of English sentences.
FUNCTION_WORDS = set(
    """the a an of to in is are was were be been and or not no with without from by for at on
    as than that this these those it its into over under after before while when where which
    who what how why each every only same both also but if then so more less most least does do
    did has have had can cannot will would should must may per against between until here there
    their they we you your our""".split()
)
WORD = re.compile(r"\b[A-Za-z][a-z]{2,}\b")
# Not words: quoted strings, code spans, dotted or underscored names, calls, keyword arguments,
# and what follows "RuntimeError:" (PyTorch's own message, shown as PyTorch words it).
NOT_WORDS = re.compile(
    r"'[^']*'|\"[^\"]*\"|`[^`]*`|\b\w*[_.]\w*\b|\b\w+\([^()]*\)|\b\w+=|RuntimeError: .*"
)
# PyTorch's own messages, which a notebook shows as PyTorch says them (the notebook's own words
# around them are translated).
PYTORCH_SAYS = re.compile(
    r"index out of range in self|size mismatch for .*? the shape in current model is|"
    r"some parameters appear in more than one parameter group|"
    r"Trying to backward through the graph a second time",
    re.S,
)
# Cells whose output is a model's own text (GPT-2 writing English): data, not the course's words.
GENERATED_TEXT = {"16_gpt2.ipynb": {"11a504cb"}}


def _english_vocabulary() -> set[str]:
    """The words of the English notebooks' prose: what an English sentence here is made of (a
    sampled name, which no prose uses, is data)."""
    words = set()
    for path in ENGLISH:
        for cell in _load(path)["cells"]:
            if cell["cell_type"] == "markdown":
                text = re.sub(
                    r"```.*?```|`[^`]*`|\$[^$]*\$|\]\([^)]*\)", " ", i18n.source(cell), flags=re.S
                )
                words.update(w.lower() for w in WORD.findall(text))
    return words


def _code_names(nb: dict) -> set[str]:
    """Every name of the notebook's code (identifiers, attributes, keywords), not its strings."""
    import io
    import tokenize

    names = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(
            line
            for line in i18n.source(cell).splitlines()
            if not line.lstrip().startswith(("%", "!"))
        )
        tokens = tokenize.generate_tokens(io.StringIO(code).readline)
        for token in tokens:
            if token.type == tokenize.NAME:
                names.add(token.string)
                names.update(token.string.split("_"))
    return names


def _terms_the_chinese_prose_keeps() -> set[str]:
    """English words the Chinese prose itself writes outside code (token, loss, batch, softmax):
    quoted English terms, which an output may show as the prose does."""
    counts: dict[str, int] = {}
    for path in (ROOT / "i18n" / "zh").glob("*.md"):
        text = path.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```|`[^`]*`|\$[^$]*\$|\]\([^)]*\)|<[^>]+>", " ", text, flags=re.S)
        for word in WORD.findall(text):
            counts[word] = counts.get(word, 0) + 1
    return {w for w, n in counts.items() if n >= 2 and w.lower() not in FUNCTION_WORDS}


# Python's and PyTorch's own words in a value's repr, and names that are names.
KEPT_IN_ENGLISH = {"True", "False", "None", "tensor", "dtype", "nan", "inf", "Hugging", "Face"}


def _english_lines(nb: dict, allowed: set[str], vocabulary: set[str], name: str = "") -> list[str]:
    """Output lines of `nb` with two words of English prose, or one beside a function word, that
    are not code (`allowed`)."""
    import html

    found = []
    for cell in nb["cells"]:
        for output in _outputs(cell):
            if "image/png" in output.get("data", {}):
                continue  # the picture's text/plain is matplotlib's "<Figure size ...>"
            text = html.unescape(re.sub(r"<[^>]+>", "\n", _text(output)))
            if cell.get("id") in GENERATED_TEXT.get(name, ()):
                continue
            for line in PYTORCH_SAYS.sub(" ", text).splitlines():
                words = [
                    w
                    for w in WORD.findall(NOT_WORDS.sub(" ", line))
                    if w not in allowed and w.lower() not in allowed and w.lower() in vocabulary
                ]
                if len(words) >= 2:
                    found.append(f"cell {cell.get('id')}: {line.strip()[:120]}  ({words})")
    return found


VOCABULARY = _english_vocabulary() | FUNCTION_WORDS


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_the_chinese_edition_prints_no_english_sentence(english):
    """What a reader of the Chinese edition sees run is Chinese: no output line of a zh notebook
    reads as English, beyond code (the notebook's names, quoted strings, calls), data and the
    English terms the Chinese prose itself keeps (token, loss, softmax)."""
    zh = _load(ROOT / "notebooks" / "zh" / english.name)
    allowed = _code_names(zh) | _terms_the_chinese_prose_keeps() | KEPT_IN_ENGLISH
    found = _english_lines(zh, allowed, VOCABULARY, english.name)
    assert not found, "\n".join(found[:20])


def test_the_scan_finds_the_english_edition_english():
    """The scan above can fail: on the English edition's outputs it finds line after line."""
    en = _load(ROOT / "notebooks" / "05_residual.ipynb")
    allowed = _code_names(en) | _terms_the_chinese_prose_keeps() | KEPT_IN_ENGLISH
    found = _english_lines(en, allowed, VOCABULARY)
    assert len(found) >= 10, found
