import os
import sys

from gptlib.commandline import distributed
from gptlib.commandline.cli import main

code = main()
if distributed.launched_by_torchrun():
    # A rank under torchrun has already saved its work and left the process group. Skipping the
    # interpreter's shutdown avoids a C++ thread of the communication library being torn down
    # at exit, which now and then aborted a finished rank (SIGABRT, "terminate called without
    # an active exception") and made torchrun report the whole run as failed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
