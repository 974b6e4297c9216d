"""The ladder of models behind "what each piece buys": which pieces each rung has; the rungs as
plain tensors, run by the course's pieces, give the rung's logits, and climbed with them and the
course's loop, the library's ladder."""

import pytest
import torch

from gptlib import GPT, microgpt
from gptlib.attention import CausalSelfAttention
from gptlib.checkpoint import load_asset
from gptlib.classroom.ladder import (
    RUNGS,
    PartialGPT,
    build_rung,
    climb,
    climb_yours,
    flat_names,
    gpt_weights,
    rung_forwards,
)
from gptlib.config import textbook
from gptlib.data import load_corpus
from gptlib.exercises import nb14_your_gpt as your_gpt
from gptlib.mlp import MLP
from gptlib.train import train


def _count(model, kind):
    return sum(isinstance(m, kind) for m in model.modules())


def test_each_rung_adds_its_piece():
    models = {name: build_rung(name) for name in RUNGS}
    assert [_count(m, CausalSelfAttention) for m in models.values()] == [0, 1, 1, 1, 1]
    assert [_count(m, MLP) for m in models.values()] == [0, 0, 0, 1, 1]
    assert models["one head"].attn.n_head == 1 and models["four heads"].attn.n_head == 4
    assert models["bigram"].pos_emb is None
    assert isinstance(models["+ residuals and norms"], GPT)
    assert models["+ residuals and norms"].cfg == microgpt()
    params = [m.num_parameters() for m in models.values()]
    # bigram: V*d + d*V; attention adds T*d + 4*d^2; the MLP 8*d^2; the norms 3*d
    assert params == [864, 2016, 2016, 4064, 4112]


def test_bigram_rung_only_sees_the_current_token():
    torch.manual_seed(0)
    model = build_rung("bigram")
    a = torch.tensor([[1, 2, 3, 4]])
    b = torch.tensor([[9, 9, 9, 4]])
    torch.testing.assert_close(model(a)[0][:, -1], model(b)[0][:, -1])


def test_attention_rung_is_causal_and_trains():
    torch.manual_seed(0)
    model = build_rung("+ MLP")
    a = torch.tensor([[1, 2, 3, 4, 5]])
    b = torch.tensor([[1, 2, 3, 7, 7]])
    logits_a, logits_b = model(a)[0], model(b)[0]
    torch.testing.assert_close(logits_a[:, :3], logits_b[:, :3])  # the future is not seen
    assert not torch.allclose(logits_a[:, 3], logits_b[:, 3])
    tokens = torch.arange(200) % 5
    hist = train(model, tokens, 60, 8, max_lr=1e-2, warmup=5, eval_every=0)
    assert hist.loss[-1] < hist.loss[0] - 0.5


def test_loss_matches_gpt_loss_and_bad_rung_is_refused():
    torch.manual_seed(0)
    model = PartialGPT(microgpt(), attention=True, mlp=False)
    idx = torch.randint(0, 27, (2, 8))
    logits, loss = model(idx, idx)
    torch.testing.assert_close(loss, GPT.loss(logits, idx))
    with pytest.raises(ValueError, match="unknown rung 'norms'; the rungs are bigram"):
        build_rung("norms")


def test_the_weights_are_the_models_tensors_in_state_dict_order():
    model = load_asset(your_gpt.ASSET).model
    w, state = gpt_weights(model), model.state_dict()
    assert [t.data_ptr() for _, t in flat_names(w)] != [t.data_ptr() for t in state.values()]
    for (_, t), s in zip(flat_names(w), state.values(), strict=True):
        assert torch.equal(t, s)
    with pytest.raises(ValueError, match=r"microgpt-style .* got \(norm, placement, activation"):
        gpt_weights(GPT(textbook(27)))


def test_each_rung_on_plain_tensors_gives_the_rungs_logits():
    forwards = rung_forwards(your_gpt.reference, your_gpt.forward)
    idx = torch.randint(0, 27, (2, 8), generator=torch.Generator().manual_seed(0))
    for name in RUNGS:
        torch.manual_seed(0)
        model = build_rung(name)
        w = gpt_weights(model)
        assert (w["pos_emb"] == 0).all() == (name == "bigram"), name
        with torch.no_grad():
            ours = forwards[name](w, idx, model.cfg.n_head)
            torch.testing.assert_close(ours, model(idx)[0], atol=1e-5, rtol=1e-4, msg=name)


def test_climbing_with_the_course_pieces_is_the_librarys_ladder():
    corpus = load_corpus("names")
    kw = dict(steps=15, batch_size=8, max_lr=1e-2, seed=0)
    ours = climb_yours(corpus, pieces=your_gpt.reference, forward=your_gpt.forward,
                       train_fn=your_gpt.train_gpt, eval_batches=3, **kw)  # fmt: skip
    library = climb(corpus, min_lr=0.0, eval_batches=3, **kw)
    for a, b in zip(ours, library, strict=True):
        assert (a.name, a.parameters) == (b.name, b.parameters)
        assert abs(a.val_loss - b.val_loss) < 1e-4
