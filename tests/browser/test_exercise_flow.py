"""An exercise as a reader meets it in JupyterLab: the stored stub, a wrong body typed in and
run (the check names the slip on the page), then a correct body (the check passes and keeps it
in the reader's package), and a later notebook that runs the reader's function."""

import re

from notebook_ui import NOTEBOOK as IN_FRONT
from notebook_ui import (
    code_cell_index,
    console_errors,
    error_outputs,
    open_notebook,
    run_cell,
    wait_kernel_idle,
)
from playwright.sync_api import expect

from gptlib.exercises import nb03_scaled_attention as attention
from gptlib.exercises.checking import not_written

NOTEBOOK = "03_scaled_attention.ipynb"
STUB_LINE = "def causal_attention(q, k, v):"

BODY = """def causal_attention(q, k, v):
    n, d_h = q.size(-2), q.size(-1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_h)  # [B, h, n, n]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return scores.masked_fill(future, float("-inf")).softmax(dim={dim}) @ v


check_causal_attention(causal_attention)"""

SOFTMAX_HINT = attention.MISTAKES[0][0]  # the hint for a softmax over the queries (dim=-2)
PASSED = "✓ causal_attention: matches the reference on 3 random inputs"
# The messages name the reader's folder in use ($GPTLIB_YOURS: the lab's own empty one).
KEPT = "kept as {folder}/causal_attention.py: later notebooks use it"
LATER = "04_multi_head.ipynb"  # its loop over heads runs notebook 03's causal_attention
LATER_CELL = "attend = yours.use(check_causal_attention)"
USED = "causal_attention: yours, from {folder}/causal_attention.py"


def _replace_source(page, cell, text: str) -> None:
    """Select everything in the cell's editor and put `text` in its place (inserted as one
    piece, so the editor's auto-indent and bracket closing add nothing)."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def test_exercise_stub_then_slip_then_pass(page, lab, artifacts):
    notebook = lab.root / NOTEBOOK
    open_notebook(page, lab.url, NOTEBOOK)
    cells = page.locator(f"{IN_FRONT} .jp-CodeCell")
    stub = cells.nth(code_cell_index(notebook, STUB_LINE))
    output = stub.locator(".jp-OutputArea-output")

    # As stored: the stub and the check's one line.
    expect(stub.locator(".cm-content")).to_contain_text("raise NotImplementedError")
    expect(output).to_have_text(not_written("causal_attention").message)

    run_cell(page, cells.nth(0))  # the imports, as a reader runs the first cell

    # A wrong body: the softmax over the queries. The check names that slip.
    _replace_source(page, stub, BODY.format(dim=-2))
    run_cell(page, stub)
    expect(output).to_contain_text(SOFTMAX_HINT[:60])
    page.screenshot(path=str(artifacts / "slip.png"))

    # The correct body: the check passes, and keeps the function in the reader's package.
    _replace_source(page, stub, BODY.format(dim=-1))
    run_cell(page, stub)
    expect(output).to_contain_text(PASSED)
    expect(output).to_contain_text(KEPT.format(folder=lab.yours))
    page.screenshot(path=str(artifacts / "passed.png"))
    assert (lab.yours / "causal_attention.py").is_file()

    assert error_outputs(page) == []
    assert console_errors(page) == []

    # A later notebook, in a kernel of its own, runs the reader's function.
    later = lab.root / LATER
    open_notebook(page, lab.url, LATER)
    cells = page.locator(f"{IN_FRONT} .jp-CodeCell")
    index = code_cell_index(later, LATER_CELL, first=True)  # 04 asks for it twice
    target = cells.nth(index)
    target.locator(".cm-content").click()
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.get_by_role("menuitem", name="Run All Above Selected Cell", exact=True).click()
    page.wait_for_function(
        """([scope, n]) => {
            const prompts = [...document.querySelectorAll(scope + ' .jp-CodeCell .jp-InputPrompt')];
            return prompts.slice(0, n).every((p, i) => p.innerText.trim() === `[${i + 1}]:`);
        }""",
        arg=[IN_FRONT, index],
        timeout=300_000,
        polling=250,
    )
    wait_kernel_idle(page, timeout_ms=300_000)
    run_cell(page, target)
    expect(target.locator(".jp-OutputArea-output").first).to_contain_text(
        USED.format(folder=lab.yours)
    )
    page.screenshot(path=str(artifacts / "later-notebook.png"))
    assert error_outputs(page) == []


RMSNORM_NOTEBOOK = "06_normalisation.ipynb"  # RMSNorm is 06's exercise; the capstone brings it
RMSNORM_STUB = "def rmsnorm(x, gain, eps=1e-5):"
RMSNORM = """def rmsnorm(x, gain, eps=1e-5):
    return {body}


check_rmsnorm(rmsnorm)"""
RMSNORM_SHORTCUT = "torch.nn.functional.rms_norm(x, (x.size(-1),), gain, eps)"
RMSNORM_SLIP = "x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * gain"  # eps outside
RMSNORM_RIGHT = "x / (x.pow(2).mean(dim=-1, keepdim=True) + eps).sqrt() * gain"


def _capstone_messages(folder) -> dict[str, str]:
    """What check_rmsnorm says to each body, asked of the library in this process (each
    body written to a file, so that its source can be read as the notebook's can)."""
    import importlib.util

    from gptlib.exercises import check_rmsnorm

    said = {}
    for name, body in (
        ("shortcut", RMSNORM_SHORTCUT),
        ("slip", RMSNORM_SLIP),
        ("right", RMSNORM_RIGHT),
    ):
        path = folder / f"rmsnorm_{name}.py"
        path.write_text(f"import torch\n\n\ndef rmsnorm(x, gain, eps=1e-5):\n    return {body}\n")
        spec = importlib.util.spec_from_file_location(f"rmsnorm_{name}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        said[name] = check_rmsnorm(module.rmsnorm).message.splitlines()[0]
    return said


def test_capstone_piece_refuses_the_library_names_a_slip_then_passes(
    page, lab, artifacts, tmp_path
):
    said = _capstone_messages(tmp_path)
    assert "write this one yourself" in said["shortcut"] and said["right"].startswith("✓")
    notebook = lab.root / RMSNORM_NOTEBOOK
    open_notebook(page, lab.url, RMSNORM_NOTEBOOK)
    cells = page.locator(f"{IN_FRONT} .jp-CodeCell")
    stub = cells.nth(code_cell_index(notebook, RMSNORM_STUB))
    output = stub.locator(".jp-OutputArea-output")
    expect(stub.locator(".cm-content")).to_contain_text("raise NotImplementedError")
    expect(output).to_have_text(not_written("rmsnorm").message)

    run_cell(page, cells.nth(0))  # the imports
    for name in ("shortcut", "slip", "right"):
        body = {"shortcut": RMSNORM_SHORTCUT, "slip": RMSNORM_SLIP, "right": RMSNORM_RIGHT}[name]
        _replace_source(page, stub, RMSNORM.format(body=body))
        run_cell(page, stub)
        expect(output).to_contain_text(said[name])
        page.screenshot(path=str(artifacts / f"capstone-{name}.png"))

    assert error_outputs(page) == []
    assert console_errors(page) == []
