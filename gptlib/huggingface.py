"""GPT-2 in gptlib: read and write a Hugging Face GPT-2 folder, offline. (The `gpt2` preset,
GPT-2 small's settings, is `gptlib.config.gpt2`; this module is what reads and writes its weights.)

A Hugging Face GPT-2 folder holds `config.json` and the weights, `model.safetensors` (or the older
`pytorch_model.bin`). GPT-2 is gptlib's GPT with four settings (see `config.gpt2`): pre-norm
LayerNorm with bias, GELU in its tanh form, a bias in every Linear layer, tied head. Only the
weight layout differs: GPT-2's `Conv1D` layers store their weight as [in, out], `nn.Linear` as
[out, in], so those four matrices per block are transposed on the way in and out.

    HF name (per block i: transformer.h.i.*)    gptlib name (blocks.i.*)
    ln_1.weight / .bias                          ln1.weight / .bias
    attn.c_attn.weight [d, 3d] / .bias           attn.qkv.weight [3d, d] (transposed) / .bias
    attn.c_proj.weight [d, d] / .bias            attn.proj.weight (transposed) / .bias
    ln_2.weight / .bias                          ln2.weight / .bias
    mlp.c_fc.weight [d, 4d] / .bias              mlp.fc.weight [4d, d] (transposed) / .bias
    mlp.c_proj.weight [4d, d] / .bias            mlp.proj.weight [d, 4d] (transposed) / .bias
    transformer.wte / wpe / ln_f                 tok_emb / pos_emb / ln_f

Notebook 16 (gpt2) teaches this module.
"""

from __future__ import annotations

import json
import os

import torch

from gptlib.config import GPTConfig, gpt2
from gptlib.language import _
from gptlib.model import GPT

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
BIN_FILE = "pytorch_model.bin"
# The tanh approximation of GELU goes by these names in Hugging Face configs.
TANH_GELU_NAMES = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
BLOCK_NAMES = {
    "ln_1": "ln1",
    "attn.c_attn": "attn.qkv",
    "attn.c_proj": "attn.proj",
    "ln_2": "ln2",
    "mlp.c_fc": "mlp.fc",
    "mlp.c_proj": "mlp.proj",
}
TABLE_NAMES = {"wte.weight": "tok_emb.weight", "wpe.weight": "pos_emb.weight"}


class GPT2FormatError(ValueError):
    """A folder that is not a GPT-2 checkpoint gptlib can read, or a model it cannot write.

    Not taught in a notebook: what load_hf_gpt2 raises for a folder it cannot read as GPT-2."""


def config_from_hf(hf: dict, source: str = CONFIG_FILE) -> GPTConfig:
    """A Hugging Face GPT-2 config (the dict of config.json) -> GPTConfig.

    Not taught in a notebook: a step of load_hf_gpt2."""
    model_type = hf.get("model_type")
    if model_type != "gpt2":
        raise GPT2FormatError(
            _(
                "{source} describes model_type={model_type} (architectures {architectures}); "
                "only GPT-2 folders (model_type 'gpt2') can be loaded"
            ).format(
                source=source, model_type=repr(model_type), architectures=hf.get("architectures")
            )
        )
    act = hf.get("activation_function", "gelu_new")
    if act not in TANH_GELU_NAMES:
        raise GPT2FormatError(
            _(
                "{source} has activation_function={act}; gptlib's GPT-2 uses GELU's tanh form "
                "({names})"
            ).format(source=source, act=repr(act), names=" / ".join(TANH_GELU_NAMES))
        )
    d = hf.get("n_embd", 768)
    unsupported = {
        "n_inner": (hf.get("n_inner"), (None, 4 * d)),
        "layer_norm_epsilon": (hf.get("layer_norm_epsilon", 1e-5), (1e-5,)),
        "scale_attn_weights": (hf.get("scale_attn_weights", True), (True,)),
        "scale_attn_by_inverse_layer_idx": (
            hf.get("scale_attn_by_inverse_layer_idx", False),
            (False,),
        ),
        "add_cross_attention": (hf.get("add_cross_attention", False), (False,)),
    }
    for key, (value, allowed) in unsupported.items():
        if value not in allowed:
            raise GPT2FormatError(
                _("{source} sets {key}={value}; gptlib's GPT-2 supports only {allowed}").format(
                    source=source,
                    key=key,
                    value=repr(value),
                    allowed=_(" or ").join(repr(a) for a in allowed),
                )
            )
    return gpt2(
        vocab_size=hf.get("vocab_size", 50257),
        block_size=hf.get("n_positions", hf.get("n_ctx", 1024)),
        n_layer=hf.get("n_layer", 12),
        n_head=hf.get("n_head", 12),
        n_embd=d,
        dropout=hf.get("resid_pdrop", 0.1),
        tie_embeddings=hf.get("tie_word_embeddings", True),
    )


