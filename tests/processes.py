"""What the test files that run the command line as a real process share."""

import re
import signal
import time


def as_from_a_terminal():
    """A Popen `preexec_fn`: the stop signals at their defaults in the child, as when a command is
    typed in a terminal. A background job of a script starts with SIGINT and SIGQUIT ignored, and
    under nohup SIGHUP too; the child would inherit that, and the command line rightly keeps a
    signal its process was started with ignored, so a test sending it would wait for nothing."""
    for name in ("SIGINT", "SIGQUIT", "SIGHUP", "SIGTERM"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def wait_for_line(proc, pattern, timeout=120):
    """Read the process's stdout until a line matches `pattern`; return the lines read. Fails,
    showing what was read, when the output ends or `timeout` seconds pass first."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no line matching {pattern!r} in {lines}")
