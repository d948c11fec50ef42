"""Client SDK of the reward service over gRPC: ``RewardClient`` (sync) and ``AsyncRewardClient``
(public import path: ``rlvr_world.client``).

Addresses: ``host:port``; several, comma-separated (``h1:50051,h2:50051``), used round-robin with
fail-over to the next on ``UNAVAILABLE``; or one ``dns:///name:port`` target, which gRPC resolves to
every address of the name and balances with its ``round_robin`` policy (docker compose
``--scale reward=N``, Kubernetes headless services). ``Score`` and ``ScoreBatch`` are retried
with exponential backoff and jitter on ``UNAVAILABLE``, ``DEADLINE_EXCEEDED`` and ``CANCELLED``
(a replica down, overloaded or draining: scoring is idempotent, so a call the server may have
started is safe to repeat); ``retries`` counts the repeats. When every attempt fails the client
raises ``RewardServiceUnavailable`` naming the addresses and the last error. ``INVALID_ARGUMENT``
is not retried: it raises ``InvalidInput`` with the server's message (the ``*_verl`` helpers return
it as a result with status ``invalid_input`` instead, like the in-process ``score_mapping``).
``ScoreStream`` is never retried.

Credentials (``rlvr_world.scaffold.client_auth``): the bearer token from ``token=``,
``RLVR_REWARD_API_TOKEN`` or ``RLVR_API_TOKEN``; TLS from ``root_cert=`` or
``RLVR_TLS_ROOT_CERT``; a client certificate (mTLS) from ``RLVR_TLS_CLIENT_CERT`` /
``RLVR_TLS_CLIENT_KEY``. What it does not do: pooled connections per address beyond one channel
each, or hedged requests.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import grpc
import numpy as np
from google.protobuf.message import Message

from rlvr_world.backoff import Backoff
from rlvr_world.rewards.dispatch import task_of
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status, failed
from rlvr_world.scaffold.client_auth import ClientAuth
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from rlvr_world.wire.codec import STATUS_FROM_PROTO, TASK_TO_PROTO, encode_tensor

RETRYABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
)
TOKEN_ENV = "RLVR_REWARD_API_TOKEN"


class RewardServiceUnavailable(ConnectionError):
    """Every attempt on every address failed with a retryable error."""

    def __init__(self, addresses: Sequence[str], attempts: int, last: grpc.RpcError | None):
        self.addresses = list(addresses)
        self.last_error = last
        detail = f"{last.code().name}: {last.details()}" if last is not None else "no attempt made"
        super().__init__(
            f"reward service unavailable at {', '.join(addresses)} after {attempts} attempts; "
            f"last error {detail}"
        )


@dataclass(frozen=True)
class RetryPolicy(Backoff):
    """The client's ``Backoff`` (``rlvr_world.backoff``): tighter defaults than the orchestrator's,
    as a scoring call is waited on; +-50% jitter."""

    attempts: int = 5
    initial_s: float = 0.05
    max_s: float = 2.0
    jitter: float = 0.5


def split_addresses(address: str | Sequence[str]) -> list[str]:
    """``"h1:1,h2:2"`` or a list -> targets; a ``dns:///`` target stays one channel."""
    items = address.split(",") if isinstance(address, str) else list(address)
    out = [a.strip() for a in items if a.strip()]
    if not out:
        raise ValueError("address: give host:port, several comma-separated, or dns:///name:port")
    return out


#: gRPC's reconnect backoff after a lost connection, capped: by default it grows to 120 s, so a
#: replica that restarted after some seconds down was not tried again for seconds more while the
#: other replicas carried the load (or were down themselves: every call then failed).
RECONNECT_BACKOFF_MS = {"initial": 200, "min": 200, "max": 2000}


def channel_options(max_message_bytes: int) -> list[tuple[str, Any]]:
    """gRPC channel arguments: round-robin over the resolved addresses, the message limits, no
    gRPC-level retries (the client retries), the capped reconnect backoff."""
    config: dict[str, Any] = {"loadBalancingConfig": [{"round_robin": {}}]}
    return [
        ("grpc.service_config", json.dumps(config)),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS["initial"]),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS["min"]),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS["max"]),
    ]


# ---------------------------------------------------------------- request builders


