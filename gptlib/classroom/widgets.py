"""Sliders for the notebooks: move a control, watch a distribution or an attention map change.

Each function returns an ipywidgets container whose controls and last results are attributes
(`w.temperature`, `w.probs`, ...). Setting a control's `.value` in plain Python redraws exactly
as dragging it does, which is how the tests drive them without a browser. Each widget draws once
when built, so a static view of a saved notebook shows something.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping

import ipywidgets as W
import torch
from IPython.display import display

from gptlib.checkpoint import Checkpoint, load_checkpoint
from gptlib.classroom import viz
from gptlib.config import GPTConfig
from gptlib.generate import generate, next_token_probs, sample_documents
from gptlib.language import _
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer

# ipywidgets gives descriptions a fixed narrow column; "initial" lets a label show in full.
_WIDE = {"description_width": "initial"}


class _Explorer(W.VBox):
    """An explorer's box. Where no widget can be drawn (a page without the notebook's kernel, a
    terminal) it says what it is in the reader's language instead of its repr
    (`VBox(children=(HBox(...`)."""

    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs)
        if data:
            data["text/plain"] = _(
                "An interactive figure: its sliders work when the notebook runs in Jupyter."
            )
        return data


def _show(out: W.Output, *items) -> None:
    """Replace what an Output widget shows: strings are printed, anything else displayed."""
    with out:
        out.clear_output(wait=True)  # wait: no flicker, the old picture stays until the new one
        for item in items:
            if isinstance(item, str):
                print(item)
            else:
                display(item)


@torch.no_grad()
def _last_logits(model: GPT, ids: list[int]) -> torch.Tensor:
    """The logits for the token after `ids`: [V]."""
    was_training = model.training
    model.eval()
    try:
        idx = torch.tensor([ids], dtype=torch.long, device=model.lm_head.weight.device)
        logits, _loss = model(idx)  # [1, n, V]
    finally:
        model.train(was_training)
    return logits[0, -1].cpu()


# ---------------------------------------------------------------------------------------------
# Temperature and top-k


def _samples(
    model: GPT,
    tokenizer: CharTokenizer,
    ids: list[int],
    num: int,
    max_len: int,
    temperature: float,
    top_k: int | None,
    seed: int,
) -> list[str]:
    """`num` continuations of the context, drawn with a generator seeded afresh each time, so
    the same settings always give the same samples and only the settings change them."""
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed)
    bos = tokenizer.bos_id
    if bos is not None and ids == [bos]:  # a fresh document: exactly gptlib's name sampler
        return sample_documents(
            model, tokenizer, num, max_len, temperature=temperature, top_k=top_k, generator=g
        )
    start = torch.tensor([ids] * num, dtype=torch.long, device=model.lm_head.weight.device)
    out = generate(
        model, start, max_len, temperature=temperature, top_k=top_k, generator=g, stop_token=bos
    )
    texts = []
    for row in out[:, len(ids) :].tolist():
        cut = row.index(bos) if bos is not None and bos in row else len(row)
        texts.append(tokenizer.decode(ids + row[:cut]))
    return texts


def _temperature_controls(vocab_size: int) -> W.VBox:
    """The explorer's box: a temperature slider (0 to 2) and a top-k slider (0 = off, up to the
    vocabulary) above the plot and the samples, each an attribute of the box."""
    temperature = W.FloatSlider(
        value=1.0,
        min=0.0,
        max=2.0,
        step=0.05,
        description=_("temperature"),
        readout_format=".2f",
        style=_WIDE,
    )
    top_k = W.IntSlider(
        value=0, min=0, max=vocab_size, step=1, description=_("top-k (0=off)"), style=_WIDE
    )
    plot_output, samples_output = W.Output(), W.Output()
    box = _Explorer([W.HBox([temperature, top_k]), plot_output, samples_output])
    # CSS classes name the parts on the page (for styling, and for the browser tests).
    box.add_class("gptlib-temperature-explorer")
    plot_output.add_class("gptlib-probs")
    samples_output.add_class("gptlib-samples")
    box.temperature, box.top_k = temperature, top_k
    box.plot_output, box.samples_output = plot_output, samples_output
    return box


def _draw_temperature(
    box: W.VBox, context: str, symbols: list[str], seed: int, t: float, k: int | None
) -> None:
    """Show `box.probs` as bars (the greedy choice in orange) and `box.samples` as a line."""
    if k:
        said = _("After {context}: next-token probabilities, top-{k}")
    else:
        said = _("After {context}: next-token probabilities")
    title = said.format(context=repr(context), k=k)
    top = int(box.probs.argmax())
    box.figure = viz.plot_next_token_probs(box.probs, symbols, title, temperature=t, highlight=top)
    _show(box.plot_output, box.figure)
    if t == 0:
        mode = _("greedy (argmax), no randomness")
    elif k:
        mode = _("temperature {temperature}, top-{k}").format(temperature=f"{t:.2f}", k=k)
    else:
        mode = _("temperature {temperature}").format(temperature=f"{t:.2f}")
    said = _("{count} samples, seed {seed}, {mode}:")
    header = said.format(count=len(box.samples), seed=seed, mode=mode)
    box.samples_text = header + "\n" + "  ".join(box.samples)
    _show(box.samples_output, box.samples_text)


def temperature_explorer(
    model: GPT,
    tokenizer: CharTokenizer,
    context: str = ".",
    num_samples: int = 8,
    seed: int = 0,
    max_len: int = 20,
) -> W.VBox:
    """A temperature slider (0 = greedy, up to 2) and a top-k slider (0 = off) over the model's
    next-token distribution after `context`, plus `num_samples` samples drawn with a fixed seed.

    Attributes: .temperature, .top_k (sliders); .plot_output, .samples_output (Output widgets);
    .probs ([V], the distribution last drawn), .samples (list[str]), .samples_text (what the
    samples area shows), .figure.

    Taught in notebook 08 (logits)."""
    ids = tokenizer.encode(context)[-model.cfg.block_size :]  # crop to what the model can read
    if not ids:
        raise ValueError(_("the context is empty: give at least one character (e.g. the BOS '.')"))
    logits = _last_logits(model, ids)  # the context is fixed, so this is computed once
    box = _temperature_controls(logits.numel())

    def update(_change=None) -> None:
        t, k = float(box.temperature.value), int(box.top_k.value) or None
        box.probs = next_token_probs(logits, temperature=t, top_k=k)  # [V]; t == 0: one-hot
        box.samples = _samples(model, tokenizer, ids, num_samples, max_len, t, k, seed)
        _draw_temperature(box, tokenizer.decode(ids), list(tokenizer.itos), seed, t, k)

    box.temperature.observe(update, names="value")
    box.top_k.observe(update, names="value")
    update()
    return box


# ---------------------------------------------------------------------------------------------
# Heads and layers


def _context_ids(tokenizer: CharTokenizer, context: str, block_size: int) -> list[int]:
    """A name read as in training: after BOS. Cropped to the last `block_size` tokens."""
    ids = tokenizer.encode(context)  # raises ValueError for a character outside the vocabulary
    bos = tokenizer.bos_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos] + ids
    if not ids:
        raise ValueError(_("the context is empty: type at least one character"))
    return ids[-block_size:]


@torch.no_grad()
def _maps(ckpt: Checkpoint, ids: list[int]) -> torch.Tensor:
    """Every layer's attention for one context: [L, h, n, n]."""
    idx = torch.tensor([ids], dtype=torch.long, device=ckpt.model.lm_head.weight.device)
    return ckpt.model.attention_maps(idx)[:, 0].cpu()  # [L, B=1, h, n, n] -> [L, h, n, n]


