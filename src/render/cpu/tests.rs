//! Hand-computed cases, culling, degenerate inputs, binning vs brute force, early termination,
//! background, preflight and the forward/backward contract.

use super::*;
use crate::render::RenderOptions;
use crate::rng::Rng;
use crate::scene::camera::{Intrinsics, Pose, Projection};
use crate::scene::sh::SH_C0;

pub(super) fn camera(w: u32, h: u32, f: f64, cx: f64, cy: f64) -> Camera {
    Camera {
        width: w,
        height: h,
        intrinsics: Intrinsics {
            fx: f,
            fy: f,
            cx,
            cy,
        },
        world_to_camera: Pose::IDENTITY,
        projection: Projection::Pinhole,
    }
}

/// (mean, log_scale, rotation, opacity, rgb colour) of one degree-0 Gaussian.
type Item = ([f32; 3], [f32; 3], [f32; 4], f32, [f32; 3]);

/// Degree-0 Gaussians from activated opacity and colour.
fn gaussians(items: &[Item]) -> Gaussians {
    let mut g = Gaussians::default();
    for &(m, s, q, o, c) in items {
        g.means.push(m);
        g.log_scales.push(s);
        g.rotations.push(q);
        g.logit_opacities.push((o / (1.0 - o)).ln());
        g.sh.push(c.map(|v| (v - 0.5) / SH_C0 as f32));
    }
    g
}

fn opts(bg: [f32; 3]) -> RenderOptions {
    RenderOptions {
        sh_degree: 0,
        background: bg,
        ..RenderOptions::default()
    }
}

fn render(g: &Gaussians, cam: &Camera, o: &RenderOptions) -> RenderOutput {
    let mut r = CpuRasterizer::<f32>::new();
    let mut out = RenderOutput::default();
    r.forward(g, cam, o, &mut out).unwrap();
    out
}

fn px(out: &RenderOutput, i: u32, j: u32) -> [f32; 3] {
    let p = 3 * (j * out.width + i) as usize;
    [out.image[p], out.image[p + 1], out.image[p + 2]]
}

const ID: [f32; 4] = [1.0, 0.0, 0.0, 0.0];

#[test]
fn single_gaussian_centre_value_and_falloff() {
    // 21×21 image with the principal point at (10.5, 10.5): the centre of pixel (10, 10).
    let cam = camera(21, 21, 20.0, 10.5, 10.5);
    let s = 0.1f32; // world σ at z = 2 → f·s/z = 1 px
    let (o, c, bg) = (0.6f32, [0.7f32, 0.2, 0.9], [0.1f32, 0.3, 0.5]);
    let g = gaussians(&[([0.0, 0.0, 2.0], [s.ln(); 3], ID, o, c)]);
    let out = render(&g, &cam, &opts(bg));
    // Σ2d = (1 px)² + 0.3 dilation on the diagonal.
    let var = 1.0f64 + 0.3;
    assert_eq!(out.radii[0], (3.0 * var.sqrt()).ceil() as u32);
    let centre = px(&out, 10, 10);
    for ch in 0..3 {
        let want = c[ch] * o + (1.0 - o) * bg[ch];
        assert!((centre[ch] - want).abs() < 1e-6, "{centre:?}");
    }
    // Two pixels right: d = 2 px, σ = ½·4/var.
    let a = (o as f64 * (-2.0 / var).exp()) as f32;
    let right = px(&out, 12, 10);
    for ch in 0..3 {
        let want = c[ch] * a + (1.0 - a) * bg[ch];
        assert!((right[ch] - want).abs() < 1e-6);
    }
    // Symmetric around pixel (10, 10) in all four directions and diagonally.
    for d in 1..=3 {
        let r = px(&out, 10 + d, 10);
        assert_eq!(r, px(&out, 10 - d, 10));
        assert_eq!(r, px(&out, 10, 10 + d));
        assert_eq!(r, px(&out, 10, 10 - d));
        assert_eq!(px(&out, 10 + d, 10 + d), px(&out, 10 - d, 10 - d));
    }
    assert!((out.alpha[10 * 21 + 10] - o).abs() < 1e-6);
    assert_eq!(out.means2d[0], [10.5, 10.5]);
    assert_eq!(out.last_contributor[10 * 21 + 10], 1);
}

