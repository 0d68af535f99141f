//! Stage benchmarks (run on demand): where the time of single pipeline stages goes, on fixed
//! inputs. Each prints its figures; none is a test (tests never assert wall-clock time).
//!
//! `cargo bench --bench stages [-- NAME ...]` with NAME among:
//! - `knn`: the initial model's kNN scale estimate over 1M random points;
//! - `step`: one CPU-engine training step at 100k Gaussians and 640×480, by stage;
//! - `prepare`: the pack-time image path (decode, undistort, area downscales) on the fox photos
//!   in `../shared/data/fox` (skipped when absent), with the process's peak RSS;
//! - `points`: streaming a 2M-point COLMAP `points3D` (binary and text) through the bounded
//!   reader: throughput and the growth of the peak RSS, which must stay far below the file;
//! - `synth`: procedural views rendered per second (`SYNTH_BENCH_SIZES="320x240:64,…"`);
//! - `resample`: the loader's serial resample of one packed view at a run's resolution
//!   (`gs-train -r`), on a fox-sized 1067×1902 view: RGB, and RGBA with a mask and an
//!   inverse-depth plane, at factors 2 and 4 (milliseconds per view, one thread);
//! - `adam`: one CPU Adam step over 1M Gaussians at SH degree 3 (every group), walking the
//!   field table: milliseconds and the bytes moved per second; then sparse Adam with one
//!   Gaussian in ten visible.
//! - `bilagrid`: bilateral grids (gsplat's 16×16×8): the render through a grid and its adjoint
//!   on a 1600×1066 view, and the optimizer's step over every view's grid (total variation
//!   and Adam) for 100 and 600 views, in milliseconds.
//!
//! - `loss`: the CPU engine's loss, `0.8·L1 + 0.2·(1 − SSIM)` with its gradient, and SSIM
//!   alone (what evaluation scores by), on a render and a target near it at the demo's
//!   240×180, 640×480 and 1920×1080, in milliseconds per call.
//!
//! Without a NAME every stage runs. Figures are medians of `RUNS` runs where a stage repeats.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ramsplat::dataset::{Distortion, PointSource};
use ramsplat::import::colmap::{write_model, ColmapPoint, Encoding, PointsReader};
use ramsplat::import::image::{load_rgb8, resize_area, undistort};
use ramsplat::render::CpuRasterizer;
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::synth::SynthScene;
use ramsplat::train::init::{from_points, knn_mean_sq_dist};
use ramsplat::train::{Engine, TrainConfig, Trainer};

const RUNS: usize = 3;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn vm_hwm() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("VmHWM: ?")
        .to_owned()
}

fn knn() {
    let mut rng = Rng::new(2);
    let pts: Vec<[f32; 3]> = (0..1_000_000)
        .map(|_| std::array::from_fn(|_| rng.next_f32()))
        .collect();
    let secs: Vec<f64> = (0..RUNS)
        .map(|_| {
            let t = Instant::now();
            let d = knn_mean_sq_dist(&pts);
            assert_eq!(d.len(), pts.len());
            t.elapsed().as_secs_f64()
        })
        .collect();
    println!("knn: 1M points, median {:.2} s ({RUNS} runs)", median(secs));
}

fn step() {
    let mut rng = Rng::new(1);
    let n = 100_000;
    let xyz: Vec<[f32; 3]> = (0..n)
        .map(|_| std::array::from_fn(|_| rng.uniform(-1.0, 1.0) as f32))
        .collect();
    let rgb: Vec<[u8; 3]> = (0..n)
        .map(|_| std::array::from_fn(|_| rng.below(256) as u8))
        .collect();
    let g = from_points(&xyz, &rgb, 3).unwrap();
    let cam = Camera {
        width: 640,
        height: 480,
        intrinsics: Intrinsics {
            fx: 600.0,
            fy: 600.0,
            cx: 320.0,
            cy: 240.0,
        },
        world_to_camera: Pose {
            translation: [0.0, 0.0, 4.0],
            ..Pose::IDENTITY
        },
        projection: Projection::Pinhole,
    };
    let img: Vec<u8> = (0..640 * 480 * 3).map(|_| rng.below(256) as u8).collect();
    let cfg = TrainConfig {
        sh_degree: 3,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(cfg, g, 4.0, Engine::host(CpuRasterizer::<f32>::new())).unwrap();
    t.step(&cam, &img).unwrap(); // warm-up: buffers sized
    for _ in 0..RUNS {
        let s = t.step(&cam, &img).unwrap();
        println!("step: 100k Gaussians, 640x480: {:?}", s.timings);
    }
}

fn fox_images() -> Option<Vec<PathBuf>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fox/images");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    Some(paths)
}

