"""PA-GA: one global threshold per model on the loss score; intervals over records × model pairs."""

from ..bank import Attack
from ..inference import prediction_contributions

ATTACK = Attack("ga", "PA-GA", "#009E73", "GA", order=40, contributions=lambda b: prediction_contributions(b.ga(), b.mem))
