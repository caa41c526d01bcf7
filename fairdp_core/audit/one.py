"""One trained model, audited per group: does the model you deployed leak more about some groups?

The study and :func:`fairdp_core.audit.custom.audit_model` audit a training *recipe*: they retrain 2R models on
complementary halves of the data. :func:`audit_one` answers for one model that is already trained, from its
per-record scores on its training records (members) and on a held-out set (non-members), per group:

- **advantage** of the loss-threshold attack (TPR − FPR), cross-fitted over records: in each group, members and
  non-members are split at random into two halves; the threshold that maximises TPR − FPR on one half is applied to
  the other, and the two held-out advantages are averaged. Choosing the threshold on the records it is scored on
  would bias the advantage upward (as the paper's in-sample estimator is); cross-fitting does not. The 95% interval
  is a Wald interval over records, conditional on the two thresholds (the binomial variances of TPR and FPR of each
  held-out half, combined as if the two halves' estimates were perfectly correlated: they share records, and the
  uncorrelated variance was measured to cover only 92–94%); its coverage is checked by simulation
  (:func:`coverage_study`, in the tests);
- **TPR at 1% FPR** (and at 0.1% where the group has at least 1,000 non-members; otherwise "n/a" with the reason),
  the threshold set on the group's non-members, with a Clopper–Pearson interval on TPR;
- **Δ** = max − min of the group advantages, with a simultaneous interval (Bonferroni over the pairs of groups)
  and its **null floor**: the mean Δ when group labels are permuted among the members and among the non-members.

Scores follow the convention "higher = more member-like"; :func:`loss_scores` turns a torch model and its data into
them (the negated per-record loss). One model's answer is conditional on that model: the audit of its recipe
(:func:`fairdp_core.audit.custom.audit_model`) says how much of it is the recipe's.
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as st

from .custom_result import CustomAudit, _roc
from .inference import holm
from .stats import tpr_at_fpr

__all__ = ["audit_one", "calibrated_scores", "check_disjoint", "coverage_study", "load_model_file",
           "loss_scores", "model_file_scores"]


def _best_threshold(s_in: np.ndarray, s_out: np.ndarray) -> float:
    """The cut t maximising TPR − FPR of "member iff score ≥ t" on these scores (ties: the highest such t)."""
    cuts = np.unique(np.r_[s_in, s_out])
    tpr = 1 - np.searchsorted(np.sort(s_in), cuts, side="left") / len(s_in)
    fpr = 1 - np.searchsorted(np.sort(s_out), cuts, side="left") / len(s_out)
    adv = tpr - fpr
    return float(cuts[len(adv) - 1 - np.argmax(adv[::-1])])


def _rate_var(k: int, n: int) -> float:
    """Binomial variance of a rate k/n, with k/n pulled off 0 and 1 by half a count (a 0/n rate is not certain)."""
    p = (k + 0.5) / (n + 1)
    return p * (1 - p) / n


def _halves(n: int, rng: np.random.Generator) -> np.ndarray:
    """A random split of n records into two halves (bool: the first half)."""
    first = np.zeros(n, bool)
    first[rng.permutation(n)[: n // 2]] = True
    return first


def cross_fit_group(s_in: np.ndarray, s_out: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    """One group's cross-fitted threshold advantage: estimate, its variance over records, and the two thresholds."""
    a_in, a_out = _halves(len(s_in), rng), _halves(len(s_out), rng)
    est, var, cuts = [], [], []
    for fit in (True, False):
        t = _best_threshold(s_in[a_in == fit], s_out[a_out == fit])
        e_in, e_out = s_in[a_in != fit], s_out[a_out != fit]
        tp, fp = int((e_in >= t).sum()), int((e_out >= t).sum())
        est.append(tp / len(e_in) - fp / len(e_out))
        var.append(_rate_var(tp, len(e_in)) + _rate_var(fp, len(e_out)))
        cuts.append(t)
    # the two held-out estimates share records (each half fits one threshold and scores the other), so they are
    # correlated: their mean's variance is bounded by the perfectly correlated case, (sd_1 + sd_2)² / 4
    return {"advantage": float(np.mean(est)), "var": float((np.sqrt(var[0]) + np.sqrt(var[1])) ** 2 / 4),
            "thresholds": cuts}


