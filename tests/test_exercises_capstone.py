"""The capstone: each piece's check, and the layer-by-layer checker naming planted slips."""

import math
import warnings

import pytest
import torch

from gptlib import exercises
from gptlib.checkpoint import load_asset
from gptlib.config import textbook
from gptlib.data import load_corpus
from gptlib.exercises import capstone, show_solution
from gptlib.exercises.capstone import reference
from gptlib.model import GPT
from gptlib.train import estimate_loss

PIECE_CHECKS = {
    "embed": capstone.check_gpt_embed,
    "rmsnorm": capstone.check_gpt_rmsnorm,
    "attention": capstone.check_gpt_attention,
    "mlp": capstone.check_gpt_mlp,
    "block": capstone.check_gpt_block,
}


@pytest.fixture(scope="module")
def model():
    return load_asset(capstone.ASSET).model


@pytest.fixture(scope="module")
def weights(model):
    return capstone.gpt_weights(model)


# --- each piece on its own --------------------------------------------------------------------


@pytest.mark.parametrize("piece", list(PIECE_CHECKS))
def test_reference_piece_passes(piece):
    result = PIECE_CHECKS[piece](getattr(reference, piece))
    assert result.passed
    assert result.message == f"✓ {piece}: matches the reference on 3 random inputs"


@pytest.mark.parametrize("piece", list(PIECE_CHECKS))
def test_stub_piece_is_not_written(piece):
    def stub(*args):
        raise NotImplementedError

    result = PIECE_CHECKS[piece](stub)
    assert not result.passed
    assert result.message == (
        f"{piece} is not written yet: replace its body and run this cell again"
    )


@pytest.mark.parametrize(
    "piece, hint, wrong",
    [(p, h, w) for p in PIECE_CHECKS for h, w in capstone.MISTAKES[p]],
    ids=lambda x: getattr(x, "__name__", x if isinstance(x, str) and len(x) < 12 else ""),
)
def test_each_listed_mistake_gets_its_hint(piece, hint, wrong):
    result = PIECE_CHECKS[piece](wrong)
    assert not result.passed
    assert result.message == f"✗ {piece}: {hint}"


def test_transposed_qkv_weight_error_gets_the_layout_hint():
    def attention(x, w_qkv, w_proj, n_head):
        q, k, v = (x @ w_qkv).split(x.shape[-1], dim=-1)  # [B, n, d] @ [3d, d] fails
        return q, k

    msg = capstone.check_gpt_attention(attention).message
    assert msg.startswith("✗ attention: your function raised RuntimeError")
    assert msg.endswith("Hint: " + capstone.TRANSPOSE_HINT)
    assert capstone.TRANSPOSE_HINT == (
        "every matrix is stored as nn.Linear keeps it, [out, in] (w_qkv is [3d, d], w_fc [4d, d]): "
        "multiplied as it is stored, a matrix lines x's features up with its out axis, not its in "
        "axis"
    )


def test_whole_position_table_error_gets_its_hint():
    msg = capstone.check_gpt_embed(lambda idx, tok, pos: tok[idx] + pos).message
    assert msg.endswith(
        "Hint: pos_emb has T rows, one per place a window can have, and this window holds n "
        "tokens: the whole table puts T position rows against n token rows"
    )


def test_attention_returning_only_the_output():
    msg = capstone.check_gpt_attention(lambda *a: reference.attention(*a)[0]).message
    assert msg == "✗ attention: returned 1 value(s), expected 2"


# Piece slips written the way a reader might write them, each named by its piece's check.


