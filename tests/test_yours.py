"""The reader's package: what a passing check keeps, what `use` returns, and the gradient and
source checks every `compare` makes."""

import math
import os
import textwrap
import types

import torch
import torch.nn.functional as F

import gptlib.exercises as ex
from gptlib.checkpoint import load_asset
from gptlib.data import load_corpus
from gptlib.exercises import assemble, yours
from gptlib.train import estimate_loss

SCALE = 2.0  # a constant of the "notebook" below: kept as a literal


def _as_readers(fn):
    """A copy of `fn` as a notebook defines it (its module is __main__); the helpers it calls by
    name stay this module's, unless they too are made the reader's."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__)
    copy.__module__ = "__main__"
    return copy


def _hide(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), 1)


def _attention(q, k, v):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return s.masked_fill(_hide(q.size(-2)), float("-inf")).softmax(-1) @ v


def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv(yours.ENV, str(tmp_path))
    return tmp_path


def test_a_pass_keeps_the_function_with_its_helpers_and_use_returns_it(
    tmp_path, monkeypatch, capsys
):
    folder = _fresh(tmp_path, monkeypatch)
    monkeypatch.setitem(globals(), "_hide", _as_readers(_hide))  # a helper of the reader's
    result = ex.check_causal_attention(_as_readers(_attention))
    # the message names the folder in use ($GPTLIB_YOURS), not the default yourgpt/
    assert result and f"kept as {folder / 'causal_attention.py'}:" in result.message
    text = (folder / "causal_attention.py").read_text()
    assert "def _hide(n):" in text and "def _attention(q, k, v):" in text
    assert text.index("def _hide") < text.index("def _attention")  # helpers first
    assert "import math" in text and "import torch" in text
    assert text.rstrip().endswith("causal_attention = _attention")
    fn = yours.use(ex.check_causal_attention)
    assert "yours" in capsys.readouterr().out
    q, k, v = (torch.randn(2, 3, 5, 4) for _ in range(3))
    assert torch.allclose(
        fn(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6
    )
    assert fn is not ex.check_causal_attention.solution


def test_nothing_is_kept_for_a_slip_the_reference_or_a_test_function(tmp_path, monkeypatch):
    folder = _fresh(tmp_path, monkeypatch)

    def slip(q, k, v):
        return _attention(q, k, v) * 2

    assert not ex.check_causal_attention(_as_readers(slip))
    assert ex.check_causal_attention(ex.check_causal_attention.solution)
    assert ex.check_causal_attention(_attention)  # a test's own function
    assert ex.check_causal_attention(_as_readers(lambda q, k, v: _attention(q, k, v)))
    assert not (folder / "causal_attention.py").exists()


def test_use_says_the_reference_stands_in_until_a_piece_passes(tmp_path, monkeypatch, capsys):
    _fresh(tmp_path, monkeypatch)
    fn = yours.use(ex.check_causal_attention)
    assert fn is ex.check_causal_attention.solution
    out = capsys.readouterr().out.strip()
    assert out.startswith("causal_attention: the course's reference stands in")
    assert "notebook 03" in out
    lib = yours.use(ex.check_causal_attention, stand_in=F.scaled_dot_product_attention)
    assert lib is F.scaled_dot_product_attention
    assert "scaled_dot_product_attention stands in" in capsys.readouterr().out


def test_a_kept_piece_that_stopped_passing_is_not_used(tmp_path, monkeypatch, capsys):
    folder = _fresh(tmp_path, monkeypatch)
    (folder / "causal_attention.py").write_text("def causal_attention(q, k, v):\n    return q\n")
    fn = yours.use(ex.check_causal_attention)
    assert fn is ex.check_causal_attention.solution
    assert "does not pass its check now" in capsys.readouterr().out
    assert (folder / "causal_attention.py").read_text().endswith("return q\n")  # not rewritten


def _unscaled(q, k, v):
    s = q @ k.transpose(-2, -1)
    return s.masked_fill(_hide(q.size(-2)), float("-inf")).softmax(-1) @ v


def _stub(q, k, v):
    raise NotImplementedError


def _as_cell(fn, name="_attention"):
    """`fn` as the notebook's cell defines it under `name`, run again."""
    copy = _as_readers(fn)
    copy.__name__ = name
    return copy


def test_a_failing_run_withdraws_the_kept_piece_until_one_passes_again(
    tmp_path, monkeypatch, capsys
):
    folder = _fresh(tmp_path, monkeypatch)
    kept, aside = folder / "causal_attention.py", folder / "causal_attention.withdrawn.py"
    assert ex.check_causal_attention(_as_readers(_attention))
    passed_text = kept.read_text()
    # another function tried beside it withdraws nothing
    assert not ex.check_causal_attention(_as_cell(_unscaled, "variant")) and kept.exists()
    result = ex.check_causal_attention(_as_cell(_unscaled))  # the same cell, with a slip
    assert not result and "withdrawn" in result.message.splitlines()[-1]
    assert str(aside) in result.message  # where the passing version went
    assert not kept.exists() and aside.read_text() == passed_text  # set aside, not lost
    capsys.readouterr()
    assert yours.use(ex.check_causal_attention) is ex.check_causal_attention.solution
    out = capsys.readouterr().out
    assert "the course's reference stands in" in out and str(aside) in out, out
    assert ex.check_causal_attention(_as_readers(_attention))  # passes again: kept again
    assert kept.read_text() == passed_text and not aside.exists()
    # the stub run again is not judged: nothing withdrawn
    assert "withdrawn" not in ex.check_causal_attention(_as_cell(_stub)).message
    assert kept.exists()
    fn = yours.use(ex.check_causal_attention)
    assert fn is not ex.check_causal_attention.solution and "yours" in capsys.readouterr().out


