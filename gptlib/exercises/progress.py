"""Where the reader stands with every exercise of the course.

    from gptlib.exercises import progress
    progress()                                  # in a notebook
    python -m gptlib progress [NOTEBOOK_DIR]    # in a terminal

One row per exercise: its notebook, its difficulty (★ to ★★★), an estimate of the minutes it
takes, and its state: "not written yet", "fails: <what the check says>" or "solved". The default
folder is the course's `notebooks/`.

How it finds out. It reads the notebook files as last saved and runs no cell as such: a notebook
trains models and draws plots, which would take minutes. For each notebook it builds a fresh
namespace holding `torch`, `F`, `nn`, `math` and whatever the exercise module imports (`GPT`,
`KVCache`, `sample_batch`, ...; never its reference solutions), then goes through the code cells
in order and runs only their definitions: `import` and `from` lines whose names a definition
uses, `def` and `class` statements, and assignments of plain literals (`EPS = 1e-5`). An
exercise's check runs right after the cell of its last `check_x(fn)` call, with the function of
that name as the namespace holds it there, so a later cell that rewrites the function counts,
and helpers defined above it (the capstone's pieces) are found as in the notebook. Calls on the
notebook's demonstrations of slips (`..._slip`, `..._first_try`, `..._wrong`, `..._mistake`)
are not the reader's answer and are skipped.

The checks run in one child process (one import of torch), each notebook in its own namespace,
each check with a time limit (`timeout`, 60 s by default) and with torch's random state and
default dtype put back afterwards. A check that runs past its limit counts as failed; if the
child process dies or hangs in native code, the exercise it was running is marked failed and a
new process takes the rest.

Limits. Only definitions run, so a function that reads a variable a notebook computes (a
`model`, a `tokenizer`) fails with a NameError here although it may pass in the notebook; a
definition whose decorator or default value needs such a variable is missing in the same way.
IPython magics and shell lines are skipped, and a cell that does not parse fails the checks it
calls. What a reader's function changes besides torch's random state and default dtype (a
module's attribute, say) can be seen by the checks after it in the same process. Unsaved edits
are not seen: save the notebook first.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = ["progress"]


class Exercise(NamedTuple):
    check: str  # the check's name in gptlib.exercises
    notebook: str  # the notebook's number: "03" is notebooks/03_*.ipynb
    stars: int  # 1 (a few lines) to 3 (a loop of many parts, or a subtle rule such as ties)
    minutes: int  # a first-time reader's estimate, reading the exercise's text included
    optional: bool = False  # marked optional (and harder) in its notebook


EXERCISES: tuple[Exercise, ...] = (
    Exercise("check_encode_stream", "00", 1, 10),
    Exercise("check_embed", "01", 1, 10),
    Exercise("check_qkv_split", "02", 1, 10),
    Exercise("check_causal_attention", "03", 2, 20),
    Exercise("check_split_heads", "04", 1, 10),
    Exercise("check_merge_heads", "04", 1, 5),
    Exercise("check_pre_norm_block", "06", 1, 10),
    Exercise("check_post_norm_block", "06", 1, 5),
    Exercise("check_rmsnorm_backward", "06", 3, 40, optional=True),
    Exercise("check_mlp", "07", 1, 10),
    Exercise("check_temperature_probs", "08", 1, 10),
    Exercise("check_log_softmax", "09", 2, 15),
    Exercise("check_lm_loss", "09", 2, 20),
    Exercise("check_train_loop", "10", 3, 30),
    Exercise("check_validation_loss", "11", 2, 15),
    Exercise("check_filter_logits", "12", 3, 30),
    Exercise("check_sample_step", "12", 3, 25, optional=True),
    Exercise("check_decode_step", "13", 3, 40),
    Exercise("check_gpt_embed", "14", 1, 5),
    Exercise("check_gpt_rmsnorm", "14", 1, 5),
    Exercise("check_gpt_attention", "14", 2, 20),
    Exercise("check_gpt_mlp", "14", 1, 5),
    Exercise("check_gpt_block", "14", 2, 10),
    Exercise("check_gpt_forward", "14", 2, 15),
    Exercise("check_gpt_loss", "14", 1, 10),
    Exercise("check_gpt_train", "14", 2, 20),
    Exercise("check_gpt_sample", "14", 2, 20),
    Exercise("check_gpt_cached_attention", "14", 3, 25),
    Exercise("check_gpt_forward_cached", "14", 2, 15),
    Exercise("check_merge", "15", 2, 15),
    Exercise("check_to_gptlib", "16", 2, 20),
)

SOLVED, NOT_WRITTEN, FAILS, NOT_FOUND = "solved", "not written yet", "fails", "not found"
SLIP = re.compile(r"slip|first_try|wrong|mistake")  # the notebooks' demonstrations of slips
NOT_WRITTEN_TAIL = " is not written yet: replace its body and run this cell again"
STARTUP_LIMIT = 120.0  # seconds for the child process to import torch and start the first check
GRACE = 10.0  # seconds past a check's limit before its process is stopped from outside


@dataclass
class Row:
    exercise: Exercise
    notebook: str  # the notebook's file name without .ipynb, or its number when missing
    state: str  # SOLVED, NOT_WRITTEN, FAILS or NOT_FOUND
    detail: str = ""  # what the check said (FAILS), or what is missing (NOT_FOUND)

    @property
    def name(self) -> str:
        return self.exercise.check.removeprefix("check_")

    @property
    def shown(self) -> str:
        return f"{self.state}: {self.detail}" if self.detail else self.state


def default_notebook_dir() -> Path:
    """The current folder when it holds the course's notebooks (a notebook's kernel runs in the
    notebook's own folder: notebooks/ or the Chinese edition's notebooks/zh/), else the course's
    notebooks/ folder next to gptlib, else the current folder."""
    here = Path.cwd()
    if any(here.glob("[0-9][0-9]_*.ipynb")):
        return here
    course = Path(__file__).resolve().parents[2] / "notebooks"
    return course if course.is_dir() else here


# --- reading a notebook (no torch needed) ------------------------------------------------------


def _python(source: str) -> str:
    """A cell's source with IPython's magics and shell lines blanked out (line numbers kept);
    a cell magic other than timing runs no Python at all."""
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if lines[0].split()[0] not in ("%%time", "%%timeit", "%%capture"):
            return ""
        lines[0] = ""
    return "\n".join(
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip()[:1] in ("%", "!") else line
        for line in lines
    )


def _is_literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _definitions(tree: ast.Module) -> list[ast.stmt]:
    """The statements of a cell that define something cheaply: imports, functions, classes and
    assignments of literals."""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    out = []
    for node in tree.body:
        if isinstance(node, keep):
            out.append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) for t in targets) and _is_literal(node.value):
                out.append(node)
    return out


def _names_used(nodes: Iterable[ast.stmt]) -> set[str]:
    return {
        n.id
        for node in nodes
        if not isinstance(node, (ast.Import, ast.ImportFrom))
        for n in ast.walk(node)
        if isinstance(n, ast.Name)
    }


def _only_used(node: ast.stmt, used: set[str]) -> ast.stmt | None:
    """An import cut down to the names some definition uses (None: no name is used), so that a
    notebook's plotting and widget imports cost nothing."""
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
        return node
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return None
    kept = [
        alias
        for alias in node.names
        if (alias.asname or alias.name.split(".")[0]) in used or alias.name == "*"
    ]
    if not kept:
        return None
    cut = (
        ast.ImportFrom(node.module, kept, node.level) if isinstance(node, ast.ImportFrom) else None
    )
    return ast.copy_location(cut or ast.Import(kept), node)


