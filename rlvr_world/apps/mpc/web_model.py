"""A language world model of web pages, in process, for planning: one greedy prediction per
candidate action, the candidates of a step decoded together.

``load_web_world_model`` serves a model folder (``config.json``, weights, ``tokenizer.json``)
with the rollout service's ``TransformersEngine`` (the torch-only Llama forward pass where it
applies), and, for a trainer checkpoint (weights only: ``trainer/checkpoints/latest`` or a
``step_*`` folder), the base folder's architecture and tokenizer with the checkpoint's weights
loaded over them, exactly as the rollout service reloads a published version. A model that is
missing or does not load raises ``ModelUnavailable`` with the reason.

``predict`` sends every prompt of a step to the engine at once from a thread each, so the
engine joins them into one decode loop (``batch_rows``); each answer is the greedy decode
(temperature 0) of up to ``max_tokens`` tokens, or the error of that prompt (a prompt longer
than the model's context is refused by the engine and planned with a value of 0).

Why in process: a step's candidates are decoded together and a run makes thousands of
predictions; through the gRPC rollout and decoder services each would add a round trip and
gain nothing here (one model, one machine).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlvr_world.mpc.dynamics import ModelUnavailable, resolve_checkpoint

logger = logging.getLogger(__name__)

__all__ = ["WebWorldModel", "load_web_world_model"]

CONFIG = "config.json"
TOKENIZER = "tokenizer.json"


class WebWorldModel:
    """Greedy next-state predictions of one language model (module docstring)."""

    def __init__(self, name: str, engine: Any, max_tokens: int) -> None:
        self.name = name
        self.engine = engine
        self.max_tokens = max_tokens
        self.predictions = 0

    def predict(self, prompts: list[str]) -> list[str | Exception]:
        """One answer per prompt, or the exception that prompt raised."""
        from services.rollout.engine import SamplingParams

        params = SamplingParams(n=1, temperature=0.0, max_tokens=self.max_tokens)

        def one(prompt: str) -> str | Exception:
            try:
                return str(self.engine.generate(prompt, params).samples[0].text)
            except Exception as exc:  # reported per candidate, planned with value 0
                return exc

        if not prompts:
            return []
        with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
            out = list(pool.map(one, prompts))
        self.predictions += len(prompts)
        return out


def load_web_world_model(
    name: str,
    path: Path,
    *,
    base: Path,
    max_tokens: int,
    batch_rows: int = 64,
    device: str = "auto",
) -> WebWorldModel:
    """``path``: a model folder, or a trainer checkpoint loaded over ``base`` (module
    docstring), on ``device`` (``rlvr_world.devices``). ``ModelUnavailable`` names the path and
    the reason."""
    from services.rollout.transformers_engine import TransformersEngine

    folder = resolve_checkpoint(path)
    if not folder.is_dir():
        raise ModelUnavailable(f"{name}: {path}: no such model folder or checkpoint")
    own = (folder / CONFIG).is_file() and (folder / TOKENIZER).is_file()
    arch = folder if own else base
    if not own and not ((base / CONFIG).is_file() and (base / TOKENIZER).is_file()):
        raise ModelUnavailable(
            f"{name}: {folder} has no {CONFIG}/{TOKENIZER} and neither has the base folder {base}"
        )
    try:
        engine = TransformersEngine(str(arch), batch_rows=batch_rows, device=device)
        if not own:
            engine.load_weights(1, str(folder))
    except Exception as exc:  # whatever the loaders raise: the model is unavailable, with why
        raise ModelUnavailable(f"{name}: {folder}: {type(exc).__name__}: {exc}") from exc
    logger.info("web world model %s: %s (%s forward)", name, folder, engine.backend)
    return WebWorldModel(name, engine, max_tokens)


def build_tiny_web_models(base: Path, rlvr: Path, corpus: list[str]) -> None:
    """Smoke configs: a tiny random language model at ``base`` (with tokenizer) and, at
    ``rlvr``, a second one in the trainer's checkpoint layout (weights only, ``latest``
    pointer), where they are missing. Untrained: plumbing only."""
    from rlvr_world.tiny_model import TinyLMConfig, build_model, build_tiny_lm

    tiny = TinyLMConfig(vocab_size=300, hidden_size=32, num_layers=1, num_heads=2)

    if not (base / CONFIG).is_file():
        build_tiny_lm(base, corpus, tiny.model_copy(update={"seed": 0}))
    if resolve_checkpoint(rlvr).is_dir():
        return
    import json

    vocab = json.loads((base / CONFIG).read_text())["vocab_size"]
    model = build_model(tiny.model_copy(update={"seed": 1}), vocab)
    if rlvr.name == "latest":
        step = rlvr.parent / "step_00000001"
        model.save_pretrained(step, safe_serialization=True)  # no tokenizer, as the trainer's
        rlvr.write_text(step.name + "\n")
    else:
        model.save_pretrained(rlvr, safe_serialization=True)
    logger.info("built tiny random web models at %s and %s", base, rlvr)
