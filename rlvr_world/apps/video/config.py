"""Configuration of ``rlvr-world run CONFIG`` for ``task: video``: one pydantic model from YAML.

Sections: ``data`` (record PushT with ``gym-pusht`` or read ``.npz`` episodes), ``tokenizer``
(train one or load ``path``), ``model`` (the transformer's size and layout), ``mle`` (pre-training),
``rl`` (GRPO through the services) and ``idm`` (the inverse-dynamics model; both in
``apps.video.sections``), ``rollout`` (the engine: transformers only), ``baseline``
(continue MLE for the RL phase's wall time), ``eval`` (held-out sampling) and ``run``. Every
field has bounds; unknown fields are refused. ``configs/video/pusht_tiny.yaml`` is the CPU demo,
``configs/video/rt1_paper.yaml`` the paper size.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import Field, ValidationError, model_validator

from rlvr_world.apps.run.configfile import Section as _Section
from rlvr_world.apps.run.configfile import read_config
from rlvr_world.apps.run.stack import RolloutSection
from rlvr_world.apps.video.sections import (
    MAX_REWARD_WEIGHT,
    PERCEPTUAL,
    VideoIdm,
    VideoRl,
)
from rlvr_world.devices import DeviceName, Placement, PrecisionName, TorchThreads
from rlvr_world.video.actions import FrameSkip
from rlvr_world.video.anchor import AnchorDilate

if TYPE_CHECKING:
    from rlvr_world.video.compressive import CompressiveConfig

__all__ = ["MAX_REWARD_WEIGHT", "PERCEPTUAL", "VideoIdm", "VideoPipelineConfig", "VideoRl"]

#: Bounds of a frame side in pixels (``data.image_size``).
MIN_IMAGE_SIDE, MAX_IMAGE_SIDE = 8, 1024


class VideoData(_Section):
    """Episodes: recorded here with ``gym-pusht`` (``source: pusht``) or read from ``dir``."""

    source: Literal["pusht", "npz"] = Field(default="pusht", description="record or read")
    dir: Path | None = Field(default=None, description="folder of .npz episodes (source npz)")
    episodes: int = Field(default=48, ge=2, le=100_000, description="PushT episodes to record")
    steps: int = Field(default=60, ge=2, le=100_000, description="actions per PushT episode")
    held_out: int = Field(default=8, ge=1, le=100_000, description="held-out (test) episodes")
    validation: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="episodes kept out of training to tune the sampling on (never the test ones)",
    )
    image_size: int | tuple[int, int] = Field(
        default=64, description="frames resized to this side, or (height, width)"
    )
    seed: int = Field(default=0, ge=0, description="recording and split seed")
    actions: Literal["absolute", "agent_relative"] = Field(
        default="absolute",
        description=(
            "PushT actions as recorded (the target position in the arena) or minus the agent's "
            "position in the frame they follow (the move asked for; source pusht only)"
        ),
    )
    relative_range: float = Field(
        default=96.0,
        gt=0.0,
        le=512.0,
        description="agent_relative: moves are quantised in [-range, range] per axis (clipped)",
    )
    frame_skip: FrameSkip = Field(
        default=1,
        description=(
            "PushT: one model step spans this many simulator steps; its action is the last "
            "target of the span (agent_relative: minus the agent's position at its start)"
        ),
    )

    @model_validator(mode="after")
    def _source(self) -> Self:
        sides = (self.image_size,) if isinstance(self.image_size, int) else self.image_size
        if any(not MIN_IMAGE_SIDE <= side <= MAX_IMAGE_SIDE for side in sides):
            raise ValueError(
                f"data.image_size: sides must lie in [{MIN_IMAGE_SIDE}, {MAX_IMAGE_SIDE}], "
                f"got {self.image_size}"
            )
        if self.source == "npz" and self.dir is None:
            raise ValueError("data.dir: required when data.source is npz")
        if self.actions == "agent_relative" and self.source != "pusht":
            raise ValueError(
                "data.actions: agent_relative needs the agent's position, which only PushT "
                "recordings (source pusht) carry"
            )
        if self.frame_skip > 1 and self.source != "pusht":
            raise ValueError(
                "data.frame_skip: only PushT recordings (source pusht) say what a span of steps "
                "asked for (the last target); read episodes are used as they are"
            )
        if self.held_out + self.validation >= self.episodes and self.source == "pusht":
            raise ValueError("data.held_out + data.validation: must be fewer than data.episodes")
        return self


class VideoTokenizerSection(_Section):
    """The frozen video tokenizer: trained here (``steps``) or loaded from ``path``.

    ``kind: frame`` (the default) is the per-frame FSQ tokenizer, every frame ``(size /
    downsample)^2`` tokens. ``kind: compressive`` (multi-step layout only) is the compressive
    tokenizer (``rlvr_world.video.compressive``): the context frame gets ``(size /
    context_downsample)^2`` tokens, each predicted frame ``(size / (downsample * patch))^2``
    tokens conditioned on them; ``channels`` and ``levels`` serve both of its encoders,
    ``input_patch`` and ``hold_below`` are per-frame only. A loaded ``path`` is of the kind its
    ``config.json`` names, which must be ``kind``."""

    path: Path | None = Field(default=None, description="a saved video tokenizer directory")
    kind: Literal["frame", "compressive"] = Field(
        default="frame", description="per-frame tokenizer, or the compressive one (multi-step)"
    )
    context_downsample: int = Field(
        default=4, ge=1, le=64, description="compressive: context tokens per side = size / this"
    )
    patch: int = Field(
        default=2, ge=1, le=16, description="compressive: dynamics features folded patch x patch"
    )
    channels: tuple[int, ...] = Field(default=(32, 64, 128), description="encoder stages")
    downsample: int = Field(default=8, ge=1, le=64, description="tokens per side = size / this")
    levels: tuple[int, ...] = Field(default=(8, 5, 5, 5), description="FSQ levels")
    input_patch: int = Field(
        default=2, ge=1, le=64, description="pixels folded into channels before the CNN"
    )
    steps: int = Field(default=900, ge=1, le=10_000_000, description="training steps")
    batch_size: int = Field(default=8, ge=1, le=4096, description="frames per step")
    lr: float = Field(default=2e-3, gt=0.0, le=1.0, description="peak learning rate")
    perceptual_weight: float = Field(
        default=1.0, ge=0.0, le=100.0, description="ST-LPIPS weight in the loss (0: L1 only)"
    )
    foreground_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1000.0,
        description="extra L1 weight of pixels unlike the median background (the moving objects)",
    )
    perceptual_frames: int = Field(
        default=0, ge=0, le=4096, description="frames per batch in the ST-LPIPS term (0: all)"
    )
    hold_below: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description=(
            "a patch whose pixels changed by at most this much since the previous frame keeps "
            "that frame's token in the encoded clips (single-step; None: raw tokens)"
        ),
    )


class VideoModelSection(_Section):
    """The LLaMA-style transformer over frame and action tokens.

    ``layout: single_step`` (``context_length`` frames, then the next one) or ``multi_step``
    (one context frame, then ``segment_frames`` dynamics frames with their actions; the rollout
    generates frames ``2..S`` with the true actions inserted, ``rlvr_world.video.multistep``)."""

    layout: Literal["single_step", "multi_step"] = Field(
        default="single_step", description="sequence layout (docs/reference.md#sequence-layouts)"
    )
    segment_frames: int = Field(
        default=4, ge=2, le=64, description="multi-step: dynamics frames S per sequence"
    )
    context_length: int = Field(default=2, ge=1, le=64, description="single-step context frames")
    context_range: int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description=(
            "multi-step: draw the context frame from [start - this, start] like the reference "
            "(15); unset: the frame right before the segment"
        ),
    )
    hidden: int = Field(default=256, ge=16, le=16384, description="hidden size")
    layers: int = Field(default=4, ge=1, le=128, description="decoder layers")
    heads: int = Field(default=4, ge=1, le=256, description="attention heads")
    action_bins: int = Field(default=256, ge=2, le=65536, description="bins per action dim")
    seed: int = Field(default=0, ge=0, description="initialisation seed, added to run.seed")
    anchor_dilate: AnchorDilate = Field(
        default=None,
        description="context-anchored frames (rlvr_world.video.anchor), in every evaluation and "
        "in the RL reward: the last context frame's pixels where the predicted tokens, grown by "
        "this many grid positions, equal its tokens; null decodes every token (single-step only)",
    )

    @model_validator(mode="after")
    def _layout(self) -> Self:
        if self.layout == "single_step" and "segment_frames" in self.model_fields_set:
            raise ValueError("model.segment_frames: only used with model.layout multi_step")
        if self.layout == "multi_step" and self.anchor_dilate is not None:
            raise ValueError("model.anchor_dilate: context-anchored frames are single-step only")
        if self.layout == "single_step" and self.context_range is not None:
            raise ValueError("model.context_range: only used with model.layout multi_step")
        if self.layout == "multi_step" and "context_length" in self.model_fields_set:
            raise ValueError(
                "model.context_length: the multi-step layout has one context frame "
                "(set model.segment_frames instead)"
            )
        return self

    @property
    def clip_frames(self) -> int:
        """Frames per training clip: C + 1 (single-step) or S + 2 (multi-step)."""
        if self.layout == "multi_step":
            return self.segment_frames + 2
        return self.context_length + 1


class VideoMle(_Section):
    """MLE pre-training of the transformer (teacher forcing on the next frame's tokens), or a
    saved MLE world model (``path``, e.g. ``<run_dir>/model/mle`` of an earlier run with the same
    data, tokenizer and model settings) used as it is."""

    path: Path | None = Field(
        default=None, description="a saved world model folder (save_checkpoint); skips MLE"
    )
    steps: int = Field(default=1500, ge=1, le=10_000_000, description="optimizer steps")
    batch_size: int = Field(default=16, ge=1, le=4096, description="sequences per step")
    lr: float = Field(default=1e-3, gt=0.0, le=1.0, description="peak learning rate")
    torch_threads: TorchThreads = Field(
        default=1,
        description="torch threads of the tokenizer, MLE and evaluation in this process (more "
        "than 1 helps only on an otherwise idle machine)",
    )


class VideoBaseline(_Section):
    """The control: continue MLE from the same checkpoint for the RL phase's budget."""

    enabled: bool = Field(default=True, description="run the continued-MLE control")
    lr: float = Field(default=1e-4, gt=0.0, le=1.0, description="learning rate (constant)")
    budget: Literal["wall_time", "samples", "steps"] = Field(
        default="wall_time",
        description="wall_time: MLE for as long as the RL phase took (fair only where an MLE "
        "step and a GRPO step cost alike: on an H200 the smoke control took 1,500 MLE steps in "
        "the time of 3 GRPO steps); samples: as many MLE sequences as GRPO trained "
        "(mle.batch_size a step); steps: as many MLE optimizer steps as GRPO took",
    )


class SamplingChoice(_Section):
    """One way of sampling frames: temperature (0 is greedy) and top-k (0 is off)."""

    temperature: float = Field(default=1.0, ge=0.0, le=10.0, description="0 is greedy")
    top_k: int = Field(default=100, ge=0, le=1_000_000, description="0 is off")


class VideoEval(_Section):
    """Held-out next-frame prediction: sampled like the reference evaluation (temperature 1,
    top-k 100) unless ``candidates`` are given: then the MLE model samples the validation clips
    with each and every evaluation uses the one with the best reward."""

    clips: int = Field(default=64, ge=1, le=1_000_000, description="held-out clips")
    temperature: float = Field(default=1.0, ge=0.0, le=10.0, description="0 is greedy")
    top_k: int = Field(default=100, ge=0, le=1_000_000, description="0 is off")
    seed: int = Field(default=0, ge=0, description="sampling seed, added to run.seed")
    candidates: tuple[SamplingChoice, ...] = Field(
        default=(),
        description="sampling settings tried on the validation clips (needs "
        "data.validation); empty: temperature and top_k as given",
    )
    validation_clips: int = Field(
        default=64, ge=1, le=1_000_000, description="validation clips the candidates are tried on"
    )
    perceptual: Literal["auto", "lpips", "stlpips"] = Field(
        default="stlpips",
        description="perceptual metric of the evaluations and of the 'perceptual' reward weight; "
        "auto: LPIPS where its backbone weights are on disk (RLVR_LPIPS_BACKBONE_PATH or the "
        "torch hub cache), ST-LPIPS otherwise",
    )
    net: Literal["alex", "vgg"] = Field(default="vgg", description="perceptual backbone")
    shuffled_actions: bool = Field(
        default=False,
        description="also evaluate the MLE model with the clips' actions shuffled among them "
        "(does the model use its actions?)",
    )
    grid_rows: int = Field(default=6, ge=1, le=64, description="clips drawn in the PNG grids")

    def perceptual_metric(self) -> str:
        """``lpips`` or ``stlpips``: ``perceptual``, with ``auto`` resolved on this machine (LPIPS
        where its ImageNet backbone is on disk, ST-LPIPS otherwise)."""
        if self.perceptual != "auto":
            return self.perceptual
        from rlvr_world.rewards.perceptual import preferred_perceptual

        return preferred_perceptual(self.net)


class VideoRunSection(_Section):
    run_dir: Path = Field(default=Path("runs/video_pusht"), description="everything written")
    seed: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="reseeds the tokenizer, the model's initialisation, MLE, RLVR, the continued "
        "MLE and the evaluation sampling (not the data: data.seed)",
    )
    seeds: int = Field(
        default=1,
        ge=1,
        le=64,
        description="RLVR and continued MLE run this many times from the same MLE model, with "
        "seeds run.seed, run.seed + 1, ...",
    )
    device: DeviceName = Field(
        default="auto",
        description="every phase's device (rlvr_world.devices): the tokenizer, MLE, the "
        "evaluations, the control, the trainer, the rollout service, the decoder's frames, the "
        "reward's perceptual models; auto: CUDA where torch sees a GPU, else the CPU",
    )
    precision: PrecisionName = Field(
        default="auto",
        description="the trainer's autocast and the rollout service's weights (bf16: "
        "bfloat16); auto: bf16 on a CUDA device that supports it. The tokenizer, MLE, the "
        "control and the evaluations run in float32",
    )
    service_start_timeout_s: float = Field(default=180.0, gt=0.0, le=3600.0, description="boot")
    trainer_idle_timeout_s: float = Field(default=120.0, gt=0.0, le=86_400.0, description="idle")
    progress: bool = Field(default=True, description="tqdm progress bars")


