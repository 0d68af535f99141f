//! Real spherical harmonics up to degree 3, as the original 3D Gaussian Splatting evaluates
//! them for view-dependent colour.
//!
//! Owns: the basis constants, the basis in the 3DGS order and sign convention, and its
//! derivatives. Colour for a unit direction `d` is `max(Σ_k basis_k(d)·coeff_k + 0.5, 0)` per
//! channel; the `+0.5` and clamp live with the callers ([`crate::render`]), this module only
//! evaluates the linear part.
//!
//! Invariants: `basis` and `basis_grad` take a *normalised* direction (the polynomials below
//! equal the true SH only on the unit sphere); coefficient `k` of degree `l` sits at index
//! `l² + (m + l)` exactly as in 3DGS (`f_dc` is index 0, `f_rest` follow in this order).

use super::real::Real;

/// Y₀⁰ = 1/(2√π).
pub const SH_C0: f64 = 0.282_094_791_773_878_14;
/// √(3/(4π)); degree-1 basis is (−y, z, −x)·SH_C1.
pub const SH_C1: f64 = 0.488_602_511_902_919_9;
/// Degree-2 constants for (xy, yz, 2z²−x²−y², xz, x²−y²).
pub const SH_C2: [f64; 5] = [
    1.092_548_430_592_079_2,
    -1.092_548_430_592_079_2,
    0.315_391_565_252_520_05,
    -1.092_548_430_592_079_2,
    0.546_274_215_296_039_6,
];
/// Degree-3 constants for (y(3x²−y²), xyz, y(4z²−x²−y²), z(2z²−3x²−3y²), x(4z²−x²−y²),
/// z(x²−y²), x(x²−3y²)).
pub const SH_C3: [f64; 7] = [
    -0.590_043_589_926_643_5,
    2.890_611_442_640_554,
    -0.457_045_799_464_465_8,
    0.373_176_332_590_115_4,
    -0.457_045_799_464_465_8,
    1.445_305_721_320_277,
    -0.590_043_589_926_643_5,
];

/// Number of basis functions up to degree 3.
pub const MAX_BASIS: usize = 16;

/// Evaluates the basis functions of degrees `0..=degree` (`degree` ≤ 3) at the unit direction
/// `d`; entries beyond `(degree+1)²` are left untouched.
#[inline]
pub fn basis<F: Real>(d: [F; 3], degree: u32, out: &mut [F; MAX_BASIS]) {
    let c = F::from_f64;
    out[0] = c(SH_C0);
    if degree == 0 {
        return;
    }
    let [x, y, z] = d;
    let c1 = c(SH_C1);
    out[1] = -c1 * y;
    out[2] = c1 * z;
    out[3] = -c1 * x;
    if degree == 1 {
        return;
    }
    let (xx, yy, zz) = (x * x, y * y, z * z);
    let (xy, yz, xz) = (x * y, y * z, x * z);
    out[4] = c(SH_C2[0]) * xy;
    out[5] = c(SH_C2[1]) * yz;
    out[6] = c(SH_C2[2]) * (c(2.0) * zz - xx - yy);
    out[7] = c(SH_C2[3]) * xz;
    out[8] = c(SH_C2[4]) * (xx - yy);
    if degree == 2 {
        return;
    }
    out[9] = c(SH_C3[0]) * y * (c(3.0) * xx - yy);
    out[10] = c(SH_C3[1]) * xy * z;
    out[11] = c(SH_C3[2]) * y * (c(4.0) * zz - xx - yy);
    out[12] = c(SH_C3[3]) * z * (c(2.0) * zz - c(3.0) * xx - c(3.0) * yy);
    out[13] = c(SH_C3[4]) * x * (c(4.0) * zz - xx - yy);
    out[14] = c(SH_C3[5]) * z * (xx - yy);
    out[15] = c(SH_C3[6]) * x * (xx - c(3.0) * yy);
}

