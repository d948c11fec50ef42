"""``TransformersEngine``: a ``GenerationEngine`` over any Hugging Face causal LM, for tests and
small models on CPU (or one GPU).

Model backend (``backend``): a Llama-shaped model whose tokenizer reads from ``tokenizer.json``
runs on the torch-only forward pass of ``rlvr_world.llama`` (the same logits as
transformers' ``LlamaForCausalLM``; the service then starts without importing transformers,
seconds sooner), any other model, a GGUF file, or ``backend="transformers"`` on transformers'
``AutoModelForCausalLM`` and ``AutoTokenizer``. A LoRA adapter is merged with transformers and
peft in either case (imported at the first adapter load).

Generation is a manual sampling loop with a KV cache: the prompt is prefilled once, the cache is
repeated for the ``n`` samples, then one token per step for all samples at once (finished samples
keep stepping and are cut afterwards). The cache gets room for every position the request can
add (``kv_cache.reserve``), so a step writes its keys and values in place rather than copying the
whole cache (``DynamicCache`` grows by ``torch.cat``). With ``inserts`` (interleaved generation, see
``services.rollout.engine``) each forced run is fed through the KV cache for all ``n`` rows in the
same forward pass as the segment's last generated token. Log-probs follow
``services.rollout.sampling``. One generation runs at a time (a lock around the model); weight
loads wait for the running one and never mix two versions in one generation.

Batching across requests (``batch_rows`` > 0): plain requests (no ``inserts``) that wait while a
generation runs are taken together, up to ``batch_rows`` sample rows, by the next thread to get
the model: each prompt is prefilled on its own, the caches are left-padded to the longest prompt
and joined, and every decode step runs all rows at once (attention mask over the padding,
positions per row). Each request draws from its own generator, for its own rows and for as many
steps as it would alone, so a seeded request gets the same tokens as alone up to float rounding
of the joined forward (log-probs to about 1e-6). A request waiting alone, or with ``inserts``,
runs the single-request loop above; if a joined generation fails, its requests run alone, so an
error reaches only the request that causes it.

Weights (``load_weights``): a directory written by the trainer (``trainer/checkpoint.py``), i.e.
``save_pretrained`` output: ``*.safetensors`` of the full model (copied in place, tied embeddings
may be absent from the file), or a LoRA adapter (``adapter_config.json`` +
``adapter_model.safetensors``), which is merged into a freshly loaded copy of the *base* model
given at start (peft ``merge_and_unload``) and then copied in. Not a tensor-parallel or paged
engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from rlvr_world.devices import device_line, resolve_device
from rlvr_world.llama import KVCache, LlamaShape, llama_shape, load_llama
from rlvr_world.text_tokenizer import RustTokenizer, rust_tokenizer_usable
from rlvr_world.weights import ADAPTER_CONFIG
from services.rollout.checkpoint import check_state_fits, read_checkpoint
from services.rollout.engine import (
    EngineBase,
    EngineError,
    FinishReason,
    Generation,
    Sample,
    SamplingParams,
    WeightsNotFound,
    check_generation,
    checked_prompt_ids,
    plan_segments,
)
from services.rollout.sampling import next_tokens

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedModel

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
#: ``auto``: the torch-only Llama (``rlvr_world.llama``) where it serves the model and its
#: tokenizer reads without transformers, transformers' classes elsewhere; ``transformers``: always.
ModelBackend = Literal["auto", "transformers"]


def reserve(cache: KVCache | DynamicCache, room: int) -> None:
    """Room for ``room`` more positions in every layer of either backend's cache."""
    if isinstance(cache, KVCache):
        cache.reserve(room)
    else:
        from services.rollout.kv_cache import reserve as reserve_dynamic

        reserve_dynamic(cache, room)


def eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids: the generation config's (int or list) and the tokenizer's."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif isinstance(gen_eos, list):
        ids.update(int(i) for i in gen_eos)
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


