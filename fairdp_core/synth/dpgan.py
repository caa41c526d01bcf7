"""DP-CGAN: a conditional GAN whose discriminator sees the private records only through DP-SGD releases (the
synthetic-data report's DP GAN baseline, at the same (ε, δ) and accountant as DPDSyn; Torkzadehmahani et al. 2019,
"DP-CGAN", arXiv 2001.09700, with the real/fake split of the discriminator's gradient as in Xie et al. 2018, arXiv
1802.06739).

Why not smartnoise's GANs
-------------------------
smartnoise-synth 1.0.8's DP-CTGAN and PATE-CTGAN (run by :mod:`fairdp_core.synth.smartnoise_run`) are not at the
ε they are given: both condition the generator on category frequencies counted exactly from the private table;
DP-CTGAN fixes σ, samples real rows by category (not Poisson) and only stops training once its ε is exceeded,
after a whole further epoch; PATE-CTGAN's ε is data-dependent. This module is the DP GAN the report compares at a
stated ε; the smartnoise GANs stay runnable, labelled as nominal ε, outside the claims.

The mechanism
-------------
Generator G (:class:`~fairdp_core.synth.dpdsyn.Generator`: noise + class label → the prepared feature space) and
discriminator D (an MLP on [x, one-hot y] → a logit). Before the loop, once: the noised class counts (release 2,
:func:`~fairdp_core.synth.dpdsyn.noisy_label_marginal`, σ_c = ratio·σ). For t = 1..T:

  1. a Poisson batch of the private records at q = B/n; per-sample gradients of D's loss on them as real
     (BCE(D(x, y), 1)) at D's current parameters, each clipped to C, summed, plus N(0, σ²C² I), divided by B
     (release 1, :func:`~fairdp_core.synth.dpdsyn.private_gradient` with one class);
  2. D's gradient is that release plus the gradient of its loss on a synthetic batch as fake (computed from G and
     D alone: no private data); one Adam step on D;
  3. G's step on a fresh synthetic batch (non-saturating loss −log D(G(z, y), y)), through D's parameters.

Why this is DP: the private records are read in release 1 (a subsampled Gaussian mechanism of L2 sensitivity C,
as one DP-SGD step) and release 2 (a Gaussian count of sensitivity 1), nowhere else; D's and G's parameters, the
synthetic batches and the released table are computed from the releases and randomness independent of the data
(post-processing; D's parameters at step t depend on earlier releases only: adaptive composition). The privacy
loss is the composition [(σ, q, T), (σ_c, 1, 1)], DPDSyn's own (:func:`~fairdp_core.synth.dpdsyn.dpdsyn_epsilon`),
so both are calibrated by the same accountant to the same target. As everywhere in the project (and in Opacus),
the pool size n is public: q = B/n and T = E·n/B are computed from it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..seeding import derive_seed
from .dpdsyn import Generator, ReleaseSpec, SynthResult, noisy_label_marginal, private_gradient, reinit_, release_schedule
from .layout import Layout

__all__ = ["DPCGANSpec", "Discriminator", "straight_through", "train_dpcgan"]


@dataclass(frozen=True)
class DPCGANSpec(ReleaseSpec):
    """DP-CGAN's settings: those of :class:`~fairdp_core.synth.dpdsyn.ReleaseSpec`, and the discriminator's width,
    the two Adam steps and the Gumbel-softmax temperature."""

    NAME = "DP-CGAN"
    d_hidden: int = 64
    lr_g: float = 2e-3
    lr_d: float = 2e-3
    temperature: float = 0.5


class Discriminator(nn.Module):
    """MLP ([x, one-hot y] → d_hidden → d_hidden → 1 logit, LeakyReLU 0.2)."""

    def __init__(self, d: int, n_classes: int, *, hidden: int = 64) -> None:
        super().__init__()
        self.n_classes = n_classes
        self.net = nn.Sequential(nn.Linear(d + n_classes, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden),
                                 nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Logits [b] for records x [b, d] with labels y: [b] int64, or already one-hot [b, n_classes]."""
        y1 = y if y.is_floating_point() else nn.functional.one_hot(y, self.n_classes).to(x.dtype)
        return self.net(torch.cat([x, y1], 1))[:, 0]


