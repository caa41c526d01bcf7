"""The params.yaml schema: frozen, typed, and strict.

An unknown key, a wrong type, a duplicated key or a value out of range is a :class:`ConfigError` that names the
key path and the file, raised by :func:`load_params` before any work starts. Code receives typed sections
(``params.data``, ...), never the raw dict.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import ConfigDict, Field, ValidationError, model_validator

from ..schema import Fraction, Positive, PositiveInt
from ..schema import Strict as _Strict
from .sections import (
    RULE_NAMES,
    RULE_SUPPORT_MODULES,
    Algorithm,
    AuditConfig,
    BeyondConfig,
    ComputeConfig,
    DataConfig,
    ModelName,
    ReportConfig,
    SynthConfig,
)

__all__ = ["DATA_MIRROR_ENV", "GENERATED_FILE", "GENERATED_KEYS", "RULE_NAMES", "RULE_SUPPORT_MODULES", "ConfigError",
           "GridEntry", "Params", "RunSpec", "SweepConfig", "TrainConfig", "TrainOverride", "design_key", "expand_runs",
           "generated_path", "load_params"]

DATA_MIRROR_ENV = "FAIRDP_DATA_MIRROR"
GENERATED_FILE = "runs.yaml"
# what `fairdp grid --write` writes into it: from params.yaml (runs, designs, prepare) and the report registry (pages)
GENERATED_KEYS = ("runs", "designs", "prepare", "pages")


class ConfigError(ValueError):
    """params.yaml is wrong; the message names the file and the key path."""


class TrainOverride(_Strict):
    """Per ``<dataset>-<model>`` changes to the training defaults; a ``<dataset>-<model>-<algorithm>`` entry
    changes them for one algorithm (each algorithm at its own tuned setting) and wins over the first."""

    epochs: Positive | None = None
    batch_size: PositiveInt | None = None
    lr: Positive | None = None
    clip: Positive | None = None
    gamma: Fraction | None = None  # DP-SGD-S's target quantile for this dataset and model
    optimizer: Literal["sgd", "adam"] | None = None


class TrainConfig(_Strict):
    """Training of every model bank: SGD with learning rate ``lr``, expected batch ``batch_size`` (Poisson
    sampling, q = B/n), ``epochs`` (T = E·n/B); DP: clipping bound ``clip``, ``delta``, ``accountant``.
    ``optimizer``: "sgd", or "adam" (Adam's update on the same clipped, noised gradient; UTKFace's config).

    A clipping rule's settings go under its name (``train.dpsgd_s``, ``train.adaclip``, ...). Their schema is the
    rule's own (``Settings`` in its module of fairdp_core/rules/), checked where the rules are loaded
    (:func:`fairdp_core.rules.check_settings`: ``fairdp check-params``, the plan): here only that the key names a
    rule and holds a mapping, so that this module, which every stage loads, never loads the training code."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    epochs: Positive = 5.0
    batch_size: PositiveInt = 256
    lr: Positive = 0.1
    clip: Positive = 1.0
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-5
    accountant: Literal["rdp", "prv"] = "rdp"
    optimizer: Literal["sgd", "adam"] = "sgd"
    hidden: PositiveInt = 256
    device: str | None = None
    threads: PositiveInt = 1
    overrides: dict[str, TrainOverride] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rule_sections(self) -> TrainConfig:
        for key, value in (self.model_extra or {}).items():
            if key not in RULE_NAMES:
                raise ValueError(f"{key}: unknown key (a typo?); a rule's settings go under its name: "
                                 f"{', '.join(RULE_NAMES)}")
            if not isinstance(value, dict):
                raise ValueError(f"{key}: the rule's settings, a mapping (got {value!r})")
        return self

    def rule_section(self, key: str) -> dict[str, Any]:
        """What params.yaml sets under ``train.<key>`` (a rule's settings, unchecked here): {} if nothing."""
        return dict((self.model_extra or {}).get(key) or {})


class OperatingPoint(_Strict):
    """Where a run trains on the accuracy–Δ plane: its own ``lr`` and, for rules that use one, its clip bound (C, or
    the rules' C0). The DP-SGD frontier of the ``frontier`` profile (docs/frontier.md) is a list of these."""

    lr: Positive
    clip: Positive | None = None


class GridEntry(_Strict):
    """One block of the experiment grid: every algorithm × ε × seed for a dataset and model (SGD has no ε), and,
    where ``points`` is given, at each operating point (its runs are named ``...-lr<lr>[-c<clip>]-s<seed>``;
    without points, the dataset's lr and clip as configured)."""

    dataset: str
    model: ModelName
    algorithms: list[Algorithm]
    epsilons: list[Positive]
    seeds: PositiveInt = 1
    points: list[OperatingPoint] | None = None


