//! The 3DGS-MCMC strategy (Kheradmand et al. 2024, "3D Gaussian Splatting as Markov Chain
//! Monte Carlo"), as gsplat's `MCMCStrategy` runs it: the model never exceeds a fixed cap, so
//! its memory is known before the first step.
//!
//! # What it owns
//! [`McmcStrategy`] implements [`DensifyStrategy`] with the per-step hooks the default
//! strategy leaves empty; the trainer calls them on the host engine, and their device twins
//! on the device engine (see "Two engines" below):
//! - [`DensifyStrategy::regularize`], before the optimizer: the loss gains
//!   `opacity_reg · mean(σ(logit_opacity)) + scale_reg · mean(exp(log_scale))` (means over
//!   N opacities and 3N scale entries), and its gradients are added to the render's;
//! - [`DensifyStrategy::after_step`], after the optimizer (gsplat's order): at refine
//!   iterations **relocation** then **growth**, then every step **noise**.
//!
//! # Relocation and growth (every `refine_every` iterations while
//! `refine_start_iter < s < refine_stop_iter`, never on the run's last step)
//! - Dead = `σ(logit_opacity) ≤ min_opacity`. Each dead row is overwritten by a copy of a live
//!   row drawn with probability ∝ opacity (with replacement).
//! - Growth adds `min(cap, ⌊growth_rate · N⌋) − N` copies of rows drawn ∝ opacity among all
//!   rows (after relocation), appended at the end.
//! - A source drawn `n` times ends as `m = n + 1` copies (itself included), each with the
//!   paper's correction (their Eq. 9, gsplat's `compute_relocation`), so the copies together
//!   render like the source did: `o' = 1 − (1 − o)^(1/m)` and every scale multiplied by
//!   `o / Σ_{i=1..m} Σ_{k=0..i−1} C(i−1, k) · (−1)^k / √(k+1) · o'^(k+1)`. `m` is clamped to
//!   [`MAX_COPIES`] (gsplat's `n_max` = 51), `o'` to `[min_opacity, 1 − ε_f32]`.
//! - Moments: relocation zeroes the Adam moments of the drawn sources and of the overwritten
//!   rows; growth gives the new rows zero moments and leaves the sources' (gsplat's
//!   `sample_add`). Both are [`RowPlan`]s applied by [`Model::apply_rows`], the one place that
//!   edits parameters, moments and statistics together.
//!
//! # Noise (every step)
//! `mean += noise_lr · lr_means(s) · w(o) · Σ z`, `z ~ N(0, I₃)` from [`counter_normal`]:
//! one seed per step is drawn from the trainer's RNG ([`McmcStrategy::noise_step`]) and row
//! `i`'s axis `a` gets the normal of `(seed, i, a)` (a splitmix64 hash, two 24-bit uniforms,
//! Box–Muller in f32), so a kernel thread draws its row's noise without a sequential RNG and
//! both engines add the same noise (up to a GPU libm's rounding of `ln` and `cos`).
//! `Σ = R·diag(s²)·Rᵀ` is the Gaussian's covariance and `w(o) = σ(−k·(o − t))` with `k = 100`,
//! `t = 0.005`: only nearly transparent Gaussians move noticeably (gsplat's
//! `inject_noise_to_position`, whose `op_sigmoid(1 − o)` with `x0 = 0.995` is this `w`).
//!
//! # Two engines
//! On the device engine ([`super::device_engine`]) the regulariser and the noise are kernels
//! (`kernels/mcmc.cu`, [`super::device_mcmc`]) that repeat this module's operations in order;
//! relocation and growth are planned here, by [`DensifyStrategy::after_step_edit`], from the
//! means, log-scales and opacities the engine downloads at refine iterations (28 bytes per
//! Gaussian), and applied by the device's row kernels. Both engines make the same RNG draws
//! in the same order: relocation, growth, then the noise seed.
//!
//! # Schedule
//! The iteration constants are gsplat's (start 500, every 100, stop 25,000), not scaled with
//! `--iterations`: the default strategy keeps 3DGS's fixed constants the same way. A short run
//! (2,000 iterations) refines 15 times and grows by at most 1.05¹⁵ ≈ 2.08×.
//!
//! # Invariants
//! The model never has more than `cap_max` rows after a step; the random draws all come from
//! the trainer's one RNG (the noise through its per-step seed), so runs are reproducible and
//! resume bit-exactly on the host engine.

