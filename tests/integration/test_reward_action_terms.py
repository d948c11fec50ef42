"""The ``idm`` and ``state`` video weights through real reward services on loopback.

A small IDM is trained here on real PushT recordings (the project's recorder, deterministic by
seed; 32x32 frames, frame_skip 4, agent_relative moves of +-128 arena pixels, as
``configs/video/pusht_skip.yaml`` forms them) and saved to a temporary folder; the service is
started with it (``idm_path``). On held-out episodes the true next frames score better than
copied frames (the context frame repeated) on both terms, single-step (a ``ScoreBatch`` of every
held-out step) and multi-step (whole episodes, ``aggregation: mean``), over gRPC, HTTP JSON and
HTTP ``.npz``, and the service's reward is the in-process ``score_video`` with the same IDM.
Every bad input is refused over the three, naming the field; a bad ``idm_path`` stops the start.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import pytest

pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")

from rlvr_world.client import RewardClient, frames_request, verl_request
from rlvr_world.rewards.types import InvalidInput, Status
from rlvr_world.rewards.video import VideoRewardConfig, score_video
from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc
from services.reward.models import IdmUnavailable
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows

pytestmark = pytest.mark.integration

SIDE, SKIP, EPISODES, STEPS, HELD_OUT = 32, 4, 32, 40, 4
RANGE = 128.0
BOTH = {"idm": 1.0, "state": 1.0}
IDM_SETTING = "idm_path (RLVR_REWARD_IDM_PATH, --idm-path)"


@dataclass(frozen=True)
class Clip:
    """One episode at the model's steps: ``frames[j + 1]`` follows ``frames[j]`` under
    ``actions[j]`` (agent_relative), and ``states[j]`` is the true state in ``frames[j + 1]``."""

    frames: np.ndarray
    actions: np.ndarray
    states: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.actions)


def model_steps(rec: Any, offset: int = 0) -> Clip:
    from rlvr_world.video.data import resize_episode

    frames = resize_episode(rec.to_episode(), SIDE).frames
    idx = np.arange(offset, rec.actions.shape[0] + 1, SKIP)
    actions = rec.actions[idx[1:] - 1].astype(np.float64) - rec.agent_pos[idx[:-1]]
    states = np.concatenate([rec.agent_pos[idx[1:]], rec.block_pose[idx[1:]]], axis=1)
    return Clip(frames[idx], actions, states)


@pytest.fixture(scope="module")
def held_out(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Clip]]:
    """Train the IDM on the first episodes (every start offset) and save it; yield the
    held-out episodes (their own spans). The folder is ``IDM_DIR`` below."""
    import torch

    from rlvr_world.video.idm import IdmConfig, InverseDynamicsModel, fit_idm
    from rlvr_world.video.pusht import generate_pusht

    recs = generate_pusht(EPISODES, STEPS, seed=3)
    train = [model_steps(r, o) for r in recs[:-HELD_OUT] for o in range(SKIP)]
    config = IdmConfig(
        image_size=(SIDE, SIDE),
        action_dims=2,
        action_ranges=((-RANGE, RANGE), (-RANGE, RANGE)),
        action_form="agent_relative",
        frame_skip=SKIP,
        channels=(16, 32, 32),
        hidden=64,
    )
    torch.manual_seed(0)
    idm = InverseDynamicsModel(config)
    fit_idm(
        idm,
        np.concatenate([c.frames[:-1] for c in train]),
        np.concatenate([c.frames[1:] for c in train]),
        np.concatenate([c.actions for c in train]),
        steps=1500,
        batch_size=32,
        lr=2e-3,
        seed=0,
    )
    folder = tmp_path_factory.mktemp("idm")
    idm.save(folder)
    IDM_DIR.append(folder)
    yield [model_steps(r) for r in recs[-HELD_OUT:]]


IDM_DIR: list[Path] = []


def settings(**kw: Any) -> RewardSettings:
    base: dict[str, Any] = {
        "grpc_port": 0,
        "http_port": 0,
        "workers": 1,
        "max_batch": 128,
        "max_payload_bytes": 8 << 20,
        "perceptual_device": "cpu",
        "perceptual_max_wait_ms": 20,
    }
    return RewardSettings(**{**base, **kw})


@pytest.fixture(scope="module")
def svc(held_out: list[Clip]) -> Iterator[ServiceThread]:
    with ServiceThread(settings(idm_path=IDM_DIR[0])) as service:
        yield service


@pytest.fixture(scope="module")
def stub(svc: ServiceThread) -> Iterator[reward_pb2_grpc.RewardServiceStub]:
    with grpc.insecure_channel(svc.grpc_address) as channel:
        yield reward_pb2_grpc.RewardServiceStub(channel)


@pytest.fixture(scope="module")
def http(svc: ServiceThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=svc.http_url, timeout=120) as client:
        yield client


# ------------------------------------------------------------------ requests in three forms


@dataclass
class Req:
    """One video request, sent as a proto, a JSON body or an ``.npz`` body."""

    pred: np.ndarray
    target: np.ndarray
    previous: np.ndarray | None
    weights: dict[str, float]
    actions: np.ndarray | None = None
    states: np.ndarray | None = None
    aggregation: str = "mean"

    def proto(self, request_id: str = "") -> reward_pb2.ScoreRequest:
        return frames_request(
            self.pred,
            self.target,
            self.previous,
            weights=self.weights,
            aggregation=self.aggregation,
            request_id=request_id,
            actions=self.actions,
            states=self.states,
        )

    def json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "task": "video",
            "options": {"video": {"weights": self.weights, "aggregation": self.aggregation}},
        }
        arrays = {
            "frames": self.pred,
            "target_frames": self.target,
            "previous_frame": self.previous,
            "actions": self.actions,
            "states": self.states,
        }
        for name, arr in arrays.items():
            if arr is not None:
                body[name] = {
                    "data": base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode(),
                    "shape": list(arr.shape),
                    "dtype": arr.dtype.name,
                }
        return body

    def npz(self) -> bytes:
        members = {
            "frames": self.pred,
            "target_frames": self.target,
            "previous_frame": self.previous,
            "actions": self.actions,
            "states": self.states,
        }
        meta = {"options": {"video": {"weights": self.weights, "aggregation": self.aggregation}}}
        buf = io.BytesIO()
        np.savez(
            buf,
            request=np.array(json.dumps(meta)),
            **{k: v for k, v in members.items() if v is not None},
        )
        return buf.getvalue()


def true_and_copied(clip: Clip, weights: dict[str, float] = BOTH) -> tuple[Req, Req]:
    """The whole episode predicted: the true frames, and the context frame copied each step."""
    truth = clip.frames[1:]
    copied = np.repeat(clip.frames[:1], clip.steps, axis=0)
    return (
        Req(truth, truth, clip.frames[0], weights, clip.actions, clip.states),
        Req(copied, truth, clip.frames[0], weights, clip.actions, clip.states),
    )


def single_steps(clips: list[Clip]) -> tuple[list[Req], list[Req]]:
    """Every held-out step as its own request: the true next frame, and the previous copied."""
    truth, copied = [], []
    for c in clips:
        for j in range(c.steps):
            prev, nxt = c.frames[j], c.frames[j + 1 : j + 2]
            acts, sts = c.actions[j : j + 1], c.states[j : j + 1]
            truth.append(Req(nxt, nxt, prev, BOTH, acts, sts))
            copied.append(Req(prev[None], nxt, prev, BOTH, acts, sts))
    return truth, copied


def post_npz(http: httpx.Client, req: Req) -> httpx.Response:
    return http.post(
        "/v1/score/npz", content=req.npz(), headers={"content-type": "application/x-npz"}
    )


def means(metrics: list[dict[str, float]], name: str) -> float:
    return float(np.mean([m[name] for m in metrics]))


# ------------------------------------------------------------------ true frames beat copies


def assert_true_beats_copy(truth: list[dict[str, Any]], copied: list[dict[str, Any]]) -> None:
    """Each term separately, and the reward (their sum): lower error for the true frames."""
    tm, cm = [r["metrics"] for r in truth], [r["metrics"] for r in copied]
    assert means(tm, "idm_error") < means(cm, "idm_error"), (tm, cm)
    assert means(tm, "idm_acc") > means(cm, "idm_acc")
    assert means(tm, "state_error") < means(cm, "state_error")
    assert means(tm, "agent_error_px") < 12.0 < means(cm, "agent_error_px")
    assert means(tm, "state_missing") == 0.0
    for r in truth + copied:
        assert r["reward"] == pytest.approx(
            -(r["metrics"]["idm_error"] + r["metrics"]["state_error"]), rel=1e-9
        )


def as_dict(result: Any) -> dict[str, Any]:
    assert result.status is Status.OK, result.message
    return {"reward": result.reward, "metrics": dict(result.metrics)}


def test_single_steps_over_grpc_batch(svc: ServiceThread, held_out: list[Clip]) -> None:
    truth, copied = single_steps(held_out)
    reqs = [r.proto(str(i)) for i, r in enumerate(truth + copied)]
    with RewardClient(svc.grpc_address, timeout_s=120) as client:
        results = [as_dict(r) for r in client.score_batch(reqs)]
    assert len(results) == 2 * len(truth) == 2 * HELD_OUT * STEPS // SKIP
    assert_true_beats_copy(results[: len(truth)], results[len(truth) :])
    # every read step went through the IDM's batcher, once
    text = httpx.get(f"{svc.http_url}/metrics").text
    summed = re.search(r"^rlvr_reward_idm_batch_size_sum (\S+)$", text, re.M)
    assert summed is not None and float(summed.group(1)) >= 2 * len(truth)


def test_single_steps_over_http_batch(http: httpx.Client, held_out: list[Clip]) -> None:
    truth, copied = single_steps(held_out[:2])
    resp = http.post("/v1/score/batch", json={"requests": [r.json() for r in truth + copied]})
    assert resp.status_code == 200, resp.text
    out = resp.json()["responses"]
    assert all(r["status"] == "ok" for r in out)
    assert_true_beats_copy(out[: len(truth)], out[len(truth) :])


@pytest.mark.parametrize("transport", ["grpc", "json", "npz"])
def test_whole_episodes_multi_step(
    transport: str, stub: Any, http: httpx.Client, held_out: list[Clip]
) -> None:
    truth, copied = [], []
    for clip in held_out:
        for req, out in zip(true_and_copied(clip), (truth, copied), strict=True):
            if transport == "grpc":
                resp = stub.Score(req.proto(), timeout=120)
                assert resp.status == common_pb2.REWARD_STATUS_OK, resp.message
                out.append({"reward": resp.reward, "metrics": dict(resp.metrics)})
            else:
                if transport == "json":
                    answer = http.post("/v1/score", json=req.json())
                else:
                    answer = post_npz(http, req)
                assert answer.status_code == 200 and answer.json()["status"] == "ok", answer.text
                out.append(answer.json())
    assert_true_beats_copy(truth, copied)
    # each episode on its own, too: its true frames read better than its copies
    for t, c in zip(truth, copied, strict=True):
        assert t["metrics"]["idm_error"] < c["metrics"]["idm_error"]
        assert t["metrics"]["state_error"] < c["metrics"]["state_error"]
        assert t["metrics"]["n_frames"] == STEPS // SKIP


def test_the_service_reward_is_score_video_with_the_same_idm(
    stub: Any, held_out: list[Clip]
) -> None:
    from rlvr_world.video.idm import load_idm

    idm = load_idm(IDM_DIR[0], "cpu")
    weights = {"l1": 1.0, "idm": 0.5, "state": 2.0}
    for req in true_and_copied(held_out[0], weights):
        resp = stub.Score(req.proto(), timeout=120)
        core = score_video(
            req.pred,
            req.target,
            VideoRewardConfig(weights=weights),
            previous_frame=req.previous,
            actions=req.actions,
            states=req.states,
            idm=idm,
        )
        assert resp.status == common_pb2.REWARD_STATUS_OK and core.ok
        assert resp.reward == pytest.approx(core.reward, rel=1e-5)
        assert dict(resp.metrics) == pytest.approx(dict(core.metrics), rel=1e-5, abs=1e-9)


def test_weight_zero_reports_the_terms_and_leaves_the_reward(
    stub: Any, held_out: list[Clip]
) -> None:
    truth, _ = true_and_copied(held_out[1])
    plain = Req(truth.pred, truth.target, truth.previous, {"l1": 1.0})
    measured = Req(**{**vars(truth), "weights": {"l1": 1.0, "idm": 0.0, "state": 0.0}})
    a, b = stub.Score(plain.proto(), timeout=60), stub.Score(measured.proto(), timeout=60)
    assert a.reward == b.reward == 0.0  # target = prediction: l1 is 0
    assert "idm_error" not in a.metrics and "idm_error" in b.metrics
    assert {"idm_acc", "agent_error_px", "block_error_px", "state_missing"} <= set(b.metrics)


# ------------------------------------------------------------------ bad input, three transports


def bad_cases(clip: Clip) -> dict[str, tuple[Req, str]]:
    truth, _ = true_and_copied(clip)
    t = clip.steps
    small = clip.frames[:, ::2, ::2]
    grey = clip.frames[..., :1]
    nan_actions = clip.actions.copy()
    nan_actions[2, 1] = np.nan
    nan_states = clip.states.copy()
    nan_states[0, 4] = np.inf

    def with_(**kw: Any) -> Req:
        return Req(**{**vars(truth), **kw})

    return {
        "idm without actions": (
            with_(actions=None),
            r"^actions: required with options.video.weights 'idm'",
        ),
        "actions of another dimension": (
            with_(actions=np.zeros((t, 3))),
            rf"^actions.shape: \({t}, 3\); the service's IDM reads actions of dimension 2",
        ),
        "actions of another count": (
            with_(actions=clip.actions[:-1]),
            rf"^actions.shape: {t - 1} rows for {t} predicted frames",
        ),
        "NaN in actions": (with_(actions=nan_actions), r"^actions.data: contains NaN"),
        "idm without previous_frame": (
            with_(previous=None),
            r"^previous_frame: required with options.video.weights 'idm'",
        ),
        "frames of another size": (
            with_(pred=small[1:], target=small[1:], previous=small[0]),
            r"^frames.shape: \(10, 16, 16, 3\); the service's IDM reads RGB frames of 32x32",
        ),
        "grey frames": (
            with_(pred=grey[1:], target=grey[1:], previous=grey[0]),
            r"^frames.shape: \(10, 32, 32, 1\); the service's IDM reads RGB frames of 32x32",
        ),
        "state without states": (
            with_(states=None),
            r"^states: required with options.video.weights 'state'",
        ),
        "states not (T, 5)": (
            with_(states=clip.states[:, :4]),
            r"^states.shape: expected \(T, 5\)",
        ),
        "states of another count": (
            with_(states=np.concatenate([clip.states, clip.states[:1]])),
            rf"^states.shape: {t + 1} rows for {t} predicted frames",
        ),
        "NaN in states": (with_(states=nan_states), r"^states.data: contains NaN"),
    }


CASES = [
    "idm without actions",
    "actions of another dimension",
    "actions of another count",
    "NaN in actions",
    "idm without previous_frame",
    "frames of another size",
    "grey frames",
    "state without states",
    "states not (T, 5)",
    "states of another count",
    "NaN in states",
]


def assert_refused(req: Req, message: str, stub: Any, http: httpx.Client, prefix: str = "") -> None:
    """``INVALID_ARGUMENT`` over gRPC, 422 over JSON and ``.npz``, each naming the field."""
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(req.proto(), timeout=60)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert re.search(message, err.value.details()), err.value.details()
    for answer in (http.post("/v1/score", json=req.json()), post_npz(http, req)):
        assert answer.status_code == 422, answer.text
        assert re.search(message, answer.json()["detail"]), answer.json()


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_naming_the_field(
    case: str, stub: Any, http: httpx.Client, held_out: list[Clip]
) -> None:
    req, message = bad_cases(held_out[0])[case]
    assert_refused(req, message, stub, http)


def test_a_bad_request_in_a_batch_or_a_stream(
    svc: ServiceThread, stub: Any, http: httpx.Client, held_out: list[Clip]
) -> None:
    good, _ = true_and_copied(held_out[0])
    bad, _ = bad_cases(held_out[0])["actions of another dimension"]
    with RewardClient(svc.grpc_address) as client, pytest.raises(InvalidInput) as err:
        client.score_batch([good.proto("a"), bad.proto("b")])
    assert str(err.value).startswith("requests[1].actions.shape: (10, 3)")
    answer = http.post("/v1/score/batch", json={"requests": [good.json(), bad.json()]})
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith("requests[1].actions.shape: (10, 3)")
    streamed = {r.request_id: r for r in stub.ScoreStream(iter([good.proto("a"), bad.proto("b")]))}
    assert streamed["a"].status == common_pb2.REWARD_STATUS_OK
    assert streamed["b"].status == common_pb2.REWARD_STATUS_INVALID_INPUT
    assert streamed["b"].message.startswith("actions.shape: (10, 3)")


def test_text_tasks_take_no_actions_or_states(stub: Any, http: httpx.Client) -> None:
    row = example_rows("web_agent")[0]
    req = verl_request(row)
    req.states.CopyFrom(frames_request(np.zeros((1, 2, 2, 3)), np.zeros((1, 2, 2, 3))).frames)
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(req, timeout=30)
    assert err.value.details() == "states: only task video takes states, not web"
    body = {"task": "web", "text": row["solution_str"], "ground_truth": row["ground_truth"]}
    body["actions"] = Req(np.zeros((1, 2, 2, 3)), np.zeros((1, 2, 2, 3)), None, {}).json()["frames"]
    answer = http.post("/v1/score", json=body)
    assert answer.status_code == 422
    assert answer.json()["detail"] == "actions: only task video takes actions, not web"


def test_an_idm_weight_on_a_service_without_an_idm(held_out: list[Clip]) -> None:
    """The message says which setting loads one; the other terms still work there."""
    truth, _ = true_and_copied(held_out[0])
    with (
        ServiceThread(settings()) as bare,
        grpc.insecure_channel(bare.grpc_address) as channel,
        httpx.Client(base_url=bare.http_url, timeout=60) as http,
    ):
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        message = (
            r"^options.video.weights: 'idm' needs an inverse-dynamics model and this service "
            rf"has none loaded; start it with {re.escape(IDM_SETTING)}"
        )
        assert_refused(truth, message, stub, http)
        state_only = Req(**{**vars(truth), "weights": {"state": 1.0}})
        resp = stub.Score(state_only.proto(), timeout=60)
        assert resp.status == common_pb2.REWARD_STATUS_OK, resp.message
        assert resp.reward == pytest.approx(-resp.metrics["state_error"])


# ------------------------------------------------------------------ a bad idm_path


def test_a_bad_idm_path_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"kind": "video_tokenizer"}))
    for path, why in (
        (tmp_path / "missing", "does not exist"),
        (tmp_path / "other", "is not an IDM folder"),
    ):
        service = ServiceThread(settings(idm_path=path))
        try:
            with pytest.raises(IdmUnavailable) as err:
                service.start()
        finally:
            service.stop()
        assert str(err.value).startswith(f"{IDM_SETTING} = {path}: ")
        assert why in str(err.value)


@pytest.mark.parametrize("given_by", ["flag", "env"])
def test_the_command_exits_2_naming_the_setting(given_by: str, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--workers", "1"]
    if given_by == "flag":
        args += ["--idm-path", str(tmp_path / "nope")]
    else:
        env["RLVR_REWARD_IDM_PATH"] = str(tmp_path / "nope")
    done = subprocess.run(
        [sys.executable, "-m", "services.reward", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"reward service not started: {IDM_SETTING} = {tmp_path / 'nope'}" in done.stderr
    assert "Traceback" not in done.stderr
