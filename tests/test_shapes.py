"""Shape and parameter tables against the textbook's table of shapes (textbook chapter 3,
section 3.6)."""

import math

import pytest
import torch
import torch.nn.functional as F

from gptlib import GPT, microgpt, parameter_formula, textbook
from gptlib.classroom.shapes import (
    TEXTBOOK_LOSS,
    Table,
    parameter_table,
    shape_table,
    symbolic_shape,
)

# Textbook chapter 3's table, one layer's attention and MLP and the exit, in the textbook's letters.
TEXTBOOK_ROWS = {
    "idx": "[B, n]",
    "tok_emb(idx)": "[B, n, d]",
    "pos = arange(n)": "[n]",
    "pos_emb(pos)": "[n, d]",
    "tok_emb(idx) + pos_emb(pos)": "[B, n, d]",
    "x = drop(...)": "[B, n, d]",
    "qkv(x)": "[B, n, 3d]",
    "q, k, v = split_heads(...) (each)": "[B, h, n, d_h]",
    "k.transpose(-2, -1)": "[B, h, d_h, n]",
    "scores = q @ kᵀ / √d_h": "[B, h, n, n]",
    "future[:n, :n] (True = masked)": "[n, n]",
    "weights = softmax(masked scores)": "[B, h, n, n]",
    "weights @ v": "[B, h, n, d_h]",
    "transpose(1, 2)": "[B, n, h, d_h]",
    "heads side by side (view)": "[B, n, d]",
    "attn(x) = proj(...)": "[B, n, d]",
    "x + attn(x)": "[B, n, d]",
    "ln1(x + attn(x))": "[B, n, d]",
    "fc(x)": "[B, n, 4d]",
    "gelu(fc(x))": "[B, n, 4d]",
    "mlp(x) = proj(...)": "[B, n, d]",
    "x + mlp(x)": "[B, n, d]",
    "ln2(x + mlp(x)) = block output": "[B, n, d]",
    "ln_f(x)": "[B, n, d]",
    "logits = lm_head(ln_f(x))": "[B, n, V]",
    # The textbook's route to the loss (shape_table(..., textbook_loss=True)).
    "logits[:, :-1] (no label after the last position)": "[B, n-1, V]",
    "labels[:, 1:] (no prediction for the first token)": "[B, n-1]",
    "logits[:, :-1].reshape(-1, V)": "[B(n-1), V]",
    "labels[:, 1:].reshape(-1)": "[B(n-1)]",
    "cross_entropy(...) = the model's loss (torch.allclose)": "[]",
}
# The loss GPT.loss really computes: every position's logits against the labels moved one place
# left, -100 at each window's end (ERRATA 23), as the F.cross_entropy call receives them.
REAL_LOSS_ROWS = {
    "GPT.loss(logits, labels): logits, all n positions": "[B, n, V]",
    "cross_entropy input: logits.reshape(-1, V)": "[Bn, V]",
    "cross_entropy target: pad(labels[:, 1:], -100).reshape(-1) (3 of 60 ignored)": "[Bn]",
    "loss = cross_entropy(...), mean over the 57 not ignored": "[]",
}
# microgpt's table for B=2, n=6 without labels, as shape_table gave it before the loss's rows
# were observed on the real call: notebooks 01-03 and 06-08 show such tables.
MICROGPT_NO_LABELS = [
    ("input", "idx", "[2, 6]", "[B, n]"),
    ("embedding", "tok_emb(idx)", "[2, 6, 16]", "[B, n, d]"),
    ("embedding", "pos = arange(n)", "[6]", "[n]"),
    ("embedding", "pos_emb(pos)", "[6, 16]", "[n, d]"),
    ("embedding", "tok_emb(idx) + pos_emb(pos)", "[2, 6, 16]", "[B, n, d]"),
    ("embedding", "x = drop(...)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 attention", "ln1(x)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 attention", "qkv(x)", "[2, 6, 48]", "[B, n, 3d]"),
    ("block 0 attention", "q, k, v = split_heads(...) (each)", "[2, 4, 6, 4]", "[B, h, n, d_h]"),
    ("block 0 attention", "k.transpose(-2, -1)", "[2, 4, 4, 6]", "[B, h, d_h, n]"),
    ("block 0 attention", "scores = q @ kᵀ / √d_h", "[2, 4, 6, 6]", "[B, h, n, n]"),
    ("block 0 attention", "future[:n, :n] (True = masked)", "[6, 6]", "[n, n]"),
    ("block 0 attention", "weights = softmax(masked scores)", "[2, 4, 6, 6]", "[B, h, n, n]"),
    ("block 0 attention", "weights @ v", "[2, 4, 6, 4]", "[B, h, n, d_h]"),
    ("block 0 attention", "transpose(1, 2)", "[2, 6, 4, 4]", "[B, n, h, d_h]"),
    ("block 0 attention", "heads side by side (view)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 attention", "attn(x) = proj(...)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 residual + norm", "x + attn(ln1(x))", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 MLP", "ln2(x)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 MLP", "fc(x)", "[2, 6, 64]", "[B, n, 4d]"),
    ("block 0 MLP", "relu(fc(x))", "[2, 6, 64]", "[B, n, 4d]"),
    ("block 0 MLP", "mlp(x) = proj(...)", "[2, 6, 16]", "[B, n, d]"),
    ("block 0 residual + norm", "x + mlp(ln2(x)) = block output", "[2, 6, 16]", "[B, n, d]"),
    ("output", "ln_f(x)", "[2, 6, 16]", "[B, n, d]"),
    ("output", "logits = lm_head(ln_f(x))", "[2, 6, 27]", "[B, n, V]"),
]


def _rows_by_name(table, step_prefix=None):
    return {
        r["tensor"]: r
        for r in table.to_dicts()
        if step_prefix is None
        or r["step"].startswith(step_prefix)
        or not r["step"].startswith("block")
    }


@pytest.fixture(scope="module")
def textbook_model():
    """The `textbook` preset itself, with B=3, n=20: every letter has its own size except L = h."""
    torch.manual_seed(0)
    model = GPT(textbook())
    idx = torch.randint(0, 27, (3, 20))
    return model, idx, shape_table(model, idx, labels=idx, textbook_loss=True)


def test_textbook_symbolic_shapes_match_the_textbook(textbook_model):
    model, idx, table = textbook_model
    assert table.columns == ["step", "tensor", "shape", "symbolic", "dtype", "elements"]
    for layer in range(model.cfg.n_layer):
        rows = _rows_by_name(table, f"block {layer}")
        for name, symbolic in (TEXTBOOK_ROWS | REAL_LOSS_ROWS).items():
            assert rows[name]["symbolic"] == symbolic, (layer, name)
    rows = _rows_by_name(table, "block 0")
    # The concrete numbers behind the letters: B=3, n=20, d=128, h=4, d_h=32, V=27.
    assert rows["qkv(x)"]["shape"] == "[3, 20, 384]"
    assert rows["weights = softmax(masked scores)"]["shape"] == "[3, 4, 20, 20]"
    assert rows["gelu(fc(x))"]["shape"] == "[3, 20, 512]"
    assert rows["cross_entropy input: logits.reshape(-1, V)"]["shape"] == "[60, 27]"  # real
    assert rows["logits[:, :-1].reshape(-1, V)"]["shape"] == "[57, 27]"  # the textbook's
    assert rows["future[:n, :n] (True = masked)"]["dtype"] == "bool"
    assert (
        rows["idx"]["dtype"] == "int64"
        and rows["loss = cross_entropy(...), mean over the 57 not ignored"]["elements"] == 1
    )
    for r in table.to_dicts():
        dims = [int(s) for s in r["shape"].strip("[]").split(", ") if s]
        assert r["elements"] == math.prod(dims)
    assert "B=3, n=20, T=64, V=27, d=128, h=4, d_h=32, L=4" in table.title


def test_every_layer_appears_in_order_and_the_model_is_left_untouched(textbook_model):
    model, idx, table = textbook_model
    steps = [r["step"] for r in table.to_dicts()]
    firsts = [steps.index(f"block {i} attention") for i in range(4)]
    assert firsts == sorted(firsts) and steps[-5:] == [TEXTBOOK_LOSS] * 5
    assert steps[-9:-5] == ["loss"] * 4  # the real call first, the textbook's route after it
    names = [r["tensor"] for r in table.to_dicts()]
    assert (
        names.index("qkv(x)")
        < names.index("weights = softmax(masked scores)")
        < names.index("fc(x)")
    )
    # inputs+embedding, 17 rows a layer, exit, the real loss, the textbook's loss
    assert len(table) == 6 + 1 + 4 * 17 + 2 + 4 + 5
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    assert "loss" not in vars(model)  # the watch on GPT.loss is gone: the class's own again
    assert all(b.attn.use_sdpa for b in model.blocks)  # the fused path is back
    assert model.training  # a fresh GPT trains; the table's eval-mode pass restored that


def test_table_shapes_are_the_real_ones():
    """Concrete shapes come from the pass: they follow B and n, and the logits row equals the
    model's own output shape."""
    torch.manual_seed(0)
    model = GPT(microgpt()).eval()
    for B, n in ((1, 3), (5, 7)):
        idx = torch.randint(0, 27, (B, n))
        rows = _rows_by_name(shape_table(model, idx), "block 0")
        assert rows["logits = lm_head(ln_f(x))"]["shape"] == str(list(model(idx)[0].shape))
        assert rows["weights = softmax(masked scores)"]["shape"] == str([B, 4, n, n])
        assert not any(r["step"] in ("loss", TEXTBOOK_LOSS) for r in rows.values())
    assert not model.training  # eval mode was kept too


def test_letters_come_from_the_numbers_when_all_sizes_differ():
    """B=2, n=10, T=12, V=27, d=56, h=4, d_h=14, L=3: no two letters share a size, so the role
    hints play no part and the table equals plain number-to-letter matching."""
    cfg = textbook(block_size=12, n_layer=3, n_head=4, n_embd=56)
    model = GPT(cfg)
    idx = torch.randint(0, 27, (2, 10))
    table = shape_table(model, idx, labels=idx, textbook_loss=True)
    for r in table.to_dicts():
        dims = [int(s) for s in r["shape"].strip("[]").split(", ") if s]
        if r["symbolic"] == "[Bn, V]":  # B x n = 20 is a letter of the loss's rows only
            assert dims == [20, 27], r
        elif r["symbolic"] == "[Bn]":
            assert dims == [20], r
        else:
            assert r["symbolic"] == symbolic_shape(dims, cfg, B=2, n=10), r
    rows = _rows_by_name(table, "block 2")
    for name, symbolic in TEXTBOOK_ROWS.items():
        assert rows[name]["symbolic"] == symbolic, name


def test_ties_are_resolved_by_role():
    """microgpt with B=4 and a full window: B = h = d_h = 4 and n = T = 8."""
    cfg = microgpt()
    assert symbolic_shape((4, 4, 8, 4), cfg, B=4, n=8) == "[B, B, n, B]"  # numbers alone: ambiguous
    assert (
        symbolic_shape((4, 4, 8, 4), cfg, B=4, n=8, hint=("B", "h", "n", "d_h")) == "[B, h, n, d_h]"
    )
    # A hint can only choose among letters of the right size, never invent one.
    assert symbolic_shape((4, 5), cfg, B=4, n=8, hint=("h", "d")) == "[h, 5]"
    assert symbolic_shape((8, 16), cfg, hint=("T", "d")) == "[T, d]"
    with pytest.raises(ValueError, match="letters for shape"):
        symbolic_shape((4, 4), cfg, hint=("B",))

    model = GPT(cfg)
    idx = torch.randint(0, 27, (4, 8))
    rows = _rows_by_name(shape_table(model, idx), "block 0")
    assert rows["q, k, v = split_heads(...) (each)"]["symbolic"] == "[B, h, n, d_h]"
    assert rows["k.transpose(-2, -1)"]["symbolic"] == "[B, h, d_h, n]"
    assert rows["pos_emb(pos)"]["symbolic"] == "[n, d]"
    # microgpt is pre-norm with ReLU: the norm comes before attention and the MLP.
    names = [r["tensor"] for r in shape_table(model, idx).to_dicts()]
    assert names.index("ln1(x)") < names.index("qkv(x)") and "relu(fc(x))" in names
    assert names.index("x + attn(ln1(x))") < names.index("ln2(x)") < names.index("fc(x)")
    assert names[-3:] == ["x + mlp(ln2(x)) = block output", "ln_f(x)", "logits = lm_head(ln_f(x))"]


def test_manual_attention_path_gives_the_same_table():
    idx = torch.randint(0, 27, (2, 6))
    torch.manual_seed(0)
    fused = shape_table(GPT(microgpt(attention="sdpa")), idx)
    torch.manual_seed(0)
    manual = shape_table(GPT(microgpt(attention="manual")), idx)
    assert fused.rows == manual.rows


def test_a_table_without_labels_is_the_one_it_always_was():
    torch.manual_seed(0)
    table = shape_table(GPT(microgpt()), torch.randint(0, 27, (2, 6)))
    assert [tuple(r[:4]) for r in table.rows] == MICROGPT_NO_LABELS
    assert table.title == "One forward pass: B=2, n=6, T=8, V=27, d=16, h=4, d_h=4, L=1"


def _loss_rows(table):
    return [
        (r["tensor"], r["shape"], r["symbolic"]) for r in table.to_dicts() if r["step"] == "loss"
    ]


def test_the_loss_rows_are_the_call_gpt_loss_makes():
    """What F.cross_entropy receives, watched on the call: all B x n positions, the labels moved
    left with -100 at each window's end, and -100 labels of the caller counted as ignored too."""
    torch.manual_seed(0)
    model = GPT(microgpt())
    idx = torch.randint(0, 27, (4, 8))
    labels = idx.clone()
    labels[0, 5:] = -100  # a padded tail: 3 more ignored labels
    table = shape_table(model, idx, labels)
    assert _loss_rows(table) == [
        ("GPT.loss(logits, labels): logits, all n positions", "[4, 8, 27]", "[B, n, V]"),
        ("cross_entropy input: logits.reshape(-1, V)", "[32, 27]", "[Bn, V]"),
        (
            "cross_entropy target: pad(labels[:, 1:], -100).reshape(-1) (7 of 32 ignored)",
            "[32]",
            "[Bn]",
        ),
        ("loss = cross_entropy(...), mean over the 25 not ignored", "[]", "[]"),
    ]
    assert TEXTBOOK_LOSS not in table.column("step")  # only on request
    # B = 1: B x n = n, and the role still reads Bn.
    one = shape_table(model, idx[:1], idx[:1])
    assert [r[2] for r in _loss_rows(one)] == ["[B, n, V]", "[Bn, V]", "[Bn]", "[]"]


class _TextbookLossGPT(GPT):
    @staticmethod
    def loss(logits, labels):  # the textbook's slicing instead of the padded labels
        V = logits.size(-1)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1))


