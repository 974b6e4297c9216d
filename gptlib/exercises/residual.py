"""Notebook 05, residual connections: the gradient that reaches each layer of a stack, by hand.

`stack_gradients(jacobians, grad_top, residual)` takes the Jacobians J_l = df_l/dx of the L layers
of a stack, each [d, d] (row: output feature, column: input feature) and taken at that layer's
input, the gradient dL/dx_L [d] that arrives at the top, and whether every layer is x + f_l(x)
(residual=True) or f_l(x) alone. It returns [L, d]: row l the gradient dL/dx_l reaching layer l's
input. The check compares it with autograd run through a stack of linear maps whose Jacobians are
the ones given, and refuses a function that calls autograd itself (read from its source).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable

import torch

from gptlib.exercises.checking import CheckResult, compare, solved_by

__all__ = ["check_stack_gradients", "solution_stack_gradients"]


def solution_stack_gradients(jacobians, grad_top, residual):
    """jacobians: L tensors [d, d], J_l = df_l/dx at layer l's input; grad_top: dL/dx_L [d].
    Returns [L, d]: row l is dL/dx_l, the gradient reaching layer l's input."""
    g = grad_top  # [d]: the gradient at the output of the last layer
    rows = []
    for J in reversed(jacobians):  # from the top layer down
        if residual:
            J = J + torch.eye(J.shape[0], dtype=J.dtype)  # d(x + f(x))/dx = I + J
        g = g @ J  # [d] @ [d, d]: dL/dx_j = sum_i dL/dy_i dy_i/dx_j
        rows.append(g)
    return torch.stack(rows[::-1])  # [L, d], layer 0 first


def _down(jacobians, grad_top, step):
    g, rows = grad_top, []
    for J in reversed(jacobians):
        g = step(g, J)
        rows.append(g)
    return rows


def _eye(J):
    return torch.eye(J.shape[0], dtype=J.dtype)


def _untransposed(jacobians, grad_top, residual):
    rows = _down(jacobians, grad_top, lambda g, J: (J + _eye(J) if residual else J) @ g)
    return torch.stack(rows[::-1])


def _always_residual(jacobians, grad_top, residual):
    return solution_stack_gradients(jacobians, grad_top, True)


def _never_residual(jacobians, grad_top, residual):
    return solution_stack_gradients(jacobians, grad_top, False)


def _ones_not_identity(jacobians, grad_top, residual):
    rows = _down(jacobians, grad_top, lambda g, J: g @ (J + 1 if residual else J))
    return torch.stack(rows[::-1])


def _bottom_up(jacobians, grad_top, residual):
    g, rows = grad_top, []
    for J in jacobians:  # layer 0 first: the chain taken in the wrong order
        g = g @ (J + _eye(J) if residual else J)
        rows.append(g)
    return torch.stack(rows)


def _top_first(jacobians, grad_top, residual):
    return solution_stack_gradients(jacobians, grad_top, residual).flip(0)


def _outputs_not_inputs(jacobians, grad_top, residual):
    # Row l is the gradient at layer l's output (the top's gradient for the last layer).
    full = solution_stack_gradients(jacobians, grad_top, residual)
    return torch.cat([full[1:], grad_top[None]])


def _with_top_row(jacobians, grad_top, residual):
    full = solution_stack_gradients(jacobians, grad_top, residual)
    return torch.cat([full, grad_top[None]])


