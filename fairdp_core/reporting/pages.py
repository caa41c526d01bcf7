"""Running the report notebooks with papermill, rendering them to HTML (code hidden), and the index page."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..atomic import write_text as _atomic_write
from ..audit.pooling import correlation_interval, mean_clipped, minimal_detectable_effect, seed_stats
from ..audit.stats import paired_seed_comparison, seed_mean_interval, seeds_for_power
from ..config import ConfigError, Params
from ..versions import package_versions
from .results import (
    ALGORITHM_LABELS,
    DATASET_LABELS,
    MODEL_LABELS,
    eps_label,
    load_summaries,
    run_label,
    run_table,
    setting_label,
)

__all__ = [
    "NOTEBOOKS",
    "REPORTS",
    "Report",
    "PAPER_EFFECTS_PP",
    "build_index",
    "left_out_runs",
    "left_out_sentence",
    "audit_claims",
    "main_table",
    "notebook_parameters",
    "pilot_summary",
    "read_notebook",
    "run_notebook",
    "seeds_for_power",
]

# The paper's effects at ε = 10 (DP-SGD-S − DP-SGD, pp), for power: Adult, Law, MNIST-CNN.
PAPER_EFFECTS_PP = {"adult-lr": 0.17 - 0.27, "law-lr": 0.41 - 0.59, "mnist-cnn": 2.91 - 3.54}


@dataclass(frozen=True)
class Report:
    """One report page: notebooks/<name>.py rendered to reports/<name>.html. ``title`` and ``question`` are its link
    on the index; ``parameters``: what papermill injects beyond the common paths (a function of the params);
    ``runs``: ``"membership"`` (the grid's membership runs; the runs kept for the beyond-membership page are left
    out and the page says so, :func:`left_out_runs`) or ``"all"``; ``show_code``: the page renders its code cells
    (a worked example to copy; the pipeline's plumbing cells are tagged hide-input)."""

    name: str
    title: str
    question: str
    parameters: Callable[[Params], dict]
    runs: str = "membership"
    show_code: bool = False


def _quickstart_parameters(p: Params) -> dict:
    """MNIST images for the Opacus quickstart: 5,000, or the prepared training set when smaller (smoke)."""
    return {"seed": p.seed, "epsilon_target": 10.0,
            "n_train": min(5000, (p.data.datasets["mnist"].train_size or 5000) if "mnist" in p.data.datasets else 5000)}


def _beyond_parameters(p: Params) -> dict:
    return {"beyond_dir": str(p.resolve("results/beyond")), "seed": p.seed, "beyond": p.beyond.model_dump(),
            "stored_utility": str(p.resolve("reports/paper/beyond_utility.json"))}


def _synthetic_parameters(p: Params) -> dict:
    return {"seed": p.seed, "synth_dir": str(p.resolve("results/synth")),
            "synth_audit_dir": str(p.resolve("results/synth_audit")), "synth": p.synth.model_dump(),
            "stored_synth_dir": str(p.resolve("reports/paper/synth"))}


# The report registry, in the index's order: the stages (dvc.yaml), the index's links, CI's checks and the tests
# derive from it (tests/test_pipeline.py checks that every entry has a stage writing its page).
REPORTS: dict[str, Report] = {r.name: r for r in (
    Report("audit_comparison", "Audit comparison",
           "Does PA-ALOOA agree with PA-LOOA, and is it stricter than PA-GA, PA-GBA, LiRA and RMIA? Δ and GPR by"
           " attack with each attack's null floor, and the estimators' bias under no leakage.",
           parameters=lambda p: {"looa_runs": list(p.audit.looa.runs), "n_null": p.audit.n_null, "seed": p.seed}),
    Report("dpsgd_s_sweep", "DP-SGD-S sweep (τ, γ)",
           "How do DP-SGD-S's τ and γ move Δ and accuracy against DP-SGD at the same ε (every setting shown, "
           "none selected)?",
           parameters=lambda p: {"sweep": None if p.sweep is None else p.sweep.model_dump()}),
    Report("group_gpr", "Group privacy risk",
           "Which groups does membership inference hit hardest, under SGD, DP-SGD and DP-SGD-S, on every dataset"
           " and ε? Δ against ε, accuracy against Δ, which groups DP-SGD-S made safer or riskier, and each rule "
           "(DP-SGD-S's variants and its rivals DPSGD-F, DPSGD-Global-Adapt, AdaClip) against DP-SGD, paired by "
           "seed where a profile runs two or more.",
           parameters=lambda p: {"seed": p.seed}),
    Report("outcome_fairness", "Outcome fairness",
           "Does DP-SGD-S trade privacy fairness for outcome fairness? Accuracy parity, demographic parity, "
           "equal opportunity and equalized odds per dataset and ε.",
           parameters=lambda p: {"n_boot": min(p.audit.n_boot, 500), "seed": p.seed}),
    Report("quickstart", "Quickstart for Opacus users",
           "How do I use this in my own Opacus loop? DP-SGD with make_private, ε from the accountant, the "
           "clipping bound chosen privately, then DP-SGD-S with make_private_dpsgd_s and its rivals DPSGD-F, "
           "DPSGD-Global-Adapt and AdaClip (MNIST, run in the pipeline).",
           parameters=_quickstart_parameters, show_code=True),
    Report("beyond_membership", "Beyond membership",
           "Does DP-SGD also protect against attribute inference and model inversion, and do these risks, like "
           "membership, fall unequally on groups? Success and advantage per group, members against non-members, "
           "SGD against DP-SGD at each ε of the profile; DP-SGD's utility on MNIST at ε = 2.",
           parameters=_beyond_parameters, runs="all"),
    Report("synthetic_data", "DP synthetic data (DPDSyn)",
           "A second route to DP: does task-oriented DP synthetic data (DPDSyn) beat MST and DP GANs, approach "
           "DP-SGD on the real data, and spread membership risk across groups more evenly than DP-SGD? "
           "Train-on-synthetic accuracy per group, fidelity, the group audit, verdicts.",
           parameters=_synthetic_parameters),
)}
NOTEBOOKS = tuple(REPORTS)


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
        body, items = (st["do"], st["foreach"]) if "foreach" in st else (st, None)
        if items is not None and (not isinstance(items, list) or page not in items):
            continue

        def sub(x: str) -> str:
            return x.replace("${item}", page) if items is not None else x

        outs = [sub(next(iter(o)) if isinstance(o, dict) else o) for o in body.get("outs", [])]
        if target in outs:
            return tuple(d for d in map(sub, body.get("deps", [])) if d.startswith(("fairdp_core", "notebooks")))
    return CODE_PATHS


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
    from ..data.names import DATASET_CLASSES

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


def _num(x, digits=2, unit=""):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{digits}f}{unit}"


