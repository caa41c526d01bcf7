"""The attacks' shared-sort fast paths against the slow references (tests/attack_references.py: each column or row
sorted afresh), bit for bit, on banks with many tied scores: the null-corrected estimator (one sort for all its
permutations) and PA-GBA (each group read off the rows sorted once, for its fit and its null floor's refits)."""

from __future__ import annotations

import numpy as np
import pytest

from fairdp_core.audit import attacks, rmia, threads

from . import attack_references as ref


def _bank(seed: int, M: int, m: int, *, decimals: int = 1):
    rng = np.random.default_rng(seed)
    mem = np.zeros((M, m), bool)
    for j in range(0, M, 2):
        half = rng.permutation(m) < m // 2
        mem[j], mem[j + 1] = half, ~half
    scores = np.round(rng.normal(size=(M, m)) + 0.4 * mem, decimals)  # rounded: ties in every column and row
    return scores, mem, rng.integers(0, 3, m)


@pytest.mark.parametrize("seed,M,m", [(0, 8, 50), (1, 16, 300), (2, 40, 501)])
def test_fast_paths_equal_the_references_bit_for_bit(seed, M, m):
    s, mem, g = _bank(seed, M, m)
    for got, want in zip(attacks.best_cut(s, mem), ref.best_cut(s, mem)):
        assert np.array_equal(got, want)
    fast = attacks.null_corrected_advantage(s, mem, rng=np.random.default_rng(9), n_null=7)
    slow = ref.null_corrected_advantage(s, mem, rng=np.random.default_rng(9), n_null=7)
    assert np.array_equal(fast, slow)
    assert np.array_equal(attacks.gba_predictions(s, mem, g), ref.gba_predictions(s, mem, g))
    rows = attacks.sort_rows(s)
    for perm_seed in range(3):  # the null floor's refits: permuted groups, rows sorted once
        pg = np.random.default_rng(perm_seed).permutation(g)
        assert np.array_equal(attacks.gba_predictions(s, mem, pg, presorted=rows), ref.gba_predictions(s, mem, pg))


def test_a_stale_sort_is_caught():
    """The check can fail: rows sorted for other scores give other thresholds."""
    s, mem, g = _bank(3, 16, 300)
    stale = attacks.sort_rows(s[::-1])
    assert not np.array_equal(attacks.gba_predictions(s, mem, g, presorted=stale), ref.gba_predictions(s, mem, g))


@pytest.mark.parametrize("K,m,gamma,n_ref,trim", [(12, 401, 1.0, None, 0.0), (10, 300, 2.0, None, 0.0),
                                                  (10, 300, 1.0, 2, 0.0), (10, 300, 1.0, None, 0.2),
                                                  (7, 200, 1.0, None, 0.0)])
def test_offline_rmia_equals_its_reference_bit_for_bit(K, m, gamma, n_ref, trim):
    """Offline RMIA's shared reference means and its AUCs counted without ranking: each model's Pr_OUT, the chosen a
    and the scores are the slow reference's bits (odd K: a last model without a pair; n_ref and trim: the
    unshared path)."""
    s, mem, _ = _bank(K, K + (K % 2), m, decimals=2)
    mem, p = mem[:K], 1 / (1 + np.exp(-s[:K]))
    if K % 2:
        mem[-1] = np.random.default_rng(K).random(m) < 0.5
    assert np.array_equal(rmia._pr_out_by_pair(p, mem, n_ref, trim),
                          ref.offline_pr_out_rows(p, mem, np.arange(K), n_ref, trim))
    assert rmia.choose_offline_a(p, mem, gamma=gamma, n_ref=n_ref, trim=trim) == \
        ref.choose_offline_a(p, mem, gamma=gamma, n_ref=n_ref, trim=trim)


