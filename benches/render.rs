//! CPU rasterizer benchmark: forward, backward (also with the absolute 2D-mean gradient of
//! `--absgrad`) and forward+backward at 640×480 for 5k and 100k random anisotropic Gaussians
//! (seeded, SH degree 3), median of several runs.
//!
//! Run: `cargo bench --bench render` (release profile). Prints one line per case.
//!
//! With `GS_BENCH_DEMO_PLY=MODEL.ply` (a model `gs-train --demo` trained, e.g.
//! `gs-demo/point_cloud/iteration_3000/point_cloud.ply`) it also counts what that model costs a
//! rasterizer over the demo's 64 cameras; with `GS_BENCH_PACK=PACK GS_BENCH_PLY=A.ply[:B.ply…]`
//! the same for each model over the pack's train cameras (every `GS_BENCH_VIEW_STRIDE`-th, 1 by
//! default). Per view, for each rule of binning a splat into tiles (see
//! `render::cpu::binning`): 3DGS's 3σ box, the α-support box (gsplat's opacity-aware box), and
//! ours, the rows of the α-support ellipse:
//! - the tile intersections, and the floor no exact rule can go below (tiles with a pixel
//!   centre the splat reaches);
//! - the splat evaluations a GPU tile rasterizer makes over those lists. A block of 256 threads
//!   walks its tile's list until every pixel has stopped (T < 1e-4) or the list ends (forward),
//!   and from the deepest pixel's last contributor back (backward); every thread evaluates
//!   every entry walked, whichever pixels it reaches.
//!
//! These counts do not depend on the machine: they are what a GPU's rasterization time scales
//! with. The demo model is counted again with every opacity capped at 0.01, what an opacity
//! reset leaves.
//! The scene: means uniform in the camera frustum at depth 2–8, per-axis scales log-uniform so
//! projected standard deviations span ~0.3–10 px, random rotations, opacities sigmoid(U(−2,3)),
//! degree-3 SH with a dominant DC term; background grey. `∂L/∂image` is a fixed random field.

use std::time::Instant;

use rayon::prelude::*;

use ramsplat::render::cpu::binning::{bins_by_rect, Reach};
use ramsplat::render::cpu::tile_rect;
use ramsplat::render::{CpuRasterizer, GaussianGrads, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
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
        projection: Projection::Pinhole,
    };
    let opts = RenderOptions {
        sh_degree: 3,
        background: [0.5; 3],
        ..RenderOptions::default()
    };
    model_counts();
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

/// Rasterizer work of trained models (module doc): the demo's with `GS_BENCH_DEMO_PLY`, any
/// with `GS_BENCH_PACK` and `GS_BENCH_PLY`.
fn model_counts() {
    use ramsplat::train::demo::{HEIGHT, SEED, VIEWS, WIDTH};
    if let Some(ply) = std::env::var_os("GS_BENCH_DEMO_PLY") {
        let ply = std::path::Path::new(&ply);
        let cams = ramsplat::synth::SynthScene::new(SEED).cameras(VIEWS, WIDTH, HEIGHT);
        let mut g = load(ply);
        print_counts(&format!("demo model {}", ply.display()), &g, &cams);
        let cap = ramsplat::scene::maths::logit(0.01);
        g.logit_opacities.iter_mut().for_each(|o| *o = o.min(cap));
        print_counts(
            &format!("demo model {}, opacities capped at 0.01", ply.display()),
            &g,
            &cams,
        );
    }
    let Some(pack) = std::env::var_os("GS_BENCH_PACK") else {
        return;
    };
    let pack = std::path::Path::new(&pack);
    let stride = std::env::var("GS_BENCH_VIEW_STRIDE")
        .map(|s| {
            s.parse::<usize>()
                .expect("GS_BENCH_VIEW_STRIDE: a positive integer")
        })
        .unwrap_or(1)
        .max(1);
    let opened = ramsplat::shard::reader::Pack::open(pack)
        .unwrap_or_else(|e| panic!("{}: {e:#}", pack.display()));
    let cams: Vec<Camera> = opened
        .manifest()
        .views
        .iter()
        .filter(|v| v.split == ramsplat::dataset::Split::Train)
        .step_by(stride)
        .map(|v| v.camera)
        .collect();
    let plys =
        std::env::var("GS_BENCH_PLY").expect("GS_BENCH_PACK needs GS_BENCH_PLY=A.ply[:B.ply…]");
    for ply in plys.split(':') {
        let ply = std::path::Path::new(ply);
        print_counts(
            &format!(
                "{} over {} views of {}",
                ply.display(),
                cams.len(),
                pack.display()
            ),
            &load(ply),
            &cams,
        );
    }
}

