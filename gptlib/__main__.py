import sys

from gptlib.cli import main

sys.exit(main())
