"""Notebook 15 exercises: the merge step of byte-pair encoding, and (optional) the trainer.

The reader writes `merge(ids, pair, new_id)`: walk the list left to right and replace every
occurrence of the adjacent pair (a, b) by new_id, consuming both; elsewhere keep the id. In a run
such as a a a with pair (a, a), the first two merge and the third stays: [new, a].

Optional: `learn_merges(ids, num_merges, merge)` learns merges from one list of byte ids the way
`gptlib.bpe.train_bpe` does inside one piece: count every adjacent pair, merge the most frequent
(ties to the smallest (a, b)) under the next id from 256, count again, and stop early only when
one id is left. It returns the merges in order, [((a, b), new_id), ...].
"""

from __future__ import annotations

import torch

from gptlib.bpe import bytes_to_unicode
from gptlib.exercises.checking import CheckResult, compare, solved_by

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


# ---------------------------------------------------------------------------------------------
# Optional: the trainer, `learn_merges(ids, num_merges, merge)`.


def solution_learn_merges(ids: list[int], num_merges: int, merge) -> list:
    """ids: list of byte ids 0..255; num_merges: int; merge(ids, pair, new_id) -> list
    -> the merges in the order learned: [((a, b), new_id), ...], new ids 256, 257, ..."""
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


# Real text for some trials, as GPT-2's byte ids (the order of bytes_to_unicode).
_TEXT = (
    "emma olivia ava isabella sophia mia amelia harper evelyn abigail emily ella elizabeth "
    "anna annabelle hannah joanna marianne A language model cuts a text into tokens and predicts "
    "each next token from the ones before it. banana bandana aaaa bbbb aaab"
)
_BYTE_ID = {b: i for i, b in enumerate(bytes_to_unicode())}


def _learn_inputs(g: torch.Generator):
    kind = int(torch.randint(0, 4, (1,), generator=g))
    if kind == 0:  # a stretch of real text
        n = int(torch.randint(30, 90, (1,), generator=g))
        start = int(torch.randint(0, len(_TEXT) - n, (1,), generator=g))
        ids = [_BYTE_ID[b] for b in _TEXT[start : start + n].encode("utf-8")]
        return ids, int(torch.randint(4, 10, (1,), generator=g)), solution_merge
    # A few distinct byte ids, so that ties and runs (a a a) are common.
    alphabet = torch.randperm(256, generator=g)[: int(torch.randint(2, 5, (1,), generator=g))]
    n = (
        int(torch.randint(4, 9, (1,), generator=g))
        if kind == 1
        else int(torch.randint(12, 40, (1,), generator=g))
    )
    ids = alphabet[torch.randint(0, len(alphabet), (n,), generator=g)].tolist()
    if kind == 2:
        ids[3:6] = [ids[3]] * 3  # a run of three
    # kind 1: a short list and more merges than it holds pairs; it ends as one id
    num_merges = n + 2 if kind == 1 else int(torch.randint(3, 9, (1,), generator=g))
    return ids, num_merges, solution_merge


def _pair_counts(ids):
    counts: dict = {}
    for pair in zip(ids, ids[1:], strict=False):
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def _learner(pick, first_id=lambda ids, k: 256 + k, counts_of=_pair_counts, stop_at=1):
    """A trainer that differs from the reference in one place: how the pair is picked among the
    counts, the new id, how pairs are counted, or the count below which it stops."""

    def learn(ids, num_merges, merge):
        ids, merges = list(ids), []
        for k in range(num_merges):
            counts = counts_of(ids)
            if not counts or max(counts.values()) < stop_at:
                break
            best, new_id = pick(counts), first_id(ids, k)
            ids = merge(ids, best, new_id)
            merges.append((best, new_id))
        return merges

    return learn


def _smallest(counts):
    return max(counts, key=lambda p: (counts[p], -p[0], -p[1]))


def _non_overlapping_counts(ids):
    counts: dict = {}
    last: dict = {}
    for i, pair in enumerate(zip(ids, ids[1:], strict=False)):
        if last.get(pair) == i - 1:
            continue  # the second (a, a) of a a a overlaps the first: not counted
        counts[pair] = counts.get(pair, 0) + 1
        last[pair] = i
    return counts