@dataclass(eq=False)
class _Waiting:
    """A plain request waiting for the model (``TransformersEngine.generate`` with batching)."""

    ids: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    samples: list[Sample] | None = None
    version: int = 0
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class TransformersEngine(EngineBase):
    """A causal LM and its tokenizer, serving one policy version at a time."""

    ENGINE = "transformers"

    def __init__(  # noqa: PLR0913 (the service's settings for this engine, passed on)
        self,
        model: str,
        tokenizer: str | None = None,
        *,
        gguf_file: str | None = None,
        device: str = "auto",
        dtype: str = "float32",
        version: int = 0,
        max_prompt_tokens: int = 32_768,
        batch_rows: int = 64,
        backend: ModelBackend = "auto",
    ) -> None:
        self.model_path = model
        self.device = torch.device(resolve_device(device, "rollout device"))
        self.dtype = _DTYPES[dtype]
        self.gguf_file = gguf_file
        self.max_prompt_tokens = max_prompt_tokens
        if backend not in ("auto", "transformers"):
            raise ValueError(f"backend = {backend!r}: must be 'auto' or 'transformers'")
        shape: LlamaShape | str = "backend 'transformers' asked for"
        if backend == "auto":
            shape = "a GGUF file" if gguf_file is not None else llama_shape(Path(model))
        tok_dir = Path(tokenizer or model)
        if isinstance(shape, LlamaShape) and not rust_tokenizer_usable(tok_dir, encoding=True):
            shape = "its tokenizer needs transformers"
        self.tokenizer: Any
        if isinstance(shape, LlamaShape):
            self.backend = "llama"
            self.tokenizer = RustTokenizer(tok_dir)
            self.model: Any = load_llama(Path(model), shape, self.dtype, self.device)
        else:
            from transformers import AutoTokenizer

            self.backend = "transformers"
            log.info("transformers engine: %s on transformers' model classes: %s", model, shape)
            tok_kwargs: dict[str, Any] = {}
            if gguf_file is not None and tokenizer in (None, model):
                tok_kwargs["gguf_file"] = gguf_file
            self.tokenizer = AutoTokenizer.from_pretrained(str(tok_dir), **tok_kwargs)
            self.model = self._load_base()
        embeddings: Any = self.model.get_input_embeddings()
        self.vocab_size = int(embeddings.weight.shape[0])
        self.eos = eos_ids(self.model, self.tokenizer)
        self.context_length = getattr(self.model.config, "max_position_embeddings", None)
        self._version = version
        self._lock = threading.Lock()
        if batch_rows < 0:
            raise ValueError(f"batch_rows = {batch_rows}: must be >= 0 (0: no batching)")
        self.batch_rows = batch_rows
        self._waiting: list[_Waiting] = []
        self._waiting_lock = threading.Lock()
        log.info(
            "transformers engine: %s (%s forward, vocab %d, eos %s) on %s, version %d",
            model,
            self.backend,
            self.vocab_size,
            sorted(self.eos),
            self.device,
            version,
        )
        log.info("%s", device_line(str(self.device), _PRECISION[dtype]))

    def _load_base(self) -> PreTrainedModel:
        """The start model with transformers' classes (a LoRA adapter merges into it)."""
        from transformers import AutoModelForCausalLM

        kwargs: dict[str, Any] = {"dtype": self.dtype}
        if self.gguf_file is not None:
            kwargs["gguf_file"] = self.gguf_file
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(self.model_path, **kwargs)
        model.to(self.device)  # type: ignore[arg-type]  # transformers' @wraps(Module.to) drops self
        model.eval()  # type: ignore[no-untyped-call]  # transformers: eval() is unannotated
        model.requires_grad_(False)
        return model

    def info_extra(self) -> dict[str, str]:
        """The device and dtype."""
        return {"device": str(self.device), "dtype": str(self.dtype).removeprefix("torch.")}

    # ------------------------------------------------------------ generation

    def prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        """Token ids of the prompt; ``InvalidRequest`` names the first bad id."""
        return checked_prompt_ids(
            prompt,
            self._encode,
            self.vocab_size,
            self.max_prompt_tokens,
        )

    def _encode(self, text: str) -> list[int]:
        if isinstance(self.tokenizer, RustTokenizer):
            return self.tokenizer.encode(text, add_special_tokens=True)
        return list(self.tokenizer(text, add_special_tokens=True)["input_ids"])

    def _new_cache(self) -> KVCache | DynamicCache:
        if self.backend == "llama":
            return KVCache()
        from transformers import DynamicCache

        return DynamicCache()

    def generate(self, prompt: str | Sequence[int], params: SamplingParams) -> Generation:
        """``GenerationEngine.generate``; plain requests join waiting ones (module docstring)."""
        ids = self.prompt_ids(prompt)
        check_generation(ids, params, self.vocab_size, self.context_length)
        generator = None
        if params.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(params.seed)
        if self.batch_rows == 0 or params.inserts or params.segment_tokens:
            with self._lock, torch.inference_mode():
                version = self._version
                samples = self._sample(ids, params, generator)
            return Generation(prompt_token_ids=ids, samples=samples, policy_version=version)
        me = _Waiting(ids, params, generator)
        with self._waiting_lock:
            self._waiting.append(me)
        while not me.done.is_set():
            with self._lock:
                if not me.done.is_set():
                    self._run_waiting()
        if me.error is not None:
            raise me.error
        assert me.samples is not None
        return Generation(prompt_token_ids=ids, samples=me.samples, policy_version=me.version)

    def _run_waiting(self) -> None:
        """Under the model lock: generate for the waiting requests, oldest first, up to
        ``batch_rows`` rows (at least one request), and hand each its samples or its error. If
        the joined generation fails, each request runs alone, so an error reaches only the
        request that causes it."""
        with self._waiting_lock:
            take: list[_Waiting] = []
            rows = 0
            for w in self._waiting:
                if take and rows + w.params.n > self.batch_rows:
                    break
                take.append(w)
                rows += w.params.n
            del self._waiting[: len(take)]
        try:
            joined = None
            if len(take) > 1:
                try:
                    with torch.inference_mode():
                        joined = self._sample_joined(take)
                except Exception:  # one request's fault must not fail the others: each alone
                    log.exception("joined generation of %d requests failed; each alone", len(take))
            for i, w in enumerate(take):
                try:
                    if joined is not None:
                        w.samples = joined[i]
                    else:
                        with torch.inference_mode():
                            w.samples = self._sample(w.ids, w.params, w.generator)
                    w.version = self._version
                except Exception as exc:  # this request's error, handed to its caller
                    w.error = exc
        finally:  # none hangs, whatever happened (an interrupt of this thread included)
            for w in take:
                if w.samples is None and w.error is None:
                    w.error = EngineError("generation interrupted before this request's turn")
                w.done.set()

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _stop_at(self, ids: list[int], stop: tuple[str, ...]) -> int | None:
        """Index in the decoded text where the first stop string starts, or None."""
        text = self._decode(ids)
        hits = [text.find(s) for s in stop if s and s in text]
        return min(hits) if hits else None

    def _sample(
        self, ids: list[int], params: SamplingParams, generator: torch.Generator | None
    ) -> list[Sample]:
        n = params.n
        plan = plan_segments(params)
        segment = params.segment_tokens or params.max_tokens
        first = torch.tensor([ids], device=self.device)
        out = self.model(input_ids=first, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        if n > 1:
            cache.batch_repeat_interleave(n)
        reserve(cache, params.max_tokens + sum(len(run) for run in params.inserts))
        logits = out.logits[:, -1, :].expand(n, -1)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        forced: list[bool] = []
        finish: list[FinishReason] = ["length"] * n
        cut: list[int | None] = [None] * n
        active = set(range(n))
        pending: torch.Tensor | None = None  # (n, m) ids not yet fed through the cache
        for run in plan:
            for _ in range(segment):
                if pending is not None:
                    out = self.model(
                        input_ids=pending, past_key_values=cache, use_cache=True, logits_to_keep=1
                    )
                    cache = out.past_key_values
                    logits = out.logits[:, -1, :]
                nxt, lp = next_tokens(logits, params, generator)
                pending = nxt.unsqueeze(-1)
                state = (tokens, logps, finish, cut)
                self._take(params, nxt.tolist(), lp.tolist(), 0, active, state=state)
                if not active:
                    break
            forced += [False] * segment + [True] * len(run)
            if not active or not run or pending is None:
                continue
            for i in range(n):
                tokens[i] += run
                logps[i] += [0.0] * len(run)
            forced_ids = torch.tensor([run], device=self.device).expand(n, -1)
            pending = torch.cat([pending, forced_ids], dim=1)
        inserted = list(forced) if params.inserts else []
        return [self._finished(i, (tokens, logps, finish, cut), inserted) for i in range(n)]

    def _sample_joined(self, reqs: Sequence[_Waiting]) -> list[list[Sample]]:
        """Plain requests in one decode loop (module docstring: batching across requests)."""
        counts = [w.params.n for w in reqs]
        longest = max(len(w.ids) for w in reqs)
        firsts, layers, masks = [], [], []
        for w in reqs:
            first = torch.tensor([w.ids], device=self.device)
            out = self.model(input_ids=first, use_cache=True, logits_to_keep=1)
            firsts.append(out.logits[:, -1, :].expand(w.params.n, -1))
            pad = longest - len(w.ids)
            layers.append(
                [
                    tuple(
                        torch.nn.functional.pad(t, (0, 0, pad, 0)).expand(w.params.n, -1, -1, -1)
                        for t in (layer.keys, layer.values)
                    )
                    for layer in out.past_key_values.layers
                ]
            )
            mask = torch.ones(w.params.n, longest, dtype=torch.long, device=self.device)
            mask[:, :pad] = 0
            masks.append(mask)
        cache = self._new_cache()
        for i in range(len(layers[0])):
            keys = torch.cat([per[i][0] for per in layers])
            values = torch.cat([per[i][1] for per in layers])
            cache.update(keys, values, i)
        reserve(cache, max(w.params.max_tokens for w in reqs))
        mask = torch.cat(masks)
        position = torch.tensor(
            [len(w.ids) for w, n in zip(reqs, counts, strict=True) for _ in range(n)],
            device=self.device,
        )
        logits = torch.cat(firsts)
        starts = [sum(counts[:j]) for j in range(len(reqs))]
        tokens: list[list[int]] = [[] for _ in range(sum(counts))]
        logps: list[list[float]] = [[] for _ in range(sum(counts))]
        finish: list[FinishReason] = ["length"] * sum(counts)
        cut: list[int | None] = [None] * sum(counts)
        active = [set(range(a, a + n)) for a, n in zip(starts, counts, strict=True)]
        pending = torch.zeros(sum(counts), dtype=torch.long, device=self.device)
        for step in range(max(w.params.max_tokens for w in reqs)):
            if step > 0:
                mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
                out = self.model(
                    input_ids=pending.unsqueeze(-1),
                    past_key_values=cache,
                    attention_mask=mask,
                    position_ids=position.unsqueeze(-1),
                    use_cache=True,
                    logits_to_keep=1,
                )
                cache, logits = out.past_key_values, out.logits[:, -1, :]
                position = position + 1
            for j, w in enumerate(reqs):
                if not active[j] or step >= w.params.max_tokens:
                    continue  # as alone: a request stops drawing once all its rows are done
                rows = slice(starts[j], starts[j] + counts[j])
                nxt, lp = next_tokens(logits[rows], w.params, w.generator)
                pending[rows] = nxt
                self._take(
                    w.params,
                    nxt.tolist(),
                    lp.tolist(),
                    starts[j],
                    active[j],
                    state=(tokens, logps, finish, cut),
                )
            if not any(active[j] and step + 1 < w.params.max_tokens for j, w in enumerate(reqs)):
                break
        state = (tokens, logps, finish, cut)
        return [
            [self._finished(i, state) for i in range(a, a + n)]
            for a, n in zip(starts, counts, strict=True)
        ]

    def _finished(
        self,
        i: int,
        state: tuple[list[list[int]], list[list[float]], list[FinishReason], list[int | None]],
        inserted: list[bool] | None = None,
    ) -> Sample:
        """Row ``i``'s sample: its tokens, log-probs, finish reason and text (cut at a stop)."""
        tokens, logps, finish, cut = state
        return Sample(
            token_ids=tokens[i],
            logprobs=logps[i],
            finish_reason=finish[i],
            text=self._decode(tokens[i])[: cut[i]],
            inserted=inserted or [],
        )

    def _take(
        self,
        params: SamplingParams,
        nxt: list[int],
        lp: list[float],
        start: int,
        active: set[int],
        *,
        state: tuple[list[list[int]], list[list[float]], list[FinishReason], list[int | None]],
    ) -> None:
        """Append one drawn token to each active row of a request (rows ``start`` + i) and mark
        the rows that stop (EOS, or a stop string: cut there)."""
        tokens, logps, finish, cut = state
        for i in sorted(active):
            tokens[i].append(int(nxt[i - start]))
            logps[i].append(float(lp[i - start]))
            if not params.ignore_eos and nxt[i - start] in self.eos:
                finish[i] = "stop"
                active.discard(i)
            elif params.stop and (at := self._stop_at(tokens[i], params.stop)) is not None:
                finish[i], cut[i] = "stop", at
                active.discard(i)

    # ------------------------------------------------------------ weights

    def load_weights(self, version: int, path: str) -> float:
        """``GenerationEngine.load_weights``: copied in place (a LoRA adapter merged first)."""
        t0 = time.perf_counter()
        folder = Path(path)
        if not folder.is_dir():
            raise WeightsNotFound("weights path is not a directory")
        if (folder / ADAPTER_CONFIG).exists():
            state = self._merged_adapter(folder)
        else:
            state = read_checkpoint(folder)
        own = self.model.state_dict()
        check_state_fits(own, state)
        with self._lock, torch.no_grad():
            for name, tensor in state.items():
                own[name].copy_(tensor.to(device=own[name].device, dtype=own[name].dtype))
            self._version = version
        seconds = time.perf_counter() - t0
        log.info("serving weights version %d from %s (%.2fs)", version, path, seconds)
        return seconds

    def _merged_adapter(self, folder: Path) -> dict[str, torch.Tensor]:
        """The base model's weights with the LoRA adapter in ``folder`` merged in."""
        from peft import PeftModel

        peft_model = PeftModel.from_pretrained(self._load_base(), str(folder))
        merged = peft_model.merge_and_unload()
        return {k: v.detach() for k, v in merged.state_dict().items()}

    def close(self) -> None:
        """Nothing to release beyond the model, which the garbage collector frees."""
