//! Mip-Splatting's 3D smoothing filter in training: each Gaussian's filter set from the training
//! cameras ([`compute`]), on the host and, operation for operation, by the device engine's kernels.
//! The filter's meaning and how a saved model holds it: [`crate::scene::filter3d`].
//!
//! [`compute`] gives each Gaussian the filter of the highest sampling rate any training camera
//! has at its centre: over the cameras whose view (widened by [`FRUSTUM_MARGIN`] on each side)
//! holds the centre at a depth `z` past the renderer's near plane, the largest `focal/z` (pixels
//! per scene unit, `focal` the larger of `fx`, `fy`; through an equidistant fisheye
//! `focal·θ/r`, its largest magnification there, across the ray: `θ = atan2(r, z)` with `r` the
//! centre's distance from the optical axis, `1/z` on it), and `f = √0.2 / rate`: a Gaussian of
//! variance 0.2 sampling intervals², Mip-Splatting's choice. A Gaussian no camera sees gets the
//! lowest rate of those seen (Mip-Splatting: their farthest distance), the widest filter.
//! Mip-Splatting takes the nearest depth over the cameras and one focal length (the largest of
//! every camera) for all; the rate per camera is the paper's definition, and the same wherever
//! the cameras share their intrinsics. The evaluation is f32, operation for operation the
//! device kernels' (`filter3d_rates`, `filter3d_finish` in `kernels/densify.cu`), so both
//! engines set the same filters.

use rayon::prelude::*;

use crate::render::cpu::project::NEAR_PLANE;
use crate::scene::camera::{Camera, Projection};
use crate::scene::filter3d::unfuse;
use crate::scene::gaussians::Gaussians;

/// The filter's variance in sampling intervals² (Mip-Splatting's 0.2): `f = √0.2 / rate`.
pub const FILTER_VARIANCE: f64 = 0.2;
/// How far beyond each border of a camera's image (as a fraction of its size) a Gaussian's
/// centre still counts as seen (Mip-Splatting's 0.15).
pub const FRUSTUM_MARGIN: f64 = 0.15;
/// Host bytes per Gaussian a run with the filter holds beside the model: the filter itself,
/// its copy in the CPU rasterizer, and while a model is saved the folded log-scales and
/// opacities (16 B).
pub const HOST_BYTES_PER_GAUSSIAN: u64 = 4 + 4 + EXPORT_BYTES_PER_GAUSSIAN;
/// The folded log-scales and opacity a saved model holds per Gaussian beside the model.
pub const EXPORT_BYTES_PER_GAUSSIAN: u64 = 16;

/// Host bytes per Gaussian of a run's 3D filter (`with_filter`): on the host engine
/// [`HOST_BYTES_PER_GAUSSIAN`]; with the model on a device, the filter's downloaded copy and
/// the folded values of a saved model (the filter itself lives on the device); 0 without it.
pub fn bytes_per_gaussian(with_filter: bool, on_device: bool) -> u64 {
    match (with_filter, on_device) {
        (false, _) => 0,
        (true, false) => HOST_BYTES_PER_GAUSSIAN,
        (true, true) => EXPORT_BYTES_PER_GAUSSIAN + 4,
    }
}
/// Floats per camera in [`camera_rows`]: the world-to-camera rotation (row-major) and
/// translation, `fx fy cx cy`, the image's width and height, and 1 for an equidistant fisheye
/// (0: pinhole).
pub const CAMERA_ROW: usize = 19;

/// The cameras the filter is set from, [`CAMERA_ROW`] f32 each (the kernel's layout).
pub fn camera_rows(cameras: &[Camera]) -> Vec<f32> {
    let mut rows = Vec::with_capacity(CAMERA_ROW * cameras.len());
    for c in cameras {
        let p = &c.world_to_camera;
        rows.extend(p.rotation.iter().flatten().map(|&v| v as f32));
        rows.extend(p.translation.map(|v| v as f32));
        let k = c.intrinsics;
        rows.extend([k.fx, k.fy, k.cx, k.cy].map(|v| v as f32));
        rows.extend([c.width as f32, c.height as f32]);
        rows.push(if c.projection == Projection::Fisheye {
            1.0
        } else {
            0.0
        });
    }
    rows
}

