"""The paper's rule made DP in a user's own Opacus loop: :class:`DPSGDSPaperOptimizer` and
:func:`make_private_dpsgd_s_paper` (the rule: :mod:`fairdp_core.rules.dpsgd_s_paper`, whose
:class:`~fairdp_core.rules.dpsgd_s_paper.GroupMeanRatioClip` sets the bounds: one implementation).

Each step, as the engine trains the rule:

- clipping: each sample of group k at C_k (Opacus's ``max_grad_norm / (norm + 1e-6)`` with a per-sample bound);
- gradient noise: N(0, (σ_g · max_k C_k)²), the max over ALL groups;
- release, after the step: the K per-group sums of the batch's gradients clipped at C0 (whatever the group bounds:
  a record moves one sum by at most C0), each coordinate + N(0, (σ_s · C0)²), and the K group counts + N(0, σ_b²),
  both drawn by Opacus's ``_generate_noise`` (``secure_mode`` applies); the NEXT step's bounds
  C_k = max(C_min, C0 · min(s, ‖ḡ‖ / ‖ḡ_k‖)) from that release alone (``bounds_from_release``).

``noise_multiplier`` (what Opacus's accountant hook reads every step) is σ_eff = (σ_g⁻² + σ_s⁻² + σ_b⁻²)^(-1/2): the
gradient, the sums and the counts are one Gaussian mechanism per step (see :mod:`fairdp_core.engine.accounting`).
σ_s defaults to √10·σ_eff and σ_b to B/20, the engine's defaults. Virtual steps (``BatchMemoryManager``): the sums
and counts of the physical batches of one logical step are accumulated and released once, when the step is taken.
Tell it the batch's groups with :meth:`DPSGDSPaperOptimizer.set_groups` before each ``step()``.

Its ``clip_and_accumulate`` forms the step's clipped sum and the K group sums together, one sparse [1 + K, B] × [B, P]
product per parameter (two entries a sample), instead of Opacus's own pass plus one more: the per-sample gradients
are read once (their norms once more, as Opacus does)."""

from __future__ import annotations

import math

import torch
from opacus.optimizers import DPOptimizer
from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

from ..engine.accounting import split_sigma
from ..rules.dpsgd_s_paper import GroupMeanRatioClip
from ._shared import _generate_noise, _GroupBounds, _make_private, _param_device

__all__ = ["DPSGDSPaperOptimizer", "make_private_dpsgd_s_paper"]


