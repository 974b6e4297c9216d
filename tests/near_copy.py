"""How much of each exercise's answer a stored notebook already shows.

    python tests/near_copy.py          every exercise, its closest stored code cells
    python tests/near_copy.py 03 07    the exercises of notebooks 03 and 07
    python tests/near_copy.py --root DIR 02    the notebooks of another checkout (an older commit's
                                       `git archive`), scored with this file's forms

For every exercise, the reference solution's bodies (what `show_solution` prints, without the
`def` lines, docstrings and comments) are read as Python tokens, names normalised: a variable is
`ID` whatever it is called, while attributes (`.transpose`, `.softmax`), keywords, builtins,
module names (`torch`, `F`, `math`) and numbers stay as written. Each stored code cell of both
editions is read the same way. The score of a cell is the share of the reference's tokens found
in it, in order, in runs of at least `RUN` tokens, each token weighed by how rare it is among the
stored cells (`(` and `ID` weigh almost nothing, `.masked_fill` much more): 1.0 is the answer
itself, under another spelling; a formula written once for another case (2-D `Q @ K.T`, say)
shares a few short runs and scores lower. `tests/test_near_copy.py` fails at `LIMIT` or above.

A learner does not write the reference's words: the answer is often shorter (no intermediate
names, one line where the reference has two) or spelled another way (`.contiguous().view` for
`.reshape`), and a cell that holds most of that shorter answer
gives it away just the same. `LEARNER_FORMS` holds such shorter answers, each one a version that
passes its check (tests/test_near_copy.py runs them), and a cell's score for an exercise is its
highest over the reference and these forms.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import difflib
import io
import json
import keyword
import math
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = 5  # the shortest run of tokens in order that counts as copied
LIMIT = 0.5  # a cell holding half the answer, in order, is a near-copy
SHORT = 40  # an answer shorter than this is compared with its names as written
MODULES = {"torch", "F", "nn", "math", "np"}

# Shorter answers as learners write them, by check name: a function named as the exercise asks,
# whose body is what is scored (always with names normalised: the learner's names are anyone's).
LEARNER_FORMS: dict[str, list[str]] = {
    "check_qkv_split": [
        """
def qkv_split(x, w_qkv):
    q, k, v = (x @ w_qkv.T).split(x.size(-1), dim=-1)
    return q, k, v
""",
    ],
    "check_merge_heads": [
        """
def merge_heads(y):
    B, h, n, d_h = y.shape
    return y.transpose(1, 2).contiguous().view(B, n, h * d_h)
""",
    ],
    "check_train_loop": [
        """
def train_loop(model, optimizer, tokens, steps, batch_size, max_lr, warmup, clip, seed):
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, max_lr, warmup, steps, "cosine")
        x, y = sample_batch(tokens, batch_size, model.cfg.block_size, g)
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses
""",
    ],
    "check_sample_step": [
        """
def sample_step(model, idx, temperature, top_k, top_p, generator):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits, _ = model(idx[:, -model.cfg.block_size :])
    model.train(was_training)
    logits = logits[:, -1, :]
    if temperature == 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator)
""",
    ],
}


def normalised(source: str, names: bool = False) -> list[str]:
    """The tokens of `source`, comments and layout dropped, variables as ID (as written, with
    `names`)."""
    out: list[str] = []
    previous = ""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return out
    depth = 0
    for j, tok in enumerate(tokens):
        if tok.string in "([{" and tok.type == tokenize.OP:
            depth += 1
        elif tok.string in ")]}" and tok.type == tokenize.OP:
            depth -= 1
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENCODING,
            tokenize.ENDMARKER,
        ):
            continue
        text = tok.string
        if tok.type == tokenize.NAME:
            following = tokens[j + 1].string if j + 1 < len(tokens) else ""
            keep = (
                previous == "."
                or (depth > 0 and following == "=")  # a keyword argument: dim=, dtype=
                or keyword.iskeyword(text)
                or hasattr(builtins, text)
                or text in MODULES
            )
            text = text if keep or names else "ID"
        elif tok.type == tokenize.STRING:
            text = "STR"
        out.append(text)
        previous = tok.string
    return out


def _bodies(source: str) -> str:
    """The statements inside every function of `source`, docstrings dropped, as source."""
    tree = ast.parse(source)
    parts = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            parts += [ast.unparse(s) for s in body if not isinstance(s, ast.FunctionDef)]
    return "\n".join(parts)


def form_tokens(form: str) -> list[str]:
    """A learner's form (a `def`), its body as normalised tokens."""
    return normalised(_bodies(form))


def reference_tokens(check, names: bool = False) -> list[str]:
    """The answer `show_solution(check)` prints, as normalised tokens."""
    import gptlib.exercises as ex

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ex.show_solution(check)
    return normalised(_bodies(printed.getvalue()), names)


