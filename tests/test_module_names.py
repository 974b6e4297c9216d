"""One name, one thing: every `gptlib.X` the READMEs name is what it says (a module stays the
module, `help(gptlib.generate)` shows sampling, not one function), no attribute of `gptlib` or
`gptlib.exercises` hides a submodule of the same name, and the READMEs' module list names every
module of gptlib/, in an order where each imports only those listed before it. Apart from the
READMEs: the catalogue (`language`) imports no gptlib module, and the model's core (config up to
model) imports nothing above it."""

import ast
import importlib
import importlib.util
import pkgutil
import pydoc
import re
import sys
import types
from pathlib import Path

import pytest

import gptlib
import gptlib.exercises

ROOT = Path(__file__).resolve().parent.parent
READMES = ("README.md", "README.zh-CN.md", "MAINTAINING.md", "MAINTAINING.zh-CN.md")
# Where the modules are listed (MAINTAINING.md, both editions): from this heading to the next one.
MODULE_LIST = {"MAINTAINING.md": "## The library", "MAINTAINING.zh-CN.md": "## 库"}
NOT_IMPORTED = {"__main__"}  # importing it runs the command line


def _readme(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _is_submodule(parent: str, name: str) -> bool:
    try:
        return importlib.util.find_spec(f"{parent}.{name}") is not None
    except ModuleNotFoundError:  # parent is not a package
        return False


def name_problems(dotted: str) -> list[str]:
    """What is wrong with a dotted name `gptlib.a.b...` a README gives; [] when each part that is
    a submodule imports as that module and is what its parent's attribute of that name holds, and
    the first part that is no submodule is an attribute of the module before it."""
    parts = dotted.split(".")
    module = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        prefix = ".".join(parts[:i])
        if _is_submodule(prefix, part):
            sub = importlib.import_module(f"{prefix}.{part}")
            held = getattr(module, part, sub)
            if held is not sub:
                return [
                    f"{dotted}: {prefix}.{part} is a {type(held).__name__} ({held!r}), which hides "
                    f"the module {prefix}.{part}; import the {type(held).__name__} from its module "
                    "instead of re-exporting it under the module's name"
                ]
            module = sub
            continue
        if not hasattr(module, part):
            return [
                f"{dotted}: {prefix} has no {part!r}, and there is no module {prefix}.{part}; "
                "the README names something gptlib does not have"
            ]
        return []
    return []


def _readme_names(text: str) -> list[str]:
    # after a "/" it is a file of a path (locale/.../gptlib.po), not a module
    return sorted(set(re.findall(r"(?<![\w./])gptlib(?:\.\w+)+", text)))


@pytest.mark.parametrize("readme", READMES)
def test_every_gptlib_name_in_the_readme_is_what_it_says(readme):
    names = _readme_names(_readme(readme))
    if readme.startswith("README"):
        assert "gptlib.generate" in names  # `help(gptlib.generate)`: the README's own advice
    problems = [p for name in names for p in name_problems(name)]
    assert not problems, "\n".join(problems)


def test_help_on_generate_shows_the_module():
    shown = pydoc.render_doc(gptlib.generate, renderer=pydoc.plaintext)
    assert isinstance(gptlib.generate, types.ModuleType), gptlib.generate
    assert "Autoregressive sampling" in shown and "sample_documents" in shown, shown[:300]


def shadow_problems(package: types.ModuleType) -> list[str]:
    """Attributes of `package` with a submodule's name that are not that submodule."""
    problems = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.name in NOT_IMPORTED:
            continue
        sub = importlib.import_module(f"{package.__name__}.{info.name}")
        held = getattr(package, info.name)
        if held is not sub:
            problems.append(
                f"{package.__name__}.{info.name} is a {type(held).__name__} ({held!r}), not the "
                f"module {package.__name__}.{info.name}; stop re-exporting it under that name"
            )
    return problems


@pytest.mark.parametrize("package", [gptlib, gptlib.exercises], ids=lambda p: p.__name__)
def test_no_attribute_hides_a_submodule(package):
    problems = shadow_problems(package)
    assert not problems, "\n".join(problems)


def test_a_hidden_submodule_is_found(tmp_path, monkeypatch):
    """The checks above can fail: a package that re-exports a function under its module's name."""
    pkg = tmp_path / "shadowpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from shadowpkg.train import train\n", encoding="utf-8")
    (pkg / "train.py").write_text("def train():\n    pass\n", encoding="utf-8")
    (pkg / "other.py").write_text("", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        shadowpkg = importlib.import_module("shadowpkg")
        [problem] = shadow_problems(shadowpkg)
        assert "shadowpkg.train is a function" in problem
        [problem] = name_problems("shadowpkg.train.train")
        assert "hides the module shadowpkg.train" in problem
        assert name_problems("shadowpkg.other") == []
        assert "has no 'gone'" in name_problems("shadowpkg.other.gone")[0]
        assert "has no 'gone'" in name_problems("shadowpkg.gone.f")[0]
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] == "shadowpkg"]:
            del sys.modules[name]


