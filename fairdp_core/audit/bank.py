"""What every attack of the registry reads: one bank's signals and the scores computed from them (:class:`Bank`),
and what an attack module declares (:class:`Attack`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .attacks import ga_predictions, gba_advantage, gba_predictions, sort_columns, sort_rows_with_labels
from .stats import delta_pp, gpr
from .threads import ordered_map

__all__ = ["Attack", "Bank"]


@dataclass
class Bank:
    """One bank's signals and the scores computed from them, each computed once on first use (an attack, the
    low-FPR view and a caller's ROC read the same arrays; :meth:`computed_scores` returns those computed). ``rng``:
    the one generator every permutation draws from, in the registry's order. ``scorers``: per attack that computes
    per-(model, record) scores, the function that computes them (:attr:`Attack.scores`)."""

    loss: np.ndarray
    phi: np.ndarray
    mem: np.ndarray
    g: np.ndarray
    K: int
    rng: np.random.Generator
    n_null: int
    scorers: dict[str, Callable[[Bank], np.ndarray]] = field(default_factory=dict)
    _cache: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _scores: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)  # apart: any attack name

    def _once(self, name: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = compute()
        return self._cache[name]

    @property
    def scores(self) -> np.ndarray:
        """PA-ALOOA's score: −loss, float64."""
        return self._once("scores", lambda: -np.asarray(self.loss, dtype=np.float64))

    def score(self, attack: str) -> np.ndarray:
        """Attack ``attack``'s per-(model, record) scores [M, m] (its :attr:`Attack.scores`), computed once."""
        if attack not in self.scorers:
            raise KeyError(f"attack {attack!r} computes no scores (those that do: {', '.join(self.scorers)})")
        if attack not in self._scores:
            self._scores[attack] = self.scorers[attack](self)
        return self._scores[attack]

    def computed_scores(self) -> dict[str, np.ndarray]:
        """The attacks' scores computed so far, in the registry's order."""
        return {k: self._scores[k] for k in self.scorers if k in self._scores}

    @property
    def rows_sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each model's scores sorted (:func:`sort_rows`) and its labels in that order: PA-GA, PA-GBA and PA-GBA's
        floor read the one sort."""
        return self._once("rows_sorted", lambda: sort_rows_with_labels(self.scores, self.mem))

    @property
    def columns_sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each record's scores sorted over models (:func:`sort_columns`): the in-sample and null-corrected
        PA-ALOOA read the one sort."""
        return self._once("columns_sorted", lambda: sort_columns(self.scores))

    def ga(self) -> np.ndarray:
        order, s_sorted, l_sorted = self.rows_sorted
        return ga_predictions(self.scores, self.mem, presorted=(order, s_sorted), labels_sorted=l_sorted)

    def gba(self, group: np.ndarray | None = None, advantage: bool = False) -> np.ndarray:
        """PA-GBA's predictions on ``group`` (default the bank's), or with ``advantage`` its per-record advantage."""
        order, s_sorted, l_sorted = self.rows_sorted
        fn = gba_advantage if advantage else gba_predictions
        return fn(self.scores, self.mem, self.g if group is None else group, presorted=(order, s_sorted),
                  labels_sorted=l_sorted)

    def gba_floor(self) -> float:
        """PA-GBA's null floor: its per-group thresholds refitted on permuted group labels (the rows sorted once).
        The permutations are drawn in order here; the refits run on threads
        (:func:`~fairdp_core.audit.threads.ordered_map`)."""
        perms = [self.rng.permutation(self.g) for _ in range(self.n_null)]
        floors = ordered_map(lambda pg: delta_pp(gpr(self.gba(pg, advantage=True), pg, self.K)), perms)
        return float(np.mean(floors))


@dataclass(frozen=True)
class Attack:
    """One attack of the registry.

    ``contributions``: per-(model, record) contributions [M, m] whose sum over models is each record's advantage;
    such an attack gets intervals over records × model pairs (:func:`~fairdp_core.audit.inference.group_inference`).
    ``advantage``: the per-record advantage [m] directly (an estimator not of that form: a point estimate, no
    interval). Exactly one of the two is given. ``null_floor``: replaces the permutation floor where the attack's
    fit depends on the groups. ``group_intervals`` / ``test_delta``: whether its per-group intervals and its test of
    Δ > 0 are reported (``note`` says why not). ``min_models``: left out of smaller banks. ``label``, ``color`` and
    ``short`` (a figure's tick): how every report names and draws it (fairdp_core/reporting/plots.py reads them here).
    ``order``: where it runs and is reported among the registry's attacks; they draw their permutations from one
    stream in this order, so the order is part of every result. ``scores``: the per-(model, record) scores [M, m]
    it computes from the bank, once (:meth:`Bank.score`), returned with the result; they draw nothing from the
    bank's generator (the ``first`` ones are computed on threads). ``first``: its scores are computed before any
    attack runs, beside the other such attacks'. ``low_fpr``: the low-FPR view per group (TPR at 0.1% and 1% FPR,
    the ε lower bound) reads its scores; exactly one attack has it. ``first`` and ``low_fpr`` are computed on every
    bank, so such an attack needs no more than the 2 models every bank has. ``roc``: the user's audit
    (:func:`fairdp_core.audit.custom.audit_bank`) draws the ROC per group of its scores."""

    name: str
    label: str
    color: str
    short: str
    order: int
    contributions: Callable[[Bank], np.ndarray] | None = None
    advantage: Callable[[Bank], np.ndarray] | None = None
    null_floor: Callable[[Bank], float] | None = None
    group_intervals: bool = True
    test_delta: bool = True
    note: str | None = None
    min_models: int = 2
    scores: Callable[[Bank], np.ndarray] | None = None
    first: bool = False
    low_fpr: bool = False
    roc: bool = False