def hf_config_from(cfg: GPTConfig) -> dict:
    """GPTConfig -> the dict written as config.json (fields GPT2Config reads).

    Not taught in a notebook: a step of save_hf_gpt2."""
    check_gpt2_architecture(cfg)
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": cfg.tie_embeddings,
        "bos_token_id": cfg.vocab_size - 1,
        "eos_token_id": cfg.vocab_size - 1,
        "initializer_range": 0.02,
    }


def check_gpt2_architecture(cfg: GPTConfig) -> None:
    """Raise unless `cfg` has GPT-2's architecture (any size).

    Not taught in a notebook: a step of save_hf_gpt2."""
    want = {
        "norm": "layernorm",
        "norm_placement": "pre",
        "activation": "gelu_tanh",
        "bias": True,
        "norm_bias": True,
    }
    wrong = {k: getattr(cfg, k) for k, v in want.items() if getattr(cfg, k) != v}
    if wrong:
        got = ", ".join(f"{k}={v!r}" for k, v in wrong.items())
        need = ", ".join(f"{k}={want[k]!r}" for k in wrong)
        raise GPT2FormatError(
            _(
                "this model is not GPT-2's architecture ({got}); the GPT-2 format needs {need}, "
                "as in the gpt2 preset"
            ).format(got=got, need=need)
        )


def expected_hf_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a GPT-2 folder must hold (names without the 'transformer.' prefix).

    Not taught in a notebook: a step of load_hf_gpt2."""
    V, T, d = cfg.vocab_size, cfg.block_size, cfg.n_embd
    shapes = {"wte.weight": (V, d), "wpe.weight": (T, d), "ln_f.weight": (d,), "ln_f.bias": (d,)}
    per_block = {
        "ln_1.weight": (d,),
        "ln_1.bias": (d,),
        "attn.c_attn.weight": (d, 3 * d),
        "attn.c_attn.bias": (3 * d,),
        "attn.c_proj.weight": (d, d),
        "attn.c_proj.bias": (d,),
        "ln_2.weight": (d,),
        "ln_2.bias": (d,),
        "mlp.c_fc.weight": (d, 4 * d),
        "mlp.c_fc.bias": (4 * d,),
        "mlp.c_proj.weight": (4 * d, d),
        "mlp.c_proj.bias": (d,),
    }
    for i in range(cfg.n_layer):
        shapes.update({f"h.{i}.{k}": s for k, s in per_block.items()})
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (V, d)
    return shapes


def gptlib_name(hf_name: str) -> tuple[str, bool]:
    """HF tensor name (no prefix) -> (gptlib state-dict name, transpose?).

    Not taught in a notebook: a step of load_hf_gpt2."""
    if hf_name in TABLE_NAMES:
        return TABLE_NAMES[hf_name], False
    if hf_name.startswith(("ln_f.", "lm_head.")):
        return hf_name, False
    _h, i, rest = hf_name.split(".", 2)  # h.{i}.{rest}
    layer, param = rest.rsplit(".", 1)
    return f"blocks.{i}.{BLOCK_NAMES[layer]}.{param}", layer in CONV1D and param == "weight"


def gptlib_state_dict(hf_tensors: dict, cfg: GPTConfig, source: str = "weights") -> dict:
    """HF GPT-2 tensors -> a state dict for gptlib's GPT, every name and shape checked.

    Not taught in a notebook: a step of load_hf_gpt2."""
    # GPT2LMHeadModel saves 'transformer.h.0...'; GPT2Model (and OpenAI's upload) 'h.0...'.
    tensors = {k.removeprefix("transformer."): v for k, v in hf_tensors.items()}
    expected = expected_hf_shapes(cfg)
    for name, shape in expected.items():
        if name not in tensors:
            raise GPT2FormatError(
                _(
                    "{source} has no tensor {name} (expected shape {shape}); is it a "
                    "complete GPT-2 checkpoint?"
                ).format(source=source, name=repr(name), shape=list(shape))
            )
        got = tuple(tensors[name].shape)
        if got != shape:
            raise GPT2FormatError(
                _(
                    "{source}: tensor {name} has shape {got}, expected {shape} for the config "
                    "(V={V}, T={T}, d={d}, L={L}); do config.json and the weights belong together?"
                ).format(
                    source=source,
                    name=repr(name),
                    got=list(got),
                    shape=list(shape),
                    V=cfg.vocab_size,
                    T=cfg.block_size,
                    d=cfg.n_embd,
                    L=cfg.n_layer,
                )
            )
    state = {}
    for name in expected:
        key, transpose = gptlib_name(name)
        t = tensors[name]
        # A Conv1D weight [in, out] becomes the Linear weight [out, in] as a transposed view,
        # not a copy: the numbers keep GPT-2's memory layout, which the one-token matrix-vector
        # products of generation read faster on a CPU (about a fifth, measured), and loading
        # copies nothing.
        state[key] = t.t() if transpose else t
    if cfg.tie_embeddings:
        state["lm_head.weight"] = state["tok_emb.weight"]
    # Anything else is either a causal-mask buffer of old checkpoints (h.i.attn.bias,
    # h.i.attn.masked_bias) or the tied head again; neither is a parameter to load.
    return state


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """gptlib GPT -> tensors named and laid out as GPT2LMHeadModel saves them.

    Not taught in a notebook: a step of save_hf_gpt2."""
    cfg = model.cfg
    check_gpt2_architecture(cfg)
    own = model.state_dict()
    out = {}
    for name in expected_hf_shapes(cfg):
        key, transpose = gptlib_name(name)
        t = own[key].detach().to("cpu")
        t = t.t() if transpose else t
        out[name if name.startswith("lm_head.") else f"transformer.{name}"] = t.contiguous()
    return out


def read_hf_folder(folder: str | os.PathLike) -> tuple[dict, dict, str]:
    """(config dict, tensors, weights path) of a Hugging Face GPT-2 folder.

    Not taught in a notebook: a step of load_hf_gpt2."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            _(
                "{folder} is not a folder; give a Hugging Face GPT-2 folder holding {config} "
                "and {safetensors} (or {bin})"
            ).format(
                folder=repr(folder), config=CONFIG_FILE, safetensors=SAFETENSORS_FILE, bin=BIN_FILE
            )
        )
    config_path = os.path.join(folder, CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            _(
                "{path} does not exist; a Hugging Face GPT-2 folder holds {config} "
                "next to {safetensors} (or {bin})"
            ).format(
                path=repr(config_path),
                config=CONFIG_FILE,
                safetensors=SAFETENSORS_FILE,
                bin=BIN_FILE,
            )
        )
    with open(config_path, encoding="utf-8") as f:
        try:
            hf_cfg = json.load(f)
        except json.JSONDecodeError as e:
            raise GPT2FormatError(
                _("{path} is not valid JSON: {error}").format(path=repr(config_path), error=e)
            ) from None
    st_path, bin_path = os.path.join(folder, SAFETENSORS_FILE), os.path.join(folder, BIN_FILE)
    if os.path.isfile(st_path):
        from safetensors.torch import load_file

        return hf_cfg, load_file(st_path), st_path
    if os.path.isfile(bin_path):
        # weights_only: unpickle tensors and plain containers only, never arbitrary objects.
        return hf_cfg, torch.load(bin_path, map_location="cpu", weights_only=True), bin_path
    raise FileNotFoundError(
        _(
            "no weights in {folder}: expected {safetensors} or {bin} next to "
            "{config} (sharded checkpoints are not supported)"
        ).format(
            folder=repr(folder), safetensors=SAFETENSORS_FILE, bin=BIN_FILE, config=CONFIG_FILE
        )
    )