# Folders that only group modules (the classroom, the command line): their modules are listed one
# by one, as `classroom.viz`; any other package (`exercises`) is one unit.
GROUPS = ("classroom", "commandline")


def _units() -> list[str]:
    """gptlib's modules as the module list names them: `model`, `exercises`, `classroom.viz`."""
    found = []
    for info in pkgutil.iter_modules(gptlib.__path__):
        if info.name in GROUPS:
            group = Path(gptlib.__file__).parent / info.name
            found += [f"{info.name}.{sub.name}" for sub in pkgutil.iter_modules([str(group)])]
        else:
            found.append(info.name)
    return sorted(found)


def _listed(readme: str) -> list[str]:
    """The modules of gptlib/ the README's module list names, in its order."""
    text = _readme(readme)
    start = text.index(MODULE_LIST[readme] + "\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else None]
    modules = set(_units())
    found = []
    for name in re.findall(r"`([\w.]+)`", section):
        if name in modules and name not in found:
            found.append(name)
    return found


def _unit_of(parts: list[str]) -> str:
    """The unit a dotted name gptlib.<parts> belongs to."""
    if parts[0] in GROUPS and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _imports(module: str) -> set[str]:
    """The gptlib units `gptlib.<module>` (every file of a package) imports, anywhere in it."""
    path = Path(gptlib.__file__).parent.joinpath(*module.split("."))
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    found = set()
    for file in files:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0] != "gptlib" or len(parts) < 2:
                    continue
                unit = _unit_of(parts[1:])
                if unit != module and unit in GROUPS:
                    continue  # `from gptlib.classroom import viz`: the unit is in the next name
                if unit != module and _is_submodule("gptlib", unit):
                    found.add(unit)
    return found


@pytest.mark.parametrize("readme", MODULE_LIST)
def test_the_module_list_names_every_module_in_import_order(readme):
    listed = _listed(readme)
    modules = _units()
    missing = [m for m in modules if m not in listed]
    assert not missing, f"{readme}'s module list leaves out {missing}; say what each one holds"
    late = [
        f"{m} imports {sorted(imp - set(listed[:i]))}, listed after it"
        for i, m in enumerate(listed)
        if (imp := _imports(m)) - set(listed[:i])
    ]
    assert not late, f"{readme}: each module should import only those listed before it: {late}"


def test_the_module_list_check_can_fail(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "_readme", lambda name: "## The library\n`config`\n")
    assert _listed("MAINTAINING.md") == ["config"]


def _layers(text: str) -> list[list[str]]:
    """The modules each bullet of MAINTAINING.md's layer map names, bullet by bullet."""
    start = text.index("## The layer map\n")
    section = text[start : text.index("\n## ", start + 1)]
    modules = set(_units())
    bullets = re.split(r"\n- ", section)[1:]
    return [[n for n in re.findall(r"`([\w.]+)`", b) if n in modules] for b in bullets]


def test_the_layer_map_places_every_module_in_one_layer():
    layers = _layers(_readme("MAINTAINING.md"))
    assert len(layers) == 3  # the GPT the chapters teach, the classroom, the command line
    placed = [m for layer in layers for m in layer]
    modules = set(_units()) - NOT_IMPORTED
    assert not modules - set(placed), f"the layer map leaves out {sorted(modules - set(placed))}"
    twice = sorted({m for m in placed if sum(m in layer for layer in layers) > 1})
    assert not twice, f"the layer map places {twice} in more than one layer"
    assert "model" in layers[0] and "exercises" in layers[1] and "commandline.cli" in layers[2]
    # the folders show the wings: the classroom's modules and the command line's live apart
    assert all(m.startswith("classroom.") or m == "exercises" for m in layers[1])
    assert all(m.startswith("commandline.") for m in layers[2])