/// The highest sampling rate (pixels per scene unit) any camera of `rows` ([`camera_rows`])
/// has at `mean`, 0 when none sees it (module doc). The kernel `filter3d_rates` evaluates the
/// same f32 operations in the same order.
pub fn sampling_rate(mean: [f32; 3], rows: &[f32]) -> f32 {
    let near = NEAR_PLANE as f32;
    let margin = FRUSTUM_MARGIN as f32;
    let mut best = 0.0f32;
    for c in rows.chunks_exact(CAMERA_ROW) {
        let t = |r: usize| {
            c[3 * r] * mean[0] + c[3 * r + 1] * mean[1] + c[3 * r + 2] * mean[2] + c[9 + r]
        };
        let z = t(2);
        if z <= near || z.is_nan() {
            continue;
        }
        let (fx, fy, cx, cy, w, h) = (c[12], c[13], c[14], c[15], c[16], c[17]);
        let (tx, ty) = (t(0), t(1));
        // The centre's pixel and the camera's pixels per scene unit there.
        let (x, y, rate) = if c[18] != 0.0 {
            // Fisheye: θ/r per unit of the normalised image plane (1/z on the axis).
            let r = (tx * tx + ty * ty).sqrt();
            let s = if r > 0.0 { r.atan2(z) / r } else { 1.0 / z };
            (fx * tx * s + cx, fy * ty * s + cy, fx.max(fy) * s)
        } else {
            (fx * tx / z + cx, fy * ty / z + cy, fx.max(fy) / z)
        };
        let inside = x >= -margin * w
            && x <= (1.0 + margin) * w
            && y >= -margin * h
            && y <= (1.0 + margin) * h;
        if inside {
            best = best.max(rate);
        }
    }
    best
}

/// `√FILTER_VARIANCE` in f32, the numerator of every filter.
pub fn filter_numerator() -> f32 {
    FILTER_VARIANCE.sqrt() as f32
}

/// The filter of each Gaussian at `means` for the cameras of `rows` ([`camera_rows`]), into
/// `out` (resized): `√0.2 / rate`, the Gaussians no camera sees at the lowest rate seen; all 0
/// when no camera sees any Gaussian.
pub fn compute(means: &[[f32; 3]], rows: &[f32], out: &mut Vec<f32>) {
    out.clear();
    out.par_extend(means.par_iter().map(|&m| sampling_rate(m, rows)));
    let lowest = out
        .iter()
        .copied()
        .filter(|&r| r > 0.0)
        .fold(f32::INFINITY, f32::min);
    finish(out, lowest);
}

/// Turns sampling rates into filters in place, a rate of 0 taking `lowest` (the lowest rate
/// seen; ∞ when none was: then every filter is 0). The kernel `filter3d_finish`'s twin.
pub fn finish(rates: &mut [f32], lowest: f32) {
    let k = filter_numerator();
    rates.par_iter_mut().for_each(|r| {
        let rate = if *r > 0.0 { *r } else { lowest };
        *r = k / rate;
    });
}

/// What [`unfold`] did to a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unfolded {
    /// Gaussians of the model.
    pub gaussians: usize,
    /// Of them, those the filter could not give back as folded
    /// ([`crate::scene::filter3d::Unfused::exact`]): narrower
    /// than the filter on some axis, so drawn at its width.
    pub inexact: usize,
}

