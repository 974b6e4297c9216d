"""Where a run's checkpoint goes: the path refused before any work (`output_path`), then claimed
by one run at a time (`claim`), a lock the kernel releases when its process dies."""

from __future__ import annotations

import os
import re
import shlex
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from gptlib.checkpoint import (
    RUN_TOKEN,
    CheckpointError,
    check_writable,
    file_kind,
    load_checkpoint,
    temporary_name_pattern,
)
from gptlib.commandline.signals import HELD_LOCKS
from gptlib.language import _

try:  # POSIX: a lock the kernel releases when its process dies, however it dies
    import fcntl
except ImportError:  # Windows
    fcntl = None


def output_path(
    out: str,
    *,
    data: str | None = None,
    resume: str | None = None,
    overwrite: bool = False,
) -> str:
    """`out` as the run will write it, or a ValueError saying why not, before any work is done.

    Refused: a folder (an existing one, or a path ending in a separator); the data file itself;
    an existing file, unless `overwrite` or it is the checkpoint being resumed (that run
    continues in place).
    """
    if out.endswith(("/", os.sep)) or os.path.isdir(out):
        name = os.path.join(out, "model.pt")
        said = _("--out {out} names a folder; the checkpoint is one file: give a file name "
                 "such as --out {name}")  # fmt: skip
        raise ValueError(said.format(out=repr(out), name=shlex.quote(name)))
    if os.path.islink(out) and not os.path.exists(out):
        said = _("--out {out} is a symbolic link to {target}, which does not exist; give the "
                 "path the checkpoint should have, or remove the link")  # fmt: skip
        raise ValueError(said.format(out=repr(out), target=repr(os.readlink(out))))
    kind = file_kind(out)
    if kind is not None:  # a device, a pipe, a socket: never replaced, --overwrite or not
        said = _("--out {out} is {kind}, not a regular file, and is never written, with or "
                 "without --overwrite; give the path of a checkpoint file, such as "
                 "runs/model.pt")  # fmt: skip
        raise ValueError(said.format(out=repr(out), kind=kind))
    if data is not None and os.path.isfile(data) and same_file(out, data):
        said = _("--out {out} is the data file given with --data; training would replace your "
                 "text with a checkpoint: choose another --out, such as runs/model.pt")  # fmt: skip
        raise ValueError(said.format(out=repr(out)))
    if os.path.exists(out):
        if resume is not None and same_file(out, resume):
            return out  # resuming in place: the run owns this file
        what, ours = _describe(out)
        if not overwrite:
            said = _("--out {out} already exists ({what}); nothing was replaced. Choose another "
                     "--out, continue that run with --resume {path}, or pass --overwrite to "
                     "replace it")  # fmt: skip
            said = said if ours else _("--out {out} already exists ({what}); nothing was "
                                       "replaced: choose another --out")  # fmt: skip
            raise ValueError(said.format(out=repr(out), what=what, path=shlex.quote(out)))
        if not ours:
            said = _("--out {out} is {what}; --overwrite replaces only a checkpoint written by "
                     "gptlib, so it was left alone: choose another --out")  # fmt: skip
            raise ValueError(said.format(out=repr(out), what=what))
    check_writable(out)
    return out


