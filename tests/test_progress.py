"""`python -m gptlib progress` and `progress()`: every exercise of the course with its notebook,
difficulty, minutes and state, read from the reader's package (`gptlib.exercises.yours`)."""

import re
import sys
import types
from pathlib import Path

import pytest
from stubs import solution_source

import gptlib.exercises as ex
from gptlib.commandline.cli import main
from gptlib.exercises import yours
from gptlib.exercises.progress import EXERCISES, FAILS, NOT_WRITTEN, SOLVED, collect, format_table

ROOT = Path(__file__).parent.parent


def _prelude(check) -> str:
    """The imports a pasted solution needs: what its module imports (never what it defines), and
    the classes the module exports (`WeightsModel`), which notebook 14's cells import."""
    module = sys.modules[check.solution.__module__]
    lines = [
        "from __future__ import annotations",
        "import math",
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
    ]
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        given = isinstance(value, type) and name in getattr(module, "__all__", ())
        if (
            given
            or isinstance(value, types.ModuleType)
            or (
                callable(value)
                and not (getattr(value, "__module__", "") or "").startswith("gptlib.exercises")
            )
        ):
            line = yours._import_line(name, value)
            if line:
                lines.append(line)
    return "\n".join(lines) + "\n\n"


def _keep(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text, encoding="utf-8")


def _states(rows) -> dict[str, str]:
    return {row.exercise.check: row.shown for row in rows}


def test_the_table_lists_every_check_of_the_course():
    checks = [e.check for e in EXERCISES]
    assert sorted(checks) == sorted(n for n in ex.__all__ if n.startswith("check_"))
    assert len(set(checks)) == len(checks)
    for e in EXERCISES:
        assert 1 <= e.stars <= 3 and 0 < e.minutes <= 60
        assert list((ROOT / "notebooks").glob(f"{e.notebook}_*.ipynb")), e


def test_an_empty_package_is_not_written_yet(tmp_path, capsys):
    assert main(["progress", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for e in EXERCISES:
        [line] = [line for line in out.splitlines() if re.search(rf"  {e.check[6:]}\s", line)]
        assert line.startswith(e.notebook) and "★" * e.stars in line, line
        assert line.endswith("  not written yet"), line
    assert f"0 of {len(EXERCISES)} exercises solved" in out


def test_a_fresh_copy_of_the_course_has_nothing_kept_yet(tmp_path, capsys, monkeypatch):
    """A clone has no notebooks/yourgpt/ until a check passes: progress says so, not an error."""
    where = tmp_path / "notebooks" / "yourgpt"  # not there
    monkeypatch.setattr(yours, "folder", lambda: where)
    assert main(["progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and f"Nothing kept yet: each piece you write is kept in {where}" in (
        captured.out
    )
    assert f"0 of {len(EXERCISES)} exercises solved" in captured.out and not where.exists()


def test_every_reference_solution_kept_is_solved(tmp_path):
    """show_solution's text, kept as the reader's piece with the imports its module has, passes
    its own check: the printed solution runs where it is pasted."""
    for e in EXERCISES:
        check = getattr(ex, e.check)
        name = yours.exercise_name(check)
        _keep(tmp_path, name, _prelude(check) + solution_source(check, name))
    rows = collect(tmp_path, timeout=120)
    assert _states(rows) == {e.check: SOLVED for e in EXERCISES}
    assert f"{len(EXERCISES)} of {len(EXERCISES)} exercises solved" in format_table(rows)


def test_a_kept_slip_fails_with_the_checks_message(tmp_path):
    slip = (
        "import math\nimport torch\n\n\n"
        "def causal_attention(q, k, v):\n"
        "    n, d_model = q.size(-2), q.size(1) * q.size(-1)\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)\n"
        "    hidden = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)\n"
        "    return scores.masked_fill(hidden, float('-inf')).softmax(dim=-1) @ v\n"
    )
    _keep(tmp_path, "causal_attention", slip)
    namespace: dict = {}
    exec(slip, namespace)
    expected = ex.check_causal_attention(namespace["causal_attention"]).message
    assert not ex.check_causal_attention(namespace["causal_attention"])
    rows = {r.exercise.check: r for r in collect(tmp_path)}
    row = rows["check_causal_attention"]
    assert (row.state, row.detail) == (FAILS, expected.removeprefix("✗ causal_attention: "))
    assert rows["check_embed"].state == NOT_WRITTEN


def test_a_kept_file_that_no_longer_imports_fails_and_says_why(tmp_path):
    _keep(
        tmp_path, "embed", "from nowhere_at_all import wte\n\ndef embed(ids, wte, wpe):\n    pass\n"
    )
    # a kept file whose function is not the exercise's name (renamed by hand, say)
    _keep(tmp_path, "mlp_forward", "def mlp(x, w_fc, w_proj, activation):\n    return x\n")
    rows = {r.exercise.check: r for r in collect(tmp_path)}
    assert rows["check_embed"].state == FAILS
    assert "does not import" in rows["check_embed"].detail
    assert "ModuleNotFoundError" in rows["check_embed"].detail
    assert (
        rows["check_mlp_forward"].state == FAILS
        and "defines no mlp_forward" in rows["check_mlp_forward"].detail
    )


def test_an_endless_loop_fails_and_the_rest_still_runs(tmp_path):
    _keep(tmp_path, "split_heads", "def split_heads(x, n_head):\n    while True:\n        pass\n")
    rows = {r.exercise.check: r for r in collect(tmp_path, timeout=1)}
    assert rows["check_split_heads"].shown == (
        "fails: took longer than 1 s; is there a loop that never ends?"
    )
    assert rows["check_merge_heads"].state == NOT_WRITTEN


def test_a_notebooks_folder_is_read_through_its_package(tmp_path):
    """`python -m gptlib progress notebooks`: a folder holding yourgpt/ is read through it."""
    _keep(tmp_path / "yourgpt", "split_heads", "def split_heads(x, n_head):\n    return x\n")
    rows = {r.exercise.check: r for r in collect(tmp_path)}
    assert rows["check_split_heads"].state == FAILS


def test_progress_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["progress", str(tmp_path / "nowhere")])
    assert stop.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert str(tmp_path / "nowhere") in line and "progress" in line


def test_progress_is_importable_from_a_notebook():
    from gptlib.exercises.progress import progress

    assert callable(progress) and progress.__module__ == "gptlib.exercises.progress"
    assert ex.progress is sys.modules["gptlib.exercises.progress"]  # the module, not hidden


def test_the_readme_counts_the_exercises():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    optional = sum(e.optional for e in EXERCISES)
    assert (
        f"{len(EXERCISES)} of them ({len(EXERCISES) - optional} required, {optional} marked "
        "optional)" in readme.replace("\n", " ")
    )
