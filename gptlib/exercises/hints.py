"""Hints that come one step at a time: `hint(check_x)`.

Each call for the same check shows the next step:

1. what to think about: the idea, no code;
2. the shapes and the steps: each tensor's shape along the way and the order of the operations,
   still no code;
3. the reference solution, exactly what `show_solution(check_x)` prints.

A fourth call says there are no more hints. `hint(check_x, step=N)` shows step N (and the next
plain call continues from there), so `hint(check_x, step=1)` starts again. Each check keeps its
own count.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable

from gptlib.exercises.checking import show_solution
from gptlib.exercises.table import HINTS  # the texts live in the table, one record per exercise

__all__ = ["hint"]


TITLES = ("what to think about", "the shapes and the steps", "the solution")
LAST = len(TITLES)
WIDTH = 96
_shown: dict[str, int] = {}  # check name -> the last step shown


def _check_name(check: Callable) -> str:
    name = getattr(check, "__name__", None)
    if getattr(check, "solution", None) is None or name not in HINTS:
        raise TypeError(
            f"hint expects an exercise check such as check_causal_attention, got "
            f"{getattr(check, '__name__', check)!r}; pass the check_* function you called"
        )
    return name


def _print_wrapped(text: str) -> None:
    """Print `text` wrapped to WIDTH columns, never breaking a shape such as [B, h, n, d_h]."""
    for line in text.splitlines():
        kept = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\0"), line)
        indent = "   " if line[:1].isdigit() else ""
        print(
            textwrap.fill(kept, WIDTH, subsequent_indent=indent, break_on_hyphens=False).replace(
                "\0", " "
            )
        )


def hint(check: Callable, step: int | None = None) -> None:
    """Print the next hint for an exercise: `hint(check_causal_attention)`. The first call says
    what to think about, the second gives the shapes and the steps, the third prints the
    reference solution. `hint(check, step=N)` shows step N (1 to 3) and continues from there."""
    name = _check_name(check)
    if step is None:
        step = _shown.get(name, 0) + 1
        if step > LAST:
            print(
                f"No more hints for {name}: you have seen all {LAST}. "
                f"hint({name}, step=1) shows them again from the first."
            )
            return
    elif not isinstance(step, int) or not 1 <= step <= LAST:
        raise ValueError(f"step is 1, 2 or 3, got {step!r}")
    _shown[name] = step
    print(f"Hint {step} of {LAST} for {name}: {TITLES[step - 1]}")
    if step == 1:
        _print_wrapped(HINTS[name].think)
    elif step == 2:
        _print_wrapped(HINTS[name].steps)
    else:
        print(f"This is the reference solution; show_solution({name}) prints the same.")
        show_solution(check)