def json_default(value: Any) -> object:
    """numpy scalars and arrays (verl's parquet rows) -> JSON-able Python values."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"extra_info: {type(value).__name__} is not JSON serialisable")


def verl_request(row: Mapping[str, Any], request_id: str = "") -> reward_pb2.ScoreRequest:
    """A verl-style mapping -> proto request; ``InvalidInput`` naming the field."""
    for name in ("data_source", "solution_str", "ground_truth"):
        if not isinstance(row.get(name), str):
            raise InvalidInput(f"{name}: required string, got {type(row.get(name)).__name__}")
    task = task_of(row["data_source"])
    extra = row.get("extra_info")
    if extra is None:
        extra_json = ""
    elif isinstance(extra, str):
        extra_json = extra
    else:
        extra_json = json.dumps(extra, default=json_default)
    return reward_pb2.ScoreRequest(
        request_id=request_id,
        task=TASK_TO_PROTO[task],
        text=row["solution_str"],
        ground_truth=row["ground_truth"],
        extra_info_json=extra_json,
        options=reward_pb2.ScoreOptions(
            variant=str(row.get("variant") or ""), reward_type=str(row.get("reward_type") or "")
        ),
    )


def frames_request(  # noqa: PLR0913 (the arrays, then one keyword per VideoOptions field)
    pred: np.ndarray,
    target: np.ndarray,
    previous_frame: np.ndarray | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    aggregation: str = "",
    lpips_net: str = "",
    repetition_penalty: float = 0.0,
    request_id: str = "",
    patch_grid: tuple[int, int] | None = None,
    actions: np.ndarray | None = None,
    states: np.ndarray | None = None,
) -> reward_pb2.ScoreRequest:
    """Video request from numpy frames (T, H, W, C) or (H, W, C), uint8 or float in [0, 1];
    ``patch_grid`` ``(rows, cols)`` asks for the reward of each patch too. ``actions`` ``(T, A)``:
    the true action of each predicted frame in the world model's action space (the ``idm``
    weight); ``states`` ``(T, 5)``: the true PushT state after each predicted frame, ``(agent x,
    agent y, block x, block y, block angle)`` (the ``state`` weight); both sent as float64."""
    req = reward_pb2.ScoreRequest(
        request_id=request_id,
        task=common_pb2.TASK_VIDEO,
        frames=encode_tensor(pred),
        target_frames=encode_tensor(target),
        options=reward_pb2.ScoreOptions(
            video=reward_pb2.VideoOptions(
                weights=dict(weights or {}),
                aggregation=aggregation,
                lpips_net=lpips_net,
                repetition_penalty=repetition_penalty,
                patch_grid=list(patch_grid or ()),
            )
        ),
    )
    if previous_frame is not None:
        req.previous_frame.CopyFrom(encode_tensor(previous_frame))
    if actions is not None:
        req.actions.CopyFrom(encode_tensor(np.asarray(actions, dtype=np.float64)))
    if states is not None:
        req.states.CopyFrom(encode_tensor(np.asarray(states, dtype=np.float64)))
    return req


def to_result(resp: reward_pb2.ScoreResponse) -> RewardResult:
    """The result a ``ScoreResponse`` carries; an unknown status reads as ``error``."""
    return RewardResult(
        reward=resp.reward,
        status=STATUS_FROM_PROTO.get(resp.status, Status.ERROR),
        metrics=dict(resp.metrics),
        message=resp.message,
        patch_rewards=tuple(resp.patch_rewards),
    )


def _invalid(err: grpc.RpcError) -> InvalidInput:
    return InvalidInput(str(err.details()))


C = TypeVar("C", grpc.Channel, grpc.aio.Channel)
#: The response message type of a call.
M = TypeVar("M", bound=Message)


class _Base(Generic[C]):
    """What both clients share: addresses, credentials, retry policy, one channel per address."""

    def __init__(
        self,
        address: str | Sequence[str] | None = None,
        *,
        token: str | None = None,
        root_cert: str | Path | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        max_message_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        address = address or os.environ.get("RLVR_REWARD_ADDRESS", "127.0.0.1:50051")
        self.addresses = split_addresses(address)
        self.auth = ClientAuth.from_env(token, root_cert, token_envs=(TOKEN_ENV,))
        self._metadata = self.auth.metadata
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._options = channel_options(max_message_bytes)
        self._next = 0
        #: attempts repeated after a retryable error, over this client's life
        self.retries = 0
        self._channels: list[C] = [self._channel(a) for a in self.addresses]
        # the generated *_pb2_grpc modules are unannotated (mypy-protobuf stubs cover *_pb2 only)
        self._stubs = [reward_pb2_grpc.RewardServiceStub(ch) for ch in self._channels]  # type: ignore[no-untyped-call]

    def _channel(self, target: str) -> C:
        raise NotImplementedError

    def _pick(self) -> int:
        i = self._next % len(self.addresses)
        self._next += 1
        return i

    def _verdict(self, err: grpc.RpcError) -> grpc.RpcError:
        """``err`` if it may be retried; raises ``InvalidInput`` or ``err`` itself otherwise."""
        if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
            raise _invalid(err) from None
        if err.code() not in RETRYABLE:
            raise err
        return err

    def _retry_wait(self, attempt: int) -> float | None:
        """Seconds to wait after failed try ``attempt`` (0-based) before the next, counted in
        ``retries``; None when it was the last try."""
        if attempt + 1 >= self.retry.attempts:
            return None
        self.retries += 1
        return self.retry.delay(attempt)


class RewardClient(_Base[grpc.Channel]):
    """Blocking client; thread-safe (gRPC channels are)."""

    def _channel(self, target: str) -> grpc.Channel:
        creds = self.auth.credentials()
        if creds is not None:
            return grpc.secure_channel(target, creds, options=self._options)
        return grpc.insecure_channel(target, options=self._options)

    def _call(self, method: str, request: Message, response: type[M]) -> M:
        """``method``'s reply, retried on the next address per ``retry``; ``response`` is the
        reply's message type, for the type checker (the stub decodes the reply)."""
        last: grpc.RpcError | None = None
        for attempt in range(self.retry.attempts):
            stub = self._stubs[self._pick()]
            try:
                reply: M = getattr(stub, method)(
                    request, timeout=self.timeout_s, metadata=self._metadata
                )
                return reply
            except grpc.RpcError as err:
                last = self._verdict(err)
            if (wait := self._retry_wait(attempt)) is not None:
                time.sleep(wait)
        raise RewardServiceUnavailable(self.addresses, self.retry.attempts, last)

    def score(self, request: reward_pb2.ScoreRequest) -> RewardResult:
        """One request; ``InvalidInput`` when the service answers INVALID_ARGUMENT,
        ``RewardServiceUnavailable`` once the retries are spent."""
        return to_result(self._call("Score", request, reward_pb2.ScoreResponse))

    def score_batch(self, requests: Sequence[reward_pb2.ScoreRequest]) -> list[RewardResult]:
        """One ``ScoreBatch`` call; results in request order (errors as ``score``)."""
        batch = reward_pb2.ScoreBatchRequest(requests=list(requests))
        resp = self._call("ScoreBatch", batch, reward_pb2.ScoreBatchResponse)
        return [to_result(r) for r in resp.responses]

    def score_verl(self, row: Mapping[str, Any]) -> RewardResult:
        """Score one verl-style mapping; bad input comes back as status ``invalid_input``."""
        try:
            return self.score(verl_request(row))
        except InvalidInput as exc:
            return failed(Status.INVALID_INPUT, str(exc))

    def score_verl_batch(self, rows: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """Score verl-style mappings in one call (bad requests fail the whole batch)."""
        return self.score_batch([verl_request(r, str(i)) for i, r in enumerate(rows)])

    def score_frames(
        self,
        pred: np.ndarray,
        target: np.ndarray,
        previous_frame: np.ndarray | None = None,
        **kw: Any,
    ) -> RewardResult:
        """Score predicted frames against ``target`` (``frames_request``'s arguments)."""
        return self.score(frames_request(pred, target, previous_frame, **kw))

    def close(self) -> None:
        """Close every channel; calls after it fail."""
        for ch in self._channels:
            ch.close()

    def __enter__(self) -> RewardClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRewardClient(_Base[grpc.aio.Channel]):
    """asyncio client (``grpc.aio``); create and use it inside one event loop."""

    def _channel(self, target: str) -> grpc.aio.Channel:
        creds = self.auth.credentials()
        if creds is not None:
            return grpc.aio.secure_channel(target, creds, options=self._options)
        return grpc.aio.insecure_channel(target, options=self._options)

    async def _call(self, method: str, request: Message, response: type[M]) -> M:
        """``method``'s reply, retried on the next address per ``retry``; ``response`` is the
        reply's message type, for the type checker (the stub decodes the reply)."""
        last: grpc.RpcError | None = None
        for attempt in range(self.retry.attempts):
            stub = self._stubs[self._pick()]
            try:
                reply: M = await getattr(stub, method)(
                    request, timeout=self.timeout_s, metadata=self._metadata
                )
                return reply
            except grpc.RpcError as err:
                last = self._verdict(err)
            if (wait := self._retry_wait(attempt)) is not None:
                await asyncio.sleep(wait)
        raise RewardServiceUnavailable(self.addresses, self.retry.attempts, last)

    async def score(self, request: reward_pb2.ScoreRequest) -> RewardResult:
        """``RewardClient.score``, awaited."""
        return to_result(await self._call("Score", request, reward_pb2.ScoreResponse))

    async def score_batch(self, requests: Sequence[reward_pb2.ScoreRequest]) -> list[RewardResult]:
        """``RewardClient.score_batch``, awaited."""
        batch = reward_pb2.ScoreBatchRequest(requests=list(requests))
        resp = await self._call("ScoreBatch", batch, reward_pb2.ScoreBatchResponse)
        return [to_result(r) for r in resp.responses]

    async def score_verl(self, row: Mapping[str, Any]) -> RewardResult:
        """``RewardClient.score_verl``, awaited."""
        try:
            return await self.score(verl_request(row))
        except InvalidInput as exc:
            return failed(Status.INVALID_INPUT, str(exc))

    async def score_frames(
        self,
        pred: np.ndarray,
        target: np.ndarray,
        previous_frame: np.ndarray | None = None,
        **kw: Any,
    ) -> RewardResult:
        """``RewardClient.score_frames``, awaited."""
        return await self.score(frames_request(pred, target, previous_frame, **kw))

    async def score_stream(
        self, requests: Iterable[reward_pb2.ScoreRequest]
    ) -> AsyncIterator[reward_pb2.ScoreResponse]:
        """Pipelined scoring over one stream (no retry); responses in completion order."""
        stub = self._stubs[self._pick()]
        call = stub.ScoreStream(iter(requests), timeout=self.timeout_s, metadata=self._metadata)
        async for resp in call:
            yield resp

    async def close(self) -> None:
        """Close every channel; calls after it fail."""
        for ch in self._channels:
            await ch.close()

    async def __aenter__(self) -> AsyncRewardClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
