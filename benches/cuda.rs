//! Forward and forward+backward time of the CUDA and CPU backends for 100k and 1M Gaussians
//! at 1920×1080: CUDA device-resident (parameters and gradients stay on the device, a device
//! trainer's cost), CUDA through the host-memory `Rasterizer` API (uploads and downloads
//! included), and the CPU backend; the device's radix sort alone on the key sets a render
//! sorts (timed in the device queue). Run: `cargo bench --bench cuda`.
//! Exits with a clear message (status 0; 1 under `GS_REQUIRE_GPU=1`) when no GPU is usable,
//! so it never fakes a figure. `GS_CUDA_EMULATE=1` runs it on the host emulation (slow; for
//! checking the bench itself, not for timing).

use std::time::Instant;

use ramsplat::render::cuda::launch::Kernels;
use ramsplat::render::cuda::{sort, CudaRasterizer, DeviceGaussians};
use ramsplat::render::{CpuRasterizer, GaussianGrads, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::rng::Rng;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};

fn scene(n: usize) -> Gaussians {
    let mut r = Rng::new(42);
    let mut g = Gaussians::zeros(n, 3);
    for i in 0..n {
        let z = r.uniform(2.0, 10.0);
        g.means[i] = [
            (r.uniform(-1.0, 1.0) * z) as f32,
            (r.uniform(-0.6, 0.6) * z) as f32,
            z as f32,
        ];
        g.log_scales[i] = [0; 3].map(|_| r.uniform(-5.0, -3.0) as f32);
        g.rotations[i] = [0; 4].map(|_| r.uniform(-1.0, 1.0) as f32);
        g.logit_opacities[i] = r.uniform(-1.0, 3.0) as f32;
        for c in 0..sh_coeffs(3) {
            g.sh[i * sh_coeffs(3) + c] = [0; 3].map(|_| r.uniform(-0.3, 0.3) as f32);
        }
    }
    g
}

