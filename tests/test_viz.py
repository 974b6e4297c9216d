"""Every picture in gptlib.classroom.viz, rendered with the Agg backend and read back: data, labels, titles."""

import ast
import math
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from gptlib import GPT, History, microgpt, textbook
from gptlib.classroom import viz
from gptlib.train import learning_rate, train

SYMBOLS = list("abcdefghijklmnopqrstuvwxyz.")


@pytest.fixture(autouse=True, scope="module")
def agg_backend():
    plt.switch_backend("Agg")  # draw off-screen, the same in every environment
    yield


@pytest.fixture(scope="module")
def maps():
    """Real causal attention maps of a small `textbook`-preset model: [L=2, h=4, n=6, n=6]."""
    torch.manual_seed(0)
    model = GPT(textbook(n_layer=2, n_embd=32, block_size=16))
    idx = torch.tensor([[26, 4, 12, 12, 0, 26]])  # ".emma."
    return model.attention_maps(idx)[:, 0]


def _history(n=30):
    return History(
        step=list(range(n)),
        lr=[1e-3] * n,
        loss=[3.3 - 0.05 * i for i in range(n)],
        grad_norm=[0.5 + (i % 7) * 0.2 for i in range(n)],
        val_step=[0, 10, 20, n - 1],
        val_loss=[3.2, 2.9, 2.5, 2.3],
        clip=1.0,
    )


def _image(ax) -> np.ndarray:
    return np.ma.filled(ax.images[0].get_array().astype(float), np.nan)


EMMA_TICKS = ["BOS 0", "e 1", "m 2", "m 3", "a 4", "BOS 5"]


def _ticks(labels) -> list[str]:
    return [t.get_text() for t in labels]


def _not_in_pyplot(fig):
    # Closed in pyplot: a notebook shows the returned figure once, not a second time at cell end.
    assert isinstance(fig, Figure)
    assert all(plt.figure(num) is not fig for num in plt.get_fignums())


def test_attention_map_masks_future_and_labels_tokens(maps):
    w = maps[0, 1]  # [6, 6]
    fig = viz.plot_attention(w, ".emma.", title="layer 0, head 1")
    _not_in_pyplot(fig)
    ax = fig.axes[0]
    expected = w.double().numpy().copy()
    expected[np.triu_indices(6, k=1)] = np.nan  # the causal zeros are drawn empty
    np.testing.assert_array_equal(_image(ax), expected)
    assert _ticks(ax.get_xticklabels()) == EMMA_TICKS
    assert _ticks(ax.get_yticklabels()) == EMMA_TICKS
    assert ax.get_title() == "layer 0, head 1"
    assert ax.get_xlabel().startswith("key") and ax.get_ylabel().startswith("query")
    assert len(fig.axes) == 2 and "attention weight" in fig.axes[1].get_ylabel()  # colour bar
    assert ax.images[0].get_clim() == (0.0, 1.0)
    assert to_hex(ax.images[0].get_cmap().get_bad()) == "#ffffff"
    # Each visible weight is printed in its cell (6 positions: 21 cells on or below the diagonal).
    printed = [t.get_text() for t in ax.texts]
    assert len(printed) == 21
    assert printed[0] == ("1" if w[0, 0] >= 1 else f"{float(w[0, 0]):.2f}"[1:])


def test_position_labels_tell_repeats_apart():
    assert viz.position_labels(".olivia") == ["BOS 0", "o 1", "l 2", "i 3", "v 4", "i 5", "a 6"]
    assert viz.position_labels("ab", bos=None) == ["a 0", "b 1"]


def test_large_maps_print_no_numbers():
    w = torch.tril(torch.ones(12, 12)) / torch.arange(1, 13)[:, None]
    fig = viz.plot_attention(w, "abcdefghijkl")
    assert len(fig.axes[0].texts) == 0


def test_attention_map_keeps_nonzero_future_and_draws_into_given_axes():
    w = torch.full((3, 3), 1 / 3)  # not causal: nothing above the diagonal is hidden
    fig, ax = plt.subplots()
    plt.close(fig)
    assert viz.plot_attention(w, ["x", "y", "z"], ax=ax) is fig
    np.testing.assert_allclose(_image(ax), np.full((3, 3), 1 / 3))
    with pytest.raises(ValueError, match="token labels"):
        viz.plot_attention(w, "ab")


