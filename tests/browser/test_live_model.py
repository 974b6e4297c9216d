"""The live microgpt of the website (website/live) in Chromium, against gptlib in PyTorch.

On the page of notebook 04, 20 inputs (a name typed into the page's field, the heads slider on each
of the five trained models, the temperature and top-k sliders moved) are read back from what the
page computed and drew: its token ids, logits at every position, every head's attention weights and
the next-letter probabilities equal gptlib's (`GPT.forward`, `GPT.attention_maps`,
`next_token_probs`, the context read as `gptlib.classroom.widgets` reads it) within 1e-5, and the page draws
one map per head with one cell per visible (query, key) pair. A name the model cannot read is
refused with what, where and what to type. The page's forward pass also matches gptlib on a small
randomly initialised model of the other kind (post-norm LayerNorm with bias, exact GELU, tied head,
two layers), which the page never ships but the script must compute as configured. From disk
(file://), the Chinese page of notebook 08: its labels are Chinese, typing redraws the maps and the
names, moving the temperature redraws the distribution and draws other names, the button draws
fresh ones. Screenshots at 390 x 844 and 1280 x 800 go to test-artifacts/browser/live-model/.
"""

from __future__ import annotations

import functools
import math
from urllib.parse import urlparse

import torch
from conftest import ARTIFACTS

from gptlib.checkpoint import asset_path, load_checkpoint
from gptlib.classroom.widgets import _context_ids
from gptlib.config import textbook
from gptlib.generate import next_token_probs
from gptlib.model import GPT
from website import live

TOLERANCE = 1e-5
HEADS = live.HEAD_COUNTS
# name typed, heads, temperature, top-k (0 = off): every model, the empty name (BOS alone), a name
# longer than the block (cropped), a '.' inside, greedy, the lowest and highest temperatures.
CASES = [
    ("emma", 4, 1.0, 0),
    ("", 4, 1.0, 0),
    ("olivia", 1, 0.5, 0),
    ("a", 2, 2.0, 0),
    ("zz", 8, 1.0, 5),
    ("sophia", 16, 0.75, 0),
    ("christopher", 4, 1.0, 0),
    ("q", 16, 0.05, 3),
    ("liam", 8, 0.0, 0),
    (".noah", 2, 1.25, 10),
    ("x.y", 1, 1.0, 27),
    ("bob", 4, 1.5, 1),
    ("mary", 1, 1.0, 0),
    ("jo", 2, 0.3, 0),
    ("abcdefg", 8, 1.0, 2),
    ("zyx", 16, 2.0, 0),
    ("elizabeth", 2, 0.9, 0),
    ("ava", 4, 0.1, 0),
    ("kk", 8, 1.95, 26),
    ("mia", 1, 0.6, 4),
]
STATE = """el => {
    const s = el.courseLive;
    return {ids: s.ids, logits: s.logits, attention: s.attention, probs: s.probs,
            samples: s.samples, seed: s.seed, heads: s.heads,
            error: s.error ? {char: s.error.char, position: s.error.position} : null};
}"""


@functools.cache
def _model(heads: int):
    ckpt = load_checkpoint(asset_path(f"names-microgpt-h{heads}.pt"))
    return ckpt.model.eval(), ckpt.tokenizer


def _tab(browser, width: int, height: int):
    """A tab that reaches nothing off this machine; tab.problems records console errors, page
    errors and requests that failed or left."""
    context = browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    tab.problems = []

    def only_here(route):
        url = urlparse(route.request.url)
        if url.scheme in ("file", "data", "blob") or url.hostname == "127.0.0.1":
            route.continue_()
        else:
            tab.problems.append(f"request off the machine: {route.request.url}")
            route.abort()

    context.route("**/*", only_here)
    tab.on("console", lambda m: m.type == "error" and tab.problems.append(f"console: {m.text}"))
    tab.on("pageerror", lambda e: tab.problems.append(f"page error: {e}"))
    tab.on("requestfailed", lambda r: tab.problems.append(f"failed: {r.url}"))
    return context, tab


