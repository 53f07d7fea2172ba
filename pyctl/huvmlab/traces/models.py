"""Model zoo for training traces: Hugging Face GPT-2, Llama-style and BERT configs, and an own ResNet.

Transformers are the real ``transformers`` 5.23 model code built from a config on the meta device
(``attn_implementation="sdpa"``); the ResNet (bottleneck v1.5, as torchvision's) is defined here
because torchvision has no CPU build on this machine. Needs the ``traces`` extra (torch, transformers).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from .dnn import StepSpec, ckpt


@dataclass(frozen=True)
class ModelDef:
    """A named configuration. ``seq`` is the sequence length (transformers) or image side (CNNs)."""

    name: str
    family: str  # gpt2 | llama | bert | resnet
    config: dict[str, Any]
    batch: int
    seq: int
    note: str = ""
    aliases: tuple[str, ...] = field(default=())


_GPT2_BASE = {"vocab_size": 50257, "n_positions": 1024, "bos_token_id": 50256, "eos_token_id": 50256}
_LLAMA_BASE = {"vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
               "bos_token_id": 1, "eos_token_id": 2}
_BERT_BASE = {"vocab_size": 30522, "max_position_embeddings": 512, "pad_token_id": 0}

MODELS: dict[str, ModelDef] = {m.name: m for m in [
    # GPT-2 family (Radford et al. 2019 sizes)
    ModelDef("gpt2-tiny", "gpt2", {**_GPT2_BASE, "n_layer": 2, "n_embd": 128, "n_head": 4, "vocab_size": 1024,
                                    "n_positions": 128, "bos_token_id": 0, "eos_token_id": 0}, 2, 128,
             "test-size GPT-2"),
    ModelDef("gpt2-small", "gpt2", {**_GPT2_BASE, "n_layer": 12, "n_embd": 768, "n_head": 12}, 4, 512),
    ModelDef("gpt2-medium", "gpt2", {**_GPT2_BASE, "n_layer": 24, "n_embd": 1024, "n_head": 16}, 8, 1024),
    ModelDef("gpt2-large", "gpt2", {**_GPT2_BASE, "n_layer": 36, "n_embd": 1280, "n_head": 20}, 8, 1024),
    ModelDef("gpt2-xl", "gpt2", {**_GPT2_BASE, "n_layer": 48, "n_embd": 1600, "n_head": 25}, 8, 1024),
    # Llama-style (Touvron et al. 2023, Llama 2 7B/13B shapes)
    ModelDef("llama-test", "llama", {**_LLAMA_BASE, "num_hidden_layers": 2, "hidden_size": 128,
                                     "num_attention_heads": 4, "num_key_value_heads": 4,
                                     "intermediate_size": 344, "vocab_size": 1024}, 2, 128, "test-size Llama"),
    ModelDef("llama-tiny", "llama", {**_LLAMA_BASE, "num_hidden_layers": 4, "hidden_size": 512,
                                     "num_attention_heads": 8, "num_key_value_heads": 8,
                                     "intermediate_size": 1376}, 4, 512),
    ModelDef("llama-7b", "llama", {**_LLAMA_BASE, "num_hidden_layers": 32, "hidden_size": 4096,
                                   "num_attention_heads": 32, "num_key_value_heads": 32,
                                   "intermediate_size": 11008}, 4, 2048),
    ModelDef("llama-13b", "llama", {**_LLAMA_BASE, "num_hidden_layers": 40, "hidden_size": 5120,
                                    "num_attention_heads": 40, "num_key_value_heads": 40,
                                    "intermediate_size": 13824}, 4, 2048),
    # BERT (Devlin et al. 2019), masked-LM head
    ModelDef("bert-test", "bert", {**_BERT_BASE, "num_hidden_layers": 2, "hidden_size": 128,
                                   "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1024},
             2, 128, "test-size BERT"),
    ModelDef("bert-base", "bert", {**_BERT_BASE, "num_hidden_layers": 12, "hidden_size": 768,
                                   "num_attention_heads": 12, "intermediate_size": 3072}, 8, 128),
    ModelDef("bert-large", "bert", {**_BERT_BASE, "num_hidden_layers": 24, "hidden_size": 1024,
                                    "num_attention_heads": 16, "intermediate_size": 4096}, 64, 512),
    # ResNet (He et al. 2016), ImageNet 224x224, 1000 classes
    ModelDef("resnet-test", "resnet", {"layers": [1, 1, 1, 1], "width": 16, "classes": 10}, 2, 32,
             "test-size ResNet"),
    ModelDef("resnet-small", "resnet", {"layers": [3, 4, 6, 3], "width": 64, "classes": 1000}, 32, 224,
             "ResNet-50 at batch 32"),
    ModelDef("resnet50", "resnet", {"layers": [3, 4, 6, 3], "width": 64, "classes": 1000}, 256, 224),
    ModelDef("resnet101", "resnet", {"layers": [3, 4, 23, 3], "width": 64, "classes": 1000}, 256, 224),
    ModelDef("resnet152", "resnet", {"layers": [3, 8, 36, 3], "width": 64, "classes": 1000}, 256, 224),
]}


# ---------------------------------------------------------------- ResNet (no torchvision here)

class Bottleneck(nn.Module):  # type: ignore[misc, unused-ignore]
    expansion = 4

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = mid * self.expansion
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down: nn.Module | None = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        out: torch.Tensor = self.relu(y + idt)
        return out


class ResNet(nn.Module):  # type: ignore[misc, unused-ignore]
    def __init__(self, layers: list[int], width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        blocks: list[nn.Module] = []
        cin = width
        for i, n in enumerate(layers):
            mid = width * 2 ** i
            for j in range(n):
                blocks.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1))
                cin = mid * Bottleneck.expansion
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(cin, classes)
        self.make_modes: Callable[[], list[TorchFunctionMode]] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = ckpt(b, self.make_modes, x) if self.make_modes is not None and self.training else b(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        out: torch.Tensor = self.fc(x)
        return out


# ---------------------------------------------------------------- Hugging Face

def _hf() -> Any:
    import transformers
    import transformers.masking_utils as mu

    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call, unused-ignore]
    # Data-dependent packed-sequence detection calls .item(), impossible on meta; batches are not packed.
    mu.find_packed_sequence_indices = lambda position_ids: None
    return transformers


def _hf_checkpointing(model: Any) -> Callable[[Callable[[], list[TorchFunctionMode]]], None]:
    def enable(make_modes: Callable[[], list[TorchFunctionMode]]) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

        def func(fn: Callable[..., Any], *a: Any, **k: Any) -> Any:
            k.pop("use_reentrant", None)
            return ckpt(fn, make_modes, *a, **k)

        for m in model.modules():
            if hasattr(m, "_gradient_checkpointing_func"):
                m._gradient_checkpointing_func = func

    return enable


def build(name: str, batch: int | None = None, seq: int | None = None,
          overrides: dict[str, Any] | None = None, *, kv_cache: bool = True) -> tuple[StepSpec, ModelDef, int, int]:
    """Build model ``name`` on meta with inputs for one step. Returns (spec, def, batch, seq).

    ``kv_cache``: the causal LMs are called as a training script calls them, ``model(input_ids=x,
    labels=x)``, so Hugging Face's default ``use_cache=True`` (``config.use_cache``) applies: the model builds a
    ``DynamicCache`` even in training, whose ``torch.cat`` keeps a copy of every layer's keys and values,
    and SDPA saves those copies for backward (:func:`kv_cache_bytes`). ``False`` passes ``use_cache=False``
    (what a script that turns the cache off does). Gradient checkpointing turns it off in HF itself.
    """
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    d = MODELS[name]
    b, s = batch or d.batch, seq or d.seq
    cfg = {**d.config, **(overrides or {})}
    dev = torch.device("meta")
    if d.family == "resnet":
        with dev:
            model = ResNet(cfg["layers"], cfg["width"], cfg["classes"])
        x = torch.empty(b, 3, s, s, device=dev)
        y = torch.empty(b, dtype=torch.long, device=dev)
        rn = model

        def enable_r(make_modes: Callable[[], list[TorchFunctionMode]]) -> None:
            rn.make_modes = make_modes

        return StepSpec(model, lambda: F.cross_entropy(rn(x), y), [x, y], enable_r), d, b, s
    tf = _hf()
    ids = torch.empty(b, s, dtype=torch.long, device=dev)
    cache_kw: dict[str, Any] = {} if kv_cache else {"use_cache": False}
    if d.family == "gpt2":
        with dev:
            hf = tf.GPT2LMHeadModel._from_config(tf.GPT2Config(**cfg), attn_implementation="sdpa")
        loss = lambda: hf(input_ids=ids, labels=ids, **cache_kw).loss  # noqa: E731
    elif d.family == "llama":
        with dev:
            hf = tf.LlamaForCausalLM._from_config(tf.LlamaConfig(**cfg), attn_implementation="sdpa")
        loss = lambda: hf(input_ids=ids, labels=ids, **cache_kw).loss  # noqa: E731
    elif d.family == "bert":
        with dev:
            hf = tf.BertForMaskedLM._from_config(tf.BertConfig(**cfg), attn_implementation="sdpa")
        loss = lambda: hf(input_ids=ids, labels=ids).loss  # noqa: E731
    else:
        raise KeyError(d.family)
    return StepSpec(hf, loss, [ids], _hf_checkpointing(hf)), d, b, s


def kv_cache_bytes(d: ModelDef, batch: int, seq: int, element_size: int) -> int:
    """Bytes of the keys and values a training step's default ``DynamicCache`` copies (see :func:`build`):
    2 x layers x batch x seq x (kv heads x head dim) elements. 0 for models without a cache."""
    c = d.config
    if d.family == "gpt2":
        layers, width = c["n_layer"], c["n_embd"]
    elif d.family == "llama":
        heads = c["num_attention_heads"]
        layers, width = c["num_hidden_layers"], c["hidden_size"] // heads * c.get("num_key_value_heads", heads)
    else:
        return 0
    return int(2 * layers * batch * seq * width * element_size)
