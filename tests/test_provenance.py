"""Every public function and class of the core library names the notebook that teaches it, in one
line of its docstring a reader (and this test) can find:

    Taught in notebook 03 (scaled attention).

or, for one a notebook uses without naming it, through another of gptlib's names:

    Used in notebook 14 (your gpt), through load_corpus.

or, for one no notebook teaches, `Used by the command line; no notebook teaches it.` or
`Not taught in a notebook: <why it exists>.` The notebook must exist, the words in parentheses
must be its topic as its file name spells it (03_scaled_attention.ipynb -> "scaled attention"),
and its code cells (English edition) must mention the name (for "through X", X), so the line
cannot point at a notebook that never uses the thing; "through X" also needs X to reach the name
in gptlib's own code, by calls (X calls it, or calls a function that does, ...). A module whose
home is one notebook says so in its own docstring:
`Notebook 03 (scaled attention) teaches this module.`

The model's core (config up to model, the data and the tokenizer) carries no "Not taught" line:
each of its public names names a notebook that teaches or uses it, or the command line, which
must then reach it by calls.

The command line's plumbing (cli, run, checkpoint, ...) is not required to carry the line; where it
does, the line is checked the same way."""

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
# The command line's wing (gptlib/commandline/, every module of it) and the plumbing it shares
PLUMBING = {"checkpoint", "device", "_early_signals", "__main__"}
PLUMBING |= {f"commandline.{p.stem}" for p in (ROOT / "gptlib" / "commandline").glob("*.py")} - {
    "commandline.__init__"
}

TAUGHT = re.compile(r"Taught in notebook (\d\d) \(([^()]+)\)\.")
USED = re.compile(r"Used in notebook (\d\d) \(([^()]+)\), through ([\w.]+)\.")
COMMAND_LINE = "Used by the command line; no notebook teaches it."
NOT_TAUGHT = re.compile(r"Not taught in a notebook: \S.*\.")
MODULE_HOME = re.compile(r"Notebook (\d\d) \(([^()]+)\) teaches this module\.")
# A line that looks like it means to say one of the above, checked so that a misspelt one fails
# instead of passing unseen.
LOOKS_LIKE = re.compile(
    r"taught in|teaches this module|no notebook teaches|used in notebook", re.IGNORECASE
)
# The model's core: every public name of these modules names a notebook (or the command line).
MODEL_CORE = ("config", "tokenizer", "data", "norms", "positions", "kvcache", "attention", "mlp",
              "model")  # fmt: skip


