"""Notebook 16's check: GPT-2's state dict in gptlib's layout. The reference agrees with gptlib's
converter and with transformers, each slip of the table is named by its row, the promised ones (the
fc/proj swap, a Conv1D weight left [in, out] named by its shape) by what they mean, and the
library's converter is refused."""

import pytest
import torch

from gptlib.config import gpt2
from gptlib.exercises import nb16_gpt2 as ex_gpt2
from gptlib.exercises.checking import refusal_message
from gptlib.exercises.table import REFUSALS
from gptlib.huggingface import BLOCK_NAMES, TABLE_NAMES, gptlib_name, gptlib_state_dict
from gptlib.model import GPT

NAME = "to_gptlib"


def _names(result, *facts: str) -> bool:
    """A refusal that names each fact (a weight, a shape, a layout), in that order: what the
    message means, not its sentence."""
    if result.passed:
        return False
    at = 0
    for fact in facts:
        at = result.message.find(fact, at)
        if at < 0:
            return False
        at += len(fact)
    return True


def test_solution_equals_the_library_and_loads_into_a_gpt():
    cfg = gpt2(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)  # the seed's sizes
    (hf_state,) = ex_gpt2._inputs(torch.Generator().manual_seed(0))
    ours, library = ex_gpt2.solution_to_gptlib(hf_state), gptlib_state_dict(hf_state, cfg)
    assert ours.keys() == library.keys()
    for name in library:
        assert torch.equal(ours[name], library[name]), name
    model = GPT(cfg)
    model.load_state_dict(ours)  # strict: every name, every shape
    assert model.state_dict().keys() == ours.keys()


def test_solution_on_a_real_gpt2lmheadmodel_gives_the_same_logits():
    transformers = pytest.importorskip("transformers")
    hf_cfg = transformers.GPT2Config(
        vocab_size=13, n_positions=7, n_embd=8, n_layer=2, n_head=2, bos_token_id=12,
        eos_token_id=12,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_cfg).eval()
    model = GPT(gpt2(vocab_size=13, block_size=7, n_layer=2, n_head=2, n_embd=8)).eval()
    model.load_state_dict(ex_gpt2.solution_to_gptlib(hf.state_dict()))
    idx = torch.randint(0, 13, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], hf(idx).logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("hint, wrong", ex_gpt2.MISTAKES)
def test_each_slip_gets_its_hint(hint, wrong):
    def as_dict(hf_state):  # the row's tensors under the reference's names
        return dict(zip(ex_gpt2.solution_to_gptlib(hf_state), wrong(hf_state), strict=True))

    result = ex_gpt2.check_to_gptlib(as_dict)
    assert not result.passed
    assert result.message == f"✗ {NAME}: {hint}"


# --- slips as a reader writes them ----------------------------------------------------------------

# The reader writes these tables out; here they are the library's.
_PARTS, _TABLES = BLOCK_NAMES, TABLE_NAMES


def _reader(transpose, parts=_PARTS, prefix="transformer.", qkv_order=None):
    """A converter in a reader's style; `transpose(part, param, tensor)` decides the layout."""

    def to_gptlib(hf_state):
        out = {}
        for name, t in hf_state.items():
            name = name.removeprefix(prefix)
            if not name.startswith("h."):
                out[_TABLES.get(name, name)] = t
                continue
            _, i, rest = name.split(".", 2)
            part, param = rest.rsplit(".", 1)
            t = transpose(part, param, t)
            if qkv_order and part == "attn.c_attn":
                blocks = t.chunk(3, dim=0)
                t = torch.cat([blocks[j] for j in qkv_order])
            out[f"blocks.{i}.{parts.get(part, part)}.{param}"] = t
        return out

    return to_gptlib


def _conv1d_weights(part, param, t):
    return t.t() if part.split(".")[-1] in ("c_attn", "c_proj", "c_fc") and param == "weight" else t


def test_a_reader_converter_passes():
    assert ex_gpt2.check_to_gptlib(_reader(_conv1d_weights)).passed


def test_transposing_by_shape_misses_the_square_projection():
    def by_shape(part, param, t):  # transposes a weight when its shape is not the same reversed
        return t.t() if t.dim() == 2 and t.size(0) != t.size(1) else t

    result = ex_gpt2.check_to_gptlib(_reader(by_shape))
    assert result.message == f"✗ {NAME}: {ex_gpt2.MISTAKES[0][0]}"
    assert "square" in result.message


def test_one_weight_not_transposed_is_named_by_its_shape():
    def forgot_fc(part, param, t):
        return t if part == "mlp.c_fc" else _conv1d_weights(part, param, t)

    result = ex_gpt2.check_to_gptlib(_reader(forgot_fc))
    # The symptom: which weight, the shape given (Conv1D's [in, out]), gptlib's, and its source.
    message = result.message
    assert not result.passed and "blocks.0.mlp.fc.weight" in message and "Conv1D" in message
    assert "[8, 32]" in message and "[32, 8]" in message and "transformer.h.0.mlp.c_fc" in message
    assert "transpose" not in result.message  # the symptom, not the fix


def test_nothing_transposed_is_named_by_the_first_weight_s_shape():
    result = ex_gpt2.check_to_gptlib(_reader(lambda part, param, t: t))
    # which weight, the shape given and whose layout it is
    assert _names(result, "blocks.0.attn.qkv.weight", "[8, 24]", "Conv1D", "[24, 8]")


def test_q_k_v_in_another_order_is_named_with_the_order():
    result = ex_gpt2.check_to_gptlib(_reader(_conv1d_weights, qkv_order=(2, 1, 0)))
    assert _names(result, "attn.qkv", "v, k, q")  # the weight and the order found in it


