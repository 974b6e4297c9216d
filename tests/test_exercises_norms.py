"""Notebook 06's checks: RMSNorm, residual sublayers in both placements and RMSNorm's backward pass. Each
stub gets the not-written line, each reference solution passes, each listed mistake gets its own
hint."""

import contextlib
import io

import pytest
import torch

from gptlib import exercises
from gptlib.config import microgpt, textbook
from gptlib.exercises import norms
from gptlib.exercises.checking import _close, not_written
from gptlib.model import Block

CHECKS = [
    ("rmsnorm", norms.check_rmsnorm, norms.solution_rmsnorm),
    ("pre_norm_block", norms.check_pre_norm_block, norms.solution_pre_norm_block),
    ("post_norm_block", norms.check_post_norm_block, norms.solution_post_norm_block),
    ("rmsnorm_backward", norms.check_rmsnorm_backward, norms.solution_rmsnorm_backward),
]
MISTAKES = {
    "rmsnorm": norms.RMSNORM_MISTAKES,
    "pre_norm_block": norms.PRE_MISTAKES,
    "post_norm_block": norms.POST_MISTAKES,
    "rmsnorm_backward": norms.BACKWARD_MISTAKES,
}


def _ids(m):
    return getattr(m, "__name__", "")


@pytest.mark.parametrize("name, check, solution", CHECKS, ids=[c[0] for c in CHECKS])
def test_stub_says_not_written(name, check, solution):
    def stub(*args):
        raise NotImplementedError  # your code here

    result = check(stub)
    assert not result.passed
    assert result.message == not_written(name).message
    assert result.message == f"{name} is not written yet: replace its body and run this cell again"


@pytest.mark.parametrize("name, check, solution", CHECKS, ids=[c[0] for c in CHECKS])
def test_solution_passes(name, check, solution):
    result = check(solution)
    assert result.passed
    assert result.message == f"✓ {name}: matches the reference on 3 random inputs"


@pytest.mark.parametrize("hint, wrong", norms.RMSNORM_MISTAKES, ids=_ids)
def test_each_rmsnorm_mistake_gets_its_hint(hint, wrong):
    result = norms.check_rmsnorm(wrong)
    assert not result.passed
    assert result.message == f"✗ rmsnorm: {hint}"


def test_rmsnorm_promised_slips_are_named():
    """The notebook promises four slips by name: eps outside the root, the mean subtracted, the
    wrong axis, the gain left out."""

    def eps_outside(x, gain, eps=1e-5):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * gain

    def layernorm_instead(x, gain, eps=1e-5):
        c = x - x.mean(-1, keepdim=True)
        return c / torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps) * gain

    def wrong_axis(x, gain, eps=1e-5):
        return x / torch.sqrt(x.pow(2).mean(-2, keepdim=True) + eps) * gain

    def no_gain(x, gain, eps=1e-5):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    for fn, said in (
        (eps_outside, "adding eps after the square root"),
        (layernorm_instead, "as LayerNorm does"),
        (wrong_axis, "over the tokens (dim=-2)"),
        (no_gain, "the gain is not used"),
    ):
        message = norms.check_rmsnorm(fn).message
        assert message.startswith("✗ rmsnorm: ") and said in message, (fn.__name__, message)


def test_rmsnorm_written_differently_passes():
    def with_rsqrt(x, gain, eps=1e-5):
        return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gain

    def with_norm(x, gain, eps=1e-5):
        d = x.shape[-1]
        return gain * x / (x.norm(dim=-1, keepdim=True).pow(2) / d + eps).sqrt()

    for fn in (with_rsqrt, with_norm):
        assert norms.check_rmsnorm(fn).passed


def test_rmsnorm_detached_statistic_is_named():
    def detached(x, gain, eps=1e-5):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps).detach() * gain

    message = norms.check_rmsnorm(detached).message
    assert "the gradient of x is not" in message


