//! Depth maps: per pixel, the depth of what the render shows, `D = Σᵢ wᵢ·zᵢ / Σᵢ wᵢ`, where
//! `wᵢ = αᵢ·Tᵢ` is Gaussian i's compositing weight at the pixel (the colour render's) and `zᵢ`
//! the camera-space depth Gaussian i lends that pixel ([`DepthKind`]), with the render's alpha
//! `Σᵢ wᵢ` beside it.
//!
//! # Which depth a Gaussian lends a pixel
//! - [`DepthKind::Mean`]: its mean's depth, the same over its whole footprint (gsplat's
//!   `render_mode="ED"`, the original 3DGS depth). Where overlapping Gaussians lie on a tilted
//!   or curved surface, their centres' depths disagree at every pixel by up to their size, and
//!   the nearer weigh most.
//! - [`DepthKind::Plane`]: the depth at which the pixel's ray crosses the Gaussian's *plane*,
//!   the plane through its mean normal to `Σ⁻¹·μ` (camera space). Along a ray `X = t·d`, a
//!   Gaussian's density peaks at `t*(d) = dᵀΣ⁻¹μ / dᵀΣ⁻¹d`; the plane is the first-order
//!   expansion of `t*` about the ray through the mean (where `t* = t₀`, the mean's distance),
//!   so for a flat Gaussian it is the Gaussian's own plane, and a surface of flat Gaussians
//!   gets the surface's depth rather than its Gaussians' centres' (the planar depth of RaDe-GS
//!   and PGSR). A Gaussian that is not flat, or not lying along the surface, lends a plane of
//!   its own orientation: models trained without a flatness or normal term have many.
//!
//! # How (no kernel of its own)
//! Every backend already composites a per-Gaussian colour with those weights. A copy of the
//! model whose colour carries the depth — SH degree 0 with the DC coefficient chosen so that
//! the rasterizer's colour `max(C0·DC + ½, 0)` equals the chosen value — rendered over a black
//! background gives `Σᵢ wᵢ·vᵢ` per channel, and the alpha output gives `Σᵢ wᵢ`. Positions,
//! shapes and opacities are the model's own, so the weights, the depth order, early
//! termination and the antialiasing compensation are exactly those of the colour render, on
//! the CPU and on the CUDA backend alike.
//! - Mean: every channel is `zᵢ` (positive for every drawn Gaussian: projection culls those
//!   behind the near plane).
//! - Plane: each Gaussian's plane is expanded to first order in the pixel about its mean's
//!   pixel, `tᵢ(u, v) = aᵢ + gᵢ·(u − cx) + hᵢ·(v − cy)`, so the composite is
//!   `Σwa + (u − cx)·Σwg + (v − cy)·Σwh`: the three channels carry `a`, `g` and `h`, each
//!   raised by a per-view constant `K` that makes it non-negative (the colour clamp), and
//!   `K·Σw` is taken off afterwards. `t` is the depth through a pinhole camera (the
//!   expansion's error is the perspective's curvature over one footprint: 1.8e-3 of the depth
//!   for discs on a plane tilted 50° seen through pixels of 1.4°, in the tests) and the range
//!   along the unit
//!   ray through a fisheye (whose rays scaled to unit depth grow without bound at the rim), the
//!   depth then being the range times the pixel's `cos θ`. (The inverse depth of a plane is
//!   exactly affine in a pinhole's pixel, but composited inverse depths are pulled towards the
//!   nearest of what a pixel mixes: on a trained model's views their errors' mean was 1.7 ×
//!   the depths'.)
//!
//! The copy costs 56 bytes per Gaussian while it lives (one render), the planes 32 more while
//! the copy is made.
//!
//! # Invariants
//! [`DepthMap::depth`] is `NaN` where the pixel's alpha is below [`MIN_DEPTH_ALPHA`] (nothing
//! was drawn there, so it has no depth) and, for plane depths, where the planes put the pixel
//! at or behind the camera (only steep planes far from their centres do); finite and positive
//! elsewhere. Both maps are row-major `W·H`.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::render::{Rasterizer, RenderError, RenderOptions, RenderOutput};
use crate::scene::camera::{Camera, Projection};
use crate::scene::gaussians::Gaussians;
use crate::scene::maths::{dot3, mat3_mul, quat_to_rot};
use crate::scene::sh::SH_C0;

