"""Keys and values kept between generation steps, so each new token costs one position, not n.

Learned absolute positions cannot slide: position p always reads row p of the position table,
which has `block_size` rows. A cache therefore holds at most `block_size` positions; what
`generate` does when it is full is described there (it rebuilds the cache from the last half).
"""

from __future__ import annotations

import torch

from gptlib.config import GPTConfig


class KVCache:
    """Per layer, keys and values of shape [B, h, n, d_h] for the n positions seen so far.

    Storage is allocated once at full size [B, h, T, d_h] and filled from the left; `length` is n.
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
        self._k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)]
        self._v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layer)]
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write the new positions' k, v ([B, h, n_new, d_h]) after the cached ones and return all
        keys and values so far, [B, h, length + n_new, d_h]. `length` itself moves on only when
        the model calls `advance` after the last layer."""
        start, n_new = self.length, k.shape[2]
        if start + n_new > self.capacity:
            raise ValueError(
                f"KV cache holds {start} positions and cannot take {n_new} more: its capacity is "
                f"block_size={self.capacity}; reset it or rebuild it from fewer tokens"
            )
        if k.shape[0] != self.batch_size:
            raise ValueError(f"cache was made for batch {self.batch_size}, got batch {k.shape[0]}")
        self._k[layer][:, :, start : start + n_new] = k
        self._v[layer][:, :, start : start + n_new] = v
        return self._k[layer][:, :, : start + n_new], self._v[layer][:, :, : start + n_new]

    def advance(self, n_new: int) -> None:
        self.length += n_new

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
    """2 (keys and values) * L * B * h * n * d_h * bytes per element."""
    return 2 * n_layer * batch_size * n_head * n * head_dim * bytes_per
