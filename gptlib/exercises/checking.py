"""What every `check_*` shares: one comparator (`compare`), the stub's answer (`not_written`),
the reference one deliberate step away (`show_solution`), and the refusal of a library call
that does the whole exercise, read from the reader's source (`shortcut`), and one rule for side
effects (`_side_effect`, said in the README). Nothing is patched and nothing traced (a check
notes only whether a forward ran with gradients on, where the page runs it under no_grad): a
check is a learning aid, and a copied or disguised answer passes and teaches nothing.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from gptlib.exercises import yours
from gptlib.exercises.table import EXERCISES, REFUSALS, Refusal
from gptlib.language import _, comment_sentence


@dataclass
class CheckResult:
    """The outcome of a check; shows as its message in a notebook, and is truthy when passed."""

    passed: bool
    message: str
    written: bool = True  # False for a stub's answer (not_written): nothing of it is judged

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


def not_written(name: str) -> CheckResult:
    said = _("{name} is not written yet: replace its body and run this cell again")
    return CheckResult(False, said.format(name=name), written=False)


def solved_by(solution: Callable) -> Callable[[Callable], Callable]:
    """Decorator for a check: `show_solution(check)` prints `solution`, and a reader's function
    that passes is kept in the reader's package (`yours`) for later notebooks; one that fails
    (written, not the stub) withdraws the version kept before, and the result says so."""

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def checked(fn, *args, **kwargs):
            result = check(fn, *args, **kwargs)
            if not (yours._saving and yours.is_readers(fn)):
                return result
            name = yours.exercise_name(check)
            if result:
                path = yours.save(name, fn, yours._notebook_of(name))
                if path is not None:
                    kept = kept_line(check.__name__).format(path=yours.where_kept(name))
                    result = CheckResult(True, f"{result.message}\n  {kept}")
            elif getattr(result, "written", True) and yours.withdraw(name, fn.__name__):
                said = _("the version of yours that passed before is withdrawn (set aside as "
                         "{path}): the course's reference stands in for it in later cells until "
                         "yours passes again")  # fmt: skip
                withdrawn = said.format(path=yours.where_kept(f"{name}.withdrawn"))
                result = CheckResult(False, f"{result.message}\n  {withdrawn}")
            return result

        checked.solution = solution
        return checked

    return decorate


def kept_line(check: str) -> str:
    """What a pass says of the piece it keeps: which notebooks use it (table's `used`)."""
    record = next((e for e in EXERCISES if e.check == check), None)
    used = record.used.split() if record else []
    if any(notebook != record.notebook for notebook in used):
        return _("kept as {path}: later notebooks use it")
    return _("kept as {path}: the cells below use it") if used else _("kept as {path}")


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


def resolved(node: ast.expr, namespace: dict) -> object:
    """What a called name or dotted name (`F.rms_norm`) is in the function's namespace."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id, getattr(builtins, node.id, None))
    if isinstance(node, ast.Attribute):
        owner = resolved(node.value, namespace)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def namespace(f: types.FunctionType, tree: ast.AST) -> dict:
    """`f`'s globals, with what its body imports (`from gptlib.norms import RMSNorm`) and the
    local names it binds to another (`Norm = nn.RMSNorm`)."""
    names = dict(f.__globals__)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                with contextlib.suppress(ImportError):
                    bound = a.name if a.asname else a.name.split(".")[0]
                    names[a.asname or bound] = importlib.import_module(bound)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                names[a.asname or a.name] = _target(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            for target in (t for t in node.targets if isinstance(t, ast.Name)):
                names[target.id] = resolved(node.value, names)
    return names


def _calls(names: dict, refusal: Refusal, target: object, node: ast.Call) -> bool:
    owner, attr = refusal.path.rsplit(".", 1)
    called = resolved(node.func, names)
    if called is not None and called is target:
        return True
    if attr == "forward" and isinstance(called, type) and getattr(called, "forward", 0) is target:
        return True  # a module built in the body (nn.RMSNorm(d)) is there to run its forward
    # a method of an object of the function's own (x.log_softmax(-1)), by its name
    method = node.func.attr if isinstance(node.func, ast.Attribute) else None
    return called is None and method == attr != "forward" and isinstance(_target(owner), type)


def source_tree(f: Callable) -> ast.AST | None:
    """The syntax tree of `f`'s source, or None when there is none to read."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(f)))
    except (OSError, TypeError, SyntaxError):
        return None


def shortcut(name: str, fns: Sequence[Callable]) -> str | None:
    """The refusal message when the reader's source (or a helper of theirs) calls a library
    function that does exercise `name`'s whole job (its record in `table`), or builds the module
    whose forward does it, else None."""
    targets = [(r, _target(r.path)) for r in REFUSALS.get(name, ())]
    targets = [(r, t) for r, t in targets if t is not None]
    if not targets:
        return None
    for f in _reachable(fns):
        tree = source_tree(f)
        if (f.__module__ or "").startswith("gptlib.") or tree is None:
            continue
        names, calls = namespace(f, tree), [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        for refusal, target in targets:  # in the table's order: the call that names the job
            if any(_calls(names, refusal, target, node) for node in calls):
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


def close(a, b, atol: float, rtol: float) -> bool:
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


def _input_names(reference_fn: Callable, inputs: tuple) -> list[str]:
    try:
        params = list(inspect.signature(reference_fn).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input {i}" for i in range(len(inputs))]


def _gradient_problem(user_fn, reference_fn, inputs, atol, rtol, locate) -> str | None:
    """What is wrong with the gradients of a function whose outputs are right: an output that
    carries none, or the inputs (and weights inside them) that get none or others, in input
    order as [(path, "missing" | "wrong" | "right", difference)], said by `locate` or by the
    first that is not right."""
    names = _input_names(reference_fn, inputs)
    _outputs, ref_grads, weights = _backward(reference_fn, inputs, names, None)
    if not any(g is not None and bool(g.abs().max() > 0) for _p, g in ref_grads):
        return None  # nothing reaches the reference's inputs (greedy rows: a one-hot)
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
    found = []
    for (name, ref), (_path, got) in zip(ref_grads, user_grads, strict=True):
        if ref is None or not bool(ref.abs().max() > 0):
            continue
        if got is None or not bool(got.abs().max() > 0):
            found.append((name, "missing", ""))
        else:
            right = close(got, ref, 10 * atol, 10 * rtol)
            found.append((name, "right" if right else "wrong", difference(got, ref)))
    if locate is not None and any(status != "right" for _n, status, _d in found):
        return locate(found)
    for name, status, diff in found:
        if status == "missing":
            said = _("the gradient of {name} is missing: the output is right, but something "
                     "between {name} and it is detached or under no_grad, so {name} would not "
                     "learn")  # fmt: skip
            return said.format(name=name)
        if status == "wrong":
            said = _("the output is right but the gradient of {name} is not ({difference}): "
                     "part of the path from it is hidden from autograd (a .detach(), .data, or "
                     "a value taken out with .item())")  # fmt: skip
            return said.format(name=name, difference=diff)
    return None


def _ids(got: torch.Tensor, expected: torch.Tensor) -> str | None:
    """How integer outputs (ids) differ: where, and what each holds there; or how many."""
    if got.is_floating_point() or expected.is_floating_point():
        return None
    if got.shape == expected.shape:
        where = tuple(int(i) for i in (got != expected).nonzero()[0])
        said = _("at index {index} yours is id {got} where the reference has {expected}")
        index = where[0] if len(where) == 1 else where
        return said.format(index=index, got=int(got[where]), expected=int(expected[where]))
    g, e = got.flatten().tolist(), expected.flatten().tolist()
    n = next((i for i, (a, b) in enumerate(zip(g, e, strict=False)) if a != b), min(len(g), len(e)))
    said = _("you returned {got} ids where the reference returns {expected}; the first {n} agree")
    return (
        said.format(got=len(g), expected=len(e), n=n) if got.dim() == expected.dim() == 1 else None
    )


def _not_ids(got, expected) -> str | None:
    """Where the reference returns a tensor of ids: a list, or ids of another dtype, said."""
    if not isinstance(expected, torch.Tensor) or expected.is_floating_point():
        return None
    want = "long" if expected.dtype == torch.long else str(expected.dtype).removeprefix("torch.")
    if not isinstance(got, torch.Tensor):
        said = _("returned a {kind}, not a tensor of {dtype} ids")
        return said.format(kind=type(got).__name__, dtype=want)
    said = _("returned {dtype}, not a tensor of {expected} ids")
    return None if got.dtype == expected.dtype else said.format(dtype=got.dtype, expected=want)


def steps_differ(got, expected) -> str | None:
    """How a training loop's (losses, final weights) differ, for the loops of notebooks 10 and
    14: the first step whose loss parts, else the weights."""
    (losses, weights), (ref, ref_weights) = got, expected
    if losses.shape != ref.shape:
        said = _("your loop returned {got} loss value(s) for the {steps} steps")
        return said.format(got=losses.numel(), steps=ref.numel())
    parted = (~torch.isclose(losses, ref, rtol=1e-6, atol=1e-8)).nonzero()
    if len(parted):
        i = int(parted[0])
        said = _(
            "your losses part from the reference's at step {i}: yours {a}, the reference's {b}"
        )
        return said.format(i=i, a=f"{float(losses[i]):.6g}", b=f"{float(ref[i]):.6g}")
    said = _("the losses are the reference's at every step, but the final weights differ "
             "({difference})")  # fmt: skip
    return said.format(difference=difference(weights, ref_weights))


def mismatch(got, expected, inputs, mistakes, atol, rtol, describe, start) -> str:
    """What is wrong with outputs that differ: a known slip names itself (by values or shape;
    each run from the global random state `start`), else `describe` in the exercise's terms,
    else which output differs and how."""
    for hint, wrong_fn in mistakes:
        torch.set_rng_state(start)
        try:
            wrong = wrong_fn(*inputs)
        except Exception:  # noqa: BLE001
            continue
        if close(got, wrong, atol, rtol):
            return _(hint)
    said = describe(got, expected) if describe is not None else None
    if said:
        return said
    exp_t, got_t = _as_tuple(expected), _as_tuple(got)
    if len(exp_t) != len(got_t):
        said = _("returned {got} value(s), expected {expected}")
        return said.format(got=len(got_t), expected=len(exp_t))
    pairs = [(torch.as_tensor(g), torch.as_tensor(e)) for g, e in zip(got_t, exp_t, strict=True)]
    i = next(
        i for i, (g, e) in enumerate(pairs) if g.shape != e.shape or not close(g, e, atol, rtol)
    )
    (g, e), said = pairs[i], _("output has shape {got}, expected {expected}")
    said = _ids(g, e) or said.format(got=list(g.shape), expected=list(e.shape))
    if g.shape == e.shape and g.is_floating_point():
        said = _("values differ from the reference ({difference})")
        said = said.format(difference=difference(g, e))
    which = _("output {i} of the {n} returned: {problem}")
    return which.format(i=i, n=len(exp_t), problem=said) if len(exp_t) > 1 else said


# ---------------------------------------------------------------------------------------------
# Side effects: one rule for every check (README, "Exercises")


def _leaves(x, path: str) -> list:
    """(path, value) for x and everything inside its tuples, lists and dicts, tensors copied."""
    if not isinstance(x, (dict, list, tuple)):
        return [(path, x.detach().clone() if isinstance(x, torch.Tensor) else x)]
    items = x.items() if isinstance(x, dict) else enumerate(x)
    inside = (_leaves(v, f"{path}[{k!r}]" if path else k) for k, v in items)  # inputs by name
    return [(path, len(x)), *(leaf for leaves in inside for leaf in leaves)]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and bool((a.eq(b) | a.isnan() & b.isnan()).all())
    return a is b or (type(a) is type(b) and not isinstance(a, torch.Tensor) and a == b)


_graphs: list[bool] | None = None  # while a check watches: whether each forward built a graph


def watched(fn: Callable) -> Callable:
    """`fn` (a forward handed to the reader's code) noting, while a check watches, whether it
    ran with gradients on; every module's forward is noted too."""

    def run(*args, **kwargs):
        if _graphs is not None:
            _graphs.append(torch.is_grad_enabled())
        return fn(*args, **kwargs)

    return run


@contextlib.contextmanager
def _watching() -> Iterator[list[bool]]:
    global _graphs
    before, _graphs = _graphs, []
    hook = torch.nn.modules.module.register_module_forward_pre_hook(watched(lambda *_: None))
    try:
        yield _graphs
    finally:
        hook.remove()
        _graphs = before


def _side_effect(before: list, after: list, stream, graphs) -> str | None:
    """What the reader's call did beyond its output: an input changed in place (`_leaves` of the
    inputs before and after), torch's global random stream moved otherwise than by the
    reference, a graph built where none is needed."""
    for (where, was), (_path, now) in zip(before, after, strict=True):
        if not _same(was, now):
            said = _("your function changed its input {name} in place: after the call the "
                     "caller's {name} holds other values than it handed you")  # fmt: skip
            return said.format(name=where)
    if not torch.equal(torch.get_rng_state(), stream):
        return _("your function moved torch's global random stream otherwise than the reference "
                 "does (it reseeded it with torch.manual_seed, or drew from it): every cell after "
                 "it would draw other numbers")  # fmt: skip
    if any(graphs):
        return _("the forward passes built a graph for a backward that nobody calls, which "
                 "costs memory and time")  # fmt: skip
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
    no_grad: bool = False,
    describe: Callable | None = None,
    locate: Callable | None = None,
) -> CheckResult:
    """Run `user_fn` and `reference_fn` on `trials` seeded random inputs, each from the same
    state of torch's global random stream (given back afterwards); where the outputs agree,
    hold the reader's call to the side-effect rule (no input changed in place, the global
    stream moved as the reference moves it, no graph built when `no_grad`), then compare the
    gradients they pass back to every floating tensor of the inputs when `grads`.

    `mistakes` pairs a message with a wrong implementation: output matching one (values and
    shape) gets its message; `describe(got, expected)` says in the exercise's terms how other
    outputs differ; `locate(found)` where the cut lies when gradients differ (see
    `_gradient_problem`). `error_hints` pairs a fragment of an error with a hint appended when
    the reader's function raises it. A source that calls a refused library function is refused.
    """
    refused = shortcut(name, [user_fn])
    if refused:
        return CheckResult(False, refused)
    if error_hints:
        user_fn = with_error_hints(user_fn, error_hints)
    start = torch.get_rng_state()
    try:
        for trial in range(trials):
            inputs = make_inputs(torch.Generator().manual_seed(1000 + trial))
            torch.set_rng_state(start)
            expected = reference_fn(*inputs)
            by_name = dict(zip(_input_names(reference_fn, inputs), inputs, strict=True))
            stream, before = torch.get_rng_state(), _leaves(by_name, "")[1:]
            torch.set_rng_state(start)
            try:
                with _watching() as graphs:
                    got = user_fn(*inputs)
            except NotImplementedError:
                return not_written(name)
            except Exception as e:  # the reader's code failed: say how
                said = _("✗ {name}: your function raised {kind}: {error}")
                return CheckResult(False, said.format(name=name, kind=type(e).__name__, error=e))
            problem = _not_ids(got, expected)
            if problem is None and not close(got, expected, atol, rtol):
                problem = mismatch(got, expected, inputs, mistakes, atol, rtol, describe, start)
            elif problem is None:
                after = _leaves(by_name, "")[1:]  # the inputs as they are after the call
                problem = _side_effect(before, after, stream, graphs if no_grad else [])
            if problem is None and grads:
                torch.set_rng_state(start)
                problem = _gradient_problem(user_fn, reference_fn, inputs, atol, rtol, locate)
            if problem:
                said = _("✗ {name}: {problem}").format(name=name, problem=problem)
                return CheckResult(False, said)
    finally:
        torch.set_rng_state(start)
    said = _("✓ {name}: matches the reference on {trials} random inputs")
    return CheckResult(True, said.format(name=name, trials=trials))
