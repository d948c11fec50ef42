"""Logic of the HTTP gateway: HTTP bodies -> jobs -> the shared ``RewardEngine`` -> responses.

Transport-free (no FastAPI here): ``router.py`` calls these methods and maps ``InvalidInput`` to
HTTP 422 in one place. Conversions reuse ``services.reward.convert``: gRPC and HTTP validate alike.

Binary frames (``POST /v1/score/npz``, ``Content-Type: application/x-npz``): ``npz.job_from_npz``,
which reads the archive within a total unpacked-size budget. JSON inside a label goes through
``rlvr_world.bounded_json`` (depth, size, lone surrogates).
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import Counter
from typing import Any

import numpy as np

from rlvr_world.bounded_json import loads_bounded
from rlvr_world.rewards.dispatch import task_of
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.rewards.video_action import ReaderConfig
from rlvr_world.wire import codec
from services.reward import convert
from services.reward.convert import Job
from services.reward.engine import RewardEngine
from services.reward.http.npz import job_from_npz, video_spec
from services.reward.http.protocol import (
    GetRewardIn,
    GetRewardOut,
    OptionsIn,
    ScoreBatchIn,
    ScoreBatchOut,
    ScoreRequestIn,
    ScoreResponseOut,
    SlimeRewardIn,
    SlimeRewardOut,
    TensorIn,
)
from services.reward.metrics import RewardMetrics
from services.reward.settings import RewardSettings

log = logging.getLogger(__name__)
VERL_FIELDS = ("data_source", "solution_str")
TYPED_FIELDS = (
    "task",
    "text",
    "frames",
    "target_frames",
    "previous_frame",
    "actions",
    "states",
    "options",
)


def _tensor(t: TensorIn | None, name: str, *, frames: bool = True) -> np.ndarray | None:
    """A JSON tensor as checked frames (``frames``) or as a plain array (actions, states)."""
    if t is None:
        return None
    try:
        raw = base64.b64decode(t.data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{name}.data: not valid base64") from None
    if any(d > 2**40 for d in t.shape):
        raise InvalidInput(f"{name}.shape: dimension too large in {t.shape}")
    if not frames:
        return codec.decode_tensor(raw, t.shape, t.dtype, name)
    return convert.decode_tensor(raw, t.shape, t.dtype, name)


def _extra_info(value: dict[str, Any] | str | None) -> dict[str, Any] | None:
    if isinstance(value, str):
        return convert.parse_extra_info(value, "extra_info")
    return value


def job_from_http(body: ScoreRequestIn, idm: ReaderConfig | None) -> Job:
    """A verl-style or typed body -> job; ``InvalidInput`` naming the field. ``idm``: the config
    of the service's IDM (None: it has none)."""
    given = body.model_fields_set
    verl = any(getattr(body, f) is not None for f in VERL_FIELDS)
    typed = any(f in given and getattr(body, f) is not None for f in TYPED_FIELDS)
    if verl and typed:
        raise InvalidInput(
            "body: mixes verl-style fields (data_source, solution_str) with typed ones "
            "(task, text, frames, options); use one form"
        )
    if verl:
        if body.data_source is None or body.solution_str is None:
            raise InvalidInput("data_source, solution_str: both required in the verl-style form")
        return convert.text_job(
            task_of(body.data_source),
            body.solution_str,
            body.ground_truth if body.ground_truth is not None else "",
            _extra_info(body.extra_info),
            body.variant or "",
            body.reward_type or "",
        )
    if body.task is None:
        raise InvalidInput("task: required (or give data_source + solution_str, verl style)")
    if body.task == "video":
        pred = _tensor(body.frames, "frames")
        if pred is None:
            raise InvalidInput("frames: required for task video (the predicted frames)")
        return convert.frames_job(
            pred,
            _tensor(body.target_frames, "target_frames"),
            _tensor(body.previous_frame, "previous_frame"),
            video_spec(body.options),
            actions=_tensor(body.actions, "actions", frames=False),
            states=_tensor(body.states, "states", frames=False),
            idm=idm,
        )
    if body.frames is not None:
        raise InvalidInput(f"text: task {body.task} takes text, not frames")
    for name in ("actions", "states"):
        if getattr(body, name) is not None:
            raise InvalidInput(f"{name}: only task video takes {name}, not {body.task}")
    if body.text is None:
        raise InvalidInput(f"text: required for task {body.task}")
    opts = body.options or OptionsIn()
    return convert.text_job(
        body.task,
        body.text,
        body.ground_truth if body.ground_truth is not None else "",
        _extra_info(body.extra_info),
        opts.variant or body.variant or "",
        opts.reward_type or body.reward_type or "",
    )


