"""Exercises with checks: each `check_*` runs the reader's function on random inputs, compares it
with the reference solution, and on a mismatch names the likely mistake.

One submodule per notebook; every name a submodule lists in `__all__` is re-exported here, so a
notebook writes `from gptlib.exercises import check_pre_norm_block`, and
`show_solution(check_pre_norm_block)` prints the reference solution.
"""

import importlib
import pkgutil

from gptlib.exercises.checking import CheckResult, compare, not_written, show_solution, solved_by

__all__ = ["CheckResult", "compare", "not_written", "show_solution", "solved_by"]

for _info in pkgutil.iter_modules(__path__):
    if _info.name == "checking":
        continue
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name in getattr(_module, "__all__", []):
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
