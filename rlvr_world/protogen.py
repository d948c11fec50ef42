"""Generate the Python gRPC stubs in ``rlvr_world/v1`` from ``protos/rlvr_world/v1/*.proto``.

The ``.proto`` files are the only source of truth for the wire. The generated modules are
committed so that an installed wheel needs no code generator, and ``tests/unit/test_protos.py``
regenerates them into a temporary folder and fails when the committed copies drift. Run
``make protos`` (or ``python -m rlvr_world.protogen``) after editing a proto. Needs
``grpcio-tools`` (the ``dev`` extra).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
PROTO_FILES = ("common", "reward", "decoder", "rollout")


def generate(out_root: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc for every proto; return the files written under ``out_root``."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    files = [str(proto_root / "rlvr_world" / "v1" / f"{name}.proto") for name in PROTO_FILES]
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *files,
    ]
    out_root.mkdir(parents=True, exist_ok=True)
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    return sorted((out_root / "rlvr_world" / "v1").glob("*_pb2*.py*"))


def main(argv: list[str] | None = None) -> int:
    """``python -m rlvr_world.protogen [--out ROOT]``: regenerate the stubs, print each path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="output root (default: repo)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
