"""benchmarks/notebook_times.py's arguments and the kernel's settings, without executing any
notebook: which notebooks it would time, with how many threads, under which arithmetic, and a
clear error for what it cannot time."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import notebook_times  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_by_default_every_english_notebook_on_two_threads():
    args = notebook_times.parse_args([])
    assert args.threads == 2 and args.arithmetics == ["native", "portable"]
    names = [p.name for p in args.notebooks]
    assert len(names) == 17 and names == sorted(names)
    assert names[0].startswith("00_") and names[-1].startswith("16_")
    assert all(p.parent == ROOT / "notebooks" for p in args.notebooks)  # not notebooks/zh/


def test_named_notebooks_and_threads():
    nb = ROOT / "notebooks" / "03_scaled_attention.ipynb"
    args = notebook_times.parse_args([str(nb), "--threads", "1"])
    assert args.notebooks == [nb] and args.threads == 1
    assert notebook_times.parse_args(["--only", "native"]).arithmetics == ["native"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--threads", "0"], "--threads 0"),
        (["notebooks/99_nothing.ipynb"], "no such notebook"),
        (["README.md"], "not a notebook"),
        (["--timeout", "0"], "--timeout 0"),
        (["--only", "fast"], "invalid choice"),
    ],
)
def test_what_it_cannot_time_is_refused_with_what_to_give(argv, said, capsys):
    with pytest.raises(SystemExit) as stop:
        notebook_times.parse_args(argv)
    assert stop.value.code == 2
    assert said in capsys.readouterr().err


def test_the_kernel_runs_as_make_notebooks_does_but_on_the_threads_asked():
    env = notebook_times.kernel_environment(2, machine="x86_64")
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    assert env["PYTHONHASHSEED"] == "0"
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["MKL_CBWR"] == "COMPATIBLE"
    assert "MKL_CBWR" not in notebook_times.kernel_environment(2, native=True, machine="x86_64")
    assert "MKL_CBWR" not in notebook_times.kernel_environment(1, machine="arm64")  # none there
