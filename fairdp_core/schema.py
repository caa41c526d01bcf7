"""The pieces every section of the params.yaml schema is built from: frozen, typed and strict.

Shared by :mod:`fairdp_core.config` (the schema) and the rule modules of :mod:`fairdp_core.rules`, each of which
declares its own settings' section; neither imports the other for these.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Fraction", "Positive", "PositiveInt", "Strict"]


class Strict(BaseModel):
    """A section of params.yaml: an unknown key, a wrong type or a value out of range is refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
Positive = Annotated[float, Field(gt=0.0)]
PositiveInt = Annotated[int, Field(gt=0)]
