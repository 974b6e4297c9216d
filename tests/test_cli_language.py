"""The command line wholly in Chinese under `--lang zh` (or a Chinese locale): argparse's own
sentences (its usage, its errors, its headings) come from gptlib's catalogue, a Chinese line that
ends in a colon ends in the full-width one, and every option has its help; in English argparse is
left exactly as it was."""

from __future__ import annotations

import argparse
import ast
import re

import pytest

from gptlib import language
from gptlib.commandline.cli import build_parser, main
from gptlib.language import ARGPARSE_SENTENCES, _, set_language

LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
HAN = re.compile(r"[\u4e00-\u9fff]")

# What argparse says only to whoever writes a parser, never to a reader of gptlib's command line
# (gptlib's parser is built without these mistakes): left in argparse's English.
PROGRAMMER_ONLY = {
    ".__call__() not defined",
    "conflicting subparser: %s",
    "conflicting subparser alias: %s",
    'argument "-" with mode %r',
    "cannot merge actions - two groups are named %r",
    "'required' is an invalid argument for positionals",
    "invalid option string %(option)r: must start with a character %(prefix_chars)r",
    "dest= is required for options like %r",
    "invalid conflict_resolution value: %r",
    "conflicting option string: %s",
    "conflicting option strings: %s",
    "mutually exclusive arguments must be optional",
    "cannot have multiple subparser arguments",
    "subcommands",  # gptlib names its own: "commands"
    "%r is not callable",
}

# The English the Chinese help keeps on purpose: the course's built-in corpora and their
# sources, file and format names, PyTorch's and the textbook's own terms, devices.
KEPT = set(
    """names surnames tang300 debian fortunes-zh hugging face config.json model.safetensors
    pytorch_model.bin runs/model.pt yourgpt/ notebooks/yourgpt/ pytorch torch.compile autocast
    small cpu cuda cuda:n mps token warmup loss logits batch mlp dropout""".split()
)


def _names(parser: argparse.ArgumentParser) -> set[str]:
    """Every name a parser shows as it is: option strings, metavars, dests, choices."""
    names = {parser.prog, *parser.prog.split()}
    for action in parser._actions:
        names |= set(action.option_strings) | {str(action.dest), str(action.metavar)}
        names |= {str(c) for c in action.choices or ()}
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names |= _names(sub)
    return names


def english_words(text: str) -> list[str]:
    """The English words of `text` that are neither a name of the command line (an option, a
    metavar, a value given or offered) nor a word the Chinese edition keeps in English."""
    names = {n.lower() for n in _names(build_parser())}
    text = re.sub(r"'[^']*'|\{[^}]*\}|\$\w+|(?<![\w-])--?[A-Za-z][\w-]*", " ", text)
    words = re.findall(r"[A-Za-z][\w.:/-]*[\w/]|[A-Za-z]", text)
    return [
        w
        for w in words
        if len(re.sub(r"[^A-Za-z]", "", w)) >= 3
        and w.lower() not in names
        and w.lower().rstrip(".") not in KEPT
        and not w.isupper()  # a metavar: STEPS, CHECKPOINT
    ]


# (the arguments, what the output must name: the culprit a reader typed or must add)
CASES = [
    (["--help"], "train"),
    (["train", "--help"], "--dropout"),
    (["sample", "--help"], "checkpoint"),
    (["progress", "--help"], "--timeout"),
    ([], "command"),  # no command: a required argument
    (["trian"], "'trian'"),  # an invalid choice of command
    (["train", "--steps"], "--steps"),  # an option without its value
    (["train", "--step", "10"], "--step 10"),  # unrecognized
    (["train", "--preset", "foo"], "'foo'"),  # invalid choice
    (["train", "--steps", "x"], "'x'"),  # a value of the wrong type (gptlib's own sentence)
    (["sample"], "checkpoint"),  # a required positional
    (["sample", "a", "b"], "b"),  # one positional too many
]


def _run(monkeypatch, capsys, argv: list[str], lang: str | None = None) -> str:
    for variable in LOCALE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    if lang:
        monkeypatch.setenv("LANG", lang)
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == (0 if "--help" in argv else 2)
    captured = capsys.readouterr()
    return captured.out + captured.err


