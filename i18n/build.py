"""The course's other-language editions, built from the English notebooks and their translations.

A translation file, ``i18n/<lang>/NN_topic.md``, holds one block per markdown cell of the English
notebook ``notebooks/NN_topic.ipynb``, each opened by a marker line that names the cell and the
hash of the English text it translates::

    <!-- cell c00 · en 3f9a61c2b7d0 -->
    # 05 · 残差连接 (Residual connections)
    ...

``build`` writes ``notebooks/<lang>/NN_topic.ipynb``: the English notebook with every markdown
cell's text replaced by its translation, and its code cells' comments and docstrings by theirs
(``i18n/<lang>/comments/NN_topic.md``, one block per code cell, marked the same way; see "The
code cells' comments" below). Its code is otherwise the English notebook's, so the two editions
cannot differ in what they compute, but for one thing: the first code cell also chooses the
edition's language for what ``gptlib`` and the notebook's own ``tr("...")`` say (it imports
``set_language`` and calls ``set_language("zh")``, see ``gptlib.language``). Its outputs are the
edition's own run (``make notebooks`` executes both editions): ``build`` keeps them for every
code cell whose code did not change (comments and docstrings aside), and leaves a changed cell
without outputs until the edition is executed again.
Links keep working: a link to a heading of a notebook (``07_mlp.ipynb#1.-d-→-4d-→-d,-by-hand``)
is written in the translation with the English anchor and pointed at the translated heading
here; a link out of ``notebooks/`` gains one ``../``.

Four documents have an edition too, built the same way one section (a heading and its text) per
block: ``ERRATA.zh-CN.md`` from ``i18n/zh/ERRATA.md`` (links pointed at the Chinese notebooks, the
English anchors kept; where the English quotes what a notebook prints, the block writes a marker,
``{{out 07 05fb79b5 "524,288"}}``, and the edition quotes that line of the Chinese notebook's
stored output, see QUOTE), ``README.zh-CN.md`` from ``i18n/zh/README.md`` (its own links) and
``GLOSSARY.zh-CN.md`` from ``i18n/zh/GLOSSARY.md`` (every link kept: both already link both
editions); ``MAINTAINING.zh-CN.md`` from ``i18n/zh/MAINTAINING.md``, as the README (its own links).

``check`` lists what is out of step: a translation whose English cell (or a code cell's English
comments) has changed since (its hash no longer matches), a markdown cell with no translation,
a block for a cell that no longer exists, a built notebook that differs from what ``build`` would
write, a code cell not executed in the edition since its code changed. ``template NN`` writes a
translation file for notebook NN and its comments file (or adds the blocks they lack), with the
English text in each new block to be replaced.

    python -m i18n.build build [--lang zh]
    python -m i18n.build check [--lang zh]
    python -m i18n.build template 05 [--lang zh]
    python -m i18n.build mark 05 r-saw [--lang zh]   # after updating that cell's translation
                                                     # (a code cell's id: its comments' block)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LANGS = {"zh": "zh-CN"}  # folder name -> the language tag written into the notebooks' metadata
# What the first code cell of an edition's notebook adds to the English one: gptlib speaks its
# language. The import joins the cell's gptlib imports in sorted place and the call comes before
# the cell's first statement, so the twin's code is the English code plus these two lines.
LANGUAGE_IMPORT = "from gptlib.language import set_language"
LANGUAGE_CALL = {"zh": 'set_language("zh")  # gptlib 的检查与消息用中文'}
MARKER = re.compile(r"^<!-- (?:cell|section) (\S+) · en ([0-9a-f]{12}) -->$", re.M)
# The repository's documents that have an edition in another language: ERRATA.md is written
# ERRATA.zh-CN.md from i18n/zh/ERRATA.md, one block per section (a heading and what follows it);
# README.md, MAINTAINING.md and GLOSSARY.md alike.
DOCUMENTS = ("ERRATA.md", "README.md", "GLOSSARY.md", "MAINTAINING.md")
# A document whose translation is written for its own readers: its own links (the README.zh-CN
# links both editions), its own comments in its commands; only its headings and its staleness
# are checked, and its sections keep no English anchors.
OWN_LINKS = ("README.md", "MAINTAINING.md")
# A document that already links both editions (GLOSSARY.md: each row its English and its Chinese
# section): its translation keeps every link as the English has it, and is checked like ERRATA.
BOTH_EDITIONS = ("GLOSSARY.md",)
DOCUMENT_HEADER = (
    "<!-- {name}: the {lang} text of each section of {name}.md. A block starts at its marker: the "
    "English section's anchor and the hash of the English text it translates "
    "(python -m i18n.build check names the blocks whose English text has changed since). -->\n"
)
HEADER = (
    "<!-- {name}: the {lang} text of each markdown cell of notebooks/{name}.ipynb. A block starts "
    "at its marker: the English cell's id and the hash of the English text it translates "
    "(python -m i18n.build check names the blocks whose English text has changed since). -->\n"
)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_LINK = re.compile(r"(\]\()((?:[^()\s]|\([^()\s]*\))*)(\))")  # one level of (...) inside


def english_hash(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of a cell's English text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def rendered_text(heading: str) -> str:
    """The text JupyterLab gives a heading: inline markup removed, characters kept."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images keep their text
    text = re.sub(r"(`+)(.+?)\1", lambda m: m.group(2).strip(), text)  # code spans lose backticks
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)  # bold
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", text)  # *emphasis*
    return text.strip()


def anchor(heading: str) -> str:
    """The fragment JupyterLab links a heading by: its rendered text, spaces replaced by '-'."""
    return rendered_text(heading).replace(" ", "-")


def headings(text: str) -> list[str]:
    """The markdown headings (ATX style) of a cell's text, outside fenced code blocks."""
    found, in_fence = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := _HEADING.match(line)):
            found.append(m.group(2))
    return found


@dataclass
class Block:
    cell_id: str
    en_hash: str
    text: str