def test_share_auc_is_rankdatas_auc_bit_for_bit():
    """The AUC of RMIA's population shares counted in integers equals rankdata's AUC of the shares as floats, on
    many small draws with ties, γ > 1 and unequal halves (distinct fractions k/n stay distinct as floats)."""
    rng = np.random.default_rng(1)
    checked = 0
    for trial in range(400):
        m = int(rng.integers(8, 300))
        gamma = float(rng.choice([1.0, 1.5, 2.0]))
        lab = rng.random(m) < rng.uniform(0.2, 0.8)
        halves = (rng.random(m) < 0.5).astype(int) if trial % 2 else np.arange(m) % 2
        lr = np.round(rng.lognormal(size=m), int(rng.integers(0, 3)))
        if lab.all() or not lab.any() or min(((~lab) & (halves == h)).sum() for h in (0, 1)) < 2:
            continue
        shares = rmia._population_share(lr[None], lab[None], gamma, halves)[0]
        assert rmia._share_auc(lr, lab, gamma, halves) == rmia._auc(shares[lab], shares[~lab])
        checked += 1
    assert checked > 300


def test_share_auc_grid_is_share_auc_row_by_row_bit_for_bit():
    """Offline RMIA's choice of a scores every a of the grid at once: each row's AUC equals :func:`_share_auc` of that
    row, with ties, γ > 1, unequal halves, NaN and a row without members; a shifted row would not (checked)."""
    rng = np.random.default_rng(4)
    for trial in range(60):
        m = int(rng.integers(10, 400))
        lab = rng.random(m) < rng.uniform(0.2, 0.8)
        halves = (rng.random(m) < 0.5).astype(int) if trial % 2 else np.arange(m) % 2
        if lab.all() or not lab.any() or min(((~lab) & (halves == h)).sum() for h in (0, 1)) < 2:
            continue
        gamma = float(rng.choice([1.0, 2.0]))
        lr = np.round(rng.lognormal(size=(7, m)), int(rng.integers(0, 3)))
        if trial % 5 == 0:
            lr[2, 0] = np.nan
        got = rmia._share_auc_grid(lr, lab, gamma, halves)
        want = np.array([rmia._share_auc(row, lab, gamma, halves) for row in lr])
        assert np.array_equal(got, want, equal_nan=True)
        assert not np.array_equal(rmia._share_auc_grid(lr[::-1], lab, gamma, halves), want) or \
            np.array_equal(want, want[::-1])
    assert np.isnan(rmia._share_auc_grid(np.ones((3, 8)), np.zeros(8, bool), 1.0, np.arange(8) % 2)).all()


def test_share_auc_by_hand():
    """Half 0 holds records 0, 2, 4, 6 (LR 1, 2, 1, 3), half 1 records 1, 3, 5, 7 (LR 2, 3, 2, 3). Half 0's population
    is half 1's non-members {3, 3}, half 1's is half 0's non-members {2, 1, 3}. Shares: members 0, 2/3, 2/3;
    non-members 0, 1, 0, 1, 1. Member 0 ties two non-members (½ each): 1; each 2/3 beats two: 4. AUC = 5/15."""
    lr = np.array([1.0, 2.0, 2.0, 3.0, 1.0, 2.0, 3.0, 3.0])
    lab = np.array([True, True, False, False, False, True, False, False])
    assert rmia._share_auc(lr, lab, 1.0, np.arange(8) % 2) == 5 / 15


@pytest.mark.parametrize("M", [32767, 32768, 40000])
def test_best_cut_at_the_integer_widths(M):
    """best_cut counts IN in int16 below M = 2**15 rows and in int64 from there: both sides of the switch equal the
    reference, with every column's labels far from balanced (counts near M)."""
    rng = np.random.default_rng(M)
    s = np.round(rng.normal(size=(M, 3)), 1)
    lab = rng.random((M, 3)) < np.array([0.5, 0.999, 0.001])
    for got, want in zip(attacks.best_cut(s, lab), ref.best_cut(s, lab)):
        assert np.array_equal(got, want)


