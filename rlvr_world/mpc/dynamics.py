"""What predicts a candidate action sequence's frames: the video world model or the simulator.

``Dynamics.rollout(context, actions (N, H, 2)) -> frames (N, H, h, w, 3)`` float in [0, 1].

* ``WorldModelDynamics``: a saved action-conditioned token world model and its frame tokenizer,
  run in this process and batched over candidates. In process because one planning call needs
  ``candidates x horizon x iterations`` frame predictions of 256 autoregressive tokens each;
  through the gRPC rollout service each would add a round trip and a serialisation of the
  prompt, while here the context frame is tokenized once and all candidates decode together.
  Each step's prompt is ``[frame tokens, action bins, BOS]`` (single-step layout, context 1
  frame); the sampled frame tokens become the next step's context. With ``anchor_dilate`` set
  the frames are rendered context-anchored (``rlvr_world.video.anchor``), from the real frame
  on the first step and from the previous rendered frame after.
* ``OracleDynamics``: the true simulator; every candidate starts from the executing scene's
  snapshot in a second environment and is rendered after each action.

An action is one model step in the run's ``ActionSpace`` (``rlvr_world.mpc.space``): a model
trained at ``data.frame_skip`` k reads one action per k simulator steps, as an absolute target or
a move from the agent (``agent_relative``), so the oracle executes each action for k simulator
steps too (``ActionSpace.execute``), and a world model's ``space`` says which it was trained on.
* ``load_world_model_dynamics``: every way a model folder can fail to load becomes
  ``ModelUnavailable`` with the reason (a planner asking for it reports that per episode).

What it does not do: no planning and no cost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from rlvr_world.mpc.sim import Frame, PushTSim, SimState
from rlvr_world.mpc.space import ActionSpace, space_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.tokenizer import FrameTokenizer

logger = logging.getLogger(__name__)

Frames = NDArray[np.float32]


class ModelUnavailable(RuntimeError):
    """A world model that is not there or cannot be loaded (the message says which and why)."""


@dataclass(frozen=True)
class Context:
    """What a rollout starts from: the current frame and the simulator's state."""

    frame: Frame
    state: SimState


class Dynamics(Protocol):
    """Predicts frames for candidate action sequences from a context."""

    name: str

    def rollout(self, context: Context, actions: NDArray[np.float64]) -> Frames:
        """Frames (N, H, h, w, 3) in [0, 1] after each of ``actions`` (N, H, 2), every row
        from ``context``; ``ValueError`` for actions of another shape or not finite."""
        ...


