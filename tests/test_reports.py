"""What a reader sees: the defect checker (each defect it must catch, on hand-made pages), the committed reports
read clean, one colour per algorithm in every figure function, the report tables' formatting, and the coverage of
the PA-LOOA agreement intervals the reports print."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fairdp_core.audit.pooling import correlation_interval
from fairdp_core.reporting import plots
from fairdp_core.reporting.checks import MAX_FIRST_SCREEN_WORDS, check_reports, first_screen_words

ROOT = Path(__file__).resolve().parents[1]

CLEAN = """<html><body><h1>r</h1><img src="figures/r/a.png"><a href="figures/r/t.csv">csv</a>
<table><caption>c</caption><tr><th>x</th></tr><tr><td>1</td></tr></table></body></html>"""


def _reports(tmp_path: Path, page: str = CLEAN, colors: dict | None = None) -> Path:
    root = tmp_path / "reports"
    fig = root / "figures" / "r"
    fig.mkdir(parents=True)
    (fig / "a.png").write_bytes(b"png")
    (fig / "a.colors.json").write_text(json.dumps(colors or {"DP-SGD": plots.ALGORITHM_COLORS["DP-SGD"]}))
    (fig / "t.csv").write_text("x\n1\n")
    (root / "r.html").write_text(page)
    return root


def test_checker_passes_a_clean_page(tmp_path):
    assert check_reports(_reports(tmp_path)) == []


@pytest.mark.parametrize("defect, page, expect", [
    ("stderr", CLEAN.replace("<h1>", '<div data-mime-type="application/vnd.jupyter.stderr">w</div><h1>'), "stderr"),
    ("path", CLEAN.replace("<h1>r", "<h1>/home/alice/fairdp/results"), "absolute path"),
    ("nan", CLEAN.replace("<td>1</td>", "<td>nan</td>"), "cells reading ['nan']"),
    ("nan inside", CLEAN.replace("<td>1</td>", "<td>MDE nan = nan% of Δ</td>"), "a nan inside table cells ('nan')"),
    ("NaN inside", CLEAN.replace("<td>1</td>", "<td>Δ NaN pp</td>"), "a nan inside table cells ('NaN pp')"),
    ("caption", CLEAN.replace("<caption>c</caption>", ""), "without a caption"),
    ("orphan", CLEAN.replace('<a href="figures/r/t.csv">csv</a>', ""), "t.csv: no page references it"),
    ("dangling", CLEAN.replace("</body>", '<img src="figures/r/gone.png"></body>'), "does not exist"),
])
def test_checker_catches_each_defect(tmp_path, defect, page, expect):
    problems = check_reports(_reports(tmp_path, page))
    assert any(expect in p for p in problems), (defect, problems)


def test_checker_catches_a_colour_that_differs_between_figures(tmp_path):
    root = _reports(tmp_path)
    (root / "figures" / "r" / "b.png").write_bytes(b"png")
    (root / "figures" / "r" / "b.colors.json").write_text(json.dumps({"DP-SGD": "#ff0000"}))
    (root / "r.html").write_text(CLEAN.replace("<h1>", '<img src="figures/r/b.png"><h1>'))
    problems = check_reports(root)
    assert any("DP-SGD drawn in #ff0000" in p for p in problems), problems
    (root / "figures" / "r" / "b.colors.json").unlink()
    assert any("no colour mapping" in p for p in check_reports(root))


def test_committed_reports_read_clean():
    """The committed default-profile reports: no stderr, no machine path, no nan cell, every table captioned, every
    figure and CSV referenced, one colour per algorithm across all figures."""
    assert check_reports(ROOT / "reports") == []


def test_first_screen_words_counts_only_what_a_reader_sees_before_scrolling(tmp_path, chromium):
    """Hand-counted page: 7 words on the first screen; a closed <details> (4 words), a script, a style and a paragraph
    pushed below the fold (5 words) do not count; a figure beside the page is loaded from the page's folder."""
    page = tmp_path / "p.html"
    page.write_text("<!doctype html><html><head><style>p{margin:0}</style></head><body>"
                    "<h1>One two three</h1><p>four five  six\nseven</p>"
                    "<details><summary></summary>hidden words are four</details><script>var x = 1;</script>"
                    "<div style='height:2000px'></div><p>below the fold, five words</p></body></html>")
    assert first_screen_words(page) == 7
    assert first_screen_words(page, height=3000) == 12  # the same page, a taller window: the last paragraph too
    assert "first-screen" not in page.read_text()  # the page itself is not touched


