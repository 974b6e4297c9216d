"""The course as a static website, both editions, readable with no network at all.

    python -m website.build            # writes _site/ (make site)

Sphinx, myst-nb and sphinx-book-theme render every stored notebook as it is, outputs included,
never re-executed: the English edition from notebooks/ into _site/en/, the Chinese one from
notebooks/zh/ into _site/zh/ (lang="zh-CN"), each with the glossary (GLOSSARY.md, or
GLOSSARY.zh-CN.md for the Chinese edition where it exists) and the errata (ERRATA.md,
ERRATA.zh-CN.md) as pages. The theme gives the chapter sidebar, the page's contents,
previous/next with titles, dark mode and a phone layout (static/course-menus.js makes its two
menu buttons work); sphinx-copybutton the copy buttons. What this file adds: each page's link to
its twin, a line on running the notebook, the downloadable .ipynb (the real notebook, sliders and
all), every link of the repository made a link of the site (Links: "see ERRATA N" to its entry,
a heading of a notebook to its anchor on the site, a repository file the site does not show to
its text), MathJax 3 served from the site itself on the pages with formulas, the course's own
search (website/search.py, static/course-search.js: titles, headings and the glossary's terms
first; Chinese found as typed; works from file://), and _site/index.html, which offers both
languages. Then it lightens each edition (lighten(): no Font Awesome script, theme translations,
template pages or Sphinx search; the notebooks' pictures as lossless WebP), checks every link,
picture and anchor of every page (a dead one, like any Sphinx warning, fails the build) and weighs
each page. A slider cannot move without a running kernel, so each of the course's sliders is
drawn here at every value its controls offer (notebook 08's top-k at a few), by its own widget
(website/frames.py), in each edition's language, into _site/frames/ (en-..., zh-...); the page
shows them behind its own range inputs (static/course-sliders.js), with a line on running the
live widget in JupyterLab. The frames are drawn while Sphinx renders.
"""

from __future__ import annotations

import argparse
import copy
import html
import importlib.metadata
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote, unquote

from i18n.build import load, source
from website import frames, live, search

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
NOTEBOOKS = ROOT / "notebooks"
SITE = ROOT / "_site"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

EDITIONS = {
    "en": {
        "lang": "en",
        "name": "English",
        "folder": NOTEBOOKS,
        "title": "A small GPT, notebook by notebook",
        "intro": (
            "A course that builds a character-level GPT one idea at a time, with the small "
            "library every notebook imports. These pages are the notebooks as they were last "
            "executed; to run them, move the sliders and do the exercises, open them in "
            "JupyterLab (`make lab`)."
        ),
        "chapters": "Chapters",
        "reference": "Reference",
        "read": "Read in English",
        "run": (
            "**Run this notebook yourself:** `make lab` opens JupyterLab on `notebooks/`; open "
            "`{name}` there and run its cells. The download button above gives this notebook."
        ),
        "slider": (
            "A slider drew this picture when the notebook was executed. To move it, run this "
            "notebook in JupyterLab: open <code>notebooks/{name}</code> (<code>make lab</code>), "
            "run the notebook's cells, and drag the slider: the picture follows."
        ),
        "frames": (
            "The controls above show pictures drawn when this site was built, by the "
            "notebook's own widget: {about}. For the live widget (any value, your own input), "
            "run this notebook in JupyterLab: open <code>notebooks/{name}</code> "
            "(<code>make lab</code>), run the notebook's cells, and drag the slider: the "
            "picture follows."
        ),
    },
    "zh": {
        "lang": "zh-CN",
        "name": "中文",
        "folder": NOTEBOOKS / "zh",
        "title": "从零读懂一个小 GPT：逐个笔记本",
        "intro": (
            "本课程一次一个概念地搭建一个字符级 GPT，每个笔记本都导入同一个小库 gptlib。这些页面是笔记本"
            "最后一次执行时的样子；要运行代码、拖动滑块、做练习，请在 JupyterLab 中打开它们"
            "（`make lab`）。"
        ),
        "chapters": "章节",
        "reference": "参考",
        "read": "阅读中文版",
        "run": (
            "**自己运行这个笔记本：** `make lab` 在 `notebooks/` 上打开 JupyterLab，在其中打开 "
            "`zh/{name}` 并运行各个单元。上方的下载按钮可下载这个笔记本。"
        ),
        "slider": (
            "这张图是笔记本执行时由滑块画出的。要拖动滑块，请在 JupyterLab 中运行这个笔记本：打开 "
            "<code>notebooks/zh/{name}</code>（<code>make lab</code>），运行笔记本的各个单元，"
            "然后拖动滑块：图会随之更新。"
        ),
        "frames": (
            "上面的控件显示的是构建本网站时由笔记本自己的滑块画出的图：{about}。要使用实时的滑块（任意取值、"
            "自己的输入），请在 JupyterLab 中运行这个笔记本：打开 <code>notebooks/zh/{name}</code>"
            "（<code>make lab</code>），运行笔记本的各个单元，然后拖动滑块：图会随之更新。"
        ),
    },
}


