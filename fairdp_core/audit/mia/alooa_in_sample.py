"""PA-ALOOA in-sample, the paper's estimator: each record's threshold is fitted on the pairs it is scored on, so its
level carries an upward bias. Reported as a point estimate (no interval)."""

from ..attacks import record_advantage
from ..bank import Attack

ATTACK = Attack("alooa_in_sample", "PA-ALOOA in-sample (paper)", "#56B4E9", "IS", order=20,
                advantage=lambda b: record_advantage(b.scores, b.mem, estimator="in_sample",
                                                     presorted=b.columns_sorted))
