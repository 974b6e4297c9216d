"""One term, one rendering, in the Chinese edition, on every surface a reader meets: the prose of
every zh notebook (i18n/zh/*.md) and its code cells' comments (i18n/zh/comments/*.md), ERRATA's
and the glossary's (i18n/zh/ERRATA.md, i18n/zh/GLOSSARY.md), README.zh-CN.md, MAINTAINING.zh-CN.md,
GLOSSARY.md, gptlib's catalogue and the notebooks' catalogues, and, drawn or printed in Chinese, the model
diagram and the figures' labels, a shape table, the checks and hints of the exercises and the
command line's help and messages. Each uses the textbook's term where it has one (残差干线,
残差连接, 屏蔽, warmup, 块 for a Block), and the refused variants below appear nowhere."""

from __future__ import annotations

import functools
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
    (r"残差流", "残差干线", "the residual stream: the textbook's 残差干线"),
    (r"遮住|遮盖", "屏蔽", "what the causal mask does: the textbook's 屏蔽"),
    (r"预热", "warmup", "the textbook keeps warmup in English"),
    (r"验证损失|验证 loss", "验证集 loss", "the loss on the validation split"),
    (r"训练损失", "训练 loss", "the training loss: loss stays English"),
    (r"批大小|批次", "batch（batch 大小）", "batch stays English"),
    (r"当前使用的|正在使用的", "在用的", "a piece in use: yours once it passes, else the course's"),
    (r"由(课程的)?参考(答案|实现)代替", "暂用课程的参考答案", "the course's reference stands in"),
    (r"本 notebook", "本笔记本", "notebook is 笔记本"),
    (r"一个每头宽度", "每头宽度", "d_h is a width, not one of several"),
]

# A Block written as the English word inside Chinese text: 块 is the word (the diagram's 块 × L,
# the command line's --n-layer 块数). The code's own names stay: `Block`, blocks.0, block_size,
# w["blocks"], {block} in a template, "Transformer Block" (the textbook's section name).

BLOCK = (r"(?<![\w`\"'.\[/{-])blocks?(?![\w`\"'\]}.-])", "块", "a Block of the model")


def FILES() -> list[Path]:  # noqa: N802  (read by the one-off script that applied the terms)
    return [
        *sorted((ROOT / "i18n" / "zh").glob("*.md")),
        *sorted((ROOT / "i18n" / "zh" / "comments").glob("*.md")),
        ROOT / "README.zh-CN.md",
        ROOT / "MAINTAINING.zh-CN.md",
        ROOT / "GLOSSARY.md",
        ROOT / "gptlib" / "locale" / "zh_CN" / "LC_MESSAGES" / "gptlib.po",
        *sorted((ROOT / "gptlib" / "locale" / "zh_CN" / "LC_MESSAGES" / "notebooks").glob("*.po")),
    ]


def refused(text: str, variants=VARIANTS) -> list[str]:
    """Each refused variant found in `text`: where, what, and what to write instead."""
    found = []
    for pattern, preferred, why in variants:
        for m in re.finditer(pattern, text):
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"line {line}: {m.group()!r}, write {preferred!r} ({why})")
    return found


def _id(path: Path) -> str:
    """A file's name, its folder's too where two files share a name (comments/02_qkv.md)."""
    return str(path.relative_to(ROOT / "i18n" / "zh")) if "i18n" in path.parts else path.name


@pytest.mark.parametrize("path", FILES(), ids=_id)
def test_no_refused_variant(path):
    found = refused(path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found[:20])


def _msgstrs(path: Path) -> str:
    """The Chinese of a catalogue, one entry a line (its English may say "block")."""
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        return "\n".join(m.string for m in read_po(f) if m.id and isinstance(m.string, str))


CATALOGUES = [p for p in FILES() if p.suffix == ".po"]


@pytest.mark.parametrize("path", CATALOGUES, ids=lambda p: p.name)
def test_no_english_block_in_a_catalogue_s_chinese(path):
    assert not (found := refused(_msgstrs(path), [BLOCK])), "\n".join(found[:20])