/// Partial derivatives `∂basis_k/∂(x, y, z)` of the basis polynomials of degrees
/// `0..=degree` at `d` (the polynomial extension off the sphere; chain through the
/// normalisation separately). Entries beyond `(degree+1)²` are left untouched.
#[inline]
pub fn basis_grad<F: Real>(d: [F; 3], degree: u32, out: &mut [[F; 3]; MAX_BASIS]) {
    let c = F::from_f64;
    let z0 = F::ZERO;
    out[0] = [z0; 3];
    if degree == 0 {
        return;
    }
    let [x, y, z] = d;
    let c1 = c(SH_C1);
    out[1] = [z0, -c1, z0];
    out[2] = [z0, z0, c1];
    out[3] = [-c1, z0, z0];
    if degree == 1 {
        return;
    }
    let (xx, yy, zz) = (x * x, y * y, z * z);
    let two = c(2.0);
    out[4] = [c(SH_C2[0]) * y, c(SH_C2[0]) * x, z0];
    out[5] = [z0, c(SH_C2[1]) * z, c(SH_C2[1]) * y];
    out[6] = [
        -two * c(SH_C2[2]) * x,
        -two * c(SH_C2[2]) * y,
        c(4.0) * c(SH_C2[2]) * z,
    ];
    out[7] = [c(SH_C2[3]) * z, z0, c(SH_C2[3]) * x];
    out[8] = [two * c(SH_C2[4]) * x, -two * c(SH_C2[4]) * y, z0];
    if degree == 2 {
        return;
    }
    let three = c(3.0);
    let four = c(4.0);
    let six = c(6.0);
    let k = SH_C3.map(c);
    out[9] = [six * k[0] * x * y, k[0] * (three * xx - three * yy), z0];
    out[10] = [k[1] * y * z, k[1] * x * z, k[1] * x * y];
    out[11] = [
        -two * k[2] * x * y,
        k[2] * (four * zz - xx - three * yy),
        c(8.0) * k[2] * y * z,
    ];
    out[12] = [
        -six * k[3] * x * z,
        -six * k[3] * y * z,
        k[3] * (six * zz - three * xx - three * yy),
    ];
    out[13] = [
        k[4] * (four * zz - three * xx - yy),
        -two * k[4] * x * y,
        c(8.0) * k[4] * x * z,
    ];
    out[14] = [two * k[5] * x * z, -two * k[5] * y * z, k[5] * (xx - yy)];
    out[15] = [k[6] * (three * xx - three * yy), -six * k[6] * x * y, z0];
}