fn prepare() {
    let Some(paths) = fox_images() else {
        println!("prepare: skipped (../shared/data/fox is absent)");
        return;
    };
    // The fox transforms.json camera (1080×1920 portrait, OpenCV distortion).
    let k = Intrinsics {
        fx: 1375.52,
        fy: 1374.49,
        cx: 554.558,
        cy: 965.268,
    };
    let d = Distortion::RadialTangential {
        k: [0.0578421, -0.0805099, 0.0, 0.0, 0.0, 0.0],
        p: [-0.000980296, 0.00015575],
    };
    let (mut t_load, mut t_und, mut t_r2, mut t_r8) = (0.0, 0.0, 0.0, 0.0);
    for p in &paths {
        let t = Instant::now();
        let img = load_rgb8(p).unwrap();
        t_load += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let und = undistort(&img, &k, &d);
        t_und += t.elapsed().as_secs_f64();
        drop(img);
        let t = Instant::now();
        let half = resize_area(&und, und.width / 2, und.height / 2);
        t_r2 += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let eighth = resize_area(&und, und.width / 8, und.height / 8);
        t_r8 += t.elapsed().as_secs_f64();
        std::hint::black_box((half, eighth));
    }
    let n = paths.len() as f64;
    println!(
        "prepare: {} fox images, {} rayon threads; per image: decode {:.1} ms, undistort {:.1} ms, \
         area /2 {:.1} ms, area /8 {:.1} ms; {}",
        paths.len(),
        rayon::current_num_threads(),
        1e3 * t_load / n,
        1e3 * t_und / n,
        1e3 * t_r2 / n,
        1e3 * t_r8 / n,
        vm_hwm()
    );
}

fn resample() {
    use ramsplat::resample::{target_size, DepthRule, Resize};
    use ramsplat::shard::reader::resample_view;
    use ramsplat::shard::PixelLayout;
    let (w, h) = (1067u32, 1902u32);
    let mut rng = Rng::new(3);
    for layout in [
        PixelLayout::RGB,
        PixelLayout {
            alpha: true,
            mask: true,
            depth: true,
        },
    ] {
        let src: Vec<u8> = (0..layout.len(w, h))
            .map(|_| (rng.next_u64() >> 56) as u8)
            .collect();
        for n in [2u32, 4] {
            let (tw, th) = target_size(w, h, Resize::Downscale(n));
            let mut out = vec![0u8; layout.len(tw, th)];
            let times: Vec<f64> = (0..5)
                .map(|_| {
                    let mut scratch = src.clone();
                    let t = Instant::now();
                    resample_view(
                        layout,
                        DepthRule::AreaMean,
                        (w, h),
                        &mut scratch,
                        (tw, th),
                        &mut out,
                    );
                    t.elapsed().as_secs_f64()
                })
                .collect();
            std::hint::black_box(&out);
            println!(
                "resample: {} {w}x{h} → {tw}x{th}: {:.2} ms per view (median of 5, one thread)",
                layout.describe(),
                1e3 * median(times)
            );
        }
    }
}

