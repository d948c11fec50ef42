"""Settings every service shares, and the rule for binding beyond loopback.

``ServiceSettings`` is the base of each service's pydantic-settings class (which sets its own
``env_prefix``, e.g. ``RLVR_REWARD_``); ``GrpcMetricsSettings`` adds ``metrics_port`` for the
services whose metrics have a port of their own. Credentials:

- ``api_token``: clients must send ``authorization: Bearer <token>``; unset, the shared
  ``RLVR_API_TOKEN`` applies (one variable for a whole local stack);
- ``tls_cert`` + ``tls_key``: serve over TLS; with ``tls_client_ca`` as well, clients must present
  a certificate signed by that CA (mTLS).

``check_exposure`` refuses to start a service bound beyond loopback (``0.0.0.0``, a LAN address, a
host name other than ``localhost``) that has neither a token nor mTLS, unless
``allow_insecure_bind`` (or ``RLVR_ALLOW_INSECURE_BIND=1``) says otherwise; then it logs a
warning. TLS alone is not a credential: it hides the traffic, not who sends it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)
SHARED_TOKEN_ENV = "RLVR_API_TOKEN"
SHARED_INSECURE_ENV = "RLVR_ALLOW_INSECURE_BIND"
_TRUE = ("1", "true", "yes", "on")


class StartRefused(Exception):
    """A service refuses to start: ``rlvr-world serve X`` logs the reason and exits 2."""


class InsecureBind(StartRefused, ValueError):
    """A service bound beyond loopback without credentials, and no flag allowing it."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    name = host.strip().strip("[]")
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


class ServiceSettings(BaseSettings):
    """Fields of every service; subclasses set ``env_prefix`` and their own defaults."""

    model_config = SettingsConfigDict(extra="ignore")

    host: str = Field(default="127.0.0.1", description="interface the servers bind")
    grpc_port: int = Field(default=0, ge=0, le=65535, description="0 picks a free port")
    max_payload_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        le=2**31 - 1,
        description="largest gRPC message / HTTP body accepted (bigger: RESOURCE_EXHAUSTED / 413)",
    )
    grace_s: float = Field(
        default=10.0, ge=0, le=600, description="SIGTERM: in-flight calls get this long"
    )
    api_token: SecretStr | None = Field(
        default=None,
        description="clients must send 'authorization: Bearer <token>' (unset: RLVR_API_TOKEN)",
    )
    tls_cert: Path | None = Field(default=None, description="PEM certificate: serve over TLS")
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert")
    tls_client_ca: Path | None = Field(
        default=None, description="PEM CA bundle: clients must present a certificate it signed"
    )
    allow_insecure_bind: bool = Field(
        default=False,
        description="start bound beyond loopback with no token and no mTLS (logs a warning)",
    )
    log_level: str = Field(default="INFO", description="logging level of the entrypoint")

    @model_validator(mode="after")
    def _credentials(self) -> ServiceSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key must be set together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca (mTLS) needs tls_cert and tls_key")
        if self.api_token is None and os.environ.get(SHARED_TOKEN_ENV):
            self.api_token = SecretStr(os.environ[SHARED_TOKEN_ENV])
        if os.environ.get(SHARED_INSECURE_ENV, "").strip().lower() in _TRUE:
            self.allow_insecure_bind = True
        return self

    def token(self) -> str | None:
        """The bearer token, or None when token auth is off."""
        if self.api_token is None:
            return None
        return self.api_token.get_secret_value() or None

    @property
    def mtls(self) -> bool:
        """Whether clients must present a certificate (``tls_client_ca`` is set)."""
        return self.tls_client_ca is not None

    def auth_summary(self) -> str:
        """For the ready log line: which credentials are required."""
        parts = [name for name, on in (("token", self.token()), ("mTLS", self.mtls)) if on]
        tls = "TLS" if self.tls_cert is not None else "plaintext"
        return f"{'+'.join(parts) or 'no auth'}, {tls}"

    def check_exposure(self, service: str) -> None:
        """Raise ``InsecureBind`` for a bind beyond loopback without credentials (module doc)."""
        if is_loopback(self.host) or self.token() is not None or self.mtls:
            return
        prefix = str(self.model_config.get("env_prefix", ""))
        if not self.allow_insecure_bind:
            raise InsecureBind(
                f"{service}: refusing to bind {self.host} (beyond loopback) without credentials; "
                f"set {prefix}API_TOKEN or {SHARED_TOKEN_ENV} (clients send it as a bearer token) "
                f"or {prefix}TLS_CLIENT_CA (mTLS), or start with --allow-insecure-bind "
                f"({SHARED_INSECURE_ENV}=1) if the network itself is trusted"
            )
        log.warning(
            "%s: bound to %s WITHOUT credentials (allow_insecure_bind): anyone who reaches this "
            "address can call it",
            service,
            self.host,
        )


class GrpcMetricsSettings(ServiceSettings):
    """``ServiceSettings`` plus the port of the service's ``/metrics`` server
    (``scaffold.metrics.GrpcMetrics``): the decoder and rollout services. The reward service
    serves its metrics on its HTTP gateway instead."""

    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="serve Prometheus /metrics on this port (0: a free one; unset: off)",
    )
