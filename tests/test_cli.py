import re
import subprocess
import sys

import pytest
import torch

import gptlib.commandline.cli
import gptlib.commandline.run
import gptlib.data
from gptlib.checkpoint import load_checkpoint
from gptlib.commandline.cli import main
from gptlib.data import load_names

QUICK = ["--preset", "microgpt", "--batch-size", "4", "--no-progress", "--device", "cpu"]


def test_train_then_sample_end_to_end(tmp_path, capsys):
    out = tmp_path / "m.pt"
    args = [
        "train",
        "--preset",
        "microgpt",
        "--steps",
        "5",
        "--batch-size",
        "4",
        "--eval-every",
        "2",
    ]
    main([*args, "--out", str(out), "--samples", "3", "--no-progress", "--device", "cpu"])
    text = capsys.readouterr().out
    assert "device cpu" in text and "vocab 27" in text and "parameters 4,112" in text
    assert "final train loss" in text and "bigram baseline val loss 2.3756" in text
    assert f"saved {out}" in text
    ck = load_checkpoint(out)
    assert ck.step == 5 and len(ck.history) == 5 and ck.history.val_step == [0, 2, 4]
    samples = text.split("samples (temperature 1.0):\n")[1].splitlines()
    assert len(samples) == 3 and all(set(s) <= set("abcdefghijklmnopqrstuvwxyz") for s in samples)

    main(["sample", str(out), "--num", "4", "--temperature", "0"])
    greedy = capsys.readouterr().out.splitlines()
    assert len(greedy) == 4 and len(set(greedy)) == 1  # greedy from BOS: the same name 4 times


def test_text_file_training(tmp_path, capsys):
    text = tmp_path / "input.txt"
    text.write_text("hello world\nhello torch\n" * 20, encoding="utf-8")
    out = tmp_path / "t.pt"
    main(
        [
            "train",
            "--data",
            str(text),
            "--format",
            "text",
            "--preset",
            "microgpt",
            "--steps",
            "3",
            "--batch-size",
            "2",
            "--out",
            str(out),
            "--samples",
            "0",
            "--no-progress",
        ]
    )
    assert "vocab 11" in capsys.readouterr().out  # h e l o w r d t c, space and newline
    main(["sample", str(out), "--num", "1", "--prompt", "hel", "--max-len", "5"])
    sample = capsys.readouterr().out
    assert sample.startswith("hel") and sample.endswith("\n---\n")
    assert len(sample) == len("hel") + 5 + len("\n---\n")  # prompt + 5 new characters


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--steps", "0"], "expected a whole number >= 1, got 0"),
        (["train", "--warmup", "-5"], "--warmup: expected a whole number >= 0, got -5"),
        (["train", "--lr", "-1"], "--lr: expected a number > 0, got -1"),
        (["train", "--lr", "0"], "--lr: expected a number > 0, got 0"),
        (["train", "--lr", "nan"], "--lr: expected a finite number, got nan"),
        (["train", "--samples", "-1"], "--samples: expected a whole number >= 0"),
        (["train", "--steps", "ten"], "expected a whole number"),
        (["train", "--preset", "gpt5"], "invalid choice"),
        (["sample", "x.pt", "--temperature", "-1"], "expected a number >= 0, got -1"),
        (["fly"], "invalid choice"),
    ],
)
def test_bad_arguments_get_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_errors_from_the_library_are_short(tmp_path):
    cmd = [sys.executable, "-m", "gptlib", "sample", str(tmp_path / "missing.pt")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 2
    assert "missing.pt" in res.stderr and "does not exist" in res.stderr
    assert "Traceback" not in res.stderr
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gptlib",
            "train",
            "--data",
            str(tmp_path / "none.txt"),
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2 and "none.txt" in res.stderr and "Traceback" not in res.stderr


def _train(tmp_path, name, *extra, samples="0"):
    out = tmp_path / name
    main(["train", *QUICK, "--samples", samples, "--out", str(out), *extra])
    return out


def test_one_item_per_line_file_trains_as_documents(tmp_path, capsys):
    names = tmp_path / "names.txt"
    names.write_text("\n".join(load_names()[:400]) + "\n", encoding="utf-8")
    _train(tmp_path, "n.pt", "--data", str(names), "--steps", "3", samples="4")
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("data names.txt: one document per line, 400 lines")
    assert "--format text" in first
    samples = out.split("samples (temperature 1.0):\n")[1].splitlines()
    assert len(samples) == 4 and "---" not in out
    assert all(set(s) <= set("abcdefghijklmnopqrstuvwxyz") for s in samples)
    _train(tmp_path, "t.pt", "--data", str(names), "--steps", "1", "--format", "text")
    assert "running text, as --format text asks" in capsys.readouterr().out


def test_summary_says_better_or_worse_with_a_positive_number(tmp_path, capsys):
    _train(tmp_path, "w.pt", "--steps", "1")  # one step: far worse than the bigram model
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("bigram")][0]
    m = re.search(r"model is (\d+\.\d{4}) nats (better|worse)\)", line)
    assert m and m[2] == "worse" and float(m[1]) > 0.5