fn proc_status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn points() {
    const N: u64 = 2_000_000;
    let dir = tempfile::tempdir().unwrap();
    for enc in [Encoding::Binary, Encoding::Text] {
        let mut rng = Rng::new(4);
        let mut pts = (0..N).map(move |i| ColmapPoint {
            id: i,
            xyz: [rng.normal(), rng.normal(), rng.normal()],
            rgb: [1, 2, 3],
            error: 0.5,
        });
        write_model(dir.path(), enc, &[], &[], &mut pts).unwrap();
        let path = dir.path().join(format!("points3D.{}", enc.extension()));
        let bytes = std::fs::metadata(&path).unwrap().len();
        // Writing "5" resets VmHWM to the current RSS (Linux ≥ 4.0).
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        let before = proc_status_kib("VmHWM:");
        let t = Instant::now();
        let mut r = PointsReader::open(&path, enc).unwrap();
        let mut n = 0u64;
        while let Some(c) = r.next_chunk(65_536).unwrap() {
            n += c.len() as u64;
        }
        let secs = t.elapsed().as_secs_f64();
        let growth_kib = proc_status_kib("VmHWM:") - before;
        println!(
            "points: {enc:?} {n} points, {:.1} MiB in {secs:.2} s = {:.2} M points/s; peak RSS \
             growth {growth_kib} KiB",
            bytes as f64 / 1048576.0,
            n as f64 / secs / 1e6,
        );
        assert_eq!(n, N);
        // One chunk (65,536 × 15 B ≈ 0.94 MiB) + the 256 KiB read buffer + one kept line.
        assert!(growth_kib < 16 * 1024, "peak RSS grew {growth_kib} KiB");
    }
}

fn synth() {
    let sizes =
        std::env::var("SYNTH_BENCH_SIZES").unwrap_or_else(|_| "320x240:16,1920x1080:2".into());
    for spec in sizes.split(',') {
        let (size, views) = spec.split_once(':').expect("WxH:views");
        let (w, h) = size.split_once('x').expect("WxH");
        let (w, h, views): (u32, u32, usize) = (
            w.parse().unwrap(),
            h.parse().unwrap(),
            views.parse().unwrap(),
        );
        let scene = SynthScene::new(0);
        let cameras = scene.cameras(views, w, h);
        let rates: Vec<f64> = (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                for c in &cameras {
                    std::hint::black_box(scene.render(c));
                }
                views as f64 / t.elapsed().as_secs_f64()
            })
            .collect();
        println!(
            "synth: {w}x{h}, {} threads: render median {:.2} views/s",
            rayon::current_num_threads(),
            median(rates)
        );
    }
}

fn adam() {
    use ramsplat::render::GaussianGrads;
    use ramsplat::scene::gaussians::{floats_per_gaussian, Field, Gaussians};
    use ramsplat::train::adam::{AdamConfig, AdamState, GroupMask, LearningRates};
    let (n, degree) = (1_000_000, 3);
    let mut rng = Rng::new(7);
    let mut params = Gaussians::zeros(n, degree);
    let mut grads = GaussianGrads::default();
    grads.reset(n, degree);
    for f in Field::ALL {
        params
            .field_mut(f)
            .fill_with(|| rng.uniform(-1.0, 1.0) as f32);
        grads
            .field_mut(f)
            .fill_with(|| rng.uniform(-1e-3, 1e-3) as f32);
    }
    let mut state = AdamState::new(&params);
    let lr = LearningRates {
        means: 1.6e-4,
        f_dc: 2.5e-3,
        f_rest: 1.25e-4,
        opacity: 2.5e-2,
        scaling: 5e-3,
        rotation: 1e-3,
    };
    // Dense, then sparse Adam with one Gaussian in ten visible (a large scene's view sees a
    // small part of it), scattered at random.
    let radii: Vec<u32> = (0..n).map(|_| u32::from(rng.below(10) == 0)).collect();
    let visible = radii.iter().filter(|&&r| r > 0).count();
    for sparse in [false, true] {
        let cfg = AdamConfig {
            sparse,
            ..AdamConfig::default()
        };
        let mut ms = Vec::new();
        for _ in 0..(2 * RUNS + 1) {
            let t = Instant::now();
            state
                .step(&cfg, &lr, GroupMask::ALL, &mut params, &grads, Some(&radii))
                .unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        // Read p, m, v, g and write p, m, v: 7 values of 4 bytes per updated parameter.
        let updated = if sparse { visible } else { n };
        let bytes = 7.0 * 4.0 * (updated * floats_per_gaussian(degree)) as f64;
        let med = median(ms);
        println!(
            "adam{}: {n} Gaussians ({updated} updated), SH degree {degree}, {} threads: median \
             {med:.1} ms/step ({:.1} GB/s)",
            if sparse { " (sparse)" } else { "" },
            rayon::current_num_threads(),
            bytes / (med * 1e-3) / 1e9
        );
    }
}

fn loss() {
    use ramsplat::metrics::SsimScratch;
    use ramsplat::train::loss::{LossScratch, DEFAULT_LAMBDA_DSSIM};
    const CALLS: usize = 20;
    for (w, h) in [(240usize, 180usize), (640, 480), (1920, 1080)] {
        let mut rng = Rng::new(11);
        let target: Vec<f32> = (0..3 * w * h).map(|_| rng.next_f32()).collect();
        // A render near the target, as late in training: every SSIM term is exercised.
        let render: Vec<f32> = target
            .iter()
            .map(|&v| (0.9 * v + 0.1 * rng.next_f32()).clamp(0.0, 1.0))
            .collect();
        let (mut scratch, mut ssim, mut d_image) = (LossScratch::new(), SsimScratch::new(), vec![]);
        let per_call = |f: &mut dyn FnMut()| -> f64 {
            f();
            median(
                (0..RUNS)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..CALLS {
                            f();
                        }
                        t.elapsed().as_secs_f64() * 1e3 / CALLS as f64
                    })
                    .collect(),
            )
        };
        let with_grad = per_call(&mut || {
            scratch
                .loss_and_grad(&render, &target, w, h, DEFAULT_LAMBDA_DSSIM, &mut d_image)
                .expect("same sizes");
        });
        let alone = per_call(&mut || {
            ssim.ssim(&render, &target, w, h).expect("same sizes");
        });
        println!(
            "loss: {w}x{h}: L1 + SSIM with the gradient {with_grad:.2} ms, SSIM alone \
             {alone:.2} ms (median of {RUNS} runs of {CALLS} calls, {} threads)",
            rayon::current_num_threads()
        );
    }
}