#[test]
fn mean_on_pixel_corner_is_symmetric_between_four_pixels() {
    // Principal point (10, 10) is the corner shared by pixels (9,9), (10,9), (9,10), (10,10).
    let cam = camera(20, 20, 20.0, 10.0, 10.0);
    let g = gaussians(&[([0.0, 0.0, 2.0], [0.1f32.ln(); 3], ID, 0.8, [1.0; 3])]);
    let out = render(&g, &cam, &opts([0.0; 3]));
    let v = px(&out, 10, 10);
    assert_eq!(v, px(&out, 9, 9));
    assert_eq!(v, px(&out, 9, 10));
    assert_eq!(v, px(&out, 10, 9));
    assert!(v[0] < 0.8 && v[0] > 0.5);
}

#[test]
fn anisotropic_gaussian_follows_rotation() {
    // Long along world x (scale 0.3 vs 0.05), then rotated 90° about z: long along y.
    let cam = camera(32, 32, 20.0, 16.0, 16.0);
    let h = std::f32::consts::FRAC_1_SQRT_2;
    let s = [0.3f32.ln(), 0.05f32.ln(), 0.05f32.ln()];
    let flat = render(
        &gaussians(&[([0.0, 0.0, 2.0], s, ID, 0.9, [1.0; 3])]),
        &cam,
        &opts([0.0; 3]),
    );
    let rot = render(
        &gaussians(&[([0.0, 0.0, 2.0], s, [h, 0.0, 0.0, h], 0.9, [1.0; 3])]),
        &cam,
        &opts([0.0; 3]),
    );
    assert!(px(&flat, 20, 15)[0] > 10.0 * px(&flat, 15, 20)[0]);
    assert!(px(&rot, 15, 20)[0] > 10.0 * px(&rot, 20, 15)[0]);
}

#[test]
fn behind_camera_and_near_plane_are_culled() {
    let cam = camera(16, 16, 16.0, 8.0, 8.0);
    let bg = [0.25f32, 0.5, 0.75];
    let s = [0.001f32.ln(); 3];
    let g = gaussians(&[
        ([0.0, 0.0, -1.0], [0.5f32.ln(); 3], ID, 0.9, [1.0; 3]),
        ([0.0, 0.0, 0.005], s, ID, 0.9, [1.0; 3]),
    ]);
    let out = render(&g, &cam, &opts(bg));
    assert_eq!(out.radii, vec![0, 0]);
    assert!(out.image.chunks(3).all(|p| p == bg));
    assert_eq!(out.num_intersections, 0);
    // Just in front of the near plane (0.01) the same Gaussian renders.
    let g = gaussians(&[([0.0, 0.0, 0.02], s, ID, 0.9, [1.0; 3])]);
    let out = render(&g, &cam, &opts(bg));
    assert!(out.radii[0] > 0);
    assert!(out.image.chunks(3).any(|p| p != bg));
}

#[test]
fn degenerate_inputs_are_skipped_without_nan() {
    let cam = camera(32, 32, 32.0, 16.0, 16.0);
    let ok = (
        [0.0f32, 0.0, 3.0],
        [0.1f32.ln(); 3],
        ID,
        0.5f32,
        [0.8f32; 3],
    );
    let mut items = vec![ok];
    items.push(([0.1, 0.0, 3.0], [0.1f32.ln(); 3], [0.0; 4], 0.5, [1.0; 3])); // zero quaternion
    items.push(([f32::NAN, 0.0, 3.0], [0.1f32.ln(); 3], ID, 0.5, [1.0; 3])); // NaN mean
    items.push(([0.2, 0.0, 3.0], [f32::INFINITY; 3], ID, 0.5, [1.0; 3])); // infinite scale
    items.push(([0.3, 0.0, 3.0], [f32::NEG_INFINITY; 3], ID, 0.5, [1.0; 3])); // zero scale
    items.push((
        [0.0, 0.3, 3.0],
        [0.1f32.ln(); 3],
        [f32::NAN; 4],
        0.5,
        [1.0; 3],
    )); // NaN quat
    let mut g = gaussians(&items);
    g.logit_opacities.push(f32::NAN);
    g.means.push([0.0, -0.3, 3.0]);
    g.log_scales.push([0.1f32.ln(); 3]);
    g.rotations.push(ID);
    g.sh.push([0.0; 3]); // NaN opacity
    g.means.push([-0.3, 0.0, 3.0]);
    g.log_scales.push([0.1f32.ln(); 3]);
    g.rotations.push(ID);
    g.logit_opacities.push(0.0);
    g.sh.push([f32::NAN, 0.0, 0.0]); // NaN SH
    let out = render(&g, &cam, &opts([0.0; 3]));
    assert!(out.image.iter().all(|v| v.is_finite()));
    assert!(out.radii[0] > 0);
    assert_eq!(out.radii[1], 0, "zero quaternion is skipped");
    assert_eq!(out.radii[2], 0, "NaN mean is skipped");
    assert_eq!(out.radii[3], 0, "infinite scale is skipped");
    assert!(
        out.radii[4] > 0,
        "zero scale renders as the 0.3 px² dilation alone"
    );
    assert_eq!(&out.radii[5..], &[0, 0, 0]);
    // Backward is finite too.
    let mut r = CpuRasterizer::<f32>::new();
    let mut o = RenderOutput::default();
    r.forward(&g, &cam, &opts([0.0; 3]), &mut o).unwrap();
    let mut grads = GaussianGrads::default();
    let d = vec![1.0f32; o.image.len()];
    r.backward(&g, &cam, &opts([0.0; 3]), &d, &mut grads)
        .unwrap();
    assert!(grads.means.iter().flatten().all(|v| v.is_finite()));
    assert!(grads.rotations.iter().flatten().all(|v| v.is_finite()));
    assert_eq!(grads.rotations[1], [0.0; 4]);
}