def test_the_index_answers_in_a_short_first_screen(chromium):
    """The committed index, as a reader first sees it at 1,400 × 900: at most 250 words, and they include the
    question, the bold answer and the three rules' names."""
    index = Path(__file__).resolve().parents[1] / "reports" / "index.html"
    n = first_screen_words(index)
    assert n is not None and 100 <= n <= MAX_FIRST_SCREEN_WORDS, n
    text = index.read_text()
    first = text[:text.index("<h2>Reports</h2>")]
    for needed in ("Does DP-SGD-S lower the group disparity Δ, as the paper claims?", "Paper's algorithm as published",
                   "Paper's rule made DP", "quantile reading", "id='quoted-claims'", "figures/index/claims.png"):
        assert needed in first, needed


def _findings_box(page: str) -> tuple[int, str] | None:
    import re

    m = re.search(r'<div ([^>]*id="findings"[^>]*)>(.*?)</div>', page, re.S)  # attributes in any order
    if m is None:
        return None
    n = re.search(r'data-sentences="(\d+)"', m.group(1))
    return (int(n.group(1)) if n else 0), m.group(2)


def test_findings_fill_numbers_into_spans_and_return_them_for_the_metrics_file(capsys):
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401  (display() needs IPython)

    from fairdp_core.reporting import helpers as rh

    got = rh.findings(["Δ is **{d:.2f} pp** in {k} of {n} cases.", "Below <this> & {x:+.1f}."],
                      {"d": 1.234, "k": np.int64(3), "n": 7, "x": -0.25})
    assert got == {"findings.d": 1.234, "findings.k": 3, "findings.n": 7, "findings.x": -0.25}
    assert type(got["findings.k"]) is int  # numpy scalars become plain numbers for the JSON metrics file
    with pytest.raises(ValueError, match="2 to 4"):
        rh.findings(["one sentence only"], {})
    with pytest.raises(KeyError):
        rh.findings(["a {missing} number.", "b."], {})


def test_findings_move_under_the_title():
    import nbformat

    from fairdp_core.reporting.pages import _findings_first

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("params = 1", metadata={"tags": ["parameters"]}),
                                         nbformat.v4.new_markdown_cell("# The question?"),
                                         nbformat.v4.new_code_cell("evidence"),
                                         nbformat.v4.new_code_cell("answer", metadata={"tags": ["findings"]}),
                                         nbformat.v4.new_code_cell("answer", metadata={})])  # same source, untagged
    _findings_first(nb)
    assert [c.source for c in nb.cells] == ["params = 1", "# The question?", "answer", "evidence", "answer"]
    assert nb.cells[2].metadata["tags"] == ["findings"]