def audit_one(scores_in, scores_out, groups_in, groups_out, *, alpha: float = 0.05, n_null: int = 200,
              min_per_group: int = 20, seed: int = 0, attack: str = "loss_threshold",
              label: str = "the loss threshold on one model, cross-fitted", title: str = "one model") -> CustomAudit:
    """Audit one model from its scores (higher = more member-like, e.g. :func:`loss_scores`) on its training records
    (``scores_in``, groups ``groups_in``) and on held-out records (``scores_out``, ``groups_out``). Every group needs
    at least ``min_per_group`` members and non-members. ``seed`` fixes the halves and the null's permutations.

    Returns the same :class:`~fairdp_core.audit.custom_result.CustomAudit` as an audit of a bank, with one attack,
    ``attack`` (its primary; ``label`` names it in the text): ``table()`` per group (``gpr_pp``: the advantage, with
    its interval; members, non-members, AUC, TPR at low FPR), ``delta()``, ``contrasts()``, ``answer()``,
    ``headline()``, ``write()``; ``records`` holds each record's group, membership and score, ``roc`` each group's
    ROC curve."""
    s_in, s_out = np.asarray(scores_in, float), np.asarray(scores_out, float)
    g_in, g_out = np.asarray(groups_in), np.asarray(groups_out)
    for name, s, g in (("training", s_in, g_in), ("held-out", s_out, g_out)):
        if s.ndim != 1 or g.shape != s.shape:
            raise ValueError(f"{name} scores {s.shape} and groups {g.shape}: one score and one group per record")
        if not np.isfinite(s).all():
            raise ValueError(f"{name} scores: {int((~np.isfinite(s)).sum())} are not finite")
    names = sorted(set(g_in.tolist()) | set(g_out.tolist()), key=str)
    small = [f"{k!r} ({int((g_in == k).sum())} members, {int((g_out == k).sum())} held out)" for k in names
             if min((g_in == k).sum(), (g_out == k).sum()) < min_per_group]
    if small:
        raise ValueError(f"groups with fewer than {min_per_group} members or held-out records: {', '.join(small)}")
    if len(names) < 2:
        raise ValueError(f"one group ({names[0]!r}): a per-group audit compares at least two")
    rng = np.random.default_rng(seed)
    rows, fits = [], {}
    for k in names:
        fits[k] = f = cross_fit_group(s_in[g_in == k], s_out[g_out == k], rng)
        h = st.norm.ppf(1 - alpha / 2) * np.sqrt(f["var"])
        a_in, a_out = s_in[g_in == k], s_out[g_out == k]
        # AUC: P(a member's score > a non-member's), ties counted half (Mann-Whitney)
        auc = float(st.mannwhitneyu(a_in, a_out).statistic / (len(a_in) * len(a_out)))
        row = {"group": k, "n_members": int((g_in == k).sum()), "n_nonmembers": int((g_out == k).sum()),
               "advantage_pp": 100 * f["advantage"], "lo_pp": 100 * (f["advantage"] - h),
               "hi_pp": 100 * (f["advantage"] + h), "auc": auc}
        for fpr, need in ((0.01, 100), (0.001, 1000)):
            key = f"tpr_at_{fpr:g}_fpr"
            if row["n_nonmembers"] < need:
                row[key] = row[f"{key}_lo"] = row[f"{key}_hi"] = np.nan
                row[f"{key}_note"] = f"n/a: {row['n_nonmembers']} non-members, {need} needed"
                continue
            t = tpr_at_fpr(s_in[g_in == k], s_out[g_out == k], fpr, alpha=alpha)
            row |= {key: 100 * t["tpr"], f"{key}_lo": 100 * t["tpr_lo"], f"{key}_hi": 100 * t["tpr_hi"],
                    f"{key}_note": ""}
        rows.append(row)
    pairs = list(itertools.combinations(names, 2))
    z = st.norm.ppf(1 - alpha / (2 * len(pairs)))  # Bonferroni over the pairs: simultaneous
    con = []
    for k, b in pairs:
        d, se = fits[k]["advantage"] - fits[b]["advantage"], np.sqrt(fits[k]["var"] + fits[b]["var"])
        con.append({"group_a": k, "group_b": b, "diff_pp": 100 * d, "lo_pp": 100 * (d - z * se),
                    "hi_pp": 100 * (d + z * se), "p": float(2 * st.norm.sf(abs(d) / se)) if se > 0 else 1.0,
                    "riskier": k if d >= 0 else b, "safer": b if d >= 0 else k})
    contrasts = pd.DataFrame(con)
    contrasts["p_holm"] = holm(contrasts["p"].to_numpy())
    adv = np.array([fits[k]["advantage"] for k in names])
    delta = float(adv.max() - adv.min())
    half = np.array([z * np.sqrt(fits[k]["var"] + fits[b]["var"]) for k, b in pairs])
    gaps = np.abs([fits[k]["advantage"] - fits[b]["advantage"] for k, b in pairs])
    null = []
    for _ in range(n_null):  # group labels permuted among members and among non-members, sizes kept
        pi, po = rng.permutation(g_in), rng.permutation(g_out)
        a = [cross_fit_group(s_in[pi == k], s_out[po == k], rng)["advantage"] for k in names]
        null.append(max(a) - min(a))
    delta_pp, delta_lo = 100 * delta, 100 * float(max(0.0, (gaps - half).max()))
    delta_hi, floor = 100 * float((gaps + half).max()), 100 * float(np.mean(null)) if null else float("nan")
    return _as_audit(rows, contrasts, names, s_in, s_out, g_in, g_out, attack=attack, label=label, title=title,
                     alpha=alpha, delta=(delta_pp, delta_lo, delta_hi, floor))


