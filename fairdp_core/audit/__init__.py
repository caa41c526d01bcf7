"""The group privacy-risk audit: membership design, attacks, statistics and the audit run."""

from .attacks import (
    ESTIMATORS,
    cross_fit_advantage,
    ga_advantage,
    gba_advantage,
    in_sample_advantage,
    lira_scores,
    logit_confidence,
    null_corrected_advantage,
    record_advantage,
)
from .design import AuditDesign, LooaDesign, audit_design, looa_design
from .stats import (
    bootstrap_gpr,
    clopper_pearson,
    delta_pp,
    epsilon_lb_from_counts,
    epsilon_lower_bound,
    gpr,
    paired_seed_comparison,
    permutation_pvalue,
    tpr_at_fpr,
)

__all__ = [
    "ESTIMATORS", "AuditDesign", "LooaDesign", "audit_design", "bootstrap_gpr", "clopper_pearson",
    "cross_fit_advantage", "delta_pp", "epsilon_lb_from_counts", "epsilon_lower_bound", "ga_advantage",
    "gba_advantage", "gpr", "in_sample_advantage", "lira_scores", "logit_confidence", "looa_design",
    "null_corrected_advantage", "paired_seed_comparison", "permutation_pvalue", "record_advantage", "tpr_at_fpr",
]
