"""The params.yaml schema: frozen, typed, and strict.

An unknown key, a wrong type, a duplicated key or a value out of range is a :class:`ConfigError` that names the
key path and the file, raised by :func:`load_params` before any work starts. Code receives typed sections
(``params.data``, ...), never the raw dict.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["ConfigError", "DatasetOptions", "DataConfig", "Params", "load_params", "DATA_MIRROR_ENV"]

DATA_MIRROR_ENV = "FAIRDP_DATA_MIRROR"


class ConfigError(ValueError):
    """params.yaml is wrong; the message names the file and the key path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


Fraction = Annotated[float, Field(gt=0.0, lt=1.0)]
PositiveInt = Annotated[int, Field(gt=0)]


class DatasetOptions(_Strict):
    """Per-dataset preparation (STUDY.md §2). ``group``: the group attribute (None: the dataset's default);
    ``group_as_feature``: keep it as a model input; ``test_fraction``: held-out share where the dataset has no
    official test file; ``train_size`` / ``test_size``: stratified (group × label) subsets, None for all."""

    group: str | None = None
    group_as_feature: bool = True
    test_fraction: Fraction = 0.2
    train_size: PositiveInt | None = None
    test_size: PositiveInt | None = None


class DataConfig(_Strict):
    """Where raw files come from and where prepared data goes.

    ``mirror``: a directory laid out like ``shared/datasets`` (relative paths are relative to params.yaml);
    ``$FAIRDP_DATA_MIRROR`` overrides it. ``download``: fetch canonical files when neither cache nor mirror has
    them. ``datasets``: which datasets to prepare, each with its options.
    """

    mirror: str | None = "../shared/datasets"
    download: bool = False
    raw_dir: str = "data/raw"
    prepared_dir: str = "data/prepared"
    datasets: dict[str, DatasetOptions]

    @model_validator(mode="after")
    def _known_datasets(self) -> "DataConfig":
        from .data.loaders import REGISTRY

        for name, opts in self.datasets.items():
            if name not in REGISTRY:
                raise ValueError(f"datasets.{name}: unknown dataset; known: {', '.join(REGISTRY)}")
            if opts.group is not None and opts.group not in REGISTRY[name].groups:
                raise ValueError(f"datasets.{name}.group: unknown group attribute {opts.group!r}; "
                                 f"known: {', '.join(REGISTRY[name].groups)}")
        return self


class Params(_Strict):
    """The whole params.yaml. ``seed`` is the study's one seed: every random stream derives from it."""

    seed: Annotated[int, Field(ge=0)]
    data: DataConfig
    base_dir: Path = Field(default=Path("."), exclude=True)

    def resolve(self, path: str | os.PathLike) -> Path:
        """A path from params, relative to the directory of params.yaml."""
        p = Path(path)
        return p if p.is_absolute() else self.base_dir / p

    def mirror_dir(self) -> Path | None:
        env = os.environ.get(DATA_MIRROR_ENV)
        if env:
            return Path(env)
        return None if self.data.mirror is None else self.resolve(self.data.mirror)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses duplicated mapping keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _format(err: ValidationError, file: Path) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"] if p != "__root__")
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key (a typo?)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        elif msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        lines.append(f"{file}: {loc or '<top level>'}: {msg}" + (f" (got {e['input']!r})" if e["type"] not in
                     ("extra_forbidden", "missing") and not isinstance(e["input"], dict) else ""))
    return "invalid params:\n  " + "\n  ".join(lines)


def load_params(path: str | os.PathLike = "params.yaml") -> Params:
    """Read and validate params.yaml; raise ConfigError naming the file and key path on any problem."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(f"{file}: cannot read params: {e}") from None
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except ConfigError as e:
        raise ConfigError(f"{file}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        return Params.model_validate({**raw, "base_dir": file.resolve().parent})
    except ValidationError as e:
        raise ConfigError(_format(e, file)) from None
