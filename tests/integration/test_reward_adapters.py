"""Adapters against a real service: verl through its own reward manager, TRL as a call; what each
status becomes (docs/integrations.md#one-rule-for-failures): unparseable -> the configured low
reward, a failure of the service or of the caller's data -> TRL's None / verl's ``RewardNotScored``,
with the reason logged."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows

pytestmark = pytest.mark.integration
ADAPTER = Path(__file__).resolve().parents[2] / "rlvr_world" / "adapters" / "verl.py"


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as service:
        yield service


@pytest.fixture(scope="module")
def late() -> Iterator[ServiceThread]:
    """A deadline no scoring can meet: every score has status ``timeout``."""
    settings = RewardSettings(grpc_port=0, http_port=0, workers=1, deadline_s=1e-6)
    with ServiceThread(settings) as service:
        yield service


def byte_tokenizer() -> object:
    """A real (byte-level, no merges) fast tokenizer built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


@pytest.mark.slow  # importing verl (ray, transformers) takes ~6 s here
def test_verl_naive_reward_manager_scores_through_the_service(svc: ServiceThread) -> None:
    pytest.importorskip("verl", reason="verl is not installed")
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": str(ADAPTER),
                    "name": "compute_score",
                    "reward_kwargs": {"address": svc.grpc_address, "metric_keys": ["f1"]},
                }
            }
        }
    )
    compute_score = get_custom_reward_fn(config)
    tokenizer = byte_tokenizer()
    manager = NaiveRewardManager(config, tokenizer, compute_score)
    assert manager.is_async_reward_score
    rows = example_rows("web_agent")
    outputs = []
    for row in rows:
        ids = tokenizer.encode(row["solution_str"])  # type: ignore[attr-defined]
        responses = torch.tensor([ids])
        data = DataProto.from_dict(
            tensors={"responses": responses, "attention_mask": torch.ones_like(responses)},
            non_tensors={
                "data_source": np.array([row["data_source"]], dtype=object),
                "reward_model": np.array([{"ground_truth": row["ground_truth"]}], dtype=object),
                "extra_info": np.array([{"index": np.int64(3)}], dtype=object),
            },
        )
        outputs.append(manager.loop.run_until_complete(manager.run_single(data)))
    for row, out in zip(rows, outputs, strict=True):
        core = score_mapping({k: v for k, v in row.items() if k != "variant"})  # verl: default
        assert out["reward_score"] == pytest.approx(core.reward)
        info = out["reward_extra_info"]
        assert set(info) == {"score", "reward_ok", "reward_status", "f1"}
        assert info["f1"] == pytest.approx(core.metrics["f1"])
        assert info["reward_status"] == core.status.value


def test_verl_adapter_unparseable_gets_the_low_reward(svc: ServiceThread) -> None:
    from rlvr_world.adapters.verl import compute_score

    args = ("web_agent", "no headers here", "New items:\n[1] a", None)
    out = asyncio.run(
        compute_score(*args, address=svc.grpc_address, metric_keys=["f1", "precision"])
    )
    assert (out["score"], out["reward_ok"], out["reward_status"]) == (0.0, 0.0, "unparseable")
    assert set(out) == {"score", "reward_ok", "reward_status", "f1", "precision"}
    low = asyncio.run(compute_score(*args, address=svc.grpc_address, unparseable_reward=-0.5))
    assert low["score"] == -0.5


def test_verl_adapter_raises_on_a_failure_not_the_policys(
    svc: ServiceThread, late: ServiceThread, caplog: pytest.LogCaptureFixture
) -> None:
    """timeout (the service) and invalid_input (the caller's data) raise RewardNotScored, logged;
    failure_reward scores them instead, with a warning."""
    from rlvr_world.adapters.errors import RewardNotScored
    from rlvr_world.adapters.verl import compute_score

    row = example_rows("web_agent")[0]
    args = (row["data_source"], row["solution_str"], row["ground_truth"], None)
    with caplog.at_level(logging.WARNING, logger="rlvr_world.adapters.verl"):
        with pytest.raises(RewardNotScored, match=r"status timeout: .*deadline"):
            asyncio.run(compute_score(*args, address=late.grpc_address))
        with pytest.raises(RewardNotScored, match="status invalid_input: ground_truth"):
            asyncio.run(compute_score("web_agent", "New items:", "no sections", None,
                                      address=svc.grpc_address))  # fmt: skip
        with pytest.raises(RewardNotScored, match="invalid_input: extra_info: set is not JSON"):
            asyncio.run(compute_score(*args[:3], {"x": {1}}, address=svc.grpc_address))
        out = asyncio.run(compute_score(*args, address=late.grpc_address, failure_reward=-1.0))
    assert (out["score"], out["reward_ok"], out["reward_status"]) == (-1.0, 0.0, "timeout")
    assert "sample not scored: timeout" in caplog.text
    assert "failure_reward -1.0" in caplog.text


