"""Training throughput of the `textbook` preset on the names corpus, beside the machine's
matmul rate.

    python benchmarks/train_throughput.py [--steps 30] [--threads N] [--no-compile]

Prints tokens/s and achieved GFLOP/s for the manual and the sdpa attention paths, and the GFLOP/s
of a large float32 matmul measured in the same run, so model-FLOP utilisation (MFU) is visible.
Then the sdpa path once more under torch.compile (what `train --compile` does): its one-off
compile time and its gain in tokens/s over eager execution.
FLOPs per token for a training step (forward + backward) are counted as
6 * (12 L d^2 + V d)  (every weight matrix, and the output head)  +  12 L T d  (scores and
weights @ V), the usual estimate; norms, softmax and the optimiser are left out.
"""

from __future__ import annotations

import argparse
import time

import torch

from gptlib.config import textbook
from gptlib.data import load_corpus, sample_batch
from gptlib.model import GPT
from gptlib.train import make_optimizer


def matmul_gflops(n: int = 2048, repeats: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def flops_per_token(cfg) -> int:
    L, d, V, T = cfg.n_layer, cfg.n_embd, cfg.vocab_size, cfg.block_size
    return 6 * (12 * L * d * d + V * d) + 12 * L * T * d


def measure(
    attention: str, steps: int, batch_size: int, compiled: bool = False
) -> tuple[float, float, float]:
    """(tokens/s, GFLOP/s, seconds spent in the warm-up steps, compilation included)."""
    corpus = load_corpus("names")
    cfg = textbook(corpus.vocab_size, attention=attention)
    torch.manual_seed(0)
    model = GPT(cfg)
    forward = torch.compile(model) if compiled else model
    opt = make_optimizer(model, 3e-4)
    g = torch.Generator().manual_seed(0)

    def step():
        idx, labels = sample_batch(corpus.train, batch_size, cfg.block_size, g)
        _, loss = forward(idx, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    start = time.perf_counter()
    for _ in range(5):  # warm up allocator and kernels (and compile)
        step()
    warmup = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    tokens_per_s = steps * batch_size * cfg.block_size / seconds
    return tokens_per_s, tokens_per_s * flops_per_token(cfg) / 1e9, warmup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile run")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); "
        f"textbook preset on names, B={args.batch_size}, T=64"
    )
    peak = matmul_gflops()
    print(f"{'float32 matmul 2048^3':<24} {'':>12} {peak:10.1f} GFLOP/s   (reference)")
    rates = {}
    runs = [("manual", False), ("sdpa", False)] + ([] if args.no_compile else [("sdpa", True)])
    for attention, compiled in runs:
        tps, gflops, warmup = measure(attention, args.steps, args.batch_size, compiled)
        rates[attention, compiled] = tps
        label = f"train step, {attention}" + (", compiled" if compiled else "")
        print(
            f"{label:<24} {tps:9.0f} tok/s {gflops:8.1f} GFLOP/s   "
            f"{100 * gflops / peak:5.1f}% of matmul"
            + (f"   (first 5 steps with compilation: {warmup:.1f} s)" if compiled else "")
        )
    if ("sdpa", True) in rates:
        gain = rates["sdpa", True] / rates["sdpa", False]
        print(f"torch.compile gain (sdpa, tok/s compiled / eager): {gain:.2f}x")


if __name__ == "__main__":
    main()
