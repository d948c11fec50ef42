"""A run's configuration file: one YAML mapping of sections, and ``--set`` overrides of fields.

``read_config_mapping`` reads the file (``{}`` when empty; ``ValueError`` when the top level is
not a mapping); ``apply_overrides`` sets ``section.field`` values into it before the run type's
pydantic model validates it; ``read_config`` is both. Every run type (``apps.pipeline``,
``apps.video``, ``apps.mpc``) reads its config this way, and builds its sections on ``Section``
(frozen, unknown fields refused); which model validates it is the run type's.
``Section.to`` (``section_to``) builds a runtime config from a section's fields of the same
names, so that a field added to both is copied without a hand-written copy to forget it in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict

T = TypeVar("T")


def _field_names(cls: type[Any]) -> set[str]:
    """The fields ``cls`` takes by keyword: a pydantic model's, a dataclass's ``init`` ones."""
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return set(cls.model_fields)
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls) if f.init}
    raise TypeError(f"{cls!r} is neither a dataclass nor a pydantic model")


def section_to(
    section: BaseModel, cls: type[T], only: Collection[str] | None = None, /, **overrides: Any
) -> T:
    """``cls`` (a dataclass or a pydantic model) built from ``section`` (a pydantic model: a
    ``Section``, or a section built on another base, ``apps.run.grpo.RlSection``): every field
    of the section whose name ``cls`` declares too, its value as is (not dumped), then
    ``overrides`` on top. An override wins, also over a section field (a phase's budget replaces
    the section's ``epochs``: ``apps.pipeline.sft_phase``). Fields of ``cls`` that neither gives
    keep ``cls``'s defaults; section fields ``cls`` lacks are left out. ``only`` (positional, so
    that no field name is taken from the overrides) narrows the fields taken from the section to
    those it names: for a section whose subclasses add fields of ``cls``'s names that are not to
    be copied (``RlSection``'s own fields, not ``TextRl``'s ``max_tokens``). A pydantic ``cls``
    is built by field name (not alias) and validates as usual.

    ``TypeError`` naming them when overrides are not fields of ``cls``, or when ``cls`` is
    neither kind of class."""
    names = _field_names(cls)
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise TypeError(
            f"{type(section).__name__} to {cls.__name__}: {cls.__name__} has no field "
            f"{', '.join(unknown)} to override"
        )
    taken = names & set(type(section).model_fields)
    if only is not None:
        taken &= set(only)
    values = {name: getattr(section, name) for name in sorted(taken)}
    return cls(**(values | overrides))


class Section(BaseModel):
    """A section of a run's config (every run type's): frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to(self, cls: type[T], only: Collection[str] | None = None, /, **overrides: Any) -> T:
        """``cls`` (a dataclass or a pydantic model) built from this section's fields whose
        names ``cls`` declares (narrowed to ``only`` when given), plus ``overrides``, which win;
        fields of ``cls`` the section lacks keep ``cls``'s defaults, section fields ``cls``
        lacks are ignored, an override naming no field of ``cls`` is a ``TypeError``
        (``section_to``)."""
        return section_to(self, cls, only, **overrides)


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
