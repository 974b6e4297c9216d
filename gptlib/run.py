"""A training run that loses nothing: where it saves, Ctrl-C at any moment, and exact resuming.

`python -m gptlib train` is these steps, in this order:

    out = output_path(args.out, data=..., resume=..., overwrite=...)  # refused before any work
    with claim(out):                         # one writer per checkpoint path at a time
        ...load the data, build or resume the model...
        with StopAtStepBoundary() as stop:   # Ctrl-C finishes the step it lands in, then stops
            hist = train(..., should_stop=stop.requested)
        ...final evaluation, skipped by a second Ctrl-C...
        save_run(out, ...)                   # atomic; never replaces a file it may not replace

Why Ctrl-C is deferred: a KeyboardInterrupt raised in the middle of a step lands after the batch
was drawn (the generator moved on) but before the optimiser stepped, so the saved random state and
the saved weights would disagree and a resumed run would not be the run that never stopped. A
step is either done, or it never happened.

Random states (`random_states` / `restore_random_states`): the generator that draws the windows,
torch's CPU generator (dropout on the CPU) and, on CUDA, the GPU's generator (dropout there). All
are kept as CPU tensors, as `torch.Generator.set_state` needs, so a checkpoint resumes on any
device.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gptlib import distributed
from gptlib.checkpoint import CheckpointError, check_writable, load_checkpoint, save_checkpoint
from gptlib.data import Corpus
from gptlib.model import GPT
from gptlib.train import History

try:  # POSIX: a lock the kernel releases when its process dies, however it dies
    import fcntl
except ImportError:  # Windows
    fcntl = None

EXIT_INTERRUPTED = 130  # what a shell reports for a program stopped by Ctrl-C (128 + SIGINT)


# -- where the checkpoint goes -------------------------------------------------------------------


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
        raise ValueError(
            f"--out {out!r} names a folder; the checkpoint is one file: give a file name such as "
            f"--out {name}"
        )
    if data is not None and os.path.isfile(data) and same_file(out, data):
        raise ValueError(
            f"--out {out!r} is the data file given with --data; training would replace your text "
            "with a checkpoint: choose another --out, such as runs/model.pt"
        )
    if os.path.exists(out) and not overwrite:
        if resume is not None and same_file(out, resume):
            return out  # resuming in place: the run owns this file
        raise ValueError(
            f"--out {out!r} already exists ({_describe(out)}); nothing was replaced. Choose "
            f"another --out, continue that run with --resume {out}, or pass --overwrite to "
            "replace it"
        )
    check_writable(out)
    return out


def same_file(a: str, b: str) -> bool:
    """True when both paths name one file (links and relative paths resolved)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _describe(path: str) -> str:
    """A few words on what is at `path`, for the message that refuses to replace it."""
    try:
        ck = load_checkpoint(path)
    except (CheckpointError, OSError):
        return f"a file of {os.path.getsize(path):,} bytes that is not a gptlib checkpoint"
    data = (ck.extra or {}).get("data")
    on = f" trained on {data}" if data else ""
    return f"a checkpoint at step {ck.step}{on}" if ck.step is not None else "a checkpoint"


@contextmanager
def claim(out: str) -> Iterator[None]:
    """Hold `out` for this run: a second run given the same `--out` is refused at start-up
    instead of silently replacing what the first one saves.

    The claim is a lock on `OUT.lock`, taken without waiting and released when the run ends (the
    kernel releases it too if the process dies, so a crash never leaves a stale claim behind).
    """
    lock_path = out + ".lock"
    os.makedirs(os.path.dirname(os.path.abspath(lock_path)), exist_ok=True)
    if fcntl is None:  # no advisory locks: an exclusive create, removed at the end
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            raise _busy(out, lock_path) from None
        try:
            os.write(fd, str(os.getpid()).encode())
            yield
        finally:
            os.close(fd)
            _remove(lock_path)
        return
    while True:
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _busy(out, lock_path) from None
        # The holder before us may have removed the file between our open and our lock: then we
        # hold a lock nobody else can see. Lock the file that is there now instead.
        try:
            same = os.fstat(fd).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        _remove(lock_path)  # removed while still locked, so no one locks a file about to go
        os.close(fd)


def _busy(out: str, lock_path: str) -> ValueError:
    try:
        with open(lock_path) as f:
            pid = f.read().strip()
    except OSError:
        pid = ""
    who = f"process {pid}" if pid else "another process"
    return ValueError(
        f"another training run ({who}) is writing {out!r} right now; wait for it to finish, or "
        f"choose another --out"
    )


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# -- Ctrl-C ---------------------------------------------------------------------------------------


