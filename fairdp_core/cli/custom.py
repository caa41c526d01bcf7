"""The audit of your own data and model: a recipe retrained 2R times (audit-custom), or one trained model (audit-one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import RULE_NAMES


def _cmd_audit_custom(args: argparse.Namespace) -> int:
    from ..atomic import check_output_dir
    from ..audit.custom_checks import AuditSettings, check_recipe
    from ..audit.custom_csv import audit_csv

    inter = []
    for pair in args.intersect:
        parts = [p.strip() for p in pair.split(",")]
        if len(parts) != 2:
            raise ValueError(f"--intersect {pair!r}: give two column names separated by a comma (e.g. sex,race)")
        inter.append(tuple(parts))
    check_recipe(max_classes=args.max_classes)
    settings = AuditSettings(  # before any work: the flags alone, one error naming the flag
        model=args.model, algorithm=args.algorithm, epsilon=args.epsilon, R=args.R, m=args.m, epochs=args.epochs,
        batch_size=args.batch_size, lr=args.lr, clip=args.clip, min_per_group=args.min_per_group, seed=args.seed,
        intersections=inter, progress=not args.quiet, memory_check=not args.no_memory_check,
        log=lambda m: print(f"fairdp audit-custom: {m}", file=sys.stderr, flush=True))
    check_output_dir(args.out, force=args.force, protect=(args.data,))
    res = audit_csv(args.data, settings, label=args.label, group=args.group, slices=args.slice, drop=args.drop,
                    group_as_feature=not args.no_group_feature, max_classes=args.max_classes,
                    on_warning=lambda m: print(f"fairdp audit-custom: warning: {m}", file=sys.stderr))
    out = res.write(args.out, force=args.force, protect=(args.data,))
    for line in res.headline():  # the answer first: is some group riskier, which is riskiest and safest
        print(line)
    print(f"(RMIA: Δ = {res.summary['attacks']['rmia']['delta_pp']:.2f} pp.)")
    print(res.table().to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print("Each pair of groups (simultaneous 95% intervals, Holm p):")
    for line in res.answer():
        print(line)
    if res.summary.get("degenerate"):
        print(f"fairdp audit-custom: warning: the models are degenerate (accuracy {100 * res.summary['accuracy']:.1f}%,"
              f" majority class {100 * res.summary['majority_class_rate']:.1f}%): raise --epochs or --lr",
              file=sys.stderr)
    print(f"fairdp audit-custom: wrote {out}/ (report.md, groups.csv, slices.csv, roc.png, summary.json)")
    return 0


def _cmd_audit_one(args: argparse.Namespace) -> int:
    import json
    import warnings

    import numpy as np
    import pandas as pd

    from ..atomic import check_output_dir, write_managed_dir
    from ..audit.one import audit_one, calibrated_scores

    if (args.scores is None) == (args.model_file is None):
        raise ValueError("give --scores CSV (per-record losses or scores), or --model-file with --data and --label")
    if args.model_file is not None and (args.data is None or args.label is None):
        raise ValueError("--model-file needs --data (the records: the model's inputs, --label, --member, --group) "
                         "and --label")
    if args.scores is not None and (args.loss is None) == (args.score is None):
        raise ValueError("--scores needs one of --loss COLUMN or --score COLUMN")
    if args.reference_loss and args.loss is None:
        raise ValueError("--reference-loss calibrates a loss: give the target's losses with --loss")
    if args.reference_loss and args.scores is None or args.reference_model and args.model_file is None:
        raise ValueError("--reference-loss goes with --scores, --reference-model with --model-file")
    inputs = tuple(str(p) for p in (args.scores, args.data, args.model_file) if p is not None)
    check_output_dir(args.out, force=args.force, protect=inputs)  # before any work
    table = args.scores if args.scores is not None else args.data
    if args.slice:  # the slice columns exist before any model is loaded
        head = pd.read_csv(table, sep=None, engine="python", nrows=5).columns
        missing = [c for c in args.slice if c not in head]
        if missing:
            raise KeyError(f"{table}: --slice: no column {', '.join(map(repr, missing))} (it has {', '.join(head)})")
    if args.model_file is not None:
        from ..audit.one import model_file_scores

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scores, m, groups, refs = model_file_scores(args.model_file, args.data, label=args.label,
                                                        member=args.member, group=args.group, id_column=args.id,
                                                        drop=tuple(args.drop), group_feature=args.group_feature,
                                                        references=tuple(args.reference_model))
        for w in caught:
            print(f"fairdp audit-one: warning: {w.message}", file=sys.stderr)
        score_col, source = "loss under the model", Path(args.model_file).name
    else:
        df = pd.read_csv(args.scores, sep=None, engine="python")
        score_col = args.score or args.loss
        missing = [c for c in (score_col, args.member, args.group, *args.reference_loss) if c not in df.columns]
        if missing:
            raise KeyError(f"{args.scores}: no column {', '.join(map(repr, missing))} (it has "
                           f"{', '.join(df.columns)})")
        member = df[args.member]
        if not set(member.unique()) <= {0, 1}:
            raise ValueError(f"{args.scores}: column {args.member!r} must be 0/1 (1: a training record of the model)")
        scores = df[score_col].to_numpy(float) * (1.0 if args.score else -1.0)  # a loss: lower means member
        m = member.astype(bool).to_numpy()
        groups = df[args.group].astype(str).to_numpy()
        source = Path(args.scores).name
        refs = -df[list(args.reference_loss)].to_numpy(float).T if args.reference_loss else None
    from ..audit.one import tie_share

    ties = tie_share(scores[~m])
    if ties > 0.1:  # thresholds between tied scores do not exist: the low-FPR rates then say little
        print(f"fairdp audit-one: warning: {100 * ties:.0f}% of the held-out records' scores equal another's "
              f"({score_col}); the TPR at a low FPR is unreliable" + (" (a loss saved in float32 ties at 0 for "
                                                                    "confident records: save it in float64)"
                                                                    if args.scores is not None else ""),
              file=sys.stderr)
    audits = {"loss": scores}
    if refs is not None:  # RMIA's calibration by the reference models (offline: they trained on none of the records)
        audits["rmia_offline"] = calibrated_scores(-scores, -refs, a=args.rmia_a)
    attack_labels = {"loss": f"the threshold on {score_col}, cross-fitted",
                     "rmia_offline": "RMIA offline, calibrated by the reference models, cross-fitted"}
    results = {k: audit_one(v[m], v[~m], groups[m], groups[~m], alpha=args.alpha, n_null=args.n_null,
                            min_per_group=args.min_per_group, seed=args.seed, attack=k, label=attack_labels[k],
                            title=source) for k, v in audits.items()}
    res = results["loss"]
    slices = {}  # column -> (its audit by the loss threshold or None, the values left out)
    if args.slice:
        slice_df = (df if args.scores is not None  # the scores table is already read; the records' is not
                    else pd.read_csv(table, sep=None, engine="python", usecols=list(args.slice)))
        for col in args.slice:
            labels = slice_df[col].astype(str).where(slice_df[col].notna(), "(missing)").to_numpy()
            small = [v for v in sorted(set(labels)) if min(((labels == v) & m).sum(), ((labels == v) & ~m).sum())
                     < args.min_per_group]
            keep = ~np.isin(labels, small)
            left = [{"value": v, "members": int(((labels == v) & m).sum()),
                     "held_out": int(((labels == v) & ~m).sum())} for v in small]
            if len(set(labels[keep])) < 2:
                slices[col] = (None, left)
                continue
            slices[col] = (audit_one(scores[m & keep], scores[~m & keep], labels[m & keep], labels[~m & keep],
                                     alpha=args.alpha, n_null=args.n_null, min_per_group=args.min_per_group,
                                     seed=args.seed, label=attack_labels["loss"], title=f"{source} by {col}"), left)

    def group_table(r) -> pd.DataFrame:  # the files' columns: the advantage of the one model's threshold
        t = r.table().drop(columns=["attack", "n_records"]).rename(columns={"gpr_pp": "advantage_pp"})
        first = ["group", "n_members", "n_nonmembers", "advantage_pp", "lo_pp", "hi_pp"]
        return t[first + [c for c in t.columns if c not in first]]

    def write(tmp: Path) -> None:
        for k, r in results.items():
            suffix = "" if k == "loss" else f"_{k}"
            (tmp / f"groups{suffix}.csv").write_text(group_table(r).to_csv(index=False, float_format="%.6g"))
            (tmp / f"contrasts{suffix}.csv").write_text(r.contrasts().to_csv(index=False, float_format="%.6g"))
        extra = {} if refs is None else {"rmia_offline": {**results["rmia_offline"].delta(), "a": args.rmia_a,
                                                          "references": int(refs.shape[0])}}
        if slices:
            rows = [group_table(r).assign(slice=col).rename(columns={"group": "value"}) for col, (r, _) in slices.items()
                    if r is not None]
            if rows:
                t = pd.concat(rows, ignore_index=True)
                (tmp / "slices.csv").write_text(t[["slice", *t.columns.drop("slice")]].to_csv(index=False,
                                                                                               float_format="%.6g"))
            none = dict.fromkeys(("delta_pp", "delta_lo", "delta_hi", "null_floor_pp"))  # not audited
            extra["slices"] = {col: {**(r.delta() if r is not None else none), "left_out": left}
                               for col, (r, left) in slices.items()}
        (tmp / "summary.json").write_text(json.dumps({
            **res.delta(), "alpha": res.summary["alpha"], "n_members": int(m.sum()), "n_nonmembers": int((~m).sum()),
            "score": score_col, "scores_file": source, **extra}, indent=1) + "\n")

    out = write_managed_dir(args.out, write, force=args.force, protect=inputs)
    cols = ["group", "n_members", "n_nonmembers", "advantage_pp", "lo_pp", "hi_pp", "auc", "tpr_at_0.01_fpr"]
    for k, r in results.items():
        if len(results) > 1:
            print("Loss threshold:" if k == "loss" else f"RMIA, calibrated by {refs.shape[0]} reference models:")
        for line in r.headline() + r.answer():
            print(line)
        print(group_table(r)[cols].to_string(index=False, float_format=lambda v: "n/a" if np.isnan(v) else f"{v:.2f}"))
    for col, (r, left) in slices.items():  # by the loss threshold, as the groups above
        named = ", ".join(f"{x['value']!r} ({x['members']} members, {x['held_out']} held out)" for x in left)
        print(f"Slice by {col}" + (f" ({len(left)} value{'s' * (len(left) > 1)} left out, under --min-per-group "
                                   f"{args.min_per_group}: {named})" if left else "") + ":")
        if r is None:
            print(f"  fewer than two values with {args.min_per_group} members and held-out records: not audited")
            continue
        for line in r.headline() + r.answer():
            print(f"  {line}")
        print(group_table(r)[cols].rename(columns={"group": "value"}).to_string(
            index=False, float_format=lambda v: "n/a" if np.isnan(v) else f"{v:.2f}"))
    files = "groups.csv, contrasts.csv" + (", groups_rmia_offline.csv, contrasts_rmia_offline.csv" if refs is not None
                                           else "") + (", slices.csv" if any(r for r, _ in slices.values()) else "")
    print(f"fairdp audit-one: wrote {out}/ ({files}, summary.json)")
    return 0


def register(add) -> None:
    """Add the custom commands (``add(audience, name, help=...)`` makes a subparser)."""
    ac = add("custom", "audit-custom", help="per-group membership audit of your own CSV and model (PA-ALOOA, "
                        "LiRA, RMIA; slices; ROC)")
    ac.add_argument("--data", required=True, help="a CSV file (any delimiter)")
    ac.add_argument("--label", required=True, help="the column to predict")
    ac.add_argument("--group", required=True, help="the column whose groups are compared")
    ac.add_argument("--model", default="mlp", help="lr, mlp, or module:function returning an nn.Module "
                    "(called with (input_shape, n_classes)); default mlp")
    ac.add_argument("--out", required=True, help="output directory: new or empty (written atomically); a previous "
                    "fairdp output there is replaced only with --force, and a directory holding other files is refused")
    ac.add_argument("--force", action="store_true", help="replace the files of a previous fairdp output in --out (only "
                    "those its manifest lists)")
    ac.add_argument("--algorithm", default="dpsgd", choices=RULE_NAMES, metavar="ALGORITHM",
                    help=f"how the models train: a rule of the registry at its default settings ({', '.join(RULE_NAMES)}; "
                         "default dpsgd); one without a guarantee, or whose defaults depend on the dataset, is refused")
    ac.add_argument("--epsilon", type=float, default=10.0, help="target ε of every rule but sgd (default 10)")
    ac.add_argument("--R", type=int, default=8, help="2R models are trained (default 8: 16 models)")
    ac.add_argument("--m", type=int, default=None, help="audited records (default: half the rows, at most 1000)")
    ac.add_argument("--epochs", type=float, default=30, help="training epochs of every model (default 30)")
    ac.add_argument("--batch-size", type=int, default=64, help="expected batch size: Poisson rate q = B/n (default 64)")
    ac.add_argument("--lr", type=float, default=0.5, help="learning rate (default 0.5)")
    ac.add_argument("--clip", type=float, default=1.0,
                    help="per-sample gradient clip bound C (default 1): DP-SGD's bound, another rule's initial or "
                         "overall bound; dpsgd_s sets its own")
    ac.add_argument("--min-per-group", type=int, default=20, help="audited records per group at least (default 20)")
    ac.add_argument("--slice", action="append", default=[], help="another column to slice the risk by (repeatable)")
    ac.add_argument("--intersect", action="append", default=[], help="A,B: slice by the intersection of two "
                    "columns or slices (group, class, correct, or a --slice column); repeatable")
    ac.add_argument("--drop", action="append", default=[], help="a column that is not a feature (repeatable)")
    ac.add_argument("--no-group-feature", action="store_true", help="the group column is not a model input")
    ac.add_argument("--seed", type=int, default=0, help="the one seed of the split, the design and training")
    ac.add_argument("--no-memory-check", action="store_true", help="train even where the memory estimate is over "
                    "what this machine has free")
    ac.add_argument("--max-classes", type=int, default=20, help="refuse a label with more distinct values than this "
                    "(default 20: a numeric column such as age is not a label)")
    ac.add_argument("--quiet", action="store_true", help="no progress bar")
    ac.set_defaults(func=_cmd_audit_custom)
    ao = add("custom", "audit-one", help="per-group membership audit of ONE trained model, from its per-record "
                        "losses or scores on its training records and on held-out records (a CSV), or from the saved "
                        "model and those records")
    ao.add_argument("--scores", help="a CSV: one row per record, its loss (or score), whether it was a training "
                    "record, its group")
    sc = ao.add_mutually_exclusive_group()
    sc.add_argument("--loss", help="with --scores: the column of per-record losses (lower: more member-like)")
    sc.add_argument("--score", help="with --scores: the column of per-record scores (higher: more member-like)")
    ao.add_argument("--model-file", help="instead of --scores: the trained classifier, saved as a torch.export "
                    "program (batch dimension dynamic) or TorchScript (torch.jit.save); its per-record "
                    "cross-entropy losses on --data are audited")
    ao.add_argument("--data", help="with --model-file: a CSV of the training and held-out records, the model's "
                    "numeric inputs in its column order plus --label, --member and --group")
    ao.add_argument("--label", help="with --model-file: the class-index column (0..C-1)")
    ao.add_argument("--id", help="with --model-file: a record-ID column; an ID among both members and non-members is "
                    "an error (without IDs, identical rows are a warning)")
    ao.add_argument("--drop", action="append", default=[], help="with --model-file: a column that is not a model "
                    "input (repeatable)")
    ao.add_argument("--group-feature", action="store_true", help="with --model-file: the (numeric) group column is "
                    "one of the model's inputs")
    ao.add_argument("--reference-loss", action="append", default=[], help="with --scores: a column of per-record "
                    "losses under a reference model trained on none of these records (repeatable): adds RMIA's "
                    "calibrated audit beside the loss threshold")
    ao.add_argument("--reference-model", action="append", default=[], help="with --model-file: a reference model "
                    "(same formats) trained on none of these records (repeatable): adds RMIA's calibrated audit")
    ao.add_argument("--rmia-a", type=float, default=1.0, help="RMIA's offline correction a in [0, 1] (default 1: "
                    "Pr(x) is the references' mean probability)")
    ao.add_argument("--slice", action="append", default=[], help="another column of --scores (or --data) to cut the "
                    "risk by, as --group (repeatable): its Δ, its riskiest values and slices.csv; a value with "
                    "fewer than --min-per-group members or held-out records is left out, and said so; empty cells "
                    "are the value '(missing)'. With --model-file, --drop a slice column that is not a model input")
    ao.add_argument("--member", default="member", help="the 0/1 column: 1 for the model's training records "
                    "(default member)")
    ao.add_argument("--group", required=True, help="the column whose groups are compared")
    ao.add_argument("--out", required=True, help="output directory: new or empty (a previous fairdp output there is "
                    "replaced only with --force)")
    ao.add_argument("--force", action="store_true", help="replace a previous fairdp output in --out")
    ao.add_argument("--alpha", type=float, default=0.05, help="1 − the intervals' level (default 0.05)")
    ao.add_argument("--n-null", type=int, default=200, help="permutations for Δ's null floor (default 200)")
    ao.add_argument("--min-per-group", type=int, default=20, help="members and held-out records per group at least")
    ao.add_argument("--seed", type=int, default=0, help="the halves and the null's permutations")
    ao.set_defaults(func=_cmd_audit_one)
