"""The service scaffold's pure parts: the token check, the bind rule, settings, the CLI table and
the client credentials."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlvr_world.scaffold.auth import bearer_matches
from rlvr_world.scaffold.cli import COMMON_OPTIONS
from rlvr_world.scaffold.client_auth import ClientAuth, ensure_local_token
from rlvr_world.scaffold.grpc_server import ServesGrpc
from rlvr_world.scaffold.metrics import GrpcMetrics
from rlvr_world.scaffold.settings import InsecureBind, ServiceSettings, is_loopback
from services.decoder.settings import DecoderSettings
from services.reward.settings import RewardSettings
from services.rollout.cli import COMMAND as ROLLOUT
from services.rollout.settings import RolloutSettings


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret", True),
        ("bearer s3cret", True),  # RFC 7235: the scheme is case-insensitive
        ("BEARER s3cret", True),
        ("  Bearer   s3cret  ", True),
        (b"Bearer s3cret", True),
        ("Bearer s3cre", False),
        ("Bearer s3cret2", False),
        ("Basic s3cret", False),
        ("s3cret", False),
        ("", False),
        (None, False),
        ("Bearer \udcff", False),  # not encodable as it came: compared, refused, no exception
    ],
)
def test_bearer_matches(header: str | bytes | None, ok: bool) -> None:
    assert bearer_matches(header, "s3cret") is ok


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.7", False),
        ("reward.internal", False),  # a name may resolve anywhere
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_service_beyond_loopback_without_credentials_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("RLVR_API_TOKEN", raising=False)
    monkeypatch.delenv("RLVR_ALLOW_INSECURE_BIND", raising=False)
    with pytest.raises(InsecureBind, match=r"refusing to bind 0\.0\.0\.0.*RLVR_REWARD_API_TOKEN"):
        RewardSettings(host="0.0.0.0", workers=1).check_exposure("reward")
    RewardSettings(host="127.0.0.1", workers=1).check_exposure("reward")  # loopback: fine
    RewardSettings(host="0.0.0.0", workers=1, api_token="t").check_exposure("reward")
    with caplog.at_level(logging.WARNING):
        DecoderSettings(tokenizer="t", host="0.0.0.0", allow_insecure_bind=True).check_exposure(
            "decoder"
        )
    assert "WITHOUT credentials" in caplog.text
    monkeypatch.setenv("RLVR_ALLOW_INSECURE_BIND", "1")
    RolloutSettings(model="m", host="0.0.0.0").check_exposure("rollout")


def test_mtls_counts_as_credentials_and_needs_a_certificate(tmp_path: Path) -> None:
    pem = tmp_path / "x.pem"
    pem.write_text("x")
    s = RewardSettings(host="0.0.0.0", workers=1, tls_cert=pem, tls_key=pem, tls_client_ca=pem)
    s.check_exposure("reward")
    assert s.auth_summary() == "mTLS, TLS"
    with pytest.raises(ValueError, match="tls_client_ca"):
        RewardSettings(workers=1, tls_client_ca=pem)
    with pytest.raises(ValueError, match="tls_cert and tls_key"):
        DecoderSettings(tokenizer="t", tls_cert=pem)


def test_the_shared_token_applies_where_the_service_has_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLVR_API_TOKEN", "shared")
    assert RewardSettings(workers=1).token() == "shared"
    monkeypatch.setenv("RLVR_DECODER_API_TOKEN", "own")
    assert DecoderSettings(tokenizer="t").token() == "own"
    assert RewardSettings(workers=1).auth_summary() == "token, plaintext"


def test_every_service_takes_the_common_options() -> None:
    parser = argparse.ArgumentParser()
    ROLLOUT.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "serve",
            "rollout",
            "--model",
            "m",
            "--host",
            "0.0.0.0",
            "--allow-insecure-bind",
            "--weights-root",
            "/a",
            "--weights-root",
            "/b",
            "--grace-s",
            "3",
        ]
    )
    settings = ROLLOUT.settings_from_args(args)
    assert settings.allow_insecure_bind is True and settings.grace_s == 3
    assert settings.weights_roots == [Path("/a"), Path("/b")]
    flags = {flag for flag, _, _, _ in COMMON_OPTIONS}
    assert {"--tls-client-ca", "--allow-insecure-bind", "--host"} <= flags
    assert issubclass(RolloutSettings, ServiceSettings)


def test_metrics_port_is_one_setting_of_the_services_with_a_metrics_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLVR_DECODER_METRICS_PORT", "9101")
    monkeypatch.setenv("RLVR_ROLLOUT_METRICS_PORT", "9102")
    assert DecoderSettings(tokenizer="t").metrics_port == 9101
    assert RolloutSettings(model="m").metrics_port == 9102
    assert "metrics_port" not in RewardSettings.model_fields  # its metrics are on the HTTP port
    with pytest.raises(ValidationError, match="metrics_port"):
        DecoderSettings(tokenizer="t", metrics_port=65536)
    metrics = GrpcMetrics("rlvr_test", lambda method, req, resp: 0, "tokens", "tokens")
    assert metrics.start_http("127.0.0.1", None) == (None, None)  # unset: no server


class _Running(ServesGrpc):
    """A service whose drain only records the grace it was given."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.drained: list[float] = []

    async def drain(self, grace_s: float) -> None:
        self.drained.append(grace_s)


def test_stop_drains_with_the_settings_grace_and_logs_under_the_service(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = _Running(ServiceSettings(grace_s=7.0))
    with caplog.at_level(logging.INFO):
        asyncio.run(service.stop())
        asyncio.run(service.stop(0.5))
    assert service.drained == [7.0, 0.5]
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        (__name__, "draining (grace 7.0s)"),
        (__name__, "stopped"),
        (__name__, "draining (grace 0.5s)"),
        (__name__, "stopped"),
    ]


def test_weights_roots_from_the_environment_split_on_colons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLVR_ROLLOUT_WEIGHTS_ROOTS", "/runs:/more")
    assert RolloutSettings(model="m").weights_roots == [Path("/runs"), Path("/more")]


def test_client_auth_reads_the_environment_and_explicit_values_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLVR_REWARD_API_TOKEN", raising=False)
    monkeypatch.setenv("RLVR_API_TOKEN", "shared")
    assert ClientAuth.from_env().metadata == (("authorization", "Bearer shared"),)
    monkeypatch.setenv("RLVR_REWARD_API_TOKEN", "own")
    assert ClientAuth.from_env(token_envs=("RLVR_REWARD_API_TOKEN",)).token == "own"
    assert ClientAuth.from_env("given").token == "given"
    assert ClientAuth().metadata == () and ClientAuth().credentials() is None
    with pytest.raises(ValueError, match="together"):
        ClientAuth(client_cert=Path("c.pem"))


def test_ensure_local_token_keeps_one_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLVR_API_TOKEN", raising=False)
    first = ensure_local_token()
    assert len(first) >= 32 and ensure_local_token() == first
