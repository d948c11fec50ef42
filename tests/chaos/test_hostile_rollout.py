"""Attacks on the rollout and decoder services and on the weight-publish path (issue 18, item 1
and item 6), each with the exact answer it must get; and mTLS on every service.

The rollout service follows a real Redis where the "trainer" published version 1; its weights
roots hold the checkpoints. Foreign weights at version 2**62, paths outside the roots, a bad
safetensors header, replayed versions: all refused, the served version unchanged, and a later
``Generate`` that demands a huge version is still refused.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from rlvr_world.queue.server import RedisHandle, start_embedded
from rlvr_world.queue.weights import WEIGHTS_CHANNEL, WEIGHTS_KEY
from rlvr_world.scaffold.client_auth import ClientAuth
from rlvr_world.v1 import decoder_pb2, decoder_pb2_grpc, rollout_pb2, rollout_pb2_grpc
from services.decoder.settings import DecoderSettings
from services.decoder.testing import ServiceThread as DecoderThread
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread as RewardThread
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread as RolloutThread
from services.rollout.weights import NOT_LOADABLE
from tests.chaos.support import Certs
from tests.helpers.tiny_lm import build_tiny_lm, perturbed_checkpoint, tiny_tokenizer
from tests.helpers.waiting import capture_logs, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.chaos]
TOKEN = "rollout-test-token"
AUTH = (("authorization", f"Bearer {TOKEN}"),)
KEY, CHANNEL = WEIGHTS_KEY, WEIGHTS_CHANNEL
OUTSIDE = "path: outside the configured weights roots"


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("rollout")
    model = build_tiny_lm(base / "model")
    roots = base / "runs"
    foreign = base / "foreign"
    perturbed_checkpoint(model, foreign, seed=5)
    perturbed_checkpoint(model, roots / "step_00000001", seed=1)
    perturbed_checkpoint(model, roots / "step_00000002", seed=2)
    bad = roots / "bad_header"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header!!}")
    (roots / "empty").mkdir()
    return {"base": base, "model": model, "roots": roots, "foreign": foreign}


@pytest.fixture(scope="module")
def redis(dirs: dict[str, Path]) -> Iterator[RedisHandle]:
    handle = start_embedded(dirs["base"] / "redis")
    yield handle
    handle.close()


def publish(redis: RedisHandle, version: int, path: Path | str) -> None:
    message = json.dumps({"version": version, "path": str(path), "time": time.time()})
    redis.client.set(KEY, message)
    redis.client.publish(CHANNEL, message)


@pytest.fixture(scope="module")
def svc(dirs: dict[str, Path], redis: RedisHandle) -> Iterator[RolloutThread]:
    publish(redis, 1, dirs["roots"] / "step_00000001")
    settings = RolloutSettings(
        model=str(dirs["model"]),
        grpc_port=0,
        api_token=TOKEN,
        redis_url=redis.url,
        watch_poll_s=0.2,
        weights_roots=[dirs["roots"]],
    )
    with RolloutThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def stub(svc: RolloutThread) -> Iterator[Any]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]


def served(stub: Any) -> int:
    return int(stub.Info(rollout_pb2.EngineInfoRequest(), metadata=AUTH, timeout=30).policy_version)


def refused(stub: Any, version: int, path: Path | str) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadWeights(
            rollout_pb2.LoadWeightsRequest(version=version, path=str(path)),
            metadata=AUTH,
            timeout=60,
        )
    return err.value.code(), str(err.value.details())


def wait_served(stub: Any, version: int) -> None:
    wait_until(lambda: served(stub) == version, f"the service to serve version {version}")


def test_no_token_no_call(svc: RolloutThread, stub: Any) -> None:
    calls = [
        (stub.Info, rollout_pb2.EngineInfoRequest()),
        (stub.LoadWeights, rollout_pb2.LoadWeightsRequest(version=2**62, path="/tmp")),
        (stub.Generate, rollout_pb2.GenerateRequest(text="x")),
    ]
    for call, req in calls:
        for meta in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as err:
                call(req, metadata=meta, timeout=30)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_foreign_future_and_replayed_weights_are_refused(
    svc: RolloutThread, stub: Any, dirs: dict[str, Path], redis: RedisHandle
) -> None:
    wait_served(stub, 1)  # the watcher loaded the published version
    with capture_logs() as logs:
        publish(redis, 3, "/elsewhere/step_00000003")  # the watcher refuses it: outside the roots
        logs.wait_for(r"weights version 3 from /elsewhere/step_00000003 not loaded")
    assert served(stub) == 1
    roots, foreign = dirs["roots"], dirs["foreign"]
    expected = [
        (2**62, foreign, grpc.StatusCode.PERMISSION_DENIED, f"version {2**62}: ahead of the "
         "trainer's latest published version 3"),
        (2, foreign, grpc.StatusCode.PERMISSION_DENIED, OUTSIDE),
        (2, "/nonexistent/dir", grpc.StatusCode.PERMISSION_DENIED, OUTSIDE),
        (2, roots / ".." / "foreign", grpc.StatusCode.PERMISSION_DENIED, OUTSIDE),
        (2, roots / "missing", grpc.StatusCode.NOT_FOUND, NOT_LOADABLE),
        (2, roots / "empty", grpc.StatusCode.NOT_FOUND, NOT_LOADABLE),
        (2, roots / "bad_header", grpc.StatusCode.INVALID_ARGUMENT,
         "checkpoint: model.safetensors is not valid safetensors"),
        (1, roots / "step_00000001", grpc.StatusCode.FAILED_PRECONDITION,
         "version 1: not newer than the served version 1 (versions must strictly increase)"),
        (2, "relative/step", grpc.StatusCode.INVALID_ARGUMENT, "path: must be absolute"),
    ]  # fmt: skip
    for version, path, code, message in expected:
        assert refused(stub, version, path) == (code, message), (version, path)
    assert served(stub) == 1
    params = rollout_pb2.SamplingParams(n=1, max_tokens=4)
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(
            rollout_pb2.GenerateRequest(text="the", sampling=params, min_policy_version=10**12),
            metadata=AUTH,
            timeout=60,
        )
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    loaded = stub.LoadWeights(
        rollout_pb2.LoadWeightsRequest(version=2, path=str(roots / "step_00000002")),
        metadata=AUTH,
        timeout=60,
    )
    assert loaded.version == 2 and served(stub) == 2


def test_malformed_bytes_to_the_rollout_are_invalid_argument(svc: RolloutThread, stub: Any) -> None:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        for method in ("LoadWeights", "Generate"):
            call = channel.unary_unary(f"/rlvr_world.v1.RolloutService/{method}")
            with pytest.raises(grpc.RpcError) as err:
                call(b"\xff\xff\xff", metadata=AUTH, timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert str(err.value.details()).startswith("request: malformed ")


def test_decoder_needs_the_token_and_refuses_malformed_bytes(
    tmp_path: Path,
) -> None:
    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    settings = DecoderSettings(tokenizer=str(tmp_path / "tok"), grpc_port=0, api_token=TOKEN)
    with DecoderThread(settings) as svc, grpc.insecure_channel(svc.grpc_address) as channel:
        stub = decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]
        req = decoder_pb2.DecodeTextRequest(token_ids=[40, 41])
        with pytest.raises(grpc.RpcError) as err:
            stub.DecodeText(req, timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert stub.DecodeText(req, metadata=(("authorization", f"bearer {TOKEN}"),)).text
        raw = channel.unary_unary("/rlvr_world.v1.DecoderService/DecodeText")
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\x0a\x05\xff", metadata=AUTH, timeout=30)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_mtls_admits_only_clients_with_a_certificate(
    certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reward (gRPC and HTTP) and decoder with ``tls_client_ca``: a client with the CA's
    certificate is served, one without is refused at the handshake."""
    for name in ("RLVR_TLS_CLIENT_CERT", "RLVR_TLS_CLIENT_KEY", "RLVR_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    tls = {"tls_cert": certs.server_cert, "tls_key": certs.server_key, "tls_client_ca": certs.ca}
    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    mutual = ClientAuth(root_cert=certs.ca, client_cert=certs.client_cert,
                        client_key=certs.client_key)  # fmt: skip
    one_way = ClientAuth(root_cert=certs.ca)
    dec = DecoderSettings(tokenizer=str(tmp_path / "tok"), grpc_port=0, **tls)
    with DecoderThread(dec) as svc:
        req = decoder_pb2.DecodeTextRequest(token_ids=[40, 41])
        with mutual.channel(svc.grpc_address) as ch:
            stub = decoder_pb2_grpc.DecoderServiceStub(ch)  # type: ignore[no-untyped-call]
            assert stub.DecodeText(req, timeout=30).text
        with one_way.channel(svc.grpc_address) as ch:
            stub = decoder_pb2_grpc.DecoderServiceStub(ch)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as err:
                stub.DecodeText(req, timeout=30)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    rew = RewardSettings(grpc_port=0, http_port=0, workers=1, **tls)
    with RewardThread(rew) as svc:
        assert svc.http_url.startswith("https://")
        with_cert = ssl.create_default_context(cafile=str(certs.ca))
        with_cert.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        ok = httpx.get(f"{svc.http_url}/healthz", verify=with_cert, timeout=30)
        assert ok.status_code == 200
        without = ssl.create_default_context(cafile=str(certs.ca))
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{svc.http_url}/healthz", verify=without, timeout=30)


def test_client_auth_channels_carry_the_token_on_every_call(tmp_path: Path) -> None:
    """Sync and asyncio channels from ``ClientAuth`` need no ``metadata=`` at the call site."""
    import asyncio

    tiny_tokenizer().save_pretrained(tmp_path / "tok")
    settings = DecoderSettings(tokenizer=str(tmp_path / "tok"), grpc_port=0, api_token=TOKEN)
    req = decoder_pb2.DecodeTextRequest(token_ids=[40, 41])
    with DecoderThread(settings) as svc:
        with ClientAuth(token=TOKEN).channel(svc.grpc_address) as channel:
            stub = decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]
            assert stub.DecodeText(req, timeout=30).text

        async def async_call() -> str:
            async with ClientAuth(token=TOKEN).aio_channel(svc.grpc_address) as channel:
                stub = decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]
                return str((await stub.DecodeText(req, timeout=30)).text)

        assert asyncio.run(async_call())
        with ClientAuth(token="wrong").channel(svc.grpc_address) as channel:
            stub = decoder_pb2_grpc.DecoderServiceStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as err:
                stub.DecodeText(req, timeout=30)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
