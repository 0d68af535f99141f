//! Finite-difference checks of the whole backward pass (and of `rasterize_bwd` alone), in f64.
//!
//! Scenes are built so the rendered image is a smooth function of every parameter near the
//! evaluation point: broad Gaussians whose α stays well inside (1/255, 0.999) at every pixel
//! of every tile they are binned to, transmittance far above 1e−4, SH colours far from the
//! `max(·, 0)` clamp, and (first scene) Jacobian clamp inactive. Each test *asserts* these
//! assumptions on the rendered scene, so a future change cannot silently make it vacuous.
//! A second scene puts a Gaussian outside the 1.3·tan(fov) limit so the clamp is active.
//!
//! Loss: `L = Σ w·image` with fixed pseudo-random weights `w`, so `∂L/∂image = w`; with the
//! inverse-depth plane, `+ Σ w'·inv_depth` (the weights after the image's).

use super::tests::{camera, Converted};
use super::*;
use crate::rng::Rng;

/// Central-difference step. With f64 (ε ≈ 2.2e−16) and |L| ≲ 10³, rounding contributes
/// ≈ ε·|L|/h ≈ 2e−7 and truncation O(h²·|L'''|) ≈ 1e−10: h = 1e−6 balances them well.
const H: f64 = 1e-6;
/// Allowed |fd − analytic| ≤ ABS_TOL + REL_TOL·|analytic|. ABS_TOL is 50× the rounding noise
/// estimated above; REL_TOL 1e−5 leaves room for truncation on the largest (≈10³) gradients.
/// A wrong chain-rule term shows up at ≥ 1e−2 relative, far above both.
const ABS_TOL: f64 = 1e-5;
const REL_TOL: f64 = 1e-5;

/// A scene in f64, owned (the tests' [`Converted`] of an f32 model, or built directly).
type Scene = Converted<f64>;

impl Converted<f64> {
    /// Every scalar parameter as (group name, index, &mut value).
    fn visit(&mut self, mut f: impl FnMut(&'static str, usize, &mut f64)) {
        for (i, v) in self.means.iter_mut().flatten().enumerate() {
            f("means", i, v);
        }
        for (i, v) in self.log_scales.iter_mut().flatten().enumerate() {
            f("log_scales", i, v);
        }
        for (i, v) in self.rotations.iter_mut().flatten().enumerate() {
            f("rotations", i, v);
        }
        for (i, v) in self.logit_opacities.iter_mut().enumerate() {
            f("logit_opacities", i, v);
        }
        for (i, v) in self.sh.iter_mut().flatten().enumerate() {
            f("sh", i, v);
        }
    }

    fn n_params(&mut self) -> usize {
        let mut n = 0;
        self.visit(|_, _, _| n += 1);
        n
    }

    fn get(&mut self, k: usize) -> (&'static str, usize, f64) {
        let mut out = ("", 0, 0.0);
        let mut n = 0;
        self.visit(|g, i, v| {
            if n == k {
                out = (g, i, *v);
            }
            n += 1;
        });
        out
    }

    fn set(&mut self, k: usize, value: f64) {
        let mut n = 0;
        self.visit(|_, _, v| {
            if n == k {
                *v = value;
            }
            n += 1;
        });
    }
}

fn flat_grads(g: &GaussianGrads<f64>) -> Vec<f64> {
    let mut v: Vec<f64> = g.means.iter().flatten().copied().collect();
    v.extend(g.log_scales.iter().flatten());
    v.extend(g.rotations.iter().flatten());
    v.extend(&g.logit_opacities);
    v.extend(g.sh.iter().flatten());
    v
}

fn loss(scene: &Scene, cam: &Camera, opts: &RenderOptions, w: &[f64]) -> f64 {
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), cam, opts, &mut out).unwrap();
    out.image
        .iter()
        .chain(&out.inv_depth)
        .zip(w)
        .map(|(a, b)| a * b)
        .sum()
}

