"""Tables of shapes: every tensor of one real forward pass, and every parameter, each with its
size in numbers and in the textbook's letters.

The shapes are never written by hand. `shape_table` runs the model once with forward hooks and
records what actually flows. With labels, the loss's rows are the `F.cross_entropy` call that
`GPT.loss` really makes, watched while it runs (a torch function mode); the textbook's way of
writing the same loss can be shown beside it. The few tensors that live only inside the
attention's `forward` (the per-head q, k, v, the scores, the weights) are rebuilt from hooked
values with the module's own `split_heads` and its mask buffer, and are checked against what the
module really produced: the softmax weights its readable path passes through its hook point
`weights` (caught by a forward hook there) and the input of its output projection.

Letters are assigned from the config (T, V, d, h, d_h, L, 3d, 4d) and from the batch shape
(B, n): each size is matched with the letters of that size. When two letters have the same size
(n = T for a full training window, h = d_h in microgpt), the tensor's role decides: the q/k/v of
one head are [B, h, n, d_h] by construction, so a tie is resolved in that order.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from gptlib.config import GPTConfig
from gptlib.language import N_, _, said, screen_width, shown
from gptlib.model import GPT, IGNORE_INDEX, attention_weights

# ---------------------------------------------------------------------------------------------
# A small table that prints as text and renders as HTML in Jupyter


class Table:
    """Rows of values under named columns. Values are shown as given (format numbers first).

    `print(table)` gives aligned text; Jupyter shows the HTML version.

    Taught in notebook 00 (data and tokens)."""

    def __init__(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence],
        title: str | None = None,
        footer: str | None = None,
    ):
        self.columns = list(columns)
        self.rows = [list(row) for row in rows]
        for row in self.rows:
            if len(row) != len(self.columns):
                said = _("row {row} has {count} values for {columns} columns")
                raise ValueError(
                    said.format(row=repr(row), count=len(row), columns=len(self.columns))
                )
        self.title = title
        self.footer = footer

    def to_dicts(self) -> list[dict]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def column(self, name: str) -> list:
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def headings(self) -> list[str]:
        """The column names as shown, in the language in use (the names themselves, which
        `column` and `to_dicts` use, stay as given)."""
        return [_(c) for c in self.columns]

    def __str__(self) -> str:
        cells = [self.headings()] + [[shown(v) for v in row] for row in self.rows]
        widths = [max(screen_width(r[i]) for r in cells) for i in range(len(self.columns))]
        # Numbers line up on the right, words on the left.
        numeric = [
            all(isinstance(row[i], (int, float)) for row in self.rows) and bool(self.rows)
            for i in range(len(self.columns))
        ]

        def line(values):
            parts = [
                " " * (w - screen_width(v)) + v if num else v + " " * (w - screen_width(v))
                for v, w, num in zip(values, widths, numeric, strict=True)
            ]
            return "  ".join(parts).rstrip()

        out = [self.title] if self.title else []
        out += [line(cells[0]), "  ".join("-" * w for w in widths)]
        out += [line(row) for row in cells[1:]]
        if self.footer:
            out.append(self.footer)
        return "\n".join(out)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.headings())
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(shown(v))}</td>" for v in row) + "</tr>"
            for row in self.rows
        )
        caption = f"<caption>{esc(self.title)}</caption>" if self.title else ""
        footer = f"<p>{esc(self.footer)}</p>" if self.footer else ""
        return (
            f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{footer}"
        )


def columns_table(
    columns: Mapping[str, Sequence],
    decimals: int | Mapping[str, int] = 2,
    title: str | None = None,
    footer: str | None = None,
) -> Table:
    """A `Table` built column by column: `columns` maps each header to its values, all of one
    length. Floats (and one-element tensors holding a float) are shown with `decimals` decimals,
    one number for every column or a mapping from header to decimals (2 for a header it leaves
    out); ints and everything else are shown as given.

    Taught in notebook 03 (scaled attention)."""
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(_("columns of different lengths: {lengths}").format(lengths=lengths))

    def show(name: str, value):
        if isinstance(value, torch.Tensor):
            value = value.item()
        if not isinstance(value, float):
            return value
        places = decimals.get(name, 2) if isinstance(decimals, Mapping) else decimals
        return f"{value:.{places}f}"

    names = list(columns)
    rows = [
        [show(name, value) for name, value in zip(names, row, strict=True)]
        for row in zip(*columns.values(), strict=True)
    ]
    return Table(names, rows, title=title, footer=footer)


# ---------------------------------------------------------------------------------------------
# Sizes to letters


def letter_sizes(cfg: GPTConfig, B: int | None = None, n: int | None = None) -> dict[str, int]:
    """Every letter the tables use, with its size. The order is the default tie-break.

    Not taught in a notebook: the sizes symbolic_shape and shape_table put for the letters."""
    sizes = {}
    if B is not None:
        sizes["B"] = B
    if n is not None:
        sizes["n"] = n
    d = cfg.n_embd
    sizes.update({"h": cfg.n_head, "d_h": cfg.head_dim, "d": d, "3d": 3 * d, "4d": 4 * d})
    sizes.update({"V": cfg.vocab_size, "T": cfg.block_size, "L": cfg.n_layer})
    if n is not None:
        sizes["n-1"] = n - 1  # the shifted logits / labels inside the loss
        if B is not None:
            sizes["B(n-1)"] = B * (n - 1)  # the same, flattened for cross_entropy
    return sizes


def symbolic_shape(
    shape: Sequence[int],
    cfg: GPTConfig,
    B: int | None = None,
    n: int | None = None,
    hint: Sequence[str] | None = None,
) -> str:
    """A concrete shape in letters: (16, 64, 384) -> "[B, n, 3d]" for the `textbook` preset.

    Each size becomes the letter of that size (from `cfg`, and from B and n when given); a size
    no letter has stays a number. `hint` (one letter per dimension, the tensor's role) only breaks
    ties between letters of equal size: it can never give a dimension a letter of another size.
    A hint that is the size itself as a number ("1") keeps that dimension a plain number.

    Taught in notebook 04 (multi head).
    """
    return _letters(shape, letter_sizes(cfg, B, n), hint)


def _letters(shape: Sequence[int], sizes: Mapping[str, int], hint: Sequence[str] | None) -> str:
    """symbolic_shape's rule, with the letters and their sizes given (in tie-break order)."""
    shape = tuple(int(s) for s in shape)
    if hint is not None and len(hint) != len(shape):
        said = _("hint {hint} has {count} letters for shape {shape}")
        raise ValueError(said.format(hint=tuple(hint), count=len(hint), shape=shape))
    out = []
    for i, size in enumerate(shape):
        candidates = [letter for letter, s in sizes.items() if s == size]
        if hint is not None and (hint[i] in candidates or hint[i] == str(size)):
            out.append(hint[i])
        elif candidates:
            out.append(candidates[0])
        else:
            out.append(str(size))
    return "[" + ", ".join(out) + "]"


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _legend(cfg: GPTConfig, B: int | None = None, n: int | None = None) -> str:
    sizes = letter_sizes(cfg, B, n)
    order = ("B", "n", "T", "V", "d", "h", "d_h", "L")  # the textbook's table of letters
    return ", ".join(f"{k}={sizes[k]}" for k in order if k in sizes)


# ---------------------------------------------------------------------------------------------
# One forward pass, every tensor


# The names of the columns; each is shown in the language in use (Table.headings).
SHAPE_COLUMNS = [N_("step"), N_("tensor"), N_("shape"), N_("symbolic"), "dtype", N_("elements")]
TEXTBOOK_LOSS = said(
    "textbook's loss"
)  # the step of the rows shape_table(..., textbook_loss=True) adds


@torch.no_grad()
def shape_table(
    model: GPT,
    idx: torch.Tensor,
    labels: torch.Tensor | None = None,
    textbook_loss: bool = False,
) -> Table:
    """Run `model(idx, labels)` once and list every tensor on the way, in the order computed.

    Columns: step | tensor | shape | symbolic | dtype | elements. The pass runs in eval mode
    (dropout off, so the attention weights seen are the ones applied), on the attention's
    readable path, and without gradients.
    With labels, the loss's rows are the real call: the logits `GPT.loss` receives, and the
    input, the target and the result of the `F.cross_entropy` call it makes, observed while it
    runs (how many targets it ignores included). `textbook_loss=True` adds, under the step
    "textbook's loss", the textbook's route to the same number (`logits[:, :-1]` against
    `labels[:, 1:]`, flattened), checked equal to the model's loss.

    Taught in notebook 00 (data and tokens).
    """
    if textbook_loss and labels is None:
        raise ValueError(_("textbook_loss=True needs labels: the textbook's route is a loss's"))
    rec = _Recorder(model.cfg, *idx.shape)
    rec.add(said("input"), "idx", idx, ("B", "n"))
    if labels is not None:
        rec.add(
            said("input"),
            said("labels (the same window; shifted inside the loss)"),
            labels,
            ("B", "n"),
        )
    captured = {}

    def on_logits(i, out):
        captured["logits"] = out
        rec.add(said("output"), "logits = lm_head(ln_f(x))", out, ("B", "n", "V"))

    # The readable attention path, whose softmax weights land in `weights` as each layer runs.
    with attention_weights(model) as weights:
        _hook_embedding(rec, model)
        for layer, block in enumerate(model.blocks):
            _hook_attention(rec, block.attn, said("block {layer} attention", layer=layer), weights)
            _hook_block(rec, block, layer)
        out_step = said("output")
        rec.after(model.ln_f, lambda i, out: rec.add(out_step, "ln_f(x)", out, ("B", "n", "d")))
        rec.after(model.lm_head, on_logits)
        _logits, loss = _run_once(model, idx, labels, rec)
    if textbook_loss:
        _textbook_loss_rows(rec, captured["logits"], labels, loss)

    title = _("One forward pass: {letters}").format(letters=_legend(model.cfg, rec.B, rec.n))
    footer = _(
        "Letters come from the config and the batch shape; where two letters have the same size, "
        "the tensor's role decides."
    )
    return Table(SHAPE_COLUMNS, rec.rows, title, footer)


class _Recorder:
    """The rows of one table, and the hooks that fill them (removed together by `remove`)."""

    def __init__(self, cfg: GPTConfig, B: int, n: int):
        self.cfg, self.B, self.n = cfg, B, n
        self.rows: list[list] = []
        self.handles: list = []
        self.sizes = letter_sizes(cfg, B, n)
        # The loss's flattened rows: every position of every window, B x n of them.
        self.flat_sizes = self.sizes | {"Bn": B * n}

    def add(self, step: str, name: str, t: torch.Tensor, hint: Sequence[str], flat=False) -> None:
        symbolic = _letters(t.shape, self.flat_sizes if flat else self.sizes, hint)
        self.rows.append([step, name, _shape(t), symbolic, _dtype(t), t.numel()])

    def before(self, module, fn) -> None:
        self.handles.append(module.register_forward_pre_hook(lambda m, args: fn(args[0])))

    def after(self, module, fn) -> None:
        self.handles.append(module.register_forward_hook(lambda m, args, out: fn(args[0], out)))

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()


def _hook_embedding(rec: _Recorder, model: GPT) -> None:
    BND = ("B", "n", "d")
    step = said("embedding")
    rec.after(model.tok_emb, lambda i, out: rec.add(step, "tok_emb(idx)", out, BND))
    rec.before(model.pos_emb, lambda pos: rec.add(step, "pos = arange(n)", pos, ("n",)))
    rec.after(model.pos_emb, lambda i, out: rec.add(step, "pos_emb(pos)", out, ("n", "d")))
    rec.before(model.drop, lambda x: rec.add(step, "tok_emb(idx) + pos_emb(pos)", x, BND))
    rec.after(model.drop, lambda i, out: rec.add(step, "x = drop(...)", out, BND))


def _hook_block(rec: _Recorder, block, layer: int) -> None:
    """Rows of one block's norms, residual sums and MLP, in the order its placement computes."""
    BND = ("B", "n", "d")
    add, before, after = rec.add, rec.before, rec.after
    res = said("block {layer} residual + norm", layer=layer)
    mlp = said("block {layer} MLP", layer=layer)
    attn = said("block {layer} attention", layer=layer)
    if rec.cfg.norm_placement == "pre":  # x = x + attn(ln1(x)); x = x + mlp(ln2(x))
        after(block.ln1, lambda i, out, s=attn: add(s, "ln1(x)", out, BND))
        before(block.ln2, lambda x, s=res: add(s, "x + attn(ln1(x))", x, BND))
        after(block.ln2, lambda i, out, s=mlp: add(s, "ln2(x)", out, BND))
        after(block, lambda i, out, s=res: add(s, said("x + mlp(ln2(x)) = block output"), out, BND))
    else:  # x = ln1(x + attn(x)); x = ln2(x + mlp(x))
        before(block.ln1, lambda x, s=res: add(s, "x + attn(x)", x, BND))
        after(block.ln1, lambda i, out, s=res: add(s, "ln1(x + attn(x))", out, BND))
        before(block.ln2, lambda x, s=res: add(s, "x + mlp(x)", x, BND))
        after(
            block.ln2,
            lambda i, out, s=res: add(s, said("ln2(x + mlp(x)) = block output"), out, BND),
        )
    act = rec.cfg.activation
    after(block.mlp.fc, lambda i, out, s=mlp: add(s, "fc(x)", out, ("B", "n", "4d")))
    # The activation is a plain function, invisible to hooks; it is what mlp.proj receives.
    before(block.mlp.proj, lambda h, s=mlp, a=act: add(s, f"{a}(fc(x))", h, ("B", "n", "4d")))
    after(block.mlp, lambda i, out, s=mlp: add(s, "mlp(x) = proj(...)", out, BND))


def _run_once(model: GPT, idx, labels, rec: _Recorder):
    """`model(idx, labels)` in eval mode with the loss's call observed; the hooks, the loss and
    the mode are put back afterwards."""
    was_training = model.training
    model.eval()
    try:
        with _observed_loss(model, lambda *seen: _loss_rows(rec, *seen)):
            return model(idx, labels)
    finally:
        rec.remove()
        model.train(was_training)


class _CrossEntropyCalls(TorchFunctionMode):
    """Every `F.cross_entropy` call made while the mode is on: (input, target, kwargs, result)."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func is F.cross_entropy:
            self.calls.append((args[0], args[1], kwargs, out))
        return out


@contextmanager
def _observed_loss(model: GPT, record):
    """While on, `model(idx, labels)` calls its own `GPT.loss` through a wrapper that watches
    the `F.cross_entropy` calls it makes and hands `record(logits, labels, calls, loss)`."""
    real = model.loss

    def observed(logits, labels):
        with _CrossEntropyCalls() as seen:
            loss = real(logits, labels)
        record(logits, labels, seen.calls, loss)
        return loss

    model.loss = observed  # an instance attribute: forward's `self.loss` finds it first
    try:
        yield
    finally:
        del model.loss


def _loss_rows(rec: _Recorder, logits, labels, calls, loss) -> None:
    """The rows of the loss as GPT.loss computed it, from the cross_entropy call it made."""
    _check(len(calls) == 1, f"GPT.loss called F.cross_entropy {len(calls)} times, not once")
    inputs, target, kwargs, out = calls[0]
    _check(torch.equal(out, loss), "GPT.loss returned another number than cross_entropy's")
    ignore = kwargs.get("ignore_index", IGNORE_INDEX)
    ignored, total = int((target == ignore).sum()), target.numel()
    V = logits.size(-1)
    step = said("loss")
    rec.add(
        step, said("GPT.loss(logits, labels): logits, all n positions"), logits, ("B", "n", "V")
    )
    routes = {  # what the call's tensors are, recognised among the ways to write the shift
        "logits.reshape(-1, V)": logits.reshape(-1, V),
        "logits[:, :-1].reshape(-1, V)": logits[:, :-1].reshape(-1, V),
        f"pad(labels[:, 1:], {ignore}).reshape(-1)": F.pad(
            labels[:, 1:], (0, 1), value=ignore
        ).reshape(-1),
        "labels[:, 1:].reshape(-1)": labels[:, 1:].reshape(-1),
    }
    input_name = _recognise(inputs, routes, said("the logits, in another form"))
    target_name = _recognise(target, routes, said("the labels, in another form"))
    rec.add(
        step, said("cross_entropy input: {name}", name=input_name), inputs, ("Bn", "V"), flat=True
    )
    name = said(
        "cross_entropy target: {name} ({ignored} of {total} ignored)",
        name=target_name,
        ignored=ignored,
        total=total,
    )
    rec.add(step, name, target, ("Bn",), flat=True)
    how = kwargs.get("reduction", "mean")
    if how == "mean":
        rec.add(
            step,
            said("loss = cross_entropy(...), mean over the {n} not ignored", n=total - ignored),
            out,
            (),
        )
    else:
        rec.add(step, said("loss = cross_entropy(...), {how}", how=how), out, ())


def _recognise(t: torch.Tensor, routes: Mapping[str, torch.Tensor], otherwise: str) -> str:
    for name, candidate in routes.items():
        if t.shape == candidate.shape and torch.equal(t, candidate):
            return name
    return otherwise


def _textbook_loss_rows(rec: _Recorder, logits, labels, loss) -> None:
    """The textbook's route to the loss: cut the logits and the labels, flatten, cross_entropy."""
    V, step = logits.size(-1), TEXTBOOK_LOSS
    shifted, targets = logits[:, :-1], labels[:, 1:]
    rec.add(
        step, said("logits[:, :-1] (no label after the last position)"), shifted, ("B", "n-1", "V")
    )
    rec.add(step, said("labels[:, 1:] (no prediction for the first token)"), targets, ("B", "n-1"))
    flat_logits, flat_targets = shifted.reshape(-1, V), targets.reshape(-1)
    rec.add(step, "logits[:, :-1].reshape(-1, V)", flat_logits, ("B(n-1)", "V"))
    rec.add(step, "labels[:, 1:].reshape(-1)", flat_targets, ("B(n-1)",))
    again = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX)
    _check(torch.allclose(again, loss), "the textbook's route gives another loss than the model's")
    rec.add(step, said("cross_entropy(...) = the model's loss (torch.allclose)"), again, ())


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"shape_table: {what}; the model's code and this table disagree")


