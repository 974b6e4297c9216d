"""Chinese characters in gptlib.classroom.viz figures are drawn from the CJK font, not as empty boxes, and
Latin-only figures look exactly as they did before the fallback font was added."""

import warnings
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib import font_manager

from gptlib.classroom import viz

LINE = "床前明月光"  # the first line of Li Bai's "Quiet Night Thought", one of the Tang 300
TITLE = f"静夜思：{LINE}"
needs_cjk_font = pytest.mark.skipif(
    not viz.CJK_FONT_FOUND,
    reason=f"no font {viz.CJK_FONT!r}: run 'sudo apt-get install {viz.CJK_FONT_PACKAGE}' "
    "(or bash tests/install_fonts_cjk.sh)",
)


@pytest.fixture(autouse=True, scope="module")
def agg_backend():
    plt.switch_backend("Agg")  # draw off-screen, the same in every environment
    yield


def _causal(n: int) -> torch.Tensor:
    torch.manual_seed(0)
    scores = torch.randn(n, n).masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), -1e9)
    return torch.softmax(scores, dim=-1)


def _drawn(fig) -> tuple[bytes, list[str]]:
    """The figure as PNG bytes, and the message of every warning drawing it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        png = viz.figure_png(fig)
    return png, [str(w.message) for w in caught]


def _missing_glyphs(messages: list[str]) -> list[str]:
    return [m for m in messages if "missing from font" in m]


@needs_cjk_font
def test_chinese_title_and_tick_labels_have_every_glyph():
    attention = viz.plot_attention(_causal(len(LINE)), LINE, title=TITLE)
    bars = viz.plot_bars([0.1, 0.2, 0.3, 0.2, 0.2], list(LINE), title=TITLE, ylabel="概率")
    ax = attention.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{c} {i}" for i, c in enumerate(LINE)]
    assert ax.get_title() == TITLE
    for fig in (attention, bars):
        _, messages = _drawn(fig)
        assert not _missing_glyphs(messages), (
            f"Chinese text drawn with missing glyphs (empty boxes): {_missing_glyphs(messages)[:3]}"
            f"; expected every glyph from the fallback font {viz.CJK_FONT!r}"
        )


@needs_cjk_font
def test_chinese_glyphs_come_from_the_cjk_font():
    fig = viz.plot_attention(_causal(3), "床前明", title=TITLE)
    ax = fig.axes[0]
    for text in (ax.title, ax.get_xticklabels()[0]):
        files = font_manager.fontManager._find_fonts_by_props(text.get_fontproperties())
        names = [Path(f).name for f in files]
        assert any(name.startswith("NotoSansCJK") for name in names), (
            f"{text.get_text()!r} falls back along {names}: expected a NotoSansCJK file"
        )


def test_latin_text_is_still_dejavu():
    fig = viz.plot_attention(_causal(4), ".emm", title="Attention")
    ax = fig.axes[0]
    for text, expected in (
        (ax.title, "DejaVuSans.ttf"),
        (ax.get_xticklabels()[0], "DejaVuSansMono.ttf"),
    ):
        first = Path(font_manager.findfont(text.get_fontproperties())).name
        assert first == expected, f"{text.get_text()!r} is drawn in {first}, expected {expected}"


@needs_cjk_font
def test_latin_figure_is_byte_identical_to_one_without_the_fallback(monkeypatch):
    assert matplotlib.rcParams["font.family"] == ["sans-serif", viz.CJK_FONT]
    assert viz.TICK_FONT["family"] == ["DejaVu Sans Mono", viz.CJK_FONT]
    with_fallback, messages = _drawn(viz.plot_attention(_causal(5), ".emma", title="Attention"))
    assert not _missing_glyphs(messages)
    monkeypatch.setitem(viz.TICK_FONT, "family", "DejaVu Sans Mono")
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        without, _ = _drawn(viz.plot_attention(_causal(5), ".emma", title="Attention"))
    assert with_fallback == without, "a Latin-only figure changed when the CJK fallback was added"


def test_a_missing_cjk_font_is_said_once_with_what_to_install(monkeypatch):
    monkeypatch.setattr(viz, "CJK_FONT_FOUND", False)
    monkeypatch.setattr(viz, "_cjk_missing_said", False)
    monkeypatch.setitem(viz.TICK_FONT, "family", "DejaVu Sans Mono")
    with matplotlib.rc_context({"font.family": ["sans-serif"]}):
        _, latin = _drawn(viz.plot_attention(_causal(3), ".em"))
        chinese = viz.plot_attention(_causal(3), "床前明", title=TITLE)
        _, first = _drawn(chinese)
        _, again = _drawn(chinese)
    said = [m for m in latin + first + again if viz.CJK_FONT_PACKAGE in m]
    assert len(said) == 1, f"expected one message naming {viz.CJK_FONT_PACKAGE}, got {said}"
    assert viz.CJK_FONT in said[0] and "sudo apt-get install fonts-noto-cjk" in said[0]
    assert said[0] in first  # said by the figure with Chinese text, not by the Latin one
