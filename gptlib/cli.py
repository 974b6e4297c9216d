"""`python -m gptlib train ...`, `python -m gptlib sample FILE ...` and
`python -m gptlib progress [NOTEBOOK_DIR]`."""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import shlex
import signal
import sys
import tempfile
import time
from functools import partial

import torch

from gptlib import distributed
from gptlib.bigram import bigram_loss
from gptlib.checkpoint import (
    CheckpointError,
    checkpoint_size,
    free_bytes,
    load_checkpoint,
    save_error,
)
from gptlib.claim import claim, output_path, same_file
from gptlib.config import PRESETS, preset
from gptlib.data import (
    _CONTROL,
    BUILT_IN,
    MAX_CONTROL_SHARE,
    MAX_MEDIAN_LINE,
    MAX_TEXT_BYTES,
    MIN_BLANK_SHARE,
    READINGS,
    Corpus,
    load_corpus,
)
from gptlib.device import DTYPES, choose_device
from gptlib.generate import complete, sample_documents
from gptlib.language import (
    LANGUAGES,
    SpeakingArgumentParser,
    SpeakingHelpFormatter,
    _,
    get_language,
    language_from_locale,
    screen_width,
    set_language,
)
from gptlib.model import GPT
from gptlib.needs import (
    available_memory,
    check_memory,
    check_space,
    check_step_time,
    no_space,
    readable_size,
)
from gptlib.run import TrainingRun, corpus_fingerprint, mean_loss
from gptlib.signals import StopSignals, exit_code, signal_name
from gptlib.tokenizer import CharTokenizer
from gptlib.train import WHAT_DIVERGED, Diverged, estimate_loss


