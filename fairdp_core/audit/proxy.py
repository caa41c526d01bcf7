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
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["GroupProxy"]


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

    def observe_batch(self, optimizer, groups) -> None:
        """After backward(), before step(): count, per group, the per-sample gradients whose norm exceeds the
        optimizer's clip bound (Opacus's ``grad_sample`` and ``max_grad_norm``)."""
        import torch

        samples = [p.grad_sample for p in optimizer.params if getattr(p, "grad_sample", None) is not None]
        if not samples:
            raise ValueError("observe_batch: no per-sample gradients (call it after backward() on a model wrapped by "
                             "Opacus's make_private, before optimizer.step())")
        norms = torch.stack([s.reshape(len(s), -1).norm(2, dim=1) for s in samples], dim=1).norm(2, dim=1)
        g = np.asarray(groups.cpu() if hasattr(groups, "cpu") else groups)
        if len(g) != len(norms):
            raise ValueError(f"observe_batch: {len(g)} groups for a batch of {len(norms)} per-sample gradients")
        cut = (norms > optimizer.max_grad_norm).cpu().numpy()
        for k in np.unique(g).tolist():
            self._clipped[k] = self._clipped.get(k, 0) + int(cut[g == k].sum())
            self._seen[k] = self._seen.get(k, 0) + int((g == k).sum())

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
