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
//! (its filter is set from the training cameras: `train::filter3d`).
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
