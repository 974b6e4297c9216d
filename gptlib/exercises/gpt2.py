"""Notebook 16, GPT-2's weights in gptlib's layout.

`to_gptlib(hf_state)`: the state dict of Hugging Face's `GPT2LMHeadModel` (names such as
'transformer.h.0.attn.c_attn.weight'; its linear layers are `Conv1D`, whose weight is [in, out]
and which computes x @ W + b; q, k and v fused in `c_attn`, [d, 3d]) -> a state dict gptlib's
`GPT` loads (names such as 'blocks.0.attn.qkv.weight'; `nn.Linear` weights [out, in], computing
x @ W.T + b). The check builds small GPT-2-shaped state dicts with random numbers and compares the
reader's result, name by name and tensor by tensor, with gptlib's own converter,
`gptlib.gpt2.gptlib_state_dict`, which is refused while the reader's function runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from gptlib.config import GPTConfig, gpt2
from gptlib.exercises.checking import (
    CheckResult,
    Refused,
    difference,
    guard,
    not_written,
    solved_by,
    with_error_hints,
)
from gptlib.gpt2 import CONV1D, expected_hf_shapes, gptlib_name, gptlib_state_dict

__all__ = ["check_to_gptlib", "solution_to_gptlib"]

NAME = "to_gptlib"


def solution_to_gptlib(hf_state: dict) -> dict:
    """GPT2LMHeadModel's state dict -> a state dict for gptlib's GPT, every tensor renamed and
    every Conv1D weight turned from [in, out] into nn.Linear's [out, in]."""
    # GPT-2's name for each part of a block -> gptlib's (the model.py attribute names).
    parts = {
        "ln_1": "ln1",
        "attn.c_attn": "attn.qkv",
        "attn.c_proj": "attn.proj",
        "ln_2": "ln2",
        "mlp.c_fc": "mlp.fc",
        "mlp.c_proj": "mlp.proj",
    }
    conv1d = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # weights stored [in, out]
    tables = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight"}
    state = {}
    for name, tensor in hf_state.items():
        name = name.removeprefix("transformer.")
        if not name.startswith("h."):  # wte, wpe, ln_f and lm_head: no layout change
            state[tables.get(name, name)] = tensor
            continue
        _, i, rest = name.split(".", 2)  # "h", the block's index, "attn.c_attn.weight"
        part, param = rest.rsplit(".", 1)
        if part in conv1d and param == "weight":
            tensor = tensor.t()  # [in, out] -> [out, in]; c_attn's q | k | v order stays
        state[f"blocks.{i}.{parts[part]}.{param}"] = tensor
    return state


# --- the inputs: small GPT-2-shaped state dicts ------------------------------------------------

# Sizes chosen so that no table or Conv1D weight is square except attn.c_proj ([d, d]), and no two
# axes of different meaning share a length: a transposed tensor always shows in its shape, except
# that one.
SIZES = (
    {"vocab_size": 11, "block_size": 6, "n_layer": 2, "n_head": 2, "n_embd": 8},
    {"vocab_size": 7, "block_size": 5, "n_layer": 1, "n_head": 3, "n_embd": 12},
)


def _config(sizes: dict) -> GPTConfig:
    return gpt2(**sizes)


def _hf_state(cfg: GPTConfig, g: torch.Generator) -> dict[str, torch.Tensor]:
    """What GPT2LMHeadModel.state_dict() holds for `cfg`, with random numbers: every name
    'transformer.'-prefixed, and lm_head.weight the very tensor of wte (the tied head)."""
    state = {
        f"transformer.{name}": torch.randn(*shape, generator=g)
        for name, shape in expected_hf_shapes(cfg).items()
    }
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def _copy(hf_state: dict) -> dict:
    """A copy the reader's function may change freely (the tie kept)."""
    out = {name: t.clone() for name, t in hf_state.items() if name != "lm_head.weight"}
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def _sources(cfg: GPTConfig) -> dict[str, str]:
    """gptlib's name -> the GPT-2 name its tensor comes from."""
    found = {gptlib_name(name)[0]: f"transformer.{name}" for name in expected_hf_shapes(cfg)}
    found["lm_head.weight"] = "lm_head.weight"
    return found