def _reader_attention(
    x,
    w_qkv,
    w_proj,
    n_head,
    split_by_reshape=False,
    merge_by_reshape=False,
    kv_swapped=False,
    mask_after=False,
    k_dot_T=False,
):
    B, n, d = x.shape
    hs = d // n_head
    q, k, v = (x @ w_qkv.T).chunk(3, dim=-1)
    if kv_swapped:
        q, v, k = (x @ w_qkv.T).chunk(3, dim=-1)
    if split_by_reshape:
        q, k, v = (t.reshape(B, n_head, n, hs) for t in (q, k, v))
    else:
        q, k, v = (t.reshape(B, n, n_head, hs).transpose(1, 2) for t in (q, k, v))
    att = (q @ (k.T if k_dot_T else k.transpose(-2, -1))) / math.sqrt(hs)
    future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    if mask_after:
        att = att.softmax(dim=-1).masked_fill(future, 0.0)
    else:
        att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
    y = att @ v
    y = y.reshape(B, n, d) if merge_by_reshape else y.transpose(1, 2).reshape(B, n, d)
    return y @ w_proj.T, att


def _piece_hint(piece, wrong):
    return next(h for h, w in capstone.MISTAKES[piece] if w is wrong)


@pytest.mark.parametrize(
    "switch, wrong",
    [
        ("split_by_reshape", capstone._att_split_without_transpose),
        ("merge_by_reshape", capstone._att_merge_without_transpose),
        ("kv_swapped", capstone._att_k_v_swapped),
        ("mask_after", capstone._att_masked_after_softmax),
    ],
)
def test_reader_attention_slips_are_named(switch, wrong):
    msg = capstone.check_gpt_attention(lambda *a: _reader_attention(*a, **{switch: True})).message
    assert msg == f"✗ attention: {_piece_hint('attention', wrong)}"


def test_reader_attention_slip_messages():
    def msg(**switches):
        return capstone.check_gpt_attention(lambda *a: _reader_attention(*a, **switches)).message

    assert msg(split_by_reshape=True, merge_by_reshape=True) == (
        "✗ attention: the heads were cut and glued back with reshapes alone: the two undo each "
        "other, but in between each head held whole positions' features, not its d_h-feature "
        "slice of every position, so the scores mixed positions; the head axis has to be moved, "
        "not reshaped into place"
    )
    assert msg(kv_swapped=True) == (
        "✗ attention: k and v are swapped: the scores compare the queries with v, and the "
        "weights average k; the fused projection gives q, k, v in that order along its last axis"
    )
    assert msg(mask_after=True) == (
        "✗ attention: the mask was applied after the softmax: the future weights were zeroed, "
        "but the weights left were not renormalised, so each query's row sums to less than 1; "
        "the mask belongs on the scores, before the softmax"
    )


def test_k_dot_T_on_4d_keys_gets_its_hint():
    with warnings.catch_warnings():  # torch deprecates .T on tensors that are not 2-D
        warnings.simplefilter("ignore", UserWarning)
        msg = capstone.check_gpt_attention(lambda *a: _reader_attention(*a, k_dot_T=True)).message
    assert msg == (
        "✗ attention: your function raised RuntimeError: The size of tensor a (3) must match the "
        "size of tensor b (6) at non-singleton dimension 1. Hint: if you wrote k.T: on a tensor "
        "with more than two dimensions .T reverses all of them ([B, h, n, d_h] becomes "
        "[d_h, n, h, B]), so the batch and head axes of the product no longer line up; the "
        "scores need only the last two axes of k swapped"
    )


def test_heads_messages_do_not_write_the_fix():
    for wrong in (
        capstone._att_split_without_transpose,
        capstone._att_merge_without_transpose,
        capstone._att_heads_reshaped_both_ways,
    ):
        hint = _piece_hint("attention", wrong)
        assert "transpose(1, 2)" not in hint and "reshape(B" not in hint and "view(" not in hint


# Code a slip message must not hold: each names what is wrong and what it does, not the fix.
FIXES = (
    "pos_emb[:n]",
    "arange(n)",
    "+ eps)",
    "mean(dim=-1",
    "softmax(dim=-1)",
    "triu(",
    "float('-inf')",
    "@ W.T",
    ".T",
    "torch.relu",
    "x + attention(",
    "x + mlp(",
    "f(norm(x))",
    "block(x, bw",
)


