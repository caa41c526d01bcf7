"""The audit's one entry point: every registered attack and its statistics on one bank's signals.

:func:`audit` takes a bank's signals as arrays (``loss`` and ``phi`` [M, m] on the audited records, ``mem`` [M, m]
their membership, ``g`` [m] their groups) and returns one :class:`AuditResult`: per record each attack's advantage,
per group each attack's GPR with its interval, the low-FPR view per group, per attack Δ with its simultaneous
interval, contrasts, null floor and p-values, the per-(model, record) scores of the score-based attacks, and the
time each attack took. The pipeline's attack stage, the synthetic-data audit, :func:`fairdp_core.audit.custom.audit_bank`
and the clip study all call it; it reads and writes no file.

The attacks are a registry (:data:`REGISTRY`, in the order they are run): a new attack is one module of
fairdp_core/audit/mia/ defining its :class:`~fairdp_core.audit.bank.Attack`, and the parametrized tests over the
registry (tests/test_attack_parity.py: no leak → chance; a planted group leak found in its group) check it with no
new test code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .bank import Attack, Bank
from .inference import group_inference, studentized_permutation_pvalue
from .mia import discover
from .rows import AttackSummary, GroupRisk, LowFprRow
from .stats import delta_pp, epsilon_lower_bound, gpr, pair_folds, tpr_at_fpr_clustered
from .threads import ordered_map

__all__ = ["ATTACKS", "INTERVALS", "REGISTRY", "Attack", "AttackSummary", "AuditResult", "Bank", "GroupRisk",
           "LowFprRow", "audit"]


# Every attack is one module of fairdp_core/audit/mia/, in the order the registry runs them.
REGISTRY: dict[str, Attack] = discover()
ATTACKS = tuple(REGISTRY)
INTERVALS = tuple(a.name for a in REGISTRY.values() if a.contributions is not None)


@dataclass
class AuditResult:
    """What :func:`audit` found. ``records``: per audited record its group and each attack's advantage;
    ``group_rows``: per attack and group the GPR with its interval (:class:`~fairdp_core.audit.rows.GroupRisk`), then
    the low-FPR view (:class:`~fairdp_core.audit.rows.LowFprRow`, attack ``lira_online_lowfpr``); ``attacks``: per
    attack the summary (:class:`~fairdp_core.audit.rows.AttackSummary`: GPR, Δ and its interval, contrasts, null
    floor, p-values, notes); ``groups``: the rows as one table; ``low_fpr``: per group name TPR at 0.1% and 1% FPR
    and the ε lower bound (LiRA online); ``scores``: the per-(model, record) scores computed (``lira_online``,
    ``lira_offline``, ``rmia``, ``rmia_offline`` where run); ``timings``: seconds per attack (``<attack>_s``), for
    the scores computed first (``first_scores_s``) and for the low-FPR view (``low_fpr_s``). An audit without the
    low-FPR view (``audit(low_fpr=False)``) has no low-FPR rows, an empty ``low_fpr``, no ``low_fpr_s``, and only its
    chosen attacks' scores."""

    records: pd.DataFrame
    group_rows: list[GroupRisk | LowFprRow]
    attacks: dict[str, AttackSummary]
    low_fpr: dict[str, dict]
    timings: dict[str, float]
    scores: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def groups(self) -> pd.DataFrame:
        return pd.DataFrame([r.as_dict() for r in self.group_rows])


def _summary(attack: Attack, est: np.ndarray, floor: float, p_perm: float, res: dict | None,
             names: list[str]) -> AttackSummary:
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
    return AttackSummary(**summ)


def _low_fpr(bank: Bank, names: list[str], *, alpha: float, delta: float) -> tuple[dict, list[LowFprRow]]:
    """TPR at 0.1% and 1% FPR and the empirical ε lower bound per group, on the scores of the attack marked
    ``low_fpr`` (LiRA online) over (model, record) pairs."""
    folds = pair_folds(bank.mem.shape[0])
    low_fpr, rows = {}, []
    attack = next(a.name for a in REGISTRY.values() if a.low_fpr)
    scores = bank.score(attack)  # computed (or read) once, before the threads

    def view(k: int) -> tuple[dict, dict, dict]:  # the groups are independent: on threads, returned in order
        cols = bank.g == k
        s_k, m_k = scores[:, cols], bank.mem[:, cols]
        return (tpr_at_fpr_clustered(s_k, m_k, 0.001, alpha=alpha), tpr_at_fpr_clustered(s_k, m_k, 0.01, alpha=alpha),
                epsilon_lower_bound(s_k, m_k, folds, delta=delta, alpha=alpha))

    for k, (name, (r01, r1, eps)) in enumerate(zip(names, ordered_map(view, range(len(names))))):
        cols = bank.g == k
        low_fpr[name] = {"tpr_at_0.1%": r01, "tpr_at_1%": r1, "eps_lb": eps}
        rows.append(LowFprRow(f"{attack}_lowfpr", k, name, int(cols.sum()), r01["tpr"], r01["tpr_lo"], r01["tpr_hi"],
                              r1["tpr"], r1["tpr_lo"], r1["tpr_hi"], eps["eps_lb"]))
    return low_fpr, rows


def audit(loss: np.ndarray, phi: np.ndarray, mem: np.ndarray, g: np.ndarray, names: list[str], *, alpha: float,
          n_perm: int, n_null: int, stats_seed, delta: float, attacks: tuple[str, ...] = ATTACKS,
          low_fpr: bool = True) -> AuditResult:
    """Every attack of ``attacks`` (registered names; default :data:`ATTACKS`, the registry as shipped; those needing
    more models than the bank has are left out) and its statistics on one bank: ``loss`` and ``phi`` [M, m] on the
    audited records, ``mem`` [M, m] their membership, ``g`` [m] their groups (0..K−1, named ``names``). Attacks run
    in the registry's order and draw their permutations from one generator seeded by ``stats_seed``, so a subset
    changes the later attacks' permutations: results are comparable only between runs of the same subset.
    ``low_fpr``: also the low-FPR view per group (with it, the scores of every ``first`` attack are computed, as the
    pipeline always has; without it, only those of the chosen attacks)."""
    unknown = set(attacks) - set(REGISTRY)
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)} (known: {', '.join(REGISTRY)})")
    K = len(names)
    bank = Bank(loss=loss, phi=phi, mem=mem, g=g, K=K, rng=np.random.default_rng(stats_seed), n_null=n_null,
                scorers={a.name: a.scores for a in REGISTRY.values() if a.scores is not None})
    records = pd.DataFrame({"group": g, "group_name": [names[k] for k in g]})
    group_rows, summaries, timings = [], {}, {}
    # the scores of the attacks marked ``first`` (LiRA's two modes; the low-FPR view needs the online one) before any
    # attack: they are independent of each other, so on threads
    t0 = time.perf_counter()
    ordered_map(bank.score, [a.name for a in REGISTRY.values() if a.first and (low_fpr or a.name in attacks)])
    timings["first_scores_s"] = time.perf_counter() - t0
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
        group_rows += [GroupRisk(attack.name, k, names[k], int((g == k).sum()), est[k], summ.gpr_lo[k], summ.gpr_hi[k])
                       for k in range(K)]
    views, rows = {}, []
    if low_fpr:
        t0 = time.perf_counter()
        views, rows = _low_fpr(bank, names, alpha=alpha, delta=delta)
        timings["low_fpr_s"] = time.perf_counter() - t0
    return AuditResult(records=records, group_rows=group_rows + rows, attacks=summaries, low_fpr=views,
                       timings=timings, scores=bank.computed_scores())