def _is_conv1d_weight(hf_name: str) -> bool:
    return hf_name.endswith(".weight") and any(f".{part}." in hf_name for part in CONV1D)


# --- the typical slips, each a whole converter with one thing wrong ----------------------------


def _convert(hf_state: dict, weight=lambda t: t.t(), rename=None, keep=lambda name: True) -> dict:
    """The reference with one piece swapped: `weight` for the Conv1D weights, `rename` for the
    names, `keep` to leave tensors out."""
    state = {}
    for name, tensor in solution_to_gptlib(hf_state).items():
        if name.endswith(".weight") and name.split(".")[-2] in ("qkv", "proj", "fc"):
            tensor = weight(tensor.t())  # back to [in, out], then the slip's own treatment
        if keep(name):
            state[rename(name) if rename else name] = tensor
    return state


def _nothing_transposed(hf_state):
    return _convert(hf_state, weight=lambda t: t)


def _only_where_shapes_differ(hf_state):
    return _convert(hf_state, weight=lambda t: t if t.size(0) == t.size(1) else t.t())


def _reshaped(hf_state):
    return _convert(hf_state, weight=lambda t: t.reshape(t.size(1), t.size(0)))


def _reordered_qkv(order: tuple[int, int, int]) -> Callable[[dict], dict]:
    def slip(hf_state):
        state = solution_to_gptlib(hf_state)
        for name in [n for n in state if ".attn.qkv." in n]:
            parts = state[name].chunk(3, dim=0)  # q, k, v along the output axis
            state[name] = torch.cat([parts[i] for i in order], dim=0)
        return state

    return slip


def _tables_transposed_too(hf_state):
    return {
        name: t.t() if t.dim() == 2 and not name.startswith("blocks.") else t
        for name, t in solution_to_gptlib(hf_state).items()
    }


def _swapped(hf_state, a, b):
    """The conversion with every name holding `a` given `b` instead, and the other way round."""

    def rename(name):
        return name.replace(a, b) if a in name else name.replace(b, a)

    return _convert(hf_state, rename=rename)


def _norms_swapped(hf_state):
    return _swapped(hf_state, ".ln1.", ".ln2.")


def _mlp_swapped(hf_state):
    return _swapped(hf_state, ".mlp.fc.", ".mlp.proj.")


def _head_left_out(hf_state):
    return _convert(hf_state, keep=lambda name: name != "lm_head.weight")


MISTAKES: list[tuple[str, Callable[[dict], dict]]] = [
    (
        "no weight changed layout: every Conv1D weight (c_attn, c_proj, c_fc) is still [in, out] "
        "as GPT-2 stores it for x @ W + b, where gptlib's nn.Linear reads [out, in] and computes "
        "x @ W.T + b",
        _nothing_transposed,
    ),
    (
        "attn.proj.weight is still GPT-2's c_proj weight as stored, [in, out]: it is square "
        "[d, d], so its shape looks right either way; the three Conv1D weights whose shapes "
        "disagreed changed layout, and this one, whose shape agreed, did not",
        _only_where_shapes_differ,
    ),
    (
        "the Conv1D weights were reshaped to [out, in], not transposed: the shapes are right but "
        "each row now holds numbers from several of GPT-2's columns, since a reshape keeps the "
        "numbers in their memory order",
        _reshaped,
    ),
    (
        "attn.qkv holds q, k, v in the order k, q, v: GPT-2's c_attn and gptlib's qkv both hold "
        "them as q | k | v along the output axis, and yours moved the blocks",
        _reordered_qkv((1, 0, 2)),
    ),
    (
        "the embedding tables were transposed too: wte [V, d] and wpe [T, d] are tables of rows "
        "in both libraries, and your tok_emb and pos_emb are [d, V] and [d, T]",
        _tables_transposed_too,
    ),
    (
        "ln1 and ln2 are swapped: GPT-2's ln_1 is the norm before attention (gptlib's ln1), "
        "ln_2 the one before the MLP (ln2)",
        _norms_swapped,
    ),
    (
        "mlp.fc and mlp.proj are swapped: blocks.i.mlp.fc.weight holds GPT-2's c_proj, the MLP's "
        "second layer (4d -> d), and mlp.proj.weight its c_fc, the first (d -> 4d)",
        _mlp_swapped,
    ),
    (
        "lm_head.weight is missing: gptlib's GPT keeps its output head in its state dict too; "
        "tied, it is the token table itself, and GPT-2's lm_head.weight is already that tensor",
        _head_left_out,
    ),
]

