"""What a training run needs, checked before any work: the memory of a step, the time of a
step, the room for its checkpoint; each refused in one line that says what to change."""

from __future__ import annotations

import os
import time

import torch

from gptlib.checkpoint import existing_folder, free_bytes
from gptlib.language import _
from gptlib.model import parameter_formula


def training_memory(cfg, batch_size: int) -> int:
    """A lower bound, in bytes, on the memory one training step of `cfg` at `batch_size` holds:
    the weights with their gradients and AdamW's two moments (16 bytes a parameter), the
    activations autograd keeps for the backward pass, at least 10 floats per position and
    feature in every block, and, for the written-out attention, one B x h x T x T table of
    attention weights per block plus the one being computed; and the logits with their log-softmax.
    A step needs more than this (temporary tensors, the allocator's slack); never less."""
    B, T, d, L = batch_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    need = 16 * parameter_formula(cfg) + L * 10 * B * T * d * 4 + 2 * B * T * cfg.vocab_size * 4
    if cfg.attention == "manual":
        need += (L + 1) * B * cfg.n_head * T * T * 4
    return need


def available_memory(device: torch.device) -> int | None:
    """Bytes free for a run on `device` (None where it cannot be told): on CUDA the device's free
    memory, on a CPU the memory the operating system says it can still give."""
    if device.type == "cuda":
        try:
            return torch.cuda.mem_get_info(device)[0]
        except RuntimeError:
            return None
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def readable_size(n: float) -> str:
    """`n` bytes in words: 7.2 GB."""
    for unit in ("bytes", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


def check_memory(cfg, batch_size: int, device: torch.device) -> None:
    """Refuse, before any work, a run whose step cannot fit in the memory `device` has free."""
    have = available_memory(device)
    need = training_memory(cfg, batch_size)
    if have is None or need <= have:
        return
    attention = (
        f"; the attention weights alone are {cfg.n_layer + 1} x B x h x T x T = "
        f"{readable_size((cfg.n_layer + 1) * batch_size * cfg.n_head * cfg.block_size**2 * 4)} "
        "(--attention sdpa does not keep them)"
        if cfg.attention == "manual"
        else ""
    )
    raise ValueError(
        f"a training step with --batch-size {batch_size} and block_size {cfg.block_size} needs "
        f"at least {readable_size(need)} and {device} has {readable_size(have)} free{attention}; lower "
        "--batch-size or --block-size"
    )


def check_space(out: str, need: int) -> None:
    """Refuse, in one line, a save that the file system of `out` has no room for."""
    free = free_bytes(out)
    if free is not None and free < need:
        raise ValueError(no_space(out, need, free))


def no_space(out: str, need: int, free: int) -> str:
    said = _("not enough space for the checkpoint in {folder}: it needs about {need} bytes and "
             "{free} bytes are free; free some space, or pass --out in another folder")  # fmt: skip
    return said.format(folder=existing_folder(out), need=f"{need:,}", free=f"{free:,}")


def step_flops(cfg, batch_size: int) -> float:
    """The arithmetic of one training step: forward and backward through every weight (6 flops a
    parameter a position) and through the attention scores (12 L T^2 d a window)."""
    B, T, d, L = batch_size, cfg.block_size, cfg.n_embd, cfg.n_layer
    return 6.0 * parameter_formula(cfg) * B * T + 12.0 * L * B * T * T * d


def measured_rate(device: torch.device) -> float:
    """Floating-point operations a second that `device` does here and now, from a few products
    of 256 x 256 matrices (a step runs at this rate at best)."""
    n = 256
    a = torch.randn(n, n, device=device)
    a @ a  # the first product pays for start-up
    _synchronize(device)
    runs, begin = 0, time.perf_counter()
    while runs < 3 or time.perf_counter() - begin < 0.02:
        a @ a
        runs += 1
    _synchronize(device)
    return 2.0 * n**3 * runs / max(time.perf_counter() - begin, 1e-9)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_step_time(cfg, batch_size: int, device: torch.device, most: float) -> float:
    """The seconds one step is expected to take at least (its arithmetic at the rate this device
    measures); refused, before any work, above `most` (--max-step-seconds)."""
    seconds = step_flops(cfg, batch_size) / measured_rate(device)
    if seconds > most:
        said = _("one training step with --batch-size {batch_size} and block_size {block} is "
                 "expected to take about {seconds} s on {device} ({flops} floating-point "
                 "operations at the {rate} a second measured here), more than --max-step-seconds "
                 "{most:g}; lower --block-size or --batch-size, or pass a larger "
                 "--max-step-seconds")  # fmt: skip
        raise ValueError(
            said.format(
                batch_size=batch_size,
                block=cfg.block_size,
                seconds=f"{seconds:,.0f}",
                device=device,
                flops=f"{step_flops(cfg, batch_size):.2g}",
                rate=f"{measured_rate(device):.2g}",
                most=most,
            )
        )
    return seconds
