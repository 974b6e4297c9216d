"""`python -m gptlib train ...` and `python -m gptlib sample FILE ...`."""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

from gptlib import distributed
from gptlib.bigram import bigram_loss
from gptlib.checkpoint import CheckpointError, check_writable, load_checkpoint, save_checkpoint
from gptlib.config import PRESETS, preset
from gptlib.data import READINGS, load_corpus
from gptlib.device import DTYPES, choose_device
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

    # Settings left as None get TRAIN_DEFAULTS, or on --resume the resumed run's own values.
    t = sub.add_parser("train", help="train a model and save a checkpoint")
    t.add_argument(
        "--data",
        default=None,
        help="names | surnames | tang300 (Tang poems, Debian's fortunes-zh) | PATH of a UTF-8 "
        "text file (default: names)",
    )
    t.add_argument(
        "--format",
        choices=READINGS,
        default=None,
        help="how to read a file: lines (one document per line), text (running text), or auto "
        "(default): detect it and say which on the first line",
    )
    t.add_argument("--preset", default=None, choices=sorted(PRESETS), help="default: textbook")
    t.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help="total steps of the run; the schedule spans them (default 1000; with --resume, the "
        "resumed run's total)",
    )
    t.add_argument(
        "--batch-size", type=_positive_int, default=None, help="windows per step (per process)"
    )
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
    t.add_argument("--lr", type=_positive_float, default=None, help="peak learning rate (2e-3)")
    t.add_argument("--warmup", type=int, default=None, help="warmup steps (100)")
    t.add_argument("--schedule", choices=["constant", "cosine"], default=None, help="(cosine)")
    t.add_argument("--eval-every", type=_positive_int, default=None, help="(250)")
    t.add_argument("--seed", type=int, default=None, help="(0)")
    t.add_argument("--device", default=None, help="cpu | cuda | mps (default: the best available)")
    t.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        default=None,
        help="continue the run saved in CHECKPOINT: weights, optimiser state, step, history, "
        "schedule and random state; same data and model shape",
    )
    t.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="bfloat16: run the forward pass under autocast (GPUs; default float32)",
    )
    t.add_argument("--compile", action="store_true", help="torch.compile the model (GPUs)")
    t.add_argument("--out", default="runs/model.pt", help="where to write the checkpoint")
    t.add_argument("--samples", type=int, default=10, help="samples to print at the end")
    t.add_argument(
        "--no-optimizer-state",
        action="store_true",
        help="save weights, config and history only (smaller file)",
    )
    t.add_argument("--no-progress", action="store_true", help="no progress bar")

    s = sub.add_parser("sample", help="print samples from a checkpoint")
    s.add_argument(
        "checkpoint",
        help="a checkpoint file, or a Hugging Face GPT-2 folder (config.json + model.safetensors "
        "or pytorch_model.bin), sampled with GPT-2's tokenizer",
    )
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
            print(doc + "\n" if "\n" in doc else doc)  # a blank line after a multi-line poem
        return
    start = prompt if prompt is not None else tokenizer.itos[0]
    for _ in range(num):
        print(complete(model, tokenizer, start, max_len, temperature, top_k, g))
        print("---")


TRAIN_DEFAULTS = {
    "data": "names",
    "format": "auto",
    "preset": "textbook",
    "steps": 1000,
    "batch_size": 32,
    "lr": 2e-3,
    "warmup": 100,
    "schedule": "cosine",
    "eval_every": 250,
    "seed": 0,
}
SHAPE_FLAGS = ("block_size", "n_layer", "n_head", "n_embd", "dropout", "attention")


def _resumed(args: argparse.Namespace, device: torch.device):
    """The checkpoint to continue and its training record, or refuse with the reason."""
    ck = load_checkpoint(args.resume, device)
    if ck.training is None or ck.step is None or ck.history is None:
        raise ValueError(
            f"{args.resume!r} holds no training state (written by an older gptlib or by hand); "
            "it can be sampled from, but a run cannot continue from it"
        )
    if ck.optimizer_state is None:
        raise ValueError(
            f"{args.resume!r} was saved with --no-optimizer-state, so its run cannot continue "
            "exactly; start a new run, or train without --no-optimizer-state"
        )
    return ck, ck.training


