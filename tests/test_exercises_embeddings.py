import pytest
import torch
import torch.nn.functional as F

from gptlib import GPT, microgpt
from gptlib.exercises import check_embed, solution_embed


def test_solution_matches_the_model_embedding():
    # The reference is what GPT.forward does before the first block.
    torch.manual_seed(0)
    model = GPT(microgpt(vocab_size=11))
    ids = torch.randint(0, 11, (2, 8))
    expected = model.tok_emb(ids) + model.pos_emb(torch.arange(8))
    got = solution_embed(ids, model.tok_emb.weight, model.pos_emb.weight)
    torch.testing.assert_close(got, expected)
    assert got.shape == (2, 8, 16)


def test_check_passes_the_solution_and_a_one_hot_version():
    assert check_embed(solution_embed).passed

    def one_hot(ids, wte, wpe):
        pos = torch.arange(ids.size(1))
        return F.one_hot(ids, wte.size(0)).float() @ wte + F.one_hot(pos, wpe.size(0)).float() @ wpe

    result = check_embed(one_hot)
    assert result.passed and result.message.startswith("✓")


def _wpe_rows(ids, wpe):
    return wpe[torch.arange(ids.size(1))]


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (lambda ids, wte, wpe: wte[ids], "positions are missing"),
        (lambda ids, wte, wpe: wte[ids] + wpe[ids], "chosen by the token ids"),
        (lambda ids, wte, wpe: wte[ids] + wpe, "a window of n tokens has n places"),
        (lambda ids, wte, wpe: wte[ids] + wpe[0], "place 0"),
        (
            lambda ids, wte, wpe: torch.cat(
                [wte[ids], _wpe_rows(ids, wpe).expand(ids.size(0), -1, -1)], dim=-1
            ),
            "concatenated",
        ),
        (
            # one_hot without num_classes: as wide as the largest id + 1, not V
            lambda ids, wte, wpe: F.one_hot(ids).float() @ wte + _wpe_rows(ids, wpe),
            "without num_classes is max(ids) + 1",
        ),
        (
            # one_hot left as integers
            lambda ids, wte, wpe: F.one_hot(ids, wte.size(0)) @ wte + _wpe_rows(ids, wpe),
            "F.one_hot returns integers",
        ),
    ],
)
def test_check_names_the_mistake(wrong, hint):
    result = check_embed(wrong)
    assert not result.passed
    assert hint in result.message, result.message


def test_positions_counted_from_one_are_named():
    def embed(ids, wte, wpe):
        pos = torch.arange(1, ids.size(1) + 1)  # places 1..n
        return wte[ids] + wpe[pos]

    assert check_embed(embed).message == (
        "✗ embed: the positions are off by one: the first token got row 1 of the position table "
        "and row 0 was never used (the places were counted from 1)"
    )


def test_unwritten_stub_is_reported():
    def stub(ids, wte, wpe):
        raise NotImplementedError

    result = check_embed(stub)
    assert not result.passed and "not written yet" in result.message


@pytest.mark.parametrize(
    "fix",
    ["add wpe[0..n-1]", "index it with torch.arange(n)", "wpe[torch.arange(n)]", "num_classes=V"],
)
def test_no_message_gives_the_fix(fix):
    from gptlib.exercises import embeddings

    texts = [m for m, _ in embeddings._MISTAKES] + [h for _, h in embeddings._ERROR_HINTS]
    assert not [t for t in texts if fix in t]