def _whole_number(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        said = _("expected a whole number, got {text}").format(text=repr(text))
        raise argparse.ArgumentTypeError(said) from None
    if value < least:
        said = _("expected a whole number >= {least}, got {value}")
        raise argparse.ArgumentTypeError(said.format(least=least, value=value))
    return value


def _positive_int(text: str) -> int:
    return _whole_number(text, 1)


def _block_size(text: str) -> int:
    value = _whole_number(text, 1)
    if value < 2:
        said = _("expected a whole number >= 2, got {value}: a window of one token holds no "
                 "next token to predict (position t learns from token t + 1)")  # fmt: skip
        raise argparse.ArgumentTypeError(said.format(value=value))
    return value


SEED_MAX = 2**63 - 1


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        said = _("expected a whole number, got {text}").format(text=repr(text))
        raise argparse.ArgumentTypeError(said) from None
    if not 0 <= value <= SEED_MAX:
        said = _("expected a whole number from 0 to 2**63 - 1 ({most}), got {value}")
        raise argparse.ArgumentTypeError(said.format(most=SEED_MAX, value=value))
    return value


def _non_negative_int(text: str) -> int:
    return _whole_number(text, 0)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        said = _("expected a number, got {text}").format(text=repr(text))
        raise argparse.ArgumentTypeError(said) from None
    if not math.isfinite(value):
        said = _("expected a finite number, got {text}").format(text=text)
        raise argparse.ArgumentTypeError(said)
    return value


def _non_negative_float(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(_("expected a number >= 0, got {text}").format(text=text))
    return value


def _positive_float(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(_("expected a number > 0, got {text}").format(text=text))
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
MAX_STEP_SECONDS = 120.0


def _by_preset(field: str) -> str:
    """What each preset sets `field` to, read from the presets themselves: "microgpt 1,
    textbook 4, gpt2 12", or "every preset sdpa" when they agree."""
    values = {name: getattr(make(), field) for name, make in PRESETS.items()}
    if len(set(values.values())) == 1:
        return _("every preset {value}").format(value=next(iter(values.values())))
    return ", ".join(f"{name} {value}" for name, value in values.items())


class _Formatter(SpeakingHelpFormatter):
    """argparse's help, with its own word "usage:" in the language in use, and lines wrapped by
    the columns they take on screen (a Chinese character takes two, and a line may break between
    two of them; argparse counts characters and breaks only at spaces)."""

    def add_usage(self, usage, actions, groups, prefix=None):
        super().add_usage(usage, actions, groups, _("usage: ") if prefix is None else prefix)

    def _split_lines(self, text: str, width: int) -> list[str]:
        if text.isascii():
            return super()._split_lines(text, width)
        lines, line = [], ""
        for piece in re.findall(r"[^\x00-\x7f]|[!-~]+| ", " ".join(text.split())):
            if screen_width(line + piece) > width and line.strip():
                lines.append(line.rstrip())
                line = ""
            line += "" if piece == " " and not line else piece
        return [*lines, line.rstrip()]


class _Parser(SpeakingArgumentParser):
    """argparse speaking the language in use: its headings, -h, its errors (see
    `gptlib.language.SpeakingArgumentParser`)."""

    def __init__(self, *args, **kwargs):
        kwargs.update(add_help=False, allow_abbrev=False, formatter_class=_Formatter)
        super().__init__(*args, **kwargs)
        self._positionals.title = _("positional arguments")
        self._optionals.title = _("options")
        self.add_argument("-h", "--help", action="help", help=_("show this help and exit"))
        self.add_argument(
            "--lang",
            choices=sorted(LANGUAGES),
            default=argparse.SUPPRESS,
            help=_("the language of the help and the messages (default: the locale's, $LANG)"),
        )

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, _("{prog}: error: {message}\n").format(prog=self.prog, message=message))


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, in the language in use (see `gptlib.language`)."""
    parser = _Parser(
        prog="python -m gptlib",
        description=_("Train a GPT on a text, sample from a checkpoint, or list the course's "
                      "exercises and how far you are."),
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, title=_("commands"))
    t = sub.add_parser("train", help=_("train a model and save a checkpoint"))
    _train_data_arguments(t)
    _train_shape_arguments(t)
    _train_schedule_arguments(t)
    _train_run_arguments(t)
    _sample_parser(sub)
    _progress_parser(sub)
    return parser


def _resumed_note() -> str:
    return _("; with --resume, the resumed run's")


def _train_data_arguments(t: argparse.ArgumentParser) -> None:
    """train: what it learns from, which model, how many steps of how many windows."""
    d, resumed = TRAIN_DEFAULTS, _resumed_note()
    t.add_argument(
        "--data",
        default=None,
        help=_("names | surnames | tang300 (Tang poems, Debian's fortunes-zh) | PATH of a UTF-8 "
               "text file (default: {data}{resumed})").format(data=d["data"], resumed=resumed),
    )  # fmt: skip
    t.add_argument(
        "--format",
        choices=READINGS,
        default=None,
        help=_("how to read a file given with --data: lines (one document per line), text "
               "(running text), or auto: detect it and say which on the first line "
               "(default: auto)"),
    )  # fmt: skip
    t.add_argument(
        "--preset",
        default=None,
        choices=sorted(PRESETS),
        help=_("model configuration (default: {preset}{resumed})").format(
            preset=d["preset"], resumed=resumed
        ),
    )
    t.add_argument(
        "--steps",
        type=_positive_int,
        default=None,
        help=_("total steps of the run; the schedule spans them (default: {steps}{resumed} "
               "total)").format(steps=d["steps"], resumed=resumed),
    )  # fmt: skip
    t.add_argument(
        "--batch-size",
        type=_positive_int,
        default=None,
        help=_("windows per step, per process (default: {batch_size})").format(
            batch_size=d["batch_size"]
        ),
    )


def _train_shape_arguments(t: argparse.ArgumentParser) -> None:
    """train: the shape flags that override the preset's."""
    t.add_argument(
        "--block-size",
        type=_block_size,
        default=None,
        help=_("override the preset's block_size (default: the preset's; {presets}; but for the "
               "textbook preset on a corpus of documents, the longest document plus BOS rounded "
               "up to a multiple of 8: 16 for names)").format(presets=_by_preset("block_size")),
    )  # fmt: skip
    for flag, what in (
        ("--n-layer", _("blocks")),
        ("--n-head", _("attention heads per block")),
        ("--n-embd", _("width d of the model")),
    ):
        t.add_argument(
            flag,
            type=_positive_int,
            default=None,
            help=_("{what} (default: the preset's; {presets})").format(
                what=what, presets=_by_preset(flag[2:].replace("-", "_"))
            ),
        )
    t.add_argument(
        "--dropout",
        type=_non_negative_float,
        default=None,
        help=_(
            "the share of activations zeroed at random while training, on the embeddings, the "
            "attention weights and each sublayer's output (default: the preset's; {presets})"
        ).format(presets=_by_preset("dropout")),
    )
    t.add_argument(
        "--attention",
        choices=["manual", "sdpa"],
        default=None,
        help=_("manual: the attention written out; sdpa: PyTorch's fused kernel (default: the "
               "preset's; {presets})").format(presets=_by_preset("attention")),
    )  # fmt: skip


def _train_schedule_arguments(t: argparse.ArgumentParser) -> None:
    """train: the learning rate, its schedule, the evaluations and the seed."""
    d = TRAIN_DEFAULTS
    t.add_argument(
        "--lr",
        type=_positive_float,
        default=None,
        help=_("peak learning rate (default: {lr})").format(lr=d["lr"]),
    )
    t.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=None,
        help=_("steps of linear warmup (default: {warmup})").format(warmup=d["warmup"]),
    )
    t.add_argument(
        "--schedule",
        choices=["constant", "cosine"],
        default=None,
        help=_("learning rate after warmup (default: {schedule}, down to lr/10 at the "
               "end)").format(schedule=d["schedule"]),
    )  # fmt: skip
    t.add_argument(
        "--eval-every",
        type=_positive_int,
        default=None,
        help=_("steps between validation losses (default: {eval_every})").format(
            eval_every=d["eval_every"]
        ),
    )
    t.add_argument(
        "--seed",
        type=_seed,
        default=None,
        help=_("the random seed, 0 to 2**63 - 1 (default: {seed}; with --resume, the run's "
               "saved random state)").format(seed=d["seed"]),
    )  # fmt: skip


def _device_help() -> str:
    return _("cpu | cuda | cuda:N | mps (default: $GPTLIB_DEVICE, else the best available)")


def _train_run_arguments(t: argparse.ArgumentParser) -> None:
    """train: where it runs, how fast, where it saves, what it prints (_train_save_arguments)."""
    t.add_argument("--device", default=None, help=_device_help())
    t.add_argument(
        "--resume",
        metavar="CHECKPOINT",
        default=None,
        help=_("continue the run saved in CHECKPOINT: weights, optimiser state, step, history, "
               "schedule and random state; same data and model shape (default: a new run)"),
    )  # fmt: skip
    t.add_argument(
        "--dtype",
        choices=sorted(DTYPES),
        default="float32",
        help=_("bfloat16: run the forward pass under autocast, for GPUs (default: float32)"),
    )
    t.add_argument(
        "--compile",
        action="store_true",
        help=_("torch.compile the model: a one-off compilation (tens of seconds) for faster "
               "steps. It pays on a GPU when the model is large enough for the GPU, not Python, "
               "to set the pace (GPT-2 small) and the run is long enough to earn the compile "
               "time back; a short run of a small preset gets slower (default: off)"),
    )  # fmt: skip
    _train_save_arguments(t)
    t.add_argument(
        "--max-step-seconds",
        type=_positive_float,
        default=MAX_STEP_SECONDS,
        help=_("refuse, before any work, a run whose one step is expected to take longer than "
               "this, estimated from its size and a rate measured on the device (default: "
               "{seconds:g})").format(seconds=MAX_STEP_SECONDS),
    )  # fmt: skip


def _train_save_arguments(t: argparse.ArgumentParser) -> None:
    """train: where it saves and what it prints."""
    t.add_argument(
        "--out",
        default=None,
        help=_("where to write the checkpoint; an existing file is never replaced unless "
               "--overwrite is given (default: {out}; with --resume, the resumed "
               "checkpoint)").format(out=DEFAULT_OUT),
    )  # fmt: skip
    t.add_argument(
        "--overwrite",
        action="store_true",
        help=_("allow --out to replace an existing file (default: refuse)"),
    )
    t.add_argument(
        "--samples",
        type=_non_negative_int,
        default=10,
        help=_("samples to print at the end (default: 10)"),
    )
    t.add_argument(
        "--no-optimizer-state",
        action="store_true",
        help=_("save weights, config and history only, a smaller file that cannot be resumed "
               "(default: save the optimiser state too)"),
    )  # fmt: skip
    t.add_argument(
        "--no-progress",
        action="store_true",
        help=_("no progress bar (default: a progress bar)"),
    )


def _sample_parser(sub) -> None:
    s = sub.add_parser("sample", help=_("print samples from a checkpoint"))
    s.add_argument(
        "checkpoint",
        help=_("a checkpoint file, or a Hugging Face GPT-2 folder (config.json + "
               "model.safetensors or pytorch_model.bin), sampled with GPT-2's tokenizer"),
    )  # fmt: skip
    s.add_argument(
        "--temperature",
        type=_non_negative_float,
        default=1.0,
        help=_("0 = greedy (default: 1.0)"),
    )
    s.add_argument(
        "--top-k",
        type=_positive_int,
        default=None,
        help=_("keep the k most likely tokens (default: all)"),
    )
    s.add_argument("--num", type=_positive_int, default=10, help=_("samples (default: 10)"))
    s.add_argument(
        "--max-len",
        type=_positive_int,
        default=200,
        help=_("tokens per sample at most (default: 200)"),
    )
    s.add_argument(
        "--prompt",
        default=None,
        help=_("text to continue; for a model of one document per line (names), every sample "
               "is a document that starts with it (default: none)"),
    )  # fmt: skip
    s.add_argument(
        "--seed", type=_seed, default=0, help=_("the random seed, 0 to 2**63 - 1 (default: 0)")
    )
    s.add_argument("--device", default=None, help=_device_help())


def _progress_parser(sub) -> None:
    p = sub.add_parser(
        "progress",
        help=_("list every exercise of the course: notebook, difficulty, minutes and state"),
    )
    p.add_argument(
        "notebook_dir",
        nargs="?",
        default=None,
        help=_("the folder your pieces are kept in, or a folder holding it as yourgpt/ "
               "(default: $GPTLIB_YOURS, else the course's notebooks/yourgpt/)"),
    )  # fmt: skip
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=60.0,
        help=_("seconds one check may run before it counts as failed (default: 60)"),
    )


