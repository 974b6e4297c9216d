"""Notebook 15, byte-pair encoding: `merge(ids, pair, new_id)` (a a a with (a, a) gives [new, a])
and, optional, `learn_merges(ids, num_merges, merge)`, train_bpe's loop on one list of byte ids."""

from functools import partial

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by
from gptlib.language import N_

__all__ = ["check_learn_merges", "check_merge", "solution_learn_merges", "solution_merge"]


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


def solution_learn_merges(ids: list[int], num_merges: int, merge) -> list:
    """ids: byte ids 0..255; merge(ids, pair, new_id) -> list; -> [((a, b), new_id), ...]."""
    ids, merges = list(ids), []
    for k in range(num_merges):
        counts: dict = {}
        for pair in zip(ids, ids[1:], strict=False):
            counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break  # a single id is left: there is no pair to merge
        best = max(counts, key=lambda p: (counts[p], -p[0], -p[1]))  # ties: smallest (a, b)
        ids = merge(ids, best, 256 + k)
        merges.append((best, 256 + k))
    return merges


def _merge(ids, pair, new_id, *, once=False, second=False, overlap=False, last=True):
    """merge with one switch flipped: every slip below is one row."""
    out, i, at = [], 0, lambda j: j + 1 < len(ids) and (ids[j], ids[j + 1]) == tuple(pair)
    while i < (len(ids) if last else len(ids) - 1):
        if at(i) and not (once and new_id in out):
            out.append(new_id)
            i += 1 if second or (overlap and at(i + 1)) else 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _learn(ids, num_merges, merge, *, first_seen=False, runs_once=False, recount=True):
    """learn_merges with one switch flipped: every slip below is one row."""
    ids, merges, counts = list(ids), [], {}
    for k in range(num_merges):
        if recount or k == 0:  # in the order the pairs first occur; runs_once: as merge uses them
            pairs, n = list(zip(ids, ids[1:], strict=False)), len(ids)
            counts = {p: n - len(solution_merge(ids, p, -1)) if runs_once else pairs.count(p)
                      for p in pairs}  # fmt: skip
        if not counts:
            break
        best = max(counts, key=lambda p, c=counts: c[p] if first_seen else (c[p], -p[0], -p[1]))
        ids = merge(ids, best, 256 + k)
        merges.append((best, 256 + k))
        counts.pop(best)  # without a recount, the next merge is the next best of the old counts
    return merges


def _text(ids, pair, new_id):  # the ids written out, the pair replaced in the text
    text = ",".join(map(str, ids)).replace(f"{pair[0]},{pair[1]}", str(new_id))
    return [int(t) for t in text.split(",")]


# fmt: off
MISTAKES = [
    (N_("only the first occurrence of the pair was merged; the later ones are still in your list"),
     partial(_merge, once=True)),
    (N_("where the pair occurs your list holds new_id followed by the pair's second id, so it is "
        "as long as the input: the second id was not used up"), partial(_merge, second=True)),
    (N_("in a run a a a with pair (a, a) the middle a was used by two merges: your list holds "
        "[new, new] where there is room for one merge and an a"), partial(_merge, overlap=True)),
    (N_("the last id of the list is missing from your result when it is not the end of a merged "
        "pair: the loop stopped one id early"), partial(_merge, last=False)),
    (N_("where two ids only look like the pair when written out ([11, 2] with pair (1, 2) reads "
        "\"11,2\", which holds \"1,2\") your list has an id that is neither: the pair was matched "
        "in the text of the ids, not as two whole ids"), _text),
]
LEARN_MISTAKES = [
    (N_("at a tie between equally frequent pairs yours took the pair that occurs first in the "
        "list; the rule stated for the trainer picks by the pairs' ids"),
     partial(_learn, first_seen=True)),
    (N_("your merges part from the reference where a run a a a decides: your counts give it one "
        "(a, a), as a merge uses it, not one per adjacent position"),
     partial(_learn, runs_once=True)),
    (N_("your first merge is right, the later ones are not: they follow the counts of the list as "
        "it was before any merge"), partial(_learn, recount=False)),
]
ONE_ID_LEFT = [(error, N_("it happened once the list was merged down to one id, with no pair "
                          "left"))
               for error in ("empty sequence", "iterable argument is empty")]
# fmt: on


def _inputs(g: torch.Generator):
    ids = torch.randint(0, 3, (int(torch.randint(6, 16, (1,), generator=g)),), generator=g)
    ids[2:5] = 1  # always a run of three: the overlapping case; few ids, so pairs repeat
    if g.initial_seed() % 3 == 2:  # ids whose digits spell the pair across two: 11, 2 and 1, 21
        ids = torch.tensor([1, 2, 11, 21, 12])[ids.tolist() + [2, 1, 4, 3, 1]]
        return ids.tolist(), (1, 2), 256
    pair = (1, 1) if int(torch.randint(0, 2, (1,), generator=g)) else tuple(ids[:2].tolist())
    return ids.tolist(), pair, 256


@solved_by(solution_merge)
def check_merge(merge) -> CheckResult:
    """Run `merge(ids, pair, new_id)` on random short id lists with runs of a repeated id."""
    as_list = lambda ids, pair, new_id: list(merge(ids, pair, new_id))  # noqa: E731
    return compare("merge", as_list, solution_merge, _inputs, MISTAKES, trials=6, grads=False)


def _as_merges(learn):
    def run(ids, num_merges, merge):  # the merges as [k, 3] (a, b, new_id), the ids they make
        rows = [[*pair, new_id] for pair, new_id in learn(list(ids), num_merges, merge)]
        for a, b, new_id in rows:
            ids = solution_merge(ids, (a, b), new_id)
        return torch.tensor(rows, dtype=torch.long).view(-1, 3), torch.tensor(ids)

    return run


def _learn_inputs(g: torch.Generator):
    n = int(torch.randint(4, 40, (1,), generator=g))
    alphabet = torch.randperm(256, generator=g)[: 2 + n % 3]  # few ids: ties and runs are common
    ids = alphabet[torch.randint(0, len(alphabet), (n,), generator=g)].tolist()
    ids[3:6] = ids[3:4] * 3  # a run of three
    if g.initial_seed() % 3 == 0:  # a stretch of real text, as bytes
        ids = list(b"emma olivia ava isabella sophia mia. A model predicts the next token."[n:])
    return ids, n + 2 if n < 9 else 3 + n % 7, solution_merge  # a short list ends as one id


@solved_by(solution_learn_merges)
def check_learn_merges(learn_merges) -> CheckResult:
    """Run `learn_merges(ids, num_merges, merge)` (`merge` the course's) on random byte ids."""
    mistakes = [(hint, _as_merges(fn)) for hint, fn in LEARN_MISTAKES]
    return compare("learn_merges", _as_merges(learn_merges), _as_merges(solution_learn_merges),
                   _learn_inputs, mistakes, 10, error_hints=ONE_ID_LEFT, grads=False)  # fmt: skip
