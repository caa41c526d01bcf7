"""The result of every audit a user runs (:class:`CustomAudit`): of a bank (:func:`~fairdp_core.audit.custom.audit_bank`,
``audit_model``, ``audit_csv``) and of one trained model (:func:`~fairdp_core.audit.one.audit_one`). The per-group
table, Δ with its interval and null floor, the pairs of groups, the attacks' ROC curves and the files it writes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import jsonable, write_managed_dir

__all__ = ["CustomAudit"]


def roc_title(attack: str) -> str:
    """The ROC panel's title: the attack's label from the registry, or the loss score PA-ALOOA thresholds."""
    from .run import REGISTRY

    return "loss (PA-ALOOA's signal)" if attack == "alooa" else REGISTRY[attack].label if attack in REGISTRY else attack


@dataclass
class CustomAudit:
    """The result of an audit: ``summary`` (per attack: GPR, Δ with interval and null floor, the pairs of groups; the
    design; the accounting and accuracy when the bank was trained here), ``groups`` (per attack × group, pp),
    ``records`` (per audited record: group and each attack's advantage; for one model, its score and membership),
    ``roc`` (per group and attack: the ROC curve), ``slices`` (per slice value: GPR with interval, pp).

    Every reading method takes an ``attack`` (a key of ``summary["attacks"]``); None reads the audit's primary
    attack (``summary["primary"]``: PA-ALOOA cross-fitted for a bank, the loss threshold for one model)."""

    summary: dict
    groups: pd.DataFrame
    records: pd.DataFrame
    roc: pd.DataFrame
    slices: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def primary(self) -> str:
        """The attack the reading methods use when none is named."""
        return self.summary.get("primary", "alooa_cross_fit")

    def _label(self, attack: str) -> str:
        if attack == "alooa_cross_fit":
            return "PA-ALOOA cross-fitted"
        return self.summary.get("labels", {}).get(attack) or roc_title(attack)

    def table(self, attack: str | None = None) -> pd.DataFrame:
        """The per-group table of one attack (GPR and its interval in pp)."""
        return self.groups[self.groups.attack == (attack or self.primary)].reset_index(drop=True)

    def delta(self, attack: str | None = None) -> dict[str, float | None]:
        """Δ of one attack (max − min of the groups' GPR, pp) with its simultaneous interval and null floor."""
        a = self.summary["attacks"][attack or self.primary]
        return {k: a.get(k) for k in ("delta_pp", "delta_lo", "delta_hi", "null_floor_pp")}

    def contrasts(self, attack: str | None = None) -> pd.DataFrame:
        """Each pair of groups of one attack: the difference of their GPR (pp, first − second) with its simultaneous
        interval, p and Holm's p."""
        names = self.summary["group_names"]
        rows = [{"group_a": names[c["k"]], "group_b": names[c["l"]],
                 **{k: v for k, v in c.items() if k not in ("k", "l", "group_a", "group_b")}}
                for c in self.summary["attacks"][attack or self.primary].get("contrasts") or []]
        return pd.DataFrame(rows)

    def write(self, out: str | os.PathLike, *, force: bool = False, protect: tuple = ()) -> Path:
        """summary.json, groups.csv, records.csv, slices.csv, roc.csv, roc.png and report.md in ``out``, with a
        manifest of them. A new directory appears whole; a directory holding any file fairdp did not write (or one
        of ``protect``, e.g. the input) is refused; a previous output is replaced only with ``force``, and then only
        the manifest's files (:func:`fairdp_core.atomic.write_managed_dir`)."""
        return write_managed_dir(out, self._write_files, force=force, protect=protect, flag="force=True (--force)")

    def _write_files(self, tmp: Path) -> None:
        (tmp / "summary.json").write_text(json.dumps(jsonable(self.summary), indent=1) + "\n")
        self.groups.to_csv(tmp / "groups.csv", index=False, float_format="%.6g")
        self.records.to_csv(tmp / "records.csv", index=False, float_format="%.6g")
        self.slices.to_csv(tmp / "slices.csv", index=False, float_format="%.6g")
        self.roc.to_csv(tmp / "roc.csv", index=False, float_format="%.6g")
        roc_figure(self.roc).savefig(tmp / "roc.png", dpi=150, bbox_inches="tight", metadata={"Software": None})
        (tmp / "report.md").write_text(self.markdown())

    def headline(self, attack: str | None = None) -> list[str]:
        """The answer first, with any number of groups: whether some group is at higher risk (Δ with its interval
        and null floor; yes when some pair's simultaneous interval excludes 0), then the riskiest and the safest
        group with their Holm-adjusted contrast."""
        attack = attack or self.primary
        a = self.summary["attacks"][attack]
        names = self.summary["group_names"]
        contrasts = a.get("contrasts") or []
        detected = any(c["lo_pp"] > 0 or c["hi_pp"] < 0 for c in contrasts)
        answer = "Yes" if detected else "No difference detected" if contrasts else "Not testable (no contrast)"
        out = [f"Is some group at higher membership risk? {answer}: "
               f"Δ = {a['delta_pp']:.2f} pp [{a['delta_lo']:.2f}, {a['delta_hi']:.2f}] over {len(names)} groups, "
               f"null floor {a['null_floor_pp']:.2f} pp ({self._label(attack)}; no group is riskier when "
               f"{'every pair' if len(names) > 2 else 'the pair'}'s 95% interval holds 0)."]
        t = self.table(attack).set_index("group")["gpr_pp"]
        hi, lo = str(t.idxmax()), str(t.idxmin())
        c = next((c for c in contrasts if {names[c["k"]], names[c["l"]]} == {hi, lo}), None)
        if c is not None:
            sign = 1 if names[c["k"]] == hi else -1
            d, clo, chi = sign * c["diff_pp"], *sorted((sign * c["lo_pp"], sign * c["hi_pp"]))
            out.append(f"Riskiest: {hi} (GPR {t[hi]:.2f} pp); safest: {lo} ({t[lo]:.2f} pp); {hi} − {lo} = "
                       f"{d:+.2f} pp [{clo:+.2f}, {chi:+.2f}], simultaneous 95%, Holm p = "
                       f"{c.get('p_holm', c.get('p')):.2g}.")
        return out

    def answer(self, attack: str | None = None) -> list[str]:
        """One sentence per pair of groups: the signed difference of their risk (GPR, pp) with its simultaneous 95%
        interval, the p-value (Holm over the pairs), and whether the difference exceeds the null floor of Δ."""
        a = self.summary["attacks"][attack or self.primary]
        names = self.summary["group_names"]
        floor = a.get("null_floor_pp")
        out = []
        for c in a.get("contrasts") or []:
            first, second = names[c["k"]], names[c["l"]]
            d, lo, hi = c["diff_pp"], c["lo_pp"], c["hi_pp"]
            p = c.get("p_holm", c.get("p"))
            beyond = floor is not None and abs(d) > floor
            riskier = first if d > 0 else second
            verdict = ("the interval excludes 0: " + f"{riskier} records are at higher risk"
                       if lo > 0 or hi < 0 else "the interval holds 0: no difference detected")
            out.append(f"Riskier for {first} than for {second}? GPR {first} − {second} = {d:+.2f} pp "
                       f"[{lo:+.2f}, {hi:+.2f}], p = {p:.2g}; "
                       + (f"above the null floor ({floor:.2f} pp)" if beyond else
                          f"within the null floor ({floor:.2f} pp)") + f"; {verdict}.")
        return out

    def markdown(self) -> str:
        """A short readable summary: the answer per pair of groups, the design, the accounting, the per-group table
        of each attack, the slices."""
        s = self.summary
        lines = [f"# Per-group membership audit: {s.get('title', 'custom model')}", "",
                 *self.headline(), "", "Each pair of groups:", "",
                 *(f"- {x}" for x in self.answer()), "",
                 f"(Membership risk measured by {self._label(self.primary)}; 95% intervals simultaneous over the "
                 "pairs of groups; p Holm-adjusted over them.)", ""]
        if s.get("kind") == "one_model":
            lines.append(f"Design: one trained model, {s['n_members']} of its training records (members) and "
                         f"{s['n_nonmembers']} held-out records. GPR: a group's advantage of the score threshold "
                         "(TPR − FPR, cross-fitted over records), pp; Δ: max − min over groups, pp, with its "
                         "simultaneous 95% interval and null floor (Δ with group labels permuted).")
        else:
            lines.append(f"Design: {s['m']} audited records, 2R = {s['n_models']} models (every audited record IN for "
                         f"half of them). GPR: a group's mean per-record advantage (held-out TPR − FPR), pp; Δ: max − "
                         "min over groups, pp, with its simultaneous 95% interval and null floor (Δ with group labels "
                         "permuted).")
        if s.get("accounting"):
            a = s["accounting"]
            lines.append(f"Training: {a['algorithm']}" + ("" if a["algorithm"] == "sgd" else
                         f", σ = {a['sigma_g']:.4g}, q = {a['sample_rate']:.4g}, T = {a['steps']}, Poisson sampling, "
                         f"{a['accountant'].upper()} accountant, δ = {a['delta']:g}, ε = {a['epsilon']:.3g}"
                         f" (max over the models)"))
        if s.get("accuracy") is not None:
            lines.append(f"Test accuracy {100 * s['accuracy']:.1f}% (mean over the models), majority class "
                         f"{100 * s['majority_class_rate']:.1f}%, largest predicted class "
                         f"{100 * s['largest_predicted_class_share']:.1f}% of predictions."
                         + (" **Degenerate: the models have not learned the task (no better than the majority "
                            "class, or ≥ 99% of predictions in one class); their privacy risk describes a model "
                            "nobody would deploy. Train longer or with a larger lr.**" if s.get("degenerate") else ""))
        if s.get("preprocessing"):
            lines.append(f"Preprocessing: {s['preprocessing']}")
        lines += ["", "| attack | group | records | GPR (pp) | 95% interval (pp) |", "|---|---|---|---|---|"]
        for r in self.groups.itertuples():
            ci = "—" if pd.isna(r.lo_pp) else f"[{r.lo_pp:.2f}, {r.hi_pp:.2f}]"
            lines.append(f"| {r.attack} | {r.group} | {r.n_records} | {r.gpr_pp:.2f} | {ci} |")
        lines += ["", "| attack | Δ (pp) | 95% interval (pp) | null floor (pp) |", "|---|---|---|---|"]
        for a, v in s["attacks"].items():
            ci = "—" if v.get("delta_lo") is None else f"[{v['delta_lo']:.2f}, {v['delta_hi']:.2f}]"
            lines.append(f"| {a} | {v['delta_pp']:.2f} | {ci} | {v['null_floor_pp']:.2f} |")
        if len(self.slices):
            lines += ["", "Slices (PA-ALOOA cross-fitted and RMIA):", "",
                      "| slice | value | attack | records | GPR (pp) | 95% interval (pp) |", "|---|---|---|---|---|---|"]
            for r in self.slices.itertuples():
                lines.append(f"| {r.slice} | {r.value} | {r.attack} | {r.n_records} | {r.gpr_pp:.2f} | "
                             f"[{r.lo_pp:.2f}, {r.hi_pp:.2f}] |")
        lines += ["", "Per-group ROC curves (linear and log scale): roc.png; points in roc.csv.", ""]
        return "\n".join(lines)


def _roc(scores: np.ndarray, membership: np.ndarray, n_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """ROC over (model, record) pairs, thinned to about ``n_points`` points evenly spaced in log FPR (the low-FPR
    end kept), with (0, 0) and (1, 1)."""
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(np.asarray(membership, bool).ravel(), np.asarray(scores, float).ravel())
    keep = np.unique(np.searchsorted(fpr, np.r_[0.0, np.logspace(-5, 0, n_points)]).clip(0, len(fpr) - 1))
    return fpr[keep], tpr[keep]


def roc_figure(roc: pd.DataFrame):
    """Per-group ROC curves of each attack: linear axes (left) and log–log (right), one colour per group, in the
    reports' theme. A matplotlib Figure outside pyplot: nothing to close, and the caller's pyplot state untouched."""
    from matplotlib.figure import Figure

    from .palette import GROUP_COLORS, theme

    attacks = list(dict.fromkeys(roc["attack"]))
    groups = list(dict.fromkeys(roc["group"]))
    with theme():
        fig = Figure(figsize=(10, 3.6 * len(attacks)))
        axes = fig.subplots(len(attacks), 2, squeeze=False)
        for i, a in enumerate(attacks):
            for k, g in enumerate(groups):
                d = roc[(roc.attack == a) & (roc.group == g)]
                for ax in axes[i]:
                    ax.plot(d["fpr"], d["tpr"], color=GROUP_COLORS[k % len(GROUP_COLORS)], lw=1.4, label=str(g))
            for j, ax in enumerate(axes[i]):
                ax.plot([1e-5, 1], [1e-5, 1], color="grey", ls="--", lw=0.8)
                if j:
                    ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1))
                ax.set(xlabel="false-positive rate", ylabel="true-positive rate",
                       title=roc_title(a) + (" (log scale)" if j else ""))
            axes[i, 1].legend(fontsize=8, loc="lower right")
        fig.tight_layout()
    return fig
