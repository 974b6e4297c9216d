"""Links between notebooks stay true: every markdown link from one notebook to another names a
notebook that exists and, with a #fragment, a heading of that notebook as JupyterLab renders it."""

import json
from pathlib import Path
from urllib.parse import unquote

import pytest
from test_glossary import _link_targets, _source, notebook_anchors

NOTEBOOKS = sorted(
    (Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb")
)


def _links(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    text = "\n".join(_source(c) for c in cells if c.get("cell_type") == "markdown")
    return [t for t in _link_targets(text, "") if t.split("#")[0].endswith(".ipynb")]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_links_to_other_notebooks_resolve(notebook):
    broken = []
    for target in _links(notebook):
        name, _, fragment = target.partition("#")
        linked = notebook.parent / name
        if not linked.is_file():
            broken.append(f"{target} (no such notebook)")
        elif fragment and unquote(fragment) not in notebook_anchors(linked):
            broken.append(f"{target} (no such heading in {name})")
    assert not broken, f"{notebook.name}: " + "; ".join(broken)


def test_some_links_are_checked():
    assert sum(len(_links(nb)) for nb in NOTEBOOKS) >= 10
