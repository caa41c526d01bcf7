"""DP-SGD-S, and its rival clipping rules, for people with their own Opacus training loop.

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
:meth:`DPSGDSOptimizer.set_groups` before each ``step()`` (and before each skipped virtual step).

The rivals, each reusing the engine's rule (its policy class in :mod:`fairdp_core.rules`, one implementation), each
charged σ_eff by the accountant hook:

- DPSGD-F (Xu et al. 2021): :class:`DPSGDFOptimizer`, :func:`make_private_dpsgd_f` (groups via ``set_groups``; no
  virtual steps: its bounds are set from the noised counts of the whole batch they clip);
- DPSGD-Global-Adapt (Esipova et al. 2023): :class:`GlobalAdaptOptimizer`, :func:`make_private_global_adapt`;
- AdaClip (Andrew et al. 2021): Opacus's own ``AdaClipDPOptimizer`` with its bound update taken from the engine's
  rule (public batch size in the quantile estimate; counts kept over virtual steps): :class:`AdaClipOptimizer`,
  :func:`make_private_adaclip`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
from opacus.optimizers import AdaClipDPOptimizer, DPOptimizer
from opacus.optimizers.optimizer import _generate_noise

from .engine.accounting import split_sigma
from .rules.adaclip import AdaClip
from .rules.dpsgd_f import DPSGDFClip
from .rules.dpsgd_s import GroupQuantileClip
from .rules.global_adapt import GlobalAdaptClip

__all__ = ["AdaClipOptimizer", "DPSGDFOptimizer", "DPSGDSOptimizer", "GlobalAdaptOptimizer", "make_private_adaclip",
           "make_private_dpsgd_f", "make_private_dpsgd_s", "make_private_global_adapt"]


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
        """Group label (0..K-1) of every sample in the (physical) batch about to be stepped, [B]."""
        self._groups = torch.as_tensor(groups, dtype=torch.int64)

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
        device = next(p.device for g in optimizer.param_groups for p in g["params"])
        if generator is not None and generator.device.type != torch.device(device).type:
            raise ValueError(f"the noise generator is on {generator.device}, the parameters on {device}")
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
        if self._groups is None:
            raise RuntimeError("DPSGDSOptimizer: call set_groups(groups) with the batch's group labels before step()")
        with self._one_batch():
            if len(self.grad_samples[0]) == 0:  # empty Poisson batch: nothing to clip, nothing to count
                self.max_grad_norm = float(self.bounds.max())
                self.last_sample_bounds = torch.empty(0)
                return super().clip_and_accumulate()
            norms = _norms(self.grad_samples)
            groups = self._groups.to(norms.device)
            if len(groups) != len(norms):
                raise ValueError(f"set_groups got {len(groups)} labels for a batch of {len(norms)}")
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
                         unclipped_num_std: float, max_grad_norm: float = 1.0, target_unclipped_quantile: float = 0.5,
                         clipbound_learning_rate: float = 0.2, min_clipbound: float = 0.01,
                         max_clipbound: float = 100.0, **kwargs):
    """``PrivacyEngine.make_private`` with AdaClip: returns (module, :class:`AdaClipOptimizer`, data_loader), its
    steps charged to ``privacy_engine.accountant`` at σ_eff = ``noise_multiplier`` (the count included, as Opacus
    does: σ_g = (σ_eff⁻² − (2σ_u)⁻²)^(-1/2), which needs σ_eff < 2σ_u). ``max_grad_norm``: the initial C;
    defaults γ = 0.5, η = 0.2 (Andrew et al.'s)."""
    return _make_private(privacy_engine, AdaClipOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, unclipped_num_std=unclipped_num_std,
                                     max_grad_norm=max_grad_norm, target_unclipped_quantile=target_unclipped_quantile,
                                     clipbound_learning_rate=clipbound_learning_rate, min_clipbound=min_clipbound,
                                     max_clipbound=max_clipbound, **kwargs))