/// Pixels whose alpha is below one 8-bit level have no depth (`NaN`).
pub const MIN_DEPTH_ALPHA: f32 = 1.0 / 255.0;

/// The depth and alpha of one view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DepthMap {
    pub width: u32,
    pub height: u32,
    /// Camera-space depth (scene units) per pixel; `NaN` where it has none (module doc).
    pub depth: Vec<f32>,
    /// `Σ wᵢ` per pixel (1 − the final transmittance).
    pub alpha: Vec<f32>,
}

/// Reusable buffers of [`render_depth`] (a renderer loops over many views).
#[derive(Debug, Default)]
pub struct DepthScratch {
    model: Gaussians,
    out: RenderOutput,
}

/// Which depth a Gaussian lends the pixels it covers (module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DepthKind {
    /// Where the pixel's ray crosses the Gaussian's plane (through its mean, normal to `Σ⁻¹μ`).
    Plane,
    /// The Gaussian's mean's depth (gsplat's expected depth, `render_mode="ED"`).
    Mean,
}

impl DepthKind {
    /// The name flags and file headers use: `plane` or `mean`.
    pub fn name(self) -> &'static str {
        match self {
            DepthKind::Plane => "plane",
            DepthKind::Mean => "mean",
        }
    }
}

/// The steepest plane a Gaussian is given: its distance along the ray may change by at most
/// this multiple of its mean's per focal length of pixels (`|∇t|·f/t₀ ≤ 30`, `f` the smaller
/// focal length). For a pinhole camera that is the tangent of the angle between the plane's
/// normal and the ray through the mean: 30 is 88.1°; steeper planes (surfaces seen nearly
/// edge-on) get this slope, between their plane's depth and their mean's. The bound also
/// bounds the per-view offsets (module doc), and so the f32 rounding of the composite: about
/// `6e-8 · 30 · (W / 2f) · (z_far / z)` of a pixel's depth `z`, `z_far` the farthest
/// Gaussian's.
pub const MAX_PLANE_TILT: f64 = 30.0;

/// Copies `g`'s geometry (positions, shapes, opacities) into `out`, SH degree 0, colours zero.
fn copy_geometry(g: &Gaussians, out: &mut Gaussians) {
    out.resize_zeroed(g.len(), 0);
    out.means.copy_from_slice(&g.means);
    out.log_scales.copy_from_slice(&g.log_scales);
    out.rotations.copy_from_slice(&g.rotations);
    out.logit_opacities.copy_from_slice(&g.logit_opacities);
}

/// The DC coefficient whose rasterized colour (`C0·DC + ½`) is `value`.
fn dc_for(value: f64) -> f32 {
    ((value - 0.5) / SH_C0) as f32
}

/// `out` ← `g` with its colour replaced by each Gaussian's camera-space depth in `camera`
/// (SH degree 0; see the module doc). Gaussians behind the camera get a depth ≤ 0 and are
/// culled by projection anyway.
pub fn depth_model(g: &Gaussians, camera: &Camera, out: &mut Gaussians) {
    copy_geometry(g, out);
    let pose = &camera.world_to_camera;
    let row = pose.rotation[2];
    for (sh, m) in out.sh.iter_mut().zip(&g.means) {
        let z = row[0] * m[0] as f64
            + row[1] * m[1] as f64
            + row[2] * m[2] as f64
            + pose.translation[2];
        *sh = [dc_for(z); 3];
    }
}

