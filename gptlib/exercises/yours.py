"""Your own GPT, piece by piece: the functions you wrote, kept where later notebooks find them.

A check that passes a function you defined in a notebook writes it, with its imports and your
helpers, to `yourgpt/<exercise>.py` beside the notebooks (both editions share it). Later
notebooks ask `yours.use(check_causal_attention)`: your function when it is kept and passes again,
else the course's reference (or `stand_in`), with one printed line saying which. `progress` reads
the same folder. The folder is `$GPTLIB_YOURS` when set (the tests and the stored notebooks use an
empty one), else `notebooks/yourgpt/` of the course, else `yourgpt/` here. Edit a piece in its
notebook: the next pass rewrites the file; a check that fails a version you run again withdraws
the kept one (`withdraw`: set aside as `<exercise>.withdrawn.py`, nothing deleted), and the
course's reference stands in until yours passes again.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import importlib.util
import inspect
import os
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path

from gptlib.exercises.table import EXERCISES
from gptlib.language import N_, _

__all__: list[str] = []  # used as a module: `from gptlib.exercises import yours`

ENV = "GPTLIB_YOURS"
PACKAGE = "yourgpt"
_saving = True  # off while `use` and `progress` re-check what is saved
NOT_SOLVED = N_("not solved yet")  # why `load` finds no piece (shown translated)


def folder() -> Path:
    """Where your pieces are kept (see the module's docstring)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    course = Path(__file__).resolve().parents[2] / "notebooks"
    if course.is_dir():
        return course / PACKAGE
    return Path.cwd() / PACKAGE


def where_kept(name: str) -> str:
    """How a message names the file of piece `name`: `yourgpt/<name>.py` in the usual folder, the
    whole path when `$GPTLIB_YOURS` puts the pieces elsewhere."""
    return str(folder() / f"{name}.py") if os.environ.get(ENV) else f"{PACKAGE}/{name}.py"


def exercise_name(check: Callable) -> str:
    """`check_causal_attention` -> "causal_attention", the module your function is kept in."""
    return getattr(check, "__name__", str(check)).removeprefix("check_")


@contextlib.contextmanager
def not_saving() -> Iterator[None]:
    """Run checks without keeping what passes (re-checking a saved piece)."""
    global _saving
    before, _saving = _saving, False
    try:
        yield
    finally:
        _saving = before


def is_readers(fn: object) -> bool:
    """A function defined in a notebook (or a script run as __main__): yours, not the course's."""
    return (
        isinstance(fn, types.FunctionType)
        and fn.__module__ == "__main__"
        and fn.__name__ != "<lambda>"
    )


# --- writing a piece --------------------------------------------------------------------------


def _loaded_names(source: str) -> list[str]:
    tree = ast.parse(source)
    seen: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            seen.setdefault(node.id)
    return list(seen)


def is_literal(value: object) -> bool:
    if isinstance(value, (bool, int, float, str, type(None))):
        try:
            return ast.literal_eval(repr(value)) == value
        except (ValueError, SyntaxError):  # inf, nan
            return False
    if isinstance(value, tuple):
        return all(is_literal(v) for v in value)
    return False


def _import_line(name: str, value: object) -> str | None:
    if isinstance(value, types.ModuleType):
        real = value.__name__
        return f"import {real}" if real == name else f"import {real} as {name}"
    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
    if not module or not qualname or "." in qualname or module == "__main__":
        return None
    try:
        if getattr(importlib.import_module(module), qualname) is not value:
            return None
    except (ImportError, AttributeError):
        return None
    return f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}")


def module_source(name: str, fn: types.FunctionType, notebook: str = "") -> str:
    """The text of `yourgpt/<name>.py` for `fn`: its imports, the constants and helpers of
    yours it reads, then `fn` itself. A value it reads that cannot be written out (a tensor or a
    model of the notebook) is named in a comment; the module then fails where it is used."""
    imports: dict[str, None] = {}
    constants: dict[str, str] = {}
    helpers: dict[str, str] = {}  # name -> source, dependencies first
    missing: dict[str, str] = {}

    def visit(f: types.FunctionType) -> str:
        source = textwrap.dedent(inspect.getsource(f))
        for ref in _loaded_names(source):
            if ref in helpers or ref in constants or hasattr(builtins, ref):
                continue
            if ref not in f.__globals__:
                continue  # a local name, or one defined later
            value = f.__globals__[ref]
            if is_readers(value) and value is not f:
                helpers[ref] = ""  # placeholder against cycles
                helpers[ref] = visit(value)
                helpers[ref] = helpers.pop(ref)  # after what it needs
            elif (line := _import_line(ref, value)) is not None:
                imports.setdefault(line)
            elif is_literal(value):
                constants[ref] = f"{ref} = {value!r}"
            elif value is not f:
                missing[ref] = type(value).__name__
        return source

    main = visit(fn)
    where = f" (notebook {notebook})" if notebook else ""
    lines = [
        f'"""Your {name}, kept by check_{name} when it passed{where}.',
        "",
        "Later notebooks use it. Edit it in its notebook and run the check again: a pass rewrites",
        'this file."""',
        "",
        *sorted(imports),
    ]
    if constants:
        lines += ["", *constants.values()]
    for ref, kind in missing.items():
        lines.append(f"# {ref}: a {kind} of the notebook, which cannot be kept here; pass it in")
    body = [*(h for h in helpers.values() if h), main]
    text = "\n".join(lines) + "\n\n\n" + "\n\n".join(s.rstrip() + "\n" for s in body)
    if fn.__name__ != name:
        text += f"\n\n{name} = {fn.__name__}\n"
    return text


