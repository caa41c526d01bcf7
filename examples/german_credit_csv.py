"""Write the Statlog German Credit data (UCI; not one of the study's seven datasets) as a CSV with named columns,
for the README's worked example of `fairdp audit-custom`.

    python examples/german_credit_csv.py [german.data] [german_credit.csv]

german.data is read from the dataset mirror (../shared/datasets/german_credit/, or $FAIRDP_DATA_MIRROR) by default;
its sha256 is checked. Columns follow german.doc; ``sex`` is derived from "personal status and sex" (A92 and A95:
female; A91, A93, A94: male) and ``age_group`` splits age at 25; ``credit_risk`` is good/bad.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pandas as pd

SHA256 = "e2bc10785808eeb5e30462f0805edb73a672f295bc671dec0bca6e2fb5c8e1ca"
COLUMNS = ["checking_account", "duration_months", "credit_history", "purpose", "credit_amount", "savings",
           "employment_since", "installment_rate", "personal_status_sex", "other_debtors", "residence_since",
           "property", "age", "other_installment_plans", "housing", "existing_credits", "job", "people_liable",
           "telephone", "foreign_worker", "credit_risk"]


def main(argv: list[str]) -> int:
    mirror = Path(os.environ.get("FAIRDP_DATA_MIRROR", Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    src = Path(argv[0]) if argv else mirror / "german_credit" / "german.data"
    out = Path(argv[1]) if len(argv) > 1 else Path("german_credit.csv")
    if not src.is_file():
        sys.exit(f"no file {src}: download german.data from https://archive.ics.uci.edu/dataset/144 (sha256 {SHA256})")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    if digest != SHA256:
        sys.exit(f"{src}: sha256 {digest}, expected {SHA256}")
    df = pd.read_csv(src, sep=r"\s+", header=None, names=COLUMNS)
    df["sex"] = df.pop("personal_status_sex").map(lambda v: "female" if v in ("A92", "A95") else "male")
    df["age_group"] = (df["age"] >= 25).map({True: "25+", False: "under 25"})
    df["credit_risk"] = df["credit_risk"].map({1: "good", 2: "bad"})
    df.to_csv(out, index=False)
    print(f"{out}: {len(df)} rows, {df.shape[1]} columns")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
