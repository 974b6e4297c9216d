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

After changing an English sentence: `python -m gptlib.language update` adds the new sentences to
the catalogue (empty) and marks the changed ones fuzzy; `tests/test_language.py` fails until each
has its Chinese again.
"""

from __future__ import annotations

import datetime
import gettext
import io
import os
import sys
import unicodedata
from collections.abc import Mapping
from functools import cache
from pathlib import Path

__all__ = [
    "LANGUAGES",
    "N_",
    "_",
    "get_language",
    "language_from_locale",
    "screen_width",
    "set_language",
]

DOMAIN = "gptlib"
LOCALE = Path(__file__).parent / "locale"
# The languages gptlib speaks, by the code a reader passes: the catalogue's locale (None: English).
LANGUAGES: Mapping[str, str | None] = {"en": None, "zh": "zh_CN"}
_language = "en"
HEADER = """\
# What gptlib says to a reader, in Chinese. The English sentence (msgid) is the source, written in
# gptlib's code; `python -m gptlib.language update` brings this file in step with it, and
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


@cache
def _translations(code: str) -> gettext.NullTranslations:
    """The catalogue of `code` as gettext's translations, compiled from its `.po` in memory
    (fuzzy entries, whose English changed since they were translated, are left out)."""
    if LANGUAGES[code] is None:
        return gettext.NullTranslations()
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    path = catalogue_path(code)
    if not path.is_file():
        print(f"gptlib: no catalogue {path}: showing English", file=sys.stderr)
        return gettext.NullTranslations()
    with path.open("rb") as f:
        catalogue = read_po(f)
    compiled = io.BytesIO()
    write_mo(compiled, catalogue)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def _(message: str) -> str:
    """`message` in the language in use (itself when it has no translation; "" stays "", where
    gettext would answer with the catalogue's header)."""
    return _translations(_language).gettext(message) if message else message


def N_(message: str) -> str:
    """`message` as it is, marked for the catalogue: a sentence kept in a table when the module
    is imported, and translated with `_` where it is shown (gettext's "noop" convention).

    Not taught in a notebook: how the exercises' tables of slips are translated."""
    return message


def sentences() -> dict[str, list[str]]:
    """Every `_("...")` of gptlib's source: the English sentence -> where it stands.

    Not taught in a notebook: what the catalogue must translate."""
    from babel.messages.extract import extract_from_dir

    found: dict[str, list[str]] = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
        Path(__file__).parent, method_map=[("**.py", "python")], keywords={"_": None, "N_": None}
    ):
        found.setdefault(message, []).append(f"gptlib/{filename}:{lineno}")
    return found


def screen_width(text: str) -> int:
    """The columns `text` takes on a screen in a monospace font: a Chinese character takes two
    (what aligns a table or wraps a line of either language).

    Not taught in a notebook: how the tables and the command line's help line up in Chinese."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def update(locale: Path = LOCALE) -> list[str]:
    """Extract every `_("...")` of gptlib into the catalogues under `locale`: new sentences added
    with an empty translation, changed ones kept as fuzzy suggestions, vanished ones dropped.
    Returns the sentences left to translate.

    Not taught in a notebook: run as `python -m gptlib.language update` after an English edit."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    fixed = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)  # no churn per update
    template = Catalog(project=DOMAIN, version="0.1", creation_date=fixed)
    for message in sentences():
        template.add(message)
    left = []
    for code, name in LANGUAGES.items():
        if name is None:
            continue
        path = catalogue_path(code, locale)
        if path.is_file():
            with path.open("rb") as f:
                catalogue = read_po(f, locale=name)
        else:
            catalogue = Catalog(locale=name, project=DOMAIN, version="0.1")
        catalogue.update(template, no_fuzzy_matching=False)
        catalogue.obsolete.clear()
        catalogue.revision_date, catalogue.fuzzy = fixed, False
        catalogue.last_translator = catalogue.language_team = "gptlib"
        catalogue.header_comment = HEADER
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as f:
            write_po(f, catalogue, width=100, no_location=True, include_previous=True)
        os.replace(tmp, path)
        missing = [m.id for m in catalogue if m.id and (not m.string or m.fuzzy)]
        print(
            f"{path}: {len([m for m in catalogue if m.id])} sentences, {len(missing)} to translate"
        )
        left += missing
    _translations.cache_clear()
    return left


if __name__ == "__main__":
    if sys.argv[1:] != ["update"]:
        sys.exit("usage: python -m gptlib.language update")
    update()