def test_offline_rmia_fast_paths_keep_nan_and_float32():
    """A NaN probability stays NaN in the reference means (as the product p · [OUT] the slow path takes), and float32
    input is summed in float32 and averaged to float64, as the slow path does."""
    s, mem, _ = _bank(3, 8, 60, decimals=2)
    p = 1 / (1 + np.exp(-s))
    j = int(np.flatnonzero(mem[2])[0])
    p[2, j] = np.nan  # where model 2 is IN: the slow path's NaN · 0 is NaN, not 0
    got, want = rmia._pr_out_by_pair(p, mem, None, 0.0), ref.offline_pr_out_rows(p, mem, np.arange(8))
    assert np.array_equal(got, want, equal_nan=True) and np.isnan(got[0, j])
    p32 = (1 / (1 + np.exp(-s))).astype(np.float32)
    got, want = rmia._pr_out_by_pair(p32, mem, None, 0.0), ref.offline_pr_out_rows(p32, mem, np.arange(8))
    assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("n_threads", [1, 3])
def test_threaded_pieces_equal_the_references_bit_for_bit(monkeypatch, n_threads):
    """The permutations are drawn in order on one thread and the pieces summed in that order, so the null-corrected
    estimator, offline RMIA's choice of a and PA-GBA's floor give the one-thread bits on any number of threads."""
    monkeypatch.setattr(threads, "threads", lambda: n_threads)
    s, mem, g = _bank(4, 16, 300)
    # unbalanced labels (each record IN in 2 to 13 of 15 models): advantages with denominators 2..13, whose float
    # sum depends on the order it is taken in, so a permutation summed out of order changes the bits
    rng = np.random.default_rng(11)
    mem_u = rng.random((15, 300)) < rng.uniform(0.15, 0.85, 300)
    mem_u[0], mem_u[1] = True, False
    s_u = np.round(rng.normal(size=(15, 300)) + 0.4 * mem_u, 1)
    fast = attacks.null_corrected_advantage(s_u, mem_u, rng=np.random.default_rng(9), n_null=9)
    assert np.array_equal(fast, ref.null_corrected_advantage(s_u, mem_u, rng=np.random.default_rng(9), n_null=9))
    p = 1 / (1 + np.exp(-s))
    assert rmia.choose_offline_a(p, mem) == ref.choose_offline_a(p, mem)

    from fairdp_core.audit.run import Bank
    from fairdp_core.audit.stats import delta_pp, gpr

    bank = Bank(loss=-s, phi=s, mem=mem, g=g, K=3, rng=np.random.default_rng(2), n_null=6)
    rng = np.random.default_rng(2)
    want = [delta_pp(gpr(attacks._advantage_of_predictions(ref.gba_predictions(s, mem, pg), mem), pg, 3))
            for pg in (rng.permutation(g) for _ in range(6))]
    assert bank.gba_floor() == float(np.mean(want))
    assert np.array_equal(bank.ga(), attacks.ga_predictions(s, mem))  # the rows' sort shared with PA-GBA