def _as_audit(rows: list[dict], contrasts: pd.DataFrame, names: list, s_in, s_out, g_in, g_out, *, attack: str,
              label: str, title: str, alpha: float, delta: tuple[float, float, float, float]) -> CustomAudit:
    """The one-model audit as the one result type: ``groups`` with the bank audit's columns first (``gpr_pp`` is the
    group's advantage), the pairs as ``summary["attacks"][attack]["contrasts"]``, the records and the ROC curves."""
    index = {k: i for i, k in enumerate(names)}
    groups = pd.DataFrame(rows).rename(columns={"advantage_pp": "gpr_pp"})
    groups.insert(0, "attack", attack)
    groups["group"] = groups["group"].astype(str)
    groups["n_records"] = groups["n_members"] + groups["n_nonmembers"]
    first = ["attack", "group", "n_records", "gpr_pp", "lo_pp", "hi_pp"]
    groups = groups[first + [c for c in groups.columns if c not in first]]
    pairs = [{"k": index[r["group_a"]], "l": index[r["group_b"]], **r} for r in contrasts.to_dict("records")]
    for c in pairs:
        c["group_a"], c["group_b"], c["riskier"], c["safer"] = (str(c[k]) for k in ("group_a", "group_b", "riskier",
                                                                                     "safer"))
    d_pp, d_lo, d_hi, floor = delta
    summary = {"title": title, "kind": "one_model", "primary": attack, "labels": {attack: label},
               "group_names": [str(k) for k in names], "alpha": alpha, "n_members": len(s_in),
               "n_nonmembers": len(s_out),
               "attacks": {attack: {"gpr": [r["gpr_pp"] / 100 for r in groups.to_dict("records")], "delta_pp": d_pp,
                                    "delta_lo": d_lo, "delta_hi": d_hi, "null_floor_pp": floor, "contrasts": pairs}}}
    member = np.r_[np.ones(len(s_in), bool), np.zeros(len(s_out), bool)]
    records = pd.DataFrame({"group": np.r_[g_in, g_out].astype(str), "member": member, "score": np.r_[s_in, s_out]})
    roc = []
    for k in names:
        sel = records["group"].to_numpy() == str(k)
        fpr, tpr = _roc(records["score"].to_numpy()[sel], member[sel])
        roc.append(pd.DataFrame({"attack": attack, "group": str(k), "fpr": fpr, "tpr": tpr}))
    return CustomAudit(summary=summary, groups=groups, records=records, roc=pd.concat(roc, ignore_index=True))


def loss_scores(model, X, y, *, batch_size: int = 1024):
    """Per-record scores of a torch classifier (the negated cross-entropy loss: higher = more member-like). The
    model's output must have one column per class of ``y``."""
    import torch

    X = torch.as_tensor(np.asarray(X))
    y = torch.as_tensor(np.asarray(y)).long()
    if len(X) != len(y):
        raise ValueError(f"{len(X)} records but {len(y)} labels")
    out = []
    try:
        model.eval()
    except NotImplementedError:  # a torch.export program: its train/eval behaviour was fixed when it was exported
        pass
    with torch.no_grad():
        for i in range(0, len(X), batch_size):
            try:
                logits = model(X[i:i + batch_size].float())
            except (RuntimeError, AssertionError, ValueError, TypeError) as e:
                first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
                raise ValueError(f"the model failed on {len(X)} records of {tuple(X.shape[1:])} inputs ({first[:200]}): "
                                 "check the input columns (--drop) and, for a torch.export program, that it was "
                                 "exported with a dynamic batch dimension") from None
            if logits.ndim != 2 or logits.shape[1] <= int(y.max()):
                raise ValueError(f"the model's output has shape {tuple(logits.shape)}: it needs one column per class "
                                 f"(labels run to {int(y.max())})")
            z = logits.double()  # the loss from the logit margin in float64: no ties at 0 for confident records
            yb = y[i:i + batch_size]
            zy = z.gather(1, yb[:, None])[:, 0]
            others = z.scatter(1, yb[:, None], float("-inf"))
            margin = zy - torch.logsumexp(others, 1)  # log p − log(1 − p)
            out.append(-torch.logaddexp(torch.zeros_like(margin), -margin))  # −loss = −log(1 + e^−margin)
    return torch.cat(out).numpy()


