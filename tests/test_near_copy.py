"""No stored code cell, in either edition, holds an exercise's answer or something close to it
(tests/near_copy.py measures it): the page teaches the idea, the reader writes the code."""

import pytest
from near_copy import LIMIT, closest, normalised, reference_tokens, score

import gptlib.exercises as ex
from gptlib.exercises.progress import EXERCISES

# Near-copies still on the page, each with the change that removes it. The list only shrinks:
# a new near-copy fails, and so does an entry here that no longer is one.
KNOWN: dict[tuple[str, str], str] = {}


def _stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".ipynb")


@pytest.fixture(scope="module")
def found():
    return closest(top=8)


@pytest.mark.parametrize("check", [e.check for e in EXERCISES])
def test_no_stored_cell_holds_a_near_copy_of_the_answer(found, check):
    n, best = found[check]
    copies = [
        f"{nb} cell {i} ({s:.2f})"
        for s, nb, i in best
        if s >= LIMIT and (check, _stem(nb)) not in KNOWN
    ]
    assert not copies, (
        f"{check}: these stored cells hold {LIMIT:.0%} or more of its answer's {n} tokens, in "
        f"order: {', '.join(copies)}"
    )


@pytest.mark.parametrize("check, notebook", sorted(KNOWN))
def test_each_known_near_copy_is_still_one(found, check, notebook):
    _, best = found[check]
    assert any(s >= LIMIT and _stem(nb) == notebook for s, nb, _ in best), (
        f"{check} no longer has a near-copy in {notebook}: remove it from KNOWN"
    )


ANSWER_2D_CASE = """
S = Q @ K.T / math.sqrt(d_k)
future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
weights = S.masked_fill(future, float("-inf")).softmax(dim=-1)
out = weights @ V
"""

RENAMED = """
import math
print("something before")
def attend(a, b, c):
    T, D = a.shape[-2], a.shape[-1]
    s = a @ b.transpose(-2, -1) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
    return s.softmax(dim=-1) @ c
plot(attend(q, k, v))
"""


def test_the_answer_renamed_and_surrounded_is_caught():
    ref = reference_tokens(ex.check_causal_attention)
    assert score(ref, normalised(RENAMED)) >= LIMIT
    slip = RENAMED.replace("softmax(dim=-1)", "softmax(dim=-2)")  # the "slip" one token away
    assert score(ref, normalised(slip)) >= LIMIT


def test_a_genuinely_different_worked_case_is_not():
    """One head in 2-D, its mask handed in: the formula the exercise generalises."""
    ref = reference_tokens(ex.check_causal_attention)
    assert score(ref, normalised(ANSWER_2D_CASE)) < LIMIT


def test_names_do_not_matter_and_api_does():
    assert normalised("y = x.softmax(dim=-1)") == normalised("out = scores.softmax(dim=-1)")
    assert normalised("y = x.softmax(dim=-1)") != normalised("y = x.log_softmax(dim=-1)")
    assert normalised("y = F.relu(h)") != normalised("y = F.gelu(h)")


@pytest.mark.parametrize("check", [e.check for e in EXERCISES])
def test_every_answer_scores_itself_whole(check):
    ref = reference_tokens(getattr(ex, check))
    assert len(ref) >= 10 and score(ref, ref) == 1.0
