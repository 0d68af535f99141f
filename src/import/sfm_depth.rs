//! Sparse inverse-depth planes from SfM points (`gs-pack convert --sfm-depths`), the data side
//! of gsplat's `--depth_loss`: each view's rendered depth is supervised, in disparity, at the
//! pixels where the SfM points its image observes project.
//!
//! Owns: the table of observations ([`SfmObservations`], built from the model's tracks by
//! `crate::import::colmap::read_observations`, `crate::import::opensfm::read_observations` and
//! `crate::import::bundler::read_observations`), the projection of a view's points through its
//! *packed* camera, pinhole or fisheye (after undistortion, crop and resize, so `--downscale` and
//! `--max-width` apply), and the encoding of the result as the pack's per-view inverse-depth
//! plane ([`crate::shard::VIEW_FLAG_DEPTH`]).
//!
//! Rules ([`sparse_plane`]):
//! - A point `p` with camera coordinates `(x, y, z)` lands where the camera's projection puts
//!   it ([`Camera::project_camera_point`]: `u = fx·x/z + cx`, `v = fy·y/z + cy` for a pinhole
//!   view, the equidistant mapping for a fisheye one), in pixel `(⌊u⌋, ⌊v⌋)` (pixel `(i, j)` covers `[i, i+1) × [j, j+1)`,
//!   ramsplat's and COLMAP's convention). It is kept when its coordinates are finite, `z > 0`,
//!   `1/z` is finite, and `0 ≤ u < W`, `0 ≤ v < H`. Where several land in one pixel the nearest
//!   (largest `1/z`) is kept. `z` is the camera-space depth along the optical axis for
//!   either projection (a fisheye view's too), the depth the renderers draw. Masked pixels keep their points: the trainer's loss leaves masked
//!   pixels out itself.
//! - With `lo`, `hi` the smallest and largest kept `1/z` of the view, a kept pixel stores
//!   `raw = 1 + round((1/z − lo)/(hi − lo)·65534)`, in `[1, 65535]`, never
//!   [`DepthScale::NO_DEPTH`]; every other pixel stores 0 (no depth). The view's
//!   [`DepthScale`] is `scale = (hi − lo)/65534·65536`, `offset = lo − scale/65536`, so that
//!   `raw/65536·scale + offset` is `1/z` within half a step `(hi − lo)/65534/2` (plus f32
//!   rounding). When `hi == lo` every kept pixel stores 32768 with `scale = 2·lo`, `offset = 0`,
//!   which gives `lo` exactly.
//! - A view that keeps no point gets no plane (`None`), like a view without a depth map.
//!
//! Memory: the table holds 24 bytes (f64 xyz) per point some packed view observes and 4 bytes
//! per observation (a u32 index in the observing view's list): the one cost of a convert that
//! grows with the dataset, and only under `--sfm-depths`. A plane is built from the view's own
//! points (16 bytes per point while sorting) plus the plane itself.

use crate::scene::camera::Camera;
use crate::shard::DepthScale;

/// The SfM points each view of a dataset observes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SfmObservations {
    /// World positions of the points some view observes, as the model stores them.
    pub xyz: Vec<[f64; 3]>,
    /// Per view (in the importer's view order): indices into `xyz` of the points it observes,
    /// each once, in the points file's order.
    pub views: Vec<Vec<u32>>,
    /// Track elements read from the points file (all of them, those of skipped views too).
    pub track_elements: u64,
}

impl SfmObservations {
    /// Observations kept (entries of all the views' lists).
    pub fn observations(&self) -> u64 {
        self.views.iter().map(|v| v.len() as u64).sum()
    }

    /// The positions of the points view `view` observes (none for a view out of range).
    pub fn points_of(&self, view: usize) -> impl Iterator<Item = [f64; 3]> + '_ {
        self.views
            .get(view)
            .into_iter()
            .flatten()
            .filter_map(|&k| self.xyz.get(k as usize).copied())
    }
}

/// A view's sparse inverse-depth plane, ready to follow its pixels (and mask).
#[derive(Clone, Debug, PartialEq)]
pub struct SparsePlane {
    /// `width × height` little-endian u16, row-major; 0 where no point landed.
    pub bytes: Vec<u8>,
    pub scale: DepthScale,
    /// Pixels holding a point (nonzero values).
    pub pixels: u64,
}

