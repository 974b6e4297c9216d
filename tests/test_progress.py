"""`python -m gptlib progress` and `progress()`: every exercise of the course with its notebook,
difficulty, minutes and state, read from copies of the stored notebooks with stubs filled in."""

import ast
import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

import gptlib.exercises as ex
from gptlib.cli import main
from gptlib.exercises.progress import (
    EXERCISES,
    FAILS,
    NOT_FOUND,
    SOLVED,
    Row,
    check_notebook,
    collect,
    format_table,
)

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def _copy(tmp_path: Path, numbers=None) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for exercise in EXERCISES:
        if numbers is None or exercise.notebook in numbers:
            for nb in NOTEBOOKS.glob(f"{exercise.notebook}_*.ipynb"):
                shutil.copy(nb, folder / nb.name)
    return folder


def _notebook(folder: Path, number: str) -> Path:
    return next(folder.glob(f"{number}_*.ipynb"))


def _checked_name(path: Path, check: str) -> str:
    """The name of the reader's function the stored notebook hands to `check`."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == check
                and isinstance(node.args[0], ast.Name)
                and not re.search(r"slip|first_try|wrong|mistake", node.args[0].id)
            ):
                return node.args[0].id
    raise AssertionError(f"{path.name} never calls {check}")


def _fill(path: Path, name: str, source: str) -> None:
    """Replace the definition of `name` in the notebook's cell that defines it by `source`."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        text = "".join(cell["source"])
        if cell["cell_type"] != "code" or f"def {name}(" not in text:
            continue
        [node] = [
            n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name
        ]
        lines = text.splitlines()
        lines[node.lineno - 1 : node.end_lineno] = source.rstrip("\n").splitlines()
        cell["source"] = "\n".join(lines) + "\n"
        path.write_text(json.dumps(nb))
        return
    raise AssertionError(f"{path.name} does not define {name}")


