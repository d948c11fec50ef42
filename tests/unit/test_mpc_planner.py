"""The sampling planners on costs with a known optimum, and what bad sizes and costs get."""

from __future__ import annotations

import numpy as np
import pytest

from rlvr_world.mpc.planner import (
    PlannerConfig,
    goal_cost,
    plan,
    random_sequence,
)

TARGET = np.array([[120.0, 300.0], [200.0, 260.0], [330.0, 90.0]])


def quadratic(actions: np.ndarray) -> np.ndarray:
    return np.asarray(((actions - TARGET[None]) ** 2).sum(axis=(1, 2)), dtype=np.float64)


def start() -> np.ndarray:
    return np.full((3, 2), 256.0)


@pytest.mark.parametrize("kind", ["cem", "mppi"])
def test_planner_finds_the_optimum_of_a_quadratic(kind: str) -> None:
    cfg = PlannerConfig(
        kind=kind,  # type: ignore[arg-type]
        candidates=200,
        horizon=3,
        iterations=25,
        elites=20,
        init_std=120.0,
        min_std=0.5,
        temperature=5000.0,  # about the cost spread near the optimum
    )
    rng = np.random.default_rng(0)
    result = plan(quadratic, start(), cfg, rng)
    assert result.actions.shape == (3, 2)
    assert np.abs(result.actions - TARGET).max() < 8.0  # from 256 px away
    assert result.cost == pytest.approx(float(quadratic(result.actions[None])[0]))
    assert list(result.history) == sorted(result.history, reverse=True)  # best never worsens


def test_more_iterations_do_not_lose_the_best_sample() -> None:
    cfg1 = PlannerConfig(candidates=32, horizon=3, iterations=1, elites=4)
    cfg5 = PlannerConfig(candidates=32, horizon=3, iterations=5, elites=4)
    one = plan(quadratic, start(), cfg1, np.random.default_rng(1))
    five = plan(quadratic, start(), cfg5, np.random.default_rng(1))
    assert five.cost <= one.cost
    assert five.history[0] == one.cost  # same first batch from the same seed


def test_plan_is_deterministic_for_a_seed() -> None:
    cfg = PlannerConfig(candidates=16, horizon=3, iterations=3, elites=4)
    a = plan(quadratic, start(), cfg, np.random.default_rng(7))
    b = plan(quadratic, start(), cfg, np.random.default_rng(7))
    np.testing.assert_array_equal(a.actions, b.actions)


def test_non_finite_costs_never_win_and_samples_stay_in_bounds() -> None:
    seen: list[np.ndarray] = []

    def cost(actions: np.ndarray) -> np.ndarray:
        seen.append(actions)
        out = quadratic(actions)
        out[::2] = np.nan  # a failed prediction
        return out

    cfg = PlannerConfig(candidates=10, horizon=3, iterations=3, elites=2, init_std=500.0)
    result = plan(cost, start(), cfg, np.random.default_rng(0))
    assert np.isfinite(result.cost)
    assert result.index % 2 == 1
    assert all(a.min() >= 0.0 and a.max() <= 512.0 for a in seen)


def test_a_cost_of_the_wrong_shape_is_refused() -> None:
    cfg = PlannerConfig(candidates=4, horizon=3, iterations=1, elites=2)
    with pytest.raises(ValueError, match=r"expected \(4,\) costs"):
        plan(lambda a: np.zeros(3), start(), cfg, np.random.default_rng(0))


def test_a_mean_of_the_wrong_shape_is_refused() -> None:
    cfg = PlannerConfig(candidates=4, horizon=3, iterations=1, elites=2)
    with pytest.raises(ValueError, match="mean: expected finite"):
        plan(quadratic, np.zeros((2, 2)), cfg, np.random.default_rng(0))
    with pytest.raises(ValueError, match="mean: expected finite"):
        random_sequence(np.full((3, 2), np.nan), cfg, np.random.default_rng(0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"candidates": 0}, "must be >= 1"),
        ({"elites": 20, "candidates": 10}, "elites must lie"),
        ({"init_std": 0.0}, "init_std and temperature"),
        ({"low": 5.0, "high": 5.0}, "must be below"),
    ],
)
def test_bad_planner_sizes_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlannerConfig(**kwargs)  # type: ignore[arg-type]


def test_goal_cost_is_the_l1_of_the_last_frame() -> None:
    goal = np.zeros((4, 4, 3), dtype=np.uint8)
    pred = np.zeros((2, 3, 4, 4, 3), dtype=np.float32)
    pred[0, :2] = 1.0  # only earlier frames differ: no cost
    pred[1, -1] = 0.5
    np.testing.assert_allclose(goal_cost(pred, goal), [0.0, 0.5])
    np.testing.assert_allclose(goal_cost(pred, np.full((4, 4, 3), 255, np.uint8)), [1.0, 0.5])
    with pytest.raises(ValueError, match="goal_cost"):
        goal_cost(pred, np.zeros((5, 5, 3), dtype=np.uint8))
