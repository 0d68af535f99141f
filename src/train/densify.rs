//! Adaptive density control: the original 3DGS strategy behind the [`DensifyStrategy`] trait,
//! the [`Model`] it edits (parameters + Adam moments + statistics) and the single place that
//! gathers/scatters every per-Gaussian array ([`Model::retain`], [`Model::append`],
//! [`Model::reset_opacity`]), like gsplat's `strategy/ops.py`.
//!
//! # The default strategy (3DGS `train.py` / `GaussianModel`, 2024 defaults)
//! At 1-based iteration `s`, after backward and before the optimizer step, while
//! `s < until_iter` (15,000):
//! - statistics, for Gaussians rendered with radius > 0: `max_radii = max(max_radii, radius)`,
//!   `grad_accum += ‖∂L/∂mean2d · (W/2, H/2)‖` (the NDC-unit gradient of 3DGS's
//!   `viewspace_point_tensor.grad`; our rasterizer reports pixel units), `denom += 1`;
//! - if `s > from_iter` (500) and `s % interval == 0` (100): with `ḡ = grad_accum / denom`
//!   (0 where `denom = 0`): **clone** where `ḡ ≥ 2e-4` and `max scale ≤ 0.01·extent` (an exact
//!   copy); **split** where `ḡ ≥ 2e-4` and `max scale > 0.01·extent` (2 children with means
//!   `mean + R·(s ⊙ z)`, `z ~ N(0, I)`, scale `s / 1.6` = `s / (0.8·2)`, other parameters
//!   copied; the parent is removed); then **prune** opacity < 0.005 and, once
//!   `s > opacity_reset_interval` (3000), max world scale > 0.1·extent (and, only with
//!   [`DensifyConfig::prune_screen_radius`], max screen radius > that many px: see below).
//!   The statistics are then zeroed. 3DGS compares with `≥`, so do we.
//! - if `s % opacity_reset_interval == 0` (or `s == from_iter` on a white background):
//!   opacity ← min(opacity, 0.01) (in logit space) with the opacity moments zeroed.
//!
//! With [`DensifyConfig::revised_opacity`] the split children start at opacity `1 − √(1 − o)`
//! instead of the parent's `o` (gsplat's `revised_opacity`) and are pruned by it.
//!
//! With [`DensifyConfig::absgrad`] (AbsGS, Ye et al. 2024, as gsplat's `absgrad`), the
//! statistics take the *absolute* 2D-mean gradient instead: per view `Σ_pixels
//! |∂L_pixel/∂mean2d|` componentwise, then the same (W/2, H/2) scaling and norm. The signed
//! sum lets the pulls of a large Gaussian's pixels cancel, so a Gaussian blurring over fine
//! detail can sit below the threshold forever; the absolute sum cannot cancel. It is never
//! smaller than the signed norm, so the threshold goes up with it (gsplat suggests 6e-4 to
//! 8e-4; `gs-train --absgrad` uses 8e-4, measured in docs/training.md). Everything else is
//! unchanged: the same clone/split/prune decisions, on this statistic.
//!
//! 3DGS replaces the parameter tensors when it densifies, so their `.grad` is `None` and
//! that iteration's `optimizer.step()` skips them (all groups after a densify, only the
//! opacity after a reset); [`DensifyOutcome::skip_optimizer`] reproduces this.
//!
//! Screen-size pruning is off by default, as it effectively is in 3DGS: its code zeroes
//! `max_radii2D` in `densification_postfix`, *before* pruning, so its "max screen radius > 20
//! px" test never fires (gsplat documents the same and disables the rule by default), and the
//! published results come without it. [`DensifyConfig::prune_screen_radius`] `= Some(px)`
//! (`gs-train --prune-screen-radius PX`) applies the rule as written, on the radii accumulated
//! since the last densification (new Gaussians count 0). A threshold in pixels prunes more
//! the larger the views: on the fox photos at 1920×1080 (device engine, NVIDIA H200) the
//! first prune after the reset at 3,000, with the rule on, took the model from 161,494 to
//! 15,174 Gaussians and the training PSNR from 22.3 to 14.2 dB; at 1/8 size the rule on kept
//! 167,225 where off kept 183,385, and ended 0.13 dB lower on the held-out views
//! (docs/training.md § Screen-size pruning).
//!
//! A run that starts with a sky (`gs-train --sky-points`, [`super::init::sky_points`]) has a
//! far field ([`DensifyConfig::far_field`]): Gaussians beyond it are the sky's, placed far away
//! and large on purpose, so the rules in world units do not apply to them: they are never
//! cloned or split (each split leaves children larger than `percent_dense` of the extent,
//! which split again, and the sky would multiply) and never pruned for their size (the world
//! rule would remove the whole sky at the first prune after a reset). Transparent ones are
//! pruned like any other.
//!
//! # Order of the arrays after a densification
//! Kept originals in their order, then clones, then split children (all first children,
//! then all second children), exactly 3DGS's order; then pruning compacts in place.
//!
//! # Memory
//! The model's host bytes ([`model_bytes`]) are a [`ModelMemory`] reservation in the run's
//! [`crate::budget::Ledger`]. Before growing, the strategy resizes it to the new peak; if the
//! ledger refuses, it asks the caller to free room (`make_room`, e.g. shrink the loader cache)
//! and retries; if that fails too, growth stops for the rest of the run and the outcome says so
//! once ([`DensifyOutcome::growth_stopped`]); pruning and opacity resets continue. The
//! `max_gaussians` cap keeps the candidates with the largest gradients.
//!
//! The MCMC strategy ([`super::mcmc`]) has a fixed capacity instead
//! ([`DensifyStrategy::fixed_capacity`]): its reservation is the cap's bytes from the start
//! and never changes, and its relocation and growth are [`RowPlan`]s (with opacity
//! replacements, [`RowValues::logit_opacity`]) applied by [`Model::apply_rows`].

use serde::{Deserialize, Serialize};

use super::adam::{AdamState, Group, GroupMask};
use super::mcmc::{NoiseStep, Regularizer};
use crate::budget::Reservation;
use crate::render::GaussianGrads;
use crate::rng::Rng;
use crate::scene::gaussians::{floats_per_gaussian, Gaussians};
use crate::scene::maths::{logit, normalize_quat, quat_to_rot, sigmoid};

/// Densification statistics, one entry per Gaussian.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DensifyStats {
    /// Sum of NDC-unit 2D-mean gradient norms (of the absolute gradient with
    /// [`DensifyConfig::absgrad`]) over the views where the Gaussian was visible.
    pub grad_accum: Vec<f32>,
    /// Number of such views.
    pub denom: Vec<u32>,
    /// Largest screen radius (px) since the last densification.
    pub max_radii: Vec<u32>,
}

impl DensifyStats {
    pub fn zeros(n: usize) -> DensifyStats {
        DensifyStats {
            grad_accum: vec![0.0; n],
            denom: vec![0; n],
            max_radii: vec![0; n],
        }
    }
}

/// Everything with one entry per Gaussian: parameters, Adam moments, densify statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    pub gaussians: Gaussians,
    pub adam: AdamState,
    pub stats: DensifyStats,
}

/// Arrays of a [`Model`] disagree in length (a bug; reported rather than a panic).
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("model arrays disagree: `{what}` has {got} values, expected {expected}")]
pub struct ModelShapeError {
    /// The array: a [`crate::scene::gaussians::Field`] name, `moment.` + one, or `stats.…`.
    pub what: String,
    pub got: usize,
    pub expected: usize,
}

/// Removes entries where `keep` is false from `v` (one entry per Gaussian).
fn compact<T: Copy>(v: &mut Vec<T>, keep: &[bool]) {
    let mut w = 0;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            v[w] = v[i];
            w += 1;
        }
    }
    v.truncate(w);
}

/// Appends `src` to `dst` growing capacity exactly (no doubling: the model's bytes are budgeted).
fn extend_exact<T: Copy>(dst: &mut Vec<T>, src: &[T]) {
    dst.reserve_exact(src.len());
    dst.extend_from_slice(src);
}

impl Model {
    /// A fresh model: zero moments, zero statistics.
    pub fn new(gaussians: Gaussians) -> Model {
        let n = gaussians.len();
        Model {
            adam: AdamState::new(&gaussians),
            stats: DensifyStats::zeros(n),
            gaussians,
        }
    }

    pub fn len(&self) -> usize {
        self.gaussians.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gaussians.is_empty()
    }

    /// Checks that every per-Gaussian array has the model's length.
    pub fn check_shapes(&self) -> Result<(), ModelShapeError> {
        let g = &self.gaussians;
        let n = g.len();
        let sets = [
            ("", g),
            ("moment.", &self.adam.exp_avg),
            ("moment.", &self.adam.exp_avg_sq),
        ];
        for (prefix, set) in sets {
            if let Some(bad) = set.shape_mismatch(n) {
                return Err(ModelShapeError {
                    what: format!("{prefix}{}", bad.field.name()),
                    got: bad.got,
                    expected: bad.expected,
                });
            }
            if set.sh_degree != g.sh_degree {
                return Err(ModelShapeError {
                    what: format!("{prefix}sh (degree {})", set.sh_degree),
                    got: set.sh.len(),
                    expected: g.sh.len(),
                });
            }
        }
        let stats = [
            ("stats.grad_accum", self.stats.grad_accum.len()),
            ("stats.denom", self.stats.denom.len()),
            ("stats.max_radii", self.stats.max_radii.len()),
        ];
        for (what, got) in stats {
            if got != n {
                return Err(ModelShapeError {
                    what: what.to_owned(),
                    got,
                    expected: n,
                });
            }
        }
        Ok(())
    }

