"""Milliseconds per generated token with and without the KV cache.

The `textbook` preset (vocab 27, d 128, 4 layers, 4 heads, post-LN, tied) with block sizes 64 and
256; batch 1; 500 new tokens after a one-token prompt. The weights are random: the time per token
does not depend on what the model has learned. Each setting runs `--repeats` times (alternating
the two paths) and the fastest run counts, the usual way to read a timing on a shared machine.
Besides wall-clock time it prints the process's CPU time per token (summed over its threads):
on a machine busy with other work, CPU time shows what the code itself costs.

    python benchmarks/generate_speed.py                  # torch's default number of threads
    OMP_NUM_THREADS=1 python benchmarks/generate_speed.py
"""

from __future__ import annotations

import argparse
import time

import torch

from gptlib.config import textbook
from gptlib.generate import generate
from gptlib.model import GPT


def time_generate(model, prompt, new_tokens: int, use_cache: bool, seed: int = 0):
    """Wall-clock and CPU seconds for one generate call, and its tokens."""
    g = torch.Generator(device=prompt.device).manual_seed(seed)
    if prompt.device.type == "cuda":
        torch.cuda.synchronize()
    wall, cpu = time.perf_counter(), time.process_time()
    out = generate(model, prompt, new_tokens, temperature=1.0, generator=g, use_cache=use_cache)
    if prompt.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def bench(block_size: int, new_tokens: int, repeats: int, device: str) -> dict:
    torch.manual_seed(0)
    model = GPT(textbook(vocab_size=27, block_size=block_size)).to(device).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long, device=device)
    for use_cache in (False, True):  # warm-up: first calls allocate and pick kernels
        time_generate(model, prompt, 16, use_cache)
    wall = {False: float("inf"), True: float("inf")}
    cpu = dict(wall)
    outs = {}
    for _ in range(repeats):
        for use_cache in (False, True):
            w, c, outs[use_cache] = time_generate(model, prompt, new_tokens, use_cache)
            wall[use_cache], cpu[use_cache] = min(wall[use_cache], w), min(cpu[use_cache], c)
    # The paths agree while every prediction is made from at most block_size tokens.
    agree = torch.equal(outs[False][:, : block_size + 1], outs[True][:, : block_size + 1])
    return {
        "block_size": block_size,
        "no_cache_ms": 1000 * wall[False] / new_tokens,
        "cache_ms": 1000 * wall[True] / new_tokens,
        "no_cache_cpu_ms": 1000 * cpu[False] / new_tokens,
        "cache_cpu_ms": 1000 * cpu[True] / new_tokens,
        "agree": agree,
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}, "
        f"batch 1, {args.new_tokens} new tokens, best of {args.repeats}"
    )
    print(f"{'':>5}  {'wall-clock ms/token':^38}  {'CPU ms/token':^38}")
    print(f"{'block':>5}  {'no cache':>10}  {'KV cache':>10}  {'speed-up':>12}", end="")
    print(f"  {'no cache':>10}  {'KV cache':>10}  {'speed-up':>12}")
    results = []
    for T in args.block_sizes:
        r = bench(T, args.new_tokens, args.repeats, args.device)
        ratio = r["no_cache_ms"] / r["cache_ms"]
        cpu_ratio = r["no_cache_cpu_ms"] / r["cache_cpu_ms"]
        print(
            f"{T:>5}  {r['no_cache_ms']:>10.3f}  {r['cache_ms']:>10.3f}  {ratio:>11.1f}x"
            f"  {r['no_cache_cpu_ms']:>10.3f}  {r['cache_cpu_ms']:>10.3f}  {cpu_ratio:>11.1f}x"
        )
        if not r["agree"]:
            print(f"  warning: the two paths gave different tokens within block_size={T}")
        results.append(r)
    return results


if __name__ == "__main__":
    main()