def read_translation(path: Path) -> dict[str, Block]:
    """cell id -> its block; raises ValueError on a repeated cell id."""
    text = path.read_text(encoding="utf-8")
    marks = list(MARKER.finditer(text))
    blocks: dict[str, Block] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        body = text[m.end() : end].strip("\n")
        if m.group(1) in blocks:
            raise ValueError(f"{path}: cell {m.group(1)} is translated twice")
        blocks[m.group(1)] = Block(m.group(1), m.group(2), body)
    return blocks


def write_translation(path: Path, name: str, lang: str, blocks: list[Block]) -> None:
    document = f"{name}.md" in DOCUMENTS
    kind = "section" if document else "cell"
    parts = [(DOCUMENT_HEADER if document else HEADER).format(name=name, lang=LANGS[lang])]
    parts += [f"\n<!-- {kind} {b.cell_id} · en {b.en_hash} -->\n{b.text}\n" for b in blocks]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")


def translation_path(notebook: Path, lang: str) -> Path:
    """i18n/<lang>/NN_topic.md, the translation of notebooks/NN_topic.ipynb."""
    return ROOT / "i18n" / lang / f"{notebook.stem}.md"


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def english_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def _anchor_maps(lang: str) -> dict[str, dict[str, str]]:
    """notebook file name -> {English anchor: translated anchor}, heading by heading of each
    markdown cell whose translation has as many headings as the English text."""
    maps: dict[str, dict[str, str]] = {}
    for path in english_notebooks():
        tr_path = translation_path(path, lang)
        blocks = read_translation(tr_path) if tr_path.is_file() else {}
        pairs = {}
        for cell in load(path)["cells"]:
            if cell["cell_type"] != "markdown" or cell.get("id") not in blocks:
                continue
            en, tr = headings(source(cell)), headings(blocks[cell["id"]].text)
            if len(en) == len(tr):
                pairs.update({anchor(a): anchor(b) for a, b in zip(en, tr, strict=True)})
        maps[path.name] = pairs
    return maps


def _relink(text: str, notebook: str, maps: dict[str, dict[str, str]], lang: str) -> str:
    """Point a translated cell's links at the translated notebooks' headings; a link that leaves
    notebooks/ gains one ../ (the translated notebooks sit one folder deeper), and one to a
    translated document (ERRATA.md) goes to its edition (ERRATA.zh-CN.md)."""

    def fix(m: re.Match) -> str:
        url = m.group(2)
        if re.match(r"^[a-z]+:", url):  # http:, https:, mailto:
            return m.group(0)
        target, _, fragment = url.partition("#")
        if not target or (target.endswith(".ipynb") and "/" not in target):
            name = target or notebook
            fragment = maps.get(name, {}).get(fragment, fragment)
            return f"{m.group(1)}{target}{'#' if fragment else ''}{fragment}{m.group(3)}"
        if target.startswith("../"):
            if target.removeprefix("../") in DOCUMENTS:  # the document's own edition
                url = url.replace(target, f"../{document_edition(target[3:], lang).name}", 1)
            return f"{m.group(1)}../{url}{m.group(3)}"
        return m.group(0)

    return _LINK.sub(fix, text)


def with_language(code: str, lang: str) -> str:
    """`code` (a notebook's first code cell) choosing `lang` for what gptlib says: `set_language`
    imported among its gptlib imports, in the order isort keeps (joining the cell's own import from
    gptlib.language, `tr`, where it has one), and the call just before the first statement after
    the last import."""
    body = ast.parse(code).body
    imports = [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))]
    rest = [n for n in body if n.lineno > imports[-1].end_lineno] if imports else []
    if not rest:
        raise ValueError("the first code cell must hold imports and a statement after them")
    ours = [n for n in imports if isinstance(n, ast.ImportFrom) and n.module.startswith("gptlib")]
    lines = code.splitlines()
    lines.insert(rest[0].lineno - 1, LANGUAGE_CALL[lang])
    same = [n for n in ours if n.module == "gptlib.language"]
    if same:
        [node] = same
        names = sorted({a.name for a in node.names} | {"set_language"})
        lines[node.lineno - 1 : node.end_lineno] = [language_import(names)]
        return "\n".join(lines)
    later = [n for n in ours if n.module > "gptlib.language"]
    at = later[0].lineno - 1 if later else ours[-1].end_lineno
    lines.insert(at, LANGUAGE_IMPORT)
    return "\n".join(lines)


def language_import(names: list[str]) -> str:
    """The import line of `names` from gptlib.language."""
    return f"from gptlib.language import {', '.join(names)}"


# ---------------------------------------------------------------------------------------------
# The code cells' comments and docstrings, in the edition's language
#
# i18n/<lang>/comments/NN_topic.md holds one block per code cell of notebooks/NN_topic.ipynb that
# has comments of words or docstrings, opened by the prose's marker line (the cell's id and the
# hash of the cell's English comments, so that an English comment that changes makes its block
# stale, and `check` names it, as it names a stale markdown block). A block holds the cell's
# comments and docstrings in the edition's language, in the English order, as they stand in the
# code: a comment written with its "#" (a run of whole-line comments is one comment, its lines
# free to differ in number), a docstring with its quotes; a blank line between two of them. The
# code is the English code: the build puts the block's comments in place of the English ones, and
# the twin check compares the editions' code without comments and docstrings. Comments without
# words (shapes: "# [B, n, d]"), linter and nbval directives and comments that are code are kept.

