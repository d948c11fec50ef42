"""Per-token credit for video frames, layer by layer: the scorer's patch rewards, the wire sample's
``token_rewards``, the per-token advantage and its mix with the frame's, and the packed batch.
The gRPC round trip is in ``tests/integration/test_reward_grpc.py``.

Bad input, and what it gets: a patch grid that is not two positive integers raises
``InvalidInput`` (the service answers INVALID_ARGUMENT naming ``options.video.patch_grid``); a grid
that does not split the frame into equal patches scores ``invalid_input`` with the reason; a result
whose patch rewards are not finite cannot be built; patch rewards of another count than the
response's tokens raise ``ValueError`` in the orchestrator (a wiring error, never a silent
mismatch); a wire sample whose ``token_rewards`` has another length or a non-finite value is
refused by the schema; ``token_credit`` outside [0, 1] raises; token advantages of another length
than the response are refused by ``pack``; ``rl.token_credit`` with the multi-step layout, or
without a token grid holding one frame's tokens, is refused at configuration time.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from rlvr_world.apps.orchestrator.worker import to_sample
from rlvr_world.grpo.advantage import group_normalized_scores, token_normalized_scores
from rlvr_world.grpo.groups import TrainSample, prepare_groups
from rlvr_world.queue.schema import ScoredGroup, ScoredSample, group_from_fields
from rlvr_world.rewards.patches import patch_means
from rlvr_world.rewards.types import InvalidInput, RewardResult, Status
from rlvr_world.rewards.video import VideoRewardConfig, score_video
from trainer.model import pack

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[2]


def frames(seed: int, shape: tuple[int, ...] = (1, 8, 12, 3)) -> np.ndarray:
    return np.random.default_rng(seed).random(shape)


# ---------------------------------------------------------------- the scorer


def test_patch_rewards_are_each_patch_l1_and_average_to_the_frame_reward() -> None:
    pred, target = frames(0), frames(1)
    result = score_video(pred, target, VideoRewardConfig(weights={"l1": 1.0}, patch_grid=(2, 3)))
    assert result.status is Status.OK
    patches = np.array(result.patch_rewards).reshape(1, 2, 3)
    by_hand = -np.abs(pred - target)[0].reshape(2, 4, 3, 4, 3).mean(axis=(1, 3, 4))
    np.testing.assert_allclose(patches[0], by_hand, rtol=1e-12)
    assert patches.mean() == pytest.approx(result.reward, rel=1e-12)


def test_terms_without_a_per_pixel_form_are_shared_by_every_patch() -> None:
    pred, target = frames(2, (2, 8, 8, 3)), frames(3, (2, 8, 8, 3))
    pred[1] = pred[0]  # the second frame copies the first: the repetition penalty applies
    config = VideoRewardConfig(
        weights={"l1": 2.0, "mse": 1.0, "psnr": 0.01},
        repetition_penalty=0.5,
        patch_grid=(2, 2),
    )
    result = score_video(pred, target, config)
    patches = np.array(result.patch_rewards).reshape(2, 2, 2)
    diff = pred - target
    local = 2.0 * patch_means(np.abs(diff), (2, 2)) + patch_means(np.square(diff), (2, 2))
    frame_psnr = -0.01 * np.array([10 * np.log10(1 / np.square(diff[t]).mean()) for t in range(2)])
    expected = -(local + frame_psnr[:, None, None] + np.array([0.0, 0.5])[:, None, None])
    np.testing.assert_allclose(patches, expected, rtol=1e-9)
    frame_means = patches.mean(axis=(1, 2))
    assert frame_means.mean() == pytest.approx(result.reward, rel=1e-12)  # aggregation "mean"


def test_identical_frames_give_zero_patch_rewards_and_no_grid_gives_none() -> None:
    pred = frames(4)
    same = score_video(pred, pred, VideoRewardConfig(weights={"l1": 1.0}, patch_grid=(4, 6)))
    assert same.patch_rewards == (0.0,) * 24
    assert score_video(pred, frames(5), VideoRewardConfig(weights={"l1": 1.0})).patch_rewards == ()


def test_bad_grids_are_refused_with_the_reason() -> None:
    for grid in [(0, 2), (2,), (2, 2, 2), (1.5, 2), (True, 2), "2x2"]:
        with pytest.raises(InvalidInput, match="patch_grid: expected \\(rows, cols\\)"):
            VideoRewardConfig(patch_grid=grid)  # type: ignore[arg-type]
    result = score_video(
        frames(0), frames(1), VideoRewardConfig(weights={"l1": 1.0}, patch_grid=(3, 3))
    )
    assert result.status is Status.INVALID_INPUT
    assert "frames of 8x12 do not split into a 3x3 grid" in result.message
    assert result.patch_rewards == ()


def test_a_result_refuses_non_finite_patch_rewards() -> None:
    with pytest.raises(ValueError, match="patch_rewards must be finite"):
        RewardResult(reward=0.0, status=Status.OK, patch_rewards=(0.0, float("nan")))
    ok = RewardResult(reward=-1.0, status=Status.OK, patch_rewards=(-1.0, -1.0))
    assert ok.to_dict()["patch_rewards"] == [-1.0, -1.0]
    assert "patch_rewards" not in RewardResult(reward=0.0, status=Status.OK).to_dict()


# ---------------------------------------------------------------- the wire sample


def test_patch_rewards_become_the_samples_token_rewards() -> None:
    result = RewardResult(reward=-0.5, status=Status.OK, patch_rewards=(-1.0, 0.0, -0.5, -0.5))
    sample = to_sample([5, 6, 7, 8], [-0.1] * 4, result)
    assert sample.token_rewards == [-1.0, 0.0, -0.5, -0.5]
    with pytest.raises(ValueError, match="4 patch rewards for 3 response tokens"):
        to_sample([5, 6, 7], [-0.1] * 3, result)
    failed = RewardResult(reward=0.0, status=Status.ERROR, message="x")
    assert to_sample([5], [-0.1], failed).token_rewards is None


def test_the_schema_checks_token_rewards_and_round_trips_them() -> None:
    with pytest.raises(ValidationError, match="token_rewards has 1 entries but token_ids has 2"):
        ScoredSample(
            token_ids=[1, 2], logprobs=[-1.0, -1.0], reward=0.0, status=Status.OK, token_rewards=[0]
        )
    with pytest.raises(ValidationError, match="token_rewards must be finite"):
        ScoredSample(
            token_ids=[1],
            logprobs=[-1.0],
            reward=0.0,
            status=Status.OK,
            token_rewards=[float("inf")],
        )
    group = make_group("g", [[0.0, -1.0], [-2.0, -1.0]])
    assert group_from_fields(group.to_fields()) == group


# ---------------------------------------------------------------- advantages


def make_group(
    gid: str,
    token_rewards: list[list[float] | None],
    statuses: list[Status] | None = None,
) -> ScoredGroup:
    statuses = statuses or [Status.OK] * len(token_rewards)
    samples = []
    for i, (rewards, status) in enumerate(zip(token_rewards, statuses, strict=True)):
        length = len(rewards) if rewards is not None else 2
        ok = status is Status.OK
        samples.append(
            ScoredSample(
                token_ids=[10 + i] * length,
                logprobs=[-0.5] * length,
                reward=(float(np.mean(rewards)) if rewards else -float(i)) if ok else None,
                status=status,
                token_rewards=rewards if ok else None,
            )
        )
    return ScoredGroup(
        group_id=gid,
        prompt_id=gid,
        task="video",
        policy_version=0,
        prompt_token_ids=[1],
        samples=samples,
    )


def test_token_advantages_centre_each_position_and_share_one_scale() -> None:
    rewards = torch.tensor([[0.0, -1.0, -0.2], [0.0, -3.0, -0.4], [0.0, -2.0, -0.6]])
    adv = token_normalized_scores(rewards)
    assert adv[:, 0].tolist() == [0.0, 0.0, 0.0]  # a patch every sample got the same: no push
    centred = rewards - rewards.mean(dim=0)
    scale = torch.sqrt(centred.square().sum() / (2 * 3))
    torch.testing.assert_close(adv, centred / (scale + 1e-6))
    torch.testing.assert_close(token_normalized_scores(rewards, norm_adv_by_std=False), centred)
    assert token_normalized_scores(torch.ones(3, 4)).abs().sum() == 0
    for shape in [(1, 3), (3,), (2, 0)]:
        with pytest.raises(ValueError, match="rewards must be"):
            token_normalized_scores(torch.zeros(shape))


def test_token_credit_mixes_the_frame_and_token_advantages() -> None:
    rewards = [[0.0, -1.0], [0.0, -3.0], [-1.0, -1.0]]
    group = make_group("g", rewards)  # type: ignore[arg-type]
    plain = prepare_groups([group])
    assert all(s.token_advantages is None for s in plain.samples)
    assert plain.token_credit_groups == 0
    frame = group_normalized_scores(
        torch.tensor([np.mean(r) for r in rewards], dtype=torch.float64), ["g"] * 3
    )
    token = token_normalized_scores(torch.tensor(rewards, dtype=torch.float64))
    for credit in (1.0, 0.25):
        prepared = prepare_groups([group], token_credit=credit)
        assert prepared.token_credit_groups == 1
        for i, s in enumerate(prepared.samples):
            assert s.advantage == pytest.approx(float(frame[i]))
            expected = (1 - credit) * frame[i] + credit * token[i]
            assert s.token_advantages == pytest.approx(expected.tolist())


def test_groups_that_cannot_have_token_credit_keep_one_advantage_per_sample() -> None:
    cases = {
        "no token rewards": make_group("a", [None, None]),
        "one sample without": make_group("b", [[0.0, -1.0], None]),
        "different lengths": make_group("c", [[0.0, -1.0], [-1.0, -1.0, -1.0]]),
        # an unparseable sample trains with grpo.unparseable_reward, not its scored reward
        "a reward replaced": make_group(
            "d", [[0.0, -1.0], [-1.0, -1.0], [0.0, 0.0]], [Status.OK, Status.OK, Status.UNPARSEABLE]
        ),
    }
    for name, group in cases.items():
        prepared = prepare_groups([group], token_credit=1.0, unparseable_reward=0.0)
        assert prepared.token_credit_groups == 0, name
        assert all(s.token_advantages is None for s in prepared.samples), name
    mixed = prepare_groups(
        [cases["no token rewards"], make_group("e", [[0.0, -1.0], [-1.0, -1.0]])], token_credit=1.0
    )
    assert mixed.token_credit_groups == 1
    assert [s.token_advantages is None for s in mixed.samples] == [True, True, False, False]
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="token_credit must lie in \\[0, 1\\]"):
            prepare_groups([cases["no token rewards"]], token_credit=bad)


def test_pack_puts_each_tokens_advantage_on_it() -> None:
    samples = [
        TrainSample("g", (1, 2), (3, 4, 5), (-1.0,) * 3, 0.0, 0.75, None, (0.5, -1.0, 2.0)),
        TrainSample("g", (1,), (3, 4), (-1.0,) * 2, 0.0, -0.75),
    ]
    batch = pack(samples, torch.device("cpu"))
    assert batch.advantages.tolist() == [[0.5, -1.0, 2.0], [-0.75, -0.75, 0.0]]
    bad = TrainSample("g", (1,), (3, 4), (-1.0,) * 2, 0.0, 0.0, None, (1.0,))
    with pytest.raises(ValueError, match="token_advantages of sample 0 has 1 entries for 2"):
        pack([bad], torch.device("cpu"))


# ---------------------------------------------------------------- configuration


def test_the_run_config_wires_the_grid_or_refuses(tmp_path: Path) -> None:
    from rlvr_world.apps.video.config import load_video_config
    from rlvr_world.apps.video.rl import orchestrator_config, write_trainer_yaml
    from rlvr_world.video.layout import SingleStepVocab
    from trainer.config import load_config

    smoke = REPO / "configs" / "video" / "smoke.yaml"
    cfg = load_video_config(smoke, {"run.run_dir": str(tmp_path), "rl.token_credit": 0.5})
    vocab = SingleStepVocab(visual_codes=16, action_bins=cfg.model.action_bins)
    assert orchestrator_config(cfg, 64, vocab, grid=(8, 8)).video_patch_grid == (8, 8)
    for grid in (None, (4, 8)):
        with pytest.raises(ValueError, match=r"rl\.token_credit: needs the frame's token grid"):
            orchestrator_config(cfg, 64, vocab, grid=grid)
    plain = load_video_config(smoke, {"run.run_dir": str(tmp_path)})
    assert orchestrator_config(plain, 64, vocab, grid=(8, 8)).video_patch_grid is None
    path = write_trainer_yaml(cfg, tmp_path / "model", "redis://127.0.0.1:1/0", tmp_path)
    assert load_config(path).grpo.token_credit == 0.5
    with pytest.raises(ValidationError, match="single_step only"):
        load_video_config(
            REPO / "configs" / "video" / "smoke_multistep.yaml", {"rl.token_credit": 1.0}
        )
    with pytest.raises(ValidationError, match="token_credit"):
        load_video_config(smoke, {"rl.token_credit": 1.5})