/// Stored value of a pixel in a view whose kept inverse depths span one value (`hi == lo`).
const CONSTANT_RAW: u16 = 32768;

/// The sparse inverse-depth plane of `points` seen by `camera` (the view's packed
/// camera, pinhole or fisheye); `None` when no point is kept. See the module doc for the rules.
pub fn sparse_plane(
    camera: &Camera,
    points: impl Iterator<Item = [f64; 3]>,
) -> Option<SparsePlane> {
    let (w, h) = (camera.width as usize, camera.height as usize);
    // (pixel index, inverse depth) of every kept point.
    let mut kept: Vec<(usize, f64)> = points
        .filter_map(|p| {
            if !p.iter().all(|c| c.is_finite()) {
                return None;
            }
            let q = camera.world_to_camera.transform(p);
            // Camera-space z for either projection: the depth the renderers draw.
            let inv = 1.0 / q[2];
            if !(q[2] > 0.0 && inv.is_finite()) {
                return None;
            }
            let [u, v] = camera.project_camera_point(q)?;
            // Also false for NaN.
            if !((0.0..w as f64).contains(&u) && (0.0..h as f64).contains(&v)) {
                return None;
            }
            // u < w and v < h, so both floors index the plane.
            Some((v.floor() as usize * w + u.floor() as usize, inv))
        })
        .collect();
    // Nearest first within a pixel, then one per pixel.
    kept.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    kept.dedup_by_key(|e| e.0);
    let (lo, hi) = kept.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), e| {
        (lo.min(e.1), hi.max(e.1))
    });
    if kept.is_empty() {
        return None;
    }
    let (quantise, scale) = quantiser(lo, hi);
    let mut bytes = vec![0u8; 2 * w * h];
    for &(pixel, inv) in &kept {
        bytes[2 * pixel..2 * pixel + 2].copy_from_slice(&quantise(inv).to_le_bytes());
    }
    Some(SparsePlane {
        bytes,
        scale,
        pixels: kept.len() as u64,
    })
}

