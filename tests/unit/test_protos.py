"""The committed stubs in rlvr_world/v1 are exactly what protoc makes of protos/ today."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr_world import protogen


def test_generated_stubs_match_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) generates the stubs")
    fresh = protogen.generate(tmp_path)
    committed_dir = protogen.REPO_ROOT / "rlvr_world" / "v1"
    fresh_names = sorted(p.name for p in fresh)
    committed_names = sorted(p.name for p in committed_dir.glob("*_pb2*.py*"))
    assert fresh_names == committed_names, "run `make protos` and commit the result"
    for path in fresh:
        committed = (committed_dir / path.name).read_text(encoding="utf-8")
        assert path.read_text(encoding="utf-8") == committed, (
            f"{path.name} drifted from protos/: run `make protos` and commit the result"
        )


def test_stubs_import_and_carry_the_contract() -> None:
    from rlvr_world.v1 import common_pb2, reward_pb2, reward_pb2_grpc

    req = reward_pb2.ScoreRequest(request_id="r1", task=common_pb2.TASK_WEB, text="x")
    assert reward_pb2.ScoreRequest.FromString(req.SerializeToString()) == req
    assert hasattr(reward_pb2_grpc, "RewardServiceServicer")
    names = set(common_pb2.RewardStatus.keys())
    assert {"REWARD_STATUS_OK", "REWARD_STATUS_TIMEOUT", "REWARD_STATUS_ERROR"} <= names
