"""Does a video world model read its actions? The measures of every held-out evaluation, and the
run's ``action_reading`` headline.

Per predicted frame (``frame_scores`` builds the ``evaluate.FrameScores`` of one set of clips;
the held-out evaluations add them to every model's report and to the baselines'):

* ``agent_error_px`` and ``block_error_px`` (PushT, where the episodes carry the simulator's
  states): the distance in arena pixels from the agent's (the T block's) centre, segmented by
  colour in the predicted frame, to the simulator's true position after the step
  (``rewards.pusht_state.state_errors``: capped at the arena diagonal, a part not found counts
  as the cap); ``agent_missing``: 1 where no agent was found; ``state_error``: the ``state``
  reward's loss (the normalised mean of the two errors);
* ``idm_mae`` (action units, mean over the axes), ``idm_acc`` (1 where the read action lies
  within the IDM's tolerance on every axis) and ``idm_error`` (the normalised error, the ``idm``
  reward's loss), where the run has an inverse-dynamics model: the IDM reads the step from the
  frame before (the true last context frame, then the model's own previous prediction) to the
  predicted frame, against the action the model was *given* (with shuffled actions: the shuffled
  one, so ``idm_acc`` there measures following a counterfactual action).

``true_frame_scores`` measures the true frames themselves: the state check's own floor and the
IDM's ceiling on the same clips (a prediction can score no better than the truth does).

``action_reading`` is the run's headline of these (``summary.json``): per model (the start, the
control and RLVR, seeds averaged per clip) the held-out reward with true and with shuffled
actions and the **shuffle gap** (true minus shuffled, per clip: positive where the model's
prediction depends on its action), the agent-position error with true and shuffled actions and
its gap (shuffled minus true: positive where a wrong action moves the agent elsewhere), and the
IDM measures, each with its 95% paired-bootstrap interval over clips (``rlvr_world.stats``);
``rlvr_minus_control`` pairs RLVR with the control clip by clip on each of them (for the error
terms lower is better, so a negative difference is a gain).

What it does not do: no sampling and no model loading (the evaluations pass their decoded frames
in); no files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.stats import DEFAULT_RESAMPLES, paired_bootstrap

if TYPE_CHECKING:
    from rlvr_world.rewards.video_action import ActionReader
    from rlvr_world.video.data import ClipArrays, States

FloatArray = NDArray[np.float64]
FrameScores = Callable[[NDArray[Any]], dict[str, FloatArray]]

#: The per-frame measures and whether higher is better.
MEASURES = {
    "agent_error_px": False,
    "block_error_px": False,
    "agent_missing": False,
    "state_error": False,
    "idm_mae": False,
    "idm_acc": True,
    "idm_error": False,
}
#: The measures whose shuffle gap the headline carries (the reward's, and the agent's).
GAP_KEYS = ("reward", "agent_error_px")


def frame_scores(
    clips: Sequence[ClipArrays],
    rows: tuple[slice, slice],
    states: Sequence[States] | None,
    idm: ActionReader | None,
) -> FrameScores | None:
    """The measures (module docstring) of the frames a model predicts for ``clips``: ``rows``
    (``setup.predicted_rows``) say which frames and actions those are, ``states`` each clip's
    true states after its predicted frames (None: no state measures), ``idm`` the reader (None:
    no IDM measures). None when there is nothing to measure. The function takes the predicted
    frames ``(N * T, H, W, 3)`` clip by clip and returns ``name -> (N * T,)``."""
    from rlvr_world.rewards.action import action_errors
    from rlvr_world.rewards.pusht_state import POSITION_SIZE, StateCheckConfig, state_errors

    if states is None and idm is None:
        return None
    frame_rows, action_rows = rows
    first = np.stack([frames[frame_rows.start - 1] for frames, _ in clips])
    actions = np.stack([np.asarray(a[action_rows], dtype=np.float64) for _, a in clips])
    truth = None if states is None else np.stack([np.asarray(s) for s in states])
    if truth is not None and truth.shape[:2] != actions.shape[:2]:
        raise ValueError(f"states: {truth.shape} for actions {actions.shape} of the clips")
    n, steps = actions.shape[:2]

    def measure(frames: NDArray[Any]) -> dict[str, FloatArray]:
        pred = np.asarray(frames, dtype=np.float64)
        if pred.shape[0] != n * steps:
            raise ValueError(f"frames: {pred.shape[0]} for {n} clips of {steps} predicted frames")
        out: dict[str, FloatArray] = {}
        if truth is not None:
            flat = truth.reshape(n * steps, -1)
            err = state_errors(
                pred, flat[:, :POSITION_SIZE], flat[:, POSITION_SIZE:], StateCheckConfig()
            )
            out["agent_error_px"], out["block_error_px"] = err.agent_px, err.block_px
            out["agent_missing"] = err.agent_missing.astype(np.float64)
            out["state_error"] = err.normalised
        if idm is not None:
            clip_frames = pred.reshape(n, steps, *pred.shape[1:])
            before = np.concatenate([first[:, None] / 255.0, clip_frames[:, :-1]], axis=1)
            read = idm.predict(before.reshape(pred.shape), pred)
            cfg = idm.config.reward_config()
            e = action_errors(read, actions.reshape(n * steps, -1), cfg)
            out["idm_mae"] = e.absolute.mean(axis=1)
            out["idm_acc"] = e.within.astype(np.float64)
            out["idm_error"] = e.normalised
        return out

    return measure


def true_frame_scores(
    clips: Sequence[ClipArrays], rows: tuple[slice, slice], measure: FrameScores
) -> dict[str, float]:
    """``measure`` of the true predicted frames of ``clips``: the floor of the state check and
    the IDM's ceiling on the held-out clips (means over frames)."""
    frame_rows, _ = rows
    frames = np.concatenate([f[frame_rows] for f, _ in clips]).astype(np.float64) / 255.0
    return {k: float(v.mean()) for k, v in measure(frames).items()}


