"""GLOSSARY.md stays true to the notebooks.

Every link into ``notebooks/*.ipynb`` must name a notebook that exists and, when it carries a
``#fragment``, a markdown heading of that notebook as JupyterLab renders it: the heading's text
(inline markup such as backticks removed) with every space replaced by ``-``. Every notebook is
linked at least once, the glossary tables hold at least 50 complete rows, the core questions
Q1-Q12 each point at a notebook, and README.md links the glossary.

GLOSSARY.zh-CN.md, built from i18n/zh/GLOSSARY.md by ``python -m i18n.build``, explains every
term, question and pitfall in Chinese; each of its rows links the same sections as the English
row, the Chinese edition's in its 中文版 column, and its links land too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from i18n import build as i18n

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "GLOSSARY.md"
NOTEBOOKS = ROOT / "notebooks"

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
# How JupyterLab names a heading's anchor, and a cell's headings: the rules the Chinese edition's
# builder follows too.
jupyterlab_anchor = i18n.anchor
_source = i18n.source


def notebook_headings(path: Path) -> list[str]:
    """Markdown headings (ATX style) of a notebook, outside fenced code blocks."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [
        h for c in cells if c.get("cell_type") == "markdown" for h in i18n.headings(i18n.source(c))
    ]


def notebook_anchors(path: Path) -> set[str]:
    # A heading with LaTeX is typeset by MathJax, so its anchor is not predictable: not linkable.
    return {jupyterlab_anchor(h) for h in notebook_headings(path) if "$" not in h}


