"""website/frames.py without a browser or a drawing: the page's markup for a slider's frames; and
website/live without a browser: the exported weights and the cells that get the live panel."""

from __future__ import annotations

import base64
import html
import json
import re

import numpy as np
import pytest
import torch

from gptlib.checkpoint import load_asset
from website import frames, live


def _slider() -> frames.Slider:
    controls = [
        frames.Control("d_k", ["1", "2", "4"], 1),
        frames.Control("divide by √d_k", ["off", "on"], 1, checkbox=True),
    ]
    got = {
        (i, j): frames.Frame([b"png"], text=f"{i} {j} </script>", caption=f"<b>{i}</b>")
        for i in range(3)
        for j in range(2)
    }
    slider = frames.Slider("scale", controls, got, {"en": "three", "zh": "三"})
    slider.files = {key: [f"scale-{frames.key_text(key)}-0.png"] for key in got}
    return slider


def test_the_page_starts_where_the_notebook_does_and_holds_every_frame():
    page = frames.slider_html(_slider(), "../frames")
    shown = page.split('<script type="application/json"', 1)[0]
    assert 'src="../frames/scale-1-1-0.png"' in shown  # d_k 2, scaled: the start
    assert "<output>2</output>" in shown and 'aria-valuetext="2"' in shown
    assert 'type="checkbox" checked' in shown
    assert "<b>1</b>" in shown and html.escape("1 1 </script>") in shown
    data = re.search(r'class="course-frames-data">(.*)</script></div>$', page, re.S).group(1)
    assert "</" not in data  # the frames' text cannot end the script early
    got = json.loads(data)
    assert sorted(got) == ["0-0", "0-1", "1-0", "1-1", "2-0", "2-1"]
    assert got["2-0"]["text"] == "2 0 </script>"
    assert 'src="../frames/scale-2-0-0.png"' in got["2-0"]["pictures"]


def test_write_names_each_picture_by_its_slider_and_values(tmp_path):
    slider = _slider()
    slider.files = {}
    size = frames.write({"attention_scale_explorer": [slider]}, tmp_path)
    assert size == 6 * len(b"png")
    assert sorted(p.name for p in tmp_path.iterdir())[:2] == ["scale-0-0-0.png", "scale-0-1-0.png"]
    assert slider.files[(2, 1)] == ["scale-2-1-0.png"]


def test_every_slider_widget_has_a_drawing_or_the_live_model():
    """The sliders that need the notebook's run are drawn; notebook 08's temperature slider is
    the live microgpt's (with the picture the notebook stored); 04's heads have both: its
    microgpt maps live, the textbook preset's drawn."""
    assert set(frames.DRAW) == {"attention_scale_explorer", "heads_explorer"}
    assert set(live.LIVE) == {"heads_explorer", "temperature_explorer"}


def test_two_ranges_each_have_their_labels_and_readout():
    controls = [
        frames.Control("temperature", ["0.00", "0.05", "0.10"], 2),
        frames.Control("top-k (0=off)", ["0", "3", "5", "10"], 0),
    ]
    got = {(i, j): frames.Frame([b"png"], text=f"{i} {j}") for i in range(3) for j in range(4)}
    slider = frames.Slider("temperature", controls, got, {"en": "twelve", "zh": "十二"})
    slider.files = {key: [f"temperature-{frames.key_text(key)}-0.png"] for key in got}
    page = frames.slider_html(slider, "../frames")
    shown = page.split('<script type="application/json"', 1)[0]
    assert shown.count('type="range"') == 2
    assert 'max="2"' in shown and 'max="3"' in shown
    assert "<output>0.10</output>" in shown and "<output>0</output>" in shown
    assert html.escape(json.dumps(["0", "3", "5", "10"]), quote=True) in shown
    assert 'src="../frames/temperature-2-0-0.png"' in shown
    data = re.search(r'class="course-frames-data">(.*)</script></div>$', page, re.S).group(1)
    assert len(json.loads(data)) == 12 and json.loads(data)["1-3"]["text"] == "1 3"


