"""``TransformersEngine`` batching across requests: plain requests that wait while a generation
runs are generated together (their prompts prefilled one by one, the caches left-padded and
joined). Each request keeps what it would get alone: its own generator (seeded requests draw the
same tokens), log-probs equal to a teacher-forced recomputation, its own ``max_tokens``, ``stop``
and EOS handling; an error reaches every request of the batch and none hangs."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from services.rollout.engine import Generation, SamplingParams
from services.rollout.transformers_engine import TransformersEngine
from tests.helpers.rollout import recompute
from tests.helpers.tiny_lm import build_tiny_lm

torch.set_num_threads(1)
PROMPTS = ["the door is open", "a key", "the red box is on the table and the lamp is off"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("tiny_lm_batch"))


def _alone(engine: TransformersEngine, prompt: str, params: SamplingParams) -> Generation:
    return engine.generate(prompt, params)


def _joined(engine: TransformersEngine, jobs: list[tuple[str, SamplingParams]]) -> list[Generation]:
    """Submit every job while the model lock is held, so all wait and the first thread to get
    the lock takes them all in one batch."""
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            out[i] = engine.generate(*jobs[i])
        except Exception as exc:  # handed to the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    with engine._lock:
        for t in threads:
            t.start()
        for _ in range(200):  # every request queued behind the lock
            if len(engine._waiting) == len(jobs):
                break
            threading.Event().wait(0.01)
        assert len(engine._waiting) == len(jobs)
    for t in threads:
        t.join(timeout=60)
    return out


@pytest.mark.parametrize("backend", ["auto", "transformers"])
def test_joined_requests_match_each_alone(model_dir: Path, backend: str) -> None:
    """On both model backends (``auto`` serves the tiny Llama on ``rlvr_world.llama``)."""
    engine = TransformersEngine(str(model_dir), backend=backend)  # type: ignore[arg-type]
    assert engine.backend == {"auto": "llama", "transformers": "transformers"}[backend]
    jobs = [
        (PROMPTS[0], SamplingParams(n=3, max_tokens=12, temperature=1.0, seed=1)),
        (PROMPTS[1], SamplingParams(n=2, max_tokens=5, temperature=0.7, seed=2, top_k=20)),
        (PROMPTS[2], SamplingParams(n=4, max_tokens=16, temperature=1.2, seed=3, ignore_eos=True)),
    ]
    alone = [_alone(engine, *job) for job in jobs]
    calls: list[int] = []
    real = engine._sample_joined

    def spy(reqs: Any) -> Any:
        calls.append(len(reqs))
        return real(reqs)

    engine._sample_joined = spy  # type: ignore[method-assign]
    joined = _joined(engine, jobs)
    assert calls == [3]  # one generation for the three requests
    for (_, params), a, b in zip(jobs, alone, joined, strict=True):
        assert isinstance(b, Generation)
        assert b.prompt_token_ids == a.prompt_token_ids
        assert len(b.samples) == params.n
        for sa, sb in zip(a.samples, b.samples, strict=True):
            assert sb.token_ids == sa.token_ids  # same generator, same draws
            assert sb.finish_reason == sa.finish_reason
            assert sb.text == sa.text
            assert len(sb.token_ids) <= params.max_tokens
            torch.testing.assert_close(sb.logprobs, sa.logprobs, rtol=0, atol=1e-5)
    # and the log-probs are the model's, teacher-forced, at the request's temperature
    model = engine.model
    for (_, params), b in zip(jobs, joined, strict=True):
        for sample in b.samples:
            want = recompute(model, b.prompt_token_ids, sample.token_ids, params.temperature)
            torch.testing.assert_close(sample.logprobs, want, rtol=0, atol=1e-4)


def test_stop_strings_and_eos_are_per_request(model_dir: Path) -> None:
    engine = TransformersEngine(str(model_dir))
    jobs = [
        (PROMPTS[0], SamplingParams(n=2, max_tokens=20, seed=5, stop=("e",))),
        (PROMPTS[1], SamplingParams(n=2, max_tokens=20, seed=6)),
    ]
    alone = [_alone(engine, *job) for job in jobs]
    joined = _joined(engine, jobs)
    for a, b in zip(alone, joined, strict=True):
        assert [s.text for s in b.samples] == [s.text for s in a.samples]
        assert [s.finish_reason for s in b.samples] == [s.finish_reason for s in a.samples]
    assert all("e" not in s.text for s in joined[0].samples)


def test_batches_are_capped_at_batch_rows(model_dir: Path) -> None:
    """4 + 4 rows with a cap of 6: two generations, both requests answered in order."""
    engine = TransformersEngine(str(model_dir), batch_rows=6)
    jobs = [(p, SamplingParams(n=4, max_tokens=6, seed=i)) for i, p in enumerate(PROMPTS[:2])]
    alone = [_alone(engine, *job) for job in jobs]
    joined = _joined(engine, jobs)
    for a, b in zip(alone, joined, strict=True):
        assert [s.token_ids for s in b.samples] == [s.token_ids for s in a.samples]


def test_a_failed_joined_generation_runs_each_request_alone(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joined loop fails: each request runs alone; the one that fails alone gets its error,
    the others their samples (the same as alone), and the engine serves afterwards."""
    engine = TransformersEngine(str(model_dir))
    jobs = [(p, SamplingParams(n=2, max_tokens=4, seed=i)) for i, p in enumerate(PROMPTS)]
    alone = [_alone(engine, *job) for job in jobs]

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("joined loop crashed")

    real_sample = engine._sample
    bad_ids = engine.prompt_ids(PROMPTS[1])

    def sample(ids: list[int], params: SamplingParams, generator: Any) -> Any:
        if ids == bad_ids:
            raise RuntimeError("this prompt breaks the model")
        return real_sample(ids, params, generator)

    monkeypatch.setattr(engine, "_sample_joined", broken)
    monkeypatch.setattr(engine, "_sample", sample)
    results = _joined(engine, jobs)
    assert isinstance(results[1], RuntimeError) and "breaks the model" in str(results[1])
    for i in (0, 2):
        assert isinstance(results[i], Generation)
        assert [s.token_ids for s in results[i].samples] == [s.token_ids for s in alone[i].samples]
    assert engine._waiting == []
    monkeypatch.undo()
    assert len(engine.generate(PROMPTS[0], SamplingParams(n=1, max_tokens=3)).samples) == 1