/// The ray through camera-space point `m` as the plane model parametrises it: the distance
/// `t₀` along it to `m` and `∂d/∂(u, v)` (3×2, columns for u and v) at `m`'s image point, for
/// rays `X = t·d(u, v)` with `d` scaled to unit z for a pinhole camera (so `t` is the depth)
/// and to unit length for a fisheye (so `t` is the range, and `d` stays smooth up to the rim,
/// where rays scaled to unit z grow without bound). `m_z > 0`.
fn ray_frame(camera: &Camera, m: [f64; 3]) -> (f64, [[f64; 2]; 3]) {
    let k = camera.intrinsics;
    let (iu, iv) = (1.0 / k.fx, 1.0 / k.fy);
    match camera.projection {
        Projection::Pinhole => (m[2], [[iu, 0.0], [0.0, iv], [0.0, 0.0]]),
        Projection::Fisheye => {
            // The normalised image point is n = θ·(x, y)/r with θ = atan2(r, z), and the unit
            // ray d = (sinc θ · n, cos θ) with θ = |n|, so ∂d_xy/∂n = sinc θ · I + n·nᵀ·c with
            // c = (cos θ/θ − sin θ/θ²)/θ (→ −1/3 on the axis) and ∂d_z/∂n = −sinc θ · nᵀ.
            let r = m[0].hypot(m[1]);
            let theta = r.atan2(m[2]);
            let range = (r * r + m[2] * m[2]).sqrt();
            let (n, sinc, c) = if theta < 1e-4 {
                ([m[0] / m[2], m[1] / m[2]], 1.0, -1.0 / 3.0)
            } else {
                let (sin, cos) = theta.sin_cos();
                (
                    [m[0] / r * theta, m[1] / r * theta],
                    sin / theta,
                    (cos / theta - sin / (theta * theta)) / theta,
                )
            };
            let column = |b: usize, scale: f64| {
                let e = |a: usize| if a == b { sinc } else { 0.0 };
                [
                    (e(0) + n[0] * n[b] * c) * scale,
                    (e(1) + n[1] * n[b] * c) * scale,
                    -sinc * n[b] * scale,
                ]
            };
            let (ju, jv) = (column(0, iu), column(1, iv));
            (range, [[ju[0], jv[0]], [ju[1], jv[1]], [ju[2], jv[2]]])
        }
    }
}

/// The plane of Gaussian `i` of `g` in `camera` as a distance along the pixel's ray
/// ([`ray_frame`]: depth for a pinhole camera, range for a fisheye), expanded to first order
/// about the mean's pixel: `(a, g, h)` with the plane's `t` at image point `(u, v)` about
/// `a + g·(u − cx) + h·(v − cy)` (module doc); `None` behind the camera.
fn gaussian_plane(g: &Gaussians, i: usize, camera: &Camera) -> Option<[f64; 3]> {
    let m = camera.world_to_camera.transform(g.means[i].map(f64::from));
    let [u0, v0] = camera.project_camera_point(m)?;
    let k = camera.intrinsics;
    let (du0, dv0) = (u0 - k.cx, v0 - k.cy);
    let (t0, j) = ray_frame(camera, m);
    let facing = Some([t0, 0.0, 0.0]);
    let q = g.rotations[i].map(f64::from);
    let norm = q.iter().map(|c| c * c).sum::<f64>().sqrt();
    if !(norm > 0.0 && norm.is_finite()) {
        return facing;
    }
    // Σ⁻¹ = Σₖ aₖ·aₖᵀ / sₖ² in camera space, aₖ the Gaussian's axes (columns of R_cam·R_q).
    let axes = mat3_mul(
        &camera.world_to_camera.rotation,
        &quat_to_rot(q.map(|c| c / norm)),
    );
    let d0 = m.map(|c| c / t0);
    let (mut w, mut s) = ([0.0f64; 3], 0.0f64);
    for (axis, &log_scale) in g.log_scales[i].iter().enumerate() {
        let a = [axes[0][axis], axes[1][axis], axes[2][axis]];
        let inv_var = (-2.0 * f64::from(log_scale)).exp();
        let p = dot3(a, d0);
        for (wr, ar) in w.iter_mut().zip(a) {
            *wr += ar * p * inv_var;
        }
        s += p * p * inv_var;
    }
    // The density peaks along X = t·d at t*(d) = dᵀΣ⁻¹μ / dᵀΣ⁻¹d; with w = Σ⁻¹d₀ and
    // s = d₀ᵀΣ⁻¹d₀ at d₀ = μ/t₀ (where t* = t₀), ∂t*/∂d = −t₀·w/s.
    let grad = w.map(|c| -t0 * c / s);
    if !(s > 0.0 && grad.iter().all(|c| c.is_finite())) {
        return facing;
    }
    let mut gu = grad[0] * j[0][0] + grad[1] * j[1][0] + grad[2] * j[2][0];
    let mut gv = grad[0] * j[0][1] + grad[1] * j[1][1] + grad[2] * j[2][1];
    let tilt = gu.hypot(gv) * k.fx.min(k.fy) / t0;
    if tilt > MAX_PLANE_TILT {
        (gu, gv) = (gu * MAX_PLANE_TILT / tilt, gv * MAX_PLANE_TILT / tilt);
    }
    Some([t0 - gu * du0 - gv * dv0, gu, gv])
}

