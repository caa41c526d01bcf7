"""The sections of params.yaml that no rule reads: data, audit, compute, the synthetic-data baselines, report and the
risks beyond membership; each a frozen pydantic model that rejects unknown keys."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..schema import Fraction, Positive, PositiveInt
from ..schema import Strict as _Strict

__all__ = ["RULE_NAMES", "Algorithm", "ModelName", "SynthMethod", "AuditConfig", "ComputeConfig", "DataConfig",
           "DatasetOptions", "LooaConfig", "ReportConfig", "SynthConfig"]

RULE_SUPPORT_MODULES = ("base", "policy")  # fairdp_core/rules/ modules that define no rule
RULE_NAMES = tuple(sorted(p.stem for p in (Path(__file__).parent.parent / "rules").glob("*.py")
                          if p.stem not in ("__init__", *RULE_SUPPORT_MODULES)))
Algorithm = Literal[RULE_NAMES]
ModelName = Literal["lr", "mlp", "cnn", "cnn_relu"]
SynthMethod = Literal["dpdsyn", "dpsgd", "mst", "dpcgan", "patectgan", "dpctgan"]



class DatasetOptions(_Strict):
    """Per-dataset preparation (docs/study.md, 'Datasets and groups'). ``group``: the group attribute (None: the
    dataset's default); ``group_as_feature``: keep it as a model input; ``test_fraction``: held-out share where the
    dataset has no official test file; ``train_size`` / ``test_size``: stratified (group × label) subsets, None for all.
    ``source``: for a variant under a name of its own (e.g. ``adult_blind: {source: adult, group_as_feature:
    false}``), the study dataset it is prepared from; its records and split are the source's (same seed stream)."""

    source: str | None = None
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
    def _known_datasets(self) -> DataConfig:
        # validation only: the stages' code deps leave this import out (tests/test_stages.py, VALIDATION_ONLY), as a
        # dataset's code reaches a stage through its prepared data
        from ..data.loaders import DATASET_GROUPS

        for name, opts in self.datasets.items():
            if opts.source is not None and opts.source not in DATASET_GROUPS:
                raise ValueError(f"datasets.{name}.source: unknown dataset {opts.source!r}; "
                                 f"known: {', '.join(DATASET_GROUPS)}")
            if opts.source is None and name not in DATASET_GROUPS:
                raise ValueError(f"datasets.{name}: unknown dataset; known: {', '.join(DATASET_GROUPS)} (a variant "
                                 "under a name of its own names its dataset with `source`)")
            base = opts.source or name
            if opts.group is not None and opts.group not in DATASET_GROUPS[base]:
                raise ValueError(f"datasets.{name}.group: unknown group attribute {opts.group!r}; "
                                 f"known: {', '.join(DATASET_GROUPS[base])}")
        return self


class LooaConfig(_Strict):
    """PA-LOOA (exact, expensive) for the runs listed: L stratified targets, R pairs each."""

    runs: list[str] = Field(default_factory=list)
    L: PositiveInt = 20
    R: PositiveInt = 4


class AuditConfig(_Strict):
    """The membership game: m audit records (≥ min(n_k, min_per_group) per group; ``all``: the whole training pool,
    each model training on a stratified half of it, as the paper), R rounds (2R models); statistics: bootstrap
    resamples (the outcome-fairness report's), permutations, null permutations, CI level 1 − alpha."""

    def m_for(self, n: int) -> int:
        """The number of audit records for a pool of n training records."""
        return n if self.m == "all" else min(self.m, n)

    m: PositiveInt | Literal["all"] = 1000  # "all": every training record is audited (the paper's m = n)
    R: Annotated[int, Field(ge=2)] = 4
    min_per_group: PositiveInt = 50
    n_boot: PositiveInt = 1000
    n_perm: PositiveInt = 1000
    n_null: PositiveInt = 50
    alpha: Fraction = 0.05
    eval_batch: PositiveInt = 4096
    looa: LooaConfig = Field(default_factory=LooaConfig)


class ComputeConfig(_Strict):
    """How banks are executed (an execution knob like ``train.threads``: no stage tracks it, results do not depend
    on it). Each bank is split into ``workers`` shards of models trained in parallel, each shard in a process of
    ``threads_per_worker`` torch threads (1: this process, ``train.threads`` threads). ``backend``: ``loky``
    (worker processes on this machine) or ``ray`` (Ray tasks). ``ray_address``: ``local`` starts a Ray on this
    machine, ``auto`` or ``host:port`` joins a running cluster (``ray start --head``); setting it selects Ray.
    ``gpus_per_worker``: Ray's ``num_gpus`` per shard (a fraction shares a GPU; with ``train.device: cuda``).
    ``shard_models``: the model families whose banks are sharded (None: every one); the others train in the stage's
    own process, where a bank of seconds (LR) would pay more for starting the workers than sharding saves."""

    workers: PositiveInt = 1
    backend: Literal["loky", "ray"] = "loky"
    ray_address: str | None = None
    threads_per_worker: PositiveInt = 1
    gpus_per_worker: Annotated[float, Field(ge=0.0)] = 0.0
    shard_models: list[ModelName] | None = None

    @model_validator(mode="before")
    @classmethod
    def _ray_address_selects_ray(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("ray_address") is not None and "backend" not in data:
            data = {**data, "backend": "ray"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> ComputeConfig:
        if self.ray_address is not None and self.backend != "ray":
            raise ValueError(f"ray_address is set ({self.ray_address!r}) but backend is {self.backend!r}: set "
                             "compute.backend: ray, or remove compute.ray_address")
        if self.ray_address is not None and not self.ray_address.strip():
            raise ValueError("ray_address: empty; use local, auto, host:port, or null")
        if self.gpus_per_worker > 0 and self.backend != "ray":
            raise ValueError("gpus_per_worker is Ray's num_gpus per shard: set compute.backend: ray (with loky, "
                             "every worker uses train.device)")
        return self


class DPDSynConfig(_Strict):
    """DPDSyn (fairdp_core.synth.dpdsyn.DPDSynSpec): epochs over the private pool (T = E·n/B), expected batch B,
    clip C, σ_c = ``label_sigma_ratio``·σ for the label-count release; the generator's noise size, width, Adam
    step, updates per release, Gumbel-softmax temperature, synthetic batch; the task model's step and
    re-initialisation period."""

    epochs: Positive = 3.0
    batch_size: PositiveInt = 256
    clip: Positive = 1.0
    label_sigma_ratio: Positive = 20.0
    noise_dim: PositiveInt = 32
    hidden: PositiveInt = 128
    lr_g: Positive = 1e-3
    g_steps: PositiveInt = 1
    temperature: Positive = 0.5
    synth_batch: PositiveInt = 256
    task_lr: Positive = 0.5
    reinit_every: PositiveInt = 50


class DPCGANConfig(_Strict):
    """DP-CGAN (fairdp_core.synth.dpgan.DPCGANSpec), the DP GAN baseline at the stated (ε, δ): epochs over the
    private pool (T = E·n/B), expected batch B, clip C, σ_c = ``label_sigma_ratio``·σ; the generator's noise size
    and width, the discriminator's width, their Adam steps, the Gumbel-softmax temperature."""

    epochs: Positive = 10.0
    batch_size: PositiveInt = 64
    clip: Positive = 1.0
    label_sigma_ratio: Positive = 20.0
    noise_dim: PositiveInt = 32
    hidden: PositiveInt = 128
    d_hidden: PositiveInt = 128
    lr_g: Positive = 2e-3
    lr_d: Positive = 2e-3
    temperature: Positive = 0.2


class DownstreamConfig(_Strict):
    """The classifier trained (without noise) on a synthetic table, and on the real pool for reference: the
    project's ``model``, minibatch SGD, ``epochs``, step ``lr``, batch ``batch_size``."""

    model: ModelName = "lr"
    epochs: Positive = 3.0
    lr: Positive = 0.5
    batch_size: PositiveInt = 256


class SynthDpsgdConfig(_Strict):
    """DP-SGD on the real pool (the engine), the baseline at the same (ε, δ): LR, epochs, step, clip, batch."""

    epochs: Positive = 5.0
    lr: Positive = 0.5
    clip: Positive = 1.0
    batch_size: PositiveInt = 256


class SmartnoiseConfig(_Strict):
    """smartnoise-synth baselines (their own venv, ``make synth-venv``): epochs of the GANs (PATE-CTGAN stops
    earlier when its budget is spent)."""

    gan_epochs: PositiveInt = 20


class SynthAuditConfig(_Strict):
    """PA-ALOOA of the synthetic route: per dataset and ε, 2R synthesizers (one per membership row, each followed
    by its downstream classifier) and 2R DP-SGD models on the same design; m audited records."""

    datasets: list[str] = Field(default_factory=list)
    epsilons: list[Positive] = Field(default_factory=list)
    R: Annotated[int, Field(ge=2)] = 16
    m: PositiveInt = 200
    min_per_group: PositiveInt = 50


class SynthConfig(_Strict):
    """DP synthetic data (docs/study.md, 'Synthetic data'): DPDSyn against DP-SGD on real data, DP-CGAN
    (fairdp_core.synth.dpgan) and smartnoise's MST (PATE-CTGAN and DP-CTGAN run too but are not at their nominal ε),
    at every ε and seed, on each dataset; the non-private DPDSyn (σ = 0) and the classifier trained on the real pool
    are always run as upper bounds. ``n_synth``: rows of a released table (public); ``bins``:
    public equal-width bins of [-1, 1] for numerics (fidelity, and the codes the smartnoise baselines see);
    ``accountant``: the one accountant of DPDSyn, DP-CGAN and the DP-SGD baseline (δ is ``train.delta``)."""

    datasets: list[str] = Field(default_factory=list)
    methods: list[SynthMethod] = Field(default_factory=lambda: ["dpdsyn", "dpsgd"])
    epsilons: list[Positive] = Field(default_factory=lambda: [1.0, 10.0])
    seeds: PositiveInt = 1
    n_synth: PositiveInt = 10000
    bins: Annotated[int, Field(ge=2)] = 10
    # PRV: Opacus's RDP accountant, with its default orders, cannot certify ε below about 0.19 at δ = 1e-5
    # (log(1/δ)/(α_max − 1)), and the synthetic-data ε grid goes down to 0.01. DPDSyn and its DP-SGD baseline share it.
    accountant: Literal["rdp", "prv"] = "prv"
    dpdsyn: DPDSynConfig = Field(default_factory=DPDSynConfig)
    dpcgan: DPCGANConfig = Field(default_factory=DPCGANConfig)
    downstream: DownstreamConfig = Field(default_factory=DownstreamConfig)
    dpsgd: SynthDpsgdConfig = Field(default_factory=SynthDpsgdConfig)
    smartnoise: SmartnoiseConfig = Field(default_factory=SmartnoiseConfig)
    audit: SynthAuditConfig = Field(default_factory=SynthAuditConfig)


class ReportConfig(_Strict):
    """Papermill execution of the reports."""

    kernel: str = "python3"
    timeout_s: PositiveInt = 1800


class AttributeInferenceConfig(_Strict):
    """Attribute inference of the group attribute (docs/study.md, 'Beyond membership') on the runs of ``datasets``
    whose algorithm is in ``beyond.algorithms``: lowest loss where the attribute is a model input, a meta-classifier
    on the model's outputs (fitted on the test split) where it is not (a variant with ``group_as_feature: false``)."""

    datasets: list[str] = Field(default_factory=list)


class InversionConfig(_Strict):
    """Model inversion (docs/study.md, 'Beyond membership') of the image runs of ``datasets`` (algorithm in
    ``beyond.algorithms``): the first ``models`` models of each bank, ``restarts`` starting points per class, Adam
    (``lr``) for ``steps`` on log p_c − ``tv``·TV − ``l2``·mean(x²). The evaluators (trained without privacy on data
    disjoint from the attacked models': ``evaluator_pool``, else 80% of the test split) train ``evaluator_epochs`` at
    ``evaluator_lr``."""

    datasets: list[str] = Field(default_factory=list)
    models: PositiveInt = 4
    restarts: PositiveInt = 2
    steps: PositiveInt = 300
    lr: Positive = 0.05
    tv: Annotated[float, Field(ge=0.0)] = 0.05
    l2: Annotated[float, Field(ge=0.0)] = 0.01
    evaluator_epochs: Positive = 10.0
    evaluator_lr: Positive = 0.1
    # per attacked dataset: a configured dataset of the same source whose training records outside the attacked pool
    # train the evaluators (e.g. mnist: mnist_full, the 50,000 MNIST images the 10,000-image pool leaves out), and the
    # evaluators' architecture (default: the dataset's cnn)
    evaluator_pool: dict[str, str] = Field(default_factory=dict)
    evaluator_model: dict[str, ModelName] = Field(default_factory=dict)


class UtilityConfig(_Strict):
    """Test accuracy of ``model`` on ``dataset``'s whole training split, non-private and DP-SGD at ``epsilon`` (δ, the
    accountant and the sampling as ``train``), over ``seeds`` (the DP-SGD material's MNIST CNN at ε = 2)."""

    dataset: str
    model: ModelName = "cnn_relu"
    epsilon: Positive = 2.0
    seeds: PositiveInt = 3
    epochs: Positive = 10.0
    batch_size: PositiveInt = 256
    lr: Positive = 0.5
    clip: Positive = 1.0


class BeyondConfig(_Strict):
    """Risks beyond membership (docs/study.md, 'Beyond membership'), on the banks the membership audit trains."""

    algorithms: list[Algorithm] = Field(default_factory=lambda: ["sgd", "dpsgd"])
    attribute: AttributeInferenceConfig = Field(default_factory=AttributeInferenceConfig)
    inversion: InversionConfig = Field(default_factory=InversionConfig)
    utility: list[UtilityConfig] = Field(default_factory=list)