    /// Keeps the Gaussians where `keep[i]` (parameters, both moments and statistics together).
    pub fn retain(&mut self, keep: &[bool]) {
        assert_eq!(keep.len(), self.len(), "retain mask length");
        self.gaussians.retain(keep);
        self.adam.exp_avg.retain(keep);
        self.adam.exp_avg_sq.retain(keep);
        compact(&mut self.stats.grad_accum, keep);
        compact(&mut self.stats.denom, keep);
        compact(&mut self.stats.max_radii, keep);
    }

    /// Appends `new` (same SH degree) with zero moments and zero statistics.
    pub fn append(&mut self, new: &Gaussians) {
        assert_eq!(new.sh_degree, self.gaussians.sh_degree, "append SH degree");
        let zeros = Gaussians::zeros_like(new);
        self.gaussians.append(new);
        self.adam.exp_avg.append(&zeros);
        self.adam.exp_avg_sq.append(&zeros);
        let n = new.len();
        extend_exact(&mut self.stats.grad_accum, &vec![0.0; n]);
        extend_exact(&mut self.stats.denom, &vec![0; n]);
        extend_exact(&mut self.stats.max_radii, &vec![0; n]);
    }

    /// Applies a densification's [`RowPlan`] (parameters, both moments and statistics
    /// together).
    /// Each array is gathered in place ([`Gaussians::gather_in_place`]), so the edit holds
    /// one field twice at most: the [`GATHER_SCRATCH_BYTES_PER_COEFF`] that [`model_bytes`]
    /// plans per SH coefficient.
    pub fn apply_rows(&mut self, plan: &RowPlan) {
        let g = &mut self.gaussians;
        g.gather_in_place(&plan.src, None);
        for v in &plan.replace {
            g.means[v.row as usize] = v.mean;
            g.log_scales[v.row as usize] = v.log_scale;
            if let Some(o) = v.logit_opacity {
                g.logit_opacities[v.row as usize] = o;
            }
        }
        self.adam
            .exp_avg
            .gather_in_place(&plan.src, Some(&plan.fresh));
        self.adam
            .exp_avg_sq
            .gather_in_place(&plan.src, Some(&plan.fresh));
        // The old statistics go before the new ones are allocated.
        self.stats = DensifyStats::default();
        self.stats = DensifyStats::zeros(plan.src.len());
    }

    /// [`Model::reset_opacity`] of the opacities drawn through a 3D filter (`filter`, one
    /// standard deviation per Gaussian; [`crate::scene::filter3d`]), as Mip-Splatting resets
    /// them: the drawn opacity `σ(x)·c`, `c = ∏ s/√(s² + f²)`, becomes `min(σ(x)·c, cap)`, so
    /// a Gaussian drawn fainter than the cap keeps its value and a brighter one gets
    /// `logit(cap/c)` (above `logit(cap)`: its filter dims it to the cap). Computed in f64.
    pub fn reset_opacity_through(&mut self, max_opacity: f32, filter: &[f32]) {
        let cap = f64::from(max_opacity);
        let g = &mut self.gaussians;
        for ((o, ls), &f) in g.logit_opacities.iter_mut().zip(&g.log_scales).zip(filter) {
            let f2 = f64::from(f) * f64::from(f);
            let c: f64 = ls
                .iter()
                .map(|&l| {
                    let s2 = (2.0 * f64::from(l)).exp();
                    (s2 / (s2 + f2)).sqrt()
                })
                .product();
            let drawn = 1.0 / (1.0 + (-f64::from(*o)).exp()) * c;
            if drawn > cap {
                let p = cap / c;
                *o = (p / (1.0 - p)).ln() as f32;
            }
        }
        self.zero_opacity_moments();
    }

    /// Opacity ← min(opacity, `max_opacity`) in logit space; opacity moments zeroed.
    pub fn reset_opacity(&mut self, max_opacity: f32) {
        let cap = logit(max_opacity);
        for o in &mut self.gaussians.logit_opacities {
            // min in activated space equals min in logit space (the sigmoid is monotone);
            // 3DGS computes inverse_sigmoid(min(sigmoid(o), 0.01)), identical up to rounding.
            if sigmoid(*o) > max_opacity {
                *o = cap;
            }
        }
        self.zero_opacity_moments();
    }

    fn zero_opacity_moments(&mut self) {
        self.adam
            .exp_avg
            .logit_opacities
            .iter_mut()
            .for_each(|v| *v = 0.0);
        self.adam
            .exp_avg_sq
            .logit_opacities
            .iter_mut()
            .for_each(|v| *v = 0.0);
    }
}

/// Host bytes a model of `n` Gaussians at SH degree `sh_degree` needs while training:
/// parameters (P floats per Gaussian, P = 11 + 3·coeffs), gradients (P + 2 for the 2D mean),
/// two Adam moments (2P), densify statistics (12 bytes), the rasterizer's per-Gaussian
/// buffers ([`RENDER_BYTES_PER_GAUSSIAN`]) and a densification's scratch (the one field
/// [`Model::apply_rows`] holds twice: [`GATHER_SCRATCH_BYTES_PER_COEFF`] per SH coefficient).
pub fn model_bytes(n: usize, sh_degree: u32) -> u64 {
    let p = floats_per_gaussian(sh_degree) as u64;
    let floats = 4 * p + 2;
    n as u64 * (floats * 4 + 12 + RENDER_BYTES_PER_GAUSSIAN + gather_scratch_bytes(sh_degree))
}

/// A densification's scratch per SH coefficient of a Gaussian: the new array of the largest
/// field (the SH coefficients, three 4-byte values each) beside the old while
/// [`Model::apply_rows`] gathers it. Before it was planned, a densification at a
/// `--max-gaussians` cap gathered a whole second model (parameters, then each moment beside
/// them): measured 157 MiB peak under `--ram-budget 150M`.
pub const GATHER_SCRATCH_BYTES_PER_COEFF: u64 = 12;

/// [`GATHER_SCRATCH_BYTES_PER_COEFF`] × the SH coefficients of `sh_degree`.
pub fn gather_scratch_bytes(sh_degree: u32) -> u64 {
    GATHER_SCRATCH_BYTES_PER_COEFF * crate::scene::gaussians::sh_coeffs(sh_degree) as u64
}

/// Host bytes a model of `n` Gaussians needs when it trains on a device (the device engine,
/// one device or several): the one host copy a checkpoint, an export or an evaluation
/// downloads (parameters P floats, two Adam moments 2P, densify statistics 12 bytes) and what
/// saving it holds beside it ([`SAVE_SCRATCH_BYTES_PER_GAUSSIAN`]). No gradients and no
/// rasterizer buffers: those live on the device. What the device engine brings to the host
/// otherwise is smaller and never beside that copy: a densification's inputs (statistics,
/// means, log-scales, rotations, opacities: 56 B) and its row plan, or MCMC's planning rows
/// (an SH-0 model with moments, 180 B); the trainer drops a stale copy before downloading
/// those.
pub fn host_copy_bytes(n: usize, sh_degree: u32) -> u64 {
    let p = floats_per_gaussian(sh_degree) as u64;
    n as u64 * (3 * p * 4 + 12 + SAVE_SCRATCH_BYTES_PER_GAUSSIAN)
}

/// The host bytes of a model of `n` Gaussians in a run: [`host_copy_bytes`] when it trains on
/// a device, [`model_bytes`] on the host engine. The memory plan and the trainer's reservation
/// both ask this one rule.
pub fn host_model_bytes(n: usize, sh_degree: u32, on_device: bool) -> u64 {
    if on_device {
        host_copy_bytes(n, sh_degree)
    } else {
        model_bytes(n, sh_degree)
    }
}

/// What saving a model holds per Gaussian beside it: checkpoints, PLY, SPZ and `.splat` stream
/// (nothing per Gaussian); the compressed PLY sorts into Morton order (a 4-byte code and a
/// 4-byte index per Gaussian and the stable sort's 2-byte-per-Gaussian buffer).
pub const SAVE_SCRATCH_BYTES_PER_GAUSSIAN: u64 = 16;

/// The CPU rasterizer's per-Gaussian buffers: a projected splat (44 B), its gradient (36 B),
/// the render output's radius/mean2d/depth (16 B), and with `absgrad` the absolute 2D-mean
/// gradient's per-splat sum and its copy in the gradients (16 B), with depth regularization
/// the inverse depth's per-splat gradient (4 B), plus binning's depth-order sort keys and
/// tile counts (12 B): 128 B. (The device engine's rasterizer
/// counts its own: [`super::device_engine::DEVICE_RENDER_BYTES_PER_GAUSSIAN`].)
pub const RENDER_BYTES_PER_GAUSSIAN: u64 = 128;

