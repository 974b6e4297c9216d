"""Notebook 16: `to_gptlib(hf_state)`, GPT2LMHeadModel's state dict as gptlib's GPT loads it,
compared name by name with the reference (`gptlib.huggingface.gptlib_state_dict`, refused)."""

from functools import partial

import torch

from gptlib.config import gpt2
from gptlib.exercises.checking import CheckResult, compare, difference, solved_by
from gptlib.huggingface import expected_hf_shapes, gptlib_name
from gptlib.language import N_, _

__all__ = ["check_to_gptlib", "solution_to_gptlib"]


def solution_to_gptlib(hf_state: dict) -> dict:
    """GPT2LMHeadModel's state dict -> gptlib's, renamed, Conv1D weights [in, out] -> [out, in]."""
    # GPT-2's name for each part of a block -> gptlib's (the model.py attribute names).
    parts = {"ln_1": "ln1", "attn.c_attn": "attn.qkv", "attn.c_proj": "attn.proj",
             "ln_2": "ln2", "mlp.c_fc": "mlp.fc", "mlp.c_proj": "mlp.proj"}  # fmt: skip
    conv1d = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # weights stored [in, out]
    tables = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight"}
    state = {}
    for name, tensor in hf_state.items():
        name = name.removeprefix("transformer.")
        if not name.startswith("h."):  # wte, wpe, ln_f and lm_head: no layout change
            state[tables.get(name, name)] = tensor
            continue
        _h, i, rest = name.split(".", 2)  # "h", the block's index, "attn.c_attn.weight"
        part, param = rest.rsplit(".", 1)
        if part in conv1d and param == "weight":
            tensor = tensor.t()  # [in, out] -> [out, in]; c_attn's q | k | v order stays
        state[f"blocks.{i}.{parts[part]}.{param}"] = tensor
    return state


def _inputs(g: torch.Generator):
    # GPT2LMHeadModel.state_dict(), the head tied; attn.c_proj [d, d] is the only square weight
    cfg = gpt2(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)
    if g.initial_seed() % 2:
        cfg = gpt2(vocab_size=7, block_size=5, n_layer=1, n_head=3, n_embd=12)
    shapes = expected_hf_shapes(cfg).items()
    state = {f"transformer.{k}": torch.randn(s, generator=g) for k, s in shapes}
    return (dict(state, **{"lm_head.weight": state["transformer.wte.weight"]}),)


def _convert(hf_state, *, keep=(), qkv=(0, 1, 2), reshape=False, swap=("", "")):
    """The reference's tensors, in its order, with one switch flipped: every slip is one row."""
    want, state = solution_to_gptlib(hf_state), {}
    for name, t in want.items():
        part = ".".join(name.split(".")[2:-1])  # attn.qkv, mlp.fc, ... ("" outside the blocks)
        if name.endswith(".weight") and part in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"):
            t = t.t() if part in keep else t.t().reshape(t.shape) if reshape else t
        if part == "attn.qkv":
            t = torch.cat([t.chunk(3)[i] for i in qkv])
        state[name.replace(*swap) if swap[0] in name else name.replace(*swap[::-1])] = t
    return tuple(state[name] for name in want)


