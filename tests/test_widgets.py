"""The sliders, driven headlessly: set a control's .value, check what the widget now holds."""

import math

import matplotlib.pyplot as plt
import pytest
import torch
from ipywidgets import Widget

from gptlib import (
    GPT,
    CharTokenizer,
    load_checkpoint,
    microgpt,
    sample_documents,
    save_checkpoint,
    textbook,
)
from gptlib.classroom import widgets as gw

LETTERS = "abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True, scope="module")
def agg_backend():
    plt.switch_backend("Agg")
    yield


@pytest.fixture(scope="module")
def tokenizer():
    return CharTokenizer.from_documents([LETTERS])  # 26 letters + BOS "." = 27


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = GPT(microgpt())
    with (
        torch.no_grad()
    ):  # a random model is nearly uniform; sharpen it so greedy differs from sampling
        m.lm_head.weight.mul_(50)
    return m.eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer):
    """Untrained microgpt models with 1, 2, 4 and 16 heads, and a small `textbook`-preset model."""
    folder = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for h in (1, 2, 4, 16):
        torch.manual_seed(h)
        paths[h] = folder / f"names-microgpt-h{h}.pt"
        save_checkpoint(paths[h], GPT(microgpt(n_head=h)), tokenizer)
    torch.manual_seed(0)
    textbook_path = folder / "names-textbook.pt"
    save_checkpoint(
        textbook_path, GPT(textbook(n_layer=2, n_head=4, n_embd=32, block_size=16)), tokenizer
    )
    return paths, textbook_path


def _logits_after(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]))[0][0, -1]


def test_temperature_explorer_greedy_and_top_k(model, tokenizer):
    w = gw.temperature_explorer(model, tokenizer, context=".", num_samples=6, seed=0, max_len=12)
    assert isinstance(w, Widget)
    assert w.temperature.min == 0 and w.temperature.max == 2 and w.temperature.value == 1.0
    assert w.top_k.min == 0 and w.top_k.max == 27 and w.top_k.value == 0
    logits = _logits_after(model, [tokenizer.bos_id])
    torch.testing.assert_close(w.probs, logits.softmax(-1))  # drawn at construction
    assert len(w.samples) == 6 and len(set(w.samples)) > 1
    heights = [p.get_height() for p in w.figure.axes[0].patches]
    torch.testing.assert_close(torch.tensor(heights, dtype=torch.float32), w.probs)

    w.temperature.value = 0.0  # greedy: all mass on the argmax, every sample the same
    assert w.probs.argmax() == logits.argmax() and w.probs.max() == 1 and (w.probs > 0).sum() == 1
    assert len(set(w.samples)) == 1
    assert w.samples == sample_documents(model, tokenizer, 6, 12, temperature=0)
    assert "greedy" in w.figure.axes[0].get_title()
    header, names = w.samples_text.split("\n")  # what the samples area shows
    assert header == "6 samples, seed 0, greedy (argmax), no randomness:"
    assert names.split("  ") == w.samples

    w.temperature.value = 1.0
    w.top_k.value = 3  # only the three most likely symbols keep probability
    nonzero = torch.nonzero(w.probs).flatten()
    assert len(nonzero) == 3
    assert set(nonzero.tolist()) == set(logits.topk(3).indices.tolist())
    # Every sample's first letter was drawn from that distribution, so it is one of the three.
    assert {s[0] for s in w.samples} <= {tokenizer.itos[i] for i in nonzero.tolist()}
    torch.testing.assert_close(w.probs.sum(), torch.tensor(1.0))


def test_temperature_explorer_is_reproducible_and_flattens(model, tokenizer):
    w = gw.temperature_explorer(model, tokenizer, num_samples=8, seed=3)
    w.temperature.value = 0.5
    cold, cold_probs = list(w.samples), w.probs
    w.temperature.value = 2.0
    hot_probs = w.probs
    w.temperature.value = 0.5
    assert w.samples == cold  # the same seed, the same settings: the same samples

    def entropy(p):
        return float(-torch.special.xlogy(p, p).sum())

    assert entropy(hot_probs) > entropy(cold_probs)
    assert "temperature 0.5" in w.figure.axes[0].get_title()
    assert w.samples_text.startswith("8 samples, seed 3, temperature 0.50:\n")


def test_temperature_explorer_continues_a_context(model, tokenizer):
    w = gw.temperature_explorer(model, tokenizer, context=".em", num_samples=4)
    torch.testing.assert_close(w.probs, _logits_after(model, tokenizer.encode(".em")).softmax(-1))
    assert all(s.startswith(".em") for s in w.samples)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        gw.temperature_explorer(model, tokenizer, context="Em")


