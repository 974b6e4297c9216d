"""Training step time: gptlib's GPT against Hugging Face's GPT2LMHeadModel, side by side.

Both sides are GPT-2's architecture (pre-norm LayerNorm with bias, GELU's tanh form, a bias in
every Linear layer, tied head, dropout 0) with the same weights: transformers draws them from its
own config classes, `save_pretrained` writes them and `gptlib.huggingface.load_hf_gpt2` reads
them, and the two losses on the first batch must agree. Each side has its own AdamW
(`make_optimizer`, fused where the device has the kernel) and clips its gradients to norm 1.0.
gptlib's side is the library's own step, `gptlib.train.train_step` (the step `train` and the
command line take); transformers' side is the same step written out, its loss computed from
`labels` with its cache off (`use_cache=False`, as for training) and sdpa attention.

Two sizes:
  textbook  the textbook preset's size: 4 layers, d 128, 4 heads, V 27, T 64, batch 16
  gpt2      GPT-2 small (124M): T 128, batch 2 on a CPU; T 1024, batch 16 on CUDA

On a CPU in float32; on CUDA under bfloat16 autocast with TF32 (benchmarks/common.py). Each round
times `--steps` steps of each side, alternating which goes first; the table gives the best round,
the median round and the model FLOP utilisation (MFU) against a matmul timed in the same rounds.
The ratio is gptlib's step time over transformers' (below 1: gptlib is faster).

    python benchmarks/train_vs_hf.py                        # both sizes on the CPU
    python benchmarks/train_vs_hf.py --device cuda --sizes gpt2 --compile
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never the network: the weights are made here
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from common import (  # noqa: E402
    alternate,
    autocast,
    describe,
    flops_per_token,
    matmul_flops,
    matmul_label,
    pick_device,
    ratios,
    timed,
    transformers_missing,
)

from gptlib.huggingface import load_hf_gpt2  # noqa: E402
from gptlib.model import GPT  # noqa: E402
from gptlib.train import make_optimizer, train_step  # noqa: E402

# name: (layers, d, heads, vocab, positions, {device type: (T, batch)})
SIZES = {
    "textbook": (4, 128, 4, 27, 64, {"cpu": (64, 16), "cuda": (64, 16)}),
    "gpt2": (12, 768, 12, 50257, 1024, {"cpu": (128, 2), "cuda": (1024, 16)}),
}


def build_pair(n_layer, n_embd, n_head, vocab, positions, device, seed=0):
    """(gptlib GPT, GPT2LMHeadModel) with the same random weights, in train mode."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation="sdpa",
    )
    hf = GPT2LMHeadModel(config)
    with tempfile.TemporaryDirectory() as folder:
        hf.save_pretrained(folder)
        loaded = load_hf_gpt2(folder)
    # load_hf_gpt2 keeps GPT-2's memory layout (transposed views, read faster by generation); a
    # GPT built for training owns contiguous matrices, and its gradients need no copy into that
    # layout on every step (about 5% of a GPT-2 small step on a CPU).
    ours = GPT(loaded.cfg)
    ours.load_state_dict(loaded.state_dict())
    return ours.to(device).train(), hf.to(device).train()