use serde::{Deserialize, Serialize};

use super::densify::{
    rotation_matrix, AfterStepEdit, DensifyOutcome, DensifyStrategy, Model, RefineContext, RowPlan,
    RowValues, ViewStats,
};
use crate::render::GaussianGrads;
use crate::rng::Rng;
use crate::scene::gaussians::Gaussians;
use crate::scene::maths::{logit, sigmoid};

/// Most copies of one source a relocation corrects for (gsplat's `n_max`).
pub const MAX_COPIES: usize = 51;

/// Hyper-parameters of [`McmcStrategy`] (gsplat's `MCMCStrategy` defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McmcConfig {
    /// The cap: the model never has more Gaussians (`--max-gaussians`).
    pub cap_max: usize,
    pub refine_start_iter: u64,
    pub refine_stop_iter: u64,
    pub refine_every: u64,
    /// Dead at or below this opacity.
    pub min_opacity: f32,
    /// Growth multiplies the count by at most this per refinement.
    pub growth_rate: f64,
    /// Noise scale relative to the position learning rate.
    pub noise_lr: f64,
    pub opacity_reg: f32,
    pub scale_reg: f32,
}

impl McmcConfig {
    /// gsplat's defaults with the cap `cap_max`.
    pub fn with_cap(cap_max: usize) -> McmcConfig {
        McmcConfig {
            cap_max,
            refine_start_iter: 500,
            refine_stop_iter: 25_000,
            refine_every: 100,
            min_opacity: 0.005,
            growth_rate: 1.05,
            noise_lr: 5e5,
            opacity_reg: 0.01,
            scale_reg: 0.01,
        }
    }
}

/// The MCMC strategy (see the module doc).
#[derive(Clone, Debug)]
pub struct McmcStrategy {
    pub config: McmcConfig,
}

/// `C(n, k)` in f64 (exact for the `n < 51` used here).
fn binomial(n: usize, k: usize) -> f64 {
    let k = k.min(n - k);
    (0..k).fold(1.0, |c, j| c * (n - j) as f64 / (j + 1) as f64)
}

/// The opacity and scale factor of each of `copies` copies of a Gaussian of opacity `o` (see
/// the module doc), before clamping: `(o', factor)`.
pub fn relocation_correction(o: f32, copies: usize) -> (f64, f64) {
    let m = copies.clamp(1, MAX_COPIES);
    let o = o as f64;
    let o_new = 1.0 - (1.0 - o).powf(1.0 / m as f64);
    let mut denom = 0.0;
    for i in 1..=m {
        for k in 0..i {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            denom += binomial(i - 1, k) * sign / ((k + 1) as f64).sqrt() * o_new.powi(k as i32 + 1);
        }
    }
    (o_new, o / denom)
}

/// Draws `n` indices of `weights` with probability ∝ weight, with replacement (inverse CDF on
/// f64 prefix sums). Empty when the weights sum to nothing.
fn sample_weighted(weights: &[f32], n: usize, rng: &mut Rng) -> Vec<usize> {
    let mut cdf = Vec::with_capacity(weights.len());
    let mut total = 0.0f64;
    for &w in weights {
        total += w.max(0.0) as f64;
        cdf.push(total);
    }
    if total.is_nan() || total <= 0.0 {
        return Vec::new();
    }
    (0..n)
        .map(|_| {
            let u = rng.next_f64() * total;
            // First prefix sum above u: its row has positive weight.
            cdf.partition_point(|&c| c <= u).min(weights.len() - 1)
        })
        .collect()
}

impl McmcStrategy {
    pub fn new(config: McmcConfig) -> McmcStrategy {
        McmcStrategy { config }
    }

    fn refine_due(&self, s: u64) -> bool {
        let c = &self.config;
        s > c.refine_start_iter
            && s < c.refine_stop_iter
            && c.refine_every > 0
            && s.is_multiple_of(c.refine_every)
    }