_INDEX_CSS = """body{font-family:system-ui,sans-serif;max-width:1320px;margin:1.5em auto;color:#222;line-height:1.4}
td,th{border-bottom:1px solid #ddd;padding:2px 6px;font-size:13px;vertical-align:top;text-align:left}
table{border-collapse:collapse;margin:0.6em 0 1em}caption{text-align:left;font-size:13px;color:#444;padding:4px 0}
.findings{background:#f5f8fc;border:1px solid #c9d8ea;border-radius:6px;padding:0.4em 1em 0.6em;margin:1em 0}
.findings h2{margin-top:0.3em}.small{font-size:11px;color:#555}tr.ds th{background:#eef1f4;font-size:14px}
tr.acct td{font-size:11px;color:#666;border-bottom:1px solid #ccc;padding-top:0}tr.main td{border-bottom:none}
details{margin:0.8em 0}.nw{white-space:nowrap}summary{font-weight:600;cursor:pointer}.meta{color:#555;font-size:13px}"""


def _accounting_line(r: pd.Series) -> str:
    if r.algorithm == "sgd":
        return "no noise: not private"
    spent = "∞" if not np.isfinite(r.eps_spent) else f"{r.eps_spent:.3f}"
    if not r.guaranteed:
        spent += " (not guaranteed: statistics not privatised)"
    sig = f"σ_g = {r.sigma_g:.4g}"
    sig += "" if pd.isna(r.sigma_b) else f", σ_b = {r.sigma_b:.3g}"
    sig += "" if pd.isna(r.get("sigma_s", np.nan)) else f", σ_s = {r.sigma_s:.3g}"
    clip = "" if not isinstance(r.clipped_fraction, dict) else "; clipped (diagnostic outside ε): " + ", ".join(
        f"{'group ' if str(k).isdigit() else ''}{k}: {100 * v:.0f}%" for k, v in r.clipped_fraction.items())
    return (f"{sig}, q = {_q_range(r.q_min, r.q)}, T = {int(r['T']):,}, Poisson sampling, {r.accountant.upper()} "
            f"accountant, δ = {r.delta:g}, ε spent = {spent} (max over the models){clip}")


