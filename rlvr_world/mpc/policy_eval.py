"""Policy evaluation in a learned simulator (the Real2Sim analogue on PushT).

Each policy (``rlvr_world.video.pusht.make_policy``: the scripted pusher at some noise and
goal bias, or the random walk) runs ``episodes`` closed-loop episodes of ``steps`` steps from
the same start states, once in the real simulator and once inside a world model:

* ``policy_starts``: start states from ``env.reset(seed + j)``, keeping those whose block
  centroid lies at least ``start_distance`` pixels from the goal point ``GOAL`` (so no episode
  succeeds before acting);
* ``rollout_sim``: the policy reads the true agent position and block centroid; success when the
  block's centroid comes within ``radius`` of ``GOAL`` within the steps;
* ``rollout_world_model``: the policy reads the agent and block centres *segmented from the
  predicted frames* (``sim.segment``; a part not found keeps its last seen position, counted in
  ``lost``), the world model predicts the next frame from the action, all episodes of all
  policies batched; success when the segmented block centroid comes within ``radius`` of
  ``GOAL``.

Episode ``e`` of policy ``p`` draws its noise from ``default_rng([seed, p, e])`` in both, so
the two runs differ only by the simulator. A step is one model step of the run's
``ActionSpace`` (``Trials.space``): the policy picks a target once per step, the simulator holds
it for ``frame_skip`` steps (``ActionSpace.execute``) and the world model is given it in its own
action form (a move from the agent it sees, for ``agent_relative`` models); success is checked
after each step in both. ``compare_estimates`` gives the mean absolute error
and Spearman rank correlation of the world model's success rates against the simulator's,
with bootstrap intervals over episodes (the same resampled episodes for every policy and
model, so RLVR - base is paired).

What it does not do: no planning, no files.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from rlvr_world.mpc.dynamics import WorldModelDynamics
from rlvr_world.mpc.sim import PushTSim, block_centroid, segment
from rlvr_world.mpc.space import ActionSpace
from rlvr_world.video.pusht import GOAL, make_policy

logger = logging.getLogger(__name__)

Policy = Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float32]]


@dataclass(frozen=True)
class PolicyDef:
    """A named policy: ``make_policy``'s kind and its noise and goal-bias settings."""

    name: str
    kind: str
    noise: float
    towards_goal_p: float
    keep_direction_p: float = 0.0

    def make(self, seed: int, p: int, e: int) -> Policy:
        """The policy of episode ``e`` of policy index ``p``, drawing from ``[seed, p, e]``."""
        rng = np.random.default_rng([seed, p, e])
        return make_policy(
            self.kind,
            rng,
            noise=self.noise,
            towards_goal_p=self.towards_goal_p,
            keep_direction_p=self.keep_direction_p,
        )


@dataclass(frozen=True)
class Start:
    """A start state: agent (x, y) and block (x, y, angle)."""

    agent: NDArray[np.float64]
    block: NDArray[np.float64]


@dataclass(frozen=True)
class Outcomes:
    """``success`` (P, E) bool; ``lost`` (P, E): steps whose frame lacked the agent or block."""

    success: NDArray[np.bool_]
    lost: NDArray[np.int64]

    @property
    def rates(self) -> NDArray[np.float64]:
        """Each policy's success rate over its episodes, (P,)."""
        return np.asarray(self.success.mean(axis=1), dtype=np.float64)


def policy_starts(sim: PushTSim, n: int, seed: int, start_distance: float) -> list[Start]:
    """``n`` reset states at least ``start_distance`` from ``GOAL`` (module docstring);
    ``RuntimeError`` when ``50 n`` resets do not give them."""
    starts: list[Start] = []
    for j in range(50 * n):
        if len(starts) == n:
            break
        sim.reset(seed + j)
        block = sim.block_pose()
        if np.linalg.norm(block_centroid(block) - GOAL) >= start_distance:
            starts.append(Start(sim.agent_pos(), block))
    if len(starts) < n:
        raise RuntimeError(f"policy_starts: {len(starts)} of {n} starts")
    return starts


def _reached(centre: NDArray[np.float64] | None, radius: float) -> bool:
    return centre is not None and float(np.linalg.norm(centre - GOAL)) <= radius


@dataclass(frozen=True)
class Trials:
    """Which episodes a policy evaluation runs: every policy from every start, ``steps`` steps at
    most, success within ``radius`` of the goal; ``seed`` seeds the policies' noise."""

    policies: Sequence[PolicyDef]
    starts: Sequence[Start]
    steps: int
    radius: float
    seed: int
    space: ActionSpace = field(default_factory=ActionSpace)


def rollout_sim(sim: PushTSim, trials: Trials) -> Outcomes:
    """Every policy from every start in the real simulator (module docstring)."""
    policies, starts = trials.policies, trials.starts
    success = np.zeros((len(policies), len(starts)), dtype=bool)
    for p, spec in enumerate(policies):
        for e, start in enumerate(starts):
            act = spec.make(trials.seed, p, e)
            sim.set_pose(start.agent, start.block)
            for _ in range(trials.steps):
                agent = sim.agent_pos()
                target = act(agent, block_centroid(sim.block_pose()))
                trials.space.execute(sim, trials.space.model_action(target, agent))
                if _reached(block_centroid(sim.block_pose()), trials.radius):
                    success[p, e] = True
                    break
    return Outcomes(success, np.zeros_like(success, dtype=np.int64))