def title(nb: dict) -> str:
    """The notebook's title: its first heading, without the leading number."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^# (.+)$", source(cell), re.M)
            if m:
                return re.sub(r"^\d\d · ", "", m.group(1)).strip()
    return ""


def _widget_outputs(state: dict, model_id: str, seen: set[str] | None = None) -> list[dict]:
    """The outputs (pictures, text) held by the Output widgets inside widget `model_id`."""
    seen = set() if seen is None else seen
    if model_id in seen or model_id not in state:
        return []
    seen.add(model_id)
    model = state[model_id].get("state", {})
    found = list(model.get("outputs", []))
    for child in model.get("children", []):
        if isinstance(child, str) and child.startswith("IPY_MODEL_"):
            found += _widget_outputs(state, child.removeprefix("IPY_MODEL_"), seen)
    return found


def _plain(heading: str) -> str:
    """A heading's text as a reader sees it: no code marks, emphasis or link targets."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[`*]", "", heading).strip()


def anchors(nb: dict) -> dict[str, str]:
    """Each heading's anchor as Jupyter writes it (the links between notebooks use these) and the
    anchor the site gives it."""
    from myst_parser.slugs import github_slugify

    found = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for m in re.finditer(r"^#{1,6} (.+)$", source(cell), re.M):
                text = _plain(m.group(1))
                found.setdefault(text.replace(" ", "-"), github_slugify(text))
    return found


PAGES = {  # the site's pages made from the repository's own files, per edition: docname -> files
    "glossary": {"en": ["GLOSSARY.md"], "zh": ["GLOSSARY.zh-CN.md", "GLOSSARY.md"]},
    "errata": {"en": ["ERRATA.md"], "zh": ["ERRATA.zh-CN.md"]},
}
ERRATA_FILES = {"ERRATA.md": "en", "ERRATA.zh-CN.md": "zh"}


def md_anchors(text: str) -> dict[str, str]:
    """A markdown file's headings: the anchor GitHub gives each (its links use these) and the
    site's, which is the same slug; code fences skipped."""
    from myst_parser.slugs import github_slugify

    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    found = {}
    for m in re.finditer(r"^#{1,6} (.+)$", text, re.M):
        slug = github_slugify(_plain(m.group(1)))
        found.setdefault(slug, slug)
    return found


def page_file(doc: str, lang: str) -> Path:
    """The repository file a page of the site is made from (the first of PAGES that exists)."""
    for name in PAGES[doc][lang]:
        if (ROOT / name).is_file():
            return ROOT / name
    raise FileNotFoundError(f"none of {PAGES[doc][lang]} exists for the {lang} site's {doc}")


def _links_in(text: str):
    """Every markdown link `[label](url)` in `text` (not images): (start, end, label, url), with
    brackets nested in the label and parentheses balanced in the url."""
    i = 0
    while (j := text.find("](", i)) != -1:
        depth, k = 1, j - 1
        while k >= 0 and depth:
            depth += {"]": 1, "[": -1}.get(text[k], 0)
            k -= 1
        start = k + 1
        depth, e = 1, j + 2
        while e < len(text) and depth and text[e] not in " \n":
            depth += {"(": 1, ")": -1}.get(text[e], 0)
            e += 1
        if depth or (start > 0 and text[start - 1] == "!") or text[start] != "[":
            i = j + 2
            continue
        yield start, e, text[start + 1 : j], text[j + 2 : e - 1]
        i = e


class DeadLink(ValueError):
    pass