def _heads_controls(counts: list[int], context: str) -> W.VBox:
    """The explorer's box: a heads slider over the head counts (set at 4 where there is such a
    model) and the context's text field, above the caption, the maps and a legend. Every result
    attribute starts as None."""
    heads = W.SelectionSlider(
        options=[(str(h), h) for h in counts],
        value=4 if 4 in counts else counts[0],
        description=_("heads"),
        style=_WIDE,
    )
    text = W.Text(value=context, description=_("context"), style=_WIDE)
    caption = W.HTML()
    maps_box = W.Box(layout=W.Layout(display="flex", flex_flow="row wrap"))
    said = _(
        "Each picture is one head: row = the token looking (query), column = the token "
        "looked at (key); colour from 0 (dark) to 1 (yellow); white = the masked future."
    )
    legend = W.HTML(f"<small>{said}</small>")
    box = _Explorer([W.HBox([heads, text]), caption, maps_box, legend])
    box.add_class("gptlib-heads-explorer")  # CSS classes name the parts on the page
    caption.add_class("gptlib-head-caption")
    maps_box.add_class("gptlib-head-maps")
    box.heads, box.context, box.caption, box.maps_box = heads, text, caption, maps_box
    box.map_images = []
    box.maps = box.tokens = box.error = None
    box.layer = box.head = box.textbook_output = None
    box.textbook_maps = box.textbook_weights = box.textbook_tokens = None
    return box


