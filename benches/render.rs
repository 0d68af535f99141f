//! CPU rasterizer benchmark: forward, backward (also with the absolute 2D-mean gradient of
//! `--absgrad`) and forward+backward at 640×480 for 5k and 100k random anisotropic Gaussians
//! (seeded, SH degree 3), median of several runs.
//!
//! Run: `cargo bench --bench render` (release profile). Prints one line per case.
//!
//! With `GS_BENCH_DEMO_PLY=MODEL.ply` (a model `gs-train --demo` trained, e.g.
//! `gs-demo/point_cloud/iteration_3000/point_cloud.ply`) it also counts that model's tile
//! intersections over the demo's 64 cameras under each binning rule (see
//! `render::cpu::binning`): 3DGS's 3σ box alone, cut to the α-support box, the rows of the
//! α-support ellipse (what is binned), and the floor no exact rule can go below (tiles with a
//! pixel centre the splat reaches); then the same with every opacity capped at 0.01, what an
//! opacity reset leaves.
//! The scene: means uniform in the camera frustum at depth 2–8, per-axis scales log-uniform so
//! projected standard deviations span ~0.3–10 px, random rotations, opacities sigmoid(U(−2,3)),
//! degree-3 SH with a dominant DC term; background grey. `∂L/∂image` is a fixed random field.

use std::time::Instant;

use ramsplat::render::cpu::binning::Reach;
use ramsplat::render::cpu::tile_rect;
use ramsplat::render::{CpuRasterizer, GaussianGrads, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose};
use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};

const W: u32 = 640;
const H: u32 = 480;
/// 500 px focal length: ~65° horizontal field of view, a typical capture lens.
const F: f64 = 500.0;

fn scene(n: usize, seed: u64) -> Gaussians {
    let mut rng = Rng::new(seed);
    let nc = sh_coeffs(3);
    let mut g = Gaussians::zeros(n, 3);
    for i in 0..n {
        let z = rng.uniform(2.0, 8.0);
        // Uniform over the image (with a 5% margin) at that depth.
        let u = rng.uniform(-0.05, 1.05) * W as f64;
        let v = rng.uniform(-0.05, 1.05) * H as f64;
        g.means[i] = [
            ((u - W as f64 / 2.0) * z / F) as f32,
            ((v - H as f64 / 2.0) * z / F) as f32,
            z as f32,
        ];
        // World σ in [0.003, 0.05]: 0.2–12 px at depths 2–8 before the 0.3 px² dilation.
        g.log_scales[i] = [0; 3].map(|_| rng.uniform(0.003f64.ln(), 0.05f64.ln()) as f32);
        g.rotations[i] = [0; 4].map(|_| rng.normal() as f32);
        g.logit_opacities[i] = rng.uniform(-2.0, 3.0) as f32;
        for k in 0..nc {
            let amp = if k == 0 { 0.8 } else { 0.1 };
            g.sh[i * nc + k] = [0; 3].map(|_| (rng.normal() * amp) as f32);
        }
    }
    g
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let cam = Camera {
        width: W,
        height: H,
        intrinsics: Intrinsics {
            fx: F,
            fy: F,
            cx: W as f64 / 2.0,
            cy: H as f64 / 2.0,
        },
        world_to_camera: Pose::IDENTITY,
    };
    let opts = RenderOptions {
        sh_degree: 3,
        background: [0.5; 3],
        ..RenderOptions::default()
    };
    if let Some(ply) = std::env::var_os("GS_BENCH_DEMO_PLY") {
        demo_model_counts(std::path::Path::new(&ply));
    }
    let threads = rayon::current_num_threads();
    for &(n, runs) in &[(5_000usize, 15usize), (100_000, 9)] {
        let g = scene(n, 42);
        let mut r = CpuRasterizer::<f32>::new();
        let mut out = RenderOutput::default();
        let mut grads = GaussianGrads::default();
        let mut rng = Rng::new(7);
        let d: Vec<f32> = (0..3 * (W * H) as usize)
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        // Warm-up: grows every buffer once, so timed runs measure steady-state iterations.
        r.forward(&g, &cam, &opts, &mut out).unwrap();
        r.backward(&g, &cam, &opts, &d, &mut grads).unwrap();
        let mut fwd = Vec::new();
        let mut both = Vec::new();
        let mut bwd = Vec::new();
        for _ in 0..runs {
            let t0 = Instant::now();
            r.forward(&g, &cam, &opts, &mut out).unwrap();
            let t1 = Instant::now();
            r.backward(&g, &cam, &opts, &d, &mut grads).unwrap();
            let t2 = Instant::now();
            fwd.push((t1 - t0).as_secs_f64());
            bwd.push((t2 - t1).as_secs_f64());
            both.push((t2 - t0).as_secs_f64());
        }
        // The backward with the absolute 2D-mean gradient (`gs-train --absgrad`).
        let abs_opts = RenderOptions {
            absgrad: true,
            ..opts
        };
        let mut bwd_abs = Vec::new();
        for _ in 0..runs {
            r.forward(&g, &cam, &abs_opts, &mut out).unwrap();
            let t = Instant::now();
            r.backward(&g, &cam, &abs_opts, &d, &mut grads).unwrap();
            bwd_abs.push(t.elapsed().as_secs_f64());
        }
        let visible = out.radii.iter().filter(|&&r| r > 0).count();
        // What 3DGS's 3σ boxes alone would bin (the rasterizer narrows them by the α-support
        // box: the same images, fewer intersections to sort and walk).
        let (tx, ty) = (W.div_ceil(16), H.div_ceil(16));
        let by_radius: u64 = r
            .splats()
            .iter()
            .filter(|s| s.radius > 0)
            .map(|s| {
                let rad = s.radius as f32;
                let [x0, x1, y0, y1] = tile_rect(s.mean2d, [rad, rad], tx, ty);
                (x1 - x0) as u64 * (y1 - y0) as u64
            })
            .sum();
        let mean_contrib = out.last_contributor.iter().map(|&c| c as f64).sum::<f64>()
            / out.last_contributor.len() as f64;
        println!(
            "render {W}x{H} n={n} visible={visible} intersections={} (3σ boxes alone {by_radius}) \
             mean_last_contributor={mean_contrib:.1} \
             threads={threads} runs={runs}: forward median {:.1} ms (min {:.1}), backward median {:.1} ms \
             (with absgrad {:.1} ms), forward+backward median {:.1} ms (min {:.1})",
            out.num_intersections,
            median(fwd.clone()) * 1e3,
            fwd.iter().cloned().fold(f64::INFINITY, f64::min) * 1e3,
            median(bwd) * 1e3,
            median(bwd_abs) * 1e3,
            median(both.clone()) * 1e3,
            both.iter().cloned().fold(f64::INFINITY, f64::min) * 1e3,
        );
    }
}