def test_attention_panel_is_one_small_map_and_becomes_png(maps):
    fig = viz.plot_attention_panel(maps[1, 2], ".emma.", "layer 1, head 2")
    _not_in_pyplot(fig)
    assert len(fig.axes) == 1  # no colour bar: many panels sit side by side
    ax = fig.axes[0]
    np.testing.assert_array_equal(_image(ax), viz.masked_future(maps[1, 2]))
    assert ax.get_title() == "layer 1, head 2" and ax.images[0].get_clim() == (0.0, 1.0)
    assert _ticks(ax.get_xticklabels()) == EMMA_TICKS
    png = viz.figure_png(fig, dpi=50)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (round(fig.get_figwidth() * 50), round(fig.get_figheight() * 50))
    with pytest.raises(ValueError, match=r"one \[n, n\] map, got shape \(2, 6, 6\)"):
        viz.plot_attention_panel(maps[0, :2], ".emma.", "two maps")


def test_attention_grid_layers_by_heads(maps):
    fig = viz.plot_attention_grid(maps, ".emma.", title="all heads", layer_names=["L0", "L1"])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2 * 4
    for i, ax in enumerate(panels):
        layer, head = divmod(i, 4)
        np.testing.assert_array_equal(_image(ax), viz.masked_future(maps[layer, head]))
        assert ax.get_title() == f"L{layer}, head {head}"
    assert _ticks(panels[-1].get_xticklabels()) == EMMA_TICKS
    assert _ticks(panels[0].get_yticklabels()) == EMMA_TICKS
    assert fig._suptitle.get_text() == "all heads"


def test_attention_grid_wraps_many_heads():
    torch.manual_seed(0)
    w = GPT(microgpt(n_head=16)).attention_maps(torch.zeros(1, 5, dtype=torch.long))[
        0, 0
    ]  # [16, 5, 5]
    fig = viz.plot_attention_grid(w, "abcde")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 16
    assert [ax.get_title() for ax in panels] == [f"head {i}" for i in range(16)]
    rows = {round(ax.get_position().y0, 3) for ax in panels}
    assert len(rows) == 4  # 16 heads in rows of 4


def test_heatmap_shows_the_matrix():
    m = torch.arange(12.0).reshape(3, 4) - 5
    fig = viz.plot_heatmap(
        m, row_labels=list("abc"), title="scores", xlabel="key", ylabel="query", cbar_label="q.k"
    )
    ax = fig.axes[0]
    np.testing.assert_array_equal(_image(ax), m.numpy())
    assert _ticks(ax.get_yticklabels()) == list("abc")
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("scores", "key", "query")
    assert fig.axes[1].get_ylabel() == "q.k"
    centred = viz.plot_heatmap(m, center_zero=True, annotate=True)
    assert centred.axes[0].images[0].get_clim() == (-6.0, 6.0)
    assert len(centred.axes[0].texts) == 12


def test_curves_runs_and_reference_lines_are_told_apart():
    x = [0, 1, 2]
    runs = np.array([[3.0, 2.0, 1.0], [5.0, 4.0, 3.0]])  # two seeds of one setting
    fig = viz.plot_curves(
        x, {"seeds": runs, "one": [1, 1, 1]}, "step", "loss", "t", hlines={"u": 2.8, "v": 3.3}
    )
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2 + 1 + 1 + 2  # two thin runs, their mean, one curve, two references
    labelled = {line.get_label(): line for line in lines if not line.get_label().startswith("_")}
    assert set(labelled) == {"seeds", "one", "u", "v"}  # one legend entry per setting
    np.testing.assert_array_equal(labelled["seeds"].get_ydata(), [4.0, 3.0, 2.0])
    assert to_hex(lines[0].get_color()) == to_hex(labelled["seeds"].get_color())
    colours = {to_hex(labelled[k].get_color()) for k in labelled}
    assert len(colours) == 4  # no reference line shares a colour with a curve or another line
    assert labelled["u"].get_linestyle() != labelled["v"].get_linestyle()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["seeds", "one", "u", "v"]


