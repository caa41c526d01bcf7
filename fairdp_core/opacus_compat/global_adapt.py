"""DPSGD-Global-Adapt (Esipova et al. 2023) in a user's own Opacus loop: :class:`GlobalAdaptOptimizer` and
:func:`make_private_global_adapt` (the rule: :mod:`fairdp_core.rules.global_adapt`)."""

from __future__ import annotations

import torch
from opacus.optimizers import DPOptimizer

from ..engine.accounting import split_sigma
from ..rules.global_adapt import GlobalAdaptClip
from ._shared import _generate_noise, _make_private, _norms, _param_device

__all__ = ["GlobalAdaptOptimizer", "make_private_global_adapt"]


class GlobalAdaptOptimizer(DPOptimizer):
    """DPSGD-Global-Adapt (Esipova et al. 2023) as an Opacus optimizer: the rule is
    :class:`fairdp_core.rules.global_adapt.GlobalAdaptClip`'s (formula, sources and privacy argument there).
    ``noise_multiplier`` is σ_eff (the accountant's); σ_g = (σ_eff⁻² − σ_b⁻²)^(-1/2); ``clip`` is C, ``z_init`` Z's
    initial value, ``threshold`` τ, ``gamma``/``eta`` Z's update (γ = 0.9, η = 1: the authors' η_Z = 0.1).

    Each sample is scaled by the engine's factor (C/Z below Z, clipped to C above; passed to Opacus's clipping as
    the per-sample bound factor·(‖g‖ + 1e-6)), the sum gets N(0, (σ_g·C)²), and the count of samples with
    ‖g‖ > τ·Z, accumulated over the physical batches of one logical step (virtual steps are fine: Z is fixed within
    a step), is released once with N(0, σ_b²) from Opacus's ``_generate_noise`` (``secure_mode`` honoured), as
    ``released``; then Z moves from that release alone, divided by the expected batch size.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, sigma_b: float,
                 expected_batch_size: int, clip: float = 1.0, z_init: float = 100.0, threshold: float = 1.0,
                 gamma: float = 0.9, eta: float = 1.0, loss_reduction: str = "mean",
                 generator: torch.Generator | None = None, secure_mode: bool = False) -> None:
        if not expected_batch_size:
            raise ValueError("GlobalAdaptOptimizer needs the expected batch size (the public denominator of Z's update)")
        self.grad_noise_multiplier = split_sigma(noise_multiplier, sigma_b)
        device = _param_device(optimizer, generator)
        self._rule = GlobalAdaptClip(1, 1, self.grad_noise_multiplier, clip=clip, z_init=z_init, threshold=threshold,
                                     sigma_b=sigma_b, gamma=gamma, eta=eta, batch_size=expected_batch_size,
                                     generators=[None], device=device)  # the count is noised below, by Opacus
        self.sigma_b, self.clip = sigma_b, float(clip)
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=self.clip,
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode)
        self._count = torch.zeros((), device=device)  # accumulated over the virtual steps of one step
        self.released = torch.zeros((), device=device)

    @property
    def Z(self) -> torch.Tensor:
        """The tracked upper bound Z (a 0-d tensor)."""
        return self._rule.T[0]

    @Z.setter
    def Z(self, value) -> None:
        self._rule.T = torch.as_tensor(value, dtype=torch.float32, device=self._rule.device).reshape(1).clone()

    def clip_and_accumulate(self) -> None:
        if len(self.grad_samples[0]) == 0:  # empty Poisson batch: nothing to scale, nothing to count
            return super().clip_and_accumulate()
        norms = _norms(self.grad_samples)
        zeros = torch.zeros(1, len(norms), dtype=torch.int64, device=norms.device)
        self._count = self._count + self._rule.counts(norms[None], zeros, torch.ones_like(norms)[None])[0]
        factors = self._rule.factors(norms[None], zeros)[0]
        # Opacus's factor (max_grad_norm / (norm + 1e-6)).clamp(max=1) with this per-sample bound is the engine's
        # factor (≤ 1), up to rounding
        self.max_grad_norm = factors * (norms + 1e-6)
        try:
            super().clip_and_accumulate()
        finally:
            self.max_grad_norm = self.clip

    def add_noise(self) -> None:
        sigma_eff = self.noise_multiplier
        self.noise_multiplier = self.grad_noise_multiplier
        self.max_grad_norm = self.clip  # every scaled gradient has norm ≤ C
        try:
            super().add_noise()  # N(0, (σ_g · C)²), secure_mode honoured by Opacus
        finally:
            self.noise_multiplier = sigma_eff  # the accountant hook reads σ_eff
        count, self._count = self._count, torch.zeros_like(self._count)
        noise = _generate_noise(std=self.sigma_b, reference=count, generator=self.generator,
                                secure_mode=self.secure_mode)
        released = count + noise
        self.released = released
        self._rule.T = self._rule.update_from_release(self._rule.T, released.reshape(1))


def make_private_global_adapt(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                              sigma_b: float, **kwargs):
    """``PrivacyEngine.make_private`` with DPSGD-Global-Adapt: returns (module, :class:`GlobalAdaptOptimizer`,
    data_loader), its steps charged to ``privacy_engine.accountant`` at σ_eff = ``noise_multiplier``."""
    return _make_private(privacy_engine, GlobalAdaptOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, sigma_b=sigma_b, **kwargs))
