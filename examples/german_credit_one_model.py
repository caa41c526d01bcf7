"""Audit ONE trained model per group (fairdp audit-one) on the Statlog German Credit data (UCI; not one of the study's
seven datasets): a model trained on a random half, its other half held out.

    python examples/german_credit_one_model.py [german_credit.csv] [out_dir]

Writes german_credit.csv first if it is missing (examples/german_credit_csv.py: from the dataset mirror, sha256
checked). Trains two models on the same half: an MLP without DP (200 epochs, to let it memorise) and the same MLP
with Opacus's ``make_private_with_epsilon`` (DP-SGD, ε = 3, δ = 1e-5, Poisson sampling, RDP accountant). For each,
the per-record losses of the training half and of the held-out half go to ``out_dir/<model>_scores.csv`` (the CSV
`fairdp audit-one` reads: ``loss``, ``member``, ``sex``, ``age_group``), and the audit's answer by ``sex`` is printed.
The same audit from the command line:

    fairdp audit-one --scores out_dir/sgd_scores.csv --loss loss --group sex --out out_dir/audit_sgd

One model's answer is conditional on that model and on its split; docs/library.md says how far it agrees with the
audit of the model's recipe (measured on the study's banks).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from fairdp_core.audit.one import audit_one, check_disjoint, loss_scores

SEED, EPSILON, DELTA = 0, 3.0, 1e-5


def _features(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """One-hot categoricals and standardised numerics (the ranges are read from the file: outside ε, as in
    audit-custom); the label is credit_risk == "bad"."""
    y = (df["credit_risk"] == "bad").to_numpy(np.int64)
    X = pd.get_dummies(df.drop(columns=["credit_risk", "sex", "age_group"]), dtype=float)
    X = (X - X.mean()) / X.std().replace(0, 1)
    return X.to_numpy(np.float32), y


def _mlp(d: int) -> nn.Module:
    return nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 2))


def _train(X: np.ndarray, y: np.ndarray, *, private: bool) -> nn.Module:
    torch.manual_seed(SEED)
    model = _mlp(X.shape[1])
    data = torch.utils.data.TensorDataset(torch.as_tensor(X), torch.as_tensor(y))
    loader = torch.utils.data.DataLoader(data, batch_size=50, shuffle=True,
                                         generator=torch.Generator().manual_seed(SEED))
    epochs = 50 if private else 200
    opt = torch.optim.SGD(model.parameters(), lr=0.5 if private else 0.2)
    loss = nn.CrossEntropyLoss()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's notices: secure RNG off, backward hooks on an input layer
        if private:
            from opacus import PrivacyEngine

            engine = PrivacyEngine(accountant="rdp")
            model, opt, loader = engine.make_private_with_epsilon(
                module=model, optimizer=opt, data_loader=loader, target_epsilon=EPSILON, target_delta=DELTA,
                epochs=epochs, max_grad_norm=1.0)
        for _ in range(epochs):
            for xb, yb in loader:  # Poisson batches under DP (Opacus noises an empty one too)
                opt.zero_grad()
                loss(model(xb), yb).backward()
                opt.step()
    if private:
        print(f"DP-SGD: σ = {opt.noise_multiplier:.3f}, q = {1 / len(loader):.3f} (Poisson), T = {epochs * len(loader)}, "
              f"C = 1, RDP accountant: ε = {engine.get_epsilon(DELTA):.2f} at δ = {DELTA:g}")
    return model


def main(argv: list[str]) -> int:
    csv = Path(argv[0]) if argv else Path("german_credit.csv")
    out = Path(argv[1]) if len(argv) > 1 else Path("german_credit_one_model")
    if not csv.exists():
        sys.path.insert(0, str(Path(__file__).parent))
        from german_credit_csv import main as write_csv

        mirror = Path(os.environ.get("FAIRDP_DATA_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
        if write_csv([str(mirror / "german_credit" / "german.data"), str(csv)]):
            return 1
    df = pd.read_csv(csv)
    X, y = _features(df)
    member = np.random.default_rng(SEED).permutation(len(df)) < len(df) // 2
    check_disjoint(train_ids=np.flatnonzero(member), holdout_ids=np.flatnonzero(~member))
    out.mkdir(parents=True, exist_ok=True)
    for name, private in (("sgd", False), ("dpsgd", True)):
        model = _train(X[member], y[member], private=private)
        scores = loss_scores(model, X, y)
        acc = float((model(torch.as_tensor(X[~member])).argmax(1).numpy() == y[~member]).mean())
        pd.DataFrame({"loss": -scores, "member": member.astype(int), "sex": df["sex"],
                      "age_group": df["age_group"]}).to_csv(out / f"{name}_scores.csv", index=False)
        res = audit_one(scores[member], scores[~member], df["sex"][member], df["sex"][~member], seed=SEED)
        print(f"\n{name}: held-out accuracy {acc:.1%}; per-record losses in {out / f'{name}_scores.csv'}")
        print(res.table()[["group", "n_members", "n_nonmembers", "gpr_pp", "lo_pp", "hi_pp"]].round(2).to_string(
            index=False))
        print("\n".join(res.headline() + res.answer()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
