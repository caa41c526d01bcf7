"""A cheap per-group proxy of membership risk, recorded during training (an Opacus-compatible hook).

A membership audit needs many models (or one model's full scores, :mod:`fairdp_core.audit.one`). During training a
cheaper signal is at hand: per group, the gap between the mean loss on held-out records and on a sample of training
records (a generalisation gap: membership attacks feed on it), and, with a DP optimizer, the share of the group's
per-sample gradients that the clip bound cut. :class:`GroupProxy` records both once per epoch as a tidy table.

Both are diagnostics computed from private data outside ε: they never influence training, and they must not be
released as if private.

    proxy = GroupProxy(train_sample=(X_tr[:1000], y_tr[:1000], g_tr[:1000]), holdout=(X_ho, y_ho, g_ho))
    for epoch in range(epochs):
        for xb, yb, gb in loader:
            optimizer.zero_grad(); loss_fn(model(xb), yb).backward()
            proxy.observe_batch(optimizer, gb)      # before step(): reads Opacus's per-sample gradients
            optimizer.step()
        proxy.record(model, epoch)
    proxy.table()                                    # epoch, group, train_loss, holdout_loss, gap, clipped_fraction

The engine's equivalent, :class:`BankGroupProxy`, observes a whole bank through ``train_bank(on_epoch=...)``: the same
columns per epoch, model and group, each model's training sample drawn from its own members.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["BankGroupProxy", "GroupProxy"]


class GroupProxy:
    """Per epoch and group: mean loss on a training sample and on held-out records, their gap (held-out − training),
    and the clipped fraction of the group's per-sample gradients seen since the last record (NaN without a DP
    optimizer)."""

    def __init__(self, *, train_sample, holdout, batch_size: int = 2048):
        self.train, self.holdout = (tuple(np.asarray(a) for a in part) for part in (train_sample, holdout))
        for name, (X, y, g) in (("train_sample", self.train), ("holdout", self.holdout)):
            if not len(X) == len(y) == len(g):
                raise ValueError(f"{name}: {len(X)} records, {len(y)} labels and {len(g)} groups")
        self.groups = sorted(set(self.train[2].tolist()) | set(self.holdout[2].tolist()), key=str)
        self.batch_size = batch_size
        self.rows: list[dict] = []
        self._clipped: dict = {}
        self._seen: dict = {}
        self._pending: tuple | None = None

    def observe_batch(self, optimizer, groups) -> None:
        """After backward(), before step(): count, per group, the per-sample gradients whose norm exceeds the bound
        they are clipped at: Opacus's ``max_grad_norm``, or, for the group-aware optimizers of
        :mod:`fairdp_core.opacus_compat` (DP-SGD-S, DPSGD-F), each sample's own group's bound, which such an
        optimizer may set only inside ``step()`` (DPSGD-F: from the batch's released counts). Those batches are
        counted once their step has run (at the next call or at :meth:`record`)."""
        import torch

        self._settle()
        samples = [p.grad_sample for p in optimizer.params if getattr(p, "grad_sample", None) is not None]
        if not samples:
            raise ValueError("observe_batch: no per-sample gradients (call it after backward() on a model wrapped by "
                             "Opacus's make_private, before optimizer.step())")
        norms = torch.stack([s.reshape(len(s), -1).norm(2, dim=1) for s in samples], dim=1).norm(2, dim=1)
        g = np.asarray(groups.cpu() if hasattr(groups, "cpu") else groups)
        if len(g) != len(norms):
            raise ValueError(f"observe_batch: {len(g)} groups for a batch of {len(norms)} per-sample gradients")
        if hasattr(optimizer, "last_sample_bounds"):  # per-group bounds, known once step() has clipped the batch
            optimizer.last_sample_bounds = None
            self._pending = (optimizer, norms.detach().cpu(), g)
            return
        self._count((norms > optimizer.max_grad_norm).cpu().numpy(), g)

    def _count(self, cut: np.ndarray, g: np.ndarray) -> None:
        for k in np.unique(g).tolist():
            self._clipped[k] = self._clipped.get(k, 0) + int(cut[g == k].sum())
            self._seen[k] = self._seen.get(k, 0) + int((g == k).sum())

    def _settle(self) -> None:
        """Count the pending batch of a group-aware optimizer against the bounds its step() clipped it at."""
        if self._pending is None:
            return
        optimizer, norms, g = self._pending
        self._pending = None
        bounds = optimizer.last_sample_bounds
        if bounds is None or len(bounds) != len(norms):
            raise RuntimeError("GroupProxy: the optimizer has not clipped the observed batch; call observe_batch "
                               "after backward() and before step(), then step()")
        self._count((norms > bounds.detach().cpu()).numpy(), g)

    def _losses(self, model, X, y) -> np.ndarray:
        import torch

        out = []
        model.eval()
        with torch.no_grad():
            for i in range(0, len(X), self.batch_size):
                logits = model(torch.as_tensor(X[i:i + self.batch_size]).float())
                out.append(torch.nn.functional.cross_entropy(logits, torch.as_tensor(y[i:i + self.batch_size]).long(),
                                                             reduction="none").cpu().numpy())
        model.train()
        return np.concatenate(out)

    def record(self, model, epoch: int) -> None:
        """Append this epoch's row per group (and reset the clipped counts)."""
        self._settle()
        lt, lh = self._losses(model, *self.train[:2]), self._losses(model, *self.holdout[:2])
        for k in self.groups:
            tr, ho = lt[self.train[2] == k], lh[self.holdout[2] == k]
            seen = self._seen.get(k, 0)
            self.rows.append({"epoch": epoch, "group": k, "train_loss": float(tr.mean()) if len(tr) else np.nan,
                              "holdout_loss": float(ho.mean()) if len(ho) else np.nan,
                              "gap": float(ho.mean() - tr.mean()) if len(tr) and len(ho) else np.nan,
                              "clipped_fraction": self._clipped.get(k, 0) / seen if seen else np.nan})
        self._clipped, self._seen = {}, {}

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["epoch", "group", "train_loss", "holdout_loss", "gap",
                                                "clipped_fraction"])

    def write(self, path: str | os.PathLike) -> Path:
        """The table as CSV, written atomically."""
        from ..atomic import write_text

        write_text(path, self.table().to_csv(index=False, float_format="%.6g"))
        return Path(path)


