"""The course's exercises, one record each: its check, notebook, difficulty, minutes, hints
and the library calls that would do its whole job.

The checks (one module per notebook beside this one) read their refusals here, `hint()` reads the
hints, `progress` and the README count read the rest, and one parametrised test goes through every
record. Adding an exercise is one record here, its check with its slips in its notebook's module,
and its cell.

- `hint`: step 1, what to think about (the idea, no code); step 2, the shapes and the steps, still
  no code; `hint()`'s step 3 is the reference solution, as `show_solution` prints it.
- `refusals`: where the library keeps a function that does the exercise's whole job (a module's
  function or a class's method), how the message names it and what it does. A check reads the
  reader's source for a call to one of them and says "write this one yourself" (nothing is
  patched: a check is a learning aid, and a disguised call passes and teaches nothing). A call
  missing from the installed torch is skipped. Deliberately left out: `gptlib.generate.filter_logits`
  for `sample_step`, which notebook 12 allows ("your filter_logits, or the library's"); and
  `merge_heads`, which has no library function of its own (`CausalSelfAttention.forward` merges
  the heads inline).
- `reports`: the name the check reports (`compare(name, ...)`), when it is not the check's own
  name without `check_` (the capstone's `check_gpt_attention` reports "attention").
"""

from __future__ import annotations

from typing import NamedTuple

__all__: list[str] = []  # used as a module: `from gptlib.exercises import table`


class Refusal(NamedTuple):
    path: str  # where the library keeps it: "torch.nn.functional.scaled_dot_product_attention"
    shown: str  # how the message names it: "F.scaled_dot_product_attention"
    does: str = "does the whole exercise"  # the message ends "..., which <does>"


class Hint(NamedTuple):
    think: str  # step 1: what to think about
    steps: str  # step 2: the shapes and the steps; one line per step


class Exercise(NamedTuple):
    check: str  # the check's name in gptlib.exercises
    notebook: str  # the notebook's number: "03" is notebooks/03_*.ipynb
    stars: int  # 1 (a few lines) to 3 (a loop of many parts, or a subtle rule such as ties)
    minutes: int  # a first-time reader's estimate, reading the exercise's text included
    hint: Hint
    refusals: tuple[Refusal, ...] = ()
    optional: bool = False  # marked optional (and harder) in its notebook
    reports: str = ""  # the name the check reports, when it is not `check` without "check_"

    @property
    def name(self) -> str:
        """The name the check reports: "causal_attention" for check_causal_attention."""
        return self.reports or self.check.removeprefix("check_")


_SDPA = Refusal(
    "torch.nn.functional.scaled_dot_product_attention", "F.scaled_dot_product_attention"
)
_ATTENTION_MODULE = Refusal(
    "gptlib.attention.CausalSelfAttention.forward", "CausalSelfAttention.forward (attn(x))"
)
_BLOCK = Refusal(
    "gptlib.model.Block.forward",
    "Block.forward (block(x))",
    "runs the whole block; go through its parts yourself",
)
_MODEL = Refusal(
    "gptlib.model.GPT.forward",
    "GPT.forward (model(idx))",
    "runs the whole model; go through its parts yourself",
)
_NEXT_TOKEN_PROBS = Refusal("gptlib.generate.next_token_probs", "gptlib.generate.next_token_probs")
_PICK_NEXT = Refusal("gptlib.generate.pick_next", "gptlib.generate.pick_next")
_GENERATE = Refusal("gptlib.generate.generate", "gptlib.generate.generate")
_LOG_SOFTMAX = (
    Refusal("torch.nn.functional.log_softmax", "F.log_softmax"),
    Refusal("torch.log_softmax", "torch.log_softmax"),
    Refusal("torch.Tensor.log_softmax", "Tensor.log_softmax (logits.log_softmax(...))"),
    Refusal("torch.special.log_softmax", "torch.special.log_softmax"),
)

