"""Notebook 06's checks: RMSNorm, residual sublayers in both placements and RMSNorm's backward
pass. Each slip of a table is named by its row, each slip the notebook promises is named, and
the edge cases: a library call, a detached statistic, a function written for two pairs only,
autograd inside the backward."""

import importlib.util

import pytest
import torch

from gptlib.config import microgpt, textbook
from gptlib.exercises import nb06_normalisation as norms
from gptlib.model import Block


def _ids(m):
    return getattr(m, "__name__", "")


def _message(check, fn):
    result = check(fn)
    assert not result.passed
    return result.message


@pytest.mark.parametrize("hint, wrong", norms.RMSNORM_MISTAKES, ids=_ids)
def test_each_rmsnorm_mistake_gets_its_hint(hint, wrong):
    assert _message(norms.check_rmsnorm, wrong) == f"✗ rmsnorm: {hint}"


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
        message = _message(norms.check_rmsnorm, fn)
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

    assert "the gradient of x is not" in _message(norms.check_rmsnorm, detached)


def test_rmsnorm_library_call_is_told_to_write_it(tmp_path):
    """Read from the source: the body must live in a file, as a notebook cell's does."""
    path = tmp_path / "rms_shortcut.py"
    path.write_text(
        "import torch\n\n\ndef rmsnorm(x, gain, eps=1e-5):\n"
        "    return torch.nn.functional.rms_norm(x, (x.size(-1),), gain, eps)\n"
    )
    spec = importlib.util.spec_from_file_location("rms_shortcut", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    message = _message(norms.check_rmsnorm, module.rmsnorm)
    assert message.startswith("✗ rmsnorm: write this one yourself: it calls F.rms_norm"), message


def test_rmsnorm_inputs_tell_the_axes_apart():
    inputs = [norms._rmsnorm_inputs(torch.Generator().manual_seed(s)) for s in (1000, 1001, 1002)]
    assert [x.dim() for x, *_ in inputs] == [4, 2, 3]  # the first trial has every leading axis


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
    assert _message(norms.check_pre_norm_block, wrong) == f"✗ pre_norm_block: {hint}"


@pytest.mark.parametrize("hint, wrong", norms.POST_MISTAKES, ids=_ids)
def test_each_post_norm_mistake_gets_its_hint(hint, wrong):
    assert _message(norms.check_post_norm_block, wrong) == f"✗ post_norm_block: {hint}"


def _pre(x, sublayers):
    for norm, f in sublayers:
        x = x + f(norm(x))
    return x


def _post(x, sublayers):
    for norm, f in sublayers:
        x = norm(x + f(x))
    return x


def test_block_promised_slips_are_named():
    """The notebook promises: a missing residual, the norm in the other placement or on the
    sublayer's output, a sublayer reading the block's input, sublayers skipped or run out of
    order, a last sum left without its norm; and (the RMS table) a normalised pre-norm stream."""

    def pre_no_residual(x, sublayers):
        for norm, f in sublayers:
            x = f(norm(x))
        return x

    def post_no_residual(x, sublayers):
        for norm, f in sublayers:
            x = norm(f(x))
        return x

    def pairs_swapped(x, sublayers):  # (f, norm): the norm ends up on f's output
        for f, norm in sublayers:
            x = x + f(norm(x))
        return x

    def pre_reads_input(x, sublayers):
        stream = x
        for norm, f in sublayers:
            stream = stream + f(norm(x))
        return stream

    def post_reads_input(x, sublayers):
        stream = x
        for norm, f in sublayers:
            stream = norm(stream + f(x))
        return stream

    def one_block(x, sublayers):
        return _pre(x, sublayers[:2])

    def backwards(x, sublayers):
        return _post(x, sublayers[::-1])

    def last_sum_raw(x, sublayers):
        for i, (norm, f) in enumerate(sublayers):
            x = x + f(x)
            if i < len(sublayers) - 1:
                x = norm(x)
        return x

    def stream_normalised(x, sublayers):
        for norm, f in sublayers:
            x = norm(x)
            x = x + f(x)
        return x

    pre, post = norms.check_pre_norm_block, norms.check_post_norm_block
    for check, fn, said in (
        (pre, pre_no_residual, "the residual is missing"),
        (post, post_no_residual, "the residual is missing"),
        (pre, _post, "equals post-norm's"),
        (post, _pre, "that is pre-norm"),
        (pre, pairs_swapped, "x + norm(f(x))"),
        (post, pairs_swapped, "x + norm(f(x))"),
        (pre, pre_reads_input, "reads the block's input x"),
        (post, post_reads_input, "reads the block's input x"),
        (pre, one_block, "only the first two sublayers ran"),
        (post, backwards, "from the last to the first"),
        (post, last_sum_raw, "the last sum is not normalised"),
        (pre, stream_normalised, "the stream itself was normalised"),
    ):
        assert said in _message(check, fn), (check.__name__, fn.__name__)


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
        message = _message(norms.check_pre_norm_block, fn)
        assert message.startswith("✗ pre_norm_block: your function raised"), message
        assert message.endswith(f"Hint: {norms.ERROR_HINTS[0][1]}"), message


def test_unrecognised_answer_reports_the_difference():
    def scaled(x, sublayers):
        for norm, f in sublayers:
            x = 1.5 * x + f(norm(x))
        return x

    assert "largest difference" in _message(norms.check_pre_norm_block, scaled)


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
        pairs = [pair for b in blocks for pair in ((b.ln1, b.attn), (b.ln2, b.mlp))]
        torch.testing.assert_close(solution(x, pairs), blocks[2](blocks[1](blocks[0](x))))


@pytest.mark.parametrize("hint", [h for h, _ in norms.PRE_MISTAKES + norms.POST_MISTAKES])
def test_block_messages_do_not_say_what_to_write(hint):
    for fix in ("go through", "in a loop", "in that order", "instead.", "belongs"):
        assert fix not in hint


@pytest.mark.parametrize("hint, wrong", norms.BACKWARD_MISTAKES, ids=_ids)
def test_each_backward_mistake_gets_its_hint(hint, wrong):
    assert _message(norms.check_rmsnorm_backward, wrong) == f"✗ rmsnorm_backward: {hint}"


def test_backward_rms_taken_as_a_constant_is_named():
    """The notebook's cosine table warns of it: r treated as a constant."""

    def first_try(x, weight, grad_out, eps):
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        return grad_out * weight / rms, (grad_out * x / rms).flatten(0, -2).sum(0)

    assert "treats the RMS as a constant" in _message(norms.check_rmsnorm_backward, first_try)


def test_solution_backward_equals_autograd_in_float32():
    x, w, gy = torch.randn(4, 3, 16), torch.rand(16) + 0.5, torch.randn(4, 3, 16)
    xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = xr / torch.sqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-5) * wr
    expected = torch.autograd.grad(y, (xr, wr), gy)
    torch.testing.assert_close(norms.solution_rmsnorm_backward(x, w, gy, 1e-5), expected)


