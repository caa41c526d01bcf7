"""PA-ALOOA, cross-fitted: each record's threshold is fitted on one half of the model pairs and scored on the other,
so no label it is scored on fits it. Its per-(model, record) contributions get intervals over records × model pairs;
their coverage was simulated (reports/coverage/)."""

from ..bank import Attack
from ..inference import cross_fit_contributions

ATTACK = Attack("alooa_cross_fit", "PA-ALOOA cross-fitted", "#0072B2", "CF", order=10,
                contributions=lambda b: cross_fit_contributions(b.scores, b.mem))
