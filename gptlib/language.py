"""The language gptlib speaks to a reader: English, the source, or Chinese, from one catalogue.

A sentence gptlib shows is written in English in the code, inside `_("...")`, and looked up in a
catalogue of translations: gettext's `.po` format (`gptlib/locale/zh_CN/LC_MESSAGES/gptlib.po`),
kept with Babel. A sentence with no translation is shown in English. Sentences with values in
them are templates filled after the lookup, `_("{n} steps").format(n=n)`, so that the
translation may put the values where its own grammar wants them. A sentence kept in a table at
import time is marked `N_("...")` there and translated with `_` where it is shown.

Which language: `set_language("zh")` (a Chinese notebook says so in its first cell); the command
line takes `--lang zh` or, without it, the locale, read as gettext reads it (`$LANGUAGE`,
`$LC_ALL`, `$LC_MESSAGES`, `$LANG`: `LANG=zh_CN.UTF-8` is Chinese). The library alone starts in
English whatever the locale, so the English notebooks stay English on a Chinese system.
The command line's parser is a `SpeakingArgumentParser`: argparse's own sentences (its usage, its
errors) are in the catalogue too (`ARGPARSE_SENTENCES`), so `--lang zh` leaves no English of
argparse's, and a line of Chinese help that ends in a colon ends in the full-width one.

What a notebook itself prints or draws goes through `tr("...", name=value)`, the same lookup
followed by the filling in of the values: the notebooks' code is the same in both editions and
the Chinese edition prints Chinese. Those sentences are kept one catalogue per notebook
(`gptlib/locale/zh_CN/LC_MESSAGES/notebooks/NN_topic.po`), beside gptlib's own.

After changing an English sentence: `python -m gptlib.language update` adds the new sentences to
the catalogues (empty) and marks the changed ones fuzzy; `tests/test_language.py` fails until each
has its Chinese again.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gettext
import io
import os
import re
import string
import sys
import unicodedata
from collections.abc import Mapping
from functools import cache
from pathlib import Path

__all__ = [
    "ARGPARSE_SENTENCES",
    "LANGUAGES",
    "N_",
    "SpeakingArgumentParser",
    "SpeakingHelpFormatter",
    "_",
    "gloss",
    "get_language",
    "language_from_locale",
    "screen_width",
    "said",
    "set_language",
    "shown",
    "tr",
]

DOMAIN = "gptlib"
LOCALE = Path(__file__).parent / "locale"
# The course's notebooks, whose own sentences (`tr("...")`) have a catalogue each.
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
# The languages gptlib speaks, by the code a reader passes: the catalogue's locale (None: English).
LANGUAGES: Mapping[str, str | None] = {"en": None, "zh": "zh_CN"}
_language = "en"
HEADER = """\
# What gptlib says to a reader, in Chinese. The English sentence (msgid) is the source, written in
# gptlib's code; `python -m gptlib.language update` brings this file in step with it, and
# tests/test_language.py fails while a sentence has no Chinese or a fuzzy one."""
NOTEBOOK_HEADER = """\
# What notebook {notebook} itself prints and draws, in Chinese: each `tr("...")` of its code cells.
# `python -m gptlib.language update` brings this file in step with the notebook, and
# tests/test_language.py fails while a sentence has no Chinese or a fuzzy one."""


def _code(name: str) -> str | None:
    """The language a code names ("zh", "zh_CN", "zh-CN", "zh_CN.UTF-8" -> "zh"), or None."""
    base = name.split(".")[0].split("@")[0].replace("-", "_").lower()
    for code, locale in LANGUAGES.items():
        if base == code or (locale and base == locale.lower()) or base.startswith(code + "_"):
            return code
    return None


def set_language(name: str) -> None:
    """Speak `name` from now on: "en" or "zh" (also "zh_CN", "zh-CN").

    Not taught in a notebook: the Chinese edition's first cell calls it."""
    global _language
    code = _code(name)
    if code is None:
        raise ValueError(
            f"language {name!r} is not one gptlib speaks; choose one of {', '.join(LANGUAGES)}"
        )
    _language = code


def get_language() -> str:
    """The code of the language in use: "en" or "zh".

    Not taught in a notebook: what set_language chose."""
    return _language


def language_from_locale(environ: Mapping[str, str] = os.environ) -> str:
    """The language the locale asks for, read in gettext's order; English when it names none
    gptlib speaks (C, POSIX, en_US.UTF-8, fr_FR.UTF-8).

    Used by the command line; no notebook teaches it."""
    for variable in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = environ.get(variable)
        if value:
            for name in value.split(":"):  # $LANGUAGE may list several: zh_CN:en
                code = _code(name)
                if code is not None:
                    return code
            return "en"
    return "en"