def load_hf_gpt2(
    folder: str | os.PathLike,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> GPT:
    """A local Hugging Face GPT-2 folder -> gptlib GPT with its weights, in eval mode.

    Taught in notebook 16 (gpt2)."""
    hf_cfg, tensors, weights_path = read_hf_folder(folder)
    cfg = config_from_hf(hf_cfg, os.path.join(os.fspath(folder), CONFIG_FILE))
    state = gptlib_state_dict(tensors, cfg, weights_path)
    with torch.device("meta"):
        model = GPT(cfg)  # no time spent drawing random weights that are overwritten anyway
    model.load_state_dict(state, assign=True)
    if cfg.tie_embeddings:
        model.lm_head.weight = model.tok_emb.weight  # assign=True replaced the shared Parameter
    # The causal-mask buffers were created on the meta device: build them again for real.
    for block in model.blocks:
        T = cfg.block_size
        block.attn.future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    unset = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if unset:  # a tensor GPT gained that this loader does not fill yet
        raise RuntimeError(f"load_hf_gpt2 left {', '.join(unset)} without values")
    return model.to(device=device, dtype=dtype).eval()


def save_hf_gpt2(model: GPT, folder: str | os.PathLike) -> None:
    """Write `model` as a Hugging Face GPT-2 folder: config.json and model.safetensors.

    Taught in notebook 16 (gpt2)."""
    from safetensors.torch import save_file

    tensors = hf_state_dict(model)
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(hf_config_from(model.cfg), f, indent=2)
    save_file(tensors, os.path.join(folder, SAFETENSORS_FILE), metadata={"format": "pt"})