def _table(reports: Sequence[Mapping[str, Any]], key: str) -> FloatArray:
    """``(seeds, clips)`` per-clip values of ``key``."""
    return np.array([r["per_clip"][key] for r in reports], dtype=np.float64)


def _interval(a: FloatArray, b: FloatArray | None, resamples: int, seed: int) -> dict[str, Any]:
    """Mean of ``a - b`` (``b`` None: of ``a``) over clips (seeds averaged per clip first) with
    its bootstrap 95% CI; a difference also says whether the CI excludes 0."""
    iv = paired_bootstrap(a, np.zeros_like(a) if b is None else b, resamples=resamples, seed=seed)
    out: dict[str, Any] = {"mean": iv.mean, "ci95": iv.as_list()}
    if b is not None:
        out["ci95_excludes_zero"] = iv.excludes_zero
    return out


def _gap(true: FloatArray, shuffled: FloatArray, key: str) -> tuple[FloatArray, FloatArray]:
    """Order of the difference that makes a positive gap mean "reads its actions"."""
    return (true, shuffled) if key == "reward" else (shuffled, true)


def model_reading(
    true: Sequence[Mapping[str, Any]],
    shuffled: Sequence[Mapping[str, Any]] | None,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """One model's entry of ``action_reading`` from its reports (one per seed) with true and
    with shuffled actions (module docstring)."""
    keys = [k for k in ("reward", *MEASURES) if k in true[0]["per_clip"]]
    out: dict[str, Any] = {"n": len(true[0]["per_clip"]["reward"]), "seeds": len(true)}
    for key in keys:
        out[key] = _interval(_table(true, key), None, resamples, seed)
    if shuffled is None:
        return out
    if len(shuffled) != len(true):
        raise ValueError(f"{len(shuffled)} shuffled-action reports for {len(true)} seeds")
    for key in keys:
        if key in shuffled[0]["per_clip"]:
            out[f"{key}_shuffled"] = _interval(_table(shuffled, key), None, resamples, seed)
    for key in GAP_KEYS:
        if key in keys:
            a, b = _gap(_table(true, key), _table(shuffled, key), key)
            out[f"{key}_shuffle_gap"] = _interval(a, b, resamples, seed)
    return out


def paired_gains(
    rlvr: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None],
    control: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """RLVR minus the control, clip by clip (seeds averaged), on each measure both have and on
    each shuffle gap: ``(true reports, shuffled reports or None)`` of each."""
    (r_true, r_shuf), (c_true, c_shuf) = rlvr, control
    out: dict[str, Any] = {}
    keys = [k for k in ("reward", *MEASURES) if k in r_true[0]["per_clip"]]
    for key in keys:
        out[key] = _interval(_table(r_true, key), _table(c_true, key), resamples, seed)
        out[key]["higher_is_better"] = MEASURES.get(key, True)
    if r_shuf is None or c_shuf is None:
        return out
    for key in GAP_KEYS:
        if key not in keys:
            continue
        r_gap = np.subtract(*_gap(_table(r_true, key), _table(r_shuf, key), key))
        c_gap = np.subtract(*_gap(_table(c_true, key), _table(c_shuf, key), key))
        out[f"{key}_shuffle_gap"] = _interval(r_gap, c_gap, resamples, seed)
        out[f"{key}_shuffle_gap"]["higher_is_better"] = True
    return out


def action_reading(
    models: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]] | None]],
    *,
    seeds: Sequence[int],
    baselines: Mapping[str, Mapping[str, float]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """The ``action_reading`` headline (module docstring): ``models`` name -> (its reports with
    true actions, one per seed; the same with shuffled actions, or None), ``baselines`` name ->
    measure -> value (the true frames, copying the last frame, the tokenizer's ceiling)."""
    if not models:
        raise ValueError("models: no evaluation to read")
    out: dict[str, Any] = {
        "seeds": list(seeds),
        "gap": "shuffle_gap: true minus shuffled actions for the reward, shuffled minus true "
        "for the agent error (positive: the prediction follows its action)",
        "models": {
            name: model_reading(true, shuffled, resamples=resamples, seed=seed)
            for name, (true, shuffled) in models.items()
        },
        "baselines": {k: dict(v) for k, v in baselines.items()},
    }
    out["n"] = next(iter(out["models"].values()))["n"]
    if "rlvr" in models and "control" in models:
        out["rlvr_minus_control"] = paired_gains(
            models["rlvr"], models["control"], resamples=resamples, seed=seed
        )
    return out


def baseline_measures(report: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The measures of one baseline (``recon_``, ``copy_``, ``raw_copy_``) from the start's
    report, and its reward."""
    keys = ("reward", *MEASURES)
    return {k: float(report[f"{prefix}{k}"]) for k in keys if f"{prefix}{k}" in report}
