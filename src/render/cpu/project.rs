//! Per-Gaussian projection (`project_fwd`) and its adjoint (`project_bwd`), named like the CUDA
//! kernels they are the reference for.
//!
//! Forward, per Gaussian (the conventions of 3DGS / gsplat; camera axes and pixel centres as
//! [`crate::scene::camera`] documents them):
//! camera-space mean `t = W·μ + w`; culled when `z ≤ 0.01` (or not finite); `Σ = R S Sᵀ Rᵀ`
//! from the normalised quaternion and `exp(log_scale)`; `Σ2d = J W Σ Wᵀ Jᵀ + 0.3·I` with the
//! clamped EWA Jacobian; culled when `det ≤ 0`; `conic = Σ2d⁻¹` (inverted at an exact
//! power-of-two scale, [`cov2_scale`], so huge splats stay finite);
//! `radius = ceil(3·√λ_max)` with `λ_max = mid + √max(0.1, mid² − det)` as 3DGS computes it;
//! culled when its bounding box touches no tile (binning then narrows the tiles it is drawn in,
//! see [`binning`](super::binning)); colour from SH along `normalize(μ − centre)`.
//! Opacity `sigmoid(logit)`, and in antialiased mode ([`RenderOptions::antialiased`](crate::render::RenderOptions))
//! times the compensation `√max(0, det Σ2d_raw / det Σ2d)` of the undilated covariance against
//! the dilated one ([`aa_compensation`]), as Mip-Splatting and gsplat define it.
//! Through Mip-Splatting's 3D smoothing filter ([`GaussianParams::filter_3d`], a standard
//! deviation `f` per Gaussian; [`crate::scene::filter3d`]) each scale drawn is `s' = √(s² + f²)`
//! and the opacity is multiplied by `∏ s/s'` (before the compensation). The filter is a constant
//! of the render, not a parameter: the backward takes `∂L/∂ln s = ∂L/∂ln s'·(1 − f²/s'²) +
//! (∂L/∂o_drawn)·o_drawn·f²/s'²`.
//!
//! Through an equidistant fisheye camera ([`Projection::Fisheye`](crate::scene::camera::Projection))
//! the 2D mean is `(fx·θ·x/r + cx, fy·θ·y/r + cy)` with `r = √(x² + y²)`, `θ = atan2(r, z)`,
//! and `J` is that map's Jacobian at the mean, unclamped (`equidistant` gives its radial
//! terms, by series near the axis); the backward differentiates it through the mean
//! (`fisheye_bwd`). Everything else is the pinhole's.
//!
//! Invariant: a culled Gaussian has `radius == 0` and every other field finite-but-meaningless;
//! a kept one has finite mean, conic, colour and opacity, so no NaN can reach an image. Zero or
//! non-finite quaternions, non-finite means / scales / opacities / SH coefficients are culled
//! (skipped), never an error: one bad Gaussian must not stop training.
//!
//! Backward recomputes the forward intermediates from the parameters (cheaper than storing
//! them) and chains `∂L/∂(mean2d, conic, colour, opacity)` to the stored parameters.
//! The Jacobian clamp is differentiated exactly, as gsplat does: when `x/z` is clamped,
//! `tx = lim·z`, so `J02 = −fx·lim/z` still depends on `z` (the original 3DGS drops that term
//! and differs from finite differences there; we keep the exact derivative).
//!
//! The antialiasing compensation `c = √r`, `r = det A / det B` with `B = A + εI` (ε = 0.3), is
//! differentiated through `B` alone, since `A = B − εI`: with `det A·A⁻¹ = adj A = adj B − εI`,
//! `∂r/∂B = (adj B − εI)/det B − r·B⁻¹ = (1 − r)·K − ε·det K·I` in terms of the conic
//! `K = B⁻¹` (each matrix entry a separate variable), so `∂L/∂B += ∂L/∂c · ∂r/∂B / (2c)`; where
//! `c = 0` the splat is invisible and passes no gradient through `c`.
//!
//! The pose gradient (camera pose optimisation) is `∂L/∂ξ` at `ξ = 0` for the camera moved in
//! its own frame by `ξ = (ρ, φ)` ([`Pose::perturbed`](crate::scene::camera::Pose::perturbed)):
//! to first order the camera-space mean becomes `t − ρ − φ×t`, the camera-space covariance
//! `Σc = W Σ Wᵀ` becomes `(I − [φ]×)·Σc·(I + [φ]×)` and the view direction's origin moves by
//! `Wᵀρ`. So each Gaussian adds `−∂L/∂t − W·∂L/∂v` to `∂L/∂ρ` (`v = μ − centre`, through the
//! SH colour) and `−t × ∂L/∂t + 2·(A₁₂, A₂₀, A₀₁)` to `∂L/∂φ`, where `A = G·Σc − Σc·G` with
//! `G = ∂L/∂Σc = Jᵀ·∂L/∂Σ2d·J`. Rotations about the centre leave `v` unchanged.

// Small fixed-size matrix products read best with explicit indices.
#![allow(clippy::needless_range_loop)]

use rayon::prelude::*;

use super::rasterize::floor_clamped;
use super::{CameraF, GaussianParams, Splat, SplatGrad};
use crate::render::GaussianGrads;
use crate::scene::gaussians::Gaussians;
use crate::scene::maths::quat_to_rot;
use crate::scene::real::Real;
use crate::scene::sh::{self, MAX_BASIS};

