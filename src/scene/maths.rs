//! The small pieces of Gaussian maths that importers, renderers, exporters and the trainer all
//! need, in one place so they cannot drift apart: the quaternion ↔ rotation matrix of 3DGS, the
//! opacity logit/sigmoid pair (Gaussians store opacities as logits), and the RGB ↔ SH-DC
//! mapping of colours (Gaussians store colour as SH coefficients; see [`super::sh`]).
//!
//! Conventions: quaternions are (w, x, y, z), Hamilton, as COLMAP and 3DGS store them; the
//! matrix is row-major and rotates column vectors (`R · v`).

use super::real::Real;
use super::sh::SH_C0;

/// Row-major rotation matrix of a unit (w, x, y, z) quaternion (3DGS `build_rotation` after
/// its normalisation). The caller normalises: the renderer differentiates through that step.
#[inline]
pub fn quat_to_rot<F: Real>(q: [F; 4]) -> [[F; 3]; 3] {
    let [w, x, y, z] = q;
    let one = F::ONE;
    let two = F::from_f64(2.0);
    [
        [
            one - two * (y * y + z * z),
            two * (x * y - w * z),
            two * (x * z + w * y),
        ],
        [
            two * (x * y + w * z),
            one - two * (x * x + z * z),
            two * (y * z - w * x),
        ],
        [
            two * (x * z - w * y),
            two * (y * z + w * x),
            one - two * (x * x + y * y),
        ],
    ]
}

/// Rotation matrix (row-major) → unit quaternion `(w, x, y, z)` with `w ≥ 0` (Shepperd's method:
/// branch on the largest diagonal combination so the square root never sees a tiny argument).
pub fn rotation_to_quaternion_wxyz(m: &[[f64; 3]; 3]) -> [f64; 4] {
    let tr = m[0][0] + m[1][1] + m[2][2];
    let q = if tr > 0.0 {
        let s = (tr + 1.0).sqrt() * 2.0;
        [
            0.25 * s,
            (m[2][1] - m[1][2]) / s,
            (m[0][2] - m[2][0]) / s,
            (m[1][0] - m[0][1]) / s,
        ]
    } else if m[0][0] > m[1][1] && m[0][0] > m[2][2] {
        let s = (1.0 + m[0][0] - m[1][1] - m[2][2]).sqrt() * 2.0;
        [
            (m[2][1] - m[1][2]) / s,
            0.25 * s,
            (m[0][1] + m[1][0]) / s,
            (m[0][2] + m[2][0]) / s,
        ]
    } else if m[1][1] > m[2][2] {
        let s = (1.0 + m[1][1] - m[0][0] - m[2][2]).sqrt() * 2.0;
        [
            (m[0][2] - m[2][0]) / s,
            (m[0][1] + m[1][0]) / s,
            0.25 * s,
            (m[1][2] + m[2][1]) / s,
        ]
    } else {
        let s = (1.0 + m[2][2] - m[0][0] - m[1][1]).sqrt() * 2.0;
        [
            (m[1][0] - m[0][1]) / s,
            (m[0][2] + m[2][0]) / s,
            (m[1][2] + m[2][1]) / s,
            0.25 * s,
        ]
    };
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let sign = if q[0] < 0.0 { -1.0 } else { 1.0 };
    q.map(|v| sign * v / n)
}

/// `a − b` for f64 3-vectors (cameras, paths, the synthetic scene).
#[inline]
pub(crate) fn sub3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

/// `a · b` for f64 3-vectors.
#[inline]
pub(crate) fn dot3(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// `a × b` for f64 3-vectors.
#[inline]
pub(crate) fn cross3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

/// `[v]×`, the matrix of `x ↦ v × x`.
#[inline]
pub(crate) fn skew3(v: [f64; 3]) -> [[f64; 3]; 3] {
    [[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]]
}

/// `Exp(φ)`: the rotation by `|φ|` radians about `φ/|φ|` (Rodrigues),
/// `I + a·[φ]× + b·[φ]×²` with `a = sin θ/θ`, `b = (1 − cos θ)/θ²`, their Taylor series below
/// θ = 1e-4 (where the closed forms lose digits to cancellation).
pub fn rotation_exp(phi: [f64; 3]) -> [[f64; 3]; 3] {
    let t2 = dot3(phi, phi);
    let (a, b) = if t2 < 1e-8 {
        (1.0 - t2 / 6.0, 0.5 - t2 / 24.0)
    } else {
        let t = t2.sqrt();
        (t.sin() / t, (1.0 - t.cos()) / t2)
    };
    let k = skew3(phi);
    let k2 = mat3_mul(&k, &k);
    std::array::from_fn(|r| {
        std::array::from_fn(|c| f64::from(u8::from(r == c)) + a * k[r][c] + b * k2[r][c])
    })
}

/// The right Jacobian of [`rotation_exp`]: `Exp(φ + δ) ≈ Exp(φ)·Exp(J_r(φ)·δ)` for small δ,
/// `J_r = I − b·[φ]× + c·[φ]×²` with `b = (1 − cos θ)/θ²`, `c = (θ − sin θ)/θ³` (series below
/// θ = 1e-4). It turns a gradient taken in a rotation's own frame into the gradient of its
/// axis-angle parameters: `∂L/∂φ = J_r(φ)ᵀ·∂L/∂ε`.
pub fn rotation_right_jacobian(phi: [f64; 3]) -> [[f64; 3]; 3] {
    let t2 = dot3(phi, phi);
    let (b, c) = if t2 < 1e-8 {
        (0.5 - t2 / 24.0, 1.0 / 6.0 - t2 / 120.0)
    } else {
        let t = t2.sqrt();
        ((1.0 - t.cos()) / t2, (t - t.sin()) / (t2 * t))
    };
    let k = skew3(phi);
    let k2 = mat3_mul(&k, &k);
    std::array::from_fn(|r| {
        std::array::from_fn(|col| f64::from(u8::from(r == col)) - b * k[r][col] + c * k2[r][col])
    })
}

/// `a·b` for row-major 3×3 matrices.
#[inline]
pub(crate) fn mat3_mul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| (0..3).map(|k| a[r][k] * b[k][c]).sum()))
}

