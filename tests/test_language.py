"""The catalogue of what gptlib says, in English and Chinese: complete, in step with the English
sentences of the code, and chosen by `set_language`, `--lang` or the locale."""

import re
import shutil

import pytest
from babel.messages.pofile import read_po

from gptlib import language
from gptlib.commandline.cli import build_parser, main
from gptlib.language import (
    _,
    catalogue_path,
    get_language,
    language_from_locale,
    set_language,
    tr,
)

HAN = re.compile(r"[\u4e00-\u9fff]")
LOCALE_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def _catalogue():
    with catalogue_path("zh").open("rb") as f:
        return {m.id: m for m in read_po(f, locale="zh_CN") if m.id}


def test_every_english_sentence_has_its_chinese_and_none_is_stale():
    source, catalogue = language.sentences(), _catalogue()
    assert len(source) >= 50  # the command line's help at least
    missing = [s for s in source if s not in catalogue]
    empty = [s for s, m in catalogue.items() if s in source and not m.string]
    fuzzy = [s for s, m in catalogue.items() if m.fuzzy]
    gone = [s for s in catalogue if s not in source]
    assert not missing, f"not in the catalogue (run python -m gptlib.language update): {missing}"
    assert not empty, f"no Chinese yet: {empty}"
    assert not fuzzy, f"the English changed since the Chinese was written: {fuzzy}"
    assert not gone, f"in the catalogue but no longer in the code: {gone}"


def _notebook_catalogue(stem):
    with language.notebook_catalogue_path("zh", stem).open("rb") as f:
        return {m.id: m for m in read_po(f, locale="zh_CN") if m.id}


def test_every_sentence_a_notebook_prints_has_its_chinese_and_none_is_stale():
    """What a notebook's own code prints or draws goes through `tr`, and its catalogue has the
    Chinese of every such sentence: the same staleness rule as gptlib's."""
    found = language.notebook_sentences()
    assert len(found) == 17 and sum(len(s) for s in found.values()) >= 300
    folder = language.notebook_catalogue_path("zh", "x").parent
    assert {p.stem for p in folder.glob("*.po")} == {s for s, m in found.items() if m}
    problems = []
    for stem, source in found.items():
        if not source:
            continue
        catalogue = _notebook_catalogue(stem)
        problems += [f"{stem}: not in the catalogue: {s!r}" for s in source if s not in catalogue]
        problems += [f"{stem}: no Chinese: {s!r}" for s, m in catalogue.items() if not m.string]
        problems += [f"{stem}: stale: {s!r}" for s, m in catalogue.items() if m.fuzzy]
        problems += [f"{stem}: left over: {s!r}" for s in catalogue if s not in source]
    assert not problems, "\n".join(problems[:30])


def test_a_sentence_said_in_two_notebooks_is_translated_one_way():
    seen, differ = {}, []
    for stem in language.notebook_sentences():
        path = language.notebook_catalogue_path("zh", stem)
        if not path.is_file():
            continue
        for english, entry in _notebook_catalogue(stem).items():
            if seen.setdefault(english, (stem, entry.string))[1] != entry.string:
                differ.append(f"{english!r}: {seen[english]} vs {stem} {entry.string!r}")
    for english, entry in _catalogue().items():
        if english in seen and seen[english][1] != entry.string:
            differ.append(f"{english!r}: gptlib's {entry.string!r} vs {seen[english]}")
    assert not differ, "\n".join(differ)


