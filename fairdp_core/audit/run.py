"""The audit's one entry point: every registered attack and its statistics on one bank's signals.

:func:`audit` takes a bank's signals as arrays (``loss`` and ``phi`` [M, m] on the audited records, ``mem`` [M, m]
their membership, ``g`` [m] their groups) and returns one :class:`AuditResult`: per record each attack's advantage,
per group each attack's GPR with its interval, the low-FPR view per group, per attack Δ with its simultaneous
interval, contrasts, null floor and p-values, the per-(model, record) scores of the score-based attacks, and the
time each attack took. The pipeline's attack stage, :func:`fairdp_core.audit.custom.audit_bank` and the clip study all
call it; it reads and writes no file.

The attacks are a registry (:data:`REGISTRY`, in the order they are run): a new attack is one :class:`Attack` entry,
and the parametrized tests over the registry (tests/test_attack_parity.py: no leak → chance; a planted group leak
found in its group) check it with no new test code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .attacks import (
    ga_predictions,
    gba_advantage,
    gba_predictions,
    lira_scores,
    record_advantage,
    sort_columns,
    sort_rows_with_labels,
)
from .inference import (
    cross_fit_contributions,
    group_inference,
    prediction_contributions,
    studentized_permutation_pvalue,
)
from .rmia import OFFLINE_RMIA_MIN_MODELS, rmia_scores
from .stats import delta_pp, epsilon_lower_bound, gpr, pair_folds, tpr_at_fpr_clustered
from .threads import ordered_map

__all__ = ["ATTACKS", "INTERVALS", "REGISTRY", "Attack", "AuditResult", "Bank", "audit"]


SCORE_NAMES = ("lira_online", "lira_offline", "rmia", "rmia_offline")


@dataclass
class Bank:
    """One bank's signals and the scores computed from them, each computed once on first use (an attack, the
    low-FPR view and a caller's ROC read the same arrays; :meth:`computed_scores` returns those computed). ``rng``:
    the one generator every permutation draws from, in the registry's order."""

    loss: np.ndarray
    phi: np.ndarray
    mem: np.ndarray
    g: np.ndarray
    K: int
    rng: np.random.Generator
    n_null: int
    _cache: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def _once(self, name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = compute()
        return self._cache[name]

    @property
    def scores(self) -> np.ndarray:
        """PA-ALOOA's score: −loss, float64."""
        return self._once("scores", lambda: -np.asarray(self.loss, dtype=np.float64))

    @property
    def lira_online(self) -> np.ndarray:
        return self._once("lira_online", lambda: lira_scores(self.phi, self.mem, mode="online"))

    @property
    def lira_offline(self) -> np.ndarray:
        return self._once("lira_offline", lambda: lira_scores(self.phi, self.mem, mode="offline"))

    @property
    def rmia(self) -> np.ndarray:
        return self._once("rmia", lambda: rmia_scores(self.phi, self.mem))

    @property
    def rmia_offline(self) -> np.ndarray:
        return self._once("rmia_offline", lambda: rmia_scores(self.phi, self.mem, mode="offline"))

    def computed_scores(self) -> dict[str, np.ndarray]:
        """The attack scores (of :data:`SCORE_NAMES`) computed so far, in that order."""
        return {k: self._cache[k] for k in SCORE_NAMES if k in self._cache}

    @property
    def rows_sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each model's scores sorted (:func:`sort_rows`) and its labels in that order: PA-GA, PA-GBA and PA-GBA's
        floor read the one sort."""
        return self._once("rows_sorted", lambda: sort_rows_with_labels(self.scores, self.mem))

    @property
    def columns_sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each record's scores sorted over models (:func:`sort_columns`): the in-sample and null-corrected
        PA-ALOOA read the one sort."""
        return self._once("columns_sorted", lambda: sort_columns(self.scores))

    def ga(self) -> np.ndarray:
        order, s_sorted, l_sorted = self.rows_sorted
        return ga_predictions(self.scores, self.mem, presorted=(order, s_sorted), labels_sorted=l_sorted)

    def gba(self, group: np.ndarray | None = None, advantage: bool = False) -> np.ndarray:
        """PA-GBA's predictions on ``group`` (default the bank's), or with ``advantage`` its per-record advantage."""
        order, s_sorted, l_sorted = self.rows_sorted
        fn = gba_advantage if advantage else gba_predictions
        return fn(self.scores, self.mem, self.g if group is None else group, presorted=(order, s_sorted),
                  labels_sorted=l_sorted)

    def gba_floor(self) -> float:
        """PA-GBA's null floor: its per-group thresholds refitted on permuted group labels (the rows sorted once).
        The permutations are drawn in order here; the refits run on threads
        (:func:`~fairdp_core.audit.threads.ordered_map`)."""
        perms = [self.rng.permutation(self.g) for _ in range(self.n_null)]
        floors = ordered_map(lambda pg: delta_pp(gpr(self.gba(pg, advantage=True), pg, self.K)), perms)
        return float(np.mean(floors))


@dataclass(frozen=True)
class Attack:
    """One attack of the registry.

    ``contributions``: per-(model, record) contributions [M, m] whose sum over models is each record's advantage;
    such an attack gets intervals over records × model pairs (:func:`~fairdp_core.audit.inference.group_inference`).
    ``advantage``: the per-record advantage [m] directly (an estimator not of that form: a point estimate, no
    interval). Exactly one of the two is given. ``null_floor``: replaces the permutation floor where the attack's
    fit depends on the groups. ``group_intervals`` / ``test_delta``: whether its per-group intervals and its test of
    Δ > 0 are reported (``note`` says why not). ``min_models``: left out of smaller banks. ``label``, ``color`` and
    ``short`` (a figure's tick): how every report names and draws it (fairdp_core/reporting/plots.py reads them here)."""

    name: str
    label: str
    color: str
    short: str
    contributions: Callable[[Bank], np.ndarray] | None = None
    advantage: Callable[[Bank], np.ndarray] | None = None
    null_floor: Callable[[Bank], float] | None = None
    group_intervals: bool = True
    test_delta: bool = True
    note: str | None = None
    min_models: int = 2


# Attacks whose per-record advantage is a sum of per-(model, record) terms get intervals over records × model pairs.
# Their coverage was simulated for the cross-fitted PA-ALOOA (reports/coverage/); the others use the same construction
# without their own simulation. The in-sample and null-corrected PA-ALOOA estimators are reported as point estimates.
# PA-GBA fits one threshold per model and group on that group's records, so its Δ is positive without any leakage
# (the overfit is larger for a smaller group): its interval covers that inflated quantity, and it gets no test of
# "Δ > 0"; read it against its null floor (thresholds refitted on permuted labels).
# LiRA: each model's Gaussians are fitted on the other fold's models, and a record is called IN when the likelihood
# ratio exceeds 1 (online) or φ exceeds the OUT mean (offline): no threshold is fitted on labels. RMIA: likelihood
# ratios against reference models (online: the other fold's; offline: the other pairs of the model's own fold that
# the record is OUT of, with the paper's correction a) and a population of the model's OUT records (of the other
# half of the audited records); its threshold is cross-fitted like PA-ALOOA's.
REGISTRY: dict[str, Attack] = {a.name: a for a in (
    Attack("alooa_cross_fit", "PA-ALOOA cross-fitted", "#0072B2", "CF",
           contributions=lambda b: cross_fit_contributions(b.scores, b.mem)),
    Attack("alooa_in_sample", "PA-ALOOA in-sample (paper)", "#56B4E9", "IS",
           advantage=lambda b: record_advantage(b.scores, b.mem, estimator="in_sample", presorted=b.columns_sorted)),
    Attack("alooa_null_corrected", "PA-ALOOA null-corrected", "#003f63", "NC",
           advantage=lambda b: record_advantage(b.scores, b.mem, estimator="null_corrected", rng=b.rng,
                                                n_null=b.n_null, presorted=b.columns_sorted)),
    Attack("ga", "PA-GA", "#009E73", "GA", contributions=lambda b: prediction_contributions(b.ga(), b.mem)),
    Attack("gba", "PA-GBA", "#E69F00", "GBA", contributions=lambda b: prediction_contributions(b.gba(), b.mem),
           null_floor=Bank.gba_floor, test_delta=False,
           note="per-group thresholds: Δ > 0 without leakage; compare with null_floor_pp"),
    Attack("lira_online", "LiRA online", "#CC79A7", "LiRA\non",
           contributions=lambda b: prediction_contributions(b.lira_online >= 0, b.mem), group_intervals=False,
           note="per-group GPR intervals not reported: they undercover in simulation (down to 0.86, "
                "reports/coverage/attack_coverage.md); the contrasts and Δ's interval cover"),
    Attack("lira_offline", "LiRA offline", "#882255", "LiRA\noff",
           contributions=lambda b: prediction_contributions(b.lira_offline >= 0, b.mem)),
    Attack("rmia", "RMIA", "#44AA99", "RMIA", contributions=lambda b: cross_fit_contributions(b.rmia, b.mem)),
    Attack("rmia_offline", "RMIA offline", "#AA3377", "RMIA\noff",
           contributions=lambda b: cross_fit_contributions(b.rmia_offline, b.mem), min_models=OFFLINE_RMIA_MIN_MODELS),
)}
ATTACKS = tuple(REGISTRY)
INTERVALS = tuple(a.name for a in REGISTRY.values() if a.contributions is not None)


@dataclass
class AuditResult:
    """What :func:`audit` found. ``records``: per audited record its group and each attack's advantage;
    ``group_rows``: per attack and group the GPR with its interval, then the low-FPR view (attack
    ``lira_online_lowfpr``); ``attacks``: per attack the summary (GPR, Δ and its interval, contrasts, null floor,
    p-values, notes); ``low_fpr``: per group name TPR at 0.1% and 1% FPR and the ε lower bound (LiRA online);
    ``scores``: the per-(model, record) scores computed (``lira_online``, ``lira_offline``, ``rmia``,
    ``rmia_offline`` where run); ``timings``: seconds per attack (``<attack>_s``), for LiRA's scores computed first
    (``lira_scores_s``) and for the low-FPR view (``low_fpr_s``)."""

    records: pd.DataFrame
    group_rows: list[dict]
    attacks: dict[str, dict]
    low_fpr: dict[str, dict]
    timings: dict[str, float]
    scores: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def groups(self) -> pd.DataFrame:
        return pd.DataFrame(self.group_rows)


def _summary(attack: Attack, est: np.ndarray, floor: float, p_perm: float, res: dict | None, names: list[str]) -> dict:
    K = len(names)
    summ = {"gpr": est, "delta_pp": delta_pp(est), "null_floor_pp": floor, "p_perm": p_perm,
            "interval": None, "gpr_lo": [None] * K, "gpr_hi": [None] * K, "delta_lo": None, "delta_hi": None,
            "p_delta_gt_0": None, "contrast": None}
    if res is not None:
        summ.update({"interval": "records x model pairs (crossed; t, Satterthwaite df)",
                     "gpr_lo": res["gpr_lo"], "gpr_hi": res["gpr_hi"], "delta_lo": res["delta_lo"],
                     "delta_hi": res["delta_hi"], "p_delta_gt_0": res["p_delta_gt_0"],
                     "contrasts": [{**r, "diff_pp": 100 * r["diff"], "lo_pp": 100 * r["lo"],
                                    "hi_pp": 100 * r["hi"]} for r in res["contrasts"]]})
        if K == 2:
            r = res["contrasts"][0]
            summ["contrast"] = {"groups": [names[0], names[1]], "diff_pp": 100 * r["diff"],
                                "se_pp": 100 * r["se"], "df": r["df"], "lo_pp": 100 * r["lo"],
                                "hi_pp": 100 * r["hi"], "p": r["p"]}
    if not attack.group_intervals:
        summ.update(gpr_lo=[None] * K, gpr_hi=[None] * K)
    if not attack.test_delta:
        summ.update(p_delta_gt_0=None, p_perm=None)
    if attack.note:
        summ["note"] = attack.note
    return summ


def _low_fpr(bank: Bank, names: list[str], *, alpha: float, delta: float) -> tuple[dict, list[dict]]:
    """TPR at 0.1% and 1% FPR and the empirical ε lower bound per group, on LiRA online over (model, record) pairs."""
    folds = pair_folds(bank.mem.shape[0])
    low_fpr, rows = {}, []
    scores = bank.lira_online  # computed (or read) once, before the threads

    def view(k: int) -> tuple[dict, dict, dict]:  # the groups are independent: on threads, returned in order
        cols = bank.g == k
        s_k, m_k = scores[:, cols], bank.mem[:, cols]
        return (tpr_at_fpr_clustered(s_k, m_k, 0.001, alpha=alpha), tpr_at_fpr_clustered(s_k, m_k, 0.01, alpha=alpha),
                epsilon_lower_bound(s_k, m_k, folds, delta=delta, alpha=alpha))

    for k, (name, (r01, r1, eps)) in enumerate(zip(names, ordered_map(view, range(len(names))))):
        cols = bank.g == k
        low_fpr[name] = {"tpr_at_0.1%": r01, "tpr_at_1%": r1, "eps_lb": eps}
        rows.append({"attack": "lira_online_lowfpr", "group": k, "group_name": name, "n_records": int(cols.sum()),
                     "tpr_at_0.1pct": r01["tpr"], "tpr_at_0.1pct_lo": r01["tpr_lo"], "tpr_at_0.1pct_hi": r01["tpr_hi"],
                     "tpr_at_1pct": r1["tpr"], "tpr_at_1pct_lo": r1["tpr_lo"], "tpr_at_1pct_hi": r1["tpr_hi"],
                     "eps_lb": eps["eps_lb"]})
    return low_fpr, rows


def audit(loss: np.ndarray, phi: np.ndarray, mem: np.ndarray, g: np.ndarray, names: list[str], *, alpha: float,
          n_perm: int, n_null: int, stats_seed, delta: float, attacks: tuple[str, ...] = ATTACKS) -> AuditResult:
    """Every attack of ``attacks`` (registered names; default :data:`ATTACKS`, the registry as shipped; those needing
    more models than the bank has are left out) and its statistics on one bank: ``loss`` and ``phi`` [M, m] on the
    audited records, ``mem`` [M, m] their membership, ``g`` [m] their groups (0..K−1, named ``names``). Attacks run
    in the registry's order and draw their permutations from one generator seeded by ``stats_seed``, so a subset
    changes the later attacks' permutations: results are comparable only between runs of the same subset."""
    unknown = set(attacks) - set(REGISTRY)
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)} (known: {', '.join(REGISTRY)})")
    K = len(names)
    bank = Bank(loss=loss, phi=phi, mem=mem, g=g, K=K, rng=np.random.default_rng(stats_seed), n_null=n_null)
    records = pd.DataFrame({"group": g, "group_name": [names[k] for k in g]})
    group_rows, summaries, timings = [], {}, {}
    # LiRA's scores first, as the stage always computed them (its low-FPR view needs the online one): the two modes
    # are independent, so on two threads
    t0 = time.perf_counter()
    ordered_map(lambda mode: getattr(bank, mode), ("lira_online", "lira_offline"))
    timings["lira_scores_s"] = time.perf_counter() - t0
    for attack in (a for name, a in REGISTRY.items() if name in attacks):  # the registry's order
        if mem.shape[0] < attack.min_models:
            continue
        t0 = time.perf_counter()
        if attack.contributions is not None:
            c = attack.contributions(bank)
            adv = c.sum(0)
            res = group_inference(c, g, K, alpha=alpha)
        else:
            adv, res = attack.advantage(bank), None
        p_perm, floor = studentized_permutation_pvalue(adv, g, K, rng=bank.rng, n_perm=n_perm)
        if attack.null_floor is not None:
            floor = attack.null_floor(bank)
        timings[f"{attack.name}_s"] = time.perf_counter() - t0
        records[attack.name] = adv
        est = gpr(adv, g, K)
        summ = summaries[attack.name] = _summary(attack, est, floor, p_perm, res, names)
        group_rows += [{"attack": attack.name, "group": k, "group_name": names[k], "n_records": int((g == k).sum()),
                        "gpr": est[k], "gpr_lo": summ["gpr_lo"][k], "gpr_hi": summ["gpr_hi"][k]} for k in range(K)]
    t0 = time.perf_counter()
    low_fpr, rows = _low_fpr(bank, names, alpha=alpha, delta=delta)
    timings["low_fpr_s"] = time.perf_counter() - t0
    return AuditResult(records=records, group_rows=group_rows + rows, attacks=summaries, low_fpr=low_fpr,
                       timings=timings, scores=bank.computed_scores())