def tie_share(scores: np.ndarray) -> float:
    """The share of ``scores`` equal to another score: where it is large, rates at a low FPR mean little."""
    s = np.asarray(scores, float)
    if s.size == 0:
        return 0.0
    _, counts = np.unique(s, return_counts=True)
    return float(counts[counts > 1].sum() / s.size)


def calibrated_scores(target_loss, reference_losses, *, a: float = 1.0) -> np.ndarray:
    """RMIA's per-record likelihood ratio with reference models (Zarifzadeh et al. 2024, arXiv 2312.03262, offline),
    as a score for :func:`audit_one`: log p(x) − log Pr(x), with p(x) = exp(−loss) the target model's probability of
    x's label, and Pr(x) = ½((1 + a)·Pr_OUT(x) + (1 − a)), Pr_OUT(x) the mean of that probability over reference
    models that did not train on x. ``a`` in [0, 1] is the paper's linear correction for having no IN reference
    models (it approximates Pr_IN; the paper tunes it below 1); ``a`` = 1 (default) applies no correction:
    Pr(x) = Pr_OUT(x). A record that is hard for every model (high loss everywhere) is no longer mistaken for a
    non-member: the score asks how much better the target fits it than models that never saw it. RMIA's population
    comparison (the share of population records z with LR(x)/LR(z) ≥ γ) is a step function of LR(x) for a fixed
    population, so every attack it defines is a threshold on LR(x), which this audit searches directly.

    ``target_loss`` [n] and ``reference_losses`` [R, n]: per-record cross-entropy losses (natural log)."""
    t = np.asarray(target_loss, float)
    refs = np.atleast_2d(np.asarray(reference_losses, float))
    if refs.shape[1] != t.shape[0]:
        raise ValueError(f"reference losses {refs.shape}: need [references, {t.shape[0]} records]")
    if not (np.isfinite(t).all() and np.isfinite(refs).all()):
        raise ValueError("losses must be finite")
    if not 0 <= a <= 1:
        raise ValueError(f"RMIA's a must lie in [0, 1], got {a}")
    from scipy.special import logsumexp

    log_pr_out = logsumexp(-refs, axis=0) - np.log(refs.shape[0])  # no underflow at large losses
    log_pr = np.log(0.5) + np.logaddexp(np.log1p(a) + log_pr_out, np.log1p(-a) if a < 1 else -np.inf)
    return -t - log_pr