COMMENTS_HEADER = (
    "<!-- {name}: the {lang} comments and docstrings of the code cells of notebooks/{name}.ipynb. "
    "A block starts at its marker: the code cell's id and the hash of the English comments it "
    'translates; it holds the cell\'s comments (# ...) and docstrings ("""...""") in their '
    "English order, a blank line between two (python -m i18n.build check names the blocks whose "
    "English comments have changed since). -->\n"
)
_DIRECTIVE = re.compile(r"^(noqa|fmt:|type:|NBVAL_|pragma|isort:|ruff:)")
_WORDS = re.compile(r"[A-Za-z]{3,}")
_HAN = re.compile(r"[\u3400-\u9fff]")
# English words a comment keeps in every edition: the terms the textbook keeps in English, and
# the functions of a formula ("-sum_i y_i log p_i", "1 / sqrt(64) = 1/8") or a layer's name.
KEPT_TERMS = {"logits", "loss", "token", "batch", "softmax", "sum", "log", "exp", "sqrt", "qkv"}
# A shape ("[B, h, n, d_h]", "[N, width + 1]": no two words side by side) or a code span.
_SHAPE = re.compile(r"\[(?![^\]]*[A-Za-z]+ +[A-Za-z])[^\]]*\]|`[^`]*`")
_DOCSTRING_START = re.compile(r"^[rRuU]?(\"\"\"|'''|\"|')")


@dataclass
class Comment:
    """A comment or docstring of a code cell: where it stands in the code (character offsets),
    the column its lines are indented to, and its text as a block writes it."""

    kind: str  # "comment" (whole lines, one or several), "trailing" (after code), "docstring"
    start: int
    end: int
    indent: int
    text: str


def comments_path(notebook: Path, lang: str) -> Path:
    """i18n/<lang>/comments/NN_topic.md, the comments of notebooks/NN_topic.ipynb."""
    return ROOT / "i18n" / lang / "comments" / f"{notebook.stem}.md"


def kept_comment(text: str) -> bool:
    """Whether a comment's text (without its "#") stays as it is in every edition: a directive
    (noqa, fmt: skip, NBVAL_IGNORE_OUTPUT), no word in it but shapes and the course's English
    terms ("[B, n, d] -> [B, n, 3d]", "logits [B, n, V]"), or code ("w - lr * grad")."""
    text = text.strip()
    if _DIRECTIVE.match(text):
        return True
    bare = _SHAPE.sub(" ", text)
    if not any(w.lower() not in KEPT_TERMS for w in _WORDS.findall(bare)):
        return True
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return bool(re.search(r"[=(@*/+.-]", bare))  # an expression, not words that happen to parse


