"""The course's exercises, one record each: its check, notebook, difficulty, minutes, the
notebooks that use its kept piece, and the library calls that would do its whole job. The checks
read their refusals and uses here; `progress`, the README count and one parametrised test read
the rest. The hints are on the page, under each
exercise, in both languages. Adding an exercise is one record here, its check with its slips in
its notebook's module, and its cells.

`refusals`: a library function (or a class's method) that does the exercise's whole job, how the
message names it and what it does; a check that finds a call to one in the reader's source says
"write this one yourself". Left out on purpose: `gptlib.generate.filter_logits` for
`sample_step` (notebook 12 allows it), and `merge_heads`, which has no library function of its own.
"""

from __future__ import annotations

from typing import NamedTuple

from gptlib.language import N_

__all__: list[str] = []  # used as a module: `from gptlib.exercises import table`


class Refusal(NamedTuple):
    path: str  # where the library keeps it: "torch.nn.functional.scaled_dot_product_attention"
    shown: str = ""  # how the message names it ("F.scaled_dot_product_attention"); "" is path
    does: str = N_("does the whole exercise")  # the message ends "..., which <does>"

    @property
    def named(self) -> str:
        return self.shown or self.path


class Exercise(NamedTuple):
    check: str  # the check's name in gptlib.exercises
    notebook: str  # the notebook's number: "03" is notebooks/03_*.ipynb
    stars: int  # 1 (a few lines) to 3 (a loop of many parts, or a subtle rule such as ties)
    minutes: int  # a first-time reader's estimate, reading the exercise's text included
    refusals: tuple[Refusal, ...] = ()
    optional: bool = False  # marked optional (and harder) in its notebook
    # the notebooks whose cells use the kept piece after its check (a test reads them)
    used: str = ""

    @property
    def name(self) -> str:
        return self.check.removeprefix("check_")


R = Refusal
# fmt: off
_SDPA = R("torch.nn.functional.scaled_dot_product_attention", "F.scaled_dot_product_attention")
_ATTENTION_MODULE = R(
    "gptlib.attention.CausalSelfAttention.forward",
    "CausalSelfAttention.forward (attn(x))",
)
_BLOCK = R(
    "gptlib.model.Block.forward",
    "Block.forward (block(x))",
    N_("runs the whole block; go through its parts yourself"),
)
_MODEL = R(
    "gptlib.model.GPT.forward",
    "GPT.forward (model(idx))",
    N_("runs the whole model; go through its parts yourself"),
)
_NEXT_TOKEN_PROBS = R("gptlib.generate.next_token_probs")
_PICK_NEXT = R("gptlib.generate.pick_next")
_GENERATE = R("gptlib.generate.generate")

