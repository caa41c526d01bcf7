"""What a clipping rule is to the rest of fairdp: the :class:`Rule` interface every module of this package
implements once (docs/rules.md).

A rule is the per-step policy that decides each model's clipping bounds (one per group, or one for all), what it
releases about the private batch to decide them, and at which noise. The trainer, the plan, the reports and the
Opacus optimizers know a rule only through this interface and the registry (:mod:`fairdp_core.rules`):

- ``name``, ``order``, ``label``, ``color``: the key in params.yaml and the stored artefacts, the place in every
  list, the label every report prints, the one colour every figure draws it in;
- ``private``: whether the gradient is noised at all (False for SGD);
- ``guaranteed``: whether the stated ε holds (False for a rule whose statistics are not privatised);
- ``uses_clip``: whether ``train.clip`` (or its override) reaches the rule, as its fixed or initial bound;
- ``config``: the attribute of ``train`` in params.yaml that holds the rule's settings (None: none);
- ``settings``: the schema of that section, a :class:`~fairdp_core.schema.Strict` model declared in the rule's
  module (the released paper code shares the paper rule's section and schema); :meth:`Rule.settings_of` reads it
  from params' ``train``, and :func:`fairdp_core.rules.check_settings` checks every section params.yaml sets;
- ``fields``: the rule's own settings as the rule reads them from the spec (its own names, e.g. AdaClip's ``c_max``),
  the only rule settings it may read: the trainer hands the rule the spec through a :class:`RuleView`, so a rule
  that reads another rule's field (say DP-SGD-S's Q cap ``q_max``) fails at once instead of training with the
  other rule's constant;
- ``stored_as``: where a field is stored in the engine's :class:`~fairdp_core.engine.spec.TrainSpec` under
  another name (one of :data:`RULE_FIELDS`: release keys hash the stored names, so they stay as they were when
  the rule's first results were written), e.g. AdaClip's ``c_max`` stored as ``q_max``; the view translates.
  A field that is none of :data:`RULE_FIELDS` (a rule added later, with settings of its own) is stored in the
  spec's ``settings`` pairs under its own name: a new rule needs no new TrainSpec field;
- :meth:`Rule.own_fields`: the rule's settings for one run, by its own names, exactly ``fields``
  (tests/test_rules.py); :meth:`Rule.plan_fields` renames them to the stored TrainSpec fields;
- :meth:`Rule.sigmas`: the split of the calibrated σ_eff between the gradient and each statistic released;
- :meth:`Rule.policy`: the :class:`~fairdp_core.rules.policy.ClipPolicy` that trains it;
- :meth:`Rule.public_assumptions`: the constants the accounting treats as public;
- ``make_private``: the name of its Opacus entry point in :mod:`fairdp_core.opacus_compat` (None: none);
- ``rival``: another paper's rule the study compares DP-SGD-S with (the reports group them);
- :meth:`Rule.default_fields`: its settings at their defaults, for a spec built outside the pipeline;
- ``numerics``: the version of the bits its banks are trained to (bumped when only this rule's arithmetic changed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

if TYPE_CHECKING:
    import torch

    from .policy import ClipPolicy

# The engine's TrainSpec (fairdp_core.engine.spec), by name only: the rules sit below the engine and never import it.
TrainSpec = Any

__all__ = ["COMMON_ASSUMPTIONS", "RULE_FIELDS", "CountRule", "Rule", "RuleView", "Sigmas", "count_sigmas",
           "default_sigma_b", "split_sigma"]

# The TrainSpec fields that belong to rules, each stored for those that declare it (``Rule.fields`` or, under another
# name, ``Rule.stored_as``); the others (the model, the schedule, lr, C, ε and its accountant) are every rule's.
# Their names are the stored spec's, from which release keys are derived: never renamed.
RULE_FIELDS = ("tau", "gamma", "eta_q", "sigma_b", "c_min", "q_init", "q_max", "count_floor", "ema_momentum",
               "percentile", "ratio_cap", "sigma_s")

# What every private rule's accounting treats as public, before the rule's own constants.
COMMON_ASSUMPTIONS = ("n_m, the size of model m's training pool (for q_m = B / n_m and T = E·mean(n_m) / B)",
                      "the number of groups K and each record's group label space")


class Sigmas(NamedTuple):
    """The noise multipliers of one step: σ_g (gradient), σ_b (counts), σ_s (group sums), σ_eff (what the
    accountant charges: the Gaussian mechanisms of the step composed into one)."""

    g: float
    b: float | None
    s: float | None
    eff: float


@dataclass(frozen=True)
class Rule:
    """One clipping rule (see the module docstring). Subclasses override what differs from DP-SGD's fixed bound."""

    name: ClassVar[str]
    order: ClassVar[int]  # where the reports list it (the study's arms first, then the rivals)
    label: ClassVar[str]
    color: ClassVar[str]
    guaranteed: ClassVar[bool] = True
    private: ClassVar[bool] = True
    uses_clip: ClassVar[bool] = True
    config: ClassVar[str | None] = None
    settings: ClassVar[type | None] = None
    fields: ClassVar[tuple[str, ...]] = ()
    stored_as: ClassVar[dict[str, str]] = {}  # noqa: RUF012 (a declaration, never mutated)
    make_private: ClassVar[str | None] = None
    rival: ClassVar[bool] = False
    # The version of the bits this rule's banks are trained to, where a change to the engine moved this rule's bits
    # and no other's (fairdp_core.study.claims.numerics_of; the engine-wide version is claims.NUMERICS_VERSION).
    numerics: ClassVar[int] = 1
    # The same where the engine hands the rule the Gram matrix of its group sums instead (Backend.reads_gram: the
    # dense backend with more than two groups); None: as ``numerics``.
    numerics_gram: ClassVar[int | None] = None

    def view(self, spec: TrainSpec) -> RuleView:
        """``spec`` as this rule may read it (:class:`RuleView`)."""
        return RuleView(spec, self)

    def settings_of(self, train: Any) -> Any:
        """The rule's settings: ``train.<config>`` of params.yaml validated by its ``Settings`` (defaults where
        unset); None for a rule without settings. A ConfigError names ``train.<config>.<key>`` on a bad value."""
        if self.settings is None:
            return None
        from pydantic import ValidationError

        from ..config import ConfigError, error_line

        try:
            return self.settings.model_validate(train.rule_section(self.config))
        except ValidationError as e:
            raise ConfigError(error_line(e.errors()[0], f"train.{self.config}")) from None

    def own_fields(self, train: Any, run: Any, override: Any) -> dict[str, object]:
        """The rule's settings for one run by its own names (exactly ``fields``), from ``train`` (params'
        TrainConfig), the run and ``override(key, default)`` (the run's per-dataset/algorithm override, else
        ``default``), in their stored order."""
        return {}

    def default_fields(self) -> dict[str, object]:
        """:meth:`plan_fields` at the rule's defaults (params.yaml's ``train.<config>`` unset, no grid point): the
        rule's settings as the pipeline would plan them with none given, for a spec built outside it
        (:func:`fairdp_core.audit.custom.audit_model`). A ValueError where the defaults depend on the dataset."""
        from types import SimpleNamespace

        from ..config import ConfigError, TrainConfig

        run = SimpleNamespace(gamma=None, tau=None, dataset=None, name="(outside the pipeline)", lr=None, clip=None)
        try:
            return self.plan_fields(TrainConfig(), run, lambda key, default: default)
        except ConfigError as e:
            raise ValueError(f"{self.name}: its settings have no default outside the pipeline ({e})") from None

    def plan_fields(self, train: Any, run: Any, override: Any) -> dict[str, object]:
        """:meth:`own_fields` as the engine's TrainSpec fields: renamed by ``stored_as``, and those that are none of
        :data:`RULE_FIELDS` in its ``settings`` pairs."""
        out: dict[str, object] = {}
        extra: dict[str, object] = {}
        for k, v in self.own_fields(train, run, override).items():
            stored = self.stored_as.get(k, k)
            if stored in RULE_FIELDS:
                out[stored] = v
            else:
                extra[k] = v
        if extra:
            out["settings"] = sorted(extra.items())
        return out

    def sigmas(self, spec: TrainSpec, sigma_eff: float) -> Sigmas:
        """σ_eff (calibrated to the target ε) split between the gradient and the rule's statistics."""
        return Sigmas(sigma_eff, None, None, sigma_eff)

    def policy(self, spec: TrainSpec, M: int, K: int, sig: Sigmas, gens: list[dict[str, torch.Generator]],
               device: torch.device | str) -> ClipPolicy:
        raise NotImplementedError

    def public_assumptions(self, spec: TrainSpec) -> tuple[str, ...]:
        """The rule's constants that the accounting treats as public (after :data:`COMMON_ASSUMPTIONS`)."""
        return ()


