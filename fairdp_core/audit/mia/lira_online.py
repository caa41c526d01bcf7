"""LiRA online: each model's IN and OUT Gaussians of the logit-scaled confidence φ are fitted on the other fold's
models, and a record is called IN when the likelihood ratio exceeds 1: no threshold is fitted on labels. Its scores
are computed first (beside LiRA offline's) and feed the low-FPR view per group. Per-group GPR intervals are not
reported: they undercover in simulation (down to 0.86, reports/coverage/attack_coverage.md); the contrasts and Δ's
interval cover."""

from ..attacks import lira_scores
from ..bank import Attack
from ..inference import prediction_contributions

ATTACK = Attack("lira_online", "LiRA online", "#CC79A7", "LiRA\non", order=60,
                scores=lambda b: lira_scores(b.phi, b.mem, mode="online"), first=True, low_fpr=True, roc=True,
                contributions=lambda b: prediction_contributions(b.score("lira_online") >= 0, b.mem),
                group_intervals=False,
                note="per-group GPR intervals not reported: they undercover in simulation (down to 0.86, "
                     "reports/coverage/attack_coverage.md); the contrasts and Δ's interval cover")