def load_model_file(path: str | Path):
    """A saved classifier: a ``torch.export`` program (``torch.export.save``; export it with a dynamic batch
    dimension) or TorchScript (``torch.jit.save``). Pickled modules (``torch.save(model)``) are refused: loading one
    runs arbitrary code."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--model-file {path}: no such file")
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError):
        pass
    import logging

    quiet = [logging.getLogger(n) for n in ("torch.export", "torch._export", "torch.export.pt2_archive._package")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:  # torch logs a traceback before raising: the one-line refusal below says it all
        lg.setLevel(logging.CRITICAL)
    try:
        return torch.export.load(str(path)).module()
    except Exception:  # noqa: BLE001 - any failure means: not an exported program either
        raise ValueError(f"--model-file {path}: neither TorchScript nor a torch.export program; save the model with "
                         "torch.jit.save(torch.jit.script(model), path) or torch.export.save(torch.export.export("
                         "model, (example,)), path)") from None
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)


def model_file_scores(model_file: str | Path, data: str | Path, *, label: str, member: str, group: str,
                      id_column: str | None = None, drop: tuple[str, ...] = (), group_feature: bool = False,
                      references: tuple[str | Path, ...] = ()
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(scores, member mask, groups, reference scores) of every record of ``data`` (a CSV holding the model's
    inputs, its label, a 0/1 ``member`` column and the ``group`` column) under the saved model and the saved
    ``references`` (reference models trained on none of these records; [R, n], None without): scores are the
    negated per-record losses (:func:`loss_scores`). The inputs are every other column but ``id_column`` and
    ``drop``, in file order (the group column too with ``group_feature``), numeric and as the model was trained on
    them. Checked before the model runs: the columns, the 0/1 membership, shared IDs between members and
    non-members (an error; with no IDs, identical rows are a warning)."""
    df = pd.read_csv(data, sep=None, engine="python")
    need = [c for c in (label, member, group, id_column, *drop) if c is not None]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise KeyError(f"{data}: no column {', '.join(map(repr, missing))} (it has {', '.join(df.columns)})")
    if not set(df[member].unique()) <= {0, 1}:
        raise ValueError(f"{data}: column {member!r} must be 0/1 (1: a training record of the model)")
    skip = {label, member, id_column, *drop} | (set() if group_feature else {group})
    features = [c for c in df.columns if c not in skip]
    text = [c for c in features if not pd.api.types.is_numeric_dtype(df[c])]
    if text or not features:
        raise ValueError(f"{data}: the model's inputs must be numeric columns; "
                         + (f"not numeric: {', '.join(map(repr, text))} (encode them as the model was trained, or "
                            "--drop them)" if text else "no input column is left"))
    if not pd.api.types.is_integer_dtype(df[label]) or (df[label] < 0).any():
        raise ValueError(f"{data}: label column {label!r} must hold integer class indices 0..C-1 (it holds "
                         f"{df[label].dtype} values)")
    m = df[member].astype(bool).to_numpy()
    X = df[features].to_numpy(np.float32)
    check_disjoint(*((df[id_column][m], df[id_column][~m]) if id_column else (None, None)),
                   X_train=X[m], X_holdout=X[~m])
    models = [load_model_file(p) for p in (model_file, *references)]  # every file checked before any scoring
    import torch

    with torch.no_grad():
        widths = [int(loss_scores_width(mod, X[:2])) for mod in models]
    if len(set(widths)) > 1:
        raise ValueError(f"--reference-model: the models' outputs have {widths[1:]} columns, the target's {widths[0]}: "
                         "a reference must classify the same classes")
    scores = [loss_scores(mod, X, df[label].to_numpy()) for mod in models]
    return scores[0], m, df[group].astype(str).to_numpy(), np.stack(scores[1:]) if references else None


def loss_scores_width(model, X) -> int:
    """The number of output columns of ``model`` on a few records (one-line errors as :func:`loss_scores`)."""
    import torch

    y = np.zeros(len(X), dtype=np.int64)
    loss_scores(model, X, y)  # raises the one-line error for inputs the model cannot take
    try:
        model.eval()
    except NotImplementedError:
        pass
    return model(torch.as_tensor(np.asarray(X)).float()).shape[1]


def check_disjoint(train_ids=None, holdout_ids=None, X_train=None, X_holdout=None) -> None:
    """A held-out set must not hold training records: shared IDs are an error; identical feature rows (no IDs) a
    warning, since two people can share every feature."""
    if train_ids is not None and holdout_ids is not None:
        shared = set(np.asarray(train_ids).tolist()) & set(np.asarray(holdout_ids).tolist())
        if shared:
            raise ValueError(f"{len(shared)} record IDs are both in the training and the held-out set, e.g. "
                             f"{sorted(shared, key=str)[:3]}")
    elif X_train is not None and X_holdout is not None:
        a = {np.asarray(r).tobytes() for r in np.asarray(X_train)}
        same = sum(np.asarray(r).tobytes() in a for r in np.asarray(X_holdout))
        if same:
            warnings.warn(f"{same} held-out rows are identical to a training row (no IDs given to tell them apart)",
                          stacklevel=2)


def coverage_study(n_studies: int = 500, *, sizes=(60, 300), shifts=(0.0, 0.5), alpha: float = 0.05,
                   seed: int = 0) -> pd.DataFrame:
    """How often the advantage interval covers its target, by simulation: members' scores N(d, 1), non-members'
    N(0, 1), per group size and shift d. The target of a cross-fitted estimate is the population advantage of its
    two thresholds, Φ(d − t) − Φ(−t), averaged; one row per (size, shift): coverage and mean width (pp)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n, d in itertools.product(sizes, shifts):
        hits, widths = 0, []
        for _ in range(n_studies):
            s_in, s_out = rng.normal(d, 1, n), rng.normal(0, 1, n)
            f = cross_fit_group(s_in, s_out, rng)
            truth = np.mean([st.norm.sf(t - d) - st.norm.sf(t) for t in f["thresholds"]])
            h = st.norm.ppf(1 - alpha / 2) * np.sqrt(f["var"])
            hits += abs(f["advantage"] - truth) <= h
            widths.append(200 * h)
        rows.append({"n_per_group": n, "shift": d, "coverage": hits / n_studies, "width_pp": float(np.mean(widths)),
                     "studies": n_studies})
    return pd.DataFrame(rows)
