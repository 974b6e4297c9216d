"""A training run that loses nothing: where it saves, Ctrl-C at any moment, and exact resuming.

`python -m gptlib train` is these steps, in this order:

    out = output_path(args.out, data=..., resume=..., overwrite=...)  # refused before any work
    with claim(out):                         # one writer per checkpoint path at a time
        ...load the data, build the model...
        run = TrainingRun(model, corpus, settings, ranks, device, compile=..., dtype=...)
        run.resume(checkpoint)               # with --resume: step, history, optimiser, RNG
        signals.mode = "defer"               # Ctrl-C, SIGTERM, SIGHUP: finish the step, stop
        hist = run.train(signals.requested)  # gptlib.train.train_step, step after step
        signals.mode = "hold"                # a signal now waits for the save
        run.save(out, ...)                   # atomic; never replaces a file it may not replace
        ...final evaluation, skipped by a second signal; then the checkpoint is updated...

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

import hashlib
import math
import os
import re
import shlex
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gptlib import distributed
from gptlib.checkpoint import (
    RUN_TOKEN,
    CheckpointError,
    check_writable,
    existing_folder,
    file_kind,
    free_bytes,
    load_checkpoint,
    save_checkpoint,
    temporary_name_pattern,
)
from gptlib.data import sample_batch
from gptlib.language import _
from gptlib.model import parameter_formula
from gptlib.train import (
    Diverged,
    History,
    estimate_loss,
    eval_batches,
    learning_rate,
    make_optimizer,
    train_step,
)

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
    _HELD_LOCKS.append(path)
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
        _HELD_LOCKS.remove(path)
        _remove(path)  # removed while still locked, so no one locks a file about to go
        os.close(fd)


# The locks this process holds: a process ended at once (a second Ctrl-C in a step that does not
# end) removes them on its way out.
_HELD_LOCKS: list[str] = []


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


# -- Ctrl-C, SIGTERM and SIGHUP -----------------------------------------------------------------

# The ways a run is asked to stop: Ctrl-C (SIGINT); `kill`, `docker stop`, a scheduler's
# preemption or time limit (SIGTERM); a closed terminal or ssh connection (SIGHUP); the quit key
# (Ctrl-backslash, SIGQUIT), which would otherwise end the process at once with a core dump.
STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT")
    if hasattr(signal, name)
)

# After a second stop signal, the step still running gets this many seconds to end before the
# process ends at once (a Python handler cannot run inside a long tensor operation).
STUCK_STEP_SECONDS = 3.0


def signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def exit_code(signum: int | None) -> int:
    """What a shell reports for a program stopped by the signal: 128 + its number."""
    return EXIT_INTERRUPTED if signum is None else 128 + signum


class Stopped(KeyboardInterrupt):
    """A stop signal where the work may be cut short: at start-up (nothing to keep yet), in the
    final evaluation and in the samples (the run is saved by then). A KeyboardInterrupt, so code
    that stops cleanly on Ctrl-C stops cleanly on the others too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _early_signals() -> list[int]:
    """The stop signals that arrived while `python -m gptlib` imported the library (kept by
    gptlib/__init__.py), before a `StopSignals` took over."""
    from gptlib import _early_signals

    return _early_signals.received


