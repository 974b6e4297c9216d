"""Pictures of what a GPT computes: attention maps, loss curves, probability bars, embeddings.

Every function takes plain tensors or lists (never a model) and returns a matplotlib `Figure`.
Nothing here calls `plt.show()`: in a notebook the figure is shown by being the last expression
of a cell (or by `display(fig)`). Each figure is closed in pyplot right after it is created, so
the notebook's inline backend does not draw it a second time at the end of the cell.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text

from gptlib.language import N_, _

FIGSIZE = (6.0, 3.6)  # one compact size for every single-panel figure in the course
PANEL = 2.4  # inches per panel in a grid of attention maps
MAX_GRID_COLUMNS = 4  # a single row of more heads than this wraps onto several rows
HIGHLIGHT = "tab:orange"
# Reference lines in loss plots: each its own colour and dash, never the grey of ln V.
BASELINE_COLORS = ("tab:green", "tab:red", "tab:purple", "tab:brown")
BASELINE_STYLES = ("--", "-.", ":", (0, (5, 1)))
PLAIN = "tab:blue"


# ---------------------------------------------------------------------------------------------
# Fonts: Latin text in matplotlib's own DejaVu fonts, as always; a character DejaVu lacks (the
# Chinese of the Tang poems in notebook 08, of the zh notebooks) is drawn, glyph by glyph, from
# the CJK font of Debian's fonts-noto-cjk. matplotlib (3.6 and later) takes a list of families
# and falls back along it for each glyph the first one does not have.

CJK_FONT = "Noto Sans CJK SC"
CJK_FONT_PACKAGE = "fonts-noto-cjk"
_CJK_FILE_PREFIX = "NotoSansCJK"  # NotoSansCJK-Regular.ttc, NotoSansCJK-Bold.ttc, ...


def _cjk_font_found() -> bool:
    """Whether matplotlib can draw with CJK_FONT. matplotlib lists the system's fonts once and
    caches the list, so a font installed after that is not in it: its files are added here."""

    def listed() -> bool:
        return any(font.name == CJK_FONT for font in font_manager.fontManager.ttflist)

    if not listed():
        for path in font_manager.findSystemFonts():
            if Path(path).name.startswith(_CJK_FILE_PREFIX):
                font_manager.fontManager.addfont(path)
    return listed()


CJK_FONT_FOUND = _cjk_font_found()
_WITH_CJK = [CJK_FONT] if CJK_FONT_FOUND else []
TEXT_FONTS = ["sans-serif", *_WITH_CJK]  # "sans-serif" is matplotlib's default: DejaVu Sans
MONO_FONTS = ["DejaVu Sans Mono", *_WITH_CJK]  # the tick labels: l, i and | look different
if CJK_FONT_FOUND and matplotlib.rcParams["font.family"] == ["sans-serif"]:
    # Titles, axis labels, legends and notes use the default family: give it the fallback,
    # unless the reader chose another family.
    matplotlib.rcParams["font.family"] = TEXT_FONTS

_CJK_CHARACTERS = re.compile(
    "[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003ffff]"
)
_CJK_MISSING = N_(
    "this figure has Chinese (CJK) characters, but matplotlib finds no 'Noto Sans CJK SC' font, so "
    "they are drawn as empty boxes; install Debian's fonts-noto-cjk package "
    "(`sudo apt-get install fonts-noto-cjk`) and restart Python"
)
_cjk_missing_said = False


def _say_if_cjk_missing(event) -> None:
    """After a figure is drawn without the CJK font: say once what is missing, if it had CJK."""
    global _cjk_missing_said
    if _cjk_missing_said:
        return
    texts = (t.get_text() for t in event.canvas.figure.findobj(Text))
    if any(_CJK_CHARACTERS.search(text) for text in texts):
        _cjk_missing_said = True
        warnings.warn(_(_CJK_MISSING), UserWarning, stacklevel=2)


def _watch_fonts(fig: Figure) -> Figure:
    """Without the CJK font, have `fig` say so when it is drawn with Chinese characters."""
    if not CJK_FONT_FOUND:
        fig.canvas.mpl_connect("draw_event", _say_if_cjk_missing)
    return fig


def _new_figure(nrows: int = 1, ncols: int = 1, figsize=FIGSIZE) -> tuple[Figure, np.ndarray]:
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    plt.close(fig)  # drop pyplot's reference: the caller shows the figure once, by returning it
    return _watch_fonts(fig), axes


def _array(values) -> np.ndarray:
    """Any tensor / list / array as a float numpy array on the CPU."""
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", torch.float64).numpy()
    return np.asarray(values, dtype=np.float64)


def _labels(tokens: str | Sequence[str], n: int) -> list[str]:
    labels = list(tokens)
    if len(labels) != n:
        said = _("got {count} token labels for a {n} x {n} attention map")
        raise ValueError(said.format(count=len(labels), n=n))
    return [str(t) for t in labels]


def _highlighted(highlight, labels: Sequence[str]) -> set[int]:
    """Positions to colour: `highlight` may be an index, a label, or a list of either."""
    if highlight is None:
        return set()
    items = highlight if isinstance(highlight, (list, tuple, set)) else [highlight]
    out = set()
    for item in items:
        if isinstance(item, str):
            if item not in labels:
                said = _("highlight {item} is not one of the labels").format(item=repr(item))
                raise ValueError(said)
            out.add(list(labels).index(item))
        else:
            out.add(int(item))
    return out


# ---------------------------------------------------------------------------------------------
# Attention


def masked_future(weights) -> np.ndarray:
    """The weights as an array with NaN where a query may not look (above the diagonal, where
    the causal mask left an exact 0), so the picture shows those cells empty, not as 'zero'.

    Not taught in a notebook: the masking every attention plot applies."""
    w = _array(weights).copy()  # [..., n, n]
    future = np.triu(np.ones(w.shape[-2:], dtype=bool), k=1)  # True above the diagonal
    w[np.broadcast_to(future, w.shape) & (w == 0)] = np.nan
    return w


def _attention_cmap():
    return plt.get_cmap("viridis").with_extremes(bad="white")  # NaN = masked future: empty paper


def position_labels(tokens: Sequence[str], bos: str | None = ".") -> list[str]:
    """Tick labels that tell repeated letters apart and make the start symbol visible:
    '.olivia' -> ['BOS 0', 'o 1', 'l 2', 'i 3', 'v 4', 'i 5', 'a 6'].

    Taught in notebook 02 (qkv)."""
    return [f"{'BOS' if bos is not None and t == bos else t} {i}" for i, t in enumerate(tokens)]


TICK_FONT = {"family": MONO_FONTS, "size": 9}  # monospace: l, i and | look different
ANNOTATE_UP_TO = 10  # maps with at most this many positions print each weight in its cell


def _draw_attention(
    ax: Axes, weights: np.ndarray, labels: list[str], xticks=True, yticks=True, annotate=False
):
    n = weights.shape[-1]
    im = ax.imshow(weights, cmap=_attention_cmap(), vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks(range(n), labels if xticks else [""] * n, fontdict=TICK_FONT, rotation=90)
    ax.set_yticks(range(n), labels if yticks else [""] * n, fontdict=TICK_FONT)
    ax.tick_params(length=0)
    if annotate and n <= ANNOTATE_UP_TO:
        for i in range(n):
            for j in range(n):
                if np.isnan(weights[i, j]):
                    continue  # the masked future stays empty
                colour = "black" if weights[i, j] > 0.6 else "white"  # readable on viridis
                ax.text(
                    j,
                    i,
                    f"{weights[i, j]:.2f}"[1:] if weights[i, j] < 1 else "1",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color=colour,
                )
    return im


def _one_map(weights, tokens, caller: str) -> tuple[np.ndarray, list[str]]:
    w = _array(weights)
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        said = _("{caller} wants one [n, n] map, got shape {shape}")
        raise ValueError(said.format(caller=caller, shape=tuple(w.shape)))
    return w, position_labels(_labels(tokens, w.shape[0]))


def plot_attention(weights, tokens, title: str | None = None, ax: Axes | None = None) -> Figure:
    """One attention map. weights: [n, n], row = query position, column = key position;
    tokens: str or list of n symbols labelling both axes, shown with their positions ('i 3').
    Maps of up to 10 positions print each weight in its cell.

    Taught in notebook 03 (scaled attention)."""
    w, labels = _one_map(weights, tokens, "plot_attention")
    if ax is None:
        fig, axes = _new_figure(figsize=(5.8, 5.0))
        ax = axes[0, 0]
    else:
        fig = ax.figure
    im = _draw_attention(ax, masked_future(w), labels, annotate=True)
    ax.set_xlabel(_("key: the token looked at"))
    ax.set_ylabel(_("query: the token looking"))
    ax.set_title(title or _("Attention weights (white = masked future)"))
    fig.colorbar(im, ax=ax, label=_("attention weight (0 to 1)"))
    return fig


def plot_attention_panel(weights, tokens, title: str) -> Figure:
    """One attention map drawn small (about 2 inches, no colour bar, tokens on both axes), for
    showing many heads side by side as separate pictures. weights: [n, n]. The colour scale is
    fixed at 0 to 1, as in every attention picture here, so panels can be compared by eye.

    Not taught in a notebook: one panel of the attention widgets."""
    w, labels = _one_map(weights, tokens, "plot_attention_panel")
    fig, axes = _new_figure(figsize=(PANEL + 0.3, PANEL + 0.3))
    ax = axes[0, 0]
    _draw_attention(ax, masked_future(w), labels)
    ax.set_title(title, fontsize=9)
    return fig


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes (for an image widget).

    Not taught in a notebook: the widgets show figures as PNG images."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def plot_attention_grid(
    weights, tokens, title: str | None = None, layer_names: Sequence[str] | None = None
) -> Figure:
    """Many heads at once. weights: [h, n, n] (one row of heads) or [L, h, n, n] (one row per
    layer, one column per head). A single row of more than 4 heads wraps onto rows of 4.

    Taught in notebook 04 (multi head)."""
    w = _array(weights)
    if w.ndim == 3:
        w = w[None]  # [1, h, n, n]
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        said = _("plot_attention_grid wants [h, n, n] or [L, h, n, n], got {shape}")
        raise ValueError(said.format(shape=w.shape))
    L, h, n, _n = w.shape
    labels = position_labels(_labels(tokens, n))
    if layer_names is not None and len(layer_names) != L:
        said = _("got {count} layer names for {L} layers")
        raise ValueError(said.format(count=len(layer_names), L=L))
    # Panels in reading order: layer by layer, head by head.
    panels = [(layer, head) for layer in range(L) for head in range(h)]
    ncols = h if (L > 1 or h <= MAX_GRID_COLUMNS) else MAX_GRID_COLUMNS
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _new_figure(nrows, ncols, figsize=(PANEL * ncols + 1.0, PANEL * nrows + 0.6))
    shown = masked_future(w)
    im = None
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_axis_off()
            continue
        layer, head = panels[i]
        row, col = divmod(i, ncols)
        im = _draw_attention(
            ax, shown[layer, head], labels, xticks=row == nrows - 1, yticks=col == 0
        )
        if layer_names is not None:
            name = layer_names[layer]
        else:
            name = _("layer {layer}").format(layer=layer)
        if L > 1:
            panel_title = _("{name}, head {head}").format(name=name, head=head)
        else:
            panel_title = _("head {head}").format(head=head)
        ax.set_title(panel_title, fontsize=9)
    fig.supxlabel(_("key: the token looked at"), fontsize=9)
    fig.supylabel(_("query: the token looking"), fontsize=9)
    fig.suptitle(title or _("Attention weights, {L} layer(s) x {h} head(s)").format(L=L, h=h))
    fig.colorbar(im, ax=axes.ravel().tolist(), label=_("attention weight"), shrink=0.8)
    return fig


# ---------------------------------------------------------------------------------------------
# Matrices, curves and bars


def plot_heatmap(
    matrix,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    cbar_label: str | None = None,
    cmap: str = "viridis",
    center_zero: bool = False,
    annotate: bool = False,
) -> Figure:
    """Any 2-D tensor as coloured cells (an embedding table, q.k scores, a weight matrix).

    center_zero: symmetric colour limits around 0, and a diverging colour map (red above zero,
    blue below) unless another `cmap` is given: signs are then visible at a glance.

    Taught in notebook 01 (embeddings)."""
    m = _array(matrix)
    if m.ndim != 2:
        raise ValueError(
            _("plot_heatmap wants a 2-D matrix, got shape {shape}").format(shape=m.shape)
        )
    fig, axes = _new_figure()
    ax = axes[0, 0]
    limits = {}
    if center_zero:
        bound = float(np.nanmax(np.abs(m))) or 1.0
        limits = {"vmin": -bound, "vmax": bound}
        cmap = "RdBu_r" if cmap == "viridis" else cmap
    im = ax.imshow(m, cmap=cmap, aspect="auto", interpolation="nearest", **limits)
    for labels, set_ticks, size in (
        (row_labels, ax.set_yticks, m.shape[0]),
        (col_labels, ax.set_xticks, m.shape[1]),
    ):
        if labels is not None:
            if len(labels) != size:
                said = _("got {count} labels for {size} rows/columns")
                raise ValueError(said.format(count=len(labels), size=size))
            set_ticks(range(size), [str(s) for s in labels], fontdict=TICK_FONT)
    if annotate:
        for (r, c), value in np.ndenumerate(m):
            ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6, color="white")
    ax.set_title(
        title or _("Matrix [{rows}, {columns}]").format(rows=m.shape[0], columns=m.shape[1])
    )
    ax.set_xlabel(xlabel or _("column (0..{last})").format(last=m.shape[1] - 1))
    ax.set_ylabel(ylabel or _("row (0..{last})").format(last=m.shape[0] - 1))
    fig.colorbar(im, ax=ax, label=cbar_label or _("value"))
    return fig


def plot_curves(
    x,
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    logy: bool = False,
    hlines: Mapping[str, float] | None = None,
    styles: Mapping[str, dict] | None = None,
) -> Figure:
    """Several y(x) curves on one axes. ys: label -> values (as long as x), or a 2-D array
    [runs, len(x)] of several runs (seeds) of one setting: each run drawn thin, their mean bold,
    one legend entry; hlines: label -> y, reference lines across, each with its own colour and
    dash; styles: label -> extra keyword arguments for that curve's `plot`.

    Taught in notebook 03 (scaled attention)."""
    fig, axes = _new_figure()
    _draw_curves(axes[0, 0], x, ys, xlabel, ylabel, title, logx, logy, hlines, styles)
    return fig


def plot_curve_panels(
    x, panels: Sequence[Mapping], xlabel: str, title: str, logx: bool = False
) -> Figure:
    """Curves over the same x in panels side by side, one y-axis per panel, so quantities in
    different units never share an axis. panels: one mapping per panel with the keys `ys` and
    `ylabel` and, optionally, `title`, `logy`, `hlines` and `styles` (as in `plot_curves`).

    Taught in notebook 03 (scaled attention)."""
    if not panels:
        raise ValueError(_("plot_curve_panels wants at least one panel"))
    fig, axes = _new_figure(1, len(panels), figsize=(FIGSIZE[0] / 1.5 * len(panels), FIGSIZE[1]))
    for ax, panel in zip(axes[0], panels, strict=True):
        unknown = set(panel) - {"ys", "ylabel", "title", "logy", "hlines", "styles"}
        if unknown:
            raise ValueError(_("unknown panel keys {keys}").format(keys=sorted(unknown)))
        _draw_curves(
            ax,
            x,
            panel["ys"],
            xlabel,
            panel["ylabel"],
            panel.get("title", ""),
            logx,
            panel.get("logy", False),
            panel.get("hlines"),
            panel.get("styles"),
        )
    fig.suptitle(title)
    return fig


def _draw_curves(ax: Axes, x, ys, xlabel, ylabel, title, logx, logy, hlines, styles) -> None:
    xs = _array(x)
    for i, (label, values) in enumerate(ys.items()):
        values = _array(values)
        if values.shape[-1] != len(xs):
            said = _("curve {label} has {count} values for {n} x values")
            raise ValueError(said.format(label=repr(label), count=values.shape[-1], n=len(xs)))
        style = {"color": f"C{i}", **(styles or {}).get(label, {})}
        if values.ndim == 2:  # [runs, len(x)]: each run thin, their mean bold, one legend entry
            for run in values:
                ax.plot(xs, run, **{**style, "linewidth": 0.7, "alpha": 0.45})
            values = values.mean(axis=0)
        ax.plot(xs, values, label=label, **style)
    # Reference lines: each its own dash and a colour no curve uses, so labels can be told apart.
    for j, (label, y) in enumerate((hlines or {}).items()):
        dash = BASELINE_STYLES[j % len(BASELINE_STYLES)]
        ax.axhline(float(y), linestyle=dash, color=f"C{len(ys) + j}", linewidth=1.2, label=label)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _draw_bars(ax: Axes, values: np.ndarray, labels: Sequence[str], highlight=None) -> None:
    labels = [str(s) for s in labels]
    if len(labels) != len(values):
        said = _("got {count} labels for {n} bars")
        raise ValueError(said.format(count=len(labels), n=len(values)))
    marked = _highlighted(highlight, labels)
    colors = [HIGHLIGHT if i in marked else PLAIN for i in range(len(values))]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, fontsize=8 if len(values) <= 30 else 6)
    ax.grid(axis="y", alpha=0.3)


def plot_bars(
    values,
    labels: Sequence[str],
    title: str,
    ylabel: str,
    xlabel: str | None = None,
    highlight=None,
) -> Figure:
    """One bar per label; `highlight` (an index, a label or a list of them) is drawn in orange.

    Taught in notebook 00 (data and tokens)."""
    fig, axes = _new_figure()
    ax = axes[0, 0]
    _draw_bars(ax, _array(values).reshape(-1), labels, highlight)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel)
    return fig


def plot_next_token_probs(
    probs,
    labels: Sequence[str],
    title: str | None = None,
    temperature: float | None = None,
    highlight=None,
) -> Figure:
    """The next-token distribution: probs [V] over the V symbols in `labels`.

    Taught in notebook 12 (generation)."""
    p = _array(probs).reshape(-1)
    fig, axes = _new_figure()
    ax = axes[0, 0]
    _draw_bars(ax, p, labels, highlight)
    ax.set_ylim(0, max(1e-9, float(p.max())) * 1.1)
    heading = title or _("Next-token probabilities")
    if temperature == 0:
        heading = _("{title} (greedy, temperature 0)").format(title=heading)
    elif temperature is not None:
        said = _("{title} (temperature {temperature})")
        heading = said.format(title=heading, temperature=f"{temperature:g}")
    ax.set_title(heading)
    ax.set_xlabel(_("next token"))
    ax.set_ylabel(_("probability"))
    return fig


def plot_next_token_probs_by_temperature(
    probs_by_temperature: Mapping[float, object],
    labels: Sequence[str],
    title: str | None = None,
) -> Figure:
    """Next-token distributions at several temperatures, one panel per temperature stacked on
    one shared y axis (0 to the largest probability of all), so that a flatter distribution
    looks flatter. probs_by_temperature: {temperature: probs [V]}; 0 is labelled greedy.

    Taught in notebook 08 (logits)."""
    if not probs_by_temperature:
        raise ValueError(_("give at least one temperature"))
    rows = [(t, _array(p).reshape(-1)) for t, p in probs_by_temperature.items()]
    top = max(max(1e-9, float(p.max())) for _t, p in rows)
    fig, axes = _new_figure(len(rows), 1, figsize=(FIGSIZE[0], 0.6 + 1.5 * len(rows)))
    for ax, (t, p) in zip(axes[:, 0], rows, strict=True):
        _draw_bars(ax, p, labels, highlight=int(p.argmax()))
        ax.set_ylim(0, top * 1.1)
        if t == 0:
            name = _("greedy, temperature 0")
        else:
            name = _("temperature {temperature}").format(temperature=f"{t:g}")
        ax.text(
            0.99,
            0.93,
            _("{name}: largest {largest}").format(name=name, largest=f"{p.max():.2f}"),
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=9,
        )
        ax.set_ylabel(_("probability"))
    axes[-1, 0].set_xlabel(_("next token (orange: the most likely)"))
    axes[0, 0].set_title(title or _("Next-token probabilities, one shared y axis"))
    return fig


# ---------------------------------------------------------------------------------------------
# Training curves


TRAINING_LOSS = N_("Training loss")  # the loss plots' default title


def uniform_loss(vocab_size: int) -> float:
    """ln V: the cross-entropy of a model that gives every symbol probability 1/V.

    Not taught in a notebook: the ln V reference line of the loss plots."""
    return math.log(vocab_size)


def _draw_loss(ax: Axes, history, vocab_size=None, title=TRAINING_LOSS, baseline=None) -> None:
    ax.plot(history.step, history.loss, label=_("train"), color=PLAIN, linewidth=1, alpha=0.8)
    if history.val_step:
        ax.plot(
            history.val_step, history.val_loss, "o-", label=_("val"), color=HIGHLIGHT, markersize=3
        )
    _draw_reference_lines(ax, vocab_size, baseline)
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("cross-entropy loss (nats per token)"))
    title = _(title)
    if getattr(history, "interrupted", False):
        title = _("{title} (interrupted)").format(title=title)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _draw_reference_lines(ax: Axes, vocab_size=None, baseline=None) -> None:
    """ln V in grey dashes (when vocab_size is given), then each baseline (label -> loss) in its
    own colour and dash, labelled with its value."""
    if vocab_size is not None:
        ax.axhline(
            uniform_loss(vocab_size),
            linestyle="--",
            color="gray",
            linewidth=1,
            label=_("uniform guess ln V"),
        )
    baselines = dict(baseline or {})
    if len(baselines) > len(BASELINE_COLORS):
        said = _("at most {most} baselines, got {count}")
        raise ValueError(said.format(most=len(BASELINE_COLORS), count=len(baselines)))
    for (label, y), color, style in zip(
        baselines.items(), BASELINE_COLORS, BASELINE_STYLES, strict=False
    ):
        ax.axhline(float(y), linestyle=style, color=color, linewidth=1.2, label=f"{label} {y:.2f}")


def plot_loss(
    history, vocab_size: int | None = None, title: str = TRAINING_LOSS, baseline=None
) -> Figure:
    """Train loss per step and val loss at its evaluation steps, from a `gptlib.train.History`.
    A dashed line marks ln V, the loss of a uniform guess: a model starts near it.

    Taught in notebook 10 (training loop)."""
    fig, axes = _new_figure()
    _draw_loss(axes[0, 0], history, vocab_size, title, baseline)
    return fig


def running_mean(values, window: int) -> np.ndarray:
    """The mean of each `window` consecutive values: len(values) - window + 1 of them.

    Taught in notebook 11 (when training goes wrong)."""
    v = _array(values).reshape(-1)
    if not 1 <= window <= len(v):
        said = _("window must be between 1 and {most}, got {window}")
        raise ValueError(said.format(most=len(v), window=window))
    sums = np.cumsum(np.concatenate([[0.0], v]))
    return (sums[window:] - sums[:-window]) / window


def plot_loss_runs(
    runs: Mapping[str, object],
    vocab_size: int | None = None,
    title: str = TRAINING_LOSS,
    baseline=None,
    smooth: int = 1,
    styles: Mapping[str, dict] | None = None,
) -> Figure:
    """The training loss of several runs on one axes, to compare them step for step.

    runs: label -> `gptlib.train.History`. With `smooth` > 1 each curve is the running mean of
    the last `smooth` steps (drawn at the last of them), so runs whose per-batch losses are noisy
    can be told apart. ln V and the baselines are drawn as in `plot_loss`; styles: label -> extra
    keyword arguments for that run's line (colour, dash).

    Taught in notebook 11 (when training goes wrong)."""
    if not runs:
        raise ValueError(_("plot_loss_runs needs at least one run"))
    fig, axes = _new_figure()
    ax = axes[0, 0]
    for label, history in runs.items():
        steps = _array(history.step)
        ax.plot(
            steps[smooth - 1 :],
            running_mean(history.loss, smooth),
            label=label,
            linewidth=1.2,
            **(styles or {}).get(label, {}),
        )
    _draw_reference_lines(ax, vocab_size, baseline)
    ax.set_xlabel(_("step"))
    if smooth > 1:
        ylabel = _("train loss, mean of the last {smooth} steps (nats)").format(smooth=smooth)
    else:
        ylabel = _("train loss (nats)")
    ax.set_ylabel(ylabel)
    ax.set_title(_(title))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def _display(fig: Figure):
    """Show a figure in a notebook and return the handle that updates it in place."""
    from IPython.display import display

    return display(fig, display_id=True)


class LiveLossPlot:
    """A loss plot that redraws in place while `train(..., callback=live)` runs.

        with LiveLossPlot(vocab_size=27) as live:
            history = train(model, tokens, steps=500, callback=live)

    Every `every` steps the figure is redrawn through one IPython display handle (so the cell
    shows one picture that changes, not hundreds). `finish()` (called on leaving the `with`,
    also after Ctrl-C) draws the final curve, leaves it in the cell as a static image and returns
    the Figure. Outside IPython the in-between redraws are skipped.

    Taught in notebook 10 (training loop).
    """

    def __init__(self, vocab_size: int | None = None, every: int = 25, baseline=None):
        if every < 1:
            raise ValueError(_("every must be >= 1, got {every}").format(every=every))
        self.vocab_size = vocab_size
        self.every = every
        self.baseline = baseline
        self.history = None  # the History last seen
        self.fig, axes = _new_figure()
        self.ax = axes[0, 0]
        self.handle = None  # IPython display handle, created at the first redraw
        self.redraws = 0
        self.interrupted = False

    def __call__(self, history) -> None:
        self.history = history
        if (len(history) - 1) % self.every == 0 and _in_ipython():
            self._redraw()

    def _redraw(self) -> None:
        self.ax.clear()
        if self.history is not None:
            if self.interrupted:
                title = _("Training loss (stopped by Ctrl-C)")
            else:
                title = _("Training loss")
            _draw_loss(self.ax, self.history, self.vocab_size, title, self.baseline)
        self.redraws += 1
        if _in_ipython():
            if self.handle is None:
                self.handle = _display(self.fig)
            else:
                self.handle.update(self.fig)

    def finish(self) -> Figure:
        """Draw the last state and return the Figure (already shown in a notebook: keep the
        return value, e.g. `fig = live.finish()`, rather than making it a cell's last line)."""
        self._redraw()
        return self.fig

    def __enter__(self) -> LiveLossPlot:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.interrupted = exc_type is KeyboardInterrupt
        self.finish()
        return False  # never swallow an exception


def plot_lr_schedule(steps, lrs, title: str = N_("Learning-rate schedule")) -> Figure:
    """Learning rate against step (e.g. from `gptlib.train.learning_rate`).

    Taught in notebook 10 (training loop)."""
    fig, axes = _new_figure()
    ax = axes[0, 0]
    ax.plot(_array(steps), _array(lrs), color=PLAIN)
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("learning rate"))
    ax.set_title(_(title))
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.grid(alpha=0.3)
    return fig