def test_no_notebook_translates_an_f_string():
    """`tr(f"...")` fills the values before the lookup: no catalogue can hold that sentence."""
    import json

    found = []
    for path in sorted(language.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            code = "".join(cell["source"])
            if cell["cell_type"] == "code" and re.search(r"\btr\(\s*[rRbB]?[fF]", code):
                found.append(f"{path.name} cell {cell.get('id')}")
    assert not found, found


def test_tr_fills_the_values_after_the_lookup():
    try:
        set_language("zh")
        assert tr("options") == "选项"  # a sentence of gptlib's catalogue
        assert tr("{n} of {m}", n=3, m=4) == "3 of 4"  # no translation: the English, filled in
    finally:
        set_language("en")
    assert tr("{x:.2f} nats", x=1.0 / 3) == "0.33 nats"


def test_a_said_sentence_is_english_to_the_code_and_translated_when_shown():
    """A shape table's step stays "input" for a notebook that selects rows by it, and shows as
    输入 in the Chinese edition."""
    step = language.said("block {layer} attention", layer=0)
    assert step == "block 0 attention" and step in ("block 0 attention",)
    try:
        set_language("zh")
        assert step == "block 0 attention"  # still found by its English name
        assert str(step) == "第 0 块 注意力" and f"[{step:>12}]" == "[   第 0 块 注意力]"
    finally:
        set_language("en")
    assert str(step) == "block 0 attention"


def test_update_leaves_an_up_to_date_catalogue_as_it_is(tmp_path):
    copy = tmp_path / "locale"
    shutil.copytree(language.LOCALE, copy)
    assert language.update(copy) == []
    assert catalogue_path("zh", copy).read_bytes() == catalogue_path("zh").read_bytes()
    for stem in language.notebook_sentences():
        ours = language.notebook_catalogue_path("zh", stem)
        if ours.is_file():
            assert (
                language.notebook_catalogue_path("zh", stem, copy).read_bytes() == ours.read_bytes()
            )


def test_a_changed_english_sentence_is_stale_until_translated_again(tmp_path, monkeypatch):
    """The staleness rule: an English sentence edited in the code leaves its old translation as a
    fuzzy suggestion, which is not shown and which the completeness test refuses."""
    copy = tmp_path / "locale"
    shutil.copytree(language.LOCALE, copy)
    edited = {s.replace("peak learning rate", "highest learning rate"): where
              for s, where in language.sentences().items()}  # fmt: skip
    monkeypatch.setattr(language, "sentences", lambda: edited)
    left = language.update(copy)
    assert left == ["highest learning rate (default: {lr})"]
    with catalogue_path("zh", copy).open("rb") as f:
        [entry] = [m for m in read_po(f) if m.id == left[0]]
    assert entry.fuzzy and HAN.search(entry.string)  # the old Chinese, kept as a suggestion only


def _fields(text: str) -> list[str]:
    """What a translation must carry over: {fields}, $VARIABLES, --flags and file names."""
    pattern = r"\{\w*\}|\$\w+|--[a-z][a-z-]*|\b[\w.]+\.(?:py|pt|json|bin|safetensors)\b"
    return sorted(re.findall(pattern, text))


# Said the same in Chinese: the textbook keeps "MLP" in English, and the rest is a formula.
SAME_IN_CHINESE = {"MLP  d → 4d → d"}


def test_translations_keep_every_field_flag_and_variable():
    for english, entry in _catalogue().items():
        if english in SAME_IN_CHINESE and entry.string == english:
            continue
        if not entry.string or entry.fuzzy:
            continue  # not translated yet, or a suggestion: the completeness test names it
        assert _fields(entry.string) == _fields(english), (english, entry.string)
        chinese = re.search(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]", entry.string)
        assert chinese, f"not Chinese: {entry.string!r}"  # words, or at least its punctuation


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LANG": "zh_TW.UTF-8"}, "zh"),
        ({"LANGUAGE": "zh_CN:en", "LANG": "en_US.UTF-8"}, "zh"),
        ({"LC_ALL": "C.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),  # LC_ALL comes first, as in gettext
        ({"LANG": "fr_FR.UTF-8"}, "en"),
        ({}, "en"),
    ],
)
def test_the_locale_chooses_as_gettext_does(environ, expected):
    assert language_from_locale(environ) == expected


def test_an_unknown_language_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"'fr'.*en, zh"):
        set_language("fr")
    assert get_language() == "en"


def test_the_library_speaks_the_language_set():
    try:
        set_language("zh_CN")
        assert get_language() == "zh" and _("options") == "选项"
        assert _("") == ""  # gettext alone would answer the catalogue's header
        set_language("en")
        assert _("options") == "options"
    finally:
        set_language("en")


def _help(monkeypatch, capsys, argv, lang=None) -> str:
    for variable in LOCALE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    if lang:
        monkeypatch.setenv("LANG", lang)
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 0
    assert get_language() == "en"  # main gives the process its language back
    return capsys.readouterr().out


def _columns(line: str) -> int:
    return sum(2 if HAN.match(c) or ord(c) >= 0xFF00 or 0x3000 <= ord(c) < 0x3040 else 1
               for c in line)  # fmt: skip


