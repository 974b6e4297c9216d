"""Milliseconds per generated token: gptlib's GPT-2 against Hugging Face's GPT2LMHeadModel.

The same random GPT-2 small (124M) weights in both (made by transformers, written with
`save_pretrained`, read by `gptlib.gpt2.load_hf_gpt2`); batch 1, a 32-token prompt, 100 greedy
new tokens, the KV cache on in both (`generate(..., use_cache=True)` and HF `generate`). Each side
runs `--repeats` times, alternating, and the fastest run counts, the usual way to read a timing
on a shared machine; CPU time per token is printed too. The time includes the prompt's prefill.
Both sides must produce the same tokens, or the comparison is void.

    python benchmarks/gpt2_vs_hf.py                  # torch's default number of threads
    OMP_NUM_THREADS=1 python benchmarks/gpt2_vs_hf.py
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the network: the weights are made here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from gptlib.generate import generate  # noqa: E402
from gptlib.gpt2 import load_hf_gpt2  # noqa: E402


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

    torch.manual_seed(0)
    # GPT-2's own initialisation, the position table made 20x larger: otherwise a random model
    # repeats one token, and the check that both sides produce the same tokens would say little.
    hf = GPT2LMHeadModel(GPT2Config()).eval()
    with torch.no_grad():
        hf.transformer.wpe.weight.mul_(20)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        ours = load_hf_gpt2(folder)
    prompt = torch.randint(
        0, 50257, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(0)
    )
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
        timed(fn)
    best = {"transformers": (float("inf"), float("inf")), "gptlib": (float("inf"), float("inf"))}
    outs = {}
    for _ in range(args.repeats):
        for name, fn in (("transformers", run_hf), ("gptlib", run_ours)):
            wall, cpu, outs[name] = timed(fn)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    same = torch.equal(outs["transformers"], outs["gptlib"])
    print(
        f"GPT-2 124M, random weights, batch 1, {args.prompt_tokens}-token prompt, {n} greedy new "
        f"tokens, KV cache on both sides; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), best of {args.repeats}"
    )
    print(f"{'':>14} {'ms/token':>9} {'cpu ms/token':>13}")
    for name, (wall, cpu) in best.items():
        print(f"{name:>14} {1000 * wall / n:9.1f} {1000 * cpu / n:13.1f}")
    ratio = best["transformers"][0] / best["gptlib"][0]
    print(f"gptlib is {ratio:.2f}x the speed of transformers (>1: faster)")
    print(f"same {n} tokens from both: {same}")
    if not same:
        raise SystemExit("the two implementations generated different tokens")


if __name__ == "__main__":
    main()
