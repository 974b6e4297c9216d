import copy
import math

import pytest
import torch

from gptlib.config import textbook
from gptlib.data import sample_batch
from gptlib.model import GPT
from gptlib.tokenizer import CharTokenizer
from gptlib.train import (
    Diverged,
    History,
    learning_rate,
    make_optimizer,
    parameter_groups,
    train,
    train_step,
)

TEXT = (
    "the quick brown fox jumps over the lazy dog while the small cat sleeps in the warm sun. "
    "a bird sings on the old fence and the farmer walks to the barn with a pail of fresh milk "
    "at dawn, then rests by the pond."
)


def _tiny(vocab, **kw):
    return textbook(vocab_size=vocab, block_size=16, n_layer=2, n_head=2, n_embd=32, **kw)


def test_warmup_then_constant_or_cosine():
    assert learning_rate(0, 1e-3, warmup=10) == pytest.approx(1e-4)  # never 0 at step 0
    assert learning_rate(9, 1e-3, warmup=10) == pytest.approx(1e-3)
    assert learning_rate(500, 1e-3, warmup=10) == 1e-3
    cos = [learning_rate(s, 1e-3, 10, 110, "cosine", 1e-4) for s in (10, 60, 110)]
    assert cos == pytest.approx([1e-3, 5.5e-4, 1e-4])
    assert learning_rate(3, 1e-3, warmup=0) == 1e-3
    with pytest.raises(ValueError, match="schedule"):
        learning_rate(0, 1e-3, schedule="linear")


def test_decay_only_on_matrices(small_textbook):
    model = GPT(small_textbook.replace(bias=True))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_overfits_a_200_character_text():
    tok = CharTokenizer.from_text(TEXT)
    tokens = torch.tensor(tok.encode(TEXT))
    torch.manual_seed(0)
    # A long block gives most positions enough context to make the next character certain; the
    # first few positions of a window stay ambiguous, which is what keeps the loss above 0.
    cfg = textbook(vocab_size=tok.vocab_size, block_size=128, n_layer=2, n_head=4, n_embd=64)
    model = GPT(cfg)
    hist = train(model, tokens, 300, 16, max_lr=5e-3, warmup=20, schedule="cosine", seed=0)
    assert len(TEXT) == 209 and len(hist) == 300
    assert hist.loss[0] > 3.0
    assert sum(hist.loss[-10:]) / 10 < 0.1


def _run(seed):
    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (500,), generator=torch.Generator().manual_seed(5))
    model = GPT(_tiny(20))
    return train(model, tokens, 20, 4, val_tokens=tokens, eval_every=5, eval_batches=2, seed=seed)


def test_same_seed_gives_identical_history():
    a, b, c = _run(1), _run(1), _run(2)
    assert a.to_dict() == b.to_dict()
    assert a.loss != c.loss
    assert a.val_step == [0, 5, 10, 15, 19] and len(a.val_loss) == 5
    assert all(0 < g for g in a.grad_norm) and a.lr[0] < a.lr[-1]


def test_callback_sees_every_step():
    seen = []
    tokens = torch.randint(0, 20, (200,))
    train(GPT(_tiny(20)), tokens, 7, 2, callback=lambda h: seen.append(len(h)))
    assert seen == list(range(1, 8))