@pytest.mark.parametrize("n_threads", [2, 3])
def test_blocks_on_threads_equal_the_references_bit_for_bit(monkeypatch, n_threads):
    """The column sort, RMIA's population shares and offline RMIA's reference means run in blocks of columns (or
    models) on threads, for banks of at least BLOCK_MIN_CELLS elements (set to 0 here so that a small bank is cut
    into blocks): the same bits as the slow references, with ties, γ = 2 and a bank whose models do not divide into
    equal blocks."""
    monkeypatch.setattr(threads, "threads", lambda: n_threads)
    monkeypatch.setattr(threads, "BLOCK_MIN_CELLS", 0)
    s, mem, _ = _bank(5, 14, 301, decimals=2)
    order, s_sorted, cut_ok = attacks.sort_columns(s)
    want = np.argsort(-s, axis=0, kind="stable")
    assert np.array_equal(order, want) and np.array_equal(s_sorted, np.take_along_axis(s, want, axis=0))
    assert np.array_equal(cut_ok[:-1], s_sorted[:-1] != s_sorted[1:]) and cut_ok[-1].all()
    for got, want in zip(attacks.best_cut(s, mem), ref.best_cut(s, mem)):
        assert np.array_equal(got, want)
    p = 1 / (1 + np.exp(-s))
    halves = np.arange(301) % 2
    for gamma in (1.0, 2.0):
        assert np.array_equal(rmia._population_share(p, mem, gamma, halves),
                              ref.population_share(p, mem, gamma, halves))
        assert rmia.choose_offline_a(p, mem, gamma=gamma) == ref.choose_offline_a(p, mem, gamma=gamma)
    assert np.array_equal(rmia._pr_out_by_pair(p, mem, None, 0.0), ref.offline_pr_out_rows(p, mem, np.arange(14)))


def test_gba_groups_need_not_be_0_to_k():
    """Group labels are read through np.unique: labels {2, 5, 9} fit the same thresholds as {0, 1, 2}."""
    s, mem, g = _bank(6, 16, 300)
    odd = np.array([2, 5, 9])[g]
    assert np.array_equal(attacks.gba_predictions(s, mem, odd), ref.gba_predictions(s, mem, odd))
    assert np.array_equal(attacks.gba_predictions(s, mem, odd), attacks.gba_predictions(s, mem, g))


def test_ordered_map_returns_in_order_and_draws_on_the_calling_thread(monkeypatch):
    """Results come back in the order of the items whatever order the threads finish in (random sleeps), and the
    items are drawn lazily, on the calling thread, at most ``ahead`` before their results."""
    import threading
    import time

    monkeypatch.setattr(threads, "threads", lambda: 3)
    rng = np.random.default_rng(0)
    delays = rng.uniform(0, 0.01, 40)
    drawn_on, outstanding = [], []
    done = set()

    def items():
        for i in range(40):
            drawn_on.append(threading.get_ident())
            outstanding.append(i - len(done))
            yield i

    def fn(i):
        time.sleep(delays[i])
        done.add(i)
        return i * i

    assert threads.ordered_map(fn, items(), ahead=4) == [i * i for i in range(40)]
    assert set(drawn_on) == {threading.get_ident()}
    assert max(outstanding) <= 4


def test_audit_on_threads_is_the_one_thread_audit(monkeypatch):
    """The whole audit (LiRA's two modes and the low-FPR view's groups on threads, the blocks cut small) gives the
    one-thread results: every summary, the low-FPR view and the per-record advantages."""
    import json

    from fairdp_core.audit.run import audit

    s, mem, g = _bank(8, 16, 400, decimals=2)
    out = []
    for n_threads, min_cells in ((1, 1 << 18), (3, 0)):
        monkeypatch.setattr(threads, "threads", lambda n=n_threads: n)
        monkeypatch.setattr(threads, "BLOCK_MIN_CELLS", min_cells)
        res = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=50, n_null=5, stats_seed=1,
                    delta=1e-5)
        out.append((json.dumps([{k: v.as_dict() for k, v in res.attacks.items()}, res.low_fpr,
                                [r.as_dict() for r in res.group_rows]], sort_keys=True, default=str),
                    res.records.to_csv()))
        assert {"first_scores_s", "low_fpr_s", "rmia_offline_s"} <= set(res.timings)
    assert out[0] == out[1]