class StopSignals:
    """One handler for SIGINT, SIGTERM, SIGHUP and SIGQUIT over a whole command, in one of three
    modes:

    - "raise" (start-up, final evaluation, samples): raise `Stopped`, cutting the work short;
    - "defer" (training): note it; `requested()` tells the loop to stop after the current step
      (under torchrun, once any rank's was: every rank must stop after the same step, or the
      others would wait for it forever);
    - "hold" (while the checkpoint is written): note it and carry on.

    `received` lists the signals in order: the first one sets the exit code (128 + signal), a
    second one skips the final evaluation. A signal the process was started with ignored
    (`nohup` ignores SIGHUP, a background job of a script SIGINT) stays ignored; outside the main
    thread (no signal handlers there) it is inert.
    """

    def __init__(self, say: Callable[[str], None] = print, mode: str = "raise") -> None:
        self.say = say
        self.mode = mode
        self.received: list[int] = []
        self._previous: dict[int, object] = {}
        self.boundaries = 0  # step boundaries passed (`requested` calls)
        # What is kept if the process has to end at once: a line, computed when it happens.
        self.kept: Callable[[], str] | None = None
        self._watch: tuple[socket.socket, socket.socket, int] | None = None

    @property
    def presses(self) -> int:
        return len(self.received)

    @property
    def first(self) -> int | None:
        return self.received[0] if self.received else None

    def _handle(self, signum, frame) -> None:
        self.received.append(signum)
        if self.mode == "raise":
            raise Stopped(signum)
        name = signal_name(signum)
        if self.mode == "hold":
            self.say("\n" + _("{signal}: saving, one moment").format(signal=name))
        elif len(self.received) == 1:
            said = _("{signal}: finishing this step, then saving (Ctrl-C or another signal "
                     "skips the final evaluation)")  # fmt: skip
            self.say("\n" + said.format(signal=name))
        else:
            said = _("{signal}: the final evaluation will be skipped; saving")
            self.say("\n" + said.format(signal=name))

    def requested(self) -> bool:
        self.boundaries += 1
        local = bool(self.received)
        if not torch.distributed.is_initialized():
            return local
        flag = torch.tensor([float(local)], device=distributed.collective_device())
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    @contextmanager
    def mode_of(self, mode: str) -> Iterator[StopSignals]:
        before, self.mode = self.mode, mode
        try:
            yield self
        finally:
            self.mode = before

    def deferred(self):
        return self.mode_of("defer")

    def held(self):
        return self.mode_of("hold")

    def __enter__(self) -> StopSignals:
        if _in_main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._handle)
            self._start_watch()
        return self

    # A Python signal handler runs only between two bytecodes of the main thread, so during one
    # long tensor operation (a step of a huge block size) it waits for the operation to end.
    # The C part of the handler still writes the signal's number to the "wakeup fd" at once;
    # a thread reads it there and, on a second stop signal while a step is still running, ends
    # the process when that step has not ended within STUCK_STEP_SECONDS.

    def _start_watch(self) -> None:
        if not self._previous or not hasattr(signal, "set_wakeup_fd"):
            return
        reader, writer = socket.socketpair()
        reader.setblocking(True)
        writer.setblocking(False)
        try:
            before = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except (ValueError, OSError):
            reader.close()
            writer.close()
            return
        if before != -1:  # someone else's (an event loop): theirs stays
            signal.set_wakeup_fd(before)
            reader.close()
            writer.close()
            return
        self._watch = (reader, writer, before)
        threading.Thread(target=self._watch_signals, args=(reader,), daemon=True).start()

    def _watch_signals(self, reader: socket.socket) -> None:
        arrived: list[int] = []
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            arrived += [b for b in data if b in STOP_SIGNALS]
            if len(arrived) >= 2 and self.mode == "defer":
                mark, deadline = self.boundaries, time.monotonic() + STUCK_STEP_SECONDS
                while time.monotonic() < deadline:
                    time.sleep(0.05)
                    if self.mode != "defer" or self.boundaries != mark:
                        break
                else:
                    self._end_now(arrived[0])

    def _end_now(self, first: int) -> None:
        """End the process at once, from the watching thread: nothing is being written (no save
        runs in "defer" mode), the locks are removed, and a line says what is kept."""
        said = _("{signal} again: the step still running did not end within {seconds} s, so the "
                 "run ended at once; {kept}")  # fmt: skip
        kept = self.kept() if self.kept is not None else _("this run saved nothing")
        line = said.format(signal=signal_name(first), seconds=f"{STUCK_STEP_SECONDS:g}", kept=kept)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.write(2, ("\n" + line + "\n").encode())
        for path in list(_HELD_LOCKS):
            _remove(path)
        os._exit(exit_code(first))

    def take_early(self) -> None:
        """Handle, in this mode, the stop signals that arrived during the imports."""
        early = _early_signals()
        while early and self._previous:
            signum = early.pop(0)
            if signum in self._previous:
                self._handle(signum, None)

    def __exit__(self, *exc) -> None:
        if self._watch is not None:
            reader, writer, before = self._watch
            signal.set_wakeup_fd(before)
            writer.close()
            reader.close()
            self._watch = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