/// Takes a folded 3D filter out of a model's stored scales and opacities (`gs-train --init
/// --filter-3d` of a model saved with one): each Gaussian's filter is the one `cameras` set
/// ([`compute`], as the run's first step will), and its values become those that, drawn
/// through that filter, give the folded Gaussian back ([`unfuse`]). A model saved by a run
/// on the same cameras at the same size gets back what that run trained (the filter depends
/// only on the means and the cameras), so the new run's first render draws the saved model
/// instead of filtering it twice.
pub fn unfold(g: &mut Gaussians, cameras: &[Camera]) -> Unfolded {
    let mut filter = Vec::new();
    compute(&g.means, &camera_rows(cameras), &mut filter);
    let inexact = g
        .log_scales
        .par_iter_mut()
        .zip(g.logit_opacities.par_iter_mut())
        .zip(filter.par_iter())
        .map(|((ls, o), &f)| {
            let u = unfuse(*ls, *o, f);
            (*ls, *o) = (u.log_scale, u.logit_opacity);
            !u.exact
        })
        .filter(|&inexact| inexact)
        .count();
    Unfolded {
        gaussians: g.len(),
        inexact,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Projection;
    use crate::scene::camera::{Intrinsics, Pose};

    fn camera_at(centre: [f64; 3], fx: f64, width: u32, height: u32) -> Camera {
        // Looking down +z from `centre` (OpenCV axes, identity rotation).
        Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx,
                fy: fx,
                cx: width as f64 / 2.0,
                cy: height as f64 / 2.0,
            },
            world_to_camera: Pose::from_camera_to_world(
                [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                centre,
            ),
            projection: Projection::Pinhole,
        }
    }

    #[test]
    fn the_filter_follows_the_nearest_sharpest_camera_that_sees_the_centre() {
        let cams = [
            camera_at([0.0, 0.0, -4.0], 100.0, 200, 100),
            camera_at([0.0, 0.0, -2.0], 50.0, 200, 100),
            camera_at([10.0, 0.0, -1.0], 400.0, 200, 100),
        ];
        let rows = camera_rows(&cams);
        let k = 0.2f32.sqrt();
        let means = [
            // Seen by cameras 0 and 1: rates 100/4 = 25 and 50/2 = 25; camera 2 sees x = −10
            // at z = 1 at pixel 100 − 4000: outside.
            [0.0, 0.0, 0.0],
            // Only camera 0 (1.1 units off axis at z 4: pixel 127.5 of 200; camera 1 at z 2:
            // pixel 127.5 too, rate 25 as well): move it so camera 1 misses it.
            [2.0, 0.0, 0.0],
            // In front of camera 2 alone, at z 1: rate 400.
            [10.0, 0.0, 0.0],
            // Behind every camera: unseen.
            [0.0, 0.0, -50.0],
        ];
        let mut out = Vec::new();
        compute(&means, &rows, &mut out);
        // Camera 0 sees x = 2 at pixel 100 + 100·2/4 = 150; camera 1 at 100 + 50·2/2 = 150.
        assert_eq!(sampling_rate(means[1], &rows), 25.0);
        assert_eq!(sampling_rate(means[2], &rows), 400.0);
        assert_eq!(sampling_rate(means[3], &rows), 0.0);
        assert_eq!(out[0], k / 25.0);
        assert_eq!(out[2], k / 400.0);
        // The unseen Gaussian takes the lowest rate seen, 25.
        assert_eq!(out[3], k / 25.0);
        // The margin: 15 % of the width beyond the border counts, 16 % does not.
        let edge = |px: f32| [(px - 100.0) * 4.0 / 100.0, 0.0, 0.0];
        let only0 = camera_rows(&cams[..1]);
        assert_eq!(sampling_rate(edge(229.0), &only0), 25.0);
        assert_eq!(sampling_rate(edge(233.0), &only0), 0.0);
        assert_eq!(sampling_rate(edge(-29.0), &only0), 25.0);
        assert_eq!(sampling_rate(edge(-33.0), &only0), 0.0);
        // No camera sees anything: no filter.
        compute(&means[3..], &rows, &mut out);
        assert_eq!(out, [0.0]);
    }

    /// Through an equidistant fisheye the rate is `f·θ/r` (`f/z` on the axis) and the view
    /// holds what the fisheye sees, past where a pinhole of its focal length would.
    #[test]
    fn a_fisheye_camera_samples_at_its_magnification_across_the_ray() {
        let mut fish = camera_at([0.0, 0.0, 0.0], 100.0, 400, 300);
        fish.projection = Projection::Fisheye;
        let rows = camera_rows(&[fish]);
        assert_eq!(rows.len(), CAMERA_ROW);
        // On the axis at z 4: 100/4.
        assert_eq!(sampling_rate([0.0, 0.0, 4.0], &rows), 25.0);
        // 60° off the axis at distance 2 (r = √3, z = 1): θ = π/3 lands 104.7 px from the
        // centre (inside 200 px); the rate is 100·(π/3)/√3. A pinhole of the same focal length
        // would put it at 173 px, and at 75° (373 px) outside, where the fisheye still sees it.
        let r = 3f32.sqrt();
        let got = sampling_rate([r, 0.0, 1.0], &rows);
        let want = 100.0 * (std::f32::consts::FRAC_PI_3 / r);
        assert!((got - want).abs() <= 1e-5 * want, "{got} vs {want}");
        let t75 = 75f32.to_radians();
        let p75 = [t75.sin(), 0.0, t75.cos()];
        assert!(sampling_rate(p75, &rows) > 0.0);
        let mut pin = fish;
        pin.projection = Projection::Pinhole;
        assert_eq!(sampling_rate(p75, &camera_rows(&[pin])), 0.0);
    }

    /// A model saved through the filter (folded by `fuse`, as a run saves it) and unfolded with
    /// the same cameras is what was trained, wherever its scales resolve it, and drawn through
    /// the filter it is exactly the saved model; through cameras that see it sharper (a
    /// narrower model than their filter) the narrower Gaussians are counted.
    #[test]
    #[allow(clippy::needless_range_loop)] // Several models indexed in lockstep.
    fn unfolding_with_the_saving_cameras_gives_the_trained_model_back() {
        let cams = [
            camera_at([0.0, 0.0, -4.0], 100.0, 200, 100),
            camera_at([1.0, 0.0, -3.0], 80.0, 200, 100),
        ];
        let rows = camera_rows(&cams);
        let mut rng = crate::rng::Rng::new(11);
        let n = 2000;
        let mut trained = Gaussians::zeros(n, 0);
        for i in 0..n {
            trained.means[i] = [0; 3].map(|_| -2.0 + 4.0 * rng.next_f32());
            trained.log_scales[i] = [0; 3].map(|_| -7.0 + 5.0 * rng.next_f32());
            trained.logit_opacities[i] = -6.0 + 12.0 * rng.next_f32();
        }
        let mut filter = Vec::new();
        compute(&trained.means, &rows, &mut filter);
        let mut saved = trained.clone();
        for i in 0..n {
            (saved.log_scales[i], saved.logit_opacities[i]) = crate::scene::filter3d::fuse(
                trained.log_scales[i],
                trained.logit_opacities[i],
                filter[i],
            );
        }
        let mut unfolded = saved.clone();
        assert_eq!(
            unfold(&mut unfolded, &cams),
            Unfolded {
                gaussians: n,
                inexact: 0
            }
        );
        assert_eq!(unfolded.means, trained.means);
        let mut resolved = 0;
        for i in 0..n {
            let (drawn, drawn_logit) = crate::scene::filter3d::fuse(
                unfolded.log_scales[i],
                unfolded.logit_opacities[i],
                filter[i],
            );
            for a in 0..3 {
                assert!(
                    (drawn[a] - saved.log_scales[i][a]).abs() < 6e-5,
                    "{i} axis {a}"
                );
            }
            let o = |l: f32| 1.0 / (1.0 + (-f64::from(l)).exp());
            assert!(
                (o(drawn_logit) / o(saved.logit_opacities[i]) - 1.0).abs() < 1e-2,
                "{i}"
            );
            let f = f64::from(filter[i]);
            if trained.log_scales[i]
                .iter()
                .all(|&l| f64::from(l).exp() > 0.05 * f)
            {
                resolved += 1;
                for a in 0..3 {
                    let d = unfolded.log_scales[i][a] - trained.log_scales[i][a];
                    assert!(d.abs() < 1e-3, "{i} axis {a}: {d}");
                }
            }
        }
        // Most of the model is resolved (the rest is far narrower than its filter).
        assert!(resolved > n / 4, "{resolved}");
        // A camera of a lower sampling rate (80 px per unit at 4 units: 20, against 25 and
        // more) sets wider filters: the Gaussians saved narrower than them are counted.
        let blurry = [camera_at([0.0, 0.0, -4.0], 80.0, 200, 100)];
        let mut again = saved.clone();
        let u = unfold(&mut again, &blurry);
        assert!(u.inexact > 0 && u.inexact < n, "{u:?}");
    }
}