/// The model's share of the RAM budget, when the run has one, and the device's limit when
/// the model lives on a device.
#[derive(Debug, Default)]
pub struct ModelMemory {
    pub reservation: Option<Reservation>,
    pub device: Option<DeviceCap>,
    /// The model trains on a device: the host holds at most one copy of it
    /// ([`host_copy_bytes`]), not the host engine's whole training state ([`model_bytes`]).
    pub on_device: bool,
    /// Host bytes per Gaussian beyond the model's (the run's 3D filter:
    /// [`super::filter3d::bytes_per_gaussian`]).
    pub extra_per_gaussian: u64,
}

/// How many Gaussians a device's memory budget holds (the device engine's plan computes it
/// from `--vram-budget`); densification never grows the model past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCap {
    pub max_gaussians: usize,
    /// The budget, in bytes (for the message).
    pub budget_bytes: u64,
}

impl ModelMemory {
    /// The host bytes `n` Gaussians at `sh_degree` take in this run: [`model_bytes`] on the
    /// host engine, [`host_copy_bytes`] when the model trains on a device.
    pub fn bytes(&self, n: usize, sh_degree: u32) -> u64 {
        host_model_bytes(n, sh_degree, self.on_device) + n as u64 * self.extra_per_gaussian
    }

    /// Grows the reservation to `bytes`; on refusal calls `make_room(extra)` once (which should
    /// release at least `extra` bytes to the ledger) and retries. `Err` carries the reason.
    pub fn grow_to(
        &mut self,
        bytes: u64,
        make_room: &mut dyn FnMut(u64) -> u64,
    ) -> Result<(), String> {
        let Some(r) = &mut self.reservation else {
            return Ok(());
        };
        if bytes <= r.bytes() {
            return Ok(());
        }
        if r.resize(bytes).is_ok() {
            return Ok(());
        }
        make_room(bytes - r.bytes());
        r.resize(bytes).map_err(|e| format!("{e}"))
    }

    /// Shrinks the reservation to `bytes` (never fails).
    pub fn shrink_to(&mut self, bytes: u64) {
        if let Some(r) = &mut self.reservation {
            if bytes < r.bytes() {
                r.resize(bytes)
                    .expect("shrinking a reservation cannot fail");
            }
        }
    }
}

/// Hyper-parameters of the default strategy (3DGS defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DensifyConfig {
    pub from_iter: u64,
    pub until_iter: u64,
    pub interval: u64,
    /// Threshold on the average NDC-unit 2D-mean gradient norm.
    pub grad_threshold: f32,
    /// Clone/split boundary as a fraction of the scene extent (`percent_dense`).
    pub percent_dense: f32,
    pub min_opacity: f32,
    pub opacity_reset_interval: u64,
    /// Opacity cap of a reset.
    pub reset_opacity: f32,
    /// Prune screen radius above this many px after the first reset (`None`, the default:
    /// never, as 3DGS's code and gsplat's default; see the module doc).
    #[serde(default)]
    pub prune_screen_radius: Option<u32>,
    /// Prune world max scale above this fraction of the extent after the first reset.
    pub prune_world_scale: f32,
    /// Never grow past this many Gaussians.
    pub max_gaussians: usize,
    /// AbsGS (gsplat's `absgrad`): the statistics accumulate the absolute 2D-mean gradient
    /// ([`crate::render::GaussianGrads::means2d_abs`]) instead of the signed one, so a large
    /// Gaussian pulled different ways by different pixels (blur over fine detail) is split
    /// too. Its values are larger: `grad_threshold` is raised with it (see the module doc).
    #[serde(default)]
    pub absgrad: bool,
    /// Split children get opacity `1 − √(1 − o)` instead of the parent's `o` (Rota Bulò et al.
    /// 2024, "Revising Densification in Gaussian Splatting"; gsplat's `revised_opacity`), so
    /// where the two overlap they stack to the parent's opacity rather than to `1 − (1 − o)²`
    /// ([`revised_split_logit`]). Pruning judges the children by their new opacity.
    #[serde(default)]
    pub revised_opacity: bool,
    /// gsplat's `opacity_reg` and `scale_reg` (`--opacity-reg`, `--scale-reg`): the loss gains
    /// `opacity_reg · mean(σ(logit_opacity)) + scale_reg · mean(exp(log_scale))`
    /// ([`Regularizer`]), which pushes Gaussians toward transparency and smaller extents so
    /// that fewer of them, and less over-grown ones, explain the views. 0 (the default, as
    /// gsplat's and 3DGS's): no term.
    #[serde(default)]
    pub opacity_reg: f32,
    #[serde(default)]
    pub scale_reg: f32,
    /// The sky's sphere, in a run that starts with one (`gs-train --sky-points`): Gaussians
    /// beyond [`FarField::radius`] are the sky's, which is far and large by design, so they
    /// are neither densified nor pruned for their size (see the module doc). `None` (the
    /// default): every Gaussian is treated alike; left out of a saved configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub far_field: Option<FarField>,
}

/// The region beyond a sphere about the scene: where a run's sky Gaussians live
/// ([`DensifyConfig::far_field`], [`super::init::sky_points`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FarField {
    pub centre: [f64; 3],
    pub radius: f64,
}

impl FarField {
    /// Whether `p` lies beyond the sphere.
    pub fn contains(&self, p: [f32; 3]) -> bool {
        let d2: f64 = (0..3)
            .map(|k| (f64::from(p[k]) - self.centre[k]).powi(2))
            .sum();
        d2 > self.radius * self.radius
    }
}

/// The logit of `1 − √(1 − σ(l))`, the revised opacity of a split child of a Gaussian of logit
/// `l`, computed without cancellation for any finite `l`: with `s = √σ(−l)`, it is
/// `ln(1 − s) − ln s`, and `ln s = −½·softplus(l)` never rounds to 0 or −∞ in f64 where it
/// matters. Two such children at full overlap have opacity `1 − (1 − o')² = σ(l)`.
pub fn revised_split_logit(l: f32) -> f32 {
    let l = l as f64;
    let softplus = l.max(0.0) + (-l.abs()).exp().ln_1p();
    let ln_s = -0.5 * softplus;
    let r = (-ln_s.exp_m1()).ln() - ln_s;
    if r.is_finite() {
        r as f32
    } else {
        // l below about −745: e^l underflows; the child's opacity is then half the parent's.
        (l - std::f64::consts::LN_2) as f32
    }
}

impl DensifyConfig {
    /// `grad_threshold` with [`Self::absgrad`] (gsplat suggests 6e-4 to 8e-4; measured in
    /// docs/training.md): the absolute statistic is several times the signed one on the same model.
    pub const ABSGRAD_GRAD_THRESHOLD: f32 = 8e-4;
}

impl Default for DensifyConfig {
    fn default() -> Self {
        DensifyConfig {
            from_iter: 500,
            until_iter: 15_000,
            interval: 100,
            grad_threshold: 2e-4,
            percent_dense: 0.01,
            min_opacity: 0.005,
            opacity_reset_interval: 3000,
            reset_opacity: 0.01,
            prune_screen_radius: None,
            prune_world_scale: 0.1,
            // 10 M Gaussians at SH degree 3 is ~11 GiB by `model_bytes`; the RAM budget is the
            // real limit, this is a backstop.
            max_gaussians: 10_000_000,
            absgrad: false,
            revised_opacity: false,
            opacity_reg: 0.0,
            scale_reg: 0.0,
            far_field: None,
        }
    }
}

/// What one step of a strategy saw: the render's radii and the 2D-mean gradient (px units):
/// the signed one, or with [`DensifyConfig::absgrad`] the absolute one.
#[derive(Clone, Copy, Debug)]
pub struct ViewStats<'a> {
    pub width: u32,
    pub height: u32,
    pub radii: &'a [u32],
    pub means2d_grad: &'a [[f32; 2]],
}

/// Run-level inputs of a densification step.
pub struct RefineContext<'a> {
    /// 1-based iteration (3DGS's `iteration`).
    pub iteration: u64,
    pub extent: f64,
    pub white_background: bool,
    pub rng: &'a mut Rng,
    pub memory: &'a mut ModelMemory,
    /// Asked to free this many bytes of the ledger (e.g. by shrinking the loader cache).
    pub make_room: &'a mut dyn FnMut(u64) -> u64,
    /// With a 3D filter ([`crate::scene::filter3d`]), the training cameras it is set from
    /// ([`super::filter3d::camera_rows`]): an opacity reset of a host model resets the
    /// opacities drawn through it ([`Model::reset_opacity_through`]).
    pub filter_cameras: Option<&'a [f32]>,
}

