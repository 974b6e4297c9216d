"""Notebook 14 as a reader who solved every exercise runs it: each stub replaced by its reference
solution (what `show_solution` prints), the notebook executed top to bottom. Every check passes
and keeps the reader's function, and every cell after the checks then uses the reader's
functions, not the course's reference standing in: the reader's model trains to gptlib's loss
curve, samples gptlib's names, decodes the same tokens with its own cache, and climbs the same
ladder. The pieces brought from earlier notebooks (01-09: embed, qkv_split, causal_attention,
split_heads, merge_heads, rmsnorm, pre_norm_block, mlp_forward, lm_loss; 10's train_loop, 12's
filter_logits and sample_step) are in the reader's package before the notebook starts, as a
reader who solved those notebooks has them, and every cell that runs the forward says it is the
reader's. A second reader's forward and kept norm are right in value but detached from
autograd: the forward's check says so, the norm fails its check again and the course's stands
in, and the notebook trains the course's pieces instead; that reader's kept loop of notebook 10
has lost its zero_grad since it passed, and the cell that assembles 14's training names the slip
as notebook 10's check names it and trains with the course's loop."""

import json
import os
import re
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from stubs import UNZEROED_LOOP, checked_name, replace_definition, solution_source

import gptlib.exercises as ex
from gptlib.exercises.progress import EXERCISES

NOTEBOOK = next((Path(__file__).parent.parent / "notebooks").glob("14_*.ipynb"))
PROJECTS = "# Part 6 · Optional projects"  # the heading after the ladder
TRAINS = "twin = copy.deepcopy(start)"  # the cell that trains beside gptlib
# The pieces of notebooks 01-09 the capstone takes from the reader's package, by saved name.
BROUGHT = {ex.yours.exercise_name(c): c for c in ex.nb14_your_gpt.PIECE_CHECKS.values()}
BROUGHT.update(train_loop=ex.check_train_loop, filter_logits=ex.check_filter_logits,
               sample_step=ex.check_sample_step)  # notebooks 10 and 12  # fmt: skip
RUNS_FORWARD = re.compile(r"\b(my_forward|forward_in_use|loop|sampler|climb_yours)\(")
DETACHED_NORM = """def rmsnorm(x, gain, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach() * gain
"""
DETACHED = {
    "forward": """def forward(w, idx, n_head, pieces):
    x = pieces.embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:

        def attend(h, bw=bw):
            q, k, v = (pieces.split_heads(t, n_head) for t in pieces.qkv_split(h, bw["qkv"]))
            return pieces.merge_heads(pieces.causal_attention(q, k, v)) @ bw["attn_proj"].T

        def feed(h, bw=bw):
            return pieces.mlp_forward(h, bw["fc"], bw["mlp_proj"], torch.relu)

        x = pieces.pre_norm_block(x, [(lambda h, g=bw["ln1"]: pieces.rmsnorm(h, g), attend),
                                      (lambda h, g=bw["ln2"]: pieces.rmsnorm(h, g), feed)])
    return pieces.rmsnorm(x, w["ln_f"]).detach() @ w["lm_head"].T
""",
}


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


def _keep(folder: Path, name: str, source: str) -> None:
    """A piece in the reader's package, as its check keeps it."""
    header = ("from __future__ import annotations\n\nimport math\n\nimport torch\n\n"
              "from gptlib.data import sample_batch\nfrom gptlib.train import learning_rate\n\n\n")  # fmt: skip
    (folder / f"{name}.py").write_text(header + source)