/// `Σ_k basis_k(d)·coeffs[k]` per RGB channel over degrees `0..=degree`; `coeffs` must hold at
/// least `(degree+1)²` entries. This is the raw SH value, before `+0.5` and the clamp.
#[inline]
pub fn eval<F: Real>(d: [F; 3], degree: u32, coeffs: &[[F; 3]]) -> [F; 3] {
    let mut b = [F::ZERO; MAX_BASIS];
    basis(d, degree, &mut b);
    let n = ((degree + 1) * (degree + 1)) as usize;
    let mut out = [F::ZERO; 3];
    for (bk, ck) in b[..n].iter().zip(&coeffs[..n]) {
        for ch in 0..3 {
            out[ch] += *bk * ck[ch];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factorial(n: u32) -> f64 {
        (1..=n).map(f64::from).product()
    }

    /// Real-SH normalisation √((2l+1)/(4π)·(l−|m|)!/(l+|m|)!), times √2 for m ≠ 0.
    fn k(l: u32, m: u32) -> f64 {
        let base = ((2 * l + 1) as f64 / (4.0 * std::f64::consts::PI) * factorial(l - m)
            / factorial(l + m))
        .sqrt();
        if m == 0 {
            base
        } else {
            base * std::f64::consts::SQRT_2
        }
    }

    #[test]
    fn constants_match_the_normalisation_formula() {
        // |constant| = K(l,m) × the integer factor that turns P_l^|m|(cosθ)·{cos,sin}(mφ) into
        // the Cartesian polynomial used by the basis (on the unit sphere):
        //   P_1^0 = z, P_1^1·cosφ = x                        → factor 1
        //   P_2^0 = (2z²−x²−y²)/2 → ½; P_2^1 = 3z·sinθ → 3 (xz, yz)
        //   P_2^2 = 3sin²θ, sin²θ·cos2φ = x²−y² → 3, sin²θ·sin2φ = 2xy → 6
        //   P_3^0 = z(2z²−3x²−3y²)/2 → ½; P_3^1 = (3/2)(4z²−x²−y²)·sinθ → 3/2
        //   P_3^2 = 15z·sin²θ → 15 for z(x²−y²), 30 for xyz; P_3^3 = 15sin³θ → 15
        let close = |a: f64, b: f64| (a.abs() - b).abs() < 1e-14;
        assert!(close(SH_C0, k(0, 0)));
        assert!(close(SH_C1, k(1, 0)) && close(SH_C1, k(1, 1)));
        assert!(close(SH_C2[0], 6.0 * k(2, 2)));
        assert!(close(SH_C2[1], 3.0 * k(2, 1)));
        assert!(close(SH_C2[2], 0.5 * k(2, 0)));
        assert!(close(SH_C2[3], 3.0 * k(2, 1)));
        assert!(close(SH_C2[4], 3.0 * k(2, 2)));
        assert!(close(SH_C3[0], 15.0 * k(3, 3)));
        assert!(close(SH_C3[1], 30.0 * k(3, 2)));
        assert!(close(SH_C3[2], 1.5 * k(3, 1)));
        assert!(close(SH_C3[3], 0.5 * k(3, 0)));
        assert!(close(SH_C3[4], 1.5 * k(3, 1)));
        assert!(close(SH_C3[5], 15.0 * k(3, 2)));
        assert!(close(SH_C3[6], 15.0 * k(3, 3)));
    }

    fn unit(v: [f64; 3]) -> [f64; 3] {
        let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        v.map(|x| x / n)
    }

    #[test]
    fn basis_is_orthonormal_on_the_sphere() {
        // Monte-Carlo-free check: a product Gauss–Legendre × uniform-φ quadrature of order 8
        // integrates polynomials of degree ≤ 6 in (x, y, z) exactly, which covers every
        // product of two degree-3 basis functions. 16 φ samples integrate trig degree ≤ 15.
        let nodes = gauss_legendre_8();
        let mut gram = [[0.0f64; 16]; 16];
        let nphi = 16;
        for &(ct, w) in &nodes {
            let st = (1.0 - ct * ct).sqrt();
            for j in 0..nphi {
                let phi = std::f64::consts::TAU * j as f64 / nphi as f64;
                let d = [st * phi.cos(), st * phi.sin(), ct];
                let mut b = [0.0; 16];
                basis(d, 3, &mut b);
                let dw = w * std::f64::consts::TAU / nphi as f64;
                for a in 0..16 {
                    for c in 0..16 {
                        gram[a][c] += dw * b[a] * b[c];
                    }
                }
            }
        }
        for (a, row) in gram.iter().enumerate() {
            for (c, &g) in row.iter().enumerate() {
                let want = if a == c { 1.0 } else { 0.0 };
                assert!((g - want).abs() < 1e-12, "gram[{a}][{c}] = {g}");
            }
        }
    }

    fn gauss_legendre_8() -> Vec<(f64, f64)> {
        // Nodes/weights of the 8-point Gauss–Legendre rule on [−1, 1], computed by Newton
        // iteration on P_8 (so no table is copied).
        let n = 8;
        (0..n)
            .map(|i| {
                let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
                let mut dp = 0.0;
                for _ in 0..100 {
                    let (mut p0, mut p1) = (1.0, x);
                    for k in 2..=n {
                        let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                        p0 = p1;
                        p1 = p2;
                    }
                    dp = n as f64 * (x * p1 - p0) / (x * x - 1.0);
                    x -= p1 / dp;
                }
                (x, 2.0 / ((1.0 - x * x) * dp * dp))
            })
            .collect()
    }

    #[test]
    fn basis_grad_matches_central_differences() {
        // The polynomials are smooth: central differences with h = 1e-6 have truncation error
        // O(h²·|f'''|) ≈ 1e-11 and rounding O(ε/h) ≈ 1e-10, so 1e-8 is a safe bound.
        const TOL: f64 = 1e-8;
        let h = 1e-6;
        for d in [[0.3, -0.5, 0.8], [-0.9, 0.2, 0.1], [0.0, 0.0, 1.0]] {
            let d = unit(d);
            let mut g = [[0.0; 3]; 16];
            basis_grad(d, 3, &mut g);
            for axis in 0..3 {
                let (mut dp, mut dm) = (d, d);
                dp[axis] += h;
                dm[axis] -= h;
                let (mut bp, mut bm) = ([0.0; 16], [0.0; 16]);
                basis(dp, 3, &mut bp);
                basis(dm, 3, &mut bm);
                for k in 0..16 {
                    let fd = (bp[k] - bm[k]) / (2.0 * h);
                    assert!((fd - g[k][axis]).abs() < TOL, "k={k} axis={axis}");
                }
            }
        }
    }

    #[test]
    fn eval_respects_degree_and_dc() {
        let coeffs: Vec<[f64; 3]> = (0..16).map(|k| [k as f64, 1.0, -1.0]).collect();
        let d = unit([0.2, 0.4, 0.9]);
        let c0 = eval(d, 0, &coeffs);
        assert_eq!(c0, [0.0, SH_C0, -SH_C0]);
        // Degree 1 adds exactly the three linear terms.
        let c1 = eval(d, 1, &coeffs);
        let want = SH_C1 * (-d[1] * 1.0 + d[2] * 2.0 - d[0] * 3.0);
        assert!((c1[0] - want).abs() < 1e-15);
    }
}
