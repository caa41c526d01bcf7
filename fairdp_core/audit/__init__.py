"""The group privacy-risk audit: membership design, signals, attacks and statistics (loaded on first use)."""

from __future__ import annotations

from .. import _lazy_exports

_FROM = {
    "attacks": ("ESTIMATORS", "cross_fit_advantage", "ga_advantage", "ga_predictions", "gba_advantage",
                "gba_predictions", "in_sample_advantage", "lira_scores", "null_corrected_advantage", "record_advantage"),
    "run": ("ATTACKS", "Attack", "AuditResult", "audit"),
    "signals": ("logit_confidence",),
    "simulate": ("coverage_study", "simulate_audit", "true_gpr"),
    "design": ("AuditDesign", "LooaDesign", "audit_design", "looa_design"),
    "inference": ("cross_fit_contributions", "group_inference", "prediction_contributions",
                  "studentized_permutation_pvalue"),
    "stats": ("clopper_pearson", "delta_pp", "epsilon_lb_from_counts", "epsilon_lower_bound", "gpr",
              "paired_seed_comparison", "permutation_pvalue", "seed_mean_interval", "tpr_at_fpr"),
}
__all__, __getattr__, __dir__ = _lazy_exports(__name__, __path__, _FROM)
