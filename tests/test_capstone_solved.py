"""Notebook 14 as a reader who solved every exercise runs it: each stub replaced by its reference
solution (what `show_solution` prints), the notebook executed top to bottom. Every cell after the
checks must then use the reader's functions, not gptlib standing in: the reader's model trains to
gptlib's loss curve, samples gptlib's names, decodes the same tokens with its own cache, and
climbs the same ladder."""

import json
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from stubs import checked_name, replace_definition, solution_source

import gptlib.exercises as ex
from gptlib.exercises.progress import EXERCISES

NOTEBOOK = next((Path(__file__).parent.parent / "notebooks").glob("14_*.ipynb"))


def _checked_name(cells, check: str) -> str:
    name = checked_name([c.source for c in cells if c.cell_type == "code"], check)
    assert name is not None, f"{NOTEBOOK.name} never calls {check}"
    return name


def _fill(cells, name: str, source: str) -> None:
    for cell in cells:
        if cell.cell_type == "code":
            filled = replace_definition(cell.source, name, source)
            if filled is not None:
                cell.source = filled
                return
    raise AssertionError(f"{NOTEBOOK.name} does not define {name}")


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append("".join(out.get("text", "")))
        parts.append("".join(out.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def _ladder_column(text: str) -> list[str]:
    rows = [line.split() for line in text.splitlines() if re.match(r"^(bigram|one|four|\+)", line)]
    return [next(x for x in row if re.fullmatch(r"\d\.\d", x)) for row in rows]


@pytest.fixture(scope="module")
def solved():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for e in EXERCISES:
        if e.notebook == "14":
            check = getattr(ex, e.check)
            name = _checked_name(nb.cells, e.check)
            _fill(nb.cells, name, solution_source(check, name))
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {}}).execute()
    return nb


def _output_of(nb, fragment: str) -> str:
    [cell] = [c for c in nb.cells if c.cell_type == "code" and fragment in c.source]
    return _text(cell)


def test_every_check_passes(solved):
    for e in EXERCISES:
        if e.notebook == "14":
            out = _output_of(solved, f"\n{e.check}(")
            assert out.startswith("✓"), (e.check, out)


def test_the_readers_model_trains_to_gptlibs_curve(solved):
    out = _output_of(solved, "mine = loop(")
    assert "trained by your forward and loop" in out
    assert "the two curves within 1e-5 at every one of the 300 steps: True" in out
    assert "equal to 1e-5: True" in _output_of(solved, "val_mine = ")


def test_the_readers_sampler_and_cache(solved):
    out = _output_of(solved, "sampler, whose_sampler = sample_names")
    assert "from your sampler" in out and "the same as sample_documents on the twin: True" in out
    out = _output_of(solved, "cached_fn, whose_cache = forward_cached")
    assert "cached: your cached forward" in out
    assert "the same tokens with and without the cache: True" in out
    assert "logits within 1e-5 at every step: True" in out
    assert "27 without the cache, 7 with it" in out


def test_the_ladder_of_the_readers_pieces_is_gptlibs(solved):
    out = _output_of(solved, "rungs = climb_yours(")
    assert "the rungs: your pieces, trained by your loop" in out
    stored = nbformat.read(NOTEBOOK, as_version=4)
    library = _output_of(stored, "rungs = climb_yours(")
    assert "gptlib's modules and gptlib.train" in library
    assert _ladder_column(out) == _ladder_column(library)
    assert len(_ladder_column(out)) == 5


def test_the_stored_notebook_uses_the_stand_ins():
    stored = json.loads(NOTEBOOK.read_text())
    text = "".join(
        _text(nbformat.from_dict(c)) for c in stored["cells"] if c["cell_type"] == "code"
    )
    assert text.count("does not pass yet") >= 5
