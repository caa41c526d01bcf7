"""The rule registry (fairdp_core.rules): every list of algorithms, label and colour derives from it; every registered
rule plans into the engine's TrainSpec and trains at the ε its accountant states, paying for what it releases.

A new rule must be added to RELEASES below (the noise multipliers of the statistics it releases each step, written
from its paper, not from its module): the common tests then run it like every other rule. Its noise at the stated
scale and the replay of its releases from their streams are its own tests (tests/test_rivals.py,
tests/test_paper_rule.py, tests/test_privacy.py, tests/test_side_paths.py).
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace
from typing import get_args

import numpy as np
import pytest

from fairdp_core import config, rules
from fairdp_core.engine import spec, trainer
from fairdp_core.engine.accounting import combine_sigmas, epsilon
from fairdp_core.engine.spec import TrainSpec, release_key
from fairdp_core.engine.trainer import train_bank
from fairdp_core.reporting import plots, results
from fairdp_core.rules.base import RULE_FIELDS

from .conftest import own_settings

# rule -> the noise multipliers (noise std / L2 sensitivity) of the statistics it releases each step, from the
# Accounting record of a trained bank. Counts have sensitivity 1 except AdaClip's centred count (1/2: 2σ_b, Andrew
# et al. 2021, Theorem 1); the paper rule's group sums are noised at σ_s·C0 for sensitivity C0.
# The settings a rule needs that have no default (they depend on the dataset): its params.yaml section for a toy
# dataset, and the spec's settings for the common tests' toy bank.
TRAIN_SECTIONS = {"dpsgd_group_fixed": {"shares": {"toy": [0.7, 0.3]}}}
BANK_SETTINGS = {"dpsgd_group_fixed": {"shares": (0.7, 0.3)}}

RELEASES = {
    "sgd": lambda a: (),
    "dpsgd": lambda a: (),
    "dpsgd_group_fixed": lambda a: (),  # fixed bounds from public shares: releases nothing
    "dpsgd_s": lambda a: (a.sigma_b,),
    "dpsgd_s_paper": lambda a: (a.sigma_s, a.sigma_b),
    "dpsgd_s_paper_code": lambda a: (),  # releases nothing: it reads the exact statistics (not guaranteed)
    "dpsgd_s_nonprivate": lambda a: (),  # likewise
    "dpsgd_f": lambda a: (a.sigma_b,),
    "global_adapt": lambda a: (a.sigma_b,),
    "adaclip": lambda a: (2 * a.sigma_b,),
}


def test_every_list_of_algorithms_labels_and_colours_derives_from_the_registry():
    assert set(RELEASES) == set(rules.ALGORITHMS), "a registered rule is missing from RELEASES (or one is stale)"
    assert rules.ALGORITHMS == get_args(spec.Algorithm) == trainer.ALGORITHMS
    assert set(get_args(config.Algorithm)) == set(rules.ALGORITHMS)  # config reads them from the file names
    assert tuple(results.ALGORITHM_LABELS) == rules.ALGORITHMS
    for name, rule in rules.RULES.items():
        assert results.ALGORITHM_LABELS[name] == rule.label and plots.ALGORITHM_COLORS[rule.label] == rule.color
    labels, colors = [r.label for r in rules.RULES.values()], [r.color.lower() for r in rules.RULES.values()]
    assert len(set(labels)) == len(labels) and len(set(colors)) == len(colors)
    assert [r.order for r in rules.RULES.values()] == sorted(r.order for r in rules.RULES.values())
    with pytest.raises(ValueError, match="unknown algorithm 'nope'; known: sgd, dpsgd"):
        rules.get("nope")


@pytest.mark.parametrize("name", rules.ALGORITHMS)
def test_every_rule_plans_into_the_engines_trainspec(name):
    """The rule's settings (train.<config> of params.yaml, defaults) land on TrainSpec fields that exist: renamed
    onto rules' fields by ``stored_as`` or, for a field that is none of them, in ``settings``; none of its fields is
    a field every rule shares (the view would read the rule's value where the trainer reads the common one); and the
    view reads back exactly what was planned."""
    rule = rules.get(name)
    train = config.TrainConfig()
    if rule.config is not None:
        assert rule.settings_of(train) == rule.settings(), f"{name}: its defaults are not its Settings'"
    if name in TRAIN_SECTIONS:  # settings that depend on the dataset: none by default
        train = config.TrainConfig.model_validate({rule.config: TRAIN_SECTIONS[name]})
    run = SimpleNamespace(gamma=None, tau=None, dataset="toy", name="toy-lr-s0")
    own = rule.own_fields(train, run, lambda key, default: default)
    got = rule.plan_fields(train, run, lambda key, default: default)
    spec_fields = {f.name for f in fields(TrainSpec)}
    assert set(got) <= spec_fields, f"{name}: not TrainSpec fields: {set(got) - spec_fields}"
    assert not set(rule.fields) & (spec_fields - set(RULE_FIELDS)), f"{name}: a common TrainSpec field as its own"
    # what it plans is exactly what it declares it reads (its own fields, by its own names)
    assert list(own) == [k for k in own if k in rule.fields] and set(own) == set(rule.fields), name
    stored = [rule.stored_as.get(k, k) for k in own]
    assert [k for k in got if k != "settings"] == [k for k in stored if k in RULE_FIELDS], name
    assert dict(got.get("settings", ())) == {k: v for k, v in own.items() if rule.stored_as.get(k, k)
                                             not in RULE_FIELDS}, name
    spec = TrainSpec(algorithm=name, target_epsilon=None if not rule.private else 1.0, **got)
    view = rule.view(spec)
    assert {k: getattr(view, k) for k in rule.fields} == own, f"{name}: the view does not read back what was planned"


def test_a_rules_settings_are_checked_where_rules_load(write_params):
    """params' schema (config, which loads no rule) takes any rule's section as a mapping; the rule's Settings check
    it where rules load (check-params, the plan): a typo, a wrong type or a value out of range is one ConfigError
    naming the file and the key; a section under a name that is no rule is refused by the schema itself."""
    from fairdp_core.config import ConfigError, load_params

    for section, needle in (({"c_mx": 3.0}, r"train\.adaclip\.c_mx: unknown key"),
                            ({"gamma": 1.5}, r"train\.adaclip\.gamma: Input should be less than 1"),
                            ({"c_min": 5.0, "c_max": 1.0}, r"train\.adaclip: c_min \(5.0\) must be below c_max")):
        path = write_params({"train.adaclip": section})
        params = load_params(path)  # the schema alone: config never loads the rules
        with pytest.raises(ConfigError, match=f"{path}: {needle}"):
            rules.check_settings(params.train, path)
        with pytest.raises(ConfigError, match=needle):
            rules.load_checked(path)
    with pytest.raises(ConfigError, match=r"train\.dpsgd_s_paper_code: dpsgd_s_paper_code has no settings of its "
                                          r"own \(it reads train\.dpsgd_s_paper\)"):
        rules.load_checked(write_params({"train.dpsgd_s_paper_code": {"ratio_cap": 3.0}}))
    with pytest.raises(ConfigError, match=r"train: adaclp: unknown key"):
        load_params(write_params({"train.adaclp": {"gamma": 0.5}}))
    ok = rules.load_checked(write_params({"train.adaclip": {"c_max": 7.0}}))
    assert rules.get("adaclip").settings_of(ok.train).c_max == 7.0


def test_a_rule_reads_its_own_names_and_not_their_storage():
    """AdaClip's cap is stored as q_max (DP-SGD-S's Q cap's name: the release keys hash it) but read as c_max;
    reading q_max or eta_q through its view raises, so AdaClip can never take DP-SGD-S's constant for its own."""
    rule = rules.get("adaclip")
    spec = TrainSpec(algorithm="adaclip", target_epsilon=1.0, q_max=7.0, eta_q=0.3)
    view = rule.view(spec)
    assert (view.c_max, view.eta) == (7.0, 0.3)
    for stored in ("q_max", "eta_q", "q_init"):
        with pytest.raises(AttributeError, match=f"'adaclip' read the spec's '{stored}'"):
            getattr(view, stored)
    assert rules.get("global_adapt").view(TrainSpec(algorithm="global_adapt", target_epsilon=1.0, q_init=50.0,
                                                    tau=2.0)).z_init == 50.0


def test_a_hand_built_spec_holds_its_own_rules_defaults_and_no_other_rules_settings():
    """TrainSpec(algorithm=r) with no settings given is the spec the pipeline plans for r with params' sections
    unset (``Rule.default_fields``): r's own defaults, never another rule's under the same stored field (AdaClip's
    γ = 0.5 and Global-Adapt's Z = 100, γ = 0.9, η = 1, σ_b = 10, not DP-SGD-S's 0.75, 1, 0.2, B/20). A setting r
    does not have is refused in one line. Keys stand: a rule's fields it does not have are keyed at the first
    layout's values, and the golden keys below are those the code before computed (commit 3199d15)."""
    from fairdp_core.engine.spec import KEY_DEFAULTS, spec_fields

    checked = 0
    for name in rules.ALGORITHMS:
        eps = {} if name == "sgd" else {"target_epsilon": 1.0}
        try:
            planned = rules.get(name).default_fields()
        except ValueError:  # defaults that depend on the dataset
            continue
        assert TrainSpec(algorithm=name, **eps) == TrainSpec(algorithm=name, **eps, **planned), name
        checked += 1
    assert checked >= 9
    assert TrainSpec(algorithm="adaclip", target_epsilon=1.0).gamma == 0.5
    ga = TrainSpec(algorithm="global_adapt", target_epsilon=1.0)
    assert (ga.q_init, ga.gamma, ga.eta_q, ga.sigma_b, ga.tau) == (100.0, 0.9, 1.0, 10.0, 1.0)
    with pytest.raises(ValueError, match=r"dpsgd_f has no setting 'q_max' \(its settings, as a TrainSpec stores "
                                         r"them, with the rule's own name where it differs: sigma_b\)"):
        TrainSpec(algorithm="dpsgd_f", target_epsilon=1.0, q_max=7.0)
    with pytest.raises(ValueError, match=r"adaclip has no setting 'tau' .*: gamma, eta_q \(eta\), sigma_b, c_min, q_max \(c_max\)\)"):
        TrainSpec(algorithm="adaclip", target_epsilon=1.0, tau=3.0)
    dp = TrainSpec(algorithm="dpsgd", target_epsilon=1.0, gamma=0.75)  # a saved spec's layout value: accepted
    assert dp.gamma is None and {k: spec_fields(dp)[k] for k in KEY_DEFAULTS} == KEY_DEFAULTS
    assert release_key(dp) == 3101540507801965402
    assert release_key(TrainSpec(algorithm="adaclip", target_epsilon=1.0, gamma=0.75)) == 6163472827482034846
    assert release_key(ga) == 1079032084530664925


def test_a_setting_without_a_default_must_be_given(monkeypatch):
    """A rule whose Settings give a stored setting no default (required): a TrainSpec that leaves it unset is refused
    in one line naming the setting and the field to give, instead of storing pydantic's "undefined" marker."""
    from fairdp_core.schema import Fraction, Strict

    rule = rules.get("adaclip")
    own = dict(type(rule).settings.model_fields)
    monkeypatch.setattr(type(rule), "settings", type("Settings", (Strict,), {
        "__annotations__": {k: v.annotation for k, v in own.items() if k != "gamma"} | {"gamma": Fraction},
        **{k: v.default for k, v in own.items() if k != "gamma"}}))
    with pytest.raises(ValueError, match=r"adaclip: its setting 'gamma' has no default; give gamma=\.\.\."):
        TrainSpec(algorithm="adaclip", target_epsilon=1.0)
    assert TrainSpec(algorithm="adaclip", target_epsilon=1.0, gamma=0.3).gamma == 0.3


def test_a_rule_that_reads_a_field_it_did_not_declare_fails_at_once(monkeypatch):
    """The trainer hands each rule its spec through a RuleView: DPSGD-F declares only σ_b, so a DPSGD-F that read
    DP-SGD-S's Q cap (q_max) raises instead of training with it; the common fields stay readable."""
    rule = rules.get("dpsgd_f")
    spec = TrainSpec(algorithm="dpsgd_f", target_epsilon=1.0, clip=2.0, sigma_b=5.0)
    view = rule.view(spec)
    assert (view.clip, view.sigma_b, view.batch_size) == (2.0, 5.0, 256)
    with pytest.raises(AttributeError, match="'dpsgd_f' read the spec's 'q_max'.*sigma_b"):
        _ = view.q_max
    with pytest.raises(AttributeError, match="read-only"):
        view.clip = 3.0
    real = type(rule).policy

    def misread(self, spec, M, K, sig, gens, device):
        _ = spec.q_max  # the misread under test
        return real(self, spec, M, K, sig, gens, device)

    monkeypatch.setattr(type(rule), "policy", misread)
    with pytest.raises(AttributeError, match="q_max"):
        _bank("dpsgd_f")




def _bank(name, seed=0):
    rng = np.random.default_rng(5)
    n = 1000
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y, g = rng.integers(0, 2, n), rng.integers(0, 2, n)
    mem = np.zeros((2, n), bool)
    mem[0], mem[1, :700] = True, True
    private = rules.get(name).private
    spec = TrainSpec(algorithm=name, epochs=1, batch_size=50, target_epsilon=2.0 if private else None,
                     clip=1.0, **own_settings(name, sigma_b=20.0), settings=BANK_SETTINGS.get(name, ()))
    return spec, mem, train_bank(X, y, g, mem, spec, n_classes=2, n_groups=2, seed=seed, progress=False)


@pytest.mark.parametrize("name", rules.ALGORITHMS)
def test_every_rule_trains_at_the_epsilon_its_accountant_states(name):
    """Target ε = 2, membership rows of 1,000 and 700 records: σ_eff calibrated at the larger q; σ_g composed with
    the multipliers of what the rule releases gives σ_eff back (a release not paid for fails here); every model's ε is
    the accountant's for (σ_eff, q_m, T, δ), none above the target, the larger not needlessly below it; the
    guarantee flag and the public assumptions are the rule's."""
    rule = rules.get(name)
    spec, mem, bank = _bank(name)
    for m, a in enumerate(bank.accounting):
        assert a.algorithm == name and a.guaranteed == (rule.guaranteed and rule.private)
        assert a.sample_rate == pytest.approx(50 / mem[m].sum())
        if not rule.private:
            assert a.sigma_eff == 0.0 and a.public_assumptions == ()
            continue
        released = RELEASES[name](a)
        assert combine_sigmas(a.sigma_g, *released) == pytest.approx(a.sigma_eff, rel=1e-12)
        assert (a.sigma_g > a.sigma_eff) == bool(released)
        assert a.epsilon == pytest.approx(epsilon(a.sigma_eff, sample_rate=a.sample_rate, steps=a.steps,
                                                  delta=a.delta), rel=1e-12)
        assert a.epsilon <= 2.0
        assert a.public_assumptions[:2] == rules.COMMON_ASSUMPTIONS
    if rule.private:
        assert max(a.epsilon for a in bank.accounting) > 0.97 * 2.0


@pytest.mark.slow
@pytest.mark.parametrize("name", rules.ALGORITHMS)
def test_every_rule_is_reproducible_and_seeded(name):
    """Same seed: the same bank, bit for bit; another seed: another bank."""
    import torch

    a, b, c = (_bank(name, seed=s)[2] for s in (1, 1, 2))
    assert all(torch.equal(a.params[k], b.params[k]) for k in a.params)
    assert not all(torch.equal(a.params[k], c.params[k]) for k in a.params)


@pytest.mark.parametrize("name", rules.ALGORITHMS)
def test_a_rules_opacus_entry_point_exists(name):
    """``make_private`` names a function of the rule's own module of fairdp_core.opacus_compat (its Opacus route),
    which the package exports and :func:`~fairdp_core.opacus_compat.route` returns; a rule without one is refused."""
    import importlib

    from fairdp_core import opacus_compat

    entry = rules.get(name).make_private
    if entry is not None:
        module = importlib.import_module(f"fairdp_core.opacus_compat.{name}")
        assert opacus_compat.route(name) is getattr(module, entry) is getattr(opacus_compat, entry)
        assert entry in opacus_compat.__all__
    else:
        with pytest.raises(ValueError, match=f"rule {name!r} has no Opacus route"):
            opacus_compat.route(name)


def test_a_rules_module_that_defines_no_rule_is_named(monkeypatch):
    """A helper module dropped into fairdp_core/rules/ without being listed in rules.RULE_SUPPORT_MODULES is named in
    the error (not a bare AttributeError on RULE)."""
    import pkgutil
    import sys
    import types

    monkeypatch.setitem(sys.modules, "fairdp_core.rules.helper", types.ModuleType("fairdp_core.rules.helper"))
    real = pkgutil.iter_modules
    monkeypatch.setattr(rules.pkgutil, "iter_modules",
                        lambda path: [*real(path), pkgutil.ModuleInfo(None, "helper", False)])
    with pytest.raises(RuntimeError, match=r"fairdp_core\.rules\.helper defines no RULE"):
        rules._discover()
    monkeypatch.undo()
    assert tuple(rules._discover()) == rules.ALGORITHMS


# A rule added to the registry as one module: DP-SGD at a bound of its own, fraction·C, with a settings section
# of its own and a field that no TrainSpec field holds.
NEW_RULE = '''
"""A toy rule: DP-SGD with every record clipped to fraction·C."""

from __future__ import annotations

from ..schema import Fraction, Strict
from .base import Rule


class Settings(Strict):
    fraction: Fraction = 0.5


class FractionClip(Rule):
    name = "fraction_clip"
    order = 90
    label = "DP-SGD at fraction·C"
    color = "#999999"
    config = "fraction_clip"
    settings = Settings
    fields = ("fraction",)
    make_private = "make_private_fraction_clip"

    def own_fields(self, train, run, override):
        return {"fraction": self.settings_of(train).fraction}

    def policy(self, spec, M, K, sig, gens, device):
        from .policy import FixedClip

        return FixedClip(M, K, sig.g, clip=spec.clip * spec.fraction, device=device)


RULE = FractionClip()
'''

NEW_ROUTE = '''
"""The toy rule's Opacus route: Opacus's DP-SGD at the bound fraction·C."""

from __future__ import annotations

__all__ = ["make_private_fraction_clip"]


def make_private_fraction_clip(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                               clip: float = 1.0, fraction: float = 0.5):
    return privacy_engine.make_private(module=module, optimizer=optimizer, data_loader=data_loader,
                                       noise_multiplier=noise_multiplier, max_grad_norm=clip * fraction,
                                       poisson_sampling=True)
'''

NEW_RULE_CHECK = '''
import numpy as np
from fairdp_core import config, rules
from fairdp_core.reporting import plots
from fairdp_core.engine.spec import TrainSpec, release_key
from fairdp_core.engine.trainer import train_bank
from typing import get_args

assert "fraction_clip" in get_args(config.Algorithm)  # params.yaml's grid accepts it
assert rules.ALGORITHMS[-1] == "fraction_clip" and rules.LABELS["fraction_clip"] == "DP-SGD at fraction·C"
assert plots.ALGORITHM_COLORS["DP-SGD at fraction·C"] == "#999999"
train = config.TrainConfig.model_validate({"fraction_clip": {"fraction": 0.25}})
rules.check_settings(train)
try:
    rules.check_settings(config.TrainConfig.model_validate({"fraction_clip": {"fractoin": 0.25}}))
    raise SystemExit("a typo in the new rule's section was accepted")
except config.ConfigError as e:
    assert "train.fraction_clip.fractoin: unknown key" in str(e), e
rule = rules.get("fraction_clip")
planned = rule.plan_fields(train, None, lambda key, default: default)
assert planned == {"settings": [("fraction", 0.25)]}, planned
spec = TrainSpec(algorithm="fraction_clip", epochs=1, batch_size=50, target_epsilon=2.0, clip=2.0, **planned)
assert rule.view(spec).fraction == 0.25
assert release_key(spec) != release_key(TrainSpec(algorithm="fraction_clip", epochs=1, batch_size=50,
                                                  target_epsilon=2.0, clip=2.0, settings={"fraction": 0.5}))
rng = np.random.default_rng(5)
X = rng.normal(size=(400, 3)).astype(np.float32)
y, g = rng.integers(0, 2, 400), rng.integers(0, 2, 400)
bank = train_bank(X, y, g, np.ones((2, 400), bool), spec, n_classes=2, n_groups=2, seed=0, progress=False)
assert bank.accounting[0].algorithm == "fraction_clip" and bank.accounting[0].epsilon <= 2.0
import torch
from opacus import PrivacyEngine
from fairdp_core import opacus_compat
make = opacus_compat.route("fraction_clip")  # the rule's Opacus route, found through the registry
assert make is opacus_compat.make_private_fraction_clip and "make_private_fraction_clip" in opacus_compat.__all__
model = torch.nn.Linear(3, 2)
data = torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
model, opt, loader = make(PrivacyEngine(), module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                          data_loader=torch.utils.data.DataLoader(data, batch_size=50), noise_multiplier=1.0,
                          clip=2.0, fraction=0.25)
assert opt.max_grad_norm == 0.5
xb, yb = next(iter(loader))
torch.nn.functional.cross_entropy(model(xb), yb).backward()
opt.step()
print("ok", bank.accounting[0].epsilon)
'''


def test_a_new_rule_is_one_module(tmp_path):
    """Adding a rule is one module, and its Opacus route one more beside it: a copy of the package with one module
    dropped into rules/ (NEW_RULE, with a settings section, a field of its own and an Opacus entry point) and its
    route into opacus_compat/ (NEW_ROUTE) accepts the rule and its section in params' schema, labels it, plans its
    setting into the stored spec (a new release key per value), trains it, and finds its Opacus route through the
    registry and steps it; no other file is edited. Without the route module the package names what is missing."""
    import os
    import shutil
    import subprocess
    import sys

    from .conftest import ROOT

    shutil.copytree(ROOT / "fairdp_core", tmp_path / "fairdp_core", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "fairdp_core" / "rules" / "fraction_clip.py").write_text(NEW_RULE)
    route = tmp_path / "fairdp_core" / "opacus_compat" / "fraction_clip.py"
    route.write_text(NEW_ROUTE)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", NEW_RULE_CHECK], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]
    route.unlink()  # the rule names an Opacus route that is not there: the package says which, at import
    out = subprocess.run([sys.executable, "-c", "import fairdp_core.opacus_compat"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "rule 'fraction_clip' names its Opacus entry point 'make_private_fraction_clip', " \
        "but fairdp_core.opacus_compat.fraction_clip does not exist" in out.stderr, out.stderr[-2000:]