class VideoPipelineConfig(_Section):
    """The whole video run (module docstring)."""

    task: Literal["video"] = Field(default="video", description="the world-model task")
    data: VideoData = Field(default_factory=VideoData)
    tokenizer: VideoTokenizerSection = Field(default_factory=VideoTokenizerSection)
    model: VideoModelSection = Field(default_factory=VideoModelSection)
    mle: VideoMle = Field(default_factory=VideoMle)
    rl: VideoRl = Field(default_factory=VideoRl)
    idm: VideoIdm = Field(default_factory=VideoIdm)
    rollout: RolloutSection = Field(
        default_factory=RolloutSection,
        description="the rollout's engine: transformers only (_no_vllm says why)",
    )
    baseline: VideoBaseline = Field(default_factory=VideoBaseline)
    eval: VideoEval = Field(default_factory=VideoEval)
    run: VideoRunSection = Field(default_factory=VideoRunSection)

    @model_validator(mode="after")
    def _no_vllm(self) -> Self:
        """vLLM samples the visual ids with ``allowed_token_ids`` and reports each token's
        log-prob under the distribution restricted to them (``services.rollout.vllm_engine``);
        the trainer's ratio divides by these behaviour log-probs and computes its own over the
        whole vocabulary, so every ratio would be off by the mass outside the visual ids."""
        if self.rollout.engine == "vllm":
            raise ValueError(
                "rollout.engine vllm: not for video runs: vLLM reports log-probs under the "
                "distribution restricted to the visual ids, the trainer over the whole vocabulary "
                "(GRPO's ratio would be off); use rollout.engine: transformers"
            )
        return self

    @model_validator(mode="after")
    def _action_terms(self) -> Self:
        """``state`` needs the simulator's states (PushT), ``idm`` an IDM; an IDM is trained on
        PushT recordings only."""
        w, d = self.rl.weights, self.data
        if "idm" in w and not self.idm.enabled:
            raise ValueError(
                "rl.weights: idm reads the actions of the predicted frames with an inverse-"
                "dynamics model; set idm.path (rlvr-world video train-idm) or idm.train: true"
            )
        if self.idm.train and d.source != "pusht":
            raise ValueError(
                "idm.train: trains on PushT recordings (data.source pusht), which carry the "
                "agent positions the actions are formed from; give idm.path instead"
            )
        if "state" in w and d.source != "pusht":
            why = _states_missing(d.dir) if d.dir is not None else "no data.dir"
            if why is not None:
                raise ValueError(
                    "rl.weights: state compares the predicted frames with the simulator's state "
                    f"(PushT agent_pos and block_pose), which these episodes lack: {why}"
                )
        return self

    @model_validator(mode="after")
    def _episodes_fit(self) -> Self:
        frames = self.model.clip_frames
        if self.eval.candidates and self.data.validation == 0:
            raise ValueError(
                "eval.candidates: tuning the sampling needs validation episodes "
                "(data.validation > 0), never the test clips"
            )
        if self.tokenizer.hold_below is not None and self.model.layout == "multi_step":
            raise ValueError("tokenizer.hold_below: held tokens are single-step only")
        if self.rl.token_credit > 0 and self.model.layout == "multi_step":
            raise ValueError(
                "rl.token_credit: patch rewards map onto the tokens of one predicted frame; "
                "model.layout multi_step interleaves frames and actions (single_step only)"
            )
        if self.tokenizer.kind == "compressive":
            if self.model.layout != "multi_step":
                raise ValueError(
                    "tokenizer.kind compressive: the compressive tokenizer conditions predicted "
                    "frames on a context frame, which only model.layout multi_step has"
                )
            compressive_config(self)  # its shape errors, at load time
        if self.data.source == "pusht" and self.data.steps // self.data.frame_skip + 1 < frames:
            what = (
                f"model.segment_frames {self.model.segment_frames}"
                if self.model.layout == "multi_step"
                else f"model.context_length {self.model.context_length}"
            )
            have = self.data.steps // self.data.frame_skip + 1
            skip = f" at data.frame_skip {self.data.frame_skip}" if self.data.frame_skip > 1 else ""
            raise ValueError(
                f"data.steps: a clip of {what} needs {frames} frames, "
                f"episodes of {self.data.steps} steps have {have}{skip}"
            )
        return self