# The modules of the command line (the parser, the train command and what it needs).
COMMAND_LINE = (
    "cli",
    "run",
    "settings",
    "signals",
    "claim",
    "needs",
    "large_text",
    "samples",
    "report",
)
# The surfaces whose sentences gptlib's catalogue holds, by the source that says them.
SURFACES = {
    "model diagram and figure labels": (
        "gptlib/classroom/viz.py",
        "gptlib/classroom/widgets.py",
        "gptlib/classroom/heads.py",
    ),
    "shape and parameter tables": ("gptlib/classroom/shapes.py",),
    "checks and hints": ("gptlib/exercises/",),
    "command line": (*(f"gptlib/{m}.py" for m in COMMAND_LINE), "gptlib/language.py"),
}


@functools.cache
def _sentences() -> dict[str, list[str]]:
    from gptlib.language import sentences

    return sentences()


def _said_in(prefixes: tuple[str, ...]) -> list[str]:
    return [m for m, where in _sentences().items() if any(w.startswith(prefixes) for w in where)]


def _rendered(surface: str) -> str:
    """What the surface shows a reader in Chinese: drawn, printed, or each of its sentences."""
    from gptlib.language import _, set_language

    set_language("zh")
    try:
        shown = [_(m) for m in _said_in(SURFACES[surface])]
        if surface == "model diagram and figure labels":
            import matplotlib.pyplot as plt
            from matplotlib.text import Text

            from gptlib.classroom.viz import plot_model_diagram

            fig = plot_model_diagram("05")
            shown += [t.get_text() for t in fig.findobj(Text)]
            plt.close(fig)
        elif surface == "shape and parameter tables":
            import torch

            from gptlib import GPT, microgpt
            from gptlib.classroom.shapes import shape_table

            idx = torch.zeros(1, 4, dtype=torch.long)
            shown.append(str(shape_table(GPT(microgpt()), idx, idx)))
        elif surface == "command line":
            from gptlib.commandline.cli import build_parser

            parser = build_parser()
            [sub] = [a for a in parser._actions if hasattr(a, "choices") and a.dest == "command"]
            shown += [parser.format_help(), *(c.format_help() for c in sub.choices.values())]
        return "\n".join(shown)
    finally:
        set_language("en")


@pytest.mark.parametrize("surface", SURFACES)
def test_no_refused_variant_on_a_surface(surface):
    text = _rendered(surface)
    assert re.search(r"[\u4e00-\u9fff]", text), "the surface was not shown in Chinese"
    found = refused(text, [*VARIANTS, BLOCK])
    assert not found, "\n".join(found[:20])


def test_a_variant_put_back_on_a_surface_is_caught(monkeypatch):
    """The diagram drawn with the old word for the residual stream fails the surface's scan."""
    import gptlib.classroom.viz
    from gptlib.language import _

    monkeypatch.setattr(
        gptlib.classroom.viz, "_", lambda m: "残差流" if m == "residual\nstream" else _(m)
    )
    found = refused(_rendered("model diagram and figure labels"))
    assert any("残差流" in f for f in found), found


def test_each_variant_is_caught():
    """The patterns catch what they mean to, and leave the preferred renderings alone."""
    caught = {
        "从模型取样": True, "从模型采样": False, "textbook 预设": True, "平台": True, "平台期": False,
        "头宽为 4": True, "每头宽 4": True, "每头宽度": False, "头的宽度": True,
        "处于训练态": True, "处于 eval 模式": True, "评估模式": False, "「引号」": True,
        "残差流": True, "残差干线": False, "被掩码遮住的未来": True, "遮盖后的分数": True,
        "屏蔽": False, "线性预热": True, "线性 warmup": False, "验证损失": True,
        "验证 loss": True, "验证集 loss": False, "训练损失": True, "训练 loss": False,
        "批大小": True, "相同的批次": True, "当前使用的部件": True, "在用的部件": False,
        "由课程的参考答案代替": True, "本 notebook": True, "一个每头宽度": True,
    }  # fmt: skip
    for text, expected in caught.items():
        hit = any(re.search(p, text) for p, _, _ in VARIANTS)
        assert hit == expected, text
    blocks = {
        "第一个 block 收到": True, "L 个 blocks": True, "每个块": False, "`Block`": False,
        "blocks.0.attn": False, "w[\"blocks\"]": False, "block_size": False, "{block}": False,
        "Transformer Block": False, "--block-size": False, "pre_norm_block": False,
    }  # fmt: skip
    for text, expected in blocks.items():
        assert bool(re.search(BLOCK[0], text)) == expected, text


