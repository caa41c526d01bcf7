"""Audit your own model and data: per-group membership risk with the study's attacks and intervals.

Three forms of model:

- a **model**, given as the name of one of the study's models (``"lr"``, ``"mlp"``), a factory (a callable
  ``factory() -> nn.Module`` returning a fresh model of one architecture) or an ``nn.Module`` template (deep-copied
  and re-initialised for each model), with a membership design request (``m`` audited records, 2R models):
  :func:`audit_model` trains the bank. The engine trains it when every layer is one of its own (Linear, Conv2d,
  GroupNorm, LayerNorm, with parameter-free activations and pooling between), through torch.func (exact per-sample
  gradients whatever the forward does, in eval mode); every model is re-initialised (PyTorch's default init, drawn
  per model). Other layers (Dropout, recurrent layers, ...) fall back to Opacus, one model at a time (slower),
  with a message that names them. BatchNorm is refused: its batch statistics mix samples, so DP-SGD cannot train it;
- a **bank trained elsewhere**: :func:`audit_bank` takes its losses (and logits, for LiRA and RMIA) on the audited
  records and its membership matrix.

Both return a :class:`CustomAudit`: per attack and group the GPR with its 95% interval over records × model pairs
(the study's, coverage-checked for PA-ALOOA), Δ with its simultaneous interval and null floor, RMIA and LiRA beside
PA-ALOOA, per-group ROC curves, and slices (by class, by correctness, by any attribute and by intersections of
attributes), each with the same intervals. :meth:`CustomAudit.write` writes them to a directory atomically.

The CLI (``fairdp audit-custom``) does the same for a CSV file.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .atomic import jsonable, write_managed_dir
from .audit.design import audit_design
from .audit.inference import cross_fit_contributions, group_inference
from .audit.run import audit
from .audit.signals import logit_confidence
from .audit.verdicts import is_degenerate
from .versions import package_versions

if TYPE_CHECKING:  # torch is the `train` extra: the audit of given losses (audit_bank) runs without it
    from torch import nn

__all__ = ["CustomAudit", "audit_bank", "audit_csv", "audit_model", "correctness_labels", "load_model_spec"]

ROC_ATTACKS = {"lira_online": "LiRA online", "rmia": "RMIA", "rmia_offline": "RMIA offline",
               "alooa": "loss (PA-ALOOA's signal)"}


@dataclass
class CustomAudit:
    """The result of an audit: ``summary`` (per attack: GPR, Δ with interval and null floor; the design; the
    accounting and accuracy when the bank was trained here), ``groups`` (per attack × group, pp), ``records`` (per
    audited record: group and each attack's advantage), ``roc`` (per group and attack: the ROC curve over the
    (model, record) pairs), ``slices`` (per slice value: GPR with interval, pp)."""

    summary: dict
    groups: pd.DataFrame
    records: pd.DataFrame
    roc: pd.DataFrame
    slices: pd.DataFrame = field(default_factory=pd.DataFrame)

    def table(self, attack: str = "alooa_cross_fit") -> pd.DataFrame:
        """The per-group table of one attack (GPR and its interval in pp)."""
        return self.groups[self.groups.attack == attack].reset_index(drop=True)

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
        fig = roc_figure(self.roc)
        fig.savefig(tmp / "roc.png", dpi=150, bbox_inches="tight", metadata={"Software": None})
        from .reporting.plots import plt

        plt.close(fig)
        (tmp / "report.md").write_text(self.markdown())

    def headline(self, attack: str = "alooa_cross_fit") -> list[str]:
        """The answer first, with any number of groups: whether some group is at higher risk (Δ with its interval
        and null floor; yes when some pair's simultaneous interval excludes 0), then the riskiest and the safest
        group with their Holm-adjusted contrast."""
        a = self.summary["attacks"][attack]
        names = self.summary["group_names"]
        contrasts = a.get("contrasts") or []
        detected = any(c["lo_pp"] > 0 or c["hi_pp"] < 0 for c in contrasts)
        answer = "Yes" if detected else "No difference detected" if contrasts else "Not testable (no contrast)"
        out = [f"Is some group at higher membership risk? {answer}: "
               f"Δ = {a['delta_pp']:.2f} pp [{a['delta_lo']:.2f}, {a['delta_hi']:.2f}] over {len(names)} groups, "
               f"null floor {a['null_floor_pp']:.2f} pp (PA-ALOOA cross-fitted; no group is riskier when "
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

    def answer(self, attack: str = "alooa_cross_fit") -> list[str]:
        """One sentence per pair of groups: the signed difference of their risk (GPR, pp) with its simultaneous 95%
        interval, the p-value (Holm over the pairs), and whether the difference exceeds the null floor of Δ."""
        a = self.summary["attacks"][attack]
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
                 "(Membership risk measured by PA-ALOOA, cross-fitted; 95% intervals simultaneous over the pairs of "
                 "groups; p Holm-adjusted over them.)", "",
                 f"Design: {s['m']} audited records, 2R = {s['n_models']} models (every audited record IN for half "
                 f"of them). GPR: a group's mean per-record advantage (held-out TPR − FPR), pp; Δ: max − min over "
                 f"groups, pp, with its simultaneous 95% interval and null floor (Δ with group labels permuted)."]
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
    """Per-group ROC curves of each attack: linear axes (left) and log–log (right), one colour per group."""
    from .reporting.plots import GROUP_COLORS, plt

    attacks = list(dict.fromkeys(roc["attack"]))
    fig, axes = plt.subplots(len(attacks), 2, figsize=(10, 3.6 * len(attacks)), squeeze=False)
    groups = list(dict.fromkeys(roc["group"]))
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
                   title=f"{ROC_ATTACKS.get(a, a)}" + (" (log scale)" if j else ""))
        axes[i, 1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def _slice_rows(contribs: dict[str, np.ndarray], labels: np.ndarray, slice_name: str, alpha: float) -> list[dict]:
    """GPR per value of one slice (a labelling of the audited records), with the study's interval, per attack."""
    values, code = np.unique(np.asarray(labels).astype(str), return_inverse=True)
    rows = []
    for attack, c in contribs.items():
        res = group_inference(c, code, len(values), alpha=alpha) if len(values) > 1 else None
        adv = c.sum(0)
        for k, v in enumerate(values):
            sel = code == k
            gpr_k = float(adv[sel].mean())
            lo, hi = (res["gpr_lo"][k], res["gpr_hi"][k]) if res is not None else (np.nan, np.nan)
            # what is possible: a GPR within ±100 pp, Δ within [0, 200] pp (group_inference gives Δ's bounds in pp)
            lo_pp = float(np.clip(100 * lo, -100, 100)) if lo is not None and np.isfinite(lo) else np.nan
            hi_pp = float(np.clip(100 * hi, -100, 100)) if hi is not None and np.isfinite(hi) else np.nan
            d_lo, d_hi = ((float(np.clip(res["delta_lo"], 0, 200)), float(np.clip(res["delta_hi"], 0, 200)))
                          if res is not None else (np.nan, np.nan))
            rows.append({"slice": slice_name, "value": v, "attack": attack, "n_records": int(sel.sum()),
                         "gpr_pp": 100 * gpr_k, "lo_pp": lo_pp, "hi_pp": hi_pp, "delta_lo_pp": d_lo,
                         "delta_hi_pp": d_hi,
                         # this value's own interval: missing, or over half of what is possible (200 pp)
                         "uninformative": bool(not hi_pp - lo_pp < 100)})
    return rows


def audit_bank(loss: np.ndarray, membership: np.ndarray, groups: np.ndarray, *, logits: np.ndarray | None = None,
               y: np.ndarray | None = None, group_names: list[str] | None = None,
               slices: Mapping[str, np.ndarray] | None = None, intersections: list[tuple[str, str]] | None = None,
               alpha: float = 0.05, n_perm: int = 1000, n_null: int = 50, seed: int = 0, delta: float = 1e-5,
               title: str = "custom model", extra: Mapping | None = None) -> CustomAudit:
    """Audit a bank trained elsewhere.

    ``loss`` [M, m]: each model's loss on each audited record; ``membership`` [M, m] bool: whether the record was in
    the model's training set. The study's estimators need a balanced design: rows 2r and 2r+1 complementary (every
    record IN for exactly half the models), as :func:`fairdp_core.audit.design.audit_design` draws it.
    ``logits`` [M, m, C] with ``y`` [m] give LiRA's and RMIA's signal (logit-scaled confidence); without them the
    confidence is taken as exp(−loss). ``groups`` [m]: the group of each record (any labels; ``group_names`` for
    integer codes). ``slices``: name -> labels [m] of more ways to cut the records (class, correctness, any
    attribute); ``intersections``: pairs of slice names (or "group") to cross.
    """
    loss = np.asarray(loss, dtype=np.float64)
    mem = np.asarray(membership, dtype=bool)
    if loss.ndim != 2 or mem.shape != loss.shape:
        raise ValueError(f"loss and membership must both be [M, m]; got {loss.shape} and {mem.shape}")
    M = mem.shape[0]
    if M < 4 or M % 2:
        raise ValueError(f"the bank needs an even number of models, at least 4 (2R with R >= 2); got {M}")
    if not (mem[0::2] ^ mem[1::2]).all():
        raise ValueError("membership rows 2r and 2r+1 must be complementary (every audited record IN in exactly one "
                         "model of each pair): draw the design with fairdp_core.audit.design.audit_design")
    groups = np.asarray(groups)
    if len(groups) != loss.shape[1]:
        raise ValueError(f"groups has {len(groups)} labels for {loss.shape[1]} audited records")
    if group_names is None and groups.dtype.kind in "iu":
        names = [str(v) for v in np.unique(groups)]
        g = np.searchsorted(np.unique(groups), groups)
    elif group_names is not None:
        names, g = [str(n) for n in group_names], groups.astype(np.int64)
    else:
        uniq, g = np.unique(groups.astype(str), return_inverse=True)
        names = [str(u) for u in uniq]
    if len(names) < 2 or len(np.unique(g)) < 2:
        raise ValueError(f"the audited records hold {len(np.unique(g))} group(s): a per-group audit compares at least two")
    if logits is not None:
        if y is None:
            raise ValueError("logits need the audited records' labels y")
        phi = logit_confidence(np.asarray(logits), np.asarray(y))
    else:  # p = exp(−loss): φ = log p − log(1 − p)
        p = np.clip(np.exp(-loss), 1e-12, 1 - 1e-12)
        phi = np.log(p) - np.log1p(-p)
    result = audit(loss, phi, mem, g, names, alpha=alpha, n_perm=n_perm, n_null=n_null, stats_seed=seed, delta=delta)
    records, group_rows, attacks, low_fpr = result.records, result.group_rows, result.attacks, result.low_fpr
    groups_df = pd.DataFrame([r for r in group_rows if r["attack"] != "lira_online_lowfpr"])
    groups_df = groups_df.assign(gpr_pp=100 * groups_df["gpr"],
                                 lo_pp=(100 * pd.to_numeric(groups_df["gpr_lo"], errors="coerce")).clip(-100, 100),
                                 hi_pp=(100 * pd.to_numeric(groups_df["gpr_hi"], errors="coerce")).clip(-100, 100))
    groups_df = groups_df.rename(columns={"group": "group_code"}).rename(columns={"group_name": "group"})[
        ["attack", "group", "n_records", "gpr_pp", "lo_pp", "hi_pp"]]
    # ROC per group over the (model, record) pairs: LiRA online, RMIA, and the raw loss
    sig = {k: result.scores[k] for k in ("lira_online", "rmia", "rmia_offline") if k in result.scores}
    sig["alooa"] = -loss
    roc_rows = []
    for a, sc in sig.items():
        for k, name in enumerate(names):
            fpr, tpr = _roc(sc[:, g == k], mem[:, g == k])
            roc_rows.append(pd.DataFrame({"attack": a, "group": name, "fpr": fpr, "tpr": tpr}))
    roc = pd.concat(roc_rows, ignore_index=True)
    # slices: by every given labelling and the requested intersections, PA-ALOOA and RMIA with intervals
    slice_rows = []
    cuts = dict(slices or {})
    cuts_all = {"group": np.asarray(names, dtype=object)[g], **cuts}
    for a, b in intersections or []:
        for s in (a, b):
            if s not in cuts_all:
                raise ValueError(f"intersection {a} × {b}: no slice named {s!r} (slices: {', '.join(cuts_all)})")
        cuts[f"{a} × {b}"] = np.char.add(np.char.add(np.asarray(cuts_all[a]).astype(str), " × "),
                                         np.asarray(cuts_all[b]).astype(str))
    if cuts:
        contribs = {"alooa_cross_fit": cross_fit_contributions(-loss, mem),
                    "rmia": cross_fit_contributions(sig["rmia"], mem)}
        for name, labels in cuts.items():
            labels = np.asarray(labels)
            if len(labels) != loss.shape[1]:
                raise ValueError(f"slice {name!r} has {len(labels)} labels for {loss.shape[1]} audited records")
            slice_rows += _slice_rows(contribs, labels, name, alpha)
    def clip(v, lo: float, hi: float):  # a number, or a list of numbers and None; None stays None
        if isinstance(v, (list, tuple, np.ndarray)):
            return [clip(x, lo, hi) for x in (v.tolist() if isinstance(v, np.ndarray) else v)]
        return v if v is None or not np.isfinite(v) else float(min(max(v, lo), hi))

    for s in attacks.values():  # what is possible: GPR within ±1 (fractions here), Δ within [0, 200] pp
        for k, (lo, hi) in (("gpr_lo", (-1, 1)), ("gpr_hi", (-1, 1)), ("delta_lo", (0, 200)), ("delta_hi", (0, 200))):
            if k in s:
                s[k] = clip(s[k], lo, hi)
    summary = {"title": title, "m": int(loss.shape[1]), "n_models": int(M), "group_names": names,
               "attacks": {a: {k: v for k, v in s.items() if k in ("gpr", "gpr_lo", "gpr_hi", "delta_pp", "delta_lo",
                                                                     "delta_hi", "null_floor_pp", "p_delta_gt_0",
                                                                     "contrast", "contrasts", "note")}
                           for a, s in attacks.items()},
               "low_fpr": low_fpr, "versions": package_versions(), **(extra or {})}
    return CustomAudit(summary=summary, groups=groups_df, records=records, roc=roc, slices=pd.DataFrame(slice_rows))


def correctness_labels(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """"correct" / "wrong" per record: whether most of the bank's models, IN and OUT alike, classify it correctly.
    (A vote of the OUT models alone selects records whose OUT losses are high, which the attacks then read as
    leakage: +2.6 pp for "wrong" with no leakage at all, in simulation; tests/test_custom.py checks the null.)"""
    right = (np.asarray(logits).argmax(-1) == np.asarray(y)[None]).mean(0)
    return np.where(right >= 0.5, "correct", "wrong")


def load_model_spec(spec: str) -> str | Callable:
    """``"lr"`` / ``"mlp"``, or ``"module:function"`` (a function of (input_shape, n_classes) returning an
    ``nn.Module``), imported from the current directory or the installed packages."""
    if spec in ("lr", "mlp", "cnn"):
        return spec
    if ":" not in spec:
        raise ValueError(f"--model {spec!r}: give lr, mlp, or module:function (e.g. mymodels:small_net)")
    mod, fn = spec.split(":", 1)
    sys.path.insert(0, os.getcwd())
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"--model {spec!r}: cannot import {fn} from {mod} ({e})") from e
    finally:
        sys.path.pop(0)
    if not callable(f):
        raise ValueError(f"--model {spec!r}: {fn} is not callable")
    return f


def _factory(model, input_shape: tuple[int, ...], n_classes: int) -> tuple[str, Callable[[], nn.Module] | None]:
    """(TrainSpec.model, factory or None) for the three model forms."""
    from torch import nn

    if isinstance(model, str):
        return model, None
    if isinstance(model, nn.Module):
        template = model
        return "custom", lambda: copy.deepcopy(template)
    if callable(model):
        try:
            model(input_shape, n_classes)
        except TypeError:  # a zero-argument factory
            return "custom", model
        return "custom", lambda: model(input_shape, n_classes)
    raise ValueError(f"model must be 'lr', 'mlp', a factory or an nn.Module, not {type(model).__name__}")


def _train_opacus(factory, X, y, membership, spec, *, seed: int, progress: bool):
    """The slower path for layers the engine does not cover: each model trained alone, with Opacus's DP-SGD or
    plain SGD. Every model is re-initialised from its own seed (as the engine does). Opacus samples each record with
    probability q = 1 / len(loader) = 1 / ⌈n / B⌉ (Poisson): σ is calibrated by the project's accountant at that q
    for T = round(E / q) steps, and the accounting records the σ Opacus applied and the steps taken. Returns
    (models, accounting dicts)."""
    import torch
    from opacus import PrivacyEngine
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    from tqdm.auto import tqdm

    from .engine.accounting import calibrate_sigma, epsilon
    from .engine.trainer import _init_module

    if spec.algorithm not in ("sgd", "dpsgd"):
        raise ValueError(f"the Opacus fallback trains sgd or dpsgd, not {spec.algorithm}")
    models, acct = [], []
    for i in tqdm(range(membership.shape[0]), desc="models (Opacus, one at a time)", disable=not progress):
        seed_i = int(np.random.default_rng([seed, i]).integers(2**62))
        torch.manual_seed(seed_i)
        module = _init_module(factory(), torch.Generator().manual_seed(seed_i))
        idx = np.flatnonzero(membership[i])
        ds = TensorDataset(torch.as_tensor(X[idx]), torch.as_tensor(y[idx]))
        loader = DataLoader(ds, batch_size=spec.batch_size, shuffle=True)
        q = 1.0 / len(loader)  # Opacus's Poisson rate (<= B / n)
        steps = int(round(spec.epochs / q))
        opt = torch.optim.SGD(module.parameters(), lr=spec.lr)
        sigma = None
        if spec.algorithm != "sgd":
            sigma = calibrate_sigma(spec.target_epsilon, sample_rate=q, steps=steps, delta=spec.delta,
                                    accountant=spec.accountant)
            module, opt, loader = PrivacyEngine(accountant="rdp").make_private(
                module=module, optimizer=opt, data_loader=loader, noise_multiplier=sigma, max_grad_norm=spec.clip,
                poisson_sampling=True)
        module.train()
        done = 0
        while done < steps:
            for xb, yb in loader:
                if done >= steps:
                    break
                opt.zero_grad()
                # an empty Poisson batch is a step too (Opacus adds the noise alone)
                (nn.functional.cross_entropy(module(xb), yb, reduction="sum") / max(len(yb), 1)).backward()
                opt.step()
                done += 1
        module.eval()
        models.append(module)
        acct.append({"algorithm": spec.algorithm, "sigma_g": sigma, "sample_rate": q, "steps": steps,
                     "steps_taken": done, "sigma_applied": getattr(opt, "noise_multiplier", None),
                     "delta": spec.delta, "accountant": spec.accountant,
                     "epsilon": float("inf") if sigma is None else epsilon(sigma, sample_rate=q, steps=steps,
                                                                          delta=spec.delta, accountant=spec.accountant,
                                                                          target_epsilon=spec.target_epsilon)})
    return models, acct


def audit_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, *, model="mlp", algorithm: str = "dpsgd",
                epsilon: float | None = 10.0, delta: float | None = None, m: int | None = None, R: int = 8,
                epochs: float = 30, batch_size: int = 64, lr: float = 0.5, clip: float = 1.0, seed: int = 0,
                group_names: list[str] | None = None, n_classes: int | None = None,
                X_test: np.ndarray | None = None, y_test: np.ndarray | None = None,
                slices: Mapping[str, np.ndarray] | None = None, intersections: list[tuple[str, str]] | None = None,
                min_per_group: int = 20, alpha: float = 0.05, progress: bool = True, class_names: list[str] | None = None,
                title: str = "custom model", extra: Mapping | None = None,
                log: Callable[[str], None] | None = None, memory_check: bool = True) -> CustomAudit:
    """Train 2R models on complementary halves of ``m`` audited records (stratified by group; every other record
    in every model) with ``algorithm`` ("sgd", or "dpsgd" at ``epsilon``; δ by default min(1e-5, n^-1.1), below
    1/n), and audit them (:func:`audit_bank`). ``groups`` [n]: integer codes 0..K−1 (``group_names``) or labels. ``slices``
    are labellings of all n records; the audited records' labels are used, plus "class" and "correct" (whether
    the majority of the bank's OUT models classify the record correctly), always added. ``log``: where the one
    line of what will run (models, steps, memory) goes before training; a bank that would not fit in the memory
    this machine has free is refused before any training."""
    import torch
    from torch import nn

    from .engine import TrainSpec, bank_accounting, train_bank
    from .engine.backends import UnsupportedModule, check_module
    from .engine.trainer import spec_fields

    if algorithm not in ("sgd", "dpsgd", "dpsgd_s", "dpsgd_s_paper"):
        raise ValueError(f"algorithm {algorithm!r}: one of sgd, dpsgd, dpsgd_s, dpsgd_s_paper")
    check_recipe(algorithm=algorithm, epsilon=epsilon, R=R, m=m, epochs=epochs, batch_size=batch_size, lr=lr,
                 clip=clip, min_per_group=min_per_group)
    X = np.ascontiguousarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    uniq = np.unique(groups)
    if group_names is None:
        group_names = [str(u) for u in uniq]
        g = np.searchsorted(uniq, groups).astype(np.int64)
    else:
        g = np.asarray(groups, dtype=np.int64)
    K = len(group_names)
    if K < 2:
        raise ValueError(f"the group column has one value ({group_names[0]!r}): a per-group audit compares at least two")
    if R < 2:
        raise ValueError(f"R = {R}: at least 2 (2R models in complementary pairs; --R)")
    n = len(y)
    sizes = np.bincount(g, minlength=K)
    small = [f"{group_names[k]} ({sizes[k]})" for k in range(K) if sizes[k] < min_per_group]
    if small:
        raise ValueError(f"too few records in group {', '.join(small)}: the audit needs at least {min_per_group} "
                         "per group (min_per_group)")
    n_classes = int(n_classes or y.max() + 1)
    m = int(min(m or min(n // 2, 1000), n))
    need, have = memory_estimate(2 * R, m), available_memory()
    if memory_check and have is not None and need > have:
        raise ValueError(f"--R {R}: {2 * R} models auditing {m} records need about {_gb(need)}, more than the "
                         f"{_gb(have)} this machine has free; lower --R (or --m), or pass --no-memory-check")
    per_model = n - m // 2  # every unaudited record, and half the audited ones
    steps = int(np.ceil(epochs * per_model / batch_size))
    if log is not None:
        log(f"{2 * R} models x {steps} steps each on {per_model} of {n} records ({m} audited, each in half the "
            f"models); about {_gb(need)} of memory"
            + (f" ({_gb(have)} free)" if have is not None else ""))
    rng = np.random.default_rng([seed, 0])
    design = audit_design(g, m=m, R=R, min_per_group=min(min_per_group, int(sizes.min())), rng=rng)
    delta = delta if delta is not None else min(1e-5, 1.0 / n ** 1.1)
    kind, factory = _factory(model, tuple(X.shape[1:]), n_classes)
    spec = TrainSpec(algorithm=algorithm, model=kind, epochs=epochs, batch_size=batch_size, lr=lr, clip=clip,
                     target_epsilon=None if algorithm == "sgd" else epsilon, delta=delta)
    idx = design.audit_idx
    engine = True
    if factory is not None:
        try:
            check_module(factory())
        except UnsupportedModule as e:
            if e.mixes_samples:
                raise
            engine = False
            print(f"fairdp audit: {e}. Training with Opacus instead, one model at a time (slower).", file=sys.stderr)
    if engine:
        bank = train_bank(X, y, g, design.training_membership(), spec, n_classes=n_classes, n_groups=K, seed=seed,
                          progress=progress, desc=title, module_factory=factory)
        loss, logits = bank.evaluate(X[idx], y[idx])
        accounting = bank_accounting(bank.accounting)
        test_logits = bank.evaluate(X_test, y_test)[1] if X_test is not None else None
    else:
        models, acct = _train_opacus(factory, X, y, design.training_membership(), spec, seed=seed, progress=progress)
        with torch.no_grad():
            logits = np.stack([mod(torch.as_tensor(X[idx])).numpy() for mod in models])
            test_logits = (np.stack([mod(torch.as_tensor(X_test)).numpy() for mod in models])
                           if X_test is not None else None)
        loss = nn.functional.cross_entropy(torch.as_tensor(logits).transpose(1, 2),
                                           torch.as_tensor(y[idx]).expand(len(models), -1), reduction="none").numpy()
        accounting = {**acct[0], "epsilon": max(a["epsilon"] for a in acct), "sigma_g": acct[0]["sigma_g"],
                      "sample_rate": max(a["sample_rate"] for a in acct), "trainer": "opacus, one model at a time"}
    mem = design.membership
    cnames = np.asarray(class_names if class_names is not None else [str(c) for c in range(n_classes)], dtype=object)
    cuts = {"class": cnames[y[idx]], "correct": correctness_labels(logits, y[idx])}
    for name, labels in (slices or {}).items():
        labels = np.asarray(labels)
        if len(labels) != n:
            raise ValueError(f"slice {name!r} has {len(labels)} labels for {n} records")
        cuts[name] = labels[idx]
    info = {"accounting": accounting, "design_seed": seed, **(extra or {})}
    if X_test is not None:
        pred = test_logits.argmax(-1)
        info["accuracy"] = float((pred == np.asarray(y_test)[None]).mean())
        info["majority_class_rate"] = float(np.bincount(np.asarray(y_test)).max() / len(y_test))
        info["largest_predicted_class_share"] = float(np.bincount(pred.ravel()).max() / pred.size)
        yt = np.asarray(y_test)
        balanced = float(np.mean([(pred[:, yt == c] == c).mean() for c in np.unique(yt)]))
        info["degenerate"] = is_degenerate(info["largest_predicted_class_share"], balanced, n_classes)
    info["spec"] = spec_fields(spec)  # as a saved bank stores it
    return audit_bank(loss, mem, g[idx], logits=logits, y=y[idx], group_names=group_names, slices=cuts,
                      intersections=intersections, alpha=alpha, seed=seed, delta=delta, title=title, extra=info)


TEXT_LEVELS_MAX = 50
# A label with more values than this is refused unless asked for (--max-classes): a numeric column such as age read
# as a label trains a model with a class per value.
MAX_CLASSES = 20
# Peak memory of audit-custom, measured here (maximum RSS, MLP, 2 features): 0.6 GB at R = 8, then about 4.5 kB per
# model and audited record (R = 400: 1.4 GB with 160 audited records, 4.1 GB with 1,000), the attacks' per-model
# arrays over the audited records dominating. A rough guide (it ignores the feature count and model size): a
# refusal can be overridden (memory_check=False, --no-memory-check).
BASE_BYTES, BYTES_PER_MODEL_RECORD = 0.6e9, 4.5e3


def check_recipe(*, algorithm: str = "dpsgd", epsilon: float | None = 10.0, R: int = 8, m: int | None = None,
                 epochs: float = 30, batch_size: int = 64, lr: float = 0.5, clip: float = 1.0,
                 min_per_group: int = 20, max_classes: int = MAX_CLASSES, **_) -> None:
    """One error naming the flag for a recipe that cannot run, before any data is read."""
    import math

    def bad(x) -> bool:
        return x is None or not math.isfinite(x) or x <= 0

    checks = [(algorithm != "sgd" and bad(epsilon), f"--epsilon {epsilon}: the privacy target must be a positive "
                                                      "number (--algorithm sgd trains without privacy)"),
              (R < 2, f"--R {R}: at least 2 (2R models in complementary pairs)"),
              (m is not None and m < 2, f"--m {m}: at least 2 audited records"),
              (bad(epochs), f"--epochs {epochs}: must be positive"),
              (batch_size < 1, f"--batch-size {batch_size}: at least 1"),
              (bad(lr), f"--lr {lr}: must be positive"),
              (algorithm != "sgd" and bad(clip), f"--clip {clip}: the clip bound must be positive"),
              (min_per_group < 1, f"--min-per-group {min_per_group}: at least 1"),
              (max_classes < 2, f"--max-classes {max_classes}: at least 2")]
    for failed, msg in checks:
        if failed:
            raise ValueError(msg)


def available_memory() -> int | None:
    """Bytes this machine can still give (MemAvailable), or None where it cannot say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def memory_estimate(models: int, audited: int) -> float:
    """Bytes: audit-custom's measured peak for ``models`` models and ``audited`` records (:data:`BYTES_PER_MODEL_RECORD`)."""
    return BASE_BYTES + models * audited * BYTES_PER_MODEL_RECORD


def _gb(b: float) -> str:
    return f"{b / 1e9:.1f} GB"




def read_user_csv(path: Path) -> pd.DataFrame:
    """A user's CSV (any delimiter), or a one-line error: missing, empty, header only, unreadable."""
    import csv

    if not path.is_file():
        raise FileNotFoundError(f"--data {path}: no such file")
    if path.stat().st_size == 0 or not path.read_text(errors="replace").strip():
        raise ValueError(f"--data {path}: the file is empty (no header, no rows)")
    try:
        df = pd.read_csv(path, sep=None, engine="python")
    except (pd.errors.EmptyDataError, pd.errors.ParserError, csv.Error, UnicodeDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--data {path}: not a readable CSV ({first})") from None
    if len(df) == 0:
        raise ValueError(f"--data {path}: a header ({len(df.columns)} columns) and no data rows")
    return df


def _check_labels(s: pd.Series, path: Path, label: str) -> None:
    """Label values that differ only by case or surrounding whitespace are a typo, not a class."""
    values = sorted(s.dropna().astype(str).unique())
    seen: dict[str, list[str]] = {}
    for v in values:
        seen.setdefault(v.strip().casefold(), []).append(v)
    clash = [vs for vs in seen.values() if len(vs) > 1]
    if clash:
        shown = "; ".join(" vs ".join(repr(v) for v in vs) for vs in clash[:3])
        raise ValueError(f"{path}: the label column {label!r} has values that differ only by case or whitespace "
                         f"({shown}); clean them so that each class is spelled one way (--label {label})")


def _numeric_with_text(df: pd.DataFrame, feats: list[str], warn: Callable[[str], None]) -> pd.DataFrame:
    """A column whose cells are numbers but for a few text cells (at most 5% of its values) stays numeric: its text
    cells are read as missing (their rows are then dropped), with a warning naming the column and the count."""
    df = df.copy()
    for c in feats:
        if pd.api.types.is_numeric_dtype(df[c]):
            continue
        num = pd.to_numeric(df[c], errors="coerce")
        text = df[c].notna() & num.isna()
        if 0 < text.sum() <= 0.05 * df[c].notna().sum() and num.notna().sum() > 10:
            examples = ", ".join(repr(v) for v in df.loc[text, c].astype(str).unique()[:3])
            warn(f"column {c!r}: {int(text.sum())} text cells in a numeric column ({examples}) read as missing")
            df[c] = num
    return df


def _check_text_features(df: pd.DataFrame, feats: list[str], path: Path) -> None:
    """A text feature with one value per row (an ID) or more than TEXT_LEVELS_MAX values would one-hot into as many
    features: refused, naming the column and the flag that leaves it out."""
    n = len(df)
    for c in feats:
        if pd.api.types.is_numeric_dtype(df[c]):
            continue
        k = int(df[c].nunique())
        if k > TEXT_LEVELS_MAX or (k == n and n > 1):
            what = "one value per row (an ID?)" if k == n else f"{k} distinct values"
            raise ValueError(f"{path}: the text column {c!r} has {what}: it would become {k} one-hot features; "
                             f"pass --drop {c} to leave it out (or encode it as numbers)")


def _infer_schema(df: pd.DataFrame, columns: list[str], name: str):
    """A TabularSchema inferred FROM THE DATA (numeric ranges and vocabularies): tuning outside ε, stated in the
    output. Numeric: min/max of the column; other columns: their sorted distinct values."""
    from .data.base import NumericColumn, TabularSchema

    numeric, categorical = {}, {}
    for c in columns:
        s = df[c]
        if pd.api.types.is_numeric_dtype(s) and s.nunique() > 10:
            lo, hi = float(s.min()), float(s.max())
            numeric[c] = NumericColumn(lo, hi if hi > lo else lo + 1.0)
        else:
            from .data.base import _category_labels

            categorical[c] = tuple(sorted(set(_category_labels(s.dropna()))))
    return TabularSchema(name, numeric, categorical)


def audit_csv(path: str | os.PathLike, *, label: str, group: str, model="mlp", slices: list[str] | None = None,
              intersections: list[tuple[str, str]] | None = None, drop: list[str] | None = None,
              group_as_feature: bool = True, test_fraction: float = 0.2, seed: int = 0,
              on_warning: Callable[[str], None] | None = None, max_classes: int = MAX_CLASSES, **kw) -> CustomAudit:
    """:func:`audit_model` on a CSV file: ``label`` and ``group`` columns; every other column (but ``drop``) is a
    feature, numeric columns (more than 10 distinct values) scaled to [-1, 1] by their range and the rest one-hot.
    The scaling ranges and vocabularies are read from the file: that choice is outside ε (stated in the summary).
    A stratified ``test_fraction`` is held out for accuracy. A label with more than ``max_classes`` values, a
    feature with no value in any row and an impossible recipe are refused in one line before any training; a
    feature with one value is kept with a warning."""
    from .data.base import encode_rows, stratified_split

    path = Path(path)
    warn = on_warning or (lambda msg: warnings.warn(msg, UserWarning, stacklevel=3))
    check_recipe(max_classes=max_classes, **kw)  # before the file is read
    df = read_user_csv(path)
    missing = [c for c in [label, group, *(slices or []), *(drop or [])] if c not in df.columns]
    if missing:
        have = ", ".join(repr(str(c)) for c in df.columns)  # repr: a name holding a line break stays one line
        raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}; columns: {have}")
    known = {"group", "class", "correct", group, *(slices or [])}
    for a, b in intersections or []:
        for c in (a, b):
            if c not in known:
                raise ValueError(f"--intersect {a},{b}: {c!r} is not the group column, class, correct or a --slice "
                                 f"column (add --slice {c})")
    intersections = [tuple("group" if c == group else c for c in pair) for pair in intersections or []]
    for c, what in ((label, "label"), (group, "group")):
        bad = int(df[c].isna().sum())
        if bad:
            raise ValueError(f"{path}: the {what} column {c!r} is missing in {bad} rows")
    _check_labels(df[label], path, label)
    k = int(df[label].nunique())
    if k > max_classes:
        raise ValueError(f"{path}: the label column {label!r} has {k} distinct values: that trains a {k}-class "
                         f"model; pass --max-classes {k} if that is meant, or another --label")
    feats = [c for c in df.columns if c not in {label, *(drop or [])} and (group_as_feature or c != group)]
    empty = [c for c in feats if df[c].isna().all()]
    if empty:
        raise ValueError(f"{path}: column {', '.join(map(repr, empty))} has no value in any row; pass "
                         + " ".join(f"--drop {c}" for c in empty) + " to leave it out")
    df = _numeric_with_text(df, feats, warn)
    _check_text_features(df, feats, path)
    n0 = len(df)
    cols = [c for c in feats if df[c].isna().any()]
    df = df.dropna(subset=feats).reset_index(drop=True)
    if len(df) < n0:
        warn(f"{path.name}: {n0 - len(df)} of {n0} rows dropped for a missing value (columns {', '.join(cols)})")
    if df[group].astype(str).nunique() < 2:
        raise ValueError(f"{path}: the group column {group!r} has one value ({df[group].astype(str).iloc[0]!r}); a "
                         "per-group audit compares at least two (--group)")
    classes = sorted(df[label].astype(str).unique())
    if len(classes) < 2:
        raise ValueError(f"{path}: the label column {label!r} has one value ({classes[0]!r}); nothing to predict")
    y = np.searchsorted(classes, df[label].astype(str)).astype(np.int64)
    group_values = sorted(df[group].astype(str).unique())
    gcode = np.searchsorted(group_values, df[group].astype(str)).astype(np.int64)
    for c in feats:  # after the file's refusals (audit_model's own checks come later)
        if c != group and df[c].nunique() == 1:
            warn(f"column {c!r} has one value ({str(df[c].iloc[0])!r}) in every row: it tells the models nothing "
                 f"(kept; --drop {c} leaves it out)")
    schema = _infer_schema(df, feats, path.stem)
    X, _ = encode_rows(df, schema)
    tr, te = stratified_split(y, gcode, test_fraction=test_fraction, rng=np.random.default_rng([seed, 1]))
    model = load_model_spec(model) if isinstance(model, str) else model
    extra = {"data": str(path.name), "rows": len(df), "label": label, "classes": classes, "group": group,
             "preprocessing": f"{len(schema.numeric)} numeric columns scaled to [-1, 1] by their range in the file, "
                              f"{len(schema.categorical)} one-hot. The ranges, the vocabularies, which columns are "
                              "numeric, the classes and the groups are read from the whole file (test rows too): "
                              "outside ε, and shared by every model, so this audit cannot measure what they leak. "
                              "Rows with a missing feature dropped.",
             "features": len(schema.feature_names)}
    sl = {c: df[c].astype(str).to_numpy()[tr] for c in (slices or [])}
    return audit_model(X[tr], y[tr], gcode[tr], group_names=group_values, model=model, seed=seed, class_names=classes,
                       X_test=X[te], y_test=y[te], slices=sl, intersections=intersections, n_classes=len(classes),
                       title=f"{path.name}: {label} by {group}", extra=extra, **kw)
