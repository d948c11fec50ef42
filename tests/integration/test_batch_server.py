"""``rlvr-world reward score --server``: same results as in process; a dead service is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_world.apps.batch import score_lines
from rlvr_world.apps.cli import main
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
