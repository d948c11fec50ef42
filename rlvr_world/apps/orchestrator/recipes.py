"""Per-task recipes of the orchestrator: what one task asks of the rollout, the decoder and the
reward service for one prompt's group of samples.

``Orchestrator.process`` is the same for every task: generate, score, push. What differs is here,
behind one ``Recipe`` protocol, chosen by the item's task in ``recipes()`` (a table, as the reward
dispatch is), so the worker has no task branches and a new task is one new recipe:

* ``TextRecipe`` (text game, web): plain sampling; ``DecodeTextBatch`` of the samples (special
  tokens kept by default: the reference's reward manager decodes with them, the strict reward
  strips end-of-sequence text); one ``ScoreBatch`` of verl-style rows. Samples may stop at the
  end-of-sequence token, so one cut at ``max_tokens`` is ``truncated``.
* ``VideoRecipe``: a single-step item decodes all G samples' visual tokens in one
  ``DecodeFrames`` (context-anchored on the last real frame when ``video_anchor_dilate`` is set)
  and scores each frame against the true one with the ``video_weights`` (per patch too with
  ``video_patch_grid``). A multi-step item is sampled interleaved: ``segment_tokens`` sampled
  tokens, then the item's forced run (its ground-truth actions), T times; the forced tokens are
  stripped, all T frames of all G samples go through one ``DecodeFrames`` (against the item's
  context tokens for the compressive tokenizer), and each sample's T frames are scored against
  the T true ones with ``aggregation: mean``. Either way the item's true actions and states
  (``VideoPayload.actions`` / ``states``, where it has them) go with every request, for the
  ``idm`` and ``state`` terms. Video samples never stop early.

A recipe makes single attempts through ``stage(name, call)``, the worker's retrying, timed and
ledgered wrapper; it holds no state between prompts. This is a task's serving half; the other
half (its items, the filter once the policy exists, the SFT length, the metric, the
always-no-change baseline) is the task's recipe in ``apps.pipeline.tasks`` for the language
tasks, and the video run type's own code (``apps.video``) for video.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from rlvr_world.apps.orchestrator.config import OrchestratorConfig
from rlvr_world.items import PromptItem, VideoPayload, video_anchor, video_payload
from rlvr_world.rewards.types import InvalidInput, RewardResult
from rlvr_world.video.anchor import anchor_samples
from rlvr_world.video.layout import generated_frames
from rlvr_world.wire.services import Sampling, ServiceClients

#: ``stage(name, call)``: run one service call with the worker's retries, timing and ledger.
Stage = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


@dataclass(frozen=True)
class Plan:
    """What one prompt asks of the rollout service."""

    sampling: Sampling
    inserts: list[list[int]]  # forced token runs, one after each generated segment (or none)
    segment_tokens: int  # sampled tokens before each forced run (0: no interleaving)


class Recipe(Protocol):
    """One task's generate / decode / score, for ``Orchestrator.process``."""

    @property
    def can_stop(self) -> bool:
        """Whether a sample may end at the end-of-sequence token (else never ``truncated``)."""
        ...

    def plan(self, item: PromptItem, sampling: Sampling) -> Plan:
        """The rollout request for ``item`` from the config's ``sampling``."""
        ...

    async def score(
        self,
        stage: Stage,
        item: PromptItem,
        ids: list[list[int]],
        inserted: list[list[bool]],
    ) -> list[RewardResult]:
        """One reward per sample (``ids``: each sample's token ids; ``inserted``: which were
        forced), through the decoder and the reward service."""
        ...


@dataclass(frozen=True)
class TextRecipe:
    """The text game and the web task: text out, text scored."""

    cfg: OrchestratorConfig
    clients: ServiceClients

    @property
    def can_stop(self) -> bool:
        return not self.cfg.ignore_eos

    def plan(self, item: PromptItem, sampling: Sampling) -> Plan:
        return Plan(sampling, [], 0)

    async def score(
        self,
        stage: Stage,
        item: PromptItem,
        ids: list[list[int]],
        inserted: list[list[bool]],
    ) -> list[RewardResult]:
        texts = await stage("decode", lambda: self.clients.decode(ids, self.cfg.special_tokens))
        rows = [self._row(item, text) for text in texts]
        results: list[RewardResult] = await stage("score", lambda: self.clients.score(rows))
        return results

    def _row(self, item: PromptItem, text: str) -> dict[str, Any]:
        row = item.reward_row(text)
        row["variant"], row["reward_type"] = self.cfg.variant, self.cfg.reward_type
        return row


