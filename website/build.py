"""The course as a static website, both editions, readable with no network at all.

    python -m website.build            # writes _site/ (make site)

Every stored notebook is rendered as it is, outputs included, never re-executed: the English
ones from notebooks/, the Chinese ones from notebooks/zh/. Each chapter page has a bar with the
chapter list, the previous and next chapter and the same chapter in the other language. Formulas
are typeset by a MathJax served from the site itself (copied from the pinned
jupyter-server-mathjax package). A slider cannot move without a running kernel: where a notebook
shows one, the page shows the picture it drew when the notebook was executed, with a line on how
to move it in JupyterLab.
"""

from __future__ import annotations

import argparse
import copy
import html
import json
import re
import shutil
import sys
import time
from pathlib import Path

from i18n.build import load, source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SITE = ROOT / "_site"
MATHJAX = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

EDITIONS = {
    "en": {
        "name": "English",
        "folder": NOTEBOOKS,
        "title": "A small GPT, notebook by notebook",
        "intro": (
            "A course that builds a character-level GPT one idea at a time, with the small "
            "library every notebook imports. These pages are the notebooks as they were last "
            "executed; to run them, move the sliders and do the exercises, open them in "
            "JupyterLab (<code>make lab</code>)."
        ),
        "chapters": "Chapters",
        "index": "Chapters",
        "previous": "previous",
        "next": "next",
        "other": "中文",
        "slider": (
            "A slider drew this picture when the notebook was executed. To move it, open "
            "<code>notebooks/{name}</code> in JupyterLab (<code>make lab</code>), run the "
            "notebook's cells, and drag the slider: the picture follows."
        ),
    },
    "zh": {
        "name": "中文",
        "folder": NOTEBOOKS / "zh",
        "title": "从零读懂一个小 GPT：逐个笔记本",
        "intro": (
            "本课程一次一个概念地搭建一个字符级 GPT，每个笔记本都导入同一个小库 gptlib。这些页面是笔记本"
            "最后一次执行时的样子；要运行代码、拖动滑块、做练习，请在 JupyterLab 中打开它们"
            "（<code>make lab</code>）。"
        ),
        "chapters": "章节",
        "index": "章节目录",
        "previous": "上一章",
        "next": "下一章",
        "other": "English",
        "slider": (
            "这张图是笔记本执行时由滑块画出的。要拖动滑块，请在 JupyterLab 中打开 "
            "<code>notebooks/zh/{name}</code>（<code>make lab</code>），运行笔记本的各个单元，"
            "然后拖动滑块：图会随之更新。"
        ),
    },
}

STYLE = """
body { margin: 0; }
.course-bar { position: sticky; top: 0; z-index: 10; display: flex; gap: 1.2em; align-items: center;
  padding: 0.5em 1.5em; background: #f3f3f3; border-bottom: 1px solid #ccc;
  font: 14px/1.4 system-ui, sans-serif; }
.course-bar a { color: #0b5cad; text-decoration: none; }
.course-bar .spacer { flex: 1; }
.course-index { max-width: 60em; margin: 2em auto; padding: 0 1.5em; font: 16px/1.5 system-ui, sans-serif; }
.course-index table { border-collapse: collapse; width: 100%; }
.course-index td, .course-index th { border-bottom: 1px solid #ddd; padding: 0.4em 0.6em; text-align: left; }
.course-slider-note { font: 14px/1.4 system-ui, sans-serif; background: #fff8e1; border-left: 4px solid #f0b400;
  padding: 0.4em 0.8em; margin: 0.4em 0; }
"""


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


def prepare(nb: dict, name: str, lang: str) -> dict:
    """A copy of the notebook ready for the page: each slider replaced by the picture it drew,
    with a note; links between notebooks pointed at their pages; no widget state left."""
    nb = copy.deepcopy(nb)
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    note = EDITIONS[lang]["slider"].format(name=name)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = re.sub(r"\]\((\d\d_\w+)\.ipynb", r"](\1.html", source(cell))
            cell["source"] = text
            continue
        outputs = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                outputs.append(out)
                continue
            pictures = [
                {
                    "output_type": "display_data",
                    "data": o["data"],
                    "metadata": o.get("metadata", {}),
                }
                for o in _widget_outputs(state, view["model_id"])
                if o.get("output_type") in ("display_data", "execute_result")
                and "image/png" in o.get("data", {})
            ]
            outputs += pictures
            outputs.append(
                {
                    "output_type": "display_data",
                    "metadata": {},
                    "data": {"text/html": f'<div class="course-slider-note">{note}</div>'},
                }
            )
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def _bar(lang: str, chapters: list[dict], i: int) -> str:
    ed, other = EDITIONS[lang], "zh" if lang == "en" else "en"
    links = [f'<a href="../index.html#{lang}">{ed["index"]}</a>']
    if i > 0:
        prev = chapters[i - 1]
        links.append(f'<a href="{prev["stem"]}.html">← {ed["previous"]}: {prev["number"]}</a>')
    if i + 1 < len(chapters):
        nxt = chapters[i + 1]
        links.append(f'<a href="{nxt["stem"]}.html">{ed["next"]}: {nxt["number"]} →</a>')
    links.append('<span class="spacer"></span>')
    if chapters[i]["titles"].get(other):
        links.append(
            f'<a class="course-language" href="../{other}/{chapters[i]["stem"]}.html" '
            f'hreflang="{other}">{EDITIONS[other]["name"]}</a>'
        )
    return f'<nav class="course-bar">{" ".join(links)}</nav>'