CORE_ALGORITHMS = ("sgd", "dpsgd", "dpsgd_s")
MAIN_HEAD = ("<tr><th>model</th><th>ε</th><th>algorithm</th><th>seeds</th><th>accuracy</th><th>accuracy 95% CI</th>"
             "<th>majority class</th><th>degenerate</th><th>Δ pp ± SD</th><th>Δ 95% interval</th><th>null floor pp</th>"
             "<th>contrast pp [95% CI]</th></tr>")


def _main_rows(agg: pd.DataFrame) -> str:
    """The main table's body: a header row per dataset, then per configuration a row of numbers and a compact
    accounting row beneath it."""
    out = []
    agg = agg.assign(_e=agg["epsilon"].fillna(0.0))
    order = list(dict.fromkeys(agg["dataset"]))
    for ds in order:
        g = agg[agg.dataset == ds].sort_values(["model", "_e"], kind="stable")
        out.append(f"<tr class='ds'><th colspan='12'>{html.escape(DATASET_LABELS.get(ds, ds))}</th></tr>")
        for _, r in g.iterrows():
            one = r.seeds == 1
            acc = f"{100 * r.accuracy:.1f}%" + ("" if one else f" ± {100 * r.accuracy_sd:.2f} pp")
            acc_ci = ("— (one seed)" if one or not np.isfinite(r.accuracy_lo) else
                      f"[{100 * r.accuracy_lo:.1f}, {100 * r.accuracy_hi:.1f}]")
            flag = ("<b title='≥ 99% of test predictions in one class, or balanced accuracy below chance + 0.02 (0.52 with two classes, 0.12 with ten)'>⚠ degenerate"
                    "</b>" if r.degenerate else "no")
            sd = "± — (one seed)" if one else f"± {_num(r.delta_sd)}"
            if np.isfinite(r.p_seed_heterogeneity) and r.p_seed_heterogeneity < 0.05:
                sd += (f" <b title='Cochran Q p = {r.p_seed_heterogeneity:.3f}: the seeds disagree beyond their "
                       "within-seed intervals'>⚠ seeds disagree</b>")
            contrast = ("n/a: more than two groups" if not np.isfinite(r.contrast_pp) else
                        f"{r.contrast_pp:+.2f} [{r.contrast_lo:+.2f}, {r.contrast_hi:+.2f}]")
            eps = "no DP" if pd.isna(r.epsilon) else f"{r.epsilon:g}"
            out.append(
                f"<tr class='main'><td>{MODEL_LABELS.get(r.model, r.model)}</td><td class='nw'>{eps}</td><td>{ALGORITHM_LABELS[r.algorithm]}"
                f"</td><td>{int(r.seeds)}</td><td>{acc}</td><td>{acc_ci}</td><td>{_num(100 * r.majority_rate, 1, '%')}"
                f"</td><td>{flag}</td><td>{r.delta_pp:.2f} {sd}</td><td>[{_num(r.delta_lo)}, {_num(r.delta_hi)}]"
                f"</td><td>{_num(r.null_floor_pp)}</td><td>{contrast}</td></tr>"
                f"<tr class='acct'><td></td><td colspan='11'>{html.escape(_accounting_line(r))}</td></tr>")
    return "".join(out)


def build_index(params: Params, *, first_screen: str = "", claims: str = "") -> Path:
    """reports/index.html: the findings box (the paper's claims: its value, this study's estimate with CI and seeds,
    a verdict), the reports with what each answers, the main table grouped by dataset with the accounting of every
    row, then the details (verdicts by source, the stored paper-profile run, the power pilots, how to read); plus
    reports/main_table.csv and reports/metrics.json (DVC metrics)."""
    df = _grid_run_table(params)  # read once: the main table and the findings box share it
    agg = main_table(params, df=df)
    evidence: list[dict] = []  # the paper's claims are decided by the claims campaign only (claims_report)
    links = "".join(f'<li><a href="{r.name}.html">{r.title}</a>: {html.escape(r.question)}</li>'
                    for r in REPORTS.values())
    design = (f"Audit: PA-ALOOA, cross-fitted estimator, {params.audit.m} audited records, 2R = {2 * params.audit.R} "
              "models per configuration.")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>fairdp results</title>