def _tokens(code: str) -> list[tokenize.TokenInfo] | None:
    """The tokens of a cell's code, its IPython lines (%magic, !shell) read as blank; None where
    the cell is not Python."""
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.split("\n")]
    try:
        return list(tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _docstrings(code: str) -> set[tuple[int, int]]:
    """Where each docstring of `code` starts (row, column): of the cell, of a function, a class."""
    lines = ["" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.split("\n")]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.add((first.value.lineno, first.value.col_offset))  # indentation: ASCII
    return found


def code_comments(code: str, every: bool = False) -> list[Comment]:
    """The comments of words and the docstrings of a cell's code, in order (with `every`, the kept
    comments too, each alone)."""
    tokens = _tokens(code)
    if tokens is None:
        return []
    lines = code.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def at(row: int, col: int) -> int:
        return offsets[row - 1] + col

    docstrings = _docstrings(code)
    found: list[Comment] = []
    last_row = None  # the row of the last whole-line comment joined into found[-1]
    for token in tokens:
        (row, col), (end_row, end_col) = token.start, token.end
        if token.type == tokenize.STRING and (row, col) in docstrings:
            text = token.string.split("\n")
            text[1:] = [ln[col:] if ln[:col].isspace() else ln.lstrip() for ln in text[1:]]
            found.append(Comment("docstring", at(row, col), at(end_row, end_col), col,
                                 "\n".join(text)))  # fmt: skip
            last_row = None
        elif token.type == tokenize.COMMENT:
            if kept_comment(token.string[1:]) and not every:
                last_row = None
                continue
            whole = not token.line[:col].strip()
            previous = found[-1] if found else None
            if (
                whole
                and not every
                and previous is not None
                and previous.kind == "comment"
                and last_row == row - 1
                and previous.indent == col
            ):
                previous.end = at(row, end_col)
                previous.text += "\n" + token.string
            else:
                kind = "comment" if whole else "trailing"
                found.append(Comment(kind, at(row, col), at(row, end_col), col, token.string))
            last_row = row if whole else None
    return found


def comments_hash(comments: list[Comment]) -> str:
    """The hash a block of comments is marked with: of the cell's English comments, in order."""
    return english_hash("\n\n".join(c.text for c in comments))


def without_comments(code: str) -> str:
    """`code` with its comments and docstrings taken out (a docstring leaves a placeholder) and its
    blank lines dropped: what the two editions of a code cell share."""
    parts, last = [], 0
    for comment in code_comments(code, every=True):
        parts.append(code[last : comment.start])
        parts.append('"""..."""' if comment.kind == "docstring" else "")
        last = comment.end
    parts.append(code[last:])
    lines = "".join(parts).split("\n")
    return "\n".join(ln.rstrip() for ln in lines if ln.strip())


def block_comments(text: str) -> list[str]:
    """The comments and docstrings a block holds, in order; raises ValueError on a line that is
    neither a comment nor part of a docstring."""
    lines, found, i = text.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("#"):
            j = i
            while j < len(lines) and lines[j].startswith("#"):
                j += 1
            found.append("\n".join(lines[i:j]))
            i = j
        elif m := _DOCSTRING_START.match(line):
            quote, rest = m.group(1), line[m.end() :]
            j = i
            if quote not in rest:
                j = i + 1
                while j < len(lines) and quote not in lines[j]:
                    j += 1
                if j == len(lines):
                    raise ValueError(f"a docstring opened by {line!r} is not closed")
            found.append("\n".join(lines[i : j + 1]))
            i = j + 1
        else:
            raise ValueError(
                f'the line {line!r} is neither a comment (# ...) nor a docstring ("""...""")'
            )
    return found


def put_comments(code: str, comments: list[Comment], texts: list[str]) -> str:
    """`code` with each of its `comments` replaced by the text in `texts` at the same place: a
    comment's or docstring's further lines indented as the first."""
    for comment, text in sorted(zip(comments, texts, strict=True), key=lambda p: -p[0].start):
        pad = " " * comment.indent
        lines = text.split("\n")
        text = "\n".join([lines[0], *(pad + ln if ln.strip() else "" for ln in lines[1:])])
        code = code[: comment.start] + text + code[comment.end :]
    return code


def commented(code: str, block: Block | None) -> tuple[str, list[str]]:
    """A code cell's code with its comments from `block` (in the edition's language), and what
    keeps the block from being used (the English comments are kept then)."""
    comments = code_comments(code)
    if block is None:
        return code, []
    try:
        texts = block_comments(block.text)
    except ValueError as e:
        return code, [str(e)]
    if len(texts) != len(comments):
        return code, [f"holds {len(texts)} comments, the English cell has {len(comments)}"]
    problems_ = []
    for n, (comment, text) in enumerate(zip(comments, texts, strict=True), start=1):
        is_docstring = bool(_DOCSTRING_START.match(text))
        if is_docstring != (comment.kind == "docstring"):
            problems_.append(
                f"comment {n} is {'a docstring' if is_docstring else 'a comment'}, the English "
                f"is {'a docstring' if comment.kind == 'docstring' else 'a comment'}"
            )
        elif comment.kind == "trailing" and "\n" in text:
            problems_.append(f"comment {n} follows code on its line: it must be one line")
    if problems_:
        return code, problems_
    new = put_comments(code, comments, texts)
    if without_comments(new) != without_comments(code) or _tokens(new) is None:
        return code, ["its comments change the code (a quote or a # out of place?)"]
    return new, []


def read_comments(notebook: Path, lang: str) -> dict[str, Block]:
    path = comments_path(notebook, lang)
    return read_translation(path) if path.is_file() else {}


def comment_problems(notebook: Path, lang: str) -> list[str]:
    """How the comments of `lang`'s edition of `notebook` are out of step with the English."""
    path = comments_path(notebook, lang)
    where = f"i18n/{lang}/comments/{notebook.stem}.md"
    cells = {c.get("id"): source(c) for c in load(notebook)["cells"] if c["cell_type"] == "code"}
    wanted = {i: cs for i, code in cells.items() if (cs := code_comments(code))}
    if not path.is_file():
        return [f"{where}: missing ({len(wanted)} code cells of notebooks/{notebook.name} have "
                "comments to translate; python -m i18n.build template "
                f"{notebook.stem[:2]} writes it)"] if wanted else []  # fmt: skip
    found = []
    blocks = read_translation(path)
    for cell_id, comments in wanted.items():
        block = blocks.get(cell_id)
        if block is None:
            found.append(f"{where}: cell {cell_id} has no translation of its comments")
            continue
        if block.en_hash != comments_hash(comments):
            found.append(
                f"{where}: cell {cell_id} translates older English comments (en "
                f"{block.en_hash}; the English comments are now {comments_hash(comments)})"
            )
        _, why = commented(cells[cell_id], block)
        found += [f"{where}: cell {cell_id}: {w}" for w in why]
        if not why:
            texts = block_comments(block.text)
            pairs = zip(comments, texts, strict=True)
            same = [n for n, (c, t) in enumerate(pairs, start=1) if c.text == t]
            if same:
                found.append(f"{where}: cell {cell_id}: comments {same} are still the English")
    for cell_id in blocks.keys() - wanted.keys():
        found.append(
            f"{where}: cell {cell_id} is not a code cell with comments of notebooks/{notebook.name}"
        )
    return found


def template_comments(notebook: Path, lang: str) -> Path | None:
    """Write (or complete) the comments file of `notebook`: blocks already there kept, a new one
    holding the cell's English comments to translate."""
    path = comments_path(notebook, lang)
    old = read_translation(path) if path.is_file() else {}
    blocks = []
    for cell in load(notebook)["cells"]:
        comments = code_comments(source(cell)) if cell["cell_type"] == "code" else []
        if comments:
            text = "\n\n".join(c.text for c in comments)
            blocks.append(old.get(cell["id"]) or Block(cell["id"], comments_hash(comments), text))
    if not blocks:
        return None
    write_comments(path, notebook.stem, lang, blocks)
    return path


def write_comments(path: Path, name: str, lang: str, blocks: list[Block]) -> None:
    parts = [COMMENTS_HEADER.format(name=name, lang=LANGS[lang])]
    parts += [f"\n<!-- cell {b.cell_id} · en {b.en_hash} -->\n{b.text}\n" for b in blocks]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts), encoding="utf-8")


def mark_comments(notebook: Path, cell_id: str, lang: str) -> Path:
    """Record that the comments block of `cell_id` translates the English comments it has now."""
    path = comments_path(notebook, lang)
    cells = {c.get("id"): c for c in load(notebook)["cells"] if c["cell_type"] == "code"}
    blocks = read_translation(path) if path.is_file() else {}
    if cell_id not in blocks or cell_id not in cells:
        raise SystemExit(f"{path.relative_to(ROOT)}: no block for a code cell {cell_id}")
    blocks[cell_id].en_hash = comments_hash(code_comments(source(cells[cell_id])))
    write_comments(path, notebook.stem, lang, list(blocks.values()))
    return path


