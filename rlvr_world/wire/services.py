"""Typed async clients of the three services, one object per run (the orchestrator, the
held-out evaluations and the tests use it).

* rollout (``RolloutService.Generate``): n samples of a prompt with token ids, behaviour log-probs
  and the policy version that produced them;
* decoder (``DecoderService.DecodeTextBatch``): token ids to text, special tokens kept by default
  (the reference's reward manager decodes with them; the strict reward strips end-of-sequence);
  for video (``DecodeFrames``) all samples' visual tokens in one call, frames back;
* reward (``rlvr_world.client.AsyncRewardClient.score_batch``): one ``ScoreBatch`` per group.

Each method is a single attempt (the reward client's own short retries aside); backoff across a
service restart is the caller's (``rlvr_world.apps.orchestrator.retry``). Credentials come from the
environment (``rlvr_world.scaffold.client_auth``: ``RLVR_API_TOKEN``, ``RLVR_TLS_*``) unless
``auth`` is given. Create inside the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr_world.rewards.types import RewardResult
from rlvr_world.scaffold.client_auth import ClientAuth
from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc, rollout_pb2, rollout_pb2_grpc
from rlvr_world.wire.codec import tensor_array
from rlvr_world.wire.reward import AsyncRewardClient, RetryPolicy, frames_request, verl_request


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters of one Generate call (temperature 0: greedy)."""

    n: int
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int = 0
    ignore_eos: bool = False
    allowed_tokens: tuple[int, int] | None = None


