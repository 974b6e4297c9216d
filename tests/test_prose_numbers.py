"""The numbers the prose quotes are the numbers the notebook printed, in both editions.

Every number of a markdown cell written with a decimal point (2.1410, 0.45), a thousands comma
(4,112) or an exponent (1e-5) must be found among the numbers of the same notebook's code cells
and stored outputs, as printed or rounded to the digits the prose gives (2.38 for a printed
2.3756). A stored output is what the last run printed, so a number that moved with a rerun and
was not updated in the prose fails here. Formulas ($...$) and link targets are left out.

Some numbers are worked out in the prose itself from printed ones (a difference, a product, a
share); they are listed in DERIVED per notebook, and an entry that no longer occurs in its
notebook fails too, so the list cannot go stale.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EDITIONS = [*NOTEBOOKS, *sorted((ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb"))]

# (A number followed by 万 or 亿 is the Chinese way of writing a larger one: 1.24 亿 = 124M.)
QUOTED = re.compile(
    r"(?<![\w.\-])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d{2,}|\d+(?:\.\d+)?e[-+]?\d+)(?![\w]| ?[万亿])"
)
ANY = re.compile(r"(?<![\w.])(?:\d{1,3}(?:[,_]\d{3})+|\d+)(?:\.\d+)?(?:e[-+]?\d+)?")

# Worked out in the prose from printed numbers (notebook number -> the numbers as written).
DERIVED: dict[str, set[str]] = {
    "01": {"3,072", "12,288"},
    "04": {"0.005", "3,000"},
    "06": {"0.02", "0.0929"},
    "07": {"2,579", "3,000", "3,072", "3,584", "288,879"},
    "08": {"1.25", "50,000", "103,040", "3,200,000", "3,303,040", "6,503,040"},
    "09": {"0.02"},
    "10": {"1e-6", "4,800", "32,000", "32,519"},
    "11": {"2e-4"},
    "12": {"0.066", "1.96"},
    "14": {"1e-16", "1e-7", "0.04", "0.11", "2.41"},
    "15": {"1,124", "3,465", "5,400", "9,235"},
    "16": {"4,608", "122,880", "6,432,896"},
}


def _value(text: str) -> float:
    return float(text.replace(",", "").replace("_", ""))


def _printed(nb: dict) -> set[float]:
    """Every number in the notebook's code and stored text outputs."""
    found: set[float] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        texts = ["".join(cell["source"])]
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            plain = out.get("data", {}).get("text/plain", "")
            texts.append("".join(plain) if isinstance(plain, list) else plain)
        for text in texts:
            for m in ANY.findall(text):
                try:
                    found.add(_value(m))
                except ValueError:
                    continue
    return found


def _quoted(nb: dict) -> list[tuple[int, str]]:
    """(cell index, number as written) for every quoted number of the markdown cells."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        text = re.sub(r"\$\$.*?\$\$|\$[^$\n]*\$", "", text, flags=re.S)  # formulas
        text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
        out += [(i, n) for n in QUOTED.findall(text)]
    return out


def _matches(written: str, printed: set[float]) -> bool:
    x = _value(written)
    if x in printed:
        return True
    if "e" in written:
        return any(y and abs(x / y - 1) < 1e-9 for y in printed)
    if "." in written:
        places = len(written.split(".")[1])
        return any(round(y, places) == x for y in printed)
    return False


@pytest.mark.parametrize("path", EDITIONS, ids=[str(p.relative_to(ROOT)) for p in EDITIONS])
def test_every_quoted_number_was_printed(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    printed = _printed(nb)
    allowed = DERIVED.get(path.name[:2], set())
    wrong = [
        f"cell {i}: {n}" for i, n in _quoted(nb) if n not in allowed and not _matches(n, printed)
    ]
    assert not wrong, (
        f"{path.relative_to(ROOT)}: these numbers of the prose are not among its printed "
        f"numbers (rerun moved them, or add a printed line; a number the prose works out "
        f"itself goes in DERIVED): {', '.join(wrong)}"
    )


@pytest.mark.parametrize("number", sorted(DERIVED))
def test_every_derived_number_still_occurs(number):
    [path] = [p for p in NOTEBOOKS if p.name.startswith(number)]
    written = {n for _, n in _quoted(json.loads(path.read_text(encoding="utf-8")))}
    assert DERIVED[number] <= written, (
        f"no longer in notebook {number}: {DERIVED[number] - written}"
    )


def test_a_number_that_moved_is_caught():
    nb = {
        "cells": [
            {"cell_type": "code", "source": ["print(loss)"], "outputs": [{"text": ["2.3756\n"]}]},
            {"cell_type": "markdown", "source": ["the loss was 2.38, then 2.3757"]},
        ]
    }
    printed = _printed(nb)
    assert [_matches(n, printed) for _, n in _quoted(nb)] == [True, False]
