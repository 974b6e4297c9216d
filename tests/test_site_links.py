"""website/build.py's links without building the site: the repository's links made the site's,
and the check that stops the build on a dead link."""

from __future__ import annotations

import re

import pytest

from website.build import ROOT, DeadLink, Links, dead_links

KNOWN = {  # edition -> stem -> JupyterLab anchor -> the site's
    "en": {"03_scaled_attention": {"Step-3:-the-causal-mask": "step-3-the-causal-mask"}},
    "zh": {"03_scaled_attention": {"第-3-步：因果掩码": "id3"}},
}


def _entry(n: int, name: str) -> str:
    """ERRATA entry n's anchor as GitHub (and the site) write it."""
    text = (ROOT / name).read_text(encoding="utf-8")
    heading = re.search(rf"^### {n}\. (.+)$", text, re.M).group(0)
    from myst_parser.slugs import github_slugify

    from website.build import _plain

    return github_slugify(_plain(heading.lstrip("# ")))


def test_errata_links_go_to_their_entry_by_number():
    en, zh = Links("en", KNOWN), Links("zh", KNOWN)
    got = en.relink("see [ERRATA 22](../ERRATA.md#22-old-title)", "notebooks/03_x.ipynb")
    assert got == f"see [ERRATA 22](errata.md#{_entry(22, 'ERRATA.md')})"
    # the Chinese notebook's link carries the English anchor: the Chinese entry 22 it is
    got = zh.relink("见 [ERRATA 22](../../ERRATA.zh-CN.md#22-x)", "notebooks/zh/03_x.ipynb")
    assert got == f"见 [ERRATA 22](errata.md#{_entry(22, 'ERRATA.zh-CN.md')})"
    with pytest.raises(DeadLink, match="no entry 999"):
        en.relink("[ERRATA 999](../ERRATA.md#999-none)", "notebooks/03_x.ipynb")


def test_chapter_links_take_the_sites_anchors_in_either_edition():
    en = Links("en", KNOWN)
    here = "notebooks/03_scaled_attention.ipynb"
    assert en.relink("[s](#Step-3:-the-causal-mask)", here) == (
        "[s](03_scaled_attention.ipynb#step-3-the-causal-mask)"
    )
    assert en.relink("[z](zh/03_scaled_attention.ipynb#第-3-步：因果掩码)", here) == (
        '<a href="../zh/03_scaled_attention.html#id3">z</a>'
    )
    with pytest.raises(DeadLink, match="no heading"):
        en.relink("[s](#No-such-heading)", here)
    with pytest.raises(DeadLink, match="no such chapter"):
        en.relink("[s](04_multi_head.ipynb)", here)


def test_other_repository_files_become_their_text_and_the_web_stays():
    en = Links("en", KNOWN)
    text = "[`benchmarks/norm_speed.py`](../benchmarks/norm_speed.py) and [PyTorch](https://pytorch.org)"
    assert en.relink(text, "notebooks/06_x.ipynb") == (
        "`benchmarks/norm_speed.py` and [PyTorch](https://pytorch.org)"
    )
    assert en.relink("[ref](../ERRATA.md#still-to-measure)", "notebooks/06_x.ipynb") == (
        "[ref](errata.md#still-to-measure)"
    )


def test_dead_links_names_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text(
        '<a href="b.html#here">ok</a><a href="b.html#gone">x</a><img src="c.png">'
        '<a href="https://example.org/x">web</a><a href="#top">self</a>',
        encoding="utf-8",
    )
    (tmp_path / "b.html").write_text('<h1 id="here">b</h1>', encoding="utf-8")
    dead = dead_links(tmp_path)
    assert sorted(dead) == sorted(
        ["a.html: b.html#gone (no such anchor)", "a.html: c.png", "a.html: #top (no such anchor)"]
    )