/// What a strategy did this step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DensifyOutcome {
    pub cloned: usize,
    pub split: usize,
    pub pruned: usize,
    pub opacity_reset: bool,
    /// Groups the optimizer must not step this iteration (see the module doc).
    pub skip_optimizer: Option<GroupMask>,
    /// Set once, the first time growth is refused (budget or cap): why.
    pub growth_stopped: Option<String>,
    /// MCMC: dead Gaussians moved onto live ones.
    pub relocated: usize,
    /// MCMC: Gaussians added toward the cap.
    pub added: usize,
}

/// A densification strategy: called every iteration after backward, before the optimizer.
///
/// A step is split in two so that an engine keeping the model off the host (the device
/// engine) can run the per-view part where the model lives and bring the model home only when
/// the strategy edits it: [`DensifyStrategy::accumulate`] (every iteration where
/// [`DensifyStrategy::collects`]; the device twin updates the same [`DensifyStats`] with the
/// same operations) and [`DensifyStrategy::refine`] (only where
/// [`DensifyStrategy::refines_at`]). [`DensifyStrategy::step`] is the two in order.
pub trait DensifyStrategy: Send {
    fn name(&self) -> &'static str;
    /// Whether 1-based iteration `iteration` adds its view to the [`DensifyStats`].
    fn collects(&self, iteration: u64) -> bool;
    /// Adds one view to `model.stats` (the statistics' documented meaning is the contract the
    /// device twin, `kernels/densify.cu`, implements too).
    fn accumulate(&mut self, model: &mut Model, view: &ViewStats<'_>);
    /// Whether [`DensifyStrategy::refine`] has work at `iteration` (densify, prune or reset).
    fn refines_at(&self, iteration: u64, white_background: bool) -> bool;
    /// Whether the step of `iteration` caps every opacity (an opacity reset): evaluating or
    /// saving after that step would see the capped model, so the run does it before.
    fn resets_opacity_at(&self, _iteration: u64, _white_background: bool) -> bool {
        false
    }
    /// Edits `model` (this iteration's statistics already added); only called where
    /// [`DensifyStrategy::refines_at`].
    fn refine(&mut self, model: &mut Model, ctx: &mut RefineContext<'_>) -> DensifyOutcome;
    /// One iteration: [`DensifyStrategy::accumulate`] then [`DensifyStrategy::refine`], each
    /// where the schedule says so.
    fn step(
        &mut self,
        model: &mut Model,
        view: &ViewStats<'_>,
        ctx: &mut RefineContext<'_>,
    ) -> DensifyOutcome {
        if self.collects(ctx.iteration) {
            self.accumulate(model, view);
        }
        if self.refines_at(ctx.iteration, ctx.white_background) {
            self.refine(model, ctx)
        } else {
            DensifyOutcome::default()
        }
    }
    /// [`DensifyStrategy::refine`] as an edit an engine applies where the model lives (the
    /// device engine's kernels), decided from `inputs` alone; `None` when the strategy only
    /// edits host models (the engine then brings the model home and calls `refine`).
    fn refine_plan(
        &mut self,
        _inputs: &RefineInputs<'_>,
        _ctx: &mut RefineContext<'_>,
    ) -> Option<RefineEdit> {
        None
    }
    /// Whether growth was stopped (persisted in checkpoints).
    fn growth_stopped(&self) -> bool;
    fn set_growth_stopped(&mut self, stopped: bool);
    /// Adds the gradients of the strategy's own loss terms (regularisers) to `grads` before
    /// the optimizer step and returns their value; the default strategy has none.
    fn regularize(&self, _gaussians: &Gaussians, _grads: &mut GaussianGrads) -> f64 {
        0.0
    }
    /// Edits a host model after the optimizer step of 1-based iteration `ctx.iteration`,
    /// where `means_lr` is that step's position learning rate and `last` says it is the run's
    /// final step; the default strategy does all its work in [`DensifyStrategy::refine`].
    fn after_step(
        &mut self,
        _model: &mut Model,
        _ctx: &mut RefineContext<'_>,
        _means_lr: f64,
        _last: bool,
    ) -> DensifyOutcome {
        DensifyOutcome::default()
    }
    /// The weights of the strategy's L1 regularisers, whose terms
    /// [`DensifyStrategy::regularize`] adds on host models, for engines that compute them where
    /// the model lives (the device engine); `None`: no loss terms of its own.
    fn regularizer(&self) -> Option<Regularizer> {
        None
    }
    /// Whether [`DensifyStrategy::after_step_edit`] at 1-based iteration `iteration` plans
    /// rows, and so reads its `rows` argument (an engine that keeps the model elsewhere
    /// downloads them only then).
    fn plans_rows_after_step(&self, _iteration: u64, _last: bool) -> bool {
        false
    }
    /// [`DensifyStrategy::after_step`] as edits an engine applies where the model lives: row
    /// plans in order, each already applied to `rows` (a host model holding at least the
    /// means, log-scales and opacities the plans read; its other fields may be placeholders),
    /// then the noise. A strategy that overrides `after_step` must override this with the
    /// same draws in the same order; the default strategy has no edits after the optimizer.
    fn after_step_edit(
        &mut self,
        _rows: &mut Model,
        _ctx: &mut RefineContext<'_>,
        _means_lr: f64,
        _last: bool,
    ) -> AfterStepEdit {
        AfterStepEdit::default()
    }
    /// The model's size for the whole run when the strategy fixes it in advance (MCMC: its
    /// cap), so the memory plan reserves it before the first step; `None`: the model grows as
    /// densification decides and its reservation follows.
    fn fixed_capacity(&self) -> Option<usize> {
        None
    }
}

/// The edits of [`DensifyStrategy::after_step_edit`]: `rows` in order, then `noise` on the
/// means.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AfterStepEdit {
    pub outcome: DensifyOutcome,
    pub rows: Vec<RowPlan>,
    pub noise: Option<NoiseStep>,
}

/// A refinement as an edit: the rows first (if any), then the opacity reset (if any), which is
/// what [`DensifyStrategy::refine`] does to a host model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RefineEdit {
    pub outcome: DensifyOutcome,
    pub rows: Option<RowPlan>,
    /// Reset opacities to at most this value (moments of the opacities zeroed).
    pub reset_opacity: Option<f32>,
}

/// The original 3DGS strategy (see the module doc).
#[derive(Clone, Debug)]
pub struct DefaultStrategy {
    pub config: DensifyConfig,
    growth_stopped: bool,
}

impl DefaultStrategy {
    pub fn new(config: DensifyConfig) -> DefaultStrategy {
        DefaultStrategy {
            config,
            growth_stopped: false,
        }
    }

    /// Adds one view's statistics.
    pub fn add_view(model: &mut Model, view: &ViewStats<'_>) {
        let (hw, hh) = (view.width as f32 * 0.5, view.height as f32 * 0.5);
        let s = &mut model.stats;
        for (i, &r) in view.radii.iter().enumerate() {
            if r > 0 {
                let [gx, gy] = view.means2d_grad[i];
                let (x, y) = (gx * hw, gy * hh);
                s.grad_accum[i] += (x * x + y * y).sqrt();
                s.denom[i] += 1;
                s.max_radii[i] = s.max_radii[i].max(r);
            }
        }
    }

    /// Clone, split and prune (3DGS `densify_and_prune`) on a host model: the decisions of
    /// [`Self::plan_densify`] applied by [`Model::apply_rows`].
    pub fn densify_and_prune(
        &mut self,
        model: &mut Model,
        ctx: &mut RefineContext<'_>,
        prune_large: bool,
        out: &mut DensifyOutcome,
    ) {
        let inputs = RefineInputs::of(model);
        let plan = self.plan_densify(&inputs, ctx, prune_large, out);
        model.apply_rows(&plan);
        let bytes = ctx.memory.bytes(model.len(), model.gaussians.sh_degree);
        ctx.memory.shrink_to(bytes);
    }

