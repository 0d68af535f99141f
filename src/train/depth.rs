//! Depth regularization (the 2024 addition to 3DGS): each training view that carries a
//! monocular inverse-depth map (packed by `gs-pack convert --depths`, see
//! [`crate::shard::DepthScale`]) adds
//!
//! `L_depth = λ(s) · mean over the view's pixels of |D − D_mono|`
//!
//! to the photometric loss, where `D = Σ wᵢ/zᵢ` is the render's inverse depth (the colour's
//! compositing weights, [`crate::render::RenderOptions::inv_depth`]), `D_mono` the view's
//! target and `λ(s)` decays exponentially from `weight_init` to `weight_final` over the run
//! (3DGS's `depth_l1_weight_init = 1.0`, `depth_l1_weight_final = 0.01`, through the same
//! `get_expon_lr_func` as its learning rates). The mean runs over every pixel of the view,
//! excluded ones counting as zero (3DGS multiplies by its depth mask, then takes `.mean()`);
//! pixels a loss mask excludes (or the other half of a half-trained view) are excluded here
//! too, and so are pixels whose map holds 0 ([`crate::shard::DepthScale::NO_DEPTH`]: no data,
//! a NaN target here). That is the one difference from 3DGS, which regresses them to their
//! affine image (0 without an offset: infinitely far, which no Gaussian can render, so the
//! term never stops pushing): on a synthetic scene with exact maps and a sky (36 % of the
//! pixels at 0), 3DGS's rule lost 2.6 dB of held-out PSNR against no depth term, this one
//! gained 1.9 dB (docs/training.md, "Depth regularization"). A view without a map, or whose
//! map's fit 3DGS would call unreliable (the pack leaves those out), trains on the
//! photometric loss alone, as in 3DGS.
//!
//! # Depth from SfM points (gsplat's `--depth_loss`)
//! A pack converted with `gs-pack convert --sfm-depths` holds *sparse* planes instead
//! ([`crate::shard::SourceInfo::sfm_depths`]): the inverse depth of each SfM point the view's
//! image observes, at the pixel it projects to, and no depth elsewhere. Their term is gsplat's
//!
//! `L_depth = λ · extent · mean over the view's points of |D/A − 1/z|`
//!
//! with `λ = 0.01` held constant by default (gsplat's `depth_lambda`; the schedule above with
//! equal ends) and `extent` the scene extent (3DGS's `cameras_extent`, gsplat's `scene_scale`),
//! which makes the term independent of the scene's units. The mean is over the points the pack
//! kept for the view ([`crate::shard::ViewEntry::depth_pixels`]), not its pixels: a view of a
//! few thousand points among two million pixels would otherwise carry almost no weight.
//!
//! `D/A` is the render's inverse depth divided by its accumulated opacity `A = Σ wᵢ`, held
//! constant in the gradient (`∂L/∂D = λ·extent·sign/(A·n)`): the depth of what the pixel
//! shows, whatever its opacity, as gsplat's expected depth `ED = Σ wᵢzᵢ / Σ wᵢ` is. Compared
//! unnormalized, a pixel that is not yet opaque reads as too far (`D < 1/z` at the right
//! depth), and the term pulls its Gaussians towards the camera: on a synthetic scene (one
//! seed) that cost 3.8 dB of held-out PSNR where the normalized term lost 0.5
//! (docs/training.md, Depth regularization).
//! Pixels with `A` below [`MIN_COVER`] are left out (nothing drawn there to have a depth).
//! What else differs from gsplat: `D/A` is read at the point's pixel (gsplat bilinearly
//! samples `1/ED` at the point's position), a harmonic rather than arithmetic mean of the
//! splats' depths, and points hidden behind a nearer one in the same pixel are left out (the
//! pack keeps the nearest). Masked pixels and those outside a half-trained view's region count
//! as zero, as for dense maps.
//!
//! This module owns the configuration, the schedule and the host loss; the device engine
//! computes the same loss with `kernels/loss.cu`'s `depth_l1`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::schedule::ExponentialLr;

/// Pixels per work item of [`l1_and_grad`]: the partial sums are added in this fixed order,
/// so the value does not depend on the thread count.
const CHUNK: usize = 1 << 14;

/// Below this accumulated opacity a pixel's normalized inverse depth `D/A` is left out of
/// the term on SfM points (nothing is drawn there to give a depth; one 8-bit level, the
/// threshold `gs-render --depth` draws at).
pub const MIN_COVER: f32 = 1.0 / 255.0;

