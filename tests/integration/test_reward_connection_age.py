"""``RewardSettings.max_connection_age_s``: the server closes each client connection after that
long (HTTP/2 GOAWAY), the client's channel goes IDLE and the next call connects again (and, for
a ``dns:///`` target, resolves the name again: how a client connected before a scale-up reaches
the new replicas; the deployment test shows that part on a real compose network).

Real reward service on a loopback port, real gRPC channel; synchronised on the channel's own
connectivity events, with generous bounded waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from pydantic import ValidationError

from rlvr_world.client import verl_request
from rlvr_world.v1 import reward_pb2_grpc
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread

pytestmark = pytest.mark.integration

WEB = {
    "data_source": "web_agent",
    "solution_str": "New items:\nNone",
    "ground_truth": "New items:\nNone",
}


def test_the_setting_becomes_the_grpc_server_option(monkeypatch: pytest.MonkeyPatch) -> None:
    assert RewardSettings().grpc_server_options() == []
    assert RewardSettings(max_connection_age_s=30).grpc_server_options() == [
        ("grpc.max_connection_age_ms", 30_000)
    ]
    assert RewardSettings(max_connection_age_s=0.0001).grpc_server_options() == [
        ("grpc.max_connection_age_ms", 1)
    ]
    monkeypatch.setenv("RLVR_REWARD_MAX_CONNECTION_AGE_S", "2.5")
    assert RewardSettings().grpc_server_options() == [("grpc.max_connection_age_ms", 2500)]


@pytest.mark.parametrize("bad", [0, -1, 86_401, "soon"])
def test_a_bad_age_is_refused_with_the_field_named(bad: object) -> None:
    with pytest.raises(ValidationError, match="max_connection_age_s"):
        RewardSettings(max_connection_age_s=bad)


class States:
    """Connectivity states of a channel, in order, with an event per new state."""

    def __init__(self) -> None:
        self.seen: list[grpc.ChannelConnectivity] = []
        self.changed = threading.Condition()

    def __call__(self, state: grpc.ChannelConnectivity) -> None:
        with self.changed:
            self.seen.append(state)
            self.changed.notify_all()

    def wait_for(self, state: grpc.ChannelConnectivity, after: int, timeout_s: float) -> int:
        """Index of the first ``state`` seen at or after index ``after``."""
        with self.changed:
            ok = self.changed.wait_for(lambda: state in self.seen[after:], timeout=timeout_s)
            assert ok, f"no {state.name} after {self.seen[after:]}"
            return self.seen.index(state, after)


@pytest.fixture(scope="module")
def aged() -> Iterator[ServiceThread]:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, max_connection_age_s=0.5)
    with ServiceThread(settings) as service:
        yield service


def test_connections_are_closed_at_their_age_and_calls_keep_succeeding(
    aged: ServiceThread,
) -> None:
    states = States()
    with grpc.insecure_channel(aged.grpc_address) as channel:
        channel.subscribe(states, try_to_connect=True)
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        at = 0
        for _ in range(3):  # three connections in turn, each closed by the server at its age
            assert stub.Score(verl_request(WEB), timeout=60).reward == 1.0
            ready = states.wait_for(grpc.ChannelConnectivity.READY, at, 60)
            at = states.wait_for(grpc.ChannelConnectivity.IDLE, ready, 60) + 1
        assert stub.Score(verl_request(WEB), timeout=60).reward == 1.0
        channel.unsubscribe(states)
