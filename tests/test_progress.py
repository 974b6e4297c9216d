"""`python -m gptlib progress` and `progress()`: every exercise of the course with its notebook,
difficulty, minutes and state, read from copies of the stored notebooks with stubs filled in."""

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from stubs import checked_name, replace_definition, solution_source

import gptlib.exercises as ex
from gptlib.cli import main
from gptlib.exercises.progress import (
    EXERCISES,
    FAILS,
    NOT_FOUND,
    NOT_WRITTEN_TAIL,
    SOLVED,
    Row,
    check_notebook,
    collect,
    format_table,
)
from gptlib.exercises.refusals import REFUSALS

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
    cells = json.loads(path.read_text())["cells"]
    name = checked_name(["".join(c["source"]) for c in cells if c["cell_type"] == "code"], check)
    assert name is not None, f"{path.name} never calls {check}"
    return name


def _fill(path: Path, name: str, source: str) -> None:
    """Replace the definition of `name` in the notebook's cell that defines it by `source`."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            filled = replace_definition("".join(cell["source"]), name, source)
            if filled is not None:
                cell["source"] = filled
                path.write_text(json.dumps(nb))
                return
    raise AssertionError(f"{path.name} does not define {name}")


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
        _fill(path, name, solution_source(check, name))
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


# A GPT of the capstone's weights' sizes (the refused call comes before any weight is used).
_CAPSTONE_GPT = """\
    from gptlib.config import microgpt
    from gptlib.model import GPT

    V, d = w["tok_emb"].shape
    T, L = w["pos_emb"].size(0), len(w["blocks"])
    net = GPT(microgpt(V, n_embd=d, n_head=n_head, n_layer=L, block_size=T))
"""

# The capstone's attention up to the scores, as a reader who hands the rest to torch writes it.
_CAPSTONE_QKV = """\
    B, n, d = x.shape
    q, k, v = (x @ w_qkv.T).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, d // n_head).transpose(1, 2) for t in (q, k, v))
"""

# For every exercise with refusals, the reader's function written as a call of the library
# function that does its job: the stub's whole definition, as the notebook names it.
SHORTCUTS = {
    "check_to_gptlib": """\
def to_gptlib(hf_state):
    from gptlib.config import gpt2
    from gptlib.gpt2 import gptlib_state_dict

    cfg = gpt2(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)
    return gptlib_state_dict(hf_state, cfg)
""",
    "check_encode_stream": """\
def encode_stream(documents, tokenizer):
    from gptlib.data import encode_documents

    return encode_documents(documents, tokenizer)
""",
    "check_causal_attention": """\
def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
""",
    "check_split_heads": """\
def split_heads(x, n_head):
    from gptlib.attention import CausalSelfAttention
    from gptlib.config import textbook

    cfg = textbook(5, block_size=8, n_layer=1, n_head=n_head, n_embd=x.size(-1))
    return CausalSelfAttention(cfg).split_heads(x)
""",
    "check_temperature_probs": """\
def temperature_probs(logits, temperature):
    from gptlib.generate import next_token_probs

    return next_token_probs(logits, temperature)
""",
    "check_log_softmax": """\
def log_softmax(logits):
    return F.log_softmax(logits, dim=-1)
""",
    "check_lm_loss": """\
def lm_loss(logits, labels):
    from gptlib.model import GPT

    return GPT.loss(logits, labels)
""",
    "check_train_loop": """\
def train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    from gptlib.train import train

    kw = {"max_lr": max_lr, "warmup": warmup, "clip": clip, "seed": seed, "optimizer": optimizer}
    return train(model, tokens, steps, batch_size, **kw).loss
""",
    "check_validation_loss": """\
def validation_loss(model, tokens, batch_size, n_batches, seed):
    import gptlib

    return gptlib.estimate_loss(model, tokens, batch_size, n_batches, seed)
""",
    "check_filter_logits": """\
def filter_logits(logits, top_k, top_p):
    from gptlib.generate import filter_logits as library_filter

    return library_filter(logits, top_k, top_p)
""",
    "check_sample_step": """\
def sample_step(model, idx, temperature, top_k, top_p, generator):
    from gptlib.generate import generate

    out = generate(model, idx, 1, temperature, top_k, generator, use_cache=False, top_p=top_p)
    return out[:, -1:]
