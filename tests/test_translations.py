"""The Chinese edition (notebooks/zh/) stays in step with the English notebooks.

Every English notebook has its twin, built from i18n/zh/NN_topic.md: the same cells in the same
order, code cells and their outputs identical (but for the first code cell, which chooses the
language of gptlib's messages), every markdown cell translated from the English
text it now has (a translation of an older text is named), headings, links and formulas kept,
and the built notebook exactly what `python -m i18n.build build` writes. Editing an English
markdown cell makes the check name its twin; links between the Chinese notebooks land on
Chinese headings.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from i18n import build as i18n

ROOT = Path(__file__).resolve().parent.parent
ENGLISH = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CJK = re.compile(r"[\u4e00-\u9fff]")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_edition_is_in_step_with_the_english():
    assert i18n.problems("zh") == []


@pytest.mark.parametrize("english", ENGLISH, ids=lambda p: p.stem)
def test_code_and_outputs_are_the_english_notebooks(english):
    twin = ROOT / "notebooks" / "zh" / english.name
    assert twin.is_file(), f"notebooks/zh/{english.name} is missing"
    en, zh = _load(english), _load(twin)
    assert [c.get("id") for c in zh["cells"]] == [c.get("id") for c in en["cells"]]
    first = next(c.get("id") for c in en["cells"] if c["cell_type"] == "code")
    for a, b in zip(en["cells"], zh["cells"], strict=True):
        assert a["cell_type"] == b["cell_type"], a.get("id")
        if a["cell_type"] == "code" and a.get("id") == first:
            # the one difference: two lines of the first code cell choose what gptlib speaks
            zh_lines, en_lines = i18n.source(b).splitlines(), i18n.source(a).splitlines()
            added = [line for line in zh_lines if line not in en_lines]
            assert added == [i18n.LANGUAGE_IMPORT, i18n.LANGUAGE_CALL["zh"]], added
            assert [line for line in zh_lines if line not in added] == en_lines
            b = {**b, "source": a["source"]}
        if a["cell_type"] == "code":
            assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), a.get("id")
        else:
            text = i18n.source(b)
            assert CJK.search(text) or not re.search(r"[A-Za-z]{3,}", text), (
                f"{english.name} cell {a.get('id')} is not in Chinese"
            )
    widgets = en["metadata"].get("widgets")
    assert zh["metadata"].get("widgets") == widgets


def test_links_between_chinese_notebooks_land_on_chinese_headings():
    anchors = {
        p.name: {i18n.anchor(h) for c in _load(p)["cells"] for h in i18n.headings(i18n.source(c))}
        for p in (ROOT / "notebooks" / "zh").glob("[0-9][0-9]_*.ipynb")
    }
    checked, problems = 0, []
    for name, _ in anchors.items():
        for cell in _load(ROOT / "notebooks" / "zh" / name)["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for target, fragment in re.findall(
                r"\]\((\d\d_\w+\.ipynb)?#((?:[^()\s]|\([^()\s]*\))+)\)", i18n.source(cell)
            ):
                checked += 1
                if fragment not in anchors.get(target or name, set()):
                    problems.append(f"zh/{name} cell {cell.get('id')}: {target}#{fragment}")
    assert checked >= 30, checked
    assert not problems, "\n".join(problems)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A copy of notebooks/ and i18n/zh/ that the test may edit, with i18n.build pointed at it."""
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    shutil.copytree(ROOT / "i18n" / "zh", tmp_path / "i18n" / "zh")
    monkeypatch.setattr(i18n, "ROOT", tmp_path)
    monkeypatch.setattr(i18n, "NOTEBOOKS", tmp_path / "notebooks")
    return tmp_path


def test_editing_an_english_cell_names_its_translation(scratch):
    path = scratch / "notebooks" / "05_residual.ipynb"
    nb = _load(path)
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown" and c["id"] == "r-saw")
    cell["source"] = i18n.source(cell) + "\n- One more thing we saw."
    path.write_text(i18n.dump(nb), encoding="utf-8")
    found = i18n.problems("zh")
    assert any(
        line.startswith("i18n/zh/05_residual.md: cell r-saw translates an older English text")
        for line in found
    ), found
    assert all("05_residual" in line for line in found), found


def test_a_new_english_cell_and_a_dropped_one_are_named(scratch):
    path = scratch / "notebooks" / "05_residual.ipynb"
    nb = _load(path)
    nb["cells"].insert(
        1, {"cell_type": "markdown", "id": "brand-new", "metadata": {}, "source": "New."}
    )
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != "r-next"]
    path.write_text(i18n.dump(nb), encoding="utf-8")
    found = i18n.problems("zh")
    assert "i18n/zh/05_residual.md: cell brand-new has no translation" in found
    assert (
        "i18n/zh/05_residual.md: cell r-next is not a markdown cell of notebooks/05_residual.ipynb"
        in found
    )


def test_a_translation_that_drops_a_link_or_a_formula_is_named(scratch):
    path = scratch / "i18n" / "zh" / "05_residual.md"
    text = path.read_text(encoding="utf-8")
    text = text.replace("(06_normalisation.ipynb)", "(07_mlp.ipynb)", 1).replace(
        "$x + f(x)$", "x+f(x)", 1
    )
    path.write_text(text, encoding="utf-8")
    found = "\n".join(i18n.problems("zh"))
    assert "links differ from the English" in found
    assert "formulas differ from the English" in found


def test_a_hand_edit_of_a_built_notebook_is_named(scratch):
    path = scratch / "notebooks" / "zh" / "05_residual.ipynb"
    nb = _load(path)
    nb["cells"][0]["source"] = ["# 05 · 改过了"]
    path.write_text(i18n.dump(nb), encoding="utf-8")
    assert i18n.problems("zh") == [
        "notebooks/zh/05_residual.ipynb: not what the translation builds "
        "(run python -m i18n.build build)"
    ]
    assert i18n.build("zh", "06") == []  # another notebook's number leaves it alone
    assert i18n.build("zh", "05") == [path]
    assert i18n.problems("zh") == []


def test_a_block_can_be_read_back_as_written(tmp_path):
    blocks = [
        i18n.Block("a", "0" * 12, "# 标题\n\n正文，$x$。"),
        i18n.Block("b", "1" * 12, "第二块"),
    ]
    path = tmp_path / "t.md"
    i18n.write_translation(path, "00_x", "zh", blocks)
    assert list(i18n.read_translation(path).values()) == blocks


def test_both_readmes_link_each_other_and_every_edition():
    en = (ROOT / "README.md").read_text(encoding="utf-8")
    zh = (ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    assert "](README.zh-CN.md)" in en and "](README.md)" in zh
    for text, name in ((en, "README.md"), (zh, "README.zh-CN.md")):
        targets = re.findall(r"\]\(((?:[^()\s#]|\([^()\s]*\))+)(?:#[^)]*)?\)", text)
        missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
        assert not missing, f"{name} links to files that do not exist: {missing}"
        for english in ENGLISH:
            assert f"notebooks/zh/{english.name}" in text, f"{name} does not link zh/{english.name}"
            assert f"notebooks/{english.name}" in text, f"{name} does not link {english.name}"
