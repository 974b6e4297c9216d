"""What every `check_*` shares: one comparator (`compare`), the stub's answer (`not_written`),
the reference one deliberate step away (`show_solution`), and the refusal of a library call
that does the whole exercise, read from the reader's source (`shortcut`). Nothing is patched and
nothing traced: a check is a learning aid, and a copied or disguised answer passes and teaches
nothing.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import importlib
import inspect
import io
import sys
import textwrap
import tokenize
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gptlib.exercises import yours
from gptlib.exercises.table import REFUSALS, Refusal
from gptlib.language import _, comment_sentence


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
    said = _("{name} is not written yet: replace its body and run this cell again")
    return CheckResult(False, said.format(name=name))


def solved_by(solution: Callable) -> Callable[[Callable], Callable]:
    """Decorator for a check: `show_solution(check)` prints `solution`, and a reader's function
    that passes is kept in the reader's package (`yours`) for later notebooks."""

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def checked(fn, *args, **kwargs):
            result = check(fn, *args, **kwargs)
            if result and yours._saving and yours.is_readers(fn):
                name = yours.exercise_name(check)
                path = yours.save(name, fn, yours._notebook_of(name))
                if path is not None:
                    kept = _("kept as {path}: later notebooks use it")
                    kept = kept.format(path=yours.where_kept(name))
                    result = CheckResult(True, f"{result.message}\n  {kept}")
            return result

        checked.solution = solution
        return checked

    return decorate


def _helpers_of(fn: Callable) -> list[Callable]:
    """The functions of `fn`'s own module that it calls (and theirs), in source order."""
    module, found = inspect.getmodule(fn), {}

    def visit(f: Callable) -> None:
        for name in inspect.unwrap(f).__code__.co_names:
            obj = getattr(module, name, None)
            if isinstance(obj, types.FunctionType) and obj.__module__ == fn.__module__:
                if obj is not fn and name not in found:
                    found[name] = obj
                    visit(obj)

    visit(fn)
    return sorted(found.values(), key=lambda f: f.__code__.co_firstlineno)


def _constants_of(functions: Sequence[Callable]) -> list[tuple[str, object]]:
    """The module-level literals the functions read (IGNORE_INDEX), so the printed solution runs
    where it is pasted."""
    found: dict[str, object] = {}
    for f in map(inspect.unwrap, functions):
        module = vars(inspect.getmodule(f))
        for name in f.__code__.co_names:
            if name in module and not name.startswith("__") and yours.is_literal(module[name]):
                found.setdefault(name, module[name])
    return sorted(found.items())


def show_solution(check: Callable) -> None:
    """Print the reference solution of an exercise: `show_solution(check_causal_attention)`."""
    solution = getattr(check, "solution", None)
    if solution is None:
        said = _("show_solution expects an exercise check such as check_causal_attention, got "
                 "{given}; pass the check_* function you called")  # fmt: skip
        raise TypeError(said.format(given=repr(getattr(check, "__name__", check))))
    said = _("# Reference solution checked by {check} ({module})")
    print(said.format(check=check.__name__, module=solution.__module__))
    helpers = _helpers_of(solution)
    constants = _constants_of([*helpers, solution])
    for name, value in constants:
        print(f"{name} = {value!r}")
    if constants:
        print()
    for helper in helpers:
        print(said_comments(inspect.getsource(helper)))
    print(said_comments(inspect.getsource(solution)), end="")


def comment_sentences(source: str) -> list[str]:
    """The comments of `source` that are sentences, each without its "# ".

    Not taught in a notebook: what the catalogue translates of a reference solution."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return [text for token in tokens if (text := comment_sentence(token)) is not None]


def said_comments(source: str) -> str:
    """`source` with each comment that is a sentence in the language in use (the code as it is).

    Not taught in a notebook: how show_solution prints a solution's comments in Chinese."""
    lines = source.splitlines(keepends=True)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = comment_sentence(token)
        if text is None:
            continue
        row, col = token.start
        line = lines[row - 1]
        end = "\n" if line.endswith("\n") else ""
        lines[row - 1] = line[:col] + "# " + _(text) + end
    return "".join(lines)


