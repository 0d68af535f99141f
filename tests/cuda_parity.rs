//! CUDA vs CPU reference, stage by stage: projected splats (means, conics, colours, opacities,
//! depths, radii), tile lists, image / transmittance / last contributor, per-splat gradients
//! and every parameter gradient, on random scenes of several sizes that include Gaussians
//! behind the camera and off-screen; plus the radix sort against a CPU stable sort.
//!
//! Every test runs on the host emulation driver (the same kernel source compiled by the C++
//! compiler, `kernels/host/emulation.h`), so `cargo test` executes every kernel on any
//! machine; and on a real GPU when one is usable. Without a GPU the CUDA half prints a SKIP
//! line; with `GS_REQUIRE_GPU=1` a missing GPU fails instead (the GPU machine runs them so).
//!
//! Tolerances, measured (every scene below, `MEASURED` lines of `--nocapture`):
//! - NVIDIA H100 80GB HBM3, driver 580.159.04, NVRTC 13.0.88 (`--fmad=false`), 2026-11-22:
//!   0 radius flips, 0 differing tile lists, 0 differing last contributors; image ≤ 5.4e-7,
//!   final T ≤ 3.6e-7 (abs); parameter gradients ≤ 6.5e-6 of their array's scale; per-splat
//!   values use ≤ 0.13 of their tolerance (device expf/logf/sqrtf are a few ulp off libm).
//!   So the bounds below leave ≥ 7× (splats) to ≥ 100× (image, gradients) headroom for other
//!   GPUs and driver versions.
//! - NVIDIA H200, driver 580.159.04, NVRTC 13.0.88, 2026-11-26, thirteen scenes (the
//!   antialiased and `absgrad` ones included): 0 radius flips, 0 differing tile lists, 0
//!   differing last contributors; image ≤ 1.6e-6, final T ≤ 3.6e-7; gradients ≤ 6.5e-6 of
//!   scale; splats ≤ 0.13 of their tolerance; depth maps ≤ 8.3e-7 relative; the sharded
//!   engine's `grad_accum` within 3.0e-8 of one device's, its render after Adam equal.
//!   compute-sanitizer memcheck, racecheck and synccheck over these tests: 0 errors.
//! - NVIDIA H200, driver 580.159.04, NVRTC 13.0.88, 2026-11-28, the same thirteen scenes, ten
//!   of them now with the rasterizer's inverse-depth plane and the pose gradient: 0 radius
//!   flips, tile lists and last contributors identical; image ≤ 1.6e-6, final T ≤ 3.6e-7;
//!   gradients ≤ 6.5e-6 of scale; pose ≤ 4.4e-6; inverse-depth plane ≤ 4.9e-7 of its scale
//!   (its bound: `IMAGE_ATOL`, 200× above); depth maps ≤ 8.3e-7; the sharded engine's pose
//!   gradient within 1.9e-7 and `grad_accum` within 3.0e-8 of one device's. The three
//!   sanitizers over these tests: 0 errors, 0 hazards.
//! - Host emulation (g++ 12, `-ffp-contract=off`, host libm, the CPU rasterizer's `e^−σ`
//!   polynomial in the rasterizers): forward bit-identical to the CPU; gradients ≤ 4.2e-6
//!   (float atomics and warp sums add in another order than the CPU).
//!
//! With contraction on (NVRTC's default) the discrete decisions would flip on last-ulp
//! differences; the `*_FLIP_FRACTION` bounds keep such flips tolerable, never skipped.
//!
//! Poisoning: host outputs are pre-filled with NaN before each call, and every scene is
//! rendered after a different, larger scene on the same rasterizer, so a device element the
//! kernels failed to write would carry a stale value (or NaN) and fail the comparison.