class DPSGDSPaperOptimizer(_GroupBounds, DPOptimizer):
    """The paper's rule made DP as an Opacus optimizer. ``noise_multiplier`` is σ_eff (the accountant's); ``clip``
    is C0; ``n_groups`` is K; ``ratio_cap`` (s), ``sigma_s``, ``sigma_b``, ``c_min`` and ``count_floor`` as in
    ``train.dpsgd_s_paper`` (docs/rules.md).

    After each step ``released_sums`` [K, P] (the parameters' gradients flattened in ``params`` order and joined)
    and ``released_counts`` [K] hold what was released (public); ``bounds`` [K] the bounds of the next step.
    Everything lives on the device of the optimizer's parameters; ``generator`` (if any) must be on it too."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, noise_multiplier: float, n_groups: int,
                 expected_batch_size: int, clip: float = 1.0, ratio_cap: float = 2.0, sigma_s: float | None = None,
                 sigma_b: float | None = None, c_min: float = 0.01, count_floor: float | None = None,
                 loss_reduction: str = "mean", generator: torch.Generator | None = None,
                 secure_mode: bool = False) -> None:
        sigma_s = math.sqrt(10.0) * noise_multiplier if sigma_s is None else sigma_s
        sigma_b = expected_batch_size / 20.0 if sigma_b is None else sigma_b
        self.grad_noise_multiplier = split_sigma(noise_multiplier, sigma_s, sigma_b)
        device = _param_device(optimizer, generator)
        self._rule = GroupMeanRatioClip(1, n_groups, self.grad_noise_multiplier, clip=clip, ratio_cap=ratio_cap,
                                        sigma_s=sigma_s, sigma_b=sigma_b, c_min=c_min, floor=count_floor,
                                        generators=[None], device=device)  # the release is noised below, by Opacus
        self.sigma_s, self.sigma_b = float(sigma_s), float(sigma_b)
        super().__init__(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=float(self.bounds.max()),
                         expected_batch_size=expected_batch_size, loss_reduction=loss_reduction,
                         generator=generator, secure_mode=secure_mode)
        self._groups: torch.Tensor | None = None
        P = sum(p.numel() for p in self.params)
        self._sums = torch.zeros(n_groups, P, device=device)  # accumulated over the virtual steps of one step
        self._counts = torch.zeros(n_groups, device=device)
        self.released_sums = torch.zeros_like(self._sums)
        self.released_counts = torch.zeros_like(self._counts)

    def clip_and_accumulate(self) -> None:
        self._require_groups()
        with self._one_batch():
            batch = self._batch()
            if batch is None:
                return super().clip_and_accumulate()
            norms, groups = batch
            # Opacus's (max_grad_norm / (norm + 1e-6)).clamp(max=1) with per-sample bounds (rules.policy.clip_factors)
            self.max_grad_norm = self.bounds[groups]
            self.last_sample_bounds = self.max_grad_norm.detach().clone()
            clip = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
            at_c0 = self._rule.sum_factors(norms)  # min(1, C0 / ‖g_i‖): the release's sums are clipped at C0
            # [1 + K, B], sparse: row 0 the step's clipped sum (each sample at its factor, as Opacus's
            # clip_and_accumulate forms it), row 1 + k the group sum of group k at C0. Two entries a sample, so one
            # read of each parameter's per-sample gradients gives both (a dense [1 + K, B] matmul does K + 1 times
            # the arithmetic, 4x slower here under MKL_CBWR=COMPATIBLE)
            B, idx = len(groups), torch.arange(len(groups), device=groups.device)
            rows = torch.cat([torch.zeros_like(groups), groups + 1])
            vals = torch.cat([clip, at_c0])
            weights = torch.sparse_coo_tensor(torch.stack([rows, torch.cat([idx, idx])]), vals, (1 + self._rule.K, B),
                                              check_invariants=False).coalesce()
            grads, parts = [], []
            for p in self.params:
                _check_processed_flag(p.grad_sample)
                grad_sample = self._get_flat_grad_sample(p).to(p.dtype)
                both = torch.sparse.mm(weights.to(grad_sample.device, p.dtype), grad_sample.reshape(B, -1))
                grads.append(both[0].view(p.shape).clone())  # not a view: the K sums' buffer is not kept
                parts.append(both[1:])
            sums = torch.cat(parts, 1).to(self._sums.device, self._sums.dtype)
            counts = self._rule.group_counts(groups[None], torch.ones(B, device=groups.device)[None])[0]
            # only now, with nothing left to fail, the step's state: a batch whose step raised leaves no trace in
            # the next release
            for p, grad in zip(self.params, grads):
                if p.summed_grad is not None:
                    p.summed_grad += grad
                else:
                    p.summed_grad = grad
                _mark_as_processed(p.grad_sample)
            self._sums += sums
            self._counts += counts.to(self._counts.device)

    def add_noise(self) -> None:
        self._add_gradient_noise()
        sums_noise = _generate_noise(std=self.sigma_s * self._rule.c0, reference=self._sums,
                                     generator=self.generator, secure_mode=self.secure_mode)
        counts_noise = _generate_noise(std=self.sigma_b, reference=self._counts, generator=self.generator,
                                       secure_mode=self.secure_mode)
        self.released_sums, self.released_counts = self._sums + sums_noise, self._counts + counts_noise
        self._rule._b = self._rule.bounds_from_release(self.released_sums[None], self.released_counts[None])
        self._rule.released_counts = self.released_counts[None]
        self._sums, self._counts = torch.zeros_like(self._sums), torch.zeros_like(self._counts)


def make_private_dpsgd_s_paper(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                               n_groups: int, **kwargs):
    """``PrivacyEngine.make_private`` with the paper's rule made DP: returns (module,
    :class:`DPSGDSPaperOptimizer`, data_loader), its steps charged to ``privacy_engine.accountant`` at σ_eff =
    ``noise_multiplier`` (the released sums and counts included), with the engine's ``secure_mode`` (and its secure
    generator) unless a ``generator`` is given."""
    return _make_private(privacy_engine, DPSGDSPaperOptimizer, module=module, optimizer=optimizer,
                         data_loader=data_loader, noise_multiplier=noise_multiplier,
                         kwargs=dict(noise_multiplier=noise_multiplier, n_groups=n_groups, **kwargs))
