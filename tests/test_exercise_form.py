"""The form every exercise shares: a stub's check says 'not written yet' in one line, the
reference passes its own check, and `show_solution` prints that reference."""

import inspect

import pytest

import gptlib.exercises as ex
from gptlib.exercises.checking import not_written

CHECKS = sorted(name for name in ex.__all__ if name.startswith("check_"))


def _stub(*args, **kwargs):
    raise NotImplementedError


def test_every_notebook_has_checks():
    assert len(CHECKS) >= 12, CHECKS


@pytest.mark.parametrize("name", CHECKS)
def test_check_knows_its_solution(name):
    check = getattr(ex, name)
    solution = getattr(check, "solution", None)
    assert callable(solution), f"{name} has no @solved_by solution"


@pytest.mark.parametrize("name", CHECKS)
def test_reference_passes(name):
    check = getattr(ex, name)
    result = check(check.solution)
    assert result.passed, result.message
    assert result.message.startswith("✓")


@pytest.mark.parametrize("name", CHECKS)
def test_stub_gives_the_not_written_line(name):
    check = getattr(ex, name)
    result = check(_stub)
    assert not result.passed
    exercise = result.message.split(" ", 1)[0]
    assert exercise.isidentifier(), result.message
    assert result.message == not_written(exercise).message, result.message
    assert "\n" not in result.message


@pytest.mark.parametrize("name", CHECKS)
def test_show_solution_prints_the_reference(name, capsys):
    check = getattr(ex, name)
    ex.show_solution(check)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"# Reference solution checked by {name}")
    assert inspect.getsource(check.solution) in out
    compile(out, "<solution>", "exec")  # what is printed is valid Python


def test_show_solution_refuses_other_functions():
    with pytest.raises(TypeError, match="check_causal_attention"):
        ex.show_solution(print)


def test_not_written_line():
    assert (
        not_written("causal_attention").message
        == "causal_attention is not written yet: replace its body and run this cell again"
    )