def test_curves_and_bars_carry_their_data():
    x = [1, 2, 4, 8]
    fig = viz.plot_curves(
        x,
        {"a": [1, 2, 3, 4], "b": [4, 3, 2, 1]},
        "d",
        "loss",
        "curves",
        logx=True,
        hlines={"ref": 2.5},
    )
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_array_equal(lines["a"].get_xdata(), x)
    np.testing.assert_array_equal(lines["b"].get_ydata(), [4, 3, 2, 1])
    assert lines["ref"].get_linestyle() == "--" and lines["ref"].get_ydata()[0] == 2.5
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("d", "loss", "curves")
    with pytest.raises(ValueError, match="values for 4 x values"):
        viz.plot_curves(x, {"a": [1, 2]}, "x", "y", "t")

    fig = viz.plot_bars(
        [0.1, 0.5, 0.4], ["p", "q", "r"], "bars", "share", xlabel="item", highlight="q"
    )
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights, [0.1, 0.5, 0.4])
    colours = [to_hex(p.get_facecolor()) for p in ax.patches]
    assert colours[1] != colours[0] == colours[2]
    assert _ticks(ax.get_xticklabels()) == ["p", "q", "r"]
    assert (ax.get_title(), ax.get_ylabel(), ax.get_xlabel()) == ("bars", "share", "item")


def test_curve_panels_give_each_quantity_its_own_axis():
    x = [1, 2, 4]
    fig = viz.plot_curve_panels(
        x,
        [
            {"ys": {"e": [2.0, 1.0, 0.5]}, "ylabel": "nats", "hlines": {"ln 16": 2.77}},
            {"ys": {"g": [0.3, 0.2, 0.1]}, "ylabel": "norm", "title": "gradient", "logy": True},
        ],
        "d_k",
        "two panels",
        logx=True,
    )
    left, right = fig.axes
    assert (left.get_ylabel(), right.get_ylabel(), right.get_title()) == (
        "nats",
        "norm",
        "gradient",
    )
    assert [line.get_label() for line in left.get_lines()] == ["e", "ln 16"]
    assert [line.get_label() for line in right.get_lines()] == ["g"]
    np.testing.assert_array_equal(right.get_lines()[0].get_ydata(), [0.3, 0.2, 0.1])
    assert left.get_xscale() == right.get_xscale() == "log"
    assert (left.get_yscale(), right.get_yscale()) == ("linear", "log")
    assert left.get_xlabel() == right.get_xlabel() == "d_k"
    assert fig.get_suptitle() == "two panels"
    with pytest.raises(ValueError, match="unknown panel keys"):
        viz.plot_curve_panels(x, [{"ys": {}, "ylabel": "y", "colour": "red"}], "x", "t")
    with pytest.raises(ValueError, match="at least one panel"):
        viz.plot_curve_panels(x, [], "x", "t")


def test_loss_plot_lines_uniform_guess_and_baseline():
    h = _history()
    fig = viz.plot_loss(h, vocab_size=27, baseline={"bigram": 2.45, "unigram": 2.81})
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_array_equal(lines["train"].get_xdata(), h.step)
    np.testing.assert_array_equal(lines["train"].get_ydata(), h.loss)
    np.testing.assert_array_equal(lines["val"].get_xdata(), h.val_step)
    np.testing.assert_array_equal(lines["val"].get_ydata(), h.val_loss)
    uniform = lines["uniform guess ln V"]
    assert uniform.get_linestyle() == "--"
    assert uniform.get_ydata()[0] == pytest.approx(math.log(27))
    bigram, unigram = lines["bigram 2.45"], lines["unigram 2.81"]
    assert bigram.get_ydata()[0] == 2.45 and unigram.get_ydata()[0] == 2.81
    colours = {to_hex(line.get_color()) for line in (uniform, bigram, unigram)}
    assert len(colours) == 3  # every reference line has its own colour
    with pytest.raises(ValueError, match="at most 4 baselines"):
        viz.plot_loss(h, baseline={str(i): 1.0 for i in range(5)})
    assert ax.get_title() == "Training loss"
    assert ax.get_xlabel() == "step" and "nats" in ax.get_ylabel()
    h.interrupted = True
    assert viz.plot_loss(h).axes[0].get_title() == "Training loss (interrupted)"


def test_running_mean_is_the_mean_of_each_window():
    np.testing.assert_allclose(viz.running_mean([1.0, 2.0, 3.0, 6.0], 2), [1.5, 2.5, 4.5])
    np.testing.assert_allclose(viz.running_mean([4.0, 2.0], 1), [4.0, 2.0])
    with pytest.raises(ValueError, match="between 1 and 3"):
        viz.running_mean([1.0, 2.0, 3.0], 4)


