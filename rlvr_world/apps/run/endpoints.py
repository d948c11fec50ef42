"""Where a deployed run's services and Redis are: flags first, then the environment.

``rlvr-world orchestrate`` (and whatever else runs against services it did not start) takes the
rollout, decoder and reward addresses (``host:port``, a comma-separated list, or
``dns:///name:port`` for every replica of a scaled service) and the Redis URL from its flags or
from ``RLVR_ORCHESTRATOR_ROLLOUT``, ``RLVR_ORCHESTRATOR_DECODER``, ``RLVR_ORCHESTRATOR_REWARD``
and ``RLVR_REDIS_URL`` (not ``RLVR_<SERVICE>_*``: those name a service's own settings). A
missing one is an ``EndpointError`` naming the flag and the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The environment variable of each address, by flag name.
ENV: dict[str, str] = {
    "rollout": "RLVR_ORCHESTRATOR_ROLLOUT",
    "decoder": "RLVR_ORCHESTRATOR_DECODER",
    "reward": "RLVR_ORCHESTRATOR_REWARD",
    "redis": "RLVR_REDIS_URL",
}


class EndpointError(ValueError):
    """An address that is given nowhere."""


@dataclass(frozen=True)
class Endpoints:
    """The three services' gRPC addresses and the Redis URL."""

    rollout: str
    decoder: str
    reward: str
    redis: str


def endpoints(flags: Mapping[str, str | None], environ: Mapping[str, str]) -> Endpoints:
    """The addresses from ``flags`` (by name), else ``environ``; ``EndpointError`` naming every
    one that is missing."""
    found = {name: flags.get(name) or environ.get(env, "") for name, env in ENV.items()}
    missing = [f"--{name} (or ${ENV[name]})" for name, value in found.items() if not value]
    if missing:
        raise EndpointError("no address for " + ", ".join(missing))
    return Endpoints(**found)
