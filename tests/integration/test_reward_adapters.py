"""Adapters against a real service: verl through its own reward loop manager, TRL as a call."""

from __future__ import annotations

import asyncio
import json
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


def test_verl_adapter_keys_are_stable_for_failures(svc: ServiceThread) -> None:
    from rlvr_world.adapters.verl import compute_score

    out = asyncio.run(
        compute_score("web_agent", "no headers here", "New items:\n[1] a", None,
                      address=svc.grpc_address, metric_keys=["f1", "precision"])
    )  # fmt: skip
    assert out["reward_ok"] == 0.0
    assert out["reward_status"] == "unparseable"
    assert set(out) == {"score", "reward_ok", "reward_status", "f1", "precision"}


def test_trl_reward_func_plain_call(svc: ServiceThread) -> None:
    """Called as TRL's GRPOTrainer calls reward_funcs: completions + dataset columns."""
    from rlvr_world.adapters.trl import RewardServiceFunc

    rows = example_rows("web_agent")
    func = RewardServiceFunc(svc.grpc_address, default_data_source="web_agent")
    try:
        completions = [[{"role": "assistant", "content": r["solution_str"]}] for r in rows]
        completions.append("not an answer")
        truths = [r["ground_truth"] for r in rows] + [rows[0]["ground_truth"]]
        rewards = func(
            completions,
            ground_truth=truths,
            prompts=["p"] * len(truths),
            extra_info=[json.dumps({})] * len(truths),
        )
    finally:
        func.close()
    expected = [score_mapping({**r, "variant": "strict"}).reward for r in rows]  # the default
    assert rewards[:-1] == pytest.approx(expected)
    assert rewards[-1] is None  # unparseable: not applicable, not a silent 0
