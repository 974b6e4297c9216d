"""`python -m gptlib ...`: a stop signal (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) that arrives while torch is
still being imported is kept in `received`, neither lost nor a traceback; `gptlib.commandline.signals.StopSignals`
handles it as soon as the command starts. Imported first by gptlib/__init__.py; does nothing when
the library is imported any other way (a notebook, a test, another program)."""

import signal
import sys

received: list[int] = []

_argv = getattr(sys, "orig_argv", [])
if any(a == "-m" and b == "gptlib" for a, b in zip(_argv, _argv[1:], strict=False)):
    for _name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"):
        _signum = getattr(signal, _name, None)
        if _signum is not None and signal.getsignal(_signum) is not signal.SIG_IGN:
            signal.signal(_signum, lambda signum, frame: received.append(signum))
