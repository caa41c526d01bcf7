"""DPDSyn: task-oriented DP synthetic data, trained only from DP releases (docs/study.md, 'Synthetic data').

A generator G (an MLP on Gaussian noise and a class label) emits records in the prepared feature space: numeric
columns through tanh (in [-1, 1], as the public schema maps them), each categorical column as a one-hot block
through a softmax (Gumbel-softmax while training, an exact categorical draw when the table is released). It is
trained so that a task model (LR or the MLP of :mod:`fairdp_core.models`) trained on its output does well on the
task, by gradient matching (Zhao et al. 2021, arXiv 2006.05929; with DP releases as in Chen et al. 2022, "Private
Set Generation with Discriminative Information", arXiv 2211.04446):

  for t = 1..T, at the current task parameters θ_t:
    1. Poisson batch of the private records with rate q = B/n; per-sample task-loss gradients at θ_t, each clipped
       to norm C, summed per class k, plus N(0, σ²C²I), divided by B (not by the realised batch size; an empty
       batch still gets noise and counts as a step):
           g̃_{t,k} = (Σ_{i: y_i = k} clip_C(∇ℓ(θ_t; x_i, y_i)) + N(0, σ²C²I)) / B              (release 1)
    2. G's step(s): a class-balanced synthetic batch, its per-sample gradients at θ_t clipped at C the same way,
       averaged per class: ḡ_{t,k}(G); minimise Σ_k 1 − cos(ḡ_{t,k}(G), g̃_{t,k}) (class-wise matching, as
       Zhao et al. and Chen et al.).
    3. the task model's step on a fresh synthetic batch (θ ← θ − η ∇ℓ(θ; synthetic)); θ is re-initialised
       every ``reinit_every`` steps so G is matched along many training trajectories, not one.
  Before the loop, once: the class counts plus N(0, σ_c²) each (release 2, L2 sensitivity 1 under add/remove:
  a record is in one class), floored at a public constant and normalised: p̃.

Why this is DP
--------------
The private records (features and labels alike) are read in exactly two places, :func:`private_gradient`
(release 1, every step) and :func:`noisy_label_marginal` (release 2, once). Release 1 is the subsampled Gaussian
mechanism of DP-SGD: each clipped per-sample gradient has norm ≤ C and a record is in exactly one class, so adding
or removing one record changes the [K, P] matrix of per-class clipped sums by at most C in L2 (one row, by one
vector), and every entry gets N(0, σ²C²); Poisson sampling at q = B/n. Release 2 is a Gaussian
mechanism of sensitivity 1 with noise multiplier σ_c. Everything else, θ_t, the synthetic batches, G's loss and
updates, the task model's updates and the released table, is computed from the releases, public constants and
randomness independent of the data: post-processing, which costs no privacy. θ_t, at which step t's release is
computed, depends only on earlier releases (adaptive composition). The privacy loss is therefore the composition
of T Poisson-subsampled Gaussian mechanisms at (σ, q) and one Gaussian mechanism at σ_c, which the project's
Opacus accountant (RDP by default) computes from the history [(σ, q, T), (σ_c, 1, 1)] (:func:`dpdsyn_epsilon`);
σ is calibrated with σ_c = ``label_sigma_ratio``·σ so that this composition meets the target ε. G's loss never
touches a private label or record outside these two mechanisms (the sketch in the source material computed G's
loss from private labels directly; this version does not). ``tests/test_synth.py`` checks it: two datasets of
equal size whose releases are replaced by the same recorded values give bit-identical generators.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..models import build_model
from ..seeding import derive_seed
from .layout import Layout

__all__ = ["DPDSynSpec", "Generator", "ReleaseSpec", "SynthResult", "calibrate_dpdsyn", "dpdsyn_epsilon",
           "noisy_label_marginal", "per_sample_grads", "private_gradient", "reinit_", "release_schedule", "sample_table",
           "train_dpdsyn"]


@dataclass(frozen=True)
class ReleaseSpec:
    """What every generator trained from the two releases shares (DPDSyn, DP-CGAN): ``target_epsilon`` (calibrate
    σ with ``delta``, q = B/n, T = round(epochs·n/B)) or ``noise_multiplier`` σ (0: no noise and no ε, the
    non-private upper bound; the label marginal is then exact); clip C; σ_c = ``label_sigma_ratio``·σ for the label
    counts, ``label_floor`` the public floor of a noised count; the generator's noise size and width."""

    NAME = "the generator"
    epochs: float = 5.0
    batch_size: int = 256
    clip: float = 1.0
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"
    label_sigma_ratio: float = 20.0
    label_floor: float = 1.0
    noise_dim: int = 32
    hidden: int = 128

    def __post_init__(self) -> None:
        if (self.target_epsilon is None) == (self.noise_multiplier is None):
            raise ValueError(f"{self.NAME} needs exactly one of target_epsilon and noise_multiplier")
        if self.clip <= 0 or self.batch_size <= 0 or self.epochs <= 0 or self.label_sigma_ratio <= 0:
            raise ValueError("clip, batch_size, epochs and label_sigma_ratio must be positive")


