"""Command line of the reward service: ``rlvr-world serve reward``, ``python -m services.reward``.

Thin: the options below plus the scaffold's common ones (``rlvr_world.scaffold.cli``) override the
``RLVR_REWARD_*`` environment (only those given on the command line), then the server module is
imported and run. ``--help`` imports neither grpc nor torch. A service that refuses to start (an
``--idm-path`` it cannot load) exits 2 with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr_world.scaffold.cli import Option, ServiceCommand

if TYPE_CHECKING:
    from services.reward.settings import RewardSettings

#: command-line option -> settings field (the common ones come from the scaffold)
_OPTIONS: tuple[Option, ...] = (
    ("--http-port", "http_port", int, "HTTP gateway port; 0 picks a free one (default 8000)"),
    ("--workers", "workers", int, "scoring processes (default: every core)"),
    ("--max-batch", "max_batch", int, "most requests per batch call (default 1024)"),
    ("--deadline-s", "deadline_s", float, "per-call scoring deadline (default 30)"),
    (
        "--perceptual-device",
        "perceptual_device",
        str,
        "torch device for LPIPS (default: cuda if any)",
    ),
    ("--lpips-weights", "lpips_weights", str, "local LPIPS backbone weights file"),
    (
        "--idm-path",
        "idm_path",
        str,
        "inverse-dynamics model folder (rlvr-world video train-idm) for the idm weight",
    ),
    ("--default-data-source", "default_data_source", str, "/get_reward plain-label data_source"),
    (
        "--max-connection-age-s",
        "max_connection_age_s",
        float,
        "close each gRPC connection after this long so dns:/// clients re-resolve (default: never)",
    ),
)


COMMAND: ServiceCommand[RewardSettings] = ServiceCommand(
    name="reward",
    help="run the reward service (gRPC + HTTP gateway, one scoring pool)",
    description="Settings come from RLVR_REWARD_* environment variables; options override them. "
    "Auth: RLVR_REWARD_API_TOKEN (or RLVR_API_TOKEN), TLS and mTLS with the --tls-* options.",
    options=_OPTIONS,
    settings="services.reward.settings:RewardSettings",
    serve="services.reward.server:serve",
)
main = COMMAND.main