/// Asserts the smoothness assumptions listed in the module doc on the rendered scene.
fn assert_smooth(
    r: &CpuRasterizer<f64>,
    out: &RenderOutput<f64>,
    scene: &Scene,
    cam: &CameraF<f64>,
) {
    let splats = r.splats();
    let mut min_alpha = f64::INFINITY;
    let mut max_alpha: f64 = 0.0;
    for t in 0..r.bins().num_tiles() {
        let (tx, ty) = (t as u32 % cam.tiles_x, t as u32 / cam.tiles_x);
        for &i in r.bins().tile(t) {
            let s = &splats[i as usize];
            for y in ty * 16..((ty + 1) * 16).min(cam.height) {
                for x in tx * 16..((tx + 1) * 16).min(cam.width) {
                    let (dx, dy) = (s.mean2d[0] - x as f64 - 0.5, s.mean2d[1] - y as f64 - 0.5);
                    let sigma =
                        0.5 * (s.conic[0] * dx * dx + s.conic[2] * dy * dy) + s.conic[1] * dx * dy;
                    let a = s.opacity * (-sigma).exp();
                    min_alpha = min_alpha.min(a);
                    max_alpha = max_alpha.max(a);
                }
            }
        }
    }
    assert!(
        min_alpha > 2.0 / 255.0,
        "α {min_alpha} too close to the 1/255 cut"
    );
    assert!(
        max_alpha < 0.99,
        "α {max_alpha} too close to the 0.999 clamp"
    );
    let min_t = out.final_transmittance.iter().copied().fold(1.0, f64::min);
    assert!(min_t > 1e-2, "T {min_t} too close to early termination");
    // Colours well above the clamp: raw SH + 0.5 > 0.05 for every visible Gaussian.
    for s in splats.iter().filter(|s| s.radius > 0) {
        assert!(s.color.iter().all(|&c| c > 0.05), "{:?}", s.color);
    }
    assert!(splats.iter().all(|s| s.radius > 0));
    let _ = scene;
}

fn check(scene: &mut Scene, cam: &Camera, opts: &RenderOptions, seed: u64) -> usize {
    let camf = CameraF::<f64>::new(cam).unwrap();
    let npix = (cam.width * cam.height) as usize;
    let mut rng = Rng::new(seed);
    let planes = if opts.inv_depth { 4 } else { 3 };
    // Inverse depths (~0.3 here) get weights ~10× the colours', so their terms are not lost
    // among the colour terms.
    let w: Vec<f64> = (0..planes * npix)
        .map(|k| rng.uniform(-1.0, 1.0) * if k < 3 * npix { 1.0 } else { 10.0 })
        .collect();
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), cam, opts, &mut out).unwrap();
    assert_smooth(&r, &out, scene, &camf);
    let mut grads = GaussianGrads::default();
    r.render_backward(&scene.params(), cam, opts, &w, &mut grads)
        .unwrap();
    let analytic = flat_grads(&grads);
    let n = scene.n_params();
    assert_eq!(analytic.len(), n);
    let mut nonzero = 0;
    for (k, &an) in analytic.iter().enumerate() {
        let (group, idx, v) = scene.get(k);
        scene.set(k, v + H);
        let lp = loss(scene, cam, opts, &w);
        scene.set(k, v - H);
        let lm = loss(scene, cam, opts, &w);
        scene.set(k, v);
        let fd = (lp - lm) / (2.0 * H);
        assert!(
            (fd - an).abs() <= ABS_TOL + REL_TOL * an.abs(),
            "{group}[{idx}]: finite difference {fd} vs analytic {an}"
        );
        if an.abs() > 1e-3 {
            nonzero += 1;
        }
    }
    nonzero
}

fn random_rot(rng: &mut Rng) -> [f64; 4] {
    // Unnormalised on purpose (length ≈ 1.5): exercises the normalisation gradient.
    [0; 4].map(|_| rng.normal() * 0.75)
}

/// Broad (σ ≈ 12–20 px) Gaussians in front of a 40×28 camera (3×2 tiles, a partial one).
fn smooth_scene(n: usize, seed: u64, stored: u32) -> Scene {
    let mut rng = Rng::new(seed);
    let nc = sh_coeffs(stored);
    let mut s = Scene {
        means: vec![],
        log_scales: vec![],
        rotations: vec![],
        logit_opacities: vec![],
        sh_degree: stored,
        sh: vec![],
        filter_3d: None,
    };
    for _ in 0..n {
        s.means.push([
            rng.uniform(-0.4, 0.4),
            rng.uniform(-0.3, 0.3),
            rng.uniform(3.0, 4.0),
        ]);
        s.log_scales
            .push([0; 3].map(|_| rng.uniform(1.5, 2.2).ln()));
        s.rotations.push(random_rot(&mut rng));
        s.logit_opacities.push(rng.uniform(-1.2, 0.0));
        for k in 0..nc {
            let amp = if k == 0 { 0.0 } else { 0.05 };
            let dc = if k == 0 { 0.6 } else { 0.0 };
            s.sh.push([0; 3].map(|_| dc + rng.uniform(-amp, amp)));
        }
    }
    s
}

#[test]
fn gradients_match_finite_differences_all_parameter_groups() {
    let cam = camera(40, 28, 30.0, 20.3, 13.8);
    let mut scene = smooth_scene(4, 1, 3);
    // Rotate the camera so W ≠ I and the SH direction depends on the pose.
    let cam = with_pose(&mut scene, &cam);
    let opts = RenderOptions {
        sh_degree: 3,
        background: [0.2, 0.5, 0.8],
        ..RenderOptions::default()
    };
    let nonzero = check(&mut scene, &cam, &opts, 7);
    // 4 Gaussians × 59 parameters; nearly all have a non-trivial gradient.
    assert!(nonzero > 200, "only {nonzero} non-zero gradients");
}

