"""The one object passed around: a validated model configuration and its named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from functools import partial

import torch.nn.functional as F

from gptlib.language import _

NORMS = ("layernorm", "rmsnorm")
PLACEMENTS = ("pre", "post")
ATTENTIONS = ("manual", "sdpa")
# The one registry of the MLP's nonlinearities: a config may name any key, and `mlp.MLP` applies
# its function (gptlib.mlp.ACTIVATIONS is this same dict). It lives here, below the MLP, so that
# GPTConfig can refuse an unknown name without importing the module above it.
# gelu_tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the approximation GPT-2 was trained
# with; it differs from the exact (erf) GELU by at most about 5e-4.
ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
}


@dataclass(frozen=True)
class GPTConfig:
    """Every choice that shapes a GPT. Letters in comments follow the textbook: V, T, d, h, L.

    What the presets return: notebooks build it with microgpt, textbook or gpt2; notebook 16
    walks from the textbook preset to GPT-2 one field at a time (`replace`).

    Used in notebook 16 (gpt2), through gpt2."""

    vocab_size: int = 27  # V
    block_size: int = 64  # T: rows of the position table, longest sequence the model reads
    n_layer: int = 4  # L
    n_head: int = 4  # h
    n_embd: int = 128  # d; each head has d_h = d // h features
    dropout: float = 0.0
    norm: str = "layernorm"  # layernorm | rmsnorm
    norm_placement: str = "post"  # pre: x + f(norm(x));  post: norm(x + f(x))
    activation: str = "gelu"  # gelu | gelu_tanh (GPT-2's approximation) | relu
    bias: bool = False  # biases in the Linear layers
    norm_bias: bool = True  # a LayerNorm's beta (RMSNorm never has one)
    tie_embeddings: bool = True  # lm_head.weight is tok_emb.weight
    attention: str = "sdpa"  # manual (readable, can return weights) | sdpa (fused kernel)
    # GPT-2's start: the two projections that write into the residual stream in each block
    # (attn.proj, mlp.proj) are drawn with std 0.02 / sqrt(2 L), not 0.02, so the stream's variance
    # at init does not grow with depth. Only how the weights start, not the network they define:
    # left out of ==, so two configs of the same architecture compare equal.
    scale_residual_init: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    _("{name} must be a positive integer, got {value}").format(
                        name=name, value=repr(value)
                    )
                )
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                _(
                    "n_embd={n_embd} is not divisible by n_head={n_head}: every head needs the "
                    "same width d_h = n_embd / n_head; pick n_head among the divisors of {n_embd}"
                ).format(n_embd=self.n_embd, n_head=self.n_head)
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(
                _("dropout must be in [0, 1), got {value}").format(value=repr(self.dropout))
            )
        for name, allowed in (
            ("norm", NORMS),
            ("norm_placement", PLACEMENTS),
            ("activation", ACTIVATIONS),
            ("attention", ATTENTIONS),
        ):
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    _("{name}={value} is not one of {allowed}").format(
                        name=name, value=repr(value), allowed=", ".join(allowed)
                    )
                )

    @property
    def head_dim(self) -> int:
        """d_h, the width of one head."""
        return self.n_embd // self.n_head

    def replace(self, **changes) -> GPTConfig:
        """A copy with some fields changed (validated again)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(
                _("unknown GPTConfig field(s): {fields}").format(fields=", ".join(sorted(unknown)))
            )
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(
                _("unknown GPTConfig field(s): {fields}").format(fields=", ".join(sorted(unknown)))
            )
        return cls(**data)


def microgpt(vocab_size: int = 27, **changes) -> GPTConfig:
    """Textbook chapter 2's running example: 1 layer, d 16, 4 heads of 4, block 8, pre-norm
    RMSNorm, ReLU, no biases, separate output head. About 4,100 parameters with vocab 27.

    Taught in notebook 01 (embeddings)."""
    base = GPTConfig(
        vocab_size=vocab_size,
        block_size=8,
        n_layer=1,
        n_head=4,
        n_embd=16,
        norm="rmsnorm",
        norm_placement="pre",
        activation="relu",
        bias=False,
        norm_bias=False,
        tie_embeddings=False,
    )
    return base.replace(**changes)


def textbook(vocab_size: int = 27, **changes) -> GPTConfig:
    """The model of textbook chapter 3: block 64, d 128, 4 layers, 4 heads, post-LN LayerNorm,
    GELU, tied embeddings, no Linear biases.

    Taught in notebook 06 (normalisation)."""
    base = GPTConfig(
        vocab_size=vocab_size,
        block_size=64,
        n_layer=4,
        n_head=4,
        n_embd=128,
        norm="layernorm",
        norm_placement="post",
        activation="gelu",
        bias=False,
        norm_bias=True,
        tie_embeddings=True,
    )
    return base.replace(**changes)


def gpt2(vocab_size: int = 50257, **changes) -> GPTConfig:
    """GPT-2 small (124M): V 50257, T 1024, 12 layers, 12 heads, d 768; pre-norm LayerNorm with
    bias, GELU in its tanh form, a bias in every Linear layer, tied head. Dropout 0.1 as GPT-2
    was trained (eval mode turns it off), and GPT-2's start for the residual projections (std
    0.02 / sqrt(2 L): `scale_residual_init`).

    Taught in notebook 16 (gpt2)."""
    base = GPTConfig(
        vocab_size=vocab_size,
        block_size=1024,
        n_layer=12,
        n_head=12,
        n_embd=768,
        dropout=0.1,
        norm="layernorm",
        norm_placement="pre",
        activation="gelu_tanh",
        bias=True,
        norm_bias=True,
        tie_embeddings=True,
        scale_residual_init=True,
    )
    return base.replace(**changes)


PRESETS = {"microgpt": microgpt, "textbook": textbook, "gpt2": gpt2}


def preset(name: str, vocab_size: int | None = None, **changes) -> GPTConfig:
    """Look a preset up by name: `preset("textbook", vocab_size=65)`. Without vocab_size, the
    preset's own (27 letters + BOS for microgpt and textbook, 50257 for gpt2).

    Used by the command line; no notebook teaches it."""
    if name not in PRESETS:
        raise ValueError(
            _("unknown preset {name}; choose one of {presets}").format(
                name=repr(name), presets=", ".join(PRESETS)
            )
        )
    if vocab_size is None:
        return PRESETS[name](**changes)
    return PRESETS[name](vocab_size, **changes)
