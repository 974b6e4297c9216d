"""Training with several processes: PyTorch's DistributedDataParallel, started by `torchrun`.

    torchrun --standalone --nproc_per_node=2 -m gptlib train ...

torchrun starts one process per rank and tells each, through environment variables (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), who it is and where to meet the others. Each
rank holds a full copy of the model, draws its own windows from its own seed, and after every
backward pass DistributedDataParallel averages the gradients across ranks, so every copy takes the
same optimiser step. Rank 0 alone prints, evaluates and saves. One process without torchrun is
simply rank 0 of 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# How long a rank waits for the others at start-up or in a collective before it gives up. A rank
# that crashes is noticed by torchrun at once (it stops the others); this bounds the rest.
TIMEOUT = timedelta(minutes=10)


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that prints, evaluates and saves."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def rank_seed(seed: int, rank: int) -> int:
    """The seed of the windows rank `rank` draws: rank 0 draws what a single process would."""
    return seed + rank


def setup(device: torch.device) -> tuple[Ranks, torch.device]:
    """Join the process group torchrun prepared (gloo on CPU, NCCL on CUDA) and return this
    process's ranks and device (cuda:LOCAL_RANK on CUDA). Without torchrun: rank 0 of 1."""
    if not launched_by_torchrun():
        return Ranks(), device
    ranks = Ranks(
        int(os.environ["RANK"]),
        int(os.environ["WORLD_SIZE"]),
        int(os.environ.get("LOCAL_RANK", "0")),
    )
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    elif device.type == "cpu":
        backend = "gloo"
    else:
        raise ValueError(
            f"torchrun training runs on cpu (gloo) or cuda (NCCL), not on {device.type}; "
            "pass --device cpu"
        )
    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=TIMEOUT)
    return ranks, device


def wrap(model: torch.nn.Module, ranks: Ranks, device: torch.device) -> torch.nn.Module:
    """The module the training forward runs through: DDP when there are several ranks."""
    if not ranks.distributed:
        return model
    return DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


def gather(obj):
    """Every rank's `obj`, in rank order (a list of one without torchrun)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def collective_device() -> torch.device:
    """Where a tensor for a collective must live: the GPU under NCCL, the CPU under gloo."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def finish() -> None:
    """After a run that ended well: wait until every rank is done, so no rank tears the group
    down while another still talks to it (a gloo peer that vanishes aborts the others)."""
    if dist.is_initialized():
        dist.barrier()


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
