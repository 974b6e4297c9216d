import pytest
import torch

from gptlib.device import choose_device


def test_default_is_best_available(monkeypatch):
    monkeypatch.delenv("GPTLIB_DEVICE", raising=False)
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else ("mps" if torch.backends.mps.is_available() else "cpu")
    )
    assert choose_device().type == expected


def test_argument_and_environment_override(monkeypatch):
    monkeypatch.setenv("GPTLIB_DEVICE", "cpu")
    assert choose_device() == torch.device("cpu")
    assert choose_device("cpu") == torch.device("cpu")


def test_unavailable_or_unknown_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        choose_device("cuda")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        choose_device("tpu")