/// Through Mip-Splatting's 3D filter (each scale `√(s² + f²)`, the opacity × `∏ s/s'`), classic
/// and antialiased, with filters from a tenth of the Gaussians' size to half of it.
#[test]
fn gradients_through_the_3d_filter() {
    let cam = camera(40, 28, 30.0, 20.3, 13.8);
    for antialiased in [false, true] {
        let mut scene = smooth_scene(4, 11, 2);
        let cam = with_pose(&mut scene, &cam);
        // Scales are 1.5–2.2 units here.
        scene.filter_3d = Some(vec![0.2, 0.5, 0.8, 1.0]);
        // The filter dims the splats: bring them back inside the smooth range.
        for l in &mut scene.logit_opacities {
            *l += 0.8;
        }
        let opts = RenderOptions {
            sh_degree: 2,
            background: [0.3, 0.2, 0.6],
            antialiased,
            pose_grad: true,
            ..RenderOptions::default()
        };
        let nonzero = check(&mut scene, &cam, &opts, 12);
        assert!(nonzero > 100, "only {nonzero} non-zero gradients");
    }
}

#[test]
fn gradients_with_lower_active_sh_degree() {
    let cam = camera(40, 28, 30.0, 20.0, 14.0);
    let mut scene = smooth_scene(3, 2, 3);
    let opts = RenderOptions {
        sh_degree: 1,
        background: [0.0; 3],
        ..RenderOptions::default()
    };
    check(&mut scene, &cam, &opts, 8);
    // Coefficients above the active degree get exactly zero.
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), &cam, &opts, &mut out).unwrap();
    let mut g = GaussianGrads::default();
    let w = vec![1.0; out.image.len()];
    r.render_backward(&scene.params(), &cam, &opts, &w, &mut g)
        .unwrap();
    for i in 0..3 {
        assert!(g.sh[i * 16 + 4..(i + 1) * 16]
            .iter()
            .flatten()
            .all(|&v| v == 0.0));
        assert!(g.sh[i * 16..i * 16 + 4].iter().flatten().any(|&v| v != 0.0));
    }
}

#[test]
fn gradients_with_active_jacobian_clamp() {
    // 40×28, f = 30, centred: lim_x = 1.3·(40/60) ≈ 0.867. Gaussian 0 sits at x/z = 0.95
    // (mean2d.x ≈ 48.5, right of the image) and is broad enough to cover it.
    let cam = camera(40, 28, 30.0, 20.0, 14.0);
    let mut scene = smooth_scene(2, 3, 1);
    scene.means[0] = [3.8, 0.2, 4.0];
    scene.log_scales[0] = [3.0f64.ln(), 2.6f64.ln(), 2.8f64.ln()];
    scene.logit_opacities[0] = 0.3;
    let camf = CameraF::<f64>::new(&cam).unwrap();
    let m = scene.means[0];
    assert!(m[0] / m[2] > camf.lim_x_pos, "clamp must be active");
    let opts = RenderOptions {
        sh_degree: 1,
        background: [0.3; 3],
        ..RenderOptions::default()
    };
    check(&mut scene, &cam, &opts, 9);
}

/// The inverse-depth plane's gradient through every parameter group (its `1/z` reaches the
/// means through the camera-space depth as well as through the compositing weights), with the
/// rotated camera, in both rasterization modes.
#[test]
fn gradients_with_the_inverse_depth_plane() {
    for antialiased in [false, true] {
        let cam = camera(40, 28, 30.0, 20.3, 13.8);
        let mut scene = smooth_scene(4, 21, 1);
        let cam = with_pose(&mut scene, &cam);
        let opts = RenderOptions {
            sh_degree: 1,
            background: [0.2, 0.5, 0.8],
            antialiased,
            inv_depth: true,
            ..RenderOptions::default()
        };
        let nonzero = check(&mut scene, &cam, &opts, 22);
        assert!(nonzero > 60, "only {nonzero} non-zero gradients");
    }
}

