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

__all__ = ["progress"]


SOLVED, NOT_WRITTEN, FAILS = "solved", "not written yet", "fails"


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
        return f"{self.state}: {self.detail}" if self.detail else self.state


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
        return (NOT_WRITTEN, "") if why == "not solved yet" else (FAILS, why)
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
        return FAILS, f"took longer than {timeout:g} s; is there a loop that never ends?"
    except Exception as e:  # noqa: BLE001  (the check itself broke on the reader's output)
        return FAILS, f"the check raised {type(e).__name__}: {e}"
    finally:
        torch.set_default_dtype(dtype)
    if result:
        return SOLVED, ""
    lines = [line.strip() for line in str(result.message).splitlines() if line.strip()]
    first = re.sub(r"^✗ (\w+: )?", "", lines[0] if lines else "")  # the row names the exercise
    return FAILS, " ".join([first, *lines[1:]])


def _package(folder: str | os.PathLike | None) -> Path:
    """The reader's package: `folder` itself, or its `yourgpt/` (a notebooks folder given)."""
    if folder is None:
        return yours.folder()
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"no folder {path}: give the folder your pieces are kept in")
    return path / yours.PACKAGE if (path / yours.PACKAGE).is_dir() else path


def collect(folder: str | os.PathLike | None = None, timeout: float = 60.0) -> list[Row]:
    """Every exercise of the course with its state in the reader's package `folder`."""
    where = _package(folder)
    return [Row(e, *_verdict(e, where, timeout)) for e in EXERCISES]


def format_table(rows: list[Row]) -> str:
    """The rows as aligned text, with a closing line that counts them."""
    header = ("notebook", "exercise", "difficulty", "minutes", "state")
    body = [
        (
            r.exercise.notebook,
            r.name + (" (optional)" if r.exercise.optional else ""),
            "★" * r.exercise.stars,
            str(r.exercise.minutes),
            r.shown,
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(4)]
    lines = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(line[:4], widths, strict=True)), line[4]])
        for line in [header, *body]
    ]
    solved = [r for r in rows if r.state == SOLVED]
    left = sum(r.exercise.minutes for r in rows if r.state != SOLVED and not r.exercise.optional)
    lines.append(
        f"{len(solved)} of {len(rows)} exercises solved; the required ones left take about "
        f"{left} minutes"
    )
    return "\n".join(lines)


def progress(folder: str | os.PathLike | None = None, timeout: float = 60.0) -> None:
    """Print every exercise of the course with its state in the reader's package `folder`
    (default `notebooks/yourgpt/`), each kept function checked again."""
    where = _package(folder)
    rows = collect(where, timeout)
    print(f"Your pieces in {where.resolve()}\n")
    print(format_table(rows))