def test_log_every_prints_the_textbook_line_at_its_steps_and_nothing_at_0(capsys):
    tokens = torch.randint(0, 20, (200,), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    quiet = train(GPT(_tiny(20)), tokens, 7, 2, warmup=4)
    assert capsys.readouterr().out == ""  # the default, log_every=0: nothing at all
    torch.manual_seed(0)
    hist = train(GPT(_tiny(20)), tokens, 7, 2, warmup=4, log_every=3)
    lines = capsys.readouterr().out.splitlines()
    assert hist.to_dict() == quiet.to_dict()  # the log changes nothing it reports on
    assert [int(line.split()[1]) for line in lines] == [0, 3, 6]  # step 0 and each multiple of 3
    for line, s in zip(lines, (0, 3, 6), strict=True):
        # each line: the textbook's fields, read back to the digits they are printed with
        fields = line.split()
        assert fields[::2] == ["step", "lr", "loss", "grad"]
        lr, loss, grad = (float(x) for x in fields[3::2])
        assert lr == pytest.approx(hist.lr[s], rel=6e-3)
        assert loss == pytest.approx(hist.loss[s], abs=6e-5)
        assert grad == pytest.approx(hist.grad_norm[s], abs=6e-3)
    assert [float(line.split()[3]) for line in lines] == pytest.approx(
        [7.5e-5, 3e-4, 3e-4], rel=1e-9
    )  # warmup 4 from the default max_lr 3e-4: a quarter of it at step 0, all of it from step 3


@pytest.mark.parametrize("bad", [-1, 2.5, "50", True])
def test_log_every_refuses_what_is_not_a_step_count(bad):
    with pytest.raises(ValueError, match=r"log_every must be a whole number of steps >= 0, got"):
        train(GPT(_tiny(20)), torch.randint(0, 20, (200,)), 1, 2, log_every=bad)


def test_clip_caps_the_update_norm():
    torch.manual_seed(0)
    tokens = torch.randint(0, 20, (200,))
    model = GPT(_tiny(20))
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    hist = train(model, tokens, 1, 4, optimizer=opt, max_lr=1.0, warmup=0, clip=0.01)
    step = torch.sqrt(
        sum(((p - b) ** 2).sum() for p, b in zip(model.parameters(), before, strict=True))
    )
    assert hist.grad_norm[0] > 0.01  # the raw norm is logged ...
    assert step.item() == pytest.approx(0.01, rel=1e-3)  # ... the applied update is clipped


def test_non_finite_loss_stops_with_step_and_advice():
    tokens = torch.randint(0, 20, (200,))
    model = GPT(_tiny(20))
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    with pytest.raises(RuntimeError, match=r"step 0: the loss became nan .*Lower max_lr"):
        train(model, tokens, 5, 2)


def test_all_ignored_batch_is_an_error_not_a_nan():
    model = GPT(_tiny(20))
    idx = torch.randint(0, 20, (2, 16))
    labels = torch.full((2, 16), -100)  # a batch of padding only
    with pytest.raises(ValueError, match=r"step 4: every label in the batch is ignored"):
        train_step(model, make_optimizer(model, 1e-3), idx, labels, 1e-3, step=4)


def test_keyboard_interrupt_keeps_the_history():
    tokens = torch.randint(0, 20, (200,))

    def stop_at_3(hist):
        if len(hist) == 3:
            raise KeyboardInterrupt

    hist = train(GPT(_tiny(20)), tokens, 50, 2, callback=stop_at_3)
    assert hist.interrupted and len(hist) == 3 and hist.step == [0, 1, 2]
    assert all(math.isfinite(x) for x in hist.loss)


def test_short_corpus_is_rejected():
    with pytest.raises(ValueError, match=r"16 tokens; block_size=16 needs at least 17"):
        train(GPT(_tiny(20)), torch.arange(16) % 20, 1, 2)


def test_history_roundtrip():
    h = History(step=[0], lr=[1e-3], loss=[2.0], grad_norm=[0.5], val_step=[0], val_loss=[2.1])
    assert History.from_dict(h.to_dict()) == h


def _fresh(vocab=20):
    torch.manual_seed(0)
    return GPT(_tiny(vocab))


def test_train_step_stopped_and_continued_follows_one_schedule():
    """train_step over steps 0..9 then 10..19 (optimiser and generator carried over, the rate from
    one schedule of 20 steps) is train's run of 20 steps: what the command line's resume rests on."""
    tokens = torch.randint(0, 20, (500,), generator=torch.Generator().manual_seed(5))
    kw = dict(max_lr=3e-3, warmup=4, schedule="cosine", min_lr=3e-4)
    whole = _fresh()
    h_whole = train(whole, tokens, 20, 4, seed=3, **kw)

    part = _fresh()
    opt, g = make_optimizer(part, 3e-3), torch.Generator().manual_seed(3)
    losses, lrs = [], []
    for steps in (range(0, 10), range(10, 20)):  # two runs, the second resuming the first
        for step in steps:
            idx, labels = sample_batch(tokens, 4, part.cfg.block_size, g)
            lrs.append(
                learning_rate(step, kw["max_lr"], kw["warmup"], 20, kw["schedule"], kw["min_lr"])
            )
            losses.append(train_step(part, opt, idx, labels, lrs[-1], 1.0, step=step)[0])
    assert lrs == pytest.approx(h_whole.lr, abs=0) and losses == pytest.approx(h_whole.loss, abs=0)
    for a, b in zip(part.parameters(), whole.parameters(), strict=True):
        assert torch.equal(a, b)


def test_train_step_runs_the_forward_it_is_given():
    tokens = torch.randint(0, 20, (500,), generator=torch.Generator().manual_seed(5))
    model = _fresh()
    seen = []

    def forward(idx, labels):  # a wrapper of the model, as DDP or torch.compile would be
        seen.append(idx.shape)
        return model(idx, labels)

    before = model.lm_head.weight.detach().clone()
    idx, labels = sample_batch(tokens, 3, 16, torch.Generator().manual_seed(0))
    opt = make_optimizer(model, 1e-3)
    loss, norm = train_step(model, opt, idx, labels, 1e-3, forward=forward)
    assert seen == [(3, 16)] and loss > 0 and norm > 0
    assert opt.param_groups[0]["lr"] == 1e-3 and not torch.equal(before, model.lm_head.weight)


def test_a_non_finite_loss_leaves_weights_and_optimiser_alone():
    tokens = torch.randint(0, 20, (200,))
    model = _fresh()
    opt = make_optimizer(model, 1e-3)
    idx, labels = sample_batch(tokens, 2, 16, torch.Generator().manual_seed(0))
    train_step(model, opt, idx, labels, 1e-3)
    weights = [p.detach().clone() for p in model.parameters()]
    state = copy.deepcopy(opt.state_dict())
    with pytest.raises(Diverged, match=r"step 7: the loss became inf at lr=1.00e-03") as e:
        train_step(
            model,
            opt,
            idx,
            labels,
            1e-3,
            step=7,
            forward=lambda idx, labels: (None, torch.tensor(float("inf"))),
        )
    assert (e.value.step, e.value.what) == (7, "loss")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights, strict=True))
    assert str(opt.state_dict()) == str(state)


@pytest.mark.parametrize("which", ["tokens", "val_tokens"])
@pytest.mark.parametrize("bad", [-1, 11])
def test_train_checks_the_ids_once_before_any_step(which, bad):
    """ids outside 0..V-1 are refused before the first step, naming the tensor and the range,
    so the model's weights are untouched (GPT.forward checks ids on CPU tensors only)."""
    torch.manual_seed(0)
    model = GPT(_tiny(11))
    before = [p.detach().clone() for p in model.parameters()]
    good = torch.randint(0, 11, (200,))
    broken = good.clone()
    broken[50] = bad
    kwargs = {"tokens": good, "val_tokens": good, which: broken}
    tokens = kwargs.pop("tokens")
    with pytest.raises(ValueError, match=rf"{which} must hold ids in 0\.\.10") as err:
        train(model, tokens, 3, 4, **kwargs)
    assert str(bad) in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