def plot_grad_norm(history, clip: float | None = None, title: str = N_("Gradient norm")) -> Figure:
    """The global gradient norm before clipping, per step; the clip threshold dashed (taken from
    `history.clip` unless given).

    Taught in notebook 10 (training loop)."""
    clip = clip if clip is not None else getattr(history, "clip", None)
    fig, axes = _new_figure()
    ax = axes[0, 0]
    ax.plot(
        history.step, history.grad_norm, color=PLAIN, linewidth=1, label=_("norm before clipping")
    )
    if clip is not None:
        ax.axhline(
            float(clip),
            linestyle="--",
            color="tab:red",
            linewidth=1,
            label=f"clip = {clip:g}",  # a setting, the same in every language
        )
    ax.set_xlabel(_("step"))
    ax.set_ylabel(_("global L2 norm of all gradients"))
    ax.set_title(_(title))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# ---------------------------------------------------------------------------------------------
# Embeddings


def pca_2d(weight) -> torch.Tensor:
    """The rows of a [V, d] table projected on its two main directions: [V, 2].

    Centre the rows, take the SVD, keep the first two right-singular vectors. Each direction's
    sign is fixed (its largest component positive) so the picture does not flip between runs.

    Taught in notebook 01 (embeddings)."""
    w = torch.as_tensor(weight).detach().to("cpu", torch.float64)
    if w.dim() != 2 or w.size(1) < 2:
        said = _("pca_2d wants a [V, d] table with d >= 2, got {shape}")
        raise ValueError(said.format(shape=tuple(w.shape)))
    centred = w - w.mean(dim=0, keepdim=True)  # [V, d]
    _u, _s, vh = torch.linalg.svd(centred, full_matrices=False)  # rows of vh: directions in R^d
    directions = vh[:2]  # [2, d]
    biggest = directions.abs().argmax(dim=1)
    signs = directions.gather(1, biggest[:, None]).sign()  # [2, 1]
    return centred @ (directions * signs).T  # [V, 2]


