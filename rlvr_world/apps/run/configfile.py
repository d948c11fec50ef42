"""A run's configuration file: one YAML mapping of sections, and ``--set`` overrides of fields.

``read_config_mapping`` reads the file (``{}`` when empty; ``ValueError`` when the top level is
not a mapping); ``apply_overrides`` sets ``section.field`` values into it before the run type's
pydantic model validates it; ``read_config`` is both. Every run type (``apps.pipeline``,
``apps.video``, ``apps.mpc``) reads its config this way, and builds its sections on ``Section``
(frozen, unknown fields refused); which model validates it is the run type's.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of a run's config (every run type's): frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each ``section.field`` override set (in place; returned for chaining)."""
    for key, value in overrides.items():
        section, _, leaf = key.partition(".")
        node = data.setdefault(section, {})
        if not leaf or not isinstance(node, dict):
            raise ValueError(f"override {key!r} must look like section.field")
        node[leaf] = value
    return data


def read_config_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping of a config file (``{}`` when empty); ``ValueError`` when not a mapping."""
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config {path} must be a mapping at the top level")
    return data


def read_config(path: Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The mapping of the config file at ``path`` with ``overrides`` set (``read_config_mapping``,
    then ``apply_overrides``), for the run type's model to validate."""
    return apply_overrides(read_config_mapping(path), overrides or {})


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--set section.field=value`` arguments as ``{"section.field": value}``; each value is
    parsed as JSON when it is JSON (numbers, booleans, lists), else kept as the string."""
    out: dict[str, Any] = {}
    for item in items:
        key, _, text = item.partition("=")
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


def add_config_arguments(parser: argparse.ArgumentParser, config_help: str, set_help: str) -> None:
    """The ``CONFIG`` argument and the repeatable ``--set SECTION.FIELD=VALUE`` option (into
    ``args.config`` and ``args.overrides``; ``parse_overrides`` reads the latter)."""
    parser.add_argument("config", type=Path, help=config_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help=set_help,
    )
