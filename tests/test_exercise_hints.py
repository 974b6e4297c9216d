"""The hints are on the page: under every exercise, in both editions, two collapsed steps (what to
think about; the shapes and the steps), free of the solution's code, then the line that points
to `show_solution`. Nothing says `hint(` any more."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

import gptlib.exercises as ex
from gptlib.exercises.checking import _helpers_of
from gptlib.exercises.table import EXERCISES

ROOT = Path(__file__).resolve().parent.parent
SUMMARIES = {
    "en": ("<summary>Hint 1 · what to think about</summary>",
           "<summary>Hint 2 · the shapes and the steps</summary>"),
    "zh": ("<summary>提示 1 · 想一想</summary>", "<summary>提示 2 · 形状与步骤</summary>"),
}  # fmt: skip


def _notebook(number: str, edition: str) -> Path:
    folder = ROOT / "notebooks" / ("zh" if edition == "zh" else "")
    [path] = sorted(folder.glob(f"{number}_*.ipynb"))
    return path


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _hint_cell(record, edition: str) -> str:
    """The markdown cell that holds the record's hints: it points to show_solution(check)."""
    found = [
        "".join(c["source"])
        for c in _cells(_notebook(record.notebook, edition))
        if c["cell_type"] == "markdown"
        and f"show_solution({record.check})" in "".join(c["source"])
        and SUMMARIES[edition][0] in "".join(c["source"])
    ]
    assert len(found) == 1, f"{record.check}: {len(found)} hint cells in the {edition} edition"
    return found[0]


def _steps(text: str, edition: str) -> tuple[str, str]:
    first, second = SUMMARIES[edition]
    assert text.index(first) < text.index(second), "hint 1 comes before hint 2"
    one = text.split(first, 1)[1].split("</details>", 1)[0]
    two = text.split(second, 1)[1].split("</details>", 1)[0]
    return one.strip(), two.strip()


def _code_lines(solution) -> set[str]:
    """The solution's lines (and its helpers'), comments and docstrings left out, whitespace
    collapsed, trivial lines (`return x`) dropped."""
    lines = set()
    for fn in [*_helpers_of(solution), solution]:
        in_docstring = False
        for raw in inspect.getsource(inspect.unwrap(fn)).splitlines():
            line = raw.strip()
            quotes = line.count('"""')
            if in_docstring or quotes:
                in_docstring = in_docstring != (quotes % 2 == 1)
                continue
            code = " ".join(line.split("#", 1)[0].split())
            if len(code) >= 12 and not code.startswith(("def ", "@", ")")):
                if not re.fullmatch(r"return \w+", code):
                    lines.add(code)
    return lines


@pytest.mark.parametrize("edition", ["en", "zh"])
@pytest.mark.parametrize("record", EXERCISES, ids=[e.check for e in EXERCISES])
def test_every_exercise_has_two_hint_steps_on_its_page(record, edition):
    one, two = _steps(_hint_cell(record, edition), edition)
    assert len(one) > 40 and len(two) > 40 and one != two, (one, two)
    for step in (one, two):
        assert "```" not in step, f"{record.check}: a code block in a hint"
        flat = " ".join(step.replace("`", "").split())
        leaked = [line for line in _code_lines(getattr(ex, record.check).solution) if line in flat]
        assert not leaked, f"{record.check}: the solution's code in a hint: {leaked}"


def test_the_measure_catches_a_leaked_line():
    solution = ex.check_embed.solution
    assert any(
        line in " ".join(inspect.getsource(solution).split()) for line in _code_lines(solution)
    )


def test_nothing_calls_hint_any_more():
    assert "hint" not in ex.__all__
    paths = [*sorted((ROOT / "notebooks").glob("**/*.ipynb")), ROOT / "README.md",
             ROOT / "README.zh-CN.md"]  # fmt: skip
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\bhint\(", text), f"{path.name} still says hint("