def _run(changed: dict[str, str], until: str = PROJECTS, brought: dict | None = None):
    """The notebook with every stub solved (`changed` replacing some solutions), executed with a
    package of the reader's own holding the earlier notebooks' pieces (`brought` replacing some),
    up to the first cell holding `until` (by default the optional projects: open-ended, with no
    check, they run in the stored notebook, with the course's pieces standing in)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for e in EXERCISES:
        if e.notebook == "14" and hasattr(ex, e.check):
            check = getattr(ex, e.check)
            name = _checked_name(nb.cells, e.check)
            _fill(nb.cells, name, changed.get(name) or solution_source(check, name))
    last = next(i for i, c in enumerate(nb.cells) if until in c.source)
    nb.cells = nb.cells[: last + 1]
    before = os.environ.get("GPTLIB_YOURS")
    folder = Path(tempfile.mkdtemp(prefix="yourgpt-solved-"))
    for name, check in BROUGHT.items():
        _keep(folder, name, (brought or {}).get(name) or solution_source(check, name))
    os.environ["GPTLIB_YOURS"] = str(folder)
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {}}).execute()
    finally:
        os.environ["GPTLIB_YOURS"] = before or ""
    return nb


@pytest.fixture(scope="module")
def solved():
    return _run({})


@pytest.fixture(scope="module")
def detached():
    return _run(
        DETACHED, until=TRAINS, brought={"rmsnorm": DETACHED_NORM, "train_loop": UNZEROED_LOOP}
    )


def _output_of(nb, fragment: str) -> str:
    [cell] = [c for c in nb.cells if c.cell_type == "code" and fragment in c.source]
    return _text(cell)


def test_every_check_passes_and_keeps_the_readers_function(solved):
    for e in EXERCISES:
        if e.notebook == "14" and hasattr(ex, e.check):
            out = _output_of(solved, f"\n{e.check}(")
            assert out.startswith("✓"), (e.check, out)
            assert "kept as /" in out and "yourgpt-solved-" in out, (
                e.check,
                out,
            )  # the folder in use


def test_the_readers_pieces_are_in_use(solved):
    out = _output_of(solved, "mine = types.SimpleNamespace(")
    assert out.count(": yours, from /") == len(ex.nb14_your_gpt.PIECE_CHECKS) == 9, out
    assert "stands in" not in out
    assert "embed: yours" in _output_of(solved, "embed_in_use = yours.use(")
    out = _output_of(solved, "forward_in_use = yours.use(")
    assert "forward: yours" in out and "\n✓ forward: matches the reference" in out, out
    for cell in solved.cells:  # every cell that runs the forward says whose: the reader's
        if cell.cell_type == "code" and RUNS_FORWARD.search(cell.source):
            assert "runs your forward" in _text(cell), cell.source[:80]


def test_the_readers_model_trains_to_gptlibs_curve(solved):
    assert "train_loop: yours" in _output_of(solved, "train_loop = yours.use(")  # notebook 10's
    out = _output_of(solved, TRAINS)
    assert "stands in" not in out
    assert "the two curves within 1e-5 at every one of the 300 steps: True" in out
    assert "equal to 1e-5: True" in _output_of(solved, "val_mine = ")


def test_the_readers_sampler_and_cache(solved):
    out = _output_of(solved, "step_in_use = yours.use(")  # notebook 12's
    assert "filter_logits: yours" in out and "sample_step: yours" in out, out
    out = _output_of(solved, "ids = sampler(")
    assert "runs your forward" in out and "the same as sample_documents on the twin: True" in out
    out = _output_of(solved, "cached_fn = yours.use(")
    assert "cached_attention: yours" in out and "forward_cached: yours" in out
    assert "the same tokens with and without the cache: True" in out
    assert "logits within 1e-5 at every step: True" in out
    assert "27 without the cache, 7 with it" in out


def test_the_ladder_of_the_readers_pieces_is_the_stored_one(solved):
    out = _output_of(solved, "rungs = climb_yours(")
    stored = _output_of(nbformat.read(NOTEBOOK, as_version=4), "rungs = climb_yours(")
    assert _ladder_column(out) == _ladder_column(stored)
    assert len(_ladder_column(out)) == 5


def test_a_detached_norm_and_forward_are_caught_and_not_trained(detached):
    out = _output_of(detached, "\ncheck_forward(")
    assert out.startswith("✗ forward: no gradient reaches w['ln_f'] or any weight before"), out
    out = _output_of(detached, "mine = types.SimpleNamespace(")
    assert "rmsnorm: the course's reference stands in" in out and "gradient of x" in out, out
    out = _output_of(detached, "forward_in_use = yours.use(")
    assert "forward: the course's reference stands in" in out
    out = _output_of(detached, "train_loop = yours.use(")  # notebook 10's loop, kept then slipped
    assert out.startswith("train_loop: the course's reference stands in (yours does not pass"), out
    assert "✗ train_loop: without zero_grad the gradients add up" in out, out
    out = _output_of(detached, TRAINS)
    assert "runs the course's forward" in out
    assert "the two curves within 1e-5 at every one of the 300 steps: True" in out


def test_the_stored_notebook_uses_the_stand_ins():
    stored = json.loads(NOTEBOOK.read_text())
    text = "".join(
        _text(nbformat.from_dict(c)) for c in stored["cells"] if c["cell_type"] == "code"
    )
    assert text.count("the course's reference stands in") >= 10
    assert "yours, from" not in text
    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    for cell in cells:  # every cell that runs the forward says whose: the course's, here
        if RUNS_FORWARD.search(cell.source):
            assert "runs the course's forward, standing in" in _text(cell), cell.source[:80]