@pytest.mark.parametrize("gamma", [1.0, 2.0])
def test_offline_rmia_scores_equal_their_reference_bit_for_bit(gamma):
    """Offline RMIA's scores end to end (each fold's reference means computed once, read for its own scores and for
    the other fold's a) against the references composed afresh: each fold's a from the other fold's models, each
    model's Pr_OUT from the other pairs of its fold, population shares model by model."""
    s, mem, _ = _bank(12, 16, 300, decimals=2)
    got = rmia.rmia_scores(s, mem, mode="offline", gamma=gamma)
    p = 1.0 / (1.0 + np.exp(-np.clip(s, -700, 700)))
    folds, halves = attacks.pair_folds(16), np.arange(300) % 2
    lr = np.empty_like(p)
    for f in (0, 1):
        rows, ref_rows = np.flatnonzero(folds == f), folds != f
        a_f = ref.choose_offline_a(p[ref_rows], mem[ref_rows], gamma=gamma)
        lr[rows] = p[rows] / np.maximum(rmia._offline_pr(ref.offline_pr_out_rows(p, mem, rows), a_f), 1e-300)
    assert np.array_equal(got, ref.population_share(lr, mem, gamma, halves))


@pytest.mark.parametrize("M,match", [(6, "at least 8 models"), (7, "complementary pairs")])
def test_offline_rmia_refuses_small_or_unpaired_banks_before_any_work(M, match):
    """A fold too small or not in complementary pairs is named, whichever fold it is (the messages of the code
    before the folds shared their reference means)."""
    s, mem, _ = _bank(13, 8, 60, decimals=2)
    with pytest.raises(ValueError, match=match):
        rmia.rmia_scores(s[:M], mem[:M], mode="offline")


@pytest.mark.parametrize("n_threads", [1, 3])
def test_blocked_error_paths(monkeypatch, n_threads):
    """The checks survive the blocks: a model with fewer than two OUT records in one half (the last model, so in
    the last block), and a record no reference model is OUT of (the last column) raise, on one thread or three.
    A column sort of one column (1-D) is the plain stable sort."""
    monkeypatch.setattr(threads, "threads", lambda: n_threads)
    monkeypatch.setattr(threads, "BLOCK_MIN_CELLS", 0)
    s, mem, _ = _bank(14, 12, 101, decimals=2)
    p = 1 / (1 + np.exp(-s))
    halves = np.arange(101) % 2
    bad = mem.copy()
    bad[-1, halves == 1] = True
    bad[-1, np.flatnonzero(halves == 1)[0]] = False  # one OUT record left in half 1 for the last model
    with pytest.raises(ValueError, match="at least two OUT records"):
        rmia._population_share(p, bad, 1.0, halves)
    no_ref = mem.copy()
    no_ref[:, -1] = True  # the last record is IN every model: no reference is OUT of it
    with pytest.raises(ValueError, match="no reference model"):
        rmia._pr_out_by_pair(p, no_ref, None, 0.0)
    with pytest.raises(ValueError, match="halves must be 0 or 1"):
        rmia.choose_offline_a(p, mem, halves=np.arange(101) % 3)
    order, s_sorted, cut_ok = attacks.sort_columns(s[:, 0])
    want = np.argsort(-s[:, 0], kind="stable")
    assert np.array_equal(order, want) and np.array_equal(s_sorted, s[want, 0])
    assert np.array_equal(cut_ok[:-1], s_sorted[:-1] != s_sorted[1:]) and cut_ok[-1]


TOY_ATTACK = '''"""A toy attack: calls IN every (model, record) whose φ is above its column's mean."""

from ..bank import Attack
from ..inference import prediction_contributions

ATTACK = Attack("toy_mean", "Toy above-the-mean", "#123456", "TOY", order=ORDER,
                contributions=lambda b: prediction_contributions(b.phi >= b.phi.mean(0), b.mem))
'''