#[test]
fn inconsistent_gaussians_and_degree_are_errors() {
    let cam = camera(8, 8, 8.0, 4.0, 4.0);
    let mut g = gaussians(&[([0.0, 0.0, 2.0], [0.0; 3], ID, 0.5, [1.0; 3])]);
    let mut r = CpuRasterizer::<f32>::new();
    let mut out = RenderOutput::default();
    let o = RenderOptions::default(); // degree 3 > stored 0
    assert_eq!(
        r.forward(&g, &cam, &o, &mut out),
        Err(RenderError::ShDegree {
            requested: 3,
            stored: 0
        })
    );
    g.logit_opacities.push(0.0);
    let e = r.forward(&g, &cam, &opts([0.0; 3]), &mut out).unwrap_err();
    assert!(matches!(
        e,
        RenderError::InconsistentGaussians {
            field: "logit_opacities",
            got: 2,
            expected: 1,
            ..
        }
    ));
    assert!(e.to_string().contains("logit_opacities"));
}

#[test]
fn early_termination_stops_before_the_saturating_gaussian() {
    let cam = camera(16, 16, 16.0, 8.5, 8.5);
    // Three Gaussians on the optical axis, opacity 0.995 each: after the first T = 0.005, the
    // second would make T = 2.5e-5 < 1e-4, so compositing stops before it.
    let s = [0.3f32.ln(); 3];
    let g = gaussians(&[
        ([0.0, 0.0, 4.0], s, ID, 0.995, [0.0, 0.0, 1.0]),
        ([0.0, 0.0, 2.0], s, ID, 0.995, [1.0, 0.0, 0.0]),
        ([0.0, 0.0, 3.0], s, ID, 0.995, [0.0, 1.0, 0.0]),
    ]);
    let bg = [0.2f32, 0.4, 0.6];
    let out = render(&g, &cam, &opts(bg));
    let p = (8 * 16 + 8) as usize;
    assert_eq!(out.last_contributor[p], 1);
    assert!((out.final_transmittance[p] - 0.005).abs() < 1e-6);
    let v = px(&out, 8, 8);
    let want = [0.995 + 0.005 * bg[0], 0.005 * bg[1], 0.005 * bg[2]];
    for ch in 0..3 {
        assert!((v[ch] - want[ch]).abs() < 1e-5, "{v:?}");
    }
}

#[test]
fn empty_scene_is_background() {
    let cam = camera(37, 23, 30.0, 18.5, 11.5);
    let bg = [0.1f32, 0.2, 0.3];
    let out = render(&Gaussians::default(), &cam, &opts(bg));
    assert_eq!(out.image.len(), 3 * 37 * 23);
    assert!(out.image.chunks(3).all(|p| p == bg));
    assert!(out.alpha.iter().all(|&a| a == 0.0));
}

