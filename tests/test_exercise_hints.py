"""`hint(check_x)`: one step per call, the texts of steps 1 and 2 free of the solution's code, and
step 3 the reference solution as `show_solution` prints it."""

import inspect
import re

import pytest

import gptlib.exercises as ex
from gptlib.exercises import hints
from gptlib.exercises.checking import _helpers_of
from gptlib.exercises.progress import EXERCISES

CHECKS = sorted(name for name in ex.__all__ if name.startswith("check_"))


@pytest.fixture(autouse=True)
def fresh_counters(monkeypatch):
    monkeypatch.setattr(hints, "_shown", {})


def _code_lines(solution) -> set[str]:
    """The lines of a solution (and of the helpers show_solution prints with it), comments and
    docstrings left out, whitespace collapsed, trivial lines (`return x`, `i += 2`) dropped."""
    lines = set()
    for fn in [*_helpers_of(solution), solution]:
        in_docstring = False
        for raw in inspect.getsource(inspect.unwrap(fn)).splitlines():
            line = raw.strip()
            quotes = line.count('"""')
            if in_docstring or quotes:
                in_docstring = in_docstring != (quotes % 2 == 1)
                continue
            code = " ".join(line.split("#", 1)[0].split())
            if (
                len(code) < 12
                or code.startswith(("def ", "@", ")"))
                or re.fullmatch(r"return \w+", code)
            ):
                continue
            lines.add(code)
    return lines


def _step(check, step=None, capsys=None) -> str:
    ex.hint(check, step=step) if step else ex.hint(check)
    return capsys.readouterr().out


def test_hint_is_exported():
    assert "hint" in ex.__all__
    assert ex.hint is hints.hint


def test_the_table_has_one_entry_per_check():
    assert sorted(hints.HINTS) == CHECKS
    assert len(CHECKS) == len(EXERCISES)


@pytest.mark.parametrize("name", CHECKS)
def test_every_check_has_both_hint_steps(name):
    check = getattr(ex, name)
    assert callable(getattr(check, "solution", None))
    entry = hints.HINTS[name]
    assert len(entry.think) > 80, entry.think
    assert len(entry.steps) > 60, entry.steps
    assert entry.think != entry.steps


@pytest.mark.parametrize("name", CHECKS)
def test_hints_do_not_contain_the_solution_code(name):
    check = getattr(ex, name)
    code = _code_lines(check.solution)
    assert code, name  # the comparison has something to compare with
    for text in hints.HINTS[name]:
        flat = " ".join(text.split())
        leaked = [line for line in code if line in flat]
        assert not leaked, f"{name}: {leaked}"


@pytest.mark.parametrize("name", CHECKS)
def test_three_calls_give_steps_one_two_three(name, capsys):
    check = getattr(ex, name)
    first, second, third = (_step(check, capsys=capsys) for _ in range(3))
    assert first.startswith(f"Hint 1 of 3 for {name}: what to think about\n")
    assert second.startswith(f"Hint 2 of 3 for {name}: the shapes and the steps\n")
    assert third.startswith(f"Hint 3 of 3 for {name}: the solution\n")
    assert " ".join(first.split("\n", 1)[1].split()) == " ".join(hints.HINTS[name].think.split())
    assert " ".join(second.split("\n", 1)[1].split()) == " ".join(hints.HINTS[name].steps.split())
    ex.show_solution(check)
    solution = capsys.readouterr().out
    header, said, rest = third.split("\n", 2)
    assert "solution" in said
    assert rest == solution


def test_a_fourth_call_says_there_are_no_more(capsys):
    check = ex.check_causal_attention
    for _ in range(3):
        ex.hint(check)
    capsys.readouterr()
    ex.hint(check)
    out = capsys.readouterr().out
    assert "No more hints for check_causal_attention" in out
    assert "hint(check_causal_attention, step=1)" in out
    ex.hint(check)  # and it stays that way
    assert "No more hints" in capsys.readouterr().out


def test_a_given_step_is_shown_and_the_count_goes_on_from_it(capsys):
    check = ex.check_merge
    for _ in range(4):
        ex.hint(check)
    capsys.readouterr()
    ex.hint(check, step=1)
    assert capsys.readouterr().out.startswith("Hint 1 of 3 for check_merge")
    ex.hint(check)
    assert capsys.readouterr().out.startswith("Hint 2 of 3 for check_merge")
    ex.hint(check, step=3)
    assert capsys.readouterr().out.startswith("Hint 3 of 3 for check_merge")
    ex.hint(check)
    assert "No more hints" in capsys.readouterr().out


def test_the_count_is_per_check(capsys):
    ex.hint(ex.check_embed)
    ex.hint(ex.check_embed)
    capsys.readouterr()
    ex.hint(ex.check_mlp)
    assert capsys.readouterr().out.startswith("Hint 1 of 3 for check_mlp")
    ex.hint(ex.check_embed)
    assert capsys.readouterr().out.startswith("Hint 3 of 3 for check_embed")


def test_wrong_arguments_are_refused():
    with pytest.raises(TypeError, match="check_causal_attention"):
        ex.hint(print)
    with pytest.raises(ValueError, match="1, 2 or 3"):
        ex.hint(ex.check_embed, step=4)
