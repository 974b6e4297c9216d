"""Two processes under torchrun (gloo, CPU) train exactly as one process given their global batch."""

import os
import socket
import subprocess
import sys

import torch

from gptlib.checkpoint import load_checkpoint
from gptlib.commandline import distributed
from gptlib.commandline.cli import TRAIN_DEFAULTS
from gptlib.data import load_corpus, sample_batch
from gptlib.model import GPT
from gptlib.train import learning_rate, make_optimizer, train_step

STEPS, BATCH = 4, 4
TIMEOUT = 120  # seconds; a hang fails the test instead of stalling the suite


def _torchrun(tmp_path, target: list[str]) -> subprocess.CompletedProcess:
    with socket.socket() as s:  # a free port on the loopback interface
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc-per-node=2",
        "--master-addr=127.0.0.1",
        f"--master-port={port}",
        *target,
    ]
    # A rank that crashes in C++ dumps every Python thread's stack into stderr (faulthandler).
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )


def _train_args(out):
    return [
        "train",
        "--preset",
        "microgpt",
        "--steps",
        str(STEPS),
        "--batch-size",
        str(BATCH),
        "--device",
        "cpu",
        "--no-progress",
        "--samples",
        "2",
        "--out",
        str(out),
    ]


def test_two_processes_equal_one_with_the_global_batch(tmp_path):
    out = tmp_path / "runs" / "ddp.pt"
    res = _torchrun(tmp_path, ["-m", "gptlib", *_train_args(out)])
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("saved ") == 1 and res.stdout.count("data names:") == 1  # rank 0 only
    assert "processes 2" in res.stdout
    assert sorted(os.listdir(out.parent)) == ["ddp.pt"]  # one checkpoint, no temporary files
    ck = load_checkpoint(out)
    assert ck.step == STEPS and ck.training["world_size"] == 2

    # One process, the same init, each step the windows of rank 0 then those of rank 1.
    corpus = load_corpus("names")
    seed, lr = TRAIN_DEFAULTS["seed"], TRAIN_DEFAULTS["lr"]
    torch.manual_seed(seed)
    model = GPT(ck.config)
    gens = [torch.Generator().manual_seed(distributed.rank_seed(seed, r)) for r in (0, 1)]
    opt = make_optimizer(model, lr)
    for step in range(STEPS):
        windows = [sample_batch(corpus.train, BATCH, ck.config.block_size, g) for g in gens]
        idx, labels = (torch.cat(parts) for parts in zip(*windows, strict=True))
        rate = learning_rate(
            step, lr, TRAIN_DEFAULTS["warmup"], STEPS, TRAIN_DEFAULTS["schedule"], lr / 10
        )
        train_step(model, opt, idx, labels, rate, 1.0, step=step)
    one, two = model.state_dict(), ck.model.state_dict()
    diff = max((one[k] - two[k]).abs().max().item() for k in one)
    print(f"max |two processes - one process| over all weights: {diff:.2e}")
    assert diff < 1e-5
    # each rank drew from its own seed, and the checkpoint kept every rank's generator state
    assert torch.equal(gens[0].get_state(), ck.training["rng"][0]["batches"])
    assert torch.equal(gens[1].get_state(), ck.training["rng"][1]["batches"])


FAILING = """
import os, sys
import gptlib.commandline.cli, gptlib.commandline.run
real = gptlib.commandline.run.TrainingRun.train
def failing(run, should_stop, on_step=None):
    def cb(hist):
        on_step(hist)
        if len(hist) == 2 and os.environ["RANK"] == "1":
            raise RuntimeError("rank 1 gave up at step 2")
    return real(run, should_stop, cb)
gptlib.commandline.run.TrainingRun.train = failing
sys.exit(gptlib.commandline.cli.main(sys.argv[1:]))
"""


def test_a_failing_rank_stops_the_run_with_its_error(tmp_path):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    out = tmp_path / "never.pt"
    args = _train_args(out)
    args[args.index("--steps") + 1] = "200"
    res = _torchrun(tmp_path, [str(script), *args])  # returns well before TIMEOUT
    assert res.returncode != 0
    assert "rank 1 gave up at step 2" in res.stderr
    assert not out.exists()
