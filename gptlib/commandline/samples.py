"""`python -m gptlib sample`: samples printed from a checkpoint or a Hugging Face GPT-2 folder
(`print_samples` also prints those at the end of a training run)."""

from __future__ import annotations

import argparse
import dataclasses
import os

import torch

from gptlib.checkpoint import load_checkpoint
from gptlib.commandline.settings import chosen_device
from gptlib.generate import complete, sample_documents
from gptlib.language import _

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


def print_samples(
    model, tokenizer, num: int, *, temperature=1.0, top_k=None, seed=0, max_len=200, prompt=None
) -> None:
    """`num` samples, printed as they come: whole documents for a model of documents (a batch of
    SAMPLE_BATCH at a time), else continuations of `prompt` separated by `---`."""
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


@dataclasses.dataclass(frozen=True)
class SampleOptions:
    """What `python -m gptlib sample` was asked for, typed: the parser's one product."""

    checkpoint: str
    num: int = 10
    temperature: float = 1.0
    top_k: int | None = None
    seed: int = 0
    max_len: int = 200
    prompt: str | None = None
    device: str | None = None

    @classmethod
    def given(cls, args: argparse.Namespace) -> SampleOptions:
        """The sample subcommand's parsed arguments, by name."""
        return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls)})


def _sample_gpt2_folder(args: SampleOptions, device: torch.device) -> int:
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


def sample_command(args: SampleOptions) -> int:
    """`python -m gptlib sample`: samples from a checkpoint, or from a Hugging Face GPT-2 folder."""
    device = chosen_device(args.device)
    if os.path.isdir(args.checkpoint):
        return _sample_gpt2_folder(args, device)
    ckpt = load_checkpoint(args.checkpoint, device)
    print_samples(
        ckpt.model,
        ckpt.tokenizer,
        args.num,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        max_len=args.max_len,
        prompt=args.prompt,
    )
    return 0
