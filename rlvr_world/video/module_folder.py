"""The folder a trained video module is saved in: ``config.json`` and ``model.safetensors``.

``config.json`` holds ``{"kind", "format_version", "config"}``: what the module is (``KIND`` of
the frame tokenizer, the compressive tokenizer or the IDM), the version of this layout and the
module's pydantic config; ``model.safetensors`` its ``state_dict``. Bump ``FORMAT_VERSION`` when
that layout changes (every reader refuses another version).

What it does not do: check a kind or version, or validate the config: each reader does that and
words its own errors (the tokenizers raise ``ValueError`` or ``FileNotFoundError`` starting
"tokenizer checkpoint:", the IDM ``InvalidInput``). The shared readers here take that wording as
``error`` (the exception type) and ``prefix`` (the start of the message).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from pydantic import BaseModel
from torch import nn

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1


def save_module_folder(
    module: nn.Module,
    kind: str,
    config: BaseModel,
    directory: str | Path,
    *,
    name: str | None = None,
) -> Path:
    """Write ``config.json`` (``kind``, format version, ``config``) and ``model.safetensors`` of
    ``module`` into ``directory`` (made if missing); returns it. ``name``: what the log line calls
    the module (default: ``kind``)."""
    from safetensors.torch import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(path / WEIGHTS_FILE))
    meta = {
        "kind": kind,
        "format_version": FORMAT_VERSION,
        "config": config.model_dump(mode="json"),
    }
    (path / CONFIG_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    logger.info("saved %s (%d tensors) to %s", name or kind, len(state), path)
    return path


def parse_meta(path: Path, *, error: type[ValueError] = ValueError, prefix: str = "") -> object:
    """The parsed JSON of an existing ``config.json`` at ``path``; ``error`` when it is not JSON."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{prefix}{path} is not valid JSON: {exc}") from exc


def load_weights_file(
    module: nn.Module, path: Path, *, error: type[ValueError] = ValueError, prefix: str = ""
) -> None:
    """Load an existing ``model.safetensors`` at ``path`` into ``module``, every tensor matching
    exactly; ``error`` when it is not a safetensors file or does not fit ``module``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except SafetensorError as exc:
        raise error(f"{prefix}{path} is not a safetensors file: {exc}") from exc
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise error(f"{prefix}{path} does not fit the config in {CONFIG_FILE}: {exc}") from exc