@dataclass(frozen=True)
class VideoRecipe:
    """Video: visual tokens out, decoded to frames, scored in pixels (module docstring)."""

    cfg: OrchestratorConfig
    clients: ServiceClients

    @property
    def can_stop(self) -> bool:
        return False

    def plan(self, item: PromptItem, sampling: Sampling) -> Plan:
        payload = video_payload(item)
        if not payload.multi_step:
            return Plan(sampling, [], 0)
        inserts = [list(run) for run in payload.inserts]
        segment = payload.segment_tokens
        interleaved = replace(sampling, max_tokens=len(inserts) * segment, ignore_eos=True)
        return Plan(interleaved, inserts, segment)

    async def score(
        self,
        stage: Stage,
        item: PromptItem,
        ids: list[list[int]],
        inserted: list[list[bool]],
    ) -> list[RewardResult]:
        payload = video_payload(item)
        if payload.multi_step:
            return await self._score_clips(stage, payload, ids, inserted)
        return await self._score_frames(stage, item, payload, ids)

    async def _score_frames(
        self, stage: Stage, item: PromptItem, payload: VideoPayload, ids: list[list[int]]
    ) -> list[RewardResult]:
        dilate = self.cfg.video_anchor_dilate
        if dilate is None:
            frames = await stage("decode", lambda: self.clients.decode_frames(ids))
        else:  # decoded with the context frame's own tokens, then anchored on the real frame
            context, grid = video_anchor(item)
            todo = [*ids, context.tolist()]
            decoded = await stage("decode", lambda: self.clients.decode_frames(todo))
            frames = anchor_samples(
                decoded[:-1], decoded[-1], payload.previous, ids, context, grid=grid, dilate=dilate
            )
        return await self._score(
            stage,
            payload,
            frames[:, None],
            payload.target[None],
            patch_grid=self.cfg.video_patch_grid,
        )

    async def _score_clips(
        self,
        stage: Stage,
        payload: VideoPayload,
        ids: list[list[int]],
        inserted: Sequence[Sequence[bool]],
    ) -> list[RewardResult]:
        if self.cfg.video_patch_grid is not None:
            raise InvalidInput("video_patch_grid: patch rewards are for single-step video items")
        steps, segment = len(payload.inserts), payload.segment_tokens
        per_frame = [
            generated_frames(sample, flags, steps, segment)
            for sample, flags in zip(ids, inserted or [[]] * len(ids), strict=True)
        ]
        flat = [frame for sample in per_frame for frame in sample]
        context = list(payload.context_tokens)
        decoded = await stage("decode", lambda: self.clients.decode_frames(flat, context))
        clips = decoded.reshape(len(ids), steps, *decoded.shape[1:])
        return await self._score(stage, payload, clips, payload.target, aggregation="mean")

    async def _score(
        self,
        stage: Stage,
        payload: VideoPayload,
        frames: np.ndarray,
        target: np.ndarray,
        *,
        aggregation: str = "",
        patch_grid: tuple[int, int] | None = None,
    ) -> list[RewardResult]:
        """One ``ScoreFrames`` of ``frames`` against ``target`` with the config's weights and
        options and the item's true actions and states: per patch (``patch_grid``, single-step
        items) or each clip's ``aggregation`` (multi-step items)."""
        results: list[RewardResult] = await stage(
            "score",
            lambda: self.clients.score_frames(
                frames,
                target,
                payload.previous,
                self.cfg.video_weights,
                lpips_net=self.cfg.video_lpips_net,
                repetition_penalty=self.cfg.video_repetition_penalty,
                actions=payload.actions,
                states=payload.states,
                aggregation=aggregation,
                patch_grid=patch_grid,
            ),
        )
        return results


def recipes(cfg: OrchestratorConfig, clients: ServiceClients) -> dict[str, Recipe]:
    """Task name -> its recipe (the tasks ``PromptItem.task`` may name)."""
    text = TextRecipe(cfg, clients)
    return {"text_game": text, "web": text, "video": VideoRecipe(cfg, clients)}
