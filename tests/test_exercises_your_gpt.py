"""Notebook 14, the capstone: each kept slip is named by its row, the slips the notebook plants are
named in their pieces, a cut gradient shows in the forward's check and in the training, the loop
and the sampler 14 assembles run the notebook-10 loop and notebook-12 step they are handed (a slip
in the reader's loop is named by notebook 10's check when 14 takes it), and the reference pieces,
forward, loop and sampler give what gptlib's GPT gives (the plain-tensor tools and the climb with
the reader's pieces are gptlib.classroom.ladder's, tested in test_ladder)."""

from functools import partial

import pytest
import torch
from stubs import UNZEROED_LOOP

from gptlib.checkpoint import load_asset
from gptlib.classroom.ladder import estimate_forward_loss, gpt_optimizer, gpt_weights, trainable
from gptlib.config import microgpt
from gptlib.data import load_corpus
from gptlib.exercises import check_train_loop, yours
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


def _trained(forward_fn, seed=0, **loop) -> torch.Tensor:
    """14's assembled training (train_gpt, `loop` handed in or the course's) on float64 random
    weights of two blocks: 6 steps of 4 windows, warmup 2, clip 0.2; the losses."""
    g = torch.Generator().manual_seed(seed)
    w = trainable(Y._weights(g, dtype=torch.float64))
    tokens = torch.randint(0, Y._V, (300,), generator=g)
    losses = Y.train_gpt(forward_fn, R.lm_loss, w, gpt_optimizer(w, lr=1e-2), tokens, 6, 4, 1e-2,
                         2, 0.2, seed, Y._H, **loop)  # fmt: skip
    return torch.tensor(losses, dtype=torch.float64)


def test_the_assembled_loop_trains_the_forward_it_is_handed_and_the_cut_is_located():
    cut = Y._with(rmsnorm=_rms_detached)

    def forward_fn(w, idx, n_head):  # right in value, its graph cut in the final norm
        return Y.forward(w, idx, n_head, cut)

    right, wrong = _trained(Y.reference_forward), _trained(forward_fn)
    assert abs(float(right[0] - wrong[0])) < 1e-12  # the same first loss: the values are right
    assert float((right - wrong).abs().max()) > 1e-4  # and another curve: the gradients are not
    message = Y.check_forward(Y.forward, cut).message  # 14 checks the forward in use with this
    assert message.startswith("✗ forward: the output is right, but the ")
    assert "the cut lies in the rmsnorm" in message


# notebook 10's loop without zero_grad, as a reader's package keeps it
UNZEROED = (
    "import torch\n\nfrom gptlib.data import sample_batch\nfrom gptlib.train import learning_rate\n\n\n"
    + UNZEROED_LOOP
)


def test_train_gpt_runs_notebook_10s_loop_and_its_slip_is_named(tmp_path, monkeypatch, capsys):
    course = _trained(Y.reference_forward)
    assert torch.equal(_trained(Y.reference_forward, loop=L.solution_train_loop), course)
    unzeroed = _trained(Y.reference_forward, loop=partial(L._loop, order="bcs"))
    assert float((unzeroed - course).abs().max()) > 1e-4  # the loop handed in is the one that ran
    # 14 takes the loop with yours.use(check_train_loop): a kept loop with that slip is named as
    # notebook 10's check names it, and the course's loop stands in
    monkeypatch.setenv(yours.ENV, str(tmp_path))
    (tmp_path / "train_loop.py").write_text(UNZEROED)
    capsys.readouterr()
    assert yours.use(check_train_loop) is L.solution_train_loop
    out = capsys.readouterr().out
    hint = next(h for h, wrong in L.LOOP_MISTAKES if wrong.keywords == {"order": "bcs"})
    assert out.startswith("train_loop: the course's reference stands in (yours does not pass")
    assert f"✗ train_loop: {hint}" in out, out


def test_a_loop_that_clears_the_gradients_on_the_model_runs_on_the_dict():
    """`model.zero_grad()` instead of the optimizer's: notebook 10's check passes such a loop, and
    WeightsModel clears the tensors it trains, so 14's training runs it as the course's."""
    space = {}
    exec(UNZEROED.replace("        loss.backward()", "        model.zero_grad()\n        loss.backward()"),
         space)  # fmt: skip
    assert check_train_loop(space["train_loop"])
    assert torch.equal(_trained(Y.reference_forward, loop=space["train_loop"]),
                       _trained(Y.reference_forward))  # fmt: skip


def _names(asset, **step):
    """14's assembled sampler (sample_names, `step` handed in or the course's) on the trained
    microgpt: 6 names of up to 12 tokens at temperature 1, top-k 3."""
    w, bos = gpt_weights(asset.model.double()), asset.tokenizer.bos_id
    g = torch.Generator().manual_seed(5)
    return Y.sample_names(Y.reference_forward, w, 4, bos, 6, g, 1.0, 3, 12, **step)


def test_sample_names_runs_notebook_12s_step_or_the_course_step_around_the_filter(asset):
    course = _names(asset)
    assert _names(asset, step=G.solution_sample_step) == course
    assert _names(asset, step=Y.sample_step_with(G.solution_filter_logits)) == course
    k_plus_one = partial(G._filter, k_shift=1)  # a slip of notebook 12's filter
    assert _names(asset, step=Y.sample_step_with(k_plus_one)) != course  # the step handed in ran


def test_a_step_that_never_crops_the_context_is_refused_before_14_runs_it():
    """14's sampler grows each row past the window; the step crops. A step that does not is named
    by notebook 12's check, so yours.use does not hand it to the sampler."""

    def sample_step(model, idx, temperature, top_k, top_p, generator):
        was = model.training
        model.eval()
        with torch.no_grad():
            logits = model(idx)[0][:, -1]
        model.train(was)
        if temperature == 0:
            return logits.argmax(-1, keepdim=True)
        probs = G.solution_filter_logits(logits / temperature, top_k, top_p).softmax(-1)
        return torch.multinomial(probs, 1, generator=generator)

    message = G.check_sample_step(sample_step).message
    assert message.startswith("✗ sample_step: your function raised ")
    assert message.endswith("the context was not cropped, so the model refused it"), message


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


def test_a_cache_that_grows_by_a_block_each_call_is_told_in_blocks():
    def appends(w, idx, cache, n_head, pieces):  # each call's (k, v) added after the old ones
        mine = list(cache[-len(w["blocks"]) :])
        logits = Y.forward_cached(w, idx, mine, n_head, pieces)
        cache.extend(mine)
        return logits

    message = Y.check_forward_cached(appends).message
    assert message.startswith("✗ forward_cached: after the 4 calls your cache holds 8 entries")
    assert message.endswith("where the model's 2 blocks keep one (k, v) each")