/// Camera-space depth below which a Gaussian is culled (gsplat's default near plane).
pub const NEAR_PLANE: f64 = 0.01;
/// Low-pass dilation added to both diagonal entries of Σ2d (pixels²): keeps every splat at
/// least ~1 pixel wide, as in 3DGS.
pub const DILATION: f64 = 0.3;
/// How far outside the field of view (as a fraction of tan(fov/2)) the Jacobian is evaluated
/// before being clamped: 3DGS's `1.3·tan_fov` limit.
pub const JACOBIAN_CLAMP_MARGIN: f64 = 0.3;
/// Side of a screen tile in pixels.
pub const TILE_SIZE: u32 = 16;

type M3<F> = [[F; 3]; 3];

/// Adjoint of [`quat_to_rot`]: `∂L/∂q̂` from `∂L/∂R` at the normalised `q`.
#[inline]
fn quat_to_rot_bwd<F: Real>(q: [F; 4], dr: &M3<F>) -> [F; 4] {
    let [w, x, y, z] = q;
    let two = F::from_f64(2.0);
    let four = F::from_f64(4.0);
    let dw = two
        * (-z * dr[0][1] + y * dr[0][2] + z * dr[1][0] - x * dr[1][2] - y * dr[2][0]
            + x * dr[2][1]);
    let dx = -four * x * (dr[1][1] + dr[2][2])
        + two
            * (y * dr[0][1] + z * dr[0][2] + y * dr[1][0] - w * dr[1][2]
                + z * dr[2][0]
                + w * dr[2][1]);
    let dy = -four * y * (dr[0][0] + dr[2][2])
        + two
            * (x * dr[0][1] + w * dr[0][2] + x * dr[1][0] + z * dr[1][2] - w * dr[2][0]
                + z * dr[2][1]);
    let dz = -four * z * (dr[0][0] + dr[1][1])
        + two
            * (-w * dr[0][1]
                + x * dr[0][2]
                + w * dr[1][0]
                + y * dr[1][2]
                + x * dr[2][0]
                + y * dr[2][1]);
    [dw, dx, dy, dz]
}

#[inline]
fn mat_vec<F: Real>(m: &M3<F>, v: [F; 3]) -> [F; 3] {
    [
        m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
        m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
        m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2],
    ]
}

#[inline]
fn mat_t_vec<F: Real>(m: &M3<F>, v: [F; 3]) -> [F; 3] {
    [
        m[0][0] * v[0] + m[1][0] * v[1] + m[2][0] * v[2],
        m[0][1] * v[0] + m[1][1] * v[1] + m[2][1] * v[2],
        m[0][2] * v[0] + m[1][2] * v[1] + m[2][2] * v[2],
    ]
}

/// Everything forward computes for one Gaussian that backward needs again.
struct Geometry<F> {
    t: [F; 3],
    /// Whether x/z, y/z were clamped by the Jacobian limits.
    clamped: [bool; 2],
    /// Normalised quaternion and its pre-normalisation length.
    qn: [F; 4],
    qlen: F,
    rot: M3<F>,
    /// The scales drawn: `exp(log_scale)`, or `√(exp(log_scale)² + f²)` through a 3D filter.
    scale: [F; 3],
    /// Through a 3D filter: `∏ s/s'`, the opacity's factor; else 1.
    filter_coef: F,
    cov3: M3<F>,
    /// `T = J·W` (2×3).
    tmat: [[F; 3]; 2],
    /// Dilated Σ2d as (a, b, c).
    cov2: [F; 3],
    /// Σ2d before the dilation (a, b, c): the antialiasing compensation's numerator.
    cov2_raw: [F; 3],
    j: [[F; 3]; 2],
    /// Where the mean lands in the image (pixels), by the camera's projection.
    mean2d: [F; 2],
}