/// The depth loss's weight schedule (3DGS's `depth_l1_weight_*`; its defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthConfig {
    pub weight_init: f64,
    pub weight_final: f64,
    /// Length of the schedule; `None` = the run's iterations (a `--resume --extend` keeps the
    /// original length, as it does for the position schedule).
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// The pack's planes are SfM points (see the module doc): the mean runs over each view's
    /// points and the weight is times the scene extent. Absent (false) in checkpoints written
    /// before SfM depths existed, whose packs had dense maps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sparse: bool,
}

impl Default for DepthConfig {
    fn default() -> Self {
        DepthConfig {
            weight_init: 1.0,
            weight_final: 0.01,
            max_steps: None,
            sparse: false,
        }
    }
}

/// gsplat's `depth_lambda`: the constant weight of the term on SfM points by default.
pub const SFM_DEPTH_WEIGHT: f64 = 0.01;

/// The depth weights a user gave (`--depth-l1-weight-init/-final`, or `--depth-lambda` for
/// both); `None` takes the default of the pack's kind of planes ([`DepthConfig::resolve`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DepthWeights {
    pub init: Option<f64>,
    pub fin: Option<f64>,
}

impl DepthWeights {
    /// Whether any weight was given.
    pub fn given(&self) -> bool {
        self.init.is_some() || self.fin.is_some()
    }
}

impl DepthConfig {
    /// The configuration for a pack whose planes are dense maps (3DGS's 1.0 → 0.01) or, with
    /// `sparse`, SfM points (gsplat's constant 0.01), each weight given taking its place.
    pub fn resolve(given: DepthWeights, sparse: bool) -> DepthConfig {
        let (init, fin) = if sparse {
            (SFM_DEPTH_WEIGHT, SFM_DEPTH_WEIGHT)
        } else {
            let d = DepthConfig::default();
            (d.weight_init, d.weight_final)
        };
        DepthConfig {
            weight_init: given.init.unwrap_or(init),
            weight_final: given.fin.unwrap_or(fin),
            max_steps: None,
            sparse,
        }
    }

    /// The factor the loss's weight carries beyond the schedule: the scene extent on SfM
    /// points (gsplat's `scene_scale`), 1 on dense maps (3DGS's rule).
    pub fn extent_factor(&self, extent: f64) -> f64 {
        if self.sparse {
            extent
        } else {
            1.0
        }
    }

    /// What the view's mean runs over: its `pixels` for a dense map, the `points` its sparse
    /// plane holds otherwise (at least 1).
    pub fn divisor(&self, pixels: usize, points: Option<u64>) -> usize {
        match (self.sparse, points) {
            (true, Some(p)) => (p as usize).max(1),
            _ => pixels,
        }
    }

    /// The weight schedule of a run of `iterations`.
    pub fn schedule(&self, iterations: u64) -> ExponentialLr {
        ExponentialLr::new(
            self.weight_init,
            self.weight_final,
            self.max_steps.unwrap_or(iterations),
        )
    }

    /// The weight `λ` at (1-based) iteration `step` of a run of `iterations`; 0 turns the term
    /// off for that step.
    pub fn weight(&self, step: u64, iterations: u64) -> f64 {
        self.schedule(iterations).at(step)
    }

    /// Why these settings cannot train, if they cannot.
    pub fn invalid(&self) -> Option<String> {
        for (name, v) in [
            ("--depth-l1-weight-init", self.weight_init),
            ("--depth-l1-weight-final", self.weight_final),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Some(format!("{name} {v} must be a finite number ≥ 0"));
            }
        }
        if self.weight_init > 0.0 && self.weight_final == 0.0 {
            // An exponential decay cannot reach 0: 3DGS's function would give 0 from the
            // first step on (ln 0 = −∞), silently disabling the term.
            return Some(
                "--depth-l1-weight-final 0 with a positive --depth-l1-weight-init: the weight \
                 decays exponentially and cannot reach 0; give a small positive final weight, \
                 or --depth-l1-weight-init 0 to turn the depth loss off"
                    .to_owned(),
            );
        }
        None
    }

    /// Whether the term is on at all (a zero initial weight turns it off, as in 3DGS).
    pub fn enabled(&self) -> bool {
        self.weight_init > 0.0
    }
}