/// With the colour weights zero, only the inverse-depth plane drives the loss: the means still
/// get a gradient (the check is not carried by the colour terms), and the plane is exactly a
/// colour render of `1/z` over a black background.
#[test]
fn the_inverse_depth_plane_alone_is_a_render_of_one_over_z() {
    let cam = camera(40, 28, 30.0, 20.0, 14.0);
    let mut scene = smooth_scene(3, 23, 0);
    let opts = RenderOptions {
        sh_degree: 0,
        inv_depth: true,
        ..RenderOptions::default()
    };
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), &cam, &opts, &mut out).unwrap();
    let npix = 40 * 28;
    let mut splats = r.splats().to_vec();
    for s in &mut splats {
        s.color = [1.0 / s.depth; 3];
    }
    let (mut img, mut t, mut l) = (vec![0.0; 3 * npix], vec![0.0; npix], vec![0u32; npix]);
    rasterize_fwd(
        &splats,
        r.bins(),
        40,
        28,
        [0.0; 3],
        &mut img,
        &mut t,
        &mut l,
        None,
    );
    let channel: Vec<f64> = img.chunks_exact(3).map(|p| p[0]).collect();
    assert_eq!(channel, out.inv_depth);
    assert!(out.inv_depth.iter().any(|&d| d > 0.1));

    let mut rng = Rng::new(24);
    let w: Vec<f64> = (0..4 * npix)
        .map(|k| {
            if k < 3 * npix {
                0.0
            } else {
                rng.uniform(-1.0, 1.0)
            }
        })
        .collect();
    let mut grads = GaussianGrads::default();
    r.render_backward(&scene.params(), &cam, &opts, &w, &mut grads)
        .unwrap();
    for k in 0..scene.n_params() {
        let (group, idx, v) = scene.get(k);
        if group != "means" {
            continue;
        }
        scene.set(k, v + H);
        let lp = loss(&scene, &cam, &opts, &w);
        scene.set(k, v - H);
        let lm = loss(&scene, &cam, &opts, &w);
        scene.set(k, v);
        let fd = (lp - lm) / (2.0 * H);
        let an = grads.means[idx / 3][idx % 3];
        assert!(
            (fd - an).abs() <= ABS_TOL + REL_TOL * an.abs(),
            "means[{idx}]: finite difference {fd} vs analytic {an}"
        );
        assert!(an.abs() > 1e-4, "means[{idx}] = {an}: too small to test");
    }
}

/// Asking for the plane changes neither the image nor, when its gradient is zero, any
/// parameter gradient: the colour arithmetic is the same with or without it.
#[test]
fn the_inverse_depth_plane_leaves_the_colour_path_unchanged() {
    let cam = camera(40, 28, 30.0, 20.3, 13.8);
    let mut scene = smooth_scene(4, 25, 3);
    let cam = with_pose(&mut scene, &cam);
    let plain = RenderOptions {
        sh_degree: 3,
        background: [0.2, 0.5, 0.8],
        pose_grad: true,
        absgrad: true,
        ..RenderOptions::default()
    };
    let with = RenderOptions {
        inv_depth: true,
        ..plain
    };
    let npix = 40 * 28;
    let mut rng = Rng::new(26);
    let w: Vec<f64> = (0..3 * npix).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let mut wd = w.clone();
    wd.resize(4 * npix, 0.0);
    let run = |opts: &RenderOptions, w: &[f64]| {
        let mut r = CpuRasterizer::<f64>::new();
        let mut out = RenderOutput::default();
        r.render(&scene.params(), &cam, opts, &mut out).unwrap();
        let mut g = GaussianGrads::default();
        r.render_backward(&scene.params(), &cam, opts, w, &mut g)
            .unwrap();
        (out, g)
    };
    let (a, ga) = run(&plain, &w);
    let (b, gb) = run(&with, &wd);
    assert_eq!(a.image, b.image);
    assert!(a.inv_depth.is_empty());
    assert_eq!(b.inv_depth.len(), npix);
    assert_eq!(ga, gb);
    // A d_image of the old length is refused when the plane is on.
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), &cam, &with, &mut out).unwrap();
    let e = r
        .render_backward(
            &scene.params(),
            &cam,
            &with,
            &w,
            &mut GaussianGrads::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("d_image"), "{e}");
}

/// `cam` with a non-trivial pose (rotated 0.2 rad about an oblique axis, centre moved), and
/// the scene moved with it so it renders the same view.
fn with_pose(scene: &mut Scene, cam: &Camera) -> Camera {
    let ang: f64 = 0.2;
    let axis = {
        let a = [0.3, 1.0, 0.2];
        let n = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2]).sqrt();
        [a[0] / n, a[1] / n, a[2] / n]
    };
    let (s, c) = ((ang / 2.0).sin(), (ang / 2.0).cos());
    let pose = crate::scene::camera::Pose::from_quaternion_wxyz(
        [c, axis[0] * s, axis[1] * s, axis[2] * s],
        [0.0; 3],
    )
    .unwrap();
    // Move the Gaussians into the rotated camera's view: world = Rᵀ·(camera-space point).
    let rt = crate::scene::camera::transpose(pose.rotation);
    for m in scene.means.iter_mut() {
        *m = crate::scene::camera::mat_vec(&rt, *m);
    }
    let mut cam2 = *cam;
    cam2.world_to_camera = pose;
    // Translate: camera centre at (0.1, −0.2, 0.3) in world.
    let centre = [0.1, -0.2, 0.3];
    for m in scene.means.iter_mut() {
        for a in 0..3 {
            m[a] += centre[a];
        }
    }
    let rc = crate::scene::camera::mat_vec(&pose.rotation, centre);
    cam2.world_to_camera.translation = [-rc[0], -rc[1], -rc[2]];
    cam2
}

