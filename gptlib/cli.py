"""`python -m gptlib train ...`, `python -m gptlib sample FILE ...` and
`python -m gptlib progress [NOTEBOOK_DIR]`."""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

from gptlib import distributed
from gptlib.bigram import bigram_loss
from gptlib.checkpoint import CheckpointError, load_checkpoint
from gptlib.config import PRESETS, preset
from gptlib.data import BUILT_IN, READINGS, load_corpus
from gptlib.device import DTYPES, choose_device
from gptlib.generate import complete, sample_documents
from gptlib.model import GPT
from gptlib.run import (
    EXIT_INTERRUPTED,
    StopAtStepBoundary,
    claim,
    gather_random_states,
    output_path,
    restore_random_states,
    same_file,
    save_run,
    saving_uninterrupted,
)
from gptlib.train import estimate_loss, make_optimizer, train


def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


# Settings left as None on the command line get these, or on --resume the resumed run's own values.
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
DEFAULT_OUT = "runs/model.pt"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gptlib", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    d = TRAIN_DEFAULTS
    resumed = "; with --resume, the resumed run's"

    t = sub.add_parser("train", help="train a model and save a checkpoint")
    t.add_argument(
        "--data",
        default=None,
        help="names | surnames | tang300 (Tang poems, Debian's fortunes-zh) | PATH of a UTF-8 "
        f"text file (default: {d['data']}{resumed})",
    )
    t.add_argument(
        "--format",
        choices=READINGS,
        default=None,
        help="how to read a file given with --data: lines (one document per line), text "
        "(running text), or auto: detect it and say which on the first line (default: auto)",
    )
    t.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help=f"model configuration (default: {d['preset']}{resumed})",
    )
    t.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help=f"total steps of the run; the schedule spans them (default: {d['steps']}{resumed} "
        "total)",
    )
    t.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help=f"windows per step, per process (default: {d['batch_size']})",
    )
    t.add_argument(
        "--block-size",
        type=_positive_int,
        default=None,
        help="override the preset's block_size (default: the preset's; for the textbook preset on "
        "a corpus of documents, the longest document plus BOS rounded up to a multiple of 8: 16 "
        "for names)",
    )
    for flag, what in (
        ("--n-layer", "blocks"),
        ("--n-head", "attention heads per block"),
        ("--n-embd", "width d of the model"),
    ):
        t.add_argument(
            flag, type=_positive_int, default=None, help=f"{what} (default: the preset's)"
        )
    t.add_argument(
        "--dropout", type=_non_negative_float, default=None, help="(default: the preset's)"
    )
    t.add_argument(
        "--attention",
        choices=["manual", "sdpa"],
        default=None,
        help="manual: the attention written out; sdpa: PyTorch's fused kernel (default: the "
        "preset's, manual)",
    )
    t.add_argument(
        "--lr", type=_positive_float, default=None, help=f"peak learning rate (default: {d['lr']})"
    )
    t.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=None,
        help=f"steps of linear warmup (default: {d['warmup']})",
    )
    t.add_argument(
        "--schedule",
        choices=["constant", "cosine"],
        default=None,
        help=f"learning rate after warmup (default: {d['schedule']}, down to lr/10 at the end)",
    )
    t.add_argument(
        "--eval-every",
        type=_positive_int,
        default=None,
        help=f"steps between validation losses (default: {d['eval_every']})",
    )
    t.add_argument("--seed", type=int, default=None, help=f"(default: {d['seed']})")
    t.add_argument(
        "--device",
        default=None,
        help="cpu | cuda | cuda:N | mps (default: $GPTLIB_DEVICE, else the best available)",
    )
    t.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        default=None,
        help="continue the run saved in CHECKPOINT: weights, optimiser state, step, history, "
        "schedule and random state; same data and model shape (default: a new run)",
    )
    t.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help="bfloat16: run the forward pass under autocast, for GPUs (default: float32)",
    )
    t.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model: a one-off compilation (tens of seconds) for faster "
        "steps. It pays on a GPU when the model is large enough for the GPU, not Python, to set "
        "the pace (GPT-2 small) and the run is long enough to earn the compile time back; a "
        "short run of a small preset gets slower (default: off)",
    )
    t.add_argument(
        "--out",
        default=None,
        help=f"where to write the checkpoint; an existing file is never replaced unless "
        f"--overwrite is given (default: {DEFAULT_OUT}; with --resume, the resumed checkpoint)",
    )
    t.add_argument(
        "--overwrite",
        action="store_true",
        help="allow --out to replace an existing file (default: refuse)",
    )
    t.add_argument(
        "--samples",
        type=_non_negative_int,
        default=10,
        help="samples to print at the end (default: 10)",
    )
    t.add_argument(
        "--no-optimizer-state",
        action="store_true",
        help="save weights, config and history only, a smaller file that cannot be resumed "
        "(default: save the optimiser state too)",
    )
    t.add_argument(
        "--no-progress", action="store_true", help="no progress bar (default: a progress bar)"
    )

    s = sub.add_parser("sample", help="print samples from a checkpoint")
    s.add_argument(
        "checkpoint",
        help="a checkpoint file, or a Hugging Face GPT-2 folder (config.json + model.safetensors "
        "or pytorch_model.bin), sampled with GPT-2's tokenizer",
    )
    s.add_argument(
        "--temperature",
        type=_non_negative_float,
        default=1.0,
        help="0 = greedy (default: 1.0)",
    )
    s.add_argument(
        "--top-k",
        type=_positive_int,
        default=None,
        help="keep the k most likely tokens (default: all)",
    )
    s.add_argument("--num", type=_positive_int, default=10, help="samples (default: 10)")
    s.add_argument(
        "--max-len",
        type=_positive_int,
        default=200,
        help="tokens per sample at most (default: 200)",
    )
    s.add_argument(
        "--prompt",
        default=None,
        help="text to continue; for a model of one document per line (names), every sample is "
        "a document that starts with it (default: none)",
    )
    s.add_argument("--seed", type=int, default=0, help="(default: 0)")
    s.add_argument(
        "--device",
        default=None,
        help="cpu | cuda | cuda:N | mps (default: $GPTLIB_DEVICE, else the best available)",
    )

    p = sub.add_parser(
        "progress",
        help="list every exercise of the course: notebook, difficulty, minutes and state",
    )
    p.add_argument(
        "notebook_dir",
        nargs="?",
        default=None,
        help="the folder of your notebooks, as last saved (default: the current folder if it holds the course's notebooks, else the course's notebooks/)",
    )
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=60.0,
        help="seconds one check may run before it counts as failed (default: 60)",
    )
    return parser


