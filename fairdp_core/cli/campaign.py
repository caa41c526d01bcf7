"""The claims campaign, and the studies beside the pipeline (coverage, tuning, the clip study, one model against
its recipe)."""

from __future__ import annotations

import argparse

from ..config import load_params


def _cmd_pilot_summary(args: argparse.Namespace) -> int:
    from ..reporting.pages import pilot_summary
    from ..stages.plan import train_plan

    params = load_params(args.params)
    effective = {n: train_plan(params, n)["spec"] for n in params.runs}
    print(pilot_summary(params, name=args.name or params.profile, effective=effective))
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
    from ..study.claims import main as claims_main

    if not args.extra or args.extra[0] in ("-h", "--help"):
        return claims_main(["--help"])
    if args.extra[0] == "numerics-shift":  # compares two directories of summaries: no params file
        return claims_main(args.extra)
    return claims_main([*args.extra, "--params", args.params])


def _cmd_coverage(args: argparse.Namespace) -> int:
    from ..audit.simulate import attack_coverage_study, coverage_study, write_attack_coverage, write_coverage

    if args.frontier:  # Δ at equal accuracy against DP-SGD's frontier (docs/frontier.md)
        from ..audit import frontier

        print(frontier.write_coverage(frontier.coverage_study(args.studies, seed=args.seed), args.out))
        return 0
    if args.attacks:  # PA-GA, PA-GBA, LiRA: thresholds fitted on the audit itself (2R = 16 and 100)
        df = attack_coverage_study(args.studies, n_truth=args.studies, two_r=(16, 100), seed=args.seed)
        print(write_attack_coverage(df, args.out))
        return 0
    if args.leveling or args.lowfpr or args.skew:
        from ..audit import simulate as sim

        if args.leveling:
            df = sim.leveling_coverage_study(args.studies, seed=args.seed)
            ident = df[df.gap == 0]
            summary = (f"Worst cell: {df.cover_models_and_records.min():.3f} for the interval the reports use, "
                       f"{df.cover_records_only.min():.3f} for the records-only bootstrap. Between identical "
                       f"algorithms the riskiest group's change is significant in at most "
                       f"{ident.identical_riskiest_significant.max():.3f} of studies; picked on the same records it "
                       f"'falls' by {ident.identical_riskiest_change_same_records_pp.min():.2f} pp at worst, on the "
                       f"other half by {ident.identical_riskiest_change_other_half_pp.abs().max():.2f} pp at most.")
            print(sim.write_extra_coverage("leveling", df, args.out, summary=summary))
        if args.lowfpr:
            df = sim.lowfpr_coverage_study(args.studies, seed=args.seed)
            summary = (f"Worst cell: TPR at 1% FPR {df.cover_tpr_at_1pct.min():.3f} (naive "
                       f"{df.cover_tpr_at_1pct_naive.min():.3f}); ε lower bound {df.cover_eps_lb.min():.3f} (naive "
                       f"{df.cover_eps_lb_naive.min():.3f}).")
            print(sim.write_extra_coverage("lowfpr", df, args.out, summary=summary))
        if args.skew:
            df = sim.skew_stress_study(args.studies, seed=args.seed)
            worst = df.groupby("record_log_sd")[["cover_gpr", "cover_contrast", "cover_delta_simultaneous"]].min()
            summary = "Worst cell per record log-sd: " + "; ".join(
                f"{rsd:g}: GPR {r.cover_gpr:.3f}, contrast {r.cover_contrast:.3f}, Δ {r.cover_delta_simultaneous:.3f}"
                for rsd, r in worst.iterrows()) + "."
            print(sim.write_extra_coverage("skew", df, args.out, summary=summary))
        return 0
    df = coverage_study(args.studies, seed=args.seed)
    print(write_coverage(df, args.out))
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from ..study.tuning import main as tune

    return tune(["--params", args.params, *args.extra])


