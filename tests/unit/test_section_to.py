"""``Section.to``: a runtime config built from a run-config section's fields of the same name."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlvr_world.apps.run.configfile import Section, section_to


class Sizes(Section):
    steps: int = 5
    lr: float = 0.1
    label: str = "only in the section"


class MoreSizes(Sizes):
    extra: int = 9


@dataclass(frozen=True)
class SizesDc:
    steps: int
    lr: float = 1.0
    seed: int = 0
    extra: int = 1
    derived: int = field(default=0, init=False)


class SizesModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=1, ge=1)
    lr: float = 1.0
    seed: int = 0
    extra: int = 1


def test_dataclass_target_takes_the_shared_fields() -> None:
    assert Sizes(steps=7, lr=0.5).to(SizesDc) == SizesDc(steps=7, lr=0.5)


def test_pydantic_target_takes_the_shared_fields_and_validates() -> None:
    assert Sizes(steps=7, lr=0.5).to(SizesModel) == SizesModel(steps=7, lr=0.5)
    with pytest.raises(ValidationError):
        Sizes(steps=0).to(SizesModel)


def test_override_wins() -> None:
    built = Sizes(steps=7).to(SizesDc, seed=3, lr=2.0)
    assert (built.steps, built.lr, built.seed) == (7, 2.0, 3)
    assert Sizes(steps=7).to(SizesModel, steps=8).steps == 8


def test_unknown_override_is_refused_with_its_name() -> None:
    with pytest.raises(
        TypeError, match="Sizes to SizesDc: SizesDc has no field bogus, nope to override"
    ):
        Sizes().to(SizesDc, nope=1, bogus=2)
    with pytest.raises(TypeError, match="has no field derived"):  # init=False: not settable
        Sizes().to(SizesDc, derived=1)


def test_section_field_the_target_lacks_is_left_out() -> None:
    built = Sizes(label="x").to(SizesModel)
    assert not hasattr(built, "label")


def test_target_defaults_kept_for_fields_the_section_lacks() -> None:
    built = Sizes().to(SizesDc)
    assert (built.seed, built.extra, built.derived) == (0, 1, 0)
    assert Sizes().to(SizesModel).seed == 0


def test_only_narrows_the_fields_taken_from_the_section() -> None:
    sub = MoreSizes(steps=7, extra=4)
    assert sub.to(SizesDc).extra == 4
    narrowed = sub.to(SizesDc, Sizes.model_fields)
    assert (narrowed.steps, narrowed.extra) == (7, 1)
    assert sub.to(SizesDc, Sizes.model_fields, extra=5).extra == 5


def test_values_pass_as_they_are() -> None:
    class Nested(Section):
        sizes: Sizes = Sizes()

    @dataclass
    class Holder:
        sizes: object = None

    section = Nested()
    assert section.to(Holder).sizes is section.sizes


def test_a_target_of_another_kind_is_refused() -> None:
    with pytest.raises(TypeError, match="neither a dataclass nor a pydantic model"):
        Sizes().to(dict)


def test_section_to_takes_a_section_on_another_base() -> None:
    class Plain(BaseModel):
        steps: int = 4

    assert section_to(Plain(), SizesDc, seed=2) == SizesDc(steps=4, seed=2)
