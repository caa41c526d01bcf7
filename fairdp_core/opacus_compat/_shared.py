"""What the rules' Opacus routes share: the parameters' device, the per-sample norms as Opacus computes them, the
group-aware optimizers' bounds and batch groups, and ``make_private`` with the optimizer replaced."""

from __future__ import annotations

import contextlib

import torch
from opacus.optimizers.optimizer import _generate_noise

__all__ = ["_GroupBounds", "_generate_noise", "_make_private", "_norms", "_param_device"]


def _param_device(optimizer: torch.optim.Optimizer, generator: torch.Generator | None) -> torch.device:
    device = next(p.device for g in optimizer.param_groups for p in g["params"])
    if generator is not None and generator.device.type != torch.device(device).type:
        raise ValueError(f"the noise generator is on {generator.device}, the parameters on {device}")
    return device


def _norms(grad_samples: list[torch.Tensor]) -> torch.Tensor:
    """[B] per-sample gradient norms over all parameters (as Opacus's ``clip_and_accumulate``)."""
    return torch.stack([g.reshape(len(g), -1).norm(2, dim=-1) for g in grad_samples], 1).norm(2, dim=1)


class _GroupBounds:
    """What the group-aware optimizers share: the engine rule's bounds for the one model, and the batch's groups.
    ``last_sample_bounds`` [B]: the bound each sample of the last clipped batch was clipped at (its group's, as
    set in that step; empty for an empty batch): what :class:`~fairdp_core.audit.proxy.GroupProxy` counts against."""

    last_sample_bounds: torch.Tensor | None = None

    @property
    def bounds(self) -> torch.Tensor:
        """[K] the current clipping bounds C_k (the engine rule's, from the released statistics alone)."""
        return self._rule.bounds()[0]

    def set_groups(self, groups: torch.Tensor) -> None:
        """Group label (0..K-1) of every sample in the (physical) batch about to be stepped, [B]. Integer labels in
        0..K-1 only: anything else is a ValueError here, before the step (a label out of range would clip a sample
        at another group's bound and count it in another group's statistics; a float label would be truncated)."""
        g = torch.as_tensor(groups)
        if g.is_floating_point() or g.is_complex() or g.dtype == torch.bool:
            raise ValueError(f"set_groups: integer group labels 0..{self._rule.K - 1}, got {g.dtype}")
        g = g.to(torch.int64)
        if g.numel() and (int(g.min()) < 0 or int(g.max()) >= self._rule.K):
            raise ValueError(f"set_groups: group labels must lie in 0..{self._rule.K - 1}, got "
                             f"{int(g.min())}..{int(g.max())}")
        self._groups = g

    def _require_groups(self) -> None:
        if self._groups is None:
            raise RuntimeError(f"{type(self).__name__}: call set_groups(groups) with the batch's group labels before "
                               "step()")

    def _batch(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Inside :meth:`_one_batch`: the batch's per-sample norms [B] and group labels [B] on the norms' device, or
        None for an empty Poisson batch, whose bound is then max_k C_k (nothing to clip, sum or count)."""
        if len(self.grad_samples[0]) == 0:
            self.max_grad_norm = float(self.bounds.max())
            self.last_sample_bounds = torch.empty(0)
            return None
        norms = _norms(self.grad_samples)
        groups = self._groups.to(norms.device)
        if len(groups) != len(norms):
            raise ValueError(f"set_groups got {len(groups)} labels for a batch of {len(norms)}")
        return norms, groups

    @contextlib.contextmanager
    def _one_batch(self):
        """Around a batch's clipping: afterwards (error or not) Opacus's scalar bound is max_k C_k again and the
        batch's groups are forgotten."""
        try:
            yield
        finally:
            self.max_grad_norm = float(self.bounds.max())
            self._groups = None

    def _add_gradient_noise(self) -> None:
        """Opacus's noise on the clipped sum, N(0, (σ_g · max_k C_k)²) (secure_mode honoured); the accountant hook
        then reads σ_eff, restored here."""
        sigma_eff = self.noise_multiplier
        self.noise_multiplier, self.max_grad_norm = self.grad_noise_multiplier, float(self.bounds.max())
        try:
            super().add_noise()
        finally:
            self.noise_multiplier = sigma_eff



def _make_private(privacy_engine, build, *, module, optimizer, data_loader, noise_multiplier: float, kwargs: dict):
    """``PrivacyEngine.make_private`` (flat clipping, Poisson loader), then its optimizer replaced by
    ``build(original_optimizer, expected_batch_size=..., **kwargs)``, hooked to the engine's accountant at the
    loader's own q, with the engine's ``secure_mode`` (and its secure generator) unless a ``generator`` is given."""
    module, dp_opt, loader = privacy_engine.make_private(
        module=module, optimizer=optimizer, data_loader=data_loader, noise_multiplier=noise_multiplier,
        max_grad_norm=1.0, poisson_sampling=True)
    sample_rate = loader.sample_rate  # Opacus's own q (1/len(loader) can differ from it by rounding)
    kwargs.setdefault("secure_mode", privacy_engine.secure_mode)
    if privacy_engine.secure_mode:
        given = kwargs.setdefault("generator", privacy_engine.secure_rng)
        if given is not privacy_engine.secure_rng:
            raise ValueError("secure_mode: the noise must come from the engine's secure generator, not a given one "
                             "(Opacus refuses this too)")
    opt = build(dp_opt.original_optimizer, expected_batch_size=dp_opt.expected_batch_size, **kwargs)
    opt.attach_step_hook(privacy_engine.accountant.get_optimizer_hook_fn(sample_rate=sample_rate))
    return module, opt, loader
