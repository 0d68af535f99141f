//! Mip-Splatting's 3D smoothing filter ("Mip-Splatting: Alias-free 3D Gaussian Splatting",
//! Yu et al., CVPR 2024), folded into a Gaussian's stored scale and opacity.
//!
//! The filter convolves each Gaussian with an isotropic 3D Gaussian of standard deviation `f`
//! (per Gaussian, set from the highest sampling rate any training camera has at it), so no
//! Gaussian is narrower than the training images could resolve. The result is again a Gaussian:
//! covariance `Σ + f²·I`, and, to keep its integral, opacity `o·√(det Σ / det(Σ + f²·I))`.
//! Because the filter is isotropic, `Σ + f²·I` keeps `Σ`'s rotation: each axis's scale becomes
//! `s' = √(s² + f²)` and the opacity factor is `∏ s/s'` over the three axes.
//!
//! Mip-Splatting saves a trained model's raw scales and opacities with the filter beside them,
//! as a `filter_3D` vertex property, which other tools ignore; its fused export
//! (`save_fused_ply`) stores the filtered values instead, which any 3DGS renderer draws as
//! trained. [`fuse`] computes those filtered stored values (log-scales, logit opacity); the PLY
//! reader applies it to a `filter_3D` file, and `gs-train --filter-3d` to the models it saves
//! (its filter is set from the training cameras: `train::filter3d`). [`unfuse`] undoes the fold
//! for a run that trains through its own filter from a model saved with one (`gs-train --init
//! --filter-3d`), so its first step draws the model as saved instead of filtering it twice.
//!
//! # Numerics
//! The fusion is evaluated in f64 in log space, so no intermediate overflows or cancels:
//! `ln s' = ½·logaddexp(2·ln s, 2·ln f)`, `ln c = Σ (ln s − ln s')`, and the new logit
//! `ln o' − ln(1 − o')` with `ln o' = ln σ(x) + ln c` and `ln(1 − o')` taken by `log1mexp`. A
//! filter of 0 returns the stored values unchanged, bit for bit.

/// `ln(eᵃ + eᵇ)`, exactly `a` or `b` when the other is −∞.
fn log_add_exp(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// `ln σ(x) = −ln(1 + e^{−x})`, without overflow for either sign.
fn log_sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        -(-x).exp().ln_1p()
    } else {
        x - x.exp().ln_1p()
    }
}

/// `ln(1 − eᵃ)` for `a ≤ 0` (Mächler's `log1mexp`: accurate on both sides of `−ln 2`).
fn log1mexp(a: f64) -> f64 {
    if a > -std::f64::consts::LN_2 {
        (-a.exp_m1()).ln()
    } else {
        (-a.exp()).ln_1p()
    }
}

/// The stored values `(log-scales, logit opacity)` of a Gaussian with stored `log_scale` and
/// `logit_opacity` after Mip-Splatting's 3D filter of standard deviation `filter` (≥ 0, in
/// scene units) is folded in (module doc). `filter == 0` returns the inputs unchanged.
pub fn fuse(log_scale: [f32; 3], logit_opacity: f32, filter: f32) -> ([f32; 3], f32) {
    if filter == 0.0 {
        return (log_scale, logit_opacity);
    }
    let two_ln_f = 2.0 * f64::from(filter).ln();
    let fused = log_scale.map(|l| 0.5 * log_add_exp(2.0 * f64::from(l), two_ln_f));
    // ln c = Σ ln(s/s') ≤ 0.
    let ln_c: f64 = (0..3).map(|a| f64::from(log_scale[a]) - fused[a]).sum();
    let ln_o = log_sigmoid(f64::from(logit_opacity)) + ln_c;
    let logit = ln_o - log1mexp(ln_o);
    (fused.map(|v| v as f32), logit as f32)
}

/// The smallest scale [`unfuse`] gives an axis, as a fraction of the filter. Below it the
/// filtered scale `√(s² + f²)` is within 5e-5 of `f` whatever `s` is, so nothing drawn depends
/// on it; and a stored f32 log-scale resolves `s'² − f²` only to ~1e-7·f², so smaller values
/// would be rounding noise, which the opacity would then divide by.
pub const UNFUSE_MIN_SCALE: f64 = 1e-2;
/// The highest opacity [`unfuse`] gives (a logit of about 16): a model whose drawn opacity
/// would need more under a wider filter than it was saved with is drawn fainter.
pub const UNFUSE_MAX_OPACITY: f64 = 1.0 - 1e-7;

