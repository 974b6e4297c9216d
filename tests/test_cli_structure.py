"""The command line's wing stays easy to follow: the parser's module is short, no function of the
wing takes a long row of positional arguments (a typed object or keywords instead), and a
training step sits a few frames below `main`, not behind a chain of hand-offs."""

import ast
import sys
from pathlib import Path

import pytest

import gptlib.commandline.cli
import gptlib.commandline.run

GPTLIB = Path(gptlib.commandline.cli.__file__).parent
# The modules of the command line: the parser and main, the train command's steps and its run,
# its typed settings, its signals, its checkpoint path, its checks, its reading of a large text,
# the sample command and the report at the end of a run.
# Every module of gptlib/commandline/ (a new one is covered without being named here).
WING = tuple(sorted(p.stem for p in GPTLIB.glob("*.py") if p.stem != "__init__"))
MAX_CLI_LINES = 500
MAX_POSITIONAL = 5
MAX_STEP_DEPTH = 6


def too_many_positional(source: str, most: int = MAX_POSITIONAL) -> list[str]:
    """Every function (methods and lambdas too) of `source` that takes more than `most`
    positional parameters, `self` counted: as 'name (line L, N positional)'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            n = len(node.args.posonlyargs) + len(node.args.args)
            if n > most:
                name = getattr(node, "name", "lambda")
                found.append(f"{name} (line {node.lineno}, {n} positional)")
    return found


def test_the_positional_count_finds_a_long_row():
    assert too_many_positional("def f(a, b, c, d, e, *, g, h): pass") == []
    assert too_many_positional("def f(a, b, c, d, e, g=1): pass") == ["f (line 1, 6 positional)"]
    method = "class C:\n    def m(self, a, b, c, d, e): pass\n"
    assert too_many_positional(method) == ["m (line 2, 6 positional)"]
    assert too_many_positional("g = lambda a, b, /, c, d, e, f: 0") == [
        "lambda (line 1, 6 positional)"
    ]


def test_the_wing_is_the_command_line_s_folder():
    assert GPTLIB.name == "commandline" and {"cli", "run", "settings", "distributed"} <= set(WING)


def test_the_parser_s_module_is_short():
    lines = len((GPTLIB / "cli.py").read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_CLI_LINES, (
        f"gptlib/commandline/cli.py has {lines} lines, more than {MAX_CLI_LINES}"
    )


def test_no_function_of_the_wing_takes_more_than_five_positional_parameters():
    found = [
        f"gptlib/commandline/{m}.py: {f}"
        for m in WING
        for f in too_many_positional((GPTLIB / f"{m}.py").read_text(encoding="utf-8"))
    ]
    assert not found, (
        f"more than {MAX_POSITIONAL} positional parameters: {'; '.join(found)}; pass a typed "
        "object (gptlib.commandline.settings, gptlib.commandline.run.TrainPlan) or make the rest keyword-only"
    )


class Reached(Exception):
    """Raised by the stand-in step, once it has counted its frames: the run ends there."""


def frames_below(frame, code) -> int | None:
    """How many frames `frame` sits below the nearest caller running `code` (None: none is)."""
    depth = 0
    while frame is not None:
        if frame.f_code is code:
            return depth
        frame, depth = frame.f_back, depth + 1
    return None


def test_a_training_step_sits_at_most_six_frames_below_main(tmp_path, monkeypatch):
    """The step `gptlib.train.train_step`, as the run calls it, replaced by one that counts the
    frames between it and `main`'s, then ends the run."""
    where = (
        gptlib.commandline.run.TrainingRun.train.__globals__
    )  # the module whose train_step the run calls
    assert "train_step" in where
    depths = []

    def counting_step(*args, **kwargs):
        depths.append(frames_below(sys._getframe(), gptlib.commandline.cli.main.__code__))
        raise Reached

    monkeypatch.setitem(where, "train_step", counting_step)
    argv = ["train", "--preset", "microgpt", "--steps", "2", "--batch-size", "2", "--samples",
            "0", "--no-progress", "--device", "cpu", "--out", str(tmp_path / "m.pt")]  # fmt: skip
    with pytest.raises(Reached):
        gptlib.commandline.cli.main(argv)
    assert depths and depths[0] is not None, depths  # the step ran, below main
    assert depths[0] <= MAX_STEP_DEPTH, f"a training step is {depths[0]} frames below main"


def test_the_frame_count_sees_a_deeper_chain():
    def inner():
        return frames_below(sys._getframe(), outer.__code__)

    def middle():
        return inner()

    def outer():
        return middle()

    assert outer() == 2 and frames_below(sys._getframe(), outer.__code__) is None