EXERCISES: tuple[Exercise, ...] = (
    Exercise("check_encode_stream", "00", 1, 10, used="00",
             refusals=(R("gptlib.data.encode_documents"),)),
    Exercise("check_embed", "01", 1, 10, used="01 02 03 14 15"),
    Exercise("check_qkv_split", "02", 1, 10, used="02 03 14 15"),
    Exercise("check_causal_attention", "03", 2, 20, used="03 04 14 15",
             refusals=(_SDPA, _ATTENTION_MODULE)),
    Exercise("check_split_heads", "04", 1, 10, used="04 14 15", refusals=(
        R("gptlib.attention.CausalSelfAttention.split_heads", "CausalSelfAttention.split_heads"),
    )),
    Exercise("check_merge_heads", "04", 1, 5, used="04 14 15"),
    Exercise("check_stack_gradients", "05", 2, 20, used="05"),
    Exercise("check_rmsnorm", "06", 1, 10, used="06 14 15", refusals=(
        R("torch.nn.functional.rms_norm", "F.rms_norm"),
        R("torch.rms_norm"),
        R("torch.nn.RMSNorm.forward", "nn.RMSNorm"),
        R("gptlib.norms.RMSNorm.forward", "gptlib.norms.RMSNorm"),
    )),
    Exercise("check_pre_norm_block", "06", 1, 10, used="06 14 15"),
    Exercise("check_post_norm_block", "06", 1, 5, used="06"),
    Exercise("check_rmsnorm_backward", "06", 3, 40, used="06", optional=True),
    Exercise("check_mlp_forward", "07", 1, 10, used="07 14 15"),
    Exercise("check_temperature_probs", "08", 2, 15, used="08", refusals=(_NEXT_TOKEN_PROBS,)),
    Exercise("check_log_softmax", "09", 2, 20, used="09", refusals=(
        R("torch.nn.functional.log_softmax", "F.log_softmax"),
        R("torch.log_softmax"),
        R("torch.Tensor.log_softmax", "Tensor.log_softmax (logits.log_softmax(...))"),
        R("torch.special.log_softmax"),
        R("torch.nn.functional.cross_entropy",
          "F.cross_entropy",
          N_("computes the log-softmax for you")),
    )),
    Exercise("check_lm_loss", "09", 2, 25, used="09 10 14 15", refusals=(
        R("gptlib.model.GPT.loss",
          "GPT.loss",
          N_("does the whole exercise (the shift, the -100 labels, the mean)")),
        R("torch.nn.functional.cross_entropy",
          "F.cross_entropy",
          N_("picks the label's log-probability and takes the mean for you")),
        R("torch.nn.functional.nll_loss",
          "F.nll_loss",
          N_("picks the label's log-probability and takes the mean for you")),
        R("gptlib.model.GPT.forward",
          "GPT.forward (model(idx, labels))",
          N_("computes the loss with GPT.loss, the whole exercise")),
    )),
    Exercise("check_train_loop", "10", 3, 35, used="10 14 15", refusals=(R("gptlib.train.train"),)),
    Exercise("check_adamw_step", "10", 3, 30, used="10", optional=True, refusals=(
        R("torch.optim.AdamW"),
        R("torch.optim.Adam"),
        R("torch.optim.adamw.adamw"),
        R("gptlib.train.make_optimizer"),
    )),
    Exercise("check_clip_grad_norm", "10", 3, 20, used="10", optional=True, refusals=(
        R("torch.nn.utils.clip_grad_norm_"),
        R("torch.nn.utils.clip_grad_norm"),
        R("torch.nn.utils.get_total_norm"),
        R("torch.nn.utils.clip_grads_with_norm_"),
    )),
    Exercise("check_validation_loss", "11", 2, 15, used="11",
             refusals=(R("gptlib.train.estimate_loss"),)),
    Exercise("check_filter_logits", "12", 3, 30, used="12 14", refusals=(
        R("gptlib.generate.filter_logits"),
        _NEXT_TOKEN_PROBS,
        _PICK_NEXT,
        _GENERATE,
    )),
    Exercise("check_sample_step", "12", 3, 25, used="12 14", optional=True, refusals=(
        _GENERATE,
        _PICK_NEXT,
        _NEXT_TOKEN_PROBS,
    )),
    Exercise("check_decode_step", "13", 3, 40, used="13", refusals=(
        _MODEL,
        _BLOCK,
        R("gptlib.attention.CausalSelfAttention.forward",
          "CausalSelfAttention.forward (attn(x, cache))",
          N_("runs the whole attention; write it with attn.qkv, cache.write and attn.proj")),
        _GENERATE,
    )),
    Exercise("check_forward", "14", 2, 20, used="14 15",
             refusals=(_MODEL, _BLOCK)),
    Exercise("check_cached_attention", "14", 3, 25, used="14",
             refusals=(
        _SDPA,
        _ATTENTION_MODULE,
    )),
    Exercise("check_forward_cached", "14", 2, 15, used="14",
             refusals=(
        _MODEL,
        _BLOCK,
        _ATTENTION_MODULE,
    )),
    Exercise("check_merge", "15", 2, 15, used="15", refusals=(R("gptlib.bpe.merge_pair"),)),
    Exercise("check_learn_merges", "15", 3, 30, used="15", optional=True, refusals=(
        R("gptlib.bpe.train_bpe", "", N_("learns the merges, the whole exercise")),
    )),
    Exercise("check_to_gptlib", "16", 2, 20, used="16", refusals=(
        R("gptlib.huggingface.gptlib_state_dict"),
        R("gptlib.huggingface.gptlib_name",
          "",
          N_("renames every tensor and says which to transpose, the whole exercise")),
    )),
)
# fmt: on


# The library calls each exercise refuses, by the name its check reports.
REFUSALS: dict[str, tuple[Refusal, ...]] = {e.name: e.refusals for e in EXERCISES if e.refusals}