@pytest.mark.parametrize("piece", list(capstone.MISTAKES))
def test_slip_messages_do_not_write_the_fix(piece):
    hints = [h for h, _ in capstone.MISTAKES[piece]]
    hints += [h for _, h in capstone.EMBED_ERRORS + capstone.MATMUL_ERRORS]
    for hint in hints:
        assert not [fix for fix in FIXES if fix in hint], hint


def test_positions_off_by_one_are_named():
    def embed(idx, tok_emb, pos_emb):
        n = idx.shape[1]
        return tok_emb[idx] + pos_emb[torch.arange(1, n + 1)]

    assert capstone.check_gpt_embed(embed).message == (
        "✗ embed: the positions are off by one: the window's places were counted from 1, so the "
        "first token got row 1 of pos_emb and row 0 was never used; the first place in the "
        "window is place 0"
    )


def reader_mlp_with_residual(x, w_fc, w_proj):
    return x + torch.relu(x @ w_fc.T) @ w_proj.T  # the residual, inside the MLP


def test_residual_inside_the_mlp_is_named_by_the_mlp_check():
    assert capstone.check_gpt_mlp(reader_mlp_with_residual).message == (
        "✗ mlp: the MLP adds its own input back (a residual inside mlp): the residual belongs to "
        "the block, which adds x around the MLP, so here it would be added twice; mlp returns "
        "the second layer's output alone"
    )


def test_residual_inside_the_mlp_is_named_by_the_block_check():
    def block(x, bw, n_head):
        x = (
            x
            + reference.attention(
                reference.rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head
            )[0]
        )
        return x + reader_mlp_with_residual(
            reference.rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"]
        )

    assert capstone.check_gpt_block(block).message == (
        "✗ block: the MLP's residual is added twice: your mlp adds its own (normalised) input "
        "back, and the block adds x around it again; the residual belongs to the block alone, "
        "so mlp returns the second layer's output alone"
    )


def test_residual_inside_the_mlp_is_named_by_the_forward_check():
    forward = capstone.forward_with_pieces(mlp=reader_mlp_with_residual)
    lines = capstone.check_gpt_forward(forward).message.splitlines()
    assert lines[0].startswith("✗ forward: the first tensor that differs is 'block 0 · mlp'")
    assert lines[2] == "  likely slip in mlp: " + _piece_hint("mlp", capstone._mlp_adds_its_input)


def test_k_dot_T_in_the_forward_gets_the_attention_hint():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        forward = capstone.forward_with_pieces(
            attention=lambda *a: _reader_attention(*a, k_dot_T=True)
        )
        msg = capstone.check_gpt_forward(forward).message
    assert msg.startswith("✗ forward: ")
    assert msg.endswith("Hint: " + capstone.ATTENTION_ERRORS[0][1])


def test_show_solution_prints_the_block_and_the_pieces_it_calls(capsys):
    show_solution(capstone.check_gpt_block)
    out = capsys.readouterr().out
    for name in ("rmsnorm", "attention", "mlp", "block"):
        assert f"def {name}(" in out
    assert "def forward(" not in out
    show_solution(capstone.check_gpt_forward)
    out = capsys.readouterr().out
    for name in ("embed", "rmsnorm", "attention", "mlp", "block", "forward"):
        assert f"def {name}(" in out


# --- the weights --------------------------------------------------------------------------------


def test_weights_are_the_models_tensors_under_readable_names(model, weights):
    state = model.state_dict()
    names = capstone.flat_names(weights)
    assert [capstone.state_dict_key(n) for n, _ in names] == list(state)
    for name, tensor in names:
        assert torch.equal(tensor, state[capstone.state_dict_key(name)])
    assert weights["blocks"][0]["qkv"].shape == (48, 16)  # [3d, d], nn.Linear's [out, in]


