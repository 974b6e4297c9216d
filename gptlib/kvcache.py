"""Keys and values kept between generation steps, so each new token costs one position, not n.

Only K and V are kept: a new query needs every earlier key and value, but no earlier query (the
last row of causal attention reads q of the last position alone). Per layer the cache holds
K and V of shape [B, h, n, d_h], 2 * L * B * h * n * d_h numbers in all.

Learned absolute positions cannot slide: position p always reads row p of the position table,
which has `block_size` rows. A cache therefore holds at most `block_size` positions and refuses
one more; what `generate` does when it is full is described there (it rebuilds the cache from
the last `block_size // 2` tokens).

Notebook 13 (kv cache) teaches this module.
"""

from __future__ import annotations

import torch

from gptlib.config import GPTConfig
from gptlib.language import _


class KVCache:
    """Per layer, keys and values of shape [B, h, n, d_h] for the n positions seen so far.

    Storage is allocated once at full size [B, h, T, d_h] and filled from the left; `length` is n.
    In one forward pass each layer's attention calls `write` (the length stays), and GPT.forward
    calls `advance` once after the last block: the one place the length moves.

    Taught in notebook 13 (kv cache).
    """

    def __init__(
        self,
        cfg: GPTConfig,
        batch_size: int,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ):
        self.cfg = cfg
        self.batch_size = batch_size
        self.capacity = cfg.block_size
        shape = (batch_size, cfg.n_head, cfg.block_size, cfg.head_dim)
        self._k = [torch.zeros(shape, device=device, dtype=dtype) for _unused in range(cfg.n_layer)]
        self._v = [torch.zeros(shape, device=device, dtype=dtype) for _unused in range(cfg.n_layer)]
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write the new positions' k, v ([B, h, n_new, d_h]) of `layer` at positions
        length..length+n_new-1 and return that layer's keys and values so far, the cached ones
        and the new ones, [B, h, length + n_new, d_h].

        `length` does not move: every layer of one forward pass writes at the same positions,
        and `advance(n_new)` then moves the length on once, after the last block (GPT.forward)."""
        start, n_new = self.length, k.shape[2]
        if not 0 <= layer < self.cfg.n_layer:
            raise ValueError(
                _(
                    "layer {layer} is not in this cache: it holds layers 0..{last}; "
                    "pass the index of the layer that computed k and v"
                ).format(layer=layer, last=self.cfg.n_layer - 1)
            )
        self._check_room(n_new)
        if k.shape[0] != self.batch_size:
            raise ValueError(
                _("cache was made for batch {batch}, got batch {got}").format(
                    batch=self.batch_size, got=k.shape[0]
                )
            )
        self._k[layer][:, :, start : start + n_new] = k
        self._v[layer][:, :, start : start + n_new] = v
        return self._k[layer][:, :, : start + n_new], self._v[layer][:, :, : start + n_new]

    def advance(self, n_new: int) -> None:
        """Count the n_new positions every layer has just written as cached: `length` moves on
        by n_new. Called once per forward pass, after the last block."""
        if n_new < 0:
            raise ValueError(
                _(
                    "the cache can only move forward: advance got {n}; pass the number of new "
                    "positions every layer has written, or reset() the cache"
                ).format(n=n_new)
            )
        self._check_room(n_new)
        self.length += n_new

    def _check_room(self, n_new: int) -> None:
        if self.length + n_new > self.capacity:
            raise ValueError(
                _(
                    "KV cache holds {length} positions and cannot take {new} more: its capacity "
                    "is block_size={capacity}; reset it or rebuild it from fewer tokens"
                ).format(length=self.length, new=n_new, capacity=self.capacity)
            )

    def reset(self) -> None:
        self.length = 0

    def keys(self, layer: int) -> torch.Tensor:
        """[B, h, n, d_h]"""
        return self._k[layer][:, :, : self.length]

    def values(self, layer: int) -> torch.Tensor:
        """[B, h, n, d_h]"""
        return self._v[layer][:, :, : self.length]

    @property
    def nbytes(self) -> int:
        """Bytes the filled part holds: 2 * L * B * h * n * d_h * bytes per element."""
        return memory_bytes(
            self.cfg.n_layer,
            self.batch_size,
            self.cfg.n_head,
            self.length,
            self.cfg.head_dim,
            self._k[0].element_size(),
        )

    def __repr__(self) -> str:
        return (
            f"KVCache(layers={self.cfg.n_layer}, batch={self.batch_size}, heads={self.cfg.n_head}, "
            f"length={self.length}/{self.capacity}, head_dim={self.cfg.head_dim})"
        )


def memory_bytes(
    n_layer: int, batch_size: int, n_head: int, n: int, head_dim: int, bytes_per: int = 4
) -> int:
    """2 (keys and values) * L * B * h * n * d_h * bytes per element.

    Taught in notebook 13 (kv cache)."""
    return 2 * n_layer * batch_size * n_head * n * head_dim * bytes_per


def forward_flops(cfg: GPTConfig, n_new: int, n_past: int = 0, batch_size: int = 1) -> int:
    """Multiply-add FLOPs (2 per multiply-add) of the matrix products in one forward pass over
    `n_new` positions that follow `n_past` cached ones; norms, softmax and adds are left out.

    Per layer, with n = n_new and k = n_past + n_new keys:
      q, k, v projection 2*n*d*3d, scores Q K^T 2*n*k*d, weights @ V 2*n*k*d,
      output projection 2*n*d*d, MLP 2*n*d*4d*2  ->  24*n*d^2 + 4*n*k*d;
    then the output head 2*n*d*V (every fed position gets logits).
    Recompute step at length t: forward_flops(cfg, t). Cached step: forward_flops(cfg, 1, t - 1).

    Taught in notebook 13 (kv cache).
    """
    d, n, k = cfg.n_embd, n_new, n_past + n_new
    per_layer = 24 * n * d * d + 4 * n * k * d
    return batch_size * (cfg.n_layer * per_layer + 2 * n * d * cfg.vocab_size)
