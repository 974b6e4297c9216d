"""Draws the figures the README shows, from the project's own code: `make figures` (or
`python assets/figures.py [OUT_DIR]`, default assets/figures)."""

from __future__ import annotations

import sys
from pathlib import Path

from gptlib import viz

FIGURES = {"model.png": lambda: viz.plot_model_diagram()}


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        path = folder / name
        # No date or version in the file: the same code draws the same bytes.
        draw().savefig(path, dpi=90, metadata={"Software": None})
        written.append(path)
    return written


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "figures"
    for path in write(out):
        print(path)