    /// The decisions of a densification: which rows the model keeps, copies and splits, in
    /// 3DGS's order (see the module doc), from the statistics and the few parameters they
    /// depend on. Engines apply the plan where the model lives ([`Model::apply_rows`], or the
    /// device engine's gather kernels), so both make the same edit.
    pub fn plan_densify(
        &mut self,
        m: &RefineInputs<'_>,
        ctx: &mut RefineContext<'_>,
        prune_large: bool,
        out: &mut DensifyOutcome,
    ) -> RowPlan {
        let cfg = &self.config;
        let n0 = m.len();
        let ext = ctx.extent as f32;
        let dense = cfg.percent_dense * ext;
        let max_scale = |s: [f32; 3]| s[0].max(s[1]).max(s[2]).exp();
        let sky = |i: usize| cfg.far_field.is_some_and(|f| f.contains(m.means[i]));
        // Candidates: (average gradient, index, is_split).
        let mut cand: Vec<(f32, usize, bool)> = Vec::new();
        if !self.growth_stopped {
            for i in (0..n0).filter(|&i| !sky(i)) {
                let d = m.denom[i];
                let g = if d == 0 {
                    0.0
                } else {
                    m.grad_accum[i] / d as f32
                };
                if g >= cfg.grad_threshold {
                    cand.push((g, i, max_scale(m.log_scales[i]) > dense));
                }
            }
        }
        // Each candidate adds one Gaussian net (a split adds 2 and removes its parent). The
        // tighter of the configured cap and the device's memory decides the room.
        let (limit, why) = match ctx.memory.device {
            Some(d) if d.max_gaussians < cfg.max_gaussians => (
                d.max_gaussians,
                format!(
                    "the VRAM budget ({} bytes) holds at most {} Gaussians",
                    d.budget_bytes, d.max_gaussians
                ),
            ),
            _ => (
                cfg.max_gaussians,
                format!("reached max_gaussians = {}", cfg.max_gaussians),
            ),
        };
        let room = limit.saturating_sub(n0);
        if cand.len() > room {
            cand.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            cand.truncate(room);
            cand.sort_by_key(|c| c.1);
            if !self.growth_stopped {
                out.growth_stopped = Some(format!(
                    "{why}; densification no longer grows the model (pruning continues)"
                ));
                self.growth_stopped = true;
            }
        }
        if !cand.is_empty() {
            let peak = n0 + cand.len();
            let bytes = ctx.memory.bytes(peak, m.sh_degree);
            if let Err(e) = ctx.memory.grow_to(bytes, ctx.make_room) {
                out.growth_stopped = Some(format!(
                    "the RAM budget has no room for {peak} Gaussians ({bytes} bytes): {e}; \
                     densification no longer grows the model (pruning continues)"
                ));
                self.growth_stopped = true;
                cand.clear();
            }
        }
        let split_parents: Vec<usize> = cand.iter().filter(|c| c.2).map(|c| c.1).collect();
        let mut is_split = vec![false; n0];
        for &i in &split_parents {
            is_split[i] = true;
        }
        // Rows before pruning: kept originals, clones, all first then all second split
        // children (3DGS `repeat(N, 1)`).
        let mut rows: Vec<u32> = (0..n0)
            .filter(|&i| !is_split[i])
            .map(|i| i as u32)
            .collect();
        let kept = rows.len();
        rows.extend(cand.iter().filter(|c| !c.2).map(|c| c.1 as u32));
        out.cloned = rows.len() - kept;
        out.split = split_parents.len();
        const SPLIT_N: usize = 2;
        let shrink = (0.8 * SPLIT_N as f32).ln();
        let mut replace = Vec::with_capacity(SPLIT_N * split_parents.len());
        for _ in 0..SPLIT_N {
            for &i in &split_parents {
                let s = m.log_scales[i].map(f32::exp);
                let z: [f32; 3] = std::array::from_fn(|a| ctx.rng.normal() as f32 * s[a]);
                let r = rotation_matrix(m.rotations[i]);
                let mean = m.means[i];
                let row = rows.len() as u32;
                rows.push(i as u32);
                replace.push(RowValues {
                    row,
                    mean: std::array::from_fn(|k| {
                        mean[k] + r[k][0] * z[0] + r[k][1] * z[1] + r[k][2] * z[2]
                    }),
                    log_scale: m.log_scales[i].map(|v| v - shrink),
                    logit_opacity: cfg
                        .revised_opacity
                        .then(|| revised_split_logit(m.logit_opacities[i])),
                });
            }
        }
        // Prune, on the rows as they will be (split children with their new scales).
        let min_logit = logit(cfg.min_opacity);
        let big_world = cfg.prune_world_scale * ext;
        let mut log_scale_of: Vec<Option<[f32; 3]>> = vec![None; rows.len()];
        let mut logit_of: Vec<Option<f32>> = vec![None; rows.len()];
        for v in &replace {
            log_scale_of[v.row as usize] = Some(v.log_scale);
            logit_of[v.row as usize] = v.logit_opacity;
        }
        let keep: Vec<bool> = rows
            .iter()
            .enumerate()
            .map(|(r, &src)| {
                let src = src as usize;
                let transparent = logit_of[r].unwrap_or(m.logit_opacities[src]) < min_logit;
                let scale = log_scale_of[r].unwrap_or(m.log_scales[src]);
                // Screen radii were accumulated by the originals only (new rows count 0).
                let large = prune_large
                    && !sky(src)
                    && (cfg
                        .prune_screen_radius
                        .is_some_and(|lim| r < kept && m.max_radii[src] > lim)
                        || max_scale(scale) > big_world);
                !(transparent || large)
            })
            .collect();
        out.pruned = keep.iter().filter(|k| !**k).count();
        let mut plan = RowPlan {
            src: Vec::with_capacity(rows.len() - out.pruned),
            fresh: Vec::with_capacity(rows.len() - out.pruned),
            replace: Vec::with_capacity(replace.len()),
        };
        let mut new_index = vec![u32::MAX; rows.len()];
        for (r, &src) in rows.iter().enumerate() {
            if keep[r] {
                new_index[r] = plan.src.len() as u32;
                plan.src.push(src);
                plan.fresh.push(r >= kept);
            }
        }
        for v in replace {
            let at = new_index[v.row as usize];
            if at != u32::MAX {
                plan.replace.push(RowValues { row: at, ..v });
            }
        }
        plan
    }
}

/// What a densification decides from: the statistics and the parameters the rules read.
#[derive(Clone, Copy, Debug)]
pub struct RefineInputs<'a> {
    pub sh_degree: u32,
    pub grad_accum: &'a [f32],
    pub denom: &'a [u32],
    pub max_radii: &'a [u32],
    pub means: &'a [[f32; 3]],
    pub log_scales: &'a [[f32; 3]],
    pub rotations: &'a [[f32; 4]],
    pub logit_opacities: &'a [f32],
}

impl<'a> RefineInputs<'a> {
    pub fn of(m: &'a Model) -> RefineInputs<'a> {
        let g = &m.gaussians;
        RefineInputs {
            sh_degree: g.sh_degree,
            grad_accum: &m.stats.grad_accum,
            denom: &m.stats.denom,
            max_radii: &m.stats.max_radii,
            means: &g.means,
            log_scales: &g.log_scales,
            rotations: &g.rotations,
            logit_opacities: &g.logit_opacities,
        }
    }

    pub fn len(&self) -> usize {
        self.means.len()
    }

    pub fn is_empty(&self) -> bool {
        self.means.is_empty()
    }
}

/// New values of one output row: a split child's sampled mean and shrunk log-scale, or an
/// MCMC relocation's corrected log-scale and opacity (its mean is the source's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowValues {
    pub row: u32,
    pub mean: [f32; 3],
    pub log_scale: [f32; 3],
    /// Replaces the row's logit opacity too (`None`: the copied source's stays).
    pub logit_opacity: Option<f32>,
}

/// A densification as an edit of rows: output row `r` copies old row `src[r]` (parameters;
/// moments too unless `fresh[r]`, then zero), then `replace` overwrites the means and
/// log-scales (and opacities, where given) of some rows. Statistics start at zero for every
/// row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowPlan {
    pub src: Vec<u32>,
    pub fresh: Vec<bool>,
    pub replace: Vec<RowValues>,
}

/// Row-major rotation matrix of a (w, x, y, z) quaternion, normalised here (3DGS
/// `build_rotation`); the identity for a zero quaternion.
pub fn rotation_matrix(q: [f32; 4]) -> [[f32; 3]; 3] {
    normalize_quat(q).map_or(
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        quat_to_rot,
    )
}

impl DefaultStrategy {
    fn densify_due(&self, s: u64) -> bool {
        let c = &self.config;
        s > c.from_iter && c.interval > 0 && s.is_multiple_of(c.interval)
    }

    fn reset_due(&self, s: u64, white_background: bool) -> bool {
        let c = &self.config;
        (c.opacity_reset_interval > 0 && s.is_multiple_of(c.opacity_reset_interval))
            || (white_background && s == c.from_iter)
    }
}