/// The map of inverse depths in `[lo, hi]` (`0 < lo ≤ hi`) onto `1..=65535` and the
/// [`DepthScale`] that maps them back (see the module doc).
pub fn quantiser(lo: f64, hi: f64) -> (impl Fn(f64) -> u16, DepthScale) {
    let range = hi - lo;
    let quantise = move |inv: f64| {
        if range > 0.0 {
            // In [1, 65535] for inv in [lo, hi]; the clamp guards rounding at the ends.
            (1.0 + ((inv - lo) / range * 65534.0).round()).clamp(1.0, 65535.0) as u16
        } else {
            CONSTANT_RAW
        }
    };
    let scale = if range > 0.0 {
        let scale = range / 65534.0 * 65536.0;
        DepthScale {
            scale: scale as f32,
            offset: (lo - scale / 65536.0) as f32,
        }
    } else {
        // 32768/65536 = 0.5 exactly, and doubling an f32 is exact: the target is lo as f32.
        DepthScale {
            scale: (2.0 * lo) as f32,
            offset: 0.0,
        }
    };
    (quantise, scale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Projection;
    use crate::scene::camera::{Intrinsics, Pose};

    /// At the origin looking down +z, 8×6 pixels, fx = fy = 8, centre (4, 3).
    fn camera() -> Camera {
        Camera {
            width: 8,
            height: 6,
            intrinsics: Intrinsics {
                fx: 8.0,
                fy: 8.0,
                cx: 4.0,
                cy: 3.0,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        }
    }

    fn raw_at(p: &SparsePlane, w: usize, i: usize, j: usize) -> u16 {
        let o = 2 * (j * w + i);
        u16::from_le_bytes([p.bytes[o], p.bytes[o + 1]])
    }

    #[test]
    fn points_land_in_the_pixel_that_holds_their_projection() {
        let cam = camera();
        // u = 8·x/z + 4: x/z = 0 lands on the left edge of pixel 4, x/z = −0.5 on the left
        // edge of the image (pixel 0), x/z = 0.4999 just inside pixel 7.
        let pts = [
            [0.0, 0.0, 2.0],          // (4, 3)
            [-1.0, -0.75, 2.0],       // u = 0, v = 0: the first pixel's corner
            [0.4999 * 4.0, 0.0, 4.0], // u = 7.9992: pixel 7
        ];
        let p = sparse_plane(&cam, pts.into_iter()).unwrap();
        assert_eq!(p.pixels, 3);
        assert_ne!(raw_at(&p, 8, 4, 3), 0);
        assert_ne!(raw_at(&p, 8, 0, 0), 0);
        assert_ne!(raw_at(&p, 8, 7, 3), 0);
        assert_eq!(raw_at(&p, 8, 3, 3), 0, "left of the centre holds nothing");
        let nonzero = p.bytes.chunks_exact(2).filter(|b| b != &[0, 0]).count();
        assert_eq!(nonzero, 3);
    }

    /// A fisheye view places a point by the equidistant projection (θ·f from the centre), so
    /// a point 60° off the axis, far outside the pinhole view of the same intrinsics, lands
    /// in the image; its value is still 1/z, the camera-space depth.
    #[test]
    fn a_fisheye_view_keeps_points_where_the_equidistant_projection_puts_them() {
        // f = 4/(π/3): the right edge (4 px from the centre) is 60° off the axis.
        let f = 4.0 / std::f64::consts::FRAC_PI_3;
        let cam = Camera {
            intrinsics: Intrinsics {
                fx: f,
                fy: f,
                cx: 4.0,
                cy: 3.0,
            },
            projection: Projection::Fisheye,
            ..camera()
        };
        // 55° to the right at depth 2 (u = 4 + f·55° = 7.67: pixel 7), and on the axis at
        // depth 4.
        let t = 55f64.to_radians();
        let pts = [[2.0 * t.tan(), 0.0, 2.0], [0.0, 0.0, 4.0]];
        let p = sparse_plane(&cam, pts.into_iter()).unwrap();
        assert_eq!(p.pixels, 2);
        let (lo, hi) = (0.25, 0.5);
        assert_eq!(raw_at(&p, 8, 7, 3), 65535);
        assert_eq!(raw_at(&p, 8, 4, 3), 1);
        assert!((p.scale.target(65535) - hi).abs() < 1e-6);
        assert!((p.scale.target(1) - lo).abs() < 1e-6);
        // The pinhole of the same intrinsics sees only the point on the axis.
        let pin = Camera {
            projection: Projection::Pinhole,
            ..cam
        };
        assert_eq!(sparse_plane(&pin, pts.into_iter()).unwrap().pixels, 1);
        // Beyond 90° (behind the camera plane) nothing lands, as for a pinhole.
        assert_eq!(sparse_plane(&cam, [[1.0, 0.0, -0.1]].into_iter()), None);
    }

    #[test]
    fn points_behind_outside_or_not_finite_are_dropped() {
        let cam = camera();
        let pts = [
            [0.0, 0.0, -2.0],             // behind
            [0.0, 0.0, 0.0],              // on the camera: 1/z infinite
            [1.0, 0.0, 2.0],              // u = 8: the right edge is outside
            [0.0, 0.75, 2.0],             // v = 6: the bottom edge is outside
            [-1.0001, 0.0, 2.0],          // u < 0
            [f64::NAN, 0.0, 2.0],         // not finite
            [0.0, 0.0, f64::INFINITY],    // not finite
            [f64::MAX, f64::MAX, 1e-300], // projects to infinity
        ];
        assert_eq!(sparse_plane(&cam, pts.into_iter()), None);
        assert_eq!(sparse_plane(&cam, std::iter::empty()), None);
    }

    #[test]
    fn the_nearest_point_of_a_pixel_wins() {
        let cam = camera();
        // Three points on the optical axis (pixel (4, 3)) at depths 5, 2, 3, and one at depth
        // 10 elsewhere (pixel (0, 0)): the pixel keeps 1/2.
        let pts = [
            [0.0, 0.0, 5.0],
            [0.0, 0.0, 2.0],
            [0.0, 0.0, 3.0],
            [-5.0, -3.75, 10.0],
        ];
        let p = sparse_plane(&cam, pts.into_iter()).unwrap();
        assert_eq!(p.pixels, 2);
        // lo = 0.1, hi = 0.5: the nearest point is hi, stored as 65535; the far one as 1.
        assert_eq!(raw_at(&p, 8, 4, 3), 65535);
        assert_eq!(raw_at(&p, 8, 0, 0), 1);
        assert!((p.scale.target(65535) - 0.5).abs() < 1e-6);
        assert!((p.scale.target(1) - 0.1).abs() < 1e-6);
    }

    #[test]
    fn the_encoding_round_trips_within_half_a_step() {
        // Many depths over a wide range, each in its own pixel of a wide camera.
        let w = 4096u32;
        let cam = Camera {
            width: w,
            height: 1,
            intrinsics: Intrinsics {
                fx: 1.0,
                fy: 1.0,
                cx: 0.0,
                cy: 0.5,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        };
        let mut rng = crate::rng::Rng::new(3);
        let depths: Vec<f64> = (0..w).map(|_| rng.uniform(0.7, 93.0)).collect();
        // Pixel i: x/z = i + 0.5.
        let pts: Vec<[f64; 3]> = depths
            .iter()
            .enumerate()
            .map(|(i, &z)| [(i as f64 + 0.5) * z, 0.0, z])
            .collect();
        let p = sparse_plane(&cam, pts.into_iter()).unwrap();
        assert_eq!(p.pixels, w as u64);
        let inv: Vec<f64> = depths.iter().map(|z| 1.0 / z).collect();
        let lo = inv.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = inv.iter().copied().fold(0.0, f64::max);
        let half_step = (hi - lo) / 65534.0 / 2.0;
        let mut targets = Vec::new();
        p.scale.targets_into(&p.bytes, &mut targets);
        let mut worst = 0.0f64;
        for (i, (&t, &want)) in targets.iter().zip(&inv).enumerate() {
            let raw = raw_at(&p, w as usize, i, 0);
            assert!(raw >= 1, "pixel {i} holds a point, never NO_DEPTH");
            let err = (t as f64 - want).abs();
            worst = worst.max(err);
            assert!(
                err <= half_step + 4.0 * f32::EPSILON as f64 * hi,
                "pixel {i}: target {t}, 1/z {want}, error {err} > half a step {half_step}"
            );
        }
        // The error is quantization, not something coarser.
        assert!(worst > half_step * 0.5, "{worst} vs {half_step}");
        // The ends are the extreme values exactly.
        let raws: Vec<u16> = (0..w as usize)
            .map(|i| raw_at(&p, w as usize, i, 0))
            .collect();
        assert_eq!(raws.iter().min(), Some(&1));
        assert_eq!(raws.iter().max(), Some(&65535));
    }

    #[test]
    fn one_inverse_depth_gives_exactly_that_depth() {
        let cam = camera();
        for z in [0.37, 2.0, 1234.5] {
            // Two points at the same depth in different pixels, and one alone.
            let p =
                sparse_plane(&cam, [[0.0, 0.0, z], [-0.5 * z, -0.375 * z, z]].into_iter()).unwrap();
            assert_eq!(p.pixels, 2);
            assert_eq!(raw_at(&p, 8, 4, 3), CONSTANT_RAW);
            assert_eq!(p.scale.target(CONSTANT_RAW), (1.0 / z) as f32);
            assert!(
                p.scale.scale > 0.0,
                "a positive scale: 0 reads as an unreliable fit"
            );
        }
    }

    #[test]
    fn observations_list_points_per_view() {
        let obs = SfmObservations {
            xyz: vec![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
            views: vec![vec![1], vec![], vec![0, 1]],
            track_elements: 4,
        };
        assert_eq!(obs.observations(), 3);
        assert_eq!(obs.points_of(0).collect::<Vec<_>>(), vec![[4.0, 5.0, 6.0]]);
        assert_eq!(obs.points_of(1).count(), 0);
        assert_eq!(obs.points_of(2).count(), 2);
        assert_eq!(obs.points_of(9).count(), 0);
    }
}
