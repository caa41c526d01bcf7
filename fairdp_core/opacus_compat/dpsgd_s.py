"""DP-SGD-S in a user's own Opacus loop: :class:`DPSGDSOptimizer` and :func:`make_private_dpsgd_s` (the rule:
:mod:`fairdp_core.rules.dpsgd_s`).

:class:`DPSGDSOptimizer` subclasses :class:`opacus.optimizers.DPOptimizer` and changes only the clipping seam and
the noise scale; Opacus's own code does the per-sample bookkeeping, the accumulation and the averaging:

- clipping: each sample of group k is clipped to C_k = max(τ·Q_k, C_min) (the parent's formula
  ``max_grad_norm / (norm + 1e-6)`` evaluated with a per-sample ``max_grad_norm``);
- gradient noise: N(0, (σ_g · max_k C_k)²), the max over ALL groups;
- count release: the 2K vector (below_k, above_k) of the logical batch's samples of group k with ‖g_i‖ ≤ Q_k and
  > Q_k (L2 sensitivity 1), each cell + N(0, σ_b²) drawn by Opacus's ``_generate_noise`` (so ``secure_mode``
  applies to it as to the gradient noise); then b̃_k = clip(below̃_k / max(below̃_k + abovẽ_k, floor), 0, 1) and
  Q_k ← min(Q_max, Q_k·exp(−η(b̃_k − γ))) (Andrew et al. 2021, arXiv 1905.03871), exactly
  :meth:`fairdp_core.rules.dpsgd_s.GroupQuantileClip.update_from_release`. No group size n_k is used.

Virtual steps (Opacus's ``BatchMemoryManager``): the counts of the physical batches of one logical step are
accumulated, like the clipped gradients, and released once, when the step is taken.

``noise_multiplier`` (what Opacus's accountant hook reads every step) is σ_eff = (σ_g⁻² + σ_b⁻²)^(-1/2), so the
accountant is charged for the gradient and the counts together (see :mod:`fairdp_core.engine.accounting`).
Use it after ``PrivacyEngine.make_private`` via :func:`make_private_dpsgd_s`, and tell it the batch's groups with
:meth:`DPSGDSOptimizer.set_groups` before each ``step()`` (and before each skipped virtual step)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from opacus.optimizers import DPOptimizer

from ..engine.accounting import split_sigma
from ..rules.dpsgd_s import GroupQuantileClip
from ._shared import _generate_noise, _GroupBounds, _make_private, _param_device

__all__ = ["DPSGDSOptimizer", "make_private_dpsgd_s"]


class DPSGDSOptimizer(_GroupBounds, DPOptimizer):
    """DP-SGD-S as an Opacus optimizer. ``noise_multiplier`` is σ_eff (the accountant's); ``n_groups`` is K.

    After each step ``released`` [2K] holds the noised counts that were released (public), and ``Q`` [K] the
    tracked quantiles. Parameters, counts and quantiles live on the device of the optimizer's parameters;
    ``generator`` (if any) must be on that device too.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, sigma_b: float, n_groups: int,
                 expected_batch_size: int, tau: float = 1.0, gamma: float = 0.75, eta_q: float = 0.2,
                 c_min: float = 0.01, q_init: float | Sequence[float] = 1.0, q_max: float = 100.0,
                 count_floor: float | None = None, loss_reduction: str = "mean",
                 generator: torch.Generator | None = None, secure_mode: bool = False) -> None:
        self.grad_noise_multiplier = split_sigma(noise_multiplier, sigma_b)
        device = _param_device(optimizer, generator)
        # The quantile rule itself is the engine's (one implementation): counts -> released -> new Q.
        self._rule = GroupQuantileClip(1, n_groups, self.grad_noise_multiplier, sigma_b=sigma_b, tau=tau, gamma=gamma,
                                       eta=eta_q, c_min=c_min, q_init=q_init, q_max=q_max, floor=count_floor,
                                       generators=[None], device=device)  # counts are noised by add_noise below
        self.sigma_b = sigma_b
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=float(self.bounds.max()),
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode)
        self._groups: torch.Tensor | None = None
        self._counts = torch.zeros(2 * n_groups, device=device)  # accumulated over the virtual steps of one step
        self.released = torch.zeros(2 * n_groups, device=device)

    @property
    def Q(self) -> torch.Tensor:
        """[K] tracked norm quantiles."""
        return self._rule.Q[0]

    @Q.setter
    def Q(self, value: torch.Tensor) -> None:
        self._rule.Q = torch.as_tensor(value, dtype=torch.float32, device=self._rule.device).reshape(1, -1).clone()


    def clip_and_accumulate(self) -> None:
        self._require_groups()
        with self._one_batch():
            batch = self._batch()
            if batch is None:
                return super().clip_and_accumulate()
            norms, groups = batch
            self._counts += self._rule.counts(norms[None], groups[None], torch.ones_like(norms)[None])[0]
            # Opacus computes (max_grad_norm / (norm + 1e-6)).clamp(max=1): with per-sample bounds this is exactly
            # rules.policy.clip_factors (tests/test_opacus_compat.py checks the two agree).
            self.max_grad_norm = self.bounds[groups]
            self.last_sample_bounds = self.max_grad_norm.detach().clone()
            super().clip_and_accumulate()

    def add_noise(self) -> None:
        self._add_gradient_noise()
        noise = _generate_noise(std=self.sigma_b, reference=self._counts, generator=self.generator,
                                secure_mode=self.secure_mode)
        self.released = self._counts + noise
        self._rule.Q = self._rule.update_from_release(self._rule.Q, self.released[None])
        self._counts = torch.zeros_like(self._counts)



def make_private_dpsgd_s(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                         sigma_b: float, n_groups: int, **dpsgd_s_kwargs):
    """``PrivacyEngine.make_private`` with DP-SGD-S: returns (module, DPSGDSOptimizer, data_loader).

    The engine prepares the module (per-sample gradients) and the Poisson data loader as usual; the optimizer is
    then replaced by a :class:`DPSGDSOptimizer` whose steps are charged to ``privacy_engine.accountant`` at σ_eff,
    with the engine's ``secure_mode`` (and its secure generator) unless a ``generator`` is given.
    """
    return _make_private(privacy_engine, DPSGDSOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, sigma_b=sigma_b, n_groups=n_groups,
                                     **dpsgd_s_kwargs))
