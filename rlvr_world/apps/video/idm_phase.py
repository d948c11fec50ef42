"""The video run's inverse-dynamics model (``idm`` section): trained here or loaded, checked.

``prepare_idm``: with ``idm.train`` an IDM is trained right after the data phase on the run's
own recordings (``<run_dir>/data/pusht``), split as the run splits them: its train and
validation episodes train the IDM, its test episodes are the IDM's held-out set, so the IDM
never saw a clip the run evaluates on (``apps.video.idm_train.train_and_report``); the folder
``<run_dir>/idm`` gets ``report.json`` with the IDM's accuracy on those held-out true frames (the
ceiling of the ``idm`` reward). With ``idm.path`` the folder is checked to read this run's
frames and actions (``check_idm_fits``). Either way the IDM's folder goes to the reward service
(``--idm-path``) and ``load_reader`` loads it for the held-out evaluations.

What it does not do: no evaluation of predicted frames (``apps.video.reading``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr_world.apps.video.config import VideoPipelineConfig
from rlvr_world.apps.video.episodes import action_ranges

if TYPE_CHECKING:
    from rlvr_world.video.idm import IdmConfig, InverseDynamicsModel

#: Where a run trains its IDM.
IDM_FOLDER = "idm"


def check_idm_fits(config: IdmConfig, cfg: VideoPipelineConfig, where: Path) -> None:
    """``ValueError`` naming what differs when the IDM in ``where`` does not read this run's
    frames (size) and actions (dimension, form, frame skip, ranges)."""
    d = cfg.data
    size = (d.image_size, d.image_size) if isinstance(d.image_size, int) else tuple(d.image_size)
    ranges = action_ranges(d)
    problems = []
    if tuple(config.image_size) != size:
        problems.append(f"frames of {config.image_size}, the run's are {size}")
    if ranges is not None:
        mine = tuple((float(lo), float(hi)) for lo, hi in ranges)
        if config.action_ranges != mine:
            problems.append(f"action ranges {config.action_ranges}, the run's {mine}")
        if config.action_form != d.actions:
            problems.append(f"{config.action_form} actions, the run's are {d.actions}")
        if config.frame_skip != d.frame_skip:
            problems.append(f"frame_skip {config.frame_skip}, the run's is {d.frame_skip}")
    if problems:
        raise ValueError(
            f"idm.path {where}: the IDM does not read this run's steps: {'; '.join(problems)}; "
            "train one for it (idm.train: true, or rlvr-world video train-idm --run-dir)"
        )


def prepare_idm(cfg: VideoPipelineConfig, run_dir: Path) -> tuple[Path | None, dict[str, Any]]:
    """The run's IDM folder (None without one) and its summary entry: trained (module
    docstring) with its held-out report and seconds, or the given folder, checked."""
    from rlvr_world.video.idm import load_idm

    i = cfg.idm
    if i.path is not None:
        model = load_idm(i.path)
        check_idm_fits(model.config, cfg, i.path)
        report = i.path / "report.json"
        held = json.loads(report.read_text()).get("held_out") if report.is_file() else None
        return i.path, {"path": str(i.path), "trained": False, "held_out": held}
    if not i.train:
        return None, {}
    from rlvr_world.apps.video import idm_train
    from rlvr_world.devices import resolve_device

    t0 = time.perf_counter()
    folder = run_dir / "data" / "pusht"
    paths = sorted(folder.glob("ep*.npz"))
    if len(paths) != cfg.data.episodes:
        raise ValueError(
            f"idm.train: {len(paths)} recordings in {folder}, data.episodes is "
            f"{cfg.data.episodes}; the run's split cannot be rebuilt"
        )
    recs = idm_train.read_recordings(paths, cfg.data.image_size)
    settings = i.to(
        idm_train.TrainSettings,
        seed=cfg.run.seed,
        device=resolve_device(cfg.run.device, "run.device"),
    )
    out = run_dir / IDM_FOLDER
    source = {"kind": "run", "run_dir": str(run_dir)}
    found = idm_train.train_and_report(cfg.data, recs, settings, out, source)
    entry = {
        "path": str(out),
        "trained": True,
        "seconds": time.perf_counter() - t0,
        "training": found["training"],
        "held_out": found["held_out"],
        "tolerance": found["tolerance"],
        "data": found["data"],
    }
    return out, entry


def load_reader(path: Path, device: str) -> InverseDynamicsModel:
    """The IDM in ``path`` on ``device``, in eval mode (``rlvr_world.video.idm.load_idm``)."""
    from rlvr_world.video.idm import load_idm

    return load_idm(path, device=device)