/// Median seconds of `reps` runs of forward (and backward when `bwd`).
fn time(r: &mut dyn Rasterizer, g: &Gaussians, cam: &Camera, bwd: bool, reps: usize) -> f64 {
    let opts = RenderOptions {
        max_intersection_bytes: 16 << 30,
        ..RenderOptions::default()
    };
    let mut out = RenderOutput::default();
    let mut grads = GaussianGrads::default();
    let d = vec![1e-3f32; 3 * cam.width as usize * cam.height as usize];
    let mut t = Vec::new();
    for _ in 0..reps + 1 {
        let s = Instant::now();
        r.forward(g, cam, &opts, &mut out).expect("forward");
        if bwd {
            r.backward(g, cam, &opts, &d, &mut grads).expect("backward");
        }
        t.push(s.elapsed().as_secs_f64());
    }
    t.remove(0); // warm-up (kernel load, buffer growth)
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Median seconds of the device-resident path (parameters and ∂L/∂image already on the
/// device, outputs left there): what a device trainer pays per step for the rasterizer.
/// `absgrad`: the backward also sums the absolute 2D-mean gradient (`gs-train --absgrad`).
fn time_resident(
    r: &mut CudaRasterizer,
    g: &Gaussians,
    cam: &Camera,
    bwd: bool,
    absgrad: bool,
    reps: usize,
) -> f64 {
    let dev = r.device().clone();
    let opts = RenderOptions {
        max_intersection_bytes: 16 << 30,
        absgrad,
        ..RenderOptions::default()
    };
    let mut dg = DeviceGaussians::new(&dev).expect("device model");
    dg.upload(&dev, g).expect("upload");
    let npix = 3 * cam.width as usize * cam.height as usize;
    let mut d = dev.alloc::<f32>(npix).expect("d_image");
    dev.upload(&vec![1e-3f32; npix], &mut d).expect("upload");
    let mut t = Vec::new();
    for _ in 0..reps + 1 {
        dev.synchronize().expect("sync");
        let s = Instant::now();
        r.forward_resident(&dg, cam, &opts).expect("forward");
        if bwd {
            r.backward_resident(&dg, cam, &opts, &d).expect("backward");
        }
        dev.synchronize().expect("sync");
        t.push(s.elapsed().as_secs_f64());
    }
    t.remove(0);
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Median milliseconds of the device's radix sort of `keys` (with their indices as values) by
/// their low `bits` bits, in the device queue (CUDA events), over `reps` runs after a warm-up.
fn time_sort(r: &CudaRasterizer, keys: &[u32], bits: u32, reps: usize) -> f64 {
    let dev = r.device();
    let k = Kernels::load(dev).expect("kernels");
    let m = keys.len();
    let vals: Vec<u32> = (0..m as u32).collect();
    let alloc = || dev.alloc::<u32>(m).expect("sort buffer");
    let (mut kb, mut vb) = ([alloc(), alloc()], [alloc(), alloc()]);
    let mut hist = dev
        .alloc::<u32>(sort::hist_len(m as u64))
        .expect("histogram");
    let mut scan = Vec::new();
    let mut t = Vec::new();
    for _ in 0..reps + 1 {
        dev.upload(keys, &mut kb[0]).expect("upload");
        dev.upload(&vals, &mut vb[0]).expect("upload");
        let a = dev.mark().expect("mark");
        sort::sort_pairs(
            &k, m as u64, 0, bits, &mut kb, &mut vb, &mut hist, &mut scan,
        )
        .expect("sort");
        let b = dev.mark().expect("mark");
        t.push(b.ms_since(&a).expect("timing"));
    }
    t.remove(0);
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn write_f32(path: &std::path::Path, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn dump_scene(
    dir: &std::path::Path,
    n: usize,
    g: &Gaussians,
    r: &mut CudaRasterizer,
    cam: &Camera,
) {
    std::fs::create_dir_all(dir).expect("GS_BENCH_DUMP directory");
    let f = |name: &str| dir.join(format!("{n}_{name}.f32"));
    write_f32(&f("means"), g.means.as_flattened());
    write_f32(&f("log_scales"), g.log_scales.as_flattened());
    write_f32(&f("rotations"), g.rotations.as_flattened());
    write_f32(&f("logit_opacities"), &g.logit_opacities);
    write_f32(&f("sh"), g.sh.as_flattened());
    let mut out = RenderOutput::default();
    let opts = RenderOptions {
        max_intersection_bytes: 16 << 30,
        ..RenderOptions::default()
    };
    r.forward(g, cam, &opts, &mut out).expect("forward");
    write_f32(&f("image"), &out.image);
}

fn main() {
    let mut gpu = match CudaRasterizer::new() {
        Ok(r) => r,
        Err(e) => {
            println!("cuda bench: no usable GPU ({e}); nothing measured");
            if std::env::var("GS_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                std::process::exit(1);
            }
            return;
        }
    };
    println!("device: {} ({})", gpu.device().name(), gpu.device().arch());
    let cam = Camera {
        width: 1920,
        height: 1080,
        intrinsics: Intrinsics {
            fx: 1600.0,
            fy: 1600.0,
            cx: 960.0,
            cy: 540.0,
        },
        world_to_camera: Pose::IDENTITY,
        projection: Projection::Pinhole,
    };
    // The training loss on the device (L1 + D-SSIM, ∂L/∂image) at 1080p, against the CPU's.
    {
        use ramsplat::train::device_loss::DeviceLoss;
        use ramsplat::train::loss::LossScratch;
        let dev = gpu.device().clone();
        let n = 3 * 1920 * 1080;
        let mut rng = Rng::new(7);
        let x: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.next_f32()).collect();
        let mut dl = DeviceLoss::new(&dev).expect("loss kernels");
        let (mut dx, mut dy) = (dev.alloc::<f32>(n).unwrap(), dev.alloc::<f32>(n).unwrap());
        dev.upload(&x, &mut dx).unwrap();
        dev.upload(&y, &mut dy).unwrap();
        let mut dd = dev.alloc::<f32>(n).unwrap();
        let mut out = dev
            .alloc::<f64>(ramsplat::train::device_loss::LOSS_SCALARS)
            .unwrap();
        let mut t = Vec::new();
        for _ in 0..21 {
            dev.synchronize().unwrap();
            let s = Instant::now();
            dl.loss_and_grad(&dx, &dy, 1920, 1080, 0.2, &mut dd, &mut out)
                .expect("device loss");
            dev.synchronize().unwrap();
            t.push(s.elapsed().as_secs_f64());
        }
        t.remove(0);
        t.sort_by(f64::total_cmp);
        let mut scratch = LossScratch::new();
        let mut d = Vec::new();
        let mut tc = Vec::new();
        for _ in 0..4 {
            let s = Instant::now();
            scratch
                .loss_and_grad(&x, &y, 1920, 1080, 0.2, &mut d)
                .unwrap();
            tc.push(s.elapsed().as_secs_f64());
        }
        tc.remove(0);
        tc.sort_by(f64::total_cmp);
        println!(
            "loss + dL/dimage 1920x1080: cuda resident {:.2} ms, cpu {:.1} ms",
            t[t.len() / 2] * 1e3,
            tc[tc.len() / 2] * 1e3
        );
    }
    // The radix sort alone, on the two key sets a render sorts: 32-bit depth keys over the
    // Gaussians (4 passes), and 13-bit tile ids over the pairs (a 1080p render's 8160 tiles,
    // 2 passes), emitted in runs of consecutive tiles as emit_keys writes them.
    {
        let mut rng = Rng::new(3);
        let depths: Vec<u32> = (0..1_000_000)
            .map(|_| (rng.uniform(2.0, 10.0) as f32).to_bits())
            .collect();
        let mut tiles = Vec::with_capacity(8_000_000);
        while tiles.len() < 8_000_000 {
            let first = (rng.next_u64() % 8160) as u32;
            let len = 1 + rng.next_u64() % 12;
            tiles.extend((first..8160).take(len as usize));
        }
        tiles.truncate(8_000_000);
        for (what, keys, bits) in [("depth keys", &depths, 32), ("tile keys", &tiles, 13)] {
            let ms = time_sort(&gpu, keys, bits, 10);
            println!(
                "radix sort, {} {what} ({bits} bits) with values: {ms:.3} ms ({:.0} Mkeys/s)",
                keys.len(),
                keys.len() as f64 / ms / 1e3
            );
        }
    }
    let mut cpu = CpuRasterizer::<f32>::new();
    // GS_BENCH_DUMP=DIR: write each scene and our CUDA render as raw little-endian f32 files,
    // so tools/gsplat_raster_bench.py can time gsplat on the identical scene and compare images.
    let dump = std::env::var_os("GS_BENCH_DUMP").map(std::path::PathBuf::from);
    for n in [100_000usize, 1_000_000] {
        let g = scene(n);
        if let Some(dir) = &dump {
            dump_scene(dir, n, &g, &mut gpu, &cam);
        }
        {
            let mut out = RenderOutput::default();
            let opts = RenderOptions {
                max_intersection_bytes: 16 << 30,
                ..RenderOptions::default()
            };
            gpu.forward(&g, &cam, &opts, &mut out).expect("forward");
            println!(
                "{n} Gaussians 1920x1080: {} intersections",
                out.num_intersections
            );
        }
        for bwd in [false, true] {
            let what = if bwd { "fwd+bwd" } else { "fwd" };
            let tg = time(&mut gpu, &g, &cam, bwd, 5);
            let tr = time_resident(&mut gpu, &g, &cam, bwd, false, 20);
            let tc = time(&mut cpu, &g, &cam, bwd, 2);
            println!(
                "{n} Gaussians 1920x1080 {what}: cuda resident {:.2} ms, cuda through host \
                 memory {:.2} ms, cpu {:.1} ms, cpu/cuda {:.1}x",
                tr * 1e3,
                tg * 1e3,
                tc * 1e3,
                tc / tg
            );
            if bwd {
                let ta = time_resident(&mut gpu, &g, &cam, true, true, 20);
                println!(
                    "{n} Gaussians 1920x1080 fwd+bwd with absgrad: cuda resident {:.2} ms \
                     ({:+.1} % against without)",
                    ta * 1e3,
                    (ta / tr - 1.0) * 100.0
                );
                // Where the time goes: one more run with the device synchronised per stage.
                gpu.set_profiling(true);
                time(&mut gpu, &g, &cam, true, 1);
                let stages: Vec<String> = gpu
                    .stage_times()
                    .iter()
                    .map(|(name, t)| format!("{name} {:.2}", t * 1e3))
                    .collect();
                println!("  cuda stages (ms): {}", stages.join(", "));
                gpu.set_profiling(false);
            }
        }
    }
}