def load_notebooks(folder: Path = NOTEBOOK_DIR) -> dict[str, tuple[str, str]]:
    """NN -> (topic in words, the source of every code cell), for the English edition."""
    found = {}
    for path in sorted(folder.glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join(
            "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells
            if c.get("cell_type") == "code"
        )
        found[path.stem[:2]] = (path.stem[3:].replace("_", " "), code)
    return found


NOTEBOOKS = load_notebooks()


def _notebook_problems(number: str, topic: str, notebooks) -> list[str]:
    if number not in notebooks:
        return [f"notebook {number} does not exist (notebooks: {', '.join(notebooks)})"]
    if topic != notebooks[number][0]:
        return [f"notebook {number}'s topic is ({notebooks[number][0]}), not ({topic})"]
    return []


def provenance_problems(name: str, doc: str | None, notebooks=NOTEBOOKS) -> list[str]:
    """What is wrong with `name`'s provenance line in `doc`; [] when it has exactly one, true."""
    lines = [line.strip() for line in inspect.cleandoc(doc or "").splitlines()]
    marks = [line for line in lines if LOOKS_LIKE.search(line)]
    if not marks:
        return [f"{name}: no 'Taught in notebook NN (topic).' line in its docstring"]
    if len(marks) > 1:
        return [f"{name}: {len(marks)} provenance lines, one expected: {marks}"]
    (mark,) = marks
    if mark == COMMAND_LINE or NOT_TAUGHT.fullmatch(mark):
        return []
    taught, used = TAUGHT.fullmatch(mark), USED.fullmatch(mark)
    if not taught and not used:
        return [f"{name}: provenance line not in the fixed form: {mark!r}"]
    number, topic, through = used.groups() if used else (*taught.groups(), name)
    problems = _notebook_problems(number, topic, notebooks)
    word = through.split(".")[-1]
    if not problems and not re.search(rf"(?<!\w){re.escape(word)}(?!\w)", notebooks[number][1]):
        problems.append(f"{name}: notebook {number} ({topic})'s code cells never mention {word}")
    if not problems and used and not reaches(through, name):
        problems.append(f"{name}: {through} does not reach it by calls in gptlib's code")
    return [f"{name}: {p}" if not p.startswith(name) else p for p in problems]


def _definitions() -> dict[str, list[ast.AST]]:
    """Every module-level function and class of gptlib/*.py, private ones too, by name."""
    found: dict[str, list[ast.AST]] = {}
    for path in sorted((ROOT / "gptlib").rglob("*.py")):
        if "exercises" in path.parts:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                found.setdefault(node.name, []).append(node)
    return found


DEFINITIONS = _definitions()


def _called(node: ast.AST) -> set[str]:
    """The plain names `node` calls (`f(...)`, `with f(...)`, `Class(...)`), not methods."""
    return {
        n.func.id
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }


def reaches(start: str | ast.AST, name: str, definitions=DEFINITIONS) -> bool:
    """Whether `start` (a gptlib name, `Class.method`, or a parsed tree) calls `name`, directly
    or through gptlib functions and classes it calls (a class: any of its methods)."""
    if isinstance(start, str):
        first, _, method = start.partition(".")
        roots = definitions.get(first, [])
        if method:
            roots = [m for c in roots for m in c.body if getattr(m, "name", None) == method]
    else:
        roots = [start]
    seen, todo = set(), list(roots)
    while todo:
        called = _called(todo.pop()) - seen
        if name in called:
            return True
        seen |= called
        todo += [d for c in called for d in definitions.get(c, [])]
    return False


def command_line_reaches(name: str) -> bool:
    """Whether the command line (cli.py, run.py) reaches `name` by calls."""
    return any(
        reaches(ast.parse(path.read_text(encoding="utf-8")), name)
        for path in (ROOT / "gptlib" / "commandline").glob("*.py")
    )


def module_problems(name: str, doc: str | None, notebooks=NOTEBOOKS) -> list[str]:
    """The module line is optional (not every module has one home), but where there is one, or
    something like it, it must be in the fixed form and name a real notebook by its topic."""
    lines = [line.strip() for line in inspect.cleandoc(doc or "").splitlines()]
    marks = [line for line in lines if LOOKS_LIKE.search(line)]
    if not marks:
        return []
    if len(marks) > 1:
        return [f"{name}: {len(marks)} module provenance lines, one at most: {marks}"]
    home = MODULE_HOME.fullmatch(marks[0])
    if not home:
        return [f"{name}: module line not in the fixed form: {marks[0]!r}"]
    return [f"{name}: {p}" for p in _notebook_problems(*home.groups(), notebooks)]


def _modules() -> list[str]:
    """gptlib's modules as dotted names below gptlib (`model`, `classroom.viz`), the exercises'
    package aside (its own tests hold its names); never __main__: importing it runs the command
    line."""
    found = []
    for p in (ROOT / "gptlib").rglob("*.py"):
        rel = p.relative_to(ROOT / "gptlib").with_suffix("")
        if rel.parts[0] in ("exercises", "locale") or rel.name == "__main__":
            continue
        if rel.name == "__init__" and len(rel.parts) > 1:
            continue
        found.append(".".join(rel.parts))
    return sorted(found)


def _module(stem: str):
    return importlib.import_module("gptlib" if stem == "__init__" else f"gptlib.{stem}")


def public_objects(module) -> list[tuple[str, object]]:
    """Functions (decorated ones too) and classes defined in `module` whose names are public."""
    return [
        (name, obj)
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and getattr(obj, "__module__", None) == module.__name__
        and (inspect.isclass(obj) or inspect.isfunction(inspect.unwrap(obj)))
    ]


def _own_doc(obj) -> str | None:
    # A class's own docstring only: never one inherited from nn.Module or a base class.
    return obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__


CORE = [m for m in _modules() if m not in PLUMBING]
CORE_OBJECTS = [(m, n, o) for m in CORE for n, o in public_objects(_module(m))]
PLUMBING_OBJECTS = [
    (m, n, o) for m in sorted(PLUMBING & set(_modules())) for n, o in public_objects(_module(m))
]


def test_the_core_library_is_found():
    names = {f"{m}.{n}" for m, n, _ in CORE_OBJECTS}
    assert len(NOTEBOOKS) >= 17 and "03" in NOTEBOOKS
    assert {"model.GPT", "attention.CausalSelfAttention", "bpe.gpt2_tokenizer"} <= names
    assert not any(m in PLUMBING for m, _, _ in CORE_OBJECTS)


@pytest.mark.parametrize(
    "module,name,obj", CORE_OBJECTS, ids=[f"{m}.{n}" for m, n, _ in CORE_OBJECTS]
)
def test_every_public_function_and_class_names_its_notebook(module, name, obj):
    assert provenance_problems(name, _own_doc(obj)) == []


MODEL_CORE_OBJECTS = [(m, n, o) for m, n, o in CORE_OBJECTS if m in MODEL_CORE]


@pytest.mark.parametrize(
    "module,name,obj", MODEL_CORE_OBJECTS, ids=[f"{m}.{n}" for m, n, _ in MODEL_CORE_OBJECTS]
)
def test_every_name_of_the_model_core_names_a_notebook_or_the_command_line(module, name, obj):
    lines = [line.strip() for line in inspect.cleandoc(_own_doc(obj) or "").splitlines()]
    assert not any(NOT_TAUGHT.fullmatch(line) for line in lines), (
        f"{module}.{name}: 'Not taught in a notebook' in the model's core; name the notebook that "
        "uses it ('Used in notebook NN (topic), through X.')"
    )
    if COMMAND_LINE in lines:
        assert command_line_reaches(name), f"{module}.{name}: the command line never calls it"


def test_the_model_core_is_every_module_below_the_model():
    assert set(MODEL_CORE) <= set(CORE)
    assert {m for m, _, _ in MODEL_CORE_OBJECTS} == set(MODEL_CORE)  # each has public names


@pytest.mark.parametrize(
    "module,name,obj", PLUMBING_OBJECTS, ids=[f"{m}.{n}" for m, n, _ in PLUMBING_OBJECTS]
)
def test_a_plumbing_function_that_names_a_notebook_names_it_truly(module, name, obj):
    doc = _own_doc(obj)
    lines = inspect.cleandoc(doc or "").splitlines()
    if any(LOOKS_LIKE.search(line) for line in lines):
        assert provenance_problems(name, doc) == []


@pytest.mark.parametrize("module", _modules())
def test_a_module_line_names_a_real_notebook(module):
    source = (ROOT / "gptlib").joinpath(*module.split(".")).with_suffix(".py").read_text("utf-8")
    assert module_problems(module, ast.get_docstring(ast.parse(source))) == []


def test_the_checker_catches_a_line_that_lies():
    def sample_documents():
        """Sample names.

        Taught in notebook 03 (scaled attention)."""

    # notebook 03 exists and its topic is right, but it never uses sample_documents
    problems = provenance_problems("sample_documents", sample_documents.__doc__)
    assert problems and "never mention" in problems[0]

    def wrong(line: str) -> list[str]:
        return provenance_problems("plot_attention", f"Draw.\n\n{line}")

    assert wrong("Taught in notebook 03 (scaled attention).") == []  # the true line passes
    assert "topic" in wrong("Taught in notebook 03 (attention).")[0]
    assert "does not exist" in wrong("Taught in notebook 42 (scaled attention).")[0]
    assert "fixed form" in wrong("Taught in notebook 3 (scaled attention).")[0]
    assert "fixed form" in wrong("taught in notebook 03 (scaled attention)")[0]
    assert "no 'Taught" in provenance_problems("plot_attention", "Draw.")[0]
    assert (
        "provenance lines" in wrong(f"{COMMAND_LINE}\nTaught in notebook 03 (scaled attention).")[0]
    )
    assert "fixed form" in module_problems("viz", "Plots.\n\nNotebook 03 teaches this module.")[0]
    assert "topic" in module_problems("viz", "Notebook 03 (attention) teaches this module.")[0]


def test_the_through_line_needs_the_notebook_to_use_x_and_x_to_reach_the_name():
    def used(name: str, line: str) -> list[str]:
        return provenance_problems(name, f"Build.\n\n{line}")

    assert used("make_norm", "Used in notebook 06 (normalisation), through GPT.") == []
    assert used("attention_weights", "Used in notebook 03 (scaled attention), through "
                "GPT.attention_maps.") == []  # fmt: skip
    # notebook 06 uses GPT, but GPT never calls sample_documents
    assert "does not reach" in used("sample_documents", "Used in notebook 06 (normalisation), "
                                    "through GPT.")[0]  # fmt: skip
    # GPT reaches make_norm, but notebook 13 never mentions load_corpus
    assert (
        "never mention load_corpus"
        in used("load_surnames", "Used in notebook 13 (kv cache), through load_corpus.")[0]
    )
    assert "fixed form" in used("make_norm", "Used in notebook 06 (normalisation) via GPT.")[0]
    assert reaches("load_corpus", "load_surnames")  # through the private _built_in
    assert not reaches("GPT.loss", "make_norm")  # a method: its own calls only
    assert command_line_reaches("preset") and not command_line_reaches("plot_model_diagram")