def _check_actions(actions: NDArray[Any]) -> NDArray[np.float64]:
    arr = np.asarray(actions, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[-1] != 2 or not np.isfinite(arr).all():  # noqa: PLR2004
        raise ValueError(f"actions: expected finite (N, H, 2), got shape {arr.shape}")
    return arr


class OracleDynamics:
    """The true simulator as a model (module docstring), stepping in ``space``."""

    def __init__(
        self, sim: PushTSim, name: str = "oracle", space: ActionSpace | None = None
    ) -> None:
        self.sim = sim
        self.name = name
        self.space = space or ActionSpace()

    def rollout(self, context: Context, actions: NDArray[np.float64]) -> Frames:
        """``Dynamics.rollout``: each row simulated from ``context.state``."""
        arr = _check_actions(actions)
        n, h = arr.shape[:2]
        side = self.sim.side
        out = np.empty((n, h, side, side, 3), dtype=np.float32)
        for i in range(n):
            self.sim.restore(context.state)
            for t in range(h):
                self.space.execute(self.sim, arr[i, t])
                out[i, t] = self.sim.frame().astype(np.float32) / 255.0
        return out


class WorldModelDynamics:
    """A token world model in process (module docstring)."""

    def __init__(
        self,
        name: str,
        model: PreTrainedModel,
        tokenizer: FrameTokenizer,
        vocab: SingleStepVocab,
        quantizer: ActionQuantizer,
        *,
        anchor_dilate: int | None = 0,
        batch_size: int = 32,
        space: ActionSpace | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.quantizer = quantizer
        self.anchor_dilate = anchor_dilate
        self.batch_size = batch_size
        #: The actions it was trained on (one per model step).
        self.space = space or ActionSpace()
        self.frame_predictions = 0

    @property
    def side(self) -> int:
        """Frame side in pixels, as the frame tokenizer reads it."""
        return int(self.tokenizer.frame_shape[0])

    def encode(self, frames: NDArray[np.uint8]) -> NDArray[np.int64]:
        """Tokens ``(N, P)`` of uint8 frames ``(N, h, w, 3)``."""
        return self.tokenizer.encode_frames(frames)

    def step(
        self, tokens: NDArray[np.int64], frames: Frames, actions: NDArray[np.float64]
    ) -> tuple[NDArray[np.int64], Frames]:
        """One predicted frame per row: context tokens ``(N, P)`` and their rendered frames
        ``(N, h, w, 3)`` in [0, 1], actions ``(N, 2)`` -> (next tokens, next frames)."""
        from rlvr_world.video.anchor import anchor_frames
        from rlvr_world.video.evaluate import EvalConfig, sample_frames
        from rlvr_world.video.world_model import visual_ids

        bins = self.quantizer.tokens(np.asarray(actions, dtype=np.float64))
        n = tokens.shape[0]
        prompts = np.concatenate(
            [tokens, bins + self.vocab.action_offset, np.full((n, 1), self.vocab.bos)], axis=1
        ).astype(np.int64)
        cfg = EvalConfig(temperature=0.0, top_k=0, batch_size=self.batch_size)
        pred = sample_frames(self.model, prompts, tokens.shape[1], visual_ids(self.vocab), cfg)
        self.frame_predictions += n
        decoded = self.tokenizer.decode_tokens(pred, batch_size=self.batch_size)
        if self.anchor_dilate is None:
            return pred, decoded
        base = self.tokenizer.decode_tokens(tokens, batch_size=self.batch_size)
        grid = self.tokenizer.grid
        rendered = anchor_frames(
            decoded, base, frames, pred, tokens, grid=grid, dilate=self.anchor_dilate
        )
        return pred, rendered

    def rollout(self, context: Context, actions: NDArray[np.float64]) -> Frames:
        """``Dynamics.rollout``: ``step`` H times from ``context.frame`` (tokenized once), all
        rows batched; ``ValueError`` for a context frame of another shape than the model's."""
        arr = _check_actions(actions)
        n, h = arr.shape[:2]
        frame = np.asarray(context.frame, dtype=np.uint8)
        if frame.shape != self.tokenizer.frame_shape:
            raise ValueError(
                f"context frame {frame.shape}, model reads {self.tokenizer.frame_shape}"
            )
        tokens = np.repeat(self.encode(frame[None]), n, axis=0)
        frames = np.repeat(frame[None].astype(np.float32) / 255.0, n, axis=0)
        out = np.empty((n, h, *frame.shape), dtype=np.float32)
        for t in range(h):
            tokens, frames = self.step(tokens, frames, arr[:, t])
            out[:, t] = frames
        return out


def load_world_model_dynamics(
    name: str,
    model_path: Path,
    *,
    spec_path: Path | None = None,
    tokenizer_path: Path | None = None,
    anchor_dilate: int | None = 0,
    batch_size: int = 32,
    device: str = "cpu",
    frame_skip: int | None = None,
) -> WorldModelDynamics:
    """The world model in ``model_path`` (a model folder, or a trainer's ``checkpoints/latest``
    pointer or folder) with ``video.json`` from ``spec_path`` (default: the model folder; RLVR
    checkpoints have none and take the MLE folder's) and the frame tokenizer of
    ``tokenizer_path`` (default: the spec's ``frame_tokenizer``); its action space from the spec
    (``space.space_of``; ``frame_skip`` for a spec that does not record it). ``ModelUnavailable``
    on any failure."""
    try:
        return _load(
            name,
            model_path,
            spec_path=spec_path,
            tokenizer_path=tokenizer_path,
            anchor_dilate=anchor_dilate,
            batch_size=batch_size,
            device=device,
            frame_skip=frame_skip,
        )
    except ModelUnavailable:
        raise
    except Exception as exc:
        raise ModelUnavailable(f"{name}: {model_path}: {type(exc).__name__}: {exc}") from exc


def resolve_checkpoint(path: Path) -> Path:
    """``path`` itself, or the folder a ``latest`` pointer file names beside it."""
    if path.is_file() and path.name == "latest":
        return path.parent / path.read_text().strip()
    return path


def _load(
    name: str,
    model_path: Path,
    *,
    spec_path: Path | None,
    tokenizer_path: Path | None,
    anchor_dilate: int | None,
    batch_size: int,
    device: str,
    frame_skip: int | None,
) -> WorldModelDynamics:
    import torch
    from transformers import AutoModelForCausalLM

    from rlvr_world.video.actions import ActionQuantizer
    from rlvr_world.video.layout import SingleStepVocab
    from rlvr_world.video.tokenizer import FrameTokenizer
    from rlvr_world.video.world_model import embedding_rows, read_spec

    folder = resolve_checkpoint(model_path)
    if not (folder / "config.json").is_file():
        raise ModelUnavailable(f"{name}: no world model at {model_path} (no config.json)")
    spec = read_spec(spec_path or folder)
    if not isinstance(spec.vocab, SingleStepVocab) or spec.context_length != 1:
        raise ModelUnavailable(
            f"{name}: the planners need a single-step model with context 1, got "
            f"{type(spec.vocab).__name__} with context {spec.context_length}"
        )
    if spec.action_quantizer is None:
        raise ModelUnavailable(f"{name}: video.json has no action quantizer")
    try:
        space = space_of(spec, frame_skip)
    except ValueError as exc:
        raise ModelUnavailable(f"{name}: {exc}") from exc
    tok_dir = tokenizer_path or spec.extra.get("frame_tokenizer")
    if tok_dir is None:
        raise ModelUnavailable(f"{name}: no frame tokenizer given and none in video.json")
    tokenizer = FrameTokenizer.load(Path(tok_dir), device=device)
    if tokenizer.tokens_per_frame != spec.tokens_per_frame:
        raise ModelUnavailable(
            f"{name}: tokenizer has {tokenizer.tokens_per_frame} tokens per frame, the model "
            f"{spec.tokens_per_frame}"
        )
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if embedding_rows(model) != spec.vocab.size:
        raise ModelUnavailable(f"{name}: model vocabulary differs from video.json's")
    model.to(device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
    model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
    logger.info("loaded world model %s from %s", name, folder)
    return WorldModelDynamics(
        name,
        model,
        tokenizer,
        spec.vocab,
        ActionQuantizer.from_dict(spec.action_quantizer),
        anchor_dilate=anchor_dilate,
        batch_size=batch_size,
        space=space,
    )
