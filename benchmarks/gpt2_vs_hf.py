"""Milliseconds per generated token: gptlib's GPT-2 against Hugging Face's GPT2LMHeadModel.

The same random GPT-2 small (124M) weights in both (made by transformers, written with
`save_pretrained`, read by `gptlib.huggingface.load_hf_gpt2`); a 32-token prompt, 100 greedy
new tokens (`--new-tokens`), for each batch size of `--batch-sizes` (default 1), the KV cache on
in both (`generate(..., use_cache=True)` and HF `generate`), float32 on both sides (TF32 off on
CUDA, so near-ties break the same way). Each side runs `--repeats` times, alternating, and the
fastest run counts, the usual way to read a timing on a shared machine; CPU time per token is
printed too. The time includes the prompt's prefill. Both sides must produce the same tokens, or
the comparison is void. Without transformers installed it says so and stops.

    python benchmarks/gpt2_vs_hf.py                  # torch's default number of threads
    OMP_NUM_THREADS=1 python benchmarks/gpt2_vs_hf.py
    python benchmarks/gpt2_vs_hf.py --device cuda --new-tokens 200 --batch-sizes 1 8
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the network: the weights are made here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from common import pick_device, sync, transformers_missing  # noqa: E402

from gptlib.generate import generate  # noqa: E402
from gptlib.huggingface import load_hf_gpt2  # noqa: E402


def timed(fn, device):
    sync(device)
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    sync(device)
    return time.perf_counter() - wall, time.process_time() - cpu, out


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if a.shape != b.shape:
        return f"shapes {tuple(a.shape)} and {tuple(b.shape)}"
    row, col = (a != b).nonzero()[0].tolist()
    return f"row {row}, position {col}"


def compare(hf, ours, batch: int, args, device) -> bool:
    """Print one batch size's timings; return whether both sides made the same tokens."""
    prompt = torch.randint(
        0, 50257, (batch, args.prompt_tokens), generator=torch.Generator().manual_seed(0)
    ).to(device)
    mask = torch.ones_like(prompt)
    n = args.new_tokens

    def run_hf():
        with torch.inference_mode():
            return hf.generate(
                prompt,
                attention_mask=mask,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                use_cache=True,
                pad_token_id=50256,
            )

    def run_ours():
        return generate(ours, prompt, n, temperature=0, use_cache=True)

    for fn in (run_hf, run_ours):  # warm-up: first calls allocate and pick kernels
        timed(fn, device)
    best = {"transformers": (float("inf"), float("inf")), "gptlib": (float("inf"), float("inf"))}
    outs = {}
    for r in range(args.repeats):
        order = [("transformers", run_hf), ("gptlib", run_ours)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            wall, cpu, outs[name] = timed(fn, device)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    same = torch.equal(outs["transformers"], outs["gptlib"])
    print(f"batch {batch}:")
    print(f"{'':>14} {'ms/token':>9} {'cpu ms/token':>13}")
    for name, (wall, cpu) in best.items():
        print(f"{name:>14} {1000 * wall / n:9.2f} {1000 * cpu / n:13.2f}")
    ratio = best["transformers"][0] / best["gptlib"][0]
    print(f"gptlib is {ratio:.2f}x the speed of transformers (>1: faster)")
    print(f"same {n} tokens from both: {same}", end="")
    print("" if same else f" (first difference: {first_difference(*outs.values())})")
    return same


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    missing = transformers_missing()
    if missing:
        print(f"skipped: gptlib's GPT-2 against transformers needs transformers; {missing}")
        return
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    device = pick_device(args.device)
    if device.type == "cuda":  # float32 as on a CPU: TF32 could break near-ties differently
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    torch.manual_seed(0)
    # GPT-2's own initialisation, the position table made 20x larger: otherwise a random model
    # repeats one token, and the check that both sides produce the same tokens would say little.
    hf = GPT2LMHeadModel(GPT2Config()).eval()
    with torch.no_grad():
        hf.transformer.wpe.weight.mul_(20)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = load_hf_gpt2(folder, device)
    hf = hf.to(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"GPT-2 124M, random weights, {args.prompt_tokens}-token prompt, {args.new_tokens} greedy "
        f"new tokens, KV cache on both sides, float32; {where}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), best of {args.repeats}"
    )
    same = [compare(hf, ours, batch, args, device) for batch in args.batch_sizes]
    if not all(same):
        raise SystemExit("the two implementations generated different tokens")


if __name__ == "__main__":
    main()
