"""What the benchmarks share: the device and its number format, the matmul rate that model-FLOP
utilisation is measured against, the FLOP count of a training step, timing in alternating
rounds, and the round timer and table of the per-call benchmarks (norms, attention).

On a CPU everything runs in float32. On CUDA the training benchmarks run the forward pass under
bfloat16 autocast with TF32 allowed for the float32 matmuls that remain (what a GPU run of
`python -m gptlib train --dtype bfloat16` does), and the reference matmul is a bfloat16 one.
A shared machine makes single timings noisy, so candidates are timed in rounds, alternating their
order, and compared by their best round and by the median of their per-round ratios.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable

import torch


def pick_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(f"--device {name}: CUDA is not available here")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif device.type != "cpu":
        raise SystemExit(f"--device {name}: use cpu or cuda")
    return device


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, bfloat16 autocast, TF32"
    return f"CPU, {torch.get_num_threads()} thread(s), float32"


def autocast(device: torch.device):
    """bfloat16 autocast on CUDA; nothing on a CPU (float32 throughout)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 1) -> float:
    """Seconds per call of `fn`, the device's queue drained before and after."""
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - start) / repeats


def matmul_flops(device: torch.device) -> float:
    """FLOP/s of one large matmul: float32 2048^3 on a CPU, bfloat16 8192^3 on CUDA."""
    n, dtype = (8192, torch.bfloat16) if device.type == "cuda" else (2048, torch.float32)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    timed(lambda: a @ b, device, 2)  # warm-up: kernel choice, allocation
    return 2 * n**3 / timed(lambda: a @ b, device, 10)


def matmul_label(device: torch.device) -> str:
    return "bfloat16 matmul 8192^3" if device.type == "cuda" else "float32 matmul 2048^3"


def flops_per_token(cfg, seq_len: int | None = None) -> int:
    """FLOPs of one training step (forward + backward) per token, the usual estimate:
    6 * (12 L d^2 + V d) for every weight matrix and the output head, + 12 L T d for the
    attention scores and weights @ V. Norms, softmax and the optimiser are left out."""
    L, d, V = cfg.n_layer, cfg.n_embd, cfg.vocab_size
    T = cfg.block_size if seq_len is None else seq_len
    return 6 * (12 * L * d * d + V * d) + 12 * L * T * d


def alternate(
    runs: dict[str, Callable[[], float]], rounds: int, extra: Callable[[], None] | None = None
) -> dict[str, list[float]]:
    """Call every run once per round, in the listed order on even rounds and reversed on odd
    ones; each call returns its seconds. `extra` runs once per round too (a reference timing)."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        if extra is not None:
            extra()
        for name in names if r % 2 == 0 else names[::-1]:
            times[name].append(runs[name]())
    return times


MODES = ("forward", "forward + backward")  # what the layer benchmarks time per call
SHORT = {"forward": "fwd", "forward + backward": "fwd+bwd", "wall-clock": "wall", "CPU": "CPU"}
ROUND_SECONDS = 0.02  # by default a timing's calls fill about this much of a round


def round_timer(
    fn: Callable[[], object], device: torch.device, calls: int | None, cpu: list[float]
) -> Callable[[], float]:
    """A function that times one round of `fn`: wall-clock seconds per call returned, CPU seconds
    per call appended to `cpu`. `fn` runs once first (allocation, kernel choice); without
    `calls`, each round makes as many calls as fill about ROUND_SECONDS."""
    fn()
    if calls is None:
        calls = max(3, min(10_000, round(ROUND_SECONDS / timed(fn, device, 3))))

    def one_round() -> float:
        start = time.process_time()
        wall = timed(fn, device, calls)
        cpu.append((time.process_time() - start) / calls)
        return wall

    return one_round


def print_timings(
    clocks: dict[str, dict], names, speedups: dict[str, tuple[str, str]], width: int
) -> None:
    """One row per name of best-round milliseconds (every clock x MODES), then one row per
    speed-up label: (slower, faster) timed against each other, best over best and, in brackets,
    the median of the per-round ratios."""
    header = [f"{SHORT[clock]} ms {SHORT[mode]}" for clock in clocks for mode in MODES]
    print(f"{'':<{width}}" + "".join(f"{x:>17}" for x in header))
    for name in names:
        cells = [f"{1000 * min(t[name, mode]):.3f}" for t in clocks.values() for mode in MODES]
        print(f"{name:<{width}}" + "".join(f"{c:>17}" for c in cells))
    for label, (slower, faster) in speedups.items():
        cells = []
        for t in clocks.values():
            for mode in MODES:
                best, median = ratios(t[slower, mode], t[faster, mode])
                cells.append(f"{best:.2f}x ({median:.2f}x)")
        print(f"{label:<{width}}" + "".join(f"{c:>17}" for c in cells))


def ratios(a: list[float], b: list[float]) -> tuple[float, float]:
    """a against b: (best of a / best of b, median of the per-round ratios a_i / b_i)."""
    return min(a) / min(b), statistics.median(x / y for x, y in zip(a, b, strict=True))


def transformers_missing() -> str | None:
    """Why transformers cannot be used here, or None when it can."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the network: weights are made here
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        return f"transformers is not installed ({e})"
    return None