#[test]
fn rasterize_bwd_matches_finite_differences_per_splat() {
    // Stage-level check (the one the CUDA twin will reuse): perturb the screen-space splat
    // quantities directly and compare with rasterize_bwd's per-splat gradients.
    let cam = camera(40, 28, 30.0, 20.0, 14.0);
    let scene = smooth_scene(4, 4, 0);
    let opts = RenderOptions {
        sh_degree: 0,
        background: [0.4, 0.1, 0.7],
        ..RenderOptions::default()
    };
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), &cam, &opts, &mut out).unwrap();
    let splats: Vec<Splat<f64>> = r.splats().to_vec();
    let bins = r.bins().clone();
    let npix = 40 * 28;
    let mut rng = Rng::new(11);
    let w: Vec<f64> = (0..3 * npix).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let bg = opts.background.map(f64::from);
    let fwd = |s: &[Splat<f64>]| {
        let (mut img, mut t, mut l) = (vec![0.0; 3 * npix], vec![0.0; npix], vec![0u32; npix]);
        rasterize_fwd(s, &bins, 40, 28, bg, &mut img, &mut t, &mut l, None);
        (img, t, l)
    };
    let (_, t, l) = fwd(&splats);
    let (mut ig, mut sg) = (Vec::new(), Vec::new());
    let mut abs = rasterize::AbsMean2dGrad::default();
    rasterize_bwd(
        &splats,
        &bins,
        40,
        28,
        bg,
        &t,
        &l,
        &w,
        &mut ig,
        &mut sg,
        Some(&mut abs),
        None,
    );
    let lossf = |s: &[Splat<f64>]| fwd(s).0.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
    // The absolute 2D-mean gradient (AbsGS) is Σ_pixels |∂L_pixel/∂mean2d| with L_pixel the
    // pixel's three weighted channels: central differences per pixel, then the sum of their
    // absolute values.
    let pixel_losses = |s: &[Splat<f64>]| -> Vec<f64> {
        let img = fwd(s).0;
        (0..npix)
            .map(|p| (0..3).map(|c| img[3 * p + c] * w[3 * p + c]).sum())
            .collect()
    };
    let mut cancelling = 0;
    for i in 0..splats.len() {
        for c in 0..2 {
            let mut p = splats.clone();
            p[i].mean2d[c] += H;
            let lp = pixel_losses(&p);
            p[i].mean2d[c] -= 2.0 * H;
            let lm = pixel_losses(&p);
            let fd: f64 = lp
                .iter()
                .zip(&lm)
                .map(|(a, b)| ((a - b) / (2.0 * H)).abs())
                .sum();
            let an = abs.splat[i][c];
            assert!(
                (fd - an).abs() <= ABS_TOL + REL_TOL * an.abs(),
                "splat {i} |mean2d[{c}]|: fd {fd} vs analytic {an}"
            );
            if sg[i].mean2d[c].abs() < 0.5 * an {
                cancelling += 1;
            }
        }
    }
    // Not vacuous: on many splats the signed sum cancels to well below the absolute one.
    assert!(cancelling > 4, "only {cancelling} cancelling components");
    for i in 0..splats.len() {
        type Field = (&'static str, f64, fn(&mut Splat<f64>) -> &mut f64);
        let fields: [Field; 9] = [
            ("mean2d.x", sg[i].mean2d[0], |s| &mut s.mean2d[0]),
            ("mean2d.y", sg[i].mean2d[1], |s| &mut s.mean2d[1]),
            ("conic.a", sg[i].conic[0], |s| &mut s.conic[0]),
            ("conic.b", sg[i].conic[1], |s| &mut s.conic[1]),
            ("conic.c", sg[i].conic[2], |s| &mut s.conic[2]),
            ("color.r", sg[i].color[0], |s| &mut s.color[0]),
            ("color.g", sg[i].color[1], |s| &mut s.color[1]),
            ("color.b", sg[i].color[2], |s| &mut s.color[2]),
            ("opacity", sg[i].opacity, |s| &mut s.opacity),
        ];
        for (name, an, field) in fields {
            let mut p = splats.clone();
            *field(&mut p[i]) += H;
            let lp = lossf(&p);
            *field(&mut p[i]) -= 2.0 * H;
            let lm = lossf(&p);
            let fd = (lp - lm) / (2.0 * H);
            assert!(
                (fd - an).abs() <= ABS_TOL + REL_TOL * an.abs(),
                "splat {i} {name}: fd {fd} vs analytic {an}"
            );
        }
    }
}

