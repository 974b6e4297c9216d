"""What each attention head does, measured rather than read off one picture.

`head_stats` averages a head's attention weights over many windows into five numbers: how far back
it looks, and how much weight it puts on position 0, on the previous token, on the token itself and
on the start of the current document (the latest BOS). `heads_off` switches heads off, so the loss
can say how much the model needs them.

Notebook 04 (multi head) teaches this module.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn as nn

HEAD_STATS = ("mean distance", "to pos 0", "to previous", "to itself", "to name start")


def latest_start(windows: torch.Tensor, bos_id: int) -> torch.Tensor:
    """For every position, the position of the latest BOS at or before it, -1 where the window
    has none yet. windows: [B, n] token ids -> [B, n].

    Taught in notebook 04 (multi head)."""
    pos = torch.arange(windows.size(1), device=windows.device).expand_as(windows)
    return torch.where(windows == bos_id, pos, -1).cummax(dim=1).values


def head_stats(
    maps: torch.Tensor, windows: torch.Tensor, bos_id: int, first_query: int = 2
) -> torch.Tensor:
    """Every head's attention, averaged: [L, h, 5], the columns in the order of `HEAD_STATS`.

    maps: [L, B, h, n, n] causal attention weights of the windows (`GPT.attention_maps`);
    windows: [B, n] the token ids. Only queries i >= first_query count, so that with the default 2
    "position 0", "the previous token" (key i-1) and "itself" (key i) are three different keys.
    Per query i with weights w_ij the five numbers are: sum_j w_ij (i - j); w_i0; w_i,i-1; w_ii;
    and w_is for s the latest BOS at or before i (queries with no BOS before them are skipped in
    that column only). Columns may overlap: the previous token can be the BOS.

    Taught in notebook 04 (multi head)."""
    L, B, h, n, _ = maps.shape
    if windows.shape != (B, n):
        raise ValueError(f"windows {tuple(windows.shape)} do not match maps {tuple(maps.shape)}")
    if not 1 <= first_query < n:
        raise ValueError(f"first_query={first_query} must be between 1 and n - 1 = {n - 1}")
    i = torch.arange(first_query, n, device=maps.device)  # the queries that count
    j = torch.arange(n, device=maps.device)
    distance = (i[:, None] - j[None, :]).clamp(min=0).to(maps.dtype)  # [nq, n]: i - j, 0 ahead
    w = maps[..., first_query:, :]  # [L, B, h, nq, n]
    start = latest_start(windows, bos_id)[:, first_query:]  # [B, nq]
    on_start = w.gather(-1, start.clamp(min=0)[None, :, None, :, None].expand(L, B, h, -1, 1))
    has_start = (start >= 0).to(maps.dtype)[None, :, None, :]  # [1, B, 1, nq]
    per_query = [
        (w * distance).sum(-1),  # [L, B, h, nq]: mean distance of each query
        w[..., 0],  # weight on position 0
        maps[..., i, i - 1],  # weight on the previous token
        maps[..., i, i],  # weight on itself
    ]
    means = [s.mean(dim=(1, 3)) for s in per_query]  # each [L, h]
    means.append((on_start[..., 0] * has_start).sum(dim=(1, 3)) / has_start.sum())
    return torch.stack(means, dim=-1)  # [L, h, 5]


@contextmanager
def heads_off(model: nn.Module, layer: int, heads: Sequence[int]) -> Iterator[None]:
    """Inside the `with` block, the given heads of one layer output zeros: their d_h features are
    zeroed just before the output projection W_O (a forward pre-hook on `proj`), so nothing they
    computed reaches the rest of the model. The hook is removed on leaving the block.

    Taught in notebook 04 (multi head)."""
    attn = model.blocks[layer].attn
    for head in heads:
        if not 0 <= head < attn.n_head:
            raise ValueError(f"layer {layer} has heads 0..{attn.n_head - 1}, not {head}")

    def zero_heads(module, args):
        y = args[0].clone()  # [B, n, d], heads side by side
        for head in heads:
            y[..., head * attn.head_dim : (head + 1) * attn.head_dim] = 0
        return (y,)

    handle = attn.proj.register_forward_pre_hook(zero_heads)
    try:
        yield
    finally:
        handle.remove()
