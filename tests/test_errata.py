"""ERRATA.md stays true to the notebooks and the code it cites.

Every link into ``notebooks/*.ipynb`` names a notebook that exists and, with a ``#fragment``, a
heading of that notebook as JupyterLab renders it (the rule of tests/test_glossary.py). Every link
to another file of the repository names a file that exists. Every numbered entry says what the
textbook says, what the course does, where that is shown and how to reproduce it.

Both ways between ERRATA.md and the notebooks: every entry's **Flagged in** line links the notebook
sections that tell the reader of the departure, each of which names the entry ("ERRATA N", or a
link to its heading), or says that none does yet; those entries are listed in NOT_YET_FLAGGED with
the notebook where the flag belongs, so that the gap stays visible. Every mention of an entry in an
English notebook names an entry that exists, is linked from that entry's **Flagged in** line, and
links a heading ERRATA.md has.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from test_glossary import _link_targets, notebook_anchors

from i18n import build as i18n

ROOT = Path(__file__).resolve().parent.parent
ERRATA = ROOT / "ERRATA.md"
PARTS = ("**Textbook**", "**Course**", "**Evidence**", "**Reproduce**")


@pytest.fixture(scope="module")
def errata() -> str:
    assert ERRATA.is_file(), "ERRATA.md is missing at the repository root"
    return ERRATA.read_text(encoding="utf-8")


@pytest.fixture(scope="module", params=["ERRATA.md", "ERRATA.zh-CN.md"])
def edition(request) -> str:
    """Either edition of ERRATA: the Chinese one is built from i18n/zh/ERRATA.md."""
    path = ROOT / request.param
    assert path.is_file(), f"{request.param} is missing (python -m i18n.build build)"
    return path.read_text(encoding="utf-8")


def _entries(text: str) -> dict[str, str]:
    """'### N. title' -> the entry's text, up to the next heading."""
    found = {}
    for m in re.finditer(r"^### (\d+\.[^\n]*)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S):
        found[m.group(1)] = m.group(2)
    return found


def test_notebook_links_name_an_existing_notebook_and_heading(edition):
    targets = _link_targets(edition, "notebooks/")
    assert len(targets) >= 16, f"only {len(targets)} links into the notebooks"
    problems, anchors = [], {}
    for target in targets:
        path, _, fragment = target.partition("#")
        file = ROOT / path
        if not (path.endswith(".ipynb") and file.is_file()):
            problems.append(f"{target}: no such notebook")
            continue
        if not fragment:
            continue
        if path not in anchors:
            anchors[path] = notebook_anchors(file)
        if unquote(fragment) not in anchors[path]:
            problems.append(f"{target}: no heading of {path} has this anchor")
    assert not problems, "\n".join(problems)


def test_links_to_repository_files_exist(edition):
    targets = [
        t
        for t in _link_targets(edition, "")
        if not t.startswith(("notebooks/", "#", "http://", "https://"))
    ]
    assert targets, "ERRATA.md links no library file"
    missing = [t for t in targets if not (ROOT / t.partition("#")[0]).exists()]
    assert not missing, f"links to files that do not exist: {missing}"


def test_every_entry_has_its_four_parts(errata):
    entries = _entries(errata)
    assert len(entries) >= 16, f"only {len(entries)} entries"
    numbers = [int(title.split(".")[0]) for title in entries]
    assert numbers == list(range(1, len(numbers) + 1)), f"entries are not numbered 1..N: {numbers}"
    for title, body in entries.items():
        missing = [part for part in PARTS if part not in body]
        assert not missing, f"entry {title!r} lacks {missing}"
        evidence = body.split("**Evidence**", 1)[1].split("**Reproduce**", 1)[0]
        assert "](" in evidence, f"entry {title!r} links no notebook or file as its evidence"


def test_internal_anchors_resolve(edition):
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#{1,6} (.*)$", edition, re.M)
    } | set(re.findall(r'^<a id="([^"]+)"></a>$', edition, re.M))  # the English anchors kept
    for target in _link_targets(edition, "#"):
        assert target[1:] in headings, f"no heading for the link {target}"


# --- Flagged in: each entry names the notebook section that tells the reader, both ways ---------

