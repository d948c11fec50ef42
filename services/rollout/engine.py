"""The ``GenerationEngine`` protocol the rollout server depends on, its value types and errors.

An engine generates ``n`` samples for one prompt and reports, per generated token, the behaviour
log-probability under the weights it serves. Log-prob convention (the trainer's and verl's actor
recomputation): ``log_softmax(logits / temperature)`` over the full vocabulary, taken *before*
top-k/top-p truncation, of the sampled token; with temperature 0 (greedy) the raw logits are used
(temperature 1). An engine also loads new weights without restarting and reports the policy
version it serves. This module holds no model code.

Parameter conventions of the wire (proto3 has no "unset"): ``temperature`` 0 is greedy, ``top_p`` 0
means 1 (off), ``top_k`` 0 or -1 means off, ``seed`` 0 means "no seed" (fresh randomness); ``n``
and ``max_tokens`` must be at least 1. ``allowed_tokens`` (a video model's visual ids) masks every
other id before drawing (greedy included); the reported log-prob is still the full-vocabulary one,
so a policy that puts mass outside the range is sampled slightly off-policy, as with top-k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

FinishReason = Literal["stop", "length"]


class EngineError(Exception):
    """Base class: a request the engine refuses (mapped to a gRPC status by the server)."""


class InvalidRequest(EngineError):
    """Bad input (INVALID_ARGUMENT); the message names the field."""


class WeightsNotFound(EngineError):
    """The weights path does not exist or holds no checkpoint (NOT_FOUND)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample; see the module docstring for the meaning of zero values."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 16
    ignore_eos: bool = False
    seed: int | None = None
    stop: tuple[str, ...] = ()
    #: Sample only ids in ``[begin, end)``; log-probs stay those of the full vocabulary.
    allowed_tokens: tuple[int, int] | None = None


@dataclass(frozen=True)
class Sample:
    """One generated continuation."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    text: str


@dataclass(frozen=True)
class Generation:
    """All samples of one prompt and the policy version whose weights produced them."""

    prompt_token_ids: list[int]
    samples: list[Sample]
    policy_version: int


@dataclass(frozen=True)
class EngineInfo:
    engine: str
    model: str
    policy_version: int
    vocab_size: int
    extra: dict[str, str] = field(default_factory=dict)


class GenerationEngine(Protocol):
    """What the rollout server needs from an engine. Methods may block; the server calls them
    from worker threads, so implementations serialise access to the model themselves."""

    @property
    def policy_version(self) -> int: ...

    def info(self) -> EngineInfo: ...

    def generate(self, prompt: str | Sequence[int], params: SamplingParams) -> Generation:
        """``prompt``: text (tokenized with the model's tokenizer) or token ids.

        Raises ``InvalidRequest`` for an empty prompt or ids outside the vocabulary."""
        ...

    def load_weights(self, version: int, path: str) -> float:
        """Serve the checkpoint in ``path`` as ``version``; returns the seconds it took.

        Raises ``WeightsNotFound`` when ``path`` holds no checkpoint, ``InvalidRequest`` when it
        does not fit the model; the previous weights stay in service after an error."""
        ...

    def close(self) -> None: ...
