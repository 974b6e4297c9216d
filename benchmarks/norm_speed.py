"""Milliseconds per call of RMSNorm against LayerNorm: gptlib's two norms and torch's, forward and
forward + backward.

Textbook chapter 2 says RMSNorm is 10-50% faster than LayerNorm because it skips the mean. This
measures it for the modules a reader of the course actually runs:

- gptlib.norms.RMSNorm, written out as the formula (mean of squares, rsqrt, two products);
- gptlib.norms.LayerNorm, which calls PyTorch's fused F.layer_norm;
- torch.nn.RMSNorm (eps 1e-5, like gptlib's) and torch.nn.LayerNorm.

Before any timing, each gptlib norm is checked to give torch's outputs on the same input. The
inputs are float32 activations [B, n, d] drawn from N(0, 1); "forward" runs under no_grad,
"forward + backward" backpropagates a fixed random gradient into the input and the gains (and
LayerNorm's bias). The eight timings of a shape alternate their order round by round
(benchmarks/common.py); a round's figure is the mean over `--calls` calls (default: as many as
fill about 20 ms), and the best round is printed. The speed-up of RMSNorm is LayerNorm's time over
RMSNorm's: best over best, then the median of the per-round ratios in brackets. Above 1 means
RMSNorm is faster; the textbook's claim is 1.1 to 1.5. On a CPU the process's CPU time per call
(summed over its threads) is printed too: on a machine busy with other work it shows what the
code itself costs, where wall-clock time also shows the neighbours.

    python benchmarks/norm_speed.py [--device cpu|cuda] [--shapes 32x64x128 8x1024x768]
        [--rounds 9] [--calls N] [--threads N]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn
from common import (
    MODES,
    ROUND_SECONDS,
    alternate,
    describe,
    pick_device,
    print_timings,
    round_timer,
)

from gptlib.norms import LayerNorm, RMSNorm

EPS = 1e-5  # gptlib's default for both norms, and torch's LayerNorm's
PAIRS = {  # who: (its RMSNorm, its LayerNorm)
    "gptlib": ("gptlib RMSNorm", "gptlib LayerNorm"),
    "torch": ("torch nn.RMSNorm", "torch nn.LayerNorm"),
}


def parse_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is BxNxD, e.g. 32x64x128; got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def make_modules(d: int, device: torch.device) -> dict[str, nn.Module]:
    """The four norms with the same random gains (and LayerNorm biases), so that gptlib's and
    torch's can be compared output for output."""
    g = torch.Generator().manual_seed(0)
    gain, bias = 1 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g)
    modules = {
        "gptlib RMSNorm": RMSNorm(d, eps=EPS),
        "gptlib LayerNorm": LayerNorm(d, eps=EPS),
        "torch nn.RMSNorm": nn.RMSNorm(d, eps=EPS),
        "torch nn.LayerNorm": nn.LayerNorm(d, eps=EPS),
    }
    with torch.no_grad():
        for m in modules.values():
            m.weight.copy_(gain)
            if getattr(m, "bias", None) is not None:
                m.bias.copy_(bias)
    return {name: m.to(device) for name, m in modules.items()}


def check_same(modules: dict[str, nn.Module], x: torch.Tensor) -> None:
    """gptlib's norms compute torch's: outputs equal to float32 rounding."""
    with torch.no_grad():
        for ours, theirs in zip(PAIRS["gptlib"], PAIRS["torch"], strict=True):
            torch.testing.assert_close(modules[ours](x), modules[theirs](x), rtol=1e-5, atol=1e-5)


def runner(module, x, grad, mode: str, device, calls: int | None, cpu: list[float]):
    """The round timer (common.round_timer) of one norm in one mode."""
    params = list(module.parameters())

    def forward():
        with torch.no_grad():
            module(x)

    def forward_backward():
        x.grad = None
        for p in params:
            p.grad = None
        module(x).backward(grad)

    return round_timer(forward if mode == "forward" else forward_backward, device, calls, cpu)


def bench(shape: tuple[int, int, int], rounds: int, calls: int | None, device) -> None:
    B, n, d = shape
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, n, d, generator=g).to(device)
    grad = torch.randn(B, n, d, generator=g).to(device)
    modules = make_modules(d, device)
    check_same(modules, x)
    x.requires_grad_(True)
    cpu: dict[tuple[str, str], list[float]] = {}
    runs = {}
    for mode in MODES:
        for name, module in modules.items():
            cpu[name, mode] = []
            runs[name, mode] = runner(module, x, grad, mode, device, calls, cpu[name, mode])
    wall = alternate(runs, rounds)

    clocks = {"wall-clock": wall, "CPU": cpu} if device.type == "cpu" else {"wall-clock": wall}
    per_round = f"{calls} calls" if calls else f"about {1000 * ROUND_SECONDS:.0f} ms of calls"
    print()
    print(
        f"[B, n, d] = [{B}, {n}, {d}], {x.numel():,} numbers; {per_round} per round, best of "
        f"{rounds} rounds; gptlib's norms give torch's outputs"
    )
    speedups = {f"RMSNorm speed-up, {who}": (ln, rms) for who, (rms, ln) in PAIRS.items()}
    print_timings(clocks, modules, speedups, 26)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes", type=parse_shape, nargs="+", default=[(32, 64, 128), (8, 1024, 768)]
    )
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=None, help="per round (default: about 20 ms)")
    parser.add_argument("--threads", type=int, default=None, help="(default: torch's)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    if device.type == "cuda":  # no autocast here: the norms run in float32 on every device
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name(device)}, float32")
    else:
        print(f"torch {torch.__version__}, {describe(device)}")
    print(
        "speed-up = LayerNorm's time / RMSNorm's (above 1: RMSNorm faster; the textbook: 1.1-1.5)"
    )
    for shape in args.shapes:
        bench(shape, args.rounds, args.calls, device)


if __name__ == "__main__":
    main()