use ramsplat::device::Device;
use ramsplat::render::cpu::binning::Reach;
use ramsplat::render::cpu::{rasterize, TileBins};
use ramsplat::render::cuda::kernels::Kernel;
use ramsplat::render::cuda::CudaRasterizer;
use ramsplat::render::{CpuRasterizer, GaussianGrads, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::scene::gaussians::{sh_coeffs, Field, Gaussians};

/// Per-splat screen quantities (mean2d px, conic, colour, opacity, depth), relative
/// (with `SPLAT_ATOL`).
const SPLAT_RTOL: f32 = 1e-4;
/// Absolute floor for quantities near zero.
const SPLAT_ATOL: f32 = 1e-5;
/// Image and transmittance, absolute (values in [0, 1]), for pixels that no decision flip
/// touches.
const IMAGE_ATOL: f32 = 1e-4;
/// Fraction of pixels allowed past `IMAGE_ATOL`: one α < 1/255 or T < 1e-4 decision that
/// flips on the last ulp moves a pixel by up to ~1e-2.
const IMAGE_FLIP_FRACTION: f64 = 2e-3;
/// Gradients, relative to the largest magnitude of that array (atomics reorder sums).
const GRAD_RTOL: f32 = 1e-3;
/// Fraction of gradient elements allowed past `GRAD_RTOL` (Gaussians whose pixels include a
/// flipped decision).
const GRAD_FLIP_FRACTION: f64 = 2e-3;
/// Fraction of Gaussians whose radius may differ by one pixel (ceil of a value within an ulp
/// of an integer), whose culling decision may flip at a boundary, or whose binned tiles may
/// differ by an edge of their α-support box landing within rounding of a tile border.
const RADIUS_FLIP_FRACTION: f64 = 1e-3;
/// Fraction of pixels whose last contributor may differ (decision flips, as above).
const LAST_FLIP_FRACTION: f64 = 2e-3;
/// The pose gradient ([`GaussianGrads::pose`]), relative to the largest magnitude of its
/// translation (ρ) or rotation (φ) part: a sum over Gaussians in double of terms linear in the
/// per-splat gradients, so it inherits their float atomics' rounding (and sums in another
/// order than the CPU). Measured on the host emulation (g++ 12), 2026-11-26: ≤ 3.7e-6 over
/// the ten pose scenes (huge antialiased; the others ≤ 2.0e-6), the sharded engine within
/// 3.9e-7 of one device's; so 1e-4 leaves 27× headroom. On an NVIDIA H100 (CUDA 13.0,
/// 2026-11-26): ≤ 4.5e-6 over the same scenes (the others ≤ 3.1e-6; per-splat gradients there
/// ≤ 6.5e-6 of scale), the sharded engine within 9.7e-8 of one device's: 22× headroom.
/// Dropping the view-direction term of the twin moved it by 0.56 of scale (one of the
/// mutations in tools/kernel-mutations.sh).
const POSE_RTOL: f64 = 1e-4;

/// The rasterizers under test: the host emulation always, the GPU when usable.
fn rasterizers() -> Vec<CudaRasterizer> {
    let emu = Device::emulated().expect("the host emulation needs a C++20 compiler (g++/clang++)");
    let mut v = vec![CudaRasterizer::on(emu).expect("kernels build on the host emulation")];
    match CudaRasterizer::gpu() {
        Ok(r) => v.push(r),
        Err(e) => {
            let required = std::env::var("GS_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "GS_REQUIRE_GPU=1 but the CUDA backend is unusable: {e}"
            );
            eprintln!("SKIP cuda_parity on a GPU: {e}");
        }
    }
    v
}

fn small_only() -> bool {
    std::env::var("GS_PARITY_SCENES").is_ok_and(|v| v == "small")
}

fn camera(w: u32, h: u32) -> Camera {
    Camera {
        width: w,
        height: h,
        intrinsics: Intrinsics {
            fx: 0.9 * w as f64,
            fy: 0.9 * w as f64,
            cx: w as f64 / 2.0 + 3.25,
            cy: h as f64 / 2.0 - 1.5,
        },
        world_to_camera: Pose::from_quaternion_wxyz([0.98, 0.1, -0.15, 0.05], [0.2, -0.1, 0.5])
            .unwrap(),
        projection: Projection::Pinhole,
    }
}

/// [`camera`] as an equidistant fisheye of about 160° across (`fx = 0.35·w`).
fn fisheye_camera(w: u32, h: u32) -> Camera {
    let mut cam = camera(w, h);
    cam.intrinsics.fx = 0.35 * w as f64;
    cam.intrinsics.fy = 0.35 * w as f64;
    cam.projection = Projection::Fisheye;
    cam
}

/// Random degree-3 Gaussians around the camera's view: most in front, ~10 % behind the camera,
/// ~10 % far off-screen to the side.
fn scene(n: usize, seed: u64) -> Gaussians {
    let mut r = Rng::new(seed);
    let cam = camera(64, 48);
    let centre = cam.centre();
    let rt = cam.world_to_camera.rotation;
    let mut g = Gaussians::zeros(n, 3);
    for i in 0..n {
        let (x, y, z) = match i % 10 {
            0 => (
                r.uniform(-1.0, 1.0),
                r.uniform(-1.0, 1.0),
                r.uniform(-3.0, -0.1),
            ),
            1 => (
                r.uniform(8.0, 20.0),
                r.uniform(-1.0, 1.0),
                r.uniform(1.0, 4.0),
            ),
            _ => (
                r.uniform(-1.2, 1.2),
                r.uniform(-0.9, 0.9),
                r.uniform(1.0, 6.0),
            ),
        };
        // camera-space point → world: Rᵀ·p + centre
        let w = [
            rt[0][0] * x + rt[1][0] * y + rt[2][0] * z + centre[0],
            rt[0][1] * x + rt[1][1] * y + rt[2][1] * z + centre[1],
            rt[0][2] * x + rt[1][2] * y + rt[2][2] * z + centre[2],
        ];
        g.means[i] = w.map(|v| v as f32);
        g.log_scales[i] = [0; 3].map(|_| r.uniform(-4.5, -1.5) as f32);
        g.rotations[i] = [0; 4].map(|_| r.uniform(-1.0, 1.0) as f32);
        g.logit_opacities[i] = r.uniform(-2.0, 4.0) as f32;
        for k in 0..sh_coeffs(3) {
            let s = if k == 0 { 1.0 } else { 0.3 };
            g.sh[i * sh_coeffs(3) + k] = [0; 3].map(|_| r.uniform(-s, s) as f32);
        }
    }
    g
}

/// The largest error of `got` against `want`, relative to the largest magnitude of `want`'s
/// translation (ρ) or rotation (φ) part, whichever the component belongs to (their units
/// differ); a part that is zero in `want` (nothing visible) must be zero in `got`.
fn pose_error(got: &[f64; 6], want: &[f64; 6]) -> f64 {
    let mut worst = 0.0f64;
    for part in [0..3, 3..6] {
        let scale = want[part.clone()]
            .iter()
            .fold(0.0f64, |m, v| m.max(v.abs()));
        for k in part {
            let diff = (got[k] - want[k]).abs();
            worst = worst.max(match scale > 0.0 {
                true => diff / scale,
                false if diff == 0.0 => 0.0,
                false => f64::INFINITY,
            });
        }
    }
    worst
}

fn close(a: f32, b: f32, rtol: f32, atol: f32) -> bool {
    (a - b).abs() <= atol + rtol * a.abs().max(b.abs())
}

fn poisoned_output() -> RenderOutput {
    RenderOutput {
        image: vec![f32::NAN; 16],
        alpha: vec![f32::NAN; 16],
        final_transmittance: vec![f32::NAN; 16],
        last_contributor: vec![u32::MAX; 16],
        radii: vec![u32::MAX; 16],
        means2d: vec![[f32::NAN; 2]; 16],
        depths: vec![f32::NAN; 16],
        ..RenderOutput::default()
    }
}

fn max_abs(v: &[f32]) -> f32 {
    v.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// Counts and maxima of one comparison, printed so a GPU run records the measured error.
#[derive(Default)]
struct Tally {
    max: f64,
    over: usize,
    total: usize,
}

impl Tally {
    fn add(&mut self, err: f64, tol: f64) {
        self.max = self.max.max(err);
        self.total += 1;
        if err.is_nan() || err > tol {
            self.over += 1;
        }
    }
    fn fraction_over(&self) -> f64 {
        self.over as f64 / self.total.max(1) as f64
    }
}

/// Compares one gradient array, skipping the elements of Gaussians whose projection differs
/// between the backends (`skip[g]`), with `per` elements per Gaussian.
fn grads_tally(gpu: &[f32], cpu: &[f32], per: usize, skip: &[bool]) -> Tally {
    assert_eq!(gpu.len(), cpu.len(), "gradient length");
    let scale = max_abs(cpu).max(1e-12) as f64;
    let mut t = Tally::default();
    for (i, (a, b)) in gpu.iter().zip(cpu).enumerate() {
        assert!(!a.is_nan(), "gradient element {i} is NaN on the GPU");
        if skip[i / per] {
            continue;
        }
        t.add(((a - b).abs() as f64) / scale, GRAD_RTOL as f64);
    }
    t
}

#[derive(Clone, Copy)]
enum Kind {
    /// Log-scales in [-4.5, -1.5]: a few to tens of pixels.
    Mixed,
    /// Log-scales in [-9, -7]: well below a pixel (the dilation dominates).
    SubPixel,
    /// Log-scales in [-0.5, 1]: each covers much of the image, so every tile list is long.
    Huge,
    /// Needles: one axis at log-scale [0, 2.5], the other two at [-8, -6] (thinner than the
    /// dilation), so `ac/det` reaches the tens of thousands, where binning widens its clip for
    /// the f32 rounding of `σ` by percents, and some pass every bound and keep their 3σ box.
    /// Forward only ([`needle_binning_matches_cpu`]): the 3D gradients of such splats are
    /// ill-conditioned in f32 (their long axis's, by cancellation in the conic's small
    /// eigenvalue), so the two engines' differ by percents, as any two f32 orders would.
    Needles,
    /// Mixed, with every 25th Gaussian at log-scales around a level in [15, 34] (σ up to ~6e14
    /// units): their `Σ2d` entries pass 1e20 px², so `a·c` overflows f32 and the conic is
    /// inverted at a power-of-two scale on both backends (drawn over the whole image, not
    /// culled). Each one's three scales stay within e^±0.5 of its level: a needle (scales e^15
    /// and e^34 on one Gaussian) has a 2D covariance so ill-conditioned that f32 cannot tell the
    /// sign of its determinant, and one such Gaussian was drawn by an NVIDIA H200 and culled by
    /// the CPU (whose `exp` differs from CUDA's `expf` by an ulp), changing every pixel.
    Absurd,
}

fn scene_of(kind: Kind, n: usize, seed: u64) -> Gaussians {
    let mut g = scene(n, seed);
    let mut r = Rng::new(seed ^ 0x5eed);
    let (lo, hi) = match kind {
        Kind::Mixed => return g,
        Kind::SubPixel => (-9.0, -7.0),
        Kind::Huge => (-0.5, 1.0),
        Kind::Needles => {
            for (i, s) in g.log_scales.iter_mut().enumerate() {
                *s = [0; 3].map(|_| r.uniform(-8.0, -6.0) as f32);
                s[i % 3] = r.uniform(0.0, 2.5) as f32;
            }
            return g;
        }
        Kind::Absurd => {
            for s in g.log_scales.iter_mut().step_by(25) {
                let level = r.uniform(15.0, 34.0);
                *s = [0; 3].map(|_| (level + r.uniform(-0.5, 0.5)) as f32);
            }
            return g;
        }
    };
    for s in &mut g.log_scales {
        *s = [0; 3].map(|_| r.uniform(lo, hi) as f32);
    }
    g
}

/// Each Gaussian's tiles in `bins`, ascending.
fn tiles_of(bins: &TileBins, n: usize) -> Vec<Vec<u32>> {
    let mut tiles = vec![Vec::new(); n];
    for t in 0..bins.tile_offsets.len() - 1 {
        for &i in bins.tile(t) {
            tiles[i as usize].push(t as u32);
        }
    }
    tiles
}

#[allow(clippy::too_many_arguments)]
fn check_scene(
    gpu_r: &mut CudaRasterizer,
    kind: Kind,
    n: usize,
    seed: u64,
    w: u32,
    h: u32,
    degree: u32,
    antialiased: bool,
    absgrad: bool,
    pose: bool,
    depth: bool,
    filter: bool,
    fisheye: bool,
) {
    let g = scene_of(kind, n, seed);
    let cam = if fisheye {
        fisheye_camera(w, h)
    } else {
        camera(w, h)
    };
    // Mip-Splatting's 3D filter: from a tenth of each Gaussian's smallest scale to its whole
    // (every third one none, 0), set on both rasterizers for this scene only.
    let filter_values: Option<Vec<f32>> = filter.then(|| {
        g.log_scales
            .iter()
            .enumerate()
            .map(|(i, l)| {
                l.iter().copied().fold(f32::INFINITY, f32::min).exp() * (i % 3) as f32 * 0.5
            })
            .collect()
    });
    let opts = RenderOptions {
        sh_degree: degree,
        background: [0.1, 0.2, 0.3],
        antialiased,
        absgrad,
        pose_grad: pose,
        inv_depth: depth,
        ..RenderOptions::default()
    };
    let mut cpu_r = CpuRasterizer::<f32>::new();
    cpu_r.set_filter_3d(filter_values.as_deref()).unwrap();
    gpu_r.set_filter_3d(filter_values.as_deref()).unwrap();
    let mut cpu_out = RenderOutput::default();
    cpu_r.forward(&g, &cam, &opts, &mut cpu_out).unwrap();
    let mut gpu_out = poisoned_output();
    gpu_r.forward(&g, &cam, &opts, &mut gpu_out).unwrap();
    let mode = if antialiased { " antialiased" } else { "" };
    let mode = if filter {
        format!("{mode} filter_3d")
    } else {
        mode.to_owned()
    };
    let abs = if absgrad { " absgrad" } else { "" };
    let pose_label = if pose { " pose" } else { "" };
    let depth_label = if depth { " inv_depth" } else { "" };
    let label =
        format!("n={n} seed={seed} {w}x{h} degree {degree}{mode}{abs}{pose_label}{depth_label}");

    // Stage 1: projection. Gaussians whose radius or binned tiles differ are excluded from
    // every later comparison of their own values (never the checks themselves).
    let cs = cpu_r.splats();
    let gs = gpu_r.splats().unwrap();
    assert_eq!(cs.len(), gs.len());
    let (cb, gb) = (cpu_r.bins(), gpu_r.bins().unwrap());
    let (c_tiles, g_tiles) = (tiles_of(cb, cs.len()), tiles_of(&gb, gs.len()));
    let tile_flips = (0..cs.len()).filter(|&i| c_tiles[i] != g_tiles[i]).count();
    let flipped: Vec<bool> = (0..cs.len())
        .map(|i| cs[i].radius != gs[i].radius || c_tiles[i] != g_tiles[i])
        .collect();
    let flips = flipped.iter().filter(|&&f| f).count();
    if tile_flips > 0 {
        println!("MEASURED {label}: binned tiles of {tile_flips} of {n} Gaussians differ");
    }
    let drawn_any = cs.iter().any(|s| s.radius > 0);
    if let Kind::Absurd = kind {
        // The absurd Gaussians in front of the camera are drawn by the device too, as huge
        // splats, not culled (the f32 overflow of `a·c` this scene exists for), the same ones
        // on both backends.
        let absurd = n.div_ceil(25);
        let drawn = gs
            .iter()
            .step_by(25)
            .filter(|s| s.radius > 1_000_000)
            .count();
        let cpu_drawn = cs
            .iter()
            .step_by(25)
            .filter(|s| s.radius > 1_000_000)
            .count();
        println!("MEASURED {label}: {drawn} (device) vs {cpu_drawn} (CPU) of {absurd} absurd Gaussians drawn");
        assert!(
            drawn == cpu_drawn && drawn * 4 >= absurd,
            "{label}: {drawn} (device) vs {cpu_drawn} (CPU) of {absurd} absurd Gaussians drawn"
        );
    }
    let mut splat = Tally::default();
    for (i, (c, d)) in cs.iter().zip(&gs).enumerate() {
        if flipped[i] || c.radius == 0 {
            continue;
        }
        let pairs = [
            (c.mean2d[0], d.mean2d[0]),
            (c.mean2d[1], d.mean2d[1]),
            (c.conic[0], d.conic[0]),
            (c.conic[1], d.conic[1]),
            (c.conic[2], d.conic[2]),
            (c.color[0], d.color[0]),
            (c.color[1], d.color[1]),
            (c.color[2], d.color[2]),
            (c.opacity, d.opacity),
            (c.depth, d.depth),
        ];
        for (k, (a, b)) in pairs.iter().enumerate() {
            assert!(
                close(*a, *b, SPLAT_RTOL, SPLAT_ATOL),
                "{label}: splat {i} field {k}: cpu {a} cuda {b}"
            );
            // The share of the tolerance used (≤ 1 passes).
            let used = ((a - b).abs() / (SPLAT_ATOL + SPLAT_RTOL * a.abs().max(b.abs()))) as f64;
            splat.add(used, 1.0);
        }
    }
    assert!(
        flips as f64 <= RADIUS_FLIP_FRACTION * n as f64 + 1.0,
        "{label}: {flips} of {n} radii or tile sets differ"
    );
    if antialiased {
        // The compensation must shrink some opacities, or these scenes test nothing new.
        let shrunk = cs
            .iter()
            .zip(&g.logit_opacities)
            .filter(|(c, &l)| c.radius > 0 && c.opacity < 1.0 / (1.0 + (-l).exp()))
            .count();
        assert!(shrunk > 0, "{label}: no opacity compensated");
    }
    if let Some(f) = &filter_values {
        // The filter must dim and widen some splats, or the scene tests nothing new: drawn
        // Gaussians with a filter whose opacity fell by more than the compensation can.
        let dimmed = cs
            .iter()
            .zip(&g.logit_opacities)
            .zip(f)
            .filter(|((c, &l), &f)| f > 0.0 && c.radius > 0 && c.opacity < 0.9 / (1.0 + (-l).exp()))
            .count();
        assert!(dimmed > 0, "{label}: no opacity dimmed by the filter");
    }
    // Culled Gaussians exist in these scenes (behind the camera / off-screen) on both sides.
    assert!(cs.iter().any(|s| s.radius == 0) || n < 10);

    // Stage 2: tile lists, with the flipped Gaussians removed from both sides.
    assert_eq!(
        cb.tile_offsets.len(),
        gb.tile_offsets.len(),
        "{label}: tile count"
    );
    let mut bad_tiles = 0usize;
    // Tiles whose list holds a flipped Gaussian on either side: their pixels may differ.
    let mut tainted = vec![false; cb.tile_offsets.len() - 1];
    for (t, taint) in tainted.iter_mut().enumerate() {
        let c_all = &cb.isect_ids[cb.tile_offsets[t]..cb.tile_offsets[t + 1]];
        let d_all = &gb.isect_ids[gb.tile_offsets[t]..gb.tile_offsets[t + 1]];
        *taint = c_all.iter().chain(d_all).any(|&i| flipped[i as usize]);
        let keep = |ids: &[u32]| -> Vec<u32> {
            ids.iter()
                .copied()
                .filter(|&i| !flipped[i as usize])
                .collect()
        };
        if keep(c_all) != keep(d_all) {
            bad_tiles += 1;
        }
    }
    assert_eq!(
        bad_tiles, 0,
        "{label}: {bad_tiles} tile lists differ beyond flipped Gaussians"
    );
    if flips == 0 {
        assert_eq!(
            cpu_out.num_intersections, gpu_out.num_intersections,
            "{label}"
        );
    }
    let npix = (w * h) as usize;
    let tiles_x = w.div_ceil(16) as usize;
    let last_diff = (0..npix)
        .filter(|&p| {
            let tile = (p / w as usize / 16) * tiles_x + (p % w as usize) / 16;
            !tainted[tile] && cpu_out.last_contributor[p] != gpu_out.last_contributor[p]
        })
        .count();
    assert!(
        last_diff as f64 <= LAST_FLIP_FRACTION * npix as f64,
        "{label}: last contributor differs in {last_diff} of {npix} pixels"
    );

    // Stage 3: image and final transmittance.
    assert_eq!(gpu_out.image.len(), cpu_out.image.len());
    let mut image = Tally::default();
    for (a, b) in cpu_out.image.iter().zip(&gpu_out.image) {
        assert!(!b.is_nan(), "{label}: NaN pixel from the GPU");
        image.add((a - b).abs() as f64, IMAGE_ATOL as f64);
    }
    let mut trans = Tally::default();
    for (a, b) in cpu_out
        .final_transmittance
        .iter()
        .zip(&gpu_out.final_transmittance)
    {
        trans.add((a - b).abs() as f64, IMAGE_ATOL as f64);
    }
    assert!(
        image.fraction_over() <= IMAGE_FLIP_FRACTION && image.max <= 0.05,
        "{label}: image: {} of {} channels over {IMAGE_ATOL} (max {})",
        image.over,
        image.total,
        image.max
    );
    assert!(
        trans.fraction_over() <= IMAGE_FLIP_FRACTION && trans.max <= 0.05,
        "{label}: final T: {} of {} over {IMAGE_ATOL} (max {})",
        trans.over,
        trans.total,
        trans.max
    );
    // The inverse-depth plane: present exactly when asked for; compared like the image, in
    // units of its largest value.
    let mut plane = Tally::default();
    if depth {
        assert_eq!(
            gpu_out.inv_depth.len(),
            npix,
            "{label}: inverse-depth plane"
        );
        let scale = max_abs(&cpu_out.inv_depth).max(1e-6);
        assert!(
            scale > 1e-3 || !drawn_any,
            "{label}: inverse depth too small to test"
        );
        for (a, b) in cpu_out.inv_depth.iter().zip(&gpu_out.inv_depth) {
            assert!(!b.is_nan(), "{label}: NaN inverse depth from the GPU");
            plane.add(((a - b).abs() / scale) as f64, IMAGE_ATOL as f64);
        }
        assert!(
            plane.fraction_over() <= IMAGE_FLIP_FRACTION && plane.max <= 0.05,
            "{label}: inverse depth: {} of {} over {IMAGE_ATOL} of its scale (max {})",
            plane.over,
            plane.total,
            plane.max
        );
    } else {
        assert!(
            gpu_out.inv_depth.is_empty(),
            "{label}: inverse depth without inv_depth"
        );
    }

    // Stage 4/5: gradients of L = Σ w·image (+ Σ w'·inv_depth) with fixed random weights.
    let mut r = Rng::new(seed ^ 0xabc);
    let d_image: Vec<f32> = (0..cpu_out.image.len() + cpu_out.inv_depth.len())
        .map(|_| r.uniform(-1.0, 1.0) as f32)
        .collect();
    let mut cg = GaussianGrads::default();
    cpu_r.backward(&g, &cam, &opts, &d_image, &mut cg).unwrap();
    // Stale values of another shape: the backward must resize and overwrite them.
    let mut gg = GaussianGrads::default();
    gg.params.means = vec![[f32::NAN; 3]; 4];
    gg.pose = Some([f64::NAN; 6]);
    gpu_r.backward(&g, &cam, &opts, &d_image, &mut gg).unwrap();
    let k = sh_coeffs(g.sh_degree);
    // The absolute 2D-mean gradient: present exactly when asked for. Every term is ≥ 0, so
    // unlike the signed sums it has no cancellation to amplify the atomics' rounding.
    let mut abs_tally = None;
    if absgrad {
        assert_eq!(gg.means2d_abs.len(), n, "{label}: absolute gradient length");
        assert!(
            cg.means2d_abs
                .iter()
                .zip(&cg.means2d)
                .all(|(a, m)| (0..2).all(|c| a[c] >= 0.0 && a[c] >= m[c].abs() * 0.999)),
            "{label}: CPU absolute gradient below the signed one"
        );
        abs_tally = Some(grads_tally(
            gg.means2d_abs.as_flattened(),
            cg.means2d_abs.as_flattened(),
            2,
            &flipped,
        ));
    } else {
        assert!(
            gg.means2d_abs.is_empty() && cg.means2d_abs.is_empty(),
            "{label}: absolute gradient returned without absgrad"
        );
    }
    let mut grads = vec![
        (
            "means",
            grads_tally(
                gg.means.as_flattened(),
                cg.means.as_flattened(),
                3,
                &flipped,
            ),
        ),
        (
            "log_scales",
            grads_tally(
                gg.log_scales.as_flattened(),
                cg.log_scales.as_flattened(),
                3,
                &flipped,
            ),
        ),
        (
            "rotations",
            grads_tally(
                gg.rotations.as_flattened(),
                cg.rotations.as_flattened(),
                4,
                &flipped,
            ),
        ),
        (
            "logit_opacities",
            grads_tally(&gg.logit_opacities, &cg.logit_opacities, 1, &flipped),
        ),
        (
            "sh",
            grads_tally(gg.sh.as_flattened(), cg.sh.as_flattened(), 3 * k, &flipped),
        ),
        (
            "means2d",
            grads_tally(
                gg.means2d.as_flattened(),
                cg.means2d.as_flattened(),
                2,
                &flipped,
            ),
        ),
    ];
    grads.extend(abs_tally.map(|t| ("means2d_abs", t)));
    // The pose gradient: present exactly when asked for. A Gaussian whose radius flipped
    // adds its share on one side only, so it is compared where none did (the emulation never
    // flips; the GPUs measured none on these scenes).
    let mut pose_err = None;
    if pose {
        let c = cg.pose.expect("the CPU backward's pose gradient");
        let d = gg.pose.expect("the CUDA backward's pose gradient");
        assert!(
            d.iter().all(|v| v.is_finite()),
            "{label}: pose gradient {d:?}"
        );
        // With something drawn, both parts of the CPU's are large enough to test.
        if drawn_any {
            for part in [&c[..3], &c[3..]] {
                assert!(
                    part.iter().any(|v| v.abs() > 1e-3),
                    "{label}: pose gradient {c:?} too small to test"
                );
            }
        }
        let err = pose_error(&d, &c);
        if flips == 0 {
            assert!(
                err <= POSE_RTOL,
                "{label}: pose gradient: CUDA {d:?} vs CPU {c:?}, {err:.3e} of its scale"
            );
        }
        pose_err = Some(err);
    } else {
        assert_eq!(
            gg.pose, None,
            "{label}: pose gradient returned without pose_grad"
        );
    }
    let mut line = format!(
        "MEASURED {label} kind={}: radius flips {flips}, splat error {:.2} of tolerance, tiles differing {bad_tiles}, \
         last-contributor diffs {last_diff}, image max {:.2e} ({} over), final T max {:.2e}",
        match kind { Kind::Mixed => "mixed", Kind::SubPixel => "subpixel", Kind::Huge => "huge", Kind::Absurd => "absurd", Kind::Needles => "needles" },
        splat.max,
        image.max,
        image.over,
        trans.max
    );
    for (name, t) in &grads {
        line.push_str(&format!(
            ", grad {name} max rel {:.2e} ({} over)",
            t.max, t.over
        ));
    }
    if let Some(e) = pose_err {
        line.push_str(&format!(", pose max rel {e:.2e}"));
    }
    if depth {
        line.push_str(&format!(", inv depth max {:.2e}", plane.max));
    }
    eprintln!("{line}");
    for (name, t) in &grads {
        assert!(
            t.fraction_over() <= GRAD_FLIP_FRACTION && t.max <= 0.05,
            "{label}: gradient {name}: {} of {} elements over {GRAD_RTOL} of the array's scale (max {:.3e})",
            t.over,
            t.total,
            t.max
        );
    }
}

#[test]
fn stages_match_cpu_on_random_scenes() {
    for mut r in rasterizers() {
        eprintln!("device: {}", r.device().name());
        stages_match_cpu(&mut r);
        // On the emulation, prove that these scenes executed every entry point of every
        // kernel file (a kernel that never runs would pass any parity test).
        if let Some(counts) = r.device().launch_counts() {
            for k in Kernel::ALL {
                for e in k.entry_points() {
                    assert!(
                        counts.get(*e).copied().unwrap_or(0) > 0,
                        "{} entry point {e} never ran: {counts:?}",
                        k.file_name()
                    );
                }
            }
        }
    }
}

fn stages_match_cpu(r: &mut CudaRasterizer) {
    // Larger scene first so later, smaller renders run on dirty (poisoned) device buffers.
    // Sizes: one tile, non-multiples of 16 in both directions, many tiles, and (20k, huge)
    // hundreds of list entries per tile, i.e. many shared-memory batches. The antialiased
    // scenes cover the compensation at every size: ≈ 1 (huge), far below 1 (mixed: the small
    // ones), ≈ 0 (sub-pixel), and at the power-of-two inversion scale (absurd).
    // The absolute 2D-mean gradient (last column) runs on the largest scene and again on
    // smaller ones after it, whose accumulators then start from a dirty buffer.
    // The pose gradient runs on most scenes, both modes, and stays off on a few, between pose
    // scenes, whose backward must then return none. The inverse-depth plane (last column) runs
    // on every kind and mode, with and without the pose gradient, and stays off in between.
    for (kind, n, seed, w, h, degree, aa, abs, pose, depth) in [
        (Kind::Mixed, 20_000, 7, 320, 240, 3, false, true, true, true),
        (Kind::Mixed, 1, 1, 16, 16, 3, false, false, true, false),
        (Kind::Mixed, 37, 2, 33, 17, 3, false, true, false, true),
        (Kind::Mixed, 1000, 3, 128, 96, 1, false, true, true, false),
        (Kind::Mixed, 5000, 4, 200, 150, 3, false, false, true, true),
        (Kind::SubPixel, 3000, 5, 97, 61, 2, false, false, true, true),
        (Kind::Huge, 2000, 6, 130, 70, 3, false, true, true, true),
        (Kind::Absurd, 500, 9, 64, 48, 1, false, true, true, true),
        (Kind::Mixed, 4000, 8, 47, 300, 0, false, false, false, false),
        (Kind::Mixed, 3000, 10, 150, 100, 3, true, true, true, true),
        (
            Kind::SubPixel,
            1500,
            11,
            61,
            45,
            1,
            true,
            false,
            false,
            false,
        ),
        (Kind::Huge, 1000, 12, 70, 50, 2, true, false, true, true),
        (Kind::Absurd, 500, 13, 64, 48, 1, true, false, true, false),
    ] {
        // Under compute-sanitizer (10-100x slower kernels) the verification script asks for
        // the small scenes only; every kernel still runs on several shapes.
        if small_only() && n > 4000 {
            continue;
        }
        check_scene(
            r, kind, n, seed, w, h, degree, aa, abs, pose, depth, false, false,
        );
    }
    // Through Mip-Splatting's 3D filter, both modes, with the pose gradient and the
    // inverse-depth plane on some.
    for (kind, n, seed, w, h, degree, aa, abs, pose, depth) in [
        (Kind::Mixed, 3000, 21, 150, 100, 3, false, true, true, true),
        (Kind::Mixed, 1500, 22, 61, 45, 1, true, false, true, false),
        (Kind::Huge, 1000, 23, 70, 50, 2, true, false, false, true),
    ] {
        check_scene(
            r, kind, n, seed, w, h, degree, aa, abs, pose, depth, true, false,
        );
    }
    r.set_filter_3d(None).unwrap();
    // Through the equidistant fisheye (about 160° across): every kind, both modes, both
    // project_bwd entry points with and without the pose gradient, the inverse-depth plane
    // and the 3D filter on some.
    #[rustfmt::skip]
    let fisheye_scenes = [
        // kind, n, seed, w, h, degree, aa, abs, pose, depth, filter
        (Kind::Mixed, 3000, 31, 150, 100, 3, false, true, true, true, false),
        (Kind::Mixed, 1500, 32, 61, 45, 1, true, false, true, false, true),
        (Kind::SubPixel, 1500, 33, 97, 61, 2, false, false, false, true, false),
        (Kind::Huge, 1000, 34, 70, 50, 2, true, false, true, true, false),
        (Kind::Absurd, 500, 35, 64, 48, 1, false, true, false, false, false),
    ];
    for (kind, n, seed, w, h, degree, aa, abs, pose, depth, filter) in fisheye_scenes {
        check_scene(
            r, kind, n, seed, w, h, degree, aa, abs, pose, depth, filter, true,
        );
    }
    r.set_filter_3d(None).unwrap();
}

#[test]
fn empty_scene_renders_background() {
    for mut r in rasterizers() {
        empty_scene(&mut r);
    }
}

fn empty_scene(r: &mut CudaRasterizer) {
    let g = Gaussians::default();
    let cam = camera(20, 10);
    let opts = RenderOptions {
        sh_degree: 0,
        background: [0.25, 0.5, 0.75],
        ..RenderOptions::default()
    };
    let mut out = poisoned_output();
    r.forward(&g, &cam, &opts, &mut out).unwrap();
    assert_eq!(out.num_intersections, 0);
    for px in out.image.chunks_exact(3) {
        assert_eq!(px, [0.25, 0.5, 0.75]);
    }
}

/// Binning of needles, where the clip to the α-support ellipse is widened for the f32 rounding
/// of `σ` (`cpu::rasterize::clip_cut`) or, past every bound, not trusted. The device's tile
/// sets are compared with the CPU binning's (`Reach`) of the device's own splats: a needle's
/// conic is so ill-conditioned that an ulp of difference in the projection (`expf` on a GPU)
/// moves its ellipse, so only the same floats can ask for the same tiles.
#[test]
fn needle_binning_matches_cpu() {
    for mut r in rasterizers() {
        needle_binning(&mut r);
    }
}

fn needle_binning(gpu_r: &mut CudaRasterizer) {
    let n = 1200;
    let g = scene_of(Kind::Needles, n, 14);
    let cam = camera(96, 64);
    let opts = RenderOptions {
        sh_degree: 1,
        ..RenderOptions::default()
    };
    let mut out = poisoned_output();
    gpu_r.forward(&g, &cam, &opts, &mut out).unwrap();
    let (splats, bins) = (gpu_r.splats().unwrap(), gpu_r.bins().unwrap());
    // The scene must reach both regimes of the clip.
    let (mut widened, mut untrusted) = (0, 0);
    for s in splats.iter().filter(|s| s.radius > 0) {
        let cut = rasterize::sigma_cut(s.opacity);
        match rasterize::clip_cut(s.conic, cut) {
            None => untrusted += 1,
            Some(c) if c > 1.01 * cut => widened += 1,
            Some(_) => {}
        }
    }
    assert!(
        widened > 50 && untrusted > 2,
        "{widened} widened, {untrusted} untrusted"
    );
    let got = tiles_of(&bins, n);
    let differ = splats
        .iter()
        .zip(&got)
        .filter(|(s, got)| {
            let mut want = Vec::new();
            if let Some(r) = Reach::of(s, bins.tiles_x, bins.tiles_y) {
                r.for_each_tile(bins.tiles_x, |t| want.push(t as u32));
            }
            want.sort_unstable();
            want != **got
        })
        .count();
    println!(
        "MEASURED {} needles: {widened} clips widened > 1 %, {untrusted} untrusted; tile sets \
         differing from the CPU's {differ} of {n}",
        gpu_r.device().name()
    );
    // A flip where logf and Rust's ln round the cut-off apart.
    assert!(
        differ as f64 <= RADIUS_FLIP_FRACTION * n as f64 + 1.0,
        "{differ} of {n} tile sets differ"
    );
}

#[test]
fn radix_sort_is_a_stable_sort() {
    for mut r in rasterizers() {
        stable_sort(&mut r);
    }
}

fn stable_sort(r: &mut CudaRasterizer) {
    let mut rng = Rng::new(99);
    // Sizes around the sort's tile (2048 keys per block, 256 per round) and across many tiles.
    let sizes = [
        0usize, 1, 255, 256, 257, 2047, 2048, 2049, 4096, 10_000, 300_001,
    ];
    // Key sets: few distinct keys (stability), one key everywhere (one digit fills a tile),
    // full 32-bit keys, and runs of consecutive tile ids like emit_keys writes (a 1080p
    // render's 8160 tiles, sorted by their 13 significant bits only).
    type Keys = fn(&mut Rng, usize) -> Vec<u32>;
    let kinds: [(&str, u32, Keys); 4] = [
        ("few", 32, |rng, m| {
            (0..m)
                .map(|_| ((rng.next_u64() % 1000) as u32) << 20)
                .collect()
        }),
        ("equal", 32, |_, m| vec![0xdead_beef; m]),
        ("full", 32, |rng, m| {
            (0..m).map(|_| rng.next_u64() as u32).collect()
        }),
        ("runs", 13, |rng, m| {
            let mut keys = Vec::with_capacity(m);
            while keys.len() < m {
                let first = (rng.next_u64() % 8160) as u32;
                let len = 1 + rng.next_u64() % 12;
                keys.extend((first..8160).take(len as usize));
            }
            keys.truncate(m);
            keys
        }),
    ];
    for (kind, bits, make) in kinds {
        for m in sizes {
            let keys = make(&mut rng, m);
            let vals: Vec<u32> = (0..m as u32).collect();
            let (k, v) = r.sort_pairs(&keys, &vals, bits).unwrap();
            let mut want: Vec<(u32, u32)> =
                keys.iter().copied().zip(vals.iter().copied()).collect();
            want.sort_by_key(|p| p.0); // stable
            let got: Vec<(u32, u32)> = k.into_iter().zip(v).collect();
            assert!(
                got == want,
                "{}: {kind} keys, m = {m}: the sort differs from a stable sort",
                r.device().name()
            );
        }
    }
}

#[test]
fn preflight_refuses_before_allocating() {
    for mut r in rasterizers() {
        preflight(&mut r);
    }
}

fn preflight(r: &mut CudaRasterizer) {
    let g = scene(2000, 5);
    let cam = camera(128, 96);
    let opts = RenderOptions {
        max_intersection_bytes: 1000,
        ..RenderOptions::default()
    };
    let mut out = RenderOutput::default();
    let err = r.forward(&g, &cam, &opts, &mut out).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("tile intersections") && msg.contains("#"),
        "{msg}"
    );
    // Backward after a failed forward is refused.
    let mut gr = GaussianGrads::default();
    assert!(r
        .backward(&g, &cam, &opts, &vec![0.0; 3 * 128 * 96], &mut gr)
        .is_err());
}

#[test]
fn splat_grads_need_a_backward_since_the_last_forward() {
    for mut r in rasterizers() {
        let g = scene(50, 11);
        let cam = camera(40, 30);
        let opts = RenderOptions::default();
        let mut out = RenderOutput::default();
        assert!(r.splat_grads().is_err(), "before any render");
        r.forward(&g, &cam, &opts, &mut out).unwrap();
        assert!(r.splat_grads().is_err(), "after a forward only");
        let mut gr = GaussianGrads::default();
        r.backward(&g, &cam, &opts, &vec![0.5; 3 * 40 * 30], &mut gr)
            .unwrap();
        assert_eq!(r.splat_grads().unwrap().len(), 50);
        // A larger forward invalidates them (the buffers cover 50 Gaussians only).
        r.forward(&scene(80, 12), &cam, &opts, &mut out).unwrap();
        assert!(r.splat_grads().is_err(), "after a larger forward");
    }
}

/// The trainer's path: parameters and ∂L/∂image resident on the device give the same image
/// and gradients as the host API (which uploads, calls the same code, downloads).
#[test]
fn resident_path_equals_host_path() {
    use ramsplat::render::cuda::DeviceGaussians;
    for mut r in rasterizers() {
        let dev = r.device().clone();
        let g = scene(3000, 21);
        let cam = camera(150, 90);
        let opts = RenderOptions {
            sh_degree: 2,
            background: [0.2, 0.1, 0.0],
            ..RenderOptions::default()
        };
        let mut out = poisoned_output();
        r.forward(&g, &cam, &opts, &mut out).unwrap();
        let mut rng = Rng::new(5);
        let d_image: Vec<f32> = (0..out.image.len())
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        let mut host_grads = GaussianGrads::default();
        r.backward(&g, &cam, &opts, &d_image, &mut host_grads)
            .unwrap();

        let mut dg = DeviceGaussians::new(&dev).unwrap();
        dg.upload(&dev, &g).unwrap();
        assert_eq!(dg.download(&dev).unwrap(), g, "upload/download round trip");
        let m = r.forward_resident(&dg, &cam, &opts).unwrap();
        assert_eq!(m, out.num_intersections);
        let img = dev.download_vec(r.image(), out.image.len()).unwrap();
        assert_eq!(img, out.image, "{}", dev.name());
        let mut dd = dev.alloc::<f32>(d_image.len()).unwrap();
        dev.upload(&d_image, &mut dd).unwrap();
        let grads = r.backward_resident(&dg, &cam, &opts, &dd).unwrap();
        let means = dev
            .download_vec(grads.buffer(Field::Means), 3 * g.len())
            .unwrap();
        let sh = dev
            .download_vec(grads.buffer(Field::Sh), 3 * g.sh.len())
            .unwrap();
        // Float atomics may sum in another order between two runs on a GPU.
        let close = |a: &[f32], b: &[f32]| {
            let scale = max_abs(b).max(1e-12);
            a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5 * scale)
        };
        assert!(
            close(&means, host_grads.means.as_flattened()),
            "{}",
            dev.name()
        );
        assert!(close(&sh, host_grads.sh.as_flattened()), "{}", dev.name());
        // A backward for other parameters than the last forward's is refused.
        let other = DeviceGaussians::new(&dev).unwrap();
        assert!(r.backward_resident(&other, &cam, &opts, &dd).is_err());
    }
}