def test_errata_links_go_to_the_errata_page_on_the_site():
    """ERRATA is a page of the site: a notebook's link to an entry goes to that entry there (found
    by its number); a link out of the repository keeps its words only; links between notebooks
    are kept."""
    from website.build import Links, prepare

    nb = {
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": [
                "see [ERRATA 22](../ERRATA.md#22-x), [ERRATA 2](../../ERRATA.md#2-y) "
                "and [notebook 04](04_multi_head.ipynb)"]},
        ],
    }  # fmt: skip
    links = Links("en", {"en": {"04_multi_head": {}}, "zh": {}})
    cell = prepare(nb, "00_x.ipynb", "en", links)["cells"][0]
    text = "".join(cell["source"])
    assert re.search(r"see \[ERRATA 22\]\(errata\.md#22-[\w-]+\), ERRATA 2 and", text), text
    assert "[notebook 04](04_multi_head.ipynb)" in text


def test_the_exported_weights_are_the_checkpoints_own(tmp_path):
    """Every microgpt of the heads slider, every parameter bit for bit, in a script that sets a
    global (no fetch: the page works from disk), small enough to send with a page."""
    size = live.write(tmp_path)
    script = (tmp_path / live.WEIGHTS).read_text(encoding="utf-8")
    assert size < 200_000 and len(script) < 150_000, size
    prefix = f"window.{live.GLOBAL} = "
    body = script.split(prefix, 1)[1].rstrip().removesuffix(";")
    data = json.loads(body)
    assert [m["config"]["n_head"] for m in data["models"]] == live.HEAD_COUNTS
    assert data["start"] in live.HEAD_COUNTS
    for entry, count in zip(data["models"], live.HEAD_COUNTS, strict=True):
        ckpt = load_asset(f"names-microgpt-h{count}.pt")
        assert data["symbols"] == ckpt.tokenizer.itos and data["bos"] == ckpt.tokenizer.bos_id
        assert entry["parameters"] == ckpt.model.num_parameters() == 4112
        numbers = np.frombuffer(base64.b64decode(entry["data"]), dtype="<f4")
        assert numbers.size == 4112
        at = 0
        for (name, shape), (pname, p) in zip(
            entry["tensors"], ckpt.model.named_parameters(), strict=True
        ):
            assert name == pname and shape == list(p.shape)
            got = torch.from_numpy(numbers[at : at + p.numel()].copy()).view(p.shape)
            assert torch.equal(got, p.detach()), name
            at += p.numel()
    for name in live.FILES:
        assert (tmp_path / name).read_bytes() == (live.HERE / name).read_bytes()


def test_the_live_panel_starts_where_the_notebooks_widget_does():
    heads = 'explorer = widgets.heads_explorer(\n    {1: "a"},\n    context="olivia",\n)'
    (out,) = live.outputs(heads)
    page = out["data"]["text/html"]
    assert 'data-widget="heads_explorer"' in page and 'data-context="olivia"' in page
    assert page.index(live.WEIGHTS) < page.index("course-live.js")  # weights first
    temperature = "# NBVAL_IGNORE_OUTPUT\nw = widgets.temperature_explorer(m, tok, num_samples=3)"
    page = live.outputs(temperature)[0]["data"]["text/html"]
    assert 'data-context="."' in page and 'data-samples="3"' in page and 'data-seed="0"' in page
    assert (
        live.outputs("print(1)") == [] and live.outputs("widgets.attention_scale_explorer()") == []
    )


@pytest.mark.parametrize("context", ['"><script>', "a&b"])
def test_the_live_panels_context_is_escaped(context):
    page = live.panel_html("heads_explorer", f"widgets.heads_explorer({{}}, context={context!r})")
    assert '<script>"' not in page and html.escape(context, quote=True) in page