def save(name: str, fn: types.FunctionType, notebook: str = "") -> Path | None:
    """Write `fn` as `yourgpt/<name>.py` (atomically); None when its source cannot be read."""
    try:
        text = module_source(name, fn, notebook)
    except (OSError, TypeError, SyntaxError):  # no source to read (defined with exec, say)
        return None
    where = folder()
    where.mkdir(parents=True, exist_ok=True)
    init = where / "__init__.py"
    if not init.exists():
        init.write_text('"""Your GPT: the pieces the course\'s checks have passed."""\n')
    path = where / f"{name}.py"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    withdrawn_file(name).unlink(missing_ok=True)  # a pass again: the version set aside is old
    return path


def withdrawn_file(name: str) -> Path:
    """Where `withdraw` sets the kept piece `name` aside."""
    return folder() / f"{name}.withdrawn.py"


def kept_function(path: Path) -> str | None:
    """The name the function kept in `path` had in its notebook (`def <it>(`), read, not run."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    for node in tree.body:  # `causal_attention = _attention`: kept under the exercise's name
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name):
            return node.value.id
    return defined[-1] if defined else None


def withdraw(name: str, fn_name: str) -> Path | None:
    """Set the kept `yourgpt/<name>.py` aside as `<name>.withdrawn.py` when its check has just
    failed a function of yours of the same name (the exercise's cell run again with another
    version), so that later cells stop using it; None when none is kept, or when the failing
    function has another name (a variant tried beside it withdraws nothing)."""
    path = folder() / f"{name}.py"
    if not path.is_file() or kept_function(path) != fn_name:
        return None
    os.replace(path, withdrawn_file(name))
    sys.modules.pop(f"{PACKAGE}.{name}", None)
    return withdrawn_file(name)


# --- reading a piece --------------------------------------------------------------------------


def load(name: str, where: Path | None = None) -> tuple[Callable | None, str]:
    """(your function, "") from `<name>.py` in `where` (default `folder()`), or (None, why not)."""
    path = (where or folder()) / f"{name}.py"
    if not path.is_file():
        return None, _(NOT_SOLVED)
    package = sys.modules.get(PACKAGE)  # `from yourgpt.train_loop import ...` in a kept piece
    if package is None or list(getattr(package, "__path__", ())) != [str(path.parent)]:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(path.parent)]
        sys.modules[PACKAGE] = package
        for stale in [m for m in sys.modules if m.startswith(f"{PACKAGE}.")]:
            del sys.modules[stale]  # pieces of another folder
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001  (a saved file that no longer runs: say why)
        said = _("{file} does not import: {kind}: {error}")
        return None, said.format(file=path.name, kind=type(e).__name__, error=e)
    fn = getattr(module, name, None)
    if not callable(fn):
        return None, _("{file} defines no {name}").format(file=path.name, name=name)
    sys.modules[f"{PACKAGE}.{name}"] = module  # the latest load: what a kept piece imports
    return fn, ""


def _notebook_of(name: str) -> str:
    return next((e.notebook for e in EXERCISES if e.check == f"check_{name}"), "")


def use(check: Callable, stand_in: Callable | None = None) -> Callable:
    """Your function for `check`'s exercise when it is saved and passes `check` again; else
    `stand_in` (default: the course's reference solution). Prints one line saying which."""
    name = exercise_name(check)
    fn, why = load(name)
    if fn is not None:
        with not_saving():
            result = check(fn)
        if result:
            print(_("{name}: yours, from {path}").format(name=name, path=where_kept(name)))
            return fn
        first = str(getattr(result, "message", result)).splitlines()[0]
        why = _("yours does not pass its check now: {problem}").format(problem=first)
    elif why == _(NOT_SOLVED) and withdrawn_file(name).is_file():
        said = _("yours failed its check when you last ran it, and the version that passed before "
                 "is set aside as {path} until yours passes again")  # fmt: skip
        why = said.format(path=where_kept(f"{name}.withdrawn"))
    elif why == _(NOT_SOLVED):
        notebook = _notebook_of(name)
        if notebook:
            why = _("yours is not solved yet: notebook {notebook}").format(notebook=notebook)
    if stand_in is None:
        stand_in, whose = check.solution, _("the course's reference stands in")
    else:
        shown = getattr(stand_in, "__qualname__", getattr(stand_in, "__name__", "it"))
        whose = _("{function} stands in").format(function=shown)
    print(_("{name}: {whose} ({why})").format(name=name, whose=whose, why=why))
    return stand_in
