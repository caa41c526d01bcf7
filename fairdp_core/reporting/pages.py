"""The page registry (:data:`REPORTS`), and running its notebooks with papermill and rendering them to HTML (code
hidden); the front page is built in :mod:`fairdp_core.reporting.index`."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import write_text as _atomic_write
from ..audit.pooling import correlation_interval, mean_clipped, minimal_detectable_effect, seed_stats
from ..audit.stats import paired_seed_comparison, seed_mean_interval, seeds_for_power
from ..audit.verdicts import PAPER_QUOTED
from ..config import GENERATED_FILE, ConfigError, Params
from ..versions import package_versions
from .registry import NOTEBOOKS, REPORTS, Report
from .results import (
    ALGORITHM_LABELS,
    DATASET_LABELS,
    eps_label,
    load_summaries,
    run_table,
    setting_label,
)

__all__ = ["NOTEBOOKS", "REPORTS", "Report", "PAPER_EFFECTS_PP", "left_out_runs", "left_out_sentence", "audit_claims",
           "main_table", "notebook_parameters", "pilot_summary", "read_notebook", "run_notebook", "seeds_for_power"]

# The paper's effects at ε = 10 (DP-SGD-S − DP-SGD, pp), for power: Adult, Law, MNIST-CNN.
# the paper's quoted effects (DP-SGD-S minus DP-SGD, pp), from the one table of its quoted numbers
PAPER_EFFECTS_PP = {f"{ds.split('_')[0]}-{model}": q["dpsgd_s"] - q["dpsgd"]
                    for (ds, model, eps), q in PAPER_QUOTED.items() if eps == 10.0}




def notebook_parameters(params: Params, name: str) -> dict[str, object]:
    """What papermill injects into notebooks/<name>.py: paths and the parts of params it needs."""
    common = {
        "params_file": str(params.base_dir / "params.yaml"),
        "train_dir": str(params.resolve("results/train")), "results_dir": str(params.resolve("results/audit")),
        "prepared_dir": str(params.resolve(params.data.prepared_dir)),
        "figures_dir": str(params.resolve("reports/figures") / name),
        "metrics_path": str(params.resolve("reports/metrics") / f"{name}.json"),
        "runs": ({k: v.model_dump() for k, v in params.runs.items()} if REPORTS[name].runs == "all"
                 else membership_runs(params)), "profile": params.profile, "alpha": params.audit.alpha,
    }
    extra = REPORTS[name].parameters(params)
    return {**common, **extra}


def read_notebook(path: Path):
    """The notebook of a jupytext percent script, with deterministic cell ids (``cell-<i>``), so that a rerun
    renders byte-identical HTML."""
    import jupytext

    nb = jupytext.read(path)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
    nb.metadata.pop("jupytext", None)
    return nb


def run_notebook(params: Params, name: str) -> Path:
    """Execute notebooks/<name>.py (a jupytext percent script) with papermill (explicit kernel, execution timeout,
    parameters checked against the notebook's ``parameters`` cell both ways) and render reports/<name>.html with
    code hidden (except where the registry says ``show_code``). Stderr output (warnings) goes to this process's stderr, never into
    the report."""
    import sys

    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    if name not in NOTEBOOKS:
        raise ConfigError(f"unknown report {name!r}; known: {', '.join(NOTEBOOKS)}")
    src = params.resolve("notebooks") / f"{name}.py"
    provided = notebook_parameters(params, name)
    fig_dir = Path(provided["figures_dir"])
    if fig_dir.exists():
        shutil.rmtree(fig_dir)
    fig_dir.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as td:
        source = Path(td) / f"{name}.ipynb"
        nbformat.write(read_notebook(src), source)
        declared = set(pm.inspect_notebook(str(source)))
        unknown, missing = set(provided) - declared, declared - set(provided)
        if unknown or missing:
            raise ConfigError(f"{src}: parameters cell and params.yaml disagree: "
                              f"unknown to the notebook {sorted(unknown)}, not provided {sorted(missing)}")
        executed = Path(td) / f"{name}.out.ipynb"
        pm.execute_notebook(str(source), str(executed), parameters=provided, kernel_name=params.report.kernel,
                            execution_timeout=params.report.timeout_s, cwd=str(params.resolve("reports")),
                            progress_bar=False)
        nb = nbformat.read(executed, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # papermill inserts its injected-parameters cell with a random id
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        kept = []
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stderr":
                sys.stderr.write(o.get("text", ""))
            else:
                kept.append(o)
        if "outputs" in cell:
            cell["outputs"] = kept
    nb.metadata.pop("papermill", None)
    _findings_first(nb)
    show_code = REPORTS[name].show_code
    exporter = HTMLExporter(exclude_input=not show_code, exclude_input_prompt=True, exclude_output_prompt=True)
    if show_code:  # its code is the example; the pipeline's plumbing cells are tagged hide-input
        from nbconvert.preprocessors import TagRemovePreprocessor

        exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags=("hide-input",),
                                                             remove_cell_tags=("parameters", "injected-parameters")),
                                       enabled=True)
    body, _ = exporter.from_notebook_node(nb)
    body = body.replace("</body>", f'<p style="color:#666;font-size:0.85em;margin:2em">{provenance(params, name)}</p>\n'
                        "</body>", 1)
    out = params.resolve("reports") / f"{name}.html"
    _atomic_write(out, body)
    return out


def _findings_first(nb) -> None:
    """Move the cells tagged ``findings`` (computed last, from everything above them) to just after the page's title
    cell: every page opens with its question (the title) and its answer."""
    tagged = [c for c in nb.cells if "findings" in c.metadata.get("tags", [])]
    if not tagged:
        return
    rest = [c for c in nb.cells if not any(c is t for t in tagged)]
    title = next((i for i, c in enumerate(rest) if c.cell_type == "markdown" and c.source.lstrip().startswith("# ")), -1)
    nb.cells = rest[:title + 1] + tagged + rest[title + 1:]


def provenance(params: Params, page: str | None = None) -> str:
    """One line, HTML: the profile, the commit and the versions of torch, opacus, numpy and fairdp that built a page
    (``page``: its name; the commit is the last one that changed that page's own code, :func:`page_code_paths`)."""
    v = package_versions()
    paths = page_code_paths(params.base_dir, page) if page is not None else CODE_PATHS
    return (f"Profile <b>{html.escape(params.profile)}</b>, built from commit "
            f"<code>{html.escape(_commit(params.base_dir, paths))}</code> with "
            + ", ".join(f"{k} {html.escape(x)}" for k, x in v.items()) + ".")


# What builds a page when no stage of dvc.yaml says: the package, the notebooks and the pipeline definition.
CODE_PATHS = ("fairdp_core", "notebooks", "dvc.yaml", "pyproject.toml")


def page_code_paths(base: Path, page: str) -> tuple[str, ...]:
    """The code of the dvc.yaml stage that writes ``reports/<page>.html``: its deps under fairdp_core/ and
    notebooks/ (``${item}`` of a foreach read as the page's name). A page names the last commit that changed these,
    not HEAD and not the whole package: committing results, params, prose or code the page never imports leaves
    its bytes alone, and its stamp changes exactly when DVC reruns it for a code change. :data:`CODE_PATHS` where
    no stage writes the page."""
    import yaml

    try:
        stages = yaml.safe_load((Path(base) / "dvc.yaml").read_text())["stages"]
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return CODE_PATHS
    target = f"reports/{page}.html"
    for st in stages.values():
        body, items = (st["do"], foreach_items(base, st["foreach"])) if "foreach" in st else (st, None)
        if items is not None and (not isinstance(items, list) or page not in items):
            continue

        def sub(x: str) -> str:
            return x.replace("${item}", page) if items is not None else x

        outs = [sub(next(iter(o)) if isinstance(o, dict) else o) for o in body.get("outs", [])]
        if target in outs:
            return tuple(d for d in map(sub, body.get("deps", [])) if d.startswith(("fairdp_core", "notebooks")))
    return CODE_PATHS


def foreach_items(base: Path, items):
    """A dvc.yaml ``foreach`` as DVC reads it: the list as written, or ``${key}`` looked up in runs.yaml (the
    ``vars`` file ``fairdp grid --write`` generates); None when it cannot be read."""
    if not (isinstance(items, str) and items.startswith("${") and items.endswith("}")):
        return items
    import yaml

    try:
        generated = yaml.safe_load((Path(base) / GENERATED_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    return generated.get(items[2:-1])


def _commit(base: Path, paths: tuple[str, ...] = CODE_PATHS) -> str:
    """The short hash of the last commit that changed ``paths``, with "+uncommitted changes" when the working tree
    changes them; "unknown" outside a git checkout."""
    try:
        sha = subprocess.run(["git", "log", "-1", "--format=%h", "--", *paths], cwd=base, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *paths], cwd=base,
                               capture_output=True, text=True).stdout.strip()
        return (sha or "unknown") + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _q_range(lo: float, hi: float) -> str:
    """q over a configuration's models: one value, or the range (σ was calibrated at the largest)."""
    return f"{hi:.4g}" if f"{lo:.4g}" == f"{hi:.4g}" else f"{lo:.4g}–{hi:.4g} (σ calibrated at the largest)"


# Banks that exist for the beyond-membership page and stay off the membership pages: ε = 2 (the DP-SGD
# material's), the dataset variants (``source``), the Adult MLP and the MNIST CNN's SGD reference
BEYOND_EPSILONS = (2.0,)
BEYOND_SETTINGS = {("adult", "mlp", None), ("mnist", "cnn", "sgd")}  # (dataset, model, algorithm or None: all)


def _beyond_reason(params: Params, run) -> str | None:
    """Why ``run`` (a grid run) exists for the beyond-membership page and stays off the membership pages, in words
    (:data:`BEYOND_EPSILONS`, the dataset variants with ``source``, :data:`BEYOND_SETTINGS`); None for a
    membership run."""
    if params.data.datasets[run.dataset].source is not None:
        return f"{DATASET_LABELS.get(run.dataset, run.dataset)}, a dataset variant"
    if run.epsilon in BEYOND_EPSILONS:
        return f"ε = {run.epsilon:g}"
    if (run.dataset, run.model, None) in BEYOND_SETTINGS:
        return setting_label(run.dataset, run.model)
    if (run.dataset, run.model, run.algorithm) in BEYOND_SETTINGS:
        return f"{setting_label(run.dataset, run.model)} {ALGORITHM_LABELS[run.algorithm]}"
    return None


def membership_runs(params: Params) -> dict[str, dict]:
    """The runs the membership pages report (index, group_gpr, outcome_fairness, audit_comparison): all but those
    that exist for the beyond-membership page (:func:`left_out_runs`)."""
    return {k: v.model_dump() for k, v in params.runs.items() if _beyond_reason(params, v) is None}


def left_out_runs(params: Params) -> dict[str, list[str]]:
    """The runs of the profile that the membership pages leave out (:func:`membership_runs`), by reason in words:
    none is left out silently, and each page that reads :func:`membership_runs` says this."""
    out: dict[str, list[str]] = {}
    for k, v in params.runs.items():
        reason = _beyond_reason(params, v)
        if reason is not None:
            out.setdefault(reason, []).append(k)
    return out


def left_out_sentence(params: Params) -> str:
    """One sentence naming what :func:`left_out_runs` leaves out and why ("" when nothing is)."""
    lo = left_out_runs(params)
    if not lo:
        return ""
    n = sum(map(len, lo.values()))
    parts = "; ".join(f"{reason}: {len(v)}" for reason, v in lo.items())
    return (f"Left out of this page: {n} {'run' if n == 1 else 'runs'} of the profile that exist for the Beyond "
            f"membership page ({parts}).")


def n_classes_of(params: Params, dataset: str) -> int:
    """The number of label classes of ``dataset`` (a study dataset, or a variant naming one with ``source``)."""
    from ..data.loaders import DATASET_CLASSES

    opts = params.data.datasets.get(dataset)
    return DATASET_CLASSES[(opts.source if opts is not None else None) or dataset]


def _grid_run_table(params: Params) -> pd.DataFrame:
    """:func:`run_table` of the grid's runs (the sweep's, which carry their own τ, left out; and those of the
    beyond-membership page, :func:`membership_runs`)."""
    runs = {k: v for k, v in membership_runs(params).items() if v["tau"] is None}
    return run_table(load_summaries(params.resolve("results/audit"), runs), runs)


def main_table(params: Params, attack: str = "alooa_cross_fit", df: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per dataset × model × ε × algorithm (grid runs): accuracy beside the majority-class rate with a degenerate
    flag, Δ (mean over seeds; SD; interval), its null floor, the two-group contrast, and the accounting."""
    df = _grid_run_table(params) if df is None else df  # ``df``: the grid's run table when the caller has it
    df = df[df.attack == attack]
    keys = ["dataset", "model", "epsilon", "algorithm"]
    rows = [pd.concat([pd.Series(dict(zip(keys, k))), seed_stats(g, params.audit.alpha, n_classes_of(params, k[0]))])
            for k, g in df.groupby(keys, dropna=False, sort=False)]
    out = pd.DataFrame(rows)
    if len(out):
        out.insert(4, "label", out["algorithm"].map(ALGORITHM_LABELS))
        out.insert(5, "setting", [setting_label(d, m) for d, m in zip(out["dataset"], out["model"])])
        out.insert(6, "eps_label", out["epsilon"].map(eps_label))
    return out


def audit_claims(params: Params, df: pd.DataFrame | None = None) -> dict[str, object]:
    """The paper's claim about its audit, "PA-ALOOA agrees with PA-LOOA and is stricter than PA-GA/PA-GBA", on this
    profile's runs. ``strictness``: per rival attack, PA-ALOOA's GPR level (mean over groups, pp; the paper's
    in-sample estimator and the cross-fitted one) minus the rival's, over the DP runs of the grid: the mean over
    runs with its t interval and in how many runs PA-ALOOA is higher. ``looa``: per PA-LOOA run, PA-LOOA against
    PA-ALOOA on the same target records: Pearson r (Fisher-z interval, jackknife SE), Spearman ρ, the mean difference of the
    cross-fitted advantages (pp, t interval over targets)."""
    df = _grid_run_table(params) if df is None else df
    dp = df[df.algorithm != "sgd"].copy()
    dp["level_pp"] = [100 * float(np.mean(g)) if g is not None else np.nan for g in dp["gpr"]]
    lev = dp.pivot_table(index="run", columns="attack", values="level_pp")
    strict = {}
    for ours in ("alooa_in_sample", "alooa_cross_fit"):
        for rival in ("ga", "gba"):
            if {ours, rival} <= set(lev.columns):
                d = (lev[ours] - lev[rival]).dropna().to_numpy()
                ci = seed_mean_interval(d, alpha=params.audit.alpha)
                strict[f"{ours}-{rival}"] = {"mean_pp": ci["mean"], "lo": ci["lo"], "hi": ci["hi"], "runs": len(d),
                                             "higher": int((d > 0).sum())}
    looa = {}
    for name in params.audit.looa.runs:
        path = params.resolve("results/audit") / name / "looa.csv"
        if not path.is_file():
            continue
        t = pd.read_csv(path)
        c = correlation_interval(t["looa_cross_fit"], t["alooa_cross_fit"], alpha=params.audit.alpha)
        diff = seed_mean_interval(100 * (t["looa_cross_fit"] - t["alooa_cross_fit"]).to_numpy(), alpha=params.audit.alpha)
        looa[name] = {**c, "R_prime": params.audit.looa.R, "mean_diff_pp": diff["mean"], "diff_lo": diff["lo"],
                      "diff_hi": diff["hi"], "looa_pp": 100 * float(t["looa_cross_fit"].mean()),
                      "alooa_pp": 100 * float(t["alooa_cross_fit"].mean())}
    return {"strictness": strict, "looa": looa}


# The DP-SGD-S rules a pilot compares with DP-SGD (pilot_summary)
RULES = ("dpsgd_s", "dpsgd_s_paper", "dpsgd_s_paper_code")


def pilot_summary(params: Params, name: str = "pilot", effective: dict[str, dict] | None = None) -> Path:
    """The power pilot (profiles/pilot.yaml): per seed Δ (cross-fitted and in-sample) and the contrast for DP-SGD and
    DP-SGD-S; their between-seed SDs, the SD of the paired difference, the seeds each paper effect needs for 80%
    power, and the minimal detectable effect at the seeds run; the same paired comparison for the paper code's rules;
    per-group clipped fractions. Written to reports/paper/<name>.json. ``effective``: each run's TrainSpec fields
    (the plan stage's, after overrides); the design line states them."""
    if not params.profile.startswith("pilot"):
        raise ConfigError(f"params.yaml is the {params.profile!r} profile; run a pilot first (`make repro "
                          "PROFILE=pilot`, pilot_law or pilot_mnist_cnn)")
    df = _grid_run_table(params)
    # the EFFECTIVE settings (run -> TrainSpec fields after every override, as the plan stage wrote them)
    t = params.train
    eff = effective or {n: {"lr": t.lr, "epochs": t.epochs, "clip": t.clip} for n in df["run"].unique()}
    lrs = sorted({e["lr"] for e in eff.values()})
    epochs = sorted({e["epochs"] for e in eff.values()})
    clips = sorted({e["clip"] for e in eff.values() if "clip" in e})
    out: dict[str, object] = {"design": f"m = {params.audit.m}, 2R = {2 * params.audit.R}, epochs "
                              f"{'/'.join(f'{x:g}' for x in epochs)}, batch {params.train.batch_size}, lr "
                              f"{'/'.join(f'{x:g}' for x in lrs)}, clip {'/'.join(f'{x:g}' for x in clips)} "
                              f"(effective settings), commit {_commit(params.base_dir)}", "configs": {}}
    for (ds, model, eps), g in df.groupby(["dataset", "model", "epsilon"], sort=True):
        cfg: dict[str, object] = {"per_seed": {}, "sd": {}, "paired": {}, "paired_rules": {},
                                  "clipped_fraction": {a: mean_clipped(ga) for a, ga in
                                                       g[g.attack == "alooa_cross_fit"].groupby("algorithm")}}
        for attack, col, key in (("alooa_cross_fit", "delta_pp", "delta_pp"), ("alooa_cross_fit", "contrast_pp",
                                 "contrast_pp"), ("alooa_in_sample", "delta_pp", "delta_in_sample_pp"),
                                 ("alooa_cross_fit", "accuracy", "accuracy")):
            w = g[g.attack == attack].pivot(index="seed", columns="algorithm", values=col).sort_index()
            cfg["per_seed"][key] = {a: w[a].tolist() for a in w.columns}
            cfg["sd"][key] = {a: float(w[a].std(ddof=1)) for a in w.columns}
            for rule in RULES:
                if {"dpsgd", rule} <= set(w.columns):
                    pair = w[["dpsgd", rule]].dropna()
                    r = paired_seed_comparison(pair[rule].to_numpy(), pair["dpsgd"].to_numpy())
                    r["mde_80"] = minimal_detectable_effect(r["sd"], r["n_seeds"])
                    cfg["paired_rules"].setdefault(rule, {})[key] = r
                    if rule == "dpsgd_s":
                        cfg["paired"][key] = r
        sd_d = cfg["paired"].get("delta_pp", {}).get("sd")
        sd_in = cfg["paired"].get("delta_in_sample_pp", {}).get("sd")
        cfg["seeds_for_80_power"] = {
            name: {"cross_fit": seeds_for_power(sd_d, eff) if sd_d else None,
                   "in_sample": seeds_for_power(sd_in, eff) if sd_in else None, "effect_pp": eff}
            for name, eff in PAPER_EFFECTS_PP.items()}
        out["configs"][f"{ds}-{model}-e{eps:g}"] = cfg
    path = params.resolve("reports/paper") / f"{name}.json"
    _atomic_write(path, json.dumps(out, indent=1, default=float) + "\n")
    return path
