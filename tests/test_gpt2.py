"""gptlib's GPT-2 against Hugging Face's GPT2LMHeadModel, on random weights (nothing downloads):
logits, greedy generation with and without the KV cache, export back to the HF format, the
folder errors, and `python -m gptlib sample FOLDER`."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from gptlib.bpe import gpt2_tokenizer  # noqa: E402
from gptlib.commandline.cli import main  # noqa: E402
from gptlib.config import gpt2, preset, textbook  # noqa: E402
from gptlib.generate import generate  # noqa: E402
from gptlib.huggingface import GPT2FormatError, load_hf_gpt2, save_hf_gpt2  # noqa: E402
from gptlib.model import GPT, parameter_formula  # noqa: E402

hf_logging.disable_progress_bar()
hf_logging.set_verbosity_error()

SMALL = dict(vocab_size=97, n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=0)
SMALL.update(eos_token_id=0)
FULL = {}  # GPT2Config's defaults are GPT-2 small, 124M


def make_hf(settings: dict, seed: int = 0) -> GPT2LMHeadModel:
    """A random GPT2LMHeadModel with GPT-2's own initialisation (std 0.02), except that the
    position table is made 20x larger: otherwise the residual stream of a random model is
    mostly the current token's own embedding, greedy decoding repeats that token forever, and
    50 identical greedy tokens would prove little."""
    torch.manual_seed(seed)
    hf = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    with torch.no_grad():
        hf.transformer.wpe.weight.mul_(20)
    return hf


def prompt_ids(vocab_size: int, n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab_size, (1, n), generator=torch.Generator().manual_seed(seed))


def saved_and_loaded(hf: GPT2LMHeadModel, folder):
    hf.save_pretrained(folder)
    return load_hf_gpt2(folder)


def assert_logits_equal(hf, ours):
    assert not ours.training
    idx = torch.randint(
        0, hf.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        expected = hf(idx).logits
        got, _ = ours(idx)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def assert_parameter_count_equal(hf, ours):
    assert ours.num_parameters() == hf.num_parameters() == parameter_formula(ours.cfg)
    assert ours.lm_head.weight is ours.tok_emb.weight  # tied, as in GPT-2


def assert_greedy_50_tokens_equal(hf, ours):
    prompt = prompt_ids(hf.config.vocab_size, 4)
    with torch.no_grad():
        expected = hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=50,
            min_new_tokens=50,
            do_sample=False,
            pad_token_id=0,
        )
    cached = generate(ours, prompt, 50, temperature=0, use_cache=True)
    recomputed = generate(ours, prompt, 50, temperature=0, use_cache=False)
    assert expected.shape == (1, 54)
    assert torch.equal(cached, expected)
    assert torch.equal(recomputed, expected)
    assert len(set(expected[0, 4:].tolist())) > 5  # a varied sequence, not one token repeated


def assert_export_loads_in_hf(hf, ours, folder):
    save_hf_gpt2(ours, folder)
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    back = GPT2LMHeadModel.from_pretrained(folder).eval()
    idx = prompt_ids(hf.config.vocab_size, 16, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(back(idx).logits, ours(idx)[0], atol=1e-5, rtol=0)
    for name, tensor in hf.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], tensor, atol=0, rtol=0)


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    """(HF model, gptlib's model loaded from the folder HF saved)."""
    hf = make_hf(SMALL)
    return hf, saved_and_loaded(hf, tmp_path_factory.mktemp("hf_small"))


def test_small_logits_equal_hf(small_pair):
    assert_logits_equal(*small_pair)


def test_small_parameter_count_equals_hf(small_pair):
    assert_parameter_count_equal(*small_pair)


def test_small_greedy_tokens_equal_hf_generate_with_and_without_cache(small_pair):
    assert_greedy_50_tokens_equal(*small_pair)


def test_small_export_then_hf_loads_the_same_model(small_pair, tmp_path):
    assert_export_loads_in_hf(*small_pair, tmp_path)


def test_full_124m_equals_hf(tmp_path):
    """All of the above on GPT-2 small's own configuration, in one test: the 124M model and its
    ~500 MB folder are made once (one test, so parallel workers never build it twice)."""
    try:
        hf = make_hf(FULL)
        ours = saved_and_loaded(hf, tmp_path / "hf")
        assert ours.num_parameters() == 124_439_808
        assert_parameter_count_equal(hf, ours)
        assert_logits_equal(hf, ours)
        assert_greedy_50_tokens_equal(hf, ours)
        assert_export_loads_in_hf(hf, ours, tmp_path / "exported")
    finally:  # pytest keeps recent tmp_path folders; these two hold about 1 GB
        shutil.rmtree(tmp_path / "hf", ignore_errors=True)
        shutil.rmtree(tmp_path / "exported", ignore_errors=True)


def test_gpt2_preset_is_124m():
    cfg = preset("gpt2")
    assert (cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd) == (
        50257,
        1024,
        12,
        12,
        768,
    )
    assert (cfg.norm, cfg.norm_placement, cfg.activation) == ("layernorm", "pre", "gelu_tanh")
    assert cfg.bias and cfg.norm_bias and cfg.tie_embeddings
    assert parameter_formula(cfg) == 124_439_808
    assert preset("gpt2", 1000).vocab_size == 1000
    assert preset("textbook").vocab_size == 27  # the other presets keep their default


def test_gelu_tanh_matches_gpt2_formula():
    from gptlib.mlp import ACTIVATIONS

    x = torch.linspace(-6, 6, 1001, dtype=torch.float64)
    formula = 0.5 * x * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (x + 0.044715 * x**3)))
    torch.testing.assert_close(ACTIVATIONS["gelu_tanh"](x), formula)
    assert (ACTIVATIONS["gelu"](x) - formula).abs().max() > 1e-4  # a different function


