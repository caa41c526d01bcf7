"""RMIA online: likelihood ratios against reference models (the other fold's) and a population of the model's OUT
records (of the other half of the audited records); its threshold is cross-fitted like PA-ALOOA's."""

from ..bank import Attack
from ..inference import cross_fit_contributions
from ..rmia import rmia_scores

ATTACK = Attack("rmia", "RMIA", "#44AA99", "RMIA", order=80, scores=lambda b: rmia_scores(b.phi, b.mem), roc=True,
                contributions=lambda b: cross_fit_contributions(b.score("rmia"), b.mem))