def _link_targets(text: str, prefix: str) -> list[str]:
    """Destinations of markdown links that start with ``prefix``, balanced parentheses kept."""
    targets = []
    start = 0
    opener = "](" + prefix
    while (i := text.find(opener, start)) != -1:
        j = i + 2
        depth = 1
        k = j
        while k < len(text) and depth:
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
            elif text[k] in " \n":
                break
            k += 1
        assert depth == 0, f"unterminated link near {text[i : i + 80]!r}"
        targets.append(text[j : k - 1])
        start = k
    return targets


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every pipe table as (header cells, body rows of cells)."""
    tables = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", nxt):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i].strip()))
                i += 1
            tables.append((header, rows))
        else:
            i += 1
    return tables


def _cells(row: str) -> list[str]:
    return [c.strip() for c in _CELL_SPLIT.split(row.strip().strip("|"))]


@pytest.fixture(scope="module")
def glossary() -> str:
    assert GLOSSARY.is_file(), "GLOSSARY.md is missing at the repository root"
    return GLOSSARY.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def links(glossary: str) -> list[tuple[str, str | None]]:
    found = []
    for target in _link_targets(glossary, "notebooks/"):
        path, _, fragment = target.partition("#")
        found.append((path, unquote(fragment) if fragment else None))
    assert found, "GLOSSARY.md links no notebook"
    return found


def test_anchor_rule_matches_jupyterlab():
    assert jupyterlab_anchor("Pre-norm or post-norm") == "Pre-norm-or-post-norm"
    assert (
        jupyterlab_anchor("1. `lm_head`: from d to V, by hand")
        == "1.-lm_head:-from-d-to-V,-by-hand"
    )
    assert jupyterlab_anchor("4. Temperature (温度)") == "4.-Temperature-(温度)"


def test_every_link_names_an_existing_notebook_and_heading(links):
    problems = []
    anchors: dict[str, set[str]] = {}
    for path, fragment in links:
        file = ROOT / path
        if not (path.endswith(".ipynb") and file.is_file()):
            problems.append(f"{path}: no such notebook")
            continue
        if fragment is None:
            continue
        if path not in anchors:
            anchors[path] = notebook_anchors(file)
        if fragment not in anchors[path]:
            problems.append(f"{path}#{fragment}: no heading of that notebook has this anchor")
    assert not problems, "\n".join(problems)


def test_every_notebook_is_linked(links):
    linked = {Path(path).name for path, _ in links}
    missing = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if p.name not in linked)
    assert not missing, f"notebooks the glossary never links: {missing}"


def _term_rows(glossary: str) -> list[list[str]]:
    rows = []
    for header, body in _tables(glossary):
        if header[:2] == ["English", "中文"]:
            assert len(header) == 5, f"glossary table header should have 5 columns: {header}"
            rows.extend(body)
    return rows


def test_glossary_table_is_complete(glossary):
    rows = _term_rows(glossary)
    assert len(rows) >= 50, f"only {len(rows)} glossary rows"
    for row in rows:
        assert len(row) == 5, f"row does not have 5 cells: {row}"
        english, chinese, meaning, where, zh_where = row
        assert english and chinese and meaning, f"empty English, 中文 or meaning cell: {row}"
        assert "](notebooks/" in where, f"row does not say where it is taught: {row}"
        assert "](notebooks/zh/" in zh_where, f"row has no link into the Chinese edition: {row}"
    names = [row[0].lower() for row in rows]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"terms listed twice: {duplicates}"


def test_core_questions_all_point_at_a_notebook(glossary):
    questions = {}
    for header, body in _tables(glossary):
        if header and header[0] == "Question":
            for row in body:
                questions[row[0].split()[0]] = row
    assert sorted(questions, key=lambda q: int(q[1:])) == [f"Q{i}" for i in range(1, 13)]
    for q, row in questions.items():
        assert len(row) == 4, f"{q}: a question row has 4 cells (the last the Chinese edition's)"
        assert "](notebooks/" in row[2], f"{q} links no notebook"
        assert "](notebooks/zh/" in row[3], f"{q} links no Chinese notebook"


def test_readme_links_the_glossary():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"\]\(\.?/?GLOSSARY\.md\)", readme), "README.md does not link GLOSSARY.md"


# The pitfalls (易错点) of textbook chapter 2, per section, and the failures of chapter 3, section
# 3.4: one row each in the Pitfalls table, so that every pitfall names its own demonstration.
CHAPTER_2_PITFALLS = {
    "embeddings": 2,
    "block": 2,
    "Q/K/V": 2,
    "attention": 2,
    "multi-head": 2,
    "residual": 3,
    "MLP": 2,
    "output head": 2,
    "loss": 2,
}
SECTION_3_4_FAILURES = 8


def test_pitfalls_have_one_row_each(glossary):
    bodies = [body for header, body in _tables(glossary) if header and header[0] == "Pitfall"]
    assert len(bodies) == 1, "GLOSSARY.md should have one Pitfalls table"
    per_section: dict[str, int] = {}
    for row in bodies[0]:
        assert len(row) == 4 and "](notebooks/" in row[2], f"malformed pitfall row: {row}"
        assert "](notebooks/zh/" in row[3], f"pitfall row links no Chinese notebook: {row}"
        first = row[1].split(";")[0].strip()  # the section the pitfall is listed under
        per_section[first] = per_section.get(first, 0) + 1
    chapter_2 = {k.removeprefix("2, "): v for k, v in per_section.items() if k.startswith("2, ")}
    assert chapter_2 == CHAPTER_2_PITFALLS, f"chapter 2 pitfalls per section: {chapter_2}"
    assert per_section.get("3.4") == SECTION_3_4_FAILURES, per_section


# --- the Chinese column, and links that land on the section that teaches the term -------------


def test_the_chinese_column_links_the_twins_of_the_english_links(glossary):
    """Each row's 中文版 links are its English links, pointed at the Chinese notebooks' headings
    (the mapping the Chinese edition's builder uses)."""
    maps = i18n._anchor_maps("zh")
    problems = []
    pairs = [(row[0], row[3], row[4]) for row in _term_rows(glossary)]
    for header, body in _tables(glossary):
        if header and header[0] in ("Question", "Pitfall"):
            pairs += [(row[0], row[2], row[3]) for row in body]
    assert len(pairs) >= 50 + 12 + 28, len(pairs)
    for term, english_cell, chinese_cell in pairs:
        english = _link_targets(english_cell, "notebooks/")
        chinese = _link_targets(chinese_cell, "notebooks/zh/")
        twins = []
        for target in english:
            path, _, fragment = target.partition("#")
            name = Path(path).name
            fragment = unquote(fragment)
            twin = maps.get(name, {}).get(fragment, fragment) if fragment else ""
            twins.append(f"notebooks/zh/{name}" + (f"#{twin}" if twin else ""))
        if [unquote(t) for t in chinese] != twins:
            problems.append(f"{term}: 中文版 {chinese}, expected {twins}")
    assert not problems, "\n".join(problems)


def _section(path: Path, fragment: str) -> str | None:
    """The text under the heading with anchor `fragment`: its cell and the cells after it, up to
    the next heading of the same or a higher level (code cells included: their comments count)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    heading = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*$", re.M)
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        found = [
            m for m in heading.finditer(_source(cell)) if jupyterlab_anchor(m.group(2)) == fragment
        ]
        if not found:
            continue
        level = len(found[0].group(1))
        parts = [_source(cell)]
        for nxt in cells[i + 1 :]:
            text = _source(nxt)
            if nxt["cell_type"] == "markdown" and any(
                len(m.group(1)) <= level for m in heading.finditer(text)
            ):
                break
            parts.append(text)
        return "\n".join(parts).lower()
    return None


def _english_words(term: str) -> list[str]:
    """The term's words, and the names in its parentheses, cut to five letters (embedding and
    embedded, sampling and sample, count alike)."""
    inner = " ".join(re.findall(r"\((.*?)\)", term))
    text = (re.sub(r"\(.*?\)", "", term) + " " + inner).replace("`", "").lower()
    return [w[:5] for w in re.split(r"[\s/,;]+", text) if len(w) > 2]


def _chinese_words(cell: str) -> list[str]:
    text = re.sub(r"\(.*?\)|（.*?）", "", cell).replace("`", "")
    return [w.strip().lower() for w in re.split(r"[/;；,，]", text) if w.strip()]


def test_every_link_lands_on_a_section_that_teaches_its_term(glossary):
    """The section a row links to names the term: one of its English words in the English
    notebook, or the 中文 column's word in the Chinese one."""
    problems = []
    for row in _term_rows(glossary):
        term, chinese = row[0], row[1]
        for english, zh in zip(
            _link_targets(row[3], "notebooks/"), _link_targets(row[4], "notebooks/zh/"), strict=True
        ):
            path, _, fragment = english.partition("#")
            if not fragment:
                continue
            en_text = _section(ROOT / path, unquote(fragment)) or ""
            zh_path, _, zh_fragment = zh.partition("#")
            zh_text = _section(ROOT / zh_path, unquote(zh_fragment)) or ""
            words = _english_words(term) or [term.replace(" ", "").lower()]  # Q = K = V = x
            if words == [term.replace(" ", "").lower()]:
                en_text = en_text.replace(" ", "")
            if not any(w in en_text for w in words) and not any(
                w in zh_text for w in _chinese_words(chinese)
            ):
                problems.append(f"{term!r} -> {english}: the section does not name the term")
    assert not problems, "\n".join(problems)