def solution_comments() -> dict[str, list[str]]:
    """Every comment sentence of the reference solutions show_solution prints, and of their
    helpers: the English sentence -> the functions it stands in.

    Not taught in a notebook: what the catalogue must translate of the solutions."""
    import gptlib.exercises as exercises

    found: dict[str, list[str]] = {}
    seen: set = set()
    for name in sorted(dir(exercises)):
        solution = getattr(getattr(exercises, name), "solution", None)
        if not name.startswith("check_") or solution is None:
            continue
        for fn in [*_helpers_of(solution), solution]:
            if fn in seen:
                continue
            seen.add(fn)
            for text in comment_sentences(inspect.getsource(fn)):
                found.setdefault(text, []).append(f"{fn.__module__}.{fn.__qualname__}")
    return found


# ---------------------------------------------------------------------------------------------
# Refusals, read from the source


def refusal_message(name: str, refusal: Refusal) -> str:
    said = _("✗ {name}: write this one yourself: it calls {call}, which {does}")
    return said.format(name=name, call=refusal.named, does=_(refusal.does))


def _target(path: str) -> object | None:
    """The object a dotted path names, or None when this torch or gptlib lacks it."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            return functools.reduce(getattr, parts[i:], obj)
        except AttributeError:
            return None
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
    """`fns`, the functions they wrap (in closures, `__wrapped__`, partials, methods) and the
    reader's own helpers they call by name."""
    found: dict[int, types.FunctionType] = {}

    def visit(f: object, depth: int) -> None:
        if depth > 8 or id(f) in found:
            return
        if isinstance(f, functools.partial):  # the function and what it was handed
            for part in (f.func, *f.args, *f.keywords.values()):
                if callable(part):
                    visit(part, depth + 1)
            return None
        if isinstance(f, types.MethodType):
            return visit(f.__func__, depth + 1)
        if isinstance(f, types.FunctionType):
            found[id(f)] = f
            for cell in f.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    if callable(cell.cell_contents):
                        visit(cell.cell_contents, depth + 1)
            for name in f.__code__.co_names:
                if _own_code(f.__globals__.get(name)):
                    visit(f.__globals__[name], depth + 1)
        if getattr(f, "__wrapped__", None) is not None:
            visit(f.__wrapped__, depth + 1)

    for fn in fns:
        visit(fn, 0)
    return list(found.values())


def _resolved(node: ast.expr, namespace: dict) -> object:
    """What a called name or dotted name (`F.rms_norm`) is in the function's globals."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = _resolved(node.value, namespace)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def _calls(f: types.FunctionType, refusal: Refusal, target: object, node: ast.Call) -> bool:
    owner, attr = refusal.path.rsplit(".", 1)
    called = _resolved(node.func, f.__globals__)
    if called is not None and called is target:
        return True
    built = _resolved(node.func.func, f.__globals__) if isinstance(node.func, ast.Call) else None
    if attr == "forward" and isinstance(built, type) and getattr(built, "forward", None) is target:
        return True  # a module built and called at once: MLP(cfg)(x) runs MLP.forward
    # a method of an object of the function's own (x.log_softmax(-1)), by its name
    method = node.func.attr if isinstance(node.func, ast.Attribute) else None
    return called is None and method == attr != "forward" and isinstance(_target(owner), type)


def shortcut(name: str, fns: Sequence[Callable]) -> str | None:
    """The refusal message when the reader's source (or a helper of theirs) calls a library
    function that does exercise `name`'s whole job (its record in `table`), else None."""
    targets = [(r, _target(r.path)) for r in REFUSALS.get(name, ())]
    targets = [(r, t) for r, t in targets if t is not None]
    if not targets:
        return None
    for f in _reachable(fns):
        if (f.__module__ or "").startswith("gptlib."):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(f)))
        except (OSError, TypeError, SyntaxError):  # no source to read
            continue
        for node in ast.walk(tree):
            for refusal, target in targets:
                if isinstance(node, ast.Call) and _calls(f, refusal, target, node):
                    return refusal_message(name, refusal)
    return None


# ---------------------------------------------------------------------------------------------
# Comparing outputs and gradients


def _holds_tensors(x) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    values = x.values() if isinstance(x, dict) else x if isinstance(x, (list, tuple)) else ()
    return any(_holds_tensors(v) for v in values)