def test_negative_batch_rows_is_refused(model_dir: Path) -> None:
    with pytest.raises(ValueError, match="batch_rows = -1"):
        TransformersEngine(str(model_dir), batch_rows=-1)


@pytest.mark.parametrize("backend", ["auto", "transformers"])
def test_reserved_cache_matches_the_growing_cache(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """The KV cache written into reserved room (``ReservedLayer``, ``llama.KVLayer``) gives the
    tokens and log-probs of the cache grown as it goes, with inserts too (their runs are in the
    room)."""
    engine = TransformersEngine(str(model_dir), batch_rows=0, backend=backend)  # type: ignore[arg-type]
    cases = [
        (PROMPTS[2], SamplingParams(n=3, max_tokens=14, seed=4, ignore_eos=True)),
        (
            PROMPTS[0],
            SamplingParams(
                n=2,
                max_tokens=9,
                seed=7,
                ignore_eos=True,
                segment_tokens=3,
                inserts=((5, 6), (7,)),
            ),
        ),
    ]
    reserved = [engine.generate(*case) for case in cases]
    monkeypatch.setattr("services.rollout.transformers_engine.reserve", lambda *_: None)
    grown = [engine.generate(*case) for case in cases]
    for a, b in zip(reserved, grown, strict=True):
        for sa, sb in zip(a.samples, b.samples, strict=True):
            assert sa.token_ids == sb.token_ids
            assert sa.inserted == sb.inserted
            torch.testing.assert_close(sa.logprobs, sb.logprobs, rtol=0, atol=1e-6)


def test_reserved_layer_grows_past_its_room() -> None:
    from transformers.cache_utils import DynamicLayer

    from services.rollout.kv_cache import ReservedLayer

    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(2, 3, 4, 5, generator=gen) for _ in range(2)]
    plain = DynamicLayer()
    plain.update(*start)
    layer = ReservedLayer(plain, room=1)
    for size in (1, 2, 5):  # the first fits, then the buffers double twice
        new = [torch.randn(2, 3, size, 5, generator=gen) for _ in range(2)]
        keys, values = layer.update(*new)
        want_k, want_v = plain.update(*new)
        assert torch.equal(keys, want_k) and torch.equal(values, want_v)
        assert layer.get_seq_length() == plain.get_seq_length()