class _Cell(NamedTuple):
    statements: list[ast.stmt]
    calls: dict[str, str]  # check name -> the function handed to it (the cell's last such call)
    error: str  # why the cell does not parse, or ""


def _read(path: Path, checks: set[str]) -> list[_Cell]:
    cells = []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell.get("cell_type") != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        try:
            tree = ast.parse(_python(source))
        except SyntaxError as e:
            called = {c: "" for c in checks if re.search(rf"\b{c}\s*\(", source)}
            cells.append(_Cell([], called, f"{type(e).__name__}: {e.msg} (line {e.lineno})"))
            continue
        found = [
            (node.lineno, node.col_offset, node.func.id, node.args[0].id)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in checks
            and node.args
            and isinstance(node.args[0], ast.Name)
            and not SLIP.search(node.args[0].id)
            and not node.args[0].id.startswith("solution_")
        ]
        calls = {check: name for *_, check, name in sorted(found)}  # the last call in the cell
        cells.append(_Cell(_definitions(tree), calls, ""))
    used = _names_used(s for c in cells for s in c.statements)
    for cell in cells:
        cell.statements[:] = [s for s in (_only_used(s, used) for s in cell.statements) if s]
    return cells


# --- running the checks (in the child process) -------------------------------------------------


class _TookTooLong(BaseException):
    """Raised by the alarm inside a check that ran past its limit; a BaseException, so that the
    check's own `except Exception` lets it through."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:  # the parent stops a process that runs too long
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


def _base_namespace(checks: Iterable[Callable]) -> dict:
    """torch, F, nn, math and the public names the checks' modules import (never what those
    modules define themselves: the reference solutions and their helpers stay out)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    ns: dict = {"__name__": "__main__", "torch": torch, "nn": nn, "F": F, "math": math}
    for check in checks:
        module = sys.modules[check.__module__]
        for name, value in vars(module).items():
            if name.startswith("_") or name in ns:
                continue
            if isinstance(value, types.ModuleType) or (
                callable(value)
                and not getattr(value, "__module__", "gptlib.exercises").startswith(
                    "gptlib.exercises"
                )
            ):
                ns[name] = value
    return ns