def plot_embeddings_2d(weight, labels: Sequence[str], title: str | None = None) -> Figure:
    """A [V, d] embedding table as V labelled points in 2-D (PCA through the SVD).

    Taught in notebook 01 (embeddings)."""
    w = torch.as_tensor(weight).detach().to("cpu", torch.float64)
    if len(labels) != w.size(0):
        said = _("got {count} labels for {rows} rows")
        raise ValueError(said.format(count=len(labels), rows=w.size(0)))
    xy = pca_2d(w).numpy()  # [V, 2]
    centred = w - w.mean(dim=0, keepdim=True)
    s = torch.linalg.svdvals(centred)
    share = (s**2 / (s**2).sum()).tolist()  # fraction of the spread each direction explains
    fig, axes = _new_figure(figsize=(FIGSIZE[0], FIGSIZE[0] * 0.75))
    ax = axes[0, 0]
    ax.scatter(xy[:, 0], xy[:, 1], s=12, color=PLAIN)
    for (px, py), label in zip(xy, labels, strict=True):
        ax.annotate(str(label), (px, py), xytext=(3, 3), textcoords="offset points", fontsize=9)
    ax.set_xlabel(_("direction 1 ({share} of the spread)").format(share=f"{share[0]:.0%}"))
    ax.set_ylabel(_("direction 2 ({share} of the spread)").format(share=f"{share[1]:.0%}"))
    said = _("Embedding table [{rows}, {columns}] projected to 2-D (PCA)")
    ax.set_title(title or said.format(rows=w.size(0), columns=w.size(1)))
    ax.grid(alpha=0.3)
    return fig


