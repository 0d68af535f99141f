//! The host memory of a model that trains on a device, counted, against the `--ram-budget`
//! plan's model item for it ([`host_copy_bytes`]: one downloaded copy, parameters and both
//! Adam moments, statistics, saving's scratch).
//!
//! A counting global allocator keeps the live and peak bytes of the host heap. The host
//! emulation driver's device memory comes from the same allocator, always 256-byte aligned
//! (as `cuMemAlloc`'s), and host allocations never ask for that alignment, so device buffers
//! are left out by their alignment: what is counted is what a real GPU run holds in RAM.
//!
//! Checked, each as the bytes above the heap before the model came home:
//! 1. a checkpoint and the model saved in every format (PLY, SPZ, `.splat`, compressed PLY):
//!    the download plus whatever saving holds;
//! 2. the next step, which densifies while the host still holds that copy: the trainer must
//!    free the copy before downloading the densification's inputs, not hold both.
//!
//! On the host engine, a densification's edit holds one field of the model twice at most (the
//! scratch the plan's model item counts), not a second model.
//!
//! And per pixel, on both engines: what training steps, scoring a held-out view (with
//! colour correction too) and aligning its pose hold on the host, against the plan's trainer-images item ([`TRAINER_BYTES_PER_PIXEL`] on the host
//! engine, [`DEVICE_TRAINER_BYTES_PER_PIXEL`] on a device). And what reading a view at a
//! run's resolution holds, against the scratch the plan reserves for it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use ramsplat::device::Device;
use ramsplat::export::{save_model, ModelFormat, ModelInfo};
use ramsplat::render::CpuRasterizer;
use ramsplat::rng::Rng;
use ramsplat::scene::camera::Pose;
use ramsplat::scene::gaussians::{floats_per_gaussian, sh_coeffs, Gaussians};
use ramsplat::shard::PixelLayout;
use ramsplat::synth::packs::centred_camera;
use ramsplat::train::checkpoint;
use ramsplat::train::densify::{gather_scratch_bytes, host_copy_bytes, Model, RowPlan};
use ramsplat::train::device_engine::DeviceEngine;
use ramsplat::train::pose::PoseAlignConfig;
use ramsplat::train::run::{DEVICE_TRAINER_BYTES_PER_PIXEL, TRAINER_BYTES_PER_PIXEL};
use ramsplat::train::sharded::ShardedEngine;
use ramsplat::train::trainer::{Engine, TrainConfig, TrainView, Trainer};

/// The emulated device's allocation alignment (`src/device/emulation.rs`).
const DEVICE_ALIGN: usize = 256;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

struct Counting;

fn counted(layout: &Layout) -> bool {
    layout.align() < DEVICE_ALIGN
}