def _states_missing(folder: Path) -> str | None:
    """Why the ``.npz`` episodes in ``folder`` have no simulator states (the first file is
    read: a folder mixes no sources), or None when it has ``agent_pos`` and ``block_pose``."""
    import numpy as np

    files = sorted(folder.rglob("*.npz")) if folder.is_dir() else []
    if not files:
        return f"no .npz episodes in {folder}"
    with np.load(files[0], allow_pickle=False) as npz:
        names = set(npz.files)
    if {"agent_pos", "block_pose"} <= names:
        return None
    return f"{files[0]} has {sorted(names)}, not agent_pos and block_pose (BAIR, RT-1: none)"


def compressive_config(cfg: VideoPipelineConfig) -> CompressiveConfig:
    """The compressive tokenizer's shape of ``tokenizer.kind: compressive`` (``ValueError``
    naming the ``tokenizer`` field that does not fit the frame size)."""
    from rlvr_world.video.compressive import CompressiveConfig

    t = cfg.tokenizer
    try:
        return CompressiveConfig(
            image_size=cfg.data.image_size,
            context_channels=t.channels,
            context_downsample=t.context_downsample,
            context_levels=t.levels,
            dynamics_channels=t.channels,
            dynamics_downsample=t.downsample,
            patch=t.patch,
            dynamics_levels=t.levels,
        )
    except ValidationError as exc:
        errors = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ValueError(
            f"tokenizer (kind compressive): channels {t.channels}, downsample {t.downsample}, "
            f"context_downsample {t.context_downsample}, patch {t.patch} do not fit "
            f"data.image_size {cfg.data.image_size}: {errors}"
        ) from None


def load_video_config(path: Path, overrides: dict[str, Any] | None = None) -> VideoPipelineConfig:
    """Read ``path`` (YAML), apply ``section.field`` overrides, validate."""
    data = read_config(path, overrides)
    return VideoPipelineConfig.model_validate(data)


def placed(cfg: VideoPipelineConfig) -> tuple[VideoPipelineConfig, Placement]:
    """``cfg`` with ``run.device`` resolved to a concrete device (``cpu`` or ``cuda:N``: what
    every phase and process then gets) and the run's placement; ``DeviceUnavailable`` for a
    CUDA device this machine lacks."""
    placement = Placement.resolve(cfg.run.device, cfg.run.precision)
    run = cfg.run.model_copy(update={"device": placement.device})
    return cfg.model_copy(update={"run": run}), placement
