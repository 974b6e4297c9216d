"""The site's search index: what each page teaches, section by section, for course-search.js.

Sphinx's own search ranks a word in the body like a word in a title, shows the theme's menus in
its excerpts, fetches every page it lists (which fails from file://) and, for Chinese, holds
jieba's word pieces that a query typed in the browser is never split into. This index holds, for
each page of an edition, its title and, for each section, its anchor, its heading and its prose
and code as plain text (no outputs, no menus); the script searches it as it is, Chinese by
substring, so any word of a section is found however it would have been cut. It is a script
(`window.courseSearchIndex = ...`), so the search page reads it from file:// too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString

# Not what a page teaches: the cells' outputs, the sliders' pictures and notes, the line on
# running the notebook, headings' link marks, scripts.
SKIP = [
    ".cell_output",
    ".cell_input",  # the code: only its names are kept (names())
    ".course-frames",
    ".course-slider-note",
    ".course-run-note",
    ".headerlink",
    "script",
    "style",
    "mjx-container",
]
# Pages that list or cite what the chapters teach: searched, but ranked after the chapters.
REFERENCE = {"glossary", "errata", "index"}


def _text(node) -> str:
    return re.sub(r"\s+", " ", node.get_text(" ")).strip()


def sections(html: str) -> tuple[str, list[dict]]:
    """A built page's title and its sections: [{"id", "heading", "text", "code"}], in page order,
    each section's prose without that of the sections inside it, and the names its code uses
    (those with a dot or an underscore: causal_attention, F.softmax), not the code itself."""
    soup = BeautifulSoup(html, "html.parser")
    article = soup.select_one("article.bd-article") or soup.select_one('[role="main"]')
    if article is None:
        return "", []
    code = {}  # each code cell's section -> the names it uses
    for cell in article.select(".cell_input"):
        sec = cell.find_parent("section")
        found = re.findall(r"[A-Za-z_][\w.]*[_.][\w.]*\w", cell.get_text(" "))
        code.setdefault(id(sec), []).extend(found)
    for sel in SKIP:
        for node in article.select(sel):
            node.decompose()
    h1 = article.find("h1")
    title = _text(h1) if h1 else ""
    found = []
    for sec in article.find_all("section"):
        heading = sec.find(re.compile(r"^h[1-6]$"))
        parts = []
        for child in sec.children:
            if isinstance(child, NavigableString):
                parts.append(str(child))
            elif child.name != "section" and child is not heading:
                parts.append(child.get_text(" "))
        text = re.sub(r"\s+", " ", " ".join(parts)).strip()
        entry = {
            "id": sec.get("id", ""),
            "heading": _text(heading) if heading else "",
            "text": text,
        }
        if code.get(id(sec)):
            entry["code"] = " ".join(dict.fromkeys(code[id(sec)]))
        found.append(entry)
    return title, found


def taught(html: str) -> dict[tuple[str, str], list[str]]:
    """What the glossary page says each chapter section teaches: (page, anchor) -> the terms of
    every glossary row that links it (the row's first two cells: the term, the textbook's word),
    for the links into this edition's chapters; anchor "" where the row links the page."""
    found: dict[tuple[str, str], list[str]] = {}
    for row in BeautifulSoup(html, "html.parser").select("article tbody tr"):
        cells = row.find_all("td")
        if len(cells) < 2:
            continue
        terms = []
        for cell in cells[:2]:  # the cell, and each of its words without their notes
            text = _text(cell)
            terms.append(text)
            while re.search(r"\([^()]*\)|（[^（）]*）", text):
                text = re.sub(r"\([^()]*\)|（[^（）]*）", "", text)
            terms += [w.strip() for w in re.split(r"[/;；]", text) if w.strip()]
        for a in row.select('a[href$=".html"], a[href*=".html#"]'):
            page, _, anchor = a["href"].partition("#")
            if re.fullmatch(r"\d\d_\w+\.html", page):
                found.setdefault((page, anchor), []).extend(terms)
    return found


def write_index(folder: Path, lang: str) -> int:
    """_static/course-search-index.js for one built edition; returns its size in bytes. Each
    section also holds the glossary's terms for it (taught()): what the course says it teaches."""
    glossary = folder / "glossary.html"
    terms = taught(glossary.read_text(encoding="utf-8")) if glossary.is_file() else {}
    pages = []
    for page in sorted(folder.glob("*.html")):
        if page.stem in ("search", "genindex"):
            continue
        title, secs = sections(page.read_text(encoding="utf-8"))
        for i, sec in enumerate(secs):
            got = terms.get((page.name, sec["id"]), []) + (
                terms.get((page.name, ""), []) if i == 0 else []
            )
            if got:
                sec["terms"] = " · ".join(dict.fromkeys(got))
        pages.append(
            {
                "url": page.name,
                "title": title,
                "reference": page.stem in REFERENCE,
                "sections": secs,
            }
        )
    data = json.dumps({"lang": lang, "pages": pages}, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("</", "<\\/")
    out = folder / "_static" / "course-search-index.js"
    out.write_text(f"window.courseSearchIndex = {data};\n", encoding="utf-8")
    return out.stat().st_size