pub(super) fn random_scene(rng: &mut Rng, n: usize, degree: u32, spread: f64) -> Gaussians {
    let nc = sh_coeffs(degree);
    let mut g = Gaussians::zeros(n, degree);
    for i in 0..n {
        g.means[i] = [
            rng.uniform(-spread, spread) as f32,
            rng.uniform(-spread * 0.75, spread * 0.75) as f32,
            rng.uniform(2.0, 6.0) as f32,
        ];
        g.log_scales[i] = [0, 1, 2].map(|_| rng.uniform(-4.5, -1.5) as f32);
        g.rotations[i] = [0, 1, 2, 3].map(|_| rng.normal() as f32);
        g.logit_opacities[i] = rng.uniform(-2.0, 3.0) as f32;
        for k in 0..nc {
            let amp = if k == 0 { 1.0 } else { 0.2 };
            g.sh[i * nc + k] = [0, 1, 2].map(|_| (rng.normal() * amp) as f32);
        }
    }
    g
}

/// Binning against brute force: each tile's list holds exactly the splats binned there, front
/// to back by (depth, index); every binned tile is one both the 3σ box and the (widened)
/// α-support box meet; and of those, every tile left out has no pixel centre where the splat
/// reaches `α ≥ 1/255`, neither exactly (`σ ≤ ln(255·o)` in f64) nor by the rasterizers' own
/// f32 test, so leaving it out changes nothing. Three scenes: varied splats, needles (one axis
/// ×e^3.5, the others thinner), whose f32 `σ` rounds worst, and needles so thin that some
/// exceed every bound on that rounding (`ac/det` in the hundreds of thousands; they keep their
/// 3σ box).
#[test]
fn tile_binning_matches_brute_force() {
    for (seed, stretch, thin) in [(5u64, 0.0, 0.0), (6, 3.5, 1.0), (7, 5.0, 3.0)] {
        brute_force_binning(seed, stretch, thin);
    }
}