@dataclass(frozen=True)
class DPDSynSpec(ReleaseSpec):
    """DPDSyn's settings (keyword-only, public): those of :class:`ReleaseSpec`, and the generator's Adam step
    ``lr_g``, ``g_steps`` updates per release, Gumbel-softmax temperature ``temperature``, synthetic batch
    ``synth_batch``. Task model: ``task_model`` ('lr' or 'mlp', hidden ``task_hidden``), step ``task_lr``,
    re-initialised every ``reinit_every`` steps."""

    NAME = "DPDSyn"
    lr_g: float = 1e-3
    g_steps: int = 1
    temperature: float = 0.5
    synth_batch: int = 256
    task_model: str = "lr"
    task_hidden: int = 32
    task_lr: float = 0.5
    reinit_every: int = 50


# ------------------------------------------------------------------------------------------- the releases

def private_gradient(per_sample: torch.Tensor, labels: torch.Tensor, *, n_classes: int, clip: float, sigma: float,
                     batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Release 1, the Gaussian mechanism of DP-SGD, per class: per-sample gradients [b, P] (b may be 0) clipped to
    L2 norm ``clip`` and summed within each class (``labels`` [b]), plus N(0, (σ·C)² I) on every entry of the
    [n_classes, P] result, drawn from ``generator`` (this release's own stream), divided by the expected batch size
    B. A record is in one class, so the [K, P] release has L2 sensitivity C, as one DP-SGD step. Returns [K, P]
    (detached)."""
    per_sample = per_sample.detach()
    norms = per_sample.norm(dim=1)
    factors = torch.clamp(clip / (norms + 1e-12), max=1.0)
    total = torch.zeros(n_classes, per_sample.shape[1], dtype=per_sample.dtype)
    total.index_add_(0, labels, per_sample * factors[:, None])
    noise = torch.randn(total.shape, generator=generator, dtype=total.dtype) * (sigma * clip)
    return (total + noise) / batch_size


def noisy_label_marginal(y: np.ndarray, n_classes: int, *, sigma_c: float, floor: float,
                         rng: np.random.Generator) -> np.ndarray:
    """Release 2: class counts + N(0, σ_c²) each (L2 sensitivity 1 under add/remove), floored at the public
    ``floor`` and normalised. Returns float64 [n_classes] (a distribution)."""
    counts = np.bincount(np.asarray(y), minlength=n_classes).astype(np.float64)
    noisy = counts + rng.normal(0.0, sigma_c, size=n_classes) if sigma_c > 0 else counts
    noisy = np.maximum(noisy, floor)
    return noisy / noisy.sum()


def dpdsyn_epsilon(sigma: float, *, sample_rate: float, steps: int, delta: float, label_sigma_ratio: float,
                   accountant: str = "rdp", target_epsilon: float | None = None) -> float:
    """ε of DPDSyn's releases composed: T Poisson-subsampled Gaussian steps (σ, q) and one Gaussian count release
    at σ_c = ratio·σ, by the engine's Opacus accountant (:func:`~fairdp_core.engine.accounting.history_epsilon`,
    PRV's error margin set from ``target_epsilon``; ∞ when σ = 0)."""
    from ..engine.accounting import history_epsilon

    if sigma <= 0:
        return math.inf
    return history_epsilon([(sigma, sample_rate, steps), (label_sigma_ratio * sigma, 1.0, 1)], delta=delta,
                           accountant=accountant, target_epsilon=target_epsilon)


def calibrate_dpdsyn(target_epsilon: float, *, sample_rate: float, steps: int, delta: float,
                     label_sigma_ratio: float, accountant: str = "rdp", rel_tol: float = 1e-3) -> float:
    """The smallest σ (to ``rel_tol``) whose composed ε (:func:`dpdsyn_epsilon`) is at most the target: the engine's
    bisection (:func:`~fairdp_core.engine.accounting.calibrate`) with this composition as the oracle."""
    from ..engine.accounting import calibrate

    if not (target_epsilon > 0 and 0 < delta < 1 and 0 < sample_rate <= 1 and steps >= 1):
        raise ValueError(f"cannot calibrate: ε={target_epsilon}, δ={delta}, q={sample_rate}, T={steps}")
    return calibrate(target_epsilon,
                     lambda s: dpdsyn_epsilon(s, sample_rate=sample_rate, steps=steps, delta=delta,
                                              label_sigma_ratio=label_sigma_ratio, accountant=accountant,
                                              target_epsilon=target_epsilon),
                     rel_tol=rel_tol, cap=1e7, what=f" (DPDSyn: q={sample_rate}, T={steps}, δ={delta})")


def release_schedule(spec: ReleaseSpec, n: int) -> tuple[float, int, float, float, float]:
    """(q, T, σ, σ_c, ε) of a generator trained from the two releases (DPDSyn, DP-CGAN) on n records (public):
    q = B/n, T = round(E·n/B), σ given or calibrated to the target (:func:`calibrate_dpdsyn`), σ_c = ratio·σ, and
    the ε of the composition (:func:`dpdsyn_epsilon`)."""
    q = spec.batch_size / n
    steps = max(1, int(round(spec.epochs * n / spec.batch_size)))
    if spec.noise_multiplier is not None:
        sigma = float(spec.noise_multiplier)
    else:
        sigma = calibrate_dpdsyn(spec.target_epsilon, sample_rate=q, steps=steps, delta=spec.delta,
                                 label_sigma_ratio=spec.label_sigma_ratio, accountant=spec.accountant)
    eps = dpdsyn_epsilon(sigma, sample_rate=q, steps=steps, delta=spec.delta,
                         label_sigma_ratio=spec.label_sigma_ratio, accountant=spec.accountant,
                         target_epsilon=spec.target_epsilon)
    return q, steps, sigma, spec.label_sigma_ratio * sigma, eps


# --------------------------------------------------------------------------------------------- the model

class Generator(nn.Module):
    """MLP (noise_dim + n_classes → hidden → hidden → d, ReLU) whose output is laid out as the prepared features:
    tanh on numeric columns, a (Gumbel-)softmax per one-hot block. ``forward(z [b, noise_dim], y [b] int64)``."""

    def __init__(self, layout: Layout, n_classes: int, *, noise_dim: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.layout, self.n_classes, self.noise_dim = layout, n_classes, noise_dim
        self.net = nn.Sequential(nn.Linear(noise_dim + n_classes, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, layout.d))
        self.register_buffer("numeric", torch.as_tensor(layout.numeric, dtype=torch.long), persistent=False)

    def forward(self, z: torch.Tensor, y: torch.Tensor, *, temperature: float = 1.0, hard: bool = False,
                generator: torch.Generator | None = None) -> torch.Tensor:
        h = self.net(torch.cat([z, nn.functional.one_hot(y, self.n_classes).to(z.dtype)], 1))
        parts = torch.empty_like(h)
        if len(self.layout.numeric):
            parts[:, self.numeric] = torch.tanh(h[:, self.numeric])
        for _, s, e in self.layout.blocks:
            logits = h[:, s:e]
            u = torch.rand(logits.shape, generator=generator, dtype=logits.dtype).clamp_(1e-10, 1 - 1e-10)
            gumbel = logits - torch.log(-torch.log(u))
            if hard:  # an exact categorical draw (Gumbel-max): a one-hot row
                parts[:, s:e] = nn.functional.one_hot(gumbel.argmax(1), e - s).to(h.dtype)
            else:
                parts[:, s:e] = torch.softmax(gumbel / temperature, dim=1)
        return parts


def per_sample_grads(model: nn.Module, params: dict[str, torch.Tensor], X: torch.Tensor,
                     y: torch.Tensor) -> torch.Tensor:
    """Per-sample gradients of the cross-entropy at ``params``, flattened: [b, P]. Differentiable in X."""
    def loss_one(p, x, t):
        return nn.functional.cross_entropy(functional_call(model, p, (x[None],)), t[None])

    g = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, X, y)
    return torch.cat([g[k].reshape(X.shape[0], -1) for k in params], 1)


def _clipped_class_means(per_sample: torch.Tensor, labels: torch.Tensor, n_classes: int,
                         clip: float) -> torch.Tensor:
    """Per class, the mean of per-sample gradients [b, P] clipped to ``clip`` (differentiable): the synthetic side
    of the match, [n_classes, P]."""
    factors = torch.clamp(clip / (per_sample.norm(dim=1) + 1e-12), max=1.0)
    one_hot = nn.functional.one_hot(labels, n_classes).to(per_sample.dtype)  # [b, K]
    return (one_hot.T @ (per_sample * factors[:, None])) / one_hot.sum(0).clamp(min=1.0)[:, None]


def _task_params(model: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Fresh parameters for ``model`` (linear layers only), drawn from ``gen``: uniform ±1/√fan_in, the scale of
    PyTorch's default init."""
    out = {}
    for k, p in model.named_parameters():
        fan_in = p.shape[1] if p.ndim > 1 else model.get_submodule(k.rsplit(".", 1)[0]).weight.shape[1]
        b = 1.0 / math.sqrt(fan_in)
        out[k] = (torch.rand(p.shape, generator=gen) * 2 - 1) * b
    return out


@torch.no_grad()
def reinit_(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """Re-initialise ``model``'s parameters in place from ``gen`` (:func:`_task_params`); returns it."""
    for k, v in _task_params(model, gen).items():
        model.get_parameter(k).copy_(v)
    return model


# ------------------------------------------------------------------------------------------- training

@dataclass
class SynthResult:
    """A trained DPDSyn: the generator, the released label marginal [n_classes], the accounting (σ, σ_c, q, T,
    δ, accountant, ε), seconds, and per step the matching loss (1 − cos)."""

    generator: Generator
    label_probs: np.ndarray
    accounting: dict[str, object]
    seconds: float
    match_loss: list[float] = field(default_factory=list)


Release = Callable[..., torch.Tensor]


def train_dpdsyn(X: np.ndarray, y: np.ndarray, layout: Layout, spec: DPDSynSpec, *, n_classes: int, seed: int,
                 release: Release = private_gradient,
                 label_release: Callable[..., np.ndarray] = noisy_label_marginal,
                 on_release: Callable[[int, torch.Tensor], None] | None = None) -> SynthResult:
    """Train DPDSyn on the private records X [n, d] float32, y [n] int64 (see the module docstring).

    ``seed`` is this synthesizer's seed (derive it from the params seed and the run's labels); its streams
    (Poisson sampling, gradient noise, label noise, generator init and latents, task init) are derived from it
    with distinct labels, so no generator is shared between releases. ``release`` / ``label_release`` are the two
    mechanisms (replaceable only to test that G is post-processing of them); ``on_release(t, g̃_t)`` sees each
    released gradient."""
    t0 = time.perf_counter()
    n, d = X.shape
    if d != layout.d:
        raise ValueError(f"X has {d} columns, the layout {layout.d}")
    q, steps, sigma, sigma_c, eps = release_schedule(spec, n)

    def tgen(*labels) -> torch.Generator:
        return torch.Generator().manual_seed(derive_seed(seed, "dpdsyn", *labels))

    sample_rng = np.random.default_rng(derive_seed(seed, "dpdsyn", "poisson"))
    noise_gen = tgen("gradient_noise")
    latent_gen, task_gen = tgen("latent"), tgen("task_init")
    G = Generator(layout, n_classes, noise_dim=spec.noise_dim, hidden=spec.hidden)
    reinit_(G, tgen("generator_init"))  # from this synthesizer's own stream, not the global one
    task = build_model(spec.task_model, (d,), n_classes, hidden=spec.task_hidden)
    for p in task.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam(G.parameters(), lr=spec.lr_g)

    label_probs = label_release(y, n_classes, sigma_c=sigma_c, floor=spec.label_floor,
                                rng=np.random.default_rng(derive_seed(seed, "dpdsyn", "label_noise")))
    probs_t = torch.as_tensor(label_probs, dtype=torch.float32)
    Xt, yt = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y, dtype=torch.long)

    balanced_labels = torch.arange(n_classes).repeat_interleave(max(1, spec.synth_batch // n_classes))

    def synth_batch(hard: bool = False, balanced: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        ys = balanced_labels if balanced else torch.multinomial(probs_t, spec.synth_batch, replacement=True,
                                                                generator=latent_gen)
        z = torch.randn(len(ys), spec.noise_dim, generator=latent_gen)
        return G(z, ys, temperature=spec.temperature, hard=hard, generator=latent_gen), ys

    losses: list[float] = []
    theta: dict[str, torch.Tensor] = {}
    for t in range(steps):
        if t % spec.reinit_every == 0:
            theta = _task_params(task, task_gen)
        # release 1: the only access to the private records in the loop
        idx = np.flatnonzero(sample_rng.random(n) < q)
        priv = per_sample_grads(task, theta, Xt[idx], yt[idx]) if len(idx) else torch.zeros(
            0, sum(v.numel() for v in theta.values()))
        released = release(priv, yt[idx], n_classes=n_classes, clip=spec.clip, sigma=sigma,
                           batch_size=spec.batch_size, generator=noise_gen)
        if on_release is not None:
            on_release(t, released)
        # post-processing of the releases from here on
        for _ in range(spec.g_steps):
            xs, ys = synth_batch(balanced=True)
            g_syn = _clipped_class_means(per_sample_grads(task, theta, xs, ys), ys, n_classes, spec.clip)
            loss = (1.0 - nn.functional.cosine_similarity(g_syn, released, dim=1, eps=1e-12)).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        with torch.no_grad():
            xs, ys = synth_batch()
        g_task = per_sample_grads(task, theta, xs, ys).mean(0)
        off = 0
        for k, v in theta.items():
            theta[k] = v - spec.task_lr * g_task[off:off + v.numel()].reshape(v.shape)
            off += v.numel()
    accounting = {"algorithm": "dpdsyn", "sigma": sigma, "sigma_label": sigma_c if sigma > 0 else 0.0,
                  "clip": spec.clip, "sample_rate": q, "steps": steps, "delta": spec.delta,
                  "accountant": spec.accountant, "sampling": "poisson", "epsilon": eps,
                  "target_epsilon": spec.target_epsilon,
                  "mechanisms": "T Poisson-subsampled Gaussian gradient releases (σ, q) + one Gaussian label-count "
                                "release (σ_c, q = 1), composed by the accountant"}
    return SynthResult(G, label_probs, accounting, time.perf_counter() - t0, losses)


@torch.no_grad()
def sample_table(result: SynthResult, n: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A released synthetic table of ``n`` rows (public size): labels from the released marginal, records from G
    with exact categorical draws. Returns (X float32 [n, d], y int64 [n]); post-processing of the releases."""
    gen = torch.Generator().manual_seed(derive_seed(seed, "dpdsyn", "table"))
    G = result.generator
    y = torch.multinomial(torch.as_tensor(result.label_probs, dtype=torch.float32), n, replacement=True,
                          generator=gen)
    z = torch.randn(n, G.noise_dim, generator=gen)
    X = G(z, y, hard=True, generator=gen)
    return X.numpy().astype(np.float32), y.numpy().astype(np.int64)