def response_of(request_id: str, result: RewardResult) -> ScoreResponseOut:
    """The HTTP response of ``result`` for the request ``request_id``."""
    return ScoreResponseOut(
        request_id=request_id,
        reward=result.reward,
        status=result.status.value,
        metrics=dict(result.metrics),
        message=result.message,
        patch_rewards=list(result.patch_rewards) or None,
    )


def _label_job(
    solution: str, label: str | dict[str, Any], default_ds: str | None, name: str
) -> Job:
    """A trainer's label -> job. ``label`` is a JSON object (or its text) ``{"data_source",
    "ground_truth", "extra_info", "variant", "reward_type"}`` or a plain ground truth scored with
    the server's ``default_data_source``; ``InvalidInput`` naming ``name``."""
    parsed: Any = label if isinstance(label, dict) else None
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            parsed = loads_bounded(label, name)
        except InvalidInput as exc:
            if "not valid JSON" not in str(exc):  # too deep, too big, lone surrogate: refused
                raise
            parsed = None  # not JSON after all: a plain ground truth that starts with "{"
    if isinstance(parsed, dict):
        if "ground_truth" not in parsed:
            if isinstance(label, dict):
                raise InvalidInput(f"{name}.ground_truth: required in a label object")
        else:
            return _object_label_job(solution, parsed, default_ds, name)
    if not isinstance(label, str):
        raise InvalidInput(f"{name}: a string or an object, got {type(label).__name__}")
    if default_ds is None:
        raise InvalidInput(
            f"{name}: a plain ground truth needs the server setting "
            "RLVR_REWARD_DEFAULT_DATA_SOURCE; or send a JSON object with data_source and "
            "ground_truth"
        )
    return convert.text_job(task_of(default_ds), solution, label, None, "", "")


def _object_label_job(
    solution: str, parsed: dict[str, Any], default_ds: str | None, name: str
) -> Job:
    ds = parsed.get("data_source", default_ds)
    if not isinstance(ds, str):
        raise InvalidInput(f"{name}.data_source: required (no server default set)")
    extra = parsed.get("extra_info")
    if isinstance(extra, str):
        extra = convert.parse_extra_info(extra, f"{name}.extra_info")
    if extra is not None and not isinstance(extra, dict):
        raise InvalidInput(f"{name}.extra_info: must be an object")
    try:
        return convert.text_job(
            task_of(ds),
            solution,
            str(parsed["ground_truth"]),
            extra,
            str(parsed.get("variant") or ""),
            str(parsed.get("reward_type") or ""),
        )
    except InvalidInput as exc:
        raise InvalidInput(f"{name}.{exc}") from None


class NotScored(Exception):
    """A sample the service could not score for a reason that is not the policy's (status
    ``timeout`` or ``error``): the OpenRLHF and slime routes answer 503, so their clients retry
    and then fail the step, instead of training on a made-up reward."""


def trainer_reward(
    result: RewardResult, label: str, sample: str, unparseable_reward: float
) -> float:
    """The reward a trainer's own protocol (OpenRLHF, slime) gets for one result
    (docs/integrations.md#one-rule-for-failures): ``ok`` its reward, ``unparseable`` (the policy's
    failure) ``unparseable_reward``. The caller's bad data raises ``InvalidInput`` (422) naming the
    ``label``'s field, a service failure ``NotScored`` (503) naming the ``sample``; both are
    logged."""
    if result.status is Status.OK:
        return result.reward
    if result.status is Status.UNPARSEABLE:
        return unparseable_reward
    log.warning("%s not scored: %s: %s", sample, result.status.value, result.message)
    if result.status is Status.INVALID_INPUT:
        raise InvalidInput(f"{label}.{result.message}")
    raise NotScored(f"{sample}: status {result.status.value}: {result.message or 'no message'}")