def test_gpt_weights_refuses_another_architecture():
    with pytest.raises(ValueError, match="pre-norm RMSNorm, ReLU, no biases.*norm='layernorm'"):
        capstone.gpt_weights(GPT(textbook(block_size=8, n_layer=1, n_embd=16)))


# --- the whole forward --------------------------------------------------------------------------


def test_reference_forward_passes_every_tensor():
    result = capstone.check_gpt_forward(reference.forward)
    assert result.passed
    lines = result.message.splitlines()
    assert lines[0].startswith("✓ forward: every tensor equals gptlib's GPT")
    labels = [step[0] for step in capstone._steps(1)]
    assert len(lines) == 1 + len(labels)
    for line, label in zip(lines[1:], labels, strict=True):
        assert line.startswith(f"  ✓ {label} [3, ")


def test_stub_forward_and_stub_piece():
    def forward(w, idx, n_head):
        raise NotImplementedError

    def attention(x, w_qkv, w_proj, n_head):
        raise NotImplementedError

    expected = "{} is not written yet: replace its body and run this cell again"
    assert capstone.check_gpt_forward(forward).message == expected.format("forward")
    with_stub = capstone.forward_with_pieces(attention=attention)
    assert capstone.check_gpt_forward(with_stub).message == expected.format("attention")


def test_trace_labels_match_the_models(model, weights):
    idx = torch.tensor([[0, 5, 13, 13, 1, 0]])  # ".emma."
    mine = capstone.trace_forward(reference.forward, weights, idx, model.cfg.n_head)
    lib = capstone.trace_gpt(model, idx)
    assert list(mine) == [step[0] for step in capstone._steps(1)]
    for label, tensor in mine.items():
        torch.testing.assert_close(tensor, lib[label], atol=1e-5, rtol=1e-4)
    assert mine["block 0 · attention weights"].shape == (1, 4, 6, 6)


# Slips written the way a reader might write them (not the library's own wrong functions):
# each replaces one piece of the reference forward.


def _attention(x, w_qkv, w_proj, n_head, scale=True, mask=True, dim=-1, proj_t=True):
    B, n, d = x.shape
    hs = d // n_head
    q, k, v = torch.chunk(x @ w_qkv.t(), 3, dim=2)
    q = q.reshape(B, n, n_head, hs).permute(0, 2, 1, 3)
    k = k.reshape(B, n, n_head, hs).permute(0, 2, 1, 3)
    v = v.reshape(B, n, n_head, hs).permute(0, 2, 1, 3)
    att = torch.einsum("bhid,bhjd->bhij", q, k)
    if scale:
        att = att * hs**-0.5
    if mask:
        att = att.masked_fill(torch.tril(torch.ones(n, n)) == 0, -math.inf)
    att = torch.softmax(att, dim=dim)
    y = torch.einsum("bhij,bhjd->bhid", att, v).permute(0, 2, 1, 3).reshape(B, n, d)
    return (y @ w_proj.t() if proj_t else y @ w_proj), att


def slip_no_scale(x, w_qkv, w_proj, n_head):
    return _attention(x, w_qkv, w_proj, n_head, scale=False)


def slip_no_mask(x, w_qkv, w_proj, n_head):
    return _attention(x, w_qkv, w_proj, n_head, mask=False)


def slip_softmax_axis(x, w_qkv, w_proj, n_head):
    return _attention(x, w_qkv, w_proj, n_head, dim=2)


def slip_transposed_proj(x, w_qkv, w_proj, n_head):
    return _attention(x, w_qkv, w_proj, n_head, proj_t=False)


def slip_norm_axis(x, gain, eps=1e-5):
    return x * torch.rsqrt(torch.mean(x * x, dim=1, keepdim=True) + eps) * gain


def slip_layernorm(x, gain, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gain, None, eps)