/// `stretch`, `thin`: log-scale added to one axis of each splat, taken from the other two.
fn brute_force_binning(seed: u64, stretch: f32, thin: f32) {
    let needles = stretch > 0.0;
    let cam = camera(100, 70, 80.0, 50.0, 35.0);
    let mut g = random_scene(&mut Rng::new(seed), 300, 1, 2.5);
    for (i, s) in g.log_scales.iter_mut().enumerate() {
        for (k, v) in s.iter_mut().enumerate() {
            *v += if k == i % 3 { stretch } else { -thin };
        }
    }
    let mut r = CpuRasterizer::<f32>::new();
    let mut out = RenderOutput::default();
    r.forward(&g, &cam, &opts([0.0; 3]), &mut out).unwrap();
    let bins = r.bins();
    let (tx_n, ty_n) = (7u32, 5u32); // ceil(100/16), ceil(70/16)
    assert_eq!((bins.tiles_x, bins.tiles_y), (tx_n, ty_n));
    let splats = r.splats();
    assert!(splats.iter().filter(|s| s.radius > 0).count() > 100);
    let (mut total, mut by_radius, mut by_boxes) = (0, 0, 0);
    let mut worst_ac_det = 0.0f64;
    for ty in 0..ty_n {
        for tx in 0..tx_n {
            // Tile [16tx, 16tx+16) meets the closed box [m − r, m + r] on both axes.
            let (x0, y0) = (16.0 * tx as f64, 16.0 * ty as f64);
            let meets = |(mx, my): (f64, f64), (rx, ry): (f64, f64)| {
                x0 <= mx + rx && mx - rx < x0 + 16.0 && y0 <= my + ry && my - ry < y0 + 16.0
            };
            let list = bins.tile((ty * tx_n + tx) as usize);
            let mut want = Vec::new();
            for (i, s) in splats.iter().enumerate() {
                let r = s.radius as f64;
                let m = (s.mean2d[0] as f64, s.mean2d[1] as f64);
                let in_radius = s.radius > 0 && meets(m, (r, r));
                by_radius += usize::from(in_radius);
                let [a, b, c] = s.conic;
                let ac_det = (a * c / (a * c - b * b)) as f64;
                let cut = rasterize::sigma_cut(s.opacity);
                // The support box of the widened cut-off; none trusted: the 3σ box alone.
                let in_boxes = in_radius
                    && cut >= 0.0
                    && match rasterize::clip_cut(s.conic, cut) {
                        Some(widened) => rasterize::support(s.conic, widened)
                            .is_some_and(|(ex, ey)| meets(m, (ex as f64, ey as f64))),
                        None => true,
                    };
                by_boxes += usize::from(in_boxes);
                if list.contains(&(i as u32)) {
                    assert!(in_boxes, "tile {tx},{ty}: splat {i} outside its boxes");
                    want.push(i as u32);
                } else if in_boxes {
                    worst_ac_det = worst_ac_det.max(ac_det);
                    let exact_cut = (255.0 * s.opacity as f64).ln();
                    for py in (16 * ty..16 * ty + 16).filter(|&y| y < 70) {
                        for px in (16 * tx..16 * tx + 16).filter(|&x| x < 100) {
                            let [a, b, c] = s.conic.map(f64::from);
                            let dx = m.0 - (px as f64 + 0.5);
                            let dy = m.1 - (py as f64 + 0.5);
                            let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
                            assert!(
                                sigma > exact_cut,
                                "tile {tx},{ty}: splat {i} reaches pixel {px},{py} (σ {sigma}, \
                                 cut {exact_cut}) but is not binned there"
                            );
                            // The rasterizers' own f32 test at that pixel.
                            let [a, b, c] = s.conic;
                            let dx = s.mean2d[0] - (px as f32 + 0.5);
                            let dy = s.mean2d[1] - (py as f32 + 0.5);
                            let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
                            let skipped = sigma < 0.0
                                || sigma > cut
                                || (s.opacity * (-sigma).exp()).min(rasterize::ALPHA_MAX as f32)
                                    < rasterize::ALPHA_MIN as f32;
                            assert!(
                                skipped,
                                "tile {tx},{ty}: splat {i} passes the f32 test at pixel \
                                 {px},{py} (σ {sigma}) but is not binned there"
                            );
                        }
                    }
                }
            }
            want.sort_by(|&a, &b| {
                splats[a as usize]
                    .depth
                    .partial_cmp(&splats[b as usize].depth)
                    .unwrap()
                    .then(a.cmp(&b))
            });
            assert_eq!(list, &want[..], "tile {tx},{ty}");
            total += want.len();
        }
    }
    assert_eq!(out.num_intersections as usize, total);
    // Both narrowings must have kept tiles off (opacities down to sigmoid(−2) ≈ 0.12 and
    // anisotropic splats), or this checks 3DGS's rule alone.
    println!(
        "MEASURED seed {seed}: intersections {total}, boxes alone {by_boxes}, 3σ box alone \
         {by_radius}; largest ac/det among dropped tiles' splats {worst_ac_det:.1}"
    );
    assert!(by_boxes * 10 < by_radius * 9, "{by_boxes} of {by_radius}");
    assert!(total * 20 < by_boxes * 19, "{total} of {by_boxes}");
    if needles {
        assert!(
            worst_ac_det > 100.0,
            "no needle lost a tile: {worst_ac_det}"
        );
    }
}

#[test]
fn results_are_identical_across_thread_counts() {
    let cam = camera(64, 48, 50.0, 32.0, 24.0);
    let g = random_scene(&mut Rng::new(9), 400, 2, 2.0);
    let o = RenderOptions {
        sh_degree: 2,
        background: [0.3; 3],
        ..RenderOptions::default()
    };
    let run = || {
        let mut r = CpuRasterizer::<f32>::new();
        let mut out = RenderOutput::default();
        r.forward(&g, &cam, &o, &mut out).unwrap();
        let d: Vec<f32> = (0..out.image.len()).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut grads = GaussianGrads::default();
        r.backward(&g, &cam, &o, &d, &mut grads).unwrap();
        (out, grads)
    };
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(run);
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap()
        .install(run);
    assert_eq!(one, three);
}