def _solution_source(check, name: str) -> str:
    """What show_solution prints, its last function renamed as the notebook's stub."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ex.show_solution(check)
    text = out.getvalue()
    head, sep, tail = text.rpartition(f"def {check.solution.__name__}(")
    return head + f"def {name}(" + tail


def _states(rows: list[Row]) -> dict[str, str]:
    return {row.exercise.check: row.shown for row in rows}


def test_the_table_lists_every_check_of_the_course():
    checks = [e.check for e in EXERCISES]
    assert sorted(checks) == sorted(n for n in ex.__all__ if n.startswith("check_"))
    assert len(set(checks)) == len(checks)
    for e in EXERCISES:
        assert 1 <= e.stars <= 3 and 0 < e.minutes <= 60
        assert list(NOTEBOOKS.glob(f"{e.notebook}_*.ipynb")), e


def test_stored_notebooks_are_not_written_yet(tmp_path, capsys):
    folder = _copy(tmp_path)
    assert main(["progress", str(folder)]) == 0
    out = capsys.readouterr().out
    for e in EXERCISES:
        [line] = [line for line in out.splitlines() if re.search(rf"\s{e.check[6:]}(\s|$)", line)]
        assert line.startswith(next(folder.glob(f"{e.notebook}_*.ipynb")).stem), line
        assert "★" * e.stars in line and f" {e.minutes} " in line, line
        assert line.endswith("  not written yet"), line
    assert f"0 of {len(EXERCISES)} exercises solved" in out


def test_every_reference_solution_is_solved(tmp_path):
    folder = _copy(tmp_path)
    for e in EXERCISES:
        path = _notebook(folder, e.notebook)
        check = getattr(ex, e.check)
        name = _checked_name(path, e.check)
        _fill(path, name, _solution_source(check, name))
    rows = collect(folder, timeout=60)
    assert _states(rows) == {e.check: SOLVED for e in EXERCISES}
    assert f"{len(EXERCISES)} of {len(EXERCISES)} exercises solved" in format_table(rows)


def test_a_slip_fails_with_the_checks_message(tmp_path):
    folder = _copy(tmp_path, ["03"])
    path = _notebook(folder, "03")
    slip = (
        "def causal_attention(q, k, v):\n"
        "    n, d_model = q.size(-2), q.size(1) * q.size(-1)\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)\n"
        "    hidden = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)\n"
        "    return scores.masked_fill(hidden, float('-inf')).softmax(dim=-1) @ v\n"
    )
    _fill(path, "causal_attention", slip)
    namespace: dict = {}
    exec("import math, torch\n" + slip, namespace)
    expected = ex.check_causal_attention(namespace["causal_attention"]).message
    assert expected.startswith("✗ causal_attention: you divided by")
    state, detail = check_notebook(path, ["check_causal_attention"])["check_causal_attention"]
    assert (state, detail) == (FAILS, expected.removeprefix("✗ causal_attention: "))


def test_the_library_shortcut_is_refused(tmp_path):
    folder = _copy(tmp_path, ["00"])
    path = _notebook(folder, "00")
    shortcut = (
        "from gptlib.data import encode_documents\n\n\n"
        "def encode_stream(documents, tokenizer):\n"
        "    return encode_documents(documents, tokenizer)\n"
    )
    _fill(path, "encode_stream", shortcut)
    state, detail = check_notebook(path, ["check_encode_stream"])["check_encode_stream"]
    assert state == FAILS
    assert detail == (
        "write this one yourself: it calls gptlib.data.encode_documents, which does the whole "
        "exercise"
    )


def test_a_later_cell_that_rewrites_the_function_counts(tmp_path):
    folder = _copy(tmp_path, ["07"])
    path = _notebook(folder, "07")
    nb = json.loads(path.read_text())
    solution = _solution_source(ex.check_temperature_probs, "temperature_probs")
    nb["cells"].append(
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": None,
            "source": solution + "\n%time x = 1\ncheck_temperature_probs(temperature_probs)\n",
        }
    )
    path.write_text(json.dumps(nb))
    result = check_notebook(path, ["check_temperature_probs"])
    assert result == {"check_temperature_probs": (SOLVED, "")}


def test_a_cell_that_does_not_parse_fails_its_check(tmp_path):
    folder = _copy(tmp_path, ["14"])
    path = _notebook(folder, "14")
    _fill(path, "merge", "def merge(ids, pair, new_id)\n    return ids\n")
    state, detail = check_notebook(path, ["check_merge"])["check_merge"]
    assert state == FAILS and "does not parse: SyntaxError" in detail, detail


def test_missing_notebooks_and_calls_are_reported(tmp_path):
    folder = _copy(tmp_path, ["02", "06"])
    (folder / "02_qkv.ipynb").write_text(json.dumps({"cells": []}))
    (folder / "06_mlp.ipynb").write_text("{not json")
    rows = collect(folder, timeout=30)
    states = _states(rows)
    assert states.pop("check_qkv_split") == (
        "not found: 02_qkv.ipynb has no check_qkv_split(...) call on the reader's function"
    )
    assert states.pop("check_mlp").startswith("fails: 06_mlp.ipynb cannot be read: ")
    assert {state.split(":")[0] for state in states.values()} == {NOT_FOUND}
    assert "no notebook 00_*.ipynb in" in states["check_encode_stream"]


def test_an_endless_loop_and_a_crash_fail_and_the_rest_still_runs(tmp_path):
    folder = _copy(tmp_path, ["04"])
    path = _notebook(folder, "04")
    _fill(path, "split_heads", "def split_heads(x, n_head):\n    while True:\n        pass\n")
    _fill(
        path,
        "merge_heads",
        "def merge_heads(y):\n    import os\n\n    os._exit(3)\n",
    )
    rows = {row.exercise.check: row for row in collect(folder, timeout=1)}
    assert rows["check_split_heads"].shown == (
        "fails: took longer than 1 s; is there a loop that never ends?"
    )
    assert rows["check_merge_heads"].state == FAILS
    assert rows["check_merge_heads"].detail.startswith("the checking process stopped")


def test_progress_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["progress", str(tmp_path / "nowhere")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"python -m gptlib progress: error: no notebook folder {tmp_path / 'nowhere'}"
    ]


def test_progress_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["progress", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: the course's notebooks/)" in out
    assert "(default: 60)" in out


def test_progress_is_importable_from_a_notebook():
    from gptlib.exercises import progress

    assert callable(progress) and progress.__module__ == "gptlib.exercises.progress"