class Links:
    """The repository's links made links of the site, for the pages of edition `lang`.

    A notebook's link to a heading of a notebook (its JupyterLab anchor) goes to that chapter's
    page and the heading's anchor there, in the same edition or the other one; "ERRATA N" and
    GLOSSARY go to their pages (an ERRATA entry found by its number); a link to any other file
    of the repository (a benchmark script, gptlib's source) becomes its text, since the site
    does not show it. A link to a chapter, an entry or a heading that does not exist raises
    DeadLink: the build stops rather than publish it."""

    def __init__(self, lang: str, chapter_anchors: dict[str, dict[str, dict[str, str]]]):
        self.lang = lang
        self.chapters = chapter_anchors  # edition -> stem -> JupyterLab anchor -> site anchor
        self.pages = {}  # (doc, edition) -> anchors, and ERRATA's entries by number
        self.errata = {}
        for doc in PAGES:
            for ed in EDITIONS:
                text = page_file(doc, ed).read_text(encoding="utf-8")
                self.pages[doc, ed] = md_anchors(text)
                if doc == "errata":
                    self.errata[ed] = {
                        m.group(1): github_slug(_plain(m.group(0).lstrip("# ")))
                        for m in re.finditer(r"^### (\d+)\. .+$", text, re.M)
                    }

    def _href(self, ed: str, doc: str, slug: str | None, label: str) -> str:
        if ed == self.lang:  # a page of this edition: Sphinx checks the link and its anchor
            suffix = ".ipynb" if doc[:2].isdigit() else ".md"
            return f"[{label}]({doc}{suffix}" + (f"#{slug})" if slug else ")")
        return f'<a href="../{ed}/{doc}.html' + (f"#{slug}" if slug else "") + f'">{label}</a>'

    def target(self, url: str, here: str, label: str) -> tuple[str, str, str | None] | None:
        """(edition, docname, anchor) for a link of repository file `here`; None: no page."""
        path, _, frag = url.partition("#")
        frag = unquote(frag)
        where = posixpath.normpath(posixpath.join(posixpath.dirname(here), path)) if path else here
        m = re.fullmatch(r"notebooks/(zh/)?(\d\d_\w+)\.ipynb", where)
        if m:
            ed, stem = ("zh" if m.group(1) else "en"), m.group(2)
            if stem not in self.chapters[ed]:
                raise DeadLink(f"{here}: a link to {url}: no such chapter in the {ed} edition")
            known = self.chapters[ed][stem]
            slug = known.get(frag) or (frag if frag in known.values() else None)
            if frag and slug is None:
                raise DeadLink(f"{here}: a link to {url}: no heading {frag!r} in {stem}")
            return ed, stem, slug
        if where in ERRATA_FILES:
            ed = ERRATA_FILES[where]
            n = re.match(r"(\d+)[-.]", frag) or re.search(r"ERRATA (\d+)", label)
            if n:
                if n.group(1) not in self.errata[ed]:
                    raise DeadLink(f"{here}: a link to {url}: ERRATA has no entry {n.group(1)}")
                return ed, "errata", self.errata[ed][n.group(1)]
            return self._anchored("errata", ed, frag, here, url)
        if re.fullmatch(r"GLOSSARY(\.zh-CN)?\.md", where):
            return self._anchored("glossary", self.lang, frag, here, url)
        return None

    def _anchored(self, doc: str, ed: str, frag: str, here: str, url: str):
        own, en = list(self.pages[doc, ed]), list(self.pages[doc, "en"])
        if frag and frag not in own and frag in en and len(own) == len(en):
            frag = own[en.index(frag)]  # a translation linking the English heading: its twin
        if frag and frag not in own:
            raise DeadLink(f"{here}: a link to {url}: no heading {frag!r} on the {doc} page")
        return ed, doc, frag or None

    def relink(self, text: str, here: str) -> str:
        """`text` (markdown of repository file `here`) with every link made the site's."""
        out, last = [], 0
        for start, end, label, url in _links_in(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", url):  # https:, mailto:: as it is
                continue
            found = self.target(url, here, label)
            out.append(text[last:start])
            out.append(label if found is None else self._href(*found[:2], found[2], label))
            last = end
        return "".join(out) + text[last:]


def github_slug(text: str) -> str:
    from myst_parser.slugs import github_slugify

    return github_slugify(text)


def prepare(nb: dict, name: str, lang: str, links: Links) -> dict:
    """A copy of the notebook ready for the page: each slider of frames.DRAW replaced by a mark
    where finish() puts its frames, any other by the picture it drew, with a note; a line on
    running it after the first cell; every link made a link of the site (`links`, see Links);
    no widget state left."""
    here = f"notebooks/zh/{name}" if lang == "zh" else f"notebooks/{name}"
    nb = copy.deepcopy(nb)
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    ed = EDITIONS[lang]
    note = ed["slider"].format(name=name)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = links.relink(source(cell), here)
            continue
        outputs = []
        drawn = [w for w in frames.DRAW if f"widgets.{w}(" in source(cell)]
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outputs.append(out)
                continue
            if drawn:  # the frames go here once drawn (finish)
                mark = f'<div class="course-frames-here" data-widget="{drawn[0]}"></div>'
                outputs.append(
                    {"output_type": "display_data", "metadata": {}, "data": {"text/html": mark}}
                )
                continue
            outputs += [
                {
                    "output_type": "display_data",
                    "data": o["data"],
                    "metadata": o.get("metadata", {}),
                }
                for o in _widget_outputs(state, view["model_id"])
                if o.get("output_type") in ("display_data", "execute_result")
                and "image/png" in o.get("data", {})
            ]
            outputs.append(
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"text/html": f'<div class="course-slider-note">{note}</div>'},
                }
            )
        if "outputs" in cell:
            cell["outputs"] = live.outputs(source(cell)) + outputs  # the live microgpt first
    run = {
        "cell_type": "markdown",
        "id": "course-run-note",
        "metadata": {},
        "source": f'<div class="course-run-note">\n\n{ed["run"].format(name=name)}\n\n</div>',
    }
    nb["cells"].insert(1, run)
    return nb