# Documents are sampled this many at a time: `sample --num 100000` prints as it goes, in the
# memory of one batch.
SAMPLE_BATCH = 256


def _check_prompt(prompt: str | None, tokenizer) -> None:
    """Refuse, in one line, a prompt the model cannot read."""
    if prompt is None:
        return
    if prompt == "" and tokenizer.bos_id is None:
        raise ValueError(
            _("--prompt '' is empty, and a model of running text needs at least one character to "
              "continue; give some text, or drop --prompt to start from the first character of "
              "its vocabulary")
        )  # fmt: skip
    unknown = [ch for ch in dict.fromkeys(prompt) if ch not in tokenizer.stoi]
    if unknown:
        first = ", ".join(map(repr, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        shown = repr(prompt) if len(prompt) <= 40 else f"{prompt[:40]!r}..."
        said = _("--prompt {prompt} has {n} character(s) that are not in this model's vocabulary "
                 "of {size} ({first}); use characters of the text the model was trained on")  # fmt: skip
        raise ValueError(
            said.format(prompt=shown, n=len(unknown), size=f"{tokenizer.vocab_size:,}", first=first)
        )


def _print_samples(model, tokenizer, num, temperature, top_k, seed, max_len, prompt=None) -> None:
    _check_prompt(prompt, tokenizer)
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(seed)
    if tokenizer.bos_id is not None:  # a model of documents: whole documents, from the prompt
        for first in range(0, num, SAMPLE_BATCH):
            n = min(SAMPLE_BATCH, num - first)
            docs = sample_documents(
                model,
                tokenizer,
                n,
                max_len,
                temperature=temperature,
                top_k=top_k,
                generator=g,
                prompt=prompt,
            )
            for doc in docs:
                print(doc + "\n" if "\n" in doc else doc)  # a blank line after a multi-line poem
        return
    start = prompt if prompt is not None else tokenizer.itos[0]
    for _sample in range(num):
        print(
            complete(
                model, tokenizer, start, max_len, temperature=temperature, top_k=top_k, generator=g
            )
        )
        print("---")


def _resumed(path: str, device: torch.device):
    """The checkpoint to continue, or refuse with the reason."""
    ck = load_checkpoint(path, device)
    if ck.training is None or ck.step is None or ck.history is None:
        said = _("{path} holds no training state (written by an older gptlib or by hand); it "
                 "can be sampled from, but a run cannot continue from it")  # fmt: skip
        raise ValueError(said.format(path=repr(path)))
    if ck.optimizer_state is None:
        said = _("{path} was saved with --no-optimizer-state, so its run cannot continue "
                 "exactly; start a new run, or train without --no-optimizer-state")  # fmt: skip
        raise ValueError(said.format(path=repr(path)))
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
            said = _("the run in {run} was trained on the file {data} (the path stored in the "
                     "checkpoint), which is not there from {here}; pass --data with the path of "
                     "the same file")  # fmt: skip
            raise ValueError(
                said.format(run=repr(args.resume), data=repr(data), here=repr(os.getcwd()))
            )
        settings["data"] = os.path.abspath(data)  # stored so a resume works from any folder
    elif args.format is not None and args.format != "auto":
        said = _("--format {format} reads a file given with --data; {data} is a built-in corpus "
                 "with its own reading (one document per name or poem): drop --format")  # fmt: skip
        raise ValueError(said.format(format=args.format, data=repr(data)))
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
            said = _("cannot resume {run} with a different model shape: it has {have}, the "
                     "command asks for {asked}; drop those flags, or start a new run without "
                     "--resume")  # fmt: skip
            raise ValueError(said.format(run=repr(args.resume), have=have, asked=asked))
        return ck.config
    cfg = preset(settings["preset"], corpus.vocab_size, **changes)
    if args.block_size is None and settings["preset"] == "textbook" and corpus.documents:
        # For short documents a window of 64 would hold several of them; the longest one plus its
        # BOS, rounded up to a multiple of 8, is enough (16 for names) and each step is cheaper.
        longest = max(len(d) for d in corpus.documents) + 1
        cfg = cfg.replace(block_size=min(cfg.block_size, -(-longest // 8) * 8))
    return cfg


def _check_same_data(args, corpus, training) -> None:
    if corpus_fingerprint(corpus) != training["corpus"]["fingerprint"]:
        was = training["corpus"]
        said = _("cannot resume {run} on different data: it was trained on {was} ({was_reading}, "
                 "vocab {was_vocab}), this command reads {now} ({now_reading}, vocab {now_vocab}) "
                 "and its tokens differ; resume with the same --data and --format, or start a "
                 "new run without --resume")  # fmt: skip
        raise ValueError(
            said.format(
                run=repr(args.resume),
                was=repr(was["name"]),
                was_reading=was["reading"],
                was_vocab=was["vocab_size"],
                now=repr(corpus.name),
                now_reading=corpus.reading,
                now_vocab=corpus.vocab_size,
            )
        )


def cmd_train(args: argparse.Namespace, signals: StopSignals | None = None) -> int:
    signals = signals if signals is not None else StopSignals()
    try:
        code = _train(args, signals)
        distributed.finish()  # only after success: a failed rank must not wait for the others
        return code
    finally:
        distributed.teardown()


def _device(requested: str | None) -> torch.device:
    """The device to run on, or a one-line refusal of one gptlib cannot run on."""
    device = choose_device(requested)
    given = requested or os.environ.get("GPTLIB_DEVICE")
    if device.type not in ("cpu", "cuda", "mps"):
        said = _("device {device} is not one gptlib runs on (it holds no data); use cpu, cuda, "
                 "cuda:N or mps")  # fmt: skip
        raise ValueError(said.format(device=repr(given)))
    if device.type == "cuda" and device.index is not None:
        count = torch.cuda.device_count()
        if device.index >= count:
            said = _("device {device} was asked for, but this machine has {count} CUDA "
                     "device(s), cuda:0 to cuda:{last}; pass one of those")  # fmt: skip
            raise ValueError(said.format(device=repr(given), count=count, last=count - 1))
    return device


def _shadowed_corpus_note(data: str) -> str | None:
    """A note when a file in this folder has the name of the built-in corpus being used."""
    if data in BUILT_IN and os.path.exists(data):
        said = _("note: {name} is the built-in corpus; the file {name} in this folder is not "
                 "read (pass --data ./{data} to train on it)")  # fmt: skip
        return said.format(name=repr(data), data=data)
    return None


def _warmup_check(settings) -> str | None:
    """A note, before the first step, when the warmup is longer than the run."""
    warmup, total = settings["warmup"], settings["steps"]
    if warmup <= total:
        return None
    said = _("note: the warmup of {warmup} steps is longer than this run of {total}: the "
             "learning rate rises to {share} of --lr {lr} and no further; pass --warmup {tenth} "
             "(or anything up to {total}) to reach it")  # fmt: skip
    return said.format(
        warmup=warmup,
        total=total,
        share=f"{total / warmup:.0%}",
        lr=f"{settings['lr']:g}",
        tenth=total // 10,
    )


RESUMABLE = {  # settings a resumed run may change, applied from its first step
    "steps": "--steps",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "warmup": "--warmup",
    "schedule": "--schedule",
    "eval_every": "--eval-every",
    "seed": "--seed",
}


def _resume_changes(args, before: dict) -> dict[str, tuple]:
    """{setting: (saved, given)} for each setting the resumed run is given a new value of."""
    return {
        k: (before.get(k, TRAIN_DEFAULTS[k]), getattr(args, k))
        for k in RESUMABLE
        if getattr(args, k) is not None and getattr(args, k) != before.get(k, TRAIN_DEFAULTS[k])
    }


def _early_config(args, settings, ck):
    """The model shape and the memory of a step, checked before the data is read: a stand-in
    vocabulary of two symbols (the real one only adds the embedding rows); checked again once
    the data is in."""
    if ck is not None:
        cfg = ck.config
    else:
        changes = {k: getattr(args, k) for k in SHAPE_FLAGS if getattr(args, k) is not None}
        cfg = preset(settings["preset"], 2, **changes)
    return cfg


def _train(args: argparse.Namespace, signals: StopSignals) -> int:
    """The steps of a run. Every check that can fail runs before the first step; those that do
    not need the data run before it is read."""
    ranks, device = distributed.setup(_device(args.device))
    say = print if ranks.is_main else (lambda *a, **k: None)
    ck = _resumed(args.resume, device) if args.resume else None
    training = ck.training if ck is not None else None
    settings = _settings(args, training)
    notes = [_shadowed_corpus_note(settings["data"]), _warmup_check(settings)]
    changes = _resume_changes(args, training["settings"]) if ck is not None else {}
    if ck is not None:
        _check_resume_shape(args, ck)
    check_memory(_early_config(args, settings, ck), settings["batch_size"], device)
    out = args.out or (args.resume if args.resume else DEFAULT_OUT)
    if ranks.is_main:
        out = output_path(out, data=settings["data"], resume=args.resume, overwrite=args.overwrite)
        with claim(out) as removed:
            if removed:
                said = _("note: removed {n} temporary file(s) that an earlier run killed while "
                         "saving left beside {out}")  # fmt: skip
                notes.append(said.format(n=len(removed), out=out))
            return _run(args, settings, ck, out, ranks, device, say, signals, notes, changes)
    return _run(args, settings, ck, out, ranks, device, say, signals, notes, changes)


def _check_resume_shape(args, ck) -> None:
    _config(args, None, None, ck)  # refuses a different model shape


def _load(settings, say):
    """The corpus, with a line first when the file is large enough to take a while; a large file
    of running text is read in pieces (`_stream_text_corpus`)."""
    data = settings["data"]
    if data not in BUILT_IN and os.path.isfile(data):
        size = os.path.getsize(data)
        if size > STREAM_BYTES:
            say(
                _("reading {data} ({size} MB)...").format(data=data, size=f"{size / 1e6:,.0f}"),
                flush=True,
            )
            if size <= MAX_TEXT_BYTES and settings["format"] in ("auto", "text"):
                corpus = _stream_text_corpus(data, settings["format"])
                if corpus is not None:
                    return corpus
    return load_corpus(data, reading=settings["format"])


# A text file larger than this is read in pieces, its tokens kept in the smallest integer type
# that holds the vocabulary (one byte a character for up to 256 symbols) rather than 8 bytes each.
STREAM_BYTES = 20_000_000
STREAM_CHARS = 1 << 22  # characters read and encoded at a time


def _pieces(path: str):
    """The text of `path` (UTF-8, a byte-order mark dropped), STREAM_CHARS characters at a time;
    load_text's one-line refusal for a file that is not UTF-8."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            while piece := f.read(STREAM_CHARS):
                yield piece
    except UnicodeDecodeError as e:
        said = _("{path} is not UTF-8 text ({reason} at byte {byte})")
        raise ValueError(said.format(path=repr(path), reason=e.reason, byte=e.start)) from None


class _Lines:
    """What `gptlib.data.detect_reading` counts, gathered a piece at a time: the lines (as
    `str.splitlines` cuts them), the blank ones, and how many non-blank lines have each length."""

    def __init__(self) -> None:
        self.lines = self.blank = self.trailing = 0
        self.lengths: collections.Counter = collections.Counter()
        self.carry = ""

    def add(self, piece: str, last: bool = False) -> None:
        lines = (self.carry + piece).splitlines(keepends=True)
        self.carry = ""
        if lines and not last and (lines[-1] == lines[-1].rstrip("\r\n") or lines[-1][-1] == "\r"):
            self.carry = lines.pop()  # a line (or a \r\n) cut by the end of the piece
        for line in lines:
            line = line.rstrip("\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
            self.lines += 1
            if line.strip():
                self.lengths[len(line)] += 1
                self.trailing = 0
            else:
                self.blank += 1
                self.trailing += 1

    def reading(self) -> str:
        """ "lines" or "text", as detect_reading decides it for the whole text."""
        lines, blank = self.lines - self.trailing, self.blank - self.trailing
        filled = lines - blank
        if filled < 2 or blank / lines >= MIN_BLANK_SHARE:
            return "text"
        return "lines" if self._median(filled) <= MAX_MEDIAN_LINE else "text"

    def why(self) -> str:
        """detect_reading's reason for "text", in its own words."""
        lines, blank = self.lines - self.trailing, self.blank - self.trailing
        if lines - blank < 2:
            return _("a single line")
        share = blank / lines
        if share >= MIN_BLANK_SHARE:
            said = _("{blank} blank line(s) between paragraphs, {share} of {lines} lines (at least "
                     "{least})")  # fmt: skip
            return said.format(
                blank=f"{blank:,}",
                share=f"{share:.0%}",
                lines=f"{lines:,}",
                least=f"{MIN_BLANK_SHARE:.0%}",
            )
        said = _("median line of {median} characters, more than {most}")
        return said.format(median=f"{self._median(lines - blank):g}", most=MAX_MEDIAN_LINE)

    def _median(self, n: int) -> float:
        middle, seen, low = (n - 1) // 2, 0, None
        for length in sorted(self.lengths):
            seen += self.lengths[length]
            if low is None and seen > middle:
                low = length
            if seen > n // 2:
                return (low + length) / 2
        return float(low)


def _stream_text_corpus(path: str, reading: str):
    """A large file of running text as `load_corpus` reads it (the same vocabulary, tokens,
    split and fingerprint), read twice in pieces instead of whole: first its characters and
    lines, then its tokens, kept in the smallest integer type the vocabulary fits (the windows
    are made long integers one batch at a time). None when the file reads as one document per line (`load_corpus` reads it)."""
    chars, lines, control, size, filled = set(), _Lines(), 0, 0, False
    for piece in _pieces(path):
        chars.update(piece)
        control += sum(piece.count(c) for c in _CONTROL)
        filled = filled or bool(piece.strip())
        size += len(piece)
        if reading == "auto":
            lines.add(piece)
    lines.add("", last=True)
    if not size or not filled or control > MAX_CONTROL_SHARE * size:
        return None  # load_corpus refuses it, in its own words
    if reading == "auto" and lines.reading() == "lines":
        return None
    if reading == "auto":
        why = _("{why}; --format lines reads each line as a document").format(why=lines.why())
    else:
        why = _("as --format {reading} asks").format(reading=reading)
    tokenizer = CharTokenizer.from_text("".join(sorted(chars)))
    kind = torch.uint8 if tokenizer.vocab_size <= 256 else torch.int16
    kind = kind if tokenizer.vocab_size <= 32767 else torch.int32
    top = max(ord(c) for c in tokenizer.itos)
    table = torch.zeros(top + 1, dtype=kind)
    for c, i in tokenizer.stoi.items():
        table[ord(c)] = i
    ids = torch.empty(size, dtype=kind)
    start = 0
    for piece in _pieces(path):
        codes = torch.frombuffer(bytearray(piece.encode("utf-32-le")), dtype=torch.int32)
        ids[start : start + len(piece)] = table[codes.long()]
        start += len(piece)
    cut = int(size * 0.9)
    return Corpus(
        os.path.basename(path),
        tokenizer,
        ids[:cut],
        ids[cut:],
        reading="text",
        reason=_("running text, {why}").format(why=why),
    )


def _run(args, settings, ck, out, ranks, device, say, signals, notes, changes) -> int:
    run = _start(args, settings, ck, ranks, device, say, notes, changes)
    with_optimizer = not args.no_optimizer_state
    if ranks.is_main:  # room for the checkpoint, before the first step
        check_space(out, checkpoint_size(run.model, with_optimizer, run.total))
        signals.kept = partial(_kept_line, out)
    if ck is not None:
        run.keep_start_as_healthy()
    signals.mode = "defer"
    try:
        say(_("training: Ctrl-C (or SIGTERM, SIGHUP, SIGQUIT) stops after the current step and "
              "saves to {out}").format(out=out))  # fmt: skip
        diverged = _steps(run, args, ranks, signals)
        signals.mode = "hold"  # from here to the end of the save, a signal waits for the save
        left, restored = None, False
        if diverged is not None:
            left = run.left_range(diverged)
            restored = run.back_to_healthy()
        states = run.states_to_save(diverged is not None)
        if run.history.interrupted:
            said = _("interrupted at step {done} of {total}: keeping what was learned so far")
            say(said.format(done=run.done, total=run.total))
        if not ranks.is_main:
            return 0
        _check_saveable(run, diverged, left, restored, out)
        resumed_in_place = args.resume is not None and same_file(out, args.resume)
        overwrite = args.overwrite or resumed_in_place
        saved = _save_keeping_the_run(run, out, states, overwrite, with_optimizer)
    finally:
        signals.mode = "raise"
    if saved is None:
        return EXIT_NOT_SAVED
    if saved != out and not os.path.basename(saved).startswith(RESCUE_PREFIX):
        said = _("{out} appeared while training (written by something else) and was left alone")
        print(said.format(out=out))
    print(_("saved {path}").format(path=saved))
    if diverged:
        print(_diverged_line(run, diverged, left, saved), file=sys.stderr)
        return EXIT_DIVERGED
    save_again = partial(_save_again, run, saved, states, with_optimizer)
    return _after_save(run, args, signals, saved, save_again)


EXIT_NOT_SAVED = 1
RESCUE_PREFIX = "gptlib-rescued-"


def _kept_line(out: str) -> str:
    """What a run ended at once keeps: `out` as it was, with its step and age, or nothing."""
    try:
        age = max(0.0, time.time() - os.path.getmtime(out))
    except OSError:
        return _("nothing was saved, since this run had not saved yet")
    said = _("{out} is kept as it was, saved {age} ago; the steps since then are lost")
    return said.format(out=out, age=_age(age))


def _age(seconds: float) -> str:
    if seconds < 120:
        return _("{n} s").format(n=f"{seconds:.0f}")
    if seconds < 7200:
        return _("{n} min").format(n=f"{seconds / 60:.0f}")
    return _("{n} h").format(n=f"{seconds / 3600:.1f}")


def _save_keeping_the_run(run, out, states, overwrite, with_optimizer) -> str | None:
    """Save the run to `out`; when that fails for want of space or of a name the file system
    takes, or of a folder, to a new file in `out`'s folder, then in the system's temporary
    folder, saying in one line what failed and where it went instead. Whatever was at `out`
    stays whole (a save is atomic). None, after one line, when nowhere would take it; in a
    terminal, the run waits in memory for space to be freed instead."""
    need = checkpoint_size(run.model, with_optimizer, run.done)
    while True:
        failed = []
        for path, replace in _places(out, overwrite, run.done):
            free = free_bytes(path)
            if free is not None and free < need:
                failed.append((path, no_space(path, need, free)))
                continue
            try:
                saved = run.save(path, {}, states, overwrite=replace, with_optimizer=with_optimizer)
            except (OSError, RuntimeError) as e:
                why = save_error(e)
                if why is None:
                    raise
                failed.append((path, why))
                continue
            if failed:
                said = _("could not save {out} ({why}); the run was saved to {path} instead")
                print(said.format(out=failed[0][0], why=failed[0][1], path=saved), file=sys.stderr)
            return saved
        reasons = "; ".join(f"{path}: {why}" for path, why in failed)
        if not sys.stdin.isatty():
            said = _("{prog}: error: the run could not be saved anywhere ({reasons}); its "
                     "{done} steps are lost")  # fmt: skip
            print(
                said.format(prog=f"{PROG} train", reasons=reasons, done=run.done), file=sys.stderr
            )
            return None
        said = _("the run could not be saved anywhere ({reasons}); it is still in memory: free "
                 "some space and press Enter to try again, or Ctrl-C to end without saving")  # fmt: skip
        print(said.format(reasons=reasons), file=sys.stderr, flush=True)
        try:
            sys.stdin.readline()
        except KeyboardInterrupt:
            return None


def _places(out: str, overwrite: bool, done: int) -> list[tuple[str, bool]]:
    """Where a run is saved: `out`, then a new file in its folder, then in the system's
    temporary folder (each a short name, for a file system that refused a long one)."""
    name = f"{RESCUE_PREFIX}step{done}.pt"
    folders = dict.fromkeys([os.path.dirname(os.path.abspath(out)), tempfile.gettempdir()])
    return [(out, overwrite), *((os.path.join(folder, name), False) for folder in folders)]


def _save_again(run, saved, states, with_optimizer, summary) -> None:
    """Add the final evaluation to the checkpoint; a failure leaves the first save whole."""
    try:
        run.save(saved, summary, states, overwrite=True, with_optimizer=with_optimizer)
    except (OSError, RuntimeError) as e:
        why = save_error(e)
        if why is None:
            raise
        said = _("note: the final evaluation could not be added to {path} ({why}); the "
                 "checkpoint saved before it is kept whole")  # fmt: skip
        print(said.format(path=saved, why=why))


def _diverged_line(run, diverged, left, saved) -> str:
    step, loss, lr = left
    said = _("{prog}: error: step {step}: the loss left its range ({why}) at lr {lr}; the run "
             "stopped at {what}; its last healthy state (step {done}) is saved in {saved}; "
             "continue with a lower learning rate: {command}")  # fmt: skip
    return said.format(
        prog=f"{PROG} train",
        step=step,
        why=_out_of_range(run, loss),
        lr=f"{lr:.3g}",
        what=_what(diverged),
        done=run.done,
        saved=saved,
        command=_command("train", "--resume", saved, "--lr", _lower_rate(lr)),
    )


def _out_of_range(run, loss: float) -> str:
    if not math.isfinite(loss):
        return _("it became {value}").format(value=loss)
    said = _("{value}, worse than a uniform guess over the {vocab} symbols, ln {vocab} = {guess}, "
             "by more than a nat")  # fmt: skip
    vocab = run.corpus.vocab_size
    return said.format(value=f"{loss:.3g}", vocab=vocab, guess=f"{math.log(vocab):.2f}")


def _lower_rate(lr: float) -> str:
    """A peak rate a tenth of `lr` (the rate at which the loss left its range), in two
    significant digits: the schedule never goes above its peak, so never near `lr`."""
    return f"{lr / 10:.2g}"


def _start(args, settings, ck, ranks, device, say, notes, changes) -> TrainingRun:
    """The data read, the model built (or resumed) and described: a run ready for its first step."""
    seed, total = settings["seed"], settings["steps"]
    corpus = _load(settings, say)
    if ck is not None:
        _check_same_data(args, corpus, ck.training)
    cfg = _config(args, settings, corpus, ck)
    corpus.check_fits(cfg.block_size)
    check_memory(cfg, settings["batch_size"], device)
    check_step_time(cfg, settings["batch_size"], device, args.max_step_seconds)
    start = ck.step if ck is not None else 0
    if start >= total:
        said = _("{run} is already at step {start} of its {total}; pass --steps with a larger "
                 "total (more than {start}) to train further")  # fmt: skip
        raise ValueError(said.format(run=repr(args.resume), start=start, total=total))
    torch.manual_seed(seed)
    model = ck.model.train() if ck is not None else GPT(cfg).to(device)
    say(_("data {name}: {reason}").format(name=corpus.name, reason=corpus.reason))
    procs = _("  processes {n}").format(n=ranks.world_size) if ranks.distributed else ""
    said = _("device {device}{processes}  vocab {vocab}  train/val tokens {train}/{val}")
    say(
        said.format(
            device=device,
            processes=procs,
            vocab=cfg.vocab_size,
            train=f"{corpus.train.numel():,}",
            val=f"{corpus.val.numel():,}",
        )
    )
    said = _("preset {preset}  parameters {n}  (L={L} d={d} h={h} T={T})")
    say(
        said.format(
            preset=settings["preset"],
            n=f"{model.num_parameters():,}",
            L=cfg.n_layer,
            d=cfg.n_embd,
            h=cfg.n_head,
            T=cfg.block_size,
        )
    )
    for note in notes:
        if note:
            say(note)
    dtype = DTYPES[args.dtype]
    run = TrainingRun(model, corpus, settings, ranks, device, compile=args.compile, dtype=dtype)
    if ck is not None:
        _resume_run(run, ck, args, changes, say)
    return run


def _resume_run(run: TrainingRun, ck, args, changes, say) -> None:
    note = run.resume(ck)
    if note:
        say(note)
    said = _("resuming {run} at step {start} of {total}")
    say(said.format(run=args.resume, start=run.start, total=run.total))
    if changes:
        shown = ", ".join(
            f"{RESUMABLE[k]} {_shown(a)} -> {_shown(b)}" for k, (a, b) in changes.items()
        )
        say(_("changed from step {start}: {changes}").format(start=run.start, changes=shown))
    if "seed" in changes:  # the saved random state gives way to the new seed's
        seed = run.settings["seed"]
        run.reseed(seed)
        said = _("note: windows and dropout are drawn afresh from seed {seed} from step "
                 "{start}, so the run is no longer the one that never stopped")  # fmt: skip
        say(said.format(seed=seed, start=run.start))


def _steps(run: TrainingRun, args, ranks, signals) -> Diverged | None:
    """Train, with a progress bar; the divergence that stopped the run, if one did."""
    from tqdm.auto import tqdm

    bar = tqdm(
        initial=run.start,
        total=run.total,
        disable=args.no_progress or not ranks.is_main,
        unit="step",
        file=sys.stderr,
    )

    def on_step(hist):
        post = {"loss": f"{hist.loss[-1]:.3f}"}
        if hist.val_loss:
            post[f"val@{hist.val_step[-1]}"] = f"{hist.val_loss[-1]:.3f}"
        bar.set_postfix(post, refresh=False)
        bar.update(1)  # shows this step's loss, set just above

    try:
        run.train(signals.requested, on_step)
    except Diverged as e:
        if ranks.distributed:
            said = _("{what}; under torchrun nothing was saved").format(what=_what(e))
            raise ValueError(said) from None
        return e
    finally:
        bar.close()
    return None


def _what(e: Diverged) -> str:
    said = _("step {step}: the {what} became {value} at lr {lr}")
    what = _(WHAT_DIVERGED.get(e.what, e.what))
    return said.format(step=e.step, what=what, value=e.value, lr=f"{e.lr:.3g}")


def _check_saveable(run, diverged, left, restored: bool, out: str) -> None:
    """Refuse to save a diverged run that has no healthy state newer than its start."""
    if diverged and not restored:
        step, loss, lr = left
        said = _("{what}; the loss left its range at step {step} ({why}) at lr {lr}, and no "
                 "evaluation of this run was healthy after it started, so there is nothing new to "
                 "save{kept}; run it with --lr {lower} or lower (or a longer --warmup)")  # fmt: skip
        kept = _("; {out} keeps step {start}").format(out=out, start=run.start)
        raise ValueError(
            said.format(
                what=_what(diverged),
                step=step,
                why=_out_of_range(run, loss),
                lr=f"{lr:.3g}",
                kept=kept if run.start > 0 and os.path.exists(out) else "",
                lower=_lower_rate(lr),
            )
        )


def _after_save(run: TrainingRun, args, signals, saved: str, save_again) -> int:
    """The final evaluation (`save_again(summary)` adds it to the checkpoint), then the samples."""
    summary = {}
    if len(signals.received) >= 2:
        print(_("final evaluation skipped"))
    else:
        batch_size = run.settings["batch_size"]
        summary = _final_evaluation(run.model, run.corpus, run.device, batch_size, args)
    if summary:  # the same checkpoint, now with the evaluation
        with signals.held():
            save_again(summary)
    if run.history.interrupted:
        print(_("continue with: {command}").format(command=_command("train", "--resume", saved)))
    if run.history.interrupted or signals.received:
        return exit_code(signals.first)
    if args.samples > 0:
        print(_("samples (temperature 1.0):"))
        corpus = run.corpus
        longest = max(len(d) for d in corpus.documents) + 1 if corpus.documents else 200
        max_len = max(40, min(400, longest))
        try:
            _print_samples(
                run.model, corpus.tokenizer, args.samples, 1.0, None, run.settings["seed"], max_len
            )
        except KeyboardInterrupt as e:
            print("\n" + _("{signal}: samples stopped").format(signal=_stop_name(e)))
            return exit_code(getattr(e, "signum", None))
    return 0


PROG = "python -m gptlib"
EXIT_DIVERGED = 1


def _command(*args: str) -> str:
    """`python -m gptlib ARGS`, quoted for a shell: a path with a space pastes as one word."""
    return f"{PROG} {shlex.join(args)}"


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _stop_name(e: BaseException) -> str:
    return signal_name(getattr(e, "signum", signal.SIGINT))


# The final evaluation reads about this many windows from each split, in batches of the run's own
# size (a batch that fitted training fits an evaluation, which keeps no gradients), 10 to 50 of
# them.
EVAL_WINDOWS = 1600


def _final_evaluation(model, corpus, device, batch_size, args) -> dict:
    """Train and validation loss beside the bigram baseline, printed; {} if a signal stops it
    (the evaluation changes nothing that is saved, so it can be dropped at any point)."""
    from tqdm.auto import tqdm

    n = min(50, max(10, -(-EVAL_WINDOWS // batch_size)))
    said = _("final evaluation: {n} batches of {batch_size} windows from each split")
    print(said.format(n=n, batch_size=batch_size), flush=True)
    bar = tqdm(total=2 * n, disable=args.no_progress, unit="batch", file=sys.stderr)
    try:
        train_loss = _mean_loss(model, corpus.train.to(device), batch_size, n, bar)
        val_loss = _mean_loss(model, corpus.val.to(device), batch_size, n, bar)
        bar.close()
    except KeyboardInterrupt as e:
        bar.close()
        print("\n" + _("{signal}: final evaluation stopped").format(signal=_stop_name(e)))
        return {}
    except (RuntimeError, MemoryError) as e:  # out of memory, most often: the run is saved
        bar.close()
        said = _("note: the final evaluation failed ({error}) and was skipped; the checkpoint is "
                 "saved")  # fmt: skip
        print(said.format(error=_one_line(e)))
        return {}
    said = _("final train loss {train}  val loss {val} nats/token")
    print(said.format(train=f"{train_loss:.4f}", val=f"{val_loss:.4f}"))
    need, have = bigram_memory(corpus.vocab_size), available_memory(torch.device("cpu"))
    if have is not None and need > have:
        said = _("note: the bigram baseline was skipped: its table of {vocab} x {vocab} pairs "
                 "needs about {need} and this machine has {have} free")  # fmt: skip
        print(
            said.format(
                vocab=f"{corpus.vocab_size:,}", need=readable_size(need), have=readable_size(have)
            )
        )
        return {"val_loss": val_loss}
    try:
        bigram = chunked_bigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    except KeyboardInterrupt as e:
        print("\n" + _("{signal}: final evaluation stopped").format(signal=_stop_name(e)))
        return {"val_loss": val_loss}
    except (RuntimeError, MemoryError) as e:
        print(
            _("note: the bigram baseline failed ({error}) and was skipped").format(
                error=_one_line(e)
            )
        )
        return {"val_loss": val_loss}
    gap = bigram - val_loss
    said = _("bigram baseline val loss {bigram}  (model is {gap} nats better)")
    said = said if gap >= 0 else _("bigram baseline val loss {bigram}  (model is {gap} nats worse)")
    print(said.format(bigram=f"{bigram:.4f}", gap=f"{abs(gap):.4f}"))
    return {"val_loss": val_loss, "bigram_val_loss": bigram}


def chunked_bigram_loss(train, val, vocab_size: int, chunk: int = 1 << 22) -> float:
    """`gptlib.bigram.bigram_loss`, its counts and its mean read a few million tokens at a time:
    on a large text the pairs of the whole stream at once would take 16 bytes a token more."""
    if train.numel() <= chunk and val.numel() <= chunk:
        return bigram_loss(train.long(), val.long(), vocab_size)
    V = vocab_size
    counts = torch.zeros(V * V, dtype=torch.long)
    for start in range(0, train.numel() - 1, chunk):
        piece = train[start : start + chunk + 1].long()  # one token more: the pair across the cut
        counts += torch.bincount(piece[:-1] * V + piece[1:], minlength=V * V)
    smoothed = counts.view(V, V).double() + 1.0
    probs = (smoothed / smoothed.sum(dim=1, keepdim=True)).float()
    del counts, smoothed
    total, n = 0.0, val.numel() - 1
    for start in range(0, n, chunk):
        piece = val[start : start + chunk + 1].long()
        total += float(probs[piece[:-1], piece[1:]].log().double().sum())
    return -total / n


def bigram_memory(vocab_size: int) -> int:
    """Bytes the bigram baseline holds at its peak: its table of counts (8 bytes a pair), the
    table in float64 to smooth it (8 more) and its probabilities in float32 (4 more)."""
    return 20 * vocab_size * vocab_size


def _mean_loss(model, tokens, batch_size, n, bar) -> float:
    """The mean loss of `n` batches, each drawn with its own fixed seed (the same every call)."""
    total = 0.0
    for i in range(n):
        if tokens.dtype == torch.long:
            total += estimate_loss(model, tokens, batch_size, n_batches=1, seed=1234 + i)
        else:  # a large text's compact tokens: the same windows, made long integers
            total += mean_loss(model, tokens, batch_size, 1, 1234 + i)
        bar.update(1)
    return total / n


def _sample_gpt2_folder(args: argparse.Namespace, device: torch.device) -> int:
    """A Hugging Face GPT-2 folder in place of a checkpoint: GPT-2's tokenizer, and without a
    prompt the samples start from <|endoftext|>, the token GPT-2 saw between documents."""
    from gptlib.bpe import END_OF_TEXT, gpt2_tokenizer
    from gptlib.huggingface import load_hf_gpt2

    model = load_hf_gpt2(args.checkpoint, device)
    tokenizer = gpt2_tokenizer()
    if model.cfg.vocab_size < tokenizer.vocab_size:
        said = _("{path} holds a model with vocab_size={vocab}, fewer than GPT-2's tokenizer's "
                 "{ids} ids; sampling a folder needs GPT-2's vocabulary")  # fmt: skip
        raise ValueError(
            said.format(path=args.checkpoint, vocab=model.cfg.vocab_size, ids=tokenizer.vocab_size)
        )
    prompt = args.prompt if args.prompt is not None else END_OF_TEXT
    g = torch.Generator(device=model.lm_head.weight.device).manual_seed(args.seed)
    for _sample in range(args.num):
        text = complete(
            model,
            tokenizer,
            prompt,
            args.max_len,
            temperature=args.temperature,
            top_k=args.top_k,
            generator=g,
        )
        print(text)
        print("---")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    device = _device(args.device)
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
    """The command line. Ctrl-C, SIGTERM and SIGHUP are handled from its first line to its last
    (see `gptlib.run.StopSignals`): before training they stop it with nothing written.

    Taught in notebook 16 (gpt2)."""
    before = get_language()
    set_language(_asked_language(sys.argv[1:] if argv is None else argv))
    try:
        return _main(argv)
    finally:
        set_language(before)  # a caller in the same process (a test, a notebook) keeps its own


def _asked_language(argv: list[str]) -> str:
    """The language `--lang` asks for, wherever it stands; else the locale's. A value gptlib
    does not speak is left to the parser to refuse, in English."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--lang" and i + 1 < len(argv) else None
        value = arg.partition("=")[2] if arg.startswith("--lang=") else value
        if value is not None:
            return value if value in LANGUAGES else "en"
    return language_from_locale()


def _main(argv: list[str] | None) -> int:
    with StopSignals() as signals:
        parser = build_parser()
        args = None
        try:
            signals.take_early()  # a signal that came while the library was imported
            args = parser.parse_args(argv)
            if args.command == "train":
                return cmd_train(args, signals)
            if args.command == "progress":
                return cmd_progress(args)
            return cmd_sample(args)
        except (FileNotFoundError, CheckpointError, ValueError) as e:
            command = f" {args.command}" if args is not None else ""
            said = _("{prog}: error: {message}\n")
            parser.exit(2, said.format(prog=parser.prog + command, message=_one_line(e)))
        except BrokenPipeError:  # `sample ... | head`: the reader has all it wanted
            _quiet_stdout()
            return 128 + getattr(signal, "SIGPIPE", 13)
        except KeyboardInterrupt as e:  # at start-up, before training began: nothing to keep
            training = args is None or args.command == "train"
            said = _("{signal}: stopped before training started: nothing was saved")
            said = said if training else _("{signal}: stopped")
            print("\n" + said.format(signal=_stop_name(e)), file=sys.stderr)
            return exit_code(getattr(e, "signum", None))


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the flush at exit finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


if __name__ == "__main__":
    sys.exit(main())