def test_autograd_in_the_backward_is_refused():
    def with_grad(x, weight, grad_out, eps):
        x = x.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
        return torch.autograd.grad(y, (x, w), grad_out)

    def with_backward(x, weight, grad_out, eps):
        x = x.detach().requires_grad_(True)
        w = weight.detach().requires_grad_(True)
        (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).backward(grad_out)
        return x.grad, w.grad

    for fn in (with_grad, with_backward):
        message = _message(norms.check_rmsnorm_backward, fn)
        assert message.startswith("✗ rmsnorm_backward: write this one by hand: it calls autograd")


def test_backward_eps_slip_is_named_without_the_fix():
    [message] = [h for h, w in norms.BACKWARD_MISTAKES if w.__name__ == "eps_outside"]
    assert "near-zero token" in message
    assert "belongs" not in message and "inside" not in message


def test_checks_leave_the_global_rng_alone():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    norms.check_rmsnorm(norms.solution_rmsnorm)
    norms.check_pre_norm_block(norms.solution_pre_norm_block)
    norms.check_post_norm_block(norms.solution_post_norm_block)
    norms.check_rmsnorm_backward(norms.solution_rmsnorm_backward)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize(
    "rmsnorm, meaning",
    [
        (lambda x, gain, eps=1e-5: x / x.pow(2).mean(-1, keepdim=True).sqrt() * gain, "eps is missing"),
        (lambda x, gain, eps=1e-5: x / (x.pow(2).sum(-1, keepdim=True) / (x.size(-1) - 1) + eps).sqrt() * gain,
         "divided by d - 1"),
        (lambda x, gain, eps=1e-5: x / (x.std(-1, keepdim=True) + eps) * gain, "the standard deviation"),
        (lambda x, gain, eps=1e-5: x / torch.sqrt(x.var(-1, keepdim=True) + eps) * gain,
         "the standard deviation"),
    ],
)  # fmt: skip
def test_rmsnorm_common_slips_as_a_reader_writes_them(rmsnorm, meaning):
    assert meaning in _message(norms.check_rmsnorm, rmsnorm)


def _nn_module(x, gain, eps=1e-5):
    m = torch.nn.RMSNorm(x.size(-1), eps=eps, elementwise_affine=False)
    return m(x) * gain


def _gptlib_module_built_in_the_body(x, gain, eps=1e-5):
    from gptlib.norms import RMSNorm

    return torch.func.functional_call(RMSNorm(x.size(-1), eps), {"weight": gain}, (x,))


@pytest.mark.parametrize(
    "fn, named", [(_nn_module, "nn.RMSNorm"), (_gptlib_module_built_in_the_body, "gptlib.norms")]
)
def test_an_rmsnorm_module_built_in_the_body_is_refused(fn, named):  # the page's promise
    message = _message(norms.check_rmsnorm, fn)
    assert message.startswith("✗ rmsnorm: write this one yourself") and named in message


def test_a_final_norm_in_a_pre_norm_block_is_named():
    def pre_norm_block(x, sublayers):
        for norm, f in sublayers:
            x = x + f(norm(x))
        return sublayers[-1][0](x)  # the stream normalised on its way out

    assert "the stream went through a norm after the last sublayer" in _message(
        norms.check_pre_norm_block, pre_norm_block
    )
