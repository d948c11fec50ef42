"""TRL 1.16 ``GRPOTrainer`` trains with ``RewardServiceFunc`` against a real reward service.

The reward service runs on loopback (real gRPC server and scoring pool); the policy is the tiny
Llama of ``tests.helpers.tiny_lm`` (nothing downloaded). Each test trains two real optimizer steps
and reads back what TRL itself logged (its completions table: completion, reward, our
``reward_status`` column) after every step, then scores those same completions through the
service directly: the rewards TRL trained on are the service's, with ``unparseable`` mapped to
``unparseable_reward`` (docs/integrations.md#one-rule-for-failures).

The gradient test: a policy that cannot yet write the answer format, in groups where at most one
sample parses. With the adapter's default (unparseable -> 0.0) the garbage samples get negative
advantages and TRL's grad norm is > 0 at every step; with ``unparseable_reward=None`` (the old
"not applicable") the same groups have one scored sample each, TRL warns "All reward functions
returned None" for the rest, and trains with loss 0 and grad norm 0. (A group where *nothing*
parses has equal rewards whatever value unparseable gets: GRPO has no signal there, in any
library; what the adapter guarantees is that TRL sees 0.0, never all-None.) To have exactly one
parseable answer per group, that test generates through TRL's ``rollout_func``: the first sample
of each group is a known answer, the others are sampled from the tiny policy itself; the
log-probs it returns are the policy's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlvr_world.adapters.trl import RewardServiceFunc
from rlvr_world.client import RewardClient
from services.reward.settings import RewardSettings
from services.reward.testing import ServiceThread
from tests.helpers.reward import example_rows
from tests.helpers.tiny_lm import build_tiny_lm

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # TRL + transformers import: ~5 s
GROUP = 4
ROWS = example_rows("web_agent")
#: A parseable, partly right answer to ROWS[0] (one of its six items).
ANSWER = "New items:\n[214] StaticText 'Order #000184 placed'"


@pytest.fixture(scope="module")
def svc() -> Iterator[ServiceThread]:
    with ServiceThread(RewardSettings(grpc_port=0, http_port=0, workers=1)) as service:
        yield service


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm"))


def dataset(rows: list[dict[str, Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": f"Page {i} after the click: ", "ground_truth": r["ground_truth"],
             "data_source": r["data_source"], "extra_info": {"split": "test"}}
            for i, r in enumerate(rows)
        ]
    )  # fmt: skip


def train(
    folder: Path, func: RewardServiceFunc, rows: list[dict[str, Any]], rollout_func: Any = None
) -> tuple[Any, list[dict[str, list[Any]]]]:
    """Two GRPO steps on CPU (one prompt x GROUP completions each); returns the trainer and, per
    step, TRL's own completions table (completion, ground truth, reward, reward_status)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    tables: list[dict[str, list[Any]]] = []

    class Snapshot(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *_: Any, **__: Any) -> None:
            logs = trainer._logs  # TRL's completions table of the step just trained
            tables.append(
                {
                    "completion": list(logs["completion"]),
                    "reward": list(logs["rewards"][func.__name__]),
                    "status": list(logs["extra"]["reward_status"]),
                }
            )

    args = GRPOConfig(
        output_dir=str(folder / "trl_out"),
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_completion_length=16,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(folder),
        processing_class=AutoTokenizer.from_pretrained(folder),
        reward_funcs=[func],
        args=args,
        train_dataset=dataset(rows),
        rollout_func=rollout_func,
        callbacks=[Snapshot()],
    )
    trainer.train()
    return trainer, tables


def service_rewards(svc: ServiceThread, completions: list[str], truth: str) -> list[Any]:
    """What the service says about ``completions``, as (status, reward)."""
    rows = [{"data_source": "web_agent", "solution_str": c, "ground_truth": truth}
            for c in completions]  # fmt: skip
    with RewardClient(svc.grpc_address) as client:
        return [(r.status.value, r.reward) for r in client.score_verl_batch(rows)]


def step_logs(trainer: Any) -> list[dict[str, Any]]:
    return [h for h in trainer.state.log_history if "grad_norm" in h]