def test_rmsnorm_library_call_is_told_to_write_it(tmp_path):
    """Read from the source: the body must live in a file, as a notebook cell's does."""
    import importlib.util

    path = tmp_path / "rms_shortcut.py"
    path.write_text(
        "import torch\n\n\ndef rmsnorm(x, gain, eps=1e-5):\n"
        "    return torch.nn.functional.rms_norm(x, (x.size(-1),), gain, eps)\n"
    )
    spec = importlib.util.spec_from_file_location("rms_shortcut", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    message = norms.check_rmsnorm(module.rmsnorm).message
    assert message.startswith("✗ rmsnorm: write this one yourself: it calls F.rms_norm"), message


def test_rmsnorm_mistakes_differ_from_the_solution_and_each_other():
    inputs = [norms._rmsnorm_inputs(torch.Generator().manual_seed(s)) for s in (1000, 1001, 1002)]
    assert sorted(x.dim() for x, *_ in inputs) == [2, 3, 4]
    first = inputs[0]
    assert first[0].dim() == 4  # the first trial tells the axes apart
    fns = [norms.solution_rmsnorm] + [w for _, w in norms.RMSNORM_MISTAKES]
    outputs = [f(*first) for f in fns]
    for i in range(len(outputs)):
        for j in range(i):
            assert not _close(outputs[i], outputs[j], 1e-5, 1e-4), (fns[i], fns[j])


def test_rmsnorm_solution_equals_nn_rmsnorm():
    x, gain, eps = norms._rmsnorm_inputs(torch.Generator().manual_seed(3))
    m = torch.nn.RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        m.weight.copy_(gain)
        torch.testing.assert_close(norms.solution_rmsnorm(x, gain, eps), m(x))


@pytest.mark.parametrize("hint", [h for h, _ in norms.RMSNORM_MISTAKES])
def test_rmsnorm_messages_do_not_say_what_to_write(hint):
    for fix in ("belongs", "should", "instead", "put eps", "move"):
        assert fix not in hint


@pytest.mark.parametrize("hint, wrong", norms.PRE_MISTAKES, ids=_ids)
def test_each_pre_norm_mistake_gets_its_hint(hint, wrong):
    result = norms.check_pre_norm_block(wrong)
    assert not result.passed
    assert result.message == f"✗ pre_norm_block: {hint}"


@pytest.mark.parametrize("hint, wrong", norms.POST_MISTAKES, ids=_ids)
def test_each_post_norm_mistake_gets_its_hint(hint, wrong):
    result = norms.check_post_norm_block(wrong)
    assert not result.passed
    assert result.message == f"✗ post_norm_block: {hint}"


@pytest.mark.parametrize("hint, wrong", norms.BACKWARD_MISTAKES, ids=_ids)
def test_each_backward_mistake_gets_its_hint(hint, wrong):
    result = norms.check_rmsnorm_backward(wrong)
    assert not result.passed
    assert result.message == f"✗ rmsnorm_backward: {hint}"


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_mistakes_differ_from_the_solution_and_from_each_other(placement):
    # Otherwise a hint could never be reached, or the wrong one would be named. Two blocks: some
    # slips (only the first two sublayers) are right for one block.
    name = f"{placement}_norm_block"
    solution = getattr(norms, f"solution_{name}")
    g = torch.Generator().manual_seed(0)
    sublayers = norms.sublayers_of([norms._random_block(placement, g) for _ in range(2)])
    x = 2.0 * torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        outputs = [solution(x, sublayers)] + [w(x, sublayers) for _, w in MISTAKES[name]]
    for i in range(len(outputs)):
        for j in range(i):
            assert not _close(outputs[i], outputs[j], 1e-5, 1e-4), (i, j)


def test_backward_mistakes_differ_from_the_solution():
    # Some slips are right for one leading shape only (summing the gain's gradient over dim 0 is
    # right for [N, d]): each must be wrong on at least one of the check's three inputs.
    inputs = [norms._backward_inputs(torch.Generator().manual_seed(s)) for s in (1000, 1001, 1002)]
    assert sorted(x.dim() for x, *_ in inputs) == [2, 3, 4]
    for _, wrong in norms.BACKWARD_MISTAKES:
        assert any(
            not _close(wrong(*i), norms.solution_rmsnorm_backward(*i), 1e-8, 1e-6) for i in inputs
        ), wrong.__name__


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("preset", [microgpt, textbook], ids=["rmsnorm", "layernorm"])
def test_solutions_equal_gptlib_blocks(placement, preset):
    torch.manual_seed(0)
    cfg = preset(n_embd=16, n_head=4, block_size=8, norm_placement=placement)
    blocks = [Block(cfg).eval() for _ in range(3)]
    with torch.no_grad():
        for p in (p for b in blocks for p in b.parameters()):
            p.add_(0.1 * torch.randn_like(p))  # gains away from 1, biases away from 0
        x = torch.randn(3, 8, 16)
        solution = getattr(norms, f"solution_{placement}_norm_block")
        torch.testing.assert_close(
            solution(x, [(blocks[0].ln1, blocks[0].attn), (blocks[0].ln2, blocks[0].mlp)]),
            blocks[0](x),
        )
        torch.testing.assert_close(
            solution(x, norms.sublayers_of(blocks)), blocks[2](blocks[1](blocks[0](x)))
        )


def test_solution_backward_equals_autograd_in_float32():
    x = torch.randn(4, 3, 16)
    w = torch.rand(16) + 0.5
    gy = torch.randn(4, 3, 16)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = xr / torch.sqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-5) * wr
    expected = torch.autograd.grad(y, (xr, wr), gy)
    got = norms.solution_rmsnorm_backward(x, w, gy, 1e-5)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])