@pytest.mark.parametrize("command", ["train", "sample", "progress"])
def test_help_is_chinese_under_a_chinese_locale(monkeypatch, capsys, command):
    out = _help(monkeypatch, capsys, [command, "--help"], lang="zh_CN.UTF-8")
    assert out.startswith("用法：")
    parser = build_parser()  # English, to list the options
    sub = parser._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        flag = action.option_strings[-1] if action.option_strings else action.dest
        start = out.index(flag, out.index("\n\n"))  # past the usage lines
        shown = out[start:].split("\n  -", 1)[0]
        assert HAN.search(shown), f"{flag}'s help is not Chinese: {shown!r}"
    assert all(_columns(line) <= 80 for line in out.splitlines() if " " in line.strip()), out


def test_lang_overrides_the_locale_and_the_default_is_english(monkeypatch, capsys):
    out = _help(monkeypatch, capsys, ["--lang", "en", "train", "--help"], lang="zh_CN.UTF-8")
    assert out.startswith("usage:") and not HAN.search(out.split("tang300")[0])
    out = _help(monkeypatch, capsys, ["train", "--lang=zh", "--help"])
    assert out.startswith("用法：") and "峰值学习率" in out
    assert _help(monkeypatch, capsys, ["--help"]).startswith("usage:")


def _modules_speaking():
    """gptlib's modules that import `_` from gptlib.language."""
    import ast
    from pathlib import Path

    root = Path(language.__file__).parent
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module == "gptlib.language":
                if any(alias.name == "_" for alias in node.names):
                    yield path.relative_to(root.parent), tree


def test_no_function_that_speaks_rebinds_underscore():
    """`_, x = ...` or `for _ in ...` inside a function makes `_` a local name there, so every
    `_("...")` of that function fails (UnboundLocalError or "'int' object is not callable")."""
    import ast

    found = []
    for path, tree in _modules_speaking():
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Name)
                    and node.id == "_"
                    and isinstance(node.ctx, ast.Store)
                ):
                    found.append(f"{path}:{node.lineno} in {getattr(fn, 'name', 'lambda')}")
    names = [str(p) for p, _tree in _modules_speaking()]
    assert "gptlib/commandline/cli.py" in names and "gptlib/exercises/checking.py" in names
    assert not found, f"`_` rebound where it translates: {found}"


def test_show_solution_says_its_comments_in_the_language_in_use(capsys):
    """A reference solution's comments come from the catalogue too; its code stays as it is."""
    import ast

    from gptlib.exercises import check_adamw_step, check_causal_attention, show_solution

    for check in (check_causal_attention, check_adamw_step):
        show_solution(check)
        en = capsys.readouterr().out
        try:
            set_language("zh")
            show_solution(check)
            zh = capsys.readouterr().out
        finally:
            set_language("en")
        en_code, zh_code = en.split("\n", 1)[1], zh.split("\n", 1)[1]  # past the heading line
        assert [re.sub(r"\s*#.*", "", line) for line in en_code.splitlines()] == [
            re.sub(r"\s*#.*", "", line) for line in zh_code.splitlines()
        ]
        comments = [line.split("#", 1)[1] for line in zh_code.splitlines() if "#" in line]
        assert comments and any(HAN.search(c) for c in comments), zh_code
        ast.parse(zh_code)  # still Python a reader can paste


def test_the_catalogue_reads_the_same_solution_comments_as_show_solution_prints():
    """gptlib.language finds the solutions' comments in the source without importing the
    exercises (it sits below them); show_solution's own reading of the imported functions agrees."""
    from pathlib import Path

    from gptlib.exercises.checking import solution_comments

    static = language._solution_comments(Path(language.__file__).parent / "exercises")
    assert set(static) == set(solution_comments()) and len(static) >= 50


def test_tr_answers_a_bool_in_the_language_in_use():
    """A yes-or-no value of `tr` is True/False in English, exactly as str.format writes it (the
    English outputs do not change), and 是/否 in Chinese; a list or tuple of them too; numbers
    (1 is not True) and tensors (PyTorch's own repr) are left as they are."""
    import torch

    template = "{a}; by seed: {each}; pair {pair}; one {one}; count {n}; t {t}"
    values = dict(a=True, each=[True, False], pair=(False, True), one=(True,), n=1)
    values["t"] = torch.tensor(True)
    assert tr(template, **values) == template.format(**values)
    try:
        set_language("zh")
        said = tr(template, **values)
    finally:
        set_language("en")
    assert said == "是; by seed: [是, 否]; pair (否, 是); one (是,); count 1; t 是"
    code = (
        "use_cache={cache!s:5} set_to_none={none}, {flag!r}; same: {same}; a == b: {eq}; 共享={t}"
    )
    try:
        set_language("zh")
        written = tr(code, cache=True, none=False, flag=True, same=True, eq=False, t=True)
    finally:
        set_language("en")
    assert written == "use_cache=True  set_to_none=False, True; same: 是; a == b: 否; 共享=是", (
        written
    )
    assert tr("{t}", t=torch.tensor([True])) == "tensor([True])"  # a tensor of them: PyTorch's
    assert tr("{x}", x=[]) == "[]" and tr("{x}", x=[True, 2]) == "[True, 2]"
    import numpy as np

    try:
        set_language("zh")
        assert tr("{x} {y}", x=np.bool_(False), y=np.int64(1)) == "否 1"
    finally:
        set_language("en")


