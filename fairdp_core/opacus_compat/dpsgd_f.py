"""DPSGD-F (Xu et al. 2021) in a user's own Opacus loop: :class:`DPSGDFOptimizer` and :func:`make_private_dpsgd_f`
(the rule: :mod:`fairdp_core.rules.dpsgd_f`). Groups via ``set_groups``; no virtual steps: its bounds are set from
the noised counts of the whole batch they clip."""

from __future__ import annotations

import torch
from opacus.optimizers import DPOptimizer

from ..engine.accounting import split_sigma
from ..rules.dpsgd_f import DPSGDFClip
from ._shared import _generate_noise, _GroupBounds, _make_private, _norms, _param_device

__all__ = ["DPSGDFOptimizer", "make_private_dpsgd_f"]


class DPSGDFOptimizer(_GroupBounds, DPOptimizer):
    """DPSGD-F (Xu et al. 2021) as an Opacus optimizer: the rule is :class:`fairdp_core.rules.dpsgd_f.DPSGDFClip`'s
    (formula, sources and privacy argument there). ``noise_multiplier`` is σ_eff (the accountant's); σ_g =
    (σ_eff⁻² − σ_b⁻²)^(-1/2); ``clip`` is C0; ``n_groups`` is K.

    In each step, before clipping: the 2K counts (m_k above C0, o_k at most C0, per group) of the batch, each cell
    + N(0, σ_b²) drawn by Opacus's ``_generate_noise`` (``secure_mode`` honoured), released as ``released``; the
    bounds C_k = C0·(1 + a_k / (mean_j a_j + 1e-8)) from that release alone clip the same batch; gradient noise
    N(0, (σ_g · max over ALL groups of C_k)²). No virtual steps (``BatchMemoryManager``): the bounds must come
    from the counts of the whole batch they clip, and releasing counts per physical batch would not have
    sensitivity 1 (a record added shifts the split of the batch); the optimizer refuses them. Tell it the batch's
    groups with :meth:`set_groups` before each ``step()``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, sigma_b: float, n_groups: int,
                 expected_batch_size: int, clip: float = 1.0, loss_reduction: str = "mean",
                 generator: torch.Generator | None = None, secure_mode: bool = False) -> None:
        self.grad_noise_multiplier = split_sigma(noise_multiplier, sigma_b)
        device = _param_device(optimizer, generator)
        self._rule = DPSGDFClip(1, n_groups, self.grad_noise_multiplier, clip=clip, sigma_b=sigma_b,
                                generators=[None], device=device)  # counts are noised below, by Opacus
        self.sigma_b = sigma_b
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=float(self.bounds.max()),
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode)
        self._groups: torch.Tensor | None = None
        self.released = torch.zeros(2 * n_groups, device=device)


    def clip_and_accumulate(self) -> None:
        if self._groups is None:
            raise RuntimeError("DPSGDFOptimizer: call set_groups(groups) with the batch's group labels before step()")
        if self._check_skip_next_step(pop_next=False) or any(p.summed_grad is not None for p in self.params):
            self._groups = None
            raise RuntimeError("DPSGDFOptimizer does not take virtual steps: its bounds come from the noised counts "
                               "of the whole batch they clip; use a physical batch as large as the logical one (or "
                               "zero_grad() was not called after the last step)")
        with self._one_batch():
            empty = len(self.grad_samples[0]) == 0
            groups = self._groups.to(self.released.device)
            if empty:
                counts = torch.zeros_like(self.released)
            else:
                norms = _norms(self.grad_samples)
                if len(groups) != len(norms):
                    raise ValueError(f"set_groups got {len(groups)} labels for a batch of {len(norms)}")
                counts = self._rule.counts(norms[None], groups[None].to(norms.device), torch.ones_like(norms)[None])[0]
            noise = _generate_noise(std=self.sigma_b, reference=counts, generator=self.generator,
                                    secure_mode=self.secure_mode)
            self.released = counts + noise  # released BEFORE the clipping it sets
            self._rule._b = self._rule.bounds_from_release(self.released[None])
            # per-sample bounds: Opacus's (max_grad_norm / (norm + 1e-6)).clamp(max=1) is rules.policy.clip_factors
            self.max_grad_norm = float(self.bounds.max()) if empty else self.bounds[groups]
            self.last_sample_bounds = torch.empty(0) if empty else self.max_grad_norm.detach().clone()
            super().clip_and_accumulate()

    def add_noise(self) -> None:
        self._add_gradient_noise()  # noise scale max_k C_k over ALL K groups


def make_private_dpsgd_f(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                         sigma_b: float, n_groups: int, **kwargs):
    """``PrivacyEngine.make_private`` with DPSGD-F: returns (module, :class:`DPSGDFOptimizer`, data_loader), its
    steps charged to ``privacy_engine.accountant`` at σ_eff = ``noise_multiplier`` (counts included)."""
    return _make_private(privacy_engine, DPSGDFOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, sigma_b=sigma_b, n_groups=n_groups, **kwargs))
