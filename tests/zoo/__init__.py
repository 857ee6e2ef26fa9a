"""The zoo: real third-party architectures built from configs with random weights, nothing downloaded.

Shared by every component's tests and by the doctor. Each entry is the architecture as its library
ships it (torchvision 0.24.0, transformers 4.57.1), made tiny through its own config so a doctor run
stays well under a minute on two CPU cores. Weights and inputs are seeded: two calls build the same
model and the same inputs.

Every factory follows the one ``--model`` contract (``torch_xla_ext._factory``): it returns
``(model, args, kwargs)``, the model in eval mode, args a tuple of tensors and kwargs a dict of
keyword tensors (HF models take ``attention_mask`` and friends by keyword). So from the checkout::

    torch-xla-ext doctor --model tests.zoo:gpt2

Example:
    >>> from tests import zoo                                 # doctest: +SKIP
    >>> model, args, kwargs = zoo.build("bert")              # doctest: +SKIP
    >>> out = model(*args, **kwargs)                         # a transformers ModelOutput
    >>> zoo.MODELS["bert"].loss(out).backward()              # a scalar for training steps
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

__all__ = ["MODELS", "NAMES", "ZooModel", "build", "primary_output"] + [
    "resnet18", "mobilenet_v3", "vit", "gpt2", "bert", "llama", "t5", "clip", "mixtral"]

SEED = 0
BATCH = 2
SEQ = 16
VOCAB = 512


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One architecture of the zoo.

    name: the factory's name in this module (``tests.zoo:<name>``).
    family: cnn, vision-transformer, decoder, encoder, encoder-decoder, moe-decoder.
    source: the library class and the config it is built from.
    factory: returns ``(model, args, kwargs)``.
    int_inputs: names of the integer inputs (token ids), which must never be narrowed.
    data_dependent: the nn.Module class whose forward has shapes that depend on the inputs' values
        (an MoE's routing), so there is no one program to export; None for the others.
    """

    name: str
    family: str
    source: str
    factory: Callable[[], tuple[Any, tuple, dict]]
    int_inputs: tuple[str, ...] = ()
    data_dependent: str | None = None

    def build(self) -> tuple[Any, tuple, dict]:
        return self.factory()

    @staticmethod
    def loss(output: Any):
        """A scalar from the model's output for a training step: the mean square of its primary
        tensor in float32 (logits of an LM, the class scores of a CNN)."""
        return primary_output(output).float().pow(2).mean()


def primary_output(output: Any):
    """The tensor a user looks at first: ``logits`` / ``last_hidden_state`` of a ModelOutput, the
    first element of a tuple, or the tensor itself."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    for key in ("logits", "last_hidden_state"):
        value = getattr(output, key, None)
        if isinstance(value, torch.Tensor):
            return value
    if hasattr(output, "to_tuple"):  # another ModelOutput (CLIP's logits_per_image comes first)
        output = output.to_tuple()
    if isinstance(output, (tuple, list)) and output:
        return primary_output(output[0])
    raise TypeError(f"no primary tensor in a {type(output).__name__}")


def _seeded():
    import torch

    torch.manual_seed(SEED)
    return torch.Generator().manual_seed(SEED + 1)


def _image(g, size: int = 32):
    import torch

    return torch.randn(BATCH, 3, size, size, generator=g)


def _tokens(g, n: int = SEQ):
    import torch

    return torch.randint(0, VOCAB, (BATCH, n), generator=g, dtype=torch.int64)


def _mask(n: int = SEQ):
    """Attention mask with padding at the end of the second sequence, so it is not all ones."""
    import torch

    mask = torch.ones(BATCH, n, dtype=torch.int64)
    mask[1, n - 3:] = 0
    return mask


# ---- torchvision ------------------------------------------------------------------------------


def resnet18():
    """torchvision's resnet18 as it ships (11.2M parameters, 10 classes), 32x32 images."""
    import torchvision

    g = _seeded()
    return torchvision.models.resnet18(weights=None, num_classes=10).eval(), (_image(g),), {}


def mobilenet_v3():
    """torchvision's mobilenet_v3_small: depthwise convs, squeeze-excitation, hardswish."""
    import torchvision

    g = _seeded()
    return torchvision.models.mobilenet_v3_small(weights=None, num_classes=10).eval(), (_image(g),), {}


def vit():
    """torchvision's VisionTransformer (the class behind vit_b_16) with a 2-layer, 64-wide config."""
    from torchvision.models.vision_transformer import VisionTransformer

    g = _seeded()
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64,
                              mlp_dim=128, num_classes=10)
    # torchvision zero-initialises the head (it is meant to be fine-tuned): random weights instead,
    # or every output would be exactly 0 and every comparison trivially equal.
    import torch

    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    torch.nn.init.normal_(model.heads.head.bias, std=0.02)
    return model.eval(), (_image(g),), {}


# ---- transformers -----------------------------------------------------------------------------


def _hf(model_cls, config):
    model = model_cls(config)
    return model.eval()