#[inline]
fn geometry<F: Real>(
    mean: [F; 3],
    log_scale: [F; 3],
    quat: [F; 4],
    filter: Option<F>,
    cam: &CameraF<F>,
) -> Option<Geometry<F>> {
    let t = {
        let r = mat_vec(&cam.rot, mean);
        [
            r[0] + cam.trans[0],
            r[1] + cam.trans[1],
            r[2] + cam.trans[2],
        ]
    };
    // `!(z > near)` also rejects NaN.
    let in_front = t[2] > F::from_f64(NEAR_PLANE) && t[0].is_finite() && t[1].is_finite();
    if !in_front {
        return None;
    }
    let qlen2 = quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3];
    let usable = qlen2 > F::ZERO && qlen2.is_finite();
    if !usable {
        return None;
    }
    let qlen = qlen2.sqrt();
    let qn = quat.map(|v| v / qlen);
    let rot = quat_to_rot(qn);
    let mut scale = log_scale.map(|v| v.exp());
    let mut filter_coef = F::ONE;
    if let Some(f) = filter {
        // Σ + f²·I keeps Σ's axes: s' = √(s² + f²) on each, and the opacity keeps the
        // Gaussian's integral, × √(det Σ / det(Σ + f²·I)) = ∏ s/s'.
        let f2 = f * f;
        for a in 0..3 {
            let s2 = scale[a] * scale[a] + f2;
            filter_coef *= scale[a] / s2.sqrt();
            scale[a] = s2.sqrt();
        }
    }
    // Σ = M Mᵀ with M = R·diag(s).
    let mut m = rot;
    for row in m.iter_mut() {
        for (v, s) in row.iter_mut().zip(scale) {
            *v *= s;
        }
    }
    let mut cov3 = [[F::ZERO; 3]; 3];
    for i in 0..3 {
        for k in 0..3 {
            cov3[i][k] = m[i][0] * m[k][0] + m[i][1] * m[k][1] + m[i][2] * m[k][2];
        }
    }
    let (x, y, z) = (t[0], t[1], t[2]);
    let (j, clamped, mean2d) = if cam.fisheye {
        // The equidistant projection's Jacobian (module doc), never clamped.
        let e = equidistant(x, y, z);
        let (fx, fy) = (cam.fx, cam.fy);
        let axy = e.a * x * y;
        let j = [
            [fx * (e.s + e.a * x * x), fx * axy, -fx * x / e.rho2],
            [fy * axy, fy * (e.s + e.a * y * y), -fy * y / e.rho2],
        ];
        let mean2d = [fx * e.s * x + cam.cx, fy * e.s * y + cam.cy];
        (j, [false; 2], mean2d)
    } else {
        let txtz = x / z;
        let tytz = y / z;
        let cx_ = txtz.max(-cam.lim_x_neg).min(cam.lim_x_pos);
        let cy_ = tytz.max(-cam.lim_y_neg).min(cam.lim_y_pos);
        let clamped = [cx_ != txtz, cy_ != tytz];
        let (tx, ty) = (cx_ * z, cy_ * z);
        let rz = F::ONE / z;
        let rz2 = rz * rz;
        let j = [
            [cam.fx * rz, F::ZERO, -cam.fx * tx * rz2],
            [F::ZERO, cam.fy * rz, -cam.fy * ty * rz2],
        ];
        let mean2d = [cam.fx * x / z + cam.cx, cam.fy * y / z + cam.cy];
        (j, clamped, mean2d)
    };
    // T = J·W.
    let mut tmat = [[F::ZERO; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            tmat[r][c] =
                j[r][0] * cam.rot[0][c] + j[r][1] * cam.rot[1][c] + j[r][2] * cam.rot[2][c];
        }
    }
    // Σ2d = T Σ Tᵀ.
    let mut ts = [[F::ZERO; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            ts[r][c] = tmat[r][0] * cov3[0][c] + tmat[r][1] * cov3[1][c] + tmat[r][2] * cov3[2][c];
        }
    }
    let dot = |a: &[F; 3], b: &[F; 3]| a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
    let dil = F::from_f64(DILATION);
    let cov2_raw = [
        dot(&ts[0], &tmat[0]),
        dot(&ts[0], &tmat[1]),
        dot(&ts[1], &tmat[1]),
    ];
    let cov2 = [cov2_raw[0] + dil, cov2_raw[1], cov2_raw[2] + dil];
    Some(Geometry {
        t,
        clamped,
        qn,
        qlen,
        rot,
        scale,
        filter_coef,
        cov3,
        tmat,
        cov2,
        cov2_raw,
        j,
        mean2d,
    })
}

/// `w = r²/z²` below which `equidistant` sums series instead of the closed forms, which
/// cancel near the optical axis (and divide by `r = 0` on it).
pub const EQUIDISTANT_SERIES_BELOW: f64 = 1e-2;

/// The equidistant projection's radial terms at camera point `(x, y, z)`, `z > 0`, with
/// `r² = x² + y²`, `ρ² = r² + z²`, `θ = atan2(r, z)`: `s = θ/r` (the point lands at
/// `(fx·s·x + cx, fy·s·y + cy)`), `a = (∂s/∂r)/r` and `b = (∂a/∂r)/r` (so `∂s/∂x = a·x`,
/// `∂a/∂x = b·x`), and `ρ²` (`∂s/∂z = −1/ρ²`, `∂a/∂z = 2/ρ⁴`).
pub(crate) struct Equidistant<F> {
    pub s: F,
    pub a: F,
    pub b: F,
    pub rho2: F,
}

/// [`Equidistant`] at `(x, y, z)`: closed forms `a = (z/ρ² − s)/r²`, `b = (−2z/ρ⁴ − 3a)/r²`,
/// or, for `w = r²/z² <` [`EQUIDISTANT_SERIES_BELOW`], the series of `atan`
/// (`s = (1/z)·Σ (−1)ᵏ wᵏ/(2k+1)` and its derivatives) to six terms, exact to ~1e-13 there.
#[inline]
pub(crate) fn equidistant<F: Real>(x: F, y: F, z: F) -> Equidistant<F> {
    let r2 = x * x + y * y;
    let z2 = z * z;
    let rho2 = r2 + z2;
    let w = r2 / z2;
    let c = F::from_f64;
    if w < c(EQUIDISTANT_SERIES_BELOW) {
        let rz = F::ONE / z;
        let rz3 = rz * rz * rz;
        let rz5 = rz3 * rz * rz;
        let s = rz
            * (F::ONE
                + w * (c(-1.0 / 3.0)
                    + w * (c(1.0 / 5.0)
                        + w * (c(-1.0 / 7.0) + w * (c(1.0 / 9.0) + w * c(-1.0 / 11.0))))));
        let a = rz3
            * (c(-2.0 / 3.0)
                + w * (c(4.0 / 5.0)
                    + w * (c(-6.0 / 7.0)
                        + w * (c(8.0 / 9.0) + w * (c(-10.0 / 11.0) + w * c(12.0 / 13.0))))));
        let b = rz5
            * (c(8.0 / 5.0)
                + w * (c(-24.0 / 7.0)
                    + w * (c(16.0 / 3.0)
                        + w * (c(-80.0 / 11.0) + w * (c(120.0 / 13.0) + w * c(-56.0 / 5.0))))));
        return Equidistant { s, a, b, rho2 };
    }
    let r = r2.sqrt();
    let s = r.atan2(z) / r;
    let a = (z / rho2 - s) / r2;
    let b = (c(-2.0) * z / (rho2 * rho2) - c(3.0) * a) / r2;
    Equidistant { s, a, b, rho2 }
}