def _can_handle_sigint() -> bool:
    """Signal handlers can be set in the main thread only; and a process started with SIGINT
    ignored (`nohup`, a background job of a script) keeps ignoring it, as it asked."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    )


class StopAtStepBoundary:
    """While active, Ctrl-C asks the run to stop instead of raising KeyboardInterrupt mid-step.

    `requested()` is what `train(should_stop=...)` polls after every step: True once Ctrl-C was
    pressed (under torchrun, once any rank's was: every rank must stop after the same step, or
    the others would wait for it forever). `presses` counts them: a second one also skips the
    final evaluation. Outside the main thread (no signal handlers there), or where SIGINT is
    ignored, it is inert.
    """

    def __init__(self, say: Callable[[str], None] = print) -> None:
        self.say = say
        self.presses = 0
        self._previous = None

    def _on_sigint(self, signum, frame) -> None:
        self.presses += 1
        if self.presses == 1:
            self.say(
                "\nCtrl-C: finishing this step, then saving (Ctrl-C again skips the final "
                "evaluation)"
            )
        else:
            self.say("\nCtrl-C: the final evaluation will be skipped; saving")

    def requested(self) -> bool:
        local = self.presses > 0
        if not torch.distributed.is_initialized():
            return local
        flag = torch.tensor([float(local)], device=distributed.collective_device())
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def __enter__(self) -> StopAtStepBoundary:
        if _can_handle_sigint():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


@contextmanager
def saving_uninterrupted(say: Callable[[str], None] = print) -> Iterator[None]:
    """Ctrl-C while the checkpoint is written is noted and ignored: saving takes a moment and a
    checkpoint half-saved is worth nothing (the write is atomic anyway)."""
    if not _can_handle_sigint():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda s, f: say("\nCtrl-C: saving, one moment"))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


# -- random states --------------------------------------------------------------------------------


def random_states(batches: torch.Generator, device: torch.device) -> dict:
    """This process's random states, as CPU tensors: the windows' generator, torch's CPU
    generator and, on CUDA, the current GPU's generator."""
    states = {"batches": batches.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_random_states(
    states: dict, batches: torch.Generator, device: torch.device
) -> str | None:
    """Put back what `random_states` saved (for this rank). Returns a note when part of it does
    not apply here (a run saved on CUDA resumed on a CPU, say), else None."""
    batches.set_state(states["batches"].cpu())
    torch.set_rng_state(states["torch"].cpu())
    saved_cuda = states.get("cuda")
    if device.type == "cuda" and saved_cuda is not None:
        torch.cuda.set_rng_state(saved_cuda.cpu(), device)
        return None
    if device.type == "cuda" or saved_cuda is not None:
        where = "CUDA" if saved_cuda is not None else "a CPU"
        return (
            f"note: the run was saved on {where} and continues on {device.type}: dropout draws "
            "differ from the run that never stopped"
        )
    return None


def gather_random_states(batches: torch.Generator, device: torch.device) -> list[dict]:
    """Every rank's `random_states`, in rank order (one entry without torchrun)."""
    return distributed.gather(random_states(batches, device))


# -- saving -----------------------------------------------------------------------------------------


def save_run(
    out: str,
    model: GPT,
    corpus: Corpus,
    optimizer: torch.optim.Optimizer | None,
    step: int,
    history: History,
    settings: dict,
    summary: dict,
    states: list[dict],
    *,
    world_size: int = 1,
    overwrite: bool = False,
) -> str:
    """Save everything `--resume` needs and return the path written: `out`, or, if a file
    appeared at `out` during the run and may not be replaced, the first free `OUT-N.pt` beside
    it (the run's work is kept either way)."""
    extra = {"data": settings["data"], "preset": settings["preset"], **summary}
    training = {
        "settings": settings,
        "corpus": {
            "name": corpus.name,
            "reading": corpus.reading,
            "vocab_size": corpus.vocab_size,
            "fingerprint": corpus.fingerprint(),
        },
        "world_size": world_size,
        "rng": states,
    }
    stem, ext = os.path.splitext(out)
    candidates = [out, *(f"{stem}-{n}{ext or '.pt'}" for n in range(1, 1000))]
    for path in candidates:
        try:
            save_checkpoint(
                path,
                model,
                corpus.tokenizer,
                optimizer,
                step,
                history,
                extra=extra,
                training=training,
                overwrite=overwrite and path == out,
            )
            return path
        except FileExistsError:
            continue
    raise CheckpointError(f"could not find a free name beside {out!r} to save the run")