/// The resident backward writes the pose gradient where the caller says
/// ([`PoseTarget`](ramsplat::render::cuda::PoseTarget): six doubles at an offset of its
/// buffer, nothing else of it touched), the same sums the host API returns; a target too short
/// or on another device is an error (checked before `project_bwd_pose` runs).
#[test]
fn pose_gradient_lands_at_the_callers_offset() {
    use ramsplat::render::cuda::{DeviceGaussians, PoseTarget};
    for mut r in rasterizers() {
        let dev = r.device().clone();
        let g = scene(2000, 23);
        let cam = camera(96, 64);
        let opts = RenderOptions {
            sh_degree: 3,
            pose_grad: true,
            ..RenderOptions::default()
        };
        let mut out = poisoned_output();
        r.forward(&g, &cam, &opts, &mut out).unwrap();
        let mut rng = Rng::new(8);
        let d_image: Vec<f32> = (0..out.image.len())
            .map(|_| rng.uniform(-1.0, 1.0) as f32)
            .collect();
        let mut host = GaussianGrads::default();
        r.backward(&g, &cam, &opts, &d_image, &mut host).unwrap();
        let want = host.pose.expect("pose_grad asks for the pose gradient");

        let mut dg = DeviceGaussians::new(&dev).unwrap();
        dg.upload(&dev, &g).unwrap();
        let mut dd = dev.alloc::<f32>(d_image.len()).unwrap();
        dev.upload(&d_image, &mut dd).unwrap();
        let sentinel = [7.5f64; 11];
        let mut buf = dev.alloc::<f64>(sentinel.len()).unwrap();
        // Too short for six values at offset 6; then a buffer of another device.
        r.forward_resident(&dg, &cam, &opts).unwrap();
        let short = PoseTarget {
            buf: &mut buf,
            offset: 6,
        };
        let err = r.backward_resident_to(&dg, &cam, &opts, &dd, Some(short));
        assert!(
            err.is_err(),
            "{}: a short pose target is refused",
            dev.name()
        );
        let other = Device::emulated().unwrap();
        let mut foreign = other.alloc::<f64>(8).unwrap();
        let err = r.backward_resident_to(
            &dg,
            &cam,
            &opts,
            &dd,
            Some(PoseTarget {
                buf: &mut foreign,
                offset: 0,
            }),
        );
        assert!(
            err.is_err(),
            "{}: another device's buffer is refused",
            dev.name()
        );

        dev.upload(&sentinel, &mut buf).unwrap();
        let target = PoseTarget {
            buf: &mut buf,
            offset: 3,
        };
        r.backward_resident_to(&dg, &cam, &opts, &dd, Some(target))
            .unwrap();
        assert_eq!(
            r.pose_grad().unwrap(),
            None,
            "the sums went to the caller's buffer"
        );
        let got = dev.download_vec(&buf, sentinel.len()).unwrap();
        assert_eq!(
            &got[..3],
            &sentinel[..3],
            "{}: before the offset",
            dev.name()
        );
        assert_eq!(
            &got[9..],
            &sentinel[9..],
            "{}: after the six sums",
            dev.name()
        );
        let sums: [f64; 6] = std::array::from_fn(|k| got[3 + k]);
        // The same kernels on the same inputs; on a GPU the per-splat gradients' float
        // atomics may add in another order between the two backwards.
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            sums.iter()
                .zip(&want)
                .all(|(a, b)| (a - b).abs() <= 1e-5 * scale),
            "{}: {sums:?} vs {want:?}",
            dev.name()
        );
    }
}

