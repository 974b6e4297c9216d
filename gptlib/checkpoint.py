"""Save and load a trained model with its config, tokenizer and (optionally) training state.

Saving is atomic (a temporary file in the same folder, then `os.replace`), so an interrupted save
never leaves a half-written checkpoint under the real name. Loading uses
`torch.load(weights_only=True)`: a checkpoint holds tensors, numbers, strings, lists and dicts,
and can never run code.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
import secrets
import shlex
import stat
import tempfile
from dataclasses import dataclass
from typing import Any

import torch

from gptlib.config import GPTConfig
from gptlib.language import _
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer
from gptlib.train import History

FORMAT = "gptlib-checkpoint"
VERSION = 1


class CheckpointError(ValueError):
    """A file that is not a usable gptlib checkpoint."""


# This process's own mark, in the name of every temporary file it writes (and in the lock of a
# training run): a file left by a killed save is removed by the next run only when its name holds
# the mark that the killed run recorded, never by the shape of its name alone.
RUN_TOKEN = secrets.token_hex(6)


@dataclass
class Checkpoint:
    model: GPT
    tokenizer: CharTokenizer
    config: GPTConfig
    step: int | None = None
    history: History | None = None
    optimizer_state: dict | None = None
    extra: dict | None = None
    training: dict | None = None  # what `--resume` needs: settings, schedule, corpus, RNG states


def save_checkpoint(
    path: str | os.PathLike,
    model: GPT,
    tokenizer: CharTokenizer,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    step: int | None = None,
    history: History | None = None,
    extra: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    overwrite: bool = True,
) -> None:
    """Write the checkpoint to `path` atomically. With `overwrite=False` an existing file at
    `path` is never replaced (FileExistsError, and the new checkpoint is not written): the new
    file is linked into place, which fails if the name is taken, in the same step."""
    path = os.fspath(path)
    kind = file_kind(path)
    if kind is not None:  # os.replace would put a regular file in the place of a device or a pipe
        said = _("{path} is {kind}, not a regular file; a checkpoint is written only as a regular "
                 "file")  # fmt: skip
        raise CheckpointError(said.format(path=repr(path), kind=kind))
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "config": model.cfg.to_dict(),
        "tokenizer": tokenizer.to_dict(),
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": step,
        "history": history.to_dict() if history is not None else None,
        "extra": extra or {},
        "training": training,
    }
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = _temporary_file(path)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes the file private; a checkpoint need not be
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_no_clobber(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def file_kind(path: str) -> str | None:
    """What is at `path` when it is there and is not a regular file ("a folder", "a character
    device", ...), else None (nothing there, or a regular file, through links)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    kinds = (
        (stat.S_ISDIR, _("a folder")),
        (stat.S_ISCHR, _("a character device")),
        (stat.S_ISBLK, _("a block device")),
        (stat.S_ISFIFO, _("a named pipe (FIFO)")),
        (stat.S_ISSOCK, _("a socket")),
    )
    for test, kind in kinds:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else _("not a regular file")


def _short_base(path: str) -> str:
    """The file name of `path`, cut to at most 100 bytes (whole characters), for the names of
    the files kept beside it."""
    base = os.path.basename(os.path.abspath(path))
    return base.encode()[:100].decode(errors="ignore")


def temporary_name(path: str, token: str = RUN_TOKEN) -> str:
    """The shape of the temporary files beside `path`: `.NAME.TOKEN.tmp-XXXXXXXX.pt`."""
    return f".{_short_base(path)}.{token}.tmp-XXXXXXXX.pt"


def _temporary_file(path: str) -> tuple[int, str]:
    """A new file beside `path`, named for it and for this process (`temporary_name`), so that
    one left behind by a killed save can be recognised, and removed, by the next run that writes
    `path`, and a user's file never is."""
    folder = os.path.dirname(os.path.abspath(path))
    prefix = f".{_short_base(path)}.{RUN_TOKEN}.tmp-"
    return tempfile.mkstemp(prefix=prefix, suffix=".pt", dir=folder)


def temporary_name_pattern(path: str | os.PathLike, token: str = RUN_TOKEN) -> re.Pattern:
    """The names `_temporary_file` gives for `path` in the process whose token is `token`."""
    base = _short_base(os.fspath(path))
    return re.compile(rf"\.{re.escape(base)}\.{re.escape(token)}\.tmp-[a-z0-9_]{{8}}\.pt")


def _link_no_clobber(tmp: str, path: str) -> None:
    """Give the finished file `tmp` the name `path` unless that name is taken."""
    try:
        os.link(tmp, path)  # atomic, and fails with FileExistsError when `path` exists
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: check, then rename (almost atomic)
        if os.path.exists(path):
            raise FileExistsError(path) from None
        os.replace(tmp, path)
        return
    os.remove(tmp)