#[inline]
fn view_dir<F: Real>(mean: [F; 3], cam: &CameraF<F>) -> ([F; 3], F) {
    let v = [
        mean[0] - cam.centre[0],
        mean[1] - cam.centre[1],
        mean[2] - cam.centre[2],
    ];
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    (v.map(|c| c / n), n)
}

/// Half-open tile range `[x0, x1) × [y0, y1)` touched by the box `mean ± half` (half-widths
/// `[rx, ry]`): tile `tx` covers pixels `[16·tx, 16·tx + 16)`, and is touched when that
/// interval meets the closed interval `[mx − rx, mx + rx]`. Clamped to the grid, so huge or
/// infinite half-widths are safe. Each bound is monotone in its half-width, so the range of a
/// box with the smaller half-width per axis is exactly the intersection of two boxes' ranges
/// about the same mean (what binning relies on).
#[inline]
pub fn tile_rect<F: Real>(mean2d: [F; 2], half: [F; 2], tiles_x: u32, tiles_y: u32) -> [u32; 4] {
    let ts = F::from_f64(TILE_SIZE as f64);
    // Exact floors without `floorf` (a library call on baseline x86-64), clamped to the grid;
    // a NaN gives the empty range at 0.
    let floor = |v: F, hi: u32| floor_clamped(v, 0, hi as i32);
    let clampi = |v: i32, hi: u32| v.clamp(0, hi as i32) as u32;
    let [rx, ry] = half;
    let x0 = clampi(floor((mean2d[0] - rx) / ts, tiles_x), tiles_x);
    let x1 = clampi(floor((mean2d[0] + rx) / ts, tiles_x) + 1, tiles_x);
    let y0 = clampi(floor((mean2d[1] - ry) / ts, tiles_y), tiles_y);
    let y1 = clampi(floor((mean2d[1] + ry) / ts, tiles_y) + 1, tiles_y);
    [x0, x1, y0, y1]
}

/// Entries of `Σ2d` above which [`cov2_scale`] rescales: far below the `√f32::MAX ≈ 1.8e19`
/// where `a·c` overflows in single precision.
pub const COV2_RESCALE_ABOVE: f64 = (1u64 << 40) as f64;