def _open(tab, url: str):
    tab.goto(url, wait_until="load")
    tab.wait_for_selector(".course-live .course-live-map", timeout=10_000)
    return tab.locator(".course-live")


def _set(panel, name: str, heads: int, temperature: float, top_k: int) -> None:
    panel.locator(".course-live-heads").fill(str(HEADS.index(heads)))
    panel.locator(".course-live-temperature").fill(f"{temperature:g}")
    panel.locator(".course-live-topk").fill(str(top_k))
    panel.locator(".course-live-name").fill(name)


def _max_diff(got, expected: torch.Tensor) -> float:
    got = torch.tensor(got, dtype=torch.float64)
    assert got.shape == expected.shape, (tuple(got.shape), tuple(expected.shape))
    return float((got - expected.double()).abs().max())


def _shot(tab, panel, name: str) -> None:
    folder = ARTIFACTS / "live-model"
    folder.mkdir(parents=True, exist_ok=True)
    panel.evaluate("el => el.scrollIntoView({block: 'start', inline: 'nearest'})")
    tab.screenshot(path=str(folder / f"{name}.png"))


@torch.no_grad()
def test_the_page_computes_what_gptlib_computes(site, browser):
    context, tab = _tab(browser, 1280, 800)
    try:
        panel = _open(tab, f"{site['url']}/en/04_multi_head.html")
        start = panel.evaluate(STATE)
        assert start["heads"] == live.START_HEADS and len(start["ids"]) == len(".emma")
        worst = {"logits": 0.0, "attention": 0.0, "probs": 0.0}
        for name, heads, t, k in CASES:
            _set(panel, name, heads, t, k)
            got = panel.evaluate(STATE)
            model, tok = _model(heads)
            ids = _context_ids(tok, name, model.cfg.block_size)
            where = (name, heads, t, k)
            assert got["heads"] == heads and got["ids"] == ids, (where, got["ids"])
            idx = torch.tensor([ids])
            logits = model(idx)[0][0]  # [n, V]
            maps = model.attention_maps(idx)[:, 0]  # [L, h, n, n]
            probs = next_token_probs(logits[-1], temperature=t, top_k=k or None)
            for part, expected in (("logits", logits), ("attention", maps), ("probs", probs)):
                diff = _max_diff(got[part], expected)
                assert diff <= TOLERANCE, (where, part, diff)
                worst[part] = max(worst[part], diff)
            n = len(ids)
            assert panel.locator(".course-live-map").count() == heads, where
            cells = panel.locator(".course-live-map").first.locator("rect.course-live-cell")
            assert cells.count() == n * (n + 1) // 2, where
            assert len(got["samples"]) == 10 and all(
                s.startswith(name.lstrip(".")) for s in got["samples"]
            ), (where, got["samples"])
        print(f"\nlargest differences from gptlib over {len(CASES)} inputs: {worst}")
        _set(panel, "Emma", 4, 1.0, 0)  # a capital: not one of the 27 symbols
        got = panel.evaluate(STATE)
        assert got["error"] == {"char": "E", "position": 0} and got["ids"] is None
        said = panel.locator(".course-live-caption").inner_text()
        assert "'E'" in said and "position 0" in said and "a to z" in said, said
        assert panel.locator(".course-live-map").count() == 0
        assert panel.locator(".course-live-draw").is_disabled()
        _set(panel, "emma", 4, 1.0, 0)
        _shot(tab, panel, "desktop-en-04")
        assert not tab.problems, tab.problems
    finally:
        context.close()
    context, tab = _tab(browser, 390, 844)
    try:
        panel = _open(tab, f"{site['url']}/en/04_multi_head.html")
        panel.locator(".course-live-heads").fill(str(HEADS.index(16)))
        assert panel.locator(".course-live-map").count() == 16
        width = tab.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width} px wide on a 390 px phone"
        _shot(tab, panel, "phone-en-04")
        assert not tab.problems, tab.problems
    finally:
        context.close()


