"""Notebook 14, the capstone: every check passes its reference, names each of its slips, catches
a cut gradient, and the forward checker names the first tensor that differs from gptlib's GPT."""

import inspect
import math
import types
import warnings

import pytest
import torch

from gptlib import exercises
from gptlib.checkpoint import load_asset
from gptlib.config import textbook
from gptlib.data import load_corpus
from gptlib.exercises import show_solution
from gptlib.exercises import your_gpt as Y
from gptlib.ladder import climb
from gptlib.model import GPT
from gptlib.train import estimate_loss

R = Y.reference
PIECES = ("attention", "block")  # embed, rmsnorm and the MLP are notebooks 01, 06 and 07's
CHECKS = {
    "attention": Y.check_gpt_attention,
    "block": Y.check_gpt_block,
    "forward": Y.check_gpt_forward,
    "gpt_loss": Y.check_gpt_loss,
    "train_gpt": Y.check_gpt_train,
    "sample_names": Y.check_gpt_sample,
    "cached_attention": Y.check_gpt_cached_attention,
    "forward_cached": Y.check_gpt_forward_cached,
}


def _with(**changed):
    return types.SimpleNamespace(**{**vars(R), **changed})


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_reference_passes_and_a_stub_is_not_written(name):
    check = CHECKS[name]
    assert check(check.solution).passed, check(check.solution).message
    assert (
        check(_stub).message
        == f"{name} is not written yet: replace its body and run this cell again"
    )


def _flat_to_pair(wrong):
    def cached(*args):
        out, k, v = wrong(*args)
        return out, (k, v)

    return cached


TABLES = [
    *((p, h, w) for p in PIECES for h, w in Y.MISTAKES[p]),
    *(("gpt_loss", h, w) for h, w in Y.LOSS_MISTAKES),
    *(("train_gpt", h, w) for h, w in Y.LOOP_MISTAKES),
    *(("cached_attention", h, _flat_to_pair(w)) for h, w in Y.CACHED_MISTAKES),
    *(("forward_cached", h, w) for h, w in Y.FORWARD_CACHED_MISTAKES),
]


@pytest.mark.parametrize(
    "name, hint, wrong", TABLES, ids=[f"{t[0]}-{i}" for i, t in enumerate(TABLES)]
)
def test_each_listed_slip_is_named(name, hint, wrong):
    assert CHECKS[name](wrong).message == f"✗ {name}: {hint}"


@pytest.mark.parametrize("hint, wrong", Y.SAMPLE_MISTAKES, ids=range(len(Y.SAMPLE_MISTAKES)))
def test_each_sampler_slip_is_named_with_its_setting(hint, wrong):
    message = Y.check_gpt_sample(wrong).message
    assert message.startswith(f"✗ sample_names: {hint} (temperature ")


@pytest.mark.parametrize("hint, wrong", Y.FORWARD_MISTAKES, ids=range(len(Y.FORWARD_MISTAKES)))
def test_each_forward_slip_is_named_at_the_first_tensor_that_differs(hint, wrong):
    message = Y.check_gpt_forward(wrong).message
    assert message.startswith("✗ forward: the first tensor that differs is ")
    assert f"likely slip in forward: {hint}" in message


# Code that would hand over the fix: a message says what the output shows, not what to write.
FIXES = ("pos_emb[:", "arange(", "+ eps)", "mean(dim=-1", "softmax(dim=-1)", "triu(", "@ W.T",
         "torch.relu", "x + attention(", "x + mlp(", "transpose(1, 2)", "view(", "belongs",
         "must be", "should", "train(was_training)", "add wpe")  # fmt: skip


def test_no_slip_message_writes_the_fix():
    tables = [*Y.MISTAKES.values(), Y.LOSS_MISTAKES, Y.LOOP_MISTAKES, Y.SAMPLE_MISTAKES]
    tables += [Y.CACHED_MISTAKES, Y.FORWARD_CACHED_MISTAKES]
    for table in tables:
        for hint, _ in table:
            assert not [f for f in FIXES if f in hint], hint


# --- a cut gradient is named --------------------------------------------------------------------


