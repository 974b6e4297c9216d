import pytest

from gptlib.config import GPTConfig, microgpt, preset, textbook
from gptlib.model import GPT


def test_head_count_must_divide_width():
    with pytest.raises(ValueError, match=r"n_embd=17 .* n_head=4"):
        GPTConfig(n_embd=17, n_head=4)


@pytest.mark.parametrize(
    "field, value",
    [
        ("norm", "batchnorm"),
        ("norm_placement", "middle"),
        ("activation", "tanh"),
        ("attention", "flash"),
        ("dropout", 1.0),
        ("n_layer", 0),
        ("block_size", -3),
    ],
)
def test_bad_options_are_rejected_by_name(field, value):
    with pytest.raises(ValueError, match=field):
        GPTConfig(**{field: value})


def test_microgpt_is_textbook_chapter_two():
    cfg = microgpt()
    assert (cfg.vocab_size, cfg.block_size, cfg.n_embd, cfg.n_head, cfg.n_layer) == (
        27,
        8,
        16,
        4,
        1,
    )
    assert (cfg.norm, cfg.norm_placement, cfg.activation) == ("rmsnorm", "pre", "relu")
    assert not cfg.bias and not cfg.tie_embeddings and cfg.head_dim == 4
    n = GPT(cfg).num_parameters()
    assert 4000 <= n <= 4200, n  # "about 4,000 parameters"


def test_textbook_preset_is_textbook_chapter_three():
    cfg = textbook(vocab_size=65)
    assert (cfg.block_size, cfg.n_embd, cfg.n_head, cfg.n_layer) == (64, 128, 4, 4)
    assert (cfg.norm, cfg.norm_placement, cfg.activation) == ("layernorm", "post", "gelu")
    assert cfg.tie_embeddings and not cfg.bias and cfg.dropout == 0.0


def test_replace_validates_and_roundtrips():
    cfg = textbook()
    assert cfg.replace(n_head=8).head_dim == 16
    with pytest.raises(ValueError, match="n_head=3"):
        cfg.replace(n_head=3)
    with pytest.raises(ValueError, match="unknown"):
        cfg.replace(heads=3)
    assert GPTConfig.from_dict(cfg.to_dict()) == cfg
    assert preset("microgpt", 30).vocab_size == 30
    with pytest.raises(ValueError, match="unknown preset"):
        preset("gpt5")


def test_one_registry_of_activations_and_every_norm_name_builds_its_own_norm():
    """The names a config accepts are the functions the MLP applies (one dict, not two lists that
    could drift), and every name config.NORMS accepts builds a norm of its own (none falls
    through to another's)."""
    import torch

    from gptlib import config, mlp
    from gptlib.norms import make_norm

    assert mlp.ACTIVATIONS is config.ACTIVATIONS
    x = torch.linspace(-3, 3, 13)
    for name, fn in config.ACTIVATIONS.items():
        block_mlp = mlp.MLP(textbook(activation=name))
        assert block_mlp.act is fn
        assert torch.equal(block_mlp.act(x), fn(x))
    with pytest.raises(ValueError, match="gelu, gelu_tanh, relu"):
        textbook(activation="swish")  # the error lists the registry's keys
    kinds = {type(make_norm(textbook(norm=name))).__name__ for name in config.NORMS}
    assert kinds == {"LayerNorm", "RMSNorm"} and len(kinds) == len(config.NORMS)
