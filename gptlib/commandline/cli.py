"""`python -m gptlib train ...`, `sample FILE ...` and `progress [NOTEBOOK_DIR]`: the parser, in
the language in use, and `main`, which hands each command to its module (`gptlib.commandline.run`,
`gptlib.commandline.samples`) and turns what they refuse into one line."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys

from gptlib.checkpoint import CheckpointError
from gptlib.commandline.report import one_line
from gptlib.commandline.run import train_command
from gptlib.commandline.samples import SampleOptions, sample_command
from gptlib.commandline.settings import DEFAULT_OUT, MAX_STEP_SECONDS, TRAIN_DEFAULTS, TrainOptions
from gptlib.commandline.signals import StopSignals, exit_code, stop_name
from gptlib.config import PRESETS
from gptlib.data import READINGS
from gptlib.device import DTYPES
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


def main(argv: list[str] | None = None) -> int:
    """The command line. Ctrl-C, SIGTERM and SIGHUP are handled from its first line to its last
    (see `gptlib.commandline.signals.StopSignals`): before training they stop it with nothing written.

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
                return train_command(TrainOptions.given(args), signals)
            if args.command == "progress":  # every exercise and how far you are
                from gptlib.exercises.progress import progress

                return progress(args.notebook_dir, args.timeout) or 0
            return sample_command(SampleOptions.given(args))
        except (FileNotFoundError, CheckpointError, ValueError) as e:
            command = f" {args.command}" if args is not None else ""
            said = _("{prog}: error: {message}\n")
            parser.exit(2, said.format(prog=parser.prog + command, message=one_line(e)))
        except BrokenPipeError:  # `sample ... | head`: the reader has all it wanted
            _quiet_stdout()
            return 128 + getattr(signal, "SIGPIPE", 13)
        except KeyboardInterrupt as e:  # at start-up, before training began: nothing to keep
            training = args is None or args.command == "train"
            said = _("{signal}: stopped before training started: nothing was saved")
            said = said if training else _("{signal}: stopped")
            print("\n" + said.format(signal=stop_name(e)), file=sys.stderr)
            return exit_code(getattr(e, "signum", None))


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the flush at exit finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