#[test]
fn gradients_match_finite_differences_antialiased() {
    // The whole pipeline with the compensation on (broad splats: c ≈ 0.998, so this mostly
    // checks that the mode is carried through; the projection-stage test below checks the
    // compensation's own derivative where it is far from 1).
    let cam = camera(40, 28, 30.0, 20.3, 13.8);
    let mut scene = smooth_scene(4, 5, 2);
    let cam = with_pose(&mut scene, &cam);
    let opts = RenderOptions {
        sh_degree: 2,
        background: [0.3, 0.1, 0.6],
        antialiased: true,
        ..RenderOptions::default()
    };
    let nonzero = check(&mut scene, &cam, &opts, 12);
    assert!(nonzero > 100, "only {nonzero} non-zero gradients");
}

/// `project_bwd` alone against central differences of `project_fwd`, in both modes, for
/// splats from 0.05 px to 20 px (compensation from ≈ 0.01 to ≈ 1) and anisotropic ones (a
/// needle: one axis far below a pixel). `L = Σ w·(mean2d, conic, colour, opacity)` with random
/// weights, so every output of the stage is differentiated; no rasterizer thresholds are
/// involved, so tiny splats are as smooth as broad ones.
#[test]
fn project_bwd_matches_finite_differences_in_both_modes() {
    let cam = camera(64, 48, 40.0, 32.0, 24.0);
    let mut rng = Rng::new(21);
    let mut scene = smooth_scene(0, 0, 1);
    for (k, sigma_px) in [0.05f64, 0.2, 0.5, 1.0, 3.0, 20.0].into_iter().enumerate() {
        let z = 3.0 + 0.2 * k as f64;
        scene
            .means
            .push([rng.uniform(-0.5, 0.5), rng.uniform(-0.4, 0.4), z]);
        // σ in pixels = scale·f/z.
        let s = (sigma_px * z / 40.0).ln();
        let needle = if k % 2 == 1 { 0.1f64.ln() } else { 0.0 };
        scene.log_scales.push([s, s + needle, s + 0.2]);
        scene.rotations.push(random_rot(&mut rng));
        scene.logit_opacities.push(rng.uniform(-1.0, 1.0));
        for c in 0..4 {
            let dc = if c == 0 { 0.6 } else { 0.0 };
            scene.sh.push([0; 3].map(|_| dc + rng.uniform(-0.05, 0.05)));
        }
    }
    let camf = CameraF::<f64>::new(&cam).unwrap();
    for aa in [false, true] {
        if aa {
            // The compensation spans its range here, or this checks nothing new.
            let mut splats = Vec::new();
            project_fwd(&scene.params(), &camf, 1, true, &mut splats);
            let comps: Vec<f64> = splats
                .iter()
                .zip(&scene.logit_opacities)
                .map(|(s, &l)| s.opacity * (1.0 + (-l).exp()))
                .collect();
            let (lo, hi) = comps
                .iter()
                .fold((1.0f64, 0.0f64), |(a, b), &c| (a.min(c), b.max(c)));
            assert!(lo < 0.05 && hi > 0.99, "compensations {comps:?}");
        }
        check_project_stage(&mut scene, &camf, aa, &mut rng);
    }
}