def _print_samples(model, tokenizer, num, temperature, top_k, seed, max_len, prompt=None) -> None:
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed)
    if tokenizer.bos_id is not None:  # a model of documents: whole documents, from the prompt
        docs = sample_documents(
            model, tokenizer, num, max_len, temperature, top_k, g, prompt=prompt
        )
        for doc in docs:
            print(doc + "\n" if "\n" in doc else doc)  # a blank line after a multi-line poem
        return
    start = prompt if prompt is not None else tokenizer.itos[0]
    for _ in range(num):
        print(complete(model, tokenizer, start, max_len, temperature, top_k, g))
        print("---")


def _resumed(path: str, device: torch.device):
    """The checkpoint to continue, or refuse with the reason."""
    ck = load_checkpoint(path, device)
    if ck.training is None or ck.step is None or ck.history is None:
        raise ValueError(
            f"{path!r} holds no training state (written by an older gptlib or by hand); "
            "it can be sampled from, but a run cannot continue from it"
        )
    if ck.optimizer_state is None:
        raise ValueError(
            f"{path!r} was saved with --no-optimizer-state, so its run cannot continue "
            "exactly; start a new run, or train without --no-optimizer-state"
        )
    return ck


def _settings(args: argparse.Namespace, training: dict | None) -> dict:
    """Each setting: as given, else the resumed run's, else the default."""
    before = training["settings"] if training else {}
    settings = {
        k: getattr(args, k) if getattr(args, k) is not None else before.get(k, default)
        for k, default in TRAIN_DEFAULTS.items()
    }
    data = settings["data"]
    if data not in BUILT_IN:
        if not os.path.exists(data) and args.data is None:
            raise ValueError(
                f"the run in {args.resume!r} was trained on the file {data!r} (the path stored in "
                f"the checkpoint), which is not there from {os.getcwd()!r}; pass --data with the "
                "path of the same file"
            )
        settings["data"] = os.path.abspath(data)  # stored so a resume works from any folder
    elif args.format is not None and args.format != "auto":
        raise ValueError(
            f"--format {args.format} reads a file given with --data; {data!r} is a built-in "
            "corpus with its own reading (one document per name or poem): drop --format"
        )
    return settings


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


