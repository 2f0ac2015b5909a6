"""docs/configuration.md lists every config key with its real default, and nothing else."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from drc.config import DrcConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
HEADING = re.compile(r"^## `\[{1,2}([a-z_.]+)\]{1,2}`$")
ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+) \|")


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field's annotation makes a section of (X, X | None, tuple[X, ...])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, tuple):
        for arg in typing.get_args(annotation):
            found = _section_model(arg)
            if found is not None:
                return found
    return None


def _render(default: Any) -> str:
    if default is PydanticUndefined:
        return "required"
    if default is None:
        return "none"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, str | Path):
        return f'`"{default}"`'
    if isinstance(default, tuple | list):
        return "`[]`" if not default else f"`{list(default)}`"
    return f"`{default}`"


def model_keys(model: type[BaseModel], prefix: str = "") -> dict[str, dict[str, str]]:
    """{section: {key: rendered default}} for a model and every nested section."""
    sections: dict[str, dict[str, str]] = {}
    own: dict[str, str] = {}
    for name, field in model.model_fields.items():
        nested = _section_model(field.annotation)
        if nested is not None:
            sections.update(model_keys(nested, f"{prefix}{name}."))
            continue
        default = field.default
        if field.default_factory is not None:
            default = field.default_factory()  # type: ignore[call-arg]
            own[name] = "`{}`" if default == {} else _render(default)
        else:
            own[name] = _render(default)
    if own:
        sections[prefix.rstrip(".")] = own
    return sections


def documented_keys() -> dict[str, dict[str, str]]:
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in DOC.read_text().splitlines():
        heading = HEADING.match(line)
        if heading:
            current = sections.setdefault(heading.group(1), {})
            continue
        row = ROW.match(line)
        if row and current is not None:
            current[row.group(1)] = row.group(2).strip()
    return sections


def test_every_config_key_is_documented_with_its_default() -> None:
    assert documented_keys() == model_keys(DrcConfig)


def test_the_doc_parser_sees_every_section() -> None:
    # A heading typo would otherwise make the comparison above vacuous for that section.
    assert {"source", "replicator.buffer", "channels", "conflicts.tables"} <= set(documented_keys())
