"""The end of a training run, as the command line reports it: the final evaluation beside the
bigram baseline (added to the saved checkpoint), the samples, and a divergence in one line that
says where the loss left its range and how to go on."""

from __future__ import annotations

import math
import os
import shlex
import sys

import torch

from gptlib.bigram import bigram_loss
from gptlib.commandline.large_text import mean_loss
from gptlib.commandline.needs import available_memory, readable_size
from gptlib.commandline.samples import print_samples
from gptlib.commandline.settings import TrainOptions
from gptlib.commandline.signals import exit_code, stop_name
from gptlib.language import _
from gptlib.train import WHAT_DIVERGED, Diverged, estimate_loss

PROG = "python -m gptlib"


EXIT_DIVERGED = 1


def command_line(*args: str) -> str:
    """`python -m gptlib ARGS`, quoted for a shell: a path with a space pastes as one word."""
    return f"{PROG} {shlex.join(args)}"


def one_line(e: BaseException) -> str:
    """An error's message on one line (its class name when it has none)."""
    return " ".join(str(e).split()) or type(e).__name__


def divergence(e: Diverged) -> str:
    said = _("step {step}: the {what} became {value} at lr {lr}")
    what = _(WHAT_DIVERGED.get(e.what, e.what))
    return said.format(step=e.step, what=what, value=e.value, lr=f"{e.lr:.3g}")


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


def check_saveable(run, diverged, left, restored: bool, out: str) -> None:
    """Refuse to save a diverged run that has no healthy state newer than its start."""
    if diverged and not restored:
        step, loss, lr = left
        said = _("{what}; the loss left its range at step {step} ({why}) at lr {lr}, and no "
                 "evaluation of this run was healthy after it started, so there is nothing new to "
                 "save{kept}; run it with --lr {lower} or lower (or a longer --warmup)")  # fmt: skip
        kept = _("; {out} keeps step {start}").format(out=out, start=run.start)
        raise ValueError(
            said.format(
                what=divergence(diverged),
                step=step,
                why=_out_of_range(run, loss),
                lr=f"{lr:.3g}",
                kept=kept if run.start > 0 and os.path.exists(out) else "",
                lower=_lower_rate(lr),
            )
        )


def diverged_line(run, diverged, left, saved) -> str:
    step, loss, lr = left
    said = _("{prog}: error: step {step}: the loss left its range ({why}) at lr {lr}; the run "
             "stopped at {what}; its last healthy state (step {done}) is saved in {saved}; "
             "continue with a lower learning rate: {command}")  # fmt: skip
    return said.format(
        prog=f"{PROG} train",
        step=step,
        why=_out_of_range(run, loss),
        lr=f"{lr:.3g}",
        what=divergence(diverged),
        done=run.done,
        saved=saved,
        command=command_line("train", "--resume", saved, "--lr", _lower_rate(lr)),
    )


def after_save(run, options: TrainOptions, signals, saved: str, save_again) -> int:
    """The final evaluation (`save_again(summary)` adds it to the checkpoint), then the samples."""
    summary = {}
    if len(signals.received) >= 2:
        print(_("final evaluation skipped"))
    else:
        summary = final_evaluation(run, progress=not options.no_progress)
    if summary:  # the same checkpoint, now with the evaluation
        with signals.held():
            save_again(summary)
    if run.history.interrupted:
        print(
            _("continue with: {command}").format(command=command_line("train", "--resume", saved))
        )
    if run.history.interrupted or signals.received:
        return exit_code(signals.first)
    if options.samples > 0:
        print(_("samples (temperature 1.0):"))
        corpus = run.corpus
        longest = max(len(d) for d in corpus.documents) + 1 if corpus.documents else 200
        max_len = max(40, min(400, longest))
        try:
            print_samples(
                run.model,
                corpus.tokenizer,
                options.samples,
                seed=run.settings.seed,
                max_len=max_len,
            )
        except KeyboardInterrupt as e:
            print("\n" + _("{signal}: samples stopped").format(signal=stop_name(e)))
            return exit_code(getattr(e, "signum", None))
    return 0


# The final evaluation reads about this many windows from each split, in batches of the run's own
# size (a batch that fitted training fits an evaluation, which keeps no gradients), 10 to 50 of
# them.
EVAL_WINDOWS = 1600


def final_evaluation(run, *, progress: bool = True) -> dict:
    """Train and validation loss beside the bigram baseline, printed; {} if a signal stops it
    (the evaluation changes nothing that is saved, so it can be dropped at any point)."""
    from tqdm.auto import tqdm

    model, corpus, device, batch_size = run.model, run.corpus, run.device, run.settings.batch_size
    n = min(50, max(10, -(-EVAL_WINDOWS // batch_size)))
    said = _("final evaluation: {n} batches of {batch_size} windows from each split")
    print(said.format(n=n, batch_size=batch_size), flush=True)
    bar = tqdm(total=2 * n, disable=not progress, unit="batch", file=sys.stderr)
    try:
        train_loss = _mean_loss(model, corpus.train.to(device), batch_size, n, bar)
        val_loss = _mean_loss(model, corpus.val.to(device), batch_size, n, bar)
        bar.close()
    except KeyboardInterrupt as e:
        bar.close()
        print("\n" + _("{signal}: final evaluation stopped").format(signal=stop_name(e)))
        return {}
    except (RuntimeError, MemoryError) as e:  # out of memory, most often: the run is saved
        bar.close()
        said = _("note: the final evaluation failed ({error}) and was skipped; the checkpoint is "
                 "saved")  # fmt: skip
        print(said.format(error=one_line(e)))
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
        print("\n" + _("{signal}: final evaluation stopped").format(signal=stop_name(e)))
        return {"val_loss": val_loss}
    except (RuntimeError, MemoryError) as e:
        print(
            _("note: the bigram baseline failed ({error}) and was skipped").format(
                error=one_line(e)
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