def _cmd_one_vs_recipe(args: argparse.Namespace) -> int:
    from ..audit.one_vs_recipe import compare_runs, write_comparison

    params = load_params(args.params)
    runs = {k: v.model_dump() for k, v in params.runs.items()
            if v.tau is None and (not args.algorithms or v.algorithm in args.algorithms)}
    df = compare_runs(params.resolve("results"), runs, n_null=args.n_null, progress=not args.quiet)
    if df.empty:
        raise FileNotFoundError(f"no run of {args.params} has a recipe audit under results/audit: run the study first")
    out = write_comparison(df, args.out)
    print((out / "comparison.md").read_text().split("\n\n")[1])
    print(f"fairdp one-vs-recipe: wrote {out}/comparison.md and comparison.csv ({len(df)} runs)")
    return 0


def _cmd_tune_clip(args: argparse.Namespace) -> int:
    import json

    from ..atomic import write_text
    from ..data import load
    from ..study.clip_tuning import tune_clip

    params = load_params(args.params)
    if args.dataset not in params.data.datasets:
        raise KeyError(f"--dataset {args.dataset!r} is not under data.datasets in {args.params} "
                       f"(configured: {', '.join(params.data.datasets)})")
    path = params.resolve(params.data.prepared_dir) / args.dataset
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: prepare it first (python -m fairdp_core.stages.prepare {args.dataset})")
    data = load(path)
    t = params.train
    ov = t.overrides.get(f"{args.dataset}-{args.model}")  # the dataset-and-model override, as DP-SGD trains
    batch = (ov.batch_size if ov and ov.batch_size else None) or t.batch_size
    epochs = (ov.epochs if ov and ov.epochs else None) or t.epochs
    n = len(data.train)
    q, steps = batch / n, int(round(epochs * n / batch))
    res = tune_clip(data.train.X, data.train.y, n_classes=data.n_classes, model=args.model, quantile=args.quantile,
                    epsilon_q=args.epsilon_quantile, target_epsilon=args.epsilon, sample_rate=q, steps=steps,
                    delta=t.delta, seed=params.seed)
    res.update(dataset=args.dataset, model=args.model, epochs=epochs, batch_size=batch)
    out = args.out or params.resolve("reports/tuning") / f"clip-{args.dataset}-{args.model}.json"
    write_text(out, json.dumps(res, indent=1) + "\n")
    print(f"{args.dataset}/{args.model}: DP {100 * args.quantile:g}th percentile of the initial per-sample gradient "
          f"norms C = {res['clip']:.4g} (ε_q = {args.epsilon_quantile:g}); non-private percentile "
          f"{res['nonprivate_percentile']['value']:.4g} (tuning outside ε, comparison only). DP-SGD at ε = "
          f"{args.epsilon:g} in total: σ = {res['sigma']:.4g} (q = {q:.4g}, T = {steps}, Poisson, RDP, δ = "
          f"{t.delta:g}; training alone would spend ε = {res['epsilon_training_alone']:.3f}). Wrote {out}")
    return 0


def _cmd_clip_study(args: argparse.Namespace) -> int:
    import torch

    from ..study.clip_study import clip_study, write_clip_study

    params = load_params(args.params)
    torch.set_num_threads(args.threads or params.train.threads)
    res = clip_study(params, args.datasets, seeds=args.seeds, epsilon=args.epsilon, epsilon_q=args.epsilon_quantile,
                     progress=not args.quiet)
    js, md = write_clip_study(res, args.out)
    for s in res["datasets"]:
        print(f"{s['dataset']}: {s['verdict']}")
    print(f"fairdp clip-study: wrote {md} and {js} ({res['seconds']:.0f} s)")
    return 0