def trainer(model, loss_of, batches, device, steps: int, compiled: bool):
    """A function that runs `steps` training steps and returns the seconds per step. gptlib's
    side is the library's own step, `gptlib.train.train_step` (which also checks the labels and
    the loss); transformers' side the same step written out."""
    forward = torch.compile(model) if compiled else model
    opt = make_optimizer(model, 3e-4)
    cycle = itertools.cycle(batches)

    def autocast_forward(idx, labels):
        with autocast(device):
            return forward(idx, labels)

    def step():
        idx = next(cycle)
        if loss_of is gptlib_loss:  # the same window as labels: the shift is inside the loss
            train_step(model, opt, idx, idx, 3e-4, 1.0, forward=autocast_forward)
            return
        with autocast(device):
            loss = loss_of(forward, idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step, lambda: timed(step, device, steps)


def gptlib_loss(forward, idx):
    return forward(idx, idx)[1]  # the same window as labels: the shift is inside the loss


def hf_loss(forward, idx):
    return forward(input_ids=idx, labels=idx, use_cache=False).loss


def compare(name: str, device, args) -> list[float]:
    """Print one size's table; return gptlib's best-round step-time ratios."""
    n_layer, d, h, V, positions, shapes = SIZES[name]
    T, B = shapes[device.type]
    T, B = args.seq_len or T, args.batch_size or B
    ours, hf = build_pair(n_layer, d, h, V, positions, device)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, V, (B, T), generator=g).to(device) for _ in range(4)]
    with torch.no_grad(), autocast(device):
        a, b = gptlib_loss(ours, batches[0]).float(), hf_loss(hf, batches[0]).float()
    diff = abs(a.item() - b.item())
    print(
        f"\n{name}: GPT-2 architecture, L={n_layer} d={d} h={h} V={V}, batch {B} x T {T}, "
        f"{ours.num_parameters():,} parameters; same weights, loss {a.item():.4f} vs "
        f"{b.item():.4f} (|diff| {diff:.1e})"
    )
    if diff > (1e-3 if device.type == "cpu" else 3e-2):
        raise SystemExit(f"{name}: the two models disagree on the loss; the comparison is void")
    variants = [False, True] if args.compile else [False]
    runs, warmups = {}, {}
    for compiled in variants:
        tag = ", compiled" if compiled else ""
        for side, model, loss_of in (("gptlib", ours, gptlib_loss), ("transformers", hf, hf_loss)):
            step, run = trainer(model, loss_of, batches, device, args.steps, compiled)
            start = time.perf_counter()
            timed(step, device, 2)  # warm-up: allocation, kernel choice (and compilation)
            warmups[side + tag] = time.perf_counter() - start
            runs[side + tag] = run
    reference: list[float] = []
    times = alternate(runs, args.rounds, lambda: reference.append(matmul_flops(device)))
    peak = max(reference)
    flops = flops_per_token(ours.cfg, T) * B * T
    print(
        f"{'':>24} {'ms/step best':>12} {'median':>8} {'tokens/s':>10} {'TFLOP/s':>8} "
        f"{'MFU':>6}   ({matmul_label(device)}: {peak / 1e12:.2f} TFLOP/s)"
    )
    for label, t in times.items():
        best = min(t)
        compile_note = (
            f"   (first 2 steps, compiling: {warmups[label]:.0f} s)" if "compiled" in label else ""
        )
        print(
            f"{label:>24} {1000 * best:12.1f} {1000 * statistics.median(t):8.1f} "
            f"{B * T / best:10,.0f} {flops / best / 1e12:8.3f} {100 * flops / best / peak:5.1f}%"
            + compile_note
        )
    found = []
    for compiled in variants:
        tag = ", compiled" if compiled else ""
        best, median = ratios(times["gptlib" + tag], times["transformers" + tag])
        found.append(best)
        print(
            f"{'gptlib / transformers' + tag:>24}: step time {best:.2f} (best rounds), "
            f"{median:.2f} (median of {args.rounds} per-round ratios)"
        )
    if args.compile:
        for side in ("gptlib", "transformers"):
            best, median = ratios(times[side + ", compiled"], times[side])
            print(
                f"{side + ' compiled / eager':>24}: step time {best:.2f} (best), {median:.2f} "
                "(median)"
            )
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda (default cpu)")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=None, help="steps per side per round")
    parser.add_argument("--batch-size", type=int, default=None, help="override the size's batch")
    parser.add_argument("--seq-len", type=int, default=None, help="override the size's T")
    parser.add_argument("--compile", action="store_true", help="also both sides compiled")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (CPU)")
    args = parser.parse_args(argv)
    missing = transformers_missing()
    if missing:
        print(f"skipped: gptlib against transformers needs transformers; {missing}")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    print(
        f"torch {torch.__version__}, {describe(device)}; training steps, each side with its own "
        f"AdamW and clipping; best and median of {args.rounds} alternating rounds"
    )
    for name in args.sizes:
        # A round takes a few seconds on a CPU and about a second on a GPU.
        steps = args.steps or {"textbook": 20, "gpt2": 1 if device.type == "cpu" else 5}[name]
        compare(name, device, argparse.Namespace(**{**vars(args), "steps": steps}))


if __name__ == "__main__":
    main()
