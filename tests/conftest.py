import os
import tempfile

import pytest
import torch

# The reader's package (gptlib.exercises.yours): the tests never read or write a reader's own
# pieces; each test process gets an empty folder of its own.
os.environ["GPTLIB_YOURS"] = tempfile.mkdtemp(prefix="yourgpt-tests-")
# The command line speaks the locale's language; the tests read its English (tests/test_language.py
# sets the locale itself), whatever the machine running them is set to.
os.environ["LANGUAGE"] = "en"

from gptlib.config import microgpt, textbook

torch.set_num_threads(1)


@pytest.fixture
def small_textbook():
    """The `textbook` preset's structure (post-LN LayerNorm, GELU, tied) at a test-friendly size."""
    return textbook(vocab_size=11, block_size=12, n_layer=2, n_head=4, n_embd=32)


@pytest.fixture
def small_microgpt():
    return microgpt(vocab_size=11)


@pytest.fixture(params=["microgpt", "textbook"])
def any_preset(request, small_textbook, small_microgpt):
    return small_microgpt if request.param == "microgpt" else small_textbook
