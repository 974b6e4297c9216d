"""Notebook 04 in JupyterLab: moving the heads slider shows one attention map per head of the
model it names. Only the cells the slider needs run (the imports, the checkpoints' head counts,
the explorer): nbval runs the whole notebook, and notebook 08's browser test runs one top to
bottom in JupyterLab."""

import re

from notebook_ui import NOTEBOOK as IN_FRONT
from notebook_ui import (
    Slider,
    code_cell_index,
    console_errors,
    error_outputs,
    open_notebook,
    run_cell,
    widget_errors,
)
from playwright.sync_api import expect

NOTEBOOK = "04_multi_head.ipynb"
EXPLORER = ".gptlib-heads-explorer"
# The cells the explorer needs, in order: the imports, the head counts, the explorer itself.
NEEDED = (
    "from gptlib.classroom import heads",
    "head_counts = [1, 2, 4, 8, 16]",
    "widgets.heads_explorer(",
)


def _maps_shown(page) -> list[dict]:
    """The attention-map pictures in the explorer: the map each names and its decoded size."""
    return page.evaluate(
        """(scope) => [...document.querySelectorAll(scope + ' .gptlib-head-maps img')].map(
            img => ({name: [...img.classList].find(c => c.startsWith('gptlib-layer-')),
                     complete: img.complete, width: img.naturalWidth}))""",
        EXPLORER,
    )


def _expect_heads(page, heads: Slider, h: int) -> None:
    """The readout says h, the caption counts h maps, and h decoded pictures are shown, named
    head 0 .. h-1 (the microgpt models have one layer)."""
    expect(heads.readout).to_have_text(str(h))
    caption = page.locator(f"{EXPLORER} .gptlib-head-caption")
    expect(caption).to_contain_text(re.compile(rf"^{h} head\(s\) .*: {h} attention map\(s\)"))
    maps = page.locator(f"{EXPLORER} .gptlib-head-maps img")
    expect(maps).to_have_count(h)
    page.wait_for_function(
        """(scope) => [...document.querySelectorAll(scope + ' .gptlib-head-maps img')].every(
            img => img.complete && img.naturalWidth > 0)""",
        arg=EXPLORER,
    )
    shown = _maps_shown(page)
    assert [m["name"] for m in shown] == [f"gptlib-layer-0-head-{j}" for j in range(h)]
    assert all(m["width"] > 100 for m in shown)


def test_multi_head_chapter_heads_slider_shows_one_map_per_head(page, lab):
    notebook = lab.root / NOTEBOOK
    open_notebook(page, lab.url, NOTEBOOK)
    cells = page.locator(f"{IN_FRONT} .jp-CodeCell")
    for text in NEEDED:
        run_cell(page, cells.nth(code_cell_index(notebook, text)))

    assert error_outputs(page) == []
    assert widget_errors(page) == []

    heads = Slider(page, EXPLORER, "heads")  # options 1, 2, 4, 8, 16; starts at 4
    _expect_heads(page, heads, 4)
    heads.press("ArrowRight")  # keyboard: one option to the right
    _expect_heads(page, heads, 8)
    heads.press("End")
    _expect_heads(page, heads, 16)
    heads.drag_by(-400)  # mouse: all the way to the left
    _expect_heads(page, heads, 1)
    heads.press("ArrowRight")
    _expect_heads(page, heads, 2)
    assert console_errors(page) == []