def rms_detached(x, gain, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach() * gain


def attention_detached(x, w_qkv, w_proj, n_head):
    return R.attention(x, w_qkv.detach(), w_proj, n_head)


def mlp_forward_no_grad(x, w_fc, w_proj, activation):
    with torch.no_grad():
        return activation(x @ w_fc.T) @ w_proj.T


mlp_no_grad = Y.mlp_relu(mlp_forward_no_grad)  # notebook 07's piece, as the capstone calls it


def block_detached(x, bw, n_head, pieces):
    return R.block(x, {**bw, "fc": bw["fc"].detach()}, n_head, pieces)


CUTS = [
    ("rmsnorm", rms_detached, "gradient of x"),
    ("attention", attention_detached, "gradient of w_qkv is missing"),
    ("mlp", mlp_no_grad, "carries no gradient"),
]
OWN_CHECKS = {
    "rmsnorm": (exercises.check_rmsnorm, rms_detached),
    "attention": (Y.check_gpt_attention, attention_detached),
    "mlp": (exercises.check_mlp, mlp_forward_no_grad),
}


@pytest.mark.parametrize("piece, cut, words", CUTS, ids=[c[0] for c in CUTS])
def test_a_cut_gradient_fails_the_pieces_check(piece, cut, words):
    check, own = OWN_CHECKS[piece]
    result = check(own)
    assert not result.passed and words in result.message, result.message


def test_a_cut_gradient_inside_the_block_names_the_weight():
    message = Y.check_gpt_block(block_detached).message
    assert message == (
        "✗ block: the gradient of bw['fc'] is missing: something in your block is detached or "
        "under no_grad, so training would never change bw['fc']"
    )


@pytest.mark.parametrize("piece, cut, words", CUTS, ids=[c[0] for c in CUTS])
def test_a_cut_gradient_fails_the_forward_check_naming_the_piece(piece, cut, words):
    message = Y.check_gpt_forward(R.forward, _with(**{piece: cut})).message
    assert message.startswith(f"✗ forward: the values equal gptlib's GPT, but your {piece} ")
    assert words in message


FORWARD_CUTS = [
    ("rmsnorm", rms_detached, "gradient of w['tok_emb'] differs"),
    ("attention", attention_detached, "the gradient of w['blocks'][0]['qkv'] is missing"),
    ("mlp", mlp_no_grad, "the gradient of w['blocks'][0]['ln2'] is missing"),
]


@pytest.mark.parametrize("piece, cut, words", FORWARD_CUTS, ids=[c[0] for c in FORWARD_CUTS])
def test_the_training_check_trains_the_forward_it_is_given(piece, cut, words):
    pieces = _with(**{piece: cut})

    def forward_fn(w, idx, n_head):
        return R.forward(w, idx, n_head, pieces)

    message = Y.check_gpt_train(R.train_gpt, forward_fn).message
    assert message.startswith("✗ train_gpt: the forward it trains: ") and words in message


def test_a_forward_whose_logits_differ_is_sent_to_the_forward_check():
    def forward_fn(w, idx, n_head):
        return R.forward(w, idx, n_head, _with(attention=Y._att_no_scale))

    assert Y.check_gpt_train(R.train_gpt, forward_fn).message == (
        "✗ train_gpt: the forward it trains does not give the reference's logits: "
        "check_gpt_forward says where"
    )


# --- the readers' own ways of writing a piece -------------------------------------------------


def test_a_list_is_accepted_where_a_pair_is_asked():
    assert Y.check_gpt_attention(lambda *a: list(R.attention(*a))).passed
    assert Y.check_gpt_cached_attention(lambda *a: list(R.cached_attention(*a))).passed


def _reader_attention(x, w_qkv, w_proj, n_head, k_dot_T=False, loop=False):
    B, n, d = x.shape
    hs = d // n_head
    q, k, v = (x @ w_qkv.T).chunk(3, dim=-1)
    heads = []
    for i in range(n_head):  # a loop over heads, with einsum
        s = slice(i * hs, (i + 1) * hs)
        qi, ki = q[..., s], k[..., s]
        att = (qi @ (ki.T if k_dot_T else ki.transpose(-2, -1))) / math.sqrt(hs)
        att = att.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        heads.append(torch.einsum("bij,bjd->bid", att.softmax(-1), v[..., s]))
    weights = torch.stack([(q[..., i * hs:(i + 1) * hs] @ k[..., i * hs:(i + 1) * hs].transpose(-2, -1) / math.sqrt(hs)).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf).softmax(-1) for i in range(n_head)], 1)  # fmt: skip
    return torch.cat(heads, -1) @ w_proj.T, weights