def test_grpo_trainer_trains_on_the_service_rewards(svc: ServiceThread, tiny: Path) -> None:
    """The policy's own samples (tiny random model: garbage text), two steps: every logged reward
    is the service's, unparseable -> 0.0, none is None; TRL logs the statuses and their shares."""
    func = RewardServiceFunc(svc.grpc_address)
    try:
        trainer, tables = train(tiny, func, ROWS[:2])
    finally:
        func.close()
    assert trainer.state.global_step == 2 and len(tables) == 2
    for table, row in zip(tables, ROWS[:2], strict=True):
        assert len(table["completion"]) == GROUP
        truth = service_rewards(svc, table["completion"], row["ground_truth"])
        expected = [r if s == "ok" else 0.0 for s, r in truth]
        assert table["reward"] == pytest.approx(expected)
        assert table["status"] == [s for s, _ in truth]
        assert not any(math.isnan(r) for r in table["reward"])  # TRL saw no None
    for log in step_logs(trainer):
        assert 0.0 <= log["rlvr_reward/unparseable_frac"] <= 1.0
        assert log["rlvr_reward/timeout_frac"] == 0.0
        assert log["rlvr_reward/error_frac"] == 0.0
        assert not math.isnan(log["reward"])


def one_answer_per_group(tokenizer: Any) -> Any:
    """A TRL ``rollout_func``: the first completion of each group is ``ANSWER``, the others are
    sampled from the policy; log-probs are the policy's own, by a forward pass."""
    import torch

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        assert len(prompts) == GROUP  # one prompt per step, repeated once per generation
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        model = trainer.model
        for k, prompt in enumerate(prompts):
            pids = tokenizer(prompt)["input_ids"]
            with torch.no_grad():
                if k % GROUP == 0:
                    cids = tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
                    cids = [*cids, tokenizer.eos_token_id]
                else:
                    gen = model.generate(torch.tensor([pids]), do_sample=True, max_new_tokens=12,
                                         pad_token_id=tokenizer.pad_token_id)  # fmt: skip
                    cids = gen[0, len(pids) :].tolist()
                logits = model(torch.tensor([pids + cids])).logits[0, len(pids) - 1 : -1]
                logps = torch.log_softmax(logits.float(), -1)[torch.arange(len(cids)), cids]
            out["prompt_ids"].append(pids)
            out["completion_ids"].append(cids)
            out["logprobs"].append(logps.tolist())
        return out

    return rollout


def test_unparseable_samples_still_give_a_gradient(
    svc: ServiceThread, tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoTokenizer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL
    rollout = one_answer_per_group(AutoTokenizer.from_pretrained(tiny))
    rows = [ROWS[0], ROWS[0]]
    results = {}
    for low in (0.0, None):
        func = RewardServiceFunc(svc.grpc_address, unparseable_reward=low)
        try:
            results[low] = train(tiny, func, rows, rollout_func=rollout)
        finally:
            func.close()
    answer_reward = service_rewards(svc, [ANSWER], ROWS[0]["ground_truth"])[0]
    assert answer_reward[0] == "ok" and 0.0 < answer_reward[1] < 1.0
    trainer, tables = results[0.0]
    for table, log in zip(tables, step_logs(trainer), strict=True):
        truth = service_rewards(svc, table["completion"], ROWS[0]["ground_truth"])
        assert table["reward"] == pytest.approx([r if s == "ok" else 0.0 for s, r in truth])
        assert table["status"] == ["ok"] + ["unparseable"] * (GROUP - 1)
        assert log["grad_norm"] > 0.0 and log["loss"] != 0.0  # the garbage is pushed down
    trainer, tables = results[None]  # the old adapter: unparseable -> None
    for table, log in zip(tables, step_logs(trainer), strict=True):
        assert table["reward"][0] == pytest.approx(answer_reward[1])
        # the policy's samples (random tiny model) never parse: p ~ 300**-3 per sample
        assert table["status"][1:] == ["unparseable"] * (GROUP - 1)
        assert all(math.isnan(r) for r in table["reward"][1:])
        assert log["grad_norm"] == 0.0 and log["loss"] == 0.0  # one scored sample: no signal