def chapters() -> list[dict]:
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        titles = {"en": title(load(path))}
        zh = NOTEBOOKS / "zh" / path.name
        if zh.is_file():
            titles["zh"] = title(load(zh))
        found.append({"stem": path.stem, "number": path.name[:2], "titles": titles})
    return found


def chapter_anchors(chs: list[dict]) -> dict[str, dict[str, dict[str, str]]]:
    """edition -> stem -> each heading's JupyterLab anchor -> the site's (see anchors())."""
    return {
        lang: {
            c["stem"]: anchors(load(ed["folder"] / f"{c['stem']}.ipynb"))
            for c in chs
            if lang in c["titles"]
        }
        for lang, ed in EDITIONS.items()
    }


def stage(lang: str, chs: list[dict], src: Path, known: dict) -> list[str]:
    """Sphinx's source folder for one edition: the prepared notebooks, the glossary and errata
    pages and index.md. `known`: chapter_anchors()."""
    ed = EDITIONS[lang]
    src.mkdir(parents=True)
    links = Links(lang, known)
    stems = [c["stem"] for c in chs if lang in c["titles"]]
    for stem in stems:
        page = prepare(load(ed["folder"] / f"{stem}.ipynb"), f"{stem}.ipynb", lang, links)
        (src / f"{stem}.ipynb").write_text(json.dumps(page, ensure_ascii=False), encoding="utf-8")
    for doc in PAGES:
        path = page_file(doc, lang)
        text = links.relink(path.read_text(encoding="utf-8"), path.name)
        (src / f"{doc}.md").write_text(text, encoding="utf-8")
    toc = "\n".join(stems)
    (src / "index.md").write_text(
        f"# {ed['title']}\n\n{ed['intro']}\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n:caption: {ed['chapters']}\n\n{toc}\n```\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n:caption: {ed['reference']}\n\n"
        + "\n".join(PAGES)
        + "\n```\n",
        encoding="utf-8",
    )
    return stems + list(PAGES)


# MathJax 3 as components: the loader, the core, TeX input (which loads any further TeX package on
# demand) and CommonHTML output with its web fonts, about 0.8 MB where the one-file SVG build is
# 2.2 MB. Copied into _static/mathjax/ of each edition; Sphinx puts it on the pages with formulas.
MATHJAX_FILES = [
    "startup.js",
    "core.js",
    "input/tex.js",
    "input/tex/extensions/*.js",
    "output/chtml.js",
    "output/chtml/fonts/tex.js",
    "output/chtml/fonts/woff-v2/*.woff",
]
MATHJAX_LOADED = [
    "startup.js",
    "core.js",
    "input/tex.js",
    "output/chtml.js",
    "output/chtml/fonts/tex.js",
]


def _mathjax() -> Path:
    """MathJax 3's folder, as shipped by the pinned sphinx-mathjax-offline."""
    for f in importlib.metadata.files("sphinx-mathjax-offline") or []:
        if f.name == "startup.js" and f.parent.name == "mathjax":
            return Path(f.locate()).parent
    raise FileNotFoundError("MathJax's startup.js not found in sphinx-mathjax-offline")