NOTEBOOKS = ROOT / "notebooks"
NOT_YET = "not yet flagged in a notebook"
# Entries no notebook points to yet, with the notebook where the flag belongs. The test fails when
# one of them is flagged after all: link that section from its **Flagged in** line and drop it here.
NOT_YET_FLAGGED = {}
# "ERRATA 6", or a link to its heading in ERRATA.md.
_REFERENCE = re.compile(r"\bERRATA (\d+)\b|ERRATA\.md#(\d+)-")
_ERRATA_LINK = re.compile(r"ERRATA\.md#([^)\s]+)")


def _slug(heading: str) -> str:
    """ERRATA.md's heading anchors, as GitHub writes them (test_internal_anchors_resolve's rule)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _numbered(errata: str) -> dict[int, str]:
    return {int(title.split(".")[0]): body for title, body in _entries(errata).items()}


def _flagged_in(body: str) -> str:
    """The text of an entry's **Flagged in** part, up to the next part or the entry's end."""
    return body.split("**Flagged in**", 1)[1].split("\n- **", 1)[0]


def _sections(path: Path) -> list[tuple[str, list[str], str]]:
    """A notebook's markdown, heading by heading: (anchor, the anchors of the headings it sits
    under, itself first, and the text up to the next heading)."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found, stack, lines, in_fence = [], [], [], False
    current = None

    def close() -> None:
        if current is not None:
            found.append((current[0], current[1], "\n".join(lines)))

    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        for line in i18n.source(cell).splitlines():
            if i18n._FENCE.match(line):
                in_fence = not in_fence
            m = None if in_fence else i18n._HEADING.match(line)
            if m:
                close()
                level, anchor = len(m.group(1)), i18n.anchor(m.group(2))
                stack = [(lv, a) for lv, a in stack if lv < level] + [(level, anchor)]
                current, lines = (anchor, [a for _, a in reversed(stack)]), []
            lines.append(line)
    close()
    return found


def _section_text(path: Path, anchor: str) -> str:
    """The text under one heading, its subsections included."""
    return "\n".join(text for _, chain, text in _sections(path) if anchor in chain)


def _notebook_references() -> list[tuple[int, str, list[str]]]:
    """Every mention of an ERRATA entry in an English notebook: (number, notebook, the anchors
    of the headings it sits under)."""
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for _, chain, text in _sections(path):
            for m in _REFERENCE.finditer(text):
                found.append((int(m.group(1) or m.group(2)), path.name, chain))
    return found


def test_every_entry_says_where_it_is_flagged(errata):
    problems = []
    for n, body in _numbered(errata).items():
        if "**Flagged in**" not in body:
            problems.append(f"entry {n} has no **Flagged in** line")
            continue
        flag = _flagged_in(body)
        links = _link_targets(flag, "notebooks/")
        if NOT_YET in flag:
            if links:
                problems.append(f"entry {n} says '{NOT_YET}' and links {links}")
            if n not in NOT_YET_FLAGGED:
                problems.append(f"entry {n} is not flagged yet: add it to NOT_YET_FLAGGED")
            elif f"notebook {NOT_YET_FLAGGED[n]}" not in " ".join(flag.split()):
                problems.append(f"entry {n} should name notebook {NOT_YET_FLAGGED[n]}, its home")
        elif not links:
            problems.append(
                f"entry {n}: **Flagged in** neither links a notebook nor says '{NOT_YET}'"
            )
        elif n in NOT_YET_FLAGGED:
            problems.append(f"entry {n} links a flag: drop it from NOT_YET_FLAGGED")
    stale = sorted(set(NOT_YET_FLAGGED) - set(_numbered(errata)))
    assert not stale, f"NOT_YET_FLAGGED lists entries that do not exist: {stale}"
    assert not problems, "\n".join(problems)


def test_each_linked_flag_names_its_entry(errata):
    problems = []
    for n, body in _numbered(errata).items():
        if "**Flagged in**" not in body:
            continue
        for target in _link_targets(_flagged_in(body), "notebooks/"):
            path, _, fragment = target.partition("#")
            file = ROOT / path
            text = _section_text(file, unquote(fragment)) if fragment and file.is_file() else ""
            named = {int(a or b) for a, b in _REFERENCE.findall(text)}
            if n not in named:
                problems.append(f"entry {n}: {target} does not say 'ERRATA {n}'")
    assert not problems, "\n".join(problems)


