"""Notebook 14, the capstone: each kept slip is named by its row, the slips the notebook plants are
named in their pieces, a cut gradient shows in the forward's check and in the training check, and
the reference pieces, forward, loop and sampler give what gptlib's GPT gives (the plain-tensor
tools and the climb with the reader's pieces are gptlib.classroom.ladder's, tested in test_ladder)."""

import types
from functools import partial

import pytest
import torch

from gptlib.checkpoint import load_asset
from gptlib.classroom.ladder import estimate_forward_loss, gpt_optimizer, gpt_weights, trainable
from gptlib.config import microgpt
from gptlib.data import load_corpus
from gptlib.exercises import nb10_training_loop as L
from gptlib.exercises import nb12_generation as G
from gptlib.exercises import nb14_your_gpt as Y
from gptlib.generate import generate
from gptlib.model import GPT
from gptlib.train import estimate_loss, train

R = Y.reference


def _row(check, name, table, wrap=lambda wrong: wrong):
    return [pytest.param(check, name, hint, wrap(wrong), id=f"{name}-{i}")
            for i, (hint, wrong) in enumerate(table)]  # fmt: skip


ROWS = [
    *_row(Y.check_forward, "forward", Y.FORWARD_MISTAKES),
    *_row(Y.check_train_gpt, "train_gpt", Y.LOOP_MISTAKES),
    *_row(
        Y.check_sample_names,
        "sample_names",
        Y.SAMPLE_MISTAKES,
        lambda how: lambda *a: how(Y.sample_names, *a),
    ),  # fmt: skip
    *_row(Y.check_cached_attention, "cached_attention", Y.CACHED_MISTAKES),
    *_row(Y.check_forward_cached, "forward_cached", Y.FORWARD_CACHED_MISTAKES),
]


@pytest.mark.parametrize("check, name, hint, wrong", ROWS)
def test_each_kept_slip_is_named_by_its_row(check, name, hint, wrong):
    result = check(wrong)
    assert not result and result.message == f"✗ {name}: {hint}"


# --- what the notebook promises -------------------------------------------------------------


@pytest.mark.parametrize("slip, piece", [("no scale", "causal_attention"),
                                         ("no residual", "pre_norm_block")])  # fmt: skip
def test_a_planted_slip_is_named_in_its_piece(slip, piece):
    message = Y.check_forward(Y.forward, Y.planted_slip(slip)).message
    assert message.startswith(f"✗ forward: {piece} "), message


def _rms_detached(x, gain, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt().detach() * gain


def _mlp_no_grad(x, w_fc, w_proj, activation):
    with torch.no_grad():
        return R.mlp_forward(x, w_fc, w_proj, activation)


def _attention_detached(q, k, v):  # the weights taken out of the graph, the values kept
    n = q.size(-2)
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1).detach() @ v


@pytest.mark.parametrize(
    "piece, cut, located",
    [
        ("rmsnorm", _rms_detached, "the cut lies in the rmsnorm with gain w['ln_f']"),
        ("mlp_forward", _mlp_no_grad, "the weights of the MLP get no gradient"),
        ("causal_attention", _attention_detached, "the cut lies inside attention"),
    ],
)
def test_a_piece_right_in_value_but_cut_is_located_not_blamed_on_the_embedding(piece, cut, located):
    message = Y.check_forward(Y.forward, Y._with(**{piece: cut})).message
    assert message.startswith("✗ forward: ") and located in message, message
    assert "tok_emb" not in message  # the embedding upstream is not the cut


def test_a_detached_forward_is_located_at_the_head():
    def forward(w, idx, n_head, pieces):
        return Y.forward(w, idx, n_head, pieces).detach() + 0 * w["lm_head"].sum()

    message = Y.check_forward(forward).message
    assert message.startswith("✗ forward: no gradient reaches w['lm_head'] or any weight before it")


def test_the_training_check_trains_the_forward_it_is_handed():
    def forward_fn(w, idx, n_head):
        return Y.forward(w, idx, n_head, Y._with(rmsnorm=_rms_detached))

    assert Y.check_train_gpt(Y.train_gpt)
    message = Y.check_train_gpt(Y.train_gpt, forward_fn).message
    assert message.startswith("✗ train_gpt: the forward it trains: the output is right, but the ")
    assert "the cut lies in the rmsnorm" in message