def catalogue_path(code: str, locale: Path = LOCALE) -> Path:
    """Where the catalogue of `code` is kept under `locale`.

    Not taught in a notebook: where the translations of gptlib's messages live."""
    return locale / str(LANGUAGES[code]) / "LC_MESSAGES" / f"{DOMAIN}.po"


def notebook_catalogue_path(code: str, notebook: str, locale: Path = LOCALE) -> Path:
    """Where the catalogue of what notebook `notebook` ("03_scaled_attention") itself says is kept.

    Not taught in a notebook: where the translations of the notebooks' own sentences live."""
    return locale / str(LANGUAGES[code]) / "LC_MESSAGES" / "notebooks" / f"{notebook}.po"


def _compiled(path: Path) -> gettext.GNUTranslations:
    """The `.po` at `path` as gettext's translations, compiled in memory (fuzzy entries, whose
    English changed since they were translated, are left out)."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    with path.open("rb") as f:
        catalogue = read_po(f)
    compiled = io.BytesIO()
    write_mo(compiled, catalogue)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


@cache
def _translations(code: str) -> gettext.NullTranslations:
    """The catalogues of `code` as one gettext translations: gptlib's, then each notebook's."""
    if LANGUAGES[code] is None:
        return gettext.NullTranslations()
    path = catalogue_path(code)
    if not path.is_file():
        print(f"gptlib: no catalogue {path}: showing English", file=sys.stderr)
        return gettext.NullTranslations()
    translations = _compiled(path)
    for notebook in sorted(notebook_catalogue_path(code, "x").parent.glob("*.po")):
        translations.add_fallback(_compiled(notebook))
    return translations


def _(message: str) -> str:
    """`message` in the language in use (itself when it has no translation; "" stays "", where
    gettext would answer with the catalogue's header)."""
    return _translations(_language).gettext(message) if message else message


def N_(message: str) -> str:
    """`message` as it is, marked for the catalogue: a sentence kept in a table when the module
    is imported, and translated with `_` where it is shown (gettext's "noop" convention).

    Not taught in a notebook: how the exercises' tables of slips are translated."""
    return message


# A yes-or-no answer as the reader's language writes it: True/False in English, 是/否 in Chinese.
ANSWERS = {True: N_("True"), False: N_("False")}
BOOL_NAMES = ("bool", "bool_")  # NumPy's bool type: numpy.bool (2.x), numpy.bool_ (1.x)


def _is_answer(value: object) -> bool:
    """Whether `value` is a yes-or-no answer: a Python bool or a NumPy one (a tensor is not: its
    repr, `tensor(True)`, is PyTorch's and stays)."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in BOOL_NAMES)


def _are_answers(value: object) -> bool:
    """Whether `value` is a yes-or-no answer or a (non-empty) list or tuple of them."""
    return _is_answer(value) or (
        isinstance(value, (list, tuple)) and bool(value) and all(_is_answer(v) for v in value)
    )


def shown(value: object) -> str:
    """`value` as a reader reads it in the language in use: a bool (or a list or tuple of bools)
    as the language answers yes or no (`True`, `[True, False]` in English; `是`, `[是, 否]` in
    Chinese), anything else as `str` shows it.

    Not taught in a notebook: how `tr` and a table show a yes-or-no answer."""
    if _is_answer(value):
        return _(ANSWERS[bool(value)])
    if _are_answers(value):
        inner = ", ".join(shown(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    return str(value)


def _answered(value: object) -> object:
    """`value` ready for a template: a yes-or-no answer (or a list of them, or a one-element bool
    tensor, which a template writes as its value) as `shown` writes it, anything else as it is."""
    if str(getattr(value, "dtype", "")) == "torch.bool" and value.dim() == 0:
        return shown(bool(value))
    return shown(value) if _are_answers(value) else value


def tr(message: str, /, **values: object) -> str:
    """What a notebook prints or draws, in the language in use, with `values` filled in:
    `tr("{n} steps, loss {loss:.3f}", n=n, loss=loss)`. English in the English edition, Chinese in
    the Chinese one, from the same line of code. A bool value answers in the language too
    (`True`/`False` in English, 是/否 in Chinese; see `shown`), unless the template writes it as
    code: `use_cache={cache}` or `{cache!s}` stays `use_cache=True` (a Chinese name, `共享权重={tied}`,
    answers).

    Taught in notebook 00 (data and tokens)."""
    text = _(message)
    if not values:
        return text
    coded = _written_as_code(text)
    return text.format(
        **{name: value if name in coded else _answered(value) for name, value in values.items()}
    )


def _written_as_code(template: str) -> set[str]:
    """The fields of `template` that write their value as code, which stays as Python writes it in
    any language: a keyword argument (`use_cache={cache}`) or an explicit `!s`/`!r`/`!a`."""
    coded = set()
    for literal, field, _spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        keyword = re.search(r"[A-Za-z0-9_]=$", literal)  # not ==, <=, nor a Chinese name=
        if conversion or keyword:
            coded.add(field.split(".")[0].split("[")[0])
    return coded


# What a PyTorch (or Python) error that a notebook shows as evidence means, one line in the
# reader's language: the error's own text (a pattern whose groups fill the sentence) -> the sentence.
GLOSSES: list[tuple[str, str]] = [
    (
        r"mat1 and mat2 shapes cannot be multiplied \((?P<a>\d+x\d+) and (?P<b>\d+x\d+)\)",
        N_(
            "the matrix product needs the first matrix's columns to equal the second's rows: "
            "here {a} times {b}"
        ),
    ),
    (
        r"Expected floating point type for target with class probabilities, got (?P<got>\w+)",
        N_(
            "a target of the logits' own shape is read as probabilities over the classes, which "
            "must be floats; these are integers ({got})"
        ),
    ),
    (
        r"Expected target size (?P<want>\[[^\]]*\]), got (?P<got>\[[^\]]*\])",
        N_(
            "cross_entropy takes dimension 1 of the logits as the classes, so it wants targets "
            "of shape {want} and got {got}"
        ),
    ),
    (
        r"Trying to backward through the graph a second time",
        N_(
            "the first backward pass freed what the forward pass had stored: a second one needs "
            "a new forward pass"
        ),
    ),
    (
        r"optimizer contains a parameter group with duplicate parameters",
        N_("the optimizer's group lists the same parameter twice"),
    ),
    (
        r"some parameters appear in more than one parameter group",
        N_("the same parameter is in two of the optimizer's groups"),
    ),
    (
        r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) "
        r"at non-singleton dimension (?P<dim>\d+)",
        N_(
            "the two tensors cannot be added element by element: their dimension {dim} is {a} "
            "in one and {b} in the other, and neither is 1 to be broadcast"
        ),
    ),
    (
        r"size mismatch for (?P<name>[\w.]+): copying a param with shape "
        r"torch\.Size\((?P<saved>\[[^\]]*\])\) from checkpoint, the shape in current model is "
        r"torch\.Size\((?P<model>\[[^\]]*\])\)",
        N_(
            "the saved {name} has shape {saved} and the model's {model}: a tensor loads only "
            "into one of its own shape"
        ),
    ),
    (
        r"index out of range in self",
        N_("an index is past the end of the table: it has fewer rows than the index asks for"),
    ),
]


def gloss(error: BaseException | str) -> str:
    """One line saying, in the language in use, what a PyTorch (or Python) error shown as evidence
    means: a notebook prints it above the error as PyTorch wrote it (`RuntimeError: mat1 and mat2
    shapes cannot be multiplied ...`), which stays as it is, since it is what a reader meets in
    their own code. `error` is the exception, a warning, or its message.

    Not taught in a notebook: how the notebooks explain the errors they show."""
    message = str(error)
    for pattern, sentence in GLOSSES:
        found = re.search(pattern, message)
        if found:
            return _("in short: {meaning}").format(meaning=_(sentence).format(**found.groupdict()))
    raise ValueError(
        f"no gloss for the message {message!r}: add a pattern and its sentence to "
        "gptlib.language.GLOSSES (then python -m gptlib.language update)"
    )


class Said(str):
    """A sentence that is its English text to the code (equal to it, found by it, sorted by it)
    and says itself in the language in use when shown: `str(s)`, a table's cell, a print.

    Not taught in a notebook: what `said` returns."""

    template: str
    values: dict

    def __new__(cls, template: str, /, **values: object) -> Said:
        said_ = super().__new__(cls, template.format(**values) if values else template)
        said_.template, said_.values = template, values
        return said_

    def __str__(self) -> str:
        return tr(self.template, **self.values)

    def __format__(self, spec: str) -> str:  # inside another sentence: said too
        return format(str(self), spec)


def said(template: str, /, **values: object) -> Said:
    """`template` with `values`, kept English for the code and translated when shown: the steps
    and rows of a shape table, which a notebook selects by their English names.

    Not taught in a notebook: how a shape table's rows are shown in Chinese."""
    return Said(template, **values)


# What argparse itself says to a reader, word for word as Python's argparse writes it (its own
# `_()`: the frame of an error, the errors of parsing, the headings and -h), so that the
# catalogue translates it; `SpeakingArgumentParser` asks the catalogue for these while it parses
# or shows help in Chinese. What argparse says only to a programmer (a conflicting option, a
# bad `add_argument`) stays its English. tests/test_cli_language.py compares this list with the
# argparse that runs, so a Python whose argparse words a message differently is noticed.
ARGPARSE_SENTENCES = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("%(prog)s: error: %(message)s\n"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("expected %s argument"),
    N_("expected %s arguments"),
    N_("unrecognized arguments: %s"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("unexpected option string: %s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
    N_("can't open '%(filename)s': %(error)s"),
)


def _argparse_gettext(message: str) -> str:
    """argparse's `_`: its sentence from gptlib's catalogue, or what gettext would say."""
    return _(message) if message in ARGPARSE_SENTENCES else gettext.gettext(message)


def _argparse_ngettext(singular: str, plural: str, n: int) -> str:
    """argparse's `ngettext`: one form per number, looked up as `_argparse_gettext` does."""
    return _argparse_gettext(singular if n == 1 else plural)


@contextlib.contextmanager
def _argparse_speaking():
    """Inside: argparse's own words come from the catalogue, when the language in use is not
    English (in English argparse is left exactly as it is). Nested uses are harmless."""
    if _language == "en":
        yield
        return
    before = argparse._, argparse.ngettext
    argparse._, argparse.ngettext = _argparse_gettext, _argparse_ngettext
    try:
        yield
    finally:
        argparse._, argparse.ngettext = before


class SpeakingHelpFormatter(argparse.HelpFormatter):
    """argparse's help in the language in use: its words from the catalogue, and a heading or
    line of Chinese that ends in a colon ends in the full-width one (选项：, not 选项:).

    Not taught in a notebook: how the command line's help reads in Chinese."""

    def format_help(self) -> str:
        with _argparse_speaking():
            text = super().format_help()
        return re.sub(r"(?m)(?<=[^\x00-\x7f]):$", "\uff1a", text)


class SpeakingArgumentParser(argparse.ArgumentParser):
    """argparse speaking the language in use: while it parses (its errors) and while it shows
    its usage and help, argparse's own sentences come from the catalogue (ARGPARSE_SENTENCES).

    Not taught in a notebook: the command line's parser (gptlib.commandline.cli) is one."""

    def parse_args(self, args=None, namespace=None):
        with _argparse_speaking():  # its "unrecognized arguments" is said here
            return super().parse_args(args, namespace)

    def parse_known_args(self, args=None, namespace=None):
        with _argparse_speaking():
            return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        with _argparse_speaking():
            return super().format_usage()

    def format_help(self) -> str:
        with _argparse_speaking():
            return super().format_help()


def sentences() -> dict[str, list[str]]:
    """Every `_("...")`, `N_("...")` and `said("...")` of gptlib's source, and every comment of
    the reference solutions: the English sentence -> where it stands.

    Not taught in a notebook: what the catalogue must translate."""
    from babel.messages.extract import extract_from_dir

    found: dict[str, list[str]] = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
        Path(__file__).parent,
        method_map=[("**.py", "python")],
        keywords={"_": None, "N_": None, "said": None},
    ):
        found.setdefault(message, []).append(f"gptlib/{filename}:{lineno}")
    for message, where in _solution_comments(Path(__file__).parent / "exercises").items():
        found.setdefault(message, []).extend(where)
    return found


def comment_sentence(token) -> str | None:
    """The sentence a tokenize token holds when it is a comment of words, without its "# "; None
    for code, a shape such as "# [n, n]" or a linter's directive.

    Not taught in a notebook: which comments of a reference solution are translated."""
    import re
    import tokenize

    if token.type != tokenize.COMMENT:
        return None
    text = token.string[1:].strip()
    if not re.search(r"[A-Za-z]{3,}", text) or text.startswith(("noqa", "fmt:", "type:")):
        return None
    return text


def _solution_comments(folder: Path) -> dict[str, list[str]]:
    """The comment sentences of the reference solutions `show_solution` prints, read from the
    source without importing it: in each module of `folder`, the functions a `@solved_by(f)`
    names and the module's functions they call, in turn (what `show_solution` prints).
    gptlib.exercises.checking.solution_comments finds the same from the imported functions
    (a test compares them)."""
    import ast
    import tokenize

    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        todo = [
            d.args[0].id
            for fn in functions.values()
            for d in fn.decorator_list
            if isinstance(d, ast.Call)
            and getattr(d.func, "id", None) == "solved_by"
            and isinstance(d.args[0], ast.Name)
        ]
        shown: set[str] = set()
        while todo:
            name = todo.pop()
            if name in shown or name not in functions:
                continue
            shown.add(name)
            todo += [n.id for n in ast.walk(functions[name]) if isinstance(n, ast.Name)]
        spans = [(functions[n].lineno, functions[n].end_lineno, n) for n in sorted(shown)]
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            text = comment_sentence(token)
            if text is None:
                continue
            for first, last, name in spans:
                if first <= token.start[0] <= last:
                    found.setdefault(text, []).append(f"gptlib.exercises.{path.stem}.{name}")
    return found


def screen_width(text: str) -> int:
    """The columns `text` takes on a screen in a monospace font: a Chinese character takes two
    (what aligns a table or wraps a line of either language).

    Not taught in a notebook: how the tables and the command line's help line up in Chinese."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def notebook_sentences(notebooks: Path = NOTEBOOKS) -> dict[str, dict[str, list[str]]]:
    """Every `tr("...")` of each notebook's code cells: notebook -> English sentence -> cells.

    Not taught in a notebook: what each notebook's catalogue must translate."""
    import json

    from babel.messages.extract import extract

    found: dict[str, dict[str, list[str]]] = {}
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        sentences = found.setdefault(path.stem, {})
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            code = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if "tr(" not in code:
                continue
            for _line, message, _comments, _context in extract(
                "python", io.BytesIO(code.encode("utf-8")), keywords={"tr": None}
            ):
                sentences.setdefault(message, []).append(f"{path.name} cell {cell.get('id')}")
    return found


def _write_catalogue(path: Path, name: str, messages, header: str = HEADER) -> list[str]:
    """Bring the catalogue at `path` (locale `name`) in step with `messages`; the sentences left
    to translate."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    fixed = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)  # no churn per update
    template = Catalog(project=DOMAIN, version="0.1", creation_date=fixed)
    for message in messages:
        template.add(message)
    if path.is_file():
        with path.open("rb") as f:
            catalogue = read_po(f, locale=name)
    else:
        catalogue = Catalog(locale=name, project=DOMAIN, version="0.1")
    catalogue.update(template, no_fuzzy_matching=False)
    catalogue.obsolete.clear()
    catalogue.revision_date, catalogue.fuzzy = fixed, False
    catalogue.last_translator = catalogue.language_team = "gptlib"
    catalogue.header_comment = header
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        write_po(f, catalogue, width=100, no_location=True, include_previous=True)
    os.replace(tmp, path)
    missing = [m.id for m in catalogue if m.id and (not m.string or m.fuzzy)]
    print(f"{path}: {len([m for m in catalogue if m.id])} sentences, {len(missing)} to translate")
    return missing


def update(
    locale: Path = LOCALE, notebooks: Path = NOTEBOOKS, only: str | None = None
) -> list[str]:
    """Extract every `_("...")` of gptlib and every `tr("...")` of the notebooks into the
    catalogues under `locale`: new sentences added with an empty translation, changed ones kept
    as fuzzy suggestions, vanished ones dropped. Returns the sentences left to translate.

    `only` ("03_scaled_attention") brings that notebook's catalogue alone in step.

    Not taught in a notebook: `python -m gptlib.language update [NN_topic]` after an edit."""
    left = []
    by_notebook = notebook_sentences(notebooks) if notebooks.is_dir() else {}
    for code, name in LANGUAGES.items():
        if name is None:
            continue
        if only is None:
            left += _write_catalogue(catalogue_path(code, locale), name, sentences())
        for notebook, messages in by_notebook.items():
            if only is not None and notebook != only:
                continue
            path = notebook_catalogue_path(code, notebook, locale)
            if messages or path.is_file():
                left += _write_catalogue(
                    path, name, messages, NOTEBOOK_HEADER.format(notebook=notebook)
                )
    _translations.cache_clear()
    return left


if __name__ == "__main__":
    if sys.argv[1:2] != ["update"] or len(sys.argv) > 3:
        sys.exit("usage: python -m gptlib.language update [NN_topic]")
    update(only=sys.argv[2] if len(sys.argv) == 3 else None)