<style>{_INDEX_CSS}</style></head><body>
<h1>fairdp: group privacy risk under DP-SGD and DP-SGD-S</h1>
<p class="meta">Δ: the largest gap in group membership risk (pp).
<a href="#how-to-read">How to read these numbers</a>.</p>
{first_screen}
<h2>Reports</h2><ul>{links}</ul>
{claims}
{_findings_box(params, evidence, df, agg, meta=f"{provenance(params, 'index')} {design}")}
<details id="main-results"><summary>Main results of this profile: {len(agg[agg.algorithm.isin(CORE_ALGORITHMS)])} rows
(SGD, DP-SGD, DP-SGD-S; accuracy, Δ with its interval and null floor, the accounting of every row)</summary>
<table><caption>Per dataset, model, ε and algorithm (PA-ALOOA cross-fitted): accuracy (mean ± SD over seeds, the 95% t
interval of the mean) beside the majority-class rate and a degenerate-model flag; Δ (pp, mean ± SD over seeds) with its
simultaneous 95% interval and null floor; the two-group contrast (pp, 95% CI). The grey line under each row is its
privacy accounting. SGD, DP-SGD and DP-SGD-S here; DP-SGD-S's other versions and its rivals in the table below it.
All rows with every column: <a href="main_table.csv">main_table.csv</a>.</caption>
{MAIN_HEAD}{_main_rows(agg[agg.algorithm.isin(CORE_ALGORITHMS)])}</table></details>
<details><summary>DP-SGD-S's other versions (the paper code's rule, made DP and as the code has it; as first described)
and its rivals (DPSGD-F, DPSGD-Global-Adapt, AdaClip): {int((~agg.algorithm.isin(CORE_ALGORITHMS)).sum())} more rows,
same columns</summary><table><caption>As the main table, for the other rules.</caption>
{MAIN_HEAD}{_main_rows(agg[~agg.algorithm.isin(CORE_ALGORITHMS)])}</table></details>
<details id="how-to-read"><summary>How to read these numbers</summary>
<p class="small">GPR is a group's mean per-record advantage (the expected held-out TPR − FPR at this R, a lower
estimate; the paper's in-sample estimator is an upper one). Δ = max − min over groups of GPR, in percentage points
(pp). A max − min is biased upward when groups are close: read it beside its <b>null floor</b>, the mean Δ when the
group labels are permuted among the audited records (same design and estimator). Intervals are 95% and simultaneous
over the pairs of groups (Bonferroni): each pairwise contrast's variance is the crossed records × model pairs one
(model-level effects included), pooled over seeds as the mean of independent audits (a ⚠ marks seeds that disagree
beyond it, Cochran's Q p &lt; 0.05). Their coverage was checked by simulation
(<code>reports/coverage/coverage.md</code>). For two groups the signed contrast GPR(first group) − GPR(second) is given
with its interval. A row is flagged <b>degenerate</b> when ≥ 99% of its test predictions fall in one class or its
balanced accuracy is below chance + 0.02 (0.52 with two classes, 0.12 with MNIST's ten): its Δ describes a model
that has not learned the task. The accounting line ends with
each group's share of per-sample gradients clipped during training (a diagnostic outside ε): a group-specific bound
matters only where clipping binds.</p></details>
</body></html>"""
    out = params.resolve("reports") / "index.html"
    _atomic_write(out, page)
    # The headline DVC metrics (what `dvc exp show` and `fairdp exp show` list): accuracy and Δ with its simultaneous
    # 95% interval per configuration. The whole table, accounting included, goes beside it as main_table.csv.
    metrics = {f"{r.dataset}-{r.model}-{r.algorithm}" + ("" if pd.isna(r.epsilon) else f"-e{r.epsilon:g}"):
               {"accuracy": round(float(r.accuracy), 5), "delta_pp": round(float(r.delta_pp), 4),
                "delta_lo": round(float(r.delta_lo), 4), "delta_hi": round(float(r.delta_hi), 4)}
               for _, r in agg.iterrows()}
    _atomic_write(params.resolve("reports") / "main_table.csv", agg.to_csv(index=False, float_format="%.6g"))
    _atomic_write(params.resolve("reports") / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    return out


# The DP-SGD-S rules a pilot compares with DP-SGD (pilot_summary)
RULES = ("dpsgd_s", "dpsgd_s_paper", "dpsgd_s_paper_code")


def _outcome_line(params: Params) -> str:
    """The largest outcome-fairness change of DP-SGD-S against DP-SGD (from the outcome-fairness report's metrics):
    not one of the paper's claims, but the largest effect the study measures."""
    path = params.resolve("reports/metrics") / "outcome_fairness.json"
    if not path.is_file():
        return ""
    m = json.loads(path.read_text())
    rows = {}
    for k, v in m.items():
        if k.startswith("dpsgd_s_vs_dpsgd.") and k.endswith(".equal_opportunity.change"):
            rows[k.split(".")[1]] = v
    if not rows:
        return ""
    key = max(rows, key=lambda k: abs(rows[k]))
    base = f"dpsgd_s_vs_dpsgd.{key}.equal_opportunity"
    lo, hi = m.get(f"{base}.lo"), m.get(f"{base}.hi")
    drop = {f: m.get(f"tpr_drop.{key}.{f}") for f in ("group", "dpsgd", "dpsgd_s")}
    ds, model, eps = key.split("-")[0], key.split("-")[1], key.split("-e")[-1]
    where = f"{setting_label(ds, model)}, ε = {eps}"
    tpr = ("" if drop["group"] is None else
           f": the true-positive rate of group {html.escape(str(drop['group']))} falls from "
           f"{100 * drop['dpsgd']:.1f}% to {100 * drop['dpsgd_s']:.1f}%")
    return (f"<p><b>Outcome fairness</b> (not a claim of the paper; the largest of {len(rows)} equal-opportunity "
            f"changes, picked after the fact, its interval not adjusted for that): on {where}, "
            f"DP-SGD-S (the study's quantile reading) changes the equal-opportunity gap by {100 * rows[key]:+.1f} pp "
            f"[{100 * lo:+.1f}, {100 * hi:+.1f}] against DP-SGD (mean over every pair of models of the two banks, "
            f"paired bootstrap over test records){tpr}. See <a href='outcome_fairness.html'>outcome fairness</a>.</p>")


def this_run_detections(dp: pd.DataFrame, alpha: float = 0.05) -> tuple[int, int]:
    """(configurations whose Δ > 0 survives Holm's correction over every configuration with a p-value, how many had
    one): each configuration's ``p_delta`` (already Holm-adjusted over its group pairs) adjusted again over the
    configurations, so that 1 of 32 unadjusted exclusions, the chance rate, is not read as a detection."""
    from ..audit.inference import holm

    p = dp["p_delta"].to_numpy(float) if len(dp) and "p_delta" in dp else np.array([])
    p = p[np.isfinite(p)]
    return (int((holm(p) <= alpha).sum()) if len(p) else 0), len(p)


def _findings_box(params: Params, evidence: list[dict], df: pd.DataFrame, agg: pd.DataFrame, *,
                  meta: str = "") -> str:
    """What this profile's own runs say (the paper's claims are decided by the claims campaign, above it): can its
    audit tell any group's risk apart; the audit claims; the largest outcome-fairness effect."""
    # this run's own answer: can its audit tell any group's risk apart?
    dp = agg[agg.algorithm != "sgd"] if len(agg) else agg
    n_excl = int((dp["delta_lo"] > 0).sum()) if len(dp) else 0
    n_below = int((dp["delta_pp"] < dp["null_floor_pp"]).sum()) if len(dp) else 0
    n_adj, n_tested = this_run_detections(dp)
    adjusted = (f"; after Holm's correction over the {n_tested} with a p-value, <b>{n_adj}</b>" if n_tested else
                "; no configuration has a p-value to correct, so none counts as detected")
    null_line = (f"<p><b>This run</b> ({params.profile} profile, m = {params.audit.m}, 2R = {2 * params.audit.R}): "
                 f"Δ's 95% interval excludes 0 in {n_excl} of {len(dp)} DP configurations (unadjusted: about "
                 f"{0.05 * len(dp):.1f} would by chance alone){adjusted}. {n_below} of the {len(dp)} have a Δ below "
                 f"its null floor (the Δ that permuted group labels give): "
                 + ("<b>no group disparity is detectable at this scale</b>; the verdicts above rest on the claims "
                    "campaign's larger design." if n_adj == 0 else
                    f"group disparities are detectable in {n_adj} configuration{'s' * (n_adj != 1)} (main table, "
                    "column p (Holm)).") + "</p>")
    audit = audit_claims(params, df)
    audit_rows = []
    widest = float(agg["delta_pp"].max()) if len(agg) else float("nan")
    for k, v in audit["looa"].items():
        run = params.runs[k].model_dump()
        covers = v["diff_lo"] is not None and v["diff_lo"] <= 0 <= v["diff_hi"]
        half = (v["diff_hi"] - v["diff_lo"]) / 2 if v["diff_lo"] is not None else float("nan")
        if not covers:
            verdict = "<b>contradicted</b>: the levels differ"
        elif v["lo"] > 0:
            verdict = f"<b>consistent</b>: no level difference beyond ±{half:.1f} pp, and r &gt; 0"
        else:
            verdict = (f"<b>inconclusive</b>: no level difference beyond ±{half:.1f} pp (wider than the largest Δ of "
                       f"this run, {widest:.1f} pp), and the record-level correlation is not distinguishable from 0")
        audit_rows.append(
            f"<tr><td>PA-ALOOA agrees with PA-LOOA</td><td>agrees</td><td>{html.escape(run_label(run))}: "
            f"{v['n']} targets, R' = {v['R_prime']}; r = {v['r']:.2f} [{v['lo']:.2f}, {v['hi']:.2f}]; LOOA − ALOOA "
            f"{v['mean_diff_pp']:+.2f} pp [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]</td><td>{verdict}</td></tr>")
    for rival, name in (("ga", "PA-GA"), ("gba", "PA-GBA")):
        ins, cf = audit["strictness"].get(f"alooa_in_sample-{rival}"), audit["strictness"].get(f"alooa_cross_fit-{rival}")
        if not ins or not cf or ins["lo"] is None or cf["lo"] is None:
            continue
        # the in-sample estimator's level carries its own upward bias (it scores the pairs it fits its threshold
        # on): strictness holds for the paper's estimator; the unbiased cross-fitted level is the check
        if ins["lo"] > 0 and cf["hi"] < 0:
            verdict = ("<b>true for the paper's in-sample estimator, explained by its own bias</b> (no leakage gives "
                       "it a high level); <b>reversed</b> once cross-fitted")
        elif cf["lo"] > 0:
            verdict = "<b>reproduced</b>, cross-fitted too"
        else:
            verdict = "<b>inconclusive</b>"
        audit_rows.append(
            f"<tr><td>PA-ALOOA is stricter than {name}</td><td>stricter</td><td>GPR level, PA-ALOOA − {name}, over "
            f"{cf['runs']} DP runs: in-sample (the paper's estimator) {ins['mean_pp']:+.1f} pp "
            f"[{ins['lo']:+.1f}, {ins['hi']:+.1f}] (higher in {ins['higher']}); cross-fitted (unbiased) "
            f"{cf['mean_pp']:+.1f} pp [{cf['lo']:+.1f}, {cf['hi']:+.1f}] (higher in {cf['higher']}). {name} fits its "
            f"thresholds on the audited pairs too; its level under no leakage is not measured here</td>"
            f"<td>{verdict}</td></tr>")
    return (
        f"<div class='findings' id='this-run'><h2>This profile's own runs</h2><p class='meta'>{meta}</p>{null_line}"
        f"{_outcome_line(params)}"
        + ("" if not audit_rows else
           "<table><caption>The paper's audit claims (PA-LOOA: the Fisher-z interval of r with a jackknife SE, the "
           "t interval of the mean difference over targets; GPR levels: mean over this grid's DP runs with the t "
           "interval over runs)</caption><tr><th>claim</th><th>paper</th><th>this study</th><th>verdict</th></tr>"
           f"{''.join(audit_rows)}</table>")
        + "</div>")


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