def _add_textbook_pickers(box: W.VBox, cfg: GPTConfig) -> None:
    """Below the maps: layer and head sliders for the `textbook`-preset model, and its map."""
    box.layer = W.IntSlider(value=0, min=0, max=cfg.n_layer - 1, description=_("layer"))
    box.head = W.IntSlider(value=0, min=0, max=cfg.n_head - 1, description=_("head"))
    box.textbook_output = W.Output()
    box.children = [
        *box.children,
        W.HTML(f"<b>{_('textbook preset')}</b>"),
        W.HBox([box.layer, box.head]),
        box.textbook_output,
    ]


def _read_typed_context(box: W.VBox, ckpt: Checkpoint) -> tuple[list[int], list[str]] | None:
    """The typed context's ids and tokens for this model, or None with the reason in box.error."""
    try:
        ids = _context_ids(ckpt.tokenizer, box.context.value, ckpt.config.block_size)
    except ValueError as e:
        box.error = str(e)
        return None
    return ids, [ckpt.tokenizer.itos[i] for i in ids]


def _map_images(maps: torch.Tensor, tokens: list[str], n_head: int) -> list[W.Image]:
    """One PNG per (layer, head) of maps [L, h, n, n], titled by its head (and layer, if L > 1)
    and named on the page by the CSS class gptlib-layer-<l>-head-<j>."""
    L = maps.shape[0]
    images = []
    for layer in range(L):
        for head in range(n_head):
            if L > 1:
                name = _("layer {layer}, head {head}").format(layer=layer, head=head)
            else:
                name = _("head {head}").format(head=head)
            fig = viz.plot_attention_panel(maps[layer, head], tokens, name)
            image = W.Image(value=viz.figure_png(fig), format="png", layout=W.Layout(margin="2px"))
            # A class names the map on the page. (Not a tooltip: ipywidgets 8.1's ImageView
            # fails to render in JupyterLab when given one.)
            image.add_class(f"gptlib-layer-{layer}-head-{head}")
            images.append(image)
    return images


def _replace_map_images(box: W.VBox, images: list[W.Image]) -> None:
    """Show `images` in the maps area, closing the pictures they replace."""
    for old in box.map_images:
        old.close()  # drop the old pictures from the kernel and the page
    box.map_images = images
    box.maps_box.children = images


def _draw_heads(box: W.VBox, ckpt: Checkpoint, n_head: int) -> None:
    """The maps of the model with `n_head` heads for the typed context, and a caption counting
    them; or, for a context it cannot read, no maps and a caption saying why."""
    got = _read_typed_context(box, ckpt)
    if got is None:
        said = _("Cannot read this context: {error}")
        box.caption.value = said.format(error=html.escape(box.error))
        _replace_map_images(box, [])
        return
    box.error = None
    ids, box.tokens = got
    box.maps = _maps(ckpt, ids)  # [L, h, n, n]
    _replace_map_images(box, _map_images(box.maps, box.tokens, n_head))
    L, h = box.maps.shape[0], n_head
    context_shown = html.escape(repr("".join(box.tokens)))
    said = _(
        "<b>{h} head(s)</b> of width d_h = {d_h}, context {context}: "
        "{maps} attention map(s) ({L} layer(s) x {h} head(s))"
    )
    box.caption.value = said.format(
        h=h, d_h=ckpt.config.head_dim, context=context_shown, maps=L * h, L=L
    )


def _draw_textbook(box: W.VBox, ckpt: Checkpoint) -> None:
    """The `textbook`-preset model's map at the picked layer and head, for the typed context."""
    got = _read_typed_context(box, ckpt)
    if got is None:
        _show(box.textbook_output, _("Cannot read this context: {error}").format(error=box.error))
        return
    ids, box.textbook_tokens = got
    box.textbook_maps = _maps(ckpt, ids)  # [L, h, n, n]
    layer, head = int(box.layer.value), int(box.head.value)
    box.textbook_weights = box.textbook_maps[layer, head]  # [n, n]
    title = _("textbook preset: layer {layer}, head {head}").format(layer=layer, head=head)
    box.textbook_figure = viz.plot_attention(box.textbook_weights, box.textbook_tokens, title=title)
    _show(box.textbook_output, box.textbook_figure)


