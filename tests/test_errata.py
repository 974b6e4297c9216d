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
