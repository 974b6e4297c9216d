"""The course's trained microgpt, live in the page: its weights exported for a forward pass in
plain JavaScript (course-live.js), which the pages of notebooks 04 and 08 run in the reader's
browser.

`write(folder)` writes, for the whole site (both editions read it from ../live/):
- course-live-weights.js: every microgpt of notebook 04's heads slider (names-microgpt-h1 ... h16,
  4,112 parameters each; h4 is the model of notebooks 02-08), each tensor float32 little-endian in
  base64, and the tokenizer's symbols. A script that sets a global, not a file fetched, so that a
  page opened from disk (file://) runs it too.
- course-live.js and course-live.css, copied from this folder.
The `textbook` preset (800,384 parameters, 3.2 MB of float32) is not exported: its sliders stay
pictures (website/frames.py and the notebook's own).

`outputs(cell_source)` gives the cell that builds a widget of LIVE the output that holds the
live panel, started at that widget's own arguments (its context, its number of samples).
"""

from __future__ import annotations

import ast
import base64
import html
import json
import shutil
from pathlib import Path

import torch

from gptlib.checkpoint import asset_path, load_checkpoint

HERE = Path(__file__).resolve().parent
HEAD_COUNTS = [1, 2, 4, 8, 16]  # notebook 04's head_counts: names-microgpt-h<c>.pt
START_HEADS = 4  # the model of notebooks 02-08, where the heads slider starts
WEIGHTS = "course-live-weights.js"
FILES = ("course-live.js", "course-live.css")
GLOBAL = "COURSE_LIVE_MODELS"
# The notebook widgets a live panel stands beside, and the panel's defaults for the arguments
# their call does not give (gptlib.classroom.widgets' own defaults).
LIVE = {
    "heads_explorer": {"context": "emma", "num_samples": 10, "seed": 0},
    "temperature_explorer": {"context": ".", "num_samples": 8, "seed": 0},
}


def model_entry(model, name: str) -> dict:
    """One model as the page reads it: its config, and every parameter (each shared one once) as
    name, shape and float32 bytes, all of them one after another in `data` (base64)."""
    tensors, chunks = [], []
    for pname, p in model.named_parameters():
        t = p.detach().to("cpu", torch.float32).contiguous()
        tensors.append([pname, list(t.shape)])
        chunks.append(t.numpy().astype("<f4").tobytes())
    return {
        "name": name,
        "config": model.cfg.to_dict(),
        "parameters": model.num_parameters(),
        "tensors": tensors,
        "data": base64.b64encode(b"".join(chunks)).decode("ascii"),
    }


def export(head_counts: list[int] = HEAD_COUNTS) -> dict:
    """The trained microgpt of each head count, and the tokenizer they share."""
    models, symbols = [], None
    for count in head_counts:
        ckpt = load_checkpoint(asset_path(f"names-microgpt-h{count}.pt"))
        if symbols is None:
            symbols, bos = list(ckpt.tokenizer.itos), ckpt.tokenizer.bos_id
        elif list(ckpt.tokenizer.itos) != symbols:
            raise ValueError(
                f"names-microgpt-h{count}.pt has another tokenizer ({ckpt.tokenizer.itos!r}) "
                f"than names-microgpt-h{head_counts[0]}.pt ({symbols!r}): the page's models "
                "must share one; retrain them on the same corpus (make assets)"
            )
        models.append(model_entry(ckpt.model, f"names-microgpt-h{count}.pt"))
    return {"symbols": symbols, "bos": bos, "start": START_HEADS, "models": models}


def weights_script(data: dict) -> str:
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return (
        "// The course's trained microgpt models, exported by website/live when the site was "
        "built.\n"
        f"window.{GLOBAL} = {body};\n"
    )


def write(folder: Path) -> int:
    """The weights script and the panel's script and style in `folder`; returns the bytes
    written."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / WEIGHTS).write_text(weights_script(export()), encoding="utf-8")
    for name in FILES:
        shutil.copyfile(HERE / name, folder / name)
    return sum((folder / name).stat().st_size for name in (WEIGHTS, *FILES))


def call_arguments(source: str, widget: str) -> dict:
    """The constant keyword arguments of the call `widgets.<widget>(...)` in a cell's source
    (what cannot be read as a constant is left out); {} when the cell does not call it."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith("%")]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == widget
        ):
            found = {}
            for kw in node.keywords:
                if kw.arg and isinstance(kw.value, ast.Constant):
                    found[kw.arg] = kw.value.value
            return found
    return {}


def panel_html(widget: str, source: str = "", base: str = "../live") -> str:
    """The live panel for the cell that builds `widget`, and the scripts that fill it."""
    settings = {**LIVE[widget], **call_arguments(source, widget)}
    context = str(settings["context"])
    attrs = {
        "data-widget": widget,
        "data-context": context,
        "data-samples": str(int(settings["num_samples"])),
        "data-seed": str(int(settings["seed"])),
    }
    shown = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
    return (
        f'<link rel="stylesheet" href="{base}/course-live.css">'
        f'<div class="course-live" {shown}></div>'
        f'<script src="{base}/{WEIGHTS}" defer></script>'
        f'<script src="{base}/course-live.js" defer></script>'
    )


def outputs(source: str) -> list[dict]:
    """For a notebook cell: the output holding the live panel of each widget of LIVE it builds
    (none for any other cell)."""
    return [
        {
            "output_type": "display_data",
            "metadata": {},
            "data": {"text/html": panel_html(w, source)},
        }
        for w in LIVE
        if f"widgets.{w}(" in source
    ]
