"""The benchmarks' own claims, on tiny models: what they compare is the same computation.

No timing is asserted here; the benchmarks print timings, these tests check what they rest on.
"""

import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gptlib.config import microgpt, textbook
from gptlib.model import GPT, IGNORE_INDEX

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import attention_speed  # noqa: E402
import common  # noqa: E402


def _sliced_logits_loss(logits, labels):
    """The loss as the textbook writes it: the last position's logits cut off, a copy."""
    V = logits.size(-1)
    return F.cross_entropy(
        logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
    )


@pytest.mark.parametrize("make", [microgpt, textbook], ids=["microgpt", "textbook"])
def test_shifted_labels_give_the_same_gradients_and_the_loss_to_rounding(make):
    """GPT.loss shifts the labels instead of slicing the logits (no copy of B x (n-1) x V values):
    bitwise the same gradients; the mean loss adds the same terms grouped differently (nll_loss
    sums in blocks of positions), so it may differ in the last bit."""
    cfg = make()
    torch.manual_seed(0)
    model = GPT(cfg)
    idx = torch.randint(0, cfg.vocab_size, (16, cfg.block_size), generator=torch.Generator())
    results = []
    for loss_fn in (GPT.loss, _sliced_logits_loss):
        model.zero_grad(set_to_none=True)
        logits, _ = model(idx)
        loss = loss_fn(logits, idx)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (a, grads_a), (b, grads_b) = results
    assert all(torch.equal(x, y) for x, y in zip(grads_a, grads_b, strict=True))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_flops_per_token_counts_the_textbook_preset():
    cfg = textbook(27)
    L, d, V, T = 4, 128, 27, 64
    assert common.flops_per_token(cfg) == 6 * (12 * L * d * d + V * d) + 12 * L * T * d
    assert common.flops_per_token(cfg, 16) == 6 * (12 * L * d * d + V * d) + 12 * L * 16 * d


def test_alternate_reverses_the_order_every_other_round():
    calls = []
    runs = {name: (lambda name=name: calls.append(name) or 1.0) for name in "ab"}
    times = common.alternate(runs, 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert times == {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]}
    assert common.ratios([2.0, 4.0, 3.0], [1.0, 4.0, 2.0]) == (2.0, 1.5)


def test_the_two_attention_paths_timed_are_one_computation():
    """attention_speed times the readable path against F.scaled_dot_product_attention: the same
    output and the same gradients of q, k and v, in float64 (to rounding)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, generator=g, dtype=torch.float64) for _ in range(3))
    grads = []
    for path in (attention_speed.manual_attention, attention_speed.sdpa_attention):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = path(*leaves)
        out.pow(2).sum().backward()
        grads.append((out.detach(), [t.grad for t in leaves]))
    (a, ga), (b, gb) = grads
    torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-12)
