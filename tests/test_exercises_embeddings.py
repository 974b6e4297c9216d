import pytest
import torch
import torch.nn.functional as F

from gptlib import GPT, microgpt
from gptlib.exercises import check_embed, solution_embed
from gptlib.exercises import nb01_embeddings as embeddings


def test_solution_matches_the_model_embedding():
    torch.manual_seed(0)
    model = GPT(microgpt(vocab_size=11))
    ids = torch.randint(0, 11, (2, 8))
    expected = model.tok_emb(ids) + model.pos_emb(torch.arange(8))
    got = solution_embed(ids, model.tok_emb.weight, model.pos_emb.weight)
    torch.testing.assert_close(got, expected)
    assert got.shape == (2, 8, 16)


def test_a_one_hot_version_passes():
    def one_hot(ids, wte, wpe):
        pos = torch.arange(ids.size(1))
        return F.one_hot(ids, wte.size(0)).float() @ wte + F.one_hot(pos, wpe.size(0)).float() @ wpe

    assert check_embed(one_hot).passed


@pytest.mark.parametrize(("hint", "wrong"), embeddings.MISTAKES)
def test_each_slip_is_named_by_its_row(hint, wrong):
    result = check_embed(wrong)
    assert not result.passed and result.message == f"✗ embed: {hint}"


def test_promised_positions_from_the_token_ids_are_named():  # Q7: positions are not token ids
    message = check_embed(lambda ids, wte, wpe: wte[ids] + wpe[ids]).message
    assert "chosen by the token ids" in message and "not a place in the window" in message


def _wpe_rows(ids, wpe):
    return wpe[torch.arange(ids.size(1))]


@pytest.mark.parametrize(
    ("wrong", "hint"),
    [
        (lambda ids, wte, wpe: wte[ids] + wpe, "do not line up with the window"),
        (lambda ids, wte, wpe: F.one_hot(ids).float() @ wte + _wpe_rows(ids, wpe), "max(ids) + 1"),
        (lambda ids, wte, wpe: F.one_hot(ids, 11) @ wte + _wpe_rows(ids, wpe), "returns integers"),
    ],
)
def test_errors_get_their_hint(wrong, hint):
    result = check_embed(wrong)
    assert not result.passed and "raised" in result.message and hint in result.message