impl DensifyStrategy for DefaultStrategy {
    fn name(&self) -> &'static str {
        "3dgs-default"
    }

    fn regularize(&self, gaussians: &Gaussians, grads: &mut GaussianGrads) -> f64 {
        self.regularizer()
            .map_or(0.0, |r| r.add_gradients(gaussians, grads))
    }

    fn regularizer(&self) -> Option<Regularizer> {
        let c = &self.config;
        (c.opacity_reg != 0.0 || c.scale_reg != 0.0).then_some(Regularizer {
            opacity: c.opacity_reg,
            scale: c.scale_reg,
        })
    }

    fn collects(&self, iteration: u64) -> bool {
        iteration < self.config.until_iter
    }

    fn accumulate(&mut self, model: &mut Model, view: &ViewStats<'_>) {
        DefaultStrategy::add_view(model, view);
    }

    fn refines_at(&self, iteration: u64, white_background: bool) -> bool {
        (iteration < self.config.until_iter && self.densify_due(iteration))
            || self.resets_opacity_at(iteration, white_background)
    }

    fn resets_opacity_at(&self, iteration: u64, white_background: bool) -> bool {
        iteration < self.config.until_iter && self.reset_due(iteration, white_background)
    }

    fn refine_plan(
        &mut self,
        inputs: &RefineInputs<'_>,
        ctx: &mut RefineContext<'_>,
    ) -> Option<RefineEdit> {
        let mut edit = RefineEdit::default();
        let s = ctx.iteration;
        if s >= self.config.until_iter {
            return Some(edit);
        }
        let mut skip = GroupMask::NONE;
        if self.densify_due(s) {
            let prune_large = s > self.config.opacity_reset_interval;
            let plan = self.plan_densify(inputs, ctx, prune_large, &mut edit.outcome);
            let bytes = ctx.memory.bytes(plan.src.len(), inputs.sh_degree);
            ctx.memory.shrink_to(bytes);
            edit.rows = Some(plan);
            skip = GroupMask::ALL;
        }
        if self.reset_due(s, ctx.white_background) {
            edit.reset_opacity = Some(self.config.reset_opacity);
            edit.outcome.opacity_reset = true;
            skip = skip.with(Group::Opacity, true);
        }
        if skip != GroupMask::NONE {
            edit.outcome.skip_optimizer = Some(skip);
        }
        Some(edit)
    }

    fn refine(&mut self, model: &mut Model, ctx: &mut RefineContext<'_>) -> DensifyOutcome {
        // The same plan the device engine applies with its kernels, applied to the host model.
        let edit = self
            .refine_plan(&RefineInputs::of(model), ctx)
            .expect("the default strategy plans every refinement");
        if let Some(rows) = &edit.rows {
            model.apply_rows(rows);
        }
        if let Some(cap) = edit.reset_opacity {
            match ctx.filter_cameras {
                // The filter of the rows after the edit.
                Some(cameras) => {
                    let mut filter = Vec::new();
                    super::filter3d::compute(&model.gaussians.means, cameras, &mut filter);
                    model.reset_opacity_through(cap, &filter);
                }
                None => model.reset_opacity(cap),
            }
        }
        edit.outcome
    }

    fn growth_stopped(&self) -> bool {
        self.growth_stopped
    }

    fn set_growth_stopped(&mut self, stopped: bool) {
        self.growth_stopped = stopped;
    }
}

#[cfg(test)]
mod tests {

    /// Mip-Splatting's reset: the opacity drawn through the filter becomes min(drawn, cap);
    /// one already drawn below the cap keeps its value although its own exceeds the cap.
    #[test]
    fn an_opacity_reset_through_the_filter_caps_the_drawn_opacity() {
        let mut m = Model::new(Gaussians::zeros(4, 0));
        let sig = |x: f32| 1.0 / (1.0 + (-f64::from(x)).exp());
        // log-scale, logit, filter: bright and wide (drawn above the cap), bright but tiny
        // under a wide filter (drawn below it), faint, and no filter at all.
        let rows = [
            (-2.0f32, 3.0f32, 0.05f32),
            (-7.0, 2.0, 0.2),
            (-3.0, -6.0, 0.1),
            (-3.0, 1.0, 0.0),
        ];
        let mut filter = Vec::new();
        for (i, &(ls, o, f)) in rows.iter().enumerate() {
            m.gaussians.log_scales[i] = [ls; 3];
            m.gaussians.logit_opacities[i] = o;
            filter.push(f);
        }
        m.adam.exp_avg.logit_opacities = vec![0.3; 4];
        let before = m.gaussians.logit_opacities.clone();
        m.reset_opacity_through(0.01, &filter);
        for (i, &(ls, o, f)) in rows.iter().enumerate() {
            let s2 = (2.0 * f64::from(ls)).exp();
            let c = (s2 / (s2 + f64::from(f) * f64::from(f))).sqrt().powi(3);
            let drawn_after = sig(m.gaussians.logit_opacities[i]) * c;
            let want = (sig(o) * c).min(0.01);
            assert!(
                (drawn_after / want - 1.0).abs() < 1e-5,
                "row {i}: {drawn_after} vs {want}"
            );
        }
        // Row 1 is drawn at 0.88 × 1.2e-6: kept as it was, where the plain reset lowers it.
        assert_eq!(m.gaussians.logit_opacities[1], before[1]);
        assert!(m.gaussians.logit_opacities[0] > logit(0.01));
        assert_eq!(m.adam.exp_avg.logit_opacities, [0.0; 4]);
    }

    use super::*;
    use crate::budget::Ledger;
    use crate::scene::gaussians::sh_coeffs;

    /// `n` Gaussians whose every field encodes its index, at SH degree 1.
    fn tagged(n: usize) -> Model {
        let k = sh_coeffs(1);
        let mut g = Gaussians::zeros(n, 1);
        for i in 0..n {
            let f = i as f32;
            g.means[i] = [f, 0.0, 0.0];
            g.log_scales[i] = [(0.001f32).ln(); 3];
            g.rotations[i] = [1.0, 0.0, 0.0, 0.0];
            g.logit_opacities[i] = f * 0.01;
            for c in 0..k {
                g.sh[i * k + c] = [f, c as f32, 0.0];
            }
        }
        let mut m = Model::new(g);
        for i in 0..n {
            m.adam.exp_avg.means[i] = [i as f32 + 0.5; 3];
            m.adam.exp_avg_sq.logit_opacities[i] = i as f32 + 0.25;
            m.stats.denom[i] = i as u32;
        }
        m
    }

    fn view<'a>(radii: &'a [u32], grads: &'a [[f32; 2]]) -> ViewStats<'a> {
        ViewStats {
            width: 200,
            height: 100,
            radii,
            means2d_grad: grads,
        }
    }

    struct Ctx {
        rng: Rng,
        memory: ModelMemory,
    }

    impl Ctx {
        fn new() -> Ctx {
            Ctx {
                rng: Rng::new(9),
                memory: ModelMemory::default(),
            }
        }
        fn run(
            &mut self,
            s: &mut DefaultStrategy,
            model: &mut Model,
            v: &ViewStats<'_>,
            iteration: u64,
            make_room: &mut dyn FnMut(u64) -> u64,
        ) -> DensifyOutcome {
            let mut ctx = RefineContext {
                iteration,
                extent: 1.0,
                white_background: false,
                rng: &mut self.rng,
                memory: &mut self.memory,
                make_room,
                filter_cameras: None,
            };
            s.step(model, v, &mut ctx)
        }
    }

    #[test]
    fn retain_and_append_move_every_array_together() {
        let mut m = tagged(6);
        m.retain(&[true, false, true, true, false, true]);
        m.check_shapes().unwrap();
        let kept: Vec<f32> = m.gaussians.means.iter().map(|p| p[0]).collect();
        assert_eq!(kept, [0.0, 2.0, 3.0, 5.0]);
        assert_eq!(m.gaussians.sh[2 * 4 + 3], [3.0, 3.0, 0.0]);
        assert_eq!(m.adam.exp_avg.means[3], [5.5; 3]);
        assert_eq!(m.adam.exp_avg_sq.logit_opacities[1], 2.25);
        assert_eq!(m.stats.denom, [0, 2, 3, 5]);
        let new = tagged(2).gaussians;
        m.append(&new);
        m.check_shapes().unwrap();
        assert_eq!(m.len(), 6);
        assert_eq!(m.gaussians.means[5], [1.0, 0.0, 0.0]);
        assert_eq!(
            m.adam.exp_avg.means[5], [0.0; 3],
            "new Gaussians get zero moments"
        );
        assert_eq!(m.adam.exp_avg_sq.sh[5 * 4 + 1], [0.0; 3]);
        assert_eq!(m.stats.denom[4..], [0, 0]);
    }

    #[test]
    fn reset_caps_opacity_and_zeroes_its_moments_only() {
        let mut m = tagged(3);
        m.gaussians.logit_opacities = vec![-10.0, 0.0, 5.0];
        m.adam.exp_avg.logit_opacities = vec![1.0; 3];
        m.reset_opacity(0.01);
        let cap = logit(0.01);
        assert_eq!(m.gaussians.logit_opacities, [-10.0, cap, cap]);
        assert_eq!(m.adam.exp_avg.logit_opacities, [0.0; 3]);
        assert_eq!(m.adam.exp_avg_sq.logit_opacities, [0.0; 3]);
        assert_eq!(m.adam.exp_avg.means[2], [2.5; 3], "other moments untouched");
    }

    #[test]
    fn accumulates_ndc_gradient_norms_for_visible_gaussians() {
        let mut m = tagged(3);
        m.stats = DensifyStats::zeros(3);
        // (3, 4)·(W/2, H/2)/... : pixel grad (0.03, 0.08) × (100, 50) = (3, 4) → norm 5.
        let grads = [[0.03, 0.08], [1.0, 1.0], [0.0, 0.0]];
        DefaultStrategy::add_view(&mut m, &view(&[7, 0, 2], &grads));
        DefaultStrategy::add_view(&mut m, &view(&[3, 0, 9], &grads));
        assert!((m.stats.grad_accum[0] - 10.0).abs() < 1e-5);
        assert_eq!(m.stats.grad_accum[1], 0.0, "radius 0: not counted");
        assert_eq!(m.stats.denom, [2, 0, 2]);
        assert_eq!(m.stats.max_radii, [7, 0, 9]);
    }

