"""Ctrl-C, SIGTERM, SIGHUP and SIGQUIT over a whole command of `python -m gptlib`: at start-up they
stop it with nothing written, in training they stop it after the current step, while the
checkpoint is written they wait for the save (`StopSignals`).

Why Ctrl-C is deferred in training: a KeyboardInterrupt raised in the middle of a step lands after
the batch was drawn (the generator moved on) but before the optimiser stepped, so the saved random
state and the saved weights would disagree and a resumed run would not be the run that never
stopped. A step is either done, or it never happened."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from gptlib.commandline import distributed
from gptlib.language import _

# The files to remove if the process has to end at once (a second Ctrl-C in a step that does not
# end): the locks that claim a checkpoint's path (`gptlib.commandline.claim`), while they are held.
HELD_LOCKS: list[str] = []


EXIT_INTERRUPTED = 130  # what a shell reports for a program stopped by Ctrl-C (128 + SIGINT)


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


def stop_name(e: BaseException) -> str:
    """The name of the signal a `Stopped` (or a plain KeyboardInterrupt: Ctrl-C) was raised for."""
    return signal_name(getattr(e, "signum", signal.SIGINT))


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
        for path in list(HELD_LOCKS):
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
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