class BankGroupProxy:
    """:class:`GroupProxy` for a bank trained by the engine: ``train_bank(..., on_epoch=proxy)``. Per epoch, model
    and group: the mean loss on a sample of the model's own training records (at most ``sample``, seeded) and on
    the held-out records, their gap (held-out − training), and the share of the group's per-sample gradients
    clipped during that epoch (NaN without clipping). ``X``, ``y``, ``group`` and ``membership`` [M, n] are what the
    bank trains on; ``holdout`` = (X, y, group) of records no model trained on."""

    def __init__(self, X, y, group, membership, *, holdout, sample: int = 1000, seed: int = 0):
        X, y, group = np.asarray(X), np.asarray(y), np.asarray(group)
        membership = np.asarray(membership, dtype=bool)
        if membership.ndim != 2 or membership.shape[1] != len(y) or not len(X) == len(y) == len(group):
            raise ValueError(f"membership {membership.shape} must be [M, n] for {len(y)} records, labels and groups")
        self.holdout = tuple(np.asarray(a) for a in holdout)
        if not len(self.holdout[0]) == len(self.holdout[1]) == len(self.holdout[2]):
            raise ValueError("holdout: as many records, labels and groups")
        for name, g in (("group", group), ("holdout groups", self.holdout[2])):
            if not np.issubdtype(g.dtype, np.integer) or (len(g) and g.min() < 0):
                raise ValueError(f"{name}: the engine's group codes 0..K-1 (integers), got {g.dtype} "
                                 f"{np.unique(g)[:5].tolist()}")
        rng = np.random.default_rng(seed)
        self.picks = [rng.permutation(np.flatnonzero(row))[:sample] for row in membership]
        self.idx = np.unique(np.concatenate(self.picks))  # evaluated once per epoch for every model
        self.X, self.y, self.group = X[self.idx], y[self.idx], group[self.idx]
        self.where = [np.searchsorted(self.idx, p) for p in self.picks]
        self.groups = sorted(set(group.tolist()) | set(self.holdout[2].tolist()), key=str)
        self.rows: list[dict] = []
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def __call__(self, view) -> None:
        clipped, seen = view.clipped.cpu().numpy().copy(), view.seen.cpu().numpy().copy()
        if clipped.shape[0] != len(self.picks) or (self.groups and max(self.groups) >= clipped.shape[1]):
            raise ValueError(f"BankGroupProxy was built for {len(self.picks)} models and groups up to "
                             f"{max(self.groups)}; the bank has {clipped.shape[0]} models and {clipped.shape[1]} groups "
                             "(a sharded bank: observe the whole bank, not a shard)")
        lt, lh = view.losses(self.X, self.y), view.losses(*self.holdout[:2])
        c0, s0 = self._last if self._last is not None else (np.zeros_like(clipped), np.zeros_like(seen))
        self._last = (clipped, seen)
        for m, where in enumerate(self.where):
            for k in self.groups:
                tr = lt[m, where][self.group[where] == k]
                ho = lh[m][self.holdout[2] == k]
                n_seen = seen[m, k] - s0[m, k]
                self.rows.append({
                    "epoch": view.epoch, "model": m, "group": k,
                    "train_loss": float(tr.mean()) if len(tr) else np.nan,
                    "holdout_loss": float(ho.mean()) if len(ho) else np.nan,
                    "gap": float(ho.mean() - tr.mean()) if len(tr) and len(ho) else np.nan,
                    "clipped_fraction": float((clipped[m, k] - c0[m, k]) / n_seen) if n_seen else np.nan})

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["epoch", "model", "group", "train_loss", "holdout_loss", "gap",
                                                "clipped_fraction"])

    def write(self, path: str | os.PathLike) -> Path:
        """The table as CSV, written atomically."""
        from ..atomic import write_text

        write_text(path, self.table().to_csv(index=False, float_format="%.6g"))
        return Path(path)