/// A rotation `(w, x, y, z)` taking the z axis to the unit vector `n` (and its x axis to a unit
/// vector perpendicular to `n`, made from whichever of the world's y and x axes lies further
/// from `n`): the orientation of a flat Gaussian whose thin axis is the normal `n`.
pub fn quaternion_z_to(n: [f64; 3]) -> [f64; 4] {
    let helper = if n[1].abs() < 0.9 {
        [0.0, 1.0, 0.0]
    } else {
        [1.0, 0.0, 0.0]
    };
    let x = cross3(helper, n);
    let len = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
    let x = x.map(|k| k / len);
    let y = cross3(n, x);
    // Columns x, y, n.
    rotation_to_quaternion_wxyz(&[[x[0], y[0], n[0]], [x[1], y[1], n[1]], [x[2], y[2], n[2]]])
}

/// `q / |q|`; `None` for a zero or non-finite quaternion (which has no rotation).
#[inline]
pub fn normalize_quat<F: Real>(q: [F; 4]) -> Option<[F; 4]> {
    let n = (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]).sqrt();
    (n > F::ZERO && n.is_finite()).then(|| q.map(|v| v / n))
}

/// `ln(p / (1 − p))`: the stored (pre-activation) opacity of an opacity `p`.
#[inline]
pub fn logit(p: f32) -> f32 {
    (p / (1.0 - p)).ln()
}

/// `1 / (1 + e^−x)`: the opacity of a stored logit.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The SH DC coefficient whose colour (`0.5 + C0 · dc`, before the other bands) is `rgb`.
#[inline]
pub fn rgb_to_sh_dc(rgb: f32) -> f32 {
    (rgb - 0.5) / SH_C0 as f32
}

/// The colour of an SH DC coefficient alone: `0.5 + C0 · dc` (unclamped).
#[inline]
pub fn sh_dc_to_rgb(dc: f32) -> f32 {
    dc * SH_C0 as f32 + 0.5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarter_turn_about_z_maps_x_to_y() {
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let r = quat_to_rot([h, 0.0, 0.0, h]);
        let v = [1.0, 0.0, 0.0];
        let rv: Vec<f64> = (0..3)
            .map(|i| (0..3).map(|j| r[i][j] * v[j]).sum())
            .collect();
        assert!((rv[0]).abs() < 1e-15 && (rv[1] - 1.0).abs() < 1e-15 && rv[2].abs() < 1e-15);
        assert_eq!(normalize_quat([0.0f32; 4]), None);
        assert_eq!(
            normalize_quat([2.0f32, 0.0, 0.0, 0.0]),
            Some([1.0, 0.0, 0.0, 0.0])
        );
    }

    #[test]
    fn logit_inverts_sigmoid_and_dc_inverts_rgb() {
        for p in [0.01f32, 0.1, 0.5, 0.9] {
            assert!((sigmoid(logit(p)) - p).abs() < 1e-6);
        }
        for c in [0.0f32, 0.25, 1.0] {
            assert!((sh_dc_to_rgb(rgb_to_sh_dc(c)) - c).abs() < 1e-6);
        }
        // The full-precision constant (a copy once truncated it to 0.282_094_8).
        assert_eq!(SH_C0, 0.282_094_791_773_878_14);
        assert_eq!(rgb_to_sh_dc(1.0), 0.5 / SH_C0 as f32);
    }

    #[test]
    fn quaternion_z_to_turns_z_onto_the_normal() {
        for n in [
            [0.0, 0.0, 1.0],
            [0.0, 0.0, -1.0],
            [0.0, 1.0, 0.0],
            [0.6, -0.8, 0.0],
            [0.48, 0.6, 0.64],
        ] {
            let m = quat_to_rot(quaternion_z_to(n));
            for k in 0..3 {
                assert!((m[k][2] - n[k]).abs() < 1e-12, "{n:?}: {m:?}");
            }
            // A rotation: its x column is a unit vector perpendicular to n.
            let x = [m[0][0], m[1][0], m[2][0]];
            assert!((x.iter().map(|v| v * v).sum::<f64>() - 1.0).abs() < 1e-12);
            assert!((x[0] * n[0] + x[1] * n[1] + x[2] * n[2]).abs() < 1e-12);
        }
    }
}
