"""The HTTP gateway against a real uvicorn server on a loopback port 0 (not a test client)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import TOKEN, example_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    settings = RewardSettings(
        grpc_port=0,
        http_port=0,
        workers=1,
        max_batch=16,
        max_payload_bytes=1 << 20,
        preload_perceptual=["stlpips:alex"],
        default_data_source="web_agent",
    )
    with ServiceThread(settings) as service:
        yield service


@pytest.fixture(scope="module")
def http(svc: ServiceThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=svc.http_url, timeout=60) as client:
        yield client


def b64_tensor(arr: np.ndarray) -> dict[str, Any]:
    return {
        "data": base64.b64encode(arr.tobytes()).decode(),
        "shape": list(arr.shape),
        "dtype": arr.dtype.name,
    }


def assert_healthy(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    assert http.get("/readyz").status_code == 200


FRAMES = np.random.default_rng(0).random((2, 32, 32, 3)).astype(np.float32)
TARGET = np.random.default_rng(1).random((2, 32, 32, 3)).astype(np.float32)


# ------------------------------------------------------------------ every task, both forms


def test_verl_style_web_matches_core(http: httpx.Client) -> None:
    for row in example_rows("web_agent"):
        out = http.post("/v1/score", json=row).json()
        core = score_mapping(row).to_dict()
        assert out["reward"] == pytest.approx(core["reward"])
        assert out["status"] == core["status"]
        assert out["metrics"] == pytest.approx(core["metrics"])


def test_typed_web_equals_verl_style(http: httpx.Client) -> None:
    row = example_rows("web_agent")[0]
    typed = {
        "request_id": "t1",
        "task": "web",
        "text": row["solution_str"],
        "ground_truth": row["ground_truth"],
        "options": {"variant": "paper"},
    }
    out = http.post("/v1/score", json=typed).json()
    core = score_mapping({**row, "variant": "paper"})
    assert out["request_id"] == "t1"
    assert out["reward"] == pytest.approx(core.reward)


def test_text_game_both_forms(http: httpx.Client) -> None:
    for row in example_rows("llm_simulator"):
        core = score_mapping(row)
        verl = http.post("/v1/score", json=row).json()
        typed = http.post(
            "/v1/score",
            json={
                "task": "text_game",
                "text": row["solution_str"],
                "ground_truth": row["ground_truth"],
                "extra_info": json.dumps(row["extra_info"]),
                "options": {k: row[k] for k in ("variant", "reward_type") if k in row},
            },
        ).json()
        assert verl["reward"] == typed["reward"] == core.reward
        assert verl["status"] == typed["status"] == core.status.value


def test_video_base64_and_npz_agree(http: httpx.Client) -> None:
    options = {"video": {"weights": {"l1": 1.0, "stlpips": 1.0}, "lpips_net": "alex"}}
    body = {
        "task": "video",
        "frames": b64_tensor(FRAMES),
        "target_frames": b64_tensor(TARGET),
        "options": options,
    }
    js = http.post("/v1/score", json=body).json()
    assert js["status"] == "ok", js
    assert js["metrics"]["l1"] == pytest.approx(np.abs(FRAMES - TARGET).mean(), rel=1e-5)
    buf = io.BytesIO()
    meta = np.array(json.dumps({"request_id": "npz", "options": options}))
    np.savez_compressed(buf, frames=FRAMES, target_frames=TARGET, request=meta)
    binary = http.post(
        "/v1/score/npz", content=buf.getvalue(), headers={"content-type": "application/x-npz"}
    ).json()
    assert binary["request_id"] == "npz"
    assert binary["reward"] == pytest.approx(js["reward"])
    assert binary["metrics"] == pytest.approx(js["metrics"])


def test_video_patch_rewards_over_json_and_npz(http: httpx.Client) -> None:
    """options.video.patch_grid: the per-patch rewards of the in-process scorer, on both bodies.
    A grid that does not split the frames: HTTP 200, status invalid_input with the reason and no
    patch rewards (as over gRPC); a malformed grid (one number, a 0, three numbers): 422 naming
    patch_grid."""
    from rlvr_world.rewards.perceptual import make_perceptual
    from rlvr_world.rewards.video import VideoRewardConfig, score_video

    video = {"weights": {"l1": 1.0, "stlpips": 1.0}, "lpips_net": "alex", "patch_grid": [4, 2]}
    body = video_body(options={"video": video})
    js = http.post("/v1/score", json=body).json()
    assert js["status"] == "ok", js
    config = VideoRewardConfig(
        weights={"l1": 1.0, "stlpips": 1.0}, lpips_net="alex", patch_grid=(4, 2)
    )
    core = score_video(FRAMES, TARGET, config, perceptual=make_perceptual("stlpips", "alex", "cpu"))
    assert len(js["patch_rewards"]) == 2 * 4 * 2
    np.testing.assert_allclose(js["patch_rewards"], core.patch_rewards, rtol=1e-5, atol=1e-7)
    assert np.mean(js["patch_rewards"]) == pytest.approx(js["reward"], rel=1e-6)
    buf = io.BytesIO()
    np.savez(buf, frames=FRAMES, target_frames=TARGET, request=np.array(json.dumps(
        {"options": {"video": video}})))  # fmt: skip
    binary = http.post(
        "/v1/score/npz", content=buf.getvalue(), headers={"content-type": "application/x-npz"}
    ).json()
    assert binary["patch_rewards"] == pytest.approx(js["patch_rewards"])
    l1 = {"weights": {"l1": 1.0}}
    plain = http.post("/v1/score", json=video_body(options={"video": l1})).json()
    assert plain["status"] == "ok" and "patch_rewards" not in plain
    uneven = http.post(
        "/v1/score", json=video_body(options={"video": {**l1, "patch_grid": [3, 3]}})
    )
    assert uneven.status_code == 200
    assert uneven.json()["status"] == "invalid_input" and "patch_rewards" not in uneven.json()
    assert "do not split into a 3x3 grid" in uneven.json()["message"]
    for grid in ([4], [0, 2], [2, 2, 2]):
        bad = http.post("/v1/score", json=video_body(options={"video": {**l1, "patch_grid": grid}}))
        assert bad.status_code == 422 and "patch_grid" in bad.text, (grid, bad.text)
    assert_healthy(http)


def test_batch_in_order(http: httpx.Client) -> None:
    rows = example_rows("web_agent")
    body = {"requests": [{**r, "request_id": str(i)} for i, r in enumerate(rows)]}
    out = http.post("/v1/score/batch", json=body).json()["responses"]
    assert [o["request_id"] for o in out] == [str(i) for i in range(len(rows))]
    assert [o["reward"] for o in out] == pytest.approx([score_mapping(r).reward for r in rows])


def test_openrlhf_get_reward(http: httpx.Client) -> None:
    rows = example_rows("web_agent")
    prompts = [f"PROMPT {i}\n" for i in range(len(rows))]
    keys = ("data_source", "ground_truth", "extra_info", "variant")
    labels = [json.dumps({k: r[k] for k in keys if k in r}) for r in rows]
    assert "variant" not in rows[0]
    labels[0] = rows[0]["ground_truth"]  # plain label: the server's default data_source (web)
    body = {
        "query": [p + r["solution_str"] for p, r in zip(prompts, rows, strict=True)],
        "prompts": prompts,
        "labels": labels,
    }
    body["query"].append(prompts[0] + "no answer at all")  # unparseable: the policy's failure
    body["prompts"].append(prompts[0])
    body["labels"].append(labels[1])
    out = http.post("/get_reward", json=body).json()
    expected = [score_mapping(r) for r in rows]
    assert out["rewards"] == pytest.approx([e.reward for e in expected] + [0.0])
    assert out["scores"] == out["rewards"]
    assert out["statuses"] == [e.status.value for e in expected] + ["unparseable"]
    assert out["extra_logs"]["reward_ok"] == [float(e.ok) for e in expected] + [0.0]
    assert out["messages"][-1] == "solution_str: no recognised section header"


def test_probes_metrics_docs(http: httpx.Client) -> None:
    assert_healthy(http)
    metrics = http.get("/metrics").text
    assert 'rlvr_reward_requests_total{status="ok",task="web",transport="http"}' in metrics
    assert "rlvr_reward_request_latency_seconds_bucket" in metrics
    assert "rlvr_reward_pool_utilisation_ratio" in metrics
    assert "rlvr_reward_perceptual_batch_size_count" in metrics
    assert http.get("/docs").status_code == 200
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/v1/score", "/v1/score/batch", "/v1/score/npz", "/get_reward"} <= set(paths)


# ------------------------------------------------------------------ bad input

ROW = example_rows("web_agent")[0]


def video_body(**fields: Any) -> dict[str, Any]:
    return {
        "task": "video",
        "frames": b64_tensor(FRAMES),
        "target_frames": b64_tensor(TARGET),
        **fields,
    }


NAN = FRAMES.copy()
NAN[0, 0, 0, 0] = np.nan
BAD_BODIES: dict[str, tuple[dict[str, Any], str]] = {
    "wrong type": ({**ROW, "solution_str": 5}, "solution_str"),
    "unknown task": ({"task": "chess", "text": "e4"}, "task"),
    "unknown data_source": ({**ROW, "data_source": "chess"}, "data_source: unknown 'chess'"),
    "unknown field": ({**ROW, "colour": "red"}, "colour"),
    "mixed forms": ({**ROW, "task": "web"}, "body: mixes"),
    "no task": ({"text": "x"}, "task: required"),
    "frames for text": (
        {"task": "web", "text": "x", "frames": b64_tensor(FRAMES)},
        "text: task web",
    ),
    "bad base64": (
        {"task": "video", "frames": {"data": "@@", "shape": [1], "dtype": "uint8"}},
        "frames.data: not valid base64",
    ),
    "wrong dtype": (
        video_body(frames={**b64_tensor(FRAMES), "dtype": "bool"}),
        "frames.dtype",
    ),
    "wrong shape": (
        video_body(frames={**b64_tensor(FRAMES), "shape": [2, 32, 96, 1]}),
        "frames.shape",
    ),
    "shape and bytes disagree": (
        video_body(frames={**b64_tensor(FRAMES), "shape": [1, 32, 32, 3]}),
        "frames.data",
    ),
    "NaN frames": (
        {"task": "video", "frames": b64_tensor(NAN), "target_frames": b64_tensor(TARGET)},
        "frames.data: contains NaN",
    ),
    "missing target": ({"task": "video", "frames": b64_tensor(FRAMES)}, "target_frames: required"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_bad_body_is_422_naming_the_field(case: str, http: httpx.Client) -> None:
    body, expected = BAD_BODIES[case]
    resp = http.post("/v1/score", json=body)
    assert resp.status_code == 422, resp.text
    assert expected in resp.text
    batch = http.post("/v1/score/batch", json={"requests": [ROW, body]})
    assert batch.status_code == 422
    assert_healthy(http)


def test_malformed_json_and_bad_npz(http: httpx.Client) -> None:
    resp = http.post(
        "/v1/score", content=b'{"data_source": ', headers={"content-type": "application/json"}
    )
    assert resp.status_code == 422
    assert "json_invalid" in resp.text
    resp = http.post(
        "/v1/score/npz", content=b"not a zip", headers={"content-type": "application/x-npz"}
    )
    assert resp.status_code == 422
    assert "not a valid .npz" in resp.json()["detail"]
    assert_healthy(http)


def test_batch_limits(http: httpx.Client) -> None:
    empty = http.post("/v1/score/batch", json={"requests": []})
    assert empty.status_code == 422
    assert empty.json()["detail"] == "requests: empty batch; send at least one"
    many = http.post("/v1/score/batch", json={"requests": [ROW] * 17})
    assert many.status_code == 422
    assert "exceed max_batch=16" in many.json()["detail"]
    mismatch = http.post("/get_reward", json={"query": ["a", "b"], "labels": ["x"]})
    assert mismatch.status_code == 422
    assert mismatch.json()["detail"] == "labels: 1 items but query has 2"
    assert_healthy(http)


def test_oversized_body_is_413(http: httpx.Client) -> None:
    big = {**ROW, "solution_str": "x" * (2 << 20)}
    resp = http.post("/v1/score", json=big)
    assert resp.status_code == 413
    assert "exceed max_payload_bytes" in resp.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no content-length: counted while streaming
        yield b'{"data_source": "web_agent", "solution_str": "'
        for _ in range(20):
            yield b"y" * 100_000
        yield b'"}'

    resp = http.post("/v1/score", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413
    assert_healthy(http)


# ------------------------------------------------------------------ auth


def test_auth_on_http() -> None:
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, api_token=TOKEN)
    with ServiceThread(settings) as service, httpx.Client(base_url=service.http_url) as http:
        assert http.post("/v1/score", json=ROW).status_code == 401
        wrong = http.post("/v1/score", json=ROW, headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == "Bearer"
        assert http.post("/get_reward", json={"query": ["x"]}).status_code == 401
        ok = http.post("/v1/score", json=ROW, headers={"authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert ok.json()["reward"] == pytest.approx(score_mapping(ROW).reward)
        assert_healthy(http)
        assert 'reason="unauthenticated"' in http.get("/metrics").text
