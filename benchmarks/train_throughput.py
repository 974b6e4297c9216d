"""Training throughput of the `textbook` preset on the names corpus, beside the machine's
matmul rate.

    python benchmarks/train_throughput.py [--device cpu|cuda] [--steps 10] [--rounds 3]
        [--threads N] [--no-compile] [--compile-modes default reduce-overhead]
        [--block-size 64] [--batch-size 16] [--train-loop]

Prints tokens/s and achieved FLOP/s for the manual and the sdpa attention paths, and the FLOP/s
of a large matmul measured in the same rounds, so model-FLOP utilisation (MFU) is visible.
Then the sdpa path once more under torch.compile (what `train --compile` does; each of
`--compile-modes`): its one-off compile time and its gain in tokens/s over eager execution.
`--train-loop` adds the sdpa path run through `gptlib.train.train_step`, the taught step, whose
bookkeeping (the label and non-finite checks, reading the loss and the gradient norm back every
step) is what separates it from the bare loop here; on a GPU each read waits for the device.
Every variant runs `--steps` steps per round, in alternating order, and the best round counts.
On a CPU in float32; on CUDA under bfloat16 autocast with TF32 (benchmarks/common.py).
FLOPs per token for a training step (forward + backward) are counted as
6 * (12 L d^2 + V d)  (every weight matrix, and the output head)  +  12 L T d  (scores and
weights @ V), the usual estimate; norms, softmax and the optimiser are left out.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from common import (
    alternate,
    autocast,
    describe,
    flops_per_token,
    matmul_flops,
    matmul_label,
    pick_device,
    timed,
)

from gptlib.config import textbook
from gptlib.data import load_corpus, sample_batch
from gptlib.model import GPT
from gptlib.train import make_optimizer, train_step


def runner(attention: str, args, tokens, vocab_size, device, compile_mode=None, loop=False):
    """(a function timing one round in seconds per step, seconds of the two warm-up steps)."""
    cfg = textbook(vocab_size, attention=attention, block_size=args.block_size)
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    forward = model
    if compile_mode is not None:
        forward = torch.compile(model, mode=None if compile_mode == "default" else compile_mode)
    opt = make_optimizer(model, 3e-4)
    g = torch.Generator().manual_seed(0)
    B, T = args.batch_size, cfg.block_size

    def step():
        idx, labels = sample_batch(tokens, B, T, g, device)
        with autocast(device):
            _, loss = forward(idx, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    def steps_of_train(n):
        for _ in range(n):
            idx, labels = sample_batch(tokens, B, T, g, device)
            with autocast(device):
                train_step(model, opt, idx, labels, 3e-4, 1.0)

    start = time.perf_counter()
    if loop:
        timed(lambda: steps_of_train(2), device)  # warm-up: allocator, kernels
        run = lambda: timed(lambda: steps_of_train(args.steps), device) / args.steps  # noqa: E731
    else:
        timed(step, device, 2)  # warm-up: allocator, kernels (and compilation)
        run = lambda: timed(step, device, args.steps)  # noqa: E731
    return run, time.perf_counter() - start, cfg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    parser.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--block-size", type=int, default=64)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile runs")
    parser.add_argument(
        "--compile-modes",
        nargs="+",
        default=["default"],
        help="torch.compile modes to time: default, reduce-overhead, max-autotune",
    )
    parser.add_argument(
        "--train-loop", action="store_true", help="also time the sdpa path through train_step()"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    corpus = load_corpus("names")
    tokens = corpus.train.to(device)
    print(
        f"torch {torch.__version__}, {describe(device)}; textbook preset on names, "
        f"B={args.batch_size}, T={args.block_size}; best of {args.rounds} alternating rounds of "
        f"{args.steps} steps"
    )
    variants = {"manual": ("manual", None, False), "sdpa": ("sdpa", None, False)}
    if args.train_loop:
        variants["sdpa, through train_step()"] = ("sdpa", None, True)
    if not args.no_compile:
        for mode in args.compile_modes:
            suffix = "" if mode == "default" else f" {mode}"
            variants[f"sdpa, compiled{suffix}"] = ("sdpa", mode, False)
    runs, warmups = {}, {}
    for label, (attention, mode, loop) in variants.items():
        runs[label], warmups[label], cfg = runner(
            attention, args, tokens, corpus.vocab_size, device, mode, loop
        )
    reference: list[float] = []
    times = alternate(runs, args.rounds, lambda: reference.append(matmul_flops(device)))
    peak = max(reference)
    tokens_per_step = args.batch_size * cfg.block_size
    per_token = flops_per_token(cfg)
    print(f"{matmul_label(device):<44} {'':>12} {peak / 1e9:10.1f} GFLOP/s   (reference)")
    rate = {}
    for label, t in times.items():
        rate[label] = tokens_per_step / min(t)
        gflops = rate[label] * per_token / 1e9
        note = (
            f"   (first 2 steps, compiling: {warmups[label]:.1f} s)" if "compiled" in label else ""
        )
        print(
            f"{'train step, ' + label:<44} {rate[label]:9.0f} tok/s {gflops:8.1f} GFLOP/s   "
            f"{100 * gflops * 1e9 / peak:5.1f}% of matmul   "
            f"{1000 * min(t):.2f} ms/step (median {1000 * statistics.median(t):.2f}){note}"
        )
    for label in rate:
        if "compiled" in label:
            gain = rate[label] / rate["sdpa"]
            print(f"torch.compile gain ({label[6:]}, tok/s compiled / eager): {gain:.2f}x")
    if "sdpa, through train_step()" in rate:
        cost = rate["sdpa"] / rate["sdpa, through train_step()"]
        print(f"train_step() against the bare loop, step time: {cost:.2f}x")


if __name__ == "__main__":
    main()