#[test]
fn preflight_refuses_huge_intersection_counts() {
    let cam = camera(640, 480, 500.0, 320.0, 240.0);
    // 2000 Gaussians each covering the whole 40×30-tile screen: 2.4 M intersections.
    let mut items = Vec::new();
    for i in 0..2000 {
        items.push((
            [0.0, 0.0, 5.0 + i as f32 * 1e-3],
            [2.0; 3],
            ID,
            0.5,
            [1.0; 3],
        ));
    }
    let g = gaussians(&items);
    let o = RenderOptions {
        max_intersection_bytes: 1 << 20,
        ..opts([0.0; 3])
    };
    let mut r = CpuRasterizer::<f32>::new();
    let mut out = RenderOutput::default();
    match r.forward(&g, &cam, &o, &mut out) {
        Err(RenderError::TooManyIntersections {
            bytes,
            count,
            limit,
            largest,
        }) => {
            assert_eq!(count, 2000 * 40 * 30);
            assert_eq!(bytes, count * CpuRasterizer::<f32>::BYTES_PER_INTERSECTION);
            assert_eq!(limit, 1 << 20);
            assert_eq!(largest.len(), 5);
            // Equal-sized nearer Gaussians project larger; the nearest come first.
            assert_eq!(largest[0].index, 0);
            assert!(largest.windows(2).all(|w| w[0].radius_px >= w[1].radius_px));
        }
        other => panic!("expected TooManyIntersections, got {other:?}"),
    }
    assert!(
        r.bins().isect_ids.capacity() < 1000,
        "nothing was allocated"
    );
    let msg = r.forward(&g, &cam, &o, &mut out).unwrap_err().to_string();
    assert!(msg.contains("#0 (radius"), "{msg}");
    // A few absurd Gaussians (activated scales, e^10 ≈ 22 000 world units; e^30, whose Σ2d
    // determinant overflows f32 unless inverted at a scale) within the default limit render
    // fine; e^60, whose Σ overflows f32, is skipped, never NaN.
    let g = gaussians(&[
        ([0.0, 0.0, 5.0], [10.0; 3], ID, 0.5, [1.0; 3]),
        ([1.0, 0.0, 5.0], [10.0; 3], ID, 0.5, [1.0; 3]),
        ([1.0, 0.0, 5.0], [30.0; 3], ID, 0.5, [1.0; 3]),
        ([1.0, 0.0, 5.0], [60.0; 3], ID, 0.5, [1.0; 3]),
    ]);
    let out = render(&g, &cam, &opts([0.0; 3]));
    assert_eq!(out.num_intersections, 3 * 1200);
    assert!(out.radii[2] > 1_000_000);
    assert_eq!(out.radii[3], 0);
    assert!(out.radii[0] > 1_000_000);
    assert!(out.image.iter().all(|v| v.is_finite()));
}

#[test]
fn backward_requires_matching_forward() {
    let cam = camera(16, 16, 16.0, 8.0, 8.0);
    let g = gaussians(&[([0.0, 0.0, 2.0], [0.1f32.ln(); 3], ID, 0.5, [1.0; 3])]);
    let mut r = CpuRasterizer::<f32>::new();
    let mut grads = GaussianGrads::default();
    let d = vec![0.0f32; 3 * 256];
    let o = opts([0.0; 3]);
    assert_eq!(
        r.backward(&g, &cam, &o, &d, &mut grads),
        Err(RenderError::StaleForward)
    );
    let mut out = RenderOutput::default();
    r.forward(&g, &cam, &o, &mut out).unwrap();
    let o2 = opts([1.0; 3]);
    assert_eq!(
        r.backward(&g, &cam, &o2, &d, &mut grads),
        Err(RenderError::StaleForward)
    );
    assert!(matches!(
        r.backward(&g, &cam, &o, &d[..10], &mut grads),
        Err(RenderError::BadShape { .. })
    ));
    r.backward(&g, &cam, &o, &d, &mut grads).unwrap();
    assert_eq!(grads.means.len(), 1);
}

/// Gaussian parameters in the precision `F`, owned: an f32 model converted ([`Self::new`]) to
/// render it with `CpuRasterizer<F>`, or a scene built in that precision (`gradcheck`).
#[derive(Clone)]
pub(super) struct Converted<F> {
    pub(super) means: Vec<[F; 3]>,
    pub(super) log_scales: Vec<[F; 3]>,
    pub(super) rotations: Vec<[F; 4]>,
    pub(super) logit_opacities: Vec<F>,
    pub(super) sh_degree: u32,
    pub(super) sh: Vec<[F; 3]>,
    /// A 3D filter's standard deviation per Gaussian, when rendered through one.
    pub(super) filter_3d: Option<Vec<F>>,
}

