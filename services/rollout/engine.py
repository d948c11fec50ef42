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

Interleaved generation (``SamplingParams.inserts`` with ``segment_tokens``; the multi-step video
world model's interactive rollout): generate ``segment_tokens`` tokens, append ``inserts[0]``,
generate ``segment_tokens`` more, append ``inserts[1]``, ... The runs are the same for all ``n``
samples. With ``k`` inserts, ``max_tokens`` counts generated tokens only and is ``(k+1) *
segment_tokens`` (the sample ends with a segment) or ``k * segment_tokens`` (it ends with the last
insert); ``ignore_eos`` is required and stop strings are refused, so every segment is full. A
forced token's log-prob is reported as 0.0 and ``Sample.inserted`` marks it; ``allowed_tokens``
restricts generated tokens only. :func:`plan_segments` checks these rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    #: Generated tokens between two inserts (0: no interleaving; then ``inserts`` is empty).
    segment_tokens: int = 0
    #: Forced token runs placed after each segment, the same for every sample.
    inserts: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Sample:
    """One generated continuation."""

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    text: str
    #: Per token: True where it was forced by ``SamplingParams.inserts`` (empty without inserts).
    inserted: list[bool] = field(default_factory=list)


def plan_segments(params: SamplingParams) -> list[tuple[int, ...]]:
    """The forced run after each generated segment (``()`` after the last one when the sample
    ends with a segment); ``[()]`` for plain generation. ``InvalidRequest`` names the field.

    Engines generate ``params.segment_tokens`` tokens (all of ``max_tokens`` when not
    interleaving) per entry, then append the entry's run."""
    size, runs = params.segment_tokens, params.inserts
    if size < 0:
        raise InvalidRequest(f"sampling.segment_tokens = {size}: must be >= 0 (0: off)")
    if size == 0:
        if runs:
            raise InvalidRequest("sampling.segment_tokens: must be >= 1 when inserts are given")
        return [()]
    for index, run in enumerate(runs):
        if not run:
            raise InvalidRequest(f"inserts[{index}] is empty")
    if not params.ignore_eos:
        raise InvalidRequest("sampling.ignore_eos: must be true with segment_tokens")
    if params.stop:
        raise InvalidRequest("sampling.stop: stop strings are not supported with segment_tokens")
    k = len(runs)
    if params.max_tokens == (k + 1) * size:
        return [*runs, ()]
    if k and params.max_tokens == k * size:
        return list(runs)
    allowed = f"{(k + 1) * size}" + (f" or {k * size}" if k else "")
    raise InvalidRequest(
        f"sampling.max_tokens = {params.max_tokens}: with {k} inserts of segment_tokens {size} "
        f"it must be {allowed} (generated tokens only)"
    )


def check_inserts(params: SamplingParams, vocab_size: int) -> None:
    """``InvalidRequest`` naming the first inserted id outside ``[0, vocab_size)``."""
    for index, run in enumerate(params.inserts):
        for pos, token in enumerate(run):
            if not 0 <= token < vocab_size:
                raise InvalidRequest(
                    f"inserts[{index}].ids[{pos}] = {token} is outside the vocabulary "
                    f"[0, {vocab_size})"
                )


def inserted_total(params: SamplingParams) -> int:
    """Forced tokens per sample."""
    return sum(len(run) for run in params.inserts)


@dataclass(frozen=True)
class Generation:
    """All samples of one prompt and the policy version whose weights produced them."""

    prompt_token_ids: list[int]
    samples: list[Sample]
    policy_version: int


@dataclass(frozen=True)
class EngineInfo:
    """What an engine serves: its kind, model path, policy version, vocabulary, and details
    (``extra``: device, dtype, versions) for logs."""

    engine: str
    model: str
    policy_version: int
    vocab_size: int
    extra: dict[str, str] = field(default_factory=dict)


class EngineBase:
    """What both engines keep the same way: the model path, the vocabulary size and the policy
    version in service (``policy_version``), and ``info`` from them plus the engine's ``extra``.
    Subclasses set ``ENGINE``, the three attributes, and ``info_extra``."""

    ENGINE = ""
    model_path: str
    vocab_size: int
    _version: int

    @property
    def policy_version(self) -> int:
        """The version of the weights in service."""
        return self._version

    def info_extra(self) -> dict[str, str]:
        """Details for ``EngineInfo.extra`` (device, dtype, versions)."""
        return {}

    def info(self) -> EngineInfo:
        """The engine, model, version, vocabulary and ``info_extra``."""
        return EngineInfo(
            engine=self.ENGINE,
            model=self.model_path,
            policy_version=self._version,
            vocab_size=self.vocab_size,
            extra=self.info_extra(),
        )


class GenerationEngine(Protocol):
    """What the rollout server needs from an engine. Methods may block; the server calls them
    from worker threads, so implementations serialise access to the model themselves."""

    @property
    def policy_version(self) -> int:
        """The version of the weights in service (the start weights' is ``initial_version``)."""
        ...

    def info(self) -> EngineInfo:
        """What the engine serves."""
        ...

    def generate(self, prompt: str | Sequence[int], params: SamplingParams) -> Generation:
        """``prompt``: text (tokenized with the model's tokenizer) or token ids.

        Raises ``InvalidRequest`` for an empty prompt or ids outside the vocabulary."""
        ...

    def load_weights(self, version: int, path: str) -> float:
        """Serve the checkpoint in ``path`` as ``version``; returns the seconds it took.

        Raises ``WeightsNotFound`` when ``path`` holds no checkpoint, ``InvalidRequest`` when it
        does not fit the model; the previous weights stay in service after an error."""
        ...

    def close(self) -> None:
        """Drop what the engine holds, at shutdown; it serves nothing after."""
        ...


def checked_prompt_ids(
    prompt: str | Sequence[int],
    encode: Callable[[str], Sequence[int]],
    vocab_size: int,
    max_prompt_tokens: int,
) -> list[int]:
    """Token ids of ``prompt`` (text through ``encode``); ``InvalidRequest`` names the problem."""
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidRequest("prompt.text is empty")
        ids = [int(i) for i in encode(prompt)]
        if not ids:
            raise InvalidRequest("prompt.text tokenizes to no tokens")
    else:
        ids = [int(i) for i in prompt]
        if not ids:
            raise InvalidRequest("prompt.token_ids is empty")
        for index, token in enumerate(ids):
            if not 0 <= token < vocab_size:
                raise InvalidRequest(
                    f"prompt.token_ids.ids[{index}] = {token} is outside the vocabulary "
                    f"[0, {vocab_size})"
                )
    if len(ids) > max_prompt_tokens:
        raise InvalidRequest(
            f"prompt has {len(ids)} tokens, more than the limit {max_prompt_tokens}"
        )
    return ids


def check_generation(
    ids: Sequence[int], params: SamplingParams, vocab_size: int, context_length: int | None
) -> None:
    """The checks of a request that need the model: context length, token ranges, inserts."""
    forced = inserted_total(params)
    if context_length is not None and len(ids) + params.max_tokens + forced > context_length:
        raise InvalidRequest(
            f"sampling.max_tokens: {len(ids)} prompt tokens + max_tokens {params.max_tokens} "
            f"+ {forced} inserted tokens exceed the model's context length {context_length}"
        )
    if params.allowed_tokens is not None and params.allowed_tokens[1] > vocab_size:
        raise InvalidRequest(
            f"sampling.allowed_tokens ends at {params.allowed_tokens[1]}, past the vocabulary "
            f"size {vocab_size}"
        )
    check_inserts(params, vocab_size)
