"""Nothing a user has is lost: where a run saves, Ctrl-C at any moment, exact resuming."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from processes import as_from_a_terminal, wait_for_line

import gptlib.commandline.cli
import gptlib.commandline.large_text
import gptlib.commandline.report
import gptlib.commandline.run
import gptlib.commandline.signals
from gptlib.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from gptlib.commandline.claim import claim, output_path
from gptlib.commandline.cli import build_parser, main
from gptlib.commandline.run import random_states, restore_random_states

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# dropout > 0, so the torch generator's state matters for an exact resume as much as the windows'
QUICK = ["--preset", "microgpt", "--batch-size", "4", "--no-progress", "--device", "cpu"]
RUN = [*QUICK, "--dropout", "0.1", "--steps", "8", "--eval-every", "3", "--warmup", "3"]
STEPS = 8


@pytest.fixture(autouse=True)
def ctrl_c_as_in_a_terminal():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal, even where this test process was
    started with SIGINT ignored (a background job of a script does that)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers can only be set in the main thread",
)


def _train(out, *extra, samples="0"):
    return main(["train", *RUN, "--samples", samples, "--out", str(out), *extra])


def _refused(argv, capsys, message):
    with pytest.raises(SystemExit) as e:
        main(argv)
    captured = capsys.readouterr()
    assert e.value.code == 2, captured
    assert re.search(message, captured.err), captured.err
    assert captured.out == "" and "Traceback" not in captured.err  # nothing trained
    return captured.err


def _resume(path, *extra):
    """Continue the run saved in `path`, on the CPU, quietly."""
    args = ["--no-progress", "--samples", "0", "--device", "cpu", *extra]
    return main(["train", "--resume", str(path), *args])


def _max_weight_difference(a, b) -> float:
    wa, wb = load_checkpoint(a).model.state_dict(), load_checkpoint(b).model.state_dict()
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The run that never stopped: 8 steps, dropout 0.1, cosine schedule."""
    out = tmp_path_factory.mktemp("whole") / "whole.pt"
    assert _train(out) == 0
    return out


# -- where the checkpoint goes ------------------------------------------------------------------


def test_out_is_never_the_data_file(tmp_path, capsys):
    data = tmp_path / "my.txt"
    data.write_text("hello world, a text of mine\n" * 40, encoding="utf-8")
    before = data.read_bytes()
    _refused(
        ["train", *QUICK, "--data", str(data), "--out", str(data)],
        capsys,
        r"--out '.*my\.txt' is the data file",
    )
    # the same file through another spelling of its path
    os.chdir(tmp_path)
    _refused(
        ["train", *QUICK, "--data", "my.txt", "--out", f"../{tmp_path.name}/my.txt"],
        capsys,
        "is the data file",
    )
    assert data.read_bytes() == before


def test_an_existing_out_is_refused_unless_asked(tmp_path, capsys):
    out = tmp_path / "model.pt"
    assert _train(out, "--steps", "2") == 0
    first = out.read_bytes()
    capsys.readouterr()
    err = _refused(
        ["train", *QUICK, "--steps", "1", "--out", str(out)],
        capsys,
        r"already exists \(a checkpoint at step 2 trained on names\); nothing was replaced",
    )
    assert "--overwrite" in err and f"--resume {out}" in err
    assert out.read_bytes() == first
    note = tmp_path / "notes.txt"
    note.write_text("my notes")
    _refused(
        ["train", *QUICK, "--out", str(note)], capsys, "a file of 8 bytes that is not a gptlib"
    )
    assert note.read_text() == "my notes"
    _refused(  # --overwrite replaces only a checkpoint (recognised by its content)
        ["train", *QUICK, "--out", str(note), "--overwrite"], capsys, "only a checkpoint written"
    )
    assert note.read_text() == "my notes"
    # --overwrite replaces it
    assert (
        main(["train", *QUICK, "--steps", "1", "--samples", "0", "--out", str(out), "--overwrite"])
        == 0
    )
    assert load_checkpoint(out).step == 1
    # resuming in place needs no flag; with --resume and no --out, the run continues in place
    assert _resume(out, "--steps", "3") == 0
    assert load_checkpoint(out).step == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt", "notes.txt"]  # no lock left