class _HandMadeLossGPT(GPT):
    @staticmethod
    def loss(logits, labels):  # no F.cross_entropy call at all
        logp = logits[:, :-1].log_softmax(-1)
        return -logp.gather(-1, labels[:, 1:, None]).mean()


def test_the_loss_rows_follow_the_model_not_a_copy_of_its_slicing():
    """A model whose loss cuts the logits shows [B(n-1), V]: the rows come from the call."""
    torch.manual_seed(0)
    idx = torch.randint(0, 27, (4, 8))
    model = _TextbookLossGPT(microgpt())
    rows = _loss_rows(shape_table(model, idx, idx))
    assert rows[1:3] == [
        ("cross_entropy input: logits[:, :-1].reshape(-1, V)", "[28, 27]", "[B(n-1), V]"),
        ("cross_entropy target: labels[:, 1:].reshape(-1) (0 of 28 ignored)", "[28]", "[B(n-1)]"),
    ]
    with pytest.raises(RuntimeError, match="called F.cross_entropy 0 times"):
        shape_table(_HandMadeLossGPT(microgpt()), idx, idx)


def test_the_model_is_left_as_it_was_when_the_pass_fails():
    torch.manual_seed(0)
    model = GPT(microgpt())
    idx = torch.randint(0, 27, (2, 8))
    with pytest.raises(ValueError, match="labels must have the shape of idx"):
        shape_table(model, idx, idx[:, :-1])
    assert "loss" not in vars(model) and model.training
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    with pytest.raises(ValueError, match="textbook_loss=True needs labels"):
        shape_table(model, idx, textbook_loss=True)


