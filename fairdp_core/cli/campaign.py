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


def claims_main(argv: list[str] | None = None) -> int:
    """``fairdp claims``: run, rerun, verify and compare the campaign's per-run summaries
    (fairdp_core/study/claims.py, verify.py)."""
    import json
    import os
    import time
    from pathlib import Path

    from ..config import ConfigError
    from ..study import claims
    from ..study.claims import CAMPAIGN_PREFIX, CampaignPool, checkout_commit, part_of, part_runs, parts, run_part, run_wave
    from ..study.verify import NOT_REPRODUCED, check_verifiable, numerics_shift, verify_run

    ap = argparse.ArgumentParser(prog="fairdp claims", description=claims.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="action", required=True)
    r = sub.add_parser("run", help="run parts of the claims profile (from a pinned worktree)")
    r.add_argument("parts", nargs="+", help="parts such as law_paper-lr-e10 or law_paper-lr-sgd; 'all' for every one")
    r.add_argument("--params", default="params.yaml")
    r.add_argument("--summaries", default=None,
                   help="where the per-run summaries go (default reports/paper/<profile>)")
    r.add_argument("--min-seeds", type=int, default=6, help="paired seeds before the power rule decides (default 6)")
    r.add_argument("--allow-dirty", action="store_true", help="run from a checkout with uncommitted changes")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    r.add_argument("--workers", type=int, default=1,
                   help="runs at a time, each in a one-thread worker on compute.backend (loky: processes here; ray: "
                        "Ray tasks, at compute.ray_address); default 1, one after the other in this process")
    o = sub.add_parser("runs", help="run these runs of the profile (no seed rule), e.g. at a new numerics version")
    o.add_argument("names", nargs="+", help="run names (`fairdp grid` lists them)")
    o.add_argument("--params", default="params.yaml")
    o.add_argument("--summaries", required=True, help="where their summaries go")
    o.add_argument("--workers", type=int, default=1, help="runs at a time (as for `run`)")
    o.add_argument("--allow-dirty", action="store_true", help="run from a checkout with uncommitted changes")
    v = sub.add_parser("verify", help="rerun committed summaries here and compare (all but their commit and times)")
    v.add_argument("summaries", nargs="+", help="summary files (reports/paper/<profile>/<run>.json)")
    v.add_argument("--params", default="params.yaml")
    ns = sub.add_parser("numerics-shift", help="new − old of Δ and accuracy, per seed, for runs at two numerics "
                        "versions (the same run names in two directories)")
    ns.add_argument("old", help="directory of the summaries at the old version")
    ns.add_argument("new", help="directory of the same runs at the new version")
    ls = sub.add_parser("parts", help="list the profile's parts")
    ls.add_argument("--params", default="params.yaml")
    args = ap.parse_args(argv)
    if args.action == "numerics-shift":
        read = [[json.loads(f.read_text()) for f in sorted(Path(d).glob("*.json"))] for d in (args.old, args.new)]
        print("| cell | algorithm | quantity | versions | seeds | new − old | 95% t interval | holds 0 |")
        print("|---|---|---|---|---|---|---|---|")
        for r in numerics_shift(*read):
            verdict = {True: "yes", False: "NO", None: "n/a (under 2 pairs)"}[r["holds_zero"]]
            ci = "—" if r["holds_zero"] is None else f"[{r['lo']:+.3f}, {r['hi']:+.3f}]"
            print(f"| {r['dataset']} {r['model']} ε {r['epsilon']:g} | {r['algorithm']} | {r['quantity']} | "
                  f"{r['versions']} | {r['seeds']}" + (f" ({r['unpaired']} unpaired)" if r["unpaired"] else "")
                  + f" | {r['mean']:+.3f} | {ci} | {verdict} |")
        return 0
    params = load_params(args.params)
    if not params.profile.startswith(CAMPAIGN_PREFIX):
        raise ConfigError(f"{args.params}: profile {params.profile!r}; the campaign runs the profiles named "
                          f"{'* or '.join(CAMPAIGN_PREFIX)}* (`fairdp use-profile claims` in its worktree)")
    if args.action == "parts":
        for p in parts(params):
            print(p, sum(len(v) for v in part_runs(params, p).values()), "runs at most")
        return 0
    if args.action == "verify":
        import tempfile

        stored = {}
        for f in args.summaries:  # every file read and checked before any run
            try:
                stored[f] = json.loads(Path(f).read_text())
            except (OSError, ValueError) as e:
                raise ConfigError(f"{f}: not a readable summary ({e})") from None
            check_verifiable(params, stored[f])
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # as the campaign runs
        bad = 0
        with tempfile.TemporaryDirectory() as work:
            for s in stored.values():
                diff = verify_run(params, s, Path(work))
                bad += bool(diff)
                print(f"{s['run']}: " + (f"DIFFERS in {', '.join(diff)}" if diff else
                                         f"reproduces (every field but {' and '.join(NOT_REPRODUCED)})"), flush=True)
        return 1 if bad else 0
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: need at least 1")
    if args.action == "runs":
        args.names = list(dict.fromkeys(args.names))  # a name given twice runs once
    if args.action == "run" and args.min_seeds < 1:
        raise ConfigError(f"--min-seeds {args.min_seeds}: at least 1")
    unknown = [n for n in args.names if n not in params.runs] if args.action == "runs" else []
    if unknown:  # every name checked before any work
        raise ConfigError(f"{', '.join(unknown)}: not runs of profile {params.profile!r}")
    todo = [] if args.action == "runs" else parts(params) if args.parts == ["all"] else args.parts
    for p in todo:
        part_runs(params, p)
    commit = checkout_commit(params.base_dir, allow_dirty=args.allow_dirty)
    summaries = Path(args.summaries) if args.summaries else params.resolve(f"reports/paper/{params.profile}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any worker starts: they inherit it
    pool = (CampaignPool(args.workers, params.compute.backend, params.compute.ray_address)
            if args.workers > 1 else None)

    def say(line: str) -> None:  # a line per finished run, flushed: the campaign's log is a file
        print(line, flush=True)

    if args.action == "runs":
        by_part: dict[str, list[str]] = {}
        for n in args.names:
            by_part.setdefault(part_of(params.runs[n].model_dump()), []).append(n)
        for part, names in by_part.items():
            run_wave(params, part, names, summaries, commit=commit, progress=pool is None, pool=pool, log=say)
        return 0
    for p in todo:
        t0 = time.perf_counter()
        got = run_part(params, p, summaries, commit=commit, min_seeds=args.min_seeds,
                       progress=not args.quiet and pool is None, pool=pool, log=say)
        print(f"{p}: {len(got)} runs, {(time.perf_counter() - t0) / 60:.1f} min", flush=True)
    return 0


def _cmd_claims(args: argparse.Namespace) -> int:
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
        from ..audit import simulate_more as sim

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