def plot_ladder(
    names: Sequence[str],
    losses,
    baselines: Mapping[str, float] | None = None,
    title: str = N_("What each piece buys"),
) -> Figure:
    """One loss per rung of a ladder of models, left to right as pieces are added, each point
    labelled with its value; baselines (label -> loss) are reference lines, each its own colour
    and dash.

    Taught in notebook 14 (your gpt)."""
    values = _array(losses)
    if values.ndim != 1 or len(names) != len(values):
        said = _("got {count} names for losses of shape {shape}")
        raise ValueError(said.format(count=len(names), shape=values.shape))
    fig, axes = _new_figure()
    ax = axes[0, 0]
    xs = np.arange(len(values))
    ax.plot(xs, values, "o-", color=PLAIN, label=_("validation loss"))
    for x, v in zip(xs, values, strict=True):
        ax.annotate(
            f"{v:.2f}", (x, v), xytext=(0, 6), textcoords="offset points", ha="center", fontsize=8
        )
    _draw_reference_lines(ax, baseline=baselines)
    ax.set_xticks(xs, [str(n) for n in names], fontsize=8)
    ax.set_xlabel(_("pieces added, left to right"))
    ax.set_ylabel(_("validation loss (nats per token)"))
    ax.set_title(_(title))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


# --- the model at a glance ----------------------------------------------------------------------