def _hook_attention(rec: _Recorder, attn, step: str, seen: list) -> None:
    """Rows for the inside of one CausalSelfAttention, from its own pieces.

    Hooks see qkv's output and proj's input; `seen` is the list `attention_weights` fills
    with the softmax weights of the readable path, this layer's last when proj runs. In between, the module splits the heads, scores,
    masks and takes the softmax; those tensors are rebuilt from qkv's output with the module's
    own `split_heads` and `future` buffer, and checked against the weights the hook point `weights` passed on
    and against what proj received."""
    add, before, after, n = rec.add, rec.before, rec.after, rec.n
    state = {}

    def on_qkv(x, out):
        add(step, "qkv(x)", out, ("B", "n", "3d"))
        d = x.size(-1)
        q, k, v = (attn.split_heads(t) for t in out.split(d, dim=2))  # as in forward
        add(step, said("q, k, v = split_heads(...) (each)"), q, ("B", "h", "n", "d_h"))
        kt = k.transpose(-2, -1)
        add(step, "k.transpose(-2, -1)", kt, ("B", "h", "d_h", "n"))
        scores = (q @ kt) / math.sqrt(attn.head_dim)
        add(step, "scores = q @ kᵀ / √d_h", scores, ("B", "h", "n", "n"))
        state.update(scores=scores, v=v)

    def on_proj_input(y_merged):
        mask = attn.future[:n, :n]  # a slice of the [T, T] buffer
        add(step, said("future[:n, :n] (True = masked)"), mask, ("n", "n"))
        weights = seen[-1]  # what the module computed during this very pass
        again = state["scores"].masked_fill(mask, float("-inf")).softmax(dim=-1)
        _check(
            torch.allclose(again, weights, atol=1e-6),
            "softmax of the masked scores is not the weights the attention computed",
        )
        add(step, said("weights = softmax(masked scores)"), weights, ("B", "h", "n", "n"))
        y = weights @ state["v"]
        add(step, "weights @ v", y, ("B", "h", "n", "d_h"))
        y = y.transpose(1, 2)
        add(step, "transpose(1, 2)", y, ("B", "n", "h", "d_h"))
        _check(
            torch.allclose(y.reshape(y_merged.shape), y_merged, atol=1e-6),
            "weights @ v is not what proj received",
        )
        add(step, said("heads side by side (view)"), y_merged, ("B", "n", "d"))

    after(attn.qkv, on_qkv)
    before(attn.proj, on_proj_input)
    after(attn, lambda x, out: add(step, "attn(x) = proj(...)", out, ("B", "n", "d")))


