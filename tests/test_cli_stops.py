"""Every way a run is stopped keeps the run: SIGTERM and SIGHUP as Ctrl-C, a failure at the end,
a diverging loss; the lock never touches a user's file; one-line errors before any work."""

import importlib
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from processes import as_from_a_terminal, wait_for_line

import gptlib.commandline.claim
import gptlib.commandline.cli
import gptlib.commandline.large_text
import gptlib.commandline.needs
import gptlib.commandline.report
import gptlib.commandline.run
import gptlib.commandline.samples
from gptlib.checkpoint import load_checkpoint
from gptlib.commandline.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = ["--preset", "microgpt", "--batch-size", "4", "--no-progress", "--device", "cpu"]
RUN = [*QUICK, "--dropout", "0.1", "--steps", "6", "--eval-every", "3", "--warmup", "2"]
STEPS = 6
TRAIN = importlib.import_module("gptlib.train")

needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers can only be set in the main thread",
)


class Unhandled(Exception):
    pass


@pytest.fixture(autouse=True)
def signals_as_in_a_terminal():
    """Ctrl-C raises KeyboardInterrupt as in a terminal; a SIGTERM or SIGHUP the command does not
    handle fails the test (instead of killing the test process)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unhandled(signum, frame):
        raise Unhandled(signal.Signals(signum).name)

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, unhandled),
        signal.SIGHUP: signal.signal(signal.SIGHUP, unhandled),
    }
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _train(out, *extra, samples="0"):
    return main(["train", *RUN, "--samples", samples, "--out", str(out), *extra])


def _send_when(monkeypatch, module, name, call, signum, times=1):
    """Send this process `signum` (`times` times) on the `call`-th call of module.name."""
    real = getattr(module, name)
    count = {"n": 0}

    def wrapped(*a, **k):
        count["n"] += 1
        if count["n"] == call:
            for _ in range(times):
                os.kill(os.getpid(), signum)
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


def _max_weight_difference(a, b) -> float:
    wa, wb = load_checkpoint(a).model.state_dict(), load_checkpoint(b).model.state_dict()
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "whole.pt"
    assert _train(out) == 0
    return out


# -- SIGTERM and SIGHUP, like Ctrl-C ---------------------------------------------------------------


@needs_main_thread
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_step_saves_and_the_resumed_run_is_the_same(
    tmp_path, capsys, monkeypatch, whole, signum
):
    part = tmp_path / "part.pt"
    _send_when(monkeypatch, torch.nn.utils, "clip_grad_norm_", 3, signum)
    assert _train(part, samples="2") == 128 + signum
    monkeypatch.undo()
    text = capsys.readouterr()
    assert "Traceback" not in text.err and "interrupted at step 3 of 6" in text.out
    assert "final train loss" in text.out and "samples" not in text.out
    assert sorted(os.listdir(tmp_path)) == ["part.pt"]  # no lock, no temporary file
    assert main(["train", "--resume", str(part), "--no-progress", "--samples", "0"]) == 0
    assert load_checkpoint(part).step == STEPS
    assert _max_weight_difference(whole, part) <= 1e-6


@needs_main_thread
def test_sigterm_twice_skips_the_final_evaluation(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.pt"
    _send_when(monkeypatch, torch.nn.utils, "clip_grad_norm_", 2, signal.SIGTERM, times=2)
    assert _train(out) == 128 + signal.SIGTERM
    text = capsys.readouterr().out
    assert "final evaluation skipped" in text and "final train loss" not in text
    assert load_checkpoint(out).step == 2 and os.listdir(tmp_path) == ["m.pt"]


@needs_main_thread
def test_sigterm_in_the_final_evaluation_keeps_the_saved_run(tmp_path, capsys, monkeypatch, whole):
    out = tmp_path / "m.pt"
    _send_when(monkeypatch, gptlib.commandline.report, "estimate_loss", 2, signal.SIGTERM)
    assert _train(out, samples="3") == 128 + signal.SIGTERM
    text = capsys.readouterr().out
    assert "final evaluation stopped" in text and "samples" not in text
    assert load_checkpoint(out).step == STEPS and _max_weight_difference(whole, out) == 0
    assert os.listdir(tmp_path) == ["m.pt"]


@needs_main_thread
def test_sighup_while_saving_waits_for_the_save(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.pt"
    _send_when(monkeypatch, gptlib.commandline.run, "save_checkpoint", 1, signal.SIGHUP)
    assert _train(out, samples="3") == 128 + signal.SIGHUP
    text = capsys.readouterr().out
    assert "saving, one moment" in text and "final train loss" in text  # one signal: evaluated
    assert load_checkpoint(out).extra["val_loss"] > 0  # the checkpoint updated after it
    assert os.listdir(tmp_path) == ["m.pt"]


def _cli(*args, cwd=ROOT):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "gptlib", *args],
        preexec_fn=as_from_a_terminal,  # even if this process was started with them ignored
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


LONG = [*QUICK, "--steps", "100000", "--eval-every", "100000", "--samples", "0"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_real_process_stopped_by_sigterm_or_sighup_keeps_its_run(tmp_path, signum):
    out = tmp_path / "dir with space" / "run.pt"
    proc = _cli("train", *LONG, "--out", str(out))
    try:
        wait_for_line(proc, r"^training: ")
        time.sleep(0.3)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, (stdout, stderr)
    assert "Traceback" not in stderr
    step = load_checkpoint(out).step
    assert 1 <= step < 100000 and f"interrupted at step {step}" in stdout
    assert "final train loss" in stdout  # one signal: the run is still evaluated
    resume = [line for line in stdout.splitlines() if line.startswith("continue with: ")][0]
    assert shlex.split(resume.split(": ", 1)[1])[-2:] == ["--resume", str(out)]  # quoted
    assert os.listdir(out.parent) == ["run.pt"]  # no lock, no temporary file


def _torch_loaded(pid) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch" in f.read()
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_library_is_imported_stops_cleanly(tmp_path, signum):
    out = tmp_path / "m.pt"
    proc = _cli("train", *LONG, "--out", str(out))
    try:
        deadline = time.monotonic() + 60
        while not _torch_loaded(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signum)  # torch is being imported: no handler of the command yet
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, (stdout, stderr)
    assert "Traceback" not in stderr and "nothing was saved" in stderr
    assert len(stderr.strip().splitlines()) == 1 and "saved" not in stdout
    assert os.listdir(tmp_path) == []


def test_after_a_kill_9_the_next_run_takes_over_and_cleans_up(tmp_path, capsys):
    out = tmp_path / "m.pt"
    proc = _cli("train", *LONG, "--out", str(out))
    try:
        wait_for_line(proc, r"^training: ")
        proc.kill()  # SIGKILL: nothing can be done, the lock file stays
        proc.communicate(timeout=60)
    finally:
        proc.kill()
    left = os.listdir(tmp_path)
    assert left and "m.pt" not in left
    lock = tmp_path / os.path.basename(gptlib.commandline.claim.lock_path(str(out)))
    token = re.search(r" token ([0-9a-f]+)$", lock.read_text().strip())[1]  # the killed run's
    orphan = tmp_path / f".m.pt.{token}.tmp-abcd_123.pt"  # as its save killed half-way leaves it
    orphan.write_bytes(b"half a checkpoint")
    other = tmp_path / f".other.pt.{token}.tmp-abcd_123.pt"  # another checkpoint's
    users = tmp_path / ".m.pt.tmp-abcd_123.pt"  # the user's own file, named like an old one
    users.write_bytes(b"mine")
    other.write_bytes(b"x")
    assert main(["train", *QUICK, "--steps", "2", "--samples", "0", "--out", str(out)]) == 0
    assert "removed 1 temporary file" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == sorted([other.name, users.name, "m.pt"])
    assert users.read_bytes() == b"mine"


def test_a_users_file_named_like_a_temporary_file_is_never_removed(tmp_path, capsys):
    out = tmp_path / "m.pt"
    mine = tmp_path / ".m.pt.tmp-abcd_123.pt"  # the shape of a temporary file, without a token
    mine.write_bytes(b"my file")
    lock = tmp_path / os.path.basename(gptlib.commandline.claim.lock_path(str(out)))
    lock.write_text(
        f"{gptlib.commandline.claim.LOCK_MARK}12345\n"
    )  # a stale lock of an older run: no token
    assert _train(out, "--steps", "2") == 0
    assert "removed" not in capsys.readouterr().out
    assert mine.read_bytes() == b"my file" and sorted(os.listdir(tmp_path)) == [mine.name, "m.pt"]


# -- the lock never touches a user's file ---------------------------------------------------------


def test_a_users_file_named_out_lock_is_left_alone(tmp_path):
    mine = tmp_path / "m.pt.lock"
    mine.write_text("my notes on the run")
    assert _train(tmp_path / "m.pt", "--steps", "2") == 0
    assert mine.read_text() == "my notes on the run"
    assert sorted(os.listdir(tmp_path)) == ["m.pt", "m.pt.lock"]


def test_a_file_that_is_not_a_gptlib_lock_is_never_locked_nor_removed(tmp_path, capsys):
    out = tmp_path / "m.pt"
    theirs = tmp_path / os.path.basename(gptlib.commandline.claim.lock_path(str(out)))
    theirs.write_text("not a lock")
    with pytest.raises(SystemExit) as e:
        _train(out)
    assert e.value.code == 2 and "did not write" in capsys.readouterr().err
    assert theirs.read_text() == "not a lock" and not out.exists()


# -- nothing at the end loses the run ------------------------------------------------------------


def test_a_failing_final_evaluation_keeps_the_saved_run(tmp_path, capsys, monkeypatch):
    sizes = []

    def out_of_memory(model, tokens, batch_size=32, **kw):
        sizes.append(batch_size)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(gptlib.commandline.report, "estimate_loss", out_of_memory)
    out = tmp_path / "m.pt"
    assert main(["train", *QUICK, "--batch-size", "3", "--steps", "3", "--out", str(out)]) == 0
    assert sizes == [3]  # the run's own batch size, not 32
    assert load_checkpoint(out).step == 3  # saved before the evaluation
    text = capsys.readouterr()
    assert "final evaluation: " in text.out  # it says what it does
    assert "final evaluation failed (CUDA out of memory)" in text.out  # and that it failed
    assert "Traceback" not in text.err


def test_a_run_that_diverges_from_its_first_step_saves_nothing_and_says_why(tmp_path, capsys):
    out = tmp_path / "m.pt"
    args = [*QUICK, "--steps", "300", "--lr", "1000", "--warmup", "0", "--samples", "0"]
    with pytest.raises(SystemExit) as e:
        main(["train", *args, "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert re.search(r"step \d+: the (loss|gradients) became", err)
    left = re.search(r"the loss left its range at step (\d+) .* at lr ([\d.e+]+)", err)
    lower = float(re.search(r"run it with --lr ([\d.e+-]+) or lower", err)[1])
    assert int(left[1]) <= 1 and lower < float(left[2])  # how to start again
    assert os.listdir(tmp_path) == []  # nothing healthy to keep, no lock


# -- resume says what changed ---------------------------------------------------------------------


def test_resume_says_which_settings_changed(tmp_path, capsys):
    ck = tmp_path / "a.pt"
    assert _train(ck, "--steps", "2") == 0
    capsys.readouterr()
    flags = ["--steps", "4", "--lr", "0.01", "--batch-size", "8", "--seed", "5"]
    assert main(["train", "--resume", str(ck), "--no-progress", "--samples", "0", *flags]) == 0
    text = capsys.readouterr().out
    changed = [line for line in text.splitlines() if line.startswith("changed from step 2")]
    assert len(changed) == 1
    for flag, before, after in [("--lr", "0.002", "0.01"), ("--batch-size", "4", "8")]:
        assert re.search(rf"{flag} {before} -> {after}", changed[0]), changed
    assert "--seed 0 -> 5" in changed[0] and "drawn afresh from seed 5" in text
    assert load_checkpoint(ck).training["settings"]["seed"] == 5


# -- one line for each mistake --------------------------------------------------------------------


def _error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    captured = capsys.readouterr()
    assert e.value.code == 2, captured
    lines = [x for x in captured.err.strip().splitlines() if not x.startswith(("usage:", " "))]
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err  # argparse: + usage
    return lines[0]


@pytest.fixture(scope="module")
def wide_vocabulary(tmp_path_factory):
    """A running-text model of 300 distinct characters."""
    folder = tmp_path_factory.mktemp("wide")
    text = folder / "wide.txt"
    text.write_text("".join(chr(0x4E00 + i) for i in range(300)) * 4, encoding="utf-8")
    out = folder / "w.pt"
    argv = ["train", *QUICK, "--data", str(text), "--format", "text", "--steps", "1"]
    assert main([*argv, "--samples", "0", "--out", str(out)]) == 0
    return out


def test_a_prompt_outside_the_vocabulary_is_summarised(wide_vocabulary, capsys):
    capsys.readouterr()
    err = _error(["sample", str(wide_vocabulary), "--prompt", "hello"], capsys)
    assert "'h'" in err and "300" in err and len(err) < 300


def test_an_empty_prompt_on_running_text(wide_vocabulary, capsys):
    capsys.readouterr()
    assert "empty" in _error(["sample", str(wide_vocabulary), "--prompt", ""], capsys)


def test_a_truncated_checkpoint(wide_vocabulary, tmp_path, capsys):
    half = tmp_path / "half.pt"
    data = wide_vocabulary.read_bytes()
    half.write_bytes(data[: len(data) // 2])
    err = _error(["sample", str(half)], capsys)
    assert "truncated" in err and "If you are seeing this error" not in err


def test_sampling_many_documents_goes_in_batches(tmp_path, capsys, monkeypatch):
    out = tmp_path / "n.pt"
    assert _train(out, "--steps", "1") == 0
    calls = []
    real = gptlib.commandline.samples.sample_documents

    def counting(model, tokenizer, num, *a, **k):
        calls.append(num)
        return real(model, tokenizer, num, *a, **k)

    monkeypatch.setattr(gptlib.commandline.samples, "sample_documents", counting)
    capsys.readouterr()
    main(["sample", str(out), "--num", "600", "--max-len", "4"])
    assert len(capsys.readouterr().out.splitlines()) == 600
    assert sum(calls) == 600 and max(calls) < 600


def _refused_before_work(argv, capsys, tmp_path, pattern):
    err = _error(argv, capsys)
    assert re.search(pattern, err), err
    assert not (tmp_path / "x.pt").exists()
    return err


@pytest.mark.parametrize(
    "extra, pattern",
    [
        (["--seed", str(2**70)], r"--seed: .*2\*\*63"),
        (["--device", "meta"], r"'meta' is not one gptlib runs on"),
        (["--block-size", "1"], r"--block-size: expected a whole number >= 2"),
        (["--step", "10"], r"unrecognized arguments: --step"),
        (["--data", "/dev/null"], r"not a regular file"),
    ],
)
def test_mistakes_are_refused_in_one_line_before_work(tmp_path, capsys, extra, pattern):
    argv = ["train", *QUICK, "--out", str(tmp_path / "x.pt"), *extra]
    _refused_before_work(argv, capsys, tmp_path, pattern)


def test_a_dangling_symlink_as_out(tmp_path, capsys):
    os.symlink(tmp_path / "nowhere" / "m.pt", tmp_path / "x.pt")
    err = _error(["train", *QUICK, "--out", str(tmp_path / "x.pt")], capsys)
    assert "symbolic link" in err and os.listdir(tmp_path) == ["x.pt"]


def test_a_file_of_nul_bytes_is_not_text(tmp_path, capsys):
    nul = tmp_path / "zeros.txt"
    nul.write_bytes(b"\0" * 5000)
    err = _error(["train", *QUICK, "--data", str(nul), "--out", str(tmp_path / "x.pt")], capsys)
    assert "control characters" in err and not (tmp_path / "x.pt").exists()


def test_a_step_that_cannot_fit_in_memory_is_refused_before_the_data_is_read(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(gptlib.commandline.needs, "available_memory", lambda device: 10**9)
    monkeypatch.setattr(
        gptlib.commandline.large_text, "load_corpus", lambda *a, **k: pytest.fail("data was read")
    )
    argv = ["train", *QUICK, "--preset", "textbook", "--batch-size", "4096"]
    err = _refused_before_work([*argv, "--out", str(tmp_path / "x.pt")], capsys, tmp_path, "GB")
    assert "--batch-size 4096" in err and "free" in err


def test_a_local_file_named_like_a_built_in_corpus_is_reported(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "names").write_text("my own names\n")
    assert main(["train", *QUICK, "--steps", "1", "--samples", "0", "--out", "m.pt"]) == 0
    assert "--data ./names" in capsys.readouterr().out


def test_a_warmup_longer_than_the_run_is_explained(tmp_path, capsys):
    assert (
        main(["train", *QUICK, "--steps", "4", "--samples", "0", "--out", str(tmp_path / "m.pt")])
        == 0
    )
    assert re.search(r"warmup of 100 steps is longer than this run of 4", capsys.readouterr().out)
