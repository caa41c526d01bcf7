"""PA-ALOOA null-corrected: the in-sample advantage less its mean under permuted membership labels. Reported as a
point estimate (no interval)."""

from ..attacks import record_advantage
from ..bank import Attack

ATTACK = Attack("alooa_null_corrected", "PA-ALOOA null-corrected", "#003f63", "NC", order=30,
                advantage=lambda b: record_advantage(b.scores, b.mem, estimator="null_corrected", rng=b.rng,
                                                     n_null=b.n_null, presorted=b.columns_sorted))
