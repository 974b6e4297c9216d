"""One record per exercise (gptlib/exercises/table.py), and one test that goes through them all:
the check exists and reports the record's name, the notebook exists and calls it and states its
difficulty, every refusal names a function the library or torch has, the reference passes its own
check, `show_solution` prints it, and the README counts the records."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import gptlib.exercises as ex
from gptlib.exercises import yours
from gptlib.exercises.checking import _target
from gptlib.exercises.table import EXERCISES

ROOT = Path(__file__).resolve().parent.parent


def _stub():
    raise NotImplementedError


@pytest.mark.parametrize("record", EXERCISES, ids=[e.check for e in EXERCISES])
def test_every_record(record):
    check = getattr(ex, record.check)
    assert callable(check) and callable(check.solution), record.check
    # the name the check reports is the record's: a stub is "<name> is not written yet"
    said = check(lambda *args, **kwargs: _stub())
    assert not said and said.message.startswith(f"{record.name} is not written yet"), said.message
    [notebook] = sorted((ROOT / "notebooks").glob(f"{record.notebook}_*.ipynb"))
    text = "\n".join(
        "".join(c["source"]) for c in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    )
    assert f"{record.check}(" in text, f"{notebook.name} never calls {record.check}"
    # one name from the check to the kept file: check_<name>, solution_<name>, the reader's
    # `def <name>(` in the notebook, kept as yourgpt/<name>.py
    assert check.__name__ == f"check_{record.name}" and yours.exercise_name(check) == record.name
    assert f"def {record.name}(" in text, f"{notebook.name} has no `def {record.name}(` to write"
    assert f"Difficulty {'★' * record.stars}" in text  # minutes: test_notebook_exercises
    for refusal in record.refusals:
        assert callable(_target(refusal.path)), refusal.path


@pytest.mark.parametrize("record", EXERCISES, ids=[e.check for e in EXERCISES])
def test_the_reference_passes_and_is_shown(record, capsys):
    check = getattr(ex, record.check)
    said = check(check.solution)
    assert said and said.message.startswith(f"✓ {record.name}"), said.message
    assert "kept as" not in said.message  # only a reader's own function is kept
    capsys.readouterr()
    ex.show_solution(check)
    shown = capsys.readouterr().out
    assert f"def {check.solution.__name__}(" in shown


def test_one_record_per_check_and_nothing_else():
    checks = [e.check for e in EXERCISES]
    assert len(set(checks)) == len(checks)
    assert sorted(checks) == sorted(n for n in ex.__all__ if n.startswith("check_"))
    assert len({e.name for e in EXERCISES}) == len(EXERCISES)
    assert [e.notebook for e in EXERCISES] == sorted(e.notebook for e in EXERCISES)


def test_the_readme_counts_the_records():
    optional = sum(e.optional for e in EXERCISES)
    for readme, said in (
        ("README.md", f"{len(EXERCISES)} of them ({len(EXERCISES) - optional} required, "),
        ("README.zh-CN.md", f"共 {len(EXERCISES)} 个（{len(EXERCISES) - optional} 个必做"),
    ):
        text = re.sub(r"\s+", " ", (ROOT / readme).read_text(encoding="utf-8"))
        assert said in text, f"{readme} does not say {said!r}"


def _cells(notebook: str) -> list[str]:
    [path] = sorted((ROOT / "notebooks").glob(f"{notebook}_*.ipynb"))
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def test_the_notebooks_that_use_each_kept_piece_are_the_records():
    """`used` lists every notebook whose code asks yours.use(check) after the check runs (its own
    notebook when a later cell does): what "kept as ...: later notebooks use it" rests on."""
    notebooks = sorted({p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")})
    code = {nb: _cells(nb) for nb in notebooks}
    for record in EXERCISES:
        own = code[record.notebook]
        checked = min(i for i, c in enumerate(own) if re.search(rf"(?<!use\(){record.check}\(", c))
        found = {
            nb
            for nb, cells in code.items()
            for i, cell in enumerate(cells)
            if f"use({record.check})" in cell or f"use({record.check}," in cell
            if nb != record.notebook or i > checked
        }
        assert sorted(found) == record.used.split(), record.check


def _drawn_from(use_cell: str) -> set[str]:
    """The names a cell that asks `yours.use` binds to the piece it gets, or to values computed
    from it (`x = embed(...)`, `rows[...] = ... x ...`), in that cell."""
    tree = ast.parse(use_cell)
    tainted: set[str] = set()
    stores = sorted(
        (n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))),
        key=lambda n: (n.lineno, n.col_offset),
    )
    for _ in range(2):  # twice: a loop's later statement can feed an earlier one
        for node in stores:
            value = ast.unparse(node.value) if node.value is not None else ""
            read = (
                {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} if value else set()
            )
            if "yours.use(" in value or read & tainted:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                tainted |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return tainted


def _names(code: str, ctx: type) -> set[str]:
    return {
        n.id
        for n in ast.walk(ast.parse(code))
        if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)
    }


@pytest.mark.parametrize("notebook", ["01", "05", "06", "08"])
def test_a_figure_is_drawn_from_a_kept_piece(notebook):
    """In each of these notebooks a stored figure comes from the reader's kept piece (or the
    reference standing in, as its `use` line says): a cell with an image reads a name that a
    `yours.use` cell bound to the piece or computed from it, not bound again in between."""
    [path] = sorted((ROOT / "notebooks").glob(f"{notebook}_*.ipynb"))
    cells = [
        c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"
    ]
    code = ["".join(c["source"]) for c in cells]
    drawn = lambda c: any("image/png" in o.get("data", {}) for o in c.get("outputs", []))  # noqa: E731
    found = []
    for i, source in enumerate(code):
        if "yours.use(" not in source:
            continue
        live = _drawn_from(source)
        if drawn(cells[i]):
            found.append(i)
        for j in range(i + 1, len(code)):
            if drawn(cells[j]) and live & _names(code[j], ast.Load):
                found.append(j)
            live -= _names(code[j], ast.Store)
    assert found, f"no figure of {path.name} is drawn from a kept piece"


def test_a_kept_piece_says_who_uses_it():
    line = lambda check: ex.checking.kept_line(check).format(path="p")  # noqa: E731
    assert line("check_causal_attention") == "kept as p: later notebooks use it"  # 04, 14, 15
    assert line("check_temperature_probs") == "kept as p: the cells below use it"  # 08 only
    assert line("check_rmsnorm_backward") == "kept as p: the cells below use it"  # 06 only
    for check in ("check_encode_stream", "check_stack_gradients", "check_post_norm_block"):
        assert "later notebooks" not in line(check)
