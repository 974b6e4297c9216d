"""gptlib.batched.train_runs: R runs as one computation are R runs of `train`, up to rounding.

The batched products add in another order than one model's, so the losses agree to about 1e-6
after tens of steps (measured: 7e-7 on microgpt after 50 and after 700 steps); the tests allow
1e-5 on losses, validation losses and gradient norms and 1e-5 on the trained weights."""

import math

import pytest
import torch
from torch import nn

from gptlib.batched import train_runs
from gptlib.config import microgpt
from gptlib.model import GPT
from gptlib.train import Diverged, train

TOL = 1e-5
RECIPE = dict(batch_size=16, max_lr=1e-2, warmup=5, schedule="cosine", min_lr=1e-3)


@pytest.fixture(scope="module")
def corpus():
    g = torch.Generator().manual_seed(0)
    # Not uniform noise: a repeated phrase with noise, so that the loss falls and moves.
    phrase = torch.arange(20) % 27
    pieces = [phrase if i % 3 else torch.randint(0, 27, (20,), generator=g) for i in range(60)]
    tokens = torch.cat(pieces)
    return tokens[:1000], tokens[1000:]


class OneMatrix(nn.Module):
    """What notebook 02 puts in place of attn.qkv: one learned [d, d] matrix in all three roles."""

    def __init__(self, d):
        super().__init__()
        self.w = nn.Linear(d, d, bias=False)

    def forward(self, x):
        y = self.w(x)
        return torch.cat([y, y, y], dim=-1)


class Tripled(nn.Module):
    """A replacement without parameters: Q = K = V = x."""

    def forward(self, x):
        return torch.cat([x, x, x], dim=-1)


class AttentionOnly(nn.Module):
    """A block without its MLP, in place of a whole block: run per run (vmap) around the
    library's attention."""

    def __init__(self, block):
        super().__init__()
        self.ln1, self.attn = block.ln1, block.attn

    def forward(self, x, cache=None):
        return x + self.attn(self.ln1(x), cache)


def _build(cfg, seed, change=None):
    torch.manual_seed(seed)
    m = GPT(cfg)
    if change is not None:
        change(m)
    return m


def _one_matrix(m):
    for b in m.blocks:
        b.attn.qkv = OneMatrix(m.cfg.n_embd)


def _tripled(m):
    for b in m.blocks:
        b.attn.qkv = Tripled()


def _attention_only(m):
    m.blocks = nn.ModuleList(AttentionOnly(b) for b in m.blocks)


def _wide_mlp(m):
    for b in m.blocks:
        b.mlp.fc = nn.Linear(m.cfg.n_embd, 40, bias=m.cfg.bias)
        b.mlp.proj = nn.Linear(40, m.cfg.n_embd, bias=m.cfg.bias)


CASES = {
    # microgpt: pre-norm RMSNorm, ReLU, untied head, sdpa attention
    "microgpt": (microgpt(), None),
    # the other branches: post-norm LayerNorm with bias, GELU, tied, Linear biases, 2 layers,
    # the readable attention path, a hidden width of 40
    "post-norm": (
        microgpt(
            n_layer=2,
            norm="layernorm",
            norm_bias=True,
            norm_placement="post",
            activation="gelu",
            bias=True,
            tie_embeddings=True,
            attention="manual",
        ),
        _wide_mlp,
    ),
    # modules a notebook puts in place of a layer: run per run (vmap), or folded (no parameters)
    "one matrix": (microgpt(), _one_matrix),
    "tripled": (microgpt(), _tripled),
    "attention only": (microgpt(), _attention_only),
}


