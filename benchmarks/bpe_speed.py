"""Tokens per second: the hand-written GPT-2 tokenizer (gptlib.bpe) against tiktoken and Hugging
Face `tokenizers`, all three built from the same local GPT-2 files, on the same text.

The text is gptlib's own source code and the README, repeated to about 1 MB: prose, code,
numbers and whitespace. gptlib.bpe keeps a cache of pieces it has already merged, so it is timed
twice: cold (a fresh tokenizer on one copy of the text, every distinct piece merged once) and
warm (the whole text, every piece already in the cache). All
three must give the same ids. Each timing is the best of `--repeats` runs.

    python benchmarks/bpe_speed.py
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import tiktoken  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402

from gptlib.bpe import END_OF_TEXT, BPETokenizer, bytes_to_unicode, gpt2_files  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def corpus() -> str:
    parts = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "gptlib").rglob("*.py"))]
    parts.append((ROOT / "README.md").read_text(encoding="utf-8"))
    return "\n".join(parts)


def _timed_encode(tokenizer, text: str) -> float:
    t = time.perf_counter()
    tokenizer.encode(text)
    return time.perf_counter() - t


def best_of(repeats: int, fn):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    one_copy = corpus()
    text = one_copy * max(1, round(args.megabytes * 1e6 / len(one_copy.encode("utf-8"))))

    encoder_json, vocab_bpe = gpt2_files()
    with open(encoder_json, encoding="utf-8") as f:
        encoder = json.load(f)
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes(to_byte[c] for c in s): i for s, i in encoder.items() if s != END_OF_TEXT}
    tk = tiktoken.Encoding(
        name="gpt2_from_local_files",
        pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        mergeable_ranks=ranks,
        special_tokens={END_OF_TEXT: encoder[END_OF_TEXT]},
    )
    hf = Tokenizer(models.BPE.from_file(encoder_json, vocab_bpe))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens([END_OF_TEXT])  # the text holds '<|endoftext|>' (in gptlib/bpe.py)

    def fresh():
        return BPETokenizer.from_files(encoder_json, vocab_bpe)

    # Cold: a fresh tokenizer on one copy of the text, every distinct piece merged once.
    n_one = len(fresh().encode(one_copy))
    cold = min(_timed_encode(fresh(), one_copy) for _ in range(args.repeats))
    ours = fresh()
    ids = ours.encode(text)
    warm, _ = best_of(args.repeats, lambda: ours.encode(text))
    t_tk, ids_tk = best_of(args.repeats, lambda: tk.encode(text, allowed_special="all"))
    t_hf, ids_hf = best_of(args.repeats, lambda: hf.encode(text).ids)
    n = len(ids)
    print(
        f"{len(text.encode('utf-8')) / 1e6:.2f} MB of text, {n:,} GPT-2 tokens, "
        f"best of {args.repeats}; same ids from all three: {ids == ids_tk == ids_hf}"
    )
    print(f"{'':>26} {'tokens/s':>12} {'vs tiktoken':>12}")
    for name, seconds in (
        ("gptlib.bpe (cold, 1 copy)", cold * n / n_one),
        ("gptlib.bpe (warm cache)", warm),
        ("tiktoken", t_tk),
        ("HF tokenizers", t_hf),
    ):
        print(f"{name:>26} {n / seconds:12,.0f} {t_tk / seconds:11.3f}x")
    if not ids == ids_tk == ids_hf:
        raise SystemExit("the tokenizers disagree")


if __name__ == "__main__":
    main()
