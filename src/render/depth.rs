//! Depth maps: the *expected depth* of a render, `D = Σᵢ wᵢ·zᵢ / Σᵢ wᵢ`, where `wᵢ = αᵢ·Tᵢ` is
//! Gaussian i's compositing weight at the pixel and `zᵢ` the camera-space depth of its mean
//! (gsplat's `render_mode="ED"`), with the render's alpha `Σᵢ wᵢ` beside it.
//!
//! # How (no kernel of its own)
//! Every backend already composites a per-Gaussian colour with those weights. A copy of the
//! model whose colour *is* its depth — SH degree 0 with the DC coefficient chosen so that the
//! rasterizer's colour `max(C0·DC + ½, 0)` equals `zᵢ` (positive for every drawn Gaussian:
//! projection culls those behind the near plane) — rendered over a black background gives
//! `Σᵢ wᵢ·zᵢ` in each channel, and the alpha output gives `Σᵢ wᵢ`. Positions, shapes and
//! opacities are the model's own, so the weights, the depth order, early termination and the
//! antialiasing compensation are exactly those of the colour render: the depth of *what the
//! image shows*, on the CPU and on the CUDA backend alike. The copy costs 56 bytes per Gaussian
//! while it lives (one render).
//!
//! # Invariants
//! [`DepthMap::depth`] is `NaN` where the pixel's alpha is below [`MIN_DEPTH_ALPHA`] (nothing
//! was drawn there, so it has no depth), finite elsewhere; both maps are row-major `W·H`.

use std::path::{Path, PathBuf};

use crate::render::{Rasterizer, RenderError, RenderOptions, RenderOutput};
use crate::scene::camera::Camera;
use crate::scene::gaussians::Gaussians;
use crate::scene::sh::SH_C0;

/// Pixels whose alpha is below one 8-bit level have no depth (`NaN`).
pub const MIN_DEPTH_ALPHA: f32 = 1.0 / 255.0;

/// The expected depth and alpha of one view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DepthMap {
    pub width: u32,
    pub height: u32,
    /// Expected camera-space depth (scene units) per pixel; `NaN` where nothing was drawn.
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

/// `out` ← `g` with its colour replaced by each Gaussian's camera-space depth in `camera`
/// (SH degree 0; see the module doc). Gaussians behind the camera get a depth ≤ 0 and are
/// culled by projection anyway.
pub fn depth_model(g: &Gaussians, camera: &Camera, out: &mut Gaussians) {
    out.resize_zeroed(g.len(), 0);
    out.means.copy_from_slice(&g.means);
    out.log_scales.copy_from_slice(&g.log_scales);
    out.rotations.copy_from_slice(&g.rotations);
    out.logit_opacities.copy_from_slice(&g.logit_opacities);
    let pose = &camera.world_to_camera;
    let row = pose.rotation[2];
    for (sh, m) in out.sh.iter_mut().zip(&g.means) {
        let z = row[0] * m[0] as f64
            + row[1] * m[1] as f64
            + row[2] * m[2] as f64
            + pose.translation[2];
        *sh = [((z - 0.5) / SH_C0) as f32; 3];
    }
}

/// Renders the expected depth and alpha of `g` seen by `camera` with backend `r`, the way the
/// colour render with `options` draws it (its rasterization mode and intersection cap; SH
/// degree and background do not apply).
pub fn render_depth(
    r: &mut dyn Rasterizer,
    g: &Gaussians,
    camera: &Camera,
    options: &RenderOptions,
    scratch: &mut DepthScratch,
) -> Result<DepthMap, RenderError> {
    depth_model(g, camera, &mut scratch.model);
    let opts = RenderOptions {
        sh_degree: 0,
        background: [0.0; 3],
        absgrad: false,
        ..*options
    };
    r.forward(&scratch.model, camera, &opts, &mut scratch.out)?;
    let out = &scratch.out;
    let depth = out
        .alpha
        .iter()
        .zip(out.image.chunks_exact(3))
        .map(|(&a, px)| {
            if a >= MIN_DEPTH_ALPHA {
                px[0] / a
            } else {
                f32::NAN
            }
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
    use crate::scene::camera::Projection;
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
        let d = render_depth(&mut r, &g, &cam, &opts, &mut scratch).unwrap();
        let covered: Vec<usize> = (0..d.alpha.len()).filter(|&i| d.alpha[i] > 0.99).collect();
        assert!(covered.len() > d.alpha.len() * 9 / 10, "{}", covered.len());
        for &i in &covered {
            assert!((d.depth[i] - 3.0).abs() < 1e-4, "pixel {i}: {}", d.depth[i]);
        }
        // A second wall behind it (z = 7) changes nothing where the first is opaque; one in
        // front (z = 2) takes over.
        let mut behind = g.clone();
        wall(&mut behind, 7.0, 6.0, 24, 6.0);
        let db = render_depth(&mut r, &behind, &cam, &opts, &mut scratch).unwrap();
        for &i in &covered {
            assert!(
                (db.depth[i] - 3.0).abs() < 2e-3,
                "pixel {i}: {}",
                db.depth[i]
            );
        }
        let mut front = g.clone();
        wall(&mut front, 2.0, 2.0, 24, 6.0);
        let df = render_depth(&mut r, &front, &cam, &opts, &mut scratch).unwrap();
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
        let dg = render_depth(&mut r, &glass, &cam, &opts, &mut scratch).unwrap();
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
        let d = render_depth(&mut r, &g, &cam, &opts, &mut scratch).unwrap();
        assert!(
            d.depth[0].is_nan() && d.alpha[0] < MIN_DEPTH_ALPHA,
            "corner is empty"
        );
        let centre = 18 * 48 + 24;
        assert!((d.depth[centre] - 3.0).abs() < 1e-3);
        // Moving the camera 1 unit back (camera z = world z + 1) adds 1 to every depth.
        cam.world_to_camera.translation = [0.0, 0.0, 1.0];
        let d2 = render_depth(&mut r, &g, &cam, &opts, &mut scratch).unwrap();
        assert!(
            (d2.depth[centre] - 4.0).abs() < 1e-3,
            "{}",
            d2.depth[centre]
        );
        // The input model is never touched (its colours are not depths).
        assert_eq!(g.sh_degree, 1);
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