/// `project_bwd` of `scene` through `camf` (SH degree 1) against central differences of
/// `project_fwd` under `L = Σ w·(mean2d, conic, colour, opacity)` with random weights from
/// `rng`, so every output of the stage is differentiated; more than half the gradients must
/// be non-trivial.
fn check_project_stage(scene: &mut Scene, camf: &CameraF<f64>, aa: bool, rng: &mut Rng) {
    let n = scene.means.len();
    let weights: Vec<SplatGrad<f64>> = (0..n)
        .map(|_| SplatGrad {
            mean2d: [0; 2].map(|_| rng.uniform(-1.0, 1.0)),
            conic: [0; 3].map(|_| rng.uniform(-1.0, 1.0)),
            color: [0; 3].map(|_| rng.uniform(-1.0, 1.0)),
            opacity: rng.uniform(-1.0, 1.0),
        })
        .collect();
    let stage_loss = |scene: &Scene| -> f64 {
        let mut splats = Vec::new();
        project_fwd(&scene.params(), camf, 1, aa, &mut splats);
        splats
            .iter()
            .zip(&weights)
            .map(|(s, w)| {
                assert!(s.radius > 0, "every splat must stay visible");
                let mut l = w.opacity * s.opacity;
                for k in 0..2 {
                    l += w.mean2d[k] * s.mean2d[k];
                }
                for k in 0..3 {
                    l += w.conic[k] * s.conic[k] + w.color[k] * s.color[k];
                }
                l
            })
            .sum()
    };
    let mut splats = Vec::new();
    project_fwd(&scene.params(), camf, 1, aa, &mut splats);
    let mut grads = GaussianGrads::default();
    project_bwd(
        &scene.params(),
        camf,
        1,
        aa,
        false,
        &splats,
        &weights,
        None,
        &mut grads,
    );
    let analytic = flat_grads(&grads);
    let mut nonzero = 0;
    for (k, &an) in analytic.iter().enumerate() {
        let (group, idx, v) = scene.get(k);
        scene.set(k, v + H);
        let lp = stage_loss(scene);
        scene.set(k, v - H);
        let lm = stage_loss(scene);
        scene.set(k, v);
        let fd = (lp - lm) / (2.0 * H);
        // Conic entries of a 0.05 px splat reach ~10³, so L does too: the rounding share of
        // the difference grows with it.
        let tol = 1e-4 + 1e-5 * an.abs();
        assert!(
            (fd - an).abs() <= tol,
            "antialiased {aa}: {group}[{idx}]: finite difference {fd} vs analytic {an}"
        );
        if an.abs() > 1e-3 {
            nonzero += 1;
        }
    }
    assert!(
        nonzero > analytic.len() / 2,
        "antialiased {aa}: {nonzero} non-zero"
    );
}

/// The pose gradient ([`GaussianGrads::pose`]) against central differences of the loss over
/// the camera moved by [`Pose::perturbed`](crate::scene::camera::Pose::perturbed), on the
/// smooth scene (SH degree 3 seen from a rotated camera, so the view direction matters) in
/// both modes, and on the scene with an active Jacobian clamp.
#[test]
fn pose_gradient_matches_finite_differences() {
    let base = camera(40, 28, 30.0, 20.3, 13.8);
    let mut smooth = smooth_scene(4, 11, 3);
    let rotated = with_pose(&mut smooth, &base);
    let mut clamped = smooth_scene(2, 3, 1);
    clamped.means[0] = [3.8, 0.2, 4.0];
    clamped.log_scales[0] = [3.0f64.ln(), 2.6f64.ln(), 2.8f64.ln()];
    clamped.logit_opacities[0] = 0.3;
    // The last case adds the inverse-depth plane (its 1/z moves with the camera too).
    let cases = [
        (&smooth, rotated, 3, false, false),
        (&smooth, rotated, 3, true, false),
        (&clamped, base, 1, false, false),
        (&smooth, rotated, 3, false, true),
    ];
    for (case, (scene, cam, degree, antialiased, inv_depth)) in cases.into_iter().enumerate() {
        let opts = RenderOptions {
            sh_degree: degree,
            background: [0.2, 0.5, 0.8],
            antialiased,
            pose_grad: true,
            inv_depth,
            ..RenderOptions::default()
        };
        check_pose(
            scene,
            &cam,
            &opts,
            40 + case as u64,
            &format!("case {case}"),
        );
    }
    // Without the flag the field stays empty.
    let cam = base;
    let opts = RenderOptions {
        sh_degree: 1,
        ..RenderOptions::default()
    };
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&clamped.params(), &cam, &opts, &mut out).unwrap();
    let mut grads = GaussianGrads::default();
    let w = vec![1.0; out.image.len()];
    r.render_backward(&clamped.params(), &cam, &opts, &w, &mut grads)
        .unwrap();
    assert_eq!(grads.pose, None);
}

/// The pose gradient of the render of `scene` through `cam` (`opts` asks for it) against
/// central differences over the camera moved by
/// [`Pose::perturbed`](crate::scene::camera::Pose::perturbed), under random image weights
/// (inverse depths ×10) from `seed`; every component must be large enough to test.
fn check_pose(scene: &Scene, cam: &Camera, opts: &RenderOptions, seed: u64, what: &str) {
    let npix = (cam.width * cam.height) as usize;
    let planes = if opts.inv_depth { 4 } else { 3 };
    let mut rng = Rng::new(seed);
    let w: Vec<f64> = (0..planes * npix)
        .map(|k| rng.uniform(-1.0, 1.0) * if k < 3 * npix { 1.0 } else { 10.0 })
        .collect();
    let mut r = CpuRasterizer::<f64>::new();
    let mut out = RenderOutput::default();
    r.render(&scene.params(), cam, opts, &mut out).unwrap();
    assert_smooth(&r, &out, scene, &CameraF::new(cam).unwrap());
    let mut grads = GaussianGrads::default();
    r.render_backward(&scene.params(), cam, opts, &w, &mut grads)
        .unwrap();
    let analytic = grads.pose.expect("pose_grad asks for the pose gradient");
    for (k, &an) in analytic.iter().enumerate() {
        let moved = |h: f64| {
            let mut d = [0.0; 6];
            d[k] = h;
            let mut c = *cam;
            c.world_to_camera = cam.world_to_camera.perturbed(d);
            loss(scene, &c, opts, &w)
        };
        let fd = (moved(H) - moved(-H)) / (2.0 * H);
        assert!(
            (fd - an).abs() <= ABS_TOL + REL_TOL * an.abs(),
            "{what}, pose[{k}]: finite difference {fd} vs analytic {an}"
        );
        assert!(
            an.abs() > 1e-2,
            "{what}, pose[{k}] = {an}: too small to test"
        );
    }
}