def _counted_once(ids, num_merges, merge):
    counts = _pair_counts(list(ids))
    order = sorted(counts, key=lambda p: (-counts[p], p))[:num_merges]
    merges = []
    for k, pair in enumerate(order):
        ids = merge(list(ids), pair, 256 + k)
        merges.append((pair, 256 + k))
    return merges


LEARN_MISTAKES = [
    (
        "at a tie between equally frequent pairs yours took the pair that occurs first in the "
        "list; the rule stated for the trainer picks by the pairs' ids instead",
        _learner(lambda c: max(c, key=c.get)),
    ),
    (
        "at a tie between equally frequent pairs yours took the pair with the largest ids; the "
        "stated rule picks the smallest",
        _learner(lambda c: max(c, key=lambda p: (c[p], p))),
    ),
    (
        "your merges part from the reference where a run such as a a a decides: your counts give "
        "the run one (a, a), the way a merge would use it; counting adjacent positions gives it "
        "two",
        _learner(_smallest, counts_of=_non_overlapping_counts),
    ),
    (
        "the pairs are right, in order, but your new ids are one higher than the reference's: "
        "your first merge got id 257",
        _learner(_smallest, first_id=lambda ids, k: 257 + k),
    ),
    (
        "the pairs are right, in order, but your new ids follow the largest id in the list "
        "(max(ids) + 1), so they depend on the text; the vocabulary's ids for merges are its "
        "own range, after the 256 bytes",
        _learner(_smallest, first_id=lambda ids, k: max(ids) + 1),
    ),
    (
        "your first merge is right, the later ones are not: they follow the counts of the list "
        "as it was before any merge, so a pair a merge used up or made still has its old count",
        _counted_once,
    ),
    (
        "your list of merges is shorter than the reference's: it stopped when the most frequent "
        "pair occurred only once, where the trainer goes on until num_merges merges are made "
        "or a single id is left",
        _learner(_smallest, stop_at=2),
    ),
]

LEARN_ERROR_HINTS = [
    (
        "empty sequence",
        "it happened after the list had been merged down to a single id, where there is no "
        "pair left to count, with merges still to make",
    ),
    (
        "iterable argument is empty",
        "it happened after the list had been merged down to a single id, where there is no "
        "pair left to count, with merges still to make",
    ),
]


def _as_merges(learn):
    """Run a trainer and read its merges as a [k, 3] tensor of (a, b, new_id), together with the
    list the merges make of its input, replayed with the course's merge (the encoded result)."""

    def run(ids, num_merges, merge):
        out = learn(list(ids), num_merges, merge)
        if not isinstance(out, (list, tuple)):
            raise TypeError(
                f"it returned a {type(out).__name__}; learn_merges returns the list of merges, "
                "[((a, b), new_id), ...]"
            )
        rows = []
        for entry in out:
            try:
                (a, b), new_id = entry
                rows.append([int(a), int(b), int(new_id)])
            except (TypeError, ValueError):
                raise TypeError(
                    f"one of the merges it returned is {entry!r}, not ((a, b), new_id)"
                ) from None
        encoded = list(ids)
        for a, b, new_id in rows:
            encoded = solution_merge(encoded, (a, b), new_id)
        return torch.tensor(rows, dtype=torch.long).view(-1, 3), torch.tensor(encoded)

    return run


@solved_by(solution_learn_merges)
def check_learn_merges(learn_merges) -> CheckResult:
    """Run `learn_merges(ids, num_merges, merge)` on random byte-id lists (with ties, runs and
    lists that end as one id) and stretches of real text; `merge` is the course's."""
    return compare(
        "learn_merges",
        _as_merges(learn_merges),
        _as_merges(solution_learn_merges),
        _learn_inputs,
        mistakes=[(hint, _as_merges(fn)) for hint, fn in LEARN_MISTAKES],
        trials=10,
        error_hints=LEARN_ERROR_HINTS,
        grads=False,
    )
