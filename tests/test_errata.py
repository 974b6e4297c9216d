"""ERRATA.md stays true to the notebooks and the code it cites.

Every link into ``notebooks/*.ipynb`` names a notebook that exists and, with a ``#fragment``, a
heading of that notebook as JupyterLab renders it (the rule of tests/test_glossary.py). Every link
to another file of the repository names a file that exists. Every numbered entry says what the
textbook says, what the course does, where that is shown and how to reproduce it.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from test_glossary import _link_targets, notebook_anchors

ROOT = Path(__file__).resolve().parent.parent
ERRATA = ROOT / "ERRATA.md"
PARTS = ("**Textbook**", "**Course**", "**Evidence**", "**Reproduce**")


@pytest.fixture(scope="module")
def errata() -> str:
    assert ERRATA.is_file(), "ERRATA.md is missing at the repository root"
    return ERRATA.read_text(encoding="utf-8")


def _entries(text: str) -> dict[str, str]:
    """'### N. title' -> the entry's text, up to the next heading."""
    found = {}
    for m in re.finditer(r"^### (\d+\.[^\n]*)\n(.*?)(?=^#{2,3} |\Z)", text, re.M | re.S):
        found[m.group(1)] = m.group(2)
    return found


def test_notebook_links_name_an_existing_notebook_and_heading(errata):
    targets = _link_targets(errata, "notebooks/")
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


def test_links_to_repository_files_exist(errata):
    targets = [
        t
        for t in _link_targets(errata, "")
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


def test_internal_anchors_resolve(errata):
    headings = {
        re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#{1,6} (.*)$", errata, re.M)
    }
    for target in _link_targets(errata, "#"):
        assert target[1:] in headings, f"no heading for the link {target}"