def same_file(a: str, b: str) -> bool:
    """True when both paths name one file (links and relative paths resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _describe(path: str) -> tuple[str, bool]:
    """A few words on what is at `path` (a regular file), and whether it is a gptlib checkpoint
    (recognised by its content, not its name)."""
    try:
        ck = load_checkpoint(path)
    except (CheckpointError, OSError):
        said = _("a file of {size} bytes that is not a gptlib checkpoint")
        return said.format(size=f"{os.path.getsize(path):,}"), False
    data = (ck.extra or {}).get("data")
    if ck.step is None:
        return _("a checkpoint"), True
    if data:
        said = _("a checkpoint at step {step} trained on {data}")
        return said.format(step=ck.step, data=data), True
    return _("a checkpoint at step {step}").format(step=ck.step), True


def lock_path(out: str) -> str:
    """The lock that claims `out`: a hidden file beside it whose name says what it is (never a
    name a user picks, like `OUT.lock`)."""
    folder, base = os.path.split(os.path.abspath(out))
    base = base.encode()[:200].decode(errors="ignore")  # within the 255 bytes of a name
    return os.path.join(folder, f".{base}.gptlib-lock")


LOCK_MARK = "gptlib training run, process "


@contextmanager
def claim(out: str) -> Iterator[list[str]]:
    """Hold `out` for this run: a second run given the same `--out` is refused at start-up
    instead of silently replacing what the first one saves.

    The claim is a lock on `lock_path(out)`, taken without waiting and removed when the run ends
    (the kernel releases the lock if the process dies, so a crash never leaves a claim that
    blocks: the next run takes the file over). Only a file that is a gptlib lock is ever locked,
    rewritten or removed. Holding the claim, it removes the temporary files that a run killed
    while saving `out` left beside it (`kill -9`, a power cut), and yields their names.
    """
    path = lock_path(out)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, before = _take_lock(out, path)
    HELD_LOCKS.append(path)
    try:
        removed = []
        token = _lock_token(before)
        for tmp in orphaned_temporary_files(out, token) if token else []:
            try:
                os.remove(tmp)
                removed.append(tmp)
            except FileNotFoundError:
                pass
        yield removed
    finally:
        HELD_LOCKS.remove(path)
        _remove(path)  # removed while still locked, so no one locks a file about to go
        os.close(fd)


def _take_lock(out: str, path: str) -> tuple[int, str]:
    """The lock on `path`, and what the file said before (a run killed while holding it left its
    process id and token there)."""
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666)
        except FileExistsError:
            if fcntl is None:  # no advisory locks: the file itself is the claim
                raise _busy(out, path) from None
            try:
                fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
            except FileNotFoundError:
                continue  # its run ended between our two opens: try again
            except OSError:
                raise _foreign(out, path) from None
            if not _holds_lock_mark(fd):
                os.close(fd)
                raise _foreign(out, path) from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise _busy(out, path) from None
            # The holder before us may have removed the file between our open and our lock: then
            # we hold a lock nobody else can see. Lock the file that is there now instead.
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
        before = os.pread(fd, 400, 0).decode(errors="replace")
        os.ftruncate(fd, 0)
        os.write(fd, f"{LOCK_MARK}{os.getpid()} token {RUN_TOKEN}\n".encode())
        return fd, before


def _lock_token(text: str) -> str | None:
    """The token a run recorded in its lock (None for a lock without one)."""
    match = re.search(r" token ([0-9a-f]+)\s*$", text)
    return match[1] if match and text.startswith(LOCK_MARK) else None


def _holds_lock_mark(fd: int) -> bool:
    """True for a gptlib lock (or one being created: still empty); False for anything else."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return False
    head = os.pread(fd, 200, 0)
    return not head or head.startswith(LOCK_MARK.encode())


def orphaned_temporary_files(out: str, token: str = RUN_TOKEN) -> list[str]:
    """The temporary files a save of `out` by the process whose token is `token` left, if it was
    killed before it ended (a user's file of a similar name is never one of them)."""
    folder = os.path.dirname(os.path.abspath(out))
    pattern = temporary_name_pattern(out, token)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names) if pattern.fullmatch(n)]


def _busy(out: str, path: str) -> ValueError:
    try:
        with open(path) as f:
            text = f.read(200)
    except OSError:
        text = ""
    pid = (text[len(LOCK_MARK) :].split() or [""])[0] if text.startswith(LOCK_MARK) else ""
    who = _("process {pid}").format(pid=pid) if pid else _("another process")
    if fcntl is None:
        said = _("another training run ({who}) is writing {out} (it holds {path}); wait for it "
                 "to finish, or choose another --out; if no run is going, remove that file")  # fmt: skip
        return ValueError(said.format(who=who, out=repr(out), path=repr(path)))
    said = _("another training run ({who}) is writing {out} right now; wait for it to finish, "
             "or choose another --out")  # fmt: skip
    return ValueError(said.format(who=who, out=repr(out)))


def _foreign(out: str, path: str) -> ValueError:
    said = _("{path}, the name gptlib locks to claim --out {out}, is a file gptlib did not "
             "write; it was left alone: move it away, or choose another --out")  # fmt: skip
    return ValueError(said.format(path=repr(path), out=repr(out)))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
