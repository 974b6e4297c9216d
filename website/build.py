"""The course as a static website, both editions, readable with no network at all.

    python -m website.build            # writes _site/ (make site)

Sphinx, myst-nb and sphinx-book-theme render every stored notebook as it is, outputs included,
never re-executed: the English edition from notebooks/ into _site/en/, the Chinese one from
notebooks/zh/ into _site/zh/ (lang="zh-CN", searched word by word through jieba). The theme
gives the chapter sidebar, the page's contents, previous/next with titles, search, dark mode and
a phone layout; sphinx-copybutton the copy buttons. What this file adds: each page's link to its
twin, a line on running the notebook, the downloadable .ipynb (the real notebook, sliders and
all), a MathJax 3 served from the site itself, and _site/index.html, which offers both
languages. A slider cannot move without a running kernel, so each of the course's sliders is
drawn here at every value its controls offer (notebook 08's top-k at a few), by its own widget
(website/frames.py), in each edition's language, into _site/frames/ (en-..., zh-...); the page
shows them behind its own range inputs
(static/course-sliders.js), with a line on running the live widget in JupyterLab. The frames are
drawn while Sphinx renders.
"""

from __future__ import annotations

import argparse
import copy
import html
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from i18n.build import load, source
from website import frames, live

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
NOTEBOOKS = ROOT / "notebooks"
SITE = ROOT / "_site"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
MATHJAX = "tex-svg-full.js"  # MathJax 3's SVG output: its glyphs are in the script, no web fonts

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


def prepare(nb: dict, name: str, lang: str, targets: dict[str, dict[str, str]]) -> dict:
    """A copy of the notebook ready for the page: each slider of frames.DRAW replaced by a mark
    where finish() puts its frames, any other by the picture it drew, with a note; a line on
    running it after the first cell; links to other notebooks' headings given the site's
    anchors (`targets`: stem -> anchors()); no widget state left."""
    nb = copy.deepcopy(nb)
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    ed = EDITIONS[lang]
    note = ed["slider"].format(name=name)

    def link(m: re.Match) -> str:
        stem, anchor = m.group(1), m.group(2)
        slug = targets.get(stem, {}).get(anchor) if anchor else None
        return f"]({stem}.ipynb" + (f"#{slug})" if slug else ")")

    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = re.sub(r"\]\((\d\d_\w+)\.ipynb(?:#([^)\s]+))?\)", link, source(cell))
            # ERRATA.md (and ERRATA.zh-CN.md) is the repository's, not a page of the site: its entries are named only
            cell["source"] = re.sub(
                r"\[([^\]]*)\]\((?:\.\./)+ERRATA(?:\.zh-CN)?\.md[^)]*\)", r"\1", text
            )
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


def stage(lang: str, chs: list[dict], src: Path) -> list[str]:
    """Sphinx's source folder for one edition: the prepared notebooks and index.md."""
    ed = EDITIONS[lang]
    src.mkdir(parents=True)
    stems = [c["stem"] for c in chs if lang in c["titles"]]
    books = {stem: load(ed["folder"] / f"{stem}.ipynb") for stem in stems}
    targets = {stem: anchors(nb) for stem, nb in books.items()}
    for stem, nb in books.items():
        page = prepare(nb, f"{stem}.ipynb", lang, targets)
        (src / f"{stem}.ipynb").write_text(json.dumps(page, ensure_ascii=False), encoding="utf-8")
    toc = "\n".join(stems)
    (src / "index.md").write_text(
        f"# {ed['title']}\n\n{ed['intro']}\n\n"
        f"```{{toctree}}\n:maxdepth: 1\n:caption: {ed['chapters']}\n\n{toc}\n```\n",
        encoding="utf-8",
    )
    return stems


def _mathjax() -> Path:
    """MathJax 3's one-file SVG build, as shipped by the pinned sphinx-mathjax-offline."""
    for f in importlib.metadata.files("sphinx-mathjax-offline") or []:
        if f.name == MATHJAX:
            return Path(f.locate())
    raise FileNotFoundError(f"{MATHJAX} not found in sphinx-mathjax-offline")


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
        f"<title>A small GPT · 从零读懂一个小 GPT</title><style>{style}</style></head><body><main>"
        '<h1>A small GPT · <span lang="zh-CN">从零读懂一个小 GPT</span></h1>'
        f'<nav class="langs">{choose}</nav><div class="editions">{"".join(sections)}</div>'
        "</main></body></html>"
    )


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
    mathjax = _mathjax()
    pages = 0
    with tempfile.TemporaryDirectory(prefix="course-site-") as tmp:
        runs = []
        for lang in EDITIONS:
            stems = stage(lang, chs, Path(tmp) / lang / "src")
            pages += len(stems)
            command = [sys.executable, "-m", "sphinx", "-b", "html", "-j", "1", "-c", str(HERE)]
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
            (folder / "_static" / "mathjax").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(mathjax, folder / "_static" / "mathjax" / MATHJAX)
            for stem in stems:  # the download: the notebook itself, sliders and all
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
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {
        "pages": pages,
        "seconds": time.perf_counter() - start,
        "bytes": size,
        "frame_bytes": frame_bytes,
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
    print(
        f"{done['pages']} pages in {args.out}, {done['bytes'] / 2**20:.1f} MiB, "
        f"built in {done['seconds']:.1f} s ({done['frames']} slider frames, "
        f"{done['frame_bytes'] / 2**20:.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