def test_loss_runs_share_one_axis_smoothed_with_labelled_baselines():
    a, b = _history(30), _history(30)
    b.loss = [2.0 + 0.01 * i for i in range(30)]
    fig = viz.plot_loss_runs(
        {"run a": a, "run b": b},
        vocab_size=27,
        baseline={"unigram": 2.82},
        smooth=10,
        styles={"run b": {"linestyle": ":"}},
    )
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["run a", "run b", "uniform guess ln V", "unigram 2.82"]
    np.testing.assert_array_equal(lines["run a"].get_xdata(), list(range(9, 30)))
    np.testing.assert_allclose(lines["run a"].get_ydata()[0], np.mean(a.loss[:10]))
    np.testing.assert_allclose(lines["run b"].get_ydata()[-1], np.mean(b.loss[-10:]))
    assert lines["run b"].get_linestyle() == ":"
    assert to_hex(lines["unigram 2.82"].get_color()) != to_hex(
        lines["uniform guess ln V"].get_color()
    )
    assert "mean of the last 10 steps" in ax.get_ylabel()
    with pytest.raises(ValueError, match="at least one run"):
        viz.plot_loss_runs({})


class FakeHandle:
    def __init__(self):
        self.updates = 0

    def update(self, fig):
        self.updates += 1


def test_live_loss_plot_redraws_in_place_during_train(monkeypatch):
    shown = []

    def fake_display(fig):
        shown.append(fig)
        return handle

    handle = FakeHandle()
    monkeypatch.setattr(viz, "_in_ipython", lambda: True)
    monkeypatch.setattr(viz, "_display", fake_display)
    torch.manual_seed(0)
    model = GPT(microgpt())
    tokens = torch.randint(0, 27, (200,))
    with viz.LiveLossPlot(vocab_size=27, every=4) as live:
        hist = train(model, tokens, steps=10, batch_size=4, warmup=2, callback=live)
    # Redraws after steps 1, 5, 9 and once more when the block ends: one display, then updates.
    assert len(shown) == 1 and handle.updates == 3 and live.redraws == 4
    lines = {line.get_label(): line for line in live.fig.axes[0].get_lines()}
    np.testing.assert_array_equal(lines["train"].get_ydata(), hist.loss)
    assert lines["uniform guess ln V"].get_ydata()[0] == pytest.approx(math.log(27))


def test_live_loss_plot_without_ipython_and_on_interrupt():
    live = viz.LiveLossPlot(every=1)
    h = _history(5)
    with pytest.raises(KeyboardInterrupt):
        with live:
            live(h)
            raise KeyboardInterrupt
    assert live.redraws == 1 and live.handle is None  # only the final, static drawing
    ax = live.fig.axes[0]
    assert "Ctrl-C" in ax.get_title()
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), h.loss)
    assert live.finish() is live.fig


def test_lr_schedule_and_grad_norm():
    steps = list(range(50))
    lrs = [learning_rate(s, 1e-3, warmup=10, total_steps=50, schedule="cosine") for s in steps]
    ax = viz.plot_lr_schedule(steps, lrs).axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), lrs)
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == (
        "Learning-rate schedule",
        "step",
        "learning rate",
    )

    h = _history()
    ax = viz.plot_grad_norm(h).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    np.testing.assert_allclose(lines["norm before clipping"].get_ydata(), h.grad_norm)
    clip = lines["clip = 1"]
    assert clip.get_linestyle() == "--" and clip.get_ydata()[0] == 1.0
    assert ax.get_title() == "Gradient norm" and "norm" in ax.get_ylabel()
    assert "clip = 0.5" in [
        line.get_label() for line in viz.plot_grad_norm(h, clip=0.5).axes[0].get_lines()
    ]


def test_next_token_probs_bars():
    probs = torch.softmax(torch.linspace(-2, 2, 27), dim=0)
    fig = viz.plot_next_token_probs(probs, SYMBOLS, temperature=0.8, highlight=int(probs.argmax()))
    ax = fig.axes[0]
    np.testing.assert_allclose([p.get_height() for p in ax.patches], probs.numpy(), rtol=1e-6)
    assert _ticks(ax.get_xticklabels()) == SYMBOLS
    assert ax.get_title() == "Next-token probabilities (temperature 0.8)"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("next token", "probability")
    assert "greedy" in viz.plot_next_token_probs(probs, SYMBOLS, temperature=0).axes[0].get_title()


