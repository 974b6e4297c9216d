"""Every public function and class of the core library names the notebook that teaches it, in one
line of its docstring a reader (and this test) can find:

    Taught in notebook 03 (scaled attention).

or, for one no notebook teaches, `Used by the command line; no notebook teaches it.` or
`Not taught in a notebook: <why it exists>.` The notebook must exist, the words in parentheses
must be its topic as its file name spells it (03_scaled_attention.ipynb -> "scaled attention"),
and its code cells (English edition) must mention the name, so the line cannot point at a notebook
that never uses the thing. A module whose home is one notebook says so in its own docstring:
`Notebook 03 (scaled attention) teaches this module.`

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
PLUMBING = {"cli", "run", "checkpoint", "distributed", "device", "_early_signals", "__main__"}
PLUMBING |= {"settings", "signals", "claim", "needs", "large_text", "samples", "report"}

TAUGHT = re.compile(r"Taught in notebook (\d\d) \(([^()]+)\)\.")
COMMAND_LINE = "Used by the command line; no notebook teaches it."
NOT_TAUGHT = re.compile(r"Not taught in a notebook: \S.*\.")
MODULE_HOME = re.compile(r"Notebook (\d\d) \(([^()]+)\) teaches this module\.")
# A line that looks like it means to say one of the above, checked so that a misspelt one fails
# instead of passing unseen.
LOOKS_LIKE = re.compile(r"taught in|teaches this module|no notebook teaches", re.IGNORECASE)


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
    taught = TAUGHT.fullmatch(mark)
    if not taught:
        return [f"{name}: provenance line not in the fixed form: {mark!r}"]
    number, topic = taught.groups()
    problems = _notebook_problems(number, topic, notebooks)
    if not problems and not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", notebooks[number][1]):
        problems.append(f"{name}: notebook {number} ({topic})'s code cells never mention it")
    return [f"{name}: {p}" if not p.startswith(name) else p for p in problems]


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
    # never __main__: importing it runs the command line
    return sorted(p.stem for p in (ROOT / "gptlib").glob("*.py") if p.stem != "__main__")


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


@pytest.mark.parametrize(
    "module,name,obj", PLUMBING_OBJECTS, ids=[f"{m}.{n}" for m, n, _ in PLUMBING_OBJECTS]
)
def test_a_plumbing_function_that_names_a_notebook_names_it_truly(module, name, obj):
    doc = _own_doc(obj)
    lines = inspect.cleandoc(doc or "").splitlines()
    if any(LOOKS_LIKE.search(line) for line in lines):
        assert provenance_problems(name, doc) == []


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "gptlib").glob("*.py")))
def test_a_module_line_names_a_real_notebook(module):
    source = (ROOT / "gptlib" / f"{module}.py").read_text(encoding="utf-8")
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