fn bilagrid() {
    use ramsplat::train::bilagrid::{apply, backward, BilagridConfig, BilateralGrids};
    let cfg = BilagridConfig::default();
    let shape = cfg.shape;
    let (w, h) = (1600usize, 1066usize);
    let mut rng = Rng::new(3);
    let image: Vec<f32> = (0..3 * w * h).map(|_| rng.next_f32()).collect();
    let mut grids = BilateralGrids::new(shape);
    grids.ensure(1);
    let grid = grids.grid(0).unwrap().to_vec();
    let (mut out, mut grad) = (Vec::new(), Vec::new());
    let time = |f: &mut dyn FnMut()| -> f64 {
        median(
            (0..RUNS)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect(),
        )
    };
    let fwd = time(&mut || apply(shape, &grid, &image, w, h, &mut out));
    let mut d = image.clone();
    let bwd = time(&mut || backward(shape, &grid, &image, w, h, &mut d, &mut grad));
    println!(
        "bilagrid: {w}x{h} view, {shape} grid: apply {fwd:.1} ms, backward {bwd:.1} ms \
         (median of {RUNS}, {} threads)",
        rayon::current_num_threads()
    );
    for views in [100, 600] {
        let mut grids = BilateralGrids::new(shape);
        grids.ensure(views);
        let g: Vec<f64> = (0..shape.floats()).map(|k| (k % 7) as f64 * 1e-4).collect();
        let mut s = 0;
        let ms = time(&mut || {
            s += 1;
            grids.step(
                cfg.lr_at(30_000, s),
                cfg.tv_weight,
                Some((s as usize % views, &g)),
            );
        });
        println!(
            "bilagrid: optimizer step over {views} grids ({} floats each, TV and Adam): {ms:.1} ms",
            shape.floats()
        );
    }
}

fn main() {
    let stages: [(&str, fn()); 9] = [
        ("loss", loss),
        ("bilagrid", bilagrid),
        ("adam", adam),
        ("resample", resample),
        ("knn", knn),
        ("step", step),
        ("prepare", prepare),
        ("points", points),
        ("synth", synth),
    ];
    // `cargo bench` passes `--bench`; anything else not starting with '-' picks stages.
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for (name, run) in stages {
        if wanted.is_empty() || wanted.iter().any(|w| w == name) {
            run();
        }
    }
}