def gpt2():
    """transformers GPT2LMHeadModel, 2 layers, 64 wide; input_ids plus attention_mask by keyword."""
    from transformers import GPT2Config, GPT2LMHeadModel

    g = _seeded()
    config = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=VOCAB, n_positions=64, use_cache=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return _hf(GPT2LMHeadModel, config), (_tokens(g),), {"attention_mask": _mask()}


def bert():
    """transformers BertModel (encoder with pooler), 2 layers; token_type_ids and attention_mask
    by keyword."""
    import torch
    from transformers import BertConfig, BertModel

    g = _seeded()
    config = BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                        vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    ids = _tokens(g)
    token_type = torch.zeros_like(ids)
    token_type[:, SEQ // 2:] = 1
    return _hf(BertModel, config), (ids,), {"attention_mask": _mask(), "token_type_ids": token_type}


def llama():
    """transformers LlamaForCausalLM with grouped-query attention (4 query heads, 2 KV heads),
    RoPE and RMSNorm, 2 layers."""
    from transformers import LlamaConfig, LlamaForCausalLM

    g = _seeded()
    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, use_cache=False)
    return _hf(LlamaForCausalLM, config), (_tokens(g),), {"attention_mask": _mask()}


def t5():
    """transformers T5ForConditionalGeneration (encoder-decoder, relative position buckets), 2+2
    layers; attention_mask and decoder_input_ids by keyword."""
    from transformers import T5Config, T5ForConditionalGeneration

    g = _seeded()
    config = T5Config(num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, d_ff=128, num_heads=4,
                      vocab_size=VOCAB, dropout_rate=0.0, use_cache=False, decoder_start_token_id=0)
    ids = _tokens(g)
    decoder_ids = _tokens(g, SEQ // 2)
    return _hf(T5ForConditionalGeneration, config), (ids,), {"attention_mask": _mask(),
                                                             "decoder_input_ids": decoder_ids}


def clip():
    """transformers CLIPModel: a text tower (token ids) and a vision tower (pixels) joined by a
    contrastive head; its output nests one ModelOutput per tower."""
    from transformers import CLIPConfig, CLIPModel

    g = _seeded()
    config = CLIPConfig(
        text_config={"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
                     "vocab_size": VOCAB, "max_position_embeddings": 64},
        vision_config={"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
                       "num_attention_heads": 2, "image_size": 32, "patch_size": 8},
        projection_dim=32)
    return _hf(CLIPModel, config), (_tokens(g),), {"pixel_values": _image(g), "attention_mask": _mask()}


def mixtral():
    """transformers MixtralForCausalLM: a sparse mixture of experts (4 experts, top-2 routing per
    token) after grouped-query attention, 2 layers. Its routing is data-dependent: which experts
    run, and on which tokens, comes from `nonzero` of the router's choice (torch.export cannot
    trace it; torch_xla runs it by executing the graph up to each `nonzero`)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    g = _seeded()
    config = MixtralConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
                           num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0,
                           use_cache=False)
    return _hf(MixtralForCausalLM, config), (_tokens(g),), {"attention_mask": _mask()}


MODELS: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet18", "cnn", "torchvision.models.resnet18(num_classes=10)", resnet18),
    ZooModel("mobilenet_v3", "cnn", "torchvision.models.mobilenet_v3_small(num_classes=10)", mobilenet_v3),
    ZooModel("vit", "vision-transformer", "torchvision VisionTransformer(image 32, patch 8, 2 layers, 64 wide)",
             vit),
    ZooModel("gpt2", "decoder", "transformers GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64))", gpt2,
             ("input_ids", "attention_mask")),
    ZooModel("bert", "encoder", "transformers BertModel(BertConfig(2 layers, 64 wide))", bert,
             ("input_ids", "attention_mask", "token_type_ids")),
    ZooModel("llama", "decoder", "transformers LlamaForCausalLM(LlamaConfig(2 layers, GQA 4/2 heads))", llama,
             ("input_ids", "attention_mask")),
    ZooModel("t5", "encoder-decoder", "transformers T5ForConditionalGeneration(T5Config(2+2 layers))", t5,
             ("input_ids", "attention_mask", "decoder_input_ids")),
    ZooModel("clip", "dual-encoder", "transformers CLIPModel(CLIPConfig(2-layer text and vision towers))", clip,
             ("input_ids", "attention_mask")),
    ZooModel("mixtral", "moe-decoder",
             "transformers MixtralForCausalLM(MixtralConfig(2 layers, 4 experts, top-2, GQA 4/2 heads))", mixtral,
             ("input_ids", "attention_mask"), data_dependent="MixtralSparseMoeBlock"),
]}
NAMES: tuple[str, ...] = tuple(MODELS)


def build(name: str) -> tuple[Any, tuple, dict]:
    """``(model, args, kwargs)`` of the zoo model ``name``."""
    if name not in MODELS:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(NAMES)}")
    return MODELS[name].build()
