"""The video side of a reward worker: its models (LPIPS / ST-LPIPS, the IDM) and one job's score.

``VideoModels`` owns the batched perceptual scorers (built on first use, or at start-up for
``settings.preload_perceptual``) and the inverse-dynamics model of the ``idm`` weight, loaded once
at start-up from ``settings.idm_path`` (``load_idm``) onto ``settings.perceptual_device`` (the
device the perceptual models use; ``auto``: CUDA where torch sees one). Every model runs behind a
micro-batcher (``services.reward.batching``), so concurrent video requests (those of one
``ScoreBatch`` among them) share forward passes. ``score`` runs ``score_video`` for one checked
``VideoJob`` (``services.reward.convert``), in a thread of the engine.

A bad ``idm_path`` (missing, not an IDM folder, weights that do not fit, an unusable device)
raises ``IdmUnavailable`` naming the setting: the service refuses to start (``services.reward.cli``
exits 2 with the message). What it does not do: reload the IDM while running, or load more
than one.
"""

from __future__ import annotations

import logging
import threading
import time

from rlvr_world.rewards.types import RewardResult, Status, failed
from rlvr_world.rewards.video import PERCEPTUAL_METRICS, PerceptualScorer, score_video
from rlvr_world.rewards.video_action import ReaderConfig
from rlvr_world.scaffold.settings import StartRefused
from services.reward.batching import BatchedIdm, BatchedPerceptual
from services.reward.convert import IDM_SETTING, VideoJob
from services.reward.metrics import RewardMetrics
from services.reward.settings import RewardSettings

log = logging.getLogger(__name__)


class IdmUnavailable(StartRefused, RuntimeError):
    """``idm_path`` is set but no IDM can be loaded from it: the service does not start (the
    command exits 2 with the reason)."""


class TorchMissing(RuntimeError):
    """A video job needs a perceptual model and this worker cannot import torch (a text and web
    image, ``rlvr-world/reward-text``): the job gets status ``error`` with this reason."""


class VideoModels:
    """The models video jobs use in one worker (module docstring)."""

    def __init__(self, settings: RewardSettings, metrics: RewardMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._perceptual: dict[tuple[str, str], BatchedPerceptual] = {}
        self._lock = threading.Lock()
        #: The IDM of the ``idm`` weight; None until ``load_idm`` (and when ``idm_path`` is unset).
        self.idm: BatchedIdm | None = None

    @property
    def idm_config(self) -> ReaderConfig | None:
        """What the loaded IDM reads (frame size, action dimension); None without one."""
        return None if self.idm is None else self.idm.config

    def load_idm(self) -> None:
        """Load ``settings.idm_path`` (if set) onto the perceptual device; ``IdmUnavailable``
        naming the setting when it cannot be loaded."""
        path = self.settings.idm_path
        if path is None:
            return
        t0 = time.perf_counter()
        try:
            import torch

            from rlvr_world.devices import device_line, resolve_device
            from rlvr_world.video.idm import load_idm

            torch.set_num_threads(self.settings.torch_threads)
            device = resolve_device(self.settings.perceptual_device or "auto", "perceptual device")
            model = load_idm(path, device)
        except ImportError as exc:
            raise IdmUnavailable(
                f"{IDM_SETTING} = {path}: the IDM needs torch, which does not import here "
                f"({exc}); install the reward extra"
            ) from exc
        except ValueError as exc:  # InvalidInput (folder, weights), DeviceUnavailable
            raise IdmUnavailable(f"{IDM_SETTING} = {path}: {exc}") from exc
        cfg = model.config
        self.idm = BatchedIdm(
            model,
            self.settings.perceptual_max_batch,
            self.settings.perceptual_max_wait_ms / 1000.0,
            on_batch=self.metrics.idm_batch.observe,
        )
        log.info(
            "IDM %s ready in %.2fs: %dx%d frames, %d action axes %s (%s, frame_skip %d); %s",
            path,
            time.perf_counter() - t0,
            *cfg.image_size,
            cfg.action_dims,
            cfg.action_ranges,
            cfg.action_form,
            cfg.frame_skip,
            device_line(device, "fp32"),
        )

    def perceptual(self, metric: str, net: str) -> BatchedPerceptual:
        """The batched scorer for (metric, net), built on first use."""
        key = (metric, net)
        with self._lock:
            if key not in self._perceptual:
                try:
                    import torch
                except ImportError as exc:
                    raise TorchMissing(
                        f"video scoring with {metric} needs torch, which this reward service "
                        f"cannot import ({exc}); the text and web image (rlvr-world/reward-text) "
                        "has none: score video with rlvr-world/reward"
                    ) from None

                from rlvr_world.rewards.perceptual import make_perceptual

                torch.set_num_threads(self.settings.torch_threads)
                weights = self.settings.lpips_weights if metric == "lpips" else None
                scorer: PerceptualScorer = make_perceptual(
                    metric,
                    net,
                    self.settings.perceptual_device,
                    weights,
                    batch_size=self.settings.perceptual_max_batch,
                )
                self._perceptual[key] = BatchedPerceptual(
                    scorer,
                    self.settings.perceptual_max_batch,
                    self.settings.perceptual_max_wait_ms / 1000.0,
                    on_batch=self.metrics.perceptual_batch.observe,
                )
                log.info("perceptual scorer %s/%s ready", metric, net)
            return self._perceptual[key]

    def score(self, job: VideoJob) -> RewardResult:
        """``score_video`` of one checked job; any failure is status ``error`` with the reason."""
        t0 = time.perf_counter()
        try:
            scorers = {
                m: self.perceptual(m, job.config.lpips_net)
                for m in job.config.active()
                if m in PERCEPTUAL_METRICS
            }
            result = score_video(
                job.pred,
                job.target,
                job.config,
                previous_frame=job.previous_frame,
                perceptual=scorers,
                actions=job.actions,
                states=job.states,
                idm=self.idm,
            )
        except TorchMissing as exc:  # the text and web image: said, no traceback
            log.warning("%s", exc)
            result = failed(Status.ERROR, str(exc))
        except Exception as exc:  # e.g. LPIPS weights missing: a clear error status, not a crash
            log.exception("video scoring failed")
            result = failed(Status.ERROR, f"video scoring failed: {type(exc).__name__}: {exc}")
        self.metrics.score_seconds.labels("video").observe(time.perf_counter() - t0)
        return result

    def close(self) -> None:
        """Stop the batchers' threads."""
        for batcher in self._perceptual.values():
            batcher.close()
        if self.idm is not None:
            self.idm.close()
