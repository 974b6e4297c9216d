"""Notebook 08, the home of temperature, in JupyterLab: it runs top to bottom, its plots show, and
the temperature slider changes what the reader sees to exactly what gptlib samples at the
temperature it reads out. (The slider moved there from notebook 12, generation.)"""

import contextlib
import io
import re

import pytest
import torch
from notebook_ui import (
    Slider,
    code_cell_count,
    console_errors,
    error_outputs,
    open_notebook,
    rendered_images,
    run_all_cells,
    stored_image_count,
    widget_errors,
)
from playwright.sync_api import expect

from gptlib.checkpoint import load_asset
from gptlib.classroom import widgets

NOTEBOOK = "08_logits.ipynb"
EXPLORER = ".gptlib-temperature-explorer"
# What the notebook's explorer cell builds:
# widgets.temperature_explorer(big_model, tok, ".", 10, 0), big_model from names-textbook.pt.
NUM_SAMPLES, SEED = 10, 0


@pytest.fixture(scope="module")
def expected():
    """The same explorer, built here without a browser: set a temperature, read its samples."""
    torch.set_num_threads(1)  # as in the kernel
    ckpt = load_asset("names-textbook.pt")
    with contextlib.redirect_stdout(io.StringIO()):
        explorer = widgets.temperature_explorer(
            ckpt.model, ckpt.tokenizer, context=".", num_samples=NUM_SAMPLES, seed=SEED
        )

    def words_at(readout: str) -> list[str]:
        with contextlib.redirect_stdout(io.StringIO()):  # outside a notebook the redraw prints
            explorer.temperature.value = float(readout)
        return explorer.samples_text.split()

    return words_at


def _shown(page) -> tuple[list[str], str]:
    """The samples' text as words, and the probability plot's image data."""
    words = page.locator(f"{EXPLORER} .gptlib-samples").inner_text().split()
    image = page.locator(f"{EXPLORER} .gptlib-probs img").get_attribute("src")
    return words, image


def _wait_for_samples(page, words: list[str]) -> None:
    """Wait until the samples on the page are exactly `words` (the kernel redraws after each
    move of the slider)."""
    pattern = re.compile(r"^\s*" + r"\s+".join(map(re.escape, words)) + r"\s*$")
    expect(page.locator(f"{EXPLORER} .gptlib-samples")).to_have_text(pattern)


def test_logits_chapter_runs_and_temperature_slider_drives_samples(page, lab, expected, artifacts):
    notebook = lab.root / NOTEBOOK
    open_notebook(page, lab.url, NOTEBOOK)
    run_all_cells(page, code_cell_count(notebook))

    assert error_outputs(page) == []
    assert widget_errors(page) == []
    images = rendered_images(page)
    assert all(im["complete"] and im["width"] > 100 and im["height"] > 100 for im in images)
    assert sum(not im["inWidget"] for im in images) == stored_image_count(notebook)
    assert sum(im["inWidget"] for im in images) == 1  # the explorer's probability bars

    temperature = Slider(page, EXPLORER, "temperature")
    assert temperature.value() == "1.00"
    _wait_for_samples(page, expected("1.00"))
    words, image = _shown(page)

    # Keyboard: two steps of 0.05 to the right.
    temperature.press("ArrowRight", times=2)
    expect(temperature.readout).to_have_text("1.10")
    _wait_for_samples(page, expected("1.10"))
    words_110, image_110 = _shown(page)
    assert words_110 != words and image_110 != image
    # The README's picture of a slider in JupyterLab: `make screenshots` copies it to assets/.
    page.locator(EXPLORER).screenshot(path=str(artifacts / "slider.png"))

    # Mouse: drag the handle to the left; whatever value it lands on, the page shows its samples.
    temperature.drag_by(-0.25 * temperature.track_width())  # about 0.5 lower
    dragged = temperature.value()
    assert 0 < float(dragged) < 1.0  # a value not shown before
    _wait_for_samples(page, expected(dragged))
    words_dragged, image_dragged = _shown(page)
    assert image_dragged not in (image, image_110)

    # Greedy: temperature 0 gives one name, the argmax path, every time.
    temperature.press("Home")
    expect(temperature.readout).to_have_text("0.00")
    greedy = expected("0.00")
    _wait_for_samples(page, greedy)
    _, image_greedy = _shown(page)
    names = greedy[-NUM_SAMPLES:]
    assert len(set(names)) == 1, names
    temperature.press("End")
    expect(temperature.readout).to_have_text("2.00")
    _wait_for_samples(page, expected("2.00"))
    temperature.press("Home")
    expect(temperature.readout).to_have_text("0.00")
    _wait_for_samples(page, greedy)
    assert _shown(page) == (greedy, image_greedy)  # the same text (and bars) twice
    assert console_errors(page) == []
