"""RMIA offline: the reference models are the other pairs of the model's own fold that the record is OUT of, with
the paper's correction a; left out of banks smaller than it needs."""

from ..bank import Attack
from ..inference import cross_fit_contributions
from ..rmia import OFFLINE_RMIA_MIN_MODELS, rmia_scores

ATTACK = Attack("rmia_offline", "RMIA offline", "#AA3377", "RMIA\noff", order=90,
                scores=lambda b: rmia_scores(b.phi, b.mem, mode="offline"),
                contributions=lambda b: cross_fit_contributions(b.score("rmia_offline"), b.mem),
                min_models=OFFLINE_RMIA_MIN_MODELS, roc=True)