def slip_missing_residual(x, bw, n_head):
    h, _ = attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)  # noqa: F821
    return h + mlp(rmsnorm(h, bw["ln2"]), bw["fc"], bw["mlp_proj"])  # noqa: F821


def slip_mlp_residual(x, bw, n_head):
    x = x + attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)[0]  # noqa: F821
    return mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])  # noqa: F821


def slip_positions(idx, tok_emb, pos_emb):
    return torch.nn.functional.embedding(idx, tok_emb)


PLANTED = [
    ("attention", slip_no_scale, "block 0 · attention weights", "not scaled: each is sqrt(d_h)"),
    ("attention", slip_no_mask, "block 0 · attention weights", "there is no causal mask"),
    ("attention", slip_softmax_axis, "block 0 · attention weights", "runs over dim=-2"),
    ("attention", slip_transposed_proj, "block 0 · attention output", "w_proj as it is stored"),
    ("rmsnorm", slip_norm_axis, "block 0 · norm 1", "runs over the tokens (dim=-2)"),
    ("rmsnorm", slip_layernorm, "block 0 · norm 1", "mean was subtracted before the division"),
    ("block", slip_missing_residual, "block 0 · x + attention", "residual around attention is"),
    ("block", slip_mlp_residual, "block 0 · x + mlp (block output)", "residual around the MLP"),
    ("embed", slip_positions, "embeddings", "the position embeddings are missing"),
]


@pytest.mark.parametrize("piece, slip, label, hint", PLANTED, ids=[p[1].__name__ for p in PLANTED])
def test_planted_slip_is_named_at_its_first_tensor(piece, slip, label, hint):
    result = capstone.check_gpt_forward(capstone.forward_with_pieces(**{piece: slip}))
    assert not result.passed
    first, shapes, likely = result.message.splitlines()[:3]
    assert first.startswith(f"✗ forward: the first tensor that differs is '{label}'")
    assert "expected shape [3, " in shapes and "got [3, " in shapes
    assert likely.startswith("  likely slip in ")
    assert hint in likely


@pytest.mark.parametrize("name", list(capstone.SLIPS))
def test_library_planted_slips_are_named(name):
    piece, _ = capstone.SLIPS[name]
    result = capstone.check_gpt_forward(capstone.planted_slip(name))
    assert not result.passed
    assert f"likely slip in {piece}: " in result.message


def test_tied_head_is_named_at_the_logits():
    def forward(w, idx, n_head):
        x = reference.embed(idx, w["tok_emb"], w["pos_emb"])
        for bw in w["blocks"]:
            x = reference.block(x, bw, n_head)
        return reference.rmsnorm(x, w["ln_f"]) @ w["tok_emb"].T

    msg = capstone.check_gpt_forward(forward).message
    assert msg.startswith("✗ forward: the first tensor that differs is 'logits'")
    assert "likely slip in forward: the head used the token table" in msg


def test_wrong_shape_names_both_shapes():
    def forward(w, idx, n_head):
        return reference.forward(w, idx, n_head)[:, :, :-1]

    msg = capstone.check_gpt_forward(forward).message
    assert "'logits'" in msg
    assert "expected shape [3, 8, 27], got [3, 8, 26]; the shapes differ" in msg


def test_an_inline_forward_is_compared_at_the_logits_and_says_what_it_could_not_see():
    def inline(w, idx, n_head):  # calls no piece by name, and forgets the final norm's gain
        x = w["tok_emb"][idx] + w["pos_emb"][: idx.shape[1]]
        x = reference.block(x, w["blocks"][0], n_head)
        x = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        return x @ w["lm_head"].T

    msg = capstone.check_gpt_forward(inline).message
    assert msg.startswith("✗ forward: the first tensor that differs is 'logits'")
    assert "(your forward called embed 0 time(s), the model has 1" in msg