/// Intersection counts of a trained demo model under each binning rule (module doc).
fn demo_model_counts(ply: &std::path::Path) {
    use ramsplat::train::demo::{HEIGHT, SEED, VIEWS, WIDTH};
    let (mut g, _) = ramsplat::export::load_model(ply, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", ply.display()));
    let cams = ramsplat::synth::SynthScene::new(SEED).cameras(VIEWS, WIDTH, HEIGHT);
    let opts = RenderOptions {
        sh_degree: g.sh_degree,
        ..RenderOptions::default()
    };
    for reset in [false, true] {
        if reset {
            let cap = (0.01f32 / 0.99).ln();
            g.logit_opacities.iter_mut().for_each(|o| *o = o.min(cap));
        }
        let mut r = CpuRasterizer::<f32>::new();
        let mut out = RenderOutput::default();
        let (mut radius, mut boxes, mut binned, mut floor) = (0u64, 0u64, 0u64, 0u64);
        for c in &cams {
            r.forward(&g, c, &opts, &mut out).unwrap();
            binned += out.num_intersections;
            let (tx, ty) = (c.width.div_ceil(16), c.height.div_ceil(16));
            for s in r.splats().iter().filter(|s| s.radius > 0) {
                let rad = s.radius as f32;
                let [x0, x1, y0, y1] = tile_rect(s.mean2d, [rad, rad], tx, ty);
                radius += ((x1 - x0) * (y1 - y0)) as u64;
                if let Some(reach) = Reach::of(s, tx, ty) {
                    let [x0, x1, y0, y1] = reach.rect;
                    boxes += ((x1 - x0) * (y1 - y0)) as u64;
                }
            }
            let bins = r.bins();
            for t in 0..bins.num_tiles() {
                let (x0, y0) = (t as u32 % bins.tiles_x * 16, t as u32 / bins.tiles_x * 16);
                for &i in bins.tile(t) {
                    let s = &r.splats()[i as usize];
                    let cut = (255.0 * s.opacity as f64).ln();
                    let [a, b, cc] = s.conic.map(f64::from);
                    let reaches = (y0..(y0 + 16).min(c.height)).any(|y| {
                        (x0..(x0 + 16).min(c.width)).any(|x| {
                            let dx = s.mean2d[0] as f64 - (x as f64 + 0.5);
                            let dy = s.mean2d[1] as f64 - (y as f64 + 0.5);
                            0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy <= cut
                        })
                    });
                    floor += u64::from(reaches);
                }
            }
        }
        let per_view = |v: u64| v as f64 / cams.len() as f64;
        println!(
            "demo model {} ({} Gaussians){}: intersections per view: 3σ box {:.0}, support box \
             {:.0}, binned {:.0} ({:.1} % of the 3σ box's), floor {:.0}",
            ply.display(),
            g.len(),
            if reset {
                ", opacities capped at 0.01"
            } else {
                ""
            },
            per_view(radius),
            per_view(boxes),
            per_view(binned),
            100.0 * binned as f64 / radius as f64,
            per_view(floor),
        );
    }
}