def test_every_flag_in_a_notebook_is_listed_in_its_entry(errata):
    entries = _numbered(errata)
    headings = {_slug(h) for h in re.findall(r"^#{1,6} (.*)$", errata, re.M)}
    problems = []
    for n, notebook, chain in _notebook_references():
        where = f"notebooks/{notebook}#{chain[0]}"
        if n not in entries:
            problems.append(f"{where} refers to ERRATA {n}, which does not exist")
        elif n in NOT_YET_FLAGGED:
            problems.append(
                f"{where} flags ERRATA {n}: link it from the entry's **Flagged in** line and drop "
                f"{n} from NOT_YET_FLAGGED"
            )
        else:
            linked = {
                unquote(t)
                for t in _link_targets(_flagged_in(entries[n]), "notebooks/")
                if t.startswith(f"notebooks/{notebook}#")
            }
            if not linked & {f"notebooks/{notebook}#{a}" for a in chain}:
                problems.append(f"{where} flags ERRATA {n}; entry {n}'s **Flagged in** lacks it")
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for _, chain, text in _sections(path):
            for anchor in _ERRATA_LINK.findall(text):
                if anchor not in headings:
                    problems.append(f"notebooks/{path.name}#{chain[0]}: no ERRATA heading {anchor}")
    assert _notebook_references(), "no notebook refers to an ERRATA entry"
    assert not problems, "\n".join(problems)


# --- ERRATA.zh-CN quotes what the Chinese notebooks print -----------------------------------------
# i18n/zh/ERRATA.md writes {{out NN cell "piece"}} where the English quotes a notebook's output; the
# builder puts the line of the Chinese notebook's stored output there (i18n/build.py, QUOTE).

ZH_ERRATA = ROOT / "i18n" / "zh" / "ERRATA.md"


def test_every_quote_marker_finds_its_line_in_the_chinese_notebook():
    text = ZH_ERRATA.read_text(encoding="utf-8")
    markers = list(i18n.QUOTE.finditer(text))
    assert len(markers) >= 100, f"only {len(markers)} quotes of the Chinese notebooks' outputs"
    problems = []
    for m in markers:
        try:
            line = i18n.quoted_line(m, "zh")
        except i18n.QuoteError as e:
            problems.append(str(e))
            continue
        if not re.search(r"[\u4e00-\u9fff]", line) and re.search(
            r"[A-Za-z]{3,} [A-Za-z]{3,}", line
        ):
            problems.append(f"{m.group(0)} quotes {line!r}: English words and no Chinese")
    assert not problems, "\n".join(problems)


def test_a_marker_that_finds_no_line_fails_the_build_naming_it():
    text = 'prints {{out 07 05fb79b5 "no such piece 123"}}.'
    with pytest.raises(i18n.QuoteError, match=r"05fb79b5 \"no such piece 123\".*0 lines"):
        i18n.with_quotes(text, "zh", "i18n/zh/ERRATA.md, section 1")
    with pytest.raises(i18n.QuoteError, match="no code cell nosuchcell"):
        i18n.with_quotes("{{out 07 nosuchcell #1}}", "zh", "here")
    with pytest.raises(i18n.QuoteError, match="prints 2 lines, not 9"):
        i18n.with_quotes("{{out 07 05fb79b5 #9}}", "zh", "here")
    built = i18n.with_quotes('prints {{out 07 05fb79b5 "524,288"}}.', "zh", "here")
    assert "524,288" in built and "800,384" in built and "`" in built, built


def test_the_check_pairs_a_marker_with_the_english_quote_of_the_same_line():
    english = (
        "prints `textbook preset: MLP 524,288 of 800,384 parameters = 65.5% of the whole model` "
        "and `microgpt (trained): MLP 2,048 of 4,112 parameters = 49.8% of the whole model`."
    )
    right = '打印 {{out 07 05fb79b5 "524,288"}} 和 {{out 07 05fb79b5 "2,048"}}。'
    assert i18n.quote_differences(english, right, "zh") == []
    # the same line twice: one English quote has no marker, and one marker no quote of its line
    wrong = i18n.quote_differences(
        english, '打印 {{out 07 05fb79b5 "524,288"}} 和 {{out 07 05fb79b5 "800,384"}}。', "zh"
    )
    assert any("no output of cell 05fb79b5" in p for p in wrong), wrong
    assert any("microgpt (trained)" in p for p in wrong), wrong  # the English quote left over
    # a marker of a cell the English does not quote
    other = i18n.quote_differences(english, right + ' {{out 07 6ac7d2a2 "131072"}}', "zh")
    assert any("6ac7d2a2" in p for p in other), other