class ServiceClients:
    """Channels to the rollout, decoder and reward services (``host:port`` each)."""

    def __init__(
        self,
        rollout: str,
        decoder: str,
        reward: str,
        *,
        timeout_s: float = 300.0,
        reward_retry: RetryPolicy | None = None,
        auth: ClientAuth | None = None,
    ) -> None:
        auth = auth or ClientAuth.from_env()
        options = [
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.enable_retries", 0),
        ]
        self.timeout_s = timeout_s
        self._rollout_channel = auth.aio_channel(rollout, options)
        self._decoder_channel = auth.aio_channel(decoder, options)
        # the generated *_pb2_grpc modules are unannotated (mypy-protobuf stubs cover *_pb2 only)
        self._rollout = rollout_pb2_grpc.RolloutServiceStub(self._rollout_channel)  # type: ignore[no-untyped-call]
        self._decoder = decoder_pb2_grpc.DecoderServiceStub(self._decoder_channel)  # type: ignore[no-untyped-call]
        self.reward = AsyncRewardClient(
            reward,
            token=auth.token,
            root_cert=auth.root_cert,
            timeout_s=timeout_s,
            retry=reward_retry or RetryPolicy(attempts=2),
        )

    async def generate(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        sampling: Sampling,
        min_version: int = 0,
        *,
        inserts: Sequence[Sequence[int]] | None = None,
        segment_tokens: int = 0,
    ) -> rollout_pb2.GenerateResponse:
        """One ``Generate`` call (a text prompt or token ids); returns the ``GenerateResponse``.

        ``inserts`` with ``segment_tokens``: interleaved generation (segment_tokens generated
        tokens, ``inserts[0]``, segment_tokens more, ...; ``sampling.max_tokens`` counts the
        generated ones and ``sampling.ignore_eos`` must be set); ``Sample.inserted`` marks the
        forced tokens. The service checks the combination and answers INVALID_ARGUMENT."""
        params = rollout_pb2.SamplingParams(
            n=sampling.n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            ignore_eos=sampling.ignore_eos,
            segment_tokens=segment_tokens,
        )
        if sampling.allowed_tokens is not None:
            begin, end = sampling.allowed_tokens
            params.allowed_tokens.CopyFrom(rollout_pb2.TokenRange(begin=begin, end=end))
        req = rollout_pb2.GenerateRequest(
            request_id=request_id,
            sampling=params,
            min_policy_version=min_version,
            inserts=[rollout_pb2.TokenIds(ids=[int(t) for t in run]) for run in inserts or ()],
        )
        if isinstance(prompt, str):
            req.text = prompt
        else:
            req.token_ids.ids.extend(int(t) for t in prompt)
        response: rollout_pb2.GenerateResponse = await self._rollout.Generate(
            req, timeout=self.timeout_s
        )
        return response

    async def served_version(self) -> int:
        """The policy version the rollout service serves now."""
        return int((await self.engine_info()).policy_version)

    async def engine_info(self) -> rollout_pb2.EngineInfoResponse:
        """The rollout service's engine, model and served version (``Info``)."""
        info: rollout_pb2.EngineInfoResponse = await self._rollout.Info(
            rollout_pb2.EngineInfoRequest(), timeout=self.timeout_s
        )
        return info

    async def decode(self, token_ids: Sequence[Sequence[int]], special_tokens: str) -> list[str]:
        """Texts of several samples in one ``DecodeTextBatch`` call."""
        req = decoder_pb2.DecodeTextBatchRequest(
            requests=[
                decoder_pb2.DecodeTextRequest(
                    request_id=str(i), token_ids=list(ids), special_tokens=special_tokens
                )
                for i, ids in enumerate(token_ids)
            ]
        )
        resp = await self._decoder.DecodeTextBatch(req, timeout=self.timeout_s)
        return [r.text for r in resp.responses]

    async def decode_frames(
        self, token_ids: Sequence[Sequence[int]], context: Sequence[int] = ()
    ) -> np.ndarray:
        """Frames ``(len(token_ids), H, W, 3)`` float32 of the samples, one ``DecodeFrames``;
        ``context``: the one context frame's tokens they are decoded against (compressive)."""
        flat = [int(t) for ids in token_ids for t in ids]
        req = decoder_pb2.DecodeFramesRequest(
            token_ids=flat, num_frames=len(token_ids), context_token_ids=[int(t) for t in context]
        )
        resp = await self._decoder.DecodeFrames(req, timeout=self.timeout_s)
        return tensor_array(resp.frames, "frames")

    async def score_frames(  # noqa: PLR0913 (the arrays, then one keyword per VideoOptions field)
        self,
        predictions: np.ndarray,
        target: np.ndarray,
        previous: np.ndarray | None,
        weights: Mapping[str, float],
        aggregation: str = "",
        *,
        lpips_net: str = "",
        repetition_penalty: float = 0.0,
        patch_grid: tuple[int, int] | None = None,
        actions: np.ndarray | None = None,
        states: np.ndarray | None = None,
    ) -> list[RewardResult]:
        """One ``ScoreBatch``: each predicted frame (or clip) against the same ``target``
        (``lpips_net`` and ``repetition_penalty`` empty / 0: the service's defaults;
        ``patch_grid``: the results carry each patch's reward too). ``actions`` ``(T, A)`` and
        ``states`` ``(T, 5)``: the truth of every prediction's ``idm`` and ``state`` terms (one
        row per predicted frame; ``previous`` is the frame before the first), sent with each
        request when given."""
        reqs = [
            frames_request(
                pred,
                target,
                previous,
                weights=weights,
                aggregation=aggregation,
                lpips_net=lpips_net,
                repetition_penalty=repetition_penalty,
                request_id=str(i),
                patch_grid=patch_grid,
                actions=actions,
                states=states,
            )
            for i, pred in enumerate(predictions)
        ]
        return await self.reward.score_batch(reqs)

    async def score(self, rows: Sequence[dict[str, Any]]) -> list[RewardResult]:
        """One ``ScoreBatch`` over verl-style rows (in order)."""
        return await self.reward.score_batch([verl_request(r, str(i)) for i, r in enumerate(rows)])

    async def close(self) -> None:
        """Close the rollout and decoder channels and the reward client."""
        await self._rollout_channel.close()
        await self._decoder_channel.close()
        await self.reward.close()