""",
    "check_decode_step": """\
def decode_step(model, idx_new, cache):
    x = model.tok_emb(idx_new) + model.pos_emb.weight[cache.length]
    for block in model.blocks:
        x = block(x, cache)
    cache.advance(1)
    return model.lm_head(model.ln_f(x))
""",
    "check_gpt_rmsnorm": """\
def rmsnorm(x, gain, eps=1e-5):
    return F.rms_norm(x, (x.size(-1),), gain, eps)
""",
    "check_gpt_attention": f"""\
def attention(x, w_qkv, w_proj, n_head):
{_CAPSTONE_QKV}    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, n, d) @ w_proj.T
""",
    "check_gpt_mlp": """\
def mlp(x, w_fc, w_proj):
    from gptlib.config import microgpt
    from gptlib.mlp import MLP

    layer = MLP(microgpt(n_embd=x.size(-1)))
    with torch.no_grad():
        layer.fc.weight.copy_(w_fc)
        layer.proj.weight.copy_(w_proj)
    return layer(x)
""",
    "check_gpt_block": """\
def block(x, bw, n_head):
    from gptlib.config import microgpt
    from gptlib.model import Block

    return Block(microgpt(n_embd=x.size(-1), n_head=n_head))(x)
""",
    "check_gpt_forward": f"""\
def forward(w, idx, n_head):
{_CAPSTONE_GPT}    return net(idx)[0]
""",
    "check_gpt_loss": """\
def gpt_loss(forward_fn, w, idx, labels, n_head):
    from gptlib.model import GPT

    return GPT.loss(forward_fn(w, idx, n_head), labels)
""",
    "check_gpt_train": f"""\
def train_gpt(
    forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed, n_head
):
    from gptlib.train import train

{_CAPSTONE_GPT}    kw = {{"max_lr": max_lr, "warmup": warmup, "clip": clip, "seed": seed}}
    return train(net, tokens, steps, batch_size, schedule="cosine", **kw).loss
""",
    "check_gpt_sample": f"""\
def sample_names(
    forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None, max_len=40
):
    from gptlib.generate import generate

{_CAPSTONE_GPT}    start = torch.full((num, 1), bos)
    out = generate(net, start, max_len, temperature, top_k, generator, bos, use_cache=False)
    return [row[: row.index(bos)] if bos in row else row for row in out[:, 1:].tolist()]
""",
    "check_gpt_cached_attention": f"""\
def cached_attention(x, w_qkv, w_proj, n_head, past):
{_CAPSTONE_QKV}    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
    return y.transpose(1, 2).reshape(B, n, d) @ w_proj.T, (k, v)
""",
    "check_gpt_forward_cached": f"""\
def forward_cached(w, idx, cache, n_head):
    from gptlib.kvcache import KVCache

    if not cache:
{textwrap.indent(_CAPSTONE_GPT, "    ")}        kv = KVCache(net.cfg, idx.size(0), idx.device, net.lm_head.weight.dtype)
        cache.append((net.eval(), kv))
    net, kv = cache[0]
    return net(idx, cache=kv)[0]
""",
    "check_merge": """\
def merge(ids, pair, new_id):
    from gptlib.bpe import merge_pair

    return list(merge_pair(tuple(ids), pair, new_id))