TOY_ATTACK_CHECK = '''
import json, sys
import numpy as np, pandas as pd
from fairdp_core.audit.run import ATTACKS, audit
from fairdp_core.reporting import plots
s, mem, g = (np.load(sys.argv[1])[k] for k in ("s", "mem", "g"))
res = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5)
assert plots.ATTACK_LABELS["toy_mean"] == "Toy above-the-mean" and plots._color("Toy above-the-mean") == "#123456"
df = pd.DataFrame({"setting": "x", "eps_label": "ε = 1", "attack_label": ["Toy above-the-mean", "PA-GA"],
                   "label": "DP-SGD", "delta_pp": [1.0, 2.0], "null_floor_pp": [0.1, 0.1]})
ticks = sorted({t.get_text() for ax in plots.delta_by_attack(df).axes for t in ax.get_xticklabels()})
print(json.dumps({"attacks": list(ATTACKS), "delta_pp": {k: float(v["delta_pp"]) for k, v in res.attacks.items()},
                  "toy_lo": [None if v is None else float(v) for v in res.attacks["toy_mean"]["gpr_lo"]], "toy_records": len(res.records["toy_mean"]),
                  "ticks": ticks}))
'''


def test_a_new_attack_is_one_module(tmp_path):
    """Adding an attack is one module: a copy of the package with TOY_ATTACK dropped into audit/mia/ (its scores,
    label, colour, tick and order) runs in `audit()` beside the shipped attacks with its intervals, and the figures
    read its label, colour and tick from the registry; no other file is edited. Run last, it leaves the shipped
    attacks' results unchanged (their permutations come first). A module that does not define ATTACK, or shares an
    order, stops the registry with one line naming it."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from fairdp_core.audit.run import ATTACKS, audit

    from .conftest import ROOT

    s, mem, g = _bank(4, 8, 120)
    before = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5)
    np.savez(tmp_path / "bank.npz", s=s, mem=mem, g=g)
    shutil.copytree(ROOT / "fairdp_core", tmp_path / "fairdp_core", ignore=shutil.ignore_patterns("__pycache__"))
    module = tmp_path / "fairdp_core" / "audit" / "mia" / "toy_mean.py"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MPLBACKEND": "Agg"}

    def run(code: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    module.write_text(TOY_ATTACK.replace("ORDER", "1000"))
    out = run(TOY_ATTACK_CHECK, str(tmp_path / "bank.npz"))
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["attacks"] == [*ATTACKS, "toy_mean"] and got["toy_records"] == 120
    assert all(lo is not None for lo in got["toy_lo"]) and "TOY" in got["ticks"]
    assert {k: got["delta_pp"][k] for k in ATTACKS} == {k: before.attacks[k]["delta_pp"] for k in ATTACKS}

    module.write_text(TOY_ATTACK.replace("ORDER", "10"))  # the order of alooa_cross_fit
    out = run("import fairdp_core.audit.run")
    assert out.returncode != 0 and "attack modules share an order" in out.stderr and "toy_mean" in out.stderr
    module.write_text("X = 1\n")
    out = run("import fairdp_core.audit.run")
    assert out.returncode != 0 and "attack module fairdp_core.audit.mia.toy_mean defines no ATTACK" in out.stderr


def test_an_unknown_attack_is_refused():
    from fairdp_core.audit.run import audit

    s, mem, g = _bank(4, 8, 120)
    with pytest.raises(ValueError, match="unknown attacks"):
        audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5,
              attacks=("nosuch",))


# Each shipped attack's Δ, permutation p-value and null floor on one small bank, computed by the code before the
# attacks became modules (commit 161a9f0, the registry inline in audit/run.py); rounded to 9 decimals.
GOLDEN = {"alooa_cross_fit": [6.451612903, 0.571428571, 7.877304147], "alooa_in_sample": [2.419354839, 0.952380952,
          7.304147465], "alooa_null_corrected": [2.491359447, 0.904761905, 7.795218894], "ga": [8.755760369,
          0.523809524, 9.471486175], "gba": [5.64516129, None, 4.017857143], "lira_online": [6.451612903, 0.857142857,
          11.553859447], "lira_offline": [3.629032258, 1.0, 9.495967742], "rmia": [6.048387097, 0.619047619,
          7.857142857], "rmia_offline": [8.899769585, 0.428571429, 7.70593318]}


def test_the_shipped_attacks_run_in_their_order_with_their_results():
    """The registry's order is part of every result (one permutation stream): the shipped attacks run in this order
    and give the values the inline registry gave. Discovery by module name instead of ``order`` (LiRA offline
    before online), a wrong ``order``, or a changed score fails here."""
    from fairdp_core.audit.run import ATTACKS, audit

    assert ATTACKS == ("alooa_cross_fit", "alooa_in_sample", "alooa_null_corrected", "ga", "gba", "lira_online",
                       "lira_offline", "rmia", "rmia_offline")
    rng = np.random.default_rng(11)
    M, m = 8, 90
    mem = np.zeros((M, m), bool)
    for j in range(0, M, 2):
        half = rng.permutation(m) < m // 2
        mem[j], mem[j + 1] = half, ~half
    g = rng.integers(0, 3, m)
    s = np.round(rng.normal(size=(M, m)) + 0.4 * mem + 0.3 * mem * (g == 2), 1)
    res = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5)
    got = {k: [round(float(v["delta_pp"]), 9), None if v["p_perm"] is None else round(float(v["p_perm"]), 9),
               round(float(v["null_floor_pp"]), 9)] for k, v in res.attacks.items()}
    assert list(got) == list(ATTACKS)
    assert got == GOLDEN


@pytest.mark.parametrize(("source", "message"), [
    ('ATTACK = Attack("other", "x", "#000000", "X", order=5, advantage=lambda b: b.mem.mean(0))',
     "declares the attack 'other': a module is named after its attack"),
    ('ATTACK = Attack("toy", "x", "#000000", "X", order=5)', "give exactly one of contributions and advantage"),
    ('ATTACK = Attack("toy", "x", "#000000", "X", order=5, advantage=lambda b: b.mem.mean(0), first=True)',
     "first, low_fpr and roc need its scores"),
    ('ATTACK = Attack("toy", "x", "#000000", "X", order=5, advantage=lambda b: b.mem.mean(0), roc=True)',
     "first, low_fpr and roc need its scores"),
    ('ATTACK = Attack("toy", "x", "#000000", "X", order=5, advantage=lambda b: b.mem.mean(0), first=True, '
     'scores=lambda b: b.phi, min_models=8)', "min_models 8 cannot hold"),
])
def test_a_malformed_attack_module_stops_the_registry(tmp_path, monkeypatch, source, message):
    import importlib
    import sys

    from fairdp_core.audit.mia import discover

    pkg = tmp_path / "toy_attacks"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "toy.py").write_text(f"from fairdp_core.audit.bank import Attack\n\n{source}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_attacks", None), sys.modules.pop("toy_attacks.toy", None)
    with pytest.raises(ValueError, match=message):
        discover(importlib.import_module("toy_attacks"))


def test_an_attacks_scores_never_meet_the_banks_own_caches():
    """An attack's scores are cached apart from the bank's own arrays (``scores``, the sorts): an attack named like
    one of them gets its own scores, and the bank's PA-ALOOA score is untouched."""
    from fairdp_core.audit.bank import Bank

    s, mem, g = _bank(4, 8, 60)
    bank = Bank(loss=-s, phi=s, mem=mem, g=g, K=3, rng=np.random.default_rng(0), n_null=2,
                scorers={"scores": lambda b: b.phi + 100.0, "rows_sorted": lambda b: b.phi - 100.0})
    assert np.array_equal(bank.score("scores"), s + 100.0) and np.array_equal(bank.scores, s)
    assert np.array_equal(bank.score("rows_sorted"), s - 100.0)
    assert np.array_equal(bank.rows_sorted[1], attacks.sort_rows_with_labels(s, mem)[1])  # the bank's own sort
    assert list(bank.computed_scores()) == ["scores", "rows_sorted"]
    with pytest.raises(KeyError, match="computes no scores"):
        bank.score("ga")