def test_a_loop_over_heads_with_einsum_passes():
    assert Y.check_gpt_attention(_reader_attention).passed


def test_k_dot_T_on_batched_keys_gets_its_hint():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        message = Y.check_gpt_attention(lambda *a: _reader_attention(*a, k_dot_T=True)).message
    assert message.startswith("✗ attention: your function raised RuntimeError")
    assert "Hint: if you wrote k.T" in message


# --- the forward, tensor by tensor ------------------------------------------------------------


def test_the_reference_forward_lists_every_tensor():
    message = Y.check_gpt_forward(R.forward).message
    assert message.splitlines()[0] == (
        "✓ forward: every tensor equals gptlib's GPT (atol 1e-05) on ids of shape [3, 8] and "
        "[2, 5], and so does the gradient of every weight"
    )
    assert len(message.splitlines()) == 11 and message.splitlines()[-1] == "  ✓ logits [3, 8, 27]"


@pytest.mark.parametrize("name", list(Y.SLIPS))
def test_every_planted_slip_is_named_in_its_piece(name):
    piece = Y.SLIPS[name][0]
    message = Y.check_gpt_forward(R.forward, Y.planted_slip(name)).message
    assert f"likely slip in {piece}: " in message, message


def test_the_first_tensor_that_differs_is_named_with_both_shapes():
    message = Y.check_gpt_forward(R.forward, Y.planted_slip("no scale")).message
    assert message.splitlines()[:2] == [
        "✗ forward: the first tensor that differs is 'block 0 · attention weights' (made by "
        "attention), on ids of shape [3, 8]",
        "  expected shape [3, 4, 8, 8], got [3, 4, 8, 8]; largest difference 0.311",
    ]


def test_an_unknown_slip_in_a_piece_is_put_on_that_piece():
    pieces = _with(mlp=lambda x, w_fc, w_proj: 1.01 * R.mlp(x, w_fc, w_proj))
    message = Y.check_gpt_forward(R.forward, pieces).message
    assert "'block 0 · mlp' (made by mlp)" in message
    assert "no known slip matches; check_mlp (notebook 07) looks at your mlp alone" in message


def test_an_unknown_wiring_slip_is_put_on_the_lines_around_the_pieces():
    def forward(w, idx, n_head, pieces):
        x = pieces.embed(idx, w["tok_emb"], w["pos_emb"])
        x = pieces.block(x, w["blocks"][0], n_head, pieces)
        return pieces.rmsnorm(x + 0.1, w["ln_f"]) @ w["lm_head"].T

    message = Y.check_gpt_forward(forward).message
    assert "'final norm' (made by rmsnorm)" in message
    assert "rmsnorm returns the right thing for what it was handed, so the slip is in the forward's own lines" in message  # fmt: skip


def test_a_forward_written_inline_is_compared_at_the_logits():
    def forward(w, idx, n_head, pieces):
        return 1.1 * R.forward(w, idx, n_head, R)  # never calls the pieces it is handed

    message = Y.check_gpt_forward(forward).message
    assert "'logits' (made by forward)" in message
    assert "(your forward called embed 0 time(s), the model has 1" in message


def test_a_stub_piece_inside_the_forward_is_named():
    assert Y.check_gpt_forward(R.forward, _with(mlp=_stub)).message == (
        "mlp is not written yet: replace its body and run this cell again"
    )


def test_the_checker_reads_no_frames_and_rebinds_no_globals():
    source = inspect.getsource(Y)
    for machinery in ("setprofile", "settrace", "__globals__", "f_locals", "refusing("):
        assert machinery not in source