def register(add) -> None:
    """Add the campaign commands (``add(audience, name, help=...)`` makes a subparser)."""
    pi = add("campaign", "pilot-summary", help="between-seed SDs and seeds for power from the pilot profile")
    pi.add_argument("--name", default=None, help="writes reports/paper/<NAME>.json (default: the profile's name)")
    pi.set_defaults(func=_cmd_pilot_summary)
    cl = add("campaign", "claims", add_help=False, help="the claims campaign: run its parts from a pinned worktree "
                        "(`fairdp claims run PART`), list them (`fairdp claims parts`); --help for more")
    cl.set_defaults(func=_cmd_claims)
    cv = add("campaign", "coverage", help="simulate the audit's intervals and tests (reports/coverage/)")
    cv.add_argument("--studies", type=int, default=1000, help="simulated audits per cell")
    cv.add_argument("--seed", type=int, default=20251010, help="the simulation's seed")
    cv.add_argument("--out", default="reports/coverage", help="output directory (default reports/coverage)")
    cv.add_argument("--attacks", action="store_true", help="PA-GA, PA-GBA and LiRA instead (attack_coverage.md)")
    cv.add_argument("--leveling", action="store_true", help="the leveling interval (leveling_coverage.md)")
    cv.add_argument("--lowfpr", action="store_true", help="TPR at 1%% FPR and the ε lower bound (lowfpr_coverage.md)")
    cv.add_argument("--skew", action="store_true", help="the intervals under heavy record skew (skew_coverage.md)")
    cv.add_argument("--frontier", action="store_true",
                    help="Δ at equal accuracy against DP-SGD's frontier (frontier_coverage.md)")
    cv.set_defaults(func=_cmd_coverage)
    tu = add("campaign", "tune", add_help=False,
                        help="lr/epochs/clip/γ per dataset on a validation split (tuning outside ε); --help for more")
    tu.set_defaults(func=_cmd_tune)
    ov = add("campaign", "one-vs-recipe", help="the one-model audit of every model of the profile's banks against "
                        "their recipe audit (how far one model's answer can be trusted)")
    ov.add_argument("--algorithms", nargs="*", default=["sgd", "dpsgd"], help="the runs' algorithms (default sgd "
                    "dpsgd; none: every run)")
    ov.add_argument("--n-null", type=int, default=20, help="permutations for each one-model Δ's null floor")
    ov.add_argument("--out", default="reports/one_model", help="output directory (default reports/one_model)")
    ov.add_argument("--quiet", action="store_true", help="no progress bar")
    ov.set_defaults(func=_cmd_one_vs_recipe)
    tc = add("campaign", "tune-clip", help="DP-SGD's clipping bound as a DP quantile of the per-sample gradient "
                        "norms, its ε composed with training")
    tc.add_argument("--dataset", required=True, help="a prepared dataset of params.yaml")
    tc.add_argument("--model", default="lr", choices=["lr", "mlp", "cnn", "cnn_relu"], help="the model (default lr)")
    tc.add_argument("--quantile", type=float, default=0.5, help="the percentile as a fraction (default 0.5)")
    tc.add_argument("--epsilon-quantile", type=float, default=0.1, help="ε of the quantile release (default 0.1)")
    tc.add_argument("--epsilon", type=float, default=10.0, help="total ε of the quantile and training (default 10)")
    tc.add_argument("--out", default=None, help="JSON (default: reports/tuning/clip-<dataset>-<model>.json)")
    tc.set_defaults(func=_cmd_tune_clip)
    cs = add("campaign", "clip-study", help="does a per-dataset C change Δ? DP-SGD at the profile's C vs at the DP "
                        "median of the gradient norms (its ε charged), paired over seeds (reports/tuning/clip_study.*)")
    cs.add_argument("--datasets", nargs="+", default=["adult", "law_paper", "compas", "credit"],
                    help="prepared datasets of params.yaml (default: adult law_paper compas credit)")
    cs.add_argument("--seeds", type=int, default=4, help="seeds 0..S-1 (default 4; at least 2)")
    cs.add_argument("--epsilon", type=float, default=10.0, help="total ε of each arm (default 10)")
    cs.add_argument("--epsilon-quantile", type=float, default=0.1, help="ε of arm B's quantile release (default 0.1)")
    cs.add_argument("--out", default="reports/tuning", help="directory of clip_study.json and clip_study.md")
    cs.add_argument("--threads", type=int, default=None, help="torch threads (default: train.threads)")
    cs.add_argument("--quiet", action="store_true", help="no progress bar")
    cs.set_defaults(func=_cmd_clip_study)
