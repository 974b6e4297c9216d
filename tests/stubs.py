"""Filling a notebook's exercise stubs the way a reader who solved them would: shared by the
tests that run notebooks with their exercises done (test_progress, test_capstone_solved)."""

from __future__ import annotations

import ast
import contextlib
import io
import re

import gptlib.exercises as ex

# A notebook-10 loop with one slip, no zero_grad: gradients pile up from step to step (the cell a
# reader's kept `yourgpt/train_loop.py` holds; the tests give it its imports where they need them).
UNZEROED_LOOP = """def train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        idx, labels = sample_batch(tokens, batch_size, model.cfg.block_size, g)
        loss = model(idx, labels)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses
"""


SLIP = re.compile(r"slip|first_try|wrong|mistake")  # the notebooks' demonstrations of slips


def solution_source(check, name: str) -> str:
    """What show_solution prints, its last function renamed as the notebook's stub `name`."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ex.show_solution(check)
    head, _, tail = out.getvalue().rpartition(f"def {check.solution.__name__}(")
    return head + f"def {name}(" + tail


def checked_name(sources: list[str], check: str) -> str | None:
    """The name of the reader's function that these code cells hand to `check` (a slip shown as
    a demonstration does not count), or None."""
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == check
                and isinstance(node.args[0], ast.Name)
                and not SLIP.search(node.args[0].id)
            ):
                return node.args[0].id
    return None


def replace_definition(source: str, name: str, new: str) -> str | None:
    """`source` with its top-level `def name(...)` replaced by `new`; None if it defines no such
    function."""
    if f"def {name}(" not in source:
        return None
    found = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        return None
    lines = source.splitlines()
    lines[found[0].lineno - 1 : found[0].end_lineno] = new.rstrip("\n").splitlines()
    return "\n".join(lines) + "\n"
