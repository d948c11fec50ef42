"""GRPO advantages, KL estimators and policy losses against the reference forks' golden numbers.

Reads $RLVR_SHARED_DIR/golden/golden_grpo_video.jsonl (computed by both forks' core_algos.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from rlvr_world.grpo.advantage import grpo_outcome_advantage
from rlvr_world.grpo.loss import kl_penalty, policy_loss
from tests.helpers.shared import shared_file

torch.set_num_threads(1)


def _records(kind: str) -> list[dict[str, Any]]:
    path = shared_file("golden", "golden_grpo_video.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == kind]


def _t(x: Any) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float32)


def _adv_cases() -> list[dict[str, Any]]:
    return _records("grpo_advantage")


def test_golden_file_has_every_grpo_kind() -> None:
    assert len(_records("grpo_advantage")) == 11
    assert len(_records("kl_penalty")) == 8
    assert len(_records("policy_loss")) == 5


def test_grpo_advantage_matches_golden() -> None:
    for rec in _adv_cases():
        n = len(rec["scores"])
        if "token_level_rewards" in rec:
            rewards, mask = _t(rec["token_level_rewards"]), _t(rec["response_mask"])
        else:  # uniform_std record stores only the scores
            rewards, mask = _t(rec["scores"]).unsqueeze(-1), torch.ones(n, 1)
        adv = grpo_outcome_advantage(
            rewards, mask, rec["uids"], uniform_std=bool(rec.get("uniform_std", False))
        )
        per_response = adv.sum(-1) / mask.sum(-1)
        torch.testing.assert_close(
            per_response, _t(rec["per_response_advantage"]), rtol=1e-5, atol=1e-6
        )
        if "advantages" in rec:
            torch.testing.assert_close(adv, _t(rec["advantages"]), rtol=1e-5, atol=1e-6)


def test_kl_penalty_matches_golden() -> None:
    for rec in _records("kl_penalty"):
        got = kl_penalty(_t(rec["logprob"]), _t(rec["ref_logprob"]), rec["kl_type"])
        torch.testing.assert_close(got, _t(rec["kld"]), rtol=1e-5, atol=1e-6)


def test_policy_loss_matches_golden_in_both_forks() -> None:
    for rec in _records("policy_loss"):
        low = rec.get("cliprange_low", rec.get("cliprange"))
        high = rec.get("cliprange_high", rec.get("cliprange"))
        out = policy_loss(
            _t(rec["old_log_prob"]),
            _t(rec["log_prob"]),
            _t(rec["advantages"]),
            _t(rec["mask"]),
            clip_low=low,
            clip_high=high,
            # lang_wm has no dual-clip; vid_wm uses c = 3.0
            clip_ratio_c=rec.get("clip_ratio_c") if rec["fork"] == "vid_wm" else None,
            agg_mode=rec.get("loss_agg_mode", "token-mean"),
        )
        assert out.loss.item() == pytest.approx(rec["pg_loss"], rel=1e-6)
        assert out.clipfrac.item() == pytest.approx(rec["pg_clipfrac"], rel=1e-6)
        assert out.ppo_kl.item() == pytest.approx(rec["ppo_kl"], rel=1e-6)


def test_golden_clipfrac_lower_is_the_reference_bug() -> None:
    # docs/reference.md#quirks, Q11: the vid_wm fork always logs 0; the corrected metric is > 0
    # when the dual-clip bound is active (ratio e^3 with A < 0 here).
    rec = next(r for r in _records("policy_loss") if "dual-clip" in r.get("description", ""))
    assert rec["pg_clipfrac_lower"] == 0.0
    out = policy_loss(
        _t(rec["old_log_prob"]), _t(rec["log_prob"]), _t(rec["advantages"]), _t(rec["mask"])
    )
    assert out.clipfrac_lower.item() == pytest.approx(0.25)
