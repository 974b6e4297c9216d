"""How long each notebook takes to Run All: its seconds and the total, nothing asserted.

Each notebook is executed on a temporary copy, never in place, with an empty temporary reader's
package in GPTLIB_YOURS, PYTHONHASHSEED=0 and `--threads` threads (default 2: "Run All on two
threads" is the measure a reader's laptop sees; `make notebooks` itself uses one), twice:

- native: this CPU's own vector kernels, as a reader's JupyterLab runs it (nothing set);
- portable: ATen's scalar kernels and MKL's compatible code path, the arithmetic `make notebooks`
  stores the outputs under and nbval compares the English edition under (x86-64 only; the scalar
  kernels make a notebook that trains at d = 128 about three times slower).

The clock runs from the first cell to the last, the kernel already started, as when a reader opens
the notebook and presses Run All; beside each time, the slowest cell's seconds and id.

    python benchmarks/notebook_times.py                       # every English notebook, both ways
    python benchmarks/notebook_times.py notebooks/03_scaled_attention.ipynb --threads 1
    python benchmarks/notebook_times.py --only native         # a reader's Run All alone
    make notebook-times ARGS="--threads 1"
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# ATen's scalar kernels and MKL's compatible code path: the arithmetic the stored outputs were
# made under (tests/notebook_arithmetic.sh), on x86-64 only.
PORTABLE = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
ARITHMETICS = ("native", "portable")


def english_notebooks() -> list[Path]:
    return sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/notebook_times.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "notebooks",
        nargs="*",
        type=Path,
        help="the notebooks to time (default: every English notebook, notebooks/NN_*.ipynb)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=2,
        help="torch's threads in the kernel (OMP_NUM_THREADS, MKL_NUM_THREADS); default 2",
    )
    parser.add_argument(
        "--timeout", type=int, default=900, help="seconds one cell may take (default 900)"
    )
    parser.add_argument(
        "--only",
        choices=ARITHMETICS,
        help="time under one arithmetic only: native (a reader's Run All) or portable (make "
        "notebooks'); default both",
    )
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: give 1 or more threads (the default is 2)")
    if args.timeout < 1:
        parser.error(f"--timeout {args.timeout}: give the seconds one cell may take, 1 or more")
    for path in args.notebooks:
        if path.suffix != ".ipynb":
            parser.error(f"{path}: not a notebook (expected a .ipynb file, e.g. notebooks/00_*)")
        if not path.is_file():
            parser.error(f"{path}: no such notebook (the notebooks are in {ROOT / 'notebooks'})")
    args.notebooks = [p.resolve() for p in args.notebooks] or english_notebooks()
    args.arithmetics = [args.only] if args.only else list(ARITHMETICS)
    return args


def kernel_environment(threads: int, native: bool = False, machine: str | None = None) -> dict:
    """The variables the kernel runs under, beside the caller's environment."""
    env = {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
    }
    machine = (machine or platform.machine()).lower()
    if not native and machine in ("x86_64", "amd64"):
        env.update(PORTABLE)
    return env


def run_all_seconds(path: Path, timeout: int) -> tuple[float, float, str]:
    """Execute a copy of `path` in a temporary folder; the seconds from its first cell to its
    last, and the slowest cell's seconds and id. A failing cell raises nbclient's
    CellExecutionError."""
    import nbformat
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="notebook-times-") as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(copy, as_version=4)
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": folder}}
        )
        slowest, slowest_id = 0.0, ""
        with client.setup_kernel():
            start = time.perf_counter()
            for index, cell in enumerate(nb.cells):
                before = time.perf_counter()
                client.execute_cell(cell, index)
                took = time.perf_counter() - before
                if took > slowest:
                    slowest, slowest_id = took, cell.get("id", str(index))
            seconds = time.perf_counter() - start
        nbformat.write(nb, copy)  # the executed copy, gone with its folder
    return seconds, slowest, slowest_id


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    yours = tempfile.mkdtemp(prefix="gptlib-yours-")  # an empty reader's package
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    arithmetics = [a for a in args.arithmetics if a == "native" or x86]  # no portable on arm64
    if not arithmetics:
        print("the portable arithmetic exists on x86-64 only; time with --only native here")
        return 1
    print(f"Run All, {args.threads} thread(s), on copies, seconds under each arithmetic")
    print(
        f"{'notebook':32}" + "".join(f"{a:>10}{'slowest cell':>22}" for a in arithmetics),
        flush=True,
    )
    totals, failed = dict.fromkeys(arithmetics, 0.0), []
    try:
        for path in args.notebooks:
            row = []
            for arithmetic in arithmetics:
                for name in PORTABLE:  # the kernel inherits os.environ: nothing left over
                    os.environ.pop(name, None)
                os.environ.update(
                    kernel_environment(args.threads, arithmetic == "native"), GPTLIB_YOURS=yours
                )
                try:
                    seconds, slowest, cell = run_all_seconds(path, args.timeout)
                except Exception as e:  # a failing cell: named, and the others still run
                    failed.append(f"{path.name} ({arithmetic})")
                    print(f"{path.name} failed under the {arithmetic} arithmetic: "
                          f"{str(e).strip().splitlines()[-1][:200]}", flush=True)  # fmt: skip
                    row.append(f"{'failed':>10}{'':>22}")
                    continue
                totals[arithmetic] += seconds
                row.append(f"{seconds:10.1f}{f'{slowest:.1f} ({cell[:12]})':>22}")
            print(f"{path.name:32}" + "".join(row), flush=True)
    finally:
        shutil.rmtree(yours, ignore_errors=True)
    print(f"{'total':32}" + "".join(f"{totals[a]:10.1f}{'':>22}" for a in arithmetics))
    if failed:
        print(f"not timed, a cell failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
