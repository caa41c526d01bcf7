"""The membership design of the audit (docs/study.md, 'Membership design'): who is IN for which model.

PA-ALOOA: an audit set A of m records of the training pool D, stratified by group; R rounds each split A into
two halves at random (stratified by group); model (r, 0) trains on (D∖A) ∪ half 0 and model (r, 1) on
(D∖A) ∪ half 1. Every audit record is IN for exactly R models and OUT for R. The membership matrix [2R, m] is
the artifact every later step reads (like LiRA's ``keep.npy``); rows 2r and 2r+1 are complementary.

PA-LOOA: L target records (stratified by group); for each target and each of R' pairs, a model on D and a model
on D∖{z} sharing every random stream (see ``train_bank(stream_ids=..., sample_over=...)``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..atomic import atomic_path

__all__ = ["AuditDesign", "LooaDesign", "audit_design", "looa_design", "stratified_pick"]


def stratified_pick(group: np.ndarray, m: int, *, min_per_group: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted indices of m records: at least min(n_k, min_per_group) from each group, the rest proportional.

    Groups with fewer than ``min_per_group`` records contribute all of theirs. Raises if m is too small to
    give every group its minimum.
    """
    K = int(group.max()) + 1
    sizes = np.bincount(group, minlength=K)
    floor = np.minimum(sizes, min_per_group)
    if floor.sum() > m:
        raise ValueError(f"audit size m={m} cannot hold min(n_k, {min_per_group}) records of each of {K} groups "
                         f"({floor.sum()} needed)")
    if m > len(group):
        raise ValueError(f"audit size m={m} exceeds the {len(group)} training records")
    take = floor.copy()
    rest = m - take.sum()
    room = sizes - take
    exact = rest * room / max(room.sum(), 1)
    extra = np.minimum(np.floor(exact).astype(int), room)
    left = rest - extra.sum()
    order = np.argsort(-(exact - extra), kind="stable")
    for k in order:
        if left == 0:
            break
        add = min(left, room[k] - extra[k])
        extra[k] += add
        left -= add
    take += extra
    chosen = [rng.choice(np.flatnonzero(group == k), size=int(take[k]), replace=False) for k in range(K)]
    return np.sort(np.concatenate(chosen))


@dataclass(frozen=True)
class AuditDesign:
    """``audit_idx`` [m] indices into the training pool; ``membership`` [2R, m] bool (rows 2r, 2r+1
    complementary); ``audit_group`` [m]. :meth:`training_membership` gives the engine's [2R, n] matrix."""

    audit_idx: np.ndarray
    membership: np.ndarray
    audit_group: np.ndarray
    n: int

    @property
    def R(self) -> int:
        return self.membership.shape[0] // 2

    def training_membership(self) -> np.ndarray:
        full = np.ones((self.membership.shape[0], self.n), dtype=bool)
        full[:, self.audit_idx] = self.membership
        return full

    def save(self, path: str | os.PathLike) -> None:
        """np.savez to a temp file, then rename."""
        with atomic_path(path, suffix=".npz") as tmp:
            np.savez(tmp, audit_idx=self.audit_idx, membership=self.membership, audit_group=self.audit_group,
                     n=self.n)

    @classmethod
    def load(cls, path: str | os.PathLike) -> AuditDesign:
        with np.load(path) as z:
            return cls(z["audit_idx"], z["membership"], z["audit_group"], int(z["n"]))


def audit_design(group: np.ndarray, *, m: int, R: int, min_per_group: int, rng: np.random.Generator) -> AuditDesign:
    """Draw the audit set and R rounds of complementary halves, each half stratified by group."""
    if R < 1:
        raise ValueError("R must be at least 1")
    idx = stratified_pick(group, m, min_per_group=min_per_group, rng=rng)
    g = group[idx]
    mem = np.zeros((2 * R, len(idx)), dtype=bool)
    for r in range(R):
        half = np.zeros(len(idx), dtype=bool)
        for k in np.unique(g):
            members = rng.permutation(np.flatnonzero(g == k))
            # odd-sized groups: the extra record goes to a random half, so IN/OUT counts stay exactly R each
            cut = len(members) // 2 + (rng.random() < 0.5 if len(members) % 2 else 0)
            half[members[:cut]] = True
        mem[2 * r], mem[2 * r + 1] = half, ~half
    return AuditDesign(idx, mem, g, len(group))


@dataclass(frozen=True)
class LooaDesign:
    """``targets`` [L] indices into the pool; ``membership`` [2·L·R', n] (rows: target ℓ, pair r, IN then OUT);
    ``stream_ids`` [2·L·R'] (the two models of a pair share one); ``target_of_row`` [2·L·R']; ``is_in``."""

    targets: np.ndarray
    membership: np.ndarray
    stream_ids: np.ndarray
    target_of_row: np.ndarray
    is_in: np.ndarray


def looa_design(group: np.ndarray, *, L: int, R: int, min_per_group: int, rng: np.random.Generator,
                candidates: np.ndarray | None = None) -> LooaDesign:
    """L targets, stratified by group, drawn from ``candidates`` (pool indices; default the whole pool, e.g. the
    audit set to compare with PA-ALOOA); for each, R pairs (D, D∖{z}) with shared streams. ``group`` [n]."""
    n = len(group)
    cand = np.arange(n) if candidates is None else np.asarray(candidates)
    g = group[cand]
    targets = cand[stratified_pick(g, L, min_per_group=min(min_per_group, L // (int(g.max()) + 1)), rng=rng)]
    rows = 2 * len(targets) * R
    mem = np.ones((rows, n), dtype=bool)
    target_of_row = np.repeat(np.arange(len(targets)), 2 * R)
    is_in = np.tile([True, False], len(targets) * R)
    mem[np.flatnonzero(~is_in), targets[target_of_row[~is_in]]] = False
    stream_ids = np.repeat(np.arange(len(targets) * R), 2)
    return LooaDesign(targets, mem, stream_ids, target_of_row, is_in)