def test_a_transposed_bias_gets_the_bias_hint():
    def every_conv1d_tensor(part, param, t):
        conv = part.split(".")[-1] in ("c_attn", "c_proj", "c_fc")
        return t.transpose(0, 1) if conv else t  # the biases too: 1-D, so it raises

    result = ex_gpt2.check_to_gptlib(_reader(every_conv1d_tensor))
    assert _names(result, "raised IndexError")  # the reader's error, then the bias hint
    assert "a bias is 1-D, [out], in both libraries" in result.message


def test_a_bias_given_a_second_axis_is_named():
    def column_bias(part, param, t):
        t = _conv1d_weights(part, param, t)
        return t[None] if part == "attn.c_attn" and param == "bias" else t

    result = ex_gpt2.check_to_gptlib(_reader(column_bias))
    assert _names(result, "blocks.0.attn.qkv.bias", "[1, 24]", "[24]")


def test_the_prefix_kept_is_named():
    result = ex_gpt2.check_to_gptlib(_reader(_conv1d_weights, prefix="no such prefix"))
    assert _names(result, "missing", "'tok_emb.weight'")
    assert "unexpected ['transformer.wte.weight'" in result.message


def test_gpt2_part_names_kept_are_named():
    result = ex_gpt2.check_to_gptlib(_reader(_conv1d_weights, parts={}))
    assert _names(result, "missing", "'blocks.0.ln1.weight'")
    assert "unexpected ['blocks.0.ln_1.weight'" in result.message


def test_the_head_left_out_is_named():
    def no_head(hf_state):
        return {
            k: t for k, t in ex_gpt2.solution_to_gptlib(hf_state).items() if k != "lm_head.weight"
        }

    result = ex_gpt2.check_to_gptlib(no_head)
    assert _names(result, "missing ['lm_head.weight']", "unexpected []")  # only the head


def test_a_tensor_under_the_wrong_name_is_named():
    parts = dict(_PARTS, **{"attn.c_proj": "mlp.proj", "mlp.c_proj": "attn.proj"})
    result = ex_gpt2.check_to_gptlib(_reader(_conv1d_weights, parts=parts))
    # attn.proj gets mlp.c_proj's numbers, converted: named as such, before the shapes
    assert _names(result, "blocks.0.attn.proj.weight", "[8, 32]", "[8, 8]", "(from")


def test_fc_and_proj_swapped_is_named_as_a_swap():
    parts = dict(_PARTS, **{"mlp.c_fc": "mlp.proj", "mlp.c_proj": "mlp.fc"})
    result = ex_gpt2.check_to_gptlib(_reader(_conv1d_weights, parts=parts))
    assert result.message == f"✗ {NAME}: {ex_gpt2.MISTAKES[2][0]}"
    assert "mlp.fc and mlp.proj are swapped" in result.message
    assert "transpose" not in result.message and "Conv1D" not in result.message


def test_no_message_gives_the_fix():
    for hint, _ in ex_gpt2.MISTAKES:
        assert "transpose it" not in hint and "transpose all" not in hint
        assert "transpose only" not in hint


def test_norm_parameters_under_the_wrong_name_are_named():
    parts = dict(_PARTS, ln_1="ln2", ln_2="ln1")

    def and_biases_right(hf_state):  # only the gains are swapped, so this is not the list's slip
        out = _reader(_conv1d_weights, parts=parts)(hf_state)
        for i in range(2 if "transformer.h.1.ln_1.bias" in hf_state else 1):
            out[f"blocks.{i}.ln1.bias"] = hf_state[f"transformer.h.{i}.ln_1.bias"]
            out[f"blocks.{i}.ln2.bias"] = hf_state[f"transformer.h.{i}.ln_2.bias"]
        return out

    result = ex_gpt2.check_to_gptlib(and_biases_right)
    # the weight, whose numbers it holds, and where those belong, in that order
    assert _names(
        result, "blocks.0.ln1.weight", "transformer.h.0.ln_2.weight", "blocks.0.ln2.weight"
    )


def test_not_a_dict():
    result = ex_gpt2.check_to_gptlib(lambda hf_state: list(hf_state.values()))
    assert _names(result, "list", "dict")  # what came back, what was expected


def test_the_input_may_be_changed_in_place():
    def pops(hf_state):
        for name in list(hf_state):
            hf_state[name.removeprefix("transformer.")] = hf_state.pop(name)
        return _reader(_conv1d_weights, prefix="")(hf_state)

    assert ex_gpt2.check_to_gptlib(pops).passed


# --- the library's converter is refused -------------------------------------------------------------


def test_the_library_converter_is_refused():
    def shortcut(hf_state):
        cfg = gpt2(vocab_size=11, block_size=6, n_layer=2, n_head=2, n_embd=8)
        return gptlib_state_dict(hf_state, cfg)

    [refusal] = [r for r in REFUSALS[NAME] if r.path.endswith("gptlib_state_dict")]
    result = ex_gpt2.check_to_gptlib(shortcut)
    assert not result.passed
    assert result.message == refusal_message(NAME, refusal)
    # and put back afterwards
    import gptlib.huggingface

    assert gptlib.huggingface.gptlib_state_dict is gptlib_state_dict


def test_the_library_renaming_is_refused():
    def shortcut(hf_state):
        out = {}
        for name, t in hf_state.items():
            key, transpose = gptlib_name(name.removeprefix("transformer."))
            out[key] = t.t() if transpose else t
        return out

    [refusal] = [r for r in REFUSALS[NAME] if r.path.endswith("gptlib_name")]
    result = ex_gpt2.check_to_gptlib(shortcut)
    assert result.message == refusal_message(NAME, refusal)
    assert "renames every tensor" in result.message
