"""gptlib: the small GPT library every notebook of the course imports.

One name, one thing: `gptlib.train` and `gptlib.generate` are the modules (`help(gptlib.generate)`
shows sampling), so their functions of the same name come from the module:
`from gptlib.train import train`, `from gptlib.generate import generate`.
"""

# First: a stop signal that arrives while torch is imported is kept (see gptlib/_early_signals.py).
from gptlib import _early_signals  # noqa: F401
from gptlib.attention import CausalSelfAttention
from gptlib.bigram import bigram_loss
from gptlib.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from gptlib.config import GPTConfig, microgpt, preset, textbook
from gptlib.data import Corpus, load_corpus, load_names, load_surnames, sample_batch
from gptlib.device import choose_device
from gptlib.generate import sample_documents
from gptlib.kvcache import KVCache
from gptlib.model import GPT, Block, parameter_formula
from gptlib.positions import sinusoidal_positions
from gptlib.tokenizer import CharTokenizer
from gptlib.train import History, estimate_loss, learning_rate, make_optimizer

__all__ = [
    "GPT",
    "Block",
    "CausalSelfAttention",
    "CharTokenizer",
    "CheckpointError",
    "Corpus",
    "GPTConfig",
    "History",
    "KVCache",
    "bigram_loss",
    "choose_device",
    "estimate_loss",
    "learning_rate",
    "load_checkpoint",
    "load_corpus",
    "load_names",
    "load_surnames",
    "make_optimizer",
    "microgpt",
    "parameter_formula",
    "preset",
    "sample_batch",
    "sample_documents",
    "save_checkpoint",
    "sinusoidal_positions",
    "textbook",
]