def answer_forms(check) -> list[tuple[bool, list[str]]]:
    """Every form of `check`'s answer that a cell is scored against, as (names as written?,
    tokens): the reference both ways (as written only when it is shorter than SHORT), then each
    learner's form with names normalised."""
    n = len(reference_tokens(check))
    forms = [
        (names, reference_tokens(check, names))
        for names in ((False, True) if n >= SHORT else (True,))
    ]
    return forms + [(False, form_tokens(form)) for form in LEARNER_FORMS.get(check.__name__, [])]


def weights(cells: list[list[str]]) -> dict[str, float]:
    """How telling each token is: log(number of cells / cells holding it). `(`, `ID` and `=`
    are in nearly every cell and weigh almost nothing; `.masked_fill` or `triu` weigh much more."""
    held: dict[str, int] = {}
    for toks in cells:
        for t in set(toks):
            held[t] = held.get(t, 0) + 1
    n = len(cells) + 1
    return {t: math.log(n / (1 + k)) + 0.05 for t, k in held.items()}


def score(reference: list[str], cell: list[str], weight: dict[str, float] | None = None) -> float:
    """The share of `reference` found in `cell`, in order, in runs of at least RUN tokens, each
    token counted by its `weight` (1 each without one)."""
    if not reference:
        return 0.0
    w = weight or {}
    default = max(w.values(), default=1.0)  # a token no stored cell has is the most telling
    matcher = difflib.SequenceMatcher(None, reference, cell, autojunk=False)
    found = sum(
        w.get(t, default)
        for b in matcher.get_matching_blocks()
        if b.size >= RUN
        for t in reference[b.a : b.a + b.size]
    )
    return found / sum(w.get(t, default) for t in reference)


def stored_cells(names: bool = False) -> list[tuple[str, int, list[str]]]:
    """(notebook path, cell index, tokens) for every code cell of both editions."""
    cells = []
    for path in sorted(ROOT.glob("notebooks/**/[0-9][0-9]_*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                lines = [line for line in source.splitlines() if line.lstrip()[:1] not in "%!"]
                cells.append((str(path.relative_to(ROOT)), i, normalised("\n".join(lines), names)))
    return cells


def stored_weights() -> dict[bool, dict[str, float]]:
    """The token weights of the stored cells, with names normalised (False) and as written."""
    return {names: weights([toks for _, _, toks in stored_cells(names)]) for names in (False, True)}


def score_source(check, source: str, weight: dict[bool, dict[str, float]]) -> float:
    """The score one piece of code would get as a stored cell: its highest over every form of
    `check`'s answer, tokens weighed as among the stored cells (`stored_weights()`)."""
    return max(
        score(ref, normalised(source, names), weight[names]) for names, ref in answer_forms(check)
    )


def closest(notebooks: set[str] | None = None, top: int = 3):
    """{check name: (tokens, [(score, notebook, cell), ...] best first)} for every exercise.

    An answer of fewer than SHORT tokens (two lines, say) is compared with its names as
    written: under normalised names `x @ w_fc.T` would be every `a @ b.T` of the course. A longer
    one is scored both ways, and each learner's form (LEARNER_FORMS) with names normalised; the
    highest score counts."""
    import gptlib.exercises as ex
    from gptlib.exercises.progress import EXERCISES

    kinds = {}
    for names in (False, True):
        cells = stored_cells(names)
        kinds[names] = (cells, weights([toks for _, _, toks in cells]))
    found = {}
    for e in EXERCISES:
        if notebooks and e.notebook not in notebooks:
            continue
        check = getattr(ex, e.check)
        best: dict[tuple[str, int], float] = {}
        for names, ref in answer_forms(check):
            cells, weight = kinds[names]
            seen: dict[tuple[str, ...], float] = {}  # the zh edition's code cells are the English
            for nb, i, toks in cells:
                key = tuple(toks)
                if key not in seen:
                    seen[key] = score(ref, toks, weight)
                best[nb, i] = max(best.get((nb, i), 0.0), seen[key])
        n = len(reference_tokens(check))
        scored = sorted(((s, nb, i) for (nb, i), s in best.items()), reverse=True)
        found[e.check] = (n, scored[:top])
    return found


def main(argv: list[str]) -> int:
    global ROOT
    if argv[:1] == ["--root"]:
        if len(argv) < 2 or not (Path(argv[1]) / "notebooks").is_dir():
            print(f"--root needs a folder that holds notebooks/, got {argv[1:2]}", file=sys.stderr)
            return 2
        ROOT, argv = Path(argv[1]).resolve(), argv[2:]
    for check, (n, best) in closest(set(argv) or None).items():
        shown = ", ".join(f"{s:.2f} {nb} cell {i}" for s, nb, i in best)
        print(f"{check} ({n} tokens): {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
