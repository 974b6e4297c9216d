"""The machinery every `check_*` function shares.

An exercise is stored as a stub whose body raises `NotImplementedError`; its check then says, in
one line, that it is not written yet (`not_written`). The reference solution is one deliberate
step away: `show_solution(check_x)` prints it (`solved_by` tells a check which function that is).

A check cannot be passed by handing the work to the library. While the reader's function runs,
the library calls that do the whole exercise (listed per exercise in `table.EXERCISES`) raise
`Refused`, and the check says which call to write out instead (`refusing`). Only the reader's
call is guarded: the reference and the known slips a check compares with may use anything.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import importlib
import inspect
import sys
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from gptlib.exercises import yours
from gptlib.exercises.table import Refusal, refusals_for


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
    """Decorator for a check: `show_solution(check)` will print `solution`, and a function of
    the reader's that passes is kept in the reader's package (`yours`) for later notebooks."""

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def checked(fn, *args, **kwargs):
            result = check(fn, *args, **kwargs)
            if result and yours._saving and yours.is_readers(fn):
                name = yours.exercise_name(check)
                path = yours.save(name, fn, yours._notebook_of(name))
                if path is not None:
                    kept = f"kept as {yours.PACKAGE}/{path.name}: later notebooks use it"
                    result = CheckResult(True, f"{result.message}\n  {kept}")
            return result

        checked.solution = solution
        return checked

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
    """Raised before the reader's function runs when its source calls a library function that
    does the whole exercise (see `shortcut`). A BaseException, so that an `except Exception` in
    the reader's code, or in a check's wrapper, lets it through; `compare` and
    `refuses_shortcuts` turn it into the check's result."""

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


def _target(path: str) -> object | None:
    """The object a dotted path names ("torch.nn.functional.rms_norm"), or None when this
    version of torch or gptlib lacks it."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def _own_code(value: object) -> bool:
    """A function of the reader's (a notebook's, a script's), not of an installed package."""
    if not isinstance(value, types.FunctionType):
        return False
    if value.__module__ == "__main__":
        return True
    if (value.__module__ or "").startswith(("gptlib", "torch")):
        return False
    path = value.__code__.co_filename
    return "site-packages" not in path and not path.startswith(sys.base_prefix)


def _reachable(fns: Sequence[Callable]) -> list[types.FunctionType]:
    """`fns`, the functions they wrap (a check hands a wrapper such as `_as_long(fn)`, with the
    reader's function in its closure), and the reader's own helpers they call by name."""
    found: dict[int, types.FunctionType] = {}

    def visit(f: object, depth: int) -> None:
        if depth > 8 or id(f) in found:
            return
        if isinstance(f, functools.partial):
            return visit(f.func, depth + 1)
        if isinstance(f, types.MethodType):
            return visit(f.__func__, depth + 1)
        if isinstance(f, types.FunctionType):
            found[id(f)] = f
            for cell in f.__closure__ or ():
                try:
                    inner = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if callable(inner):
                    visit(inner, depth + 1)
            for name in f.__code__.co_names:
                value = f.__globals__.get(name)
                if _own_code(value):
                    visit(value, depth + 1)
        wrapped = getattr(f, "__wrapped__", None)
        if wrapped is not None:
            visit(wrapped, depth + 1)

    for fn in fns:
        visit(fn, 0)
    return list(found.values())


def _resolved(node: ast.expr, namespace: dict) -> object:
    """What a called name or dotted name (`F.rms_norm`, `torch.nn.functional.rms_norm`) is in
    the function's global namespace; None for anything else (a local variable's method)."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _resolved(node.value, namespace)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def shortcut(name: str, fns: Sequence[Callable]) -> str | None:
    """The refusal message when the source of the reader's function (or of a helper of theirs
    it calls) calls a library function that does exercise `name`'s whole job
    (its record in `table.EXERCISES`), else None. Read from the source, nothing is patched: the check is a
    learning aid, and a copied or disguised call still passes, teaching nothing."""
    refusals = refusals_for(name)
    if not refusals:
        return None
    functions = [f for f in _reachable(fns) if not (f.__module__ or "").startswith("gptlib.")]
    targets = [(r, _target(r.path)) for r in refusals]
    for f in functions:
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError, SyntaxError):  # no source to read
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            called = _resolved(node.func, f.__globals__)
            method = node.func.attr if isinstance(node.func, ast.Attribute) else None
            for refusal, target in targets:
                if target is None:
                    continue
                owner, attr = refusal.path.rsplit(".", 1)
                built = (  # a module built and called at once: MLP(cfg)(x) runs MLP.forward
                    _resolved(node.func.func, f.__globals__)
                    if isinstance(node.func, ast.Call)
                    else None
                )
                if (called is not None and called is target) or (
                    attr == "forward"
                    and isinstance(built, type)
                    and getattr(built, "forward", None) is target
                ):
                    return refusal_message(name, refusal)
                # a method on an object of the function's own (x.log_softmax(-1),
                # attn.split_heads(t)), by its name; forward is any module's call, not named
                if called is None and method == attr != "forward":
                    if isinstance(_target(owner), type):
                        return refusal_message(name, refusal)
    return None


@contextlib.contextmanager
def refusing(name: str, *reader_fns: Callable) -> Iterator[None]:
    """Raise `Refused` on entry when the reader's functions call, by their source, a library
    function that does exercise `name`'s whole job; otherwise run the block as it is."""
    message = shortcut(name, reader_fns)
    if message:
        raise Refused(message)
    yield