    /// 4 Gaussians: 0 small + high grad (clone), 1 large + high grad (split), 2 low grad,
    /// 3 transparent (pruned).
    fn scenario() -> Model {
        let mut m = tagged(4);
        m.gaussians.log_scales[1] = [(0.05f32).ln(), (0.02f32).ln(), (0.03f32).ln()];
        m.gaussians.rotations[1] = [0.0, 0.0, 0.0, 2.0]; // 180° about z, unnormalised
        m.gaussians.logit_opacities = vec![0.0, 1.0, 2.0, logit(0.004)];
        m.stats = DensifyStats {
            grad_accum: vec![3e-4 * 2.0, 5e-4, 1e-4, 0.0],
            denom: vec![2, 1, 1, 0],
            max_radii: vec![1, 1, 30, 0],
        };
        m
    }

    #[test]
    fn clone_split_prune_in_3dgs_order() {
        let mut m = scenario();
        let parent = m.gaussians.clone();
        let mut s = DefaultStrategy::new(DensifyConfig::default());
        let mut c = Ctx::new();
        let none: [[f32; 2]; 4] = [[0.0; 2]; 4];
        // Iteration 600: densify (not 3000+, so no size pruning), statistics as set above
        // (this view adds nothing: all radii 0).
        let out = c.run(&mut s, &mut m, &view(&[0; 4], &none), 600, &mut |_| 0);
        m.check_shapes().unwrap();
        assert_eq!((out.cloned, out.split, out.pruned), (1, 1, 1));
        assert_eq!(out.skip_optimizer, Some(GroupMask::ALL));
        // Kept originals 0, 2 (1 split away, 3 pruned), then the clone of 0, then 2 children.
        assert_eq!(m.len(), 5);
        assert_eq!(m.gaussians.means[0], parent.means[0]);
        assert_eq!(m.gaussians.means[1], parent.means[2]);
        assert_eq!(
            m.gaussians.means[2], parent.means[0],
            "clone is an exact copy"
        );
        assert_eq!(m.gaussians.sh[2 * 4..3 * 4], parent.sh[0..4]);
        for child in 3..5 {
            let shrink = (1.6f32).ln();
            for a in 0..3 {
                assert!(
                    (m.gaussians.log_scales[child][a] - (parent.log_scales[1][a] - shrink)).abs()
                        < 1e-6
                );
            }
            assert_eq!(m.gaussians.logit_opacities[child], 1.0);
            assert_eq!(m.gaussians.sh[child * 4..child * 4 + 4], parent.sh[4..8]);
            assert_eq!(m.adam.exp_avg.means[child], [0.0; 3]);
        }
        // Moments followed their Gaussians.
        assert_eq!(m.adam.exp_avg.means[1], [2.5; 3]);
        assert_eq!(m.adam.exp_avg.means[2], [0.0; 3]);
        assert_eq!(
            m.stats,
            DensifyStats::zeros(5),
            "statistics restart after densifying"
        );
    }

    /// `revised_opacity`: the same edit except the split children's opacity, `1 − √(1 − o)`
    /// of the parent's (two of them stack back to `o`), clones and originals untouched; and
    /// a child whose revised opacity falls under the pruning bound is pruned.
    #[test]
    fn revised_opacity_changes_only_the_split_children() {
        let run = |revised: bool, parent_logit: f32| {
            let mut m = scenario();
            m.gaussians.logit_opacities[1] = parent_logit;
            let mut s = DefaultStrategy::new(DensifyConfig {
                revised_opacity: revised,
                ..DensifyConfig::default()
            });
            let none: [[f32; 2]; 4] = [[0.0; 2]; 4];
            let out = Ctx::new().run(&mut s, &mut m, &view(&[0; 4], &none), 600, &mut |_| 0);
            (m, out)
        };
        let (plain, _) = run(false, 1.0);
        let (revised, out) = run(true, 1.0);
        assert_eq!((out.cloned, out.split, out.pruned), (1, 1, 1));
        let o = sigmoid(1.0) as f64;
        for child in 3..5 {
            let r = sigmoid(revised.gaussians.logit_opacities[child]) as f64;
            assert!((r - (1.0 - (1.0 - o).sqrt())).abs() < 1e-6, "{r}");
            assert!(
                (1.0 - (1.0 - r).powi(2) - o).abs() < 1e-6,
                "two children stack to o"
            );
        }
        let mut same = revised.gaussians.clone();
        same.logit_opacities[3..5].copy_from_slice(&plain.gaussians.logit_opacities[3..5]);
        assert_eq!(same, plain.gaussians, "nothing else differs");
        // A parent at opacity 0.009 (above the 0.005 bound) splits into children at ≈ 0.0045:
        // pruned with the revision, kept without.
        let l = logit(0.009);
        let (plain, out_plain) = run(false, l);
        let (revised, out_revised) = run(true, l);
        assert_eq!(out_revised.pruned, out_plain.pruned + 2);
        assert_eq!(revised.len() + 2, plain.len());
    }

    #[test]
    fn revised_split_logit_is_exact_and_finite_everywhere() {
        for i in -400..=400 {
            let l = i as f32 * 0.05;
            let o = 1.0 / (1.0 + (-(l as f64)).exp());
            let r = revised_split_logit(l) as f64;
            let child = 1.0 / (1.0 + (-r).exp());
            // In f64 from the f32 result: the f32 rounding of r is the only error.
            assert!(
                ((1.0 - child).powi(2) - (1.0 - o)).abs() <= 1e-6 * (1.0 - o).max(1e-12) + 1e-7,
                "l {l}: child {child} parent {o}"
            );
        }
        // Far out: finite, ordered, and the asymptotes (l/2 + O(1) above, l − ln 2 below).
        let big = revised_split_logit(1e6);
        assert!(big.is_finite() && (big - 5e5).abs() < 1.0, "{big}");
        let tiny = revised_split_logit(-1e6);
        assert!(tiny.is_finite() && (tiny - (-1e6 - std::f32::consts::LN_2)).abs() < 1.0);
        let mut last = f32::NEG_INFINITY;
        for l in [
            -1e30f32, -2000.0, -100.0, -1.0, 0.0, 1.0, 100.0, 2000.0, 1e30,
        ] {
            let r = revised_split_logit(l);
            assert!(r.is_finite() && r > last, "{l} -> {r}");
            last = r;
        }
    }

    #[test]
    fn split_samples_lie_near_the_parent_with_its_covariance() {
        // Many splits of one anisotropic rotated parent: the children's offsets, rotated back
        // into the parent's frame, have per-axis standard deviations equal to its scales.
        let mut rng = Rng::new(3);
        let scales = [0.5f32, 0.1, 0.02];
        let q = [0.9f32, 0.1, -0.3, 0.2];
        let r = rotation_matrix(q);
        let mut sum2 = [0.0f64; 3];
        let n = 4000;
        for _ in 0..n {
            let mut m = tagged(1);
            m.gaussians.log_scales[0] = scales.map(f32::ln);
            m.gaussians.rotations[0] = q;
            m.stats.grad_accum[0] = 1.0;
            m.stats.denom[0] = 1;
            let mut memory = ModelMemory::default();
            let mut ctx = RefineContext {
                iteration: 600,
                extent: 1.0,
                white_background: false,
                rng: &mut rng,
                memory: &mut memory,
                make_room: &mut |_| 0,
                filter_cameras: None,
            };
            let mut s = DefaultStrategy::new(DensifyConfig::default());
            let mut out = DensifyOutcome::default();
            s.densify_and_prune(&mut m, &mut ctx, false, &mut out);
            assert_eq!((out.split, m.len()), (1, 2));
            for c in 0..2 {
                let d: [f32; 3] =
                    std::array::from_fn(|a| m.gaussians.means[c][a] - [0.0, 0.0, 0.0][a]);
                // Local = Rᵀ·d.
                for a in 0..3 {
                    let local = r[0][a] * d[0] + r[1][a] * d[1] + r[2][a] * d[2];
                    sum2[a] += (local as f64).powi(2);
                    assert!(local.abs() < 6.0 * scales[a], "child beyond 6σ on axis {a}");
                }
            }
        }
        for a in 0..3 {
            let sd = (sum2[a] / (2 * n) as f64).sqrt();
            // 8000 samples: the sd estimate is within ~1.6% (1/√(2·8000)); 5% is > 3σ.
            assert!(
                (sd / scales[a] as f64 - 1.0).abs() < 0.05,
                "axis {a}: sd {sd}"
            );
        }
    }