def _fails_before_training(argv, capsys, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    captured = capsys.readouterr()
    assert e.value.code == 2 and re.search(message, captured.err)
    assert captured.out == ""  # nothing printed, nothing trained
    return captured.err


def test_checks_fail_before_training(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = str(blocker / "m.pt")
    _fails_before_training(
        ["train", *QUICK, "--steps", "5000", "--out", out], capsys, "cannot write the checkpoint"
    )
    short = tmp_path / "short.txt"
    short.write_text("a tiny text, twenty-nine chars", encoding="utf-8")
    _fails_before_training(
        ["train", "--data", str(short), "--no-progress", "--out", str(tmp_path / "s.pt")],
        capsys,
        r"block_size=64 needs at least 65; use a longer text or --block-size 26",
    )
    _fails_before_training(
        ["train", *QUICK, "--n-head", "3", "--out", str(tmp_path / "h.pt")],
        capsys,
        "not divisible by n_head=3",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "short.txt"]


def test_tang300_missing_says_how_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gptlib.data, "TANG300_PATH", str(tmp_path / "tang300"))
    _fails_before_training(
        ["train", "--data", "tang300", "--out", str(tmp_path / "z.pt")],
        capsys,
        r"tang300.*is not installed.*apt-get install fortunes-zh",
    )


def _weights(path):
    return load_checkpoint(path).model.state_dict()


def _assert_same_run(a, b, same_evals=True):
    ca, cb = load_checkpoint(a), load_checkpoint(b)
    assert ca.step == cb.step and ca.history.step == cb.history.step
    assert ca.history.loss == pytest.approx(cb.history.loss, abs=1e-6)
    if same_evals:
        assert ca.history.val_step == cb.history.val_step
        assert ca.history.val_loss == pytest.approx(cb.history.val_loss, abs=1e-6)
    wa, wb = ca.model.state_dict(), cb.model.state_dict()
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-6


def test_resume_continues_the_same_run(tmp_path, capsys, monkeypatch):
    common = ["--steps", "8", "--eval-every", "3", "--warmup", "3"]
    whole = _train(tmp_path, "whole.pt", *common)

    # Stop the same run (cosine schedule over 8 steps) after 5 steps, as Ctrl-C would.
    real_train = gptlib.commandline.run.TrainingRun.train

    def stopped_after_five(run, should_stop, on_step=None):
        return real_train(run, lambda: len(run.history) == 5, on_step)

    monkeypatch.setattr(gptlib.commandline.run.TrainingRun, "train", stopped_after_five)
    part = _train(tmp_path, "part.pt", *common)
    monkeypatch.undo()
    assert (
        load_checkpoint(part).step == 5 and "interrupted at step 5 of 8" in capsys.readouterr().out
    )

    main(
        [
            "train",
            "--resume",
            str(part),
            "--device",
            "cpu",
            "--no-progress",
            "--samples",
            "0",
            "--out",
            str(tmp_path / "r.pt"),
        ]
    )
    assert f"resuming {part} at step 5 of 8" in capsys.readouterr().out
    _assert_same_run(whole, tmp_path / "r.pt")

    # A finished run continues too; with a constant schedule the rate does not depend on the total.
    const = ["--schedule", "constant", "--warmup", "2"]
    six = _train(tmp_path, "six.pt", "--steps", "6", *const)
    three = _train(tmp_path, "three.pt", "--steps", "3", *const)
    main(
        [
            "train",
            "--resume",
            str(three),
            "--steps",
            "6",
            "--device",
            "cpu",
            "--no-progress",
            "--samples",
            "0",
            "--out",
            str(tmp_path / "r6.pt"),
        ]
    )
    _assert_same_run(six, tmp_path / "r6.pt", same_evals=False)  # 3 ended with an evaluation


def test_resume_refuses_other_data_or_shape(tmp_path, capsys):
    ck = str(_train(tmp_path, "a.pt", "--steps", "2"))
    capsys.readouterr()
    out = ["--out", str(tmp_path / "b.pt"), "--steps", "4"]
    _fails_before_training(
        ["train", "--resume", ck, "--data", "surnames", *out],
        capsys,
        "cannot resume .* on different data",
    )
    _fails_before_training(
        ["train", "--resume", ck, "--n-embd", "32", *out],
        capsys,
        r"different model shape: it has n_embd=16, the command asks for n_embd=32",
    )
    _fails_before_training(
        ["train", "--resume", ck, "--preset", "textbook", *out], capsys, "different model shape"
    )
    _fails_before_training(
        ["train", "--resume", ck, "--out", str(tmp_path / "b.pt")],
        capsys,
        "already at step 2 of its 2",
    )
    slim = str(_train(tmp_path, "slim.pt", "--steps", "2", "--no-optimizer-state"))
    capsys.readouterr()
    _fails_before_training(["train", "--resume", slim, *out], capsys, "--no-optimizer-state")
    assert not (tmp_path / "b.pt").exists()


def test_compile_and_bfloat16_flags(tmp_path, capsys, monkeypatch):
    # Inductor would compile C++ for minutes on a CPU; the eager backend still traces the model.
    real_compile = torch.compile
    calls = []

    def eager_compile(module, **kw):
        calls.append(type(module).__name__)
        return real_compile(module, backend="eager")

    monkeypatch.setattr(torch, "compile", eager_compile)
    out = _train(tmp_path, "c.pt", "--steps", "2", "--compile", "--dtype", "bfloat16")
    assert calls == ["GPT"]
    ck = load_checkpoint(out)
    assert not any(k.startswith("_orig_mod") for k in ck.model.state_dict())
    assert all(p.dtype == torch.float32 for p in ck.model.parameters())
    assert ck.step == 2