fn load(ply: &std::path::Path) -> Gaussians {
    ramsplat::export::load_model(ply, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e:#}", ply.display()))
        .0
}

/// The lists a rasterizer could walk: 3DGS's (every tile of the 3σ box), the α-support box's
/// (gsplat's opacity-aware box is this box), and ours (the rows of the ellipse, what is binned).
const RULES: [&str; 3] = ["3σ box", "support box", "ours"];

/// Sums over renders, per rule of [`RULES`] where an array.
#[derive(Default)]
struct Counts {
    intersections: [u64; 3],
    floor: u64,
    forward: [u64; 3],
    backward: [u64; 3],
}

fn print_counts(label: &str, g: &Gaussians, cams: &[Camera]) {
    let opts = RenderOptions {
        sh_degree: g.sh_degree,
        ..RenderOptions::default()
    };
    let mut r = CpuRasterizer::<f32>::new();
    let mut out = RenderOutput::default();
    let mut n = Counts::default();
    for c in cams {
        r.forward(g, c, &opts, &mut out).unwrap();
        let splats = r.splats();
        let (tx, ty) = (c.width.div_ceil(16), c.height.div_ceil(16));
        // The 3σ and support-box lists, ordered as ours (of which both are supersets).
        let radius_bins = bins_by_rect(splats, tx, ty, |s| {
            let rad = s.radius as f32;
            Some(tile_rect(s.mean2d, [rad, rad], tx, ty))
        });
        let box_bins = bins_by_rect(splats, tx, ty, |s| Reach::of(s, tx, ty).map(|r| r.rect));
        let bins = r.bins();
        let per_tile: Vec<(u64, [[u64; 3]; 3])> = (0..bins.num_tiles())
            .into_par_iter()
            .map(|t| {
                let pixels = tile_pixels(t as u32, tx, c);
                let floor = bins
                    .tile(t)
                    .iter()
                    .filter(|&&i| {
                        let s = &splats[i as usize];
                        let cut = (255.0 * s.opacity as f64).ln();
                        let [a, b, cc] = s.conic.map(f64::from);
                        pixels.clone().any(|(x, y)| {
                            let dx = s.mean2d[0] as f64 - (x as f64 + 0.5);
                            let dy = s.mean2d[1] as f64 - (y as f64 + 0.5);
                            0.5 * (a * dx * dx + cc * dy * dy) + b * dx * dy <= cut
                        })
                    })
                    .count() as u64;
                let lists = [radius_bins.tile(t), box_bins.tile(t), bins.tile(t)];
                let walks = lists.map(|list| {
                    let (f, b) = walked(list, splats, pixels.clone());
                    [list.len() as u64, f, b]
                });
                (floor, walks)
            })
            .collect();
        for (floor, walks) in per_tile {
            n.floor += floor;
            for (k, [m, f, b]) in walks.into_iter().enumerate() {
                n.intersections[k] += m;
                n.forward[k] += f;
                n.backward[k] += b;
            }
        }
    }
    let per_view = |v: u64| v as f64 / cams.len() as f64;
    let rules = |v: &[u64; 3], fmt: &dyn Fn(f64) -> String| {
        RULES
            .iter()
            .zip(v)
            .map(|(rule, &x)| {
                format!(
                    "{rule} {} ({:.1} %)",
                    fmt(per_view(x)),
                    100.0 * x as f64 / v[0] as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let count = |x: f64| format!("{x:.0}");
    let evals = |x: f64| format!("{x:.4e}");
    println!(
        "{label} ({} Gaussians), per view: intersections: {}, floor {:.0}; splat evaluations \
         of a 256-thread tile rasterizer, forward: {}; backward: {}",
        g.len(),
        rules(&n.intersections, &count),
        per_view(n.floor),
        rules(&n.forward, &evals),
        rules(&n.backward, &evals),
    );
}

/// The pixels of tile `t` inside the image.
fn tile_pixels(t: u32, tiles_x: u32, c: &Camera) -> impl Iterator<Item = (u32, u32)> + Clone {
    let (x0, y0) = (t % tiles_x * 16, t / tiles_x * 16);
    let (x1, y1) = ((x0 + 16).min(c.width), (y0 + 16).min(c.height));
    (y0..y1).flat_map(move |y| (x0..x1).map(move |x| (x, y)))
}

/// Splat evaluations of one 256-thread block over a tile's depth-ordered `list` (module doc):
/// `256 ×` the entries walked forward before every pixel has stopped, and `256 ×` the deepest
/// pixel's last contributor (where the backward starts). Each pixel follows the rasterizers'
/// rule (`render::cpu::rasterize`'s module doc).
fn walked(
    list: &[u32],
    splats: &[ramsplat::render::cpu::Splat<f32>],
    pixels: impl Iterator<Item = (u32, u32)>,
) -> (u64, u64) {
    use ramsplat::render::cpu::rasterize::{sigma_cut, ALPHA_MAX, ALPHA_MIN, T_MIN};
    let (mut fwd, mut bwd) = (0usize, 0usize);
    for (x, y) in pixels {
        let (fx, fy) = (x as f32 + 0.5, y as f32 + 0.5);
        let mut t = 1.0f32;
        let (mut stop, mut last) = (list.len(), 0);
        for (k, &i) in list.iter().enumerate() {
            let s = &splats[i as usize];
            let (dx, dy) = (s.mean2d[0] - fx, s.mean2d[1] - fy);
            let [a, b, c] = s.conic;
            let sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy;
            if sigma < 0.0 || sigma > sigma_cut(s.opacity) {
                continue;
            }
            let alpha = (s.opacity * (-sigma).exp()).min(ALPHA_MAX as f32);
            if alpha < ALPHA_MIN as f32 {
                continue;
            }
            let next = t * (1.0 - alpha);
            if next < T_MIN as f32 {
                stop = k + 1;
                break;
            }
            t = next;
            last = k + 1;
        }
        fwd = fwd.max(stop);
        bwd = bwd.max(last);
    }
    (256 * fwd as u64, 256 * bwd as u64)
}
