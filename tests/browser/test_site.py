"""The course's website (`make site`), read in Chromium with the network cut off.

The site is built into a temporary folder and served on 127.0.0.1; every request to any other
host is aborted and recorded, and so is every failed request (about: and fonts included), every
answer of 400 or more and every error on the browser's console. Checked: every page of both
editions loads with none of those, declares its language (zh-CN for the Chinese edition), has
every picture loaded, its formulas typeset, a language link to its twin, previous/next with the
neighbouring chapters' titles, copy buttons on its code, and a download of its notebook that resolves to the notebook
itself; search finds the attention chapters for "attention" in English and 注意力 in Chinese; on
a 390 px phone a chapter of each edition does not overflow the page sideways; a slider shows as
its stored picture with its note. Screenshots go to test-artifacts/browser/site/.
"""

from __future__ import annotations

import functools
import http.server
import threading
from urllib.parse import urlparse

import pytest
from conftest import ARTIFACTS, ROOT

from website.build import EDITIONS, build, chapters, title

STEMS = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
LANGS = {"en": "en", "zh": "zh-CN"}


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failures itself
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "_site"
    done = build(out)
    done["chapters"] = {c["stem"]: c for c in chapters()}  # as built: notebooks may change later
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", "out": out, **done}
    finally:
        server.shutdown()
        server.server_close()


def _tab(browser, width: int, height: int):
    """A browser tab that can reach 127.0.0.1 only. `tab.problems` records every request that
    was blocked or failed, every answer of 400 or more and every console error."""
    context = browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    tab.problems = []

    def only_here(route):
        url = urlparse(route.request.url)
        if url.hostname == "127.0.0.1" or url.scheme in ("data", "blob"):
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
        let formulas = 0;
        if (window.MathJax && MathJax.startup) {
            await MathJax.startup.promise;
            formulas = document.querySelectorAll('mjx-container').length;
        }
        const imgs = [...document.images];
        await Promise.all(imgs.map(i => i.decode().catch(() => null)));
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
        seen = _open(desktop, f"{site['url']}/{lang}/index.html")
        assert seen["lang"] == LANGS[lang]
        assert not desktop.problems, (lang, desktop.problems)


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
    assert not phone.problems, phone.problems


def test_a_slider_is_shown_as_its_stored_picture(site, desktop):
    stem = next(s for s in STEMS if s.startswith("08_"))
    seen = _open(desktop, f"{site['url']}/zh/{stem}.html")
    notes = desktop.locator(".course-slider-note")
    assert notes.count() >= 1
    assert "JupyterLab" in notes.first.inner_text()
    assert seen["pictures"] >= 3 and not seen["broken"], seen
    notes.first.scroll_into_view_if_needed()
    _shot(desktop, f"zh-{stem}-slider")
    assert not desktop.problems, desktop.problems


def test_the_site_is_whole(site):
    """Every chapter in both languages, and each edition's index."""
    assert site["pages"] == 2 * len(STEMS) + 2, site
