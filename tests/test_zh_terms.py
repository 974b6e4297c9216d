"""One term, one rendering, in the Chinese edition: the prose of every zh notebook
(i18n/zh/*.md), ERRATA's (i18n/zh/ERRATA.md), README.zh-CN.md, GLOSSARY.md, gptlib's catalogue
and the notebooks' catalogues use the textbook's term where
it has one, and the refused variants below appear nowhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# (a variant, as a regular expression; the rendering the edition uses; why)
VARIANTS = [
    (r"取样", "采样", "sampling: the textbook's 温度采样"),
    (r"预设", "配置", "a preset (GPTConfig's named configurations)"),
    (r"平台(?!期)", "平台期", "the loss plateau"),
    (
        r"头的宽度|(?<!每)头宽度|每头宽(?!度)|(?<!每)头宽(?!度)",
        "每头宽度",
        "d_h, the width of a head",
    ),
    (r"训练态", "训练模式", "model.train(): the textbook's 训练模式"),
    (r"\s?eval 模式", "评估模式", "model.eval(): 评估模式"),
    (r"「", "“", "quotation marks"),
    (r"」", "”", "quotation marks"),
]


def FILES() -> list[Path]:  # noqa: N802  (read by the one-off script that applied the terms)
    return [
        *sorted((ROOT / "i18n" / "zh").glob("*.md")),
        ROOT / "README.zh-CN.md",
        ROOT / "GLOSSARY.md",
        ROOT / "gptlib" / "locale" / "zh_CN" / "LC_MESSAGES" / "gptlib.po",
        *sorted((ROOT / "gptlib" / "locale" / "zh_CN" / "LC_MESSAGES" / "notebooks").glob("*.po")),
    ]


@pytest.mark.parametrize("path", FILES(), ids=lambda p: p.name)
def test_no_refused_variant(path):
    text = path.read_text(encoding="utf-8")
    found = []
    for pattern, preferred, why in VARIANTS:
        for m in re.finditer(pattern, text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"line {line}: {m.group()!r}, write {preferred!r} ({why})")
    assert not found, "\n".join(found[:20])


def test_each_variant_is_caught():
    """The patterns catch what they mean to, and leave the preferred renderings alone."""
    caught = {
        "从模型取样": True, "从模型采样": False, "textbook 预设": True, "平台": True, "平台期": False,
        "头宽为 4": True, "每头宽 4": True, "每头宽度": False, "头的宽度": True,
        "处于训练态": True, "处于 eval 模式": True, "评估模式": False, "「引号」": True,
    }  # fmt: skip
    for text, expected in caught.items():
        hit = any(re.search(p, text) for p, _, _ in VARIANTS)
        assert hit == expected, text


# Variants refused in the prose only (code spans, code blocks, links and comments keep the code's
# own words): `labels` is code, 标签 is the word; block_size is written as the code writes it.
PROSE_VARIANTS = [
    (r"(?<![\w`])labels?(?![\w`])", "`labels` (the code) or 标签 (the word)", "labels"),
    (r"block size", "block_size（最大窗口）", "the textbook's block_size"),
]
NOT_PROSE = re.compile(r"```.*?```|`[^`]*`|\]\([^)]*\)|<!--.*?-->|\$[^$]*\$|<[^>]+>", re.S)


def PROSE_FILES() -> list[Path]:  # noqa: N802
    return [*sorted((ROOT / "i18n" / "zh").glob("*.md")), ROOT / "README.zh-CN.md"]


@pytest.mark.parametrize("path", PROSE_FILES(), ids=lambda p: p.name)
def test_no_refused_variant_in_the_prose(path):
    prose = NOT_PROSE.sub(" ", path.read_text(encoding="utf-8"))
    found = [
        f"{m.group()!r}, write {preferred} ({why})"
        for pattern, preferred, why in PROSE_VARIANTS
        for m in re.finditer(pattern, prose)
    ]
    assert not found, "\n".join(found[:20])