fn add(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's layout and pointer unchanged, so
// `System`'s guarantees are ours; the bookkeeping is two atomics (no allocation, no re-entry).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && counted(&layout) {
            add(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() && counted(&layout) {
            add(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() && counted(&layout) {
            add(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if counted(&layout) {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        // SAFETY: forwarded unchanged; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The counters are the process's: the tests of this file take turns.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The host heap's peak while `f` runs, above `base`.
fn peak_above(base: usize, f: impl FnOnce()) -> usize {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    f();
    PEAK.load(Ordering::Relaxed).saturating_sub(base)
}

/// `n` Gaussians at SH degree 3: a few hundred in front of the camera (so the step renders
/// and has gradients), the rest behind it (culled: the emulated kernels stay quick).
fn model(n: usize) -> Gaussians {
    let mut r = Rng::new(7);
    let mut u = |lo: f64, hi: f64| r.uniform(lo, hi) as f32;
    let k = sh_coeffs(3);
    let mut g = Gaussians::zeros(n, 3);
    for i in 0..n {
        let z = if i < 300 { u(2.0, 4.0) } else { u(-9.0, -1.0) };
        g.means[i] = [u(-0.5, 0.5), u(-0.4, 0.4), z];
        g.log_scales[i] = [u(-4.0, -2.5), u(-4.0, -2.5), u(-4.0, -2.5)];
        g.rotations[i] = [1.0, u(-0.2, 0.2), u(-0.2, 0.2), u(-0.2, 0.2)];
        g.logit_opacities[i] = u(-1.0, 2.0);
        for c in 0..k {
            g.sh[i * k + c] = [u(-0.5, 0.5), u(-0.5, 0.5), u(-0.5, 0.5)];
        }
    }
    g
}

/// A densification on the host engine gathers every array of the model (parameters, both
/// moments, statistics) into its new rows. Planned: one field held twice at most, the SH
/// coefficients' (`gather_scratch_bytes`). Before, the whole new model was built beside the
/// old one, then each moment beside both: 3.5 times that at SH degree 3, unplanned, and a
/// run at a `--max-gaussians` cap went 7 MiB over `--ram-budget 150M` at its first
/// densification.
#[test]
fn a_host_densification_holds_one_field_twice_at_most() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let n = 20_000u32;
    let mut m = Model::new(model(n as usize));
    // As at a cap: every tenth pruned, as many cloned; the model keeps its size.
    let mut src: Vec<u32> = (0..n).filter(|i| i % 10 != 0).collect();
    let kept = src.len();
    src.extend((0..n).filter(|i| i % 10 == 5));
    assert_eq!(src.len(), n as usize);
    let plan = RowPlan {
        fresh: (0..src.len()).map(|r| r >= kept).collect(),
        src,
        replace: Vec::new(),
    };
    let before = m.gaussians.clone();
    let base = LIVE.load(Ordering::Relaxed);
    let peak = peak_above(base, || m.apply_rows(&plan));
    let planned = n as u64 * gather_scratch_bytes(3);
    eprintln!(
        "densification's edit: {peak} B above the model, {:.1} B per Gaussian; planned {planned} B",
        peak as f64 / n as f64
    );
    assert!(
        peak as u64 <= planned,
        "{peak} B above the model, {planned} B planned"
    );
    // The rows are the plan's.
    assert_eq!(m.gaussians, before.gather(&plan.src, None));
    assert_eq!(m.len(), n as usize);
}

/// One device, and the model split over two (the sharded engine assembles its shards in the
/// one host copy): checkpoint and saves, then a densifying step, within the model item.
#[test]
fn a_device_model_on_the_host_stays_within_the_plans_item() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    for devices in [1, 2] {
        let engine = match devices {
            1 => Engine::Device(Box::new(
                DeviceEngine::new(Device::emulated().unwrap()).unwrap(),
            )),
            n => Engine::Sharded(Box::new(
                ShardedEngine::new((0..n).map(|_| Device::emulated().unwrap()).collect()).unwrap(),
            )),
        };
        check_model_item(engine, &format!("{devices} device(s)"));
    }
}

fn check_model_item(engine: Engine, what: &str) {
    const N: usize = 40_000;
    let dir = tempfile::tempdir().unwrap();
    let camera = centred_camera(32, 24, Pose::IDENTITY);
    let image: Vec<u8> = (0..32 * 24 * 3).map(|i| (i * 37 % 251) as u8).collect();
    let mut cfg = TrainConfig {
        iterations: 100,
        ..TrainConfig::default()
    };
    // Densify at step 2 (3DGS's rule: after `from_iter`, every `interval`).
    cfg.densify.from_iter = 1;
    cfg.densify.interval = 2;
    let mut t = Trainer::new(cfg, model(N), 3.0, engine).unwrap();
    assert!(t.on_device());
    // Step 1 makes the host copy stale, and the step frees it: from here the host holds no
    // copy of the model, and `base` is its heap without one.
    t.step(&camera, &image).unwrap();
    let base = LIVE.load(Ordering::Relaxed);

    let item = host_copy_bytes(N, 3) as usize;
    let download = N * (3 * floats_per_gaussian(3) * 4 + 12);
    // The writers' I/O buffers (the atomic file writer's 1 MiB buffer, gzip's state, 64 KiB
    // checkpoint chunks): measured at 1.05–1.4 MB whatever the model's size; the runtime
    // margin of the plan holds them.
    let slack = 2 << 20;
    let saved = peak_above(base, || {
        let state = t.state_ref().unwrap();
        checkpoint::save_state(&dir.path().join("ckpt"), state, "pack").unwrap();
        let g = t.gaussians().unwrap();
        let info = ModelInfo::default();
        for (f, name) in [
            (ModelFormat::Ply, "m.ply"),
            (ModelFormat::Spz, "m.spz"),
            (ModelFormat::Splat, "m.splat"),
            (ModelFormat::CompressedPly, "m.compressed.ply"),
        ] {
            save_model(&dir.path().join(name), g, f, info).unwrap();
        }
    });
    println!(
        "{what}: checkpoint and four formats peak {saved} B above the heap without the model \
         for {N} Gaussians ({:.1} B each; the plan's item {} B each, the download itself {} B \
         each)",
        saved as f64 / N as f64,
        item / N,
        download / N
    );
    // The measure sees the download (else the bound below would say nothing) ...
    assert!(saved >= download, "{what}: {saved} < {download}");
    // ... and nothing beyond the item but the writers' fixed buffers.
    assert!(saved <= item + slack, "{what}: {saved} > {item} + {slack}");

    // Step 2 densifies while the host copy from the saves is still there: the copy must go
    // before the densification's inputs come (else both: 56 B per Gaussian more).
    let refined = peak_above(base, || {
        t.step(&camera, &image).unwrap();
    });
    println!(
        "{what}: step 2 (densification) peaks {refined} B above the heap without the model \
         ({:.1} B per Gaussian)",
        refined as f64 / N as f64
    );
    assert!(
        refined <= item + slack,
        "{what}: {refined} > {item} + {slack}"
    );
}

/// The host heap per pixel of the largest view: two training steps (the first allocates the
/// host engine's image buffers, which it keeps) and scoring a held-out view, on both engines,
/// within the plan's trainer-images item. Measured peaks at 320×240 with 2,000 Gaussians, two
/// threads: host engine 91.4 B/px, device engine 20.3 B/px (173.6 and 74.0 while the SSIM
/// kept eight full planes of scratch instead of its bands' rows and scored 8-bit images
/// through float copies of both).
#[test]
fn steps_and_scoring_stay_within_the_trainer_images_item() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (w, h) = (320u32, 240u32);
    let pixels = (w * h) as usize;
    let camera = centred_camera(w, h, Pose::IDENTITY);
    let image: Vec<u8> = (0..pixels * 3).map(|i| (i * 37 % 251) as u8).collect();
    let view = TrainView::new(camera, PixelLayout::RGB);
    for on_device in [false, true] {
        let (engine, item) = if on_device {
            let e = DeviceEngine::new(Device::emulated().unwrap()).unwrap();
            (Engine::Device(Box::new(e)), DEVICE_TRAINER_BYTES_PER_PIXEL)
        } else {
            (Engine::host(CpuRasterizer::new()), TRAINER_BYTES_PER_PIXEL)
        };
        let cfg = TrainConfig {
            iterations: 100,
            ..TrainConfig::default()
        };
        let mut t = Trainer::new(cfg, model(2000), 3.0, engine).unwrap();
        // The model's own bytes are the model item's; the heap without them is the base. On
        // the device engine the first step frees the host copy (the base falls by it).
        let copy = t.num_gaussians() * (3 * floats_per_gaussian(3) * 4 + 12);
        let base = LIVE.load(Ordering::Relaxed) - if on_device { copy } else { 0 };
        let peak = peak_above(base, || {
            t.step(&camera, &image).unwrap();
            t.step(&camera, &image).unwrap();
            t.evaluate_view(&view, &image).unwrap();
            // `--eval-pose-steps`: a held-out view's pose fitted before it is scored.
            let align = PoseAlignConfig { steps: 3, lr: 1e-3 };
            t.align_pose(&view, &image, &align).unwrap();
        });
        let per_pixel = peak as f64 / pixels as f64;
        println!(
            "{} engine: two steps, a scored view and a pose alignment peak at {per_pixel:.1} B \
             per pixel above the heap without them (plan: {item} B)",
            if on_device { "device" } else { "host" }
        );
        assert!(per_pixel <= item as f64, "{per_pixel} > {item}");
    }
}

/// Every per-pixel add-on of the plan, measured on both engines: RGBA views with loss masks,
/// exposure compensation (a whole view, a held-out view's left half in training and its right
/// half scored, as `--eval --exposure` runs them), depth regularization, bilateral grids (their
/// step scratch, a fixed item of the plan, set aside), colour-corrected scores (with and
/// without a mask), and all of them but the grids and the correction at once. Each peak (two steps and a scored view, as above) is held to the sum of
/// `per_pixel_items` for that run: the trainer-images and evaluation items it plans.
#[test]
fn every_view_kind_and_add_on_stays_within_its_per_pixel_items() {
    use ramsplat::shard::DepthScale;
    use ramsplat::train::bilagrid::{step_scratch_bytes, BilagridConfig, GridShape};
    use ramsplat::train::depth::DepthConfig;
    const GRID: GridShape = GridShape { x: 16, y: 16, l: 8 };
    use ramsplat::color_correct::ColorCorrection;
    use ramsplat::train::device_engine::Frame;
    use ramsplat::train::exposure::ExposureConfig;
    use ramsplat::train::run::{per_pixel_items, ViewKinds};
    use ramsplat::train::trainer::Region;
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let (w, h) = (320u32, 240u32);
    let pixels = (w * h) as usize;
    let camera = centred_camera(w, h, Pose::IDENTITY);
    let kinds = [
        ViewKinds {
            alpha: true,
            masks: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            exposure: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            depth: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            bilagrid: true,
            masks: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            color_correct: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            masks: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            color_correct: true,
            masks: true,
            ..ViewKinds::default()
        },
        ViewKinds {
            alpha: true,
            masks: true,
            exposure: true,
            depth: true,
            bilagrid: false,
            color_correct: false,
            on_device: false,
        },
    ];
    for on_device in [false, true] {
        for kinds in kinds {
            let kinds = ViewKinds { on_device, ..kinds };
            let layout = PixelLayout {
                alpha: kinds.alpha,
                mask: kinds.masks,
                depth: kinds.depth,
            };
            // Colour (alpha partly transparent), a mask excluding every fifth pixel, an
            // inverse-depth plane of nonzero values.
            let mut bytes: Vec<u8> = (0..pixels * layout.channels())
                .map(|i| (i * 37 % 251) as u8)
                .collect();
            if kinds.masks {
                bytes.extend((0..pixels).map(|i| if i % 5 == 0 { 0 } else { 255 }));
            }
            if kinds.depth {
                bytes.extend((0..pixels).flat_map(|i| (3000 + (i % 977) as u16).to_le_bytes()));
            }
            assert_eq!(bytes.len(), layout.len(w, h));
            let (engine, _) = if on_device {
                let e = DeviceEngine::new(Device::emulated().unwrap()).unwrap();
                (Engine::Device(Box::new(e)), ())
            } else {
                (Engine::host(CpuRasterizer::new()), ())
            };
            let cfg = TrainConfig {
                iterations: 100,
                exposure: kinds.exposure.then(ExposureConfig::default),
                depth: kinds.depth.then(DepthConfig::default),
                bilagrid: kinds.bilagrid.then(|| BilagridConfig {
                    shape: GRID,
                    ..BilagridConfig::default()
                }),
                ..TrainConfig::default()
            };
            let mut t = Trainer::new(cfg, model(2000), 3.0, engine).unwrap();
            t.hold_exposure_views(1);
            t.hold_grid_views(1).unwrap();
            let whole = TrainView {
                exposure: kinds.exposure.then_some(0),
                grid: kinds.bilagrid.then_some(0),
                depth: kinds.depth.then_some(DepthScale::IDENTITY),
                ..TrainView::new(camera, layout)
            };
            let (train, scored) = if kinds.exposure {
                (
                    TrainView {
                        region: Region::LeftHalf,
                        ..whole
                    },
                    TrainView {
                        region: Region::RightHalf,
                        ..whole
                    },
                )
            } else {
                (whole, whole)
            };
            let copy = t.num_gaussians() * (3 * floats_per_gaussian(3) * 4 + 12);
            let base = LIVE.load(Ordering::Relaxed) - if on_device { copy } else { 0 };
            let peak = peak_above(base, || {
                t.step_with_room(&whole, Frame::Host(&bytes), &mut |_| 0)
                    .unwrap();
                t.step_with_room(&train, Frame::Host(&bytes), &mut |_| 0)
                    .unwrap();
                let e = t.evaluate_view(&whole, &bytes).unwrap();
                if kinds.color_correct {
                    // As `gs-train --eval --color-correct-metric` scores a held-out view: a
                    // second scorer, the mask copied off the view, the 8-bit ground truth
                    // (an RGB view's first plane) read as it is.
                    let planes = layout.planes(&bytes, w, h).unwrap();
                    let mask = planes.mask.map(<[u8]>::to_vec);
                    let mut scorer = ramsplat::eval::Scorer::new();
                    for method in [ColorCorrection::Affine, ColorCorrection::Quadratic] {
                        scorer
                            .score_corrected(
                                method,
                                &e.image,
                                planes.pixels,
                                mask.as_deref(),
                                w as usize,
                                h as usize,
                            )
                            .unwrap();
                    }
                }
                drop(e);
                t.evaluate_view(&scored, &bytes).unwrap();
            });
            // The grids' step scratch is a fixed item of the plan (view parameters), not a
            // per-pixel one.
            let fixed = if kinds.bilagrid {
                step_scratch_bytes(GRID, rayon::current_num_threads()) as usize
            } else {
                0
            };
            let per_pixel = peak.saturating_sub(fixed) as f64 / pixels as f64;
            let item: u64 = per_pixel_items(kinds).iter().map(|i| i.1).sum();
            println!(
                "{} engine, {kinds:?}: peak {per_pixel:.1} B per pixel (plan: {item} B)",
                if on_device { "device" } else { "host" }
            );
            assert!(per_pixel <= item as f64, "{kinds:?}: {per_pixel} > {item}");
        }
    }
}