# ---------------------------------------------------------------------------------------------
# Every parameter

# The role of each parameter, by the end of its name: only used to break ties between letters.
_PARAMETER_ROLES = {
    "tok_emb.weight": ("V", "d"),
    "pos_emb.weight": ("T", "d"),
    "lm_head.weight": ("V", "d"),
    "attn.qkv.weight": ("3d", "d"),
    "attn.qkv.bias": ("3d",),
    "attn.proj.weight": ("d", "d"),
    "mlp.fc.weight": ("4d", "d"),
    "mlp.fc.bias": ("4d",),
    "mlp.proj.weight": ("d", "4d"),
}


def _role(name: str, ndim: int):
    for suffix, hint in _PARAMETER_ROLES.items():
        if name.endswith(suffix):
            return hint
    return ("d",) * ndim  # norms' gains and biases, the projections' biases


PARAMETER_COLUMNS = [N_("name"), N_("shape"), N_("symbolic"), N_("count"), N_("shared with")]


def parameter_table(model: GPT) -> Table:
    """Every parameter by name. A tied tensor (lm_head.weight is tok_emb.weight) is listed under
    each name but counted once, under the first, so the counts add up to `.total`, which equals
    `model.num_parameters()`.

    Taught in notebook 08 (logits)."""
    cfg = model.cfg
    owners: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(p), []).append(name)
    rows, total = [], 0
    for name, p in model.named_parameters(remove_duplicate=False):
        names = owners[id(p)]
        count = p.numel() if names[0] == name else 0  # a shared tensor counts once
        total += count
        others = ", ".join(o for o in names if o != name)
        rows.append(
            [
                name,
                _shape(p),
                symbolic_shape(p.shape, cfg, hint=_role(name, p.dim())),
                count,
                others,
            ]
        )
    buffers = sorted({f"{_shape(b)} {_dtype(b)}" for _name, b in model.named_buffers()})
    if buffers:
        said = _(
            "total: {total} parameters (a shared tensor counted once); "
            "buffers, not parameters: {count} x {buffers}"
        )
    else:
        said = _("total: {total} parameters (a shared tensor counted once)")
    footer = said.format(
        total=f"{total:,}", count=len(list(model.buffers())), buffers=", ".join(buffers)
    )
    title = _("Parameters: {letters}").format(letters=_legend(cfg))
    table = Table(PARAMETER_COLUMNS, rows, title, footer)
    table.total = total
    return table