def test_trl_reward_func_plain_call(svc: ServiceThread) -> None:
    """Called as TRL's GRPOTrainer calls reward_funcs: completions + dataset columns."""
    from rlvr_world.adapters.trl import RewardServiceFunc

    rows = example_rows("web_agent")
    func = RewardServiceFunc(svc.grpc_address, default_data_source="web_agent")
    logged: dict[str, list[object]] = {}
    try:
        completions = [[{"role": "assistant", "content": r["solution_str"]}] for r in rows]
        completions.append("not an answer")
        truths = [r["ground_truth"] for r in rows] + [rows[0]["ground_truth"]]
        rewards = func(
            completions,
            ground_truth=truths,
            prompts=["p"] * len(truths),
            extra_info=[json.dumps({})] * len(truths),
            log_extra=logged.__setitem__,
        )
    finally:
        func.close()
    expected = [score_mapping({**r, "variant": "strict"}).reward for r in rows]  # the default
    assert rewards[:-1] == pytest.approx(expected)
    assert rewards[-1] == 0.0  # unparseable: the policy's failure, the low reward (not None)
    assert logged["reward_status"] == ["ok"] * len(rows) + ["unparseable"]


def test_trl_none_only_for_failures_not_the_policys(
    svc: ServiceThread, late: ServiceThread, caplog: pytest.LogCaptureFixture
) -> None:
    """A row the service refuses gets None and the rest is still scored: an unknown data_source
    (refused by the client), a ground truth without sections (status invalid_input), extra_info
    that is not JSON (ScoreBatch refuses the whole batch: scored again one by one). A timeout
    gets None. Each one is logged with its reason."""
    from rlvr_world.adapters.trl import RewardServiceFunc

    rows = example_rows("web_agent")[:2]
    good = [r["solution_str"] for r in rows]
    truth = rows[0]["ground_truth"]
    func = RewardServiceFunc(svc.grpc_address, unparseable_reward=-1.0)
    metrics: dict[str, float] = {}
    with caplog.at_level(logging.WARNING, logger="rlvr_world.adapters.trl"):
        try:
            rewards = func(
                [*good, "garbage", good[0], good[0], good[0]],
                ground_truth=[r["ground_truth"] for r in rows]
                + [truth, truth, "no sections here", truth],
                data_source=["web_agent"] * 3 + ["chess", "web_agent", "web_agent"],
                extra_info=[None] * 5 + ["{not json"],
                log_metric=metrics.__setitem__,
            )
        finally:
            func.close()
        late_func = RewardServiceFunc(late.grpc_address, default_data_source="web_agent")
        try:
            timed_out = late_func([good[0]], ground_truth=[truth])
        finally:
            late_func.close()
    expected = [score_mapping({**r, "variant": "strict"}).reward for r in rows]
    assert rewards[:2] == pytest.approx(expected)
    assert rewards[2:] == [-1.0, None, None, None]
    assert timed_out == [None]
    assert metrics["rlvr_reward/invalid_input_frac"] == pytest.approx(3 / 6)
    assert metrics["rlvr_reward/unparseable_frac"] == pytest.approx(1 / 6)
    assert "reward batch refused (requests[4].extra_info_json: not valid JSON" in caplog.text
    for i, field in ((3, "data_source"), (4, "ground_truth"), (5, "extra_info")):
        assert f"sample {i}: not scored, None for TRL (status invalid_input: {field}" in caplog.text
    assert "status timeout" in caplog.text


def test_trl_missing_columns_and_unreachable_service_raise() -> None:
    from rlvr_world.adapters.trl import RewardServiceFunc
    from rlvr_world.client import RetryPolicy, RewardServiceUnavailable

    func = RewardServiceFunc("127.0.0.1:9")  # nothing listens there
    func._client.retry = RetryPolicy(attempts=2, initial_s=0.01)
    try:
        with pytest.raises(ValueError, match="ground_truth: the dataset needs this column"):
            func(["x"], data_source=["web_agent"])
        with pytest.raises(ValueError, match="data_source: the dataset needs this column"):
            func(["x"], ground_truth=["New items:"])
        with pytest.raises(RewardServiceUnavailable, match=r"127\.0\.0\.1:9"):
            func(["x"], ground_truth=["New items:"], data_source=["web_agent"])
    finally:
        func.close()
