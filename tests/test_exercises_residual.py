"""Notebook 05's check: the gradient reaching each layer of a stack, from the layers' Jacobians.
The stub gets the not-written line, the reference passes, each listed slip gets its own message,
a list of rows is accepted, and a function that calls autograd is refused."""

import pytest
import torch

from gptlib import exercises
from gptlib.exercises import residual
from gptlib.exercises.checking import _close, not_written


def _ids(m):
    return getattr(m, "__name__", "")


def test_stub_says_not_written():
    def stack_gradients(jacobians, grad_top, residual):
        raise NotImplementedError  # your code here

    result = residual.check_stack_gradients(stack_gradients)
    assert not result.passed
    assert result.message == not_written("stack_gradients").message


def test_solution_passes():
    result = residual.check_stack_gradients(residual.solution_stack_gradients)
    assert result.passed
    assert result.message == "✓ stack_gradients: matches the reference on 4 random inputs"


def test_reference_equals_autograd_through_real_layers():
    # The Jacobians of a real nonlinear stack, taken at each layer's input, give autograd's
    # gradients at those inputs.
    torch.manual_seed(0)
    layers = [
        torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).double() for _ in range(3)
    ]
    for res in (True, False):
        x = torch.randn(4, dtype=torch.float64, requires_grad=True)
        inputs, jacobians, h = [], [], x
        for layer in layers:
            inputs.append(h)
            jacobians.append(torch.autograd.functional.jacobian(layer, h.detach()))
            h = h + layer(h) if res else layer(h)
        top = torch.randn(4, dtype=torch.float64)
        expected = torch.stack(torch.autograd.grad((h * top).sum(), inputs))
        got = residual.solution_stack_gradients(jacobians, top, res)
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("hint, wrong", residual.MISTAKES, ids=_ids)
def test_each_mistake_gets_its_message(hint, wrong):
    result = residual.check_stack_gradients(wrong)
    assert not result.passed
    assert result.message == f"✗ stack_gradients: {hint}"


def test_mistakes_differ_from_the_solution_and_from_each_other():
    # Over the four trials (with and without the residual) every two of them differ somewhere.
    fns = [residual.solution_stack_gradients] + [w for _, w in residual.MISTAKES]
    trials = [residual._inputs(torch.Generator().manual_seed(1000 + t)) for t in range(4)]
    outs = [[fn(*inputs) for inputs in trials] for fn in fns]
    for i in range(len(fns)):
        for j in range(i + 1, len(fns)):
            assert any(
                not _close(a, b, 1e-8, 1e-6) for a, b in zip(outs[i], outs[j], strict=True)
            ), (i, j)


def test_a_list_of_rows_is_accepted():
    def as_list(jacobians, grad_top, residual_):
        return list(residual.solution_stack_gradients(jacobians, grad_top, residual_))

    assert residual.check_stack_gradients(as_list).passed


def test_a_loop_written_differently_passes():
    def stack_gradients(jacobians, grad_top, residual):
        out = [None] * len(jacobians)
        g = grad_top.clone()
        for k in range(len(jacobians) - 1, -1, -1):
            g = jacobians[k].T @ g + (g if residual else 0)
            out[k] = g
        return torch.stack(out)

    assert residual.check_stack_gradients(stack_gradients).passed


def test_autograd_is_refused():
    def stack_gradients(jacobians, grad_top, residual):
        x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
        inputs = []
        for J in jacobians:
            inputs.append(x)
            x = x + J @ x if residual else J @ x
        return torch.stack(torch.autograd.grad((x * grad_top).sum(), inputs))

    result = residual.check_stack_gradients(stack_gradients)
    assert not result.passed
    assert result.message.startswith("✗ stack_gradients: write this one by hand: it calls autograd")


def test_backward_is_refused():
    def stack_gradients(jacobians, grad_top, residual):
        x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
        inputs = []
        for J in jacobians:
            x.retain_grad()
            inputs.append(x)
            x = x + J @ x if residual else J @ x
        (x * grad_top).sum().backward()
        return torch.stack([t.grad for t in inputs])

    assert "calls autograd" in residual.check_stack_gradients(stack_gradients).message


def test_the_word_autograd_in_a_comment_is_not_refused():
    def stack_gradients(jacobians, grad_top, with_residual):
        # checked against autograd in the notebook; "backward()" is only a word here
        return residual.solution_stack_gradients(jacobians, grad_top, with_residual)

    assert residual.check_stack_gradients(stack_gradients).passed


@pytest.mark.parametrize("hint", [h for h, _ in residual.MISTAKES])
def test_messages_name_the_symptom_not_the_fix(hint):
    for code in ("torch.eye", "reversed", ".T", "@ J", "J.T", "transpose", "flip"):
        assert code not in hint


def test_reexported_from_package():
    assert exercises.check_stack_gradients is residual.check_stack_gradients