""",
}


def _exercise_name(check: str) -> str:
    """The name the check reports, the key of REFUSALS: what it says about a stub."""

    def stub(*args, **kwargs):
        raise NotImplementedError

    message = getattr(ex, check)(stub).message
    assert message.endswith(NOT_WRITTEN_TAIL), message
    return message.removesuffix(NOT_WRITTEN_TAIL)


def test_every_exercise_with_refusals_has_a_shortcut():
    with_refusals = {e.check for e in EXERCISES if _exercise_name(e.check) in REFUSALS}
    missing = sorted(with_refusals - set(SHORTCUTS))
    assert not missing, (
        f"no row in SHORTCUTS for {missing}: add the stub written as a call of the library "
        "function its refusals name"
    )
    assert set(SHORTCUTS) == with_refusals  # and no row for an exercise without refusals


@pytest.mark.parametrize("check", sorted(SHORTCUTS))
def test_every_library_shortcut_is_refused(tmp_path, check):
    """The stored notebook with its stub written as the library's call: the check, run as
    `progress` runs it, refuses it in one line."""
    [exercise] = [e for e in EXERCISES if e.check == check]
    path = _notebook(_copy(tmp_path, [exercise.notebook]), exercise.notebook)
    name = _checked_name(path, check)
    source = SHORTCUTS[check]
    assert source.startswith(f"def {name}("), f"the notebook's stub is {name}"
    _fill(path, name, source)
    state, detail = check_notebook(path, [check])[check]
    assert state == FAILS, (state, detail)
    assert detail.startswith("write this one yourself: it calls "), detail


def test_a_later_cell_that_rewrites_the_function_counts(tmp_path):
    folder = _copy(tmp_path, ["08"])
    path = _notebook(folder, "08")
    nb = json.loads(path.read_text())
    solution = solution_source(ex.check_temperature_probs, "temperature_probs")
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
    folder = _copy(tmp_path, ["00"])
    path = _notebook(folder, "00")
    _fill(path, "encode_stream", "def encode_stream(documents, tokenizer)\n    return []\n")
    state, detail = check_notebook(path, ["check_encode_stream"])["check_encode_stream"]
    assert state == FAILS and "does not parse: SyntaxError" in detail, detail


def test_missing_notebooks_and_calls_are_reported(tmp_path):
    folder = _copy(tmp_path, ["02", "07"])
    (folder / "02_qkv.ipynb").write_text(json.dumps({"cells": []}))
    (folder / "07_mlp.ipynb").write_text("{not json")
    rows = collect(folder, timeout=30)
    states = _states(rows)
    assert states.pop("check_qkv_split") == (
        "not found: 02_qkv.ipynb has no check_qkv_split(...) call on the reader's function"
    )
    assert states.pop("check_mlp").startswith("fails: 07_mlp.ipynb cannot be read: ")
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
    assert (
        "(default: the current folder if it holds the course's notebooks, else the course's notebooks/)"
        in out
    )
    assert "(default: 60)" in out


def test_progress_is_importable_from_a_notebook():
    from gptlib.exercises import progress

    assert callable(progress) and progress.__module__ == "gptlib.exercises.progress"


def test_a_definition_that_does_not_parse_is_named_at_a_later_call(tmp_path):
    """Notebook 14 calls check_gpt_forward again after its exercise cell (to pick the forward the
    later cells use): a syntax error in the exercise cell is still what the table reports."""
    folder = _copy(tmp_path, ["14"])
    path = _notebook(folder, "14")
    _fill(path, "forward", "def forward(w, idx, n_head)\n    return idx\n")
    state, detail = check_notebook(path, ["check_gpt_forward"])["check_gpt_forward"]
    assert state == FAILS
    assert detail.startswith("a cell that calls check_gpt_forward does not parse: SyntaxError")


def test_the_readme_counts_the_exercises():
    readme = (NOTEBOOKS.parent / "README.md").read_text(encoding="utf-8")
    optional = sum(e.optional for e in EXERCISES)
    assert (
        f"{len(EXERCISES)} of them ({len(EXERCISES) - optional} required, {optional} marked "
        "optional)" in readme.replace("\n", " ")
    )


def test_a_relative_folder_is_read(tmp_path, monkeypatch):
    """`python -m gptlib progress notebooks`, run from the course's root: the checks run in a
    child process started in that folder, which must still find the files."""
    _copy(tmp_path, ["00"])
    monkeypatch.chdir(tmp_path)
    rows = [r for r in collect("notebooks", timeout=60) if r.exercise.notebook == "00"]
    assert [r.shown for r in rows] == ["not written yet"]


def test_the_default_folder_is_the_one_a_notebook_runs_in(tmp_path, monkeypatch):
    """In a cell of a Chinese notebook the kernel runs in notebooks/zh/: progress() reads there."""
    from gptlib.exercises.progress import default_notebook_dir

    course = Path(__file__).resolve().parent.parent / "notebooks"
    monkeypatch.chdir(course / "zh")
    assert default_notebook_dir() == course / "zh"
    monkeypatch.chdir(tmp_path)  # no notebooks here: the course's own folder
    assert default_notebook_dir() == course
