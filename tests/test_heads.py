"""Head statistics on attention maps whose answers are known, and switching heads off."""

import pytest
import torch

from gptlib import GPT, microgpt
from gptlib.classroom.heads import HEAD_STATS, head_stats, heads_off, latest_start

BOS = 0


def _maps(*per_head: torch.Tensor) -> torch.Tensor:
    """[n, n] maps of each head -> [L=1, B=1, h, n, n]."""
    return torch.stack(per_head)[None, None]


def test_latest_start_points_at_the_last_bos_or_minus_one():
    windows = torch.tensor([[5, 0, 3, 4, 0, 2], [0, 1, 1, 1, 1, 1]])
    assert latest_start(windows, BOS).tolist() == [[-1, 1, 1, 1, 4, 4], [0, 0, 0, 0, 0, 0]]


def test_known_heads_give_their_numbers():
    n = 6
    uniform = torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]
    itself = torch.eye(n)
    previous = torch.diag(torch.ones(n - 1), -1)
    previous[0, 0] = 1.0  # query 0 has no previous token
    first = torch.zeros(n, n)
    first[:, 0] = 1.0
    windows = torch.tensor([[0, 3, 0, 4, 5, 6]])  # BOS at 0 and 2: starts 0, 0, 2, 2, 2, 2
    at_start = torch.zeros(n, n)
    for i, s in enumerate([0, 0, 2, 2, 2, 2]):
        at_start[i, s] = 1.0
    stats = head_stats(_maps(uniform, itself, previous, first, at_start), windows, BOS)
    assert stats.shape == (1, 5, len(HEAD_STATS))
    # queries 2..5; an even spread over keys 0..i looks back i / 2 on average
    u = sum(1 / (i + 1) for i in range(2, 6)) / 4  # the even spread's weight on any one key
    expected = torch.tensor(
        [
            [(2 + 3 + 4 + 5) / 8, u, u, u, u],
            [0.0, 0.0, 0.0, 1.0, 0.25],  # query 2 is itself a start
            [1.0, 0.0, 1.0, 0.0, 0.25],  # query 3's previous token is the BOS at 2
            [3.5, 1.0, 0.0, 0.0, 0.0],
            [1.5, 0.0, 0.25, 0.25, 1.0],  # key 2 is query 3's previous and query 2 itself
        ]
    )
    torch.testing.assert_close(stats[0], expected)


def test_queries_without_a_start_are_left_out_of_that_column_only():
    n = 4
    first = torch.zeros(n, n)
    first[:, 0] = 1.0
    windows = torch.tensor([[7, 7, 7, 7], [7, 7, 0, 7]])  # no BOS in the first window
    maps = torch.stack([first[None], first[None]])[None]  # [1, B=2, h=1, n, n]
    stats = head_stats(maps, windows, BOS)[0, 0]
    assert stats[1] == 1.0  # every query looks at position 0 ...
    assert stats[4] == 0.0  # ... and the only queries with a start (window 2) look elsewhere
    with pytest.raises(ValueError, match="do not match"):
        head_stats(maps, windows[:, :3], BOS)


def test_heads_off_zeroes_exactly_those_heads_and_cleans_up():
    torch.manual_seed(0)
    model = GPT(microgpt()).eval()
    idx = torch.randint(0, 27, (2, 8))
    attn = model.blocks[0].attn
    seen = []
    hook = attn.proj.register_forward_hook(lambda m, args, out: seen.append(args[0].clone()))
    with torch.no_grad():
        before = model(idx)[0]
        with heads_off(model, 0, [1, 3]):
            off = model(idx)[0]
        after = model(idx)[0]
    hook.remove()
    concat_on, concat_off = seen[0], seen[1]  # what proj received, heads side by side
    d_h = attn.head_dim
    for head in range(attn.n_head):
        block = slice(head * d_h, (head + 1) * d_h)
        if head in (1, 3):
            assert (concat_off[..., block] == 0).all()
        else:
            torch.testing.assert_close(concat_off[..., block], concat_on[..., block])
    assert not torch.allclose(off, before)
    torch.testing.assert_close(after, before)  # the hook is gone
    with pytest.raises(ValueError, match="heads 0..3, not 4"):
        with heads_off(model, 0, [4]):
            pass