def _with_global(fn, name, value):
    """`fn` as a reader writes it in notebook 14, where `name` is the piece of an earlier one."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, name: value}, fn.__name__,
                              fn.__defaults__)  # fmt: skip


def test_train_gpt_runs_notebook_10s_loop_and_its_slip_is_named():
    reader = _with_global(Y.train_gpt, "train_loop", L.solution_train_loop)
    assert Y.check_train_gpt(reader)
    unzeroed = _with_global(Y.train_gpt, "train_loop", partial(L._loop, order="bcs"))
    hint = next(h for h, wrong in Y.LOOP_MISTAKES if wrong.keywords == {"order": "bcs"})
    assert Y.check_train_gpt(unzeroed).message == f"✗ train_gpt: {hint}"


def test_sample_names_runs_notebook_12s_step_or_the_course_step_around_the_filter():
    around = Y.sample_step_with(G.solution_filter_logits)
    assert Y.check_sample_names(_with_global(Y.sample_names, "step_in_use", around))
    assert Y.check_sample_names(_with_global(Y.sample_names, "step_in_use", G.solution_sample_step))
    k_plus_one = partial(G._filter, k_shift=1)  # a slip of notebook 12's filter
    slipped = _with_global(Y.sample_names, "step_in_use", Y.sample_step_with(k_plus_one))
    assert Y.check_sample_names(slipped).message.startswith("✗ sample_names: name ")


def test_a_sampler_that_never_crops_the_context_gets_the_block_hint():
    def uncropped(forward_fn, w, n_head, bos, num, generator, temperature=1.0, top_k=None,
                  max_len=40):  # fmt: skip
        idx = torch.full((num, 1), bos)
        for _ in range(max_len):
            logits = forward_fn(w, idx, n_head)[:, -1] / temperature
            idx = torch.cat([idx, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
        return idx[:, 1:].tolist()

    message = Y.check_sample_names(uncropped).message
    assert message.startswith("✗ sample_names: your function raised ")
    assert message.endswith(Y.CROP)


def test_a_list_is_accepted_where_a_pair_is_asked():
    assert Y.check_cached_attention(lambda *a: list(Y.cached_attention(*a)))


# --- the reference is gptlib's GPT ------------------------------------------------------------


@pytest.fixture(scope="module")
def asset():
    return load_asset(Y.ASSET)


def test_the_reference_forward_and_its_loss_are_the_librarys(asset):
    model, w = asset.model, gpt_weights(asset.model)
    idx = torch.randint(0, 27, (3, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(Y.reference_forward(w, idx, 4), model(idx)[0], atol=1e-5)
    val = load_corpus("names").val
    ours = estimate_forward_loss(Y.reference_forward, w, val, 4, n_batches=5)
    assert abs(ours - estimate_loss(model, val, n_batches=5)) < 1e-5


def test_the_reference_loop_is_gptlibs_train():
    torch.manual_seed(0)
    model = GPT(microgpt(27)).double()
    w = trainable(gpt_weights(model))
    tokens = load_corpus("names").train
    losses = Y.train_gpt(Y.reference_forward, R.lm_loss, w, gpt_optimizer(w), tokens, 20, 8,
                         1e-2, 5, 1.0, 0, 4)  # fmt: skip
    history = train(model, tokens, 20, 8, max_lr=1e-2, warmup=5, schedule="cosine", clip=1.0,
                    seed=0, eval_every=0)  # fmt: skip
    assert max(abs(a - b) for a, b in zip(losses, history.loss, strict=True)) < 1e-8


def test_the_reference_sampler_draws_generates_names(asset):
    model = asset.model.double()
    w, bos = gpt_weights(model), asset.tokenizer.bos_id
    names = Y.sample_names(Y.reference_forward, w, 4, bos, 6, torch.Generator().manual_seed(5),
                           0.7, 5, 12)  # fmt: skip
    out = generate(model, torch.full((6, 1), bos), 12, temperature=0.7, top_k=5,
                   generator=torch.Generator().manual_seed(5), stop_token=bos, use_cache=False)  # fmt: skip
    assert names == [r[: r.index(bos)] if bos in r else r for r in out[:, 1:].tolist()]


# --- generic lines in the exercise's terms ----------------------------------------------------


def test_a_sampler_that_keeps_the_closing_bos_is_told_which_name_differs():
    def sample_names(*args):
        bos = args[3]
        return [[*name, bos] for name in Y.sample_names(*args)]

    message = Y.check_sample_names(sample_names).message
    assert message.startswith("✗ sample_names: name 0 of the 6 drawn differs: yours is the ids [")
    assert "shape" not in message


def test_a_cache_that_grows_by_a_block_each_call_is_told_in_blocks():
    def appends(w, idx, cache, n_head, pieces):  # each call's (k, v) added after the old ones
        mine = list(cache[-len(w["blocks"]) :])
        logits = Y.forward_cached(w, idx, mine, n_head, pieces)
        cache.extend(mine)
        return logits

    message = Y.check_forward_cached(appends).message
    assert message.startswith("✗ forward_cached: after the 4 calls your cache holds 8 entries")
    assert message.endswith("where the model's 2 blocks keep one (k, v) each")