/// How much fainter than folded (relative) the cap [`UNFUSE_MAX_OPACITY`] may draw a Gaussian
/// that [`unfuse`] still calls exact: the rounding of the stored log-scales, amplified where a
/// splat is far narrower than the filter, reaches a few 1e-3 there.
pub const UNFUSE_OPACITY_SLACK: f64 = 1e-2;

/// What [`unfuse`] recovers of a Gaussian folded with a filter: its stored values before the
/// fold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unfused {
    pub log_scale: [f32; 3],
    pub logit_opacity: f32,
    /// Whether drawing the result through `filter` gives back the folded Gaussian: false when
    /// the filter is wider than one of its scales (beyond rounding), so the Gaussian is drawn
    /// at the filter's width, or when its opacity had to be capped at [`UNFUSE_MAX_OPACITY`]
    /// by more than [`UNFUSE_OPACITY_SLACK`]. Exact whenever `filter` is the one it was folded
    /// with.
    pub exact: bool,
}

/// The inverse of [`fuse`]: the stored values of a Gaussian that, drawn through the filter
/// `filter` (≥ 0), is the Gaussian whose folded stored values are `log_scale` and
/// `logit_opacity`. Each scale `s = √(s'² − f²)` (not below [`UNFUSE_MIN_SCALE`]·f) and the
/// opacity `o'·∏ √(s² + f²)/s`, evaluated in f64 in log space as [`fuse`] is. `fuse` of the
/// result gives back the inputs to within the f32 rounding of the stored values (and
/// [`UNFUSE_MIN_SCALE`]'s 5e-5 of the filter) when [`Unfused::exact`]. `filter == 0` returns
/// the inputs unchanged.
pub fn unfuse(log_scale: [f32; 3], logit_opacity: f32, filter: f32) -> Unfused {
    if filter == 0.0 {
        return Unfused {
            log_scale,
            logit_opacity,
            exact: true,
        };
    }
    let ln_f = f64::from(filter).ln();
    let floor = ln_f + UNFUSE_MIN_SCALE.ln();
    // A folded scale is never below the filter it was folded with; one below this filter by
    // more than the stored value's rounding (relative 1e-6) cannot be drawn as it was.
    let mut exact = true;
    let unfused = log_scale.map(|l| {
        let l = f64::from(l);
        // ln(s'² − f²)/2 = ln s' + ½·ln(1 − (f/s')²).
        let d = 2.0 * (ln_f - l);
        if d < 0.0 {
            (l + 0.5 * log1mexp(d)).max(floor)
        } else {
            exact &= l > ln_f - 1e-6;
            floor
        }
    });
    // ln o = ln o' + Σ (ln s'_drawn − ln s): the opacity that the filter brings back to o'.
    let ln_gain: f64 = unfused
        .iter()
        .map(|&l| 0.5 * log_add_exp(2.0 * l, 2.0 * ln_f) - l)
        .sum();
    let mut ln_o = log_sigmoid(f64::from(logit_opacity)) + ln_gain;
    if ln_o > UNFUSE_MAX_OPACITY.ln() {
        // An opaque splat far narrower than the filter recovers its scales to ~1e-3, so its
        // opacity may come out a little above 1: capped, it is drawn that much fainter.
        exact &= ln_o - UNFUSE_MAX_OPACITY.ln() < UNFUSE_OPACITY_SLACK;
        ln_o = UNFUSE_MAX_OPACITY.ln();
    }
    Unfused {
        log_scale: unfused.map(|v| v as f32),
        logit_opacity: (ln_o - log1mexp(ln_o)) as f32,
        exact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sigmoid(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }
    #[test]
    fn fused_values_are_the_filtered_gaussian() {
        // (log-scales, logit, filter): ordinary, a filter far wider than the splat, one far
        // narrower, an opaque splat, a faint one.
        let cases: [([f32; 3], f32, f32); 5] = [
            ([-3.0, -2.5, -4.0], 0.5, 0.03),
            ([-7.0, -6.0, -8.0], -1.0, 0.05),
            ([-1.0, -0.5, -2.0], 2.0, 1e-4),
            ([-3.0, -3.0, -3.0], 9.0, 0.04),
            ([-4.0, -2.0, -5.0], -6.0, 0.02),
        ];
        for (ls, logit, f) in cases {
            let (fused, fused_logit) = fuse(ls, logit, f);
            let f = f64::from(f);
            let mut coef = 1.0;
            for a in 0..3 {
                let s = f64::from(ls[a]).exp();
                let want = (s * s + f * f).sqrt();
                let got = f64::from(fused[a]).exp();
                assert!(
                    (got / want - 1.0).abs() < 1e-6,
                    "{ls:?} axis {a}: {got} vs {want}"
                );
                coef *= s / want;
            }
            let want = sigmoid(f64::from(logit)) * coef;
            let got = sigmoid(f64::from(fused_logit));
            assert!(
                (got / want - 1.0).abs() < 1e-6,
                "{ls:?}: opacity {got} vs {want}"
            );
        }
    }

    /// `unfuse` inverts `fuse`: the stored values come back where the scale resolves them
    /// (above a few hundredths of the filter), and folding the result again gives the folded
    /// values back wherever the filter is the one folded in, however small the splat.
    #[test]
    fn unfuse_inverts_fuse() {
        let mut rng = crate::rng::Rng::new(7);
        for i in 0..20_000 {
            let ls = [0; 3].map(|_| -7.0 + 6.0 * rng.next_f32());
            let logit = -8.0 + 16.0 * rng.next_f32();
            let f = (-6.0 + 4.0 * rng.next_f64()).exp() as f32;
            let (fused, fused_logit) = fuse(ls, logit, f);
            let back = unfuse(fused, fused_logit, f);
            assert!(back.exact, "case {i}: {ls:?} {logit} {f}");
            let (again, again_logit) = fuse(back.log_scale, back.logit_opacity, f);
            for a in 0..3 {
                assert!(
                    (again[a] - fused[a]).abs() < 6e-5,
                    "case {i} axis {a}: {} vs {}",
                    again[a],
                    fused[a]
                );
                if f64::from(ls[a]).exp() > 0.05 * f64::from(f) {
                    assert!(
                        (back.log_scale[a] - ls[a]).abs() < 1e-3,
                        "case {i} axis {a}: {} vs {}",
                        back.log_scale[a],
                        ls[a]
                    );
                }
            }
            let (o, o_again) = (sigmoid(fused_logit.into()), sigmoid(again_logit.into()));
            assert!(
                (o_again / o - 1.0).abs() < UNFUSE_OPACITY_SLACK,
                "case {i}: opacity {o_again} vs {o}"
            );
            if ls.iter().all(|&l| f64::from(l).exp() > 0.05 * f64::from(f)) {
                let (want, got) = (sigmoid(logit.into()), sigmoid(back.logit_opacity.into()));
                assert!((got / want - 1.0).abs() < 1e-3, "case {i}: {got} vs {want}");
            }
        }
        assert_eq!(
            unfuse([-3.0, 1.0, -9.0], 2.5, 0.0),
            Unfused {
                log_scale: [-3.0, 1.0, -9.0],
                logit_opacity: 2.5,
                exact: true
            }
        );
    }

    /// A filter wider than a folded scale (the model saved through a narrower one) cannot be
    /// undone: the axis takes the floor, the opacity is capped below 1, and it says so.
    #[test]
    fn a_wider_filter_than_folded_is_said() {
        let wide = unfuse([(0.01f32).ln(); 3], 0.0, 0.02);
        assert!(!wide.exact);
        assert!(wide
            .log_scale
            .iter()
            .all(|&l| (f64::from(l) - (0.02f64 * UNFUSE_MIN_SCALE).ln()).abs() < 1e-5));
        assert!(wide.logit_opacity.is_finite() && wide.logit_opacity > 15.0);
        // A scale equal to the filter up to the stored value's rounding is exact (the splat
        // was far narrower than the filter it was folded with).
        let f = 0.02f32;
        let (fused, logit) = fuse([-40.0, -3.0, -2.0], 1.0, f);
        assert!(unfuse(fused, logit, f).exact);
    }

    #[test]
    fn no_filter_changes_nothing_and_extremes_stay_finite() {
        let ls = [-3.25f32, 0.125, -9.5];
        assert_eq!(fuse(ls, 1.75, 0.0), (ls, 1.75));
        // An opaque splat whose filter changes almost nothing keeps its logit (1 − o ≈ 5e-5 is
        // not lost to rounding).
        let (_, logit) = fuse([0.0; 3], 10.0, 1e-6);
        assert!((logit - 10.0).abs() < 1e-5, "{logit}");
        // A tiny splat under a wide filter: scales become the filter's, opacity ∏ s/f.
        let (fused, logit) = fuse([-30.0; 3], 0.0, 1.0);
        assert!(
            fused.iter().all(|&v| (0.0..1e-20).contains(&v)),
            "{fused:?}"
        );
        assert!(
            (f64::from(logit) - (0.5f64.ln() - 90.0)).abs() < 1e-4,
            "{logit}"
        );
        // A huge splat: the filter vanishes beside it.
        let (fused, logit) = fuse([20.0; 3], -2.0, 1.0);
        assert_eq!((fused, logit), ([20.0; 3], -2.0));
    }
}