# The model's core, bottom to top, whatever order the READMEs list it in: each module may import
# only those before it, and nothing else of gptlib (no plotting, training, sampling or command line
# below the model). The catalogue of messages, `language`, is at the very bottom: it imports no
# gptlib module at all, so any module, the core included, can translate its sentences.
CORE_LAYERS = (
    "language",
    "config",
    "tokenizer",
    "data",
    "norms",
    "positions",
    "kvcache",
    "attention",
    "mlp",
    "model",
)


def layer_problems(layers, imports_of) -> list[str]:
    """'m imports x, above it or outside the core' for each import that breaks the layers."""
    return [
        f"{m} imports {sorted(bad)}, above it or outside the core"
        for i, m in enumerate(layers)
        if (bad := imports_of(m) - set(layers[:i]))
    ]


def _names_gptlib(module: str) -> list[str]:
    """Every import statement of gptlib/<module>.py that names gptlib at all (`import gptlib`,
    `from gptlib import x`, `from gptlib.x import y`), anywhere in the file."""
    tree = ast.parse((ROOT / "gptlib" / f"{module}.py").read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gptlib":
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "gptlib"]
    return found


def test_the_catalogue_imports_no_gptlib_module():
    assert _names_gptlib("language") == []
    assert _imports("language") == set()


def test_the_model_core_imports_nothing_above_it():
    assert set(CORE_LAYERS) <= {info.name for info in pkgutil.iter_modules(gptlib.__path__)}
    assert layer_problems(CORE_LAYERS, _imports) == []


def test_the_layer_check_can_fail():
    imports = {"language": set(), "config": {"language"}, "mlp": {"config", "viz"}}
    assert layer_problems(("language", "config", "mlp"), imports.__getitem__) == [
        "mlp imports ['viz'], above it or outside the core"
    ]
    imports["config"] = {"mlp"}  # an upward import
    assert layer_problems(("language", "config", "mlp"), imports.__getitem__)[0].startswith(
        "config imports ['mlp']"
    )
    assert _names_gptlib("model")  # the scan sees gptlib imports where there are some


# The exercise package's own machinery; every other module of it holds one notebook's checks.
EXERCISE_MACHINERY = {"__init__", "checking", "table", "yours", "assemble", "progress"}


def _near(a: str, b: str) -> bool:
    """Whether two module names read as one: equal, one inside the other, or a letter or two apart."""
    import difflib

    return a in b or b in a or difflib.SequenceMatcher(None, a, b).ratio() >= 0.8


def test_each_exercise_module_is_named_after_its_notebook():
    folder = ROOT / "gptlib" / "exercises"
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    core = [u for u in _units() if "." not in u and u not in ("exercises", "__main__")]
    for path in sorted(folder.glob("*.py")):
        name = path.stem
        if name in EXERCISE_MACHINERY:
            continue
        assert name.startswith("nb") and name[2:] in notebooks, (
            f"exercises/{name}.py: name it after its notebook, nbNN_topic (one of {sorted(notebooks)})"
        )
    machinery = EXERCISE_MACHINERY - {"__init__"}
    clash = [(m, c) for m in machinery for c in core if _near(m, c)]
    assert not clash, f"exercise modules that read as a core module's name: {clash}"


def test_the_near_name_check_can_fail():
    assert _near("norms", "norms") and _near("kv_cache", "kvcache") and _near("norm", "norms")
    assert not _near("nb03_scaled_attention", "model") and not _near("checking", "config")


def test_the_exercises_are_imported_by_name_not_by_a_loop():
    source = (ROOT / "gptlib" / "exercises" / "__init__.py").read_text(encoding="utf-8")
    assert "importlib" not in source and "pkgutil" not in source
    tree = ast.parse(source)
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for a in n.names}  # fmt: skip
    from gptlib.exercises.table import EXERCISES

    missing = [e.check for e in EXERCISES if e.check not in imported]
    assert not missing, f"exercises/__init__.py does not import {missing} by name"
