"""``services.rollout.weights.WeightsGate``: roots, strictly increasing versions, none from the
future, and answers that tell nothing about the filesystem."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from services.rollout.weights import NOT_LOADABLE, WeightsGate, WeightsRefused


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ckpt = tmp_path / "root" / "step_00000003"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"")
    return tmp_path / "root"


def refused(
    gate: WeightsGate, version: int, path: str, served: int = 0, **kw: int
) -> WeightsRefused:
    with pytest.raises(WeightsRefused) as err:
        gate.check(version, path, served, kw.get("published"))
    return err.value


def test_a_checkpoint_inside_a_root_with_a_newer_version_loads(root: Path) -> None:
    gate = WeightsGate([root])
    assert (
        gate.check(3, str(root / "step_00000003"), served=2, published=3)
        == (root / "step_00000003").resolve()
    )


def test_versions_strictly_increase_and_none_comes_from_the_future(root: Path) -> None:
    gate = WeightsGate([root])
    path = str(root / "step_00000003")
    for version, served in ((3, 3), (2, 3)):
        err = refused(gate, version, path, served)
        assert err.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "not newer than the served version" in str(err)
    err = refused(gate, 2**62, path, 0, published=3)
    assert err.code == grpc.StatusCode.PERMISSION_DENIED
    assert str(err) == f"version {2**62}: ahead of the trainer's latest published version 3"
    assert refused(gate, -1, path).code == grpc.StatusCode.INVALID_ARGUMENT


def test_paths_outside_the_roots_are_refused_however_they_are_spelled(
    root: Path, tmp_path: Path
) -> None:
    gate = WeightsGate([root])
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes(b"")
    (root / "escape").symlink_to(outside)
    for path in (
        str(outside),
        str(root / ".." / "elsewhere"),
        str(root / "escape"),  # a symbolic link out of the root
        "/etc",
        str(root) + "2",  # a sibling whose name starts like the root
    ):
        err = refused(gate, 5, path)
        assert err.code == grpc.StatusCode.PERMISSION_DENIED, path
        assert str(err) == "path: outside the configured weights roots"


def test_missing_file_or_empty_folder_get_one_answer(root: Path) -> None:
    gate = WeightsGate([root])
    (root / "file").write_text("x")
    (root / "empty").mkdir()
    for name in ("missing", "file", "empty"):
        err = refused(gate, 5, str(root / name))
        assert (err.code, str(err)) == (grpc.StatusCode.NOT_FOUND, NOT_LOADABLE)


def test_relative_empty_and_nul_paths_and_no_roots(root: Path) -> None:
    gate = WeightsGate([root])
    for path in ("relative/step", "", "/a\x00b"):
        assert refused(gate, 5, path).code == grpc.StatusCode.INVALID_ARGUMENT
    err = refused(WeightsGate([]), 5, str(root / "step_00000003"))
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "no weights_roots configured" in str(err)