# The boxes of the diagram, bottom to top: key -> (label, the notebook that teaches it).
DIAGRAM_PARTS: dict[str, tuple[str, str]] = {
    "data": (N_("text → token ids, windows"), "00"),
    "embeddings": (N_("token + position embeddings"), "01"),
    "norm1": (N_("norm"), "06"),
    "qkv": (N_("Q, K, V projections"), "02"),
    "attention": (N_("scores, 1/√d_h, causal mask, softmax"), "03"),
    "heads": (N_("h heads side by side, W_O"), "04"),
    "residual1": (N_("+ residual"), "05"),
    "norm2": (N_("norm"), "06"),
    "mlp": (N_("MLP  d → 4d → d"), "07"),
    "residual2": (N_("+ residual"), "05"),
    "final_norm": (N_("final norm"), "06"),
    "logits": (N_("output head → logits"), "08"),
    "loss": (N_("loss (training)"), "09"),
    "generation": (N_("next token (sampling)"), "12"),
}
# The parts a notebook is about (its "you are here"), by notebook number.
NOTEBOOK_PARTS: dict[str, tuple[str, ...]] = {
    "00": ("data",),
    "01": ("embeddings",),
    "02": ("qkv",),
    "03": ("attention",),
    "04": ("qkv", "attention", "heads"),
    "05": ("residual1", "residual2"),
    "06": ("norm1", "norm2", "final_norm"),
    "07": ("mlp",),
    "08": ("logits",),
    "09": ("loss",),
    "10": ("loss",),
    "11": ("loss",),
    "12": ("generation",),
    "13": ("qkv", "attention", "generation"),
    "14": tuple(DIAGRAM_PARTS),
    "15": ("data",),
    "16": tuple(DIAGRAM_PARTS),
}
# Notes drawn beside the diagram: what a notebook adds that is not a box of its own.
NOTEBOOK_NOTES: dict[str, str] = {
    "10": N_("training: the loss's gradient moves every weight (AdamW, schedule, clipping)"),
    "11": N_("what goes wrong in training, one failure at a time"),
    "13": N_("KV cache: keys and values kept between decoding steps"),
    "14": N_("your own GPT: every box, from plain tensors"),
    "15": N_("BPE: bytes → merges → GPT-2's 50,257 tokens"),
    "16": N_("GPT-2: the same boxes, 12 blocks of d = 768"),
}