def _check_chinese(out: str, culprit: str) -> None:
    assert out.startswith("用法："), out
    assert culprit in out, (culprit, out)
    assert not english_words(out), english_words(out)
    assert not re.search(r"(?m)[^\x00-\x7f]:$", out), "a Chinese line ends in an ASCII colon"
    if "--help" not in out.split("\n", 1)[1]:  # an error: its line is the reader's language
        [error] = [line for line in out.splitlines() if "：错误：" in line]
        assert HAN.search(error.split("：错误：", 1)[1]), error


@pytest.mark.parametrize("argv, culprit", CASES, ids=[" ".join(a) or "-" for a, _c in CASES])
def test_the_command_line_speaks_only_chinese_under_lang_zh(monkeypatch, capsys, argv, culprit):
    _check_chinese(_run(monkeypatch, capsys, ["--lang", "zh", *argv]), culprit)


@pytest.mark.parametrize("argv, culprit", CASES[4:8], ids=lambda v: str(v))
def test_and_under_a_chinese_locale(monkeypatch, capsys, argv, culprit):
    _check_chinese(_run(monkeypatch, capsys, argv, lang="zh_CN.UTF-8"), culprit)


def test_the_scan_finds_argparse_english_when_the_catalogue_is_not_asked(monkeypatch, capsys):
    """Without the catalogue's argparse sentences the same output fails the scan, naming the
    words argparse said: the test above can fail."""
    import gettext

    monkeypatch.setattr(language, "_argparse_gettext", gettext.gettext)
    out = _run(monkeypatch, capsys, ["--lang", "zh", "train", "--step", "10"])
    assert {"unrecognized", "arguments"} <= set(english_words(out)), out
    out = _run(monkeypatch, capsys, ["--lang", "zh", "train", "--preset", "foo"])
    assert {"argument", "invalid", "choice", "choose", "from"} <= set(english_words(out)), out


def test_english_is_argparse_s_own(monkeypatch, capsys):
    out = _run(monkeypatch, capsys, ["train", "--step", "10"])
    assert out.endswith("python -m gptlib: error: unrecognized arguments: --step 10\n"), out
    out = _run(monkeypatch, capsys, ["train", "--preset", "foo"])
    assert out.endswith(
        "error: argument --preset: invalid choice: 'foo' (choose from 'gpt2', 'microgpt', "
        "'textbook')\n"
    ), out
    out = _run(monkeypatch, capsys, ["train", "--help"], lang="C.UTF-8")
    assert "\noptions:\n" in out and not HAN.search(out.split("tang300")[0])
    # and Chinese never stays behind in argparse once the command line is done
    _run(monkeypatch, capsys, ["--lang", "zh", "sample"])
    assert argparse._ is __import__("gettext").gettext


def _argparse_reader_sentences() -> set[str]:
    """Every sentence Python's argparse (the one that runs) passes to its `_` or `ngettext`."""
    tree = ast.parse(open(argparse.__file__, encoding="utf-8").read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("_", "ngettext"):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.add(arg.value)
    return found


def test_every_sentence_argparse_says_to_a_reader_is_in_the_catalogue():
    said = _argparse_reader_sentences()
    assert len(said) > 20  # the reading of argparse's source found its sentences
    missing = said - set(ARGPARSE_SENTENCES) - PROGRAMMER_ONLY
    assert not missing, f"argparse says these and gptlib does not translate them: {missing}"
    assert not set(ARGPARSE_SENTENCES) - said, "gptlib translates what this argparse never says"


def test_each_argparse_translation_keeps_its_placeholders():
    try:
        set_language("zh")
        for english in ARGPARSE_SENTENCES:
            chinese = _(english)
            assert HAN.search(chinese), english
            fields = r"%\(\w+\)[sr]|%[sr]"
            assert sorted(re.findall(fields, chinese)) == sorted(re.findall(fields, english))
    finally:
        set_language("en")


def test_every_option_has_help():
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        for action in command._actions:
            help_ = re.sub(r"\((default|默认)[^)]*\)", "", action.help or "").strip()
            assert re.search(r"[A-Za-z]{3}", help_), f"{name} {action.dest} has no help"