    /// The corrected values of every drawn source, for rows `dests[source]`: the source's own
    /// row and each copy get the new log-scale and opacity (mean unchanged).
    fn corrected(&self, g: &Gaussians, draws: &[usize], out: &mut Vec<(usize, RowValues)>) {
        let mut count = std::collections::BTreeMap::<usize, usize>::new();
        for &j in draws {
            *count.entry(j).or_default() += 1;
        }
        for (&j, &n) in &count {
            let o = sigmoid(g.logit_opacities[j]);
            let (o_new, factor) = relocation_correction(o, n + 1);
            let o_new = o_new.clamp(self.config.min_opacity as f64, 1.0 - f32::EPSILON as f64);
            let ln_factor = factor.ln() as f32;
            out.push((
                j,
                RowValues {
                    row: j as u32,
                    mean: g.means[j],
                    log_scale: g.log_scales[j].map(|v| v + ln_factor),
                    logit_opacity: Some(logit(o_new as f32)),
                },
            ));
        }
    }

    /// The relocation of `g`'s dead rows (see the module doc) and how many moved.
    pub fn plan_relocation(&self, g: &Gaussians, rng: &mut Rng) -> (RowPlan, usize) {
        let n = g.len();
        let min = self.config.min_opacity;
        let opacity: Vec<f32> = g.logit_opacities.iter().map(|&l| sigmoid(l)).collect();
        let dead: Vec<usize> = (0..n).filter(|&i| opacity[i] <= min).collect();
        let alive: Vec<usize> = (0..n).filter(|&i| opacity[i] > min).collect();
        let mut plan = RowPlan {
            src: (0..n as u32).collect(),
            fresh: vec![false; n],
            replace: Vec::new(),
        };
        if dead.is_empty() || alive.is_empty() {
            return (plan, 0);
        }
        let weights: Vec<f32> = alive.iter().map(|&i| opacity[i]).collect();
        let draws: Vec<usize> = sample_weighted(&weights, dead.len(), rng)
            .into_iter()
            .map(|a| alive[a])
            .collect();
        let mut sources = Vec::new();
        self.corrected(g, &draws, &mut sources);
        let value_of: std::collections::BTreeMap<usize, RowValues> =
            sources.iter().copied().collect();
        for (j, v) in &sources {
            plan.fresh[*j] = true;
            plan.replace.push(*v);
        }
        for (&d, &j) in dead.iter().zip(&draws) {
            plan.src[d] = j as u32;
            plan.fresh[d] = true;
            plan.replace.push(RowValues {
                row: d as u32,
                ..value_of[&j]
            });
        }
        (plan, dead.len())
    }

    /// Growth of `g` toward the cap (see the module doc) and how many rows it adds.
    pub fn plan_growth(&self, g: &Gaussians, rng: &mut Rng) -> (RowPlan, usize) {
        let n = g.len();
        let target =
            ((self.config.growth_rate * n as f64).floor() as usize).min(self.config.cap_max);
        let add = target.saturating_sub(n);
        let mut plan = RowPlan {
            src: (0..n as u32).collect(),
            fresh: vec![false; n],
            replace: Vec::new(),
        };
        if add == 0 {
            return (plan, 0);
        }
        let weights: Vec<f32> = g.logit_opacities.iter().map(|&l| sigmoid(l)).collect();
        let draws = sample_weighted(&weights, add, rng);
        let mut sources = Vec::new();
        self.corrected(g, &draws, &mut sources);
        let value_of: std::collections::BTreeMap<usize, RowValues> =
            sources.iter().copied().collect();
        plan.replace.extend(sources.iter().map(|s| s.1));
        for &j in &draws {
            let row = plan.src.len() as u32;
            plan.src.push(j as u32);
            plan.fresh.push(true);
            plan.replace.push(RowValues {
                row,
                ..value_of[&j]
            });
        }
        (plan, draws.len())
    }

