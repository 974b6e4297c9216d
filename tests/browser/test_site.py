"""The course's website (`make site`), read in Chromium with the network cut off.

The site is built into a temporary folder and served on 127.0.0.1; every request to any other
host is aborted and recorded. Checked: the index lists every chapter in both languages; a chapter
page has its formulas typeset (no `$` left in the text of its markdown), every picture loaded,
and its language link lands on the same chapter in the other language; a slider's picture and
its note are shown; no request failed and none left the machine. A screenshot of each page
checked goes to test-artifacts/browser/site/.
"""

from __future__ import annotations

import functools
import http.server
import threading
from urllib.parse import urlparse

import pytest
from conftest import ARTIFACTS, ROOT

from website.build import build

ENGLISH = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test reports failures itself
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "_site"
    done = build(out)
    handler = functools.partial(_Quiet, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_address[1]}", **done}
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def offline(browser):
    """A browser tab that can reach 127.0.0.1 only; `tab.outside` and `tab.failed` record what
    was blocked and what failed."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    tab.outside, tab.failed = [], []

    def only_here(route):
        url = urlparse(route.request.url)
        if url.hostname == "127.0.0.1" or url.scheme in ("about", "data", "blob"):
            route.continue_()
        else:
            tab.outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_here)
    # about:blank (a frame MathJax opens to measure its font) is not a request to anywhere.
    tab.on(
        "requestfailed",
        lambda r: r.url.startswith("about:") or tab.failed.append(f"{r.url}: {r.failure}"),
    )
    yield tab
    context.close()


def _shot(tab, name: str) -> None:
    folder = ARTIFACTS / "site"
    folder.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(folder / f"{name}.png"), full_page=False)


def _typeset(tab, formulas: bool = True) -> None:
    """Wait until MathJax has started and typeset the page (and, with `formulas`, drawn some)."""
    drawn = " && document.querySelector('.MathJax, .MathJax_Display')" if formulas else ""
    tab.wait_for_function(
        "() => window.MathJax && MathJax.isReady && MathJax.Hub.queue.pending === 0"
        f" && MathJax.Hub.queue.running === 0{drawn}",
        timeout=60_000,
    )


def _pictures(tab) -> tuple[int, list[str]]:
    return tab.evaluate(
        "() => { const imgs = [...document.images];"
        " return [imgs.length, imgs.filter(i => !(i.complete && i.naturalWidth > 0))"
        ".map(i => i.src.slice(0, 80))]; }"
    )


def test_index_lists_every_chapter_in_both_languages(site, offline):
    offline.goto(f"{site['url']}/index.html")
    for lang in ("en", "zh"):
        hrefs = offline.eval_on_selector_all(
            f"#{lang} table.course-chapters a", "links => links.map(a => a.getAttribute('href'))"
        )
        assert hrefs == [f"{lang}/{stem}.html" for stem in ENGLISH], lang
    _shot(offline, "index")
    assert not offline.outside and not offline.failed, (offline.outside, offline.failed)


@pytest.mark.parametrize(("lang", "other"), [("zh", "en"), ("en", "zh")])
def test_a_chapter_is_typeset_has_its_pictures_and_its_twin(site, offline, lang, other):
    chapter = next(s for s in ENGLISH if s.startswith("03_"))
    offline.goto(f"{site['url']}/{lang}/{chapter}.html")
    _typeset(offline)
    markdown = offline.eval_on_selector_all(
        ".jp-MarkdownCell", "cells => cells.map(c => c.innerText).join('\\n')"
    )
    assert markdown.strip() and "$" not in markdown, "a formula was left as raw TeX"
    if lang == "zh":
        assert "注意力" in markdown
    count, broken = _pictures(offline)
    assert count >= 3 and not broken, (count, broken)
    _shot(offline, f"{lang}-{chapter}")
    offline.click("a.course-language")
    offline.wait_for_load_state("load")
    assert offline.url.endswith(f"/{other}/{chapter}.html"), offline.url
    assert not offline.outside and not offline.failed, (offline.outside, offline.failed)


def test_a_slider_is_shown_as_its_stored_picture(site, offline):
    chapter = next(s for s in ENGLISH if s.startswith("08_"))
    offline.goto(f"{site['url']}/zh/{chapter}.html")
    _typeset(offline, formulas=False)
    notes = offline.locator(".course-slider-note")
    assert notes.count() >= 1
    assert "JupyterLab" in notes.first.inner_text()
    count, broken = _pictures(offline)
    assert count >= 3 and not broken, (count, broken)
    notes.first.scroll_into_view_if_needed()
    _shot(offline, f"zh-{chapter}-slider")
    assert not offline.outside and not offline.failed, (offline.outside, offline.failed)


def test_the_site_is_whole(site):
    """Every chapter in both languages, and nothing but the site's own files."""
    assert site["pages"] == 2 * len(ENGLISH), site
