"""The course's website (`make site`), read in Chromium with the network cut off.

The site is built into a temporary folder and served on 127.0.0.1; every request to any other
host is aborted and recorded, and so is every failed request (about: and fonts included), every
answer of 400 or more and every error on the browser's console. Checked: every page of both
editions loads with none of those, declares its language (zh-CN for the Chinese edition), has
every picture loaded, its formulas typeset, a language link to its twin, previous/next with the
neighbouring chapters' titles, copy buttons on its code, and a download of its notebook that resolves to the notebook
itself; search finds the attention chapters for "attention" in English and 注意力 in Chinese; on
a 390 px phone a chapter of each edition does not overflow the page sideways. Every slider the
site draws as pictures moves, in both editions, by keyboard and mouse: each move shows another
picture, and the picture shown is byte for byte what website/frames.py draws for that value in
this process and what the notebook's own widget draws there (its update path driven in-process,
with matplotlib's Agg backend); where the page starts is the picture stored in the notebook. (The
sliders the live microgpt moves are tested in test_live_model.py.)
Screenshots go to test-artifacts/browser/site/.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from urllib.parse import urlparse

import pytest
from conftest import ARTIFACTS, ROOT

from gptlib.language import set_language
from website import frames
from website.build import (
    EDITIONS,
    PAGES,
    WIDGET_STATE,
    WIDGET_VIEW,
    _widget_outputs,
    title,
)

STEMS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LANGS = {"en": "en", "zh": "zh-CN"}


def _tab(browser, width: int, height: int):
    """A browser tab that can reach 127.0.0.1 only. `tab.problems` records every request that
    was blocked or failed, every answer of 400 or more and every console error."""
    context = browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    tab.problems = []

    def only_here(route):
        url = urlparse(route.request.url)
        if url.hostname == "127.0.0.1" or url.scheme in ("data", "blob", "file"):
            route.continue_()
        else:
            tab.problems.append(f"request off the machine: {route.request.url}")
            route.abort()

    context.route("**/*", only_here)
    tab.on("requestfailed", lambda r: tab.problems.append(f"failed: {r.url}: {r.failure}"))
    tab.on(
        "response",
        lambda r: r.status >= 400 and tab.problems.append(f"HTTP {r.status}: {r.url}"),
    )
    tab.on(
        "console",
        lambda m: m.type == "error" and tab.problems.append(f"console: {m.text} {m.location}"),
    )
    tab.on("pageerror", lambda e: tab.problems.append(f"page error: {e}"))
    tab.loaded = []  # (url, bytes) of every request that finished
    tab.on(
        "requestfinished",
        lambda r: tab.loaded.append((r.url, r.sizes()["responseBodySize"])),
    )
    return context, tab


@pytest.fixture
def desktop(browser):
    context, tab = _tab(browser, 1280, 900)
    yield tab
    context.close()


@pytest.fixture
def phone(browser):
    context, tab = _tab(browser, 390, 844)
    yield tab
    context.close()


def _shot(tab, name: str, full_page: bool = False) -> None:
    folder = ARTIFACTS / "site"
    folder.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(folder / f"{name}.png"), full_page=full_page)


def _open(tab, url: str) -> dict:
    """Load a page, wait for MathJax (where the page has formulas) and report what it shows."""
    tab.goto(url, wait_until="load")
    return tab.evaluate(
        """async () => {
        if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
        const formulas = document.querySelectorAll('mjx-container').length;
        const imgs = [...document.images];
        await Promise.all(imgs.map(i => i.decode().catch(() => null)));
        await document.fonts.ready;  // the formulas' web fonts: leaving earlier aborts them
        const prose = [...document.querySelectorAll('article .cell.tag_markdown, article p, article li')]
            .map(e => e.innerText).join('\\n');
        const link = document.querySelector('a.course-language');
        const download = document.querySelector('a[href*="_sources/"][href$=".ipynb"]');
        const prevNext = document.querySelector('.prev-next-area');
        return {
            lang: document.documentElement.lang,
            formulas,
            dollars: (prose.match(/\\$/g) || []).length,
            pictures: imgs.length,
            broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80)),
            twin: link && link.getAttribute('href'),
            download: download && download.href,
            prevNext: prevNext ? prevNext.innerText : '',
            copyButtons: document.querySelectorAll('button.copybtn').length,
        };
    }"""
    )


def test_every_page_of_both_editions(site, desktop):
    """Every page: no console error, no failed or outside request, the right lang, pictures,
    formulas, the twin, previous/next with titles and a download that is the notebook."""
    chs = site["chapters"]
    for lang in EDITIONS:
        other = "zh" if lang == "en" else "en"
        for i, stem in enumerate(STEMS):
            seen = _open(desktop, f"{site['url']}/{lang}/{stem}.html")
            where = f"{lang}/{stem}"
            assert seen["lang"] == LANGS[lang], where
            assert seen["pictures"] >= 1 and not seen["broken"], (where, seen["broken"])
            assert seen["dollars"] == 0, f"{where}: a formula was left as raw TeX"
            assert seen["twin"] == f"../{other}/{stem}.html", where
            assert seen["copyButtons"] >= 1, f"{where}: no copy button on its code"
            assert (site["out"] / other / f"{stem}.html").is_file(), where
            if i + 1 < len(STEMS):
                assert chs[STEMS[i + 1]]["titles"][lang] in seen["prevNext"], where
            if i > 0:
                assert chs[STEMS[i - 1]]["titles"][lang] in seen["prevNext"], where
            got = desktop.request.get(seen["download"])
            assert got.ok, (where, seen["download"])
            notebook = got.json()  # the notebook itself, not the copy the page was made from
            assert title(notebook) == chs[stem]["titles"][lang], where
            assert all(c.get("id") != "course-run-note" for c in notebook["cells"]), where
            assert not desktop.problems, (where, desktop.problems)
            if stem.startswith("03_"):
                assert seen["formulas"] >= 10, (where, seen["formulas"])
                _shot(desktop, f"desktop-{lang}-{stem}")
        for page in ["index.html", "glossary.html", "errata.html", "genindex.html"]:
            seen = _open(desktop, f"{site['url']}/{lang}/{page}")
            assert seen["lang"] == LANGS[lang], page
            assert not desktop.problems, (lang, page, desktop.problems)
        desktop.goto(f"{site['url']}/{lang}/search.html?q=softmax")
        desktop.wait_for_selector("#search-results ul.search li a")
        assert not desktop.problems, (lang, "search", desktop.problems)
    desktop.goto(f"{site['url']}/index.html")
    assert not desktop.problems, ("index", desktop.problems)


def test_the_index_offers_both_languages_and_every_chapter(site, desktop):
    desktop.goto(f"{site['url']}/index.html")
    choices = desktop.eval_on_selector_all(
        "nav.langs a", "links => links.map(a => a.getAttribute('href'))"
    )
    assert choices == ["en/index.html", "zh/index.html"]
    for lang in EDITIONS:
        hrefs = desktop.eval_on_selector_all(
            f"#{lang} a", "links => links.map(a => a.getAttribute('href'))"
        )
        assert hrefs == [f"{lang}/{stem}.html" for stem in STEMS], lang
        assert desktop.get_attribute(f"#{lang}", "lang") == LANGS[lang]
    _shot(desktop, "index")
    assert not desktop.problems, desktop.problems


@pytest.mark.parametrize(("lang", "query"), [("en", "attention"), ("zh", "注意力")])
def test_search_finds_the_attention_chapters(site, desktop, lang, query):
    desktop.goto(f"{site['url']}/{lang}/search.html?q={query}")
    desktop.wait_for_selector("#search-results ul.search li a", timeout=30_000)
    desktop.wait_for_function(
        "() => document.querySelector('#search-results .search-summary')"
        " && /\\d/.test(document.querySelector('#search-results .search-summary').innerText)",
        timeout=30_000,
    )
    found = desktop.eval_on_selector_all(
        "#search-results ul.search li > a", "links => links.map(a => a.getAttribute('href'))"
    )
    pages = {href.split("?")[0].split("#")[0].removesuffix(".html") for href in found}
    for stem in STEMS:
        if stem[:2] in ("03", "04"):
            assert stem in pages, (query, sorted(pages))
    _shot(desktop, f"search-{lang}")
    assert not desktop.problems, desktop.problems


@pytest.mark.parametrize("lang", list(EDITIONS))
def test_a_chapter_fits_a_phone(site, phone, lang):
    stem = next(s for s in STEMS if s.startswith("03_"))
    _open(phone, f"{site['url']}/{lang}/{stem}.html")
    width = phone.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"the page is {width} px wide on a 390 px phone"
    assert phone.locator("a.course-language").is_visible()
    _shot(phone, f"phone-{lang}-{stem}")
    phone.locator("div.cell_output").nth(2).scroll_into_view_if_needed()
    _shot(phone, f"phone-{lang}-{stem}-code")
    phone.locator(".course-frames").first.scroll_into_view_if_needed()
    assert phone.locator(".course-frames input[type=range]").first.is_visible()
    _shot(phone, f"phone-{lang}-{stem}-slider")
    assert not phone.problems, phone.problems


def test_a_slider_has_its_note(site, desktop):
    stem = next(s for s in STEMS if s.startswith("08_"))
    seen = _open(desktop, f"{site['url']}/zh/{stem}.html")
    notes = desktop.locator(".course-slider-note")
    assert notes.count() >= 1
    assert "JupyterLab" in notes.first.inner_text()
    assert seen["pictures"] >= 3 and not seen["broken"], seen
    notes.first.scroll_into_view_if_needed()
    _shot(desktop, f"zh-{stem}-slider")
    assert not desktop.problems, desktop.problems


# ---------------------------------------------------------------------------------------------
# The sliders: what the page shows at a value is what the notebook's widget draws there.


@functools.cache
def _widget(name: str, lang: str):
    """The notebook's widget, built as its notebook builds it (03, 04), in `lang` (the caller has
    set it)."""
    from gptlib.checkpoint import asset_path
    from gptlib.classroom import widgets

    if name == "attention_scale_explorer":
        return widgets.attention_scale_explorer(seed=0)
    return widgets.heads_explorer(
        {c: asset_path(f"names-microgpt-h{c}.pt") for c in [1, 2, 4, 8, 16]},
        context="emma",
        textbook_checkpoint=asset_path("names-textbook.pt"),
    )


def _widget_draws(
    name: str, slider: str, key: tuple[int, ...], labels: list[list[str]], lang: str
) -> tuple[list[bytes], str]:
    """What the widget itself shows with its controls at `key` (indexes into their values, which
    the page's range inputs name in `labels`): its pictures, as JupyterLab's inline backend draws
    them, and its samples' text, in the edition's language."""
    set_language(lang)
    try:
        return _draw(_widget(name, lang), slider, key, labels)
    finally:
        set_language("en")


def _draw(w, slider: str, key: tuple[int, ...], labels: list[list[str]]) -> tuple[list[bytes], str]:
    if slider == "scale":
        w.d_k.value = list(w.d_k.options)[key[0]]
        w.scaled.value = bool(key[1])
        return [frames.inline_png(w.figure)], ""
    w.layer.value, w.head.value = key  # the textbook preset's maps
    return [frames.inline_png(w.textbook_figure)], ""


def _stored(stem: str, name: str, lang: str) -> list[bytes]:
    """The pictures the widget drew when the notebook was executed, as the notebook stores them."""
    folder = ROOT / "notebooks" / ("zh" if lang == "zh" else "")
    nb = json.loads((folder / f"{stem}.ipynb").read_text(encoding="utf-8"))
    state = nb["metadata"]["widgets"][WIDGET_STATE]["state"]
    for cell in nb["cells"]:
        if f"widgets.{name}(" in "".join(cell["source"]):
            for out in cell["outputs"]:
                if WIDGET_VIEW in out.get("data", {}):
                    found = _widget_outputs(state, out["data"][WIDGET_VIEW]["model_id"])
                    return [base64.b64decode(o["data"]["image/png"]) for o in found if "data" in o]
    raise AssertionError(f"no {name} in {stem}")


# chapter, widget, slider, how to move it: (control, key to press or "click", then the indexes
# of all the controls, or the index of that control alone).
MOVES = [
    (
        "03",
        "attention_scale_explorer",
        "scale",
        [(0, "Home", (0, 1)), (1, "click", (0, 0)), (0, "End", (9, 0))],
    ),
    ("04", "heads_explorer", "textbook", [(0, "End", (3, 0)), (1, "ArrowRight", (3, 1))]),
]


@pytest.mark.parametrize("lang", list(EDITIONS))
@pytest.mark.parametrize(("number", "name", "slider", "moves"), MOVES, ids=[m[2] for m in MOVES])
def test_each_slider_moves_and_shows_what_its_widget_draws(
    site, desktop, lang, number, name, slider, moves
):
    stem = next(s for s in STEMS if s.startswith(f"{number}_"))
    _open(desktop, f"{site['url']}/{lang}/{stem}.html")
    block = desktop.locator(f'.course-frames[data-slider="{slider}"]')
    block.scroll_into_view_if_needed()
    inputs = block.locator(".course-frames-controls input")
    assert inputs.first.is_visible(), "the script did not show the slider's controls"

    def shown() -> tuple[str, list[bytes], str]:
        srcs = block.locator(".course-frames-pictures img").evaluate_all(
            "imgs => imgs.map(i => i.src)"
        )
        got = [desktop.request.get(src) for src in srcs]
        assert all(g.ok for g in got), srcs
        text = block.locator(".course-frames-text").text_content()
        return block.get_attribute("data-frame") or "", [g.body() for g in got], text

    def key_of(control) -> int:
        return (
            int(inputs.nth(control).input_value())
            if inputs.nth(control).get_attribute("type") == "range"
            else int(inputs.nth(control).is_checked())
        )

    _, pictures, _ = shown()
    assert pictures == _stored(stem, name, lang), "the start is not the notebook's picture"
    before, seen = pictures, {}
    for control, press, expected in moves:
        field = inputs.nth(control)
        if press == "click":  # the mouse: a checkbox clicked, a range clicked at three quarters
            if field.get_attribute("type") == "range":
                box = field.bounding_box()
                desktop.mouse.click(box["x"] + 0.75 * box["width"], box["y"] + box["height"] / 2)
            else:
                field.click()
        else:
            field.focus()
            desktop.keyboard.press(press)
        key = tuple(key_of(c) for c in range(inputs.count()))
        if isinstance(expected, int):
            assert key[control] == expected, (press, key)
        else:
            assert expected is None or key == expected, (press, key)
        frame, pictures, text = shown()
        assert frame == frames.key_text(key), (frame, key)
        assert pictures != before, f"{slider}: the picture did not change ({press})"
        labels = []
        for c in range(inputs.count()):
            if inputs.nth(c).get_attribute("type") == "range":
                labels.append(json.loads(inputs.nth(c).get_attribute("data-labels")))
                assert inputs.nth(c).get_attribute("aria-valuetext") == labels[c][key[c]]
            else:
                labels.append(["off", "on"])
        seen[key] = pictures, text
        before = pictures
    _shot(desktop, f"slider-{lang}-{slider}")
    drawn = frames.draw_one(name, set(seen), lang)  # what frames.py draws, at those values only
    made = next(s for s in drawn if s.name == slider).frames
    for key, (pictures, text) in seen.items():
        assert pictures == made[key].pictures, f"{slider} at {key}: not what frames.py draws"
        assert text == made[key].text
        widget_pictures, widget_text = _widget_draws(name, slider, key, labels, lang)
        assert pictures == widget_pictures, f"{slider} at {key}: not what the widget draws"
        if widget_text:
            assert text == widget_text
    assert not desktop.problems, desktop.problems


def test_the_site_is_whole(site):
    """Every chapter in both languages, the glossary and the errata, and each edition's index."""
    assert site["pages"] == 2 * (len(STEMS) + len(PAGES)) + 2, site


# ---------------------------------------------------------------------------------------------
# A phone: both menus open and lead somewhere.


@pytest.mark.parametrize("lang", list(EDITIONS))
def test_both_menus_open_and_navigate_on_a_phone(site, phone, lang):
    """At 390 x 844: the chapter list opens from its button and one of its links opens that
    chapter; the page's contents open from theirs and a heading's link closes them and brings
    the heading into view."""
    first, second = STEMS[3], STEMS[4]
    _open(phone, f"{site['url']}/{lang}/{first}.html")
    phone.locator(".bd-header-article .primary-toggle").click()
    chapters = phone.locator("dialog#pst-primary-sidebar-modal")
    chapters.wait_for(state="visible")
    _shot(phone, f"phone-menu-{lang}-chapters")
    chapters.locator(f'a[href="{second}.html"]').click()
    phone.wait_for_url(f"**/{lang}/{second}.html")
    contents = phone.locator("dialog#pst-secondary-sidebar-modal")
    assert not contents.is_visible()
    phone.locator(".bd-header-article .secondary-toggle").click()
    contents.wait_for(state="visible")
    _shot(phone, f"phone-menu-{lang}-contents")
    link = contents.locator("a.nav-link[href^='#']").nth(2)
    anchor = link.get_attribute("href")
    link.click()
    contents.wait_for(state="hidden")
    phone.wait_for_function(f"() => location.hash === {json.dumps(anchor)}")
    # the theme scrolls smoothly: the heading comes onto the screen, and stays
    phone.wait_for_function(
        "id => { const top = document.getElementById(id).getBoundingClientRect().top;"
        " return top >= 0 && top < 844 - 60; }",
        arg=anchor[1:],
    )
    phone.wait_for_timeout(300)
    top = phone.evaluate(
        "id => document.getElementById(id).getBoundingClientRect().top", anchor[1:]
    )
    assert 0 <= top < 844 - 60, f"{anchor} is at {top} px: off the phone's screen"
    assert not phone.problems, phone.problems


# ---------------------------------------------------------------------------------------------
# ERRATA and GLOSSARY on the site, and the site's weight.


@pytest.mark.parametrize("lang", list(EDITIONS))
def test_every_errata_mention_links_its_entry(site, lang):
    """No "ERRATA N" on a chapter page outside a link to its entry on the errata page, and the
    glossary's rows link the chapters that teach them."""
    folder = site["out"] / lang
    errata = (folder / "errata.html").read_text(encoding="utf-8")
    linked = 0
    for stem in STEMS:
        text = (folder / f"{stem}.html").read_text(encoding="utf-8")
        text = re.sub(r'<script type="application/json".*?</script>', "", text, flags=re.S)
        for href, n in re.findall(
            r'<a [^>]*href="errata\.html#([^"]+)"[^>]*>(?:<[^>]+>)*ERRATA (\d+)<', text
        ):
            entry = re.search(
                rf'<section id="{re.escape(href)}">\s*(?:<span [^>]*></span>)?<h3>(\d+)\.', errata
            )
            assert entry and entry.group(1) == n, (stem, n, href)  # entry n's own heading
            linked += 1
        bare = re.sub(r"<a [^>]*>.*?</a>", "", text, flags=re.S)
        bare = re.sub(r"<[^>]+>", "", bare)
        assert not re.search(r"ERRATA \d", bare), (stem, re.findall(r".{40}ERRATA \d+", bare))
    assert linked >= 50, linked
    glossary = (folder / "glossary.html").read_text(encoding="utf-8")
    taught = set(re.findall(r'href="(\d\d_\w+)\.html#', glossary))
    assert taught == set(STEMS), sorted(set(STEMS) - taught)


def test_no_page_is_heavy_and_the_site_is_small(site, browser):
    """The three heaviest pages as the build weighs them, loaded in a fresh tab (nothing cached),
    fetch at most 1.5 MB, formulas' fonts included; the whole site stays under 39 MB."""
    heaviest = sorted(site["weights"], key=site["weights"].get)[-3:]
    for page in heaviest:
        context, tab = _tab(browser, 1280, 900)
        try:
            _open(tab, f"{site['url']}/{page}")
            tab.wait_for_load_state("networkidle")
            fetched = sum(size for _, size in tab.loaded)
            assert fetched <= 1.5e6, (page, fetched, sorted(tab.loaded, key=lambda x: -x[1])[:5])
            assert not tab.problems, tab.problems
        finally:
            context.close()
    assert site["bytes"] < 39e6, site["bytes"]


# ---------------------------------------------------------------------------------------------
# Search: what a page teaches comes first.


def _cells(row: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]


def glossary_terms() -> list[tuple[str, str, set[str]]]:
    """(edition, term, the chapters that teach it) for every term of GLOSSARY.md's term tables:
    the English term, and each Chinese word of the 中文 column (not "原文用英文" notes or the
    English words it keeps)."""
    text = (ROOT / "GLOSSARY.md").read_text(encoding="utf-8").split("## Core questions")[0]
    found = []
    for row in text.splitlines():
        if not row.startswith("| ") or row.startswith("| English") or row.startswith("| ---"):
            continue
        cells = _cells(row)
        taught = set(re.findall(r"notebooks/(?:zh/)?(\d\d_\w+)\.ipynb", row))
        english = re.sub(r"[`*]", "", cells[0]).strip()
        found.append(("en", english, taught))
        chinese = cells[1]
        while re.search(r"\([^()]*\)|（[^（）]*）", chinese):  # notes, nested ones too
            chinese = re.sub(r"\([^()]*\)|（[^（）]*）", "", chinese)
        for word in re.split(r"\s*[/;；]\s*", chinese):
            word = re.sub(r"[`*]|^第 \d 章[:：]\s*", "", word).strip()
            if re.search(r"[\u4e00-\u9fff]", word):
                found.append(("zh", word, taught))
    return found


def test_search_puts_the_teaching_chapter_first(site, desktop):
    """Each glossary term (160 English, the Chinese words of its 中文 column) and each chapter's
    title in both editions: the first result is the chapter that teaches it."""
    queries = {lang: [] for lang in EDITIONS}
    for lang, term, taught in glossary_terms():
        queries[lang].append((term, sorted(taught)))
    for stem, c in site["chapters"].items():
        for lang, t in c["titles"].items():
            queries[lang].append((t, [stem]))
            queries[lang].append((re.split(r" \(|：", t)[0], [stem]))
    missed = {}
    for lang, asked in queries.items():
        desktop.goto(f"{site['url']}/{lang}/search.html")
        tops = desktop.evaluate(
            "qs => qs.map(q => (window.courseSearch.search(q)[0] || '').replace('.html', ''))",
            [q for q, _ in asked],
        )
        missed[lang] = [
            (q, want, top) for (q, want), top in zip(asked, tops, strict=True) if top not in want
        ]
        print(f"{lang}: {len(asked) - len(missed[lang])} of {len(asked)} queries first")
    assert missed == {"en": [], "zh": []}, missed
    assert not desktop.problems, desktop.problems


def test_search_from_disk_shows_results_with_excerpts(site, browser):
    """Opened from file://, the search page still finds the causal mask's chapter and shows an
    excerpt from the chapter's text (no menu text), with no console error."""
    context, tab = _tab(browser, 1280, 900)
    try:
        tab.goto((site["out"] / "zh" / "search.html").as_uri() + "?q=因果掩码")
        tab.wait_for_selector("#search-results ul.search li p.context")
        first = tab.locator("#search-results ul.search li").first
        assert first.locator("a").get_attribute("href").startswith("03_scaled_attention.html")
        assert "因果掩码" in first.inner_text()  # in the section's heading or its excerpt
        excerpt = first.locator("p.context").inner_text()
        assert len(excerpt) > 40 and "Ctrl" not in excerpt and "章节" not in excerpt, excerpt
        assert not [p for p in tab.problems if "off the machine" not in p], tab.problems
    finally:
        context.close()


def test_the_slider_frames_stay_small(site):
    """The frames of the sliders that need the notebook's run (03's d_k with and without the
    scale, 04's textbook-preset layers and heads), in about a MiB per edition; the live
    microgpt's weights, script and style in a few hundred KB for both."""
    each = 10 * 2 + 4 * 4
    assert site["frames"] == len(EDITIONS) * each, site  # each edition's, in its language
    assert site["frame_bytes"] < 4 * 2**20, site
    live = sum(p.stat().st_size for p in (site["out"] / "live").iterdir())
    assert live < 300_000, live


# ---------------------------------------------------------------------------------------------
# Accessibility: axe-core over each kind of page, in light and dark mode.

AXE_PAGES = {  # each kind of page once in each mode, the editions taking turns
    "light": [
        "index.html",
        "en/03_scaled_attention.html",
        "zh/glossary.html",
        "zh/search.html?q=注意力",
    ],
    "dark": ["zh/index.html", "zh/08_logits.html", "en/errata.html", "en/search.html?q=attention"],
}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_accessibility_violation(site, browser, scheme):
    """axe-core (the pinned axe-playwright-python's) finds no serious or critical violation,
    contrast included, on an index, a chapter, the glossary or the errata and a search with
    results, in the reader's light or dark mode."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    context = browser.new_context(  # no motion: the theme's colour transitions end at once
        viewport={"width": 1280, "height": 900}, color_scheme=scheme, reduced_motion="reduce"
    )
    tab = context.new_page()
    found = {}
    try:
        for page in AXE_PAGES[scheme]:
            tab.goto(f"{site['url']}/{page}", wait_until="load")
            if "search.html" in page:
                tab.wait_for_selector("#search-results ul.search li")
            tab.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
            violations = axe.run(tab).response["violations"]
            found[page] = [
                (v["id"], v["impact"], [n["target"] for n in v["nodes"][:3]])
                for v in violations
                if v["impact"] in ("serious", "critical")
            ]
            print(scheme, page, "violations:", [(v["id"], v["impact"]) for v in violations])
        _shot(tab, f"axe-{scheme}-last")
    finally:
        context.close()
    assert not any(found.values()), found