@torch.no_grad()
def test_the_forward_pass_follows_the_config(site, browser):
    """Post-norm LayerNorm with bias, exact GELU, tied head, two layers: the page's forward pass
    on a model of that kind, randomly initialised, equals gptlib's."""
    torch.manual_seed(0)
    cfg = textbook(block_size=8, n_embd=16, n_layer=2, n_head=2, bias=True)
    model = GPT(cfg).eval()
    for p in model.parameters():  # LayerNorm's gains and biases away from 1 and 0 as well
        p.add_(0.3 * torch.randn_like(p))
    entry = live.model_entry(model, "random")
    ids = [26, 4, 12, 12, 0, 3, 9, 1]
    context, tab = _tab(browser, 1280, 800)
    try:
        _open(tab, (site["out"] / "en" / "04_multi_head.html").as_uri())
        got = tab.evaluate(
            "([entry, ids]) => CourseLive.forward(CourseLive.decode(entry), ids)", [entry, ids]
        )
        xs = [-6.0, -2.5, -1.0, -1e-3, 0.0, 0.3, 1.7, 2.6, 5.0]
        erf = tab.evaluate("xs => xs.map(CourseLive.erf)", xs)
    finally:
        context.close()
    assert max(abs(a - math.erf(x)) for a, x in zip(erf, xs, strict=True)) < 1e-12
    idx = torch.tensor([ids])
    assert _max_diff(got["logits"], model(idx)[0][0]) <= TOLERANCE
    assert _max_diff(got["attention"], model.attention_maps(idx)[:, 0]) <= TOLERANCE


def test_from_disk_typing_and_the_temperature_redraw(site, browser):
    context, tab = _tab(browser, 390, 844)
    try:
        panel = _open(tab, (site["out"] / "zh" / "08_logits.html").as_uri())
        assert tab.evaluate("() => location.protocol") == "file:"
        assert "温度" in panel.inner_text() and "头数" in panel.inner_text()
        assert "textbook" in panel.locator(".course-live-below").inner_text()  # what follows
        first = panel.evaluate(STATE)
        assert first["ids"] == [26] and len(first["samples"]) == 10  # the call: ".", 10 names
        labels = panel.locator(".course-live-map").first.locator("text")
        texts = "ts => ts.map(t => t.textContent)"
        assert labels.evaluate_all(texts) == [".", "."]
        name = panel.locator(".course-live-name")
        name.press_sequentially("ma")
        typed = panel.evaluate(STATE)
        assert labels.evaluate_all(texts) == [".", ".", "m", "m", "a", "a"]
        assert typed["ids"] == [26, 12, 0] and typed["logits"] != first["logits"]
        assert all(s.startswith("ma") for s in typed["samples"]), typed["samples"]
        _shot(tab, panel, "phone-zh-08")
        temperature = panel.locator(".course-live-temperature")
        temperature.focus()
        for _ in range(6):
            tab.keyboard.press("ArrowLeft")  # 1.00 -> 0.70
        cooler = panel.evaluate(STATE)
        assert panel.locator(".course-live-control output").nth(1).inner_text() == "0.70"
        assert max(cooler["probs"]) > max(typed["probs"])  # colder: sharper
        assert cooler["samples"] != typed["samples"] and cooler["seed"] == typed["seed"]
        panel.locator(".course-live-draw").click()
        fresh = panel.evaluate(STATE)
        assert fresh["seed"] == cooler["seed"] + 1 and fresh["samples"] != cooler["samples"]
        temperature.press("Home")  # 0: greedy, every name the same
        greedy = panel.evaluate(STATE)
        assert len(set(greedy["samples"])) == 1 and sorted(greedy["probs"])[-2:] == [0, 1]
        tab.set_viewport_size({"width": 1280, "height": 800})
        temperature.fill("1")
        _shot(tab, panel, "desktop-zh-08")
        assert not tab.problems, tab.problems
    finally:
        context.close()