def test_a_line_named_by_its_place_is_refused_where_the_editions_print_different_lines(
    monkeypatch,
):
    def outputs(path):  # the Chinese run printed one line fewer than the English
        zh = path.parent.name == "zh"
        return {"c1": ["甲：1"] if zh else ["alpha one: 1", "beta two: 2"]}

    monkeypatch.setattr(i18n, "output_lines", outputs)
    found = i18n.quote_differences("prints `alpha one: 1`.", "打印 {{out 07 c1 #1}}。", "zh")
    assert any("by its place" in p and "2 lines in English and 1" in p for p in found), found
    assert i18n.quote_differences("prints `alpha one: 1`.", '打印 {{out 07 c1 "1"}}。', "zh") == []


def _quoted_outputs(text: str, linked: list[str], lang: str | None):
    """The code spans of `text` that quote (all pieces, spacing aside) exactly one code cell's
    stored output among the linked notebooks: (span, notebook number, cell id)."""
    found = []
    for m in i18n._CODE.finditer(text):
        span = m.group()
        if span.startswith(("```", "~~~")) or len(re.findall(r"[A-Za-z]{3,}", span)) < 2:
            continue
        hits = [
            (number, cell)
            for number in linked
            for cell, lines in i18n.output_lines(i18n.notebook_by_number(number, lang)).items()
            if i18n.quotes_output(span, lines)
        ]
        if len(hits) == 1:
            found.append((span, *hits[0]))
    return found


def test_the_chinese_errata_quotes_no_english_output_that_the_chinese_notebook_prints_otherwise():
    """A quote of an English notebook's output, left in English in ERRATA.zh-CN, although the
    Chinese notebook's same cell prints something else: it should be a marker."""
    built = (ROOT / "ERRATA.zh-CN.md").read_text(encoding="utf-8")
    problems = []
    for anchor, text in i18n.sections(built):
        linked = sorted(set(re.findall(r"notebooks/zh/(\d\d)_\w+\.ipynb", text)))
        for span, number, cell in _quoted_outputs(text, linked, None):
            zh = i18n.output_lines(i18n.notebook_by_number(number, "zh")).get(cell, [])
            if not i18n.quotes_output(span, zh):
                problems.append(f"{anchor[:40]}: {span[:70]} (notebook {number}, cell {cell})")
    # the variants' names that the Chinese notebook prints with a number on the same line
    allowed = {"`Q = K = V = x W, one W`"}
    problems = [p for p in problems if not any(a in p for a in allowed)]
    assert not problems, "English output quoted where the Chinese notebook differs:\n" + "\n".join(
        problems
    )


def test_a_quote_of_a_cell_not_yet_executed_waits_for_the_next_build(monkeypatch, capsys):
    """`make notebooks` builds the Chinese edition before executing it: a cell whose code changed
    has no output yet, so the errata is left as it is (with a message) instead of stopping the
    build; a marker that finds no line in an executed cell stops it."""
    monkeypatch.setattr(i18n, "output_lines", lambda path: {"c1": []})
    with pytest.raises(i18n.QuoteError, match="no stored output") as caught:
        i18n.with_quotes("{{out 07 c1 #1}}", "zh", "here")
    assert caught.value.pending

    def pending(document, lang, maps=None):
        raise i18n.QuoteError("{{out 07 c1 #1}}: no stored output", pending=True)

    monkeypatch.setattr(i18n, "translated_document", pending)
    assert i18n.build("zh", "ERRATA") == []
    assert "ERRATA.zh-CN.md not rebuilt yet" in capsys.readouterr().err

    def missing(document, lang, maps=None):
        raise i18n.QuoteError('{{out 07 c1 "9.99"}}: 0 lines contain it')

    monkeypatch.setattr(i18n, "translated_document", missing)
    with pytest.raises(i18n.QuoteError, match="9.99"):
        i18n.build("zh", "ERRATA")