def copy_mathjax(to: Path, patterns: list[str] = MATHJAX_FILES) -> None:
    root = _mathjax()
    for pattern in patterns:
        for f in root.glob(pattern):
            (to / f.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, to / f.relative_to(root))


MATH = re.compile(r'<(span|div) class="math notranslate nohighlight">(.*?)</\1>', re.S)
MATH_SCRIPTS = re.compile(
    r'<script>window\.MathJax = .*?</script>\s*|<script [^>]*src="_static/mathjax/startup\.js"[^>]*></script>\s*'
)


def prerender_math(folder: Path) -> bool:
    """Every formula of an edition typeset once, here, by MathJax itself (run by Node.js: the
    pinned MathJax's node-main.js, website/mathjax_render.js): the pages get MathJax's CommonHTML
    markup and one style sheet, _static/course-math.css, and load no MathJax script (0.8 MB
    less on every page with a formula). Returns False, changing nothing, where there is no
    `node`: the pages then typeset in the browser. A formula MathJax cannot read stops the build."""
    node = shutil.which("node")
    if node is None:
        return False
    pages = {}
    formulas = []
    for page in sorted(folder.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        found = list(MATH.finditer(text))
        if not found:
            continue
        pages[page] = (text, found)
        for m in found:
            tex = html.unescape(m.group(2)).strip()
            if tex.startswith("\\(") and tex.endswith("\\)"):
                formulas.append([tex[2:-2], False])
            elif tex.startswith("\\[") and tex.endswith("\\]"):
                formulas.append([tex[2:-2], True])
            else:  # an amsmath environment, displayed as it is
                formulas.append([tex, True])
    if not formulas:
        return True
    with tempfile.TemporaryDirectory(prefix="course-math-") as tmp:
        listing = Path(tmp) / "formulas.json"
        listing.write_text(json.dumps(formulas), encoding="utf-8")
        fonts = "mathjax/output/chtml/fonts/woff-v2"  # relative to _static/course-math.css
        run = subprocess.run(
            [node, str(HERE / "mathjax_render.js"), str(listing), fonts, str(_mathjax())],
            capture_output=True,
            text=True,
        )
    if run.returncode:
        raise RuntimeError(f"MathJax could not typeset the formulas: {run.stderr[-2000:]}")
    done = json.loads(run.stdout[run.stdout.index("{") :])
    bad = [tex for (tex, _), out in zip(formulas, done["html"], strict=True) if "mjx-merror" in out]
    if bad:
        raise RuntimeError(f"MathJax cannot read {len(bad)} formulas: {bad[:5]}")
    (folder / "_static" / "course-math.css").write_text(done["css"], encoding="utf-8")
    rendered = iter(zip(formulas, done["html"], strict=True))
    for page, (text, found) in pages.items():
        out, last = [], 0
        for m in found:
            (tex, _), markup = next(rendered)
            label = html.escape(tex, quote=True)
            markup = markup.replace(
                "<mjx-container ", f'<mjx-container role="math" aria-label="{label}" ', 1
            )
            out += [
                text[last : m.start()],
                f'<{m.group(1)} class="math notranslate nohighlight">{markup}</{m.group(1)}>',
            ]
            last = m.end()
        text = "".join(out) + text[last:]
        text = MATH_SCRIPTS.sub("", text)
        text = text.replace(
            "</head>",
            '<link rel="stylesheet" type="text/css" href="_static/course-math.css" />\n</head>',
            1,
        )
        page.write_text(text, encoding="utf-8")
    return True


# The theme draws its icons with Font Awesome's script (1.5 MB, every icon there is) or its web
# font (115 kB). The site uses a dozen: each becomes a CSS mask in _static/course-icons.css, drawn
# in the text's colour.
ICON_CSS = (
    ".fa-solid,.fa-regular,.fas,.far{display:inline-block;width:1em;height:1em;"
    "vertical-align:-0.125em;background-color:currentColor;"
    "-webkit-mask:var(--course-icon) no-repeat center/contain;"
    "mask:var(--course-icon) no-repeat center/contain}"
    # the theme's style sheet would also draw each icon as a glyph of Font Awesome's web font
    # (kept in _static/vendor/ for the few other places its style sheet uses it): not twice
    ".fa-solid::before,.fa-regular::before,.fas::before,.far::before{content:none}"
    ".fa-lg{font-size:1.25em;vertical-align:-0.2em}.fa-fw{width:1.25em}\n"
)


def icon_css(folder: Path) -> str:
    """CSS for every `fa-NAME` icon the edition's pages and scripts name, from the theme's Font
    Awesome (the solid set)."""
    fa = (folder / "_static" / "scripts" / "fontawesome.js").read_text(encoding="utf-8")
    used = set()
    for f in [*folder.glob("*.html"), *(folder / "_static" / "scripts").glob("*.js")]:
        if f.name != "fontawesome.js":
            used |= set(re.findall(r"\bfa-([a-z0-9-]+)", f.read_text(encoding="utf-8")))
    css = [ICON_CSS]
    for name in sorted(used - {"solid", "regular", "brands", "lg", "fw", "xs", "sm"}):
        found = re.findall(
            r'[,{]"?' + re.escape(name) + r'"?:\[(\d+),(\d+),\[[^\]]*\],"[0-9a-f]+","(M[^"]+)"\]',
            fa,
        )
        if not found:
            continue  # a class named in a script that is no icon of the set
        w, h, path = found[-1]  # the solid set is defined last
        svg = f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {w} {h}'><path d='{path}'/></svg>"
        css.append(f'.fa-{name}{{--course-icon:url("data:image/svg+xml,{quote(svg)}")}}\n')
    return "".join(css)


# Tags the pages do not need once the course's own search and icons are there.
UNUSED_TAGS = re.compile(
    r"<(?:script|link)\b[^>]*(?:fontawesome\.js|searchtools\.js|language_data\.js|"
    r"searchindex\.js)[^>]*>(?:</script>)?\s*"
)
UNUSED_FILES = [
    "_static/scripts/fontawesome.js",
    "_static/scripts/fontawesome.js.LICENSE.txt",
    "_static/locales",  # the theme's interface in 46 languages: the site has two, its own
    "_static/webpack-macros.html",  # the theme's templates, copied as they are
    "_static/sbt-webpack-macros.html",
    "_static/searchtools.js",
    "_static/language_data.js",
    "_static/base-stemmer.js",
    "_static/english-stemmer.js",
    "searchindex.js",
]


# The site's icon, in every page itself: no request a browser could abort or fail.
FAVICON = "data:image/svg+xml," + quote(
    (HERE / "static" / "favicon.svg").read_text(encoding="utf-8").strip(), safe=" =:/'\""
).replace('"', "'")


def to_webp(images: Path) -> set[str]:
    """The notebooks' pictures as lossless WebP (the same pixels, about a third of the PNG's
    bytes), each where it is smaller; returns the names converted (without .png)."""
    from PIL import Image

    done = set()
    for png in sorted(images.glob("*.png")):
        webp = png.with_suffix(".webp")
        with Image.open(png) as im:
            im.save(webp, "WEBP", lossless=True, exact=True, method=4)
        if webp.stat().st_size < png.stat().st_size:
            png.unlink()
            done.add(png.stem)
        else:
            webp.unlink()
    return done


def lighten(folder: Path) -> None:
    """An edition's pages without what they never use: Font Awesome's script (icons come from
    course-icons.css), Sphinx's search (the course's own, course-search.js, is on search.html),
    the theme's translations and templates; the search page gets the course's search."""
    (folder / "_static" / "course-icons.css").write_text(icon_css(folder), encoding="utf-8")
    webp = to_webp(folder / "_images")
    for page in folder.glob("*.html"):
        text = UNUSED_TAGS.sub("", page.read_text(encoding="utf-8"))
        text = text.replace('href="_static/favicon.svg"', f'href="{FAVICON}"')
        text = re.sub(
            r'(src="_images/[0-9a-f]+)\.png"',
            lambda m: f'{m.group(1)}.webp"' if m.group(1)[13:] in webp else m.group(0),
            text,
        )
        if page.name == "search.html":
            text = text.replace(
                "</head>",
                '<script src="_static/course-search-index.js"></script>\n'
                '<script src="_static/course-search.js"></script>\n</head>',
            )
        page.write_text(text, encoding="utf-8")
    for name in UNUSED_FILES:
        f = folder / name
        if f.is_dir():
            shutil.rmtree(f)
        elif f.exists():
            f.unlink()


def _index(chs: list[dict]) -> str:
    """_site/index.html: both languages at the top, then each edition's chapters."""
    choose = " ".join(
        f'<a class="choose" lang="{ed["lang"]}" href="{lang}/index.html">{ed["read"]}</a>'
        for lang, ed in EDITIONS.items()
    )
    sections = []
    for lang, ed in EDITIONS.items():
        rows = "".join(
            f'<li><a href="{lang}/{c["stem"]}.html">{c["number"]} · '
            f"{html.escape(c['titles'][lang])}</a></li>"
            for c in chs
            if lang in c["titles"]
        )
        sections.append(
            f'<section id="{lang}" lang="{ed["lang"]}"><h2>{ed["title"]}</h2>'
            f'<ol class="course-chapters">{rows}</ol></section>'
        )
    style = (
        "body{margin:0;font:16px/1.5 system-ui,sans-serif;color:#222}"
        "main{max-width:60rem;margin:0 auto;padding:1rem}"
        ".langs{display:flex;flex-wrap:wrap;gap:.8rem;margin:1rem 0 2rem}"
        ".choose{padding:.6rem 1.2rem;border:1px solid #0b5cad;border-radius:.4rem;"
        "color:#0b5cad;text-decoration:none;font-weight:600}"
        ".editions{display:grid;grid-template-columns:repeat(auto-fit,minmax(18rem,1fr));gap:2rem}"
        "ol{list-style:none;padding:0}li{margin:.3rem 0}a{color:#0b5cad}"
        "@media (prefers-color-scheme:dark){body{background:#14181e;color:#ddd}"
        "a,.choose{color:#7fb5ff;border-color:#7fb5ff}}"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="icon" href="{FAVICON}">'
        f"<title>A small GPT · 从零读懂一个小 GPT</title><style>{style}</style></head><body><main>"
        '<h1>A small GPT · <span lang="zh-CN">从零读懂一个小 GPT</span></h1>'
        f'<nav class="langs">{choose}</nav><div class="editions">{"".join(sections)}</div>'
        "</main></body></html>"
    )


REF = re.compile(r'<(?:a|link)\b[^>]*?\bhref="([^"]*)"|<(?:img|script)\b[^>]*?\bsrc="([^"]*)"')
ID = re.compile(r'\bid="([^"]*)"')


def _local(url: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:|//", url)


def dead_links(out: Path) -> list[str]:
    """Every link, picture or script of every page of the site that points at a file that is not
    there, or at an anchor its page does not have: "page: url" each."""
    ids: dict[Path, set[str]] = {}

    def anchors_of(page: Path) -> set[str]:
        if page not in ids:
            ids[page] = set(ID.findall(page.read_text(encoding="utf-8")))
        return ids[page]

    dead = []
    for page in sorted(out.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        text = re.sub(r'<script type="application/json".*?</script>', "", text, flags=re.S)
        for m in REF.finditer(text):
            url = html.unescape(m.group(1) or m.group(2))
            if not url or not _local(url):
                continue
            path, _, frag = url.partition("#")
            path = path.split("?")[0]
            target = (page.parent / unquote(path)).resolve() if path else page
            if not target.is_file():
                dead.append(f"{page.relative_to(out)}: {url}")
            elif frag and target.suffix == ".html" and unquote(frag) not in anchors_of(target):
                dead.append(f"{page.relative_to(out)}: {url} (no such anchor)")
    return dead


def page_weights(out: Path) -> dict[str, int]:
    """What each page of the site makes a browser load, in bytes: the page, its style sheets,
    scripts and pictures, and, where MathJax typesets in the browser, its components (web fonts
    named by the style sheets are not counted here; the browser tests weigh whole pages)."""
    weights = {}
    for page in sorted(out.rglob("*.html")):
        if "_static" in page.parts:
            continue
        text = page.read_text(encoding="utf-8")
        text = re.sub(r'<script type="application/json".*?</script>', "", text, flags=re.S)
        files = {page}
        for tag in re.finditer(r"<(link|img|script)\b[^>]*>", text):
            if tag.group(1) == "link" and not re.search(
                r'rel="(?:stylesheet|preload|icon)"', tag.group(0)
            ):
                continue
            m = re.search(r'\b(?:href|src)="([^"]*)"', tag.group(0))
            url = m.group(1) if m else ""
            if url and _local(url):
                f = (page.parent / unquote(url.split("#")[0].split("?")[0])).resolve()
                if f.is_file():
                    files.add(f)
                    if f.name == "startup.js":
                        files |= {(f.parent / n).resolve() for n in MATHJAX_LOADED}
        weights[str(page.relative_to(out))] = sum(f.stat().st_size for f in files)
    return weights


MARK = re.compile(r'<div class="course-frames-here" data-widget="(\w+)"></div>')


def finish(page: Path, lang: str, sliders: dict[str, list[frames.Slider]]) -> None:
    """Put each slider's frames, with its note, where prepare() marked it on a built page."""
    text = page.read_text(encoding="utf-8")

    def put(m: re.Match) -> str:
        group = sliders[m.group(1)]
        about = ("；" if lang == "zh" else "; ").join(s.about[lang] for s in group)
        note = EDITIONS[lang]["frames"].format(name=f"{page.stem}.ipynb", about=about)
        shown = "".join(frames.slider_html(s, "../frames") for s in group)
        return f'{shown}<div class="course-slider-note">{note}</div>'

    new = MARK.sub(put, text)
    if new != text:
        page.write_text(new, encoding="utf-8")


def build(out: Path = SITE, quiet: bool = True) -> dict:
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    drawing = frames.start()  # every slider's frames, drawn in two processes meanwhile
    chs = chapters()
    known = chapter_anchors(chs)
    pages = 0
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        runs = []
        for lang in EDITIONS:
            stems = stage(lang, chs, Path(tmp) / lang / "src", known)
            pages += len(stems)
            command = [sys.executable, "-m", "sphinx", "-b", "html", "-j", "1", "-c", str(HERE)]
            command += ["-W", "--keep-going"]  # a warning (a dead link among them) fails the build
            command += ["-d", str(Path(tmp) / lang / "doctrees"), str(Path(tmp) / lang / "src")]
            command += [str(out / lang)] + (["-q"] if quiet else [])
            env = {**os.environ, "COURSE_EDITION": lang, "PYTHONHASHSEED": "0"}
            runs.append((lang, stems, subprocess.Popen(command, env=env, cwd=ROOT)))
        sliders = frames.collect(drawing)  # each edition's, drawn in its language
        frame_bytes = sum(
            frames.write(sliders[lang], out / "frames", prefix=f"{lang}-") for lang in sliders
        )
        for lang, stems, run in runs:  # both editions build at once, one per core
            if run.wait():
                raise RuntimeError(f"sphinx-build failed for the {lang} edition")
            folder = out / lang
            if prerender_math(folder):  # the formulas typeset here: MathJax's fonts only
                copy_mathjax(folder / "_static" / "mathjax", ["output/chtml/fonts/woff-v2/*.woff"])
            else:
                copy_mathjax(folder / "_static" / "mathjax")
            lighten(folder)
            search.write_index(folder, lang)
            for stem in (s for s in stems if s not in PAGES):  # the download: the notebook
                finish(folder / f"{stem}.html", lang, sliders[lang])
                shutil.copyfile(
                    EDITIONS[lang]["folder"] / f"{stem}.ipynb",
                    folder / "_sources" / f"{stem}.ipynb",
                )
            for found in folder.rglob("*.map"):  # source maps of the theme's scripts: unused
                found.unlink()
            pages += 1  # the edition's index.html
    shutil.rmtree(out / "jupyter_execute", ignore_errors=True)  # myst-nb's scratch folder
    (out / "index.html").write_text(_index(chs), encoding="utf-8")
    live.write(out / "live")  # the weights and script of the live microgpt, for both editions
    (out / ".nojekyll").write_text("", encoding="utf-8")
    dead = dead_links(out)
    if dead:
        raise DeadLink(f"{len(dead)} dead links on the site:\n" + "\n".join(dead))
    weights = page_weights(out)
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    return {
        "pages": pages,
        "seconds": time.perf_counter() - start,
        "bytes": size,
        "frame_bytes": frame_bytes,
        "files": len(files),
        "weights": weights,
        "frames": sum(len(s.frames) for by in sliders.values() for g in by.values() for s in g),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m website.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=SITE, help="the folder to write (default: _site/)"
    )
    parser.add_argument("--verbose", action="store_true", help="show Sphinx's own output")
    args = parser.parse_args(argv)
    done = build(args.out, quiet=not args.verbose)
    heaviest = max(done["weights"], key=done["weights"].get)
    print(
        f"{done['pages']} pages in {args.out}, {done['bytes'] / 2**20:.1f} MiB in {done['files']} "
        f"files; the heaviest page {heaviest}, {done['weights'][heaviest] / 2**20:.2f} MiB with "
        "what it loads; "
        f"built in {done['seconds']:.1f} s ({done['frames']} slider frames, "
        f"{done['frame_bytes'] / 2**20:.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
