"""Exercises are stored unsolved: every function a notebook hands to a `check_*` call is either a
stub (its body raises NotImplementedError, and the stored output is the check's 'not written
yet' line) or a deliberate slip (named ..._slip / ..._first_try / ..._wrong / ..._mistake), and
no notebook prints a reference solution."""

import ast
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SLIP = re.compile(r"slip|first_try|wrong|mistake")
NOT_WRITTEN = "is not written yet: replace its body and run this cell again"


def _code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _output_text(cell: dict) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def _checked_functions(source: str) -> list[str]:
    """Names passed as the first argument of a check_*(...) call in one cell."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith("check_")
            and node.args
            and isinstance(node.args[0], ast.Name)
        ):
            names.append(node.args[0].id)
    return names


def _defined_functions(cells: list[dict]) -> dict[str, ast.FunctionDef]:
    found = {}
    for cell in cells:
        source = "".join(cell["source"])
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                found[node.name] = node
    return found


def _raises_not_implemented(fn: ast.FunctionDef) -> bool:
    return any(
        isinstance(node, ast.Raise)
        and "NotImplementedError" in ast.unparse(node.exc if node.exc is not None else node)
        for node in ast.walk(fn)
    )


def test_every_exercise_notebook_is_found():
    with_checks = [
        nb for nb in NOTEBOOKS if any("check_" in "".join(c["source"]) for c in _code_cells(nb))
    ]
    assert len(with_checks) >= 12


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_are_stored_unsolved(notebook):
    cells = _code_cells(notebook)
    defined = _defined_functions(cells)
    for cell in cells:
        source = "".join(cell["source"])
        for name in _checked_functions(source):
            assert not name.startswith("solution_"), f"{notebook.name}: check called on {name}"
            if SLIP.search(name) or re.search(rf"^{name} = yours\.use\(", source, re.M):
                continue  # a slip shown, or the piece in use checked again
            fn = defined.get(name)
            assert fn is not None, f"{notebook.name}: {name} is checked but not defined in it"
            assert _raises_not_implemented(fn), (
                f"{notebook.name}: {name} is stored solved; store the stub (raise "
                "NotImplementedError) and leave the solution to show_solution"
            )
            if name not in _defined_functions([cell]):
                continue  # a later cell that uses the stub (or falls back to the reference)
            assert NOT_WRITTEN in _output_text(cell), (
                f"{notebook.name}: the stored output of the cell checking {name} is not the "
                "'not written yet' line"
            )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_solution_is_printed(notebook):
    for cell in _code_cells(notebook):
        calls = [
            node
            for node in ast.walk(ast.parse("".join(cell["source"])))
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "show_solution"
        ]
        assert not calls, f"{notebook.name}: a cell calls show_solution; leave it to the reader"


def test_each_exercise_states_its_difficulty_and_time():
    """The label under each exercise heading agrees with `python -m gptlib progress`'s table."""
    from gptlib.exercises.progress import EXERCISES

    label = re.compile(r"\*Difficulty (★+) · about (\d+) minutes\*")
    for path in NOTEBOOKS:
        number = path.name[:2]
        mine = [e for e in EXERCISES if e.notebook == number]
        text = "".join(
            "".join(c["source"])
            for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"
        )
        found = label.findall(text)
        if not mine:
            assert not found, path.name
            continue
        assert found, f"{path.name}: no exercise states its difficulty and time"
        assert sum(int(m) for _, m in found) == sum(e.minutes for e in mine), path.name
        assert max(len(s) for s, _ in found) == max(e.stars for e in mine), path.name