def straight_through(x: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Each one-hot block of a soft (Gumbel-softmax) output made exactly one-hot in the forward pass, keeping the
    soft gradient (straight-through): otherwise D tells real from fake by the softness of the blocks alone."""
    out = x.clone()
    for _, s, e in layout.blocks:
        soft = x[:, s:e]
        hard = nn.functional.one_hot(soft.argmax(1), e - s).to(x.dtype)
        out[:, s:e] = hard + soft - soft.detach()
    return out


def _real_per_sample(D: Discriminator, params: dict[str, torch.Tensor], X: torch.Tensor,
                     y: torch.Tensor) -> torch.Tensor:
    """Per-sample gradients of BCE(D(x, y), real) at ``params``, flattened [b, P]."""
    def loss_one(p, x, t):
        logit = functional_call(D, p, (x[None], t[None]))
        return nn.functional.binary_cross_entropy_with_logits(logit, torch.ones_like(logit))

    y1 = nn.functional.one_hot(y, D.n_classes).to(X.dtype)  # one-hot outside vmap (one_hot is not vmappable)
    g = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, X, y1)
    return torch.cat([g[k].reshape(X.shape[0], -1) for k in params], 1)


def train_dpcgan(X: np.ndarray, y: np.ndarray, layout: Layout, spec: DPCGANSpec, *, n_classes: int, seed: int,
                 release=private_gradient, label_release=noisy_label_marginal) -> SynthResult:
    """Train DP-CGAN on the private records X [n, d] float32, y [n] int64 (see the module docstring). Streams
    (Poisson sampling, gradient noise, label noise, initialisations, latents) derive from ``seed`` with distinct
    labels. ``release`` / ``label_release``: the two mechanisms (replaceable only in tests). Returns a
    :class:`~fairdp_core.synth.dpdsyn.SynthResult` (sample it with :func:`~fairdp_core.synth.dpdsyn.sample_table`);
    ``match_loss`` holds the fake half of the discriminator's loss per step (the real half is never computed
    outside the release)."""
    t0 = time.perf_counter()
    n, d = X.shape
    if d != layout.d:
        raise ValueError(f"X has {d} columns, the layout {layout.d}")
    q, steps, sigma, sigma_c, eps = release_schedule(spec, n)  # DPDSyn's composition and calibration

    def tgen(*labels) -> torch.Generator:
        return torch.Generator().manual_seed(derive_seed(seed, "dpcgan", *labels))

    sample_rng = np.random.default_rng(derive_seed(seed, "dpcgan", "poisson"))
    noise_gen, latent_gen = tgen("gradient_noise"), tgen("latent")
    G = reinit_(Generator(layout, n_classes, noise_dim=spec.noise_dim, hidden=spec.hidden), tgen("generator_init"))
    D = reinit_(Discriminator(d, n_classes, hidden=spec.d_hidden), tgen("discriminator_init"))
    opt_g = torch.optim.Adam(G.parameters(), lr=spec.lr_g, betas=(0.5, 0.9))
    opt_d = torch.optim.Adam(D.parameters(), lr=spec.lr_d, betas=(0.5, 0.9))
    label_probs = label_release(y, n_classes, sigma_c=sigma_c, floor=spec.label_floor,
                                rng=np.random.default_rng(derive_seed(seed, "dpcgan", "label_noise")))
    probs_t = torch.as_tensor(label_probs, dtype=torch.float32)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)
    names = [k for k, _ in D.named_parameters()]
    bce = nn.functional.binary_cross_entropy_with_logits

    def fake(b: int) -> tuple[torch.Tensor, torch.Tensor]:
        ys = torch.multinomial(probs_t, b, replacement=True, generator=latent_gen)
        z = torch.randn(b, spec.noise_dim, generator=latent_gen)
        return straight_through(G(z, ys, temperature=spec.temperature, generator=latent_gen), layout), ys

    d_losses: list[float] = []
    for _ in range(steps):
        # release 1: the only access to the private records in the loop
        params = {k: v.detach() for k, v in D.named_parameters()}
        idx = np.flatnonzero(sample_rng.random(n) < q)
        per = _real_per_sample(D, params, Xt[idx], yt[idx]) if len(idx) else torch.zeros(
            0, sum(v.numel() for v in params.values()))
        real_grad = release(per, torch.zeros(len(idx), dtype=torch.long), n_classes=1, clip=spec.clip, sigma=sigma,
                            batch_size=spec.batch_size, generator=noise_gen)[0]
        # post-processing from here on: the fake half of D's loss, D's step, G's step
        with torch.no_grad():
            xf, yf = fake(spec.batch_size)
        opt_d.zero_grad(set_to_none=True)
        loss_fake = bce(D(xf, yf), torch.zeros(len(yf)))
        loss_fake.backward()
        off = 0
        for k in names:
            p = D.get_parameter(k)
            p.grad = p.grad + real_grad[off:off + p.numel()].reshape(p.shape)
            off += p.numel()
        opt_d.step()
        d_losses.append(float(loss_fake.detach()))
        xg, yg = fake(spec.batch_size)
        opt_g.zero_grad(set_to_none=True)
        loss_g = bce(D(xg, yg), torch.ones(len(yg)))
        loss_g.backward()
        opt_g.step()
    accounting = {"algorithm": "dpcgan", "sigma": sigma, "sigma_label": sigma_c if sigma > 0 else 0.0,
                  "clip": spec.clip, "sample_rate": q, "steps": steps, "delta": spec.delta,
                  "accountant": spec.accountant, "sampling": "poisson", "epsilon": eps,
                  "target_epsilon": spec.target_epsilon,
                  "mechanisms": "T Poisson-subsampled Gaussian releases of the discriminator's real-data gradient "
                                "(σ, q) + one Gaussian label-count release (σ_c, q = 1), composed by the accountant"}
    return SynthResult(G, label_probs, accounting, time.perf_counter() - t0, d_losses)