/// Depth maps (`render::depth`, what `gs-render --depth` writes) come from the backend's own
/// colour path, so the device's equal the CPU's within the image tolerance (relative to the
/// scene's depths) wherever both drew something, in both rasterization modes and for both
/// kinds of depth.
#[test]
fn depth_maps_match_cpu() {
    use ramsplat::render::depth::{render_depth, DepthKind, DepthScratch, MIN_DEPTH_ALPHA};
    for mut r in rasterizers() {
        for (antialiased, kind) in [
            (false, DepthKind::Mean),
            (true, DepthKind::Mean),
            (false, DepthKind::Plane),
            (true, DepthKind::Plane),
        ] {
            let g = scene(3000, 31);
            let cam = camera(150, 90);
            let opts = RenderOptions {
                antialiased,
                ..RenderOptions::default()
            };
            let mut scratch = DepthScratch::default();
            let d = render_depth(&mut r, &g, &cam, &opts, kind, &mut scratch).unwrap();
            let c = render_depth(
                &mut CpuRasterizer::new(),
                &g,
                &cam,
                &opts,
                kind,
                &mut scratch,
            )
            .unwrap();
            let (mut compared, mut max_rel, mut alpha_max) = (0usize, 0f32, 0f32);
            for i in 0..c.depth.len() {
                alpha_max = alpha_max.max((c.alpha[i] - d.alpha[i]).abs());
                // Pixels at the no-depth threshold may fall either side of it.
                if c.alpha[i] < 2.0 * MIN_DEPTH_ALPHA || d.alpha[i] < 2.0 * MIN_DEPTH_ALPHA {
                    continue;
                }
                compared += 1;
                max_rel = max_rel.max((c.depth[i] - d.depth[i]).abs() / c.depth[i]);
            }
            eprintln!(
                "MEASURED depth {} antialiased={antialiased} {kind:?}: {compared} pixels, max \
                 relative depth error {max_rel:.2e}, alpha max error {alpha_max:.2e}",
                r.device().name()
            );
            assert!(compared > c.depth.len() / 2, "{compared} pixels with depth");
            assert!(
                max_rel <= 1e-3 && alpha_max <= 1e-3,
                "{max_rel} {alpha_max}"
            );
        }
    }
}