@pytest.fixture(scope="module")
def small_hf_folder(tmp_path_factory):
    hf = make_hf(SMALL, seed=3)
    folder = tmp_path_factory.mktemp("small_hf")
    hf.save_pretrained(folder)
    return hf, folder


def test_pytorch_model_bin_and_unprefixed_names_load(small_hf_folder, tmp_path):
    hf, folder = small_hf_folder
    # OpenAI's upload: names without 'transformer.', causal-mask buffers beside the weights.
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items()}
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 128, 128))
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    ours = load_hf_gpt2(tmp_path)
    idx = prompt_ids(97, 10)
    with torch.no_grad():
        torch.testing.assert_close(ours(idx)[0], hf(idx).logits, atol=1e-5, rtol=0)


def _copy_folder(src, dst, config_changes=None, drop=None):
    config = json.loads((src / "config.json").read_text())
    config.update(config_changes or {})
    (dst / "config.json").write_text(json.dumps(config))
    from safetensors.torch import load_file, save_file

    tensors = load_file(src / "model.safetensors")
    if drop:
        del tensors[drop]
    save_file(tensors, dst / "model.safetensors")


def test_folder_errors_name_file_tensor_and_shape(small_hf_folder, tmp_path):
    _, folder = small_hf_folder
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        load_hf_gpt2(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_gpt2(tmp_path)
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="model.safetensors or pytorch_model.bin"):
        load_hf_gpt2(tmp_path)

    other = tmp_path / "llama"
    other.mkdir()
    _copy_folder(folder, other, {"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    with pytest.raises(GPT2FormatError, match=r"config.json describes model_type='llama'"):
        load_hf_gpt2(other)

    wide = tmp_path / "wide"
    wide.mkdir()
    _copy_folder(folder, wide, {"n_embd": 64})
    with pytest.raises(GPT2FormatError) as err:
        load_hf_gpt2(wide)
    message = str(err.value)
    assert "model.safetensors" in message and "'wte.weight'" in message
    assert "shape [97, 32], expected [97, 64]" in message

    missing = tmp_path / "missing"
    missing.mkdir()
    _copy_folder(folder, missing, drop="transformer.h.1.mlp.c_fc.bias")
    with pytest.raises(
        GPT2FormatError, match=r"no tensor 'h.1.mlp.c_fc.bias' \(expected shape \[128\]\)"
    ):
        load_hf_gpt2(missing)

    exact_gelu = tmp_path / "exact_gelu"
    exact_gelu.mkdir()
    _copy_folder(folder, exact_gelu, {"activation_function": "relu"})
    with pytest.raises(GPT2FormatError, match="activation_function='relu'"):
        load_hf_gpt2(exact_gelu)


def test_export_refuses_another_architecture(tmp_path):
    with pytest.raises(GPT2FormatError, match="norm_placement='post'"):
        save_hf_gpt2(GPT(textbook(vocab_size=11, block_size=8, n_layer=1, n_embd=16)), tmp_path)
    assert not os.listdir(tmp_path)


@pytest.fixture(scope="module")
def gpt2_vocab_folder(tmp_path_factory):
    """A tiny random model with GPT-2's vocabulary, so GPT-2's tokenizer can drive it."""
    hf = make_hf(dict(n_positions=64, n_embd=32, n_layer=2, n_head=4), seed=4)
    folder = tmp_path_factory.mktemp("tiny_gpt2_vocab")
    hf.save_pretrained(folder)
    return hf, folder


def test_sample_command_on_a_hf_folder(gpt2_vocab_folder, capsys):
    hf, folder = gpt2_vocab_folder
    tok = gpt2_tokenizer()
    prompt = "The attention layer"
    main(["sample", str(folder), "--prompt", prompt, "--num", "1", "--max-len", "8",
          "--temperature", "0", "--device", "cpu"])  # fmt: skip
    out = capsys.readouterr().out
    ids = torch.tensor([tok.encode(prompt)])
    with torch.no_grad():
        expected = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                               min_new_tokens=8, do_sample=False, pad_token_id=50256)  # fmt: skip
    assert out == tok.decode(expected[0].tolist()) + "\n---\n"


def test_sample_command_as_a_process(gpt2_vocab_folder):
    _, folder = gpt2_vocab_folder
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gptlib",
            "sample",
            str(folder),
            "--prompt",
            "Hello",
            "--num",
            "2",
            "--max-len",
            "5",
            "--seed",
            "1",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    samples = run.stdout.split("---\n")
    assert len(samples) == 3 and samples[2] == ""
    assert all(s.startswith("Hello") for s in samples[:2])


def test_sample_command_refuses_a_small_vocabulary(small_hf_folder, capsys):
    _, folder = small_hf_folder
    with pytest.raises(SystemExit) as e:
        main(["sample", str(folder), "--prompt", "x", "--num", "1", "--device", "cpu"])
    assert e.value.code == 2
    assert "vocab_size=97" in capsys.readouterr().err


def test_gpt2_config_matches_hf_defaults():
    hf = GPT2Config()
    cfg = gpt2()
    assert (cfg.vocab_size, cfg.block_size, cfg.n_embd, cfg.n_layer, cfg.n_head) == (
        hf.vocab_size,
        hf.n_positions,
        hf.n_embd,
        hf.n_layer,
        hf.n_head,
    )
    assert hf.activation_function == "gelu_new" and hf.layer_norm_epsilon == 1e-5