class RuleView:
    """A spec as one rule may read it: every common field and the rule's own ``fields`` (by its own names, read from
    where ``stored_as`` stores them); reading another of :data:`RULE_FIELDS` raises AttributeError naming the rule
    and its fields."""

    __slots__ = ("_rule", "_spec")

    def __init__(self, spec: TrainSpec, rule: Rule) -> None:
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_rule", rule)

    def __getattr__(self, name: str) -> Any:
        rule = object.__getattribute__(self, "_rule")
        spec = object.__getattribute__(self, "_spec")
        if name in rule.fields:
            stored = rule.stored_as.get(name, name)
            if stored in RULE_FIELDS:
                return getattr(spec, stored)
            own = dict(spec.settings)
            if name not in own:
                raise AttributeError(f"rule {rule.name!r}: its field {name!r} is not in the spec's settings "
                                     f"(plan it: Rule.plan_fields)")
            return own[name]
        if name in RULE_FIELDS:
            raise AttributeError(f"rule {rule.name!r} read the spec's {name!r}, which is not one of its fields "
                                 f"({', '.join(rule.fields) or 'none'}): declare it in {type(rule).__name__}.fields")
        return getattr(spec, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a rule's view of its spec is read-only")


def split_sigma(sigma_eff: float, *sigma_stats: float) -> float:
    """σ_g such that combine_sigmas(σ_g, *σ_stats) == σ_eff. Requires Σ_j σ_j⁻² < σ_eff⁻²."""
    rest = sigma_eff ** -2 - sum(s ** -2 for s in sigma_stats)
    if not sigma_stats or rest <= 0:
        shown = ", ".join(f"{s:.4g}" for s in sigma_stats)
        raise ValueError(f"the statistics' noise ({shown}) must leave budget for the gradient at the calibrated "
                         f"σ_eff = {sigma_eff:.4g} (need Σ σ_j⁻² < σ_eff⁻²): raise train.dpsgd_s.sigma_b or "
                         "train.dpsgd_s_paper.sigma_s / sigma_b (or the sigma_b of train.dpsgd_f, "
                         "train.global_adapt, train.adaclip)")
    return rest ** -0.5


def default_sigma_b(spec: TrainSpec) -> float:
    """The count noise when the spec leaves it open: B/20 (Andrew et al. 2021's choice)."""
    return spec.sigma_b if spec.sigma_b is not None else spec.batch_size / 20.0


def count_sigmas(sigma_eff: float, sigma_b: float, count_multiplier: float) -> Sigmas:
    """The split of a rule that releases noised counts beside the gradient: ``count_multiplier`` is the counts'
    noise multiplier (noise std / L2 sensitivity), which the gradient's σ_g pays for."""
    return Sigmas(split_sigma(sigma_eff, count_multiplier), sigma_b, None, sigma_eff)


@dataclass(frozen=True)
class CountRule(Rule):
    """A rule that releases noised counts of std σ_b each step (the rivals): the counts' noise multiplier is
    σ_b / ``count_sensitivity``, the L2 sensitivity of what is released."""

    count_sensitivity: ClassVar[float] = 1.0

    def sigmas(self, spec: TrainSpec, sigma_eff: float) -> Sigmas:
        sigma_b = default_sigma_b(spec)
        return count_sigmas(sigma_eff, sigma_b, sigma_b / self.count_sensitivity)