def translated(path: Path, lang: str, maps: dict[str, dict[str, str]] | None = None) -> dict:
    """The notebook `path` with its markdown in `lang`; English text where a block is missing.

    Its code cells' comments and docstrings are `lang`'s (i18n/<lang>/comments/NN_topic.md). They
    keep the outputs of the edition's own run (the notebook already built in `notebooks/<lang>/`,
    executed by `make notebooks`) where their code is the one that ran, comments aside; a
    code cell whose code is new or changed has no outputs until the edition is executed again
    (`check` names it). The edition's widget state is its own run's too."""
    maps = maps if maps is not None else _anchor_maps(lang)
    tr_path = translation_path(path, lang)
    blocks = read_translation(tr_path) if tr_path.is_file() else {}
    nb = load(path)  # a fresh copy, read from disk
    built = NOTEBOOKS / lang / path.name
    ran = load(built) if built.is_file() else {"cells": [], "metadata": {}}
    own = {c.get("id"): c for c in ran["cells"] if c["cell_type"] == "code"}
    comments = read_comments(path, lang)
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":  # its comments in `lang`, then (the first) the choice
            code, _ = commented(source(cell), comments.get(cell.get("id")))
            code = with_language(code, lang) if cell is first else code
            cell["source"] = code.splitlines(keepends=True)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and cell.get("id") in blocks:
            text = _relink(blocks[cell["id"]].text, path.name, maps, lang)
            cell["source"] = text.splitlines(keepends=True)
        elif cell["cell_type"] == "code":
            twin = own.get(cell.get("id"))  # the run holds if only comments changed since
            if twin is not None and without_comments(source(twin)) == without_comments(
                source(cell)
            ):
                cell["outputs"], cell["execution_count"] = twin["outputs"], twin["execution_count"]
            else:
                cell["outputs"], cell["execution_count"] = [], None
    nb["metadata"]["language_edition"] = {"language": LANGS[lang], "english": f"../{path.name}"}
    if "widgets" in ran["metadata"]:
        nb["metadata"]["widgets"] = ran["metadata"]["widgets"]
    else:
        nb["metadata"].pop("widgets", None)
    return nb


