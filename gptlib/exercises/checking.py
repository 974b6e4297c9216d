"""The machinery every `check_*` function shares.

An exercise is stored as a stub whose body raises `NotImplementedError`; its check then says, in
one line, that it is not written yet (`not_written`). The reference solution is one deliberate
step away: `show_solution(check_x)` prints it (`solved_by` tells a check which function that is).

A check cannot be passed by handing the work to the library. While the reader's function runs,
the library calls that do the whole exercise (listed per exercise in `refusals.REFUSALS`) raise
`Refused`, and the check says which call to write out instead (`refusing`). Only the reader's
call is guarded: the reference and the known slips a check compares with may use anything.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from gptlib.exercises.refusals import Refusal, refusals_for


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


def _constants_of(functions: Sequence[Callable]) -> list[tuple[str, object]]:
    """The module-level constants (numbers, strings) the functions read, such as IGNORE_INDEX, so
    that the printed solution runs where it is pasted."""
    found: dict[str, object] = {}
    for f in functions:
        f = inspect.unwrap(f)
        module = inspect.getmodule(f)
        for name in f.__code__.co_names:
            value = getattr(module, name, None)
            if isinstance(value, (bool, int, float, str)) and name not in found:
                try:
                    same = ast.literal_eval(repr(value)) == value
                except (ValueError, SyntaxError):
                    same = False  # inf, nan
                if same and not name.startswith("__"):
                    found[name] = value
    return sorted(found.items())


def show_solution(check: Callable) -> None:
    """Print the reference solution of an exercise: `show_solution(check_causal_attention)`."""
    solution = getattr(check, "solution", None)
    if solution is None:
        raise TypeError(
            f"show_solution expects an exercise check such as check_causal_attention, got "
            f"{getattr(check, '__name__', check)!r}; pass the check_* function you called"
        )
    print(f"# Reference solution checked by {check.__name__} ({solution.__module__})")
    helpers = _helpers_of(solution)
    constants = _constants_of([*helpers, solution])
    for name, value in constants:
        print(f"{name} = {value!r}")
    if constants:
        print()
    for helper in helpers:
        print(inspect.getsource(helper))
    print(inspect.getsource(solution), end="")


class Refused(BaseException):
    """Raised by a library call that the running check refuses (see `refusing`). It derives from
    BaseException so that an `except Exception` in the reader's code, or in a check's wrapper,
    lets it through; `compare` and `refuses_shortcuts` turn it into the check's result."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    @property
    def result(self) -> CheckResult:
        return CheckResult(False, self.message)


def refusal_message(name: str, refusal: Refusal) -> str:
    """`✗ causal_attention: write this one yourself: it calls F.scaled_dot_product_attention,
    which does the whole exercise`."""
    return f"✗ {name}: write this one yourself: it calls {refusal.shown}, which {refusal.does}"


_MISSING = object()