/// A `w × h` equidistant fisheye camera with focal length `f`, centred.
fn fisheye(w: u32, h: u32, f: f64) -> Camera {
    let mut cam = camera(w, h, f, w as f64 / 2.0, h as f64 / 2.0);
    cam.projection = crate::scene::camera::Projection::Fisheye;
    cam
}

/// `project_bwd` of the equidistant fisheye alone against central differences of `project_fwd`,
/// in both modes: a splat exactly on the optical axis (where `θ/r` is a limit), two inside the
/// series' range (`r²/z² < 10⁻²`) and two just outside it, and splats 30°, 55° and 75° off the
/// axis, each with a random anisotropic covariance. The 2D means are checked against
/// [`Camera::project`] first.
#[test]
fn fisheye_project_bwd_matches_finite_differences() {
    let cam = fisheye(96, 80, 30.0);
    let mut rng = Rng::new(5);
    let mut scene = smooth_scene(0, 0, 1);
    let edge = project::EQUIDISTANT_SERIES_BELOW.sqrt();
    // (r/z, azimuth) of each mean; z = 2.
    let placements = [
        (0.0, 0.0),
        (0.3 * edge, 0.4),
        (0.99 * edge, 2.0),
        (1.01 * edge, -1.1),
        (2.0 * edge, 3.0),
        (30f64.to_radians().tan(), 0.7),
        (55f64.to_radians().tan(), -2.5),
        (75f64.to_radians().tan(), 1.9),
    ];
    for &(ratio, az) in &placements {
        let z = 2.0;
        let r = ratio * z;
        scene.means.push([r * f64::cos(az), r * f64::sin(az), z]);
        scene
            .log_scales
            .push([0; 3].map(|_| rng.uniform(0.05, 0.3).ln()));
        scene.rotations.push(random_rot(&mut rng));
        scene.logit_opacities.push(rng.uniform(-1.0, 1.0));
        for c in 0..4 {
            let dc = if c == 0 { 0.6 } else { 0.0 };
            scene.sh.push([0; 3].map(|_| dc + rng.uniform(-0.05, 0.05)));
        }
    }
    let camf = CameraF::<f64>::new(&cam).unwrap();
    assert!(camf.fisheye);
    let mut splats = Vec::new();
    project_fwd(&scene.params(), &camf, 1, false, &mut splats);
    for (s, m) in splats.iter().zip(&scene.means) {
        let want = cam.project(*m).unwrap();
        assert!(
            (s.mean2d[0] - want[0]).abs() < 1e-12 && (s.mean2d[1] - want[1]).abs() < 1e-12,
            "{:?} vs {want:?}",
            s.mean2d
        );
    }
    for aa in [false, true] {
        check_project_stage(&mut scene, &camf, aa, &mut rng);
    }
}

/// The whole render through a fisheye camera (rotated and moved) against central differences:
/// every parameter group and the pose, with the inverse-depth plane, in both modes, the
/// Gaussians spread up to ~20° off the axis.
#[test]
fn fisheye_gradients_match_finite_differences() {
    let base = fisheye(48, 36, 24.0);
    for antialiased in [false, true] {
        let mut scene = smooth_scene(4, 31, 2);
        // Spread the means over the field: x/z up to ±0.4, y/z up to ±0.3.
        for m in &mut scene.means {
            m[0] *= 2.5;
            m[1] *= 2.5;
            m[2] -= 0.5;
        }
        // Broader, so α stays above the 1/255 cut in every tile they are binned to.
        for l in scene.log_scales.iter_mut().flatten() {
            *l += 0.2;
        }
        let cam = with_pose(&mut scene, &base);
        let opts = RenderOptions {
            sh_degree: 2,
            background: [0.3, 0.4, 0.2],
            antialiased,
            pose_grad: true,
            inv_depth: true,
            ..RenderOptions::default()
        };
        let nonzero = check(&mut scene, &cam, &opts, 33);
        assert!(nonzero > 100, "only {nonzero} non-zero gradients");
        check_pose(
            &scene,
            &cam,
            &opts,
            34,
            &format!("antialiased {antialiased}"),
        );
    }
}