# fmt: off
MISTAKES = [
    (N_("blocks.i.attn.proj.weight is GPT-2's c_proj weight as stored, [in, out]: square, its "
        "shape looks right either way, its numbers do not"),
     partial(_convert, keep=("attn.proj",))),
    (N_("the Conv1D weights were reshaped to [out, in]: the shapes are right but each row holds "
        "numbers from several of GPT-2's columns"), partial(_convert, reshape=True)),
    (N_("mlp.fc and mlp.proj are swapped: mlp.fc holds GPT-2's c_proj, the MLP's second layer "
        "(4d -> d), mlp.proj its c_fc, the first"), partial(_convert, swap=("mlp.fc", "mlp.proj"))),
    # one row per wrong order of q, k, v (every order but q, k, v itself)
    (N_("attn.qkv holds q, k, v in the order q, v, k, where GPT-2's c_attn and gptlib's qkv both "
        "hold q | k | v"), partial(_convert, qkv=(0, 2, 1))),
    (N_("attn.qkv holds q, k, v in the order k, q, v, where GPT-2's c_attn and gptlib's qkv both "
        "hold q | k | v"), partial(_convert, qkv=(1, 0, 2))),
    (N_("attn.qkv holds q, k, v in the order k, v, q, where GPT-2's c_attn and gptlib's qkv both "
        "hold q | k | v"), partial(_convert, qkv=(1, 2, 0))),
    (N_("attn.qkv holds q, k, v in the order v, q, k, where GPT-2's c_attn and gptlib's qkv both "
        "hold q | k | v"), partial(_convert, qkv=(2, 0, 1))),
    (N_("attn.qkv holds q, k, v in the order v, k, q, where GPT-2's c_attn and gptlib's qkv both "
        "hold q | k | v"), partial(_convert, qkv=(2, 1, 0))),
]
# fmt: on
BIAS = N_("a bias is 1-D, [out], in both libraries, and so is every norm's gain and bias")
ERROR_HINTS = [("Dimension out of range", BIAS), ("only supported on matrices", BIAS)]


def _problem(got, want: dict, hf_state: dict) -> str:
    """What differs in the reader's state dict, named by the first tensor that differs."""
    if not isinstance(got, dict):
        said = _("it returned a {kind}, where a dict of gptlib's names is expected")
        return said.format(kind=type(got).__name__)
    missing, extra = [k for k in want if k not in got], [str(k) for k in got if k not in want]
    if missing or extra:
        said = _("the names are not gptlib's: missing {missing}, unexpected {extra}")
        return said.format(missing=missing[:3], extra=extra[:3])
    source = {gptlib_name(k.removeprefix("transformer."))[0]: k for k in hf_state}
    for key, t in want.items():
        mine, hf = got[key], source[key]
        if getattr(mine, "shape", None) != t.shape:
            shape = list(getattr(mine, "shape", []))
            conv1d = gptlib_name(hf.removeprefix("transformer."))[1]  # GPT-2 keeps it [in, out]
            if conv1d and shape == list(t.shape)[::-1]:
                said = _("{key} is {shape}, GPT-2's Conv1D layout, where gptlib's is {want} "
                         "(from {hf})")  # fmt: skip
            else:
                said = _("{key} is {shape} where gptlib's is {want} (from {hf})")
            return said.format(key=key, shape=shape, want=list(t.shape), hf=hf)
        if not torch.equal(mine, t):
            other = [k for k, u in want.items() if u.shape == t.shape and torch.equal(mine, u)]
            if other:
                said = _("{key} holds the numbers of {source}, which belong in {other}")
                return said.format(key=key, source=source[other[0]], other=other[0])
            said = _("{key} differs from the reference ({difference}; from {hf})")
            return said.format(key=key, difference=difference(mine, t), hf=hf)
    return ""


@solved_by(solution_to_gptlib)
def check_to_gptlib(to_gptlib) -> CheckResult:
    """Run `to_gptlib(hf_state)` on two small GPT-2-shaped state dicts of random numbers."""
    found = []

    def tensors(hf_state):  # the reader's state dict, its tensors in the reference's order
        want = solution_to_gptlib(hf_state)
        got = to_gptlib({k: t.clone() for k, t in hf_state.items()})
        found.append(_problem(got, want, hf_state))
        if not isinstance(got, dict) or got.keys() != want.keys():
            raise LookupError(found[-1])
        return tuple(got[k] for k in want)

    result = compare("to_gptlib", tensors, _convert, _inputs, MISTAKES, trials=2,
                     error_hints=ERROR_HINTS, grads=False)  # fmt: skip
    slipped = any(result.message.endswith(_(h)) for h, _wrong in MISTAKES)  # a slip named
    if result or not found or not found[-1] or slipped:
        return result
    return CheckResult(False, f"✗ to_gptlib: {found[-1]}")
