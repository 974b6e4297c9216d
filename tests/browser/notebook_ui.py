"""What a reader does in JupyterLab, as Playwright steps: open a notebook, run it all, find a
slider, move it with the keyboard or the mouse, read what the page shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import Page, expect

RUN_ALL_TIMEOUT_MS = 120_000
STDERR = "application/vnd.jupyter.stderr"  # how JupyterLab marks tracebacks (and stderr)
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"  # the notebook in front


def code_cell_count(notebook: Path) -> int:
    cells = json.loads(notebook.read_text())["cells"]
    return sum(c["cell_type"] == "code" for c in cells)


def stored_image_count(notebook: Path) -> int:
    """Pictures the notebook's cells show directly (not those inside widgets)."""
    cells = json.loads(notebook.read_text())["cells"]
    return sum(
        "image/png" in out.get("data", {})
        for c in cells
        if c["cell_type"] == "code"
        for out in c["outputs"]
    )


def code_cell_index(notebook: Path, text: str, first: bool = False) -> int:
    """The index of the code cell holding `text`: the only one, or with `first` the first."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    found = [i for i, c in enumerate(cells) if text in "".join(c["source"])]
    assert len(found) == 1 or (first and found), f"{text!r} is in code cells {found}"
    return found[0]


def wait_kernel_idle(page: Page, timeout_ms: int = 60_000) -> None:
    """The status bar says "Idle" once the kernel has started (and after it has finished)."""
    expect(page.locator("#jp-main-statusbar")).to_contain_text("Idle", timeout=timeout_ms)


def open_notebook(page: Page, base_url: str, name: str) -> None:
    page.goto(f"{base_url}/lab/tree/{name}?reset")  # reset: a fresh layout, this notebook only
    expect(page.locator(f"{NOTEBOOK} .jp-Cell").first).to_be_visible(timeout=60_000)
    wait_kernel_idle(page)


def run_all_cells(page: Page, code_cells: int) -> None:
    """Run > Run All Cells from the menu bar; wait until every code cell shows its execution
    count, in order (1, 2, ..., code_cells), and the kernel is idle."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(
        """([scope, n]) => {
            const prompts = [...document.querySelectorAll(scope + ' .jp-CodeCell .jp-InputPrompt')];
            return prompts.length === n &&
                prompts.every((p, i) => p.innerText.trim() === `[${i + 1}]:`);
        }""",
        arg=[NOTEBOOK, code_cells],
        timeout=RUN_ALL_TIMEOUT_MS,
        polling=250,
    )
    wait_kernel_idle(page)


def run_cell(page: Page, cell) -> None:
    """Click into the cell's editor and press Shift+Enter, as a reader runs one cell."""
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    wait_kernel_idle(page)


def error_outputs(page: Page) -> list[str]:
    """The text of every traceback (or stderr output) the notebook shows."""
    errors = page.locator(f'{NOTEBOOK} .jp-OutputArea-output[data-mime-type="{STDERR}"]')
    return errors.all_inner_texts()


def widget_errors(page: Page) -> list[str]:
    """The message of every widget that failed to render (ipywidgets draws an error box)."""
    boxes = page.locator(f"{NOTEBOOK} .jupyter-widgets-error-widget")
    return boxes.all_inner_texts()


def console_errors(page: Page) -> list[str]:
    """Errors the page logged to the browser console (the `page` fixture records them)."""
    return [line for line in page.console_log if line.startswith(("[error]", "[pageerror]"))]


def rendered_images(page: Page) -> list[dict]:
    """Every picture in the notebook's outputs: its size once decoded, and whether it sits
    inside a widget."""
    return page.evaluate(
        """(scope) => [...document.querySelectorAll(scope + ' .jp-OutputArea-output img')].map(
            img => ({complete: img.complete, width: img.naturalWidth, height: img.naturalHeight,
                     inWidget: img.closest('.jupyter-widgets') !== null}))""",
        NOTEBOOK,
    )


class Slider:
    """An ipywidgets slider on the page, found by its description label."""

    def __init__(self, page: Page, scope: str, label: str):
        self.page = page
        self.root = page.locator(f"{scope} .widget-slider").filter(
            has=page.locator(".widget-label", has_text=re.compile(rf"^{re.escape(label)}$"))
        )
        expect(self.root).to_have_count(1)
        self.handle = self.root.locator(".noUi-handle")
        self.readout = self.root.locator(".widget-readout")

    def value(self) -> str:
        return self.readout.inner_text().strip()

    def press(self, key: str, times: int = 1) -> None:
        self.handle.focus()
        for _ in range(times):
            self.handle.press(key)

    def track_width(self) -> float:
        return self.root.locator(".noUi-base").bounding_box()["width"]

    def drag_by(self, dx: float) -> None:
        """Hold the handle with the mouse and move it `dx` pixels sideways."""
        self.handle.scroll_into_view_if_needed()
        box = self.handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        self.page.mouse.move(x, y)
        self.page.mouse.down()
        self.page.mouse.move(x + dx, y, steps=10)
        self.page.mouse.up()