# A transpose that also meets the 1-D biases fails; the error gets this hint.
_BIAS = (
    "a bias is 1-D, [out], in both libraries, and so is every norm's gain and bias: a 1-D "
    "tensor has no [in, out] layout to change"
)
ERROR_HINTS = [
    ("Dimension out of range", _BIAS),
    ("only supported on matrices", _BIAS),
    ("number of dimensions in the tensor input does not match", _BIAS),
]


# --- telling the reader what differs ---------------------------------------------------------


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-6, rtol=0)


def _same_state(got: dict, wrong: dict) -> bool:
    return set(got) == set(wrong) and all(
        isinstance(got[k], torch.Tensor) and _equal(got[k], wrong[k]) for k in wrong
    )


def _names_problem(missing: list[str], extra: list[str]) -> str:
    if any(name.startswith("transformer.") for name in extra):
        return (
            "the names still carry GPT-2's 'transformer.' prefix: gptlib's GPT has none "
            "(tok_emb.weight, blocks.0.ln1.weight, ..., ln_f.weight, lm_head.weight)"
        )
    if missing == ["lm_head.weight"] and not extra:
        return MISTAKES[-1][0]
    hf_parts = ("ln_1", "ln_2", "c_attn", "c_proj", "c_fc", "wte", "wpe", ".h.")
    said = []
    if missing:
        said.append(f"missing {', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}")
    if extra:
        said.append(f"unexpected {', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''}")
    text = f"the names are not gptlib's: {'; '.join(said)}"
    if any(part in name or name.startswith("h.") for name in extra for part in hf_parts):
        text += " (GPT-2's names for the parts are left in)"
    return (
        text + ". gptlib's names are those of GPT(cfg).state_dict(): tok_emb, pos_emb, "
        "blocks.i.ln1 / attn.qkv / attn.proj / ln2 / mlp.fc / mlp.proj, ln_f, lm_head"
    )


def _shape_problem(key: str, got: torch.Tensor, expected: torch.Tensor, hf_name: str) -> str:
    shape, want = list(got.shape), list(expected.shape)
    if expected.dim() == 2 and shape == want[::-1]:
        if _is_conv1d_weight(hf_name):
            return (
                f"{key} has shape {shape}, GPT-2's Conv1D layout [in, out] of {hf_name}, where "
                f"gptlib's nn.Linear keeps its weight as [out, in], {want}"
            )
        return (
            f"{key} was transposed to {shape}: {hf_name} is not a Conv1D weight but a table, "
            f"{want} in both libraries"
        )
    if expected.dim() == 1 and got.numel() == expected.numel():
        return f"{key} has shape {shape}, expected {want}: {_BIAS}"
    return f"{key} has shape {shape}, expected {want} (it comes from GPT-2's {hf_name})"


