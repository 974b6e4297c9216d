"""Exercises with checks: each `check_*` runs the reader's function on random inputs, compares it
with the reference solution, and on a mismatch names the likely mistake.

One submodule per notebook, named after it (`nb03_scaled_attention` holds notebook 03's
checks); each check is imported here by name, so a
notebook writes `from gptlib.exercises import check_pre_norm_block`, and
`show_solution(check_pre_norm_block)` prints the reference solution. A name that is also a
submodule's stays the submodule: `progress` is `gptlib.exercises.progress`, whose function is
`from gptlib.exercises.progress import progress`.
"""

from gptlib.exercises.checking import CheckResult, compare, not_written, show_solution, solved_by
from gptlib.exercises.nb00_data_and_tokens import check_encode_stream, solution_encode_stream
from gptlib.exercises.nb01_embeddings import check_embed, solution_embed
from gptlib.exercises.nb02_qkv import check_qkv_split, solution_qkv_split
from gptlib.exercises.nb03_scaled_attention import check_causal_attention, solution_causal_attention
from gptlib.exercises.nb04_multi_head import (
    check_merge_heads,
    check_split_heads,
    solution_merge_heads,
    solution_split_heads,
)
from gptlib.exercises.nb05_residual import check_stack_gradients, solution_stack_gradients
from gptlib.exercises.nb06_normalisation import (
    check_post_norm_block,
    check_pre_norm_block,
    check_rmsnorm,
    check_rmsnorm_backward,
    solution_post_norm_block,
    solution_pre_norm_block,
    solution_rmsnorm,
    solution_rmsnorm_backward,
)
from gptlib.exercises.nb07_mlp import check_mlp_forward, solution_mlp_forward
from gptlib.exercises.nb08_logits import check_temperature_probs, solution_temperature_probs
from gptlib.exercises.nb09_loss import (
    check_lm_loss,
    check_log_softmax,
    solution_lm_loss,
    solution_log_softmax,
)
from gptlib.exercises.nb10_training_loop import (
    check_adamw_step,
    check_clip_grad_norm,
    check_train_loop,
    check_validation_loss,
    solution_adamw_step,
    solution_clip_grad_norm,
    solution_train_loop,
    solution_validation_loss,
)
from gptlib.exercises.nb12_generation import (
    check_filter_logits,
    check_sample_step,
    solution_filter_logits,
    solution_sample_step,
)
from gptlib.exercises.nb13_kv_cache import check_decode_step, solution_decode_step
from gptlib.exercises.nb14_your_gpt import (
    WeightsModel,
    check_cached_attention,
    check_forward,
    check_forward_cached,
    planted_slip,
    sample_step_with,
)
from gptlib.exercises.nb15_bpe import (
    check_learn_merges,
    check_merge,
    solution_learn_merges,
    solution_merge,
)
from gptlib.exercises.nb16_gpt2 import check_to_gptlib, solution_to_gptlib

__all__ = [
    "CheckResult",
    "compare",
    "not_written",
    "show_solution",
    "solved_by",
    "check_encode_stream",
    "solution_encode_stream",
    "check_embed",
    "solution_embed",
    "check_qkv_split",
    "solution_qkv_split",
    "check_causal_attention",
    "solution_causal_attention",
    "check_merge_heads",
    "check_split_heads",
    "solution_merge_heads",
    "solution_split_heads",
    "check_stack_gradients",
    "solution_stack_gradients",
    "check_rmsnorm",
    "check_pre_norm_block",
    "check_post_norm_block",
    "check_rmsnorm_backward",
    "solution_rmsnorm",
    "solution_pre_norm_block",
    "solution_post_norm_block",
    "solution_rmsnorm_backward",
    "check_mlp_forward",
    "solution_mlp_forward",
    "check_temperature_probs",
    "solution_temperature_probs",
    "check_lm_loss",
    "check_log_softmax",
    "solution_lm_loss",
    "solution_log_softmax",
    "check_adamw_step",
    "check_clip_grad_norm",
    "check_train_loop",
    "check_validation_loss",
    "solution_adamw_step",
    "solution_clip_grad_norm",
    "solution_train_loop",
    "solution_validation_loss",
    "check_filter_logits",
    "check_sample_step",
    "solution_filter_logits",
    "solution_sample_step",
    "check_decode_step",
    "solution_decode_step",
    "WeightsModel",
    "check_cached_attention",
    "check_forward",
    "check_forward_cached",
    "planted_slip",
    "sample_step_with",
    "check_learn_merges",
    "check_merge",
    "solution_learn_merges",
    "solution_merge",
    "check_to_gptlib",
    "solution_to_gptlib",
]
