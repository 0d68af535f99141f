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
//! gained 1.9 dB (README, "Depth regularization"). A view without a map, or whose map's fit
//! 3DGS would call unreliable (the pack leaves those out), trains on the photometric loss
//! alone, as in 3DGS.
//!
//! This module owns the configuration, the schedule and the host loss; the device engine
//! computes the same loss with `kernels/loss.cu`'s `depth_l1`.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::schedule::ExponentialLr;

/// Pixels per work item of [`l1_and_grad`]: the partial sums are added in this fixed order,
/// so the value does not depend on the thread count.
const CHUNK: usize = 1 << 14;

/// The depth loss's weight schedule (3DGS's `depth_l1_weight_*`; its defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthConfig {
    pub weight_init: f64,
    pub weight_final: f64,
    /// Length of the schedule; `None` = the run's iterations (a `--resume --extend` keeps the
    /// original length, as it does for the position schedule).
    #[serde(default)]
    pub max_steps: Option<u64>,
}

impl Default for DepthConfig {
    fn default() -> Self {
        DepthConfig {
            weight_init: 1.0,
            weight_final: 0.01,
            max_steps: None,
        }
    }
}

impl DepthConfig {
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

/// `mean |D − T|` over the view's `render.len()` pixels (pixels with `mask == 0` or a NaN
/// target, "no depth", count as zero), and into `d_out` its gradient times `weight`:
/// `weight · sign(D − T) / n` on used pixels (0 where `D = T`, as torch's `abs` gives), 0 on
/// excluded ones. Returns the unweighted mean (3DGS's `Ll1depth_pure`); the loss term is
/// `weight` times it.
pub fn l1_and_grad(
    render: &[f32],
    target: &[f32],
    mask: Option<&[u8]>,
    weight: f64,
    d_out: &mut [f32],
) -> f64 {
    let n = render.len();
    assert_eq!(target.len(), n);
    assert_eq!(d_out.len(), n);
    if let Some(m) = mask {
        assert_eq!(m.len(), n);
    }
    let step = (weight / n as f64) as f32;
    let sums: Vec<f64> = d_out
        .par_chunks_mut(CHUNK)
        .zip(render.par_chunks(CHUNK))
        .zip(target.par_chunks(CHUNK))
        .enumerate()
        .map(|(c, ((d, r), t))| {
            let used = mask.map(|m| &m[c * CHUNK..c * CHUNK + d.len()]);
            let mut sum = 0.0f64;
            for k in 0..d.len() {
                if used.is_some_and(|m| m[k] == 0) || t[k].is_nan() {
                    d[k] = 0.0;
                    continue;
                }
                let diff = r[k] - t[k];
                sum += diff.abs() as f64;
                d[k] = if diff > 0.0 {
                    step
                } else if diff < 0.0 {
                    -step
                } else {
                    0.0
                };
            }
            sum
        })
        .collect();
    sums.iter().sum::<f64>() / n as f64
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
            max_steps: None,
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
        let pure = l1_and_grad(&render, &target, Some(&mask), w, &mut d);
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
        let all = l1_and_grad(&render, &target, None, w, &mut d);
        assert!(all > pure);
        assert!(d.iter().all(|v| v.is_finite()));
    }
}