# Where the boxes sit, in data units of the diagram's axes (x from 0 to 10, one row per box).
_DIAGRAM_LEFT, _DIAGRAM_WIDTH, _DIAGRAM_BOX_HEIGHT = 1.2, 5.6, 0.66


def _diagram_highlight(notebook: str | None, highlight: Sequence[str]) -> Sequence[str]:
    """The boxes to highlight: those `notebook` builds, else `highlight`, each a known part."""
    if notebook is not None:
        if notebook not in NOTEBOOK_PARTS:
            said = _("unknown notebook {notebook}; the notebooks are {notebooks}")
            raise ValueError(
                said.format(notebook=repr(notebook), notebooks=", ".join(NOTEBOOK_PARTS))
            )
        highlight = NOTEBOOK_PARTS[notebook]
    unknown = [h for h in highlight if h not in DIAGRAM_PARTS]
    if unknown:
        said = _("unknown part(s) {unknown}; the parts are {parts}")
        raise ValueError(
            said.format(unknown=", ".join(map(repr, unknown)), parts=", ".join(DIAGRAM_PARTS))
        )
    return highlight


def _diagram_rows() -> tuple[list[str], dict[str, tuple[int, float, float]]]:
    """The keys with a row of their own, bottom to top, and where each box sits: key -> (row,
    x from, x to) as shares of the width. The loss (training) and sampling (generation) share
    the top row: both read the logits."""
    keys = [k for k in DIAGRAM_PARTS if k != "generation"]
    rows = {k: (i, 0.0, 1.0) for i, k in enumerate(keys)}
    top = len(keys) - 1
    rows["loss"] = (top, 0.0, 0.49)
    rows["generation"] = (top, 0.51, 1.0)
    return keys, rows