def _verdict(check: Callable, fn: object, timeout: float | None) -> tuple[str, str]:
    import torch

    if not callable(fn):
        return FAILS, "the function handed to the check is not defined where the check runs"
    dtype = torch.get_default_dtype()
    quiet = io.StringIO()
    try:
        with (
            torch.random.fork_rng(),
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
            _time_limit(timeout),
        ):
            result = check(fn)
    except _TookTooLong:
        return FAILS, f"took longer than {timeout:g} s; is there a loop that never ends?"
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001  (the check itself broke on the reader's output)
        return FAILS, f"the check raised {type(e).__name__}: {e}"
    finally:
        torch.set_default_dtype(dtype)
    message = str(getattr(result, "message", result))
    if getattr(result, "passed", False):
        return SOLVED, ""
    if message.endswith(NOT_WRITTEN_TAIL):
        return NOT_WRITTEN, ""
    lines = [line.strip() for line in message.splitlines() if line.strip()] or [message]
    first = re.sub(r"^✗ (\w+: )?", "", lines[0])  # the row already names the exercise
    return FAILS, " ".join([first, *lines[1:]])


def check_notebook(
    path: Path,
    checks: list[str],
    timeout: float | None = 60.0,
    on_start: Callable[[str], None] = lambda check: None,
    on_done: Callable[[str, str, str], None] = lambda check, state, detail: None,
) -> dict[str, tuple[str, str]]:
    """Run the named checks on the reader's functions in notebook `path`, in this process:
    check name -> (state, detail). `on_start(check)` and `on_done(check, state, detail)` are
    called around each check."""
    import gptlib.exercises as ex

    found = {c: getattr(ex, c) for c in checks}
    try:
        cells = _read(path, set(checks))
    except (OSError, ValueError, KeyError, TypeError) as e:  # not a notebook file
        return {c: (FAILS, f"{path.name} cannot be read: {type(e).__name__}: {e}") for c in checks}
    last = {}
    for i, cell in enumerate(cells):
        for check in cell.calls:
            last[check] = i
    out = {
        c: (NOT_FOUND, f"{path.name} has no {c}(...) call on the reader's function")
        for c in checks
        if c not in last
    }
    ns = _base_namespace(found.values())
    unparsed: dict[
        str, str
    ] = {}  # check -> the error of an earlier calling cell that failed to parse
    for i, cell in enumerate(cells):
        for node in cell.statements:
            code = compile(ast.Module([node], type_ignores=[]), f"<{path.name}, cell {i}>", "exec")
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    exec(code, ns)
            except Exception:  # noqa: BLE001,S110  (what does not define now is missing below)
                pass
        for check, fn_name in cell.calls.items():
            if cell.error:
                unparsed[check] = cell.error
            if last.get(check) != i:
                continue
            on_start(check)
            if cell.error:
                out[check] = (FAILS, f"the cell that calls {check} does not parse: {cell.error}")
            elif check in unparsed and fn_name not in ns:  # its definition was in that cell
                out[check] = (
                    FAILS,
                    f"a cell that calls {check} does not parse: {unparsed[check]}",
                )
            else:
                out[check] = _verdict(found[check], ns.get(fn_name), timeout)
            on_done(check, *out[check])
    return out


def _worker(job_file: str, result_file: str) -> int:
    """The child process: run the job's notebooks, one line of JSON per event."""
    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    with open(result_file, "a", encoding="utf-8", buffering=1) as out:

        def write(**event):
            out.write(json.dumps(event) + "\n")
            out.flush()

        started: set[str] = set()

        def start(check: str) -> None:
            started.add(check)
            write(start=check)

        for path, checks in job["notebooks"]:
            verdicts = check_notebook(
                Path(path),
                checks,
                job["timeout"],
                on_start=start,
                on_done=lambda c, state, detail: write(check=c, state=state, detail=detail),
            )
            for check, (state, detail) in verdicts.items():
                if state == NOT_FOUND or check not in started:  # no check ran for these
                    write(check=check, state=state, detail=detail)
    return 0


# --- the parent: one child process, restarted after a crash or a hang ---------------------------


def _events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a killed process
            break
    return events


def _last_line(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def _run_children(
    jobs: list[tuple[Path, list[str]]], timeout: float, cwd: Path
) -> dict[str, tuple[str, str]]:
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [
        sys.executable,
        "-c",
        "import sys; from gptlib.exercises.progress import _worker; "
        "sys.exit(_worker(sys.argv[1], sys.argv[2]))",
    ]
    results: dict[str, tuple[str, str]] = {}
    remaining = [(path, list(checks)) for path, checks in jobs]
    while remaining:
        with tempfile.TemporaryDirectory() as tmp:
            job, out, err = Path(tmp, "job.json"), Path(tmp, "out.jsonl"), Path(tmp, "err.txt")
            job.write_text(
                json.dumps({"timeout": timeout, "notebooks": [[str(p), c] for p, c in remaining]}),
                encoding="utf-8",
            )
            with open(err, "w", encoding="utf-8") as stderr:
                child = subprocess.Popen(
                    [*command, str(job), str(out)],
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
                begun, running, seen, why = time.monotonic(), None, 0, ""
                try:
                    while child.poll() is None:
                        time.sleep(0.05)
                        events = _events(out)
                        for event in events[seen:]:
                            running = (
                                (event["start"], time.monotonic()) if "start" in event else None
                            )
                        seen = len(events)
                        now = time.monotonic()
                        if running and now - running[1] > timeout + GRACE:
                            why = f"took longer than {timeout:g} s (stopped from outside)"
                        elif not events and now - begun > STARTUP_LIMIT:
                            why = f"the checking process did not start within {STARTUP_LIMIT:g} s"
                        if why:
                            child.kill()
                            break
                finally:
                    if child.poll() is None:
                        child.kill()
                    child.wait()
            events = _events(out)
            for event in events:
                if "check" in event:
                    results[event["check"]] = (event["state"], event["detail"])
            why = why or f"the checking process stopped: {_last_line(err)}"
        remaining = [(p, [c for c in cs if c not in results]) for p, cs in remaining]
        remaining = [(p, cs) for p, cs in remaining if cs]
        if not remaining:
            break
        started = [e["start"] for e in events if "start" in e and e["start"] not in results]
        if not events:  # nothing ran at all: restarting would fail the same way
            for _, checks in remaining:
                for check in checks:
                    results[check] = (FAILS, why)
            break
        culprit = started[-1] if started else remaining[0][1][0]
        results[culprit] = (FAILS, why)
    return results


def collect(notebook_dir: str | os.PathLike | None = None, timeout: float = 60.0) -> list[Row]:
    """Every exercise of the course with its state in the notebooks of `notebook_dir`."""
    folder = (Path(notebook_dir) if notebook_dir is not None else default_notebook_dir()).resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"no notebook folder {folder}")
    files = {ex.notebook: sorted(folder.glob(f"{ex.notebook}_*.ipynb")) for ex in EXERCISES}
    jobs: dict[Path, list[str]] = {}
    for ex in EXERCISES:
        if files[ex.notebook]:
            jobs.setdefault(files[ex.notebook][0], []).append(ex.check)
    verdicts = _run_children(list(jobs.items()), timeout, folder) if jobs else {}
    rows = []
    for ex in EXERCISES:
        if not files[ex.notebook]:
            where = f"no notebook {ex.notebook}_*.ipynb in {folder}"
            rows.append(Row(ex, ex.notebook, NOT_FOUND, where))
            continue
        state, detail = verdicts.get(ex.check, (FAILS, "the check did not run"))
        rows.append(Row(ex, files[ex.notebook][0].stem, state, detail))
    return rows


def format_table(rows: list[Row]) -> str:
    """The rows as aligned text, with a closing line that counts them."""
    header = ("notebook", "exercise", "difficulty", "minutes", "state")
    body = [
        (
            r.notebook,
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


def progress(notebook_dir: str | os.PathLike | None = None, timeout: float = 60.0) -> None:
    """Print every exercise of the course with its notebook, difficulty, minutes and state, as
    the saved notebooks in `notebook_dir` (default: the notebook's own folder, notebooks/ or
    notebooks/zh/, in a notebook; the course's notebooks/ folder elsewhere) have them.
    Save the notebook you are working in first: unsaved edits are not seen."""
    folder = Path(notebook_dir) if notebook_dir is not None else default_notebook_dir()
    rows = collect(folder, timeout)
    print(f"Exercises in {folder.resolve()} (as last saved)\n")
    print(format_table(rows))
