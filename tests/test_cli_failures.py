"""The run survives the machine failing it: a full disk, a name the file system refuses, a device
as --out, SIGQUIT, a step that never ends, a failure at the end, a divergence; real processes,
real signals and, where this machine lets the tests mount one, a real full file system (tmpfs)."""

import errno
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
import torch
from processes import as_from_a_terminal, wait_for_line

import gptlib.checkpoint
import gptlib.commandline.cli
import gptlib.commandline.large_text
import gptlib.commandline.report
from gptlib.checkpoint import load_checkpoint
from gptlib.commandline.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = ["--preset", "microgpt", "--batch-size", "4", "--no-progress", "--device", "cpu"]
LONG = [*QUICK, "--steps", "100000", "--eval-every", "100000", "--samples", "0"]


def _env(**extra):
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}


def _cli(*args, code=None, **env):
    """`python -m gptlib ARGS` (or `python -c CODE ARGS`) in a process of its own, stdin closed
    (not a terminal: a run that cannot be saved does not wait for Enter)."""
    command = ["-c", code] if code else ["-m", "gptlib"]
    return subprocess.Popen(
        [sys.executable, *command, *args],
        preexec_fn=as_from_a_terminal,  # even if this process was started with them ignored
        cwd=ROOT,
        env=_env(**env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _refused(argv, capsys, pattern):
    with pytest.raises(SystemExit) as e:
        main(argv)
    captured = capsys.readouterr()
    assert e.value.code == 2, captured
    assert re.search(pattern, captured.err), captured.err
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "training:" not in captured.out  # refused before any work
    return captured.err


@pytest.fixture
def small_disk(tmp_path):
    """A real file system of 8 MB, mounted for the test (tmpfs), or a skip saying why not."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root; the failing save is simulated below")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder, leave=0):
    """Fill the file system of `folder` until `leave` bytes (about) are free."""
    with open(folder / "filler", "wb") as f:
        try:
            while True:
                free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
                if free <= leave:
                    break
                f.write(b"\0" * min(65536, max(4096, free - leave)))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC


# -- a full disk ----------------------------------------------------------------------------------


def test_a_full_disk_is_refused_before_the_first_step(small_disk, capsys):
    _fill(small_disk, leave=20_000)
    err = _refused(
        ["train", *QUICK, "--steps", "2", "--out", str(small_disk / "m.pt")],
        capsys,
        r"not enough space for the checkpoint in .*disk: it needs about [\d,]+ bytes and [\d,]+ "
        r"bytes are free",
    )
    assert str(small_disk) in err
    assert sorted(os.listdir(small_disk)) == ["filler"]  # no lock, no temporary file


def test_a_disk_that_fills_during_the_run_keeps_the_run_and_the_old_checkpoint(
    small_disk, tmp_path, capsys
):
    out = small_disk / "m.pt"
    assert main(["train", *QUICK, "--steps", "2", "--samples", "0", "--out", str(out)]) == 0
    before = out.read_bytes()
    spare = tmp_path / "spare"
    spare.mkdir()
    proc = _cli("train", "--resume", str(out), *LONG, TMPDIR=str(spare))
    try:
        wait_for_line(proc, r"^training: ")
        _fill(small_disk)  # the disk is full before the save
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, (stdout, stderr)
    assert "Traceback" not in stderr
    line = [x for x in stderr.splitlines() if "instead" in x][0]
    assert f"could not save {out}" in line and "not enough space" in line
    rescued = re.search(r"saved to (\S+) instead", line)[1]
    assert os.path.dirname(rescued) == str(spare)  # the disk's own folder had no room either
    assert load_checkpoint(rescued).step > 2  # the run is kept
    assert out.read_bytes() == before  # the old checkpoint is whole
    assert sorted(os.listdir(small_disk)) == ["filler", "m.pt"]  # no temporary file, no lock
    resume = [x for x in stdout.splitlines() if x.startswith("continue with: ")][0]
    assert shlex.split(resume.split(": ", 1)[1])[-1] == rescued


class _FullAfter:
    """A file whose writes fail, as the kernel's write(2) does on a full disk, once `room` bytes
    are written."""

    def __init__(self, f, room):
        self.f, self.room = f, room

    def write(self, data):
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_save_failing_at_the_os_call_goes_beside_it(tmp_path, capsys, monkeypatch):
    """The same, without a mount: the first save's writes fail with ENOSPC part way, as on a
    full disk, so the run is saved under a short name in the same folder."""
    real = os.fdopen
    calls = []

    def full_once(fd, *a, **k):
        calls.append(fd)
        f = real(fd, *a, **k)
        return _FullAfter(f, 10_000) if len(calls) == 1 else f

    monkeypatch.setattr(gptlib.checkpoint.os, "fdopen", full_once)
    out = tmp_path / "m.pt"
    assert main(["train", *QUICK, "--steps", "3", "--samples", "0", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    rescued = re.search(r"saved to (\S+) instead", err)[1]
    assert os.path.dirname(rescued) == str(tmp_path) and not out.exists()
    assert load_checkpoint(rescued).step == 3
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(rescued)]


def test_a_second_save_that_fails_leaves_the_first(tmp_path, capsys, monkeypatch):
    real = gptlib.checkpoint.torch.save
    calls = []

    def full_the_second_time(payload, f):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real(payload, f)

    monkeypatch.setattr(gptlib.checkpoint.torch, "save", full_the_second_time)
    out = tmp_path / "m.pt"
    assert main(["train", *QUICK, "--steps", "3", "--samples", "0", "--out", str(out)]) == 0
    text = capsys.readouterr()
    assert "could not be added" in text.out and "Traceback" not in text.err
    ck = load_checkpoint(out)
    assert ck.step == 3 and "val_loss" not in ck.extra  # the first save, whole
    assert os.listdir(tmp_path) == ["m.pt"]


# -- names the file system refuses ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["a" * 300 + ".pt", "é" * 130 + ".pt"])
def test_a_name_too_long_for_the_file_system_is_refused_before_work(tmp_path, capsys, name):
    # 300 characters; 130 characters that are 263 bytes (the limit counts bytes)
    err = _refused(
        ["train", *QUICK, "--out", str(tmp_path / name)], capsys, r"\d+ bytes long.*at most 255"
    )
    assert "shorter --out" in err and os.listdir(tmp_path) == []


def test_a_path_too_long_for_the_file_system_is_refused_before_work(tmp_path, capsys):
    deep = tmp_path.joinpath(*(["d" * 200] * 22), "m.pt")  # over 4,096 bytes
    _refused(["train", *QUICK, "--out", str(deep)], capsys, r"a path of [\d]+ bytes")
    assert os.listdir(tmp_path) == []


# -- only regular files are written ---------------------------------------------------------------


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_pipe_or_a_socket_as_out_is_never_written(tmp_path, capsys, overwrite):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    err = _refused(["train", *QUICK, "--out", str(fifo), *overwrite], capsys, "named pipe")
    assert "--overwrite" in err  # says it is refused with it too
    sock = _socket(tmp_path / "sock")
    try:
        _refused(["train", *QUICK, "--out", str(tmp_path / "sock"), *overwrite], capsys, "socket")
    finally:
        sock.close()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_ISSOCK(
        os.stat(tmp_path / "sock").st_mode
    )


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mknod needs root")
def test_a_device_as_out_is_never_replaced_even_as_root(tmp_path, capsys):
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null
    _refused(["train", *QUICK, "--out", str(null), "--overwrite"], capsys, "a character device")
    assert stat.S_ISCHR(os.stat(null).st_mode)
    with pytest.raises(gptlib.checkpoint.CheckpointError, match="not a regular file"):
        gptlib.checkpoint.save_checkpoint(null, *_tiny())  # the save itself refuses it too
    assert stat.S_ISCHR(os.stat(null).st_mode)


def _tiny():
    from gptlib.config import preset
    from gptlib.model import GPT
    from gptlib.tokenizer import CharTokenizer

    tokenizer = CharTokenizer.from_text("ab")
    return GPT(preset("microgpt", tokenizer.vocab_size)), tokenizer


# -- stopping -------------------------------------------------------------------------------------


def test_sigquit_keeps_the_run(tmp_path):
    out = tmp_path / "m.pt"
    proc = _cli("train", *LONG, "--out", str(out))
    try:
        wait_for_line(proc, r"^training: ")
        time.sleep(0.3)
        proc.send_signal(signal.SIGQUIT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGQUIT, (stdout, stderr)
    assert "Traceback" not in stderr and load_checkpoint(out).step >= 1
    assert os.listdir(tmp_path) == ["m.pt"]  # no lock left


# A step that never ends: step 3 blocks in C for a minute (as one huge tensor operation does),
# where no Python signal handler can run; the stop signals reach the process's other threads
# meanwhile, as they do while torch's own threads compute.
STUCK = """
import ctypes, runpy, signal, sys
import gptlib.commandline.run
real = gptlib.commandline.run.train_step
def train_step(*a, **k):
    if k["step"] == 3:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("stuck", flush=True)
        ctypes.CDLL(None).sleep(60)
    return real(*a, **k)
gptlib.commandline.run.train_step = train_step
sys.argv[0] = "gptlib"
runpy.run_module("gptlib", run_name="__main__")
"""


def test_a_second_ctrl_c_ends_a_step_that_never_ends(tmp_path, capsys):
    out = tmp_path / "m.pt"
    assert main(["train", *QUICK, "--steps", "2", "--samples", "0", "--out", str(out)]) == 0
    before = out.read_bytes()
    proc = _cli("train", "--resume", str(out), "--steps", "100", "--no-progress", code=STUCK)
    try:
        wait_for_line(proc, r"^stuck")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - began
    finally:
        proc.kill()
    assert proc.returncode == 130, (stdout, stderr)
    assert took < 10  # not the minute the step would take
    assert "Traceback" not in stderr and "ended at once" in stderr
    assert re.search(rf"{re.escape(str(out))} is kept as it was, saved \d+ s ago", stderr)
    assert out.read_bytes() == before and os.listdir(tmp_path) == ["m.pt"]  # no lock, no temp


def test_a_step_expected_to_take_too_long_is_refused_before_work(tmp_path, capsys):
    err = _refused(
        ["train", "--block-size", "20000", "--no-progress", "--out", str(tmp_path / "m.pt")],
        capsys,
        r"expected to take about [\d,]+ s on cpu .* more than --max-step-seconds 120",
    )
    assert "--block-size" in err and os.listdir(tmp_path) == []


# -- nothing at the end is a traceback ------------------------------------------------------------


def test_a_bigram_baseline_that_cannot_fit_is_skipped_in_one_line(tmp_path, capsys, monkeypatch):
    assert (
        gptlib.commandline.report.bigram_memory(30_000) > 7.2e9
    )  # the 30,000-symbol vocabulary
    monkeypatch.setattr(gptlib.commandline.report, "available_memory", lambda device: 500)
    out = tmp_path / "m.pt"
    assert main(["train", *QUICK, "--steps", "2", "--samples", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"bigram baseline was skipped: its table of 27 x 27 pairs needs", text)
    assert "final train loss" in text and "bigram baseline val loss" not in text
    assert "val_loss" in load_checkpoint(out).extra  # the evaluation that did run is kept


# -- a divergence you can come back from ----------------------------------------------------------


def test_a_divergence_keeps_the_last_healthy_state_and_its_advice_works(tmp_path, capsys):
    out = tmp_path / "m.pt"
    flags = ["--steps", "300", "--warmup", "100", "--eval-every", "10", "--lr", "30"]
    assert main(["train", *QUICK, *flags, "--samples", "0", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    left = re.search(r"step (\d+): the loss left its range \((.*?)\) at lr ([\d.e+-]+)", err)
    assert left, err
    kept = int(re.search(r"last healthy state \(step (\d+)\)", err)[1])
    ck = load_checkpoint(out)
    assert ck.step == kept <= int(left[1]) and len(ck.history) == kept
    assert max(ck.history.loss) < 3.3 + 1.0  # nothing out of range before the state kept
    command = shlex.split(err.split("continue with a lower learning rate: ")[1])
    lower = float(command[command.index("--lr") + 1])
    assert lower < float(left[3])  # lower than the rate at which the loss left its range
    assert command[:4] == ["python", "-m", "gptlib", "train"]
    assert main([*command[3:], "--no-progress", "--samples", "0"]) == 0  # the advice works
    ck = load_checkpoint(out)
    assert ck.step == 300 and ck.extra["val_loss"] < 3.3  # better than a uniform guess


# -- smaller --------------------------------------------------------------------------------------


def test_the_already_exists_advice_is_quoted_for_a_shell(tmp_path, capsys):
    out = tmp_path / "a b;touch hacked" / "m.pt"
    assert main(["train", *QUICK, "--steps", "1", "--samples", "0", "--out", str(out)]) == 0
    capsys.readouterr()
    err = _refused(["train", *QUICK, "--out", str(out)], capsys, "already exists")
    words = shlex.split(err.split("continue that run with ")[1].split(", or pass")[0])
    assert words == ["--resume", str(out)]


def test_a_text_file_given_to_resume_is_called_a_text_file(tmp_path, capsys):
    text = tmp_path / "input.txt"
    text.write_text("some text to train on\n" * 20)
    err = _refused(["train", "--resume", str(text)], capsys, "is a text file, not a checkpoint")
    assert "could run" not in err and "--data" in err


def test_sample_into_head_ends_quietly():
    asset = os.path.join(ROOT, "assets", "names-microgpt-h1.pt")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gptlib", "sample", asset, "--num", "5000", "--device", "cpu"],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = proc.stdout.readline()
    proc.stdout.close()  # what `| head -1` does after its line
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert first.strip() and "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_bigram_baseline_in_chunks_is_the_bigram_loss():
    from gptlib.bigram import bigram_loss
    from gptlib.data import load_corpus

    corpus = load_corpus("names")
    whole = bigram_loss(corpus.train, corpus.val, corpus.vocab_size)
    chunked = gptlib.commandline.report.chunked_bigram_loss(
        corpus.train, corpus.val, corpus.vocab_size, 1000
    )
    assert abs(whole - chunked) < 1e-5


@pytest.mark.parametrize(
    "text",
    [
        "A long line of running text, longer than fifty characters, again and again.\r\n" * 40,
        ("Para one is here.\nand goes on.\n\nPara two\u2028too.\n\n" * 30) + "\n\n",
        "one single line without an end " * 50,
    ],
)
def test_a_large_text_read_in_pieces_is_the_corpus_read_whole(tmp_path, monkeypatch, text):
    from gptlib.commandline.run import corpus_fingerprint
    from gptlib.data import load_corpus

    path = tmp_path / "big.txt"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # with a byte-order mark
    monkeypatch.setattr(
        gptlib.commandline.large_text, "STREAM_CHARS", 7
    )  # pieces cut lines and \r\n apart
    streamed = gptlib.commandline.large_text._stream_text_corpus(str(path), "auto")
    whole = load_corpus(str(path))
    assert streamed.tokenizer.itos == whole.tokenizer.itos and streamed.reason == whole.reason
    assert streamed.train.dtype == torch.uint8  # a byte a character, not 8
    assert torch.equal(streamed.train.long(), whole.train)
    assert torch.equal(streamed.val.long(), whole.val)
    assert corpus_fingerprint(streamed) == whole.fingerprint()


def test_a_large_file_of_lines_is_left_to_load_corpus(tmp_path):
    path = tmp_path / "names.txt"
    path.write_text("emma\nolivia\nava\n" * 100)
    assert gptlib.commandline.large_text._stream_text_corpus(str(path), "auto") is None
