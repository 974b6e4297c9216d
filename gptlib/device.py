"""Which device to run on (cuda, then mps, then cpu, unless told otherwise) and in which
number format the training forward pass runs."""

from __future__ import annotations

import os

import torch

from gptlib.language import _

ENV_VAR = "GPTLIB_DEVICE"

# `--dtype`: float32 runs as is; bfloat16 runs the forward pass under torch.autocast (matmuls in
# bfloat16, reductions and the weights in float32), a GPU's fast path. None means no autocast.
DTYPES: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}


def choose_device(requested: str | None = None) -> torch.device:
    """`requested` (or $GPTLIB_DEVICE) wins when given; otherwise the fastest one available."""
    name = requested or os.environ.get(ENV_VAR)
    if name:
        try:
            device = torch.device(name)
        except RuntimeError:
            raise ValueError(
                _("unknown device {name}; use cpu, cuda, cuda:N or mps").format(name=repr(name))
            ) from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                _("device {name} was asked for, but CUDA is not available here").format(
                    name=repr(name)
                )
            )
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(
                _("device {name} was asked for, but MPS is not available here").format(
                    name=repr(name)
                )
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