impl<F: Real> Converted<F> {
    pub(super) fn new(g: &Gaussians) -> Converted<F> {
        let cast = |v: f32| F::from_f64(v as f64);
        Converted {
            means: g.means.iter().map(|v| v.map(cast)).collect(),
            log_scales: g.log_scales.iter().map(|v| v.map(cast)).collect(),
            rotations: g.rotations.iter().map(|v| v.map(cast)).collect(),
            logit_opacities: g.logit_opacities.iter().map(|&v| cast(v)).collect(),
            sh: g.sh.iter().map(|v| v.map(cast)).collect(),
            sh_degree: g.sh_degree,
            filter_3d: None,
        }
    }

    pub(super) fn params(&self) -> GaussianParams<'_, F> {
        GaussianParams {
            means: &self.means,
            log_scales: &self.log_scales,
            rotations: &self.rotations,
            logit_opacities: &self.logit_opacities,
            sh_degree: self.sh_degree,
            sh: &self.sh,
            filter_3d: self.filter_3d.as_deref(),
        }
    }
}

/// Max |f32 − f64| over the image of `g` rendered by both precisions of the CPU rasterizer,
/// and the f32 render.
fn f32_vs_f64(g: &Gaussians, cam: &Camera, o: &RenderOptions) -> (f64, Vec<f32>) {
    let out32 = render(g, cam, o);
    let p = Converted::<f64>::new(g);
    let mut r = CpuRasterizer::<f64>::new();
    let mut out64 = RenderOutput::default();
    r.render(&p.params(), cam, o, &mut out64).unwrap();
    let max = out32
        .image
        .iter()
        .zip(&out64.image)
        .map(|(a, b)| (*a as f64 - b).abs())
        .fold(0.0, f64::max);
    (max, out32.image)
}

#[test]
fn f32_and_f64_agree() {
    let cam = camera(64, 48, 50.0, 32.0, 24.0);
    let g = random_scene(&mut Rng::new(21), 200, 3, 2.0);
    let o = RenderOptions {
        sh_degree: 3,
        background: [0.5; 3],
        ..RenderOptions::default()
    };
    // f32 rounding (~1e-7 relative) through ~tens of compositing steps stays far below 1e-4;
    // a threshold decision (α vs 1/255, T vs 1e-4) flipping would change a pixel by ≥ 1/255
    // only if it happened, which this seed does not trigger.
    let (max, _) = f32_vs_f64(&g, &cam, &o);
    assert!(max < 1e-4, "max |f32 − f64| = {max}");
}

/// A splat with log-scales of 20 (σ ≈ 4.9e8) seen from a few units has `Σ2d` entries near
/// 1e22 px², so `a·c` overflows f32: it used to be culled in f32 while the f64 render draws it
/// over the whole image with nearly its full opacity. Now both precisions draw it alike, with
/// small splats in front of it and behind it, up to log-scales where `Σ2d` itself nears
/// `f32::MAX` (here e^36: `Σ2d` ≈ e^72·(f/z)² ≈ 1e33 px²).
#[test]
fn a_huge_splat_is_drawn_as_the_f64_render_draws_it() {
    let cam = camera(64, 48, 50.0, 32.0, 24.0);
    let o = RenderOptions {
        sh_degree: 0,
        background: [0.0; 3],
        ..RenderOptions::default()
    };
    for log_scale in [20.0f32, 30.0, 36.0] {
        let mut g = random_scene(&mut Rng::new(5), 40, 0, 2.0);
        let without = render(&g, &cam, &o).image;
        // Behind most of the scene (the camera looks down +z from the origin), rotated.
        g.means.push([0.3, -0.2, 6.0]);
        g.log_scales
            .push([log_scale, log_scale - 0.5, log_scale - 1.0]);
        g.rotations.push([0.9, 0.1, -0.3, 0.2]);
        g.logit_opacities.push(0.0);
        g.sh.push([1.2, -0.4, 0.6]);
        let (max, image) = f32_vs_f64(&g, &cam, &o);
        assert!(max < 1e-4, "log-scale {log_scale}: max |f32 − f64| = {max}");
        // The huge splat is drawn (opacity ½, red 0.5 + 0.28·1.2 over a black background):
        // it shows wherever the small splats leave light through, i.e. nearly everywhere.
        let pixels = image.len() / 3;
        let changed = (0..pixels)
            .filter(|&p| image[p * 3] - without[p * 3] > 0.05)
            .count();
        assert!(
            changed * 10 > pixels * 9,
            "log-scale {log_scale}: the huge splat shows on {changed} of {pixels} pixels"
        );
    }
}