def _draw_block_frame(ax: Axes, first: int, last: int) -> None:
    """The dashed frame around the rows of one transformer block, marked × L: it repeats."""
    x0, width, height = _DIAGRAM_LEFT, _DIAGRAM_WIDTH, _DIAGRAM_BOX_HEIGHT
    ax.add_patch(
        plt.Rectangle(
            (x0 - 0.25, first - 0.12),
            width + 0.5,
            last - first + height + 0.24,
            fill=False,
            linestyle="--",
            edgecolor="0.45",
            linewidth=1.0,
        )
    )
    ax.text(
        x0 + width + 0.35,
        (first + last + height) / 2,
        _("block\n× L"),
        va="center",
        fontsize=9,
        color="0.3",
    )


def _draw_part(
    ax: Axes, key: str, row: tuple[int, float, float], on: bool, arrow_from_below: bool
) -> None:
    """One box of the diagram: what it computes, the notebook that teaches it (bottom right),
    orange and bold when `on`, and an arrow into it from the row below."""
    label, where = DIAGRAM_PARTS[key]
    x0, width, height = _DIAGRAM_LEFT, _DIAGRAM_WIDTH, _DIAGRAM_BOX_HEIGHT
    i, a, b = row
    left, w = x0 + a * width, (b - a) * width
    ax.add_patch(
        plt.Rectangle(
            (left, i),
            w,
            height,
            facecolor=HIGHLIGHT if on else "0.93",
            edgecolor="0.2" if on else "0.6",
            linewidth=1.6 if on else 0.8,
        )
    )
    ax.text(
        left + 0.12,
        i + height / 2,
        _(label),
        va="center",
        fontsize=9,
        fontweight="bold" if on else "normal",
        gid=f"part:{key}",
        wrap=True,
    )
    ax.text(left + w - 0.1, i + 0.12, where, va="bottom", ha="right", fontsize=7, color="0.35")
    if arrow_from_below:
        ax.annotate(
            "",
            (x0 + width / 2, i),
            (x0 + width / 2, i - 1 + height),
            arrowprops={"arrowstyle": "->", "color": "0.4", "lw": 0.8},
        )