def test_heads_explorer_switches_models(checkpoints):
    paths, _ = checkpoints
    w = gw.heads_explorer(paths, context="emma")
    assert list(w.heads.options) == [("1", 1), ("2", 2), ("4", 4), ("16", 16)]
    assert w.heads.value == 4 and w.layer is None and w.head is None
    assert w.maps.shape == (1, 4, 5, 5) and w.tokens == list(".emma")  # read after BOS
    idx = torch.tensor([[26, 4, 12, 12, 0]])
    for h in (2, 16, 1):
        w.heads.value = h
        assert w.maps.shape == (1, h, 5, 5)
        torch.testing.assert_close(
            w.maps, load_checkpoint(paths[h]).model.attention_maps(idx)[:, 0]
        )
        # one picture per head, each a PNG named by its CSS class, and a caption that counts them
        names = [f"gptlib-layer-0-head-{j}" for j in range(h)]
        assert [im._dom_classes for im in w.map_images] == [(name,) for name in names]
        assert list(w.maps_box.children) == w.map_images
        assert all(im.format == "png" and im.value[:4] == b"\x89PNG" for im in w.map_images)
        assert f"{h} attention map(s) (1 layer(s) x {h} head(s))" in w.caption.value
    torch.testing.assert_close(w.maps.sum(-1), torch.ones(1, 1, 5))  # rows are distributions


def test_heads_explorer_context_crop_and_errors(checkpoints, tokenizer):
    paths, _ = checkpoints
    w = gw.heads_explorer(paths)
    w.context.value = "maximiliana"  # BOS + 11 letters, cropped to the last block_size = 8
    assert w.tokens == list(".maximiliana"[-8:]) and w.maps.shape == (1, 4, 8, 8)
    before = w.maps
    w.context.value = "Emma!"  # not in the vocabulary: the tokenizer's message, no exception
    with pytest.raises(ValueError) as info:
        tokenizer.encode("Emma!")
    assert w.error == str(info.value)
    assert w.maps is before
    assert w.caption.value.startswith("Cannot read this context") and w.map_images == []
    w.context.value = "anna"
    assert w.error is None and w.tokens == list(".anna") and len(w.map_images) == 4


def test_heads_explorer_textbook_pickers(checkpoints):
    paths, textbook_path = checkpoints
    w = gw.heads_explorer({4: paths[4]}, context="emma", textbook_checkpoint=textbook_path)
    assert (w.layer.min, w.layer.max, w.head.min, w.head.max) == (0, 1, 0, 3)
    assert w.textbook_maps.shape == (2, 4, 5, 5)
    first = w.textbook_weights
    w.layer.value, w.head.value = 1, 2
    torch.testing.assert_close(w.textbook_weights, w.textbook_maps[1, 2])
    assert not torch.equal(first, w.textbook_weights)
    assert w.textbook_figure.axes[0].get_title() == "textbook preset: layer 1, head 2"
    w.context.value = "annabelle"
    assert w.textbook_maps.shape == (2, 4, 10, 10)  # block 16: nothing cropped
    assert w.textbook_tokens == list(".annabelle") and w.tokens == list(".annabelle"[-8:])


def test_attention_scale_explorer():
    w = gw.attention_scale_explorer(seed=0)
    assert list(w.d_k.options) == [2**i for i in range(10)] and w.scaled.value is True
    torch.testing.assert_close(w.weights, w.scores.softmax(-1))
    assert w.weights.shape == (16,) and math.isclose(float(w.weights.sum()), 1, rel_tol=1e-6)

    w.d_k.value = 512
    scaled_entropy, scaled_max = w.entropy, w.max_weight
    assert 0.5 < float(w.scores.std()) < 2  # scaled scores keep a spread near 1
    w.scaled.value = False  # raw dot products spread like sqrt(512) ~ 23: one key takes it all
    assert w.max_weight > 0.9 and w.max_weight > scaled_max
    assert w.entropy < 0.5 < scaled_entropy
    assert float(w.scores.std()) > 10
    assert w.entropy == pytest.approx(
        float(-(w.weights * w.weights.clamp_min(1e-30).log()).sum()), abs=1e-5
    )
    assert w.max_weight == pytest.approx(float(w.weights.max()))

    w.d_k.value = 1  # at d_k = 1 the scale changes nothing
    raw = w.weights
    w.scaled.value = True
    torch.testing.assert_close(w.weights, raw)
    assert "d_k = 1" in w.figure.axes[0].get_title()