def test_a_piece_raising_names_the_piece():
    def mlp(x, w_fc, w_proj):
        return torch.relu(x @ w_fc) @ w_proj.T  # [B, n, d] @ [4d, d]

    msg = capstone.check_gpt_forward(capstone.forward_with_pieces(mlp=mlp)).message
    assert msg.startswith("✗ forward: mlp raised RuntimeError")
    assert msg.endswith("Hint: " + capstone.TRANSPOSE_HINT)


# --- running a forward ----------------------------------------------------------------------------


def test_reference_forward_gives_the_librarys_validation_loss(model, weights):
    val = load_corpus("names").val
    mine = capstone.estimate_forward_loss(reference.forward, weights, val, model.cfg.n_head)
    assert abs(mine - estimate_loss(model, val)) < 1e-5


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown piece.*the pieces are embed"):
        capstone.forward_with_pieces(softmax=torch.softmax)
    with pytest.raises(ValueError, match="unknown slip 'typo'; choose one of no positions"):
        capstone.planted_slip("typo")


def test_reexported_from_package():
    assert exercises.check_gpt_forward is capstone.check_gpt_forward
    assert "check_gpt_attention" in exercises.__all__
    assert exercises.mlp is not capstone.mlp  # the notebook-06 submodule is not shadowed


# --- two slips at once: the pieces are checked on their own before the wiring -------------------
# A reader's six functions, written in one namespace as in the notebook, where each finds the
# others by name. `_reader` replaces some of them with the sources given.

READER_SOURCE = """
import math

import torch


def embed(idx, tok_emb, pos_emb):
    n = idx.shape[1]
    return tok_emb[idx] + pos_emb[torch.arange(n)]


def rmsnorm(x, gain, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def attention(x, w_qkv, w_proj, n_head):
    B, n, d = x.shape
    hs = d // n_head
    q, k, v = (x @ w_qkv.T).chunk(3, dim=-1)
    q, k, v = (t.reshape(B, n, n_head, hs).transpose(1, 2) for t in (q, k, v))
    att = q @ k.transpose(-2, -1) / math.sqrt(hs)
    att = att.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1), float("-inf"))
    att = att.softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, n, d)
    return y @ w_proj.T, att


def mlp(x, w_fc, w_proj):
    return torch.relu(x @ w_fc.T) @ w_proj.T


def block(x, bw, n_head):
    a, _ = attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)
    x = x + a
    return x + mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])


def forward(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T
"""

MASKLESS_ATTENTION = """
def attention(x, w_qkv, w_proj, n_head):
    B, n, d = x.shape
    hs = d // n_head
    q, k, v = (x @ w_qkv.T).chunk(3, dim=-1)
    q, k, v = (t.reshape(B, n, n_head, hs).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1) / math.sqrt(hs)).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, n, d)
    return y @ w_proj.T, att
"""

POST_NORM_BLOCK = """
def block(x, bw, n_head):
    a, _ = attention(x, bw["qkv"], bw["attn_proj"], n_head)
    x = rmsnorm(x + a, bw["ln1"])
    return rmsnorm(x + mlp(x, bw["fc"], bw["mlp_proj"]), bw["ln2"])
"""

FORWARD_FROM_IDS = """
def forward(w, idx, n_head):
    x = idx
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T
"""

FORWARD_FROM_TOKEN_TABLE = """
def forward(w, idx, n_head):
    x = w["tok_emb"][idx]
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T
"""

FORWARD_RESIDUAL_AROUND_BLOCK = """
def forward(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = x + block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T
"""

FORWARD_BLOCK_NOT_KEPT = """
def forward(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        block(x, bw, n_head)
    return rmsnorm(x, w["ln_f"]) @ w["lm_head"].T
"""

FORWARD_DOUBLED_LOGITS = """
def forward(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return 2 * (rmsnorm(x, w["ln_f"]) @ w["lm_head"].T)
"""