# --- GLOSSARY.zh-CN.md: the glossary in Chinese ---------------------------------------------------

ZH_GLOSSARY = ROOT / "GLOSSARY.zh-CN.md"
_HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def zh_glossary() -> str:
    assert ZH_GLOSSARY.is_file(), "GLOSSARY.zh-CN.md is missing (python -m i18n.build build)"
    return ZH_GLOSSARY.read_text(encoding="utf-8")


def _zh_tables(zh_glossary: str, first: str) -> list[list[str]]:
    return [row for header, body in _tables(zh_glossary) if header[0] == first for row in body]


def _english_tables(glossary: str, first: str) -> list[list[str]]:
    return [row for header, body in _tables(glossary) if header[0] == first for row in body]


def test_the_chinese_glossary_links_land(zh_glossary):
    targets = _link_targets(zh_glossary, "notebooks/")
    zh = [t for t in targets if t.startswith("notebooks/zh/")]
    assert len(zh) >= 160 + 12 + 28 and len(targets) - len(zh) >= 160 + 12 + 28, len(targets)
    problems, anchors = [], {}
    for target in targets:
        path, _, fragment = target.partition("#")
        if not (ROOT / path).is_file():
            problems.append(f"{target}: no such notebook")
        elif fragment:
            anchors.setdefault(path, notebook_anchors(ROOT / path))
            if unquote(fragment) not in anchors[path]:
                problems.append(f"{target}: no heading of {path} has this anchor")
    assert not problems, "\n".join(problems)
    own = [t for t in _link_targets(zh_glossary, "") if t.startswith("#")]
    ids = set(re.findall(r'^<a id="([^"]+)"></a>$', zh_glossary, re.M))
    assert own and all(t[1:] in ids for t in own), own