class StopAtStepBoundary(StopSignals):
    """While active, Ctrl-C, SIGTERM and SIGHUP ask the run to stop instead of raising
    KeyboardInterrupt mid-step; `requested()` is what `TrainingRun.train` polls."""

    def __init__(self, say: Callable[[str], None] = print) -> None:
        super().__init__(say, mode="defer")


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
        said = _("note: the run was saved on {where} and continues on {device}: dropout draws "
                 "differ from the run that never stopped")  # fmt: skip
        where = "CUDA" if saved_cuda is not None else _("a CPU")
        return said.format(where=where, device=device.type)
    return None


# -- the run ----------------------------------------------------------------------------------------

CLIP = 1.0  # the global gradient norm is clipped to 1.0, as `gptlib.train.train` does by default
EVAL_BATCHES = 10  # batches of each validation loss during training, as in `train`


class TrainingRun:
    """The command line's training: steps `start` .. `settings["steps"] - 1` of one schedule, each
    of them `gptlib.train.train_step`, the step notebook 10 teaches, with what a long run adds:

    - the forward pass through DistributedDataParallel under torchrun, `torch.compile`
      (`compile`) and autocast (`dtype`, e.g. torch.bfloat16); the weights stay float32;
    - each rank's windows from its own generator (`distributed.rank_seed`): the ranks' batches
      together are the global batch, and DDP averages their gradients;
    - `resume` puts back a saved run's step, history, optimiser state and random states, so the
      steps that follow are those of the run that never stopped;
    - a stop asked for by a signal, polled after each step, never inside one (`train`);
    - a non-finite loss or gradient norm raised as `Diverged` before the update that would spread
      it; `states_to_save` then gives the random states after the last finished step.
    """

    def __init__(self, model, corpus, settings, ranks, device, *, compile=False, dtype=None):
        self.model, self.corpus, self.settings = model, corpus, settings
        self.ranks, self.device, self.compile, self.dtype = ranks, device, compile, dtype
        self.optimizer = make_optimizer(model, settings["lr"])
        seed = distributed.rank_seed(settings["seed"], ranks.rank)
        self.batches = torch.Generator().manual_seed(seed)
        self.start, self.step, self.history = 0, 0, History()
        self.total = settings["steps"]
        self.kept = random_states(self.batches, device)
        # The last state whose validation loss was healthy (see `healthy`), in CPU memory, kept
        # for a divergence to fall back on; a single process only (under torchrun a divergence
        # saves nothing).
        self.healthy: dict | None = None
        self.left = False  # a training loss has left its range

    @property
    def done(self) -> int:
        """The steps finished so far, the ones before this run's included."""
        return self.history.step[-1] + 1 if self.history.step else self.start

    def resume(self, ck) -> str | None:
        """Continue the run saved in the checkpoint `ck`; a note when its random states do not
        all apply here (another number of processes, another kind of device), else None."""
        self.start, self.history = ck.step, ck.history
        self.optimizer.load_state_dict(ck.optimizer_state)
        states = ck.training["rng"]
        if isinstance(states, dict):  # older checkpoints: one list per kind of state
            kinds = zip(states["batches"], states["torch"], strict=True)
            states = [{"batches": b, "torch": t} for b, t in kinds]
        if len(states) != self.ranks.world_size:
            said = _("note: the run had {before} process(es), this one has {now}: windows are "
                     "drawn afresh from the seed")  # fmt: skip
            return said.format(before=len(states), now=self.ranks.world_size)
        return restore_random_states(states[self.ranks.rank], self.batches, self.device)

    def reseed(self, seed: int) -> None:
        """Draw the windows and dropout afresh from `seed` (a resumed run given a new --seed)."""
        torch.manual_seed(seed)
        self.batches.manual_seed(distributed.rank_seed(seed, self.ranks.rank))

    def lr(self, step: int) -> float:
        """Warmup, then the schedule down to a tenth of the peak at the run's last step."""
        s = self.settings
        return learning_rate(step, s["lr"], s["warmup"], self.total, s["schedule"], s["lr"] / 10)

    def train(self, should_stop: Callable[[], bool], on_step=None) -> History:
        """Run the steps left, calling `on_step(history)` after each; stop after a step once
        `should_stop()` says so (then `history.interrupted`). Only rank 0 measures the
        validation loss."""
        s, model, hist, last = self.settings, self.model, self.history, self.total - 1
        tokens = self.corpus.train.to(self.device)
        val = self.corpus.val.to(self.device) if self.ranks.is_main else None
        forward = self._forward()
        hook = self.optimizer.register_step_pre_hook(self._finite_gradients)
        hist.clip, hist.interrupted = CLIP, False
        self.kept = random_states(self.batches, self.device)
        model.train()
        try:
            for step in range(self.start, self.total):
                self.step = step
                B, T = s["batch_size"], model.cfg.block_size
                idx, labels = sample_batch(tokens, B, T, self.batches, self.device)
                if idx.dtype != torch.long:  # a large text's compact tokens (`cli._load`)
                    idx, labels = idx.long(), labels.long()
                lr = self.lr(step)
                step_out = train_step(
                    model, self.optimizer, idx, labels, lr, CLIP, step=step, forward=forward
                )
                hist.record(step, lr, *step_out)
                evaluated = val is not None and (step % s["eval_every"] == 0 or step == last)
                if evaluated:
                    hist.record_val(step, mean_loss(model, val, B, EVAL_BATCHES))
                self.kept = random_states(self.batches, self.device)  # kept if the next diverges
                loss = hist.loss[-1]
                if not math.isfinite(loss) or loss > math.log(self.corpus.vocab_size) + 1.0:
                    self.left = True  # out of range: no later state of this run counts as healthy
                if evaluated and self.ranks.world_size == 1 and self.is_healthy(hist.val_loss):
                    self._keep_healthy(step + 1, hist.val_loss[-1])
                if on_step is not None:
                    on_step(hist)
                if step < last and should_stop():  # under torchrun, every rank polls here
                    hist.interrupted = True
                    break
        finally:
            hook.remove()
        return hist

    def is_healthy(self, val_losses: list[float]) -> bool:
        """A validation loss (the last of `val_losses`) is healthy when it is finite, no worse
        than a uniform guess over the vocabulary (ln V) by more than HEALTHY_MARGIN, no worse
        than the best one before it by more than HEALTHY_MARGIN, and no training loss of this
        run has left its range so far (worse than ln V by more than a nat): a model that blew up
        and collapsed into a uniform guess, or into repeating one character, is finite but not
        healthy."""
        *before, val = val_losses
        if (
            self.left
            or not math.isfinite(val)
            or val > math.log(self.corpus.vocab_size) + HEALTHY_MARGIN
        ):
            return False
        best = min((v for v in before if math.isfinite(v)), default=math.inf)
        return val <= best + HEALTHY_MARGIN

    def _keep_healthy(self, done: int, val_loss: float) -> None:
        hist = self.history
        self.healthy = {
            "done": done,
            "val_loss": val_loss,
            "model": _cpu_copy(self.model.state_dict()),
            "optimizer": _cpu_copy(self.optimizer.state_dict()),
            "rng": self.kept,
            "lengths": (len(hist.step), len(hist.val_step)),
        }

    def keep_start_as_healthy(self) -> None:
        """The resumed state is the healthy one to fall back on until an evaluation is."""
        if self.ranks.world_size == 1:
            self.healthy = {"done": self.start, "val_loss": None, "model": None}

    def back_to_healthy(self) -> bool:
        """Put back the last healthy state (weights, optimiser, random states, history); False
        when there is none newer than the start of this run."""
        kept = self.healthy
        if kept is None or kept["model"] is None:
            return False
        self.model.load_state_dict(kept["model"])
        self.optimizer.load_state_dict(kept["optimizer"])
        self.kept = kept["rng"]
        n, m = kept["lengths"]
        hist = self.history
        for name in ("step", "lr", "loss", "grad_norm"):
            del getattr(hist, name)[n:]
        del hist.val_step[m:], hist.val_loss[m:]
        return True

    def left_range(self, diverged: Diverged) -> tuple[int, float, float]:
        """(step, loss, lr): the first step after the last healthy state whose training loss was
        out of range (not finite, or worse than a uniform guess, ln V, by more than a nat), at
        the rate the schedule gave it; the diverging step itself when none was before it."""
        since = self.healthy["done"] if self.healthy is not None else self.start
        ceiling = math.log(self.corpus.vocab_size) + 1.0
        hist = self.history
        for step, loss, lr in zip(hist.step, hist.loss, hist.lr, strict=True):
            if step >= since and (not math.isfinite(loss) or loss > ceiling):
                return step, loss, lr
        return diverged.step, diverged.value, self.lr(diverged.step)

    def _forward(self):
        """The module the forward pass runs through: DDP, compiled, under autocast."""
        forward = distributed.wrap(self.model, self.ranks, self.device)
        if self.compile:
            forward = torch.compile(forward)
        if self.dtype is None:
            return forward
        device_type, dtype = self.device.type, self.dtype

        def autocast(idx, labels):
            with torch.autocast(device_type, dtype=dtype):
                return forward(idx, labels)

        return autocast

    def _finite_gradients(self, optimizer, args, kwargs) -> None:
        """Before each update: a finite loss can still overflow its gradients, and a step taken
        with them would make every weight NaN."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
        if not torch.isfinite(norm):
            lr = optimizer.param_groups[0]["lr"]
            raise Diverged(self.step, norm.item(), lr, what="gradients")

    def states_to_save(self, diverged: bool) -> list[dict]:
        """Every rank's random states, in rank order; after a divergence, this rank's after the
        last finished step (a single process: under torchrun nothing is saved then)."""
        if diverged:
            return [self.kept]
        return distributed.gather(random_states(self.batches, self.device))

    def save(self, out, summary, states, *, overwrite=False, with_optimizer=True) -> str:
        """Save everything `--resume` needs and return the path written: `out`, or, if a file
        appeared at `out` during the run and may not be replaced, the first free `OUT-N.pt`
        beside it (the run's work is kept either way)."""
        s, corpus = self.settings, self.corpus
        fingerprint = corpus_fingerprint(corpus)
        training = {
            "settings": s,
            "corpus": {"name": corpus.name, "reading": corpus.reading,
                       "vocab_size": corpus.vocab_size, "fingerprint": fingerprint},
            "world_size": self.ranks.world_size,
            "rng": states,
        }  # fmt: skip
        extra = {"data": s["data"], "preset": s["preset"], **summary}
        optimizer = self.optimizer if with_optimizer else None
        stem, ext = os.path.splitext(out)
        for path in [out, *(f"{stem}-{n}{ext or '.pt'}" for n in range(1, 1000))]:
            try:
                save_checkpoint(path, self.model, corpus.tokenizer, optimizer, self.done,
                                self.history, extra=extra, training=training,
                                overwrite=overwrite and path == out)  # fmt: skip
                return path
            except FileExistsError:
                continue
        raise CheckpointError(f"could not find a free name beside {out!r} to save the run")


def mean_loss(model, tokens: torch.Tensor, batch_size: int, n_batches: int, seed=1234) -> float:
    """`gptlib.train.estimate_loss`, also for tokens kept in a smaller integer type than the
    model reads (a large text read by the command line): the same windows, made long integers
    one batch at a time."""
    if tokens.dtype == torch.long:
        return estimate_loss(model, tokens, batch_size, n_batches, seed)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        losses = [
            model(idx.long(), labels.long())[1].item()
            for idx, labels in eval_batches(model, tokens, batch_size, n_batches, seed)
        ]
    model.train(was_training)
    return sum(losses) / len(losses)


def corpus_fingerprint(corpus, chunk: int = 1 << 20) -> str:
    """`corpus.fingerprint()`, the same hash, read a million tokens at a time: the whole-stream
    copy it makes would double the memory of a large text's tokens at each save."""
    h = hashlib.sha256(repr(corpus.tokenizer.to_dict()).encode())
    for stream in (corpus.train, corpus.val):
        for start in range(0, stream.numel(), chunk):
            h.update(stream[start : start + chunk].to(torch.int64).cpu().numpy().tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


HEALTHY_MARGIN = 0.5  # nats: how much worse than the best, or than ln V, is still healthy


def _cpu_copy(value):
    """A copy of a state dict (nested dicts and lists of tensors) on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _cpu_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu_copy(v) for v in value)
    return value


# -- what a run needs -----------------------------------------------------------------------------


def training_memory(cfg, batch_size: int) -> int:
    """A lower bound, in bytes, on the memory one training step of `cfg` at `batch_size` holds:
    the weights with their gradients and AdamW's two moments (16 bytes a parameter), the
    activations autograd keeps for the backward pass, at least 10 floats per position and
    feature in every block, and, for the written-out attention, one B x h x T x T table of
    attention weights per block plus the one being computed; and the logits with their log-softmax.
    A step needs more than this (temporary tensors, the allocator's slack); never less."""
    B, T, d, L = batch_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    need = 16 * parameter_formula(cfg) + L * 10 * B * T * d * 4 + 2 * B * T * cfg.vocab_size * 4
    if cfg.attention == "manual":
        need += (L + 1) * B * cfg.n_head * T * T * 4
    return need


def available_memory(device: torch.device) -> int | None:
    """Bytes free for a run on `device` (None where it cannot be told): on CUDA the device's free
    memory, on a CPU the memory the operating system says it can still give."""
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except RuntimeError:
            return None
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def readable_size(n: float) -> str:
    """`n` bytes in words: 7.2 GB."""
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def check_memory(cfg, batch_size: int, device: torch.device) -> None:
    """Refuse, before any work, a run whose step cannot fit in the memory `device` has free."""
    have = available_memory(device)
    need = training_memory(cfg, batch_size)
    if have is None or need <= have:
        return
    attention = (
        f"; the attention weights alone are {cfg.n_layer + 1} x B x h x T x T = "
        f"{readable_size((cfg.n_layer + 1) * batch_size * cfg.n_head * cfg.block_size**2 * 4)} "
        "(--attention sdpa does not keep them)"
        if cfg.attention == "manual"
        else ""
    )
    raise ValueError(
        f"a training step with --batch-size {batch_size} and block_size {cfg.block_size} needs "
        f"at least {readable_size(need)} and {device} has {readable_size(have)} free{attention}; lower "
        "--batch-size or --block-size"
    )


def check_space(out: str, need: int) -> None:
    """Refuse, in one line, a save that the file system of `out` has no room for."""
    free = free_bytes(out)
    if free is not None and free < need:
        raise ValueError(no_space(out, need, free))


def no_space(out: str, need: int, free: int) -> str:
    said = _("not enough space for the checkpoint in {folder}: it needs about {need} bytes and "
             "{free} bytes are free; free some space, or pass --out in another folder")  # fmt: skip
    return said.format(folder=existing_folder(out), need=f"{need:,}", free=f"{free:,}")


def step_flops(cfg, batch_size: int) -> float:
    """The arithmetic of one training step: forward and backward through every weight (6 flops a
    parameter a position) and through the attention scores (12 L T^2 d a window)."""
    B, T, d, L = batch_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    return 6.0 * parameter_formula(cfg) * B * T + 12.0 * L * B * T * T * d


def measured_rate(device: torch.device) -> float:
    """Floating-point operations a second that `device` does here and now, from a few products
    of 256 x 256 matrices (a step runs at this rate at best)."""
    n = 256
    a = torch.randn(n, n, device=device)
    a @ a  # the first product pays for start-up
    _synchronize(device)
    runs, begin = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - begin < 0.02:
        a @ a
        runs += 1
    _synchronize(device)
    return 2.0 * n**3 * runs / max(time.perf_counter() - begin, 1e-9)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_step_time(cfg, batch_size: int, device: torch.device, most: float) -> float:
    """The seconds one step is expected to take at least (its arithmetic at the rate this device
    measures); refused, before any work, above `most` (--max-step-seconds)."""
    seconds = step_flops(cfg, batch_size) / measured_rate(device)
    if seconds > most:
        said = _("one training step with --batch-size {batch_size} and block_size {block} is "
                 "expected to take about {seconds} s on {device} ({flops} floating-point "
                 "operations at the {rate} a second measured here), more than --max-step-seconds "
                 "{most:g}; lower --block-size or --batch-size, or pass a larger "
                 "--max-step-seconds")  # fmt: skip
        raise ValueError(
            said.format(
                batch_size=batch_size,
                block=cfg.block_size,
                seconds=f"{seconds:,.0f}",
                device=device,
                flops=f"{step_flops(cfg, batch_size):.2g}",
                rate=f"{measured_rate(device):.2g}",
                most=most,
            )
        )
    return seconds
