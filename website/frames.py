"""The course's sliders on the website: what each widget shows at each value, drawn at build time.

A slider needs a running kernel and the site has none. Where the course's trained microgpt is
the model a slider moves (notebook 04's heads, notebook 08's temperature), the page runs that
model itself (website/live). The sliders left need the notebook's run: notebook 03's d_k and
scale (torch's random vectors) and notebook 04's layer and head of the `textbook` preset (a
model too large to send to the page). Each of their widgets is built here exactly as its
notebook builds it, its controls are set to every value they offer, one after another (setting
`.value` redraws as dragging does), and what the widget then shows is kept as a frame: its
pictures as PNG, the bytes JupyterLab shows, and its text. A page gets the frames of its sliders as HTML (`slider_html`) and
website/static/course-sliders.js swaps them as the reader moves the page's own range inputs and
checkboxes. The same inputs give the same frames: the widgets seed their randomness, nothing here
does any of its own.
"""

from __future__ import annotations

import contextlib
import html
import json
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path

from gptlib.checkpoint import asset_path
from gptlib.classroom import widgets
from gptlib.language import set_language

LANGS = ("en", "zh")  # each edition's frames, drawn in its own language
HEAD_COUNTS = [1, 2, 4, 8, 16]  # notebook 04's head_counts


@dataclass
class Control:
    name: str  # the widget's own label
    labels: list[str]  # each value it offers, as its readout shows it
    start: int  # the index of the value the notebook starts at
    checkbox: bool = False  # a checkbox: labels are ["off", "on"]


@dataclass
class Frame:
    pictures: list[bytes]  # PNG, as JupyterLab shows them
    text: str = ""  # what the widget prints under its pictures
    caption: str = ""  # HTML the widget shows above them


@dataclass
class Slider:
    name: str
    controls: list[Control]
    frames: dict[tuple[int, ...], Frame]  # control indexes -> what the widget shows there
    about: dict[str, str]  # per edition: which values the page offers
    heading: str = ""  # HTML before the controls
    legend: str = ""  # HTML after the pictures, the same for every frame
    files: dict[tuple[int, ...], list[str]] = field(default_factory=dict)  # set by write()


def inline_png(fig) -> bytes:
    """A figure as JupyterLab's inline backend draws a displayed one (matplotlib-inline's
    print_figure with bbox_inches="tight")."""
    from IPython.core.pylabtools import print_figure

    return print_figure(fig, "png", bbox_inches="tight")


@contextlib.contextmanager
def _recording():
    """What each Output widget is given to show, by id(output): the widgets show everything
    through widgets._show, which outside a kernel would only print."""
    shown: dict[int, tuple] = {}
    original = widgets._show

    def record(out, *items):
        shown[id(out)] = items

    widgets._show = record
    try:
        yield shown
    finally:
        widgets._show = original


def _frame(items: tuple, caption: str = "") -> Frame:
    pictures = [inline_png(i) for i in items if not isinstance(i, str)]
    return Frame(pictures, "\n".join(i for i in items if isinstance(i, str)), caption)


def _visit(controls: list[tuple], slider: Slider, read, keys=None) -> None:
    """Set the widget's controls, (control, its values), to every combination of their values
    (or only to those of `keys`, tuples of indexes); keep what the widget shows at each."""
    for key in product(*(range(len(values)) for _, values in controls)):
        if keys is not None and key not in keys:
            continue
        for (control, values), i in zip(controls, key, strict=True):
            control.value = values[i]
        slider.frames[key] = read()
    for (control, values), c in zip(controls, slider.controls, strict=True):
        control.value = values[c.start]  # back where the notebook starts it


def attention_scale(keys=None) -> list[Slider]:
    """Notebook 03's attention_scale_explorer: every d_k, with and without the scale."""
    with _recording() as shown:
        w = widgets.attention_scale_explorer(seed=0)
        d_ks = list(w.d_k.options)
        n = 2 * len(d_ks)
        slider = Slider(
            "scale",
            [
                Control(w.d_k.description, [str(d) for d in d_ks], d_ks.index(w.d_k.value)),
                Control(w.scaled.description, ["off", "on"], int(w.scaled.value), checkbox=True),
            ],
            {},
            {
                "en": f"every d_k it offers, {d_ks[0]} to {d_ks[-1]}, with and without the "
                f"scale: {n} pictures",
                "zh": f"它提供的每个 d_k（{d_ks[0]} 到 {d_ks[-1]}），除以与不除以 √d_k，共 {n} 张图",
            },
        )
        read = lambda: _frame(shown[id(w.plot_output)])  # noqa: E731
        _visit([(w.d_k, d_ks), (w.scaled, [False, True])], slider, read, keys)
    return [slider]


def heads(keys=None) -> list[Slider]:
    """Notebook 04's heads_explorer for its context 'emma': every layer and head of the textbook
    preset. (Its microgpt maps, one per head count, run live in the page: website/live.)"""
    with _recording() as shown:
        w = widgets.heads_explorer(
            {c: asset_path(f"names-microgpt-h{c}.pt") for c in HEAD_COUNTS},
            context="emma",
            textbook_checkpoint=asset_path("names-textbook.pt"),
        )
        layers = list(range(w.layer.min, w.layer.max + 1))
        heads_ = list(range(w.head.min, w.head.max + 1))
        context = html.escape(repr(w.context.value))
        textbook = Slider(
            "textbook",
            [
                Control(w.layer.description, [str(v) for v in layers], w.layer.value),
                Control(w.head.description, [str(v) for v in heads_], w.head.value),
            ],
            {},
            {
                "en": f"for the textbook preset (too large to run in the page), every layer and "
                f"head for the context {context}: {len(layers) * len(heads_)} pictures",
                "zh": f"textbook 预设（太大，无法在网页中运行）的每一层的每一个头（上下文为 "
                f"{context}），共 {len(layers) * len(heads_)} 张图",
            },
            heading=w.children[4].value,
        )
        read = lambda: _frame(shown[id(w.textbook_output)])  # noqa: E731
        _visit([(w.layer, layers), (w.head, heads_)], textbook, read, keys)
    return [textbook]