def _as_tuple(x) -> tuple:
    """The values to compare: a tuple, list or dict holding tensors is opened (so a list unpacks
    like the tuple asked for); anything else (a list of ints) is one value."""
    if isinstance(x, (dict, list, tuple)) and _holds_tensors(x):
        values = [x[k] for k in sorted(x)] if isinstance(x, dict) else x
        return tuple(part for v in values for part in _as_tuple(v))
    return (x,)


def _double(x) -> torch.Tensor:
    return torch.as_tensor(x).detach().double()


def _close(a, b, atol: float, rtol: float) -> bool:
    a, b = _as_tuple(a), _as_tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(map(_double, a), map(_double, b), strict=True):
        if x.shape != y.shape or not torch.allclose(x, y, atol=atol, rtol=rtol, equal_nan=True):
            return False
    return True


def with_error_hints(user_fn: Callable, hints: Sequence[tuple[str, str]]) -> Callable:
    """Wrap the reader's function: an error whose first line contains a known fragment gets the
    matching hint appended. `hints` is a list of (fragment, hint)."""

    def wrapped(*inputs):
        try:
            return user_fn(*inputs)
        except (RuntimeError, ValueError, IndexError) as e:
            first = str(e).splitlines()[0] if str(e) else ""
            hint = next((_(h) for fragment, h in hints if fragment in first), None)
            if hint is None:
                raise
            said = _("{error}. Hint: {hint}").format(error=first, hint=hint)
            try:
                explained = type(e)(said)
            except Exception:  # an exception class with another constructor
                explained = RuntimeError(said)
            raise explained from None

    return wrapped


def difference(got, expected) -> str:
    """How outputs of equal shapes differ, in words: "largest difference 0.311", or where a NaN
    or an infinity appeared (a difference taken with one would itself be NaN)."""
    largest = 0.0
    for g, e in zip(map(_double, _as_tuple(got)), map(_double, _as_tuple(expected)), strict=True):
        if (g.isnan() & ~e.isnan()).any():
            return _("your output has NaN where the reference has none")
        if (e.isnan() & ~g.isnan()).any():
            return _("your output has a number where the reference has NaN")
        differs = (g != e) & ~(g.isnan() & e.isnan())  # equal infinities do not differ
        if (differs & g.isinf()).any():
            return _("your output has an infinity where the reference has another value")
        if (differs & e.isinf()).any():
            return _("your output has a finite value where the reference has an infinity")
        if differs.any():
            largest = max(largest, float((g - e)[differs].abs().max()))
    return _("largest difference {largest}").format(largest=f"{largest:.3g}")


def _differentiable(x) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _leaf_copies(x, path: str, found: list):
    """`x` with each floating tensor inside it (tuples, lists, dicts) replaced by a leaf copy
    that needs gradients; `found` collects (path, leaf)."""
    if _differentiable(x):
        leaf = x.detach().clone().requires_grad_(True)
        found.append((path, leaf))
        return leaf
    if isinstance(x, dict):
        return {k: _leaf_copies(v, f"{path}[{k!r}]", found) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_leaf_copies(v, f"{path}[{i}]", found) for i, v in enumerate(x))
    return x


def _backward(fn: Callable, inputs: tuple, names: list[str], weights: list | None):
    """Run fn on leaf copies of the inputs' floating tensors and back a fixed random weighting
    of its differentiable outputs (non-finite entries, a mask's -inf, left out) through it:
    (outputs, [(path, gradient)], weights)."""
    found: list[tuple[str, torch.Tensor]] = []
    leaves = [_leaf_copies(x, n, found) for x, n in zip(inputs, names, strict=True)]
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
        grads = [None] * len(found)
        if terms:
            grads = torch.autograd.grad(sum(terms), [t for _path, t in found], allow_unused=True)
    return outputs, [(p, gr) for (p, _leaf), gr in zip(found, grads, strict=True)], weights