def heads_explorer(
    checkpoints: Mapping[int, str | os.PathLike],
    context: str = "emma",
    textbook_checkpoint: str | os.PathLike | None = None,
) -> W.VBox:
    """Attention maps of trained models that differ only in their number of heads, for a context
    you type (read after BOS, as names are in training; cropped to the model's block_size).

    Move the heads slider and the maps below it change: one picture per (layer, head), so the
    number of pictures is the number of heads times the number of layers.

    checkpoints: head count -> checkpoint path, e.g. {h: asset_path(f"names-microgpt-h{h}.pt")}.
    textbook_checkpoint: optionally the `textbook` preset, shown one head at a time with layer and
    head pickers. Attributes: .heads (SelectionSlider), .context (Text), .caption (HTML: what is
    shown, or why the context cannot be read), .maps_box (its children are the .map_images, one
    Image widget per map, with the CSS class gptlib-layer-<l>-head-<j>), .layer / .head (IntSliders,
    None without a textbook-preset model), .maps ([L, h, n, n] last shown), .tokens, .textbook_maps,
    .textbook_weights ([n, n] last shown), .error (the message shown for an unreadable context).

    Taught in notebook 04 (multi head).
    """
    if not checkpoints:
        raise ValueError(_("give at least one checkpoint: {head count: path}"))
    paths = {int(h): p for h, p in checkpoints.items()}
    loaded: dict[int, Checkpoint] = {}  # loaded on first use, then kept
    box = _heads_controls(sorted(paths), context)

    def update_heads(_change=None) -> None:
        h = int(box.heads.value)
        if h not in loaded:
            loaded[h] = load_checkpoint(paths[h])
        _draw_heads(box, loaded[h], h)

    box.heads.observe(update_heads, names="value")
    box.context.observe(update_heads, names="value")
    if textbook_checkpoint is not None:
        textbook_ckpt = load_checkpoint(textbook_checkpoint)
        _add_textbook_pickers(box, textbook_ckpt.config)

        def update_textbook(_change=None) -> None:
            _draw_textbook(box, textbook_ckpt)

        for control in (box.context, box.layer, box.head):
            control.observe(update_textbook, names="value")
    update_heads()
    if textbook_checkpoint is not None:
        update_textbook()
    return box


# ---------------------------------------------------------------------------------------------
# Why attention divides by sqrt(d_k)

NUM_KEYS = 16


def scaled_attention_row(
    d_k: int, scaled: bool = True, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """One query against 16 keys, entries drawn from N(0, 1): returns (scores [16], weights [16]).

    A dot product of two such d_k-vectors has variance d_k, so without the 1/sqrt(d_k) the
    scores spread more as d_k grows and the softmax piles onto one key.

    Taught in notebook 03 (scaled attention)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(d_k, generator=g)  # [d_k]
    keys = torch.randn(NUM_KEYS, d_k, generator=g)  # [16, d_k]
    scores = keys @ q  # [16]
    if scaled:
        scores = scores / math.sqrt(d_k)
    return scores, scores.softmax(dim=-1)


def attention_scale_explorer(seed: int = 0) -> W.VBox:
    """A d_k slider (1 to 512) and a checkbox for the 1/sqrt(d_k) scale, showing the softmax
    weights of one query over 16 random keys.

    Attributes: .d_k (SelectionSlider), .scaled (Checkbox), .scores, .weights ([16]), .entropy
    (nats; ln 16 = 2.77 is uniform, 0 is one-hot), .max_weight, .plot_output, .figure.

    Taught in notebook 03 (scaled attention)."""
    d_k = W.SelectionSlider(options=[2**i for i in range(10)], value=64, description="d_k")
    scaled = W.Checkbox(value=True, description=_("divide by √d_k"))
    plot_output = W.Output()
    box = _Explorer([W.HBox([d_k, scaled]), plot_output])
    box.d_k, box.scaled, box.plot_output = d_k, scaled, plot_output

    def update(_change=None) -> None:
        box.scores, box.weights = scaled_attention_row(int(d_k.value), bool(scaled.value), seed)
        w = box.weights
        box.entropy = float(-torch.special.xlogy(w, w).sum())  # xlogy: 0 * log 0 counts as 0
        box.max_weight = float(w.max())
        how = _("scores / √d_k") if scaled.value else _("raw scores q·k")
        title = _("d_k = {d_k}, {how}: max weight {max_weight}, entropy {entropy} nats").format(
            d_k=d_k.value, how=how, max_weight=f"{box.max_weight:.2f}", entropy=f"{box.entropy:.2f}"
        )
        labels = [f"k{j}" for j in range(NUM_KEYS)]
        box.figure = viz.plot_bars(
            w, labels, title, _("softmax weight"), xlabel=_("key"), highlight=int(w.argmax())
        )
        if scaled.value:
            said = _(
                "score std {std} (about 1); "
                "uniform attention would have entropy ln {keys} = {uniform}"
            )
        else:
            said = _(
                "score std {std} (about √d_k = {sqrt_d_k}); "
                "uniform attention would have entropy ln {keys} = {uniform}"
            )
        note = said.format(
            std=f"{box.scores.std():.2f}",
            sqrt_d_k=f"{math.sqrt(d_k.value):.1f}",
            keys=NUM_KEYS,
            uniform=f"{math.log(NUM_KEYS):.2f}",
        )
        _show(plot_output, box.figure, note)

    d_k.observe(update, names="value")
    scaled.observe(update, names="value")
    update()
    return box
