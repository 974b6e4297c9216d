"""The machinery every `check_*` function shares."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass
class CheckResult:
    """The outcome of a check; shows as its message in a notebook, and is truthy when passed."""

    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return self.message


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _close(a, b, atol: float, rtol: float) -> bool:
    a, b = _as_tuple(a), _as_tuple(b)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        if x.shape != y.shape:
            return False
        if not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True):
            return False
    return True


def compare(
    name: str,
    user_fn: Callable,
    reference_fn: Callable,
    make_inputs: Callable[[torch.Generator], tuple],
    mistakes: Sequence[tuple[str, Callable]] = (),
    trials: int = 3,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> CheckResult:
    """Run `user_fn` and `reference_fn` on `trials` seeded random inputs.

    `mistakes` pairs a hint with a wrong implementation: when the reader's output matches a
    wrong implementation, that hint is the message.
    """
    for trial in range(trials):
        inputs = make_inputs(torch.Generator().manual_seed(1000 + trial))
        expected = reference_fn(*inputs)
        try:
            got = user_fn(*inputs)
        except NotImplementedError:
            return CheckResult(False, f"✗ {name}: not written yet (the function raises NotImplementedError)")
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {name}: your function raised {type(e).__name__}: {e}")
        exp_t, got_t = _as_tuple(expected), _as_tuple(got)
        for e_, g_ in zip(exp_t, got_t, strict=False):
            e_shape, g_shape = tuple(torch.as_tensor(e_).shape), tuple(torch.as_tensor(g_).shape)
            if e_shape != g_shape:
                return CheckResult(
                    False, f"✗ {name}: output has shape {list(g_shape)}, expected {list(e_shape)}"
                )
        if not _close(got, expected, atol, rtol):
            for hint, wrong_fn in mistakes:
                try:
                    wrong = wrong_fn(*inputs)
                except Exception:
                    continue
                if _close(got, wrong, atol, rtol):
                    return CheckResult(False, f"✗ {name}: {hint}")
            diff = max(
                float((torch.as_tensor(g_).double() - torch.as_tensor(e_).double()).abs().max())
                for e_, g_ in zip(exp_t, got_t, strict=False)
            )
            return CheckResult(
                False, f"✗ {name}: values differ from the reference (largest difference {diff:.3g})"
            )
    return CheckResult(True, f"✓ {name}: matches the reference on {trials} random inputs")