def _value_problem(
    key: str, got: torch.Tensor, expected: dict, hf_state: dict, sources: dict
) -> str:
    hf_name = sources[key]
    raw = hf_state[hf_name]
    if _is_conv1d_weight(hf_name) and _equal(got, raw):
        return (
            f"{key} is {hf_name} as GPT-2 stores it, [in, out], not transposed: it is square, so "
            "its shape cannot tell you; a Conv1D weight is [in, out] whatever its shape"
        )
    if _is_conv1d_weight(hf_name) and _equal(got, raw.reshape(expected[key].shape)):
        return (
            f"{key} was reshaped from [in, out] to [out, in], not transposed: the shape is right "
            "but the numbers are not where they belong"
        )
    if ".attn.qkv." in key:
        blocks = expected[key].chunk(3, dim=0)
        for order in itertools.permutations(range(3)):
            if _equal(got, torch.cat([blocks[i] for i in order], dim=0)):
                shown = ", ".join("qkv"[i] for i in order)
                return (
                    f"{key} holds q, k, v in the order {shown}: GPT-2's c_attn and gptlib's qkv "
                    "both hold them as q | k | v along the output axis, and yours moved the blocks"
                )
    for other, tensor in expected.items():
        if other != key and _equal(got, tensor):
            return (
                f"{key} holds the numbers of GPT-2's {sources[other]}, which belong in {other}; "
                f"{key} comes from {hf_name}"
            )
    return (
        f"{key} differs from gptlib's converter ({difference(got, expected[key])}); "
        f"it comes from GPT-2's {hf_name}"
    )


def _problem(got: object, expected: dict, hf_state: dict, cfg: GPTConfig) -> str | None:
    """What is wrong with the reader's state dict, in one line (None: nothing)."""
    if not isinstance(got, dict):
        return f"returned a {type(got).__name__}; return a dict: gptlib's name -> tensor"
    missing = [k for k in expected if k not in got]
    extra = [k for k in got if k not in expected]
    if missing or extra:
        return _names_problem(missing, [str(k) for k in extra])
    sources = _sources(cfg)
    for key, want in expected.items():
        tensor = got[key]
        if not isinstance(tensor, torch.Tensor):
            return f"{key} is a {type(tensor).__name__}, not a tensor"
        if not _equal(tensor, want):  # another tensor's numbers, converted right, under this name
            for other, theirs in expected.items():
                if other != key and _equal(tensor, theirs):
                    return (
                        f"{key} holds the numbers of GPT-2's {sources[other]}, which belong in "
                        f"{other}; {key} comes from {sources[key]}"
                    )
        if tensor.shape != want.shape:
            return _shape_problem(key, tensor, want, sources[key])
        if not _equal(tensor, want):
            return _value_problem(key, tensor, expected, hf_state, sources)
    return None


@solved_by(solution_to_gptlib)
def check_to_gptlib(to_gptlib: Callable) -> CheckResult:
    """Run `to_gptlib(hf_state)` on two small GPT-2-shaped state dicts with random numbers (as
    GPT2LMHeadModel.state_dict() lays them out) and compare every name, shape and number with
    gptlib.gpt2.gptlib_state_dict's result."""
    user = guard(NAME, with_error_hints(to_gptlib, ERROR_HINTS))
    for trial, sizes in enumerate(SIZES):
        cfg = _config(sizes)
        hf_state = _hf_state(cfg, torch.Generator().manual_seed(1000 + trial))
        expected = gptlib_state_dict(hf_state, cfg)
        try:
            got = user(_copy(hf_state))
        except NotImplementedError:
            return not_written(NAME)
        except Refused as e:  # the reader handed the exercise to the library
            return e.result
        except Exception as e:  # the reader's code failed: say how
            return CheckResult(False, f"✗ {NAME}: your function raised {type(e).__name__}: {e}")
        problem = _problem(got, expected, hf_state, cfg)
        if problem is None:
            continue
        for hint, wrong_fn in MISTAKES:
            if _same_state(got, wrong_fn(_copy(hf_state))):
                return CheckResult(False, f"✗ {NAME}: {hint}")
        return CheckResult(False, f"✗ {NAME}: {problem}")
    return CheckResult(
        True,
        f"✓ {NAME}: every name, shape and number equals gptlib's converter on {len(SIZES)} "
        "random GPT-2-shaped models",
    )