def test_every_page_opens_with_findings_whose_numbers_match_its_metrics_file():
    """Each committed report: a findings box of 2–4 sentences right under its title (before any section), holding
    at least two numbers, each of them (a span named by its key) equal, at the precision shown, to the
    ``findings.<key>`` value of the report's metrics file, and every findings value of the file shown."""
    import re

    root = Path(__file__).resolve().parents[1] / "reports"
    pages = sorted(p for p in root.glob("*.html") if p.stem != "index")
    assert len(pages) == 7
    for page in pages:
        text = page.read_text()
        box = _findings_box(text)
        assert box is not None, f"{page.name}: no findings box"
        n_sentences, inner = box
        assert 2 <= n_sentences <= 4, page.name
        assert text.index('id="findings"') < text.index("<h2"), f"{page.name}: findings not above the first section"
        metrics = json.loads((root / "metrics" / f"{page.stem}.json").read_text())
        expected = {k.removeprefix("findings."): v for k, v in metrics.items() if k.startswith("findings.")}
        shown = dict(re.findall(r'<span class="n" data-key="([^"]+)">([^<]*)</span>', inner))
        assert len(shown) >= 2 and set(shown) == set(expected), (page.name, set(shown) ^ set(expected))
        for key, txt in shown.items():
            value = float(txt.replace(",", "").replace("+", "").replace("−", "-"))
            decimals = len(txt.split(".")[1]) if "." in txt else 0
            assert abs(value - float(expected[key])) <= 0.5 * 10 ** -decimals + 1e-9, (page.name, key, txt,
                                                                                         expected[key])


def test_every_committed_page_names_the_commit_and_the_versions_that_built_it():
    """Each page's provenance line (fairdp_core.reporting.pages.provenance): profile, commit and the versions of torch,
    opacus, numpy and fairdp."""
    import re

    pages = sorted((ROOT / "reports").glob("*.html"))
    assert len(pages) == 8
    for page in pages:
        text = page.read_text()
        line = re.search(r"Profile <b>\w+</b>, built from commit <code>[0-9a-f]{7,}[^<]*</code> with torch [^,]+, "
                         r"opacus [^,]+, numpy [^,]+, fairdp [^.<]+[.\d]*\.", text)
        assert line, f"{page.name}: no provenance line"


def test_the_commit_a_page_names_changes_with_the_code_only(tmp_path):
    """The page names the last commit that changed the code (reporting.CODE_PATHS), not HEAD: committing results,
    params or runs.yaml (which `make repro PROFILE=...` rewrites) leaves a page's bytes alone; an edited, uncommitted
    module is flagged. CI's determinism check reruns the reports after committing the smoke results."""
    import subprocess

    from fairdp_core.reporting.pages import _commit

    def git(*a):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "fairdp_core").mkdir()
    (tmp_path / "fairdp_core" / "m.py").write_text("x = 1\n")
    (tmp_path / "runs.yaml").write_text("a: 1\n")
    git("add", "-A"), git("commit", "-qm", "code")
    code = git("rev-parse", "--short", "HEAD")
    assert _commit(tmp_path) == code
    (tmp_path / "runs.yaml").write_text("a: 2\n")  # a profile switch: not a code change
    (tmp_path / "results.json").write_text("{}")
    assert _commit(tmp_path) == code
    git("add", "-A"), git("commit", "-qm", "results")
    assert git("rev-parse", "--short", "HEAD") != code and _commit(tmp_path) == code
    (tmp_path / "fairdp_core" / "m.py").write_text("x = 2\n")
    assert _commit(tmp_path) == code + "+uncommitted changes"
    git("commit", "-qam", "new code")
    assert _commit(tmp_path) == git("rev-parse", "--short", "HEAD") != code
    # a page's own code: a commit to a module the page does not build from leaves its stamp alone
    mine = git("rev-parse", "--short", "HEAD")
    (tmp_path / "fairdp_core" / "other.py").write_text("y = 1\n")
    git("add", "-A"), git("commit", "-qm", "other code")
    assert _commit(tmp_path, ("fairdp_core/m.py",)) == mine and _commit(tmp_path) != mine


