import pytest
import torch

from gptlib import GPT, microgpt
from gptlib.exercises import check_qkv_split, solution_qkv_split
from gptlib.exercises import nb02_qkv as qkv


def test_split_matches_the_attention_layer():
    torch.manual_seed(0)
    attn = GPT(microgpt(vocab_size=11)).blocks[0].attn
    x = torch.randn(2, 5, 16)
    fused = attn.qkv(x)  # [B, n, 3d], laid out Q | K | V
    for got, part in zip(solution_qkv_split(x, attn.qkv.weight), fused.split(16, -1), strict=True):
        torch.testing.assert_close(got, part)


def test_other_spellings_and_a_list_of_three_pass():
    def by_weight_rows(x, w_qkv):
        w_q, w_k, w_v = w_qkv.chunk(3, dim=0)  # three [d, d] weights
        return [x @ w_q.T, x @ w_k.T, x @ w_v.T]

    def by_view(x, w_qkv):
        B, n, d = x.shape
        return (x @ w_qkv.T).view(B, n, 3, d).unbind(2)

    assert check_qkv_split(by_weight_rows).passed
    assert check_qkv_split(by_view).passed


@pytest.mark.parametrize(("hint", "wrong"), qkv.MISTAKES)
def test_each_slip_is_named_by_its_row(hint, wrong):
    result = check_qkv_split(wrong)
    assert not result.passed and result.message == f"✗ qkv_split: {hint}"


def test_promised_the_stored_block_used_as_x_W_is_named():  # the page's fourth column
    def stored(x, w_qkv):
        w_q, w_k, w_v = w_qkv.chunk(3, dim=0)
        return x @ w_q, x @ w_k, x @ w_v

    message = check_qkv_split(stored).message
    assert "as it is stored" in message and "the shapes fit but every value" in message


def test_the_whole_weight_untransposed_gets_its_hint():
    result = check_qkv_split(lambda x, w: tuple((x @ w).split(x.size(-1), dim=-1)))
    assert "cannot be multiplied" in result.message and "[out, in]" in result.message


@pytest.mark.parametrize(
    "order, meaning",
    [("qvk", "k and v come out swapped"), ("vkq", "q and v come out swapped"),
     ("kvq", "in another order"), ("vqk", "in another order")],
)  # fmt: skip
def test_q_k_v_returned_in_another_order_are_named(order, meaning):
    def qkv_split(x, w_qkv):
        q, k, v = (x @ w_qkv.T).split(x.size(-1), dim=-1)
        return tuple({"q": q, "k": k, "v": v}[c] for c in order)

    assert meaning in qkv.check_qkv_split(qkv_split).message