/// The devices a sharded run is checked on: three emulated devices, and three handles to
/// GPU 0 when one is usable (each with its own buffers; copies between them take the staged
/// path that copies between GPUs take).
fn shard_device_sets() -> Vec<(Device, Vec<Device>)> {
    let emu = || Device::emulated().expect("the host emulation needs a C++20 compiler");
    let mut v = vec![(emu(), vec![emu(), emu(), emu()])];
    match Device::cuda() {
        Ok(gpu) => {
            let more = (0..3).map(|_| Device::cuda_ordinal(0).unwrap()).collect();
            v.push((gpu, more));
        }
        Err(e) => {
            let required = std::env::var("GS_REQUIRE_GPU").is_ok_and(|v| v == "1");
            assert!(!required, "GS_REQUIRE_GPU=1 but no usable GPU: {e}");
            eprintln!("SKIP sharded parity on a GPU: {e}");
        }
    }
    v
}

/// A model split over three devices ([`ShardedEngine`]) against one device, same driver: the
/// loss of a step is the same number (the view device rasterizes exactly the one-device
/// splats, and the loss reduces in a fixed order), the statistics the backward feeds agree
/// (visibility and radii exactly, 2D-mean gradient norms within the float atomics' order),
/// and a render after an Adam step agrees. 2,000 Gaussians with absgrad (the absolute
/// gradients travel back with the signed ones); empty shards are in the library's tests.
/// Steps 0 and 2 also ask for the pose gradient: the sum of the shards' shares in shard order
/// is the one-device sum to the rounding of a different order (and of the atomics); step 1
/// asks for none and gets none.
#[test]
fn sharded_engine_matches_one_device() {
    use ramsplat::train::adam::{AdamConfig, GroupMask, LearningRates};
    use ramsplat::train::densify::Model;
    use ramsplat::train::device_engine::{DeviceEngine, Frame, ResidentEngine, StepScalars};
    use ramsplat::train::sharded::ShardedEngine;
    for (one_dev, shard_devs) in shard_device_sets() {
        let name = one_dev.name();
        let cam = camera(64, 48);
        let model = Model::new(scene(2000, 41));
        let target: Vec<u8> = (0..64 * 48 * 3).map(|i| (i * 37 % 251) as u8).collect();
        let opts = RenderOptions {
            sh_degree: 3,
            absgrad: true,
            ..RenderOptions::default()
        };
        let mut one = DeviceEngine::new(one_dev).unwrap();
        let mut many = ShardedEngine::new(shard_devs).unwrap();
        one.upload_model(&model).unwrap();
        many.upload_model(&model).unwrap();
        assert_eq!(many.shard_lens(), vec![667, 667, 666]);
        // Stage three views so the third step renders on the third device.
        let mut losses = Vec::new();
        for step in 0..3 {
            one.stage_view(Frame::Host(&target), target.len(), false, false, None)
                .unwrap();
            many.stage_view(Frame::Host(&target), target.len(), false, false, None)
                .unwrap();
            let step_opts = RenderOptions {
                pose_grad: step != 1,
                ..opts
            };
            let a = one.forward_backward(&cam, &step_opts, 0.2, None).unwrap();
            let b = many.forward_backward(&cam, &step_opts, 0.2, None).unwrap();
            let (pa, pb) = (a.pose_grad, b.pose_grad);
            let no_pose = |s: StepScalars| StepScalars {
                pose_grad: None,
                ..s
            };
            assert_eq!(
                no_pose(a),
                no_pose(b),
                "{name}: step {step}: the same loss, bit for bit"
            );
            assert_eq!(pa.is_some(), step != 1, "{name}: step {step}: {pa:?}");
            assert_eq!(pb.is_some(), step != 1, "{name}: step {step}: {pb:?}");
            if let (Some(pa), Some(pb)) = (pa, pb) {
                let err = pose_error(&pb, &pa);
                eprintln!("MEASURED sharded {name}: step {step}: pose gradient {err:.2e} of scale");
                // Measured: ≤ 3.9e-7 on the emulation, ≤ 9.7e-8 on an H100 (POSE_RTOL's doc).
                assert!(
                    err <= POSE_RTOL,
                    "{name}: step {step}: sharded {pb:?} vs one device {pa:?}"
                );
            }
            losses.push(a.loss);
            one.accumulate_stats(64, 48, true).unwrap();
            many.accumulate_stats(64, 48, true).unwrap();
        }
        let (sa, sb) = (
            one.refine_inputs().unwrap().stats,
            many.refine_inputs().unwrap().stats,
        );
        assert_eq!(sa.denom, sb.denom, "{name}: visibility");
        assert_eq!(sa.max_radii, sb.max_radii, "{name}: radii");
        let scale = sa.grad_accum.iter().fold(0.0f32, |m, &v| m.max(v));
        let worst = sa
            .grad_accum
            .iter()
            .zip(&sb.grad_accum)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        eprintln!("MEASURED sharded {name}: |Δ grad_accum| ≤ {worst:e} of {scale:e}");
        assert!(
            scale > 0.0 && worst <= 1e-4 * scale,
            "{name}: {worst:e} of {scale:e}"
        );
        // One Adam step from the last backward, then a render: the same image up to what the
        // atomics' order can change. Adam's first step moves a parameter by ±lr whatever its
        // gradient's size, so a near-zero gradient whose sign the summation order flips moves
        // a Gaussian by 2·lr: bounded by the images' PSNR, not by their largest difference.
        // 3DGS's initial rates (position scaled for a unit scene).
        let lr = LearningRates {
            means: 1.6e-4,
            f_dc: 2.5e-3,
            f_rest: 2.5e-3 / 20.0,
            opacity: 2.5e-2,
            scaling: 5e-3,
            rotation: 1e-3,
        };
        one.adam_step(&AdamConfig::default(), &lr, GroupMask::ALL)
            .unwrap();
        many.adam_step(&AdamConfig::default(), &lr, GroupMask::ALL)
            .unwrap();
        let ia = one.render(&cam, &opts).unwrap().to_vec();
        let ib = many.render(&cam, &opts).unwrap().to_vec();
        let diff = ia
            .iter()
            .zip(&ib)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        let mse = ia
            .iter()
            .zip(&ib)
            .map(|(x, y)| ((x - y) as f64).powi(2))
            .sum::<f64>()
            / ia.len() as f64;
        let psnr = -10.0 * mse.max(1e-30).log10();
        eprintln!(
            "MEASURED sharded {name}: render after Adam |Δ| ≤ {diff:e}, PSNR {psnr:.1} dB; \
             losses {losses:?}"
        );
        assert!(
            psnr >= 50.0,
            "{name}: renders differ: PSNR {psnr} dB, |Δ| ≤ {diff}"
        );
    }
}