class RewardServing:
    """What the HTTP routes do, over the engine shared with gRPC."""

    def __init__(self, engine: RewardEngine, metrics: RewardMetrics, settings: RewardSettings):
        self.engine = engine
        self.metrics = metrics
        self.settings = settings

    async def _score(self, jobs: list[Job]) -> list[RewardResult]:
        results = await self.engine.score(jobs)
        counts = Counter(zip([j.task for j in jobs], [r.status for r in results], strict=True))
        for (task, status), n in counts.items():
            self.metrics.requests.labels(task, status.value, "http").inc(n)
        return results

    async def score(self, body: ScoreRequestIn) -> ScoreResponseOut:
        """``POST /score``: one request; ``InvalidInput`` (422) for a bad one."""
        job = job_from_http(body, self.engine.idm_config)
        [result] = await self._score([job])
        return response_of(body.request_id, result)

    async def score_npz(self, data: bytes) -> ScoreResponseOut:
        """``POST /score`` with an ``.npz`` body (``services.reward.http.npz``)."""
        request_id, job = job_from_npz(
            data, self.settings.max_payload_bytes, self.engine.idm_config
        )
        [result] = await self._score([job])
        return response_of(request_id, result)

    def _check_batch(self, n: int, name: str) -> None:
        if n == 0:
            raise InvalidInput(f"{name}: empty batch; send at least one")
        if n > self.settings.max_batch:
            raise InvalidInput(f"{name}: {n} items exceed max_batch={self.settings.max_batch}")
        self.metrics.batch_size.labels("http").observe(n)

    async def score_batch(self, body: ScoreBatchIn) -> ScoreBatchOut:
        """``POST /score_batch``; the first invalid request (named ``requests[i]``) refuses all."""
        self._check_batch(len(body.requests), "requests")
        jobs = []
        for i, req in enumerate(body.requests):
            try:
                jobs.append(job_from_http(req, self.engine.idm_config))
            except InvalidInput as exc:
                raise InvalidInput(f"requests[{i}].{exc}") from None
        results = await self._score(jobs)
        return ScoreBatchOut(
            responses=[
                response_of(r.request_id, res)
                for r, res in zip(body.requests, results, strict=True)
            ]
        )

    async def get_reward(self, body: GetRewardIn) -> GetRewardOut:
        """OpenRLHF's ``/get_reward`` (``GetRewardIn``); a query not scored fails the call."""
        n = len(body.query)
        self._check_batch(n, "query")
        if body.labels is None:
            raise InvalidInput("labels: required; one ground truth per query")
        for name, values in (("labels", body.labels), ("prompts", body.prompts)):
            if values is not None and len(values) != n:
                raise InvalidInput(f"{name}: {len(values)} items but query has {n}")
        prompts: list[str | None] = list(body.prompts) if body.prompts else [None] * n
        jobs = [
            _label_job(_response_of(q, p), lab, self.settings.default_data_source, f"labels[{i}]")
            for i, (q, p, lab) in enumerate(zip(body.query, prompts, body.labels, strict=True))
        ]
        results = await self._score(jobs)
        low = self.settings.unparseable_reward
        rewards = [
            trainer_reward(r, f"labels[{i}]", f"query[{i}]", low) for i, r in enumerate(results)
        ]
        return GetRewardOut(
            rewards=rewards,
            scores=rewards,
            extra_logs={"reward_ok": [1.0 if r.status is Status.OK else 0.0 for r in results]},
            statuses=[r.status.value for r in results],
            messages=[r.message for r in results],
        )

    async def slime_reward(self, body: SlimeRewardIn) -> SlimeRewardOut:
        """slime's remote reward (``SlimeRewardIn``); a sample not scored fails the call."""
        job = _label_job(body.response, body.label, self.settings.default_data_source, "label")
        [result] = await self._score([job])
        reward = trainer_reward(result, "label", "response", self.settings.unparseable_reward)
        return SlimeRewardOut(
            reward=reward,
            status="ok" if result.ok else "unparseable",  # the others raised above
            metrics=dict(result.metrics),
            message=result.message,
        )


def _response_of(query: str, prompt: str | None) -> str:
    """OpenRLHF's query is prompt + response: the prompt is stripped when it is a prefix."""
    return query[len(prompt) :] if prompt and query.startswith(prompt) else query
