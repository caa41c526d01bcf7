"""AdaClip (Andrew et al. 2021) in a user's own Opacus loop: Opacus's own ``AdaClipDPOptimizer`` with its bound
update taken from the engine's rule (public batch size in the quantile estimate; counts kept over virtual steps):
:class:`AdaClipOptimizer` and :func:`make_private_adaclip` (the rule: :mod:`fairdp_core.rules.adaclip`)."""

from __future__ import annotations

import torch
from opacus.optimizers import AdaClipDPOptimizer

from ..rules.adaclip import AdaClip
from ._shared import _make_private, _param_device

__all__ = ["AdaClipOptimizer", "make_private_adaclip"]


class AdaClipOptimizer(AdaClipDPOptimizer):
    """Opacus's ``AdaClipDPOptimizer`` (Andrew et al. 2021) with two changes for DP under Poisson sampling; its
    clipping, counting, gradient noise (σ_g = (σ_eff⁻² − (2σ_u)⁻²)^(-1/2), times C) and count noise are Opacus's.

    - The bound update: Opacus divides the noised count of unclipped samples by the REALISED batch size (a private
      quantity it does not release). Here the released value is the centred count s̃ = Σ_i (b_i − ½) + N(0, σ_u²)
      (sensitivity ½, the 2σ_u of Opacus's own noise split; it equals Opacus's noised count minus half the batch
      size), and C moves by the rule's policy (:meth:`fairdp_core.rules.adaclip.AdaClip.update_from_release`):
      b̃ = s̃ / B + ½ with the expected batch size B, C ← clip(C·exp(−η(b̃ − γ)), C_min, C_max). With |batch| = B
      it is exactly Opacus's update (tested).
    - Virtual steps: Opacus's ``zero_grad`` resets the counts after every physical batch, so only the last one's
      would be released (and which records fall in it depends on the others); here they are kept over the logical
      step, like the clipped gradients.

    Not changed: Opacus draws the count noise without ``secure_mode`` (its ``add_noise`` does not pass it).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, target_unclipped_quantile: float,
                 clipbound_learning_rate: float, max_clipbound: float, min_clipbound: float,
                 unclipped_num_std: float, max_grad_norm: float, expected_batch_size: int, **kwargs) -> None:
        if not expected_batch_size:
            raise ValueError("AdaClipOptimizer needs the expected batch size (the public denominator of its update)")
        super().__init__(optimizer, noise_multiplier=noise_multiplier,
                         target_unclipped_quantile=target_unclipped_quantile,
                         clipbound_learning_rate=clipbound_learning_rate, max_clipbound=max_clipbound,
                         min_clipbound=min_clipbound, unclipped_num_std=unclipped_num_std,
                         max_grad_norm=max_grad_norm, expected_batch_size=expected_batch_size, **kwargs)
        device = _param_device(optimizer, kwargs.get("generator"))
        self._rule = AdaClip(1, 1, 0.0, clip=max_grad_norm, sigma_b=unclipped_num_std,
                             gamma=target_unclipped_quantile, eta=clipbound_learning_rate, c_min=min_clipbound,
                             c_max=max_clipbound, batch_size=expected_batch_size, generators=[None], device=device)
        self.max_grad_norm = float(self._rule.T[0])
        self.released = torch.zeros((), device=device)

    def zero_grad(self, set_to_none: bool = False) -> None:
        keep = self._is_last_step_skipped  # a virtual step: its counts belong to the logical step, as its gradients
        sample_size, unclipped = self.sample_size, self.unclipped_num
        super().zero_grad(set_to_none)
        if keep:
            self.sample_size, self.unclipped_num = sample_size, unclipped

    def update_max_grad_norm(self) -> None:
        # after Opacus's add_noise, unclipped_num = Σ_i b_i + N(0, σ_u²): the centred release is that minus |batch|/2
        self.released = torch.as_tensor(self.unclipped_num - self.sample_size / 2.0, dtype=torch.float32,
                                        device=self._rule.device).reshape(())
        C = torch.as_tensor(float(self.max_grad_norm), dtype=torch.float32, device=self._rule.device).reshape(1)
        self._rule.T = self._rule.update_from_release(C, self.released.reshape(1))
        self.max_grad_norm = float(self._rule.T[0])


def make_private_adaclip(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                         sigma_b: float, clip: float = 1.0, gamma: float = 0.5, eta: float = 0.2, c_min: float = 0.01,
                         c_max: float = 100.0, **kwargs):
    """``PrivacyEngine.make_private`` with AdaClip: returns (module, :class:`AdaClipOptimizer`, data_loader), its
    steps charged to ``privacy_engine.accountant`` at σ_eff = ``noise_multiplier`` (the count included, as Opacus
    does: σ_g = (σ_eff⁻² − (2σ_b)⁻²)^(-1/2), which needs σ_eff < 2σ_b). The settings by the rule's own names
    (params.yaml's ``train.adaclip``, :class:`fairdp_core.rules.adaclip.Settings`): ``clip`` the initial C,
    ``gamma`` the target quantile, ``eta`` the step, ``c_min``/``c_max`` C's public floor and cap, ``sigma_b`` the
    centred count's std; defaults γ = 0.5, η = 0.2 (Andrew et al.'s). They reach Opacus's ``AdaClipDPOptimizer``
    under its names (``max_grad_norm``, ``target_unclipped_quantile``, ``clipbound_learning_rate``,
    ``min_clipbound``, ``max_clipbound``, ``unclipped_num_std``) here and only here."""
    return _make_private(privacy_engine, AdaClipOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, unclipped_num_std=sigma_b,
                                     max_grad_norm=clip, target_unclipped_quantile=gamma,
                                     clipbound_learning_rate=eta, min_clipbound=c_min, max_clipbound=c_max, **kwargs))
