"""Request and response models of the HTTP gateway (JSON bodies; the OpenAPI schema at /docs).

Producer: HTTP clients (verl, OpenRLHF, TRL, curl). Consumer: ``services.reward.http.serving``.
A score request takes one of two forms, told apart by which fields are set:

* **verl style** (the ``rlvr-world reward score`` JSON lines): ``data_source``, ``solution_str``,
  ``ground_truth``, ``extra_info``, ``variant``, ``reward_type``;
* **typed** (the proto as JSON): ``task``, ``text`` or ``frames``, ``ground_truth``,
  ``target_frames``, ``previous_frame``, ``actions``, ``states``, ``extra_info``, ``options``.

Frames in JSON are ``{"data": <base64 of the raw little-endian C-order bytes>, "shape": [T, H, W,
C], "dtype": "uint8" | "float32" | ...}``; ``POST /v1/score/npz`` takes the same request as one
binary ``.npz`` archive instead (see ``serving.job_from_npz``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

StatusName = Literal["ok", "unparseable", "invalid_input", "timeout", "error"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TensorIn(_Strict):
    """A dense array: base64 of its raw little-endian C-order bytes, with shape and dtype."""

    data: str = Field(description="base64 (standard alphabet, padded) of the raw bytes")
    shape: list[int] = Field(
        description="frames (T, H, W, C) or (H, W, C); actions (T, A); states (T, 5)",
        max_length=8,
    )
    dtype: str = Field(description="uint8 | float16 | float32 | float64 | int32 | int64")


class VideoOptionsIn(_Strict):
    """Video reward options; unset fields take the paper defaults (L1 + LPIPS, mean)."""

    weights: dict[str, float] | None = Field(
        default=None,
        description="metric -> weight: l1, mse, psnr, ssim, lpips, stlpips, idm (needs actions, "
        "previous_frame and a service with idm_path), state (needs states); idm or state with "
        "weight 0 is measured, not rewarded",
    )
    aggregation: Literal["mean", "last", "discount"] | None = None
    gamma: float | None = Field(default=None, description="discount factor, in (0, 1]")
    repetition_penalty: float | None = Field(default=None, ge=0)
    repetition_threshold: float | None = Field(default=None, ge=0)
    lpips_net: Literal["vgg", "alex"] | None = None
    patch_grid: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="[rows, cols]: also the reward of each patch (patch_rewards), frames "
        "split into equal patches (per-token credit)",
    )


class OptionsIn(_Strict):
    """Typed options: the text-game variant and reward type, the video options."""

    variant: Literal["paper", "strict"] | None = None
    reward_type: Literal["binary", "task_specific", "f1", "item_f1", "soft_item_f1"] | None = None
    video: VideoOptionsIn | None = None


class ScoreRequestIn(_Strict):
    """One request, verl style or typed (see the module docstring)."""

    request_id: str = Field(default="", description="echoed back in the response")
    # verl style
    data_source: str | None = Field(
        default=None, description="verl style: llm_simulator | web_agent | text_game | web"
    )
    solution_str: str | None = Field(default=None, description="verl style: the model output")
    variant: Literal["paper", "strict"] | None = Field(default=None, description="verl style")
    reward_type: Literal["binary", "task_specific", "f1", "item_f1", "soft_item_f1"] | None = Field(
        default=None,
        description="verl style: text game binary | task_specific, web f1 | item_f1 | soft_item_f1",
    )
    # typed
    task: Literal["text_game", "web", "video"] | None = Field(default=None, description="typed")
    text: str | None = Field(default=None, description="typed: the model output (text tasks)")
    frames: TensorIn | None = Field(default=None, description="typed: predicted frames (video)")
    target_frames: TensorIn | None = Field(default=None, description="typed: true frames")
    previous_frame: TensorIn | None = Field(default=None, description="typed: last context frame")
    actions: TensorIn | None = Field(
        default=None,
        description="typed, video: (T, A) true action of each predicted frame, in the action "
        "space of the service's IDM (the idm weight)",
    )
    states: TensorIn | None = Field(
        default=None,
        description="typed, video: (T, 5) true PushT state after each predicted frame: agent x, "
        "agent y, block x, block y, block angle (arena pixels, radians; the state weight)",
    )
    options: OptionsIn | None = Field(default=None, description="typed")
    # both
    ground_truth: str | None = Field(default=None, description="text tasks: the reference")
    extra_info: dict[str, Any] | str | None = Field(
        default=None, description="text game: object (or its JSON) with data_state"
    )


class ScoreResponseOut(BaseModel):
    """One scored request (``RewardResult``'s fields)."""

    request_id: str = ""
    reward: float
    status: StatusName
    metrics: dict[str, float]
    message: str = Field(default="", description="why, when status is not ok")
    patch_rewards: list[float] | None = Field(
        default=None,
        description="only with options.video.patch_grid and status ok (absent otherwise, as in "
        "the core result's dict): one reward per patch, frame-major then row-major; they "
        "average to reward",
    )


class ScoreBatchIn(_Strict):
    """``POST /score_batch``: up to ``max_batch`` requests."""

    requests: list[ScoreRequestIn] = Field(description="scored in parallel, answered in order")


class ScoreBatchOut(BaseModel):
    """One response per request, in request order."""

    responses: list[ScoreResponseOut]


Label = str | dict[str, Any]


class GetRewardIn(BaseModel):
    """OpenRLHF ``--remote_rm_url`` request (``SingleTurnAgentExecutor._fetch_rewards_via_http``
    in openrlhf 0.11: ``{"query", "prompts", "labels"}``, one query per call). ``query[i]`` is
    prompt + response; ``labels[i]`` the ground truth: a JSON object (or its text)
    ``{"data_source", "ground_truth", "extra_info", "variant", "reward_type"}``, or a plain
    ground-truth string scored with the server's ``RLVR_REWARD_DEFAULT_DATA_SOURCE``."""

    query: list[str] = Field(description="prompt + response, decoded")
    prompts: list[str] | None = Field(default=None, description="stripped from the query's start")
    labels: list[Label] | None = Field(default=None, description="one per query (see above)")


class GetRewardOut(BaseModel):
    """``rewards[i]``: the reward, or ``RLVR_REWARD_UNPARSEABLE_REWARD`` (default 0) for an
    unparseable answer; a query the service could not score fails the call (422 / 503)."""

    rewards: list[float] = Field(description="one per query, in order")
    scores: list[float] = Field(description="same as rewards (OpenRLHF's dynamic filtering)")
    extra_logs: dict[str, list[float]] = Field(description="per-query numbers OpenRLHF logs")
    statuses: list[StatusName] = Field(description="per query: ok or unparseable")
    messages: list[str] = Field(description="per query; why, when the status is not ok")


class SlimeRewardIn(BaseModel):
    """slime ``--rm-url`` request (``slime.rollout.rm_hub.remote_rm``: one sample per call,
    ``{"prompt", "response", "label"}`` from its ``Sample``). ``label`` as in ``GetRewardIn``."""

    prompt: str | list[dict[str, Any]] | None = Field(
        default=None, description="the sample's prompt (text or chat messages); not scored"
    )
    response: str = Field(description="the model's response alone (no prompt)")
    label: Label = Field(
        description="JSON object (or its text) with data_source and ground_truth, or a plain "
        "ground truth with RLVR_REWARD_DEFAULT_DATA_SOURCE"
    )


class SlimeRewardOut(BaseModel):
    """slime keeps the whole object as ``Sample.reward``; ``--reward-key reward`` reads the
    scalar."""

    reward: float = Field(
        description="the reward; RLVR_REWARD_UNPARSEABLE_REWARD (default 0) when unparseable"
    )
    status: Literal["ok", "unparseable"] = Field(
        description="other statuses fail the call (422 / 503)"
    )
    metrics: dict[str, float]
    message: str = Field(default="", description="why, when status is unparseable")


class ErrorOut(BaseModel):
    """The body of every 4xx/5xx answer."""

    detail: str = Field(description="what is wrong, starting with the field")