def test_each_page_is_stamped_by_its_own_stages_code():
    """page_code_paths reads the stage that writes the page from dvc.yaml: a report's notebook and modules, not the
    campaign's or another page's; the index's frontier code; the whole package for a page no stage writes."""
    from fairdp_core.reporting.pages import CODE_PATHS, page_code_paths

    gpr = page_code_paths(ROOT, "group_gpr")
    assert "notebooks/group_gpr.py" in gpr and "fairdp_core/reporting/pages.py" in gpr
    assert not {"notebooks/audit_comparison.py", "fairdp_core/study/claims.py", "fairdp_core/reporting/frontier.py"} & set(gpr)
    assert "fairdp_core/reporting/frontier.py" in page_code_paths(ROOT, "index")
    assert "notebooks/synthetic_data.py" in page_code_paths(ROOT, "synthetic_data")
    assert page_code_paths(ROOT, "no_such_page") == CODE_PATHS


def _tidy(labels, settings=("Adult · LR", "Law · LR"), eps=("ε = 1", "ε = 10")):
    rows = []
    for s in settings:
        for e in eps:
            for lab in labels:
                for g in ("a", "b"):
                    rows.append({"setting": s, "eps_label": e, "label": lab, "group": g, "gpr_pp": 1.0, "lo_pp": 0.0,
                                 "hi_pp": 2.0, "attack_label": "PA-GA", "delta_pp": 1.0, "null_floor_pp": 0.5,
                                 "metric": "equalized odds", "value_pp": 1.0, "epsilon": float(e.split()[-1]),
                                 "lo": 0.0, "hi": 2.0, "accuracy_pct": 80.0, "acc_err": 0.5, "delta_lo": 0.0,
                                 "delta_hi": 2.0})
    return pd.DataFrame(rows)


def test_every_figure_function_uses_the_fixed_colours():
    """Each figure records the colour it drew each algorithm in, and it is the algorithm's fixed colour, whatever
    order or subset of algorithms the frame holds."""
    labels = ["DP-SGD-S", "SGD", "DP-SGD"]
    df = _tidy(labels)
    figs = [plots.gpr_grid(df), plots.delta_by_attack(df), plots.delta_vs_epsilon(df), plots.pareto(df),
            plots.fairness_grid(df), plots.gpr_grid(_tidy(["DP-SGD"]))]
    for fig in figs:
        assert fig.fairdp_colors, fig
        for lab, c in fig.fairdp_colors.items():
            assert c == plots.ALGORITHM_COLORS[lab]
        bars = [p.get_facecolor() for ax in fig.axes for p in ax.patches]
        if bars:  # the bars themselves are drawn in the recorded colours
            import matplotlib.colors as mc

            drawn = {mc.to_hex(b[:3]) for b in bars}
            assert drawn <= {c.lower() for c in fig.fairdp_colors.values()}, drawn
        plots.plt.close(fig)
    assert len(set(plots.ALGORITHM_COLORS.values())) == len(plots.ALGORITHM_COLORS)


def test_report_tables_format_integers_dashes_captions_and_csv(tmp_path, monkeypatch):
    from IPython import display as ipd

    from fairdp_core.reporting import helpers as rh

    shown = []
    monkeypatch.setattr(ipd, "display", lambda obj: shown.append(obj))
    table = rh.tabler(tmp_path / "figures" / "r", top=3)
    df = pd.DataFrame({"T": [579.0, np.nan, 1158.0, 10.0], "delta_pp": [0.1234, 1.5, np.nan, 2.0],
                       "note": ["a", None, float("nan"), "d"], "flag": [True, False, True, False]})
    with pytest.raises(ValueError, match="caption"):
        table(df.head(2), "")
    with pytest.raises(ValueError, match="csv"):
        table(df, "four rows")
    table(df, "four rows", csv="t")
    html = shown[0].to_html()
    assert ">579<" in html and ">1,158<" in html and "579.0" not in html  # whole numbers without decimals
    assert ">0.12<" in html and "Δ (pp)" in html and "nan" not in html.lower().replace("nan-", "")
    assert ">—<" in html and ">yes<" in html and "first 3 of 4 rows" in html
    assert (tmp_path / "figures" / "r" / "t.csv").read_text().count("\n") == 5


