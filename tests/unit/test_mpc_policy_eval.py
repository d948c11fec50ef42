"""The success-estimate comparison of the policy evaluation, and its start states."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.mpc.policy_eval import Outcomes, compare_estimates, spearman


def outcomes(rates: list[float], episodes: int = 10) -> Outcomes:
    success = np.zeros((len(rates), episodes), dtype=bool)
    for p, rate in enumerate(rates):
        success[p, : round(rate * episodes)] = True
    return Outcomes(success, np.zeros_like(success, dtype=np.int64))


def test_spearman_of_known_orders() -> None:
    assert spearman(np.array([0.1, 0.5, 0.9]), np.array([1, 2, 3])) == pytest.approx(1.0)
    assert spearman(np.array([0.1, 0.5, 0.9]), np.array([3, 2, 1])) == pytest.approx(-1.0)
    assert np.isnan(spearman(np.zeros(4), np.array([1, 2, 3, 4])))  # constant: undefined


def test_compare_estimates_of_known_rates() -> None:
    truth = outcomes([0.8, 0.5, 0.2, 0.0])
    perfect = outcomes([0.8, 0.5, 0.2, 0.0])
    frozen = outcomes([0.0, 0.0, 0.0, 0.0])  # a model in which nothing ever succeeds
    out = compare_estimates(truth, {"base": frozen, "rlvr": perfect}, resamples=500, seed=0)
    assert out["rlvr"]["mae"] == 0.0
    assert out["rlvr"]["spearman"] == pytest.approx(1.0)
    assert out["rlvr"]["mae_ci95"] == [0.0, 0.0]
    assert out["base"]["mae"] == pytest.approx((0.8 + 0.5 + 0.2) / 4)
    assert out["base"]["spearman"] is None  # undefined for a constant estimate
    assert out["base"]["spearman_defined"] == 0.0
    low, high = out["base"]["mae_ci95"]
    assert low <= out["base"]["mae"] <= high
    assert out["rlvr"]["mae_minus_base"] == pytest.approx(-out["base"]["mae"])
    d_high = out["rlvr"]["mae_minus_base_ci95"][1]
    assert d_high < 0.0  # RLVR's estimates are better here, and the interval says so


def test_start_states_lie_away_from_the_goal() -> None:
    pytest.importorskip("gym_pusht", reason="gym-pusht is in the video extra")
    from rlvr_world.mpc.policy_eval import policy_starts
    from rlvr_world.mpc.sim import PushTSim, block_centroid
    from rlvr_world.video.pusht import GOAL

    with PushTSim() as sim:
        starts = policy_starts(sim, 5, 2000, 120.0)
        again = policy_starts(sim, 5, 2000, 120.0)
    assert all(np.linalg.norm(block_centroid(s.block) - GOAL) >= 120.0 for s in starts)
    assert all(np.array_equal(a.block, b.block) for a, b in zip(starts, again, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"towards_goal_p": 1.5}, "towards_goal_p must lie in"),
        ({"keep_direction_p": -0.1}, "keep_direction_p must lie in"),
        ({"noise": -1.0}, "noise must be >= 0"),
    ],
)
def test_bad_policy_parameters_are_refused(kwargs: dict[str, float], message: str) -> None:
    from rlvr_world.video.pusht import make_policy

    with pytest.raises(ValueError, match=message):
        make_policy("noisy-scripted", np.random.default_rng(0), **kwargs)


def test_a_noiseless_goal_pusher_heads_for_the_block() -> None:
    from rlvr_world.video.pusht import make_policy

    act = make_policy("noisy-scripted", np.random.default_rng(0), noise=0.0, towards_goal_p=1.0)
    agent, block = np.array([100.0, 100.0]), np.array([150.0, 300.0])
    target = act(agent, block)
    # the first step goes towards the push position behind the block, at most 50 px away
    assert np.linalg.norm(target - agent) <= 50.0 + 1e-4
    assert np.linalg.norm(target - block) < np.linalg.norm(agent - block)