FIX_FIRST = (
    "✗ {name}: your {piece} does not pass its own check (check_gpt_{piece}) yet; fix it first: "
    "a wrong piece changes every tensor after it, so checking the {name} now could point at a "
    "line that is right"
)
WIRING = (
    "  your pieces pass their own checks, and this run used gptlib's in their place: the slip "
    "is in your forward's own lines"
)


def _reader(*changed: str) -> dict:
    namespace = {"__name__": "__main__"}  # the notebook's: the reader's code, not the library's
    exec(READER_SOURCE, namespace)
    for source in changed:
        exec(source, namespace)
    return namespace


def _forward_check(namespace: dict) -> str:
    before = dict(namespace)
    message = capstone.check_gpt_forward(namespace["forward"]).message
    assert all(namespace[k] is v for k, v in before.items())  # the reader's pieces are back
    return message


def test_the_readers_pieces_pass_together():
    namespace = _reader()
    assert capstone.check_gpt_forward(namespace["forward"]).passed
    assert capstone.check_gpt_block(namespace["block"]).passed


def test_maskless_attention_inside_a_post_norm_block_names_the_attention():
    namespace = _reader(MASKLESS_ATTENTION, POST_NORM_BLOCK)
    attention_says = capstone.check_gpt_attention(namespace["attention"]).message
    assert attention_says.startswith("✗ attention: there is no causal mask")
    assert _forward_check(namespace) == "\n".join(
        [FIX_FIRST.format(name="forward", piece="attention"), "  " + attention_says]
    )
    assert capstone.check_gpt_block(namespace["block"]).message == "\n".join(
        [FIX_FIRST.format(name="block", piece="attention"), "  " + attention_says]
    )


def test_once_the_attention_is_fixed_the_post_norm_block_is_named():
    namespace = _reader(POST_NORM_BLOCK)
    hint = _piece_hint("block", capstone._block_post_norm)
    assert capstone.check_gpt_block(namespace["block"]).message == f"✗ block: {hint}"
    assert f"likely slip in block: {hint}" in _forward_check(namespace)


def test_a_slip_the_forward_report_also_names_keeps_that_report():
    # One slip: the first tensor that differs is the attention's, as its own check says.
    message = _forward_check(_reader(MASKLESS_ATTENTION))
    assert message.startswith("✗ forward: the first tensor that differs is 'block 0 · attention")
    assert "likely slip in attention: there is no causal mask" in message


@pytest.mark.parametrize(
    "source, handed",
    [
        (FORWARD_FROM_IDS, "the token ids themselves ([3, 8], whole numbers)"),
        (FORWARD_FROM_TOKEN_TABLE, "the token embeddings alone (no position embeddings)"),
    ],
    ids=["ids", "token-table"],
)
def test_a_forward_that_never_calls_embed_is_named(source, handed):
    message = _forward_check(_reader(source))
    assert message == (
        f"✗ forward: your forward never calls embed: the first piece it calls, block, is handed "
        f"{handed} instead of the embeddings [3, 8, 16] that embed(idx, w['tok_emb'], "
        "w['pos_emb']) returns"
    )
    assert "rmsnorm" not in message


def test_a_stub_embed_never_called_is_not_asked_for():
    # The embed is still a stub, but the forward does not call it: the forward is what is wrong.
    stub = "def embed(idx, tok_emb, pos_emb):\n    raise NotImplementedError\n"
    message = _forward_check(_reader(stub, FORWARD_FROM_TOKEN_TABLE))
    assert message.startswith("✗ forward: your forward never calls embed")