def rollout_world_model(model: WorldModelDynamics, sim: PushTSim, trials: Trials) -> Outcomes:
    """Every policy from every start inside ``model``, all episodes batched (module docstring);
    ``sim`` only renders the start frames."""
    policies, starts = trials.policies, trials.starts
    n_p, n_e = len(policies), len(starts)
    first = []
    for start in starts:
        sim.set_pose(start.agent, start.block)
        first.append(sim.frame())
    frames_u8 = np.stack([first[e] for _ in range(n_p) for e in range(n_e)])
    tokens = model.encode(frames_u8)
    frames = frames_u8.astype(np.float32) / 255.0
    acts = [spec.make(trials.seed, p, e) for p, spec in enumerate(policies) for e in range(n_e)]
    seen = [segment(f) for f in frames_u8]
    agent = [
        s.agent if s.agent is not None else start_of(starts, i, n_e).agent
        for i, s in enumerate(seen)
    ]
    block = [
        s.block if s.block is not None else block_centroid(start_of(starts, i, n_e).block)
        for i, s in enumerate(seen)
    ]
    done = np.zeros(n_p * n_e, dtype=bool)
    lost = np.zeros(n_p * n_e, dtype=np.int64)
    for _ in range(trials.steps):
        live = np.flatnonzero(~done)
        if not live.size:
            break
        actions = np.stack(
            [trials.space.model_action(acts[i](agent[i], block[i]), agent[i]) for i in live]
        )
        new_tokens, new_frames = model.step(tokens[live], frames[live], actions)
        tokens[live], frames[live] = new_tokens, new_frames
        for k, i in enumerate(live):
            s = segment(new_frames[k])
            if s.agent is None or s.block is None:
                lost[i] += 1
            agent[i] = s.agent if s.agent is not None else agent[i]
            block[i] = s.block if s.block is not None else block[i]
            done[i] = _reached(s.block, trials.radius)
    return Outcomes(done.reshape(n_p, n_e), lost.reshape(n_p, n_e))


def start_of(starts: Sequence[Start], i: int, n_e: int) -> Start:
    """The start of flat rollout ``i`` (policy-major order)."""
    return starts[i % n_e]


def spearman(a: NDArray[Any], b: NDArray[Any]) -> float:
    """Spearman rank correlation (average ranks for ties); nan when either side is constant."""
    from scipy.stats import rankdata

    x, y = rankdata(a), rankdata(b)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _interval(values: NDArray[np.float64]) -> list[float] | None:
    kept = values[np.isfinite(values)]
    if not kept.size:
        return None
    low, high = np.quantile(kept, [0.025, 0.975])
    return [float(low), float(high)]


def compare_estimates(
    sim: Outcomes, models: dict[str, Outcomes], *, resamples: int, seed: int
) -> dict[str, dict[str, Any]]:
    """Per model: ``mae`` and ``spearman`` of its success rates against ``sim``'s, each with a
    95% bootstrap interval over episodes (resampled jointly for all policies and models; the
    Spearman interval is over the resamples where it is defined, their share in
    ``spearman_defined``), and ``diff`` of every later model minus the first (MAE, paired)."""
    n_e = sim.success.shape[1]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n_e, size=(resamples, n_e))
    truth = sim.success.astype(np.float64)
    boot_truth = truth[:, idx].mean(axis=2)  # (P, R)
    out: dict[str, dict[str, Any]] = {}
    boot_mae: dict[str, NDArray[np.float64]] = {}
    for name, o in models.items():
        est = o.success.astype(np.float64)
        boot_est = est[:, idx].mean(axis=2)
        boot_mae[name] = np.abs(boot_est - boot_truth).mean(axis=0)
        rho = np.array([spearman(boot_est[:, r], boot_truth[:, r]) for r in range(resamples)])
        out[name] = {
            "mae": float(np.abs(o.rates - sim.rates).mean()),
            "mae_ci95": _interval(boot_mae[name]),
            "spearman": _none_if_nan(spearman(o.rates, sim.rates)),
            "spearman_ci95": _interval(rho),
            "spearman_defined": float(np.isfinite(rho).mean()),
            "rates": o.rates.tolist(),
            "lost_steps": int(o.lost.sum()),
        }
    names = list(models)
    for name in names[1:]:
        d = boot_mae[name] - boot_mae[names[0]]
        out[name]["mae_minus_" + names[0]] = out[name]["mae"] - out[names[0]]["mae"]
        out[name]["mae_minus_" + names[0] + "_ci95"] = _interval(d)
    return out


def _none_if_nan(value: float) -> float | None:
    return value if np.isfinite(value) else None