/// `Σ |D − T| / divisor` over the view's `render.len()` pixels (pixels with `mask == 0` or a
/// NaN target, "no depth", add nothing; `divisor` is the pixel count for a dense map, the
/// view's point count for SfM points: [`DepthConfig::divisor`]), and into `d_out` its
/// gradient times `weight`: `weight · sign(D − T) / divisor` on used pixels (0 where `D = T`,
/// as torch's `abs` gives), 0 on excluded ones. With `alpha` (SfM points, see the module
/// doc) `D/A` takes `D`'s place, `A` held constant (the gradient is divided by it), and
/// pixels with `A <` [`MIN_COVER`] are excluded. Returns the unweighted mean (3DGS's
/// `Ll1depth_pure`); the loss term is `weight` times it.
#[allow(clippy::too_many_arguments)] // one loss's inputs, each used once
pub fn l1_and_grad(
    render: &[f32],
    alpha: Option<&[f32]>,
    target: &[f32],
    mask: Option<&[u8]>,
    weight: f64,
    divisor: usize,
    d_out: &mut [f32],
) -> f64 {
    let n = render.len();
    assert_eq!(target.len(), n);
    assert_eq!(d_out.len(), n);
    if let Some(m) = mask {
        assert_eq!(m.len(), n);
    }
    if let Some(a) = alpha {
        assert_eq!(a.len(), n);
    }
    assert!(divisor > 0, "a depth mean over nothing");
    let step = (weight / divisor as f64) as f32;
    let sums: Vec<f64> = d_out
        .par_chunks_mut(CHUNK)
        .zip(render.par_chunks(CHUNK))
        .zip(target.par_chunks(CHUNK))
        .enumerate()
        .map(|(c, ((d, r), t))| {
            let used = mask.map(|m| &m[c * CHUNK..c * CHUNK + d.len()]);
            let cover = alpha.map(|a| &a[c * CHUNK..c * CHUNK + d.len()]);
            let mut sum = 0.0f64;
            for k in 0..d.len() {
                let a = cover.map_or(1.0, |a| a[k]);
                if used.is_some_and(|m| m[k] == 0) || t[k].is_nan() || a < MIN_COVER {
                    d[k] = 0.0;
                    continue;
                }
                // Normalized: D/A with A held constant, so ∂/∂D is 1/A.
                let (value, s) = match cover {
                    Some(_) => (r[k] / a, step / a),
                    None => (r[k], step),
                };
                let diff = value - t[k];
                sum += diff.abs() as f64;
                d[k] = if diff > 0.0 {
                    s
                } else if diff < 0.0 {
                    -s
                } else {
                    0.0
                };
            }
            sum
        })
        .collect();
    sums.iter().sum::<f64>() / divisor as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_decays_from_init_to_final_as_3dgs_does() {
        let c = DepthConfig::default();
        assert_eq!(c.weight(0, 30_000), 1.0);
        assert!((c.weight(30_000, 30_000) - 0.01).abs() < 1e-12);
        // Log-linear: halfway is the geometric mean.
        assert!((c.weight(15_000, 30_000) - 0.1).abs() < 1e-9);
        // Past the end it stays at the final weight; an extended run keeps the old length.
        assert!((c.weight(40_000, 30_000) - 0.01).abs() < 1e-12);
        let kept = DepthConfig {
            max_steps: Some(30_000),
            ..c.clone()
        };
        assert!((kept.weight(15_000, 60_000) - 0.1).abs() < 1e-9);
        let off = DepthConfig {
            weight_init: 0.0,
            weight_final: 0.0,
            ..DepthConfig::default()
        };
        assert!(!off.enabled());
        assert_eq!(off.weight(100, 1000), 0.0);
        assert_eq!(off.invalid(), None);
    }

    #[test]
    fn bad_weights_are_refused_by_name() {
        let e = DepthConfig {
            weight_init: -1.0,
            ..DepthConfig::default()
        }
        .invalid()
        .unwrap();
        assert!(e.contains("--depth-l1-weight-init -1"), "{e}");
        let e = DepthConfig {
            weight_final: 0.0,
            ..DepthConfig::default()
        }
        .invalid()
        .unwrap();
        assert!(e.contains("cannot reach 0"), "{e}");
        let e = DepthConfig {
            weight_final: f64::NAN,
            ..DepthConfig::default()
        }
        .invalid()
        .unwrap();
        assert!(e.contains("--depth-l1-weight-final NaN"), "{e}");
    }

    /// The value and gradient against a direct evaluation, with a mask, across several work
    /// items; and the gradient against central differences of the weighted value.
    #[test]
    fn the_loss_and_its_gradient_match_a_direct_evaluation() {
        let n = 3 * CHUNK + 17;
        let render: Vec<f32> = (0..n).map(|k| ((k * 37) % 101) as f32 / 50.0).collect();
        // Every 11th target is NaN ("no depth"): excluded like a masked pixel.
        let target: Vec<f32> = (0..n)
            .map(|k| {
                if k % 11 == 5 {
                    f32::NAN
                } else {
                    ((k * 53) % 97) as f32 / 48.0
                }
            })
            .collect();
        let mask: Vec<u8> = (0..n).map(|k| if k % 7 == 3 { 0 } else { 255 }).collect();
        let mut d = vec![f32::NAN; n];
        let w = 0.3;
        let pure = l1_and_grad(&render, None, &target, Some(&mask), w, n, &mut d);
        let mut want = 0.0f64;
        for k in 0..n {
            if mask[k] != 0 && !target[k].is_nan() {
                want += (render[k] - target[k]).abs() as f64;
            }
        }
        want /= n as f64;
        assert!(
            (pure - want).abs() < 1e-12 * want.max(1.0),
            "{pure} vs {want}"
        );
        let step = (w / n as f64) as f32;
        let mut equal = 0;
        for k in 0..n {
            let diff = render[k] - target[k];
            let expect = if mask[k] == 0 || target[k].is_nan() || diff == 0.0 {
                0.0
            } else {
                step * diff.signum()
            };
            assert_eq!(d[k], expect, "pixel {k}");
            if mask[k] != 0 && diff == 0.0 {
                equal += 1;
            }
        }
        assert!(equal > 0, "some used pixel must hit D = T exactly");
        // Without a mask every pixel counts.
        let all = l1_and_grad(&render, None, &target, None, w, n, &mut d);
        assert!(all > pure);
        assert!(d.iter().all(|v| v.is_finite()));
    }

    /// Dense maps take 3DGS's schedule, SfM points gsplat's constant weight times the extent,
    /// and a weight given replaces only its own default.
    #[test]
    fn each_kind_of_plane_takes_its_defaults() {
        let none = DepthWeights::default();
        assert!(!none.given());
        let dense = DepthConfig::resolve(none, false);
        assert_eq!(dense, DepthConfig::default());
        assert_eq!(dense.extent_factor(4.5), 1.0);
        assert_eq!(dense.divisor(1000, Some(7)), 1000);
        let sparse = DepthConfig::resolve(none, true);
        assert_eq!((sparse.weight_init, sparse.weight_final), (0.01, 0.01));
        // Equal ends: the weight is constant over the run.
        assert!((sparse.weight(1, 30_000) - 0.01).abs() < 1e-15);
        assert!((sparse.weight(29_999, 30_000) - 0.01).abs() < 1e-15);
        assert_eq!(sparse.extent_factor(4.5), 4.5);
        assert_eq!(sparse.divisor(1000, Some(7)), 7);
        assert_eq!(sparse.divisor(1000, Some(0)), 1);
        let given = DepthWeights {
            init: Some(0.5),
            fin: None,
        };
        assert!(given.given());
        let mixed = DepthConfig::resolve(given, true);
        assert_eq!((mixed.weight_init, mixed.weight_final), (0.5, 0.01));
        assert!(mixed.sparse);
        // A checkpoint written before SfM depths reads as dense.
        let old: DepthConfig =
            serde_json::from_str(r#"{"weight_init":1.0,"weight_final":0.01}"#).unwrap();
        assert!(!old.sparse);
        assert!(!serde_json::to_string(&dense).unwrap().contains("sparse"));
    }

    /// On a sparse plane the mean and the gradient step are over the view's points: the same
    /// render and target give `pixels / points` times the dense value.
    #[test]
    fn a_sparse_mean_is_over_the_points() {
        let n = 1000;
        let render = vec![0.5f32; n];
        let mut target = vec![f32::NAN; n];
        for k in [3, 400, 999] {
            target[k] = 0.25;
        }
        let (mut d_dense, mut d_sparse) = (vec![0f32; n], vec![0f32; n]);
        let dense = l1_and_grad(&render, None, &target, None, 1.0, n, &mut d_dense);
        let sparse = l1_and_grad(&render, None, &target, None, 1.0, 3, &mut d_sparse);
        assert!((sparse - 0.25).abs() < 1e-12, "{sparse}");
        assert!((dense - 0.75 / n as f64).abs() < 1e-15, "{dense}");
        assert_eq!(d_sparse[400], 1.0 / 3.0);
        assert_eq!(d_sparse[401], 0.0);
        assert_eq!(d_dense[400], 1.0 / n as f32);
    }
}
