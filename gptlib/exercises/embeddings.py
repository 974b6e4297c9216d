"""Chapter 01 exercise: turn token ids into the vectors the first block reads.

`x = wte[ids] + wpe[positions]`: one row of the token table per id, one row of the position
table per place in the window (0..n-1, whatever the ids are), added, not concatenated.
"""

from __future__ import annotations

import torch

from gptlib.exercises.checking import CheckResult, compare

__all__ = ["check_embed", "solution_embed"]

# Small on purpose, and V != T != d so that a mixed-up table or axis changes a shape or a value.
_B, _N, _V, _T, _D = 3, 5, 11, 7, 6


def solution_embed(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor) -> torch.Tensor:
    """ids [B, n] (n <= T), wte [V, d], wpe [T, d] -> x [B, n, d]."""
    n = ids.size(1)
    pos = torch.arange(n, device=ids.device)  # [n]: places in the window, not token ids
    return wte[ids] + wpe[pos]  # [B, n, d] + [n, d] broadcasts over the batch


def _make_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # ids stay below V - 1 (and below T) so that a one-hot built without num_classes comes out
    # too narrow, and a position table indexed with token ids still has a row to return.
    ids = torch.randint(0, _T - 1, (_B, _N), generator=g)  # [B, n]
    wte = torch.randn(_V, _D, generator=g)  # [V, d]
    wpe = torch.randn(_T, _D, generator=g)  # [T, d]
    return ids, wte, wpe


def _forgot_positions(ids, wte, wpe):
    return wte[ids]


def _positions_from_ids(ids, wte, wpe):
    return wte[ids] + wpe[ids]


def _position_zero_everywhere(ids, wte, wpe):
    return wte[ids] + wpe[0]


def _concatenated(ids, wte, wpe):
    pos = torch.arange(ids.size(1))
    return torch.cat([wte[ids], wpe[pos].expand(ids.size(0), -1, -1)], dim=-1)  # [B, n, 2d]


_MISTAKES = [
    (
        "the positions are missing: x = wte[ids] alone gives a token the same vector wherever it "
        "stands; add wpe[0..n-1]",
        _forgot_positions,
    ),
    (
        "you looked the position table up with the token ids (wpe[ids]); its rows are places in "
        "the window, so index it with torch.arange(n)",
        _positions_from_ids,
    ),
    (
        "every token got the position vector of place 0 (wpe[0]); each place 0..n-1 has its own "
        "row: wpe[torch.arange(n)]",
        _position_zero_everywhere,
    ),
    (
        "you concatenated the two vectors (width 2d); the model adds them, so x keeps width d",
        _concatenated,
    ),
]

# Failures whose message says what went wrong with a one-hot product.
_ERROR_HINTS = [
    (
        "cannot be multiplied",
        "if you multiplied one-hot vectors by a table, the one-hot width must equal the table's "
        "rows: F.one_hot(ids, num_classes=V) for wte and F.one_hot(pos, num_classes=T) for wpe "
        "(without num_classes the width is max(ids) + 1)",
    ),
    (
        "dtype",
        "F.one_hot returns integers; turn the one-hot into floats (.float()) before the matmul",
    ),
]


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-5, rtol=1e-4)


def with_error_hints(user_fn, hints):
    """Wrap the reader's function: an error whose message contains a known fragment gets the
    matching hint appended. `hints` is a list of (fragment, hint)."""

    def wrapped(*inputs):
        try:
            return user_fn(*inputs)
        except (RuntimeError, ValueError, IndexError) as e:
            first_line = str(e).splitlines()[0] if str(e) else ""
            for fragment, hint in hints:
                if fragment in first_line:
                    try:
                        explained = type(e)(f"{first_line}. Hint: {hint}")
                    except Exception:  # an exception class with another constructor
                        explained = RuntimeError(f"{first_line}. Hint: {hint}")
                    raise explained from None
            raise

    return wrapped


def name_shape_mistake(
    result: CheckResult, name: str, user_fn, make_inputs, mistakes
) -> CheckResult:
    """`compare` reports a wrong shape before it tries the known mistakes; a mistake that changes
    the shape (concatenating, a missing transpose) is named here instead of only its shape."""
    if result.passed or "output has shape" not in result.message:
        return result
    inputs = make_inputs(torch.Generator().manual_seed(1000))
    got = user_fn(*inputs)
    got_t = got if isinstance(got, tuple) else (got,)
    for hint, wrong_fn in mistakes:
        wrong = wrong_fn(*inputs)
        wrong_t = wrong if isinstance(wrong, tuple) else (wrong,)
        if len(got_t) == len(wrong_t) and all(
            _close(torch.as_tensor(a), torch.as_tensor(b))
            for a, b in zip(got_t, wrong_t, strict=True)
        ):
            return CheckResult(False, f"✗ {name}: {hint}")
    return result


def check_embed(embed_fn) -> CheckResult:
    """Check `embed_fn(ids [B, n], wte [V, d], wpe [T, d]) -> x [B, n, d]` on random tables."""
    name = "embed"
    fn = with_error_hints(embed_fn, _ERROR_HINTS)
    result = compare(name, fn, solution_embed, _make_inputs, mistakes=_MISTAKES)
    return name_shape_mistake(result, name, fn, _make_inputs, _MISTAKES)