def test_next_token_probs_by_temperature_share_one_y_axis():
    z = torch.linspace(-2, 2, 27)
    probs = {t: torch.softmax(z / t, dim=0) for t in (0.5, 1.0, 2.0)}
    fig = viz.plot_next_token_probs_by_temperature(probs, SYMBOLS, title="After '.kat'")
    assert len(fig.axes) == 3 and fig.axes[0].get_title() == "After '.kat'"
    top = float(probs[0.5].max())
    for ax, p in zip(fig.axes, probs.values(), strict=True):
        np.testing.assert_allclose([b.get_height() for b in ax.patches], p.numpy(), rtol=1e-6)
        assert ax.get_ylim() == pytest.approx((0, top * 1.1))  # the coldest panel's scale
        assert _ticks(ax.get_xticklabels()) == SYMBOLS
    texts = [ax.texts[0].get_text() for ax in fig.axes]
    assert texts[0].startswith("temperature 0.5: largest") and texts[2].startswith("temperature 2")
    greedy = viz.plot_next_token_probs_by_temperature({0: torch.eye(27)[3]}, SYMBOLS)
    assert greedy.axes[0].texts[0].get_text() == "greedy, temperature 0: largest 1.00"
    with pytest.raises(ValueError, match="at least one temperature"):
        viz.plot_next_token_probs_by_temperature({}, SYMBOLS)


def test_pca_matches_the_covariance_eigenvectors():
    torch.manual_seed(0)
    w = torch.randn(27, 8) * torch.linspace(3, 0.5, 8)  # a clear first and second direction
    xy = viz.pca_2d(w)
    assert xy.shape == (27, 2)
    centred = w.double() - w.double().mean(0)
    _, vecs = torch.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    top = vecs[:, [-1, -2]]
    torch.testing.assert_close(xy.abs(), (centred @ top).abs())
    torch.testing.assert_close(xy.mean(0), torch.zeros(2, dtype=torch.float64), atol=1e-12, rtol=0)
    assert xy[:, 0].var() >= xy[:, 1].var()

    fig = viz.plot_embeddings_2d(w, SYMBOLS, title="tok_emb")
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.collections[0].get_offsets(), xy.numpy())
    assert [t.get_text() for t in ax.texts] == SYMBOLS
    assert (
        ax.get_title() == "tok_emb"
        and "direction 1" in ax.get_xlabel()
        and "direction 2" in ax.get_ylabel()
    )


def test_plot_ladder_points_labels_and_distinct_baselines():
    names = ["bigram", "one head", "+ MLP"]
    fig = viz.plot_ladder(names, torch.tensor([2.4, 2.3, 2.1]), {"count bigram": 2.38, "ln V": 3.3})
    _not_in_pyplot(fig)
    ax = fig.axes[0]
    points, *baselines = ax.lines
    np.testing.assert_allclose(points.get_ydata(), [2.4, 2.3, 2.1])
    assert [t.get_text() for t in ax.texts] == ["2.40", "2.30", "2.10"]
    assert _ticks(ax.get_xticklabels()) == names
    assert [line.get_ydata()[0] for line in baselines] == [2.38, 3.3]
    assert len({to_hex(line.get_color()) for line in ax.lines}) == 3  # all distinct
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["validation loss", "count bigram 2.38", "ln V 3.30"]
    with pytest.raises(ValueError, match="got 2 names for losses of shape"):
        viz.plot_ladder(names[:2], [1.0, 2.0, 3.0])


def test_import_rules():
    """viz never imports widgets; model code never imports viz (only widgets may)."""
    package = Path(viz.__file__).parent

    def imports(path):
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module or ""}
        return found

    assert not any("widgets" in name for name in imports(package / "viz.py"))
    for path in package.rglob("*.py"):
        if path.name not in ("viz.py", "widgets.py"):
            assert not any(name.endswith("viz") for name in imports(path)), path
    assert matplotlib.get_backend().lower() == "agg"