def test_typical_readers_slips():
    def pre_norm_block_first_try(x, sublayers):
        for norm, f in sublayers:
            x = norm(x)
            x = x + f(x)
        return x

    def post_norm_block_slip(x, sublayers):
        for i, (norm, f) in enumerate(sublayers):
            x = x + f(x)
            if i < len(sublayers) - 1:
                x = norm(x)
        return x

    def rmsnorm_backward_first_try(x, weight, grad_out, eps):
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        grad_weight = (grad_out * x / rms).flatten(0, -2).sum(0)
        return grad_out * weight / rms, grad_weight

    assert (
        "stream itself was normalised"
        in norms.check_pre_norm_block(pre_norm_block_first_try).message
    )
    assert "last sum is not normalised" in norms.check_post_norm_block(post_norm_block_slip).message
    assert (
        "treats the RMS as a constant"
        in norms.check_rmsnorm_backward(rmsnorm_backward_first_try).message
    )


def test_unrecognised_answer_reports_the_difference():
    def scaled(x, sublayers):
        for norm, f in sublayers:
            x = 1.5 * x + f(norm(x))
        return x

    result = norms.check_pre_norm_block(scaled)
    assert not result.passed
    assert "largest difference" in result.message


def test_a_block_written_for_two_pairs_is_named():
    """Notebook 02 wrote one pre-norm block as two lines; that form fails on a stack."""

    def two_pairs_only(x, sublayers):
        (norm1, attn), (norm2, mlp) = sublayers
        h = x + attn(norm1(x))
        return h + mlp(norm2(h))

    def four_indices(x, sublayers):
        for i in range(4):
            norm, f = sublayers[i]
            x = x + f(norm(x))
        return x

    for fn in (two_pairs_only, four_indices):
        message = norms.check_pre_norm_block(fn).message
        assert message.startswith("✗ pre_norm_block: your function raised"), message
        assert message.endswith(f"Hint: {norms.UNPACK_HINT}"), message


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    norms.check_rmsnorm(norms.solution_rmsnorm)
    norms.check_pre_norm_block(norms.solution_pre_norm_block)
    norms.check_post_norm_block(norms.solution_post_norm_block)
    norms.check_rmsnorm_backward(norms.solution_rmsnorm_backward)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_autograd_in_the_backward_is_refused():
    def rmsnorm_backward(x, weight, grad_out, eps):
        x = x.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        return torch.autograd.grad(y, (x, w), grad_out)

    def with_backward(x, weight, grad_out, eps):
        x = x.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).backward(grad_out)
        return x.grad, w.grad

    for fn in (rmsnorm_backward, with_backward):
        message = norms.check_rmsnorm_backward(fn).message
        assert message.startswith("✗ rmsnorm_backward: write this one by hand: it calls autograd")


def test_eps_slip_is_named_without_the_fix():
    [message] = [h for h, w in norms.BACKWARD_MISTAKES if w is norms._bw_eps_outside]
    assert "near-zero token" in message
    assert "belongs" not in message and "inside" not in message


@pytest.mark.parametrize("hint", [h for h, _ in norms.PRE_MISTAKES + norms.POST_MISTAKES])
def test_block_messages_do_not_say_what_to_write(hint):
    for fix in ("go through", "in a loop", "in that order", "instead.", "belongs"):
        assert fix not in hint


@pytest.mark.parametrize("name, check, solution", CHECKS, ids=[c[0] for c in CHECKS])
def test_show_solution_prints_the_reference(name, check, solution):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exercises.show_solution(check)
    printed = buffer.getvalue()
    assert f"def solution_{name}(" in printed
    assert "def _" not in printed  # the solution reads on its own, with no private functions


def test_reexported_from_package():
    assert exercises.check_rmsnorm is norms.check_rmsnorm
    assert exercises.check_pre_norm_block is norms.check_pre_norm_block
    assert exercises.check_post_norm_block is norms.check_post_norm_block
    assert exercises.check_rmsnorm_backward is norms.check_rmsnorm_backward