/// `out` ← `g` with its colour replaced by each Gaussian's plane `(a, g, h)` in `camera`
/// (`gaussian_plane`) plus the returned per-channel offsets `K`, which make every channel
/// of every Gaussian in front of the camera non-negative (module doc). Gaussians behind the
/// camera get colour `K` (they are culled by projection anyway).
pub fn plane_depth_model(g: &Gaussians, camera: &Camera, out: &mut Gaussians) -> [f64; 3] {
    copy_geometry(g, out);
    let planes: Vec<Option<[f64; 3]>> = (0..g.len())
        .into_par_iter()
        .map(|i| gaussian_plane(g, i, camera))
        .collect();
    let mut offset = [0.0f64; 3];
    for p in planes.iter().flatten() {
        for c in 0..3 {
            offset[c] = offset[c].max(-p[c]);
        }
    }
    for (sh, p) in out.sh.iter_mut().zip(&planes) {
        let p = p.unwrap_or([0.0; 3]);
        *sh = std::array::from_fn(|c| dc_for(p[c] + offset[c]));
    }
    offset
}

/// Renders the depth ([`DepthKind`]) and alpha of `g` seen by `camera` with backend `r`, the
/// way the colour render with `options` draws it (its rasterization mode and intersection
/// cap; SH degree and background do not apply).
pub fn render_depth(
    r: &mut dyn Rasterizer,
    g: &Gaussians,
    camera: &Camera,
    options: &RenderOptions,
    kind: DepthKind,
    scratch: &mut DepthScratch,
) -> Result<DepthMap, RenderError> {
    let offset = match kind {
        DepthKind::Mean => {
            depth_model(g, camera, &mut scratch.model);
            None
        }
        DepthKind::Plane => Some(plane_depth_model(g, camera, &mut scratch.model)),
    };
    let opts = RenderOptions {
        sh_degree: 0,
        background: [0.0; 3],
        absgrad: false,
        ..*options
    };
    r.forward(&scratch.model, camera, &opts, &mut scratch.out)?;
    let out = &scratch.out;
    let (w, k) = (camera.width as usize, camera.intrinsics);
    let depth = out
        .alpha
        .iter()
        .zip(out.image.chunks_exact(3))
        .enumerate()
        .map(|(i, (&a, px))| {
            if a < MIN_DEPTH_ALPHA {
                return f32::NAN;
            }
            let Some(offset) = offset else {
                return px[0] / a;
            };
            // Each channel's composite less its offset's share, over the alpha: the weighted
            // mean of the planes' distances along the ray here (module doc).
            let v = |c: usize| f64::from(px[c]) / f64::from(a) - offset[c];
            let u = (i % w) as f64 + 0.5 - k.cx;
            let y = (i / w) as f64 + 0.5 - k.cy;
            let t = v(0) + u * v(1) + y * v(2);
            // Not positive (or NaN): the planes put the pixel behind the camera.
            if t.is_nan() || t <= 0.0 {
                return f32::NAN;
            }
            // A fisheye's planes hold ranges: the depth is the range times cos θ.
            let along = match camera.projection {
                Projection::Pinhole => 1.0,
                Projection::Fisheye => match camera.pixel_ray(u + k.cx, y + k.cy) {
                    Some(ray) => ray[2],
                    None => return f32::NAN,
                },
            };
            (t * along) as f32
        })
        .collect();
    Ok(DepthMap {
        width: camera.width,
        height: camera.height,
        depth,
        alpha: out.alpha.clone(),
    })
}

