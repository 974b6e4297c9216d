"""Every default that `--help` shows is the one the code uses: the parser's own default, the
command line's TRAIN_DEFAULTS, or what each preset sets."""

import re

import pytest

from gptlib.commandline.cli import TRAIN_DEFAULTS, build_parser
from gptlib.config import PRESETS


def _subparsers():
    parser = build_parser()
    [sub] = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sub.choices


def _shown_default(action) -> str | None:
    found = re.search(r"\(default: ([^)]*)\)", " ".join((action.help or "").split()))
    return found.group(1) if found else None


CASES = [
    (command, action)
    for command, parser in _subparsers().items()
    for action in parser._actions
    if action.option_strings
    and action.dest not in ("help", "lang")  # lang: the locale's, at
    and _shown_default(action) is not None  # run time (tests/test_language.py)
]


@pytest.mark.parametrize("command, action", CASES, ids=[f"{c}-{a.dest}" for c, a in CASES])
def test_every_shown_default_is_the_codes(command, action):
    shown = _shown_default(action)
    if isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
        number = re.match(r"[-+0-9.e]+", shown)
        assert number and float(number.group()) == action.default, (action.dest, shown)
    elif action.default is not None and not isinstance(action.default, bool):
        assert shown.startswith(str(action.default)), (action.dest, shown, action.default)
    elif command == "train" and action.dest in TRAIN_DEFAULTS:
        assert shown.startswith(str(TRAIN_DEFAULTS[action.dest])), (action.dest, shown)
    elif shown.startswith("the preset's;"):
        values = {name: getattr(make(), action.dest) for name, make in PRESETS.items()}
        if len(set(values.values())) == 1:
            assert f"every preset {next(iter(values.values()))}" in shown
        else:
            for name, value in values.items():
                assert f"{name} {value}" in shown, (action.dest, shown)


def test_the_attention_default_is_not_said_to_be_manual():
    train = _subparsers()["train"]
    [attention] = [a for a in train._actions if a.dest == "attention"]
    assert "manual)" not in _shown_default(attention) + ")"
    assert all(make().attention in _shown_default(attention) for make in PRESETS.values())
