"""Notebook 05's check: the gradient reaching each layer of a stack, from the layers' Jacobians.
Each slip of the table is named by its row, each slip the notebook promises is named, a list of
rows is accepted, and a function that calls autograd is refused."""

import pytest
import torch
from torch.autograd import grad as imported_grad

from gptlib.exercises import nb05_residual as residual


def _ids(m):
    return getattr(m, "__name__", "")


def _message(fn):
    result = residual.check_stack_gradients(fn)
    assert not result.passed
    return result.message


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
    assert _message(wrong) == f"✗ stack_gradients: {hint}"


def _eye(J):
    return torch.eye(len(J), dtype=J.dtype)


def test_promised_product_the_wrong_way_round():
    def column(jacobians, grad_top, residual):
        g, rows = grad_top, []
        for J in reversed(jacobians):
            g = (J + _eye(J) if residual else J) @ g
            rows.insert(0, g)
        return torch.stack(rows)

    assert "as a column, J @ g" in _message(column)


def test_promised_identity_missing_or_added_where_there_is_none():
    def never(jacobians, grad_top, with_residual):
        return residual.solution_stack_gradients(jacobians, grad_top, False)

    def always(jacobians, grad_top, with_residual):
        return residual.solution_stack_gradients(jacobians, grad_top, True)

    assert "as if they had none" in _message(never)
    assert "as if they had one" in _message(always)


def test_promised_identity_added_to_every_entry():
    def ones(jacobians, grad_top, residual):
        g, rows = grad_top, []
        for J in reversed(jacobians):
            g = g @ (J + torch.ones_like(J) if residual else J)
            rows.append(g)
        return torch.stack(rows[::-1])

    assert "added 1 to every entry" in _message(ones)


def test_promised_layers_in_the_wrong_order_rows_reversed_or_shifted():
    def upward(jacobians, grad_top, residual):
        g, rows = grad_top, []
        for J in jacobians:
            g = g @ (J + _eye(J) if residual else J)
            rows.append(g)
        return torch.stack(rows)

    def reversed_rows(jacobians, grad_top, with_residual):
        return residual.solution_stack_gradients(jacobians, grad_top, with_residual).flip(0)

    def outputs(jacobians, grad_top, residual):
        g, rows = grad_top, []
        for J in reversed(jacobians):
            rows.insert(0, g)  # kept before the step: the gradient at the layer's output
            g = g @ (J + _eye(J) if residual else J)
        return torch.stack(rows)

    assert "from layer 0 upwards" in _message(upward)
    assert "rows are in reverse" in _message(reversed_rows)
    assert "one layer too high" in _message(outputs)


def test_a_list_of_rows_is_accepted():
    def as_list(jacobians, grad_top, with_residual):
        return list(residual.solution_stack_gradients(jacobians, grad_top, with_residual))

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
    def with_grad(jacobians, grad_top, residual):
        x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
        inputs = []
        for J in jacobians:
            inputs.append(x)
            x = x + J @ x if residual else J @ x
        return torch.stack(torch.autograd.grad((x * grad_top).sum(), inputs))

    def with_backward(jacobians, grad_top, residual):
        x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
        inputs = []
        for J in jacobians:
            x.retain_grad()
            inputs.append(x)
            x = x + J @ x if residual else J @ x
        (x * grad_top).sum().backward()
        return torch.stack([t.grad for t in inputs])

    def with_imported_grad(jacobians, grad_top, residual):
        x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
        return torch.stack(imported_grad((x * grad_top).sum(), [x] * len(jacobians)))

    for fn in (with_grad, with_backward, with_imported_grad):
        assert _message(fn) == residual.autograd_refusal("stack_gradients").message, fn


def test_the_word_autograd_in_a_comment_is_not_refused():
    def stack_gradients(jacobians, grad_top, with_residual):
        # checked against autograd in the notebook; "backward()" is only a word here
        return residual.solution_stack_gradients(jacobians, grad_top, with_residual)

    assert residual.check_stack_gradients(stack_gradients).passed


@pytest.mark.parametrize("hint", [h for h, _ in residual.MISTAKES])
def test_messages_name_the_symptom_not_the_fix(hint):
    for code in ("torch.eye", "reversed", ".T", "@ J", "J.T", "transpose", "flip"):
        assert code not in hint


def test_autograd_imported_in_the_body_is_refused():  # the page promises no autograd
    def with_local_vjp(jacobians, grad_top, residual):
        from torch.autograd.functional import vjp

        def stack(x):
            for J in jacobians:
                x = x + x @ J.T if residual else x @ J.T
            return x

        return torch.stack([vjp(stack, torch.ones_like(grad_top), grad_top)[1]] * len(jacobians))

    assert _message(with_local_vjp) == residual.autograd_refusal("stack_gradients").message