def test_a_table_answers_its_bool_cells_in_the_language_in_use():
    from gptlib.classroom.shapes import Table

    table = Table(["case", "same"], [["a", True], ["b", False]])
    assert "True" in str(table) and "<td>False</td>" in table._repr_html_()
    try:
        set_language("zh")
        text, page = str(table), table._repr_html_()
    finally:
        set_language("en")
    assert [line.split() for line in text.splitlines()[-2:]] == [["a", "是"], ["b", "否"]], text
    assert "<td>是</td>" in page and "<td>否</td>" in page
    assert "True" not in text + page and table.column("same") == [True, False]  # values stay


def _pytorch_errors():
    """The errors the notebooks show as evidence, raised by PyTorch itself: the message -> the
    values its gloss must name."""
    import warnings

    import torch
    import torch.nn.functional as F

    found = []

    def caught(attempt, *named):
        try:
            attempt()
        except (RuntimeError, ValueError, IndexError) as error:
            found.append((error, named))
        else:
            raise AssertionError("did not raise")

    caught(lambda: torch.ones(27, 16) @ torch.ones(4, 16), "27x16", "4x16")
    caught(lambda: F.cross_entropy(torch.randn(6, 27), F.one_hot(torch.arange(6), 27)), "Long")
    caught(lambda: F.cross_entropy(torch.randn(4, 7, 27), torch.zeros(4, 7).long()), "[4, 27]")
    caught(lambda: torch.ones(2, 5, 8) + torch.ones(2, 5, 32), "8", "32", "2")
    caught(lambda: torch.nn.Embedding(8, 4)(torch.arange(9)))
    small, big = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16)
    caught(lambda: big.load_state_dict(small.state_dict()), "weight", "[16, 8]", "[16, 16]")
    caught(lambda: torch.optim.AdamW([{"params": [big.weight]}, {"params": [big.weight]}]))
    loss = big(torch.ones(16)).sum()
    loss.backward()
    caught(loss.backward)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        torch.optim.AdamW([big.weight, big.weight])
    found.append((warned[0].message, ()))
    return found


def test_every_error_a_notebook_shows_gets_its_own_gloss_in_the_language_in_use():
    """gloss() names what each PyTorch error means, each with its own sentence and the values of
    its message; in Chinese under the Chinese edition; an error it does not know is refused with
    what to do, not glossed with a sentence that says nothing."""
    errors = _pytorch_errors()
    english = [language.gloss(e) for e, _ in errors]
    assert len(set(english)) == len(errors) == len(language.GLOSSES), english
    for (error, named), said in zip(errors, english, strict=True):
        assert said.startswith("in short: ") and all(v in said for v in named), (error, said)
    try:
        set_language("zh")
        chinese = [language.gloss(e) for e, _ in errors]
    finally:
        set_language("en")
    for (error, named), said in zip(errors, chinese, strict=True):
        assert len(HAN.findall(said)) >= 8 and all(v in said for v in named), (error, said)
        assert not re.search(r"[A-Za-z]{3,}(?: [A-Za-z]{2,}){3}", said), said  # no English left
    with pytest.raises(ValueError, match="GLOSSES"):
        language.gloss(RuntimeError("a message PyTorch never wrote"))


def test_an_explorer_shows_a_sentence_not_its_repr_where_no_widget_is_drawn():
    from gptlib.classroom import widgets

    box = widgets.attention_scale_explorer()
    data = box._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data  # the widget itself is kept
    assert "VBox" not in data["text/plain"] and "Jupyter" in data["text/plain"]
    try:
        set_language("zh")
        said = box._repr_mimebundle_()["text/plain"]
    finally:
        set_language("en")
    assert HAN.search(said) and "VBox" not in said