class SweepConfig(_Strict):
    """The DP-SGD-S sweep (report 2): τ × γ × ε for one dataset and model, with DP-SGD at each ε."""

    dataset: str
    model: ModelName
    epsilons: list[Positive]
    taus: list[Positive]
    gammas: list[Fraction]
    seeds: PositiveInt = 1




class RunSpec(_Strict):
    """One audited configuration (generated from ``grid`` and ``sweep`` by ``fairdp grid --write``)."""

    dataset: str
    model: ModelName
    algorithm: Algorithm
    epsilon: Positive | None
    seed: Annotated[int, Field(ge=0)]
    tau: Positive | None = None
    gamma: Fraction | None = None
    # An operating point's lr and clip (grid ``points``): set only on such runs, and left out of model_dump(), so the
    # runs of a grid without points (every profile but ``frontier``) dump, plan and hash as before.
    lr: Positive | None = Field(default=None, exclude=True)
    clip: Positive | None = Field(default=None, exclude=True)

    def fields(self) -> dict[str, Any]:
        """The run as ``expand_runs`` writes it: with ``lr`` and ``clip`` where the run is at an operating point."""
        out = self.model_dump()
        if self.lr is not None:
            out.update(lr=self.lr, clip=self.clip)
        return out


def _num(x: float) -> str:
    """A number for a run name: no '.' (DVC reads ``runs.<name>`` as a key path), e.g. 0.75 -> 0p75."""
    return f"{x:g}".replace(".", "p")


def design_key(dataset: str, seed: int) -> str:
    """The audit design (membership matrix) shared by every run of a dataset and seed."""
    return f"{dataset}-s{seed}"


def expand_runs(grid: list[GridEntry], sweep: SweepConfig | None) -> dict[str, dict]:
    """``runs`` as ``fairdp grid --write`` writes it: name -> RunSpec fields, in a stable order."""
    runs: dict[str, dict] = {}

    def add(dataset, model, algorithm, eps, seed, tau=None, gamma=None, point=None):
        name = f"{dataset}-{model}-{algorithm}" + ("" if eps is None else f"-e{_num(eps)}")
        if tau is not None:
            name += f"-t{_num(tau)}-g{_num(gamma)}"
        if point is not None:
            name += f"-lr{_num(point.lr)}" + ("" if point.clip is None else f"-c{_num(point.clip)}")
        name += f"-s{seed}"
        runs[name] = {"dataset": dataset, "model": model, "algorithm": algorithm, "epsilon": eps, "seed": seed,
                      "tau": tau, "gamma": gamma}
        if point is not None:
            runs[name].update(lr=point.lr, clip=point.clip)

    for g in grid:
        for seed in range(g.seeds):
            for alg in g.algorithms:
                for eps in ([None] if alg == "sgd" else g.epsilons):
                    for point in g.points or [None]:
                        add(g.dataset, g.model, alg, eps, seed, point=point)
    if sweep is not None:
        for seed in range(sweep.seeds):
            for eps in sweep.epsilons:
                add(sweep.dataset, sweep.model, "dpsgd", eps, seed)
                for tau in sweep.taus:
                    for gamma in sweep.gammas:
                        add(sweep.dataset, sweep.model, "dpsgd_s", eps, seed, tau, gamma)
    return runs


