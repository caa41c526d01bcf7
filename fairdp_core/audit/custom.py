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
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..versions import package_versions
from .custom_checks import AuditSettings, _gb, available_memory, memory_estimate
from .custom_result import CustomAudit, _roc
from .design import audit_design
from .inference import cross_fit_contributions, group_inference
from .rows import GroupRisk
from .run import REGISTRY, audit
from .signals import logit_confidence
from .verdicts import is_degenerate

if TYPE_CHECKING:  # torch is the `train` extra: the audit of given losses (audit_bank) runs without it
    from torch import nn

__all__ = ["AuditSettings", "audit_bank", "audit_model", "correctness_labels", "load_model_spec"]


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
    records, low_fpr = result.records, result.low_fpr
    attacks = {name: s.as_dict() for name, s in result.attacks.items()}
    groups_df = pd.DataFrame([r.as_dict() for r in result.group_rows if isinstance(r, GroupRisk)])  # not the low-FPR view
    groups_df = groups_df.assign(gpr_pp=100 * groups_df["gpr"],
                                 lo_pp=(100 * pd.to_numeric(groups_df["gpr_lo"], errors="coerce")).clip(-100, 100),
                                 hi_pp=(100 * pd.to_numeric(groups_df["gpr_hi"], errors="coerce")).clip(-100, 100))
    groups_df = groups_df.rename(columns={"group": "group_code"}).rename(columns={"group_name": "group"})[
        ["attack", "group", "n_records", "gpr_pp", "lo_pp", "hi_pp"]]
    # ROC per group over the (model, record) pairs: the attacks marked roc (LiRA online, RMIA), and the raw loss
    sig = {k: result.scores[k] for k, a in REGISTRY.items() if a.roc and k in result.scores}
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

    from ..engine.accounting import calibrate_sigma, epsilon
    from ..engine.trainer import _init_module

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


def audit_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, settings: AuditSettings | None = None, *,
                group_names: list[str] | None = None, class_names: list[str] | None = None,
                X_test: np.ndarray | None = None, y_test: np.ndarray | None = None,
                slices: Mapping[str, np.ndarray] | None = None, extra: Mapping | None = None) -> CustomAudit:
    """Train 2R models on complementary halves of ``m`` audited records (stratified by group; every other record in
    every model) by the recipe of ``settings`` (:class:`AuditSettings`; None: its defaults), and audit them
    (:func:`audit_bank`). The rule is one of the registry's (:data:`fairdp_core.rules.RULES`), at its default
    settings and with a guarantee: "sgd", or "dpsgd", "dpsgd_s", AdaClip, ... at ``settings.epsilon``.

    ``X`` [n, ...] features, ``y`` [n] integer labels 0..C−1 (``class_names``: C names; None: the labels as text),
    ``groups`` [n]: integer codes 0..K−1 (``group_names``) or labels. ``X_test``, ``y_test``: held-out records for
    the models' accuracy. ``slices``: labellings of all n records; the audited records' labels are used, plus
    "class" and "correct" (whether the majority of the bank's OUT models classify the record correctly), always
    added. ``extra``: entries added to the summary as they are. A bank that would not fit in the memory this machine
    has free is refused before any training (``settings.memory_check``)."""
    import torch
    from torch import nn

    from ..engine import TrainSpec, bank_accounting, train_bank
    from ..engine.backends import UnsupportedModule, check_module
    from ..engine.spec import spec_fields
    from ..rules import get as get_rule

    st = settings if settings is not None else AuditSettings()
    if not isinstance(st, AuditSettings):
        raise TypeError(f"settings: an AuditSettings, got {type(st).__name__} (AuditSettings(R=16, epsilon=3.0, ...))")
    algorithm, R, seed, min_per_group = st.algorithm, st.R, st.seed, st.min_per_group
    rule = get_rule(algorithm)  # a ValueError naming the registry's rules, before any work
    if not rule.guaranteed:
        raise ValueError(f"algorithm {algorithm!r}: its ε is not guaranteed (a statistic it uses is not noised), so an "
                         "audit of it would report an ε it does not have; choose a rule with a guarantee")
    rule_fields = rule.default_fields()
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
    n_classes = len(class_names) if class_names is not None else int(y.max() + 1)
    if y.min() < 0 or y.max() >= n_classes:
        raise ValueError(f"y: labels must be 0..{n_classes - 1} (class_names has {n_classes} names), "
                         f"got {int(y.min())}..{int(y.max())}")
    m = int(min(st.m or min(n // 2, 1000), n))
    need, have = memory_estimate(2 * R, m), available_memory()
    if st.memory_check and have is not None and need > have:
        raise ValueError(f"--R {R}: {2 * R} models auditing {m} records need about {_gb(need)}, more than the "
                         f"{_gb(have)} this machine has free; lower --R (or --m), or pass --no-memory-check")
    per_model = n - m // 2  # every unaudited record, and half the audited ones
    steps = int(np.ceil(st.epochs * per_model / st.batch_size))
    if st.log is not None:
        st.log(f"{2 * R} models x {steps} steps each on {per_model} of {n} records ({m} audited, each in half the "
            f"models); about {_gb(need)} of memory"
            + (f" ({_gb(have)} free)" if have is not None else ""))
    rng = np.random.default_rng([seed, 0])
    design = audit_design(g, m=m, R=R, min_per_group=min(min_per_group, int(sizes.min())), rng=rng)
    delta = st.delta if st.delta is not None else min(1e-5, 1.0 / n ** 1.1)
    kind, factory = _factory(st.model, tuple(X.shape[1:]), n_classes)
    spec = TrainSpec(algorithm=algorithm, model=kind, epochs=st.epochs, batch_size=st.batch_size, lr=st.lr,
                     clip=st.clip, target_epsilon=None if algorithm == "sgd" else st.epsilon, delta=delta,
                     **rule_fields)
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
                          progress=st.progress, desc=st.title, module_factory=factory)
        loss, logits = bank.evaluate(X[idx], y[idx])
        accounting = bank_accounting(bank.accounting)
        test_logits = bank.evaluate(X_test, y_test)[1] if X_test is not None else None
    else:
        models, acct = _train_opacus(factory, X, y, design.training_membership(), spec, seed=seed,
                                     progress=st.progress)
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
                      intersections=list(st.intersections), alpha=st.alpha, seed=seed, delta=delta, title=st.title,
                      extra=info)


