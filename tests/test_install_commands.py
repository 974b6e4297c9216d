"""A reader's install, as README.md gives it to a reader without `make`: the same two steps on
Windows and on macOS or Linux, the same files as `make lab`, and a course install that holds what
reading needs and none of the website's or the tests' tools.

The commands are read out of README.md and run as written on this machine (the POSIX block): the
environment is created in a temporary folder, and the install is a dry run, offline, against the
environment the tests run in (which `make test` installed from the same files): pip resolves
every pin of the course's files and would install nothing but gptlib itself."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SECTION = "## The two commands"
MAINTAINER_TOOLS = {"sphinx", "myst-nb", "pytest", "nbval", "ruff", "playwright", "coverage"}


def readme_steps(text: str | None = None) -> dict[str, list[str]]:
    """The commands of the README's section on installing without make: {"bat": the Windows
    lines, "bash": the macOS/Linux lines}."""
    text = text if text is not None else (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    section = text[start : text.find("\n## ", start + 1)]
    section = section[section.index("**Without `make`**") :]
    blocks = re.findall(r"```(bat|bash)\n(.*?)```", section, re.S)
    steps = {
        lang: [line.strip() for line in body.splitlines() if line.strip()] for lang, body in blocks
    }
    if set(steps) != {"bat", "bash"}:
        raise AssertionError(
            f"README.md: expected a bat and a bash block of commands, found {list(steps)}"
        )
    return steps


def pinned(path: Path) -> dict[str, str]:
    """{canonical name: version} of a requirements file's `name==version` lines."""
    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            found[canonicalize_name(name)] = version.strip()
    return found


def requirement_files(pip_line: str) -> list[str]:
    words = shlex.split(pip_line)
    return [words[i + 1] for i, w in enumerate(words) if w == "-r"]


def makefile_course_files() -> list[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return re.search(r"^COURSE_REQS := (.*)$", text, re.M).group(1).split()


def test_windows_and_posix_give_the_same_three_steps():
    steps = readme_steps()
    posix = [
        line.replace("py -m ", "python3 -m ", 1).replace(".venv\\Scripts\\", ".venv/bin/")
        for line in steps["bat"]
    ]
    assert posix == steps["bash"]
    venv, install, lab = steps["bash"]
    assert venv == "python3 -m venv .venv"
    assert install.startswith(".venv/bin/python -m pip install ")
    assert lab == ".venv/bin/jupyter lab notebooks/"


def test_the_readme_installs_what_make_lab_installs():
    files = requirement_files(readme_steps()["bash"][1])
    assert files == makefile_course_files() == ["requirements.txt", "requirements-gpt2.txt"]
    assert all((ROOT / f).is_file() for f in files)


def test_the_steps_can_be_found_only_where_they_are():
    with pytest.raises(AssertionError, match="bat and a bash block"):
        readme_steps("## The two commands\n\n**Without `make`**\n\n```bash\nls\n```\n## Next\n")


def test_the_course_install_is_closed_and_holds_no_maintainer_tool():
    """Every package a course pin requires (on this Python, no extras) is pinned in the course's
    files, so pip brings nothing unpinned; none of them is the website's or the tests'."""
    from importlib import metadata

    course = {}
    for name in makefile_course_files():
        course.update(pinned(ROOT / name))
    others = {**pinned(ROOT / "requirements-site.txt"), **pinned(ROOT / "requirements-test.txt")}
    assert not course.keys() & others.keys(), "a package is pinned in two files"
    assert not MAINTAINER_TOOLS & course.keys()
    assert {"torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab"} <= course.keys()
    assert course["torch"] == "2.13.0"
    unpinned = {}
    for name in course:
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                dep = canonicalize_name(req.name)
                if dep not in course and dep != "setuptools":
                    unpinned.setdefault(dep, []).append(name)
    assert not unpinned, f"required by the course but not pinned in its files: {unpinned}"


def test_the_readme_steps_run_as_written(tmp_path):
    venv, install, lab = readme_steps()["bash"]
    # 1. The environment, created as written, in a temporary folder.
    words = shlex.split(venv)
    subprocess.run([sys.executable, *words[1:]], cwd=tmp_path, check=True, timeout=120)
    assert (tmp_path / ".venv" / "bin" / "python").exists()
    # 2. The install, as written, a dry run offline against the tests' own environment.
    report = tmp_path / "report.json"
    words = shlex.split(install)
    done = subprocess.run(
        [sys.executable, *words[1:], "--dry-run", "--no-index", "--no-build-isolation",
         "--quiet", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    would_install = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert would_install == ["gptlib"], would_install  # every pin is what make test installed
    # 3. JupyterLab on the notebooks: the command exists beside Python, the folder holds them.
    assert lab.split()[1:] == ["lab", "notebooks/"]
    assert (Path(sys.executable).parent / "jupyter-lab").exists()
    assert len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))) == 17