    /// This step's noise (see the module doc): one seed from the trainer's RNG and the scale
    /// `noise_lr · means_lr`, so every engine adds the same noise from it.
    pub fn noise_step(&self, means_lr: f64, rng: &mut Rng) -> NoiseStep {
        NoiseStep {
            seed: rng.next_u64(),
            scale: (self.config.noise_lr * means_lr) as f32,
        }
    }

    /// Moves the means by `noise` (see the module doc); the CPU twin of `mcmc_noise` in
    /// `kernels/mcmc.cu`, operation for operation.
    pub fn add_noise(&self, g: &mut Gaussians, noise: NoiseStep) {
        for i in 0..g.len() {
            let o = sigmoid(g.logit_opacities[i]);
            let w = sigmoid(-NOISE_K * (o - NOISE_T));
            let z: [f32; 3] =
                std::array::from_fn(|a| counter_normal(noise.seed, i as u64, a as u32));
            let r = rotation_matrix(g.rotations[i]);
            let s2 = g.log_scales[i].map(|v| (2.0 * v).exp());
            // Σz = R·diag(s²)·Rᵀ·z.
            let local: [f32; 3] =
                std::array::from_fn(|a| s2[a] * (r[0][a] * z[0] + r[1][a] * z[1] + r[2][a] * z[2]));
            for (k, m) in g.means[i].iter_mut().enumerate() {
                let d = r[k][0] * local[0] + r[k][1] * local[1] + r[k][2] * local[2];
                *m += noise.scale * w * d;
            }
        }
    }

    /// The regulariser weights ([`DensifyStrategy::regularize`]).
    pub fn regularizer(&self) -> Regularizer {
        Regularizer {
            opacity: self.config.opacity_reg,
            scale: self.config.scale_reg,
        }
    }
}

/// Steepness `k` of the noise gate `w(o) = σ(−k·(o − t))`.
pub const NOISE_K: f32 = 100.0;
/// Threshold `t` of the noise gate.
pub const NOISE_T: f32 = 0.005;

/// One step's noise: everything an engine needs to add it ([`McmcStrategy::add_noise`], the
/// device engine's `mcmc_noise`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NoiseStep {
    /// Key of the step's counter-based normals ([`counter_normal`]).
    pub seed: u64,
    /// `noise_lr · lr_means(s)`.
    pub scale: f32,
}

/// The L1 regularisers' weights: the loss gains `opacity · mean(σ(logit_opacity)) +
/// scale · mean(exp(log_scale))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Regularizer {
    pub opacity: f32,
    pub scale: f32,
}

impl Regularizer {
    /// The per-value gradient factors for `n` Gaussians: `(opacity / n, scale / 3n)`.
    pub fn factors(&self, n: usize) -> (f32, f32) {
        (self.opacity / n as f32, self.scale / (3 * n) as f32)
    }

    /// The loss term from the sums of the `n` opacities and of the `3n` scales.
    pub fn loss(&self, sum_opacity: f64, sum_scale: f64, n: usize) -> f64 {
        self.opacity as f64 * sum_opacity / n as f64
            + self.scale as f64 * sum_scale / (3 * n) as f64
    }

    /// Adds the terms' gradients to `grads` of the host model `g` and returns the loss term
    /// (0 for an empty model): `∂/∂l = (opacity/N)·σ(l)(1 − σ(l))` per logit opacity,
    /// `∂/∂s = (scale/3N)·exp(s)` per log-scale. The device twin is `mcmc_regularize`
    /// (`kernels/mcmc.cu`).
    pub fn add_gradients(&self, g: &Gaussians, grads: &mut GaussianGrads) -> f64 {
        let n = g.len();
        if n == 0 {
            return 0.0;
        }
        let (mut sum_o, mut sum_s) = (0.0f64, 0.0f64);
        let (d_o, d_s) = self.factors(n);
        for i in 0..n {
            let o = sigmoid(g.logit_opacities[i]);
            sum_o += o as f64;
            grads.logit_opacities[i] += d_o * o * (1.0 - o);
            for a in 0..3 {
                let s = g.log_scales[i][a].exp();
                sum_s += s as f64;
                grads.log_scales[i][a] += d_s * s;
            }
        }
        self.loss(sum_o, sum_s, n)
    }
}

