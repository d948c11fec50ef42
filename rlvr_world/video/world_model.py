"""The action-conditioned video transformer: build, save and load a LLaMA-style causal LM over
visual, action and special tokens.

What it does: ``build_world_model`` makes a randomly initialised ``LlamaForCausalLM`` (RMSNorm,
RoPE, SwiGLU) over a layout vocabulary (``rlvr_world.video.layout``: ``SingleStepVocab`` or
``MultiStepVocab``), with BOS/EOS/PAD ids taken from it. ``save_world_model`` writes a directory
that every consumer of Hugging Face checkpoints in this project reads unchanged:

* ``model.safetensors`` + ``config.json`` + ``generation_config.json`` (``save_pretrained``);
* a fast tokenizer built offline (``tokenizers`` ``WordLevel`` over the names ``<v0>``.. visual,
  ``<c0>``.. context, ``<d0>``.. dynamics, ``<a0>``.. action bins, ``<bos>``, ``<eos>``; EOS and
  PAD share an id, as in the reference), so ``AutoTokenizer`` and ``TransformersEngine`` work;
  prompts are token ids, the text form is only for logs;
* ``video.json``: the vocabulary spec, the action quantizer (``ActionQuantizer.to_dict``), tokens
  per frame, context length and any extra fields the caller adds (e.g. the frame tokenizer path).

``load_world_model`` reads the model back with ``AutoModelForCausalLM`` and the ``video.json``
spec. What it does not do: no training (``train_mle``), no sampling (``evaluate``), no frame
tokenizer (``tokenizer``); torch and transformers are imported lazily.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rlvr_world.video.layout import LayoutVocab, MultiStepVocab, SingleStepVocab

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

log = logging.getLogger(__name__)

VIDEO_JSON = "video.json"
BOS_TOKEN, EOS_TOKEN = "<bos>", "<eos>"
#: Layout vocabulary classes ``video.json`` may name (``rlvr_world.video.layout``), by name.
VOCAB_CLASSES: dict[str, type[SingleStepVocab] | type[MultiStepVocab]] = {
    "SingleStepVocab": SingleStepVocab,
    "MultiStepVocab": MultiStepVocab,
}
VOCAB_KINDS = tuple(VOCAB_CLASSES)
#: Shortest sequence a model can serve: one prompt token and one generated token.
MIN_SEQUENCE_LENGTH = 2


class Vocab(Protocol):
    """What the model needs from a layout vocabulary (``SingleStepVocab`` / ``MultiStepVocab``)."""

    @property
    def size(self) -> int:
        """Token ids in the model's vocabulary (its embedding rows)."""
        ...

    @property
    def bos(self) -> int:
        """The id that ends a single-step prompt, before the predicted frame's tokens."""
        ...

    @property
    def eos(self) -> int:
        """The id that ends a single-step response."""
        ...

    @property
    def pad(self) -> int:
        """The id padded rows carry (never trained)."""
        ...


