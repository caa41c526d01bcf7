"""Break the privacy code on purpose and check that the fast privacy tests then fail (`make breakages`).

Each breakage is one exact source edit in a temporary copy of the project: remove the noise, shrink its scale,
calibrate at the wrong q, let an unnoised count reach the quantile update, share noise between releases, and so
on. For each, the privacy suite (SUITE below: the privacy, rivals, engine, Opacus, clip-tuning and custom-audit tests,
without the real-data test) runs against the broken copy and must FAIL. A breakage whose edit no longer matches the
source is reported as stale, and also fails the run: keep this list in step with the code.

    python tests/privacy_breakages.py            # all breakages; exit 1 if any survives or is stale
    python tests/privacy_breakages.py --list     # the list only
    python tests/privacy_breakages.py --match DPSGD-F   # only the breakages whose name contains DPSGD-F
    python tests/privacy_breakages.py --write-hints     # also record each breakage's catching test (breakage_hints.json)

With hints, each breakage first runs the one test that caught it last time; its failure counts only if that test passes
alone on the unbroken code. Otherwise (or if it passes, or is gone) the whole suite runs. The verdict is the same either
way, in a fraction of the time. The whole suite runs on the unbroken code (it must pass there, in the order it runs
in, or no failure of it proves anything: such a breakage is UNSOUND, never caught) only once some breakage needs it;
a breakage settled by its hinted test needs only that test to pass alone on the unbroken code, so a run in which
every breakage is settled that way does not check the rest of the suite (`make test` does).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = ["tests/test_privacy.py", "tests/test_rivals.py", "tests/test_paper_rule.py", "tests/test_engine.py",
         "tests/test_opacus_compat.py", "tests/test_clip_tuning.py", "tests/test_custom.py", "tests/test_synth.py", "tests/test_side_paths.py",
         "tests/test_group_sums.py"]


@dataclass(frozen=True)
class Breakage:
    name: str
    path: str
    old: str
    new: str


BREAKAGES = (
    Breakage("conv per-sample gradients: patch columns read as the weight's (in, kh, kw) order",
             "fairdp_core/engine/backends.py",
             "return g.view(out, kh, kw, inp).permute(0, 3, 1, 2).contiguous()", "return g.reshape(out, inp, kh, kw)"),
    Breakage("conv per-sample gradients: kernel offsets without the dilation", "fairdp_core/engine/backends.py",
             "(sN, sH * sh, sW * sw, sH * dh, sW * dw, sC)", "(sN, sH * sh, sW * sw, sH, sW, sC)"),
    Breakage("no gradient noise in the trainer", "fairdp_core/engine/trainer.py",
             "grads[n] += chunk.view_as(grads[n])", "grads[n] += 0 * chunk.view_as(grads[n])"),
    Breakage("noise scaled by the smallest group bound, not the max over all groups",
             "fairdp_core/rules/policy.py",
             "return self.sigma * self.bounds().amax(dim=1)", "return self.sigma * self.bounds().amin(dim=1)"),
    Breakage("fixed group bounds without the √K of C0·min(s, √K·π_k)", "fairdp_core/rules/dpsgd_group_fixed.py",
             "return [clip * min(ratio_cap, math.sqrt(K) * p) for p in shares]",
             "return [clip * min(ratio_cap, p) for p in shares]"),
    Breakage("fixed group bounds applied to the other group", "fairdp_core/rules/dpsgd_group_fixed.py",
             "bounds=group_bounds(spec.clip, spec.shares, spec.ratio_cap), device=device)",
             "bounds=group_bounds(spec.clip, spec.shares, spec.ratio_cap)[::-1], device=device)"),
    Breakage("one-pass group sums: each sample counted in the next group (CNN)", "fairdp_core/engine/backends.py",
             "G = torch.nn.functional.one_hot(groups[m], K)", "G = torch.nn.functional.one_hot((groups[m] + 1) % K, K)"),
    Breakage("Gram of the group sums: each sample counted in the next group (MLP, LR)",
             "fairdp_core/engine/backends.py", "H = torch.nn.functional.one_hot(groups, K)",
             "H = torch.nn.functional.one_hot((groups + 1) % K, K)"),
    Breakage("Gram of the group sums: the clipping factors (and batch padding) ignored", "fairdp_core/engine/backends.py",
             "fd = d * factors.unsqueeze(-1)\n            n_in, n_out", "fd = d\n            n_in, n_out"),
    Breakage("Gram of the group sums: cached input pairs of the next row of X (MLP, LR)",
             "fairdp_core/engine/backends.py", "at = (rows.unsqueeze(-1) * n + rows.unsqueeze(-2)).view(-1)",
             "at = (rows.unsqueeze(-1) * n + (rows.unsqueeze(-2) + 1) % n).view(-1)"),
    Breakage("Gram of the group sums: cached input pairs without the bias's + 1 (MLP, LR)",
             "fairdp_core/engine/backends.py", "x.T.unsqueeze(0))[0].add_(1.0)", "x.T.unsqueeze(0))[0]"),
    Breakage("Gram release: the sums' noise at σ_s, not σ_s·C0", "fairdp_core/rules/dpsgd_s_paper.py",
             "noised_gram(gram[m], dim, self.sigma_s * self.c0, g)", "noised_gram(gram[m], dim, self.sigma_s, g)"),
    Breakage("Gram release: the noise orthogonal to the sums' span left out", "fairdp_core/rules/policy.py",
             "return A.T @ A + scale ** 2 * wishart", "return A.T @ A"),
    Breakage("DP-SGD-S gradient noise at σ_eff (the counts not paid for)", "fairdp_core/rules/dpsgd_s.py",
             "return Sigmas(split_sigma(sigma_eff, sigma_b), sigma_b, None, sigma_eff)",
             "return Sigmas(sigma_eff, sigma_b, None, sigma_eff)"),
    Breakage("σ calibrated at the smallest q of the bank", "fairdp_core/engine/trainer.py",
             "_sigmas(spec, float(q.max()), steps)", "_sigmas(spec, float(q.min()), steps)"),
    Breakage("bank ε reported as model 0's", "fairdp_core/engine/accounting.py",
             '"epsilon": max(eps),', '"epsilon": accounting[0].epsilon,'),
    Breakage("reported ε is the target, not the accountant's", "fairdp_core/engine/trainer.py",
             "epsilon=spent[float(q[m])],", "epsilon=spec.target_epsilon or spent[float(q[m])],"),
    Breakage("no count noise in DP-SGD-S", "fairdp_core/rules/dpsgd_s.py",
             ").to(self.device) * self.sigma_b", ").to(self.device) * 0.0"),
    Breakage("unnoised counts reach the quantile update", "fairdp_core/rules/dpsgd_s.py",
             "self.Q = self.update_from_release(self.Q, self.released)",
             "self.Q = self.update_from_release(self.Q, self.counts(norms, groups, weights))"),
    Breakage("no public floor on the count denominator", "fairdp_core/rules/dpsgd_s.py",
             "torch.clamp(below + above, min=self.floor)", "(below + above)"),
    Breakage("no public cap on Q", "fairdp_core/rules/dpsgd_s.py",
             "min=1e-6, max=self.q_max)", "min=1e-6)"),
    Breakage("noise streams shared between releases", "fairdp_core/engine/trainer.py",
             "spawn_key=(int(i), int(release))", "spawn_key=(int(i), 0)"),
    Breakage("count noise drawn on the default device, not the generator's", "fairdp_core/rules/dpsgd_s.py",
             "torch.randn(2 * self.K, generator=g, device=g.device)", "torch.randn(2 * self.K, generator=g)"),
    Breakage("clipping removed", "fairdp_core/rules/policy.py",
             "return torch.clamp(C / (norms + 1e-6), max=1.0)", "return torch.ones_like(norms)"),
    Breakage("trainer skips clipping", "fairdp_core/engine/trainer.py",
             "factors = policy.factors(norms, gb, bounds) * w", "factors = w"),
    Breakage("biases left unnoised", "fairdp_core/engine/trainer.py",
             "grads[n] += chunk.view_as(grads[n])", "grads[n] += chunk.view_as(grads[n]) * (not n.endswith('bias'))"),
    Breakage("every model noised at model 0's bound", "fairdp_core/engine/trainer.py",
             "std = policy.noise_std()  #", "std = policy.noise_std()[:1].expand(M)  #"),
    Breakage("no noise on empty batches", "fairdp_core/engine/trainer.py",
             "noise = noise_bank.next() * std[:, None]",
             "noise = noise_bank.next() * std[:, None] * (w.sum(1, keepdim=True) > 0)"),
    Breakage("bounds updated before the step's noise is scaled", "fairdp_core/engine/trainer.py",
             "std = policy.noise_std()  #", "policy.update(norms, gb, w)\n                std = policy.noise_std()  #"),
    Breakage("release key ignores the target ε", "fairdp_core/engine/spec.py",
             "blob = json.dumps(spec_fields(spec),",
             "blob = json.dumps({k: v for k, v in spec_fields(spec).items() if k != 'target_epsilon'},"),
    Breakage("count noise drawn from the gradient-noise stream", "fairdp_core/rules/dpsgd_s.py",
             'generators=[g["count"] for g in gens], device=device)', 'generators=[g["noise"] for g in gens], device=device)'),
    Breakage("paper rule: group sums released without noise", "fairdp_core/rules/dpsgd_s_paper.py",
             "sums + self._noise((K, P)) * (self.sigma_s * self.c0)", "sums + self._noise((K, P)) * 0.0"),
    Breakage("paper rule: group counts released without noise", "fairdp_core/rules/dpsgd_s_paper.py",
             "counts + self._noise((K,)) * self.sigma_b", "counts + self._noise((K,)) * 0.0"),
    Breakage("paper rule: statistics from unclipped gradients", "fairdp_core/rules/dpsgd_s_paper.py",
             "return torch.clamp(self.c0 / (norms + 1e-6), max=1.0)", "return torch.ones_like(norms)"),
    Breakage("paper rule: the group sums not paid for", "fairdp_core/rules/dpsgd_s_paper.py",
             "return Sigmas(split_sigma(sigma_eff, sigma_s, sigma_b), sigma_b, sigma_s, sigma_eff)",
             "return Sigmas(split_sigma(sigma_eff, sigma_b), sigma_b, sigma_s, sigma_eff)"),
    Breakage("paper rule: statistics clipped at the group bounds, not C0", "fairdp_core/engine/trainer.py",
             "f = policy.sum_factors(norms) * w", "f = policy.factors(norms, gb, policy.bounds()) * w"),
    Breakage("paper rule: bounds from the exact statistics", "fairdp_core/rules/dpsgd_s_paper.py",
             "self._b = self.bounds_from_release(noisy_sums, self.released_counts)",
             "self._b = self.bounds_from_release(sums, counts)"),
    Breakage("Gram release: group counts released without noise", "fairdp_core/rules/dpsgd_s_paper.py",
             "self.released_counts = counts + self._noise((self.K,)) * self.sigma_b",
             "self.released_counts = counts + self._noise((self.K,)) * 0.0"),
    Breakage("Gram release: bounds from the exact Gram matrix", "fairdp_core/rules/dpsgd_s_paper.py",
             "self._b = self.bounds_from_gram(noisy.to(self.device), self.released_counts)",
             "self._b = self.bounds_from_gram(gram, counts)"),
    Breakage("paper rule: bounds from the batch they clip", "fairdp_core/rules/dpsgd_s_paper.py",
             'group_sums = "after"', 'group_sums = "before"'),
    Breakage("the number of groups taken from the data", "fairdp_core/engine/trainer.py",
             "K = int(n_groups)  #", "K = int(group.max() + 1)  #"),
    Breakage("Opacus optimizer: q = 1 / len(loader)", "fairdp_core/opacus_compat/_shared.py",
             "sample_rate = loader.sample_rate  #", "sample_rate = 1.0 / len(loader)  #"),
    Breakage("Opacus optimizer: no count noise", "fairdp_core/opacus_compat/dpsgd_s.py",
             "self.released = self._counts + noise", "self.released = self._counts"),
    Breakage("Opacus optimizer: count noise ignores secure_mode", "fairdp_core/opacus_compat/dpsgd_s.py",
             "secure_mode=self.secure_mode)\n        self.released",
             "secure_mode=False)\n        self.released"),
    Breakage("Opacus optimizer: counts of virtual steps not accumulated", "fairdp_core/opacus_compat/dpsgd_s.py",
             "self._counts += self._rule.counts(", "self._counts = self._rule.counts("),
    Breakage("Opacus optimizer: noise scaled by the smallest bound", "fairdp_core/opacus_compat/_shared.py",
             "self.grad_noise_multiplier, float(self.bounds.max())",
             "self.grad_noise_multiplier, float(self.bounds.min())"),
    Breakage("Opacus optimizer: gradient noise at σ_eff", "fairdp_core/opacus_compat/_shared.py",
             "self.noise_multiplier, self.max_grad_norm = self.grad_noise_multiplier,",
             "self.noise_multiplier, self.max_grad_norm = self.noise_multiplier,"),
    Breakage("paper-rule Opacus optimizer: group sums not noised", "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "self._sums + sums_noise, self._counts + counts_noise", "self._sums, self._counts + counts_noise"),
    Breakage("paper-rule Opacus optimizer: counts not noised", "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "self._sums + sums_noise, self._counts + counts_noise", "self._sums + sums_noise, self._counts"),
    Breakage("paper-rule Opacus optimizer: sums' noise not scaled by C0", "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "std=self.sigma_s * self._rule.c0,", "std=self.sigma_s,"),
    Breakage("paper-rule Opacus optimizer: sums clipped at the group bounds, not C0",
             "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "at_c0 = self._rule.sum_factors(norms)", "at_c0 = clip"),
    Breakage("paper-rule Opacus optimizer: a sample summed into the wrong group",
             "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "rows = torch.cat([torch.zeros_like(groups), groups + 1])",
             "rows = torch.cat([torch.zeros_like(groups), (groups + 1) % self._rule.K + 1])"),
    Breakage("paper-rule Opacus optimizer: sums of virtual steps not accumulated",
             "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "self._sums += sums", "self._sums = sums"),
    Breakage("paper-rule Opacus optimizer: the step clipped at C0, not at the group bounds",
             "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "vals = torch.cat([clip, at_c0])", "vals = torch.cat([at_c0, at_c0])"),
    Breakage("paper-rule Opacus optimizer: no gradient noise", "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "    def add_noise(self) -> None:\n        self._add_gradient_noise()\n",
             "    def add_noise(self) -> None:\n"),
    Breakage("paper-rule Opacus optimizer: bounds from the exact sums", "fairdp_core/opacus_compat/dpsgd_s_paper.py",
             "bounds_from_release(self.released_sums[None], self.released_counts[None])",
             "bounds_from_release(self._sums[None], self._counts[None])"),
    # the rivals: DPSGD-F, DPSGD-Global-Adapt, AdaClip
    Breakage("rivals: gradient noise at σ_eff (their counts not paid for)", "fairdp_core/rules/base.py",
             "return Sigmas(split_sigma(sigma_eff, count_multiplier), sigma_b, None, sigma_eff)",
             "return Sigmas(sigma_eff, sigma_b, None, sigma_eff)"),
    Breakage("AdaClip: its centred count's sensitivity taken as 1/4, not 1/2", "fairdp_core/rules/adaclip.py",
             "count_sensitivity = 0.5", "count_sensitivity = 0.25"),
    Breakage("AdaClip: an uncentred count (sensitivity 1) released as the centred one", "fairdp_core/rules/adaclip.py",
             "return ((unclipped - 0.5) * weights).sum(1)", "return (unclipped * weights).sum(1)"),
    Breakage("DPSGD-F: counts not noised", "fairdp_core/rules/dpsgd_f.py",
             "model_noise(self.gens, (2 * self.K,), self.device) * self.sigma_b",
             "model_noise(self.gens, (2 * self.K,), self.device) * 0.0"),
    Breakage("DPSGD-F: bounds from the exact counts", "fairdp_core/rules/dpsgd_f.py",
             "self._b = self.bounds_from_release(self.released)",
             "self._b = self.bounds_from_release(self.counts(norms, groups, weights))"),
    Breakage("DPSGD-F: count noise drawn from the gradient-noise stream", "fairdp_core/rules/dpsgd_f.py",
             'generators=[g["count"] for g in gens],', 'generators=[g["noise"] for g in gens],'),
    Breakage("Global-Adapt, AdaClip: count not noised", "fairdp_core/rules/policy.py",
             "model_noise(self.gens, (1,), self.device)[:, 0] * self.sigma_b",
             "model_noise(self.gens, (1,), self.device)[:, 0] * 0.0"),
    Breakage("Global-Adapt, AdaClip: bound moved by the exact count", "fairdp_core/rules/policy.py",
             "self.T = self.update_from_release(self.T, self.released)",
             "self.T = self.update_from_release(self.T, self.counts(norms, groups, weights))"),
    Breakage("Global-Adapt: gradients above Z left unclipped", "fairdp_core/rules/global_adapt.py",
             "return torch.where(c >= scale, scale, c)", "return torch.where(c >= scale, scale, torch.ones_like(c))"),
    Breakage("DPSGD-F optimizer: counts not noised", "fairdp_core/opacus_compat/dpsgd_f.py",
             "self.released = counts + noise  #", "self.released = counts  #"),
    Breakage("DPSGD-F optimizer: noise scaled by the smallest bound", "fairdp_core/opacus_compat/dpsgd_f.py",
             "self._add_gradient_noise()  # noise scale max_k C_k over ALL K groups",
             "sigma_eff = self.noise_multiplier; self.noise_multiplier, self.max_grad_norm = "
             "self.grad_noise_multiplier, float(self.bounds.min()); DPOptimizer.add_noise(self); "
             "self.noise_multiplier = sigma_eff"),
    Breakage("DPSGD-F optimizer: virtual steps allowed", "fairdp_core/opacus_compat/dpsgd_f.py",
             "if self._check_skip_next_step(pop_next=False) or any(", "if False and any("),
    Breakage("Global-Adapt optimizer: count not noised", "fairdp_core/opacus_compat/global_adapt.py",
             "released = count + noise", "released = count"),
    Breakage("Global-Adapt optimizer: counts of virtual steps not accumulated", "fairdp_core/opacus_compat/global_adapt.py",
             "self._count = self._count + self._rule.counts(", "self._count = self._rule.counts("),
    Breakage("Global-Adapt optimizer: Z's update divides by the realised batch size", "fairdp_core/opacus_compat/global_adapt.py",
             "self._count = self._count + self._rule.counts(",
             "self._rule.B = len(norms) + (self._rule.B if self._is_last_step_skipped else 0)  # the logical batch's\n"
             "        self._count = self._count + self._rule.counts("),
    Breakage("Global-Adapt optimizer: count not reset after its release", "fairdp_core/opacus_compat/global_adapt.py",
             "count, self._count = self._count, torch.zeros_like(self._count)", "count = self._count"),
    Breakage("AdaClip optimizer: its update divides by the realised batch size", "fairdp_core/opacus_compat/adaclip.py",
             "self.released = torch.as_tensor(self.unclipped_num - self.sample_size / 2.0,",
             "self.released = torch.as_tensor((self.unclipped_num - self.sample_size / 2.0) * "
             "self.expected_batch_size / max(self.sample_size, 1),"),
    Breakage("AdaClip optimizer: counts of virtual steps dropped (Opacus's zero_grad)", "fairdp_core/opacus_compat/adaclip.py",
             "if keep:\n            self.sample_size, self.unclipped_num = sample_size, unclipped",
             "if False:\n            self.sample_size, self.unclipped_num = sample_size, unclipped"),
    Breakage("AdaClip optimizer: counts kept across real steps (not reset after a step's release)",
             "fairdp_core/opacus_compat/adaclip.py",
             "keep = self._is_last_step_skipped  #", "keep = True  #"),
    Breakage("tune-clip: exponential mechanism at twice its scale", "fairdp_core/study/clip_tuning.py",
             "logits = epsilon_q * u / 2.0", "logits = epsilon_q * u"),
    Breakage("tune-clip: the quantile release not composed into ε", "fairdp_core/study/clip_tuning.py",
             "rdp = rdp + np.minimum(", "rdp = rdp + 0 * np.minimum("),
    Breakage("DPDSyn: no gradient noise", "fairdp_core/synth/dpdsyn.py",
             "dtype=total.dtype) * (sigma * clip)", "dtype=total.dtype) * 0.0"),
    Breakage("DPDSyn: gradient noise at half its scale", "fairdp_core/synth/dpdsyn.py",
             "dtype=total.dtype) * (sigma * clip)", "dtype=total.dtype) * (0.5 * sigma * clip)"),
    Breakage("DPDSyn: no per-sample clipping in the release", "fairdp_core/synth/dpdsyn.py",
             "factors = torch.clamp(clip / (norms + 1e-12), max=1.0)", "factors = torch.ones_like(norms)"),
    Breakage("DPDSyn: release divided by the realised batch size", "fairdp_core/synth/dpdsyn.py",
             "return (total + noise) / batch_size", "return (total + noise) / max(per_sample.shape[0], 1)"),
    Breakage("DPDSyn: the loop releases without noise", "fairdp_core/synth/dpdsyn.py",
             "clip=spec.clip, sigma=sigma,", "clip=spec.clip, sigma=0.0 * sigma,"),
    Breakage("DPDSyn: unnoised private gradient reaches the generator", "fairdp_core/synth/dpdsyn.py",
             "cosine_similarity(g_syn, released, dim=1",
             "cosine_similarity(g_syn, priv.sum(0) / spec.batch_size, dim=1"),
    Breakage("DPDSyn: private labels reach the generator outside the mechanism", "fairdp_core/synth/dpdsyn.py",
             "probs_t = torch.as_tensor(label_probs, dtype=torch.float32)",
             "probs_t = torch.bincount(torch.as_tensor(y), minlength=n_classes).float()"),
    Breakage("DPDSyn: label counts not noised", "fairdp_core/synth/dpdsyn.py",
             "noisy = counts + rng.normal(0.0, sigma_c, size=n_classes) if sigma_c > 0 else counts",
             "noisy = counts"),
    Breakage("DPDSyn: ε not composed (the label release not charged)", "fairdp_core/synth/dpdsyn.py",
             "history_epsilon([(sigma, sample_rate, steps), (label_sigma_ratio * sigma, 1.0, 1)]",
             "history_epsilon([(sigma, sample_rate, steps)]"),
    Breakage("DPDSyn: fixed-size batches where the accountant assumes Poisson", "fairdp_core/synth/dpdsyn.py",
             "idx = np.flatnonzero(sample_rng.random(n) < q)", "idx = sample_rng.permutation(n)[:spec.batch_size]"),
    Breakage("DPDSyn: the noise stream re-seeded at every step", "fairdp_core/synth/dpdsyn.py",
             "batch_size=spec.batch_size, generator=noise_gen)",
             "batch_size=spec.batch_size, generator=tgen(\"gradient_noise\"))"),
    Breakage("DPDSyn: the label release noised at σ, not σ_c", "fairdp_core/synth/dpdsyn.py",
             "label_release(y, n_classes, sigma_c=sigma_c", "label_release(y, n_classes, sigma_c=sigma"),
    Breakage("PRV: the default 0.01 error margin at every ε", "fairdp_core/engine/accounting.py",
             "return max(target_epsilon / 10.0, 1e-5)", "return 0.01"),
    Breakage("DP-CGAN: the discriminator's real gradient released without noise", "fairdp_core/synth/dpgan.py",
             "clip=spec.clip, sigma=sigma,", "clip=spec.clip, sigma=0.0 * sigma,"),
    Breakage("DP-CGAN: the unnoised real gradient reaches the discriminator", "fairdp_core/synth/dpgan.py",
             "p.grad = p.grad + real_grad[off:off + p.numel()]",
             "p.grad = p.grad + (per.sum(0) / spec.batch_size)[off:off + p.numel()]"),
    Breakage("DP-CGAN: private labels reach the generator outside the mechanism", "fairdp_core/synth/dpgan.py",
             "probs_t = torch.as_tensor(label_probs, dtype=torch.float32)",
             "probs_t = torch.bincount(torch.as_tensor(y), minlength=n_classes).float()"),
    Breakage("DP-CGAN: fixed-size batches where the accountant assumes Poisson", "fairdp_core/synth/dpgan.py",
             "idx = np.flatnonzero(sample_rng.random(n) < q)", "idx = sample_rng.permutation(n)[:spec.batch_size]"),
    Breakage("DP-CGAN: the noise stream re-seeded at every step", "fairdp_core/synth/dpgan.py",
             "batch_size=spec.batch_size, generator=noise_gen)",
             "batch_size=spec.batch_size, generator=tgen(\"gradient_noise\"))"),
    Breakage("DP-CGAN: an empty Poisson batch skipped (no release, no step)", "fairdp_core/synth/dpgan.py",
             "        idx = np.flatnonzero(sample_rng.random(n) < q)\n",
             "        idx = np.flatnonzero(sample_rng.random(n) < q)\n        if not len(idx):\n            continue\n"),
    Breakage("DPDSyn and DP-CGAN: reported ε without the target (PRV's no-target margin)", "fairdp_core/synth/dpdsyn.py",
             "                         target_epsilon=spec.target_epsilon)", "                         )"),
    Breakage("DP-CGAN: reported ε is the target, not the accountant's", "fairdp_core/synth/dpgan.py",
             '"epsilon": eps,', '"epsilon": spec.target_epsilon or eps,'),
    Breakage("DPDSyn: reported ε is the target, not the accountant's", "fairdp_core/synth/dpdsyn.py",
             '"epsilon": eps,', '"epsilon": spec.target_epsilon or eps,'),
    Breakage("custom audit: the Opacus fallback trains without noise", "fairdp_core/audit/custom.py",
             "noise_multiplier=sigma, max_grad_norm=spec.clip", "noise_multiplier=0.0, max_grad_norm=spec.clip"),
    Breakage("custom audit: the Opacus fallback clips at half the bound it accounts for", "fairdp_core/audit/custom.py",
             "noise_multiplier=sigma, max_grad_norm=spec.clip,", "noise_multiplier=sigma, max_grad_norm=spec.clip / 2,"),
    Breakage("custom audit: the Opacus fallback accounts at q = B/n, not the 1/⌈n/B⌉ its sampler uses",
             "fairdp_core/audit/custom.py", "q = 1.0 / len(loader)", "q = spec.batch_size / len(idx)"),
    Breakage("engine: each pre-drawn noise step used twice within a block (small models)",
             "fairdp_core/engine/trainer.py", "out = self._buf[self._t]", "out = self._buf[self._t // 2]"),
    Breakage("DP-SGD-S Opacus optimizer: gradient noise at σ_eff (the counts' share not paid)",
             "fairdp_core/opacus_compat/_shared.py",
             "self.noise_multiplier, self.max_grad_norm = self.grad_noise_multiplier, float(self.bounds.max())",
             "self.max_grad_norm = float(self.bounds.max())"),
    Breakage("Global-Adapt Opacus optimizer: gradient noise at Z, not at C", "fairdp_core/opacus_compat/global_adapt.py",
             "self.max_grad_norm = self.clip  # every scaled gradient has norm ≤ C",
             "self.max_grad_norm = float(self.Z)"),
    Breakage("tune_clip: the quantile released at 2 ε_q while ε_q is charged", "fairdp_core/study/clip_tuning.py",
             "clip = dp_quantile(norms, quantile, epsilon_q,", "clip = dp_quantile(norms, quantile, 2 * epsilon_q,"),
    Breakage("PRV accountant: an error margin of 0.1 (ε understated by up to 0.09)", "fairdp_core/engine/accounting.py",
             "        return 0.01\n", "        return 0.1\n"),
    Breakage("accountant: only the first mechanism of a composed history counted", "fairdp_core/engine/accounting.py",
             "acc.history = list(history)", "acc.history = list(history)[:1]"),
)


def _copy_project(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for d in ("fairdp_core", "tests"):
        shutil.copytree(ROOT / d, dst / d, ignore=ignore)
    for f in ("pyproject.toml", "params.yaml", "runs.yaml"):  # params: the config tests in the suite read them
        shutil.copy2(ROOT / f, dst / f)


_SUITE = list(SUITE)  # --suite narrows it (a quick check of one family's breakages; `make breakages` runs all)
# The test files that guard a module, run first for its breakages: the suite stops at its first failure (-x), so a
# caught breakage costs the time to its catching test, not the whole suite's. The verdict is unchanged: a breakage
# survives only if every file of the suite passes.
FIRST = {"fairdp_core/synth/": ["tests/test_synth.py"], "fairdp_core/opacus_compat/": ["tests/test_opacus_compat.py"],
         "fairdp_core/study/clip_tuning.py": ["tests/test_clip_tuning.py"], "fairdp_core/audit/custom.py": ["tests/test_custom.py"]}


def _order(path: str) -> list[str]:
    first = [f for prefix, files in FIRST.items() if path.startswith(prefix) for f in files if f in _SUITE]
    return first + [f for f in _SUITE if f not in first]


TIMEOUT = -9  # _run_suite's exit code for a run that hung: never counted as caught


def _run_suite(work: Path, files: list[str] | None = None) -> tuple[int, str, list[str]]:
    """Run pytest on ``files`` (default: the suite) in the copy ``work``: (exit code, its last line, failed node ids).
    Exit code 1 means tests ran and some failed; 0 all passed; anything else (no test collected, usage or
    collection error) is neither."""
    env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-k", "not adult", *(files or _SUITE)]
    try:
        p = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return TIMEOUT, "timed out after 900 s", []
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    failed = [ln.split(" ", 1)[1].split(" - ", 1)[0] for ln in lines if ln.startswith("FAILED ")]
    return p.returncode, lines[-1] if lines else p.stderr[-300:], failed


# The test that caught each breakage last time (``--write-hints``): run alone first, it settles most breakages in one
# short pytest call. Sound either way: a breakage counts as caught there only when that test of the suite FAILS under
# it (exit code 1) and passes alone on the unbroken code; otherwise (it passes, no longer exists, errors, or fails on
# its own) the whole ordered suite runs as without hints. A run that hangs (TIMEOUT) is never counted as caught.
HINTS = Path(__file__).with_name("breakage_hints.json")


def _load_hints() -> dict[str, list[str]]:
    return json.loads(HINTS.read_text()) if HINTS.is_file() else {}


_alone: dict[tuple[str, ...], bool] = {}  # hinted tests -> do they pass alone on the unbroken code (cached)


def _passes_alone(work: Path, hint: list[str]) -> bool:
    key = tuple(hint)
    if key not in _alone:
        _alone[key] = _run_suite(work, hint)[0] == 0
    return _alone[key]


class _Unbroken:
    """Whether the suite, in a given order, passes on the unbroken copy ``work`` (made by :func:`_copy_project` with
    the workers' copies, so it is the same snapshot): run once per order, when the first breakage needs the suite in
    that order (a breakage its hinted test catches never does), in a copy no worker breaks. Per order, because the
    suite stops at its first failure (-x) and a test may fail out of the order it passes in."""

    def __init__(self, work: Path | None = None) -> None:
        import threading

        self._lock, self._passes, self.work = threading.Lock(), {}, work

    def passes(self, files: list[str] | None = None) -> bool:
        key = tuple(files or _SUITE)
        with self._lock:
            if key not in self._passes:
                rc, last, _ = _run_suite(self.work, list(key))
                print(f"unbroken code, suite starting {key[0]}: {'passes' if rc == 0 else 'FAILS'} ({last})", flush=True)
                self._passes[key] = rc == 0
            return self._passes[key]

    @property
    def ran(self) -> bool:
        return bool(self._passes)


_UNBROKEN = _Unbroken()


def _try(work: Path, b: Breakage, hints: dict[str, list[str]]) -> tuple[str, str, list[str]]:
    """Apply one breakage in the copy ``work``, run its hinted test and, unless that fails, the suite; restore:
    (verdict, message, the failed node ids). A hinted test that fails settles it only if the same test, run alone
    on the unbroken code, passes (checked once per test): its failure is then the breakage's, not the test's own."""
    target = work / b.path
    original = target.read_text()
    if original.count(b.old) != 1:
        return "STALE", f"the edit matches {original.count(b.old)} places in {b.path}", []
    broken = original.replace(b.old, b.new)
    t0 = time.perf_counter()
    try:
        hint = hints.get(b.name, [])
        target.write_text(broken)
        rc, last, failed = _run_suite(work, hint) if hint else (0, "", [])
        how = "its hinted test"
        if rc == 1:
            target.write_text(original)
            if not _passes_alone(work, hint):
                rc, how = 0, "the suite (the hinted test fails alone on the unbroken code)"
            target.write_text(broken)
        if rc != 1:
            order = _order(b.path)
            if not _UNBROKEN.passes(order):  # a failure of the suite catches only if it passes unbroken, in that order
                return "UNSOUND", "(the suite fails on the unbroken code in this order, so its failure proves nothing)", []
            rc, last, failed = _run_suite(work, order)
            if how == "its hinted test":
                how = "the suite"
    finally:
        target.write_text(original)
    verdict = "TIMEOUT" if rc == TIMEOUT else "SURVIVED" if rc == 0 else "caught"  # the suite: any failure catches
    return verdict, f"({time.perf_counter() - t0:.0f} s, {how}): {last}", failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print the breakages and exit")
    ap.add_argument("--match", action="append", default=None,
                    help="only the breakages whose name contains this text (repeatable)")
    ap.add_argument("--suite", action="append", default=None,
                    help="run only these test files of SUITE (repeatable), e.g. tests/test_synth.py")
    ap.add_argument("--write-hints", action="store_true",
                    help=f"record the test that caught each breakage in {HINTS.name} (run alone first next time)")
    ap.add_argument("--no-hints", action="store_true", help="ignore the hints: the whole ordered suite every time")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="breakages tried at once, each in its own copy of the project (default: 2, or 1 CPU)")
    args = ap.parse_args()
    if args.suite:
        unknown = set(args.suite) - set(SUITE)
        if unknown:
            ap.error(f"not in SUITE: {sorted(unknown)}")
        _SUITE[:] = args.suite
    chosen = [b for b in BREAKAGES if args.match is None or any(t in b.name for t in args.match)]
    if args.list:
        for b in chosen:
            print(f"- {b.name} ({b.path})")
        return 0
    import queue
    import threading

    jobs = max(1, min(args.jobs, len(chosen)))
    with tempfile.TemporaryDirectory(prefix="fairdp-breakages-") as tmp:
        works = [Path(tmp) / f"w{j}" for j in range(jobs)]
        _UNBROKEN.work = Path(tmp) / "unbroken"  # copied with the workers' copies: one snapshot of the code
        for w in (*works, _UNBROKEN.work):
            _copy_project(w)
        hints = {} if args.no_hints else {k: [h for h in v if h.split("::", 1)[0] in _SUITE]  # --suite narrows them
                                           for k, v in _load_hints().items()}
        hinted = sorted({h for v in hints.values() for h in v})
        if hinted:  # every hinted test must pass on the unbroken code, alone with the others, or the hints are off
            rc, last, _ = _run_suite(works[0], hinted)
            print(f"hinted tests ({len(hinted)}) on the unbroken code: {'pass' if rc == 0 else 'do not pass: hints off'} "
                  f"({last})", flush=True)
            hints = hints if rc == 0 else {}
        found: dict[str, list[str]] = {}
        todo: queue.Queue = queue.Queue()
        for b in chosen:
            todo.put(b)
        lock = threading.Lock()
        verdicts: dict[str, str] = {}

        def worker(work: Path) -> None:  # threads only wait on their pytest subprocess
            while True:
                try:
                    b = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    verdict, msg, failed = _try(work, b, hints)
                except Exception as e:  # noqa: BLE001 - a breakage that could not be tried is never counted as caught
                    verdict, msg, failed = "ERROR", f"({type(e).__name__}: {e})", []
                with lock:
                    verdicts[b.name] = verdict
                    print(f"{verdict:9s} {b.name} {msg}", flush=True)
                    if verdict == "caught" and failed:
                        found[b.name] = failed[:1]

        threads = [threading.Thread(target=worker, args=(w,)) for w in works]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    caught = [b.name for b in chosen if verdicts.get(b.name) == "caught"]  # untried or crashed: never caught
    if not _UNBROKEN.ran and len(caught) == len(chosen):
        print("unbroken code: the whole suite was not needed (each breakage failed its hinted test, which passes alone "
              "on the unbroken code)")
    if "UNSOUND" in verdicts.values():
        print("the suite fails on the unbroken code: fix it first", file=sys.stderr)
    print(f"{len(caught)} of {len(chosen)} breakages caught")
    if args.write_hints:
        kept = {k: v for k, v in _load_hints().items() if k in {b.name for b in BREAKAGES} and k not in found}
        HINTS.write_text(json.dumps(dict(sorted({**kept, **found}.items())), indent=1, ensure_ascii=False) + "\n")
        print(f"hints for {len(found)} breakages written to {HINTS}")
    return 0 if len(caught) == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
