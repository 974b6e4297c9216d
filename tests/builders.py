"""Small builders the test files share."""

import torch

from gptlib.model import GPT


def sharp_model(cfg, seed=0):
    """A random model with weights ten times the usual init, so that logits differ clearly
    between tokens and positions (near-uniform logits would make token checks weak)."""
    torch.manual_seed(seed)
    model = GPT(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(10)
    return model


def random_ids(cfg, B, n=None, seed=0):
    """[B, n] token ids drawn with a fixed seed (n defaults to block_size)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (B, n or cfg.block_size), generator=g)