def test_the_textbook_route_gives_the_model_s_loss():
    torch.manual_seed(0)
    model = GPT(textbook(block_size=16))
    idx = torch.randint(0, 27, (5, 16))
    table = shape_table(model, idx, idx, textbook_loss=True)
    book = [r for r in table.to_dicts() if r["step"] == TEXTBOOK_LOSS]
    assert [r["shape"] for r in book] == ["[5, 15, 27]", "[5, 15]", "[75, 27]", "[75]", "[]"]
    real = {r["tensor"]: r["shape"] for r in table.to_dicts() if r["step"] == "loss"}
    assert real["cross_entropy input: logits.reshape(-1, V)"] == "[80, 27]"


def test_parameter_table_textbook_tied():
    cfg = textbook()
    model = GPT(cfg)
    table = parameter_table(model)
    assert table.columns == ["name", "shape", "symbolic", "count", "shared with"]
    assert (
        table.total
        == model.num_parameters()
        == parameter_formula(cfg)
        == sum(table.column("count"))
    )
    rows = {r["name"]: r for r in table.to_dicts()}
    expected = {
        "tok_emb.weight": "[V, d]",
        "pos_emb.weight": "[T, d]",
        "blocks.0.attn.qkv.weight": "[3d, d]",
        "blocks.0.attn.proj.weight": "[d, d]",
        "blocks.0.mlp.fc.weight": "[4d, d]",
        "blocks.0.mlp.proj.weight": "[d, 4d]",
        "blocks.3.ln2.bias": "[d]",
        "ln_f.weight": "[d]",
        "lm_head.weight": "[V, d]",
    }
    for name, symbolic in expected.items():
        assert rows[name]["symbolic"] == symbolic, name
    assert (
        rows["lm_head.weight"]["shared with"] == "tok_emb.weight"
        and rows["lm_head.weight"]["count"] == 0
    )
    assert (
        rows["tok_emb.weight"]["shared with"] == "lm_head.weight"
        and rows["tok_emb.weight"]["count"] == 27 * 128
    )
    assert "4 x [64, 64] bool" in table.footer  # the causal masks: buffers, not parameters