def _settings(args: argparse.Namespace, training: dict | None) -> dict:
    """Each setting: as given, else the resumed run's, else the default."""
    before = training["settings"] if training else {}
    return {
        k: getattr(args, k) if getattr(args, k) is not None else before.get(k, default)
        for k, default in TRAIN_DEFAULTS.items()
    }


def _config(args, settings, corpus, ck):
    changes = {k: getattr(args, k) for k in SHAPE_FLAGS if getattr(args, k) is not None}
    if ck is not None:
        given = {k: v for k, v in changes.items() if getattr(ck.config, k) != v}
        if args.preset is not None and args.preset != ck.training["settings"]["preset"]:
            given["preset"] = args.preset
        if given:
            have = ", ".join(
                f"{k}={ck.training['settings']['preset'] if k == 'preset' else getattr(ck.config, k)!r}"
                for k in given
            )
            asked = ", ".join(f"{k}={v!r}" for k, v in given.items())
            raise ValueError(
                f"cannot resume {args.resume!r} with a different model shape: it has {have}, "
                f"the command asks for {asked}; drop those flags, or start a new run without "
                "--resume"
            )
        return ck.config
    cfg = preset(settings["preset"], corpus.vocab_size, **changes)
    if args.block_size is None and settings["preset"] == "textbook" and corpus.documents:
        # For short documents a window of 64 would hold several of them; the longest one plus its
        # BOS, rounded up to a multiple of 8, is enough (16 for names) and each step is cheaper.
        longest = max(len(d) for d in corpus.documents) + 1
        cfg = cfg.replace(block_size=min(cfg.block_size, -(-longest // 8) * 8))
    return cfg


def cmd_train(args: argparse.Namespace) -> int:
    try:
        code = _train(args)
        distributed.finish()  # only after success: a failed rank must not wait for the others
        return code
    finally:
        distributed.teardown()


def _train(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    ranks, device = distributed.setup(choose_device(args.device))
    say = print if ranks.is_main else (lambda *a, **k: None)
    ck, training = _resumed(args, device) if args.resume else (None, None)
    settings = _settings(args, training)
    seed, total = settings["seed"], settings["steps"]
    # Every check that can fail runs here, before the first step.
    corpus = load_corpus(settings["data"], reading=settings["format"])
    if ck is not None and corpus.fingerprint() != training["corpus"]["fingerprint"]:
        was = training["corpus"]
        raise ValueError(
            f"cannot resume {args.resume!r} on different data: it was trained on "
            f"{was['name']!r} ({was['reading']}, vocab {was['vocab_size']}), this command reads "
            f"{corpus.name!r} ({corpus.reading}, vocab {corpus.vocab_size}) and its tokens differ; "
            "resume with the same --data and --format, or start a new run without --resume"
        )
    cfg = _config(args, settings, corpus, ck)
    corpus.check_fits(cfg.block_size)
    if ranks.is_main:
        check_writable(args.out)
    start = ck.step if ck is not None else 0
    if start >= total:
        raise ValueError(
            f"{args.resume!r} is already at step {start} of its {total}; pass --steps with a "
            f"larger total (more than {start}) to train further"
        )
    dtype = DTYPES[args.dtype]

    torch.manual_seed(seed)
    if ck is not None:
        model = ck.model.train()
    else:
        model = GPT(cfg).to(device)
    say(f"data {corpus.name}: {corpus.reason}")
    procs = f"  processes {ranks.world_size}" if ranks.distributed else ""
    say(
        f"device {device}{procs}  vocab {cfg.vocab_size}  "
        f"train/val tokens {corpus.train.numel():,}/{corpus.val.numel():,}"
    )
    say(
        f"preset {settings['preset']}  parameters {model.num_parameters():,}  "
        f"(L={cfg.n_layer} d={cfg.n_embd} h={cfg.n_head} T={cfg.block_size})"
    )
    opt = make_optimizer(model, settings["lr"])
    g = torch.Generator().manual_seed(distributed.rank_seed(seed, ranks.rank))
    if ck is not None:
        opt.load_state_dict(ck.optimizer_state)
        states = training["rng"]
        if len(states["batches"]) == ranks.world_size:
            g.set_state(states["batches"][ranks.rank])
            torch.set_rng_state(states["torch"][ranks.rank])
        else:
            say(
                f"note: the run had {len(states['batches'])} process(es), this one has "
                f"{ranks.world_size}: windows are drawn afresh from the seed"
            )
        say(f"resuming {args.resume} at step {start} of {total}")
    forward = distributed.wrap(model, ranks, device)
    if args.compile:
        forward = torch.compile(forward)
    bar = tqdm(
        initial=start,
        total=total,
        disable=args.no_progress or not ranks.is_main,
        unit="step",
        file=sys.stderr,
    )

    def on_step(hist):
        bar.update(1)
        post = {"loss": f"{hist.loss[-1]:.3f}"}
        if hist.val_loss:
            post["val"] = f"{hist.val_loss[-1]:.3f}"
        bar.set_postfix(post, refresh=False)

    train_tokens, val_tokens = corpus.train.to(device), corpus.val.to(device)
    hist = train(
        model,
        train_tokens,
        total - start,
        settings["batch_size"],
        val_tokens=val_tokens if ranks.is_main else None,
        max_lr=settings["lr"],
        warmup=settings["warmup"],
        schedule=settings["schedule"],
        min_lr=settings["lr"] / 10,
        eval_every=settings["eval_every"],
        seed=seed,
        optimizer=opt,
        history=ck.history if ck is not None else None,
        callback=on_step,
        start_step=start,
        total_steps=total,
        generators=[g],
        forward=forward,
        autocast_dtype=dtype,
    )
    bar.close()
    done = hist.step[-1] + 1 if hist.step else start
    if hist.interrupted:
        say(f"interrupted at step {done} of {total}: keeping what was learned so far")
    rng = {
        "batches": distributed.gather(g.get_state()),
        "torch": distributed.gather(torch.get_rng_state()),
    }
    if not ranks.is_main:
        return 0
    train_loss = estimate_loss(model, train_tokens, n_batches=50)
    val_loss = estimate_loss(model, val_tokens, n_batches=50)
    bigram = bigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    gap = bigram - val_loss
    print(f"final train loss {train_loss:.4f}  val loss {val_loss:.4f} nats/token")
    print(
        f"bigram baseline val loss {bigram:.4f}  "
        f"(model is {abs(gap):.4f} nats {'better' if gap >= 0 else 'worse'})"
    )
    save_checkpoint(
        args.out,
        model,
        corpus.tokenizer,
        None if args.no_optimizer_state else opt,
        done,
        hist,
        extra={
            "data": settings["data"],
            "preset": settings["preset"],
            "val_loss": val_loss,
            "bigram_val_loss": bigram,
        },
        training={
            "settings": settings,
            "corpus": {
                "name": corpus.name,
                "reading": corpus.reading,
                "vocab_size": corpus.vocab_size,
                "fingerprint": corpus.fingerprint(),
            },
            "world_size": ranks.world_size,
            "rng": rng,
        },
    )
    print(f"saved {args.out}")
    if args.samples > 0:
        print("samples (temperature 1.0):")
        longest = max(len(d) for d in corpus.documents) + 1 if corpus.documents else 200
        _print_samples(
            model, corpus.tokenizer, args.samples, 1.0, None, seed, max(40, min(400, longest))
        )
    return 0


def _sample_gpt2_folder(args: argparse.Namespace, device: torch.device) -> int:
    """A Hugging Face GPT-2 folder in place of a checkpoint: GPT-2's tokenizer, and without a
    prompt the samples start from <|endoftext|>, the token GPT-2 saw between documents."""
    from gptlib.bpe import END_OF_TEXT, gpt2_tokenizer
    from gptlib.gpt2 import load_hf_gpt2

    model = load_hf_gpt2(args.checkpoint, device)
    tokenizer = gpt2_tokenizer()
    if model.cfg.vocab_size < tokenizer.vocab_size:
        raise ValueError(
            f"{args.checkpoint} holds a model with vocab_size={model.cfg.vocab_size}, fewer than "
            f"GPT-2's tokenizer's {tokenizer.vocab_size} ids; sampling a folder needs GPT-2's "
            "vocabulary"
        )
    prompt = args.prompt if args.prompt is not None else END_OF_TEXT
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(args.seed)
    for _ in range(args.num):
        print(complete(model, tokenizer, prompt, args.max_len, args.temperature, args.top_k, g))
        print("---")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    device = choose_device(args.device)
    if os.path.isdir(args.checkpoint):
        return _sample_gpt2_folder(args, device)
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