@dataclass(frozen=True)
class WorldModelSpec:
    """The ``video.json`` of a world-model directory."""

    vocab: LayoutVocab
    tokens_per_frame: int
    context_length: int
    action_quantizer: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``video.json`` holds (``extra`` keys at the top level)."""
        return {
            "vocab": vocab_to_dict(self.vocab),
            "tokens_per_frame": self.tokens_per_frame,
            "context_length": self.context_length,
            "action_quantizer": self.action_quantizer,
            **self.extra,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorldModelSpec:
        """The spec of a ``video.json`` object; ``ValueError`` names a missing field."""
        for key in ("vocab", "tokens_per_frame", "context_length"):
            if key not in data:
                raise ValueError(f"{VIDEO_JSON}: missing field {key!r}")
        known = {"vocab", "tokens_per_frame", "context_length", "action_quantizer"}
        return cls(
            vocab=vocab_from_dict(data["vocab"]),
            tokens_per_frame=int(data["tokens_per_frame"]),
            context_length=int(data["context_length"]),
            action_quantizer=data.get("action_quantizer"),
            extra={k: v for k, v in data.items() if k not in known},
        )


# --------------------------------------------------------------------------------------------
# Vocabulary


def vocab_to_dict(vocab: LayoutVocab) -> dict[str, Any]:
    """``{"kind": <class name>, **fields}`` of a layout vocabulary dataclass."""
    kind = type(vocab).__name__
    if kind not in VOCAB_KINDS or not dataclasses.is_dataclass(vocab):
        raise ValueError(f"vocab: expected one of {', '.join(VOCAB_KINDS)}, got {kind}")
    return {"kind": kind, **{f.name: getattr(vocab, f.name) for f in dataclasses.fields(vocab)}}


def vocab_from_dict(data: Mapping[str, Any]) -> LayoutVocab:
    """The layout vocabulary a ``vocab_to_dict`` dict describes."""
    kind = data.get("kind")
    if kind not in VOCAB_KINDS:
        raise ValueError(f"vocab.kind: {kind!r} is not one of {', '.join(VOCAB_KINDS)}")
    return VOCAB_CLASSES[str(kind)](**{k: v for k, v in data.items() if k != "kind"})


def visual_ids(vocab: LayoutVocab) -> range:
    """Ids the model may emit for a frame: visual codes (single-step) or dynamics codes."""
    if isinstance(vocab, SingleStepVocab):
        return range(vocab.visual_codes)
    if isinstance(vocab, MultiStepVocab):
        return range(vocab.dynamics_codes)
    raise ValueError(f"vocab: {type(vocab).__name__} is neither SingleStepVocab nor MultiStepVocab")


def token_names(vocab: LayoutVocab) -> list[str]:
    """One name per id: ``<v…>``/``<d…>``+``<c…>``, ``<a…>``, then ``<bos>`` and ``<eos>``."""
    if isinstance(vocab, SingleStepVocab):
        names = [f"<v{i}>" for i in range(vocab.visual_codes)]
    else:
        names = [f"<d{i}>" for i in range(vocab.dynamics_codes)]
        names += [f"<c{i}>" for i in range(vocab.context_codes)]
    names += [f"<a{i}>" for i in range(vocab.action_bins)]
    if len(names) != vocab.bos or vocab.eos != vocab.bos + 1 or vocab.size != vocab.bos + 2:
        raise ValueError(
            f"vocab: expected codes, then actions, then bos, eos; got {len(names)} code/action "
            f"ids, bos {vocab.bos}, eos {vocab.eos}, size {vocab.size}"
        )
    return [*names, BOS_TOKEN, EOS_TOKEN]


def build_tokenizer(vocab: LayoutVocab) -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast`` over ``token_names(vocab)`` (whitespace-separated names)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = token_names(vocab)
    tok = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token=EOS_TOKEN))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: unannotated
        tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN
    )
    if (fast.bos_token_id, fast.eos_token_id, fast.pad_token_id) != (
        vocab.bos,
        vocab.eos,
        vocab.pad,
    ):
        raise RuntimeError("tokenizer: special token ids disagree with the vocabulary")
    return fast


# --------------------------------------------------------------------------------------------
# Model


def build_world_model(
    vocab: Vocab,
    *,
    hidden: int = 256,
    layers: int = 4,
    heads: int = 4,
    max_len: int = 512,
    seed: int = 0,
    intermediate: int | None = None,
    kv_heads: int | None = None,
) -> LlamaForCausalLM:
    """A random LLaMA-style causal LM over ``vocab`` (deterministic for ``seed``).

    ``intermediate`` (SwiGLU width) defaults to ``hidden * 8 / 3`` rounded up to a multiple of 32;
    ``max_len`` is the longest sequence (prompt + response) the model serves.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    for name, value in (("hidden", hidden), ("layers", layers), ("heads", heads)):
        if value < 1:
            raise ValueError(f"{name}: must be >= 1, got {value}")
    if hidden % heads:
        raise ValueError(f"hidden: {hidden} is not divisible by heads={heads}")
    if max_len < MIN_SEQUENCE_LENGTH:
        raise ValueError(f"max_len: must be >= {MIN_SEQUENCE_LENGTH}, got {max_len}")
    width = intermediate or -(-(hidden * 8 // 3) // 32) * 32
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab.size,
        hidden_size=hidden,
        intermediate_size=width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=max_len,
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=vocab.bos,
        eos_token_id=vocab.eos,
        pad_token_id=vocab.pad,
    )
    model = LlamaForCausalLM(config)  # type: ignore[no-untyped-call]  # transformers: unannotated
    model.generation_config.eos_token_id = vocab.eos
    model.generation_config.pad_token_id = vocab.pad
    return model


def embedding_rows(model: PreTrainedModel) -> int:
    """Rows of the input embedding (the vocabulary the model serves)."""
    embeddings: Any = model.get_input_embeddings()
    return int(embeddings.weight.shape[0])


def save_world_model(
    model: PreTrainedModel,
    vocab: LayoutVocab,
    folder: Path,
    *,
    tokens_per_frame: int,
    context_length: int,
    action_quantizer: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write weights, tokenizer and ``video.json`` into ``folder`` (module docstring); return it."""
    if embedding_rows(model) != vocab.size:
        raise ValueError(f"model: embedding rows differ from the vocabulary size {vocab.size}")
    spec = WorldModelSpec(
        vocab=vocab,
        tokens_per_frame=tokens_per_frame,
        context_length=context_length,
        action_quantizer=dict(action_quantizer) if action_quantizer is not None else None,
        extra=dict(extra or {}),
    )
    return save_with_spec(model, spec, folder)


def save_with_spec(model: PreTrainedModel, spec: WorldModelSpec, folder: Path) -> Path:
    """``save_world_model`` for a ready ``WorldModelSpec`` (checkpoints of a loaded model)."""
    folder.mkdir(parents=True, exist_ok=True)
    build_tokenizer(spec.vocab).save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    (folder / VIDEO_JSON).write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    return folder


def read_spec(folder: Path) -> WorldModelSpec:
    """The ``video.json`` of a world-model directory."""
    path = folder / VIDEO_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a world-model directory (no {VIDEO_JSON})")
    return WorldModelSpec.from_dict(json.loads(path.read_text()))


def load_world_model(
    folder: Path, *, device: str = "cpu"
) -> tuple[PreTrainedModel, WorldModelSpec]:
    """The model (float32, eval mode, on ``device``) and spec saved in ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = read_spec(folder)
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if embedding_rows(model) != spec.vocab.size:
        raise ValueError(f"{folder}: model vocabulary differs from {VIDEO_JSON}'s {spec.vocab}")
    model.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
    model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    return model, spec
