"""``rlvr-world reward score --server``: same results as in process; a dead service is reported."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.apps.batch import score_lines
from rlvr_world.apps.cli import main
from rlvr_world.client import RewardClient
from rlvr_world.rewards.types import RewardResult
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread

pytestmark = pytest.mark.integration

TRUTH = "New items:\nNone\n\nDeleted items:\n[3] button 'Go'\n\nUpdated items:\nNone"


def _web(answer: str) -> str:
    return json.dumps({"data_source": "web_agent", "solution_str": answer, "ground_truth": TRUTH})


def test_server_mode_matches_in_process_then_reports_a_dead_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [_web(TRUTH), _web("New items:\nNone"), "{not json", _web("no headers")]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["reward", "score", "--input", str(src), "--output", str(out), "--server"]
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as svc:
        address = svc.grpc_address
        assert main([*args, address]) == 0
    remote = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    local = [r.to_dict() for _, r in score_lines(lines)]
    assert [(r["reward"], r["status"]) for r in remote] == [
        (r["reward"], r["status"]) for r in local
    ]
    assert [r["status"] for r in remote] == ["ok", "ok", "invalid_input", "unparseable"]
    capsys.readouterr()

    assert main([*args, address]) == 2  # the service is gone now
    err = capsys.readouterr().err
    assert "stopped at line 1" in err and "unavailable" in err
    assert out.read_text(encoding="utf-8") == ""


def test_resume_continues_a_file_whose_service_died_mid_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service stops after 50 lines; ``--resume`` against a new one finishes the file, and
    the result is line for line the in-process one."""
    lines = [_web(TRUTH if i % 3 else "New items:\nNone") for i in range(600)]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["reward", "score", "--input", str(src), "--output", str(out), "--server"]
    svc = ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)).start()
    score_verl = RewardClient.score_verl
    calls: list[int] = []

    def stop_before_line_51(client: RewardClient, row: Mapping[str, Any]) -> RewardResult:
        """The real call, except that the service is stopped first when line 51 comes: the
        service dies at the same line whatever the machine's speed."""
        calls.append(1)
        if len(calls) == 51:
            svc.stop()
        return score_verl(client, row)

    monkeypatch.setattr(RewardClient, "score_verl", stop_before_line_51)
    try:
        assert main([*args, svc.grpc_address]) == 2
    finally:
        svc.stop()
    monkeypatch.undo()
    assert "--resume" in capsys.readouterr().err
    written = out.read_text(encoding="utf-8").count("\n")
    assert written == 50
    with out.open("a", encoding="utf-8") as fh:
        fh.write('{"reward": 0.0, "sta')  # a line cut mid-write by a kill
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as again:
        assert main([*args, again.grpc_address, "--resume"]) == 0
    assert f"resumed after {written} lines" in capsys.readouterr().err
    remote = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    local = [r.to_dict() for _, r in score_lines(lines)]
    assert [(r["reward"], r["status"]) for r in remote] == [
        (r["reward"], r["status"]) for r in local
    ]
    assert main([*args, "127.0.0.1:1", "--resume"]) == 0  # finished: nothing left to score


@pytest.mark.parametrize("token", [None, "wrong"])
def test_a_service_that_wants_a_token_stops_the_run_with_what_to_set(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    token: str | None,
) -> None:
    """No token, or a wrong one: exit 2 at line 1 with the variable to set, nothing written,
    no traceback; with the token the same command scores the file."""
    src = tmp_path / "in.jsonl"
    src.write_text(_web(TRUTH) + "\n" + _web("no headers") + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ["reward", "score", "--input", str(src), "--output", str(out), "--server"]
    monkeypatch.delenv("RLVR_REWARD_API_TOKEN", raising=False)
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, api_token="right-token")
    with ServiceThread(settings) as svc:
        if token is None:
            monkeypatch.delenv("RLVR_API_TOKEN", raising=False)
        else:
            monkeypatch.setenv("RLVR_API_TOKEN", token)
        assert main([*args, svc.grpc_address]) == 2
        err = capsys.readouterr().err
        assert "stopped at line 1: the reward service refused the call: UNAUTHENTICATED" in err
        assert "RLVR_API_TOKEN" in err and "Traceback" not in err
        assert out.read_text(encoding="utf-8") == ""
        monkeypatch.setenv("RLVR_API_TOKEN", "right-token")
        assert main([*args, svc.grpc_address, "--resume"]) == 0
    assert [json.loads(x)["status"] for x in out.read_text().splitlines()] == ["ok", "unparseable"]
