"""Fixed sinusoidal positions, the alternative to a learned position table.

The original Transformer (Vaswani et al., 2017) did not learn its position vectors: row `pos`
of its table is a set of sines and cosines of `pos` at geometrically spaced frequencies. `GPT`
learns its `pos_emb` instead; notebook 01 puts the two tables side by side.

Notebook 01 (embeddings) teaches this module.
"""

from __future__ import annotations

import torch


def sinusoidal_positions(n_positions: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    """The fixed position table, [n_positions, dim], float32.

    Feature pair i (columns 2i and 2i + 1) turns at the angular frequency
    w_i = base ** (-2i / dim):

        table[pos, 2i]     = sin(pos * w_i)
        table[pos, 2i + 1] = cos(pos * w_i)

    So row 0 is (0, 1, 0, 1, ...), every value lies in [-1, 1], every row has the same length
    sqrt(dim / 2), and the dot product of rows p and q depends only on p - q. Nothing is learned,
    and the table is defined for any position: a longer context only needs more rows.

    Taught in notebook 01 (embeddings).
    """
    if n_positions < 1:
        raise ValueError(f"n_positions must be at least 1, got {n_positions}")
    if dim < 2 or dim % 2:
        raise ValueError(f"dim must be even (sin and cos come in pairs), got {dim}")
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # [n, 1]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # [dim / 2]
    angle = pos * freq  # [n, dim / 2]
    table = torch.stack([angle.sin(), angle.cos()], dim=-1)  # [n, dim / 2, 2]: sin, cos pairs
    return table.reshape(n_positions, dim).float()