def render(nb: dict, page_title: str) -> str:
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        mathjax_url=f"../{MATHJAX}",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    exporter.require_js_url = ""  # no widgets to render: nothing needs require.js
    body, _ = exporter.from_notebook_node(
        nbformat.reads(json.dumps(nb), as_version=4),  # sources joined into strings
        resources={"metadata": {"name": page_title}},
    )
    # MathJax as pinned here ships one web font, STIX-Web: say so, or it asks for the TeX fonts.
    fonts = (
        '<script type="text/x-mathjax-config">MathJax.Hub.Config({"HTML-CSS": {availableFonts: '
        '["STIX-Web"], preferredFont: "STIX-Web", webFont: "STIX-Web", imageFont: null}});'
        "</script>"
    )
    body = body.replace('<script src=""></script>', "")
    return body.replace(f'<script src="../{MATHJAX}"', f'{fonts}<script src="../{MATHJAX}"', 1)


def chapters() -> list[dict]:
    found = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        titles = {"en": title(load(path))}
        zh = NOTEBOOKS / "zh" / path.name
        if zh.is_file():
            titles["zh"] = title(load(zh))
        found.append({"stem": path.stem, "number": path.name[:2], "titles": titles})
    return found


def _index(chs: list[dict]) -> str:
    sections = []
    for lang, ed in EDITIONS.items():
        rows = "".join(
            f'<tr><td>{c["number"]}</td><td><a href="{lang}/{c["stem"]}.html">'
            f"{html.escape(c['titles'][lang])}</a></td></tr>"
            for c in chs
            if lang in c["titles"]
        )
        sections.append(
            f'<section id="{lang}" lang="{"zh-CN" if lang == "zh" else "en"}">'
            f"<h1>{ed['title']}</h1><p>{ed['intro']}</p><h2>{ed['chapters']}</h2>"
            f'<table class="course-chapters">{rows}</table></section>'
        )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>A small GPT · 从零读懂一个小 GPT</title>"
        f'<link rel="stylesheet" href="course.css"></head><body><main class="course-index">'
        f"{''.join(sections)}</main></body></html>"
    )


def build(out: Path = SITE) -> dict:
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    import jupyter_server_mathjax

    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", out / "mathjax")
    (out / "course.css").write_text(STYLE, encoding="utf-8")
    chs = chapters()
    pages = 0
    for lang, ed in EDITIONS.items():
        (out / lang).mkdir()
        for i, ch in enumerate(chs):
            if lang not in ch["titles"]:
                continue
            path = ed["folder"] / f"{ch['stem']}.ipynb"
            nb = prepare(load(path), path.name, lang)
            page = render(nb, f"{ch['number']} · {ch['titles'][lang]}")
            page = page.replace("<html>", f'<html lang="{"zh-CN" if lang == "zh" else "en"}">', 1)
            page = page.replace("</head>", '<link rel="stylesheet" href="../course.css"></head>', 1)
            bar = _bar(lang, chs, i)
            page = re.sub(r"(<body[^>]*>)", lambda m, bar=bar: m.group(1) + bar, page, count=1)
            (out / lang / f"{ch['stem']}.html").write_text(page, encoding="utf-8")
            pages += 1
    (out / "index.html").write_text(_index(chs), encoding="utf-8")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return {"pages": pages, "seconds": time.perf_counter() - start, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m website.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=SITE, help="the folder to write (default: _site/)"
    )
    args = parser.parse_args(argv)
    done = build(args.out)
    print(
        f"{done['pages']} pages in {args.out}, {done['bytes'] / 2**20:.1f} MiB, "
        f"built in {done['seconds']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
