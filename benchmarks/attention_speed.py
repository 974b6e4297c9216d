"""Milliseconds per call of causal attention written out by hand against PyTorch's fused
F.scaled_dot_product_attention, forward and forward + backward.

Textbook chapter 3 says that scaled_dot_product_attention(..., is_causal=True) computes what the
hand-written upper-triangle -inf mask computes, and that PyTorch 2 takes a faster kernel for it on
CUDA. The course runs on CPUs, so this measures what a CPU shows, for the two ways gptlib's
attention layer can run (`attention="manual"` and `attention="sdpa"`):

- manual: scores q k^T / sqrt(d_h), the scores above the diagonal set to -inf, softmax over the
  keys, weights @ v (gptlib.attention's readable path);
- sdpa: F.scaled_dot_product_attention(q, k, v, is_causal=True) (its default path).

Before any timing the two outputs are checked to agree on the same input. The inputs are float32
q, k, v [B, h, n, d_h] drawn from N(0, 1); "forward" runs under no_grad, "forward + backward"
backpropagates a fixed random gradient into q, k and v. The four timings of a shape alternate
their order round by round (benchmarks/common.py); a round's figure is the mean over `--calls`
calls (default: as many as fill about 20 ms), and the best round is printed. The speed-up of sdpa
is the manual path's time over sdpa's: best over best, then the median of the per-round ratios in
brackets; above 1 means the fused kernel is faster. On a CPU the process's CPU time per call is
printed too. With `--device cuda` the same comparison runs on a GPU (float32, TF32 allowed), which
is the claim of the textbook.

    python benchmarks/attention_speed.py [--device cpu|cuda] [--shapes 32x4x64x32 8x12x256x64]
        [--rounds 9] [--calls N] [--threads N]
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from common import (
    MODES,
    ROUND_SECONDS,
    alternate,
    describe,
    pick_device,
    print_timings,
    round_timer,
)

PATHS = ("manual", "sdpa")
DEFAULT_SHAPES = [(32, 4, 64, 32), (8, 12, 256, 64), (4, 12, 1024, 64)]


def parse_shape(text: str) -> tuple[int, int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"a shape is BxHxNxD (batch, heads, tokens, head width), e.g. 32x4x64x32; got {text!r}"
        )
    return int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])


def manual_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_h) with the future at -inf) v, as gptlib's readable path writes it."""
    n = q.size(-2)
    hidden = torch.triu(torch.ones(n, n, dtype=torch.bool, device=q.device), diagonal=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # [B, h, n, n]
    return scores.masked_fill(hidden, float("-inf")).softmax(dim=-1) @ v  # [B, h, n, d_h]


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


FUNCTIONS = {"manual": manual_attention, "sdpa": sdpa_attention}


def check_same(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """The two paths give the same output to float32 rounding; returns the largest difference."""
    with torch.no_grad():
        a, b = manual_attention(q, k, v), sdpa_attention(q, k, v)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    return float((a - b).abs().max())


def runner(path: str, q, k, v, grad, mode: str, device, calls: int | None, cpu: list[float]):
    """The round timer (common.round_timer) of one path in one mode."""
    fn_attention = FUNCTIONS[path]

    def forward():
        with torch.no_grad():
            fn_attention(q, k, v)

    def forward_backward():
        for t in (q, k, v):
            t.grad = None
        fn_attention(q, k, v).backward(grad)

    return round_timer(forward if mode == "forward" else forward_backward, device, calls, cpu)


def bench(shape: tuple[int, int, int, int], rounds: int, calls: int | None, device) -> None:
    B, h, n, d_h = shape
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(B, h, n, d_h, generator=g).to(device) for _ in range(4))
    gap = check_same(q, k, v)
    for t in (q, k, v):
        t.requires_grad_(True)
    cpu: dict[tuple[str, str], list[float]] = {}
    runs = {}
    for mode in MODES:
        for path in PATHS:
            cpu[path, mode] = []
            runs[path, mode] = runner(path, q, k, v, grad, mode, device, calls, cpu[path, mode])
    wall = alternate(runs, rounds)

    clocks = {"wall-clock": wall, "CPU": cpu} if device.type == "cpu" else {"wall-clock": wall}
    per_round = f"{calls} calls" if calls else f"about {1000 * ROUND_SECONDS:.0f} ms of calls"
    print()
    print(
        f"[B, h, n, d_h] = [{B}, {h}, {n}, {d_h}]; {per_round} per round, best of {rounds} "
        f"rounds; the two outputs agree (largest difference {gap:.1e})"
    )
    print_timings(clocks, PATHS, {"speed-up of sdpa": ("manual", "sdpa")}, 22)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shape, nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=None, help="per round (default: about 20 ms)")
    parser.add_argument("--threads", type=int, default=None, help="(default: torch's)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    if device.type == "cuda":  # no autocast here: both paths run in float32 (TF32 matmuls)
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}, float32, TF32")
    else:
        print(f"torch {torch.__version__}, {describe(device)}")
    print("speed-up = the manual path's time / sdpa's (above 1: the fused kernel is faster)")
    for shape in args.shapes:
        bench(shape, args.rounds, args.calls, device)


if __name__ == "__main__":
    main()
