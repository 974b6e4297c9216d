"""Where the reader stands with every exercise: `progress()` in a notebook, or
`python -m gptlib progress [FOLDER]` in a terminal.

One row per exercise: notebook, difficulty (★ to ★★★), minutes, and "not written yet",
"fails: <what the check says>" or "solved". It reads the reader's package (`yours`,
`notebooks/yourgpt/` by default) and runs each check again on what is kept there, so a piece that
stopped passing says so; a check that runs past `timeout` seconds fails.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from gptlib.exercises import yours
from gptlib.exercises.table import EXERCISES, Exercise
from gptlib.language import N_, _, screen_width

__all__ = ["progress"]


# The states, kept in English and shown in the language in use.
SOLVED, NOT_WRITTEN, FAILS = N_("solved"), N_("not written yet"), N_("fails")


@dataclass
class Row:
    exercise: Exercise
    state: str  # SOLVED, NOT_WRITTEN or FAILS
    detail: str = ""  # what the check said (FAILS)

    @property
    def name(self) -> str:
        return self.exercise.check.removeprefix("check_")

    @property
    def shown(self) -> str:
        if not self.detail:
            return _(self.state)
        return _("{state}: {detail}").format(state=_(self.state), detail=self.detail)


class _TookTooLong(BaseException):
    """The alarm in a check past its limit (a BaseException: `except Exception` lets it by)."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    main = threading.current_thread() is threading.main_thread()
    if not (seconds and main and hasattr(signal, "setitimer")):
        yield
        return

    def alarm(signum, frame):
        raise _TookTooLong

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _verdict(exercise: Exercise, where: Path, timeout: float | None) -> tuple[str, str]:
    import gptlib.exercises as ex

    fn, why = yours.load(exercise.check.removeprefix("check_"), where)
    if fn is None:
        return (NOT_WRITTEN, "") if why == _(yours.NOT_SOLVED) else (FAILS, why)
    dtype = torch.get_default_dtype()
    quiet = io.StringIO()
    try:
        with (
            torch.random.fork_rng(),
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
            yours.not_saving(),
            _time_limit(timeout),
        ):
            result = getattr(ex, exercise.check)(fn)
    except _TookTooLong:
        said = _("took longer than {timeout} s; is there a loop that never ends?")
        return FAILS, said.format(timeout=f"{timeout:g}")
    except Exception as e:  # noqa: BLE001  (the check itself broke on the reader's output)
        return FAILS, _("the check raised {kind}: {error}").format(kind=type(e).__name__, error=e)
    finally:
        torch.set_default_dtype(dtype)
    if result:
        return SOLVED, ""
    lines = [line.strip() for line in str(result.message).splitlines() if line.strip()]
    first = re.sub(r"^✗ (\w+[:：] ?)?", "", lines[0] if lines else "")  # the row names the exercise
    return FAILS, " ".join([first, *lines[1:]])


def _package(folder: str | os.PathLike | None) -> Path:
    """The reader's package: `folder` itself, or its `yourgpt/` (a notebooks folder given)."""
    if folder is None:
        return yours.folder()
    path = Path(folder)
    if not path.is_dir():
        said = _("no folder {path}: give the folder your pieces are kept in")
        raise FileNotFoundError(said.format(path=path))
    return path / yours.PACKAGE if (path / yours.PACKAGE).is_dir() else path


def collect(folder: str | os.PathLike | None = None, timeout: float = 60.0) -> list[Row]:
    """Every exercise of the course with its state in the reader's package `folder`."""
    where = _package(folder)
    return [Row(e, *_verdict(e, where, timeout)) for e in EXERCISES]


def format_table(rows: list[Row]) -> str:
    """The rows as aligned text, with a closing line that counts them."""
    header = (_("notebook"), _("exercise"), _("difficulty"), _("minutes"), _("state"))
    optional = _(" (optional)")
    body = [
        (
            r.exercise.notebook,
            r.name + (optional if r.exercise.optional else ""),
            "★" * r.exercise.stars,
            str(r.exercise.minutes),
            r.shown,
        )
        for r in rows
    ]
    widths = [max(screen_width(line[i]) for line in [header, *body]) for i in range(4)]
    pad = lambda cell, w: cell + " " * (w - screen_width(cell))  # noqa: E731  (ljust, by columns)
    lines = [
        "  ".join([*(pad(cell, w) for cell, w in zip(line[:4], widths, strict=True)), line[4]])
        for line in [header, *body]
    ]
    solved = [r for r in rows if r.state == SOLVED]
    left = sum(r.exercise.minutes for r in rows if r.state != SOLVED and not r.exercise.optional)
    said = _("{solved} of {total} exercises solved; the required ones left take about "
             "{left} minutes")  # fmt: skip
    lines.append(said.format(solved=len(solved), total=len(rows), left=left))
    return "\n".join(lines)


def progress(folder: str | os.PathLike | None = None, timeout: float = 60.0) -> None:
    """Print every exercise of the course with its state in the reader's package `folder`
    (default `notebooks/yourgpt/`), each kept function checked again."""
    if folder is None and not yours.folder().is_dir():  # a fresh copy of the course
        where = yours.folder()
        said = _("Nothing kept yet: each piece you write is kept in {path} once its notebook's "
                 "check passes")  # fmt: skip
        print(said.format(path=where) + "\n")
        print(format_table([Row(e, NOT_WRITTEN, "") for e in EXERCISES]))
        return
    where = _package(folder)
    rows = collect(where, timeout)
    print(_("Your pieces in {path}").format(path=where.resolve()) + "\n")
    print(format_table(rows))