def load_checkpoint(path: str | os.PathLike, device: torch.device | str = "cpu") -> Checkpoint:
    """The checkpoint in `path`, its model on `device` in eval mode; CheckpointError (or
    FileNotFoundError) saying what the file is instead."""
    path = os.fspath(path)
    payload = _read_payload(path)
    try:
        config = GPTConfig.from_dict(payload["config"])
        tokenizer = CharTokenizer.from_dict(payload["tokenizer"])
        model = GPT(config)
        model.load_state_dict(payload["model"])
        model.to(device)
    except (KeyError, ValueError, RuntimeError) as e:
        raise CheckpointError(
            _("{path} is an incomplete or inconsistent checkpoint: {error}").format(
                path=repr(path), error=e
            )
        ) from None
    model.eval()
    history = History.from_dict(payload["history"]) if payload.get("history") else None
    return Checkpoint(
        model=model,
        tokenizer=tokenizer,
        config=config,
        step=payload.get("step"),
        history=history,
        optimizer_state=payload.get("optimizer"),
        extra=payload.get("extra"),
        training=payload.get("training"),
    )


def _read_payload(path: str) -> dict:
    """What `save_checkpoint` wrote to `path`, read without running any code, or the reason why
    the file is not a gptlib checkpoint."""
    if not os.path.exists(path):
        raise FileNotFoundError(
            _(
                "checkpoint {shown} does not exist; train one with "
                "`python -m gptlib train --out {path}`"
            ).format(shown=repr(path), path=shlex.quote(path))
        )
    if not os.path.isdir(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise CheckpointError(
            _(
                "{path} is not a regular file (a pipe, a device, ...); give the path of a .pt "
                "file written by `python -m gptlib train`"
            ).format(path=repr(path))
        )
    if _is_text(path):
        raise CheckpointError(
            _(
                "{path} is a text file, not a checkpoint; give the path of a .pt file written by "
                "`python -m gptlib train` (a text to train on goes to --data)"
            ).format(path=repr(path))
        )
    payload = _torch_load(path)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(
            _(
                "{path} is a torch file but not a gptlib checkpoint (no format={format} entry); "
                "it was written by something else"
            ).format(path=repr(path), format=repr(FORMAT))
        )
    if payload.get("version") != VERSION:
        raise CheckpointError(
            _("{path} has checkpoint version {version}; this gptlib reads version {reads}").format(
                path=repr(path), version=repr(payload.get("version")), reads=VERSION
            )
        )
    return payload


def _torch_load(path: str) -> Any:
    """torch.load of `path` with weights_only (no code runs), or a CheckpointError saying why
    the file could not be read."""
    try:
        # Everything is read onto the CPU first: random-generator states must stay CPU tensors
        # (torch.Generator.set_state refuses others), and the weights move with the model below.
        return torch.load(path, map_location="cpu", weights_only=True)
    except IsADirectoryError:
        raise CheckpointError(
            _(
                "{path} is a folder, not a checkpoint file; give the path of a .pt file written "
                "by `python -m gptlib train`"
            ).format(path=repr(path))
        ) from None
    except pickle.UnpicklingError as e:
        if "weights only" not in str(e).lower():
            raise CheckpointError(
                _(
                    "{path} could not be read as a checkpoint: it is truncated, corrupted or not "
                    "a torch file ({error}); give a checkpoint written by `python -m gptlib "
                    "train`, or train it again"
                ).format(path=repr(path), error=_first_sentence(e))
            ) from None
        # torch's own message suggests loading with weights_only=False: that runs whatever code
        # the file holds, so it is not passed on.
        raise CheckpointError(
            _(
                "{path} is not a gptlib checkpoint: it holds Python objects that a checkpoint "
                "never contains, so it was written by other code and is not loaded (loading it "
                "could run that code); give a checkpoint written by `python -m gptlib train`"
            ).format(path=repr(path))
        ) from None
    except Exception as e:  # torch.load fails in many ways on a bad file; all mean the same
        raise CheckpointError(
            _(
                "{path} could not be read as a checkpoint: it is truncated, corrupted or not "
                "a torch file ({error}); give a checkpoint written by `python -m gptlib "
                "train`, or train it again"
            ).format(path=repr(path), error=_first_sentence(e))
        ) from None


def _is_text(path: str) -> bool:
    """True when the start of the file reads as UTF-8 text (a checkpoint starts with a zip
    header, which holds NUL bytes)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if not head or b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start >= len(head) - 3  # a character cut by the 4096 bytes read
    return True


def _first_sentence(e: BaseException) -> str:
    """The gist of an error from torch.load: its first sentence (torch appends a paragraph)."""
    text = " ".join(str(e).split())
    first = text.split(". ")[0].rstrip(".")
    return f"{type(e).__name__}: {first[:200]}" if first else type(e).__name__


def check_writable(path: str | os.PathLike) -> None:
    """Raise now, before any training, if a checkpoint could not be written to `path` later:
    its folder must exist or be creatable, and must accept a new file."""
    path = os.fspath(path)
    if path.endswith(("/", os.sep)) or os.path.isdir(path):
        name = os.path.join(path, "model.pt")
        raise ValueError(
            _("--out {path} is a folder; give a file name such as {name}").format(
                path=repr(path), name=name
            )
        )
    folder = os.path.dirname(os.path.abspath(path))
    check_names(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = _temporary_file(path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise ValueError(
            _(
                "cannot write the checkpoint {path}: folder {folder} cannot be created or "
                "written ({error}); pass --out with a path in a writable folder"
            ).format(path=repr(path), folder=repr(folder), error=e.strerror or e)
        ) from None


def existing_folder(path: str) -> str:
    """The folder of `path`, or the nearest folder above it that exists."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _limit(folder: str, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


def check_names(path: str | os.PathLike) -> None:
    """Raise a ValueError now if the file system would refuse the name of `path` when the
    checkpoint is saved: each part of the path, and the temporary file written beside it, within
    the folder's longest name (`PC_NAME_MAX`, in bytes), the whole path within `PC_PATH_MAX`."""
    path = os.path.abspath(os.fspath(path))
    where = existing_folder(path)
    most = _limit(where, "PC_NAME_MAX", 255)
    parts = [p for p in path.split(os.sep) if p]
    names = [*parts, temporary_name(path)]
    for name in names:
        size = len(os.fsencode(name))
        if size > most:
            shown = name if len(name) <= 60 else name[:57] + "..."
            said = _("the name {name} in --out is {size} bytes long; the file system of {folder} "
                     "takes names of at most {most} bytes: give a shorter --out")  # fmt: skip
            raise ValueError(said.format(name=repr(shown), size=size, folder=where, most=most))
    longest = _limit(where, "PC_PATH_MAX", 4096)
    size = len(os.fsencode(path))
    if size >= longest:
        said = _("--out is a path of {size} bytes; the file system of {folder} takes paths of "
                 "fewer than {most} bytes: give a shorter --out")  # fmt: skip
        raise ValueError(said.format(size=size, folder=where, most=longest))


def free_bytes(path: str) -> int | None:
    """Bytes free to this user in the file system that holds `path` (or its nearest existing
    folder), or None where it cannot be told."""
    try:
        st = os.statvfs(existing_folder(path))
    except (OSError, AttributeError):
        return None
    return st.f_bavail * st.f_frsize


def checkpoint_size(model: GPT, with_optimizer: bool = True, steps: int = 0) -> int:
    """About how many bytes `save_checkpoint` writes for `model` (never much less): the tensors
    of its state, twice more for AdamW's two moments, the history (a few numbers a step) and a
    margin for the rest (config, tokenizer, random states, the file's own structure)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    history = steps * 4 * 12
    return weights + (2 * params if with_optimizer else 0) + history + 64_000


# What a failing save reports: the error numbers of a full disk, a quota, a name the file system
# refuses, a folder removed meanwhile, a read-only file system, a permission taken away.
SAVE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG, errno.ENOENT, errno.EROFS,
               errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG)  # fmt: skip


def save_error(e: BaseException) -> str | None:
    """One line on why a save failed with `e`, if it is a failure of the disk, else None."""
    cause = e
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, OSError) and cause.errno in SAVE_ERRORS:
        return os.strerror(cause.errno)
    text = str(e)
    if isinstance(e, RuntimeError) and ("unexpected pos" in text or "write" in text.lower()):
        return _first_sentence(e)  # torch's zip writer reports a short write this way
    return None


ASSETS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets")


def asset_path(name: str) -> str:
    """The path of one of the course's small trained checkpoints in `assets/`."""
    path = os.path.join(ASSETS, name)
    if not os.path.exists(path):
        available = (
            sorted(f for f in os.listdir(ASSETS) if f.endswith(".pt"))
            if os.path.isdir(ASSETS)
            else []
        )
        raise FileNotFoundError(
            _(
                "no asset {name} in {folder}; available: {available} "
                "(assets/README.md has the command that regenerates each)"
            ).format(name=repr(name), folder=ASSETS, available=", ".join(available) or _("none"))
        )
    return path


def load_asset(name: str) -> Checkpoint:
    """Load one of the course's trained checkpoints onto the CPU, in eval mode."""
    return load_checkpoint(asset_path(name), "cpu")
