"""PA-GBA: one threshold per model and group, fitted on that group's records, so its Δ is positive without any
leakage (the overfit is larger for a smaller group): its interval covers that inflated quantity, and it gets no
test of "Δ > 0"; read it against its null floor (thresholds refitted on permuted group labels)."""

from ..bank import Attack, Bank
from ..inference import prediction_contributions

ATTACK = Attack("gba", "PA-GBA", "#E69F00", "GBA", order=50,
                contributions=lambda b: prediction_contributions(b.gba(), b.mem), null_floor=Bank.gba_floor,
                test_delta=False, note="per-group thresholds: Δ > 0 without leakage; compare with null_floor_pp")