def _leak_pairs(rng, n, scale):
    """Per-record advantage estimates of two audits of the same records (TPR − FPR over k IN and k OUT models, as
    PA-LOOA with R' = 20 and PA-ALOOA with R = 8 produce them), from skewed true per-record leakage."""
    t = np.clip(rng.gamma(0.6, scale, n), 0, 0.9)

    def est(k):
        return rng.binomial(k, 0.5 + t / 2) / k - rng.binomial(k, 0.5 - t / 2) / k

    return est(20), est(8)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [0.08, 0.3, 1.0])
def test_agreement_intervals_hold_their_coverage(scale):
    """Seed 0, 3,000 simulated audits of 50 targets (Monte Carlo SE of a coverage near 0.95: 0.004), from weak to strong leakage (population r 0.09, 0.53, 0.79):
    the jackknife Fisher-z interval of r covers the population r
    (from 2,000,000 records) in at least 93%, and the t interval of the mean LOOA − ALOOA difference covers the true
    difference (0: both audits estimate the same leakage) as often. The normal-theory Fisher interval is shown to
    fail where the records are most unequal (scale 0.3), so this test can reject a wrong interval."""
    from fairdp_core.audit.stats import seed_mean_interval

    rng = np.random.default_rng(0)
    rho = np.corrcoef(*_leak_pairs(rng, 2_000_000, scale))[0, 1]
    hit = hit_nt = hit_d = 0
    N = 3000
    for _ in range(N):
        x, y = _leak_pairs(rng, 50, scale)
        c, nt = correlation_interval(x, y), correlation_interval(x, y, normal_theory=True)
        hit += c["lo"] <= rho <= c["hi"]
        hit_nt += nt["lo"] <= rho <= nt["hi"]
        d = seed_mean_interval(x - y)
        hit_d += d["lo"] <= 0 <= d["hi"]
    assert hit / N >= 0.93, (scale, rho, hit / N)
    assert hit_d / N >= 0.93, (scale, hit_d / N)
    if scale == 0.3:
        assert hit_nt / N < 0.93, hit_nt / N




def test_this_run_counts_a_detection_only_after_holm_over_the_configurations():
    """32 DP configurations, one with p = 0.03 (its 95% interval would exclude 0: the chance rate, 1 in 20): no
    detection after Holm over the 32. One at p = 1e-5 survives (32 × 1e-5 < 0.05); NaN p-values are not counted as
    tested; none at all gives (0, 0)."""
    import pandas as pd

    from fairdp_core.reporting.index import this_run_detections

    p = np.full(32, 0.6)
    p[3] = 0.03
    assert this_run_detections(pd.DataFrame({"p_delta": p})) == (0, 32)
    p[5] = 1e-5
    assert this_run_detections(pd.DataFrame({"p_delta": p})) == (1, 32)
    p[:10] = np.nan
    assert this_run_detections(pd.DataFrame({"p_delta": p})) == (0, 22)
    assert this_run_detections(pd.DataFrame({"p_delta": [np.nan]})) == (0, 0)


def test_an_undefined_correlation_is_said_in_words_not_printed_as_nan():
    """A small design's PA-LOOA can be 0 on every target (the smoke profile's 6): Pearson r is then undefined, and
    the index says so instead of printing "r = nan [nan, nan]" (which the reader check rejects)."""
    from fairdp_core.reporting.checks import _NAN_IN_TEXT
    from fairdp_core.reporting.index import _correlation_text

    nan = float("nan")
    text = _correlation_text({"n": 6, "r": nan, "lo": nan, "hi": nan})
    assert "the same for every target" in text and not _NAN_IN_TEXT.search(text)
    text = _correlation_text({"n": 3, "r": nan, "lo": nan, "hi": nan})  # too few targets, whatever their values
    assert text == "r not computed (3 targets with both values; it needs 4)"
    assert _correlation_text({"n": 6, "r": 0.5, "lo": 0.1, "hi": 0.8}) == "r = 0.50 [0.10, 0.80]"