def _resolve(path: str) -> tuple[object, str]:
    """Where a dotted path lives: (the module torch.nn.functional, "log_softmax"), or (the class
    GPT, "forward") for "gptlib.model.GPT.forward". Modules are found through the import system,
    so that a package attribute shadowing a submodule (`gptlib.train` is both the function and
    the module) does not mislead it."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:-1]:
            owner = getattr(owner, part)
        getattr(owner, parts[-1])  # AttributeError when this torch or gptlib lacks it
        return owner, parts[-1]
    raise AttributeError(f"no module in {path!r}")


def _reachable(fns: Sequence[Callable]) -> list[types.FunctionType]:
    """`fns` and every function they wrap: a check hands its wrapper (`_as_long(encode_stream)`,
    say), and the reader's function sits in the wrapper's closure."""
    found: dict[int, types.FunctionType] = {}
    seen: set[int] = set()

    def visit(f: object, depth: int) -> None:
        if depth > 8 or id(f) in seen:
            return
        seen.add(id(f))
        if isinstance(f, functools.partial):
            visit(f.func, depth + 1)
        elif isinstance(f, types.MethodType):
            visit(f.__func__, depth + 1)
        elif isinstance(f, types.FunctionType):
            found[id(f)] = f
            for cell in f.__closure__ or ():
                try:
                    inner = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if callable(inner):
                    visit(inner, depth + 1)
        wrapped = getattr(f, "__wrapped__", None)
        if wrapped is not None:
            visit(wrapped, depth + 1)

    for fn in fns:
        visit(fn, 0)
    return list(found.values())


def _course_code(functions: Sequence[types.FunctionType]) -> bool:
    """Whether every function is the exercises' own code: a reference or a known slip handed to
    its check (by the tests, or by a notebook's planted slip) is not the reader's code."""
    return bool(functions) and all(
        (f.__module__ or "").startswith("gptlib.exercises.") for f in functions
    )


def _refuser(message: str, name: str) -> Callable:
    def refused(*args, **kwargs):
        raise Refused(message)

    refused.__name__ = refused.__qualname__ = name
    return refused


@contextlib.contextmanager
def refusing(name: str, *reader_fns: Callable) -> Iterator[None]:
    """While the block runs, every library call listed for exercise `name` raises `Refused`.

    Each call is replaced where the library keeps it (a module's function, a class's method),
    and so is every name bound to the same object in gptlib's modules (the package re-exports
    many functions) and in the global namespaces of `reader_fns` and the functions they wrap (a
    notebook's `from gptlib.data import encode_documents`). Everything is put back on the way
    out, whether the block returns or raises. When `reader_fns` are the exercises' own code (a
    reference or a slip handed to its check) nothing is refused.
    """
    refusals = refusals_for(name)
    functions = _reachable(reader_fns)
    if not refusals or (reader_fns and _course_code(functions)):
        yield
        return
    undo: list[Callable[[], None]] = []
    try:
        namespaces = [
            module.__dict__
            for key, module in list(sys.modules.items())
            if (key == "gptlib" or key.startswith("gptlib.")) and module is not None
        ]
        namespaces += [f.__globals__ for f in functions]
        for refusal in refusals:
            try:
                owner, attr = _resolve(refusal.path)
            except AttributeError:  # not in this version of torch: nothing to refuse
                continue
            target = getattr(owner, attr)
            stub = _refuser(refusal_message(name, refusal), attr)
            if isinstance(owner, type):
                raw = owner.__dict__.get(attr, _MISSING)  # a staticmethod stays one on the way back

                def put_back(owner=owner, attr=attr, raw=raw):
                    if raw is _MISSING:  # inherited (Tensor.log_softmax): drop the override
                        delattr(owner, attr)
                    else:
                        setattr(owner, attr, raw)

                setattr(owner, attr, stub)
                undo.append(put_back)
            else:
                namespaces.append(owner.__dict__)
            for namespace in {id(ns): ns for ns in namespaces}.values():
                for key in [k for k, v in namespace.items() if v is target]:
                    namespace[key] = stub
                    undo.append(functools.partial(namespace.__setitem__, key, target))
        yield
    finally:
        for put_back in reversed(undo):
            put_back()


def guard(name: str, user_fn: Callable) -> Callable:
    """`user_fn`, each of whose calls runs under `refusing(name, user_fn)`."""
    if not refusals_for(name):
        return user_fn

    def guarded(*args, **kwargs):
        with refusing(name, user_fn):
            return user_fn(*args, **kwargs)

    return guarded


def refuses_shortcuts(name: str) -> Callable[[Callable], Callable]:
    """Decorator for a check that runs the reader's function itself rather than through
    `compare`: the function it is handed runs under `refusing(name, ...)`, and a refused call
    becomes the check's result."""

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def checked(user_fn: Callable, *args, **kwargs) -> CheckResult:
            try:
                return check(guard(name, user_fn), *args, **kwargs)
            except Refused as e:
                return e.result

        return checked

    return decorate


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


def difference(got, expected) -> str:
    """How outputs of equal shapes differ, in words: "largest difference 0.311" when both are
    finite where they differ, otherwise where a NaN or an infinity appeared (a difference taken
    with inf or NaN in it would itself be NaN, which says nothing)."""
    largest = 0.0
    for g, e in zip(_as_tuple(got), _as_tuple(expected), strict=True):
        g, e = torch.as_tensor(g).double(), torch.as_tensor(e).double()
        if (g.isnan() & ~e.isnan()).any():
            return "your output has NaN where the reference has none"
        if (e.isnan() & ~g.isnan()).any():
            return "your output has a number where the reference has NaN"
        differs = (g != e) & ~(g.isnan() & e.isnan())  # equal infinities do not differ
        if (differs & g.isinf()).any():
            return "your output has an infinity where the reference has another value"
        if (differs & e.isinf()).any():
            return "your output has a finite value where the reference has an infinity"
        if differs.any():
            largest = max(largest, float((g - e)[differs].abs().max()))
    return f"largest difference {largest:.3g}"


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
    fragment of an error message with a hint added when the reader's function raises it. The
    library calls `refusals.REFUSALS[name]` lists are refused while `user_fn` runs.
    """
    if error_hints:
        user_fn = with_error_hints(user_fn, error_hints)
    user_fn = guard(name, user_fn)  # the library calls that do the exercise are refused
    for trial in range(trials):
        inputs = make_inputs(torch.Generator().manual_seed(1000 + trial))
        expected = reference_fn(*inputs)
        try:
            got = user_fn(*inputs)
        except NotImplementedError:
            return not_written(name)
        except Refused as e:  # the reader handed the exercise to the library
            return e.result
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
        how = difference(got_t, exp_t)
        return CheckResult(False, f"✗ {name}: values differ from the reference ({how})")
    return CheckResult(True, f"✓ {name}: matches the reference on {trials} random inputs")
