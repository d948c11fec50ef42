"""verl 0.9.1's reward loop scores through the reward service: ``RewardLoopManager`` with
``reward.num_workers=2`` Ray workers, each running verl's ``NaiveRewardManager`` over our async
``compute_score`` (``rlvr_world/adapters/verl.py``), against a real gRPC service on loopback.

This is the code verl's trainer runs for rule-based rewards (``RayPPOTrainer`` builds a
``RewardLoopManager`` and calls ``compute_rm_score``); only the GPU parts around it (rollout,
actor) are absent. The config is ours, ``configs/verl/text_game_grpo.yaml``, composed over verl's
own ``ppo_trainer.yaml`` and resolved in the driver as ``main_ppo`` does; the tokenizer is the tiny
one of ``tests.helpers.tiny_lm`` saved where ``actor_rollout_ref.model.path`` points. Each worker
decodes its responses, awaits ``compute_score`` for its chunk with ``asyncio.gather`` (the async
path: no thread pool), and verl assembles ``rm_scores`` (the score on each response's last valid
token) and the ``reward_extra_info`` columns. A local Ray cluster (2 CPUs) is started for the
module and shut down after it; it must start before the reward service (Ray's ``fork`` of its
GCS server fails while gRPC threads run in this process).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlvr_world.rewards.dispatch import score_mapping
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows
from tests.helpers.tiny_lm import build_tiny_lm

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # Ray + 2 verl workers: ~25 s
verl = pytest.importorskip("verl", reason="verl is in the trainer extra")
ROOT = Path(__file__).resolve().parents[2]
PROMPT_LEN = 4
GARBAGE = "the kettle is on the stove"  # no JSON object: unparseable


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})  # fmt: skip
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def svc(ray_cluster: None) -> Iterator[ServiceThread]:
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as service:
        yield service


@pytest.fixture(scope="module")
def manager(svc: ServiceThread, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """verl's RewardLoopManager over our shipped config, pointed at ``svc``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager

    import rlvr_world.adapters.verl as adapter

    model = build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))
    env = {"RLVR_VERL_ADAPTER": adapter.__file__, "RLVR_REWARD_ADDRESS": svc.grpc_address}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "configs" / "verl"), version_base=None):
            cfg = compose(
                config_name="text_game_grpo",
                overrides=["reward.num_workers=2", f"actor_rollout_ref.model.path={model}"],
            )
        OmegaConf.resolve(cfg)  # main_ppo resolves before the config travels to the workers
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return RewardLoopManager(cfg), model


def verl_batch(tokenizer: Any, rows: list[dict[str, Any]], max_len: int = 512) -> Any:
    """A rollout batch as verl's trainer hands it to the reward loop (right-padded responses)."""
    import torch
    from verl import DataProto

    prompts, responses, masks = [], [], []
    for row in rows:
        ids = tokenizer(row["solution_str"], add_special_tokens=False)["input_ids"]
        assert len(ids) <= max_len
        pad = max_len - len(ids)
        prompts.append([tokenizer.bos_token_id] * PROMPT_LEN)
        responses.append(ids + [tokenizer.pad_token_id] * pad)
        masks.append([1] * (PROMPT_LEN + len(ids)) + [0] * pad)
    return DataProto.from_dict(
        tensors={"prompts": torch.tensor(prompts), "responses": torch.tensor(responses),
                 "attention_mask": torch.tensor(masks)},
        non_tensors={
            "data_source": np.array([r["data_source"] for r in rows], dtype=object),
            "reward_model": np.array([{"ground_truth": r["ground_truth"]} for r in rows],
                                     dtype=object),
            "extra_info": np.array([dict(r.get("extra_info") or {}) for r in rows], dtype=object),
        },
    )  # fmt: skip


def text_rows() -> list[dict[str, Any]]:
    rows = example_rows("llm_simulator")
    return [*rows, {**rows[0], "solution_str": GARBAGE}]


def test_reward_loop_workers_score_through_the_service(manager: Any) -> None:
    import ray
    from transformers import AutoTokenizer

    mgr, model = manager
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = text_rows()
    data = verl_batch(tokenizer, rows)
    out = mgr.compute_rm_score(data)

    workers = mgr.reward_loop_workers
    assert len(workers) == 2
    facts = ray.get([w.__ray_call__.remote(
        lambda self: (os.getpid(), self.reward_manager.is_async_reward_score)) for w in workers
    ])  # fmt: skip
    assert len({pid for pid, _ in facts}) == 2  # two processes
    assert all(is_async for _, is_async in facts)  # verl awaits our coroutine: no thread pool

    verl_fields = ("data_source", "solution_str", "ground_truth", "extra_info")  # what verl passes
    cores = [score_mapping({k: r[k] for k in verl_fields}) for r in rows]
    expected = [c.reward if c.ok else 0.0 for c in cores]  # unparseable -> 0.0
    scores = out.batch["rm_scores"]
    assert scores.sum(dim=1).tolist() == pytest.approx(expected)
    last = data.batch["attention_mask"][:, PROMPT_LEN:].sum(dim=1) - 1
    assert scores[range(len(rows)), last].tolist() == pytest.approx(expected)
    info = out.non_tensor_batch
    assert list(info["reward_status"]) == [c.status.value for c in cores]
    assert cores[-1].status.value == "unparseable"
    assert list(info["reward_ok"]) == [float(c.ok) for c in cores]
    for got, core in zip(info["exact"], cores, strict=True):
        if core.ok:
            assert got == pytest.approx(core.metrics["exact"])
        else:
            assert np.isnan(got)  # no metrics for an unparseable answer: NaN, the same keys
    assert out.meta_info["reward_extra_keys"] == [
        "score", "reward_ok", "reward_status", "item_accuracy", "score_accuracy", "exact"
    ]  # fmt: skip


def test_a_sample_the_service_refuses_fails_the_step(manager: Any) -> None:
    """invalid_input is the caller's data, not the policy's: ``RewardNotScored`` surfaces from
    verl's reward loop (``ray.get``) with the status and reason; the workers live on."""
    import ray
    from transformers import AutoTokenizer

    from rlvr_world.adapters.errors import RewardNotScored

    mgr, model = manager
    tokenizer = AutoTokenizer.from_pretrained(model)
    rows = text_rows()[:2]
    rows[1] = {**rows[1], "extra_info": {"data_state": "not an object"}}
    with pytest.raises(RewardNotScored) as err:  # ray.get re-raises it as RayTaskError(...)
        mgr.compute_rm_score(verl_batch(tokenizer, rows))
    assert isinstance(err.value, ray.exceptions.RayTaskError)
    assert "status invalid_input: extra_info.data_state: not valid JSON" in str(err.value)
    again = mgr.compute_rm_score(verl_batch(tokenizer, text_rows()[:2]))
    assert list(again.non_tensor_batch["reward_status"]) == ["ok", "ok"]