def guard(name: str, user_fn: Callable) -> Callable:
    """`user_fn`, whose first call raises `Refused` when its source hands exercise `name` to
    the library (see `shortcut`)."""
    if not refusals_for(name):
        return user_fn
    verdict: list[str | None] = []

    def guarded(*args, **kwargs):
        if not verdict:
            verdict.append(shortcut(name, [user_fn]))
        if verdict[0]:
            raise Refused(verdict[0])
        return user_fn(*args, **kwargs)

    guarded.__wrapped__ = user_fn
    return guarded


def refuses_shortcuts(name: str) -> Callable[[Callable], Callable]:
    """Decorator for a check that runs the reader's function itself rather than through
    `compare`: a function whose source hands the exercise to the library is answered with the
    refusal, before it runs."""

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def checked(user_fn: Callable, *args, **kwargs) -> CheckResult:
            message = shortcut(name, [user_fn])
            if message:
                return CheckResult(False, message)
            try:
                return check(user_fn, *args, **kwargs)
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
        x, y = torch.as_tensor(x).detach(), torch.as_tensor(y).detach()
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
        g, e = torch.as_tensor(g).detach().double(), torch.as_tensor(e).detach().double()
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


def _differentiable(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _backward(fn: Callable, inputs: tuple, weights: list | None):
    """Run fn on leaf copies of the floating-point inputs, then backward through the weighted
    sum of its differentiable outputs: (outputs, leaves, gradients, weights). Non-finite output
    entries (the -inf of a mask) are left out of the sum."""
    leaves = tuple(
        x.detach().clone().requires_grad_(True) if _differentiable(x) else x for x in inputs
    )
    with torch.enable_grad():
        outputs = _as_tuple(fn(*leaves))
        if weights is None:
            g = torch.Generator().manual_seed(7)
            weights = [
                torch.randn(o.shape, generator=g, dtype=o.dtype)
                if _differentiable(o) and o.requires_grad
                else None
                for o in outputs
            ]
        terms = [
            (o.masked_fill(~torch.isfinite(o.detach()), 0.0) * w).sum()
            for o, w in zip(outputs, weights, strict=False)
            if w is not None and _differentiable(o) and o.requires_grad
        ]
        wanted = [x for x in leaves if _differentiable(x)]
        if not terms:
            return outputs, leaves, [None] * len(wanted), weights
        grads = torch.autograd.grad(sum(terms), wanted, allow_unused=True)
    return outputs, leaves, list(grads), weights


def _gradient_problem(user_fn, reference_fn, inputs, atol, rtol) -> str | None:
    """What is wrong with the gradients of a function whose outputs are right, in words: an
    output that carries none, an input that gets none, or one that gets other values."""
    if not any(_differentiable(x) for x in inputs):
        return None
    ref_out, _, ref_grads, weights = _backward(reference_fn, inputs, None)
    if all(w is None for w in weights):
        return None  # nothing of the reference's is differentiable
    try:
        params = list(inspect.signature(reference_fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = [
        params[i] if i < len(params) else f"input {i}"
        for i, x in enumerate(inputs)
        if _differentiable(x)
    ]
    try:
        user_out, _, user_grads, _ = _backward(user_fn, inputs, weights)
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "in-place" in first or "inplace" in first:
            return (
                "with inputs that need gradients your function fails: it writes into a tensor "
                f"autograd needs ({first})"
            )
        return f"with inputs that need gradients your function raised {type(e).__name__}: {first}"
    for i, (w, o) in enumerate(zip(weights, user_out, strict=False)):
        if w is not None and not (_differentiable(o) and o.requires_grad):
            which = f"output {i} ({len(user_out)} returned)" if len(user_out) > 1 else "your output"
            return (
                f"{which} carries no gradient: it was made under torch.no_grad() or detached, so "
                "nothing before it would learn from the loss"
            )
    for name, ref, got in zip(names, ref_grads, user_grads, strict=True):
        if ref is None or not bool(ref.abs().max() > 0):
            continue
        if got is None or not bool(got.abs().max() > 0):
            return (
                f"the gradient of {name} is missing: the output is right, but something between "
                f"{name} and it is detached or under no_grad, so {name} would not learn"
            )
        if not _close(got, ref, 10 * atol, 10 * rtol):
            how = difference(got, ref)
            return (
                f"the output is right but the gradient of {name} is not ({how}): part of the "
                "path from it is hidden from autograd (a .detach(), .data, or a value taken out "
                "with .item())"
            )
    return None


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
    grads: bool = True,
) -> CheckResult:
    """Run `user_fn` and `reference_fn` on `trials` seeded random inputs, and, where the
    outputs agree, compare the gradients they pass back to the floating-point inputs (`grads`).

    `mistakes` pairs a hint with a wrong implementation: when the reader's output matches a
    wrong implementation (values and shape), that hint is the message. `error_hints` pairs a
    fragment of an error message with a hint added when the reader's function raises it. The
    library calls exercise `name`'s record lists are refused when `user_fn`'s source calls them.
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
            problem = (
                _gradient_problem(user_fn, reference_fn, inputs, atol, rtol) if grads else None
            )
            if problem:
                return CheckResult(False, f"✗ {name}: {problem}")
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
