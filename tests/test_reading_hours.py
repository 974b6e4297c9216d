"""The README's reading times, notebook by notebook, are what its stated rule gives for the
notebooks as they are now: the prose at 120 words a minute, half a minute per code cell, and each
required exercise's own estimate (gptlib.exercises.table), rounded to a quarter of an hour. Both
editions quote the same figures."""

import json
import re
from pathlib import Path

import pytest

from gptlib.exercises.table import EXERCISES

ROOT = Path(__file__).resolve().parent.parent
WORDS_A_MINUTE, MINUTES_A_CODE_CELL = 120, 0.5


def hours(notebook: Path) -> float:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    words = sum(
        len(re.findall(r"[A-Za-z0-9']+", "".join(c["source"])))
        for c in cells
        if c["cell_type"] == "markdown"
    )
    code = sum(c["cell_type"] == "code" for c in cells)
    number = notebook.name[:2]
    exercises = sum(e.minutes for e in EXERCISES if e.notebook == number and not e.optional)
    minutes = words / WORDS_A_MINUTE + code * MINUTES_A_CODE_CELL + exercises
    return round(minutes / 15) / 4


EXPECTED = {p.name[:2]: hours(p) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}


@pytest.mark.parametrize(
    ("readme", "total"),
    [("README.md", r"about (\d+) hours in all"), ("README.zh-CN.md", r"总计约 (\d+) 小时")],
)
def test_readme_quotes_each_notebooks_hours(readme, total):
    text = (ROOT / readme).read_text(encoding="utf-8")
    quoted = {n: float(h) for n, h in re.findall(r"\b(\d\d) (\d+(?:\.\d+)?) h\b", text)}
    lines = ", ".join(f"{n} {h:g} h" for n, h in EXPECTED.items())
    assert quoted == EXPECTED, f"{readme} should say: {lines}"
    assert int(re.search(total, text)[1]) == round(sum(EXPECTED.values()))


def test_the_rule_moves_with_the_notebooks():
    """More prose or another exercise changes the figure: the test can fail."""
    assert all(0.25 <= h <= 4 for h in EXPECTED.values()) and len(EXPECTED) == 17
    assert EXPECTED["14"] >= 1.5  # the capstone: three exercises of about an hour together
