"""Draws the figures the README shows, from the project's own code: `make figures` (or
`python assets/figures.py [OUT_DIR]`, default assets/figures)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from gptlib.bigram import bigram_loss
from gptlib.checkpoint import load_asset
from gptlib.classroom import viz
from gptlib.data import load_corpus


def attention() -> object:
    """The four heads of the trained microgpt reading '.olivia' (notebook 04's picture)."""
    ckpt = load_asset("names-microgpt-h4.pt")
    idx = torch.tensor([ckpt.tokenizer.encode(".olivia")])
    maps = ckpt.model.attention_maps(idx)[0, 0]  # [h, n, n]
    maps = torch.round(maps, decimals=3)  # the same pixels on any CPU
    return viz.plot_attention_grid(maps, list(".olivia"), title="microgpt, 4 heads, '.olivia'")


def loss() -> object:
    """The textbook preset's stored training run on the names, with its two baselines."""
    ckpt = load_asset("names-textbook.pt")
    corpus = load_corpus("names")
    bigram = round(bigram_loss(corpus.train, corpus.val, corpus.vocab_size), 3)
    return viz.plot_loss(
        ckpt.history,
        corpus.vocab_size,
        "The textbook preset on the names: loss by step",
        baseline={"bigram": bigram},
    )


FIGURES = {
    "model.png": lambda: viz.plot_model_diagram(),
    "attention.png": attention,
    "loss.png": loss,
}


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