@pytest.mark.parametrize(
    "source, label, likely, where",
    [
        (
            FORWARD_RESIDUAL_AROUND_BLOCK,
            "final norm",
            "  likely slip in forward: "
            + _piece_hint("forward", capstone._forward_residual_around_block),
            ", in what it hands rmsnorm",
        ),
        (
            FORWARD_BLOCK_NOT_KEPT,
            "final norm",
            "  likely slip in forward: " + _piece_hint("forward", capstone._forward_no_blocks),
            ", in what it hands rmsnorm",
        ),
        (FORWARD_DOUBLED_LOGITS, "logits", "  no known slip matches", ""),
    ],
    ids=["residual-around-block", "block-output-dropped", "doubled-logits"],
)
def test_a_wiring_slip_between_correct_pieces_names_the_wiring(source, label, likely, where):
    lines = _forward_check(_reader(source)).splitlines()
    assert lines[0].startswith(f"✗ forward: the first tensor that differs is '{label}'")
    assert lines[2] == likely
    assert lines[-1] == WIRING + where
    assert "try check_gpt" not in "\n".join(lines)


def test_a_block_wiring_slip_between_correct_pieces_names_the_block():
    namespace = _reader(
        """
def block(x, bw, n_head):
    a, _ = attention(rmsnorm(x, bw["ln1"]), bw["qkv"], bw["attn_proj"], n_head)
    x = x + 2 * a
    return x + mlp(rmsnorm(x, bw["ln2"]), bw["fc"], bw["mlp_proj"])
"""
    )
    message = capstone.check_gpt_block(namespace["block"]).message
    assert message.startswith("✗ block: values differ from the reference")
    assert message.endswith(
        "(this ran with gptlib's rmsnorm, attention, mlp in place of yours, which pass their own "
        "checks: the slip is in the block's own lines)"
    )


def test_a_stub_piece_inside_the_block_is_named():
    namespace = _reader("def attention(x, w_qkv, w_proj, n_head):\n    raise NotImplementedError\n")
    expected = "attention is not written yet: replace its body and run this cell again"
    assert capstone.check_gpt_block(namespace["block"]).message == expected
    assert _forward_check(namespace) == expected


def test_a_stub_block_is_not_written_even_when_its_pieces_are_stubs():
    namespace = _reader(
        *(
            f"def {name}(*args):\n    raise NotImplementedError\n"
            for name in ("rmsnorm", "attention", "mlp", "block", "forward")
        )
    )
    assert capstone.check_gpt_block(namespace["block"]).message.startswith("block is not written")
    assert _forward_check(namespace).startswith("forward is not written")


def test_a_piece_handing_the_work_to_the_library_is_refused_inside_the_forward():
    namespace = _reader(
        "def rmsnorm(x, gain, eps=1e-5):\n"
        "    return torch.nn.functional.rms_norm(x, (x.shape[-1],), gain, eps)\n"
    )
    message = _forward_check(namespace)
    assert message.startswith(FIX_FIRST.format(name="forward", piece="rmsnorm"))
    assert "✗ rmsnorm: write this one yourself: it calls F.rms_norm" in message


def test_the_refusal_guard_holds_while_gptlibs_pieces_stand_in(model, weights):
    namespace = _reader(
        """
from gptlib.model import Block, GPT


def forward(w, idx, n_head):
    x = embed(idx, w["tok_emb"], w["pos_emb"])
    for bw in w["blocks"]:
        x = block(x, bw, n_head)
    return GPT.forward(None, idx)


def block_by_library(x, bw, n_head):
    return Block.forward(None, x)
"""
    )
    before = dict(namespace)
    fn = namespace["forward"]
    stand_ins = capstone._reference_pieces(fn, capstone.PIECES)
    assert set(stand_ins) == set(capstone.PIECES)
    run = capstone._run_forward(fn, model, weights, 1e-5, 1e-4, stand_ins)
    assert run.kind == "refused"
    assert run.result.message.startswith("✗ forward: write this one yourself: it calls GPT.forward")
    assert all(namespace[k] is v for k, v in before.items())
    assert _forward_check(namespace) == run.result.message

    by_library = capstone._with_pieces(
        namespace["block_by_library"], {"rmsnorm": reference.rmsnorm}
    )
    result = capstone.compare("block", by_library, reference.block, capstone._block_inputs)
    assert result.message.startswith("✗ block: write this one yourself: it calls Block.forward")