/// Why a depth file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct DepthWriteError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The bytes of a NumPy `.npy` file (format version 1.0) holding `values` as a little-endian
/// float32 array of shape `(height, width)`, C order: `numpy.load` reads it as is.
pub fn npy_f32(values: &[f32], width: u32, height: u32) -> Vec<u8> {
    assert_eq!(values.len(), width as usize * height as usize);
    let mut header =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({height}, {width}), }}");
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and ended by a
    // newline to a multiple of 64 bytes (the format's alignment).
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut bytes = Vec::with_capacity(10 + header.len() + 4 * values.len());
    bytes.extend_from_slice(b"\x93NUMPY\x01\x00");
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for v in values {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

/// Writes [`DepthMap::depth`] as a `.npy` file, atomically.
pub fn write_depth_npy(path: &Path, map: &DepthMap) -> Result<(), DepthWriteError> {
    crate::fsutil::write_atomic(path, &npy_f32(&map.depth, map.width, map.height)).map_err(
        |source| DepthWriteError {
            path: path.to_owned(),
            source,
        },
    )
}

/// Colour stops of the preview ramp, far to near: dark violet, blue, teal, green, yellow.
const RAMP: [[f32; 3]; 5] = [
    [0.16, 0.05, 0.30],
    [0.15, 0.30, 0.70],
    [0.10, 0.62, 0.62],
    [0.45, 0.82, 0.30],
    [0.98, 0.90, 0.20],
];

/// An RGB8 picture of a depth map for people: inverse depth (so near detail gets the range)
/// stretched between its 2nd and 98th percentiles over the pixels with alpha ≥ ½, through a
/// ramp from dark violet (far) to yellow (near); pixels with less coverage are black.
pub fn depth_preview_rgb8(map: &DepthMap) -> Vec<u8> {
    let covered = |i: usize| map.alpha[i] >= 0.5 && map.depth[i].is_finite() && map.depth[i] > 0.0;
    let mut inv: Vec<f32> = (0..map.depth.len())
        .filter(|&i| covered(i))
        .map(|i| 1.0 / map.depth[i])
        .collect();
    inv.sort_by(f32::total_cmp);
    let (lo, hi) = match inv.len() {
        0 => (0.0, 1.0),
        n => (inv[n * 2 / 100], inv[(n * 98 / 100).min(n - 1)]),
    };
    let span = if hi > lo { hi - lo } else { 1.0 };
    let mut rgb = Vec::with_capacity(3 * map.depth.len());
    for i in 0..map.depth.len() {
        if !covered(i) {
            rgb.extend_from_slice(&[0, 0, 0]);
            continue;
        }
        let t = ((1.0 / map.depth[i] - lo) / span).clamp(0.0, 1.0) * (RAMP.len() - 1) as f32;
        let k = (t as usize).min(RAMP.len() - 2);
        let f = t - k as f32;
        for (a, b) in RAMP[k].iter().zip(&RAMP[k + 1]) {
            rgb.push(((a * (1.0 - f) + b * f) * 255.0).round() as u8);
        }
    }
    rgb
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::CpuRasterizer;
    use crate::scene::camera::{Intrinsics, Pose};

    fn camera(w: u32, h: u32) -> Camera {
        Camera {
            width: w,
            height: h,
            intrinsics: Intrinsics {
                fx: 40.0,
                fy: 40.0,
                cx: w as f64 / 2.0,
                cy: h as f64 / 2.0,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        }
    }

    /// A wall of `k × k` opaque Gaussians at depth `z`, spanning x, y in [−s, s].
    fn wall(g: &mut Gaussians, z: f32, s: f32, k: usize, logit: f32) {
        let n0 = g.len();
        let mut more = Gaussians::zeros(k * k, g.sh_degree);
        for i in 0..k {
            for j in 0..k {
                let r = i * k + j;
                let t = |a: usize| -s + 2.0 * s * a as f32 / (k - 1) as f32;
                more.means[r] = [t(i), t(j), z];
                more.log_scales[r] = [(2.0 * s / k as f32).ln(); 3];
                more.rotations[r] = [1.0, 0.0, 0.0, 0.0];
                more.logit_opacities[r] = logit;
            }
        }
        g.append(&more);
        assert_eq!(g.len(), n0 + k * k);
    }

    #[test]
    fn a_wall_reads_its_own_depth_and_hides_what_is_behind() {
        let cam = camera(48, 36);
        let mut r = CpuRasterizer::<f32>::new();
        let mut scratch = DepthScratch::default();
        let opts = RenderOptions::default();
        // One opaque wall at z = 3 covering the view: its depth everywhere it covers.
        let mut g = Gaussians::zeros(0, 3);
        wall(&mut g, 3.0, 3.0, 24, 6.0);
        let d = render_depth(&mut r, &g, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        let covered: Vec<usize> = (0..d.alpha.len()).filter(|&i| d.alpha[i] > 0.99).collect();
        assert!(covered.len() > d.alpha.len() * 9 / 10, "{}", covered.len());
        for &i in &covered {
            assert!((d.depth[i] - 3.0).abs() < 1e-4, "pixel {i}: {}", d.depth[i]);
        }
        // A second wall behind it (z = 7) changes nothing where the first is opaque; one in
        // front (z = 2) takes over.
        let mut behind = g.clone();
        wall(&mut behind, 7.0, 6.0, 24, 6.0);
        let db = render_depth(&mut r, &behind, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        for &i in &covered {
            assert!(
                (db.depth[i] - 3.0).abs() < 2e-3,
                "pixel {i}: {}",
                db.depth[i]
            );
        }
        let mut front = g.clone();
        wall(&mut front, 2.0, 2.0, 24, 6.0);
        let df = render_depth(&mut r, &front, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        let centre = 18 * 48 + 24;
        assert!(
            (df.depth[centre] - 2.0).abs() < 1e-3,
            "{}",
            df.depth[centre]
        );
        // Semi-transparent front wall (opacity ½ per layer, several layers overlap): the
        // expected depth lies between the two, weighted by what shows through.
        let mut glass = g.clone();
        wall(&mut glass, 2.0, 2.0, 24, -3.0);
        let dg = render_depth(&mut r, &glass, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        assert!(
            dg.depth[centre] > 2.01 && dg.depth[centre] < 2.99,
            "{}",
            dg.depth[centre]
        );
    }

    #[test]
    fn nothing_drawn_has_no_depth_and_the_camera_pose_counts() {
        let mut r = CpuRasterizer::<f32>::new();
        let mut scratch = DepthScratch::default();
        let opts = RenderOptions::default();
        let mut g = Gaussians::zeros(0, 1);
        wall(&mut g, 3.0, 0.3, 4, 6.0);
        let mut cam = camera(48, 36);
        let d = render_depth(&mut r, &g, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        assert!(
            d.depth[0].is_nan() && d.alpha[0] < MIN_DEPTH_ALPHA,
            "corner is empty"
        );
        let centre = 18 * 48 + 24;
        assert!((d.depth[centre] - 3.0).abs() < 1e-3);
        // Moving the camera 1 unit back (camera z = world z + 1) adds 1 to every depth.
        cam.world_to_camera.translation = [0.0, 0.0, 1.0];
        let d2 = render_depth(&mut r, &g, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
        assert!(
            (d2.depth[centre] - 4.0).abs() < 1e-3,
            "{}",
            d2.depth[centre]
        );
        // The input model is never touched (its colours are not depths).
        assert_eq!(g.sh_degree, 1);
    }

    /// `k × k` flat opaque discs tiling the plane through `p0` with unit normal `n`, spacing
    /// `h` (σ = 0.8·h in the plane, 0.02·h across it).
    fn tilted_discs(p0: [f64; 3], n: [f64; 3], k: usize, h: f64) -> Gaussians {
        let q = crate::scene::maths::quaternion_z_to(n);
        let r = quat_to_rot(q);
        let (e1, e2) = ([r[0][0], r[1][0], r[2][0]], [r[0][1], r[1][1], r[2][1]]);
        let mut g = Gaussians::zeros(k * k, 0);
        for i in 0..k {
            for j in 0..k {
                let (a, b) = (
                    (i as f64 - (k - 1) as f64 / 2.0) * h,
                    (j as f64 - (k - 1) as f64 / 2.0) * h,
                );
                let at = i * k + j;
                g.means[at] = std::array::from_fn(|c| (p0[c] + a * e1[c] + b * e2[c]) as f32);
                g.rotations[at] = q.map(|c| c as f32);
                g.log_scales[at] = [
                    (0.8 * h).ln() as f32,
                    (0.8 * h).ln() as f32,
                    (0.02 * h).ln() as f32,
                ];
                g.logit_opacities[at] = crate::scene::maths::logit(0.99);
            }
        }
        g
    }

    /// Depth errors against the plane through `p0` with normal `n` over the pixels the render
    /// covers fully: (median, largest) of `|D − z_true| / z_true`.
    fn plane_errors(d: &DepthMap, cam: &Camera, p0: [f64; 3], n: [f64; 3]) -> (f64, f64, usize) {
        let c = n[0] * p0[0] + n[1] * p0[1] + n[2] * p0[2];
        let mut e: Vec<f64> = (0..d.depth.len())
            .filter(|&i| d.alpha[i] > 0.999)
            .map(|i| {
                let (x, y) = (
                    (i % d.width as usize) as f64 + 0.5,
                    (i / d.width as usize) as f64 + 0.5,
                );
                let ray = cam.pixel_ray(x, y).unwrap();
                let t = c / (n[0] * ray[0] + n[1] * ray[1] + n[2] * ray[2]);
                let z = t * ray[2];
                (f64::from(d.depth[i]) - z).abs() / z
            })
            .collect();
        e.sort_by(f64::total_cmp);
        (e[e.len() / 2], e[e.len() - 1], e.len())
    }

    #[test]
    fn a_tilted_surface_of_flat_gaussians_reads_its_own_depth_as_planes() {
        // A plane tilted 50° away from the camera, covering most of the view.
        let n = {
            let (a, b) = (50f64.to_radians(), 20f64.to_radians());
            [a.sin() * b.cos(), a.sin() * b.sin(), -a.cos()]
        };
        let p0 = [0.1, -0.05, 4.0];
        let g = tilted_discs(p0, n, 100, 0.12);
        let mut r = CpuRasterizer::<f32>::new();
        let mut scratch = DepthScratch::default();
        let opts = RenderOptions::default();
        for projection in [Projection::Pinhole, Projection::Fisheye] {
            let cam = Camera {
                projection,
                ..camera(96, 72)
            };
            let plane =
                render_depth(&mut r, &g, &cam, &opts, DepthKind::Plane, &mut scratch).unwrap();
            let mean =
                render_depth(&mut r, &g, &cam, &opts, DepthKind::Mean, &mut scratch).unwrap();
            assert_eq!(plane.alpha, mean.alpha, "one set of weights");
            let (pm, px, count) = plane_errors(&plane, &cam, p0, n);
            let (mm, mx, _) = plane_errors(&mean, &cam, p0, n);
            assert!(
                count > 96 * 72 / 2,
                "{projection:?}: {count} pixels covered"
            );
            // First order in the pixel about each disc's centre (measured, relative medians:
            // pinhole 1.8e-3 of the depth, largest 7.1e-3; fisheye 2.0e-3, largest 1.6e-2, with
            // pixels of 1.4° and discs of 0.1 at depths 1 to 6 here); the means' depths: 3.7e-2
            // (largest 7.7e-2) and 4.4e-2 (largest 0.33).
            let (median, max) = match projection {
                Projection::Pinhole => (3e-3, 1e-2),
                Projection::Fisheye => (3e-3, 2.5e-2),
            };
            assert!(
                pm < median && px < max && mm > 10.0 * pm,
                "{projection:?}: plane median {pm:.2e}, largest {px:.2e}; mean median {mm:.2e}, \
                 largest {mx:.2e}"
            );
        }
    }

    #[test]
    fn plane_offsets_make_every_channel_non_negative_and_leave_the_depth_alone() {
        // Planes tilted both ways put negative slopes (and intercepts) in the channels; the
        // offsets lift them to zero or more, and the depth is the same as with any larger one.
        let cam = camera(48, 36);
        let mut g = tilted_discs([0.0, 0.0, 3.0], [0.6, 0.0, -0.8], 8, 0.1);
        g.append(&tilted_discs([0.0, 0.0, 3.0], [-0.6, 0.48, -0.64], 8, 0.1));
        let mut model = Gaussians::default();
        let offset = plane_depth_model(&g, &cam, &mut model);
        assert!(offset[1] > 0.0 && offset[2] > 0.0, "{offset:?}");
        for sh in &model.sh {
            for &dc in sh {
                assert!(SH_C0 as f32 * dc + 0.5 >= -1e-6, "{sh:?}");
            }
        }
        // A Gaussian's plane evaluated at its own mean's pixel is its mean's depth.
        for i in [0, 17, 64 + 9] {
            let m = cam.world_to_camera.transform(g.means[i].map(f64::from));
            let [u, v] = cam.project_camera_point(m).unwrap();
            let [a, gu, gv] = gaussian_plane(&g, i, &cam).unwrap();
            let k = cam.intrinsics;
            assert!((a + gu * (u - k.cx) + gv * (v - k.cy) - m[2]).abs() < 1e-12);
            let fisheye = Camera {
                projection: Projection::Fisheye,
                ..cam
            };
            let [u, v] = fisheye.project_camera_point(m).unwrap();
            let [a, gu, gv] = gaussian_plane(&g, i, &fisheye).unwrap();
            let range = (m[0] * m[0] + m[1] * m[1] + m[2] * m[2]).sqrt();
            assert!((a + gu * (u - k.cx) + gv * (v - k.cy) - range).abs() < 1e-12);
        }
        // Nearly edge-on (0.1° from holding the ray through its mean: a tilt of 573), a flat
        // Gaussian gets the capped slope.
        let e = 0.1f64.to_radians();
        let mut edge = tilted_discs([0.0, 0.0, 3.0], [e.cos(), 0.0, -e.sin()], 1, 0.1);
        edge.log_scales[0][2] = -40.0;
        let [_, gu, _] = gaussian_plane(&edge, 0, &cam).unwrap();
        assert!(
            (gu.abs() * cam.intrinsics.fx / 3.0 - MAX_PLANE_TILT).abs() < 1e-9,
            "{gu}"
        );
        // Behind the camera: no plane.
        let behind = tilted_discs([0.0, 0.0, -3.0], [0.0, 0.0, 1.0], 1, 0.1);
        assert!(gaussian_plane(&behind, 0, &cam).is_none());
    }

    #[test]
    fn npy_files_have_numpys_layout() {
        let v = [1.5f32, f32::NAN, -2.0, 0.25, 7.0, 8.0];
        let b = npy_f32(&v, 3, 2);
        assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0, "data starts 64-byte aligned");
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
        assert!(header.ends_with('\n'));
        let data: Vec<f32> = b[10 + hlen..]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(data.len(), 6);
        assert!(data[1].is_nan());
        assert_eq!([data[0], data[2], data[5]], [1.5, -2.0, 8.0]);
    }

    #[test]
    fn the_preview_puts_near_in_yellow_far_in_violet_and_empty_in_black() {
        let map = DepthMap {
            width: 4,
            height: 1,
            depth: vec![1.0, 10.0, f32::NAN, 2.0],
            alpha: vec![1.0, 1.0, 0.0, 0.2],
        };
        let rgb = depth_preview_rgb8(&map);
        let px = |i: usize| [rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]];
        assert_eq!(px(0), RAMP[4].map(|c| (c * 255.0).round() as u8), "nearest");
        assert_eq!(
            px(1),
            RAMP[0].map(|c| (c * 255.0).round() as u8),
            "farthest"
        );
        assert_eq!(px(2), [0, 0, 0], "nothing drawn");
        assert_eq!(px(3), [0, 0, 0], "under half covered");
    }
}