/// `(2⁻ᵏ, 2ᵏ)` with `k` even and `max(a, c)·2⁻ᵏ ∈ [1, 4)` when `max(a, c) > 2⁴⁰`, else `(1, 1)`.
///
/// A splat whose 2D standard deviation exceeds ~4·10⁹ px (log-scale ≈ 20 seen from a few units)
/// has `a·c` and `mid²` beyond `f32::MAX`: the determinant would be infinite and the splat
/// culled, although it covers the image with nearly its full opacity (the float64 reference
/// draws it). Scaling `Σ2d` by an even power of two before inverting is exact in binary floating
/// point (no rounding, no overflow, for every splat whose `Σ2d` is finite), so `det`, the
/// conic and `λ_max` are bit-identical to the unscaled formulas wherever those are finite; the
/// CUDA `project_fwd` applies the same rule. The backward pass needs nothing: it works from the
/// conic (`dΣ2 = −K·Gc·K`), never from the determinant.
#[inline]
pub fn cov2_scale<F: Real>(cov2: [F; 3]) -> (F, F) {
    let m = cov2[0].max(cov2[2]).to_f64();
    if !(m > COV2_RESCALE_ABOVE && m.is_finite()) {
        return (F::ONE, F::ONE);
    }
    // Unbiased binary exponent of a normal f64 (m > 2⁴⁰ is normal), rounded down to even.
    let e = ((m.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let k = e & !1;
    (F::from_f64(2f64.powi(-k)), F::from_f64(2f64.powi(k)))
}

/// The antialiasing compensation `(√r, r)` with `r = max(0, det Σ2d_raw / det Σ2d)`, both
/// determinants taken at the `down` scale of [`cov2_scale`] (exact, and the ratio does not
/// depend on it). `r ∈ [0, 1)` for a positive semi-definite `Σ2d_raw`; a degenerate or
/// non-finite one gives 0 (an invisible splat), never NaN.
#[inline]
pub fn aa_compensation<F: Real>(cov2: [F; 3], cov2_raw: [F; 3], down: F) -> (F, F) {
    let [a, b, c] = cov2.map(|v| v * down);
    let [ar, br, cr] = cov2_raw.map(|v| v * down);
    let ratio = (ar * cr - br * br) / (a * c - b * b);
    // `!(x > 0)` also maps NaN to 0.
    let r = if ratio > F::ZERO { ratio } else { F::ZERO };
    (r.sqrt(), r)
}

/// Projects one Gaussian; `None` when culled.
#[inline]
fn project_one<F: Real>(
    p: &GaussianParams<'_, F>,
    i: usize,
    cam: &CameraF<F>,
    degree: u32,
    antialiased: bool,
) -> Option<Splat<F>> {
    let filter = p.filter_3d.map(|f| f[i]);
    let g = geometry(p.means[i], p.log_scales[i], p.rotations[i], filter, cam)?;
    // Inverted at a power-of-two scale (see `cov2_scale`): exact, so identical to the unscaled
    // formulas wherever those do not overflow, and finite for huge splats where `a·c` would.
    let (down, up) = cov2_scale(g.cov2);
    let [a, b, c] = g.cov2.map(|v| v * down);
    let det = a * c - b * b;
    let invertible = det > F::ZERO && det.is_finite();
    if !invertible {
        return None;
    }
    let conic = [c / det * down, -b / det * down, a / det * down];
    let half = F::from_f64(0.5);
    let mid = half * (a + c);
    let floor = F::from_f64(0.1) * down * down;
    let lambda = (mid + (mid * mid - det).max(floor).sqrt()) * up;
    let radius = (F::from_f64(3.0) * lambda.sqrt()).ceil();
    let z = g.t[2];
    let mean2d = g.mean2d;
    if !(radius.is_finite() && mean2d[0].is_finite() && mean2d[1].is_finite())
        || conic.iter().any(|v| !v.is_finite())
    {
        return None;
    }
    let [x0, x1, y0, y1] = tile_rect(mean2d, [radius; 2], cam.tiles_x, cam.tiles_y);
    if x0 >= x1 || y0 >= y1 {
        return None;
    }
    let mut opacity = F::ONE / (F::ONE + (-p.logit_opacities[i]).exp());
    if !opacity.is_finite() {
        return None;
    }
    if antialiased {
        opacity *= aa_compensation(g.cov2, g.cov2_raw, down).0;
    }
    if filter.is_some() {
        opacity *= g.filter_coef;
    }
    let (dir, _) = view_dir(p.means[i], cam);
    let nc = p.coeffs();
    let raw = sh::eval(dir, degree, &p.sh[i * nc..(i + 1) * nc]);
    if raw.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let color = raw.map(|v| (v + half).max(F::ZERO));
    Some(Splat {
        mean2d,
        conic,
        opacity,
        color,
        depth: z,
        radius: radius.min(F::from_f64(u32::MAX as f64)).to_f64() as u32,
    })
}

/// `project_fwd`: projects every Gaussian into `out` (resized in place; culled ones get
/// `radius == 0`). `degree` is the active SH degree, already checked ≤ the stored one;
/// `antialiased` multiplies each opacity by [`aa_compensation`].
pub fn project_fwd<F: Real>(
    params: &GaussianParams<'_, F>,
    cam: &CameraF<F>,
    degree: u32,
    antialiased: bool,
    out: &mut Vec<Splat<F>>,
) {
    out.clear();
    out.resize(params.len(), Splat::default());
    out.par_iter_mut()
        .enumerate()
        .with_min_len(1024)
        .for_each(|(i, s)| {
            *s = project_one(params, i, cam, degree, antialiased).unwrap_or_default()
        });
}

/// Gaussians per work item of [`project_bwd`]: the pose gradient is summed per chunk in index
/// order, then over chunks in order, so it does not depend on how rayon splits the work.
const BWD_CHUNK: usize = 1024;

/// `project_bwd`: chains the per-splat gradients (`∂L/∂mean2d` in pixels, `∂L/∂conic` as
/// (a, b, c) of `σ = ½a·dx² + b·dx·dy + ½c·dy²`, `∂L/∂colour`, `∂L/∂opacity`) back to the
/// stored parameters, overwriting `grads` (resized here). Culled Gaussians get zeros.
/// `antialiased` must be what the forward used. With `pose_grad`, also returns the gradient of
/// the loss w.r.t. the camera's pose, `∂L/∂(ρ, φ)` at 0 of
/// [`Pose::perturbed`](crate::scene::camera::Pose::perturbed) (module doc), summed in f64
/// in a fixed order. With `inv_depth_grads`, each splat's `∂L/∂(1/z)` (the inverse-depth
/// plane's, from `rasterize_bwd`) joins the gradient of its camera-space depth.
#[allow(clippy::too_many_arguments)]
pub fn project_bwd<F: Real>(
    params: &GaussianParams<'_, F>,
    cam: &CameraF<F>,
    degree: u32,
    antialiased: bool,
    pose_grad: bool,
    splats: &[Splat<F>],
    splat_grads: &[SplatGrad<F>],
    inv_depth_grads: Option<&[F]>,
    grads: &mut GaussianGrads<F>,
) -> Option<[f64; 6]> {
    let nc = params.coeffs();
    grads.reset(params.len(), params.sh_degree);
    let GaussianGrads {
        params:
            Gaussians {
                means,
                log_scales,
                rotations,
                logit_opacities,
                sh,
                ..
            },
        means2d,
        ..
    } = grads;
    let c = BWD_CHUNK;
    let sums: Vec<[f64; 6]> = means
        .par_chunks_mut(c)
        .zip(log_scales.par_chunks_mut(c))
        .zip(rotations.par_chunks_mut(c))
        .zip(logit_opacities.par_chunks_mut(c))
        .zip(sh.par_chunks_mut(c * nc.max(1)))
        .zip(means2d.par_chunks_mut(c))
        .enumerate()
        .map(|(chunk, (((((dm, dls), dq), dlo), dsh), dm2))| {
            let mut pose = [0.0f64; 6];
            for k in 0..dm.len() {
                let i = chunk * c + k;
                if splats[i].radius == 0 {
                    continue;
                }
                project_bwd_one(
                    params,
                    i,
                    cam,
                    degree,
                    antialiased,
                    &splats[i],
                    &splat_grads[i],
                    inv_depth_grads.map_or(F::ZERO, |d| d[i]),
                    &mut dm[k],
                    &mut dls[k],
                    &mut dq[k],
                    &mut dlo[k],
                    &mut dsh[k * nc..(k + 1) * nc],
                    &mut dm2[k],
                    pose_grad.then_some(&mut pose),
                );
            }
            pose
        })
        .collect();
    pose_grad.then(|| {
        sums.iter().fold([0.0; 6], |mut acc, s| {
            for (a, v) in acc.iter_mut().zip(s) {
                *a += v;
            }
            acc
        })
    })
}

#[allow(clippy::too_many_arguments)]
#[inline]
fn project_bwd_one<F: Real>(
    p: &GaussianParams<'_, F>,
    i: usize,
    cam: &CameraF<F>,
    degree: u32,
    antialiased: bool,
    splat: &Splat<F>,
    sg: &SplatGrad<F>,
    d_inv_z: F,
    d_mean: &mut [F; 3],
    d_log_scale: &mut [F; 3],
    d_quat: &mut [F; 4],
    d_logit: &mut F,
    d_sh: &mut [[F; 3]],
    d_mean2d: &mut [F; 2],
    pose: Option<&mut [f64; 6]>,
) {
    let filter = p.filter_3d.map(|f| f[i]);
    let Some(g) = geometry(p.means[i], p.log_scales[i], p.rotations[i], filter, cam) else {
        return;
    };
    let zero = F::ZERO;
    let half = F::from_f64(0.5);
    let two = F::from_f64(2.0);
    *d_mean2d = sg.mean2d;

    // Opacity through the sigmoid (recomputed: in antialiased mode the splat's opacity also
    // holds the compensation, through a 3D filter its factor), and the compensation's share,
    // added to Σ2d below. `o` is the sigmoid times the filter's factor (1 without one).
    let sig = F::ONE / (F::ONE + (-p.logit_opacities[i]).exp());
    let o = if filter.is_some() {
        sig * g.filter_coef
    } else {
        sig
    };
    let (comp, ratio) = if antialiased {
        aa_compensation(g.cov2, g.cov2_raw, cov2_scale(g.cov2).0)
    } else {
        (F::ONE, F::ONE)
    };
    *d_logit = sg.opacity * comp * o * (F::ONE - sig);

    // Colour: SH coefficients and the view direction (clamped channels pass no gradient).
    let (dir, vlen) = view_dir(p.means[i], cam);
    let nc = p.coeffs();
    let coeffs = &p.sh[i * nc..(i + 1) * nc];
    let raw = sh::eval(dir, degree, coeffs);
    let mut d_raw = sg.color;
    for ch in 0..3 {
        if raw[ch] + half < zero {
            d_raw[ch] = zero;
        }
    }
    let mut basis = [zero; MAX_BASIS];
    let mut basis_grad = [[zero; 3]; MAX_BASIS];
    sh::basis(dir, degree, &mut basis);
    sh::basis_grad(dir, degree, &mut basis_grad);
    let active = ((degree + 1) * (degree + 1)) as usize;
    let mut d_dir = [zero; 3];
    for k in 0..active {
        d_sh[k] = d_raw.map(|d| d * basis[k]);
        let w = coeffs[k][0] * d_raw[0] + coeffs[k][1] * d_raw[1] + coeffs[k][2] * d_raw[2];
        for a in 0..3 {
            d_dir[a] += basis_grad[k][a] * w;
        }
    }
    // dir = v/|v|: ∂L/∂v = (∂L/∂dir − dir·(dir·∂L/∂dir)) / |v|.
    let dd = dir[0] * d_dir[0] + dir[1] * d_dir[1] + dir[2] * d_dir[2];
    for a in 0..3 {
        d_mean[a] = (d_dir[a] - dir[a] * dd) / vlen;
    }

    // Conic (a', b', c') → dilated Σ2d: dΣ2 = −K·Gc·K with Gc the symmetric-matrix gradient.
    let [ka, kb, kc] = splat.conic;
    let gc = [sg.conic[0], half * sg.conic[1], sg.conic[2]];
    // K·Gc
    let kg = [
        [ka * gc[0] + kb * gc[1], ka * gc[1] + kb * gc[2]],
        [kb * gc[0] + kc * gc[1], kb * gc[1] + kc * gc[2]],
    ];
    let mut d2 = [
        [
            -(kg[0][0] * ka + kg[0][1] * kb),
            -(kg[0][0] * kb + kg[0][1] * kc),
        ],
        [
            -(kg[1][0] * ka + kg[1][1] * kb),
            -(kg[1][0] * kb + kg[1][1] * kc),
        ],
    ];
    // Compensation c = √r: ∂r/∂Σ2d = (1 − r)·K − ε·det K·I (module doc).
    if antialiased && comp > zero {
        let k = sg.opacity * o * half / comp;
        let keep = F::ONE - ratio;
        let eps_det = F::from_f64(DILATION) * (ka * kc - kb * kb);
        d2[0][0] += k * (keep * ka - eps_det);
        d2[0][1] += k * keep * kb;
        d2[1][0] += k * keep * kb;
        d2[1][1] += k * (keep * kc - eps_det);
    }
    // Σ2d = T Σ Tᵀ: dΣ = Tᵀ·dΣ2·T, dT = 2·dΣ2·T·Σ (both dΣ2 and Σ symmetric).
    let tm = &g.tmat;
    let mut d2t = [[zero; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            d2t[r][c] = d2[r][0] * tm[0][c] + d2[r][1] * tm[1][c];
        }
    }
    let mut d_cov3 = [[zero; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            d_cov3[r][c] = tm[0][r] * d2t[0][c] + tm[1][r] * d2t[1][c];
        }
    }
    let mut d_t = [[zero; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            d_t[r][c] = two
                * (d2t[r][0] * g.cov3[0][c] + d2t[r][1] * g.cov3[1][c] + d2t[r][2] * g.cov3[2][c]);
        }
    }
    // T = J·W: dJ = dT·Wᵀ.
    let w = &cam.rot;
    let mut d_j = [[zero; 3]; 2];
    for r in 0..2 {
        for c in 0..3 {
            d_j[r][c] = d_t[r][0] * w[c][0] + d_t[r][1] * w[c][1] + d_t[r][2] * w[c][2];
        }
    }
    let (x, y, z) = (g.t[0], g.t[1], g.t[2]);
    let rz = F::ONE / z;
    let rz2 = rz * rz;
    let mut dt = if cam.fisheye {
        fisheye_bwd(x, y, z, cam, &d_j, sg.mean2d)
    } else {
        pinhole_bwd(x, y, z, cam, &g, &d_j, sg.mean2d)
    };
    // The inverse-depth plane's value 1/z: ∂(1/z)/∂z = −1/z².
    dt[2] += -d_inv_z * rz2;
    if let Some(acc) = pose {
        // `d_mean` holds the view direction's share alone so far.
        pose_contribution(&g, w, &d2, dt, *d_mean, acc);
    }
    let dw = mat_t_vec(w, dt);
    for a in 0..3 {
        d_mean[a] += dw[a];
    }

    // Σ = M Mᵀ, M = R·diag(s): dM = 2·dΣ·M.
    let mut d_rot = [[zero; 3]; 3];
    let mut d_s = [zero; 3];
    for r in 0..3 {
        for c in 0..3 {
            // M[k][c] = R[k][c]·s[c]
            let dm = two
                * (d_cov3[r][0] * g.rot[0][c] * g.scale[c]
                    + d_cov3[r][1] * g.rot[1][c] * g.scale[c]
                    + d_cov3[r][2] * g.rot[2][c] * g.scale[c]);
            d_rot[r][c] = dm * g.scale[c];
            d_s[c] += dm * g.rot[r][c];
        }
    }
    for c in 0..3 {
        d_log_scale[c] = d_s[c] * g.scale[c];
    }
    if let Some(f) = filter {
        // s' = √(s² + f²): ∂ln s'/∂ln s = s²/s'² = 1 − f²/s'²; and the opacity's factor
        // ∏ s/s' has ∂ln(·)/∂ln s = f²/s'², times ∂L/∂(opacity drawn)·opacity drawn. (f²/s'²
        // from the drawn scale, as the kernel computes it.)
        let (f2, drawn) = (f * f, sg.opacity * comp * o);
        for c in 0..3 {
            let share = f2 / (g.scale[c] * g.scale[c]);
            d_log_scale[c] = d_log_scale[c] * (F::ONE - share) + drawn * share;
        }
    }
    // Quaternion through R(q̂) and q̂ = q/|q|.
    let dqn = quat_to_rot_bwd(g.qn, &d_rot);
    let proj = dqn[0] * g.qn[0] + dqn[1] * g.qn[1] + dqn[2] * g.qn[2] + dqn[3] * g.qn[3];
    for a in 0..4 {
        d_quat[a] = (dqn[a] - g.qn[a] * proj) / g.qlen;
    }
}

/// `∂L/∂t` of the camera-space mean through the pinhole's Jacobian (`∂L/∂J` = `d_j`), exact
/// through the clamp (module doc), and its 2D mean `(fx·x/z + cx, fy·y/z + cy)` (`∂L/∂mean2d`
/// = `gm`).
#[inline]
fn pinhole_bwd<F: Real>(
    x: F,
    y: F,
    z: F,
    cam: &CameraF<F>,
    g: &Geometry<F>,
    d_j: &[[F; 3]; 2],
    gm: [F; 2],
) -> [F; 3] {
    let two = F::from_f64(2.0);
    let rz = F::ONE / z;
    let rz2 = rz * rz;
    let rz3 = rz2 * rz;
    let (fx, fy) = (cam.fx, cam.fy);
    let tx = -g.j[0][2] / (fx * rz2);
    let ty = -g.j[1][2] / (fy * rz2);
    let mut dt = [F::ZERO; 3];
    dt[2] += -fx * rz2 * d_j[0][0] - fy * rz2 * d_j[1][1];
    if g.clamped[0] {
        dt[2] += fx * tx * rz3 * d_j[0][2];
    } else {
        dt[0] += -fx * rz2 * d_j[0][2];
        dt[2] += two * fx * tx * rz3 * d_j[0][2];
    }
    if g.clamped[1] {
        dt[2] += fy * ty * rz3 * d_j[1][2];
    } else {
        dt[1] += -fy * rz2 * d_j[1][2];
        dt[2] += two * fy * ty * rz3 * d_j[1][2];
    }
    let [gmx, gmy] = gm;
    dt[0] += fx * rz * gmx;
    dt[1] += fy * rz * gmy;
    dt[2] += -(fx * x * gmx + fy * y * gmy) * rz2;
    dt
}

/// `∂L/∂t` of the camera-space mean through the equidistant projection: its Jacobian
/// (`∂L/∂J` = `d_j`) and its 2D mean `f·s·(x, y) + c` (`∂L/∂mean2d` = `gm`). With
/// `Gᵣ = f·∂L/∂Jᵣ` the loss sees `J` as `P·s + Q·a + R·∂s/∂z` where `P = G₀₀ + G₁₁`,
/// `Q = G₀₀x² + (G₀₁ + G₁₀)xy + G₁₁y²`, `R = G₀₂x + G₁₂y`, and the mean as `s·M` plus the
/// `x, y` terms, with `h = f·∂L/∂mean2d` and `M = x·hx + y·hy`; their derivatives take
/// `∂s/∂x = a·x`, `∂a/∂x = b·x`, `∂(∂s/∂z)/∂x = 2x/ρ⁴` (likewise y), `∂a/∂z = 2/ρ⁴`,
/// `∂(∂s/∂z)/∂z = 2z/ρ⁴` ([`Equidistant`]). The kernel's twin recomputes nothing else, so `J`
/// need not stay live there.
#[inline]
fn fisheye_bwd<F: Real>(
    x: F,
    y: F,
    z: F,
    cam: &CameraF<F>,
    d_j: &[[F; 3]; 2],
    gm: [F; 2],
) -> [F; 3] {
    let two = F::from_f64(2.0);
    let e = equidistant(x, y, z);
    let g0 = d_j[0].map(|v| v * cam.fx);
    let g1 = d_j[1].map(|v| v * cam.fy);
    let (hx, hy) = (gm[0] * cam.fx, gm[1] * cam.fy);
    let m = x * hx + y * hy;
    let p = g0[0] + g1[1];
    let cxy = g0[1] + g1[0];
    let q = g0[0] * x * x + cxy * x * y + g1[1] * y * y;
    let r = g0[2] * x + g1[2] * y;
    let irho2 = F::ONE / e.rho2;
    let sz = -irho2;
    let sz2 = two * irho2 * irho2;
    // Multiplies the coordinate itself in both ∂/∂x and ∂/∂y.
    let radial = p * e.a + q * e.b + r * sz2 + e.a * m;
    [
        radial * x + e.a * (two * g0[0] * x + cxy * y) + sz * g0[2] + e.s * hx,
        radial * y + e.a * (cxy * x + two * g1[1] * y) + sz * g1[2] + e.s * hy,
        p * sz + q * sz2 + r * sz2 * z + sz * m,
    ]
}

/// One Gaussian's share of the pose gradient (module doc): `d2` is `∂L/∂Σ2d` (symmetric),
/// `dt` `∂L/∂t` of the camera-space mean (through the 2D mean and the Jacobian), `d_dir`
/// `∂L/∂(μ − centre)` through the SH colour alone.
#[inline]
fn pose_contribution<F: Real>(
    g: &Geometry<F>,
    w: &M3<F>,
    d2: &[[F; 2]; 2],
    dt: [F; 3],
    d_dir: [F; 3],
    acc: &mut [f64; 6],
) {
    let f = |v: F| v.to_f64();
    // ∂L/∂Σc = Jᵀ·dΣ2·J and Σc = W·Σ·Wᵀ, in f64 (the sum over Gaussians is f64 anyway).
    let j = g.j.map(|r| r.map(f));
    let d2 = d2.map(|r| r.map(f));
    let wf = w.map(|r| r.map(f));
    let cov = g.cov3.map(|r| r.map(f));
    let mut gc = [[0.0f64; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            gc[r][c] = (0..2)
                .map(|a| (0..2).map(|b| j[a][r] * d2[a][b] * j[b][c]).sum::<f64>())
                .sum();
        }
    }
    let mut wc = [[0.0f64; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            wc[r][c] = (0..3).map(|k| wf[r][k] * cov[k][c]).sum();
        }
    }
    let mut sc = [[0.0f64; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            sc[r][c] = (0..3).map(|k| wc[r][k] * wf[c][k]).sum();
        }
    }
    // A = G·Σc − Σc·G (antisymmetric; (Σc·G)[r][c] = (G·Σc)[c][r]).
    let mut gs = [[0.0f64; 3]; 3];
    for r in 0..3 {
        for c in 0..3 {
            gs[r][c] = (0..3).map(|k| gc[r][k] * sc[k][c]).sum();
        }
    }
    let a = |r: usize, c: usize| gs[r][c] - gs[c][r];
    let t = g.t.map(f);
    let dt = dt.map(f);
    let tx_dt = [
        t[1] * dt[2] - t[2] * dt[1],
        t[2] * dt[0] - t[0] * dt[2],
        t[0] * dt[1] - t[1] * dt[0],
    ];
    // ρ: t' = t − ρ and the centre moves by Wᵀρ, so μ − centre by −Wᵀρ.
    let wd = [0, 1, 2].map(|r| (0..3).map(|k| wf[r][k] * f(d_dir[k])).sum::<f64>());
    for k in 0..3 {
        acc[k] -= dt[k] + wd[k];
    }
    // φ: t' = t − φ×t, Σc' = (I − [φ]×)·Σc·(I + [φ]×).
    acc[3] += 2.0 * a(1, 2) - tx_dt[0];
    acc[4] += 2.0 * a(2, 0) - tx_dt[1];
    acc[5] += 2.0 * a(0, 1) - tx_dt[2];
}
