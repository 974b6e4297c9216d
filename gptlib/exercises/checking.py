"""The machinery every `check_*` function shares.

An exercise is stored as a stub whose body raises `NotImplementedError`; its check then says, in
one line, that it is not written yet (`not_written`). The reference solution is one deliberate
step away: `show_solution(check_x)` prints it (`solved_by` tells a check which function that is).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class CheckResult:
    """The outcome of a check; shows as its message in a notebook, and is truthy when passed."""

    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


def not_written(name: str) -> CheckResult:
    """What every check says about a stub that still raises NotImplementedError."""
    return CheckResult(
        False, f"{name} is not written yet: replace its body and run this cell again"
    )


def solved_by(solution: Callable) -> Callable[[Callable], Callable]:
    """Decorator for a check: `show_solution(check)` will print `solution`."""

    def decorate(check: Callable) -> Callable:
        check.solution = solution
        return check

    return decorate


def _helpers_of(fn: Callable) -> list[Callable]:
    """The module-level functions of `fn`'s own module that `fn` calls (first level and theirs),
    in the order they are defined, so the printed solution reads on its own."""
    module = inspect.getmodule(fn)
    found: dict[str, Callable] = {}

    def visit(f: Callable) -> None:
        f = inspect.unwrap(f)  # a @torch.no_grad() solution keeps its code on __wrapped__
        for name in f.__code__.co_names:
            obj = getattr(module, name, None)
            if (
                isinstance(obj, types.FunctionType)
                and obj.__module__ == fn.__module__
                and obj is not fn
                and name not in found
            ):
                found[name] = obj
                visit(obj)

    visit(fn)
    return sorted(found.values(), key=lambda f: f.__code__.co_firstlineno)


def show_solution(check: Callable) -> None:
    """Print the reference solution of an exercise: `show_solution(check_causal_attention)`."""
    solution = getattr(check, "solution", None)
    if solution is None:
        raise TypeError(
            f"show_solution expects an exercise check such as check_causal_attention, got "
            f"{getattr(check, '__name__', check)!r}; pass the check_* function you called"
        )
    print(f"# Reference solution checked by {check.__name__} ({solution.__module__})")
    for helper in _helpers_of(solution):
        print(inspect.getsource(helper))
    print(inspect.getsource(solution), end="")


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _close(a, b, atol: float, rtol: float) -> bool:
    a, b = _as_tuple(a), _as_tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if x.shape != y.shape:
            return False
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False
    return True


def with_error_hints(user_fn: Callable, hints: Sequence[tuple[str, str]]) -> Callable:
    """Wrap the reader's function: an error whose first line contains a known fragment gets the
    matching hint appended. `hints` is a list of (fragment, hint)."""

    def wrapped(*inputs):
        try:
            return user_fn(*inputs)
        except (RuntimeError, ValueError, IndexError) as e:
            first_line = str(e).splitlines()[0] if str(e) else ""
            for fragment, hint in hints:
                if fragment in first_line:
                    try:
                        explained = type(e)(f"{first_line}. Hint: {hint}")
                    except Exception:  # an exception class with another constructor
                        explained = RuntimeError(f"{first_line}. Hint: {hint}")
                    raise explained from None
            raise

    return wrapped


def compare(
    name: str,
    user_fn: Callable,
    reference_fn: Callable,
    make_inputs: Callable[[torch.Generator], tuple],
    mistakes: Sequence[tuple[str, Callable]] = (),
    trials: int = 3,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    error_hints: Sequence[tuple[str, str]] = (),
) -> CheckResult:
    """Run `user_fn` and `reference_fn` on `trials` seeded random inputs.

    `mistakes` pairs a hint with a wrong implementation: when the reader's output matches a
    wrong implementation (values and shape), that hint is the message. `error_hints` pairs a
    fragment of an error message with a hint added when the reader's function raises it.
    """
    if error_hints:
        user_fn = with_error_hints(user_fn, error_hints)
    for trial in range(trials):
        inputs = make_inputs(torch.Generator().manual_seed(1000 + trial))
        expected = reference_fn(*inputs)
        try:
            got = user_fn(*inputs)
        except NotImplementedError:
            return not_written(name)
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        if _close(got, expected, atol, rtol):
            continue
        # A known mistake names itself, whether it changed the values or the shape.
        for hint, wrong_fn in mistakes:
            try:
                wrong = wrong_fn(*inputs)
            except Exception:
                continue
            if _close(got, wrong, atol, rtol):
                return CheckResult(False, f"✗ {name}: {hint}")
        exp_t, got_t = _as_tuple(expected), _as_tuple(got)
        if len(exp_t) != len(got_t):
            return CheckResult(
                False, f"✗ {name}: returned {len(got_t)} value(s), expected {len(exp_t)}"
            )
        for e_, g_ in zip(exp_t, got_t, strict=True):
            e_shape, g_shape = tuple(torch.as_tensor(e_).shape), tuple(torch.as_tensor(g_).shape)
            if e_shape != g_shape:
                return CheckResult(
                    False, f"✗ {name}: output has shape {list(g_shape)}, expected {list(e_shape)}"
                )
        diff = max(
            float((torch.as_tensor(g_).double() - torch.as_tensor(e_).double()).abs().max())
            for e_, g_ in zip(exp_t, got_t, strict=True)
        )
        return CheckResult(
            False, f"✗ {name}: values differ from the reference (largest difference {diff:.3g})"
        )
    return CheckResult(True, f"✓ {name}: matches the reference on {trials} random inputs")