EXERCISES: tuple[Exercise, ...] = (
    # --- notebook 00 -------------------------------------------------------------------
    Exercise(
        "check_encode_stream",
        "00",
        1,
        10,
        Hint(
            "The stream is every name with a marker on both sides: the model learns how a "
            "name starts from the token after BOS, and where it ends from predicting BOS. So "
            "BOS comes before each document and once more at the very end: N documents need "
            "N + 1 BOS ids. Which id is BOS? Ask the tokenizer; do not guess it.",
            "1. A plain Python list of ids that holds the BOS id alone.\n"
            "2. For each document, in order: its ids (the tokenizer encodes a string to a "
            "list of ints, one per character) added to the list, then one BOS id.\n"
            "3. The list turned into one 1-D tensor of dtype torch.long. N documents of "
            "total length L give L + N + 1 ids, BOS first and BOS last.",
        ),
        refusals=(Refusal("gptlib.data.encode_documents", "gptlib.data.encode_documents"),),
    ),
    # --- notebook 01 -------------------------------------------------------------------
    Exercise(
        "check_embed",
        "01",
        1,
        10,
        Hint(
            "A token's vector is the sum of two rows: one of the token table, chosen by what "
            "the token is, and one of the position table, chosen by where it stands in the "
            "window. Positions count places 0, 1, ..., n-1, whatever the tokens are.",
            "1. ids [B, n] pick rows of wte [V, d]: token vectors [B, n, d].\n"
            "2. The places 0..n-1 pick the first n rows of wpe [T, d]: [n, d].\n"
            "3. Add the two: [B, n, d] + [n, d] broadcasts over the batch to [B, n, d]. "
            "Added, not concatenated: the width stays d.",
        ),
    ),
    # --- notebook 02 -------------------------------------------------------------------
    Exercise(
        "check_qkv_split",
        "02",
        1,
        10,
        Hint(
            "nn.Linear stores its weight as [out, in], so a layer applied to x multiplies x "
            "by the transposed weight. The fused weight is three [d, d] weights stacked "
            "row-wise (queries, then keys, then values): one product gives all three side by "
            "side, and all that is left is to cut them apart, in that order.",
            "1. x [B, n, d] times the fused weight transposed, [d, 3d]: [B, n, 3d], the "
            "features laid out Q | K | V.\n"
            "2. The last axis cut into three consecutive blocks of d features: q, k, v, each "
            "[B, n, d].\n"
            "(The same thing the other way round: cut the weight's rows into three [d, d] "
            "parts, and project x with each part transposed.)",
        ),
    ),
    # --- notebook 03 -------------------------------------------------------------------
    Exercise(
        "check_causal_attention",
        "03",
        2,
        20,
        Hint(
            "It is the 2-D attend of the notebook, with B and h riding along in front: every "
            "product and every transpose acts on the last two axes only. The scale is one "
            "head's width d_h, the last axis of q. The mask hides key j from query i when j "
            "> i, and it goes on the scores before the softmax, which runs over the keys.",
            "1. q [B, h, n, d_h] times k with its last two axes swapped, [B, h, d_h, n]: "
            "scores [B, h, n, n], rows are queries, columns are keys; divided by the square "
            "root of d_h.\n"
            "2. An [n, n] boolean mask, True strictly above the diagonal; the scores there "
            "set to -inf (the mask broadcasts over B and h).\n"
            "3. Softmax along the last axis: weights [B, h, n, n], each row summing to 1.\n"
            "4. The weights times v [B, h, n, d_h]: the output [B, h, n, d_h].",
        ),
        refusals=(
            _SDPA,
            _ATTENTION_MODULE,
        ),
    ),
    # --- notebook 04 -------------------------------------------------------------------
    Exercise(
        "check_split_heads",
        "04",
        1,
        10,
        Hint(
            "Head i owns a contiguous slice of each position's features. Cut each position's "
            "d features into h groups first, keeping the positions apart, and only then move "
            "the head axis in front of the positions. Going to [B, h, n, d_h] in one reshape "
            "gives the right shape with scrambled contents.",
            "1. x [B, n, d] viewed as [B, n, h, d_h], with d_h = d / h.\n"
            "2. Axes 1 (positions) and 2 (heads) swapped: [B, h, n, d_h].",
        ),
        refusals=(
            Refusal(
                "gptlib.attention.CausalSelfAttention.split_heads",
                "CausalSelfAttention.split_heads",
            ),
        ),
    ),
    Exercise(
        "check_merge_heads",
        "04",
        1,
        5,
        Hint(
            "The inverse of split_heads, so its steps in reverse order: first the head axis "
            "goes back behind the positions, then the last two axes are glued into one. "
            "After axes are swapped the memory is no longer in that order, so the gluing has "
            "to be allowed to copy.",
            "1. y [B, h, n, d_h] with axes 1 and 2 swapped: [B, n, h, d_h].\n"
            "2. The last two axes merged (a reshape, which may copy; a view refuses here): "
            "[B, n, h * d_h] = [B, n, d].",
        ),
    ),
    # --- notebook 05 -------------------------------------------------------------------
    Exercise(
        "check_stack_gradients",
        "05",
        2,
        20,
        Hint(
            "Work from the top down. The gradient at a layer's input is the gradient at its "
            "output pushed back through that layer's Jacobian: I + J_l with the residual "
            "path, J_l without. The rows of J_l are the layer's outputs, so the gradient, a "
            "row vector, multiplies J_l from the left.",
            "1. grad_top [d] is the gradient at the output of layer L - 1, the last one.\n"
            "2. Go through the layers L - 1, ..., 0, one [d] @ [d, d] product each, and keep "
            "each result as that layer's row: the gradient at its input.\n"
            "3. With the residual path the matrix is the identity plus J_l, an identity of "
            "J_l's size and dtype (adding 1 to every entry is not the identity).\n"
            "4. Return the rows [L, d], layer 0 first.",
        ),
    ),
    # --- notebook 06 -------------------------------------------------------------------
    Exercise(
        "check_rmsnorm",
        "06",
        1,
        10,
        Hint(
            "LayerNorm by hand, above, took two statistics per token; RMSNorm takes one, and "
            "it is not the variance: nothing is subtracted first. Each token is handled on "
            "its own, over its d features only, whatever axes come before them. Where eps "
            "goes decides what a token of near-zero size comes out as (the table of the "
            "pitfall).",
            "1. One number per token: the average of the squares of its d features (the last "
            "axis), kept as an axis of size 1 so it broadcasts: [..., 1].\n"
            "2. eps added to that number, then the square root: [..., 1].\n"
            "3. x divided by it: [..., d]; then each feature times its own entry of gain "
            "[d].",
        ),
        refusals=(
            Refusal("torch.nn.functional.rms_norm", "F.rms_norm"),
            Refusal("torch.rms_norm", "torch.rms_norm"),
            Refusal("torch.nn.RMSNorm.forward", "nn.RMSNorm"),
            Refusal("gptlib.norms.RMSNorm.forward", "gptlib.norms.RMSNorm"),
        ),
    ),
    Exercise(
        "check_pre_norm_block",
        "06",
        1,
        10,
        Hint(
            "Every sublayer follows the same rule, so write the rule once and apply it to "
            "each (norm, f) pair in turn, in the order of the list: two pairs for one block, "
            "2L for a stack of L blocks. In pre-norm a sublayer reads a normalised copy of "
            "the stream and adds what it returns to the stream itself; the stream is never "
            "replaced by a normalised version, and the next sublayer reads the stream after "
            "this addition.",
            "x: the stream [B, n, d]; sublayers: a list of (norm, f) pairs.\n"
            "1. For each pair, in order: the stream normalised with the pair's norm; f on "
            "that; its output added to the raw stream: the new stream [B, n, d].\n"
            "2. After the last pair, return the stream [B, n, d]: one addition per pair, and "
            "no norm on the output.",
        ),
    ),
    Exercise(
        "check_post_norm_block",
        "06",
        1,
        5,
        Hint(
            "The same pairs and the same one addition per pair as pre-norm, but the norm "
            "moves: each sublayer reads the stream as it is, and it is the sum (the stream "
            "plus the sublayer's output) that the pair's norm normalises. So the output is "
            "itself a norm's output, that of the last pair.",
            "x: the stream [B, n, d]; sublayers: a list of (norm, f) pairs.\n"
            "1. For each pair, in order: f on the stream [B, n, d]; its output added to the "
            "stream; the sum normalised with the pair's norm: the new stream [B, n, d].\n"
            "2. After the last pair, return the stream [B, n, d].",
        ),
    ),
    Exercise(
        "check_rmsnorm_backward",
        "06",
        3,
        40,
        Hint(
            "y is the gain times x_hat, with x_hat = x / r, and r is computed from every "
            "feature of the token. So the gradient reaching x has two parts: the direct one, "
            "through the division by r, and one through r itself, which every feature "
            "shares. The gain's gradient is the easier one: one gain serves every token, so "
            "it collects the contributions of all the tokens.",
            "1. r: one number per token, [..., 1], with eps inside the root; x_hat = x / r, "
            "[..., d].\n"
            "2. grad_weight: grad_out times x_hat elementwise, [..., d], summed over every "
            "leading axis, whatever their number: [d].\n"
            "3. The gradient at x_hat: grad_out times the gain, [..., d]. Call it g.\n"
            "4. Write the derivative of r with respect to one feature x_j and apply the "
            "chain rule. The part through r is a multiple of x_hat, and its size for each "
            "token is an average over the d features (one number per token, [..., 1]). "
            "Remove it from g, and divide by r: grad_x [..., d].\n"
            "5. Return the pair (grad_x, grad_weight).",
        ),
        optional=True,
    ),
    # --- notebook 07 -------------------------------------------------------------------
    Exercise(
        "check_mlp",
        "07",
        1,
        10,
        Hint(
            "Two linear layers with the nonlinearity between them, each position on its own: "
            "widen to 4d, activate, come back to d. The weights are stored [out, in], so "
            "each layer multiplies by a transposed weight. Use the activation you are "
            "handed: the check passes ReLU and GELU.",
            "1. x [B, n, d] times w_fc transposed, [d, 4d]: hidden [B, n, 4d].\n"
            "2. The activation on the hidden tensor: still [B, n, 4d].\n"
            "3. That times w_proj transposed, [4d, d]: [B, n, d]. Nothing comes after the "
            "second layer.",
        ),
        reports="mlp_forward",
    ),
    # --- notebook 08 -------------------------------------------------------------------
    Exercise(
        "check_temperature_probs",
        "08",
        2,
        15,
        Hint(
            "Treat the batch as B separate requests: each row is divided by its own τ before "
            "its softmax, and a row with τ = 0 is the limit τ → 0, all its mass on its "
            "largest logit. One Python `if` cannot decide for B rows at once, and a row "
            "divided by 0 holds inf or nan, so that row's answer must come from somewhere "
            "else.",
            "1. The temperatures as a tensor ([B], or one number), shaped [B, 1] to line up "
            "with the rows of [B, V]; a mask of the greedy rows, [B, 1].\n"
            "2. The temperatures with the zeros replaced by something harmless, so that the "
            "division is safe; the softmax of logits / τ over the last axis, [B, V].\n"
            "3. One-hot rows at each row's largest logit, [B, V], in the logits' dtype.\n"
            "4. Row by row, one or the other, chosen by the mask.",
        ),
        refusals=(_NEXT_TOKEN_PROBS,),
    ),
    # --- notebook 09 -------------------------------------------------------------------
    Exercise(
        "check_log_softmax",
        "09",
        2,
        20,
        Hint(
            "Shifting all the logits of one slice by one constant changes no "
            "log-probability: choose the slice's maximum, so that the largest exponential is "
            "exactly 1 and none overflows. A slice is the entries along dim: the maximum and "
            "the sum are taken along dim and keep that axis, so that they still line up with "
            "the logits. Never take the log of a probability computed first.",
            "1. m: the maximum along dim, keeping the axis (size 1 at dim).\n"
            "2. logits - m: every entry at most 0.\n"
            "3. Its exponentials, summed along dim keeping the axis, then the log.\n"
            "4. logits - m - that log: the logits' shape.",
        ),
        refusals=(
            Refusal("torch.nn.functional.log_softmax", "F.log_softmax"),
            Refusal("torch.log_softmax", "torch.log_softmax"),
            Refusal("torch.Tensor.log_softmax", "Tensor.log_softmax (logits.log_softmax(...))"),
            Refusal("torch.special.log_softmax", "torch.special.log_softmax"),
            Refusal(
                "torch.nn.functional.cross_entropy",
                "F.cross_entropy",
                "computes the log-softmax for you",
            ),
        ),
    ),
    Exercise(
        "check_lm_loss",
        "09",
        2,
        25,
        Hint(
            "labels is the input window itself, so position t is scored on labels[:, t + 1]: "
            "the last position of the logits and the first label drop out. Each remaining "
            "position needs one number from its row of log-probabilities, the one at its "
            "label; -100 is no token id, so those positions are looked up harmlessly and "
            "then left out of both the sum and the count.",
            "1. Your log_softmax of logits[:, :-1]: [B, n-1, V]; labels[:, 1:]: [B, n-1].\n"
            "2. A mask of the labels that count: [B, n-1].\n"
            "3. The labels with -100 replaced by any valid id, given a last axis of 1, "
            "gathered along the last axis: [B, n-1].\n"
            "4. Minus their sum under the mask, divided by the number of counted labels: a "
            "scalar.",
        ),
        refusals=(
            Refusal(
                "gptlib.model.GPT.loss",
                "GPT.loss",
                "does the whole exercise (the shift, the -100 labels, the mean)",
            ),
            Refusal(
                "torch.nn.functional.cross_entropy",
                "F.cross_entropy",
                "picks the label's log-probability and takes the mean for you",
            ),
            Refusal(
                "torch.nn.functional.nll_loss",
                "F.nll_loss",
                "picks the label's log-probability and takes the mean for you",
            ),
            Refusal(
                "gptlib.model.GPT.forward",
                "GPT.forward (model(idx, labels))",
                "computes the loss with GPT.loss, the whole exercise",
            ),
        ),
    ),
    # --- notebook 10 -------------------------------------------------------------------
    Exercise(
        "check_train_loop",
        "10",
        3,
        35,
        Hint(
            "train() does the same few things every step, in a fixed order, and all its "
            "randomness for batches comes from one generator made once. Ask yourself: what "
            "sets this step's learning rate, and where does the optimizer read it? Why must "
            "old gradients be cleared every step, and where? Why does clipping sit between "
            "computing the gradients and using them? And in which mode must the model be for "
            "dropout to act?",
            "1. Before the loop: what must be made once (the generator), and what the "
            "model's mode must be.\n"
            "2. In each step, what has to be ready before the forward pass: this step's rate "
            "on every group, a batch [batch_size, T] from that generator.\n"
            "3. Then the forward with the labels (the shift is inside), and the three things "
            "that sit between the loss and the update: clearing the old gradients, backward, "
            "clipping the global norm; then the step, and the loss recorded as a float.\n"
            "4. Return the list of the steps losses.",
        ),
        refusals=(Refusal("gptlib.train.train", "gptlib.train.train"),),
    ),
    Exercise(
        "check_adamw_step",
        "10",
        3,
        30,
        Hint(
            "One update of one tensor, elementwise. Two running means start at zero and are "
            "pulled towards the gradient and its square; because they started at zero, the "
            "first ones are too small, and dividing by 1 - β^t undoes that, with t the "
            "number of this update, counted from 1. The decay is AdamW's own: it shrinks the "
            "weight the update starts from, and never enters the gradient or the moments. "
            "Where does ε go: under the root or beside it?",
            "1. Unpack the betas; the number of this update from steps_done.\n"
            "2. The weight shrunk by the decay, scaled by lr.\n"
            "3. Both moments updated from grad (the second from its square), all of shape "
            "param.shape; these are what you return.\n"
            "4. Their corrected copies, the step lr · m̂ / (√v̂ + ε) taken from the shrunk "
            "weight; return (param, exp_avg, exp_avg_sq).",
        ),
        refusals=(
            Refusal("torch.optim.AdamW", "torch.optim.AdamW"),
            Refusal("torch.optim.Adam", "torch.optim.Adam"),
            Refusal("torch.optim.adamw.adamw", "torch.optim.adamw.adamw"),
            Refusal("gptlib.train.make_optimizer", "gptlib.train.make_optimizer"),
        ),
        optional=True,
    ),
    Exercise(
        "check_clip_grad_norm",
        "10",
        3,
        20,
        Hint(
            "One number for all the tensors together: the norm of the gradient as if every "
            "tensor were flattened into one long vector. Then one factor for every tensor, "
            "and only when that norm is above max_norm; under it, nothing changes. What is "
            "returned as the norm is what the gradients had before any scaling. What happens "
            "when every gradient is zero?",
            "1. Each tensor's sum of squares, a scalar; their sum over the list; its square "
            "root: total_norm, a 0-d tensor.\n"
            "2. A factor that is max_norm / total_norm when that is below 1, else 1 (torch "
            "adds 1e-6 to the norm; at the check's tolerance it does not show).\n"
            "3. Every gradient times that one factor, the shapes unchanged; return "
            "(total_norm, the list).",
        ),
        refusals=(
            Refusal("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
            Refusal("torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad_norm"),
            Refusal("torch.nn.utils.get_total_norm", "torch.nn.utils.get_total_norm"),
            Refusal("torch.nn.utils.clip_grads_with_norm_", "torch.nn.utils.clip_grads_with_norm_"),
        ),
        optional=True,
    ),
    # --- notebook 11 -------------------------------------------------------------------
    Exercise(
        "check_validation_loss",
        "11",
        2,
        15,
        Hint(
            "A measurement, not a training step: dropout off, no graph built, the same "
            "windows on every call, and the model handed back in the mode it arrived in, "
            "train or eval. Each of those is one line of code.",
            "1. The model's current mode remembered; then eval mode.\n"
            "2. One generator seeded with seed, made once, before the loop.\n"
            "3. With gradients disabled, n_batches times: a batch idx, labels [batch_size, "
            "T] drawn with the generator; the forward pass with the labels gives a scalar "
            "loss; add it up as a float.\n"
            "4. The model put back in the mode you remembered.\n"
            "5. Return the sum divided by n_batches.",
        ),
        refusals=(Refusal("gptlib.train.estimate_loss", "gptlib.train.estimate_loss"),),
    ),
    # --- notebook 12 -------------------------------------------------------------------
    Exercise(
        "check_filter_logits",
        "12",
        3,
        30,
        Hint(
            "Two filters, top-k first. Top-k compares each logit with the k-th largest of "
            "its row, so every logit tied with it survives. Top-p works on the distribution "
            "top-k left: walk down the ranked probabilities; a token is in the nucleus while "
            "the mass ranked above it is still below p (so the token that crosses p is in), "
            "and a token as likely as the last one kept is kept too. Removed tokens become "
            "-inf, not 0, and the function returns logits, not probabilities.",
            "logits [B, V].\n"
            "Top-k (given, and k < V): the k-th largest value of each row, [B, 1]; the "
            "logits below it set to -inf.\n"
            "Top-p (given, and p < 1): the softmax of the logits as they are now, [B, V]; "
            "each row sorted from the largest down, [B, V]; its running sum minus the value "
            "itself, the mass ranked above each token, [B, V]; the number of tokens whose "
            "mass above is below p, [B, 1]; the probability of the last of those, [B, 1]; "
            "the logits of the tokens less likely than that set to -inf.\n"
            "Return [B, V].",
        ),
        refusals=(
            Refusal("gptlib.generate.filter_logits", "gptlib.generate.filter_logits"),
            _NEXT_TOKEN_PROBS,
            _PICK_NEXT,
            _GENERATE,
        ),
    ),
    Exercise(
        "check_sample_step",
        "12",
        3,
        25,
        Hint(
            "One step of the generation loop, on a model that may arrive in training mode "
            "with dropout on. The model sees at most block_size tokens, the last ones; only "
            "the last position's logits predict the next token. Sample in eval mode and hand "
            "the model back in the mode it arrived in. Temperature 0 is greedy, with no "
            "division; otherwise the order is temperature, filter, softmax, then one draw "
            "with the generator you are handed, so that equal seeds give equal tokens.",
            "1. Remember the model's mode; dropout off.\n"
            "2. idx [B, n] cut to its last block_size columns: [B, n']. The model on that, "
            "without a graph: logits [B, n', V]; the last position: [B, V].\n"
            "3. The remembered mode restored.\n"
            "4. Temperature 0: the index of each row's largest logit, keeping a column: [B, "
            "1].\n"
            "5. Otherwise: the logits divided by the temperature; top-k and top-p applied "
            "(your filter_logits): [B, V] with -inf; the softmax: probabilities [B, V]; one "
            "multinomial draw per row with the generator: [B, 1].",
        ),
        refusals=(
            _GENERATE,
            _PICK_NEXT,
            _NEXT_TOKEN_PROBS,
        ),
        optional=True,
    ),
    # --- notebook 13 -------------------------------------------------------------------
    Exercise(
        "check_decode_step",
        "13",
        3,
        40,
        Hint(
            "The new token sits at position past, the number of positions the cache holds "
            "(cache.length); read it before anything moves the cache. Each layer computes q, "
            "k and v for this one position only; the cache supplies the keys and values of "
            "every earlier position once you hand it the new ones. Ask whether any key of "
            "the single query lies in its future. The cache moves on by one once, after "
            "every layer has written. The textbook preset is post-norm: it normalises after "
            "each residual addition.",
            "1. past: the cache's length. The token embedding of idx_new, [B, 1, d], plus "
            "row past of the position table, [d]: x [B, 1, d].\n"
            "2. For each layer i and its block: the attention's qkv projection of x, [B, 1, "
            "3d], cut into q, k, v [B, 1, d], each split into heads [B, h, 1, d_h]; the "
            "cache updated at layer i with k and v, which returns every key and value so "
            "far, [B, h, past + 1, d_h]; scores of q against those keys divided by the "
            "square root of d_h, [B, h, 1, past + 1]; softmax over the keys; times the "
            "values, [B, h, 1, d_h]; the heads side by side again, [B, 1, d]; the "
            "attention's output projection. Then the post-norm residuals: x plus that, "
            "normalised with the block's first norm; x plus the MLP of x, normalised with "
            "its second norm.\n"
            "3. After the last block: the cache advanced by one; the final norm, then the "
            "head: [B, 1, V].",
        ),
        refusals=(
            _MODEL,
            _BLOCK,
            Refusal(
                "gptlib.attention.CausalSelfAttention.forward",
                "CausalSelfAttention.forward (attn(x, cache))",
                "runs the whole attention; write it with attn.qkv, cache.update and attn.proj",
            ),
            _GENERATE,
        ),
    ),
    # --- notebook 14 -------------------------------------------------------------------
    Exercise(
        "check_gpt_attention",
        "14",
        2,
        20,
        Hint(
            "Notebooks 02 to 04 in one function: the fused projection cut into q, k, v; each "
            "cut into heads; scaled scores with the causal mask; softmax over the keys; the "
            "heads put side by side again; the output projection. Every weight is [out, in], "
            "so it is used transposed. Return the softmax weights as well as the output.",
            "1. x [B, n, d] times w_qkv transposed: [B, n, 3d], cut into q, k, v [B, n, d] "
            "in that order.\n"
            "2. Each viewed as [B, n, h, d_h], then axes 1 and 2 swapped: [B, h, n, d_h].\n"
            "3. q times k with its last two axes swapped, divided by the square root of d_h: "
            "scores [B, h, n, n].\n"
            "4. The scores above the diagonal (key j > query i) set to -inf; softmax over "
            "the last axis: weights [B, h, n, n].\n"
            "5. The weights times v: [B, h, n, d_h]; axes 1 and 2 swapped back and the last "
            "two merged: [B, n, d].\n"
            "6. That times w_proj transposed: [B, n, d]. Return (output, weights).",
        ),
        refusals=(
            _SDPA,
            _ATTENTION_MODULE,
        ),
        reports="attention",
    ),
    Exercise(
        "check_gpt_block",
        "14",
        2,
        10,
        Hint(
            "Pre-norm, as in notebook 06: each sublayer reads a normalised copy of x, with "
            "its own gain (ln1 for attention, ln2 for the MLP), and its output is added to "
            "x. Your attention returns two things; the block needs only the first. The "
            "pieces come in `pieces`: call pieces.rmsnorm, pieces.attention and pieces.mlp.",
            "1. x [B, n, d] normalised with the gain ln1; attention on it with qkv and "
            "attn_proj; its output [B, n, d] added to x.\n"
            "2. The new x normalised with the gain ln2; the MLP on it with fc and mlp_proj; "
            "its output [B, n, d] added to x.\n"
            "3. Return x, [B, n, d].",
        ),
        refusals=(_BLOCK,),
        reports="block",
    ),
    Exercise(
        "check_gpt_forward",
        "14",
        2,
        15,
        Hint(
            "Embeddings, then every block in order, then the final norm, then the output "
            "head. The result is logits, not probabilities. Every piece comes from `pieces`, "
            "and each block is handed the same `pieces`, so that the checker can watch what "
            "each one returns.",
            "1. idx [B, n] with tok_emb and pos_emb: x [B, n, d].\n"
            "2. For each block's dict in the list of blocks, in order: x through "
            "pieces.block, with pieces handed on, [B, n, d].\n"
            "3. x normalised with the gain ln_f: [B, n, d].\n"
            "4. That times lm_head transposed ([d, V]): logits [B, n, V].",
        ),
        refusals=(
            _MODEL,
            _BLOCK,
        ),
        reports="forward",
    ),
    Exercise(
        "check_gpt_loss",
        "14",
        1,
        10,
        Hint(
            "Notebook 09's loss, around a forward you are handed. Position t has seen tokens "
            "0..t and predicts the next one, so its logits are scored against the label one "
            "place to its right; the last position has no label inside the window. Padding "
            "labels (-100) are neither scored nor counted: F.cross_entropy can be told which "
            "label value to skip.",
            "1. forward_fn(w, idx, n_head): logits [B, n, V].\n"
            "2. Drop the last position of the logits and the first of the labels: [B, n-1, "
            "V] and [B, n-1].\n"
            "3. Flatten both over batch and positions: [B*(n-1), V] and [B*(n-1)].\n"
            "4. The cross-entropy with -100 as the ignored label; its default mean is over "
            "the scored positions only.",
        ),
        refusals=(
            Refusal("gptlib.model.GPT.loss", "GPT.loss"),
            _MODEL,
        ),
    ),
    Exercise(
        "check_gpt_train",
        "14",
        2,
        20,
        Hint(
            "The loop of notebook 10, line for line, with two differences: there is no "
            "model, so the tensors to clip are the ones the optimizer holds in its parameter "
            "groups, and the loss is your gpt_loss on forward_fn. One generator, made once "
            "before the loop, draws every batch; the window length T is the number of rows "
            "of the position table. forward_fn is whatever forward you are handed: the check "
            "may hand it yours.",
            "1. Before the loop: a generator seeded with seed; the list of every tensor in "
            "the optimizer's groups; an empty list of losses.\n"
            "2. Each step: the warmup + cosine rate for this step (over `steps` steps) "
            "written into every group's 'lr'.\n"
            "3. sample_batch(tokens, batch_size, T, generator): idx and labels, [B, T] each.\n"
            "4. The loss; zero_grad; backward; clip the global norm of all the gradients to "
            "clip; step; the loss appended as a number.\n"
            "5. Return the list of `steps` losses.",
        ),
        refusals=(
            Refusal("gptlib.train.train", "gptlib.train.train"),
            _MODEL,
        ),
        reports="train_gpt",
    ),
    Exercise(
        "check_gpt_sample",
        "14",
        2,
        20,
        Hint(
            "Each step the model sees at most T tokens (its position table has T rows), so "
            "only the newest T of each row go in. Only the last position predicts the next "
            "token. Temperature divides the logits before the softmax; top-k keeps the k "
            "largest logits of each row and sends the rest to -inf, so the softmax spreads "
            "the mass over the k kept. Draw with the generator you are given, one token for "
            "every row at every step.",
            "1. idx [num, 1] filled with bos.\n"
            "2. Each step, without gradients: forward_fn on the last T columns of idx: [num, "
            "n', V]; keep the last position: [num, V]; divide by the temperature.\n"
            "3. With top_k: the k-th largest value of each row, [num, 1]; every logit below "
            "it set to -inf.\n"
            "4. softmax over V; one draw per row from the generator: [num, 1]; appended to "
            "idx.\n"
            "5. Stop when every row holds a BOS after its first place; then cut each row "
            "(without its starting BOS) at its first BOS: a list of ids per name.",
        ),
        refusals=(
            _GENERATE,
            Refusal("gptlib.generate.sample_documents", "gptlib.generate.sample_documents"),
            _PICK_NEXT,
            _NEXT_TOKEN_PROBS,
            Refusal("gptlib.generate.filter_logits", "gptlib.generate.filter_logits"),
            _MODEL,
        ),
        reports="sample_names",
    ),
    Exercise(
        "check_gpt_cached_attention",
        "14",
        3,
        25,
        Hint(
            "Your attention, with two changes. The keys and values of the new tokens join "
            "the cached ones behind them, and attention runs over all of them. The new token "
            "i stands at position p + i, where p is the number of cached positions: it may "
            "see keys 0..p + i. Which entries of an [n, p + n] grid of scores are in its "
            "future?",
            "1. q, k, v of the new tokens, each cut into heads: [B, h, n, d_h].\n"
            "2. With past: the cached k and v in front of the new ones along the positions "
            "axis: [B, h, p + n, d_h].\n"
            "3. Scores q kᵀ / √d_h: [B, h, n, p + n].\n"
            "4. Hide entry (i, j) when j > p + i: an upper triangle moved p places to the "
            "right; -inf there, then softmax over the keys.\n"
            "5. Weights @ v, the heads side by side again, @ w_proj.T: [B, n, d]. Return it "
            "with the pair (k, v) of all p + n positions.",
        ),
        refusals=(
            _SDPA,
            _ATTENTION_MODULE,
        ),
        reports="cached_attention",
    ),
    Exercise(
        "check_gpt_forward_cached",
        "14",
        2,
        15,
        Hint(
            "Your forward, for the new tokens only. Their positions start where the cache "
            "ends: p is the number of positions in a cached key (0 when the list is empty). "
            "Each block reads its own entry of the list and writes back what "
            "cached_attention returns, so that the next call finds every position so far.",
            "1. p from the cache (the positions axis of block 0's k), or 0; n, the number of "
            "new ids.\n"
            "2. Token rows plus rows p..p+n-1 of the position table: x [B, n, d].\n"
            "3. For block i: pieces.cached_attention on pieces.rmsnorm(x, ln1) with entry i "
            "(None when the list is shorter); the returned pair stored as entry i (appended "
            "the first time); its output added to x; then x plus "
            "pieces.mlp(pieces.rmsnorm(x, ln2)).\n"
            "4. The final norm and the head: logits [B, n, V].",
        ),
        refusals=(
            _MODEL,
            _BLOCK,
            _ATTENTION_MODULE,
        ),
        reports="forward_cached",
    ),
    # --- notebook 15 -------------------------------------------------------------------
    Exercise(
        "check_merge",
        "15",
        2,
        15,
        Hint(
            "Walk the list from the left with an index you move yourself. At a match, write "
            "new_id and move past both ids of the pair; anywhere else, copy the id and move "
            "on by one. Because a match uses up both of its ids, overlapping pairs in a run "
            "such as 1 1 1 are settled from the left.",
            "ids: a list of n ints; the result: a new list.\n"
            "1. Start at position 0.\n"
            "2. While the position is inside the list: if a next id exists and the two ids "
            "there equal the pair, write new_id and move forward by two; otherwise write the "
            "id and move forward by one.\n"
            "3. Return the new list: n minus the number of merges ints.",
        ),
        refusals=(Refusal("gptlib.bpe.merge_pair", "gptlib.bpe.merge_pair"),),
    ),
    Exercise(
        "check_learn_merges",
        "15",
        3,
        30,
        Hint(
            "One round of the loop is: count, choose, merge, record. The counts belong to "
            "the list as it is now, so they are taken again in every round, after the "
            "previous merge changed the list. Choosing is a maximum with a tie rule: compare "
            "pairs by their count first, and where counts are equal let the smaller ids win. "
            "The loop can run out of pairs before it runs out of merges.",
            "ids: a list of byte ids; the result: a list of ((a, b), new_id), at most "
            "num_merges long.\n"
            "1. For k = 0, 1, ..., num_merges - 1: count how often each adjacent pair "
            "(ids[i], ids[i + 1]) occurs, for every i (a dict or a Counter).\n"
            "2. No pair at all (one id left): stop.\n"
            "3. The chosen pair: the largest count; among equal counts, the smallest a, then "
            "the smallest b.\n"
            "4. ids = merge(ids, pair, 256 + k); append (pair, 256 + k); after the loop, "
            "return the list.",
        ),
        refusals=(
            Refusal(
                "gptlib.bpe.train_bpe",
                "gptlib.bpe.train_bpe",
                "learns the merges, the whole exercise",
            ),
        ),
        optional=True,
    ),
    # --- notebook 16 -------------------------------------------------------------------
    Exercise(
        "check_to_gptlib",
        "16",
        2,
        20,
        Hint(
            "Two jobs, done name by name: give every tensor gptlib's name, and give it "
            "gptlib's layout. Only one kind of tensor changes layout: the weight of a Conv1D "
            "layer (c_attn, c_proj and c_fc, four per block), which GPT-2 keeps as [in, out] "
            "and nn.Linear as [out, in]. Decide that from the layer's name, never from its "
            "shape: the attention's c_proj is square. Tables, norms and biases keep their "
            "numbers as they are, and c_attn's q | k | v order is already the order gptlib's "
            "qkv uses.",
            "hf_state: GPT-2's name -> tensor; the result: gptlib's name -> tensor.\n"
            "1. A name without its 'transformer.' prefix: wte, wpe, ln_f, or "
            "h.<i>.<part>.<param>; lm_head.weight has no prefix.\n"
            "2. wte becomes tok_emb and wpe becomes pos_emb; ln_f and lm_head keep their "
            "names (the tied head is the token table's tensor, and gptlib's state dict lists "
            "it too).\n"
            "3. In block i, the part is renamed: ln_1 to ln1, attn.c_attn to attn.qkv, "
            "attn.c_proj to attn.proj, ln_2 to ln2, mlp.c_fc to mlp.fc, mlp.c_proj to "
            "mlp.proj, under blocks.<i>.\n"
            "4. The weight of those four Conv1D parts is transposed: [d, 3d] to [3d, d], [d, "
            "4d] to [4d, d], [4d, d] to [d, 4d], and the square [d, d] of attn.c_proj to [d, "
            "d], the same shape with its rows and columns swapped; their biases and both "
            "norms' parameters stay 1-D and unchanged.",
        ),
        refusals=(
            Refusal("gptlib.gpt2.gptlib_state_dict", "gptlib.gpt2.gptlib_state_dict"),
            Refusal(
                "gptlib.gpt2.gptlib_name",
                "gptlib.gpt2.gptlib_name",
                "renames every tensor and says which to transpose, the whole exercise",
            ),
        ),
    ),
)


HINTS: dict[str, Hint] = {e.check: e.hint for e in EXERCISES}  # check name -> its hint
REFUSALS: dict[str, tuple[Refusal, ...]] = {e.name: e.refusals for e in EXERCISES if e.refusals}


def refusals_for(name: str) -> tuple[Refusal, ...]:
    """The library calls exercise `name` (the name its check reports) refuses; none for a name
    not in the table."""
    return REFUSALS.get(name, ())