def test_parameter_table_untied_with_ties_between_sizes():
    cfg = microgpt(block_size=16, bias=True)  # T = d = 16: the role decides pos_emb is [T, d]
    model = GPT(cfg)
    table = parameter_table(model)
    assert table.total == model.num_parameters() == parameter_formula(cfg)
    rows = {r["name"]: r for r in table.to_dicts()}
    assert rows["pos_emb.weight"]["symbolic"] == "[T, d]"
    assert rows["blocks.0.attn.qkv.bias"]["symbolic"] == "[3d]"
    assert rows["blocks.0.mlp.fc.bias"]["symbolic"] == "[4d]"
    assert (
        rows["lm_head.weight"]["count"] == 27 * 16 and rows["lm_head.weight"]["shared with"] == ""
    )


def test_table_text_and_html():
    t = Table(["name", "value"], [["a<b", 1], ["long name", 12345]], title="T", footer="note")
    text = str(t)
    lines = text.splitlines()
    assert lines[0] == "T" and lines[-1] == "note"
    assert lines[1].startswith("name") and lines[3] == "a<b            1"  # numbers right-aligned
    assert lines[4] == "long name  12345"
    assert repr(t) == text
    html = t._repr_html_()
    assert "<th>name</th>" in html and "a&lt;b" in html and "<caption>T</caption>" in html
    assert t.to_dicts() == [{"name": "a<b", "value": 1}, {"name": "long name", "value": 12345}]
    with pytest.raises(ValueError, match="2 columns"):
        Table(["a", "b"], [[1]])


