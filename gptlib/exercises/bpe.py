"""Notebook 15 exercise: the merge step of byte-pair encoding.

The reader writes `merge(ids, pair, new_id)`: walk the list left to right and replace every
occurrence of the adjacent pair (a, b) by new_id, consuming both; elsewhere keep the id. In a run
such as a a a with pair (a, a), the first two merge and the third stays: [new, a].
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_merge", "solution_merge"]


def solution_merge(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """ids: list of n ints; pair: (a, b); new_id: int -> list of at most n ints."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)  # the pair becomes one symbol ...
            i += 2  # ... and both of its ids are used up
        else:
            out.append(ids[i])
            i += 1
    return out


def _inputs(g: torch.Generator):
    # Few distinct ids, so pairs repeat and runs like a a a occur; new_id is above them all.
    n = int(torch.randint(6, 16, (1,), generator=g))
    ids = torch.randint(0, 3, (n,), generator=g).tolist()
    ids[2:5] = [1, 1, 1]  # always a run of three: the overlapping case
    pair = (1, 1) if int(torch.randint(0, 2, (1,), generator=g)) else (ids[0], ids[1])
    return ids, pair, 256


def _first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2 :]
    return list(ids)


def _kept_second(ids, pair, new_id):
    out = []
    for i, x in enumerate(ids):
        out.append(new_id if (i + 1 < len(ids) and (x, ids[i + 1]) == pair) else x)
    return out


def _overlapping(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 1
            if i + 1 >= len(ids) or (ids[i], ids[i + 1]) != pair:
                i += 1
        else:
            out.append(ids[i])
            i += 1
    return out


def _from_the_right(ids, pair, new_id):
    return solution_merge(ids[::-1], pair[::-1], new_id)[::-1]


def _last_dropped(ids, pair, new_id):
    # A loop over i < len(ids) - 1, so that ids[i + 1] always exists: the last id is never seen.
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


MISTAKES = [
    (
        "only the first occurrence of the pair was merged; the later ones are still in your list, "
        "and a merge replaces every occurrence",
        _first_only,
    ),
    (
        "the second id of each pair is still there: where the pair occurs your list holds new_id "
        "followed by the pair's second id, so it is as long as the input; a merge uses up both ids "
        "of the pair",
        _kept_second,
    ),
    (
        "in a run like a a a with pair (a, a) the middle a was used by two merges: your list holds "
        "[new, new] where the run has room for one merge and one leftover a",
        _overlapping,
    ),
    (
        "the list was scanned from the right: in a run like a a a your result is [a, new]; the left "
        "pair merges first, giving [new, a]",
        _from_the_right,
    ),
    (
        "the last id of the list is missing from your result when it is not the end of a merged "
        "pair: the loop stopped one id early",
        _last_dropped,
    ),
]


def _as_list(merge):
    """Run the reader's function and insist on a list of ints (a tuple is read as one)."""

    def run(ids, pair, new_id):
        out = merge(list(ids), pair, new_id)
        if isinstance(out, tuple):
            out = list(out)
        if not isinstance(out, list):
            raise TypeError(f"return a list of ints, got {type(out).__name__}")
        return out

    return run


@solved_by(solution_merge)
def check_merge(merge) -> CheckResult:
    """Run `merge(ids, pair, new_id)` on random short id lists with runs of a repeated id."""
    return compare("merge", _as_list(merge), solution_merge, _inputs, mistakes=MISTAKES, trials=6)