    /// World-size pruning from the first reset on; screen-size pruning only when asked for
    /// (off by default, as in 3DGS's code and gsplat).
    #[test]
    fn size_pruning_only_after_the_first_reset() {
        let none = [[0.0f32; 2]; 4];
        for (screen, iteration, kept_after) in [
            (Some(20), 3000, &[0.0, 1.0, 2.0, 3.0][..]),
            (Some(20), 3100, &[0.0, 3.0][..]),
            (None, 3000, &[0.0, 1.0, 2.0, 3.0][..]),
            (None, 3100, &[0.0, 1.0, 3.0][..]),
        ] {
            let cfg = DensifyConfig {
                prune_screen_radius: screen,
                ..DensifyConfig::default()
            };
            let mut m = tagged(4);
            m.gaussians.logit_opacities = vec![0.0; 4];
            m.stats.max_radii = vec![0, 21, 0, 5];
            m.stats.denom = vec![0; 4];
            m.gaussians.log_scales[2] = [(0.2f32).ln(); 3]; // > 0.1·extent
            let mut s = DefaultStrategy::new(cfg.clone());
            let mut c = Ctx::new();
            let out = c.run(&mut s, &mut m, &view(&[0; 4], &none), iteration, &mut |_| 0);
            m.check_shapes().unwrap();
            let kept: Vec<f32> = m.gaussians.means.iter().map(|p| p[0]).collect();
            assert_eq!(kept, kept_after, "{screen:?} at {iteration}");
            assert_eq!(out.pruned, 4 - kept_after.len());
            if iteration == 3000 {
                // 3000 is also a reset iteration.
                assert!(out.opacity_reset);
                assert_eq!(out.skip_optimizer, Some(GroupMask::ALL));
            }
        }
        assert_eq!(DensifyConfig::default().prune_screen_radius, None);
    }

    /// A run's far field (its sky): Gaussians beyond it are neither cloned, split nor pruned
    /// for their size, while a transparent one is still pruned and the near ones densify as
    /// before.
    #[test]
    fn the_far_field_is_neither_densified_nor_pruned_for_size() {
        let far = FarField {
            centre: [0.0; 3],
            radius: 0.5,
        };
        assert!(!far.contains([0.5, 0.0, 0.0]) && far.contains([0.0, 0.6, 0.0]));
        let none: [[f32; 2]; 4] = [[0.0; 2]; 4];
        let cfg = DensifyConfig {
            far_field: Some(far),
            ..DensifyConfig::default()
        };
        // Gaussian 1 (to be split) and 3 (transparent) lie beyond the far field's radius,
        // so do 2 and 3 (all but 0, at the origin).
        let mut m = scenario();
        let mut s = DefaultStrategy::new(cfg.clone());
        let out = Ctx::new().run(&mut s, &mut m, &view(&[0; 4], &none), 600, &mut |_| 0);
        assert_eq!((out.cloned, out.split, out.pruned), (1, 0, 1));
        let xs: Vec<f32> = m.gaussians.means.iter().map(|p| p[0]).collect();
        assert_eq!(xs, [0.0, 1.0, 2.0, 0.0], "1 kept whole, 3 pruned, 0 cloned");
        // After the first reset a large far Gaussian stays; a near one goes.
        for (field, kept_after) in [
            (Some(far), &[0.0, 1.0, 2.0, 3.0][..]),
            (None, &[0.0, 1.0, 3.0][..]),
        ] {
            let mut m = tagged(4);
            m.gaussians.logit_opacities = vec![0.0; 4];
            m.stats.denom = vec![0; 4];
            m.gaussians.log_scales[2] = [(0.2f32).ln(); 3]; // > 0.1·extent
            let mut s = DefaultStrategy::new(DensifyConfig {
                far_field: field,
                ..DensifyConfig::default()
            });
            Ctx::new().run(&mut s, &mut m, &view(&[0; 4], &none), 3100, &mut |_| 0);
            let kept: Vec<f32> = m.gaussians.means.iter().map(|p| p[0]).collect();
            assert_eq!(kept, kept_after, "{field:?}");
        }
        // Off, it is left out of a saved configuration; on, it is read back.
        let text = serde_json::to_string(&DensifyConfig::default()).unwrap();
        assert!(!text.contains("far_field"), "{text}");
        let text = serde_json::to_string(&cfg).unwrap();
        assert_eq!(serde_json::from_str::<DensifyConfig>(&text).unwrap(), cfg);
    }

    #[test]
    fn schedule_windows() {
        let none = [[0.0f32; 2]; 2];
        let mut s = DefaultStrategy::new(DensifyConfig::default());
        let mut c = Ctx::new();
        for (it, refine, reset) in [
            (500, false, false),
            (550, false, false),
            (14_900, true, false),
            (6000, true, true),
            (15_000, false, false),
        ] {
            let mut m = tagged(2);
            m.gaussians.logit_opacities = vec![3.0; 2];
            let out = c.run(&mut s, &mut m, &view(&[1, 1], &none), it, &mut |_| 0);
            assert_eq!(
                out.skip_optimizer == Some(GroupMask::ALL),
                refine,
                "iteration {it}"
            );
            assert_eq!(out.opacity_reset, reset, "iteration {it}");
            if it >= 15_000 {
                assert_eq!(m.stats.denom, [0, 1], "no statistics after until_iter");
            }
        }
    }

    #[test]
    fn budget_refusal_stops_growth_once_and_pruning_continues() {
        let n = 10;
        let base = model_bytes(n, 1);
        let ledger = Ledger::new(base + 1000);
        let mut cache = Some(
            ledger
                .reserve(crate::budget::Component::Cache, 1000)
                .unwrap(),
        );
        let mut c = Ctx::new();
        c.memory.reservation = Some(
            ledger
                .reserve(crate::budget::Component::Model, base)
                .unwrap(),
        );
        let mut s = DefaultStrategy::new(DensifyConfig::default());
        let none = [[0.0f32; 2]; 64];
        let hot = |m: &mut Model| {
            for i in 0..m.len() {
                m.stats.grad_accum[i] = 1.0;
                m.stats.denom[i] = 1;
            }
        };
        // Round 1: the cache can give back its 1000 bytes, but 10 clones need far more.
        let mut m = tagged(n);
        m.gaussians.logit_opacities = vec![0.0; n];
        hot(&mut m);
        let mut asked = 0;
        let out = c.run(
            &mut s,
            &mut m,
            &view(&[0; 10], &none[..10]),
            600,
            &mut |need| {
                asked += 1;
                assert!(need > 1000);
                let freed = cache.as_ref().map_or(0, |r| r.bytes());
                cache = None;
                freed
            },
        );
        assert_eq!(asked, 1);
        assert!(
            out.growth_stopped
                .as_deref()
                .unwrap()
                .contains("RAM budget"),
            "{out:?}"
        );
        assert_eq!((out.cloned, m.len()), (0, n));
        assert!(s.growth_stopped());
        // Round 2: no growth, no second message, but pruning still happens.
        hot(&mut m);
        m.gaussians.logit_opacities[4] = -10.0;
        let out = c.run(
            &mut s,
            &mut m,
            &view(&[0; 10], &none[..10]),
            700,
            &mut |_| panic!("not asked again"),
        );
        assert_eq!(out.growth_stopped, None);
        assert_eq!((out.cloned, out.pruned, m.len()), (0, 1, n - 1));
        m.check_shapes().unwrap();
        // The reservation followed the model down.
        assert_eq!(
            c.memory.reservation.as_ref().unwrap().bytes(),
            model_bytes(n - 1, 1)
        );
    }

    #[test]
    fn make_room_lets_growth_proceed() {
        let n = 4;
        let ledger = Ledger::new(model_bytes(2 * n, 1));
        let mut cache = Some(
            ledger
                .reserve(crate::budget::Component::Cache, model_bytes(n, 1))
                .unwrap(),
        );
        let mut c = Ctx::new();
        c.memory.reservation = Some(
            ledger
                .reserve(crate::budget::Component::Model, model_bytes(n, 1))
                .unwrap(),
        );
        let mut s = DefaultStrategy::new(DensifyConfig::default());
        let mut m = tagged(n);
        m.gaussians.logit_opacities = vec![0.0; n];
        for i in 0..n {
            m.stats.grad_accum[i] = 1.0;
            m.stats.denom[i] = 1;
        }
        let none = [[0.0f32; 2]; 4];
        let out = c.run(&mut s, &mut m, &view(&[0; 4], &none), 600, &mut |_| {
            let b = cache.as_ref().unwrap().bytes();
            cache = None;
            b
        });
        assert_eq!((out.cloned, m.len(), out.growth_stopped), (4, 8, None));
        assert_eq!(
            c.memory.reservation.as_ref().unwrap().bytes(),
            model_bytes(8, 1)
        );
    }

    #[test]
    fn max_gaussians_keeps_the_largest_gradients() {
        let mut s = DefaultStrategy::new(DensifyConfig {
            max_gaussians: 6,
            ..DensifyConfig::default()
        });
        let mut m = tagged(4);
        m.gaussians.logit_opacities = vec![0.0; 4];
        m.stats.grad_accum = vec![1e-3, 4e-3, 3e-3, 2e-3];
        m.stats.denom = vec![1; 4];
        let mut c = Ctx::new();
        let none = [[0.0f32; 2]; 4];
        let out = c.run(&mut s, &mut m, &view(&[0; 4], &none), 600, &mut |_| 0);
        assert_eq!((out.cloned, m.len()), (2, 6));
        assert!(out.growth_stopped.unwrap().contains("max_gaussians"));
        // Clones of 1 and 2 (largest gradients), in index order.
        assert_eq!(m.gaussians.means[4][0], 1.0);
        assert_eq!(m.gaussians.means[5][0], 2.0);
    }
}
