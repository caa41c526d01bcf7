"""Statistics over seeds (fairdp_core.audit.pooling), the report registry and the runs a page leaves out.

Hand-computed cases: a seed-averaged group GPR and its pooled interval, Δ's simultaneous interval over two seeds of
a two-group bank, the degenerate flag at its boundaries, the minimal detectable effect against its formula.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as st

from fairdp_core.audit.pooling import (
    group_gpr_over_seeds,
    mean_clipped,
    minimal_detectable_effect,
    pooled_delta,
    seed_stats,
)

from .conftest import ROOT


def test_group_gpr_over_seeds_by_hand():
    """Two seeds of one group: GPR 0.02 ± 0.01 and 0.04 ± 0.02 (95% half-widths). SE = half-width / 1.95996; the
    mean 3 pp; Var = (SE1² + SE2²) / 4, so the half-width is √(1² + 2²) / 2 = 1.118 pp. One seed alone keeps its own
    interval exactly. (A z of 1.96 where the level says otherwise, or the seeds' variances not divided by S², fail.)"""
    rows = pd.DataFrame({"group": ["a", "a", "b"], "seed": [0, 1, 0], "gpr": [0.02, 0.04, 0.10],
                         "gpr_lo": [0.01, 0.02, 0.07], "gpr_hi": [0.03, 0.06, 0.13]})
    out = group_gpr_over_seeds(rows, ["group"], alpha=0.05).set_index("group")
    assert out.loc["a", "seeds"] == 2 and out.loc["a", "gpr_pp"] == pytest.approx(3.0)
    assert out.loc["a", "hi_pp"] - out.loc["a", "gpr_pp"] == pytest.approx(np.sqrt(1 + 4) / 2, rel=1e-12)
    assert (out.loc["b", "lo_pp"], out.loc["b", "hi_pp"]) == pytest.approx((7.0, 13.0), rel=1e-12)
    # at 90% the same intervals read as 90% ones: one seed keeps them, and the pooled half-width scales alike
    out90 = group_gpr_over_seeds(rows, ["group"], alpha=0.10).set_index("group")
    assert (out90.loc["b", "lo_pp"], out90.loc["b", "hi_pp"]) == pytest.approx((7.0, 13.0), rel=1e-12)


def _seed_rows(diffs, ses, dfs=(500, 500)):
    """A two-group configuration over seeds, as the run table holds it (one contrast per seed)."""
    return pd.DataFrame({
        "seed": range(len(diffs)), "m": 100, "n_train": 100,
        "contrasts": [[{"k": 0, "l": 1, "diff": d, "se": s, "df": f, "p": 0.5}] for d, s, f in zip(diffs, ses, dfs)],
        "gpr": [[0.01, 0.01 + d] for d in diffs]})


def test_pooled_delta_by_hand():
    """Two seeds, contrasts 0.02 and 0.04 with SE 0.01 each, every record audited (shared = 1, no record
    component given): the pooled contrast 3 pp with SE √(0.01² + 0.01²) / 2; one pair, so Δ's interval is the
    contrast's |interval| (0 when it holds 0) and the plug-in Δ is that of the seed-averaged GPRs."""
    out = pooled_delta(_seed_rows([0.02, 0.04], [0.01, 0.01]), alpha=0.05)
    se = np.sqrt(2e-4) / 2
    assert out["contrast_pp"] == pytest.approx(3.0)
    half = out["contrast_hi"] - out["contrast_pp"]
    t = half / (100 * se)
    assert st.norm.ppf(0.975) < t < st.t.ppf(0.975, 100)  # a t quantile with a large Satterthwaite df
    assert (out["delta_lo"], out["delta_hi"]) == pytest.approx((out["contrast_lo"], out["contrast_hi"]))
    assert out["delta_pooled_pp"] == pytest.approx(3.0)
    holds0 = pooled_delta(_seed_rows([0.01, -0.01], [0.01, 0.01]), alpha=0.05)
    assert holds0["delta_lo"] == 0.0 and holds0["delta_hi"] > 0


def _config(**kw):
    base = {"seed": [0, 1], "accuracy": [0.80, 0.82], "majority_rate": [0.75, 0.75], "top_pred_share": [0.9, 0.9],
            "balanced_accuracy": [0.7, 0.7], "delta_pp": [1.0, 2.0], "delta_lo": [0.5, 1.0], "delta_hi": [2.0, 3.0],
            "p_delta": [0.01, 0.01], "null_floor_pp": [0.1, 0.2], "sigma_g": [1.0, 1.0], "sigma_b": [None, None],
            "q": [0.01, 0.01], "q_min": [0.01, 0.01], "T": [100, 100], "delta": [1e-5, 1e-5],
            "accountant": ["rdp", "rdp"], "eps_spent": [9.9, 10.0], "guaranteed": [True, True]}
    base.update(kw)
    return pd.DataFrame(base)


def test_seed_stats_means_and_degenerate_boundaries():
    """Means over seeds, the SD with ddof 1, and the degenerate flag: 99% of predictions in one class, or balanced
    accuracy below 0.52 (the rule's boundaries on both sides)."""
    s = seed_stats(_config())
    assert s["seeds"] == 2 and s["accuracy"] == pytest.approx(0.81) and s["delta_sd"] == pytest.approx(np.sqrt(0.5))
    assert s["eps_spent"] == 10.0 and not s["degenerate"]
    assert seed_stats(_config(top_pred_share=[0.99, 0.5]))["degenerate"]
    assert not seed_stats(_config(top_pred_share=[0.989, 0.5]))["degenerate"]
    assert seed_stats(_config(balanced_accuracy=[0.519, 0.519]))["degenerate"]
    assert not seed_stats(_config(balanced_accuracy=[0.52, 0.52]))["degenerate"]
    # ten classes: chance is 0.1, so 0.3 balanced accuracy has learned something and 0.119 has not
    assert not seed_stats(_config(balanced_accuracy=[0.3, 0.3]), n_classes=10)["degenerate"]
    assert seed_stats(_config(balanced_accuracy=[0.119, 0.119]), n_classes=10)["degenerate"]
    # no balanced accuracy stored: accuracy against the majority rate + 0.005
    assert seed_stats(_config(balanced_accuracy=[None, None], accuracy=[0.754, 0.754]))["degenerate"]
    assert not seed_stats(_config(balanced_accuracy=[None, None], accuracy=[0.756, 0.756]))["degenerate"]


def test_one_degenerate_definition_everywhere():
    """Pooling, tuning, the custom audit and the claims verdicts all call verdicts.is_degenerate: no module states
    the thresholds again."""
    import re

    pkg = ROOT / "fairdp_core"
    offenders = [str(p.relative_to(ROOT)) for p in pkg.rglob("*.py") if p.name != "verdicts.py"
                 and re.search(r">=\s*0\.99\b|0\.99\s*<=|<\s*0\.52|\+\s*0\.005", p.read_text())]
    assert offenders == []



def test_mean_clipped_and_minimal_detectable_effect():
    g = pd.DataFrame({"clipped_fraction": [{"a": 0.1, "b": 0.3}, {"a": 0.3, "b": None}]})
    assert mean_clipped(g) == {"a": pytest.approx(0.2), "b": pytest.approx(0.3)}
    sd, n = 0.5, 10
    assert minimal_detectable_effect(sd, n) == pytest.approx((st.t.ppf(0.975, 9) + st.t.ppf(0.8, 9)) * sd / n ** 0.5)
    assert minimal_detectable_effect(sd, 1) == float("inf")


def test_every_registered_report_has_a_stage_and_a_link():
    """The report registry is the one list: each entry has a dvc.yaml stage that writes reports/<name>.html and a
    notebook, the index links every entry, and CI's smoke check reads the registry."""
    from fairdp_core.reporting.pages import REPORTS, foreach_items

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    written = set()
    for st_ in stages.values():
        items = foreach_items(ROOT, st_.get("foreach"))
        items = items if isinstance(items, list) else [None]
        for item in items:
            for out in (st_.get("do", st_)).get("outs", []):
                path = next(iter(out)) if isinstance(out, dict) else out
                written.add(path.replace("${item}", str(item)))
    for name in REPORTS:
        assert f"reports/{name}.html" in written, f"no dvc.yaml stage writes reports/{name}.html"
        assert (ROOT / "notebooks" / f"{name}.py").is_file()
    index = (ROOT / "reports" / "index.html").read_text()
    assert all(f'href="{name}.html"' in index for name in REPORTS)
    assert "REPORTS" in (ROOT / ".ci" / "run").read_text()


def test_no_run_is_left_out_silently():
    """Every run of the profile is on the membership pages or in left_out_runs with a reason, never both; the
    committed pages that read the membership runs say what they leave out."""
    from fairdp_core.config import load_params
    from fairdp_core.reporting.pages import REPORTS, left_out_runs, left_out_sentence, membership_runs

    params = load_params(ROOT / "params.yaml")
    shown = set(membership_runs(params))
    left = [r for runs in left_out_runs(params).values() for r in runs]
    assert len(left) == len(set(left)) and not shown & set(left)
    assert shown | set(left) == set(params.runs)
    sentence = left_out_sentence(params)
    assert (sentence != "") == bool(left)
    if left:
        assert f"{len(left)} runs" in sentence
        for name in ("group_gpr", "outcome_fairness", "audit_comparison"):
            assert REPORTS[name].runs == "membership"
            assert "Left out of this page" in (ROOT / "reports" / f"{name}.html").read_text(), name


NEW_PAGE_ENTRY = '''    Report("toy_page", "A toy page", "Is a page one notebook and one registry entry?",
           parameters=lambda p: {"seed": p.seed}),
'''


def test_a_new_report_is_a_notebook_and_one_registry_entry(tmp_path):
    """Adding a page to the shared report stage is a notebook plus one entry in reporting/registry.py: in a copy of
    the project with both added and nothing else edited, `fairdp grid --write` puts the page into runs.yaml, DVC
    then defines report@toy_page writing reports/toy_page.html with the shared stage's code deps, the page's stamp
    reads that stage's code (notebook included), and the index links it. The committed runs.yaml is the registry's
    list, and a runs.yaml without it is refused with one line."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from fairdp_core.config import ConfigError, load_params
    from fairdp_core.reporting.registry import REPORT_STAGE_PAGES

    assert yaml.safe_load((ROOT / "runs.yaml").read_text())["pages"] == list(REPORT_STAGE_PAGES)
    assert yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]["foreach"] == "${pages}"
    for f in ("params.yaml", "dvc.yaml", "runs.yaml"):
        shutil.copy(ROOT / f, tmp_path / f)
    shutil.copytree(ROOT / "fairdp_core", tmp_path / "fairdp_core", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    (tmp_path / "notebooks" / "toy_page.py").write_text("# %% tags=['parameters']\nseed = 0\n# %%\nprint(seed)\n")
    registry = tmp_path / "fairdp_core" / "reporting" / "registry.py"
    text = registry.read_text()
    anchor = "\n)}\nNOTEBOOKS = tuple(REPORTS)"
    assert text.count(anchor) == 1
    registry.write_text(text.replace(anchor, "\n" + NEW_PAGE_ENTRY.rstrip("\n") + anchor))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    bin_dir = Path(sys.executable).parent
    run = subprocess.run([sys.executable, "-m", "fairdp_core.cli", "grid", "--write"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert yaml.safe_load((tmp_path / "runs.yaml").read_text())["pages"] == [*REPORT_STAGE_PAGES, "toy_page"]
    subprocess.run([str(bin_dir / "dvc"), "init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True, timeout=120)
    listed = subprocess.run([str(bin_dir / "dvc"), "stage", "list", "--all"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    line = next(x for x in listed.stdout.splitlines() if x.startswith("report@toy_page "))
    assert "reports/toy_page.html" in line
    check = ("from pathlib import Path\nfrom fairdp_core.reporting.pages import page_code_paths, REPORTS\n"
             "from fairdp_core.reporting.index import report_links\n"
             "paths = page_code_paths(Path('.'), 'toy_page')\n"
             "assert 'notebooks/toy_page.py' in paths and 'fairdp_core/reporting/pages.py' in paths, paths\n"
             "assert 'href=\"toy_page.html\"' in report_links(), 'no link'\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]

    stale = tmp_path / "stale.yaml"
    generated = yaml.safe_load((ROOT / "runs.yaml").read_text())
    del generated["pages"]
    stale.write_text(yaml.safe_dump(generated))
    with pytest.raises(ConfigError, match="no 'pages' list"):
        load_params(ROOT / "params.yaml", generated=stale)
    # a runs.yaml whose pages are not the registry's (a page added without `fairdp grid --write`) stops the index
    from fairdp_core.stages.index import write_index

    generated["pages"] = list(REPORT_STAGE_PAGES[:-1])
    (tmp_path / "runs.yaml").write_text(yaml.safe_dump(generated))
    params = load_params(ROOT / "params.yaml").model_copy(update={"base_dir": tmp_path})
    with pytest.raises(ConfigError, match="are not the report registry's"):
        write_index(params)
