import subprocess
import sys

import pytest

from gptlib.checkpoint import load_checkpoint
from gptlib.cli import main


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
    main(["sample", str(out), "--num", "1", "--prompt", "hel", "--max-len", "5"])
    printed = capsys.readouterr().out
    assert "vocab 11" in printed  # h e l o w r d t c, space and newline
    sample = printed.split(f"saved {out}\n")[1]
    assert sample.startswith("hel") and sample.endswith("\n---\n")
    assert len(sample) == len("hel") + 5 + len("\n---\n")  # prompt + 5 new characters


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--steps", "0"], "expected a number >= 1"),
        (["train", "--steps", "ten"], "expected a whole number"),
        (["train", "--preset", "gpt5"], "invalid choice"),
        (["sample", "x.pt", "--temperature", "-1"], "expected a finite number >= 0"),
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