MISTAKES = [
    (
        "each layer multiplied the Jacobian by the gradient as a column, J @ g: your gradient "
        "sums over the layer's inputs, where dL/dx_j sums dL/dy_i * dy_i/dx_j over its outputs i",
        _untransposed,
    ),
    (
        "the stacks without a residual come out as if they had one: your gradient keeps its "
        "size through the plain layers, where each J_l alone should shrink or grow it",
        _always_residual,
    ),
    (
        "the residual stacks come out as if they had none: the identity path of x + f(x) is "
        "missing from every layer's Jacobian",
        _never_residual,
    ),
    (
        "the residual layers added 1 to every entry of J_l (a matrix of ones), where "
        "d(x + f(x))/dx adds 1 only where output feature i is input feature i",
        _ones_not_identity,
    ),
    (
        "the chain was taken from layer 0 upwards: the gradient that arrives at the top first "
        "passes through the last layer, then the one below it, down to layer 0",
        _bottom_up,
    ),
    (
        "the rows are in reverse: your row 0 is the gradient at the top layer's input; row l "
        "is layer l's, layer 0 first",
        _top_first,
    ),
    (
        "each row is one layer too high: your row l is the gradient at layer l's output (the "
        "last row is grad_top itself), where it should be the gradient at layer l's input",
        _outputs_not_inputs,
    ),
    (
        "there is one row too many: your last row is grad_top itself; the result has one row "
        "per layer, L in all",
        _with_top_row,
    ),
]

# Layers and residual or not, one trial each (picked by the seed).
_TRIALS = ((4, True), (5, False), (3, True), (6, False))


def _inputs(g: torch.Generator):
    n_layer, residual = _TRIALS[g.initial_seed() % len(_TRIALS)]
    d = 5
    jacobians = [
        torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5 for _ in range(n_layer)
    ]
    grad_top = torch.randn(d, generator=g, dtype=torch.float64)
    return jacobians, grad_top, residual


def _autograd_stack_gradients(jacobians, grad_top, residual):
    """The reference: a stack of linear maps f_l(x) = J_l x (Jacobian J_l), run forward, and
    autograd's gradients of L = <x_L, grad_top> at each layer's input."""
    x = torch.ones(grad_top.shape[0], dtype=grad_top.dtype, requires_grad=True)
    inputs = []
    for J in jacobians:
        inputs.append(x)
        fx = J @ x
        x = x + fx if residual else fx
    return torch.stack(torch.autograd.grad((x * grad_top).sum(), inputs))


def _is_autograd(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    return isinstance(module, str) and module.startswith(
        ("torch.autograd", "torch.func", "torch._functorch")
    )


def calls_autograd(fn: Callable) -> bool:
    """Whether `fn` hands its work to autograd, read from its source: a `.backward()` call, an
    attribute `autograd` or `torch.func`, or a name that refers to something of torch.autograd
    or torch.func in the function's globals (`from torch.autograd import grad`). Comments and
    strings do not count; False when the source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    namespace = getattr(inspect.unwrap(fn), "__globals__", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "backward":
                return True
        if isinstance(node, ast.Attribute) and node.attr == "autograd":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "func":
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                return True
        if isinstance(node, ast.Name) and _is_autograd(namespace.get(node.id)):
            return True
    return False


def autograd_refusal(name: str) -> CheckResult:
    """The one line a check of a hand-derived gradient says to a function that calls autograd."""
    return CheckResult(
        False,
        f"✗ {name}: write this one by hand: it calls autograd (torch.autograd, .backward() or "
        "torch.func), which computes the whole exercise",
    )


@solved_by(solution_stack_gradients)
def check_stack_gradients(stack_gradients: Callable) -> CheckResult:
    """Run `stack_gradients(jacobians, grad_top, residual)` on stacks of 3 to 6 random [5, 5]
    Jacobians (float64), with and without the residual, against autograd through linear maps
    with those Jacobians."""
    if calls_autograd(stack_gradients):
        return autograd_refusal("stack_gradients")

    def run(*inputs):
        out = stack_gradients(*inputs)
        if isinstance(out, (list, tuple)) and all(torch.is_tensor(t) for t in out):
            return torch.stack(list(out))  # a list of L rows is as good as the [L, d] tensor
        return out

    return compare(
        "stack_gradients",
        run,
        _autograd_stack_gradients,
        _inputs,
        mistakes=MISTAKES,
        trials=4,
        atol=1e-8,
        rtol=1e-6,
    )