# Variants refused in the prose only (code spans, code blocks, links and comments keep the code's
# own words): `labels` is code, 标签 is the word; block_size is written as the code writes it.
LABELS = (r"(?<![\w`])labels?(?![\w`])", "`labels` (the code) or 标签 (the word)", "labels")
PROSE_VARIANTS = [
    LABELS,
    (r"block size", "block_size（最大窗口）", "the textbook's block_size"),
    (r"\bTransformer block\b", "Transformer Block", "the textbook's section name"),
    (r"(?<![\w/.-])notebooks?(?![\w/.-])", "笔记本", "notebook is 笔记本"),
    BLOCK,
]
NOT_PROSE = re.compile(r"```.*?```|`[^`]*`|\]\([^)]*\)|<!--.*?-->|\$[^$]*\$|<[^>]+>", re.S)
# The columns of the glossary's tables written in English (the English term, the links into the
# English edition with their English headings): English text, where "block" is the word.
ENGLISH_COLUMNS = ("English", "English edition")


def PROSE_FILES() -> list[Path]:  # noqa: N802
    return [
        *sorted((ROOT / "i18n" / "zh").glob("*.md")),
        *sorted((ROOT / "i18n" / "zh" / "comments").glob("*.md")),
        ROOT / "README.zh-CN.md",
        ROOT / "MAINTAINING.zh-CN.md",
    ]


def _without_english_columns(text: str) -> str:
    """`text` with the cells of its tables' English columns blanked."""
    lines, english = text.split("\n"), set()
    for i, line in enumerate(lines):
        if not line.startswith("|"):
            english = set()
            continue
        cells = line.strip().strip("|").split("|")
        if i + 1 < len(lines) and re.fullmatch(r"\|(\s*:?-{3,}:?\s*\|)+", lines[i + 1].strip()):
            english = {j for j, c in enumerate(cells) if c.strip() in ENGLISH_COLUMNS}
        lines[i] = "|".join(" " if j in english else c for j, c in enumerate(cells))
    return "\n".join(lines)


def prose_refused(path: Path, text: str) -> list[str]:
    """Each variant refused in the Chinese prose of `text` (read from `path`). A code cell's
    comments name the code's variables as the code does (labels), and the glossary's English
    columns are English."""
    if path.parent.name == "comments":
        variants = [v for v in PROSE_VARIANTS if v is not LABELS]
    else:
        variants = PROSE_VARIANTS
    prose = NOT_PROSE.sub(" ", _without_english_columns(text))
    return [
        f"{m.group()!r}, write {preferred} ({why})"
        for pattern, preferred, why in variants
        for m in re.finditer(pattern, prose)
    ]


@pytest.mark.parametrize("path", PROSE_FILES(), ids=_id)
def test_no_refused_variant_in_the_prose(path):
    found = prose_refused(path, path.read_text(encoding="utf-8"))
    assert not found, "\n".join(found[:20])


def test_the_prose_scan_reads_chinese_cells_and_comments_but_not_english_ones():
    """A "block" in a Chinese cell of the glossary or in a code cell's comment is caught; the
    English columns and a comment naming the code's labels are left alone."""
    table = (
        "| 中文 | English | 含义 | 中文版 | English edition |\n| --- | --- | --- | --- | --- |\n"
        "| {zh} | Transformer block | 一个注意力子层 | [02](notebooks/zh/02_qkv.ipynb#a) "
        "| [02 · 1. Where attention sits: the block](notebooks/02_qkv.ipynb#b) |\n"
    )
    glossary = ROOT / "i18n" / "zh" / "GLOSSARY.md"
    assert prose_refused(glossary, table.format(zh="块 (Transformer Block)")) == []
    assert len(prose_refused(glossary, table.format(zh="block (Transformer Block)"))) == 1
    comments = ROOT / "i18n" / "zh" / "comments" / "09_loss.md"
    assert prose_refused(comments, "# 被打分的 labels\n") == []
    assert len(prose_refused(comments, "# 只有一个 block 的配置，整个 notebook\n")) == 2
