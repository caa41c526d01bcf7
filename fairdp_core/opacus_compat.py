"""DP-SGD-S for people with their own Opacus training loop.

:class:`DPSGDSOptimizer` subclasses :class:`opacus.optimizers.DPOptimizer` and changes only the clipping seam and
the noise scale; Opacus's own code does the per-sample bookkeeping, the accumulation and the averaging:

- clipping: each sample of group k is clipped to C_k = max(τ·Q_k, C_min) (the parent's formula
  ``max_grad_norm / (norm + 1e-6)`` evaluated with a per-sample ``max_grad_norm``);
- gradient noise: N(0, (σ_g · max_k C_k)²), the max over ALL groups;
- count release: b̃_k = (#{i in batch, group k, ‖g_i‖ ≤ Q_k} + N(0, σ_b²)) / (q·n_k), then
  Q_k ← Q_k·exp(−η(b̃_k − γ)) (Andrew et al. 2021, arXiv 1905.03871).

``noise_multiplier`` (what Opacus's accountant hook reads every step) is σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2), so the
accountant is charged for the gradient and the counts together (see :mod:`fairdp_core.engine.accounting`).

Use it after ``PrivacyEngine.make_private`` via :func:`make_private_dpsgd_s`, and tell it the batch's groups with
:meth:`DPSGDSOptimizer.set_groups` before each ``step()``.
"""

from __future__ import annotations

import torch
from opacus.optimizers import DPOptimizer

from .engine.accounting import split_sigma
from .engine.policies import quantile_update

__all__ = ["DPSGDSOptimizer", "make_private_dpsgd_s"]


class DPSGDSOptimizer(DPOptimizer):
    """DP-SGD-S as an Opacus optimizer. ``noise_multiplier`` is σ_eff (the accountant's); ``group_sizes`` [K]
    are the n_k of the training set (public, as n is in q = B/n); ``sample_rate`` is the Poisson rate q."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, sigma_b: float,
                 group_sizes: torch.Tensor, sample_rate: float, expected_batch_size: int, tau: float = 1.0,
                 gamma: float = 0.75, eta_q: float = 0.2, c_min: float = 0.01, q_init: float = 1.0,
                 loss_reduction: str = "mean", generator: torch.Generator | None = None,
                 secure_mode: bool = False) -> None:
        self.grad_noise_multiplier = split_sigma(noise_multiplier, sigma_b)
        self.sigma_b, self.tau, self.gamma, self.eta_q, self.c_min = sigma_b, tau, gamma, eta_q, c_min
        self.Q = torch.full((len(group_sizes),), float(q_init))
        self.expected_counts = sample_rate * torch.as_tensor(group_sizes, dtype=torch.float32)
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=float(self.bounds.max()),
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode)
        self._groups: torch.Tensor | None = None
        self._counts: torch.Tensor | None = None

    @property
    def bounds(self) -> torch.Tensor:
        """[K] current clipping bounds C_k."""
        return torch.clamp(self.tau * self.Q, min=self.c_min)

    def set_groups(self, groups: torch.Tensor) -> None:
        """Group label (0..K-1) of every sample in the batch about to be stepped, [B]."""
        self._groups = torch.as_tensor(groups, dtype=torch.int64)

    def clip_and_accumulate(self) -> None:
        if self._groups is None:
            raise RuntimeError("DPSGDSOptimizer: call set_groups(groups) with the batch's group labels before step()")
        K = len(self.Q)
        if len(self.grad_samples[0]) == 0:  # empty Poisson batch: nothing to clip, counts are zero
            self._counts = torch.zeros(K)
            self.max_grad_norm = float(self.bounds.max())
            return super().clip_and_accumulate()
        norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=-1) for g in self.grad_samples], 1).norm(2, dim=1)
        groups = self._groups.to(norms.device)
        if len(groups) != len(norms):
            raise ValueError(f"set_groups got {len(groups)} labels for a batch of {len(norms)}")
        self._counts = torch.zeros(K).scatter_add_(0, groups.cpu(), (norms.cpu() <= self.Q[groups.cpu()]).float())
        # Opacus computes (max_grad_norm / (norm + 1e-6)).clamp(max=1): with per-sample bounds this is exactly
        # engine.policies.clip_factors (tests/test_opacus_compat.py checks the two agree).
        self.max_grad_norm = self.bounds.to(norms.device)[groups]
        try:
            super().clip_and_accumulate()
        finally:
            self.max_grad_norm = float(self.bounds.max())

    def add_noise(self) -> None:
        sigma_eff = self.noise_multiplier
        self.noise_multiplier, self.max_grad_norm = self.grad_noise_multiplier, float(self.bounds.max())
        try:
            super().add_noise()  # N(0, (σ_g · max_k C_k)²)
        finally:
            self.noise_multiplier = sigma_eff  # the accountant hook reads σ_eff
        noise = torch.normal(0.0, self.sigma_b, size=self.Q.shape, generator=self.generator)
        self.Q = quantile_update(self.Q, (self._counts + noise) / self.expected_counts, eta=self.eta_q,
                                 gamma=self.gamma)
        self._groups = None


def make_private_dpsgd_s(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                         sigma_b: float, group_sizes, **dpsgd_s_kwargs):
    """``PrivacyEngine.make_private`` with DP-SGD-S: returns (module, DPSGDSOptimizer, data_loader).

    The engine prepares the module (per-sample gradients) and the Poisson data loader as usual; the optimizer is
    then replaced by a :class:`DPSGDSOptimizer` whose steps are charged to ``privacy_engine.accountant`` at σ_eff.
    """
    module, dp_opt, loader = privacy_engine.make_private(
        module=module, optimizer=optimizer, data_loader=data_loader, noise_multiplier=noise_multiplier,
        max_grad_norm=1.0, poisson_sampling=True)
    sample_rate = 1.0 / len(loader)
    opt = DPSGDSOptimizer(dp_opt.original_optimizer, noise_multiplier=noise_multiplier, sigma_b=sigma_b,
                          group_sizes=torch.as_tensor(group_sizes), sample_rate=sample_rate,
                          expected_batch_size=dp_opt.expected_batch_size, **dpsgd_s_kwargs)
    opt.attach_step_hook(privacy_engine.accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    return module, opt, loader