def test_model_diagram_highlights_what_a_notebook_builds():
    from pathlib import Path

    from matplotlib.colors import to_rgba

    numbers = {
        p.name[:2] for p in (Path(__file__).parent.parent / "notebooks").glob("[0-9]*.ipynb")
    }
    assert numbers <= set(viz.NOTEBOOK_PARTS)
    for notebook, parts in viz.NOTEBOOK_PARTS.items():
        fig = viz.plot_model_diagram(notebook)
        ax = fig.axes[0]
        lit = [p for p in ax.patches if p.get_facecolor() == to_rgba(viz.HIGHLIGHT)]
        assert len(lit) == len(parts), notebook
        bold = {t.get_gid() for t in ax.texts if t.get_fontweight() == "bold"}
        assert bold == {f"part:{p}" for p in parts}, notebook
        assert f"notebook {notebook}" in "".join(t.get_text() for t in ax.texts)
    plain = viz.plot_model_diagram()
    assert not [p for p in plain.axes[0].patches if p.get_facecolor() == to_rgba(viz.HIGHLIGHT)]
    labels = {t.get_gid() for t in plain.axes[0].texts if t.get_gid()}
    assert labels == {f"part:{k}" for k in viz.DIAGRAM_PARTS}


def test_model_diagram_refuses_unknown_parts():
    with pytest.raises(ValueError, match="unknown notebook '99'; the notebooks are 00"):
        viz.plot_model_diagram("99")
    with pytest.raises(ValueError, match="unknown part\\(s\\) 'softmax'; the parts are data"):
        viz.plot_model_diagram(highlight=["softmax"])


def test_model_diagram_draws_its_frame_arrows_and_residual_stream():
    fig = viz.plot_model_diagram("10")
    ax = fig.axes[0]
    rows = len(viz.DIAGRAM_PARTS) - 1  # the loss and the sampling share the top row
    assert [p.get_linestyle() for p in ax.patches].count("--") == 1  # the block's frame
    assert len(ax.patches) == 1 + len(viz.DIAGRAM_PARTS)
    arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]
    assert len(arrows) == rows - 1  # one into every row but the bottom one
    assert [to_hex(line.get_color()) for line in ax.lines] == [to_hex("tab:green")] * 2
    texts = [t.get_text() for t in ax.texts]
    assert "block\n× L" in texts and "residual\nstream" in texts
    assert viz.NOTEBOOK_NOTES["10"] in texts  # the note below the boxes


# A library function longer than this says why in its docstring, with the word "long".
MAX_FUNCTION_LINES = 60


def unexplained_long_functions(source: str) -> list[str]:
    """Every function in `source` over MAX_FUNCTION_LINES lines (from `def` to its last line)
    whose docstring does not contain the word "long": as 'name (line L, N lines)'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1
            explained = re.search(r"\blong\b", ast.get_docstring(node) or "", re.IGNORECASE)
            if lines > MAX_FUNCTION_LINES and not explained:
                found.append(f"{node.name} (line {node.lineno}, {lines} lines)")
    return found


def test_the_length_check_finds_a_long_function():
    def function(lines: int, doc: str) -> str:
        body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
        return f"def f():\n    {doc!r}\n{body}"

    assert unexplained_long_functions(function(60, "Sixty lines.")) == []
    assert unexplained_long_functions(function(61, "Sixty-one lines.")) == ["f (line 1, 61 lines)"]
    nested = "def outer():\n" + "".join(
        "    " + line + "\n" for line in function(61, "").split("\n")
    )
    assert unexplained_long_functions(nested) == [
        "outer (line 1, 62 lines)",
        "f (line 2, 61 lines)",
    ]
    explained = "Long: one table of cases, read top to bottom; split, it reads worse."
    assert unexplained_long_functions(function(61, explained)) == []


def test_no_library_function_is_long_without_a_reason():
    """Outside gptlib/exercises/, every function of gptlib/ fits in 60 lines, or its docstring
    says why it is long."""
    package = Path(viz.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent)
        if relative.parts[1] == "exercises":
            continue
        found += [f"{relative}: {f}" for f in unexplained_long_functions(path.read_text())]
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines with no reason in their docstring: "
        f"{'; '.join(found)}. Split each where a reader would (its parts become helpers with "
        "names that say what they do), or say in its docstring why it is long."
    )