def unexecuted(path: Path, lang: str) -> list[str]:
    """The code cells of the built `lang` edition of `path` that have not run in that edition:
    cells that ran in English (an execution count) and have none there."""
    built = NOTEBOOKS / lang / path.name
    if not built.is_file():
        return []
    there = {c.get("id"): c for c in load(built)["cells"] if c["cell_type"] == "code"}
    return [
        c.get("id")
        for c in load(path)["cells"]
        if c["cell_type"] == "code"
        and c.get("execution_count") is not None
        and there.get(c.get("id"), {}).get("execution_count") is None
    ]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading of a Markdown file."""
    return re.sub(r"[^\w\- ]", "", rendered_text(heading).strip().lower()).replace(" ", "-")


def sections(text: str) -> list[tuple[str, str]]:
    """A Markdown document cut at its headings: (the heading's anchor, the heading and the text
    up to the next heading), in order."""
    found: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(line)
        if m or not found:
            found.append((slug(m.group(2)) if m else "top", []))
        found[-1][1].append(line)
    return [(anchor_, "\n".join(lines).strip("\n")) for anchor_, lines in found]


def document_edition(document: str, lang: str) -> Path:
    """ERRATA.md -> ERRATA.zh-CN.md."""
    stem = document.removesuffix(".md")
    return ROOT / f"{stem}.{LANGS[lang]}.md"


def document_translation_path(document: str, lang: str) -> Path:
    return ROOT / "i18n" / lang / document


def _relink_document(text: str, lang: str, maps: dict[str, dict[str, str]]) -> str:
    """A translated document's links: to a notebook's heading, the same heading of its edition;
    to another translated document, its edition."""

    def fix(m: re.Match) -> str:
        url = m.group(2)
        target, _, fragment = url.partition("#")
        if re.match(r"^notebooks/\d\d_\w+\.ipynb$", target):
            name = target.split("/")[1]
            fragment = maps.get(name, {}).get(fragment, fragment)
            target = f"notebooks/{lang}/{name}"
        elif target in DOCUMENTS:
            target = document_edition(target, lang).name
        else:
            return m.group(0)
        return f"{m.group(1)}{target}{'#' if fragment else ''}{fragment}{m.group(3)}"

    return _LINK.sub(fix, text)


def translated_document(document: str, lang: str, maps=None) -> str:
    """The `lang` edition of `document`: each section's translation (the English where a block is
    missing), with the English heading's anchor kept where the translated heading's differs, so
    that a link written for the English lands on the same section."""
    maps = maps if maps is not None else _anchor_maps(lang)
    tr_path = document_translation_path(document, lang)
    blocks = read_translation(tr_path) if tr_path.is_file() else {}
    parts = []
    for anchor_, text in sections((ROOT / document).read_text(encoding="utf-8")):
        block = blocks.get(anchor_)
        if block is not None and document in OWN_LINKS:
            text = block.text
        elif block is not None:
            where = f"i18n/{lang}/{document}, section {anchor_}"
            text = with_quotes(block.text, lang, where)
            if document not in BOTH_EDITIONS:
                text = _relink_document(text, lang, maps)
            heads = headings(text)
            if anchor_ != "top" and (not heads or slug(heads[0]) != anchor_):
                text = f'<a id="{anchor_}"></a>\n\n{text}'
        parts.append(text)
    return "\n\n".join(parts) + "\n"


_CODE = re.compile(r"```.*?```|~~~.*?~~~|`[^`]+`", re.S)  # a span may wrap a line
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def section_differences(english: str, translation: str) -> list[str]:
    """What a section's translation must keep from the English: its headings' levels, its link
    targets, its code (spans and blocks, byte for byte) and the numbers of its prose."""
    found = []

    def levels(text: str) -> list[int]:
        return [len(re.match(r"#+", h).group()) for h in re.findall(r"^#{1,6} ", text, re.M)]

    def links(text: str) -> list[str]:
        return sorted(m.group(2) for m in _LINK.finditer(_CODE.sub(" ", text)))

    def numbers(text: str) -> list[str]:
        prose = _LINK.sub(" ", _CODE.sub(" ", text))
        return sorted(_NUMBER.findall(prose))

    if levels(english) != levels(translation):
        found.append(f"heading levels differ: {levels(english)} vs {levels(translation)}")
    if links(english) != links(translation):
        gone = sorted(set(links(english)) - set(links(translation)))
        new = sorted(set(links(translation)) - set(links(english)))
        found.append(f"links differ from the English (missing {gone}, added {new})")
    code_en, code_tr = sorted(_CODE.findall(english)), sorted(_CODE.findall(translation))
    if code_en != code_tr:
        gone = [c[:60] for c in code_en if c not in code_tr]
        new = [c[:60] for c in code_tr if c not in code_en]
        found.append(f"code differs from the English (missing {gone}, added {new})")
    if numbers(english) != numbers(translation):
        ne, nt = numbers(english), numbers(translation)
        gone = [n for n in set(ne) if ne.count(n) > nt.count(n)]
        new = [n for n in set(nt) if nt.count(n) > ne.count(n)]
        found.append(f"numbers differ from the English (fewer {sorted(gone)}, more {sorted(new)})")
    return found


# --- Quotes of the edition's own outputs in a translated document -------------------------------
# A translated document (ERRATA) quotes what a notebook prints as the edition's notebook prints it:
# the block writes a marker, {{out 07 05fb79b5 "524,288"}}, naming the notebook's number, the code
# cell's id and a piece of text (a number or code that stays when the wording changes) found on
# exactly one line of that cell's stored outputs in notebooks/<lang>/; or {{out 07 05fb79b5 #2}},
# the cell's second output line, where no such piece stays; "col 3" after either quotes only the
# third column of a table's line (columns are parted by two or more spaces). The built document
# has that line as a code span, so a quote cannot drift from what the notebook prints. The English
# section quotes the English notebook's output of the same cell: the check pairs each marker with
# such a quote and holds the rest of the section to the usual rules.
QUOTE = re.compile(r'\{\{out (\d\d) (\S+) (?:"([^"\n]+)"|#(\d+))(?: col (\d+))?\}\}')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_outputs_cache: dict[tuple[Path, int], dict[str, list[str]]] = {}


class QuoteError(ValueError):
    """A quote marker that does not find its line: the message names the marker and why.
    `pending` when the cell has no stored output yet (its code changed since the edition ran)."""

    def __init__(self, message: str, pending: bool = False):
        super().__init__(message)
        self.pending = pending


def output_lines(path: Path) -> dict[str, list[str]]:
    """code cell id -> the lines of its stored text outputs (streams, results' text/plain, errors
    as "Name: message"), in order, trailing spaces removed."""
    key = (path, path.stat().st_mtime_ns)
    if key not in _outputs_cache:
        found = {}
        for cell in load(path)["cells"]:
            if cell["cell_type"] != "code":
                continue
            texts = []
            for out in cell.get("outputs", []):
                if out["output_type"] == "stream":
                    texts.append(source({"source": out["text"]}))
                elif out["output_type"] == "error":
                    texts.append(f"{out['ename']}: {out['evalue']}")
                elif "text/plain" in out.get("data", {}):
                    texts.append(source({"source": out["data"]["text/plain"]}))
            lines = _ANSI.sub("", "\n".join(texts)).splitlines()
            found[cell.get("id")] = [line.rstrip() for line in lines if line.strip()]
        _outputs_cache[key] = found
    return _outputs_cache[key]


def notebook_by_number(number: str, lang: str | None = None) -> Path | None:
    """notebooks/NN_topic.ipynb (with `lang`, its edition's), or None."""
    found = sorted((NOTEBOOKS / lang if lang else NOTEBOOKS).glob(f"{number}_*.ipynb"))
    return found[0] if found else None


def quoted_line(m: re.Match, lang: str) -> str:
    """The stored output line a marker names; raises QuoteError naming the marker."""
    number, cell_id, piece, index, column = m.groups()
    line = _line(m, lang, number, cell_id, piece, index)
    if column is not None:
        columns = re.split(r"\s{2,}", line)
        if not 1 <= int(column) <= len(columns):
            raise QuoteError(f"{m.group(0)}: the line {line[:60]!r} has {len(columns)} columns")
        line = columns[int(column) - 1]
    return re.sub(r" {3,}", "  ", line)  # a table's padding, as the English quotes write it


def _line(m: re.Match, lang: str, number: str, cell_id: str, piece, index) -> str:
    path = notebook_by_number(number, lang)
    if path is None:
        raise QuoteError(f"{m.group(0)}: no notebook {number} in notebooks/{lang}/")
    cells = output_lines(path)
    if cell_id not in cells:
        raise QuoteError(f"{m.group(0)}: notebooks/{lang}/{path.name} has no code cell {cell_id}")
    lines = cells[cell_id]
    if not lines:
        raise QuoteError(
            f"{m.group(0)}: cell {cell_id} of notebooks/{lang}/{path.name} has no stored output "
            "(not executed in this edition since its code changed; run make notebooks)",
            pending=True,
        )
    if index is not None:
        if not 1 <= int(index) <= len(lines):
            raise QuoteError(
                f"{m.group(0)}: cell {cell_id} of notebooks/{lang}/{path.name} prints "
                f"{len(lines)} lines, not {index}"
            )
        return lines[int(index) - 1].strip()
    hits = [line for line in lines if piece in line]
    if len(hits) != 1:
        raise QuoteError(
            f"{m.group(0)}: {len(hits)} lines of cell {cell_id}'s stored output in "
            f"notebooks/{lang}/{path.name} contain {piece!r}, not one "
            f"({'; '.join(h.strip()[:60] for h in hits[:3]) or 'none of its ' + str(len(lines))}); "
            "name a piece of text that only its line has"
        )
    return hits[0].strip()


def code_span(text: str) -> str:
    """`text` as a Markdown code span (longer fences where it holds backticks)."""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or fence != "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def with_quotes(text: str, lang: str, where: str) -> str:
    """A block's text with each quote marker replaced by the quoted line as a code span."""

    def quote(m: re.Match) -> str:
        try:
            return code_span(quoted_line(m, lang))
        except QuoteError as e:
            raise QuoteError(f"{where}: {e}", e.pending) from None

    return QUOTE.sub(quote, text)


def _norm(text: str) -> str:
    return " ".join(text.split())


def quotes_output(span: str, lines: list[str]) -> bool:
    """Whether a code span of the English text quotes these output lines: each of its pieces
    (cut at an ellipsis) is in them, spacing aside."""
    body = _norm(span.strip("`"))
    pieces = [p.strip() for p in re.split(r"…|\.\.\.", body) if p.strip()]
    text = _norm("\n".join(lines))
    return bool(pieces) and all(p in text for p in pieces)


def _within(numbers: list[str], has: list[str]) -> bool:
    """Whether every number of `numbers` is in `has`, as often."""
    return all(numbers.count(n) <= has.count(n) for n in set(numbers))


def quote_differences(english: str, translation: str, lang: str) -> list[str]:
    """What a section that quotes its edition's outputs must keep: each marker finds its line and
    stands for a quote, in the English section, of the same cell's English output; with those
    quotes and the markers set aside, the rest is held to section_differences."""
    found, rest_en = [], english
    for m in QUOTE.finditer(translation):
        try:
            line = _norm(quoted_line(m, lang))
        except QuoteError as e:
            found.append(str(e))
            continue
        number, cell_id = m.group(1), m.group(2)
        english_path = notebook_by_number(number)
        lines = output_lines(english_path).get(cell_id, []) if english_path else []
        here = output_lines(notebook_by_number(number, lang))[cell_id]
        if m.group(4) and len(lines) != len(here):
            found.append(
                f"{m.group(0)} names a line by its place, but cell {cell_id} prints "
                f"{len(lines)} lines in English and {len(here)} here: name a piece of its text"
            )
        has = _NUMBER.findall(line)
        # The English quote it stands for: one of the same cell's output whose numbers the quoted
        # line has, the one with the most numbers, then the longest.
        candidates = [
            s
            for s in _CODE.finditer(rest_en)
            if not s.group().startswith(("```", "~~~"))
            and quotes_output(s.group(), lines)
            and _within(_NUMBER.findall(s.group()), has)
        ]
        if not candidates:
            found.append(
                f"{m.group(0)} quotes {line[:60]!r}, but the English section quotes no output of "
                f"cell {cell_id} of notebook {number} with the same numbers that it could stand for"
            )
            continue
        pair = max(candidates, key=lambda s: (len(_NUMBER.findall(s.group())), len(s.group())))
        rest_en = rest_en[: pair.start()] + "\u2063" + rest_en[pair.end() :]
    rest_tr = QUOTE.sub("\u2063", translation)
    return found + section_differences(rest_en, rest_tr)


def document_problems(document: str, lang: str, maps) -> list[str]:
    tr_path = document_translation_path(document, lang)
    where = f"i18n/{lang}/{document}"
    if not tr_path.is_file():
        return [f"{where}: missing ({document} has no translation)"]
    found = []
    blocks = read_translation(tr_path)
    english = dict(sections((ROOT / document).read_text(encoding="utf-8")))
    for anchor_, text in english.items():
        block = blocks.get(anchor_)
        if block is None:
            found.append(f"{where}: section {anchor_} has no translation")
        elif block.en_hash != english_hash(text):
            found.append(
                f"{where}: section {anchor_} translates an older English text "
                f"(en {block.en_hash}; the English section is now {english_hash(text)})"
            )
        elif block.text == text:
            found.append(f"{where}: section {anchor_} is still the English text")
        else:
            differ = quote_differences(text, block.text, lang)
            if document in OWN_LINKS:
                differ = [d for d in differ if d.startswith("heading levels")]
            found += [f"{where}: section {anchor_}: {d}" for d in differ]
    for anchor_ in blocks.keys() - english.keys():
        found.append(f"{where}: section {anchor_} is not a section of {document}")
    built = document_edition(document, lang)
    try:
        expected = translated_document(document, lang, maps)
    except QuoteError:  # named above, with its section
        return found
    if not built.is_file() or built.read_text(encoding="utf-8") != expected:
        found.append(
            f"{built.name}: not what the translation builds (run python -m i18n.build build)"
        )
    return found


def build(lang: str = "zh", number: str | None = None) -> list[Path]:
    """Write every translated notebook that differs from what its files build (with `number`,
    only that notebook's); returns the paths written."""
    out_dir = NOTEBOOKS / lang
    out_dir.mkdir(exist_ok=True)
    maps = _anchor_maps(lang)
    written = []
    for path in english_notebooks():
        if number is not None and not path.name.startswith(f"{number}_"):
            continue
        if not (translation_path(path, lang)).is_file():
            continue
        target = out_dir / path.name
        text = dump(translated(path, lang, maps))
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
    for document in DOCUMENTS if number is None or f"{number}.md" in DOCUMENTS else ():
        if not document_translation_path(document, lang).is_file():
            continue
        target = document_edition(document, lang)
        try:
            text = translated_document(document, lang, maps)
        except QuoteError as e:
            if not e.pending:
                raise
            # The notebooks come first: an edition executed next fills the cell, and the next
            # build writes the document; `check` names it until then.
            print(f"{target.name} not rebuilt yet: {e}", file=sys.stderr)
            continue
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            written.append(target)
    return written


def _differences(cell: dict, block: Block) -> list[str]:
    """What a translation must keep from its English cell: the headings' levels (so that links to
    them can be pointed at the translated ones), every link's target, every formula."""
    en, tr = source(cell), block.text
    found = []

    def levels(text: str) -> list[int]:
        return [len(m.group(1)) for line in text.splitlines() if (m := _HEADING.match(line))]

    if levels(en) != levels(tr):
        found.append(f"heading levels {levels(tr)}, the English has {levels(en)}")
    links = sorted(url for _, url, _ in _LINK.findall(en))
    tr_links = sorted(url for _, url, _ in _LINK.findall(tr))
    if links != tr_links:
        found.append(
            f"links differ from the English (not kept: {sorted(set(links) - set(tr_links))}, "
            f"added: {sorted(set(tr_links) - set(links))})"
        )

    def maths(text: str) -> list[str]:  # formulas, except those with words in \text{...}
        return sorted(f for f in re.findall(r"\$\$?[^$]+\$\$?", text) if "\\text" not in f)

    if maths(en) != maths(tr):
        found.append(
            f"formulas differ from the English (not kept: {sorted(set(maths(en)) - set(maths(tr)))})"
        )
    return found


def problems(lang: str = "zh") -> list[str]:
    """Every way the `lang` edition is out of step with the English notebooks, one line each."""
    found = []
    maps = _anchor_maps(lang)
    for path in english_notebooks():
        tr_path = translation_path(path, lang)
        where = f"i18n/{lang}/{path.stem}.md"
        if not tr_path.is_file():
            found.append(f"{where}: missing (notebooks/{path.name} has no translation)")
            continue
        blocks = read_translation(tr_path)
        cells = {c.get("id"): c for c in load(path)["cells"] if c["cell_type"] == "markdown"}
        for cell_id, cell in cells.items():
            block = blocks.get(cell_id)
            if block is None:
                found.append(f"{where}: cell {cell_id} has no translation")
            elif block.text == source(cell) and len(re.findall(r"[A-Za-z]{2,}", block.text)) > 2:
                found.append(f"{where}: cell {cell_id} is still the English text")
            elif block.en_hash != english_hash(source(cell)):
                found.append(
                    f"{where}: cell {cell_id} translates an older English text "
                    f"(en {block.en_hash}; the English cell is now {english_hash(source(cell))})"
                )
            else:
                found += [f"{where}: cell {cell_id}: {p}" for p in _differences(cell, block)]
        for cell_id in blocks.keys() - cells.keys():
            found.append(f"{where}: cell {cell_id} is not a markdown cell of notebooks/{path.name}")
        found += comment_problems(path, lang)
        built = NOTEBOOKS / lang / path.name
        if not built.is_file() or built.read_text(encoding="utf-8") != dump(
            translated(path, lang, maps)
        ):
            found.append(
                f"notebooks/{lang}/{path.name}: not what the translation builds "
                "(run python -m i18n.build build)"
            )
        missing = unexecuted(path, lang)
        if missing:
            found.append(
                f"notebooks/{lang}/{path.name}: {len(missing)} code cells not executed in this "
                f"edition since their code changed ({', '.join(missing[:5])}"
                f"{', ...' if len(missing) > 5 else ''}; run make notebooks)"
            )
    for document in DOCUMENTS:
        found += document_problems(document, lang, maps)
    return found


def template(number: str, lang: str = "zh") -> Path:
    """Write (or complete) the translation file of notebook `number`: blocks already there are
    kept, in the English notebook's order; a new block holds the English text to translate.
    `number` may also name a document ("ERRATA")."""
    if f"{number}.md" in DOCUMENTS:
        tr_path = document_translation_path(f"{number}.md", lang)
        old = read_translation(tr_path) if tr_path.is_file() else {}
        english = sections((ROOT / f"{number}.md").read_text(encoding="utf-8"))
        blocks = [old.get(a) or Block(a, english_hash(t), t) for a, t in english]
        write_translation(tr_path, number, lang, blocks)
        return tr_path
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    tr_path = translation_path(path, lang)
    old = read_translation(tr_path) if tr_path.is_file() else {}
    blocks = []
    for cell in load(path)["cells"]:
        if cell["cell_type"] == "markdown":
            text = source(cell)
            blocks.append(old.get(cell["id"]) or Block(cell["id"], english_hash(text), text))
    write_translation(tr_path, path.stem, lang, blocks)
    template_comments(path, lang)  # and i18n/<lang>/comments/NN_topic.md
    return tr_path


def mark(number: str, cell_id: str, lang: str = "zh") -> Path:
    """Record that the block of `cell_id` now translates the English cell's current text: run it
    after updating a translation that `check` named. `number` may also name a document
    ("ERRATA") and `cell_id` one of its sections' anchors."""
    if f"{number}.md" in DOCUMENTS:
        tr_path = document_translation_path(f"{number}.md", lang)
        english = dict(sections((ROOT / f"{number}.md").read_text(encoding="utf-8")))
        blocks = read_translation(tr_path)
        if cell_id not in blocks or cell_id not in english:
            raise SystemExit(f"{tr_path.relative_to(ROOT)}: no block for a section {cell_id}")
        blocks[cell_id].en_hash = english_hash(english[cell_id])
        write_translation(tr_path, number, lang, list(blocks.values()))
        return tr_path
    (path,) = NOTEBOOKS.glob(f"{number}_*.ipynb")
    if any(c.get("id") == cell_id for c in load(path)["cells"] if c["cell_type"] == "code"):
        return mark_comments(path, cell_id, lang)  # a code cell: its comments' block
    cells = {c.get("id"): c for c in load(path)["cells"] if c["cell_type"] == "markdown"}
    tr_path = translation_path(path, lang)
    blocks = read_translation(tr_path)
    if cell_id not in blocks or cell_id not in cells:
        raise SystemExit(f"{tr_path.relative_to(ROOT)}: no block for a markdown cell {cell_id}")
    blocks[cell_id].en_hash = english_hash(source(cells[cell_id]))
    write_translation(tr_path, path.stem, lang, list(blocks.values()))
    return tr_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m i18n.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", choices=["build", "check", "template", "mark"])
    parser.add_argument(
        "number",
        nargs="?",
        help="build (only that one), template, mark: a notebook's number, e.g. 05",
    )
    parser.add_argument("cell", nargs="?", help="mark: the id of the cell whose block is updated")
    parser.add_argument("--lang", default="zh", choices=sorted(LANGS))
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            written = build(args.lang, args.number)
        except QuoteError as e:
            print(f"not built: {e}", file=sys.stderr)
            return 1
        for path in written:
            print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.command == "mark":
        if not (args.number and args.cell):
            parser.error("mark needs a notebook number and a cell id, e.g. mark 05 r-saw")
        print(f"wrote {mark(args.number, args.cell, args.lang).relative_to(ROOT)}")
        return 0
    if args.command == "template":
        if not args.number:
            parser.error("template needs a notebook number, e.g. 05")
        print(f"wrote {template(args.number, args.lang).relative_to(ROOT)}")
        return 0
    found = problems(args.lang)
    print("\n".join(found) if found else f"the {args.lang} edition is in step with the English")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