class Params(_Strict):
    """The whole params.yaml. ``seed`` is the study's one seed: every random stream derives from it."""

    seed: Annotated[int, Field(ge=0)]
    # The name of a file of profiles/ beside params.yaml (`fairdp use-profile` writes it), or custom.
    profile: str = "custom"
    data: DataConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    grid: list[GridEntry] = Field(default_factory=list)
    sweep: SweepConfig | None = None
    report: ReportConfig = Field(default_factory=ReportConfig)
    beyond: BeyondConfig = Field(default_factory=BeyondConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    synth: SynthConfig = Field(default_factory=SynthConfig)
    runs: dict[str, RunSpec] = Field(default_factory=dict)
    designs: dict[str, dict[str, Any]] = Field(default_factory=dict)
    prepare: list[str] | None = None  # generated: the datasets some stage reads (used_datasets)
    base_dir: Path = Field(default=Path("."), exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> Params:
        if not self.profile or Path(self.profile).name != self.profile or self.profile.startswith("."):
            raise ValueError(f"profile: {self.profile!r} is not a profile's name (a file name of profiles/, no path)")
        profiles = self.base_dir / "profiles"  # beside params.yaml: checked only when loaded from a file
        if (self.profile != "custom" and "base_dir" in self.model_fields_set and profiles.is_dir()
                and not (profiles / f"{self.profile}.yaml").is_file()):
            known = sorted(p.stem for p in profiles.glob("*.yaml"))
            raise ValueError(f"profile: {self.profile!r} is not a profile of {profiles} ({', '.join(known)}) "
                             "nor custom")
        for i, g in enumerate(self.grid):
            if g.dataset not in self.data.datasets:
                raise ValueError(f"grid.{i}.dataset: {g.dataset!r} is not configured under data.datasets")
        if self.sweep is not None and self.sweep.dataset not in self.data.datasets:
            raise ValueError(f"sweep.dataset: {self.sweep.dataset!r} is not configured under data.datasets")
        for key in self.train.overrides:
            ds, _, rest = key.partition("-")
            model, _, alg = rest.partition("-")
            if ds not in self.data.datasets or model not in get_args(ModelName) or (alg and alg not in
                                                                                       get_args(Algorithm)):
                raise ValueError(f"train.overrides.{key}: expected '<dataset>-<model>' or "
                                 "'<dataset>-<model>-<algorithm>' of a configured dataset")
        b = self.beyond
        for key, names in (("attribute", b.attribute.datasets), ("inversion", b.inversion.datasets),
                           ("utility", [u.dataset for u in b.utility]),
                           ("inversion.evaluator_pool",
                            [*b.inversion.evaluator_pool, *b.inversion.evaluator_pool.values()])):
            for ds in names:
                if ds not in self.data.datasets:
                    raise ValueError(f"beyond.{key}: dataset {ds!r} is not configured under data.datasets")
        for i, ds in enumerate(self.synth.datasets):
            if ds not in self.data.datasets:
                raise ValueError(f"synth.datasets.{i}: {ds!r} is not configured under data.datasets")
        for i, ds in enumerate(self.synth.audit.datasets):
            if ds not in self.synth.datasets:
                raise ValueError(f"synth.audit.datasets.{i}: {ds!r} is not one of synth.datasets")
        for name in self.audit.looa.runs:
            if name not in self.runs:
                raise ValueError(f"audit.looa.runs: {name!r} is not one of the runs")
        want = expand_runs(self.grid, self.sweep)
        have = {k: v.fields() for k, v in self.runs.items()}
        if have != want or self.designs != expected_designs(want):
            raise ValueError(f"runs/designs ({GENERATED_FILE}): out of date with grid and sweep; regenerate them with "
                             "`fairdp grid --write` (make repro does this). For an experiment on a grid or sweep key "
                             "use `fairdp exp run -S KEY=VALUE`, which regenerates them, not `dvc exp run -S`")
        if self.prepare is not None and set(self.prepare) != set(used_datasets(self)):  # order: dvc's concern only
            raise ValueError(f"prepare ({GENERATED_FILE}): out of date with the datasets the stages read; regenerate "
                             "it with `fairdp grid --write` (make repro does this)")
        return self

    def resolve(self, path: str | os.PathLike) -> Path:
        """A path from params, relative to the directory of params.yaml."""
        p = Path(path)
        return p if p.is_absolute() else self.base_dir / p

    def mirror_dir(self) -> Path | None:
        env = os.environ.get(DATA_MIRROR_ENV)
        if env:
            return Path(env)
        return None if self.data.mirror is None else self.resolve(self.data.mirror)


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """A SafeLoader that refuses duplicated mapping keys (PyYAML silently keeps the last one). On libyaml's parser
    where PyYAML has it (its wheels do): every stage reads params.yaml and runs.yaml, and the pure-Python parser
    took 0.5-0.9 s a stage on the paper profile's 720 runs."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
        seen[key] = True
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
# YAML 1.2's exponent floats without a dot (1e-06, 5E3), which PyYAML's YAML 1.1 resolver reads as strings. DVC's
# params writer (`dvc exp run -S train.delta=1e-6`) writes them so.
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9]+[eE][-+]?[0-9]+$"),
                                       list("-+0123456789"))


def parse_yaml(text: str):
    """YAML as params.yaml is read: duplicated keys refused, YAML 1.2's exponent floats (1e-06) read as floats."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def expected_designs(runs: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """``designs`` as ``fairdp grid --write`` writes it: one audit design per (dataset, seed) used by a run."""
    out = {}
    for r in runs.values():
        out[design_key(r["dataset"], r["seed"])] = {"dataset": r["dataset"], "seed": r["seed"]}
    return dict(sorted(out.items()))


def used_datasets(p: Params) -> list[str]:
    """The datasets some stage of the pipeline reads, in data.datasets' order: the runs' (grid and sweep), the
    beyond-membership stages' (attribute, inversion and the evaluator pools of its datasets, utility), the
    synthetic-data stages' and the quickstart's MNIST. Only these are prepared (dvc.yaml's prepare stage iterates
    over them)."""
    b = p.beyond
    pools = {pool for ds, pool in b.inversion.evaluator_pool.items() if ds in b.inversion.datasets}
    used = {r.dataset for r in p.runs.values()} | set(b.attribute.datasets) | set(b.inversion.datasets) | pools | \
        {u.dataset for u in b.utility} | set(p.synth.datasets) | {"mnist"}
    return [d for d in p.data.datasets if d in used]


def error_line(e: dict, prefix: str = "") -> str:
    """One error of a pydantic ValidationError (``err.errors()``) as ``key.path: what is wrong (got value)``, the
    key path under ``prefix`` (e.g. ``train.adaclip`` for a rule's own section)."""
    loc = ".".join([prefix] * bool(prefix) + [str(p) for p in e["loc"] if p != "__root__"])
    msg = e["msg"]
    if e["type"] == "extra_forbidden":
        msg = "unknown key (a typo?)"
    elif e["type"] == "missing":
        msg = "required key is missing"
    elif msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{loc or '<top level>'}: {msg}" + (f" (got {e['input']!r})" if e["type"] not in
                                             ("extra_forbidden", "missing") and not isinstance(e["input"], dict) else "")


def _format(err: ValidationError, file: Path) -> str:
    return "invalid params:\n  " + "\n  ".join(f"{file}: {error_line(e)}" for e in err.errors())


def generated_path(params_path: str | os.PathLike) -> Path:
    """runs.yaml beside params.yaml: the ``runs``/``designs`` that ``fairdp grid --write`` generates from grid and
    sweep. It is a separate file (dvc.yaml reads it through ``vars``) so that ``dvc exp show`` does not list one
    params column per generated key."""
    return Path(params_path).with_name(GENERATED_FILE)


def yaml_error_line(file: Path, e: yaml.YAMLError) -> str:
    """A YAML syntax error as one line: the file, line and column, and what the parser expected."""
    mark = getattr(e, "problem_mark", None)
    where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(file)
    what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or type(e).__name__
    return f"{where}: not valid YAML: {' '.join(what.split())}"


def _read_yaml(file: Path, what: str) -> dict:
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(f"{file}: cannot read {what}: {e}") from None
    try:
        raw = parse_yaml(text)
    except ConfigError as e:
        raise ConfigError(f"{file}: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(yaml_error_line(file, e)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{file}: expected a mapping at the top level, got {type(raw).__name__}")
    return raw


def load_params(path: str | os.PathLike = "params.yaml", generated: str | os.PathLike | None = None) -> Params:
    """Read and validate params.yaml with its generated runs.yaml (``generated``, default: beside it); raise
    ConfigError naming the file and key path on any problem."""
    file = Path(path)
    raw = _read_yaml(file, "params")
    for k in GENERATED_KEYS:
        if k in raw:
            raise ConfigError(f"{file}: '{k}': generated into {GENERATED_FILE} by `fairdp grid --write` from "
                              "params.yaml; remove it from params.yaml")
    gen_file = Path(generated) if generated is not None else generated_path(file)
    gen = _read_yaml(gen_file, "the generated runs") if gen_file.is_file() else {}
    unknown = set(gen) - set(GENERATED_KEYS)
    if unknown:
        raise ConfigError(f"{gen_file}: unknown keys {sorted(unknown)} (only {', '.join(GENERATED_KEYS)} are generated)")
    for k in ("prepare", "pages"):
        if gen and k not in gen:
            raise ConfigError(f"{gen_file}: no '{k}' list (written by an older fairdp); regenerate it with "
                              "`fairdp grid --write`")
    pages = gen.pop("pages", [])  # the report stage's pages: dvc.yaml reads them; the params do not
    if not isinstance(pages, list) or not all(isinstance(p, str) for p in pages):
        raise ConfigError(f"{gen_file}: 'pages' must be a list of report names; regenerate it with `fairdp grid --write`")
    try:
        return Params.model_validate({**raw, **gen, "base_dir": file.resolve().parent})
    except ValidationError as e:
        raise ConfigError(_format(e, file).replace(f"{file}: runs", f"{gen_file}: runs")
                          .replace(f"{file}: designs", f"{gen_file}: designs")
                          .replace(f"{file}: prepare", f"{gen_file}: prepare")) from None