def test_every_term_is_explained_in_chinese_with_the_english_rows_links(glossary, zh_glossary):
    english = {row[0]: row for row in _term_rows(glossary)}
    chinese = {}
    for row in _zh_tables(zh_glossary, "中文"):
        assert len(row) == 5, f"a row of the Chinese glossary has 5 cells: {row}"
        chinese[row[1]] = row
    assert chinese.keys() == english.keys(), (
        f"terms only in GLOSSARY.md: {sorted(english.keys() - chinese.keys())}; "
        f"only in the Chinese: {sorted(chinese.keys() - english.keys())}"
    )
    problems = []
    for term, (zh_word, _, meaning, zh_where, en_where) in chinese.items():
        prose = re.sub(r"`[^`]*`", "", meaning)
        if re.search(r"textbook|has no term", zh_word):
            problems.append(f"{term}: the 中文 cell {zh_word!r} is written in English")
        if len(_HAN.findall(prose)) < 4 or re.search(r"(?:\b[A-Za-z]{3,}\b[ ,;]+){4}", prose):
            problems.append(f"{term}: the meaning is not written in Chinese: {meaning!r}")
        if _link_targets(zh_where, "notebooks/") != _link_targets(english[term][4], "notebooks/"):
            problems.append(f"{term}: 中文版 links differ from GLOSSARY.md's row")
        if _link_targets(en_where, "notebooks/") != _link_targets(english[term][3], "notebooks/"):
            problems.append(f"{term}: English edition links differ from GLOSSARY.md's row")
        if any(not t.startswith("notebooks/zh/") for t in _link_targets(zh_where, "notebooks/")):
            problems.append(f"{term}: the 中文版 column links an English notebook")
    assert not problems, "\n".join(problems)


def test_the_core_questions_and_pitfalls_are_in_chinese_linking_both_editions(
    glossary, zh_glossary
):
    for zh_first, en_first, count in (("问题", "Question", 12), ("易错点", "Pitfall", 28)):
        zh_rows, en_rows = _zh_tables(zh_glossary, zh_first), _english_tables(glossary, en_first)
        assert len(zh_rows) == len(en_rows) == count, (zh_first, len(zh_rows), len(en_rows))
        for zh, en in zip(zh_rows, en_rows, strict=True):
            text = zh[1] if zh_first == "问题" else zh[0]
            assert _HAN.search(re.sub(r"`[^`]*`", "", text)), f"not in Chinese: {zh}"
            assert _link_targets(zh[-2], "notebooks/") == _link_targets(en[-1], "notebooks/"), zh
            assert _link_targets(zh[-1], "notebooks/") == _link_targets(en[-2], "notebooks/"), zh
            assert all(t.startswith("notebooks/zh/") for t in _link_targets(zh[-2], "notebooks/"))
    assert [row[0] for row in _zh_tables(zh_glossary, "问题")] == [f"Q{i}" for i in range(1, 13)]
    sections = [row[1] for row in _zh_tables(zh_glossary, "易错点")]
    assert sum(s == "3.4 节" for s in sections) == SECTION_3_4_FAILURES, sections


def test_the_chinese_glossary_is_what_its_translation_builds():
    problems = i18n.document_problems("GLOSSARY.md", "zh", i18n._anchor_maps("zh"))
    assert not problems, "\n".join(problems)


def test_the_chinese_readme_links_the_chinese_glossary():
    readme = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "](GLOSSARY.zh-CN.md)" in readme, "README.zh-CN.md does not link GLOSSARY.zh-CN.md"
    english = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](GLOSSARY.zh-CN.md)" in english, "README.md does not link GLOSSARY.zh-CN.md"
