"""What the test files that run the command line as a real process share."""

import re
import time


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
