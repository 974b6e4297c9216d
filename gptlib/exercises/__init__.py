"""Exercises with checks: each `check_*` runs the reader's function on random inputs, compares it
with the reference solution, and on a mismatch names the likely mistake.

One submodule per notebook; every name a submodule lists in `__all__` is re-exported here, so a
notebook writes `from gptlib.exercises import check_pre_norm_block`, and
`show_solution(check_pre_norm_block)` prints the reference solution. A name that is also a
submodule's stays the submodule: `progress` is `gptlib.exercises.progress`, whose function is
`from gptlib.exercises.progress import progress`.
"""

import importlib
import pkgutil

from gptlib.exercises.checking import CheckResult, compare, not_written, show_solution, solved_by

__all__ = ["CheckResult", "compare", "not_written", "show_solution", "solved_by"]

_SUBMODULES = [info.name for info in pkgutil.iter_modules(__path__)]
for _submodule in _SUBMODULES:
    _module = importlib.import_module(f"{__name__}.{_submodule}")
    for _name in getattr(_module, "__all__", []):
        if _name in _SUBMODULES:  # one name, one thing: the submodule keeps its name
            continue
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