@pytest.mark.parametrize("case", CASES)
def test_runs_equal_separate_train_runs(corpus, case):
    train_tokens, val_tokens = corpus
    cfg, change = CASES[case]
    seeds, steps = (0, 1), 20
    alone = [_build(cfg, s, change) for s in seeds]
    expected = [
        train(m, train_tokens, steps, seed=s, val_tokens=val_tokens, eval_every=10, **RECIPE)
        for m, s in zip(alone, seeds, strict=True)
    ]
    together = [_build(cfg, s, change) for s in seeds]
    got = train_runs(
        together, train_tokens, steps, seeds=seeds, val_tokens=val_tokens, eval_every=10, **RECIPE
    )
    assert len(got) == len(seeds)
    for e, h in zip(expected, got, strict=True):
        assert h.step == e.step and h.val_step == e.val_step == [0, 10, 19]
        assert h.lr == e.lr and h.clip == e.clip
        for field in ("loss", "grad_norm", "val_loss"):
            diff = max(
                abs(a - b) for a, b in zip(getattr(h, field), getattr(e, field), strict=True)
            )
            assert diff < TOL, (case, field, diff)
        assert e.loss[-1] < e.loss[0] - 0.3  # the runs learned something: the check can fail
    # the runs differ from each other (their seeds), and each model holds its run's weights
    assert abs(got[0].loss[-1] - got[1].loss[-1]) > 1e-3
    d = cfg.n_embd
    for a, b in zip(alone, together, strict=True):
        for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
            if name.endswith("qkv.bias"):
                # The key bias adds the same q . b to every score of a row, which the softmax
                # ignores: its gradient is 0 up to rounding, and AdamW, dividing by the root of
                # that rounding's square, moves it by rounding alone. The query and value biases
                # are compared.
                p, q = (torch.cat([t[:d], t[2 * d :]]) for t in (p, q))
            torch.testing.assert_close(q, p, atol=TOL, rtol=0, msg=name)


def test_one_run_is_train(corpus):
    train_tokens, _ = corpus
    e = train(_build(microgpt(), 4), train_tokens, 10, seed=7, **RECIPE)
    (h,) = train_runs([_build(microgpt(), 4)], train_tokens, 10, seeds=[7], **RECIPE)
    assert max(abs(a - b) for a, b in zip(h.loss, e.loss, strict=True)) < TOL


def test_refuses_runs_that_cannot_share_one_computation(corpus):
    tokens, _ = corpus
    a, b = _build(microgpt(), 0), _build(microgpt(), 1, _wide_mlp)
    with pytest.raises(ValueError, match="model 1") as e:
        train_runs([a, b], tokens, 1, seeds=[0, 1])
    assert "architecture" in str(e.value)
    with pytest.raises(ValueError, match="model 1"):  # another config
        train_runs([a, _build(microgpt(activation="gelu"), 1)], tokens, 1, seeds=[0, 1])
    with pytest.raises(ValueError, match="2 models and 3 seeds"):
        train_runs([a, _build(microgpt(), 1)], tokens, 1, seeds=[0, 1, 2])
    with pytest.raises(ValueError, match="shares a parameter"):
        train_runs([a, a], tokens, 1, seeds=[0, 1])
    with pytest.raises(ValueError, match="dropout"):
        drop = [_build(microgpt(dropout=0.1), s) for s in (0, 1)]
        train_runs(drop, tokens, 1, seeds=[0, 1])

    class Renamed(GPT):
        pass

    with pytest.raises(TypeError, match="Renamed"):  # a subclass may compute another forward
        train_runs([Renamed(microgpt())], tokens, 1, seeds=[0])
    with pytest.raises(ValueError, match="at least one model"):
        train_runs([], tokens, 1, seeds=[])
    with pytest.raises(ValueError, match="ids in 0..26"):
        train_runs([a], torch.full((100,), 30), 1, seeds=[0])


def test_a_diverging_run_is_named(corpus):
    tokens, _ = corpus
    models = [_build(microgpt(), s) for s in (0, 1)]
    with torch.no_grad():
        models[1].lm_head.weight[0, 0] = math.nan
    before = models[0].lm_head.weight.detach().clone()
    with pytest.raises(Diverged) as e:
        train_runs(models, tokens, 3, seeds=[0, 1], **RECIPE)
    assert e.value.step == 0 and math.isnan(e.value.value)
    assert "run 1" in str(e.value) and "seed 1" in str(e.value)
    # raised before the update: the weights are still the starting ones
    torch.testing.assert_close(models[0].lm_head.weight, before, atol=0, rtol=0)