def _check_same_data(args, corpus, training) -> None:
    if corpus.fingerprint() != training["corpus"]["fingerprint"]:
        was = training["corpus"]
        raise ValueError(
            f"cannot resume {args.resume!r} on different data: it was trained on "
            f"{was['name']!r} ({was['reading']}, vocab {was['vocab_size']}), this command reads "
            f"{corpus.name!r} ({corpus.reading}, vocab {corpus.vocab_size}) and its tokens differ; "
            "resume with the same --data and --format, or start a new run without --resume"
        )


def cmd_train(args: argparse.Namespace) -> int:
    try:
        code = _train(args)
        distributed.finish()  # only after success: a failed rank must not wait for the others
        return code
    finally:
        distributed.teardown()


def _train(args: argparse.Namespace) -> int:
    """The steps of a run. Every check that can fail runs before the first step."""
    ranks, device = distributed.setup(choose_device(args.device))
    say = print if ranks.is_main else (lambda *a, **k: None)
    ck = _resumed(args.resume, device) if args.resume else None
    training = ck.training if ck is not None else None
    settings = _settings(args, training)
    out = args.out or (args.resume if args.resume else DEFAULT_OUT)
    if ranks.is_main:
        out = output_path(out, data=settings["data"], resume=args.resume, overwrite=args.overwrite)
        with claim(out):
            return _run(args, settings, ck, out, ranks, device, say)
    return _run(args, settings, ck, out, ranks, device, say)


def _run(args, settings, ck, out, ranks, device, say) -> int:
    seed, total = settings["seed"], settings["steps"]
    corpus = load_corpus(settings["data"], reading=settings["format"])
    if ck is not None:
        _check_same_data(args, corpus, ck.training)
    cfg = _config(args, settings, corpus, ck)
    corpus.check_fits(cfg.block_size)
    start = ck.step if ck is not None else 0
    if start >= total:
        raise ValueError(
            f"{args.resume!r} is already at step {start} of its {total}; pass --steps with a "
            f"larger total (more than {start}) to train further"
        )

    torch.manual_seed(seed)
    model = ck.model.train() if ck is not None else GPT(cfg).to(device)
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
        _restore(ck.training, g, ranks, device, say)
        say(f"resuming {args.resume} at step {start} of {total}")

    with StopAtStepBoundary(say) as stop:
        say(f"training: Ctrl-C stops after the current step and saves the run to {out}")
        hist = _train_steps(args, settings, model, opt, g, corpus, ck, ranks, device, stop)
        states = gather_random_states(g, device)
    done = hist.step[-1] + 1  # Ctrl-C lets the step it lands in finish: at least one step ran
    if hist.interrupted:
        say(f"interrupted at step {done} of {total}: keeping what was learned so far")
    if not ranks.is_main:
        return 0

    if stop.presses < 2:
        summary = _final_evaluation(model, corpus, device)  # {} if Ctrl-C stops it
    else:
        summary = {}
        print("final evaluation skipped")
    with saving_uninterrupted():
        saved = save_run(
            out,
            model,
            corpus,
            None if args.no_optimizer_state else opt,
            done,
            hist,
            settings,
            summary,
            states,
            world_size=ranks.world_size,
            overwrite=args.overwrite or (args.resume is not None and same_file(out, args.resume)),
        )
    if saved != out:
        print(f"{out} appeared while training (written by something else) and was left alone")
    print(f"saved {saved}")
    if hist.interrupted:
        print(f"continue with: python -m gptlib train --resume {saved}")
        return EXIT_INTERRUPTED
    if args.samples > 0 and not stop.presses:
        print("samples (temperature 1.0):")
        longest = max(len(d) for d in corpus.documents) + 1 if corpus.documents else 200
        try:
            _print_samples(
                model, corpus.tokenizer, args.samples, 1.0, None, seed, max(40, min(400, longest))
            )
        except KeyboardInterrupt:
            print("\nsamples stopped")
            return EXIT_INTERRUPTED
    return 0


