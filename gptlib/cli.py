"""`python -m gptlib train ...` and `python -m gptlib sample FILE ...`."""

from __future__ import annotations

import argparse
import math
import sys

import torch

from gptlib.bigram import bigram_loss
from gptlib.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from gptlib.config import PRESETS, preset
from gptlib.data import load_corpus
from gptlib.device import choose_device
from gptlib.generate import complete, sample_documents
from gptlib.model import GPT
from gptlib.train import estimate_loss, make_optimizer, train


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number > 0, got 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gptlib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train a model and save a checkpoint")
    t.add_argument("--data", default="names", help="names | surnames | PATH of a UTF-8 text file")
    t.add_argument("--preset", default="textbook", choices=sorted(PRESETS))
    t.add_argument("--steps", type=_positive_int, default=1000)
    t.add_argument("--batch-size", type=_positive_int, default=32)
    t.add_argument(
        "--block-size",
        type=_positive_int,
        default=None,
        help="override the preset's block_size (default for the textbook preset on names/surnames: "
        "16, since no name is longer than 13 letters)",
    )
    t.add_argument("--n-layer", type=_positive_int, default=None)
    t.add_argument("--n-head", type=_positive_int, default=None)
    t.add_argument("--n-embd", type=_positive_int, default=None)
    t.add_argument("--dropout", type=_non_negative_float, default=None)
    t.add_argument("--attention", choices=["manual", "sdpa"], default=None)
    t.add_argument("--lr", type=_positive_float, default=2e-3, help="peak learning rate")
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--schedule", choices=["constant", "cosine"], default="cosine")
    t.add_argument("--eval-every", type=_positive_int, default=250)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--device", default=None, help="cpu | cuda | mps (default: the best available)")
    t.add_argument("--out", default="runs/model.pt", help="where to write the checkpoint")
    t.add_argument("--samples", type=int, default=10, help="samples to print at the end")
    t.add_argument(
        "--no-optimizer-state",
        action="store_true",
        help="save weights, config and history only (smaller file)",
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    s = sub.add_parser("sample", help="print samples from a checkpoint")
    s.add_argument("checkpoint")
    s.add_argument("--temperature", type=_non_negative_float, default=1.0, help="0 = greedy")
    s.add_argument("--top-k", type=_positive_int, default=None)
    s.add_argument("--num", type=_positive_int, default=10)
    s.add_argument("--max-len", type=_positive_int, default=200, help="tokens per sample at most")
    s.add_argument("--prompt", default=None, help="text to continue (text corpora)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--device", default=None)
    return parser


def _print_samples(model, tokenizer, num, temperature, top_k, seed, max_len, prompt=None) -> None:
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed)
    if tokenizer.bos_id is not None and prompt is None:
        for doc in sample_documents(model, tokenizer, num, max_len, temperature, top_k, g):
            print(doc)
        return
    start = prompt if prompt is not None else tokenizer.itos[0]
    for _ in range(num):
        print(complete(model, tokenizer, start, max_len, temperature, top_k, g))
        print("---")


def cmd_train(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    device = choose_device(args.device)
    torch.manual_seed(args.seed)
    corpus = load_corpus(args.data)
    changes = {
        k: v
        for k, v in {
            "block_size": args.block_size,
            "n_layer": args.n_layer,
            "n_head": args.n_head,
            "n_embd": args.n_embd,
            "dropout": args.dropout,
            "attention": args.attention,
        }.items()
        if v is not None
    }
    if args.block_size is None and args.preset == "textbook" and args.data in ("names", "surnames"):
        # A window of 64 would hold several short names; 16 covers any name plus its BOS, and
        # makes each step about 4x cheaper.
        changes["block_size"] = 16
    cfg = preset(args.preset, corpus.vocab_size, **changes)
    model = GPT(cfg).to(device)
    print(
        f"device {device}  data {corpus.name}  vocab {cfg.vocab_size}  "
        f"train/val tokens {corpus.train.numel():,}/{corpus.val.numel():,}"
    )
    print(
        f"preset {args.preset}  parameters {model.num_parameters():,}  "
        f"(L={cfg.n_layer} d={cfg.n_embd} h={cfg.n_head} T={cfg.block_size})"
    )
    opt = make_optimizer(model, args.lr)
    bar = tqdm(total=args.steps, disable=args.no_progress, unit="step", file=sys.stderr)

    def on_step(hist):
        bar.update(1)
        post = {"loss": f"{hist.loss[-1]:.3f}"}
        if hist.val_loss:
            post["val"] = f"{hist.val_loss[-1]:.3f}"
        bar.set_postfix(post, refresh=False)

    hist = train(
        model,
        corpus.train.to(device),
        args.steps,
        args.batch_size,
        val_tokens=corpus.val.to(device),
        max_lr=args.lr,
        warmup=args.warmup,
        schedule=args.schedule,
        min_lr=args.lr / 10,
        eval_every=args.eval_every,
        seed=args.seed,
        optimizer=opt,
        callback=on_step,
    )
    bar.close()
    if hist.interrupted:
        print(f"interrupted at step {len(hist)}: keeping what was learned so far")
    train_loss = estimate_loss(model, corpus.train.to(device), n_batches=50)
    val_loss = estimate_loss(model, corpus.val.to(device), n_batches=50)
    bigram = bigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    print(f"final train loss {train_loss:.4f}  val loss {val_loss:.4f} nats/token")
    print(f"bigram baseline val loss {bigram:.4f}  (model is {bigram - val_loss:+.4f} nats better)")
    save_checkpoint(
        args.out,
        model,
        corpus.tokenizer,
        None if args.no_optimizer_state else opt,
        len(hist),
        hist,
        extra={
            "data": args.data,
            "preset": args.preset,
            "val_loss": val_loss,
            "bigram_val_loss": bigram,
        },
    )
    print(f"saved {args.out}")
    if args.samples > 0:
        print("samples (temperature 1.0):")
        _print_samples(
            model,
            corpus.tokenizer,
            args.samples,
            1.0,
            None,
            args.seed,
            40 if corpus.tokenizer.bos else 200,
        )
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    device = choose_device(args.device)
    ckpt = load_checkpoint(args.checkpoint, device)
    _print_samples(
        ckpt.model,
        ckpt.tokenizer,
        args.num,
        args.temperature,
        args.top_k,
        args.seed,
        args.max_len,
        args.prompt,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
        return cmd_sample(args)
    except (FileNotFoundError, CheckpointError, ValueError) as e:
        parser.exit(2, f"{parser.prog} {args.command}: error: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