def test_an_audit_without_the_low_fpr_view_computes_only_what_its_attacks_need():
    """audit(low_fpr=False): no low-FPR rows or view, no LiRA scores unless a LiRA attack is chosen, and the chosen
    attacks' results equal those of the full audit of the same subset (LiRA's scores draw nothing from the stream)."""
    from fairdp_core.audit.run import audit

    s, mem, g = _bank(6, 8, 90)
    kw = dict(alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5, attacks=("alooa_cross_fit", "rmia"))
    full, lean = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], **kw), audit(-np.abs(s), s, mem, g, ["a", "b", "c"],
                                                                           **kw, low_fpr=False)
    assert full.low_fpr and not lean.low_fpr and "low_fpr_s" not in lean.timings
    assert not [r for r in lean.group_rows if r["attack"].endswith("_lowfpr")]
    assert list(full.scores) == ["lira_online", "lira_offline", "rmia"] and list(lean.scores) == ["rmia"]
    for name in ("alooa_cross_fit", "rmia"):
        assert lean.attacks[name]["delta_pp"] == full.attacks[name]["delta_pp"]
        assert lean.attacks[name]["p_perm"] == full.attacks[name]["p_perm"]


def test_audit_results_are_typed_rows_written_with_the_same_keys():
    """audit() returns typed rows (GroupRisk, LowFprRow, AttackSummary: named, frozen fields) that read as mappings
    and write exactly the keys, in the order, of the pipeline's summary.json and groups.csv."""
    import dataclasses

    from fairdp_core.audit.run import AttackSummary, GroupRisk, LowFprRow, audit

    s, mem, g = _bank(6, 8, 90)
    res = audit(-np.abs(s), s, mem, g, ["a", "b", "c"], alpha=0.05, n_perm=20, n_null=2, stats_seed=3, delta=1e-5)
    head = ["gpr", "delta_pp", "null_floor_pp", "p_perm", "interval", "gpr_lo", "gpr_hi", "delta_lo", "delta_hi",
            "p_delta_gt_0", "contrast"]
    cf, ins, gba = res.attacks["alooa_cross_fit"], res.attacks["alooa_in_sample"], res.attacks["gba"]
    assert all(isinstance(a, AttackSummary) for a in res.attacks.values())
    assert list(cf.as_dict()) == [*head, "contrasts"] and list(ins.as_dict()) == head  # a point estimate: none
    assert list(gba.as_dict()) == [*head, "contrasts", "note"] and gba["note"] == gba.note
    assert cf["delta_pp"] == cf.delta_pp and dict(cf) == cf.as_dict() and "contrasts" in cf and "note" not in cf
    assert cf == cf.as_dict() and cf != {**cf.as_dict(), "delta_pp": -1.0}  # equal to the dict it writes, as a dict
    with pytest.raises(TypeError):
        hash(cf)  # unhashable, as the dicts were
    with pytest.raises(dataclasses.FrozenInstanceError):
        cf.delta_pp = 0.0
    risks = [r for r in res.group_rows if isinstance(r, GroupRisk)]
    views = [r for r in res.group_rows if isinstance(r, LowFprRow)]
    assert len(risks) + len(views) == len(res.group_rows) and len(views) == len(res.low_fpr)
    assert risks[0].attack == "alooa_cross_fit" and risks[0]["gpr"] == risks[0].gpr
    assert list(res.groups.columns) == ["attack", "group", "group_name", "n_records", "gpr", "gpr_lo", "gpr_hi",
                                        "tpr_at_0.1pct", "tpr_at_0.1pct_lo", "tpr_at_0.1pct_hi", "tpr_at_1pct",
                                        "tpr_at_1pct_lo", "tpr_at_1pct_hi", "eps_lb"]
    assert views[0]["tpr_at_0.1pct"] == views[0].tpr_at_01pct and views[0].attack == "lira_online_lowfpr"
