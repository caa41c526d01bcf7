"""The report registry: one :class:`Report` per page, in the index's order. A page is a notebook
(``notebooks/<name>.py``) plus one entry here; the index's links, the report stages (dvc.yaml's shared ``report``
stage runs over :data:`REPORT_STAGE_PAGES`, written into runs.yaml by ``fairdp grid --write``), CI's checks and the
tests read it. Nothing here imports pandas or the audit: ``fairdp grid --write`` reads it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import Params

__all__ = ["NOTEBOOKS", "REPORTS", "REPORT_STAGE_PAGES", "Report"]


@dataclass(frozen=True)
class Report:
    """One report page: notebooks/<name>.py rendered to reports/<name>.html. ``title`` and ``question`` are its link
    on the index; ``parameters``: what papermill injects beyond the common paths (a function of the params);
    ``runs``: ``"membership"`` (the grid's membership runs; the runs kept for the beyond-membership page are left
    out and the page says so, :func:`left_out_runs`) or ``"all"``; ``show_code``: the page renders its code cells
    (a worked example to copy; the pipeline's plumbing cells are tagged hide-input); ``stage``: the dvc.yaml stage
    that writes it: ``"report"`` (the shared stage over :data:`REPORT_STAGE_PAGES`, which ``fairdp grid --write``
    copies into runs.yaml's ``pages``), or a stage of its own where the page reads more than the audit's results."""

    name: str
    title: str
    question: str
    parameters: Callable[[Params], dict]
    runs: str = "membership"
    show_code: bool = False
    stage: str = "report"


def _quickstart_parameters(p: Params) -> dict:
    """MNIST images for the Opacus quickstart: 5,000, or the prepared training set when smaller (smoke)."""
    return {"seed": p.seed, "epsilon_target": 10.0,
            "n_train": min(5000, (p.data.datasets["mnist"].train_size or 5000) if "mnist" in p.data.datasets else 5000)}


def _beyond_parameters(p: Params) -> dict:
    return {"beyond_dir": str(p.resolve("results/beyond")), "seed": p.seed, "beyond": p.beyond.model_dump(),
            "stored_utility": str(p.resolve("reports/paper/beyond_utility.json"))}


def _synthetic_parameters(p: Params) -> dict:
    return {"seed": p.seed, "synth_dir": str(p.resolve("results/synth")),
            "synth_audit_dir": str(p.resolve("results/synth_audit")), "synth": p.synth.model_dump(),
            "stored_synth_dir": str(p.resolve("reports/paper/synth"))}


# The report registry, in the index's order: the stages (dvc.yaml), the index's links, CI's checks and the tests
# derive from it.
REPORTS: dict[str, Report] = {r.name: r for r in (
    Report("audit_comparison", "Audit comparison",
           "Does PA-ALOOA agree with PA-LOOA, and is it stricter than PA-GA, PA-GBA, LiRA and RMIA? Δ and GPR by"
           " attack with each attack's null floor, and the estimators' bias under no leakage.",
           parameters=lambda p: {"looa_runs": list(p.audit.looa.runs), "n_null": p.audit.n_null, "seed": p.seed}),
    Report("dpsgd_s_sweep", "DP-SGD-S sweep (τ, γ)",
           "How do DP-SGD-S's τ and γ move Δ and accuracy against DP-SGD at the same ε (every setting shown, "
           "none selected)?",
           parameters=lambda p: {"sweep": None if p.sweep is None else p.sweep.model_dump()}),
    Report("group_gpr", "Group privacy risk",
           "Which groups does membership inference hit hardest, under SGD, DP-SGD and DP-SGD-S, on every dataset"
           " and ε? Δ against ε, accuracy against Δ, which groups DP-SGD-S made safer or riskier, and each rule "
           "(DP-SGD-S's variants and its rivals DPSGD-F, DPSGD-Global-Adapt, AdaClip) against DP-SGD, paired by "
           "seed where a profile runs two or more.",
           parameters=lambda p: {"seed": p.seed}),
    Report("outcome_fairness", "Outcome fairness",
           "Does DP-SGD-S trade privacy fairness for outcome fairness? Accuracy parity, demographic parity, "
           "equal opportunity and equalized odds per dataset and ε.",
           parameters=lambda p: {"n_boot": min(p.audit.n_boot, 500), "seed": p.seed}),
    Report("quickstart", "Quickstart for Opacus users",
           "How do I use this in my own Opacus loop? DP-SGD with make_private, ε from the accountant, the "
           "clipping bound chosen privately, then DP-SGD-S with make_private_dpsgd_s and its rivals DPSGD-F, "
           "DPSGD-Global-Adapt and AdaClip (MNIST, run in the pipeline).",
           parameters=_quickstart_parameters, show_code=True, stage="quickstart"),
    Report("beyond_membership", "Beyond membership",
           "Does DP-SGD also protect against attribute inference and model inversion, and do these risks, like "
           "membership, fall unequally on groups? Success and advantage per group, members against non-members, "
           "SGD against DP-SGD at each ε of the profile; DP-SGD's utility on MNIST at ε = 2.",
           parameters=_beyond_parameters, runs="all", stage="beyond_report"),
    Report("synthetic_data", "DP synthetic data (DPDSyn)",
           "A second route to DP: does task-oriented DP synthetic data (DPDSyn) beat MST and DP GANs, approach "
           "DP-SGD on the real data, and spread membership risk across groups more evenly than DP-SGD? "
           "Train-on-synthetic accuracy per group, fidelity, the group audit, verdicts.",
           parameters=_synthetic_parameters, stage="synth_report"),
)}
NOTEBOOKS = tuple(REPORTS)
# the pages of the shared ``report`` stage: dvc.yaml's ``foreach: ${pages}`` reads them from runs.yaml
REPORT_STAGE_PAGES: tuple[str, ...] = tuple(n for n, r in REPORTS.items() if r.stage == "report")
