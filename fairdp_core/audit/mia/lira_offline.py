"""LiRA offline: only the OUT Gaussian (fitted on the other fold's models); a record is called IN when φ exceeds
the OUT mean. No threshold is fitted on labels."""

from ..attacks import lira_scores
from ..bank import Attack
from ..inference import prediction_contributions

ATTACK = Attack("lira_offline", "LiRA offline", "#882255", "LiRA\noff", order=70,
                scores=lambda b: lira_scores(b.phi, b.mem, mode="offline"), first=True,
                contributions=lambda b: prediction_contributions(b.score("lira_offline") >= 0, b.mem))
