"""Fail when a notebook has a code cell with no stored execution: nbval compares nothing there,
so a notebook stripped of its outputs would otherwise pass while checking nothing."""

import json
import sys


def unexecuted_cells(path: str) -> list[int]:
    with open(path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    return [
        i
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code"
        and "".join(cell["source"]).strip()
        and cell.get("execution_count") is None
    ]


def main(paths: list[str]) -> int:
    bad = {p: unexecuted_cells(p) for p in paths}
    bad = {p: cells for p, cells in bad.items() if cells}
    for path, cells in bad.items():
        print(f"{path}: code cell(s) {cells} have no stored execution; run `make notebooks`")
    if not paths:
        print("no notebooks given")
    return 1 if bad or not paths else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