def test_a_kept_piece_that_runs_another_kept_piece_loads_in_a_fresh_kernel(
    tmp_path, monkeypatch, capsys
):
    import sys

    from gptlib.exercises import nb12_generation as generation

    folder = _fresh(tmp_path, monkeypatch)
    assert ex.check_filter_logits(_as_readers(generation.solution_filter_logits))  # notebook 12
    filter_in_use = yours.use(ex.check_filter_logits)  # the kept one: yourgpt.filter_logits
    s = _sample_step
    sample_step = types.FunctionType(s.__code__, {**s.__globals__, "filter_in_use": filter_in_use},
                                     s.__name__)  # fmt: skip
    sample_step.__module__ = "__main__"  # notebook 12's optional step, around the kept filter
    assert ex.check_sample_step(sample_step)
    assert "from yourgpt.filter_logits import " in (folder / "sample_step.py").read_text()
    for name in [m for m in sys.modules if m == "yourgpt" or m.startswith("yourgpt.")]:
        monkeypatch.delitem(sys.modules, name)  # a fresh kernel: nothing of yourgpt imported
    capsys.readouterr()
    assert yours.use(ex.check_sample_step) is not ex.check_sample_step.solution
    assert "sample_step: yours" in capsys.readouterr().out


def _sample_step(model, idx, temperature, top_k, top_p, generator):
    """A reader's step of notebook 12 that calls the filter in use, taken with yours.use."""
    was = model.training
    model.eval()
    with torch.no_grad():
        logits = model(idx[:, -model.cfg.block_size :])[0][:, -1]
    model.train(was)
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = filter_in_use(logits / temperature, top_k, top_p).softmax(dim=-1)  # noqa: F821
    return torch.multinomial(probs, 1, generator=generator)


def test_a_value_of_the_notebook_is_named_in_the_kept_file(tmp_path, monkeypatch):
    folder = _fresh(tmp_path, monkeypatch)
    table = torch.zeros(3)
    namespace = {"torch": torch, "table": table, "SCALE": SCALE}
    exec(
        textwrap.dedent(
            """
            def embed(ids, wte, wpe):
                return wte[ids] + wpe[torch.arange(ids.size(1))] + 0 * SCALE + 0 * table.sum()
            """
        ),
        namespace,
    )
    fn = namespace["embed"]
    fn.__module__ = "__main__"
    # exec'd code has no source to read: nothing is kept, and the check still answers
    assert ex.check_embed(fn)
    assert not (folder / "embed.py").exists()
    text = yours.module_source("embed", _as_readers(_uses_a_tensor))
    assert "SCALE = 2.0" in text and "# TABLE: a Tensor of the notebook" in text


TABLE = torch.ones(2)


def _uses_a_tensor(x):
    return x * SCALE * TABLE


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(yours.ENV, str(tmp_path / "mine"))
    assert yours.folder() == tmp_path / "mine"
    monkeypatch.delenv(yours.ENV)
    assert yours.folder().name == "yourgpt"
    assert os.environ.get(yours.ENV) is None


# --- gradients and shortcuts ------------------------------------------------------------------


def test_a_detached_input_is_named_as_a_cut_gradient():
    def detached(q, k, v):
        return _attention(q, k.detach(), v)

    result = ex.check_causal_attention(detached)
    assert not result and "gradient of k is missing" in result.message


def test_an_output_made_under_no_grad_is_named():
    def no_grad(q, k, v):
        with torch.no_grad():
            return _attention(q, k, v)

    result = ex.check_causal_attention(no_grad)
    assert not result and "carries no gradient" in result.message


def test_a_gradient_that_differs_is_named():
    def half_hidden(q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        w = s.masked_fill(_hide(q.size(-2)), float("-inf")).softmax(-1)
        return w.detach() @ v + (w - w.detach()) @ v.detach() * 0  # right values, q and k cut

    result = ex.check_causal_attention(half_hidden)
    assert not result and "gradient of q is missing" in result.message


def test_the_library_call_that_does_the_job_is_read_from_the_source(monkeypatch):
    def shortcut(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def via_helper(q, k, v):
        return _sdpa(q, k, v)

    result = ex.check_causal_attention(shortcut)
    assert not result and "write this one yourself" in result.message
    assert "F.scaled_dot_product_attention" in result.message
    monkeypatch.setitem(globals(), "_sdpa", _as_readers(_sdpa))
    assert not ex.check_causal_attention(via_helper)
    # nothing is patched: the library function is itself during and after the check
    assert F.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# --- the trained model, piece by piece ---------------------------------------------------------


def test_assemble_runs_the_trained_model_piece_by_piece():
    model = load_asset("names-microgpt-h4.pt").model.eval()
    idx = torch.randint(0, 27, (3, 8), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(assemble.forward(model, idx), model(idx)[0], atol=1e-6)
    val = load_corpus("names").val
    lib = estimate_loss(model, val, n_batches=4)
    assert abs(assemble.validation_loss(model, val, n_batches=4) - lib) < 1e-5
    mine = assemble.validation_loss(model, val, n_batches=4, causal_attention=_attention)
    assert abs(mine - lib) < 1e-5
    # a piece that is wrong shows in the loss
    worse = assemble.validation_loss(
        model, val, n_batches=4, causal_attention=lambda q, k, v: _attention(q, k, v) * 0
    )
    assert worse > lib + 0.1


def test_assemble_refuses_a_piece_it_does_not_have():
    model = load_asset("names-microgpt-h4.pt").model
    try:
        assemble.forward(model, torch.zeros(1, 2, dtype=torch.long), atention=_attention)
    except TypeError as e:
        assert "atention" in str(e) and "causal_attention" in str(e)
    else:
        raise AssertionError("a misspelt piece was accepted")