# The widget a notebook's cell calls -> what draws the sliders the page shows for it (the
# longest first: they are drawn side by side, see start). Notebook 08's temperature_explorer is
# not here: its model, the textbook preset, is shown by the picture the notebook stored, and the
# page's live microgpt moves the temperature (website/live).
DRAW = {
    "heads_explorer": heads,
    "attention_scale_explorer": attention_scale,
}


def draw_one(name: str, keys=None, lang: str = "en") -> list[Slider]:
    """The sliders of widget `name`, with their frames (all, or those of `keys`), drawn in the
    language of edition `lang` (titles, axes, the widget's own labels)."""
    import matplotlib
    import torch

    matplotlib.use("Agg")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: one thread is faster, and leaves a core to Sphinx
    set_language(lang)
    try:
        return DRAW[name](keys)
    finally:
        set_language("en")
        torch.set_num_threads(threads)


def start(workers: int = 2) -> tuple[ProcessPoolExecutor, dict[tuple[str, str], Future]]:
    """Start drawing every slider's frames, for each edition, in `workers` fresh processes; see
    collect()."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    jobs = {
        (lang, name): pool.submit(draw_one, name, None, lang) for lang in LANGS for name in DRAW
    }
    return pool, jobs


def collect(
    started: tuple[ProcessPoolExecutor, dict[tuple[str, str], Future]],
) -> dict[str, dict[str, list[Slider]]]:
    """Each edition's sliders, by the widget that draws them: {lang: {widget: [Slider]}}."""
    pool, jobs = started
    with pool:
        done: dict[str, dict[str, list[Slider]]] = {lang: {} for lang in LANGS}
        for (lang, name), job in jobs.items():
            group = job.result()
            for slider in group:
                slider.frames = dict(sorted(slider.frames.items()))
            done[lang][name] = group
        return done


def key_text(key: tuple[int, ...]) -> str:
    return "-".join(map(str, key))


def write(sliders: dict[str, list[Slider]], folder: Path, prefix: str = "") -> int:
    """Each frame's pictures as folder/<prefix><slider>-<key>-<j>.png (the prefix names the
    edition: "zh-"); returns the bytes written."""
    folder.mkdir(parents=True, exist_ok=True)
    size = 0
    for group in sliders.values():
        for slider in group:
            for key, frame in slider.frames.items():
                names = []
                for j, png in enumerate(frame.pictures):
                    names.append(f"{prefix}{slider.name}-{key_text(key)}-{j}.png")
                    (folder / names[-1]).write_bytes(png)
                    size += len(png)
                slider.files[key] = names
    return size


def _controls_html(slider: Slider) -> str:
    parts = []
    for c in slider.controls:
        name = html.escape(c.name)
        if c.checkbox:
            checked = " checked" if c.start else ""
            parts.append(f'<label><input type="checkbox"{checked}> {name}</label>')
        else:
            labels = html.escape(json.dumps(c.labels), quote=True)
            parts.append(
                f'<label>{name} <input type="range" min="0" max="{len(c.labels) - 1}" '
                f'step="1" value="{c.start}" data-labels="{labels}" '
                f'aria-valuetext="{html.escape(c.labels[c.start])}"></label> '
                f"<output>{html.escape(c.labels[c.start])}</output>"
            )
    return "".join(f'<span class="course-frames-control">{p}</span>' for p in parts)


def slider_html(slider: Slider, url: str) -> str:
    """One slider as the page shows it: its controls (shown by the script), the frame the notebook
    starts at, and every frame's pictures and text for the script to swap in. `url`: the folder
    of the pictures, relative to the page."""
    start = tuple(c.start for c in slider.controls)

    def pictures(key) -> str:
        label = ", ".join(
            f"{c.name} = {c.labels[i]}" if not c.checkbox else f"{c.name}: {c.labels[i]}"
            for c, i in zip(slider.controls, key, strict=True)
        )
        return "".join(
            f'<img src="{url}/{name}" alt="{html.escape(label)}">' for name in slider.files[key]
        )

    frames = {
        key_text(key): {
            "pictures": pictures(key),
            "caption": frame.caption,
            "text": frame.text,
        }
        for key, frame in slider.frames.items()
    }
    data = json.dumps(frames, ensure_ascii=False).replace("</", "<\\/")
    first = slider.frames[start]
    return (
        f'<div class="course-frames" data-slider="{slider.name}">{slider.heading}'
        f'<div class="course-frames-controls" hidden>{_controls_html(slider)}</div>'
        f'<div class="course-frames-caption">{first.caption}</div>'
        f'<div class="course-frames-pictures" aria-live="polite">{pictures(start)}</div>'
        f'<pre class="course-frames-text">{html.escape(first.text)}</pre>{slider.legend}'
        f'<script type="application/json" class="course-frames-data">{data}</script></div>'
    )
