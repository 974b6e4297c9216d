"""The library calls each exercise refuses while the reader's function runs.

A reader can pass a check by calling the library function that does the exercise's job
(`F.scaled_dot_product_attention` for causal attention, `gptlib.train.train` for the training
loop). While a check runs the reader's function, the calls listed here for that exercise raise,
and the check answers, in one line, which call it was (`checking.refusing`). The reference
solution and the known slips a check compares with are not guarded.

The table is keyed by the exercise's name, the name its check reports (`compare(name, ...)`).
Each entry names where the library keeps the function (a module's function or a class's method),
how the message shows it, and what it does. A call missing from the installed torch is skipped.

Deliberately left out: `gptlib.generate.filter_logits` for `sample_step`,
which notebook 12 allows ("your filter_logits, or the library's"); and `merge_heads`, which has no
library function of its own (`CausalSelfAttention.forward` merges the heads inline).
"""

from __future__ import annotations

from typing import NamedTuple


class Refusal(NamedTuple):
    path: str  # where the library keeps it: "torch.nn.functional.scaled_dot_product_attention"
    shown: str  # how the message names it: "F.scaled_dot_product_attention"
    does: str = "does the whole exercise"  # the message ends "..., which <does>"


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

REFUSALS: dict[str, tuple[Refusal, ...]] = {
    # 00 data and tokens
    "encode_stream": (Refusal("gptlib.data.encode_documents", "gptlib.data.encode_documents"),),
    # 03 scaled attention
    "causal_attention": (_SDPA, _ATTENTION_MODULE),
    # 04 multi-head
    "split_heads": (
        Refusal(
            "gptlib.attention.CausalSelfAttention.split_heads", "CausalSelfAttention.split_heads"
        ),
    ),
    # 06 normalisation
    "rmsnorm": (
        Refusal("torch.nn.functional.rms_norm", "F.rms_norm"),
        Refusal("torch.rms_norm", "torch.rms_norm"),
        Refusal("torch.nn.RMSNorm.forward", "nn.RMSNorm"),
        Refusal("gptlib.norms.RMSNorm.forward", "gptlib.norms.RMSNorm"),
    ),
    # 07 logits
    "temperature_probs": (_NEXT_TOKEN_PROBS,),
    # 08 loss
    "log_softmax": (
        *_LOG_SOFTMAX,
        Refusal(
            "torch.nn.functional.cross_entropy",
            "F.cross_entropy",
            "computes the log-softmax for you",
        ),
    ),
    "lm_loss": (
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
    # 09 the training loop
    "train_loop": (Refusal("gptlib.train.train", "gptlib.train.train"),),
    "adamw_step": (
        Refusal("torch.optim.AdamW", "torch.optim.AdamW"),
        Refusal("torch.optim.Adam", "torch.optim.Adam"),
        Refusal("torch.optim.adamw.adamw", "torch.optim.adamw.adamw"),
        Refusal("gptlib.train.make_optimizer", "gptlib.train.make_optimizer"),
    ),
    "clip_grad_norm": (
        Refusal("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        Refusal("torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad_norm"),
        Refusal("torch.nn.utils.get_total_norm", "torch.nn.utils.get_total_norm"),
        Refusal("torch.nn.utils.clip_grads_with_norm_", "torch.nn.utils.clip_grads_with_norm_"),
    ),
    # 10 when training goes wrong
    "validation_loss": (Refusal("gptlib.train.estimate_loss", "gptlib.train.estimate_loss"),),
    # 11 generation
    "filter_logits": (
        Refusal("gptlib.generate.filter_logits", "gptlib.generate.filter_logits"),
        _NEXT_TOKEN_PROBS,
        _PICK_NEXT,
        _GENERATE,
    ),
    "sample_step": (_GENERATE, _PICK_NEXT, _NEXT_TOKEN_PROBS),
    # 12 the KV cache: the step goes through the model's parts, never the model or a block
    "decode_step": (
        _MODEL,
        _BLOCK,
        Refusal(
            "gptlib.attention.CausalSelfAttention.forward",
            "CausalSelfAttention.forward (attn(x, cache))",
            "runs the whole attention; write it with attn.qkv, cache.update and attn.proj",
        ),
        _GENERATE,
    ),
    # 13 the capstone: plain tensors, no nn.Module and no gptlib inside
    "attention": (_SDPA, _ATTENTION_MODULE),
    "block": (_BLOCK,),
    "forward": (_MODEL, _BLOCK),
    "gpt_loss": (
        Refusal("gptlib.model.GPT.loss", "GPT.loss", "does the whole exercise"),
        _MODEL,
    ),
    "train_gpt": (Refusal("gptlib.train.train", "gptlib.train.train"), _MODEL),
    "sample_names": (
        _GENERATE,
        Refusal("gptlib.generate.sample_documents", "gptlib.generate.sample_documents"),
        _PICK_NEXT,
        _NEXT_TOKEN_PROBS,
        Refusal("gptlib.generate.filter_logits", "gptlib.generate.filter_logits"),
        _MODEL,
    ),
    "cached_attention": (_SDPA, _ATTENTION_MODULE),
    "forward_cached": (_MODEL, _BLOCK, _ATTENTION_MODULE),
    # 14 byte-pair encoding
    "merge": (Refusal("gptlib.bpe.merge_pair", "gptlib.bpe.merge_pair"),),
    "learn_merges": (
        Refusal(
            "gptlib.bpe.train_bpe", "gptlib.bpe.train_bpe", "learns the merges, the whole exercise"
        ),
    ),
    # 15 GPT-2: the converter is the exercise; gptlib_name renames and says what to transpose
    "to_gptlib": (
        Refusal("gptlib.gpt2.gptlib_state_dict", "gptlib.gpt2.gptlib_state_dict"),
        Refusal(
            "gptlib.gpt2.gptlib_name",
            "gptlib.gpt2.gptlib_name",
            "renames every tensor and says which to transpose, the whole exercise",
        ),
    ),
}


def refusals_for(name: str) -> tuple[Refusal, ...]:
    """The library calls exercise `name` refuses (none for an exercise not in the table)."""
    return REFUSALS.get(name, ())