/// splitmix64's finaliser: a bijective 64-bit mix (twin of `mcmc_mix64` in `kernels/mcmc.cu`).
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A standard normal that depends only on `(seed, row, axis)`, so a kernel thread can draw
/// its row's without a sequential RNG: one 64-bit hash gives two 24-bit uniforms, `u1` in
/// (0, 1] and `u2` in [0, 1), and Box–Muller in f32 turns them into
/// `√(−2 ln u1) · cos(2π u2)`. Twin of `mcmc_normal` in `kernels/mcmc.cu` (equal up to the
/// libm's rounding of `ln` and `cos`).
pub fn counter_normal(seed: u64, row: u64, axis: u32) -> f32 {
    let h = mix64(seed ^ mix64(row.wrapping_mul(3).wrapping_add(axis as u64)));
    const INV24: f32 = 1.0 / 16_777_216.0;
    let u1 = ((h >> 40) + 1) as f32 * INV24;
    let u2 = (h & 0xFF_FFFF) as f32 * INV24;
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

impl DensifyStrategy for McmcStrategy {
    fn name(&self) -> &'static str {
        "mcmc"
    }

    /// MCMC reads no view statistics.
    fn collects(&self, _iteration: u64) -> bool {
        false
    }

    fn accumulate(&mut self, _model: &mut Model, _view: &ViewStats<'_>) {}

    /// All edits happen after the optimizer ([`DensifyStrategy::after_step`]).
    fn refines_at(&self, _iteration: u64, _white_background: bool) -> bool {
        false
    }

    fn refine(&mut self, _model: &mut Model, _ctx: &mut RefineContext<'_>) -> DensifyOutcome {
        DensifyOutcome::default()
    }

    fn growth_stopped(&self) -> bool {
        false
    }

    /// MCMC growth stops at the cap by construction; nothing to remember.
    fn set_growth_stopped(&mut self, _stopped: bool) {}

    fn regularize(&self, g: &Gaussians, grads: &mut GaussianGrads) -> f64 {
        self.regularizer().add_gradients(g, grads)
    }

    fn regularizer(&self) -> Option<Regularizer> {
        Some(McmcStrategy::regularizer(self))
    }

    fn after_step(
        &mut self,
        model: &mut Model,
        ctx: &mut RefineContext<'_>,
        means_lr: f64,
        last: bool,
    ) -> DensifyOutcome {
        let edit = self.after_step_edit(model, ctx, means_lr, last);
        if let Some(noise) = edit.noise {
            self.add_noise(&mut model.gaussians, noise);
        }
        edit.outcome
    }

    fn plans_rows_after_step(&self, iteration: u64, last: bool) -> bool {
        !last && self.refine_due(iteration)
    }

    /// Relocation then growth, each planned on `rows` and applied to it before the next is
    /// planned (growth draws from the relocated model); then the step's noise seed. The RNG
    /// draws are the same, in the same order, whichever engine applies the edit.
    fn after_step_edit(
        &mut self,
        rows: &mut Model,
        ctx: &mut RefineContext<'_>,
        means_lr: f64,
        last: bool,
    ) -> AfterStepEdit {
        let mut edit = AfterStepEdit::default();
        if self.plans_rows_after_step(ctx.iteration, last) {
            let (plan, moved) = self.plan_relocation(&rows.gaussians, ctx.rng);
            if moved > 0 {
                rows.apply_rows(&plan);
                edit.rows.push(plan);
            }
            edit.outcome.relocated = moved;
            let (plan, added) = self.plan_growth(&rows.gaussians, ctx.rng);
            if added > 0 {
                rows.apply_rows(&plan);
                edit.rows.push(plan);
            }
            edit.outcome.added = added;
        }
        edit.noise = Some(self.noise_step(means_lr, ctx.rng));
        edit
    }

    fn fixed_capacity(&self) -> Option<usize> {
        Some(self.config.cap_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` Gaussians at SH degree 0 with the given opacities; row `i` has mean `(i, 0, 0)`,
    /// scales 0.1 and moments that encode `i + 1`.
    fn model(opacities: &[f32]) -> Model {
        let n = opacities.len();
        let mut g = Gaussians::zeros(n, 0);
        for (i, &o) in opacities.iter().enumerate() {
            g.means[i] = [i as f32, 0.0, 0.0];
            g.log_scales[i] = [(0.1f32).ln(); 3];
            g.rotations[i] = [1.0, 0.0, 0.0, 0.0];
            g.logit_opacities[i] = logit(o);
            g.sh[i] = [i as f32; 3];
        }
        let mut m = Model::new(g);
        for i in 0..n {
            let v = i as f32 + 1.0;
            m.adam.exp_avg.means[i] = [v; 3];
            m.adam.exp_avg.logit_opacities[i] = v;
            m.adam.exp_avg_sq.log_scales[i] = [v; 3];
            m.adam.exp_avg_sq.sh[i] = [v; 3];
        }
        m
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn correction_matches_hand_computed_values() {
        // One copy: nothing changes.
        let (o, f) = relocation_correction(0.3, 1);
        assert!(close(o, 0.3, 1e-7) && close(f, 1.0, 1e-7), "{o} {f}");
        // o = 0.5, two copies: o' = 1 − √0.5 = 0.29289322; the denominator is
        // i=1: o' ; i=2: o' − o'²/√2 → 2·0.29289322 − 0.08578644/1.41421356 = 0.52512627,
        // factor = 0.5 / 0.52512627 = 0.95215195.
        let (o, f) = relocation_correction(0.5, 2);
        assert!(close(o, 0.292_893_22, 1e-7), "{o}");
        assert!(close(f, 0.952_151_95, 1e-7), "{f}");
        // o = 0.8, three copies: o' = 1 − 0.2^(1/3) = 0.41519645; the denominator is
        // 3o' − 3o'²/√2 + o'³/√3 = 1.24558936 − 0.36569037 + 0.04132380 = 0.92122279,
        // factor = 0.8 / 0.92122279 = 0.86841100.
        let (o, f) = relocation_correction(0.8, 3);
        assert!(close(o, 0.415_196_45, 1e-7), "{o}");
        assert!(close(f, 0.868_411_00, 1e-7), "{f}");
        // The copies together are exactly as opaque as the source: 1 − (1 − o')^m = o.
        for (o0, m) in [(0.5f32, 2usize), (0.9, 7), (0.02, 4)] {
            let (o, _) = relocation_correction(o0, m);
            assert!(close(1.0 - (1.0 - o).powi(m as i32), o0 as f64, 1e-6));
        }
        // Counts above MAX_COPIES are clamped to it.
        assert_eq!(
            relocation_correction(0.7, 500),
            relocation_correction(0.7, MAX_COPIES)
        );
    }

    #[test]
    fn relocation_moves_dead_rows_onto_live_ones_with_corrected_values_and_fresh_moments() {
        // Rows 1 and 3 are dead (≤ 0.005); 0 is nearly transparent but alive, 2 is opaque.
        let mut m = model(&[0.01, 0.004, 0.5, 0.001]);
        let s = McmcStrategy::new(McmcConfig::with_cap(10));
        let mut rng = Rng::new(5);
        let (plan, moved) = s.plan_relocation(&m.gaussians, &mut rng);
        assert_eq!(moved, 2);
        m.apply_rows(&plan);
        m.check_shapes().unwrap();
        assert_eq!(m.len(), 4, "relocation keeps the count");
        // Every dead row now copies a live source (mean and SH).
        let src: Vec<usize> = (0..4).map(|r| m.gaussians.means[r][0] as usize).collect();
        assert_eq!((src[0], src[2]), (0, 2), "live rows stay in place");
        for d in [1, 3] {
            assert!(src[d] == 0 || src[d] == 2, "row {d} copies {}", src[d]);
            assert_eq!(m.gaussians.sh[d], [src[d] as f32; 3]);
        }
        // Each drawn source and its copies carry the correction for their count.
        for j in [0usize, 2] {
            let copies = src.iter().filter(|&&x| x == j).count();
            let o0 = [0.01f32, 0.004, 0.5, 0.001][j];
            let rows: Vec<usize> = (0..4).filter(|&r| src[r] == j).collect();
            let (o, f) = relocation_correction(o0, copies);
            for &r in &rows {
                let got_o = sigmoid(m.gaussians.logit_opacities[r]) as f64;
                let want_o = if copies == 1 { o0 as f64 } else { o.max(0.005) };
                assert!(close(got_o, want_o, 1e-5), "row {r}: {got_o} vs {want_o}");
                let got_s = m.gaussians.log_scales[r][0].exp() as f64;
                assert!(close(got_s, 0.1 * f, 1e-6), "row {r}: {got_s}");
                // Moments of drawn sources and of relocated rows are zero; others kept.
                let zero = copies > 1;
                assert_eq!(m.adam.exp_avg.means[r] == [0.0; 3], zero, "row {r}");
                assert_eq!(m.adam.exp_avg_sq.log_scales[r] == [0.0; 3], zero, "row {r}");
                assert_eq!(m.adam.exp_avg.logit_opacities[r] == 0.0, zero, "row {r}");
                assert_eq!(m.adam.exp_avg_sq.sh[r] == [0.0; 3], zero, "row {r}");
            }
        }
    }

    #[test]
    fn relocation_with_one_source_uses_the_two_copy_correction() {
        // Only row 0 is alive: the dead row 1 copies it, and both get o' = 1 − √0.5.
        let mut m = model(&[0.5, 0.001]);
        let s = McmcStrategy::new(McmcConfig::with_cap(2));
        let (plan, moved) = s.plan_relocation(&m.gaussians, &mut Rng::new(1));
        assert_eq!(moved, 1);
        m.apply_rows(&plan);
        for r in 0..2 {
            let o = sigmoid(m.gaussians.logit_opacities[r]);
            assert!((o - 0.292_893_22).abs() < 1e-6, "{o}");
            let sc = m.gaussians.log_scales[r][1].exp();
            assert!((sc - 0.1 * 0.952_151_95).abs() < 1e-6, "{sc}");
            assert_eq!(m.gaussians.means[r], [0.0; 3]);
            assert_eq!(m.adam.exp_avg.means[r], [0.0; 3]);
            assert_eq!(m.adam.exp_avg_sq.log_scales[r], [0.0; 3]);
        }
    }

    #[test]
    fn growth_adds_five_percent_up_to_the_cap_with_zero_moments() {
        let opac = vec![0.5f32; 40];
        for (cap, want) in [(100, 2), (41, 1), (40, 0)] {
            let mut m = model(&opac);
            let s = McmcStrategy::new(McmcConfig::with_cap(cap));
            let (plan, added) = s.plan_growth(&m.gaussians, &mut Rng::new(2));
            assert_eq!(added, want, "cap {cap}");
            m.apply_rows(&plan);
            m.check_shapes().unwrap();
            assert_eq!(m.len(), 40 + want);
            for r in 40..m.len() {
                assert_eq!(m.adam.exp_avg.means[r], [0.0; 3]);
                assert_eq!(m.adam.exp_avg_sq.sh[r], [0.0; 3]);
                let j = m.gaussians.means[r][0] as usize;
                // Source and copy share the corrected opacity.
                assert_eq!(
                    m.gaussians.logit_opacities[r],
                    m.gaussians.logit_opacities[j]
                );
                assert!(sigmoid(m.gaussians.logit_opacities[r]) < 0.5);
            }
        }
    }

    #[test]
    fn draws_follow_opacity() {
        let w = [0.1f32, 0.0, 0.3, 0.6];
        let mut rng = Rng::new(11);
        let draws = sample_weighted(&w, 20_000, &mut rng);
        let mut count = [0usize; 4];
        for d in draws {
            count[d] += 1;
        }
        assert_eq!(count[1], 0, "zero weight is never drawn");
        for (i, &p) in w.iter().enumerate() {
            let f = count[i] as f64 / 20_000.0;
            // σ ≤ 0.0035 at 20,000 draws: 0.015 is > 4σ.
            assert!((f - p as f64).abs() < 0.015, "{i}: {f}");
        }
        assert!(sample_weighted(&[0.0, 0.0], 3, &mut rng).is_empty());
    }

    #[test]
    fn regulariser_gradients_match_finite_differences() {
        let m = model(&[0.2, 0.7, 0.9]);
        let s = McmcStrategy::new(McmcConfig::with_cap(3));
        let mut grads = GaussianGrads::default();
        grads.reset(3, 1);
        let value = s.regularize(&m.gaussians, &mut grads);
        let want = 0.01 * (0.2 + 0.7 + 0.9) / 3.0 + 0.01 * 0.1;
        assert!(close(value, want, 1e-7), "{value} vs {want}");
        let loss = |g: &Gaussians| {
            let mut z = GaussianGrads::default();
            z.reset(3, 1);
            s.regularize(g, &mut z)
        };
        let h = 1e-3f32;
        for i in 0..3 {
            let mut g = m.gaussians.clone();
            g.logit_opacities[i] += h;
            let up = loss(&g);
            g.logit_opacities[i] -= 2.0 * h;
            let fd = (up - loss(&g)) / (2.0 * h as f64);
            assert!(
                close(grads.logit_opacities[i] as f64, fd, 1e-6),
                "opacity {i}"
            );
            let mut g = m.gaussians.clone();
            g.log_scales[i][2] += h;
            let up = loss(&g);
            g.log_scales[i][2] -= 2.0 * h;
            let fd = (up - loss(&g)) / (2.0 * h as f64);
            assert!(close(grads.log_scales[i][2] as f64, fd, 1e-6), "scale {i}");
        }
    }

    /// The counter-based normals are standard normal (moments of 300,000 draws), depend on
    /// seed, row and axis, and are reproducible.
    #[test]
    fn counter_normals_are_standard_and_keyed() {
        let n = 100_000u64;
        let (mut sum, mut sq, mut fourth) = (0.0f64, 0.0f64, 0.0f64);
        for row in 0..n {
            for axis in 0..3 {
                let z = counter_normal(99, row, axis) as f64;
                assert!(z.is_finite());
                sum += z;
                sq += z * z;
                fourth += z * z * z * z;
            }
        }
        let m = 3.0 * n as f64;
        // Standard errors at 300,000 draws: mean 0.0018, variance 0.0026, 4th moment 0.018.
        assert!((sum / m).abs() < 0.01, "mean {}", sum / m);
        assert!((sq / m - 1.0).abs() < 0.015, "variance {}", sq / m);
        assert!((fourth / m - 3.0).abs() < 0.1, "4th moment {}", fourth / m);
        assert_eq!(counter_normal(5, 7, 1), counter_normal(5, 7, 1));
        assert_ne!(counter_normal(5, 7, 1), counter_normal(6, 7, 1));
        assert_ne!(counter_normal(5, 7, 1), counter_normal(5, 8, 1));
        assert_ne!(counter_normal(5, 7, 1), counter_normal(5, 7, 2));
    }

    #[test]
    fn noise_moves_transparent_gaussians_along_their_covariance_only() {
        // Row 0 opaque (w ≈ e^-99.5: no move), row 1 transparent (w ≈ 0.5 at o = 0.005).
        let mut m = model(&[0.9, 0.005]);
        // Row 1 is flat along z: its covariance has no z extent, so noise never moves z.
        m.gaussians.log_scales[1] = [(0.1f32).ln(), (0.1f32).ln(), -30.0];
        let s = McmcStrategy::new(McmcConfig::with_cap(2));
        let before = m.gaussians.means.clone();
        let mut rng = Rng::new(4);
        let noise = s.noise_step(1e-4, &mut rng);
        s.add_noise(&mut m.gaussians, noise);
        assert_eq!(m.gaussians.means[0], before[0]);
        let d: Vec<f32> = (0..3)
            .map(|a| m.gaussians.means[1][a] - before[1][a])
            .collect();
        // Scale: noise_lr·lr·w·s² = 5e5·1e-4·0.5·0.01 = 0.25 per unit normal.
        assert!(d[0] != 0.0 && d[0].abs() < 0.25 * 6.0, "{d:?}");
        assert!(d[2].abs() < 1e-9, "{d:?}");
    }
}
