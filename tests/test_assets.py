"""Every trained checkpoint in assets/ loads (weights only) and reaches the validation loss that
assets/README.md states for it."""

import os
import re

import pytest

from gptlib.checkpoint import ASSETS, load_asset
from gptlib.data import load_corpus
from gptlib.train import estimate_loss


def _readme_figures() -> dict[str, float]:
    with open(os.path.join(ASSETS, "README.md"), encoding="utf-8") as f:
        text = f.read()
    return {
        m[1]: float(m[2])
        for m in re.finditer(r"^\| `([\w.-]+\.pt)` \|.*\| ([0-9.]+) \|$", text, re.M)
    }


FIGURES = _readme_figures()


def test_readme_lists_every_asset():
    on_disk = sorted(f for f in os.listdir(ASSETS) if f.endswith(".pt"))
    assert sorted(FIGURES) == on_disk
    assert {f"names-microgpt-h{h}.pt" for h in (1, 2, 4, 8, 16)} | {"names-textbook.pt"} == set(
        on_disk
    )
    total = sum(os.path.getsize(os.path.join(ASSETS, f)) for f in on_disk)
    assert total < 5_000_000


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_asset_reaches_its_stated_val_loss(name):
    ck = load_asset(name)
    corpus = load_corpus("names")
    assert ck.tokenizer == corpus.tokenizer
    val = estimate_loss(ck.model, corpus.val, n_batches=50)
    assert val == pytest.approx(FIGURES[name], abs=2e-3)
    assert val < 2.376 - 0.2  # clearly better than the bigram baseline (2.3756)
    assert ck.optimizer_state is None  # weights, config and history only: small files
