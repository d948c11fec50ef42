"""Our GRPO functions against verl 0.9.1's core_algos on random batches.

Marked slow: importing verl takes ~10 s. Skipped with a reason where verl is not installed
(it is in the ``trainer`` extra).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlvr_world.grpo.advantage import grpo_outcome_advantage
from rlvr_world.grpo.loss import AGG_MODES, agg_loss, kl_penalty, policy_loss

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def core_algos():  # type: ignore[no-untyped-def]
    return pytest.importorskip(
        "verl.trainer.ppo.core_algos", reason="verl not installed (pip install rlvr-world[trainer])"
    )


def _batch(seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    b, t = 12, 7
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    old = -torch.rand(b, t, generator=g) * 3
    new = old + torch.randn(b, t, generator=g) * 0.6
    ref = old + torch.randn(b, t, generator=g) * 2.0
    adv = torch.randn(b, t, generator=g) * mask
    return old, new, ref, adv, mask


def test_advantage_matches_verl(core_algos) -> None:  # type: ignore[no-untyped-def]
    for seed in range(5):
        *_, mask = _batch(seed)
        rng = np.random.default_rng(seed)
        index = rng.integers(0, 4, size=mask.shape[0]).astype(str)
        rewards = torch.zeros_like(mask)
        last = mask.sum(-1).long() - 1
        rewards[torch.arange(mask.shape[0]), last] = torch.from_numpy(
            rng.normal(size=mask.shape[0])
        ).float()
        for norm in (True, False):
            want, _ = core_algos.compute_grpo_outcome_advantage(
                rewards, mask, index, norm_adv_by_std_in_grpo=norm
            )
            got = grpo_outcome_advantage(rewards, mask, list(index), norm_adv_by_std=norm)
            torch.testing.assert_close(got, want)


def test_kl_penalty_matches_verl(core_algos) -> None:  # type: ignore[no-untyped-def]
    _, new, ref, _, _ = _batch(1)
    new = torch.cat([new, torch.tensor([[-30.0] * 7])])  # exercise the clamps
    ref = torch.cat([ref, torch.tensor([[-1.0] * 7])])
    for kind in ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k3+", "k1+"):
        torch.testing.assert_close(
            kl_penalty(new, ref, kind), core_algos.kl_penalty(new, ref, kind), msg=kind
        )


def test_policy_loss_and_agg_match_verl(core_algos) -> None:  # type: ignore[no-untyped-def]
    for seed in range(4):
        old, new, _, adv, mask = _batch(seed)
        for mode in AGG_MODES:
            want = core_algos.compute_policy_loss(
                old,
                new,
                adv,
                mask,
                cliprange=0.2,
                cliprange_low=0.2,
                cliprange_high=0.28,
                clip_ratio_c=3.0,
                loss_agg_mode=mode,
            )
            got = policy_loss(
                old, new, adv, mask, clip_low=0.2, clip_high=0.28, clip_ratio_c=3.0, agg_mode=mode
            )
            for ours, theirs in zip(
                (got.loss, got.clipfrac, got.ppo_kl, got.clipfrac_lower), want, strict=True
            ):
                torch.testing.assert_close(ours, theirs, msg=mode)
            loss_mat = torch.randn_like(mask)
            torch.testing.assert_close(
                agg_loss(loss_mat, mask, mode), core_algos.agg_loss(loss_mat, mask, mode)
            )