@pytest.mark.parametrize("kind", ["trailing separator", "existing folder"])
def test_a_folder_as_out_is_refused_before_training(tmp_path, capsys, kind):
    if kind == "existing folder":
        out = tmp_path / "runs"
        out.mkdir()
        out = str(out)
    else:
        out = str(tmp_path / "newdir") + os.sep
    _refused(
        ["train", *QUICK, "--steps", "5000", "--out", out],
        capsys,
        r"names a folder; the checkpoint is one file: give a file name such as --out .*model\.pt",
    )


def test_a_claimed_out_is_refused_in_process(tmp_path, capsys):
    out = str(tmp_path / "m.pt")
    with claim(out):
        _refused(["train", *QUICK, "--out", out], capsys, r"another training run \(process \d+\)")
    with claim(out):  # released: it can be claimed again
        pass
    assert not os.path.exists(out + ".lock")


def _cli(*args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "gptlib", *args],
        preexec_fn=as_from_a_terminal,  # even if this process was started with them ignored
        cwd=kw.get("cwd", ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_writing_the_same_out(tmp_path):
    out = str(tmp_path / "shared.pt")
    first = _cli("train", *QUICK, "--steps", "400", "--samples", "0", "--out", out)
    try:
        wait_for_line(first, r"^preset ")  # it holds the claim and is training
        second = _cli("train", *QUICK, "--steps", "2", "--samples", "0", "--out", out)
        s_out, s_err = second.communicate(timeout=120)
        f_out, f_err = first.communicate(timeout=300)
    finally:
        first.kill()
    assert second.returncode == 2, (s_out, s_err)
    assert "another training run" in s_err and out in s_err and "Traceback" not in s_err
    assert first.returncode == 0 and f"saved {out}" in f_out, f_err
    assert "saved" not in s_out
    assert load_checkpoint(out).step == 400  # the first run's work, not replaced


def test_a_file_that_appears_during_the_run_is_not_replaced(tmp_path, capsys, monkeypatch):
    out = tmp_path / "m.pt"
    real = gptlib.commandline.large_text.estimate_loss

    def someone_writes(*a, **k):  # another program writes `out` while this run trains
        if not out.exists():
            out.write_text("theirs")
        return real(*a, **k)

    # the step's validation loss
    monkeypatch.setattr(gptlib.commandline.large_text, "estimate_loss", someone_writes)
    assert _train(out, "--steps", "2") == 0
    text = capsys.readouterr().out
    assert out.read_text() == "theirs"
    assert "appeared while training" in text and f"saved {tmp_path / 'm-1.pt'}" in text
    assert load_checkpoint(tmp_path / "m-1.pt").step == 2


def test_save_checkpoint_without_overwrite_never_replaces(tmp_path, small_microgpt):
    from gptlib.model import GPT
    from gptlib.tokenizer import CharTokenizer

    path = tmp_path / "c.pt"
    path.write_text("keep me")
    tok = CharTokenizer(list("abcdefghij"), bos=".")
    with pytest.raises(FileExistsError):
        save_checkpoint(path, GPT(small_microgpt), tok, overwrite=False)
    assert path.read_text() == "keep me" and os.listdir(tmp_path) == ["c.pt"]


def test_output_path_allows_resuming_in_place_only(tmp_path):
    ck = tmp_path / "a.pt"
    ck.write_text("x")
    assert output_path(str(ck), resume=str(ck)) == str(ck)
    with pytest.raises(ValueError, match="already exists"):
        output_path(str(ck), resume=str(tmp_path / "b.pt"))
    with pytest.raises(ValueError, match="not a gptlib checkpoint; --overwrite replaces only"):
        output_path(str(ck), overwrite=True)  # not a checkpoint: --overwrite does not replace it
    assert ck.read_text() == "x"


# -- Ctrl-C at any moment, and exact resuming --------------------------------------------------


def _interrupt_when(monkeypatch, module, name, call, presses=1):
    """Press Ctrl-C (send this process SIGINT) `presses` times on the `call`-th call of
    module.name."""
    real = getattr(module, name)
    count = {"n": 0}

    def wrapped(*a, **k):
        count["n"] += 1
        if count["n"] == call:
            for _ in range(presses):
                os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


@needs_main_thread
@pytest.mark.parametrize(
    "where, module, name, call, stopped_at",
    [
        # as the third step takes its learning rate, its batch just drawn: the start of a step
        ("step start", gptlib.commandline.run, "learning_rate", 3, 3),
        # after the fifth step's backward pass, before its optimiser step: mid-step
        ("mid-step", torch.nn.utils, "clip_grad_norm_", 5, 5),
        # in the validation loss after step 4 (step index 3): inside the step's evaluation
        ("evaluation", gptlib.commandline.large_text, "estimate_loss", 2, 4),
    ],
)
def test_ctrl_c_then_resume_equals_the_run_that_never_stopped(
    tmp_path, capsys, monkeypatch, whole, where, module, name, call, stopped_at
):
    part = tmp_path / "part.pt"
    _interrupt_when(monkeypatch, module, name, call)
    code = _train(part, samples="3")
    monkeypatch.undo()
    text = capsys.readouterr()
    assert code == 130 and "Traceback" not in text.err
    assert f"interrupted at step {stopped_at} of {STEPS}" in text.out
    assert "final train loss" in text.out  # one Ctrl-C still evaluates
    assert f"continue with: python -m gptlib train --resume {part}" in text.out
    assert "samples" not in text.out.split("saved")[1]
    assert load_checkpoint(part).step == stopped_at
    assert _resume(part) == 0
    ca, cb = load_checkpoint(whole), load_checkpoint(part)
    assert cb.step == STEPS and ca.history.step == cb.history.step
    assert ca.history.loss == cb.history.loss and ca.history.val_loss == cb.history.val_loss
    assert _max_weight_difference(whole, part) <= 1e-6


@needs_main_thread
def test_ctrl_c_twice_skips_the_final_evaluation_and_still_saves(tmp_path, capsys, monkeypatch):
    part = tmp_path / "p.pt"
    _interrupt_when(monkeypatch, torch.nn.utils, "clip_grad_norm_", 2, presses=2)
    assert _train(part) == 130
    text = capsys.readouterr()
    assert "Traceback" not in text.err and "final evaluation skipped" in text.out
    assert "final train loss" not in text.out and f"saved {part}" in text.out
    assert load_checkpoint(part).step == 2


@needs_main_thread
def test_ctrl_c_during_the_final_evaluation_and_the_save(tmp_path, capsys, monkeypatch, whole):
    part = tmp_path / "p.pt"
    _interrupt_when(monkeypatch, gptlib.commandline.run, "save_checkpoint", 1)
    _interrupt_when(monkeypatch, gptlib.commandline.report, "estimate_loss", 3)
    # The run had finished: it is saved before the evaluation, which the second Ctrl-C cuts
    # short; a stopped command prints no samples and says it was stopped.
    assert _train(part, samples="3") == 130
    text = capsys.readouterr()
    assert "Traceback" not in text.err
    assert "final evaluation stopped" in text.out and "saving, one moment" in text.out
    assert "samples" not in text.out and "continue with" not in text.out
    assert text.out.index("saved") < text.out.index("final evaluation stopped")
    ck = load_checkpoint(part)
    assert ck.step == STEPS and "val_loss" not in ck.extra  # the first save, whole
    assert _max_weight_difference(whole, part) == 0


@needs_main_thread
def test_ctrl_c_at_start_up_saves_nothing(tmp_path, capsys, monkeypatch):
    _interrupt_when(monkeypatch, gptlib.commandline.large_text, "load_corpus", 1)
    assert _train(tmp_path / "s.pt") == 130
    text = capsys.readouterr()
    assert "Traceback" not in text.err and "nothing was saved" in text.err
    assert os.listdir(tmp_path) == []  # no checkpoint, no lock


def test_a_real_ctrl_c_in_a_terminal_then_resume(tmp_path):
    """The user's way: the process gets SIGINT wherever it is in its step."""
    long = [*QUICK, "--dropout", "0.1", "--steps", "300", "--eval-every", "100", "--samples", "0"]
    whole = tmp_path / "whole.pt"
    assert main(["train", *long, "--out", str(whole)]) == 0
    part = str(tmp_path / "part.pt")
    proc = _cli("train", *long, "--out", part)
    try:
        wait_for_line(proc, r"^training: Ctrl-C")
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "Traceback" not in err, err
    # The signal may land after the last step (a slow machine... or a fast one): both are fine.
    assert proc.returncode in (0, 130), (out, err)
    step = load_checkpoint(part).step
    assert 1 <= step <= 300
    if step < 300:
        assert f"interrupted at step {step} of 300" in out
        assert _resume(part) == 0
    assert _max_weight_difference(whole, part) <= 1e-6


# -- random states on any device -----------------------------------------------------------------


def test_random_states_load_as_cpu_tensors_whatever_the_device(tmp_path):
    out = tmp_path / "m.pt"
    assert _train(out, "--steps", "2") == 0
    # Loading for another device must not move the generator states there: set_state takes
    # only CPU byte tensors. The meta device stands in for a GPU on a machine without one.
    ck = load_checkpoint(out, "meta")
    assert next(ck.model.parameters()).device.type == "meta"
    for states in ck.training["rng"]:
        assert all(t.device.type == "cpu" and t.dtype == torch.uint8 for t in states.values())
    g = torch.Generator()
    assert restore_random_states(ck.training["rng"][0], g, torch.device("cpu")) is None
    assert torch.equal(g.get_state(), ck.training["rng"][0]["batches"])


def test_states_saved_on_cuda_resume_on_a_cpu_with_a_note():
    g = torch.Generator().manual_seed(3)
    states = random_states(g, torch.device("cpu"))
    states["cuda"] = torch.zeros(16, dtype=torch.uint8)  # as a CUDA run saves it
    fresh = torch.Generator()
    note = restore_random_states(states, fresh, torch.device("cpu"))
    assert "saved on CUDA and continues on cpu" in note
    assert torch.equal(fresh.get_state(), g.get_state())


# -- smaller things -------------------------------------------------------------------------------


def test_resume_from_another_folder(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data" / "words.txt"
    data.parent.mkdir()
    data.write_text("\n".join(f"w{i}ord{i % 7}" for i in range(300)) + "\n", encoding="utf-8")
    monkeypatch.chdir(data.parent)
    out = tmp_path / "w.pt"
    assert (
        main(
            [
                "train",
                *QUICK,
                "--data",
                "words.txt",
                "--steps",
                "2",
                "--samples",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert load_checkpoint(out).training["settings"]["data"] == str(data)  # stored absolute
    monkeypatch.chdir(tmp_path)
    assert _resume(out, "--steps", "3") == 0
    capsys.readouterr()
    # A checkpoint that stored a relative path says where the path came from.
    ck = torch.load(out, weights_only=True)
    ck["training"]["settings"]["data"] = "words.txt"
    torch.save(ck, out)
    _refused(
        ["train", "--resume", str(out), "--steps", "4"],
        capsys,
        r"was trained on the file 'words.txt' \(the path stored in the checkpoint\), which is not "
        r"there from .*; pass --data",
    )


def test_format_on_a_built_in_corpus_is_refused(tmp_path, capsys):
    _refused(
        ["train", *QUICK, "--format", "text", "--out", str(tmp_path / "x.pt")],
        capsys,
        r"--format text reads a file given with --data; 'names' is a built-in corpus",
    )


class Thing:  # an object no checkpoint holds
    pass


def test_a_torch_file_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"thing": Thing()}, path)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    assert "is not a gptlib checkpoint" in str(e.value)
    assert "weights_only" not in str(e.value) and "weights_only=False" not in str(e.value)
    with pytest.raises(CheckpointError, match="is a folder"):
        load_checkpoint(tmp_path)


def test_help_shows_every_default():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in subparsers.items():
        for action in sub._actions:
            if action.dest in ("help", "checkpoint"):
                continue
            assert action.help and "default" in action.help, (name, action.dest)


def test_a_prompt_on_a_model_of_names_gives_names_that_start_with_it(tmp_path, capsys):
    out = tmp_path / "n.pt"
    assert _train(out, "--steps", "2") == 0
    capsys.readouterr()
    main(["sample", str(out), "--prompt", "em", "--num", "5", "--max-len", "20"])
    names = capsys.readouterr().out.splitlines()
    assert len(names) == 5 and all(n.startswith("em") for n in names)
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyz") for n in names)


def _readme_train_commands():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = f.read().split("```")[1::2]  # the fenced code blocks
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    commands = []
    for line in lines:
        if "-m gptlib train" in line:
            commands.append(line.split("-m gptlib ")[1])
        elif commands and commands[-1].endswith("\\"):  # a command continued on the next line
            commands[-1] = commands[-1][:-1] + line
    return commands


def test_the_readme_command_sequence_overwrites_nothing():
    """Run top to bottom, the README's train commands never write where an earlier one did,
    except a run resumed in place."""
    parser = build_parser()
    written = {}
    commands = _readme_train_commands()
    assert len(commands) >= 6
    for cmd in commands:
        args = parser.parse_args(cmd.split())
        out = args.out or args.resume or gptlib.commandline.cli.DEFAULT_OUT
        if out in written and not (args.resume == out or args.overwrite):
            raise AssertionError(f"{cmd!r} would replace {out} written by {written[out]!r}")
        written[out] = cmd


@needs_main_thread
def test_a_process_that_ignores_ctrl_c_keeps_ignoring_it():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup
    try:
        with gptlib.commandline.signals.StopAtStepBoundary() as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert stop.presses == 0 and not stop.requested()
    finally:
        signal.signal(signal.SIGINT, previous)


# -- the command line's run drives the taught step ------------------------------------------------


def _training_run(steps=6, dtype=None):
    from gptlib.commandline import distributed
    from gptlib.commandline.run import TrainingRun
    from gptlib.commandline.settings import TrainSettings
    from gptlib.config import microgpt
    from gptlib.data import load_corpus
    from gptlib.model import GPT

    corpus = load_corpus("names")
    settings = TrainSettings(steps=steps, batch_size=4, warmup=2, eval_every=2)
    torch.manual_seed(0)
    model = GPT(microgpt(corpus.vocab_size, dropout=0.1))
    cpu = torch.device("cpu")
    return TrainingRun(model, corpus, settings, ranks=distributed.Ranks(), device=cpu, dtype=dtype)


def test_a_training_run_is_train_with_the_command_lines_settings():
    from gptlib.train import train

    run = _training_run()
    hist = run.train(lambda: False)
    twin = _training_run()  # the same initial weights, and dropout's draws from the same state
    s = twin.settings
    expect = train(twin.model, twin.corpus.train, s.steps, s.batch_size, max_lr=s.lr,
                   warmup=s.warmup, schedule=s.schedule, min_lr=s.lr / 10,
                   val_tokens=twin.corpus.val, eval_every=s.eval_every, seed=s.seed)  # fmt: skip
    assert hist.to_dict() == expect.to_dict() and hist.val_step == [0, 2, 4, 5]
    for a, b in zip(run.model.parameters(), twin.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_training_run_stops_between_steps_when_asked():
    polls = []

    def stop_on_third_poll():
        polls.append(1)
        return len(polls) == 3

    run = _training_run(steps=10)
    hist = run.train(stop_on_third_poll)
    assert hist.interrupted and hist.step == [0, 1, 2] and run.done == 3
    # polled after every step but the last: a run that ends anyway is not "interrupted"
    polls.clear()
    run = _training_run(steps=3)
    hist = run.train(lambda: polls.append(1) or False)
    assert not hist.interrupted and len(polls) == 2


def test_bfloat16_autocast_trains_float32_weights():
    run = _training_run(steps=3, dtype=torch.bfloat16)
    hist = run.train(lambda: False)
    plain = _training_run(steps=3).train(lambda: False)
    assert all(p.dtype == torch.float32 for p in run.model.parameters())
    assert hist.loss[0] == pytest.approx(plain.loss[0], abs=0.05)  # bfloat16 rounds, same loss
    assert hist.loss[0] != plain.loss[0]


def test_the_fingerprint_read_in_chunks_is_the_corpus_own():
    from gptlib.commandline.run import corpus_fingerprint
    from gptlib.data import load_corpus

    corpus = load_corpus("names")
    assert corpus_fingerprint(corpus, chunk=1000) == corpus.fingerprint()