def _gradient_problem(user_fn, reference_fn, inputs, atol, rtol) -> str | None:
    """What is wrong with the gradients of a function whose outputs are right: an output that
    carries none, an input (or a weight inside one) that gets none, or one that gets others."""
    try:
        params = list(inspect.signature(reference_fn).parameters)
    except (TypeError, ValueError):
        params = []
    names = [params[i] if i < len(params) else f"input {i}" for i in range(len(inputs))]
    _outputs, ref_grads, weights = _backward(reference_fn, inputs, names, None)
    if all(w is None for w in weights):
        return None  # nothing of the reference's is differentiable
    try:
        user_out, user_grads, _weights = _backward(user_fn, inputs, names, weights)
    except Exception as e:  # noqa: BLE001
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "in-place" in first or "inplace" in first:
            said = _("with inputs that need gradients your function fails: it writes into a "
                     "tensor autograd needs ({error})")  # fmt: skip
            return said.format(error=first)
        said = _("with inputs that need gradients your function raised {kind}: {error}")
        return said.format(kind=type(e).__name__, error=first)
    for i, (w, o) in enumerate(zip(weights, user_out, strict=False)):
        if w is not None and not (_differentiable(o) and o.requires_grad):
            which = _("output {i} ({n} returned)").format(i=i, n=len(user_out))
            which = which if len(user_out) > 1 else _("your output")
            said = _("{which} carries no gradient: it was made under torch.no_grad() or "
                     "detached, so nothing before it would learn from the loss")  # fmt: skip
            return said.format(which=which)
    for (name, ref), (_path, got) in zip(ref_grads, user_grads, strict=True):
        if ref is None or not bool(ref.abs().max() > 0):
            continue
        if got is None or not bool(got.abs().max() > 0):
            said = _("the gradient of {name} is missing: the output is right, but something "
                     "between {name} and it is detached or under no_grad, so {name} would not "
                     "learn")  # fmt: skip
            return said.format(name=name)
        if not _close(got, ref, 10 * atol, 10 * rtol):
            said = _("the output is right but the gradient of {name} is not ({difference}): "
                     "part of the path from it is hidden from autograd (a .detach(), .data, or "
                     "a value taken out with .item())")  # fmt: skip
            return said.format(name=name, difference=difference(got, ref))
    return None


def _mismatch(got, expected, inputs, mistakes, atol, rtol) -> str:
    """What is wrong with outputs that differ: a known slip names itself (by values or shape),
    else the count, the shape or the size of the difference."""
    for hint, wrong_fn in mistakes:
        try:
            wrong = wrong_fn(*inputs)
        except Exception:  # noqa: BLE001
            continue
        if _close(got, wrong, atol, rtol):
            return _(hint)
    exp_t, got_t = _as_tuple(expected), _as_tuple(got)
    if len(exp_t) != len(got_t):
        said = _("returned {got} value(s), expected {expected}")
        return said.format(got=len(got_t), expected=len(exp_t))
    for e_, g_ in zip(exp_t, got_t, strict=True):
        e_shape, g_shape = list(torch.as_tensor(e_).shape), list(torch.as_tensor(g_).shape)
        if e_shape != g_shape:
            said = _("output has shape {got}, expected {expected}")
            return said.format(got=g_shape, expected=e_shape)
    said = _("values differ from the reference ({difference})")
    return said.format(difference=difference(got_t, exp_t))


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
    """Run `user_fn` and `reference_fn` on `trials` seeded random inputs; where the outputs
    agree, compare the gradients they pass back to every floating tensor of the inputs (inside
    tuples, lists and dicts too) when `grads`.

    `mistakes` pairs a message with a wrong implementation: output matching one (values and
    shape) gets its message. `error_hints` pairs a fragment of an error with a hint appended when
    the reader's function raises it. A source that calls a refused library function is refused.
    """
    refused = shortcut(name, [user_fn])
    if refused:
        return CheckResult(False, refused)
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
            said = _("✗ {name}: your function raised {kind}: {error}")
            return CheckResult(False, said.format(name=name, kind=type(e).__name__, error=e))
        problem = None
        if not _close(got, expected, atol, rtol):
            problem = _mismatch(got, expected, inputs, mistakes, atol, rtol)
        elif grads:
            problem = _gradient_problem(user_fn, reference_fn, inputs, atol, rtol)
        if problem:
            return CheckResult(False, _("✗ {name}: {problem}").format(name=name, problem=problem))
    said = _("✓ {name}: matches the reference on {trials} random inputs")
    return CheckResult(True, said.format(name=name, trials=trials))