def test_a_numeric_hint_keeps_a_plain_number():
    from gptlib.classroom.shapes import symbolic_shape
    from gptlib.config import microgpt

    cfg = microgpt()  # L = 1, so a size-1 dimension would otherwise read "L"
    assert symbolic_shape((3, 1), cfg, B=3, n=8) == "[B, L]"
    assert symbolic_shape((3, 1), cfg, B=3, n=8, hint=("B", "1")) == "[B, 1]"
    assert (
        symbolic_shape((3, 5), cfg, B=3, n=8, hint=("B", "1")) == "[B, 5]"
    )  # hint must equal size


def test_columns_table_rounds_floats_per_column():
    from gptlib.classroom.shapes import columns_table

    t = columns_table(
        {"d_k": [4, 64], "entropy": [2.3812, torch.tensor(0.4137)], "grad": [0.28149, 0.1]},
        decimals={"grad": 3},
        title="T",
    )
    assert t.columns == ["d_k", "entropy", "grad"]
    assert t.rows == [[4, "2.38", "0.281"], [64, "0.41", "0.100"]]  # ints stay numbers
    assert str(t).splitlines()[3] == "  4  2.38     0.281"
    assert columns_table({"x": [1.23456]}, decimals=4).rows == [["1.2346"]]
    with pytest.raises(ValueError, match="different lengths"):
        columns_table({"a": [1, 2], "b": [1.0]})