def _restore(training, g, ranks, device, say) -> None:
    """Put the saved random states back: each rank's own, when the number of ranks is the same."""
    states = training["rng"]
    if isinstance(states, dict):  # older checkpoints: one list per kind of state
        states = [
            {"batches": b, "torch": t}
            for b, t in zip(states["batches"], states["torch"], strict=True)
        ]
    if len(states) != ranks.world_size:
        say(
            f"note: the run had {len(states)} process(es), this one has {ranks.world_size}: "
            "windows are drawn afresh from the seed"
        )
        return
    note = restore_random_states(states[ranks.rank], g, device)
    if note:
        say(note)


def _train_steps(args, settings, model, opt, g, corpus, ck, ranks, device, stop):
    from tqdm.auto import tqdm

    start, total = (ck.step if ck is not None else 0), settings["steps"]
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

    val_tokens = corpus.val.to(device)
    hist = train(
        model,
        corpus.train.to(device),
        total - start,
        settings["batch_size"],
        val_tokens=val_tokens if ranks.is_main else None,
        max_lr=settings["lr"],
        warmup=settings["warmup"],
        schedule=settings["schedule"],
        min_lr=settings["lr"] / 10,
        eval_every=settings["eval_every"],
        seed=settings["seed"],
        optimizer=opt,
        history=ck.history if ck is not None else None,
        callback=on_step,
        start_step=start,
        total_steps=total,
        generators=[g],
        forward=forward,
        autocast_dtype=DTYPES[args.dtype],
        should_stop=stop.requested,
    )
    bar.close()
    return hist


def _final_evaluation(model, corpus, device) -> dict:
    """Train and validation loss beside the bigram baseline, printed; {} if Ctrl-C stops it (the
    evaluation changes nothing that is saved, so it can be dropped at any point)."""
    try:
        train_loss = estimate_loss(model, corpus.train.to(device), n_batches=50)
        val_loss = estimate_loss(model, corpus.val.to(device), n_batches=50)
        bigram = bigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    except KeyboardInterrupt:
        print("\nCtrl-C: final evaluation stopped")
        return {}
    gap = bigram - val_loss
    print(f"final train loss {train_loss:.4f}  val loss {val_loss:.4f} nats/token")
    print(
        f"bigram baseline val loss {bigram:.4f}  "
        f"(model is {abs(gap):.4f} nats {'better' if gap >= 0 else 'worse'})"
    )
    return {"val_loss": val_loss, "bigram_val_loss": bigram}


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


def cmd_progress(args: argparse.Namespace) -> int:
    from gptlib.exercises.progress import progress

    progress(args.notebook_dir, args.timeout)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "progress":
            return cmd_progress(args)
        return cmd_sample(args)
    except (FileNotFoundError, CheckpointError, ValueError) as e:
        parser.exit(2, f"{parser.prog} {args.command}: error: {e}\n")
    except KeyboardInterrupt:  # at start-up, before training began: nothing to keep
        where = "before training started: nothing was saved" if args.command == "train" else ""
        print(f"\nCtrl-C: stopped {where}".rstrip(), file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