# --- the tensors, the loss, the ladder --------------------------------------------------------


def test_the_weights_are_the_models_tensors_under_readable_names():
    model = load_asset(Y.ASSET).model
    w = Y.gpt_weights(model)
    state = model.state_dict()
    for name, t in Y.flat_names(w):
        assert torch.equal(t, state[Y.state_dict_key(name)])
    assert sum(t.numel() for _, t in Y.flat_names(w)) == model.num_parameters() == 4112
    with pytest.raises(ValueError, match="microgpt-style"):
        Y.gpt_weights(GPT(textbook(27)))


def test_the_reference_forward_gives_the_librarys_validation_loss():
    model = load_asset(Y.ASSET).model
    val = load_corpus("names").val
    ours = Y.estimate_forward_loss(Y.reference_forward, Y.gpt_weights(model), val, 4, n_batches=5)
    assert abs(ours - estimate_loss(model, val, n_batches=5)) < 1e-5


def test_the_pieces_trace_under_the_models_labels():
    model = load_asset(Y.ASSET).model
    idx = torch.randint(0, 27, (2, 8), generator=torch.Generator().manual_seed(0))
    mine = Y.trace_forward(R.forward, Y.gpt_weights(model), idx, 4, R)
    lib = Y.trace_gpt(model, idx)
    assert len(mine) == 10 and all(torch.allclose(mine[k], lib[k], atol=1e-5) for k in mine)


def test_climbing_with_the_reference_pieces_is_gptlibs_ladder():
    corpus = load_corpus("names")
    kw = dict(steps=15, batch_size=8, max_lr=1e-2, seed=0)
    mine = Y.climb_yours(corpus, pieces=R, forward=R.forward, train_fn=R.train_gpt, eval_batches=3, **kw)  # fmt: skip
    library = climb(corpus, min_lr=0.0, eval_batches=3, **kw)
    assert [r.name for r in mine] == [r.name for r in library]
    for a, b in zip(mine, library, strict=True):
        assert a.parameters == b.parameters and abs(a.val_loss - b.val_loss) < 1e-4


def test_show_solution_prints_the_block_with_the_pieces_it_calls(capsys):
    show_solution(Y.check_gpt_block)
    out = capsys.readouterr().out
    assert "def block(x, bw, n_head, pieces):" in out and "pieces.attention(" in out


def test_reexported_from_the_package():
    for name in Y.__all__:
        assert getattr(exercises, name) is getattr(Y, name)


def test_a_piece_raising_inside_the_forward_is_named_with_its_hint():
    def attention(x, w_qkv, w_proj, n_head):
        return R.attention(x, w_qkv.T, w_proj, n_head)  # [B, n, d] @ [d, 3d] does not fit

    message = Y.check_gpt_forward(R.forward, _with(attention=attention)).message
    assert message.startswith("✗ forward: attention raised RuntimeError")
    assert message.endswith("Hint: " + Y.TRANSPOSE_HINT)


def test_a_loop_whose_update_differs_is_told_where_the_losses_part():
    def train_gpt(forward_fn, w, optimizer, tokens, steps, batch_size, max_lr, *rest):
        return R.train_gpt(forward_fn, w, optimizer, tokens, steps, batch_size, 0.9 * max_lr, *rest)

    message = Y.check_gpt_train(train_gpt).message
    assert message.startswith("✗ train_gpt: the losses agree up to step 0 and part at step 1 (")
    assert message.endswith(
        "the batches and the loss are train()'s, the update before step 1 is not"
    )


def test_a_sampler_that_never_crops_the_context_gets_the_block_hint():
    def uncropped(forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None, max_len=40):  # fmt: skip
        idx = torch.full((num, 1), bos)
        for _ in range(max_len):
            logits = forward_fn(w, idx, n_head)[:, -1] / temperature
            idx = torch.cat([idx, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
        return idx[:, 1:].tolist()

    message = Y.check_gpt_sample(uncropped).message
    assert message.startswith("✗ sample_names: your function raised ")
    assert message.endswith("tokens, the rows the position table has")
