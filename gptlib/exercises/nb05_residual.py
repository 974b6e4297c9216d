"""Notebook 05: `stack_gradients(jacobians, grad_top, residual)`, checked against autograd through
linear maps x -> J_l x (+ x); a function that calls autograd is refused."""

import ast
import functools
import inspect

import torch

from gptlib.exercises.checking import (
    CheckResult,
    compare,
    namespace,
    resolved,
    solved_by,
    source_tree,
)
from gptlib.language import N_, _

__all__ = ["check_stack_gradients", "solution_stack_gradients"]


def solution_stack_gradients(jacobians, grad_top, residual):
    """jacobians: L tensors [d, d], J_l = df_l/dx at layer l's input; grad_top: dL/dx_L [d].
    Returns [L, d]: row l is dL/dx_l, the gradient reaching layer l's input."""
    g, rows = grad_top, []  # g [d]: the gradient at the output of the last layer
    for J in reversed(jacobians):  # from the top layer down
        if residual:
            J = J + torch.eye(J.shape[0], dtype=J.dtype)  # d(x + f(x))/dx = I + J
        g = g @ J  # [d] @ [d, d]: dL/dx_j = sum_i dL/dy_i dy_i/dx_j
        rows.append(g)
    return torch.stack(rows[::-1])  # [L, d], layer 0 first


def variant(wrong, name: str, **switches):
    """`wrong` with its switches set: one slip of a table, named `name`."""
    slip = functools.partial(wrong, **switches)
    slip.__name__ = name
    return slip


def _stack(jacobians, grad_top, residual, *, res=None, column=False, ones=False, upward=False,
           flip=False, shift=False):  # fmt: skip
    res = residual if res is None else res
    g, rows = grad_top, []
    for J in jacobians if upward else reversed(jacobians):
        J = J + (1 if ones else torch.eye(J.shape[0], dtype=J.dtype)) if res else J
        g = J @ g if column else g @ J
        rows.append(g)
    out = torch.stack(rows if upward else rows[::-1])
    out = torch.cat([out[1:], grad_top[None]]) if shift else out
    return out.flip(0) if flip else out


MISTAKES = [
    (N_("each layer multiplied the Jacobian by the gradient as a column, J @ g: your gradient sums "
        "over the layer's inputs, not its outputs"), variant(_stack, "untransposed", column=True)),
    (N_("the stacks without a residual come out as if they had one: your gradient keeps its size "
        "through the plain layers"), variant(_stack, "always_residual", res=True)),
    (N_("the residual stacks come out as if they had none: the identity path of x + f(x) is "
        "missing from every layer's Jacobian"), variant(_stack, "never_residual", res=False)),
    (N_("the residual layers added 1 to every entry of J_l, not only where output feature i is "
        "input feature i"), variant(_stack, "ones_not_identity", ones=True)),
    (N_("the chain was taken from layer 0 upwards: the gradient from the top passes through the "
        "last layer first"), variant(_stack, "bottom_up", upward=True)),
    (N_("the rows are in reverse: your row 0 is the gradient at the top layer's input"),
     variant(_stack, "top_first", flip=True)),
    (N_("each row is one layer too high: your row l is the gradient at layer l's output (the last "
        "row is grad_top itself)"), variant(_stack, "outputs_not_inputs", shift=True)),
]  # fmt: skip


def _inputs(g: torch.Generator):  # layers, residual: one trial of each per seed
    n_layer, residual = ((4, True), (5, False), (3, True), (6, False))[g.initial_seed() % 4]
    jacobians = [torch.randn(5, 5, generator=g, dtype=torch.float64) / 2 for _i in range(n_layer)]
    return jacobians, torch.randn(5, generator=g, dtype=torch.float64), residual


def _autograd_stack_gradients(jacobians, grad_top, residual):  # x -> J_l x (+ x), autograd's
    xs = [torch.ones(len(grad_top), dtype=grad_top.dtype, requires_grad=True)]
    for J in jacobians:
        xs.append(xs[-1] + J @ xs[-1] if residual else J @ xs[-1])
    return torch.stack(torch.autograd.grad((xs[-1] * grad_top).sum(), xs[:-1]))


def calls_autograd(fn) -> bool:
    """Whether `fn`'s source uses `.backward` or anything of torch.autograd or torch.func: by a
    global, a dotted name, or an import in its body (from torch.autograd.functional import vjp)."""
    tree = source_tree(fn)
    if tree is None:
        return False
    names, autograd = namespace(inspect.unwrap(fn), tree), ("torch.autograd", "torch.func")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                a.name for a in node.names]  # fmt: skip
            if any(m.startswith(autograd) for m in modules):
                return True
        obj = resolved(node, names) if isinstance(node, (ast.Name, ast.Attribute)) else None
        where = str(getattr(obj, "__module__", None) or getattr(obj, "__name__", ""))
        if getattr(node, "attr", None) == "backward" or where.startswith((*autograd, "torch._f")):
            return True
    return False


def autograd_refusal(name: str) -> CheckResult:
    """What a check of a hand-derived gradient says to a function that calls autograd."""
    said = _("✗ {name}: write this one by hand: it calls autograd (torch.autograd, .backward() "
             "or torch.func), which computes the whole exercise")  # fmt: skip
    return CheckResult(False, said.format(name=name))


@solved_by(solution_stack_gradients)
def check_stack_gradients(stack_gradients) -> CheckResult:
    """Stacks of 3 to 6 random [5, 5] Jacobians, with and without the residual, against autograd."""
    if calls_autograd(stack_gradients):
        return autograd_refusal("stack_gradients")
    run = lambda *inputs: torch.stack(list(stack_gradients(*inputs)))  # noqa: E731 (a list will do)
    return compare("stack_gradients", run, _autograd_stack_gradients, _inputs, MISTAKES,
                   trials=4, atol=1e-8, rtol=1e-6)  # fmt: skip