def _draw_residual_stream(ax: Axes, keys: list[str]) -> None:
    """The residual path on the left, in green: from the embeddings past each + residual."""
    x0, height = _DIAGRAM_LEFT, _DIAGRAM_BOX_HEIGHT
    for a, b in (("embeddings", "residual1"), ("residual1", "residual2")):
        ia, ib = keys.index(a), keys.index(b)
        xr = x0 - 0.6
        ax.plot(
            [x0, xr, xr, x0],
            [ia + height / 2, ia + height / 2, ib + height / 2, ib + height / 2],
            color="tab:green",
            lw=1.0,
        )
    ax.text(
        x0 - 0.75,
        (keys.index("residual1") + 1) / 2 + 1.3,
        _("residual\nstream"),
        rotation=90,
        va="center",
        ha="center",
        fontsize=8,
        color="tab:green",
    )


def _draw_diagram_captions(ax: Axes, rows: int, notebook: str | None) -> None:
    """The title above the boxes (naming `notebook`, if given) and its note below them."""
    if notebook is None:
        title = _("The GPT of this course")
    else:
        title = _("The GPT of this course: notebook {notebook} (highlighted)")
        title = title.format(notebook=notebook)
    ax.text(5, rows + 0.45, title, ha="center", fontsize=11)
    note = NOTEBOOK_NOTES.get(notebook or "")
    if note:
        ax.text(5, -0.4, _(note), ha="center", fontsize=9, style="italic", color="0.25")


def plot_model_diagram(notebook: str | None = None, highlight: Sequence[str] = ()) -> Figure:
    """The GPT of this course as a stack of boxes, bottom (text) to top (next token), each box
    labelled with what it computes and the notebook that teaches it. `notebook` ("03") highlights
    what that notebook builds ("you are here"); `highlight` names boxes (keys of DIAGRAM_PARTS)
    to highlight instead. The block (norm → attention → residual → norm → MLP → residual) is
    framed and marked × L: it repeats.

    Taught in notebook 00 (data and tokens)."""
    highlight = _diagram_highlight(notebook, highlight)
    keys, rows = _diagram_rows()
    fig = _watch_fonts(plt.figure(figsize=(6.4, 5.6)))
    plt.close(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(keys) + 0.9)
    ax.axis("off")
    _draw_block_frame(ax, keys.index("norm1"), keys.index("residual2"))
    for key in DIAGRAM_PARTS:
        row = rows[key][0]
        # One arrow into every row but the bottom one: the top row's two boxes share it.
        arrow = row > 0 and key != "generation"
        _draw_part(ax, key, rows[key], on=key in highlight, arrow_from_below=arrow)
    _draw_residual_stream(ax, keys)
    _draw_diagram_captions(ax, len(keys), notebook)
    return fig
