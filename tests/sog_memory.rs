//! What saving a SOG costs in memory beside the model: the peak of live heap bytes while
//! `export::sog` encodes models of several sizes and SH degrees stays within
//! `sog::encode_bytes`, the figure a run that saves SOG plans for (`gs-train --export sog`
//! under `--ram-budget`). Measured by a counting allocator on one thread: the encoder runs in
//! a one-thread pool so that its parallel parts allocate on the measured thread too.

use ramsplat::export::{sog, webp};
use ramsplat::rng::Rng;
use ramsplat::scene::gaussians::{sh_coeffs, Gaussians};

#[allow(dead_code)]
#[path = "common/heap.rs"]
mod heap;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

/// A trained-looking model: clustered positions, log-scales −7..1, opacities, SH.
fn model(seed: u64, n: usize, sh_degree: u32) -> Gaussians {
    let mut r = Rng::new(seed);
    let k = sh_coeffs(sh_degree);
    let mut g = Gaussians::zeros(n, sh_degree);
    for i in 0..n {
        let c = (i % 50) as f32;
        g.means[i] = [
            c + r.normal() as f32,
            r.normal() as f32 * 3.0,
            r.uniform(-20.0, 20.0) as f32,
        ];
        g.log_scales[i] = [0, 1, 2].map(|_| r.uniform(-7.0, 1.0) as f32);
        g.rotations[i] = [0, 1, 2, 3].map(|_| r.uniform(-1.0, 1.0) as f32);
        g.rotations[i][0] += 1.5;
        g.logit_opacities[i] = r.uniform(-6.0, 6.0) as f32;
        for j in 0..k {
            let a = if j == 0 { 1.5 } else { 0.3 };
            g.sh[i * k + j] = [0, 1, 2].map(|_| (r.normal() * a) as f32);
        }
    }
    g
}

#[test]
fn encoding_stays_within_the_planned_bytes() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for (n, degree) in [
        (1_000, 0),
        (1_000, 3),
        (30_000, 0),
        (30_000, 1),
        (60_000, 3),
    ] {
        let g = model(n as u64, n, degree);
        let (out, heap) = pool.install(|| heap::measured(|| sog::encode(&g).unwrap().len()));
        let file = out.unwrap();
        let planned = sog::encode_bytes(n, degree);
        // The returned archive is counted too; a save streams it to the file instead.
        println!(
            "{n} Gaussians, SH {degree}: peak {} B ({:.1} B per Gaussian beyond 8 MiB), \
             planned {planned} B; file {file} B",
            heap.peak,
            (heap.peak as f64 - 8.0 * 1048576.0).max(0.0) / n as f64
        );
        assert!(
            heap.peak as u64 <= planned,
            "{n} Gaussians, SH {degree}: peak {} B above the planned {planned} B",
            heap.peak
        );
    }
}

/// The WebP encoder's own bound, [`webp::ENCODE_BYTES_PER_PIXEL`] per pixel beside its input
/// plus [`webp::ENCODE_FIXED_BYTES`], on the images that cost it most: noise (no copies, the
/// largest streams) and a smooth field (every transform tried pays), at a SOG's largest
/// image sizes.
#[test]
fn the_webp_encoder_stays_within_its_bound() {
    let mut r = Rng::new(5);
    for (w, h, smooth) in [(1024, 1024, false), (1024, 1024, true), (960, 1024, false)] {
        let rgba: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                if smooth {
                    let (x, y) = ((i % w) as f32, (i / w) as f32);
                    let v = (x * 0.01).sin() * 100.0 + (y * 0.02).cos() * 100.0 + 128.0;
                    [v as u8, (v * 0.7) as u8, (255.0 - v) as u8, 255]
                } else {
                    [0, 1, 2, 3].map(|_| r.uniform(0.0, 256.0) as u8)
                }
            })
            .collect();
        let (out, heap) = heap::measured(|| webp::encode_rgba(&rgba, w, h).unwrap().len());
        let bytes = out.unwrap();
        let per_pixel = (heap.peak as f64 - webp::ENCODE_FIXED_BYTES as f64) / (w * h) as f64;
        println!(
            "{w}×{h} {}: peak {} B ({per_pixel:.1} B per pixel beyond the fixed part), file {bytes} B",
            if smooth { "smooth" } else { "noise" },
            heap.peak
        );
        let bound = webp::ENCODE_BYTES_PER_PIXEL * (w * h) as u64 + webp::ENCODE_FIXED_BYTES;
        assert!(
            heap.peak as u64 <= bound,
            "peak {} B above {bound} B",
            heap.peak
        );
    }
}
