"""What `python -m gptlib train` is asked to do, typed: `TrainOptions`, the command as given (None
where a flag was left out), and `TrainSettings`, the ten settings of the run once each is settled
(as given, else the resumed run's, else the default), the ones a checkpoint keeps."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

from gptlib.config import GPTConfig, preset
from gptlib.data import BUILT_IN
from gptlib.device import choose_device
from gptlib.language import _

DEFAULT_OUT = "runs/model.pt"
MAX_STEP_SECONDS = 120.0
SHAPE_FLAGS = ("block_size", "n_layer", "n_head", "n_embd", "dropout", "attention")


@dataclass(frozen=True)
class TrainSettings:
    """The settings of a run, saved in its checkpoint (`as_saved`) and read back on --resume."""

    data: str = "names"
    format: str = "auto"
    preset: str = "textbook"
    steps: int = 1000
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    schedule: str = "cosine"
    eval_every: int = 250
    seed: int = 0

    def as_saved(self) -> dict:
        """The settings as a checkpoint stores them: a plain dict, one key a setting."""
        return dataclasses.asdict(self)

    def replace(self, **changes) -> TrainSettings:
        return dataclasses.replace(self, **changes)


# Settings left as None on the command line get these, or on --resume the resumed run's own values.
TRAIN_DEFAULTS = TrainSettings().as_saved()
SETTINGS = tuple(TRAIN_DEFAULTS)

RESUMABLE = {  # settings a resumed run may change, applied from its first step
    "steps": "--steps",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "warmup": "--warmup",
    "schedule": "--schedule",
    "eval_every": "--eval-every",
    "seed": "--seed",
}


@dataclass(frozen=True)
class TrainOptions:
    """The train command as given: each setting and shape flag None where it was left out."""

    data: str | None = None
    format: str | None = None
    preset: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    warmup: int | None = None
    schedule: str | None = None
    eval_every: int | None = None
    seed: int | None = None
    block_size: int | None = None
    n_layer: int | None = None
    n_head: int | None = None
    n_embd: int | None = None
    dropout: float | None = None
    attention: str | None = None
    device: str | None = None
    resume: str | None = None
    dtype: str = "float32"
    compile: bool = False
    out: str | None = None
    overwrite: bool = False
    samples: int = 10
    no_optimizer_state: bool = False
    no_progress: bool = False
    max_step_seconds: float = MAX_STEP_SECONDS

    @classmethod
    def given(cls, namespace) -> TrainOptions:
        """The options of a parsed `train` command (an argparse namespace)."""
        return cls(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)})

    def shape(self) -> dict:
        """The shape flags given: {field of GPTConfig: value}."""
        return {k: getattr(self, k) for k in SHAPE_FLAGS if getattr(self, k) is not None}


def resolve_settings(options: TrainOptions, before: dict | None) -> TrainSettings:
    """Each setting: as given, else the resumed run's (`before`, its saved dict), else the
    default."""
    before = before or {}
    settled = {
        k: getattr(options, k) if getattr(options, k) is not None else before.get(k, default)
        for k, default in TRAIN_DEFAULTS.items()
    }
    data = settled["data"]
    if data not in BUILT_IN:
        if not os.path.exists(data) and options.data is None:
            said = _("the run in {run} was trained on the file {data} (the path stored in the "
                     "checkpoint), which is not there from {here}; pass --data with the path of "
                     "the same file")  # fmt: skip
            raise ValueError(
                said.format(run=repr(options.resume), data=repr(data), here=repr(os.getcwd()))
            )
        settled["data"] = os.path.abspath(data)  # stored so a resume works from any folder
    elif options.format is not None and options.format != "auto":
        said = _("--format {format} reads a file given with --data; {data} is a built-in corpus "
                 "with its own reading (one document per name or poem): drop --format")  # fmt: skip
        raise ValueError(said.format(format=options.format, data=repr(data)))
    return TrainSettings(**settled)


def resume_changes(options: TrainOptions, before: dict) -> dict[str, tuple]:
    """{setting: (saved, given)} for each setting the resumed run is given a new value of."""
    return {
        k: (before.get(k, TRAIN_DEFAULTS[k]), getattr(options, k))
        for k in RESUMABLE
        if getattr(options, k) is not None
        and getattr(options, k) != before.get(k, TRAIN_DEFAULTS[k])
    }


def check_resume_shape(options: TrainOptions, ck) -> None:
    """Refuse to resume the checkpoint `ck` with a model shape other than its own."""
    saved = ck.training["settings"]["preset"]
    given = {k: v for k, v in options.shape().items() if getattr(ck.config, k) != v}
    if options.preset is not None and options.preset != saved:
        given["preset"] = options.preset
    if given:
        have = ", ".join(
            f"{k}={saved if k == 'preset' else getattr(ck.config, k)!r}" for k in given
        )
        asked = ", ".join(f"{k}={v!r}" for k, v in given.items())
        said = _("cannot resume {run} with a different model shape: it has {have}, the "
                 "command asks for {asked}; drop those flags, or start a new run without "
                 "--resume")  # fmt: skip
        raise ValueError(said.format(run=repr(options.resume), have=have, asked=asked))


def model_config(options: TrainOptions, settings: TrainSettings, corpus, ck) -> GPTConfig:
    """The model's shape: the resumed run's, or the preset with the shape flags given."""
    if ck is not None:
        check_resume_shape(options, ck)
        return ck.config
    cfg = preset(settings.preset, corpus.vocab_size, **options.shape())
    if options.block_size is None and settings.preset == "textbook" and corpus.documents:
        # For short documents a window of 64 would hold several of them; the longest one plus its
        # BOS, rounded up to a multiple of 8, is enough (16 for names) and each step is cheaper.
        longest = max(len(d) for d in corpus.documents) + 1
        cfg = cfg.replace(block_size=min(cfg.block_size, -(-longest // 8) * 8))
    return cfg


def early_config(options: TrainOptions, settings: TrainSettings, ck) -> GPTConfig:
    """The model shape and the memory of a step, checked before the data is read: a stand-in
    vocabulary of two symbols (the real one only adds the embedding rows); checked again once
    the data is in."""
    if ck is not None:
        return ck.config
    return preset(settings.preset, 2, **options.shape())


def chosen_device(requested: str | None) -> torch.device:
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


def shadowed_corpus_note(data: str) -> str | None:
    """A note when a file in this folder has the name of the built-in corpus being used."""
    if data in BUILT_IN and os.path.exists(data):
        said = _("note: {name} is the built-in corpus; the file {name} in this folder is not "
                 "read (pass --data ./{data} to train on it)")  # fmt: skip
        return said.format(name=repr(data), data=data)
    return None


def warmup_note(settings: TrainSettings) -> str | None:
    """A note, before the first step, when the warmup is longer than the run."""
    warmup, total = settings.warmup, settings.steps
    if warmup <= total:
        return None
    said = _("note: the warmup of {warmup} steps is longer than this run of {total}: the "
             "learning rate rises to {share} of --lr {lr} and no further; pass --warmup {tenth} "
             "(or anything up to {total}) to reach it")  # fmt: skip
    return said.format(
        warmup=warmup,
        total=total,
        share=f"{total / warmup:.0%}",
        lr=f"{settings.lr:g}",
        tenth=total // 10,
    )
