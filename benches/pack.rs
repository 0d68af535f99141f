//! Pack benchmarks (run on demand: `cargo bench --bench pack`).
//!
//! 1. `gs-pack convert` throughput (views/s, decoded MB/s) on the real fox photos
//!    (../shared/data/fox: 50 JPEGs of 1080×1920 with OpenCV distortion), for each codec,
//!    at full resolution and at --downscale 2.
//! 2. Per-view read + checksum + decode throughput from the packs of step 1, for each codec,
//!    on one thread, against a plain memcpy of the same decoded bytes (the floor any codec is
//!    measured against).
//!
//! Each figure is the median of `RUNS` runs. Prints Markdown tables; set RAMSPLAT_BENCH_JSON=1
//! for JSON lines.

use std::path::{Path, PathBuf};
use std::time::Instant;

use ramsplat::import::image::Resize;
use ramsplat::pack::{convert, ConvertOptions};
use ramsplat::shard::reader::Pack;
use ramsplat::shard::Codec;

const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn fox() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/fox");
    p.join("transforms.json").is_file().then_some(p)
}

fn main() {
    let Some(fox) = fox() else {
        eprintln!("../shared/data/fox not found; nothing to benchmark");
        return;
    };
    let json = std::env::var_os("RAMSPLAT_BENCH_JSON").is_some();
    let tmp = tempfile::tempdir().expect("temp dir");
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "# gs-pack benchmarks on {} ({workers} threads), median of {RUNS} runs\n",
        fox.display()
    );
    println!("| step | codec | resolution | views/s | decoded MB/s | on disk MB | ratio |");
    println!("|---|---|---|---|---|---|---|");
    let mut packs = vec![];
    for (label, resize) in [
        ("full 1080x1920", Resize::None),
        ("downscale 2", Resize::Downscale(2)),
    ] {
        for codec in [Codec::Raw, Codec::Zstd, Codec::Png] {
            let out = tmp
                .path()
                .join(format!("{label}-{codec:?}").replace(' ', "_"));
            let mut vps = vec![];
            let mut mbps = vec![];
            let mut report = None;
            for _ in 0..RUNS {
                let opts = ConvertOptions {
                    resize: Some(resize),
                    codec,
                    force: true,
                    workers,
                    ..Default::default()
                };
                let r = convert(&fox, &out, &opts, &|_| {}).expect("convert fox");
                vps.push(r.views_per_s);
                mbps.push(r.decoded_mb_per_s);
                report = Some(r);
            }
            let r = report.expect("ran");
            let (v, m) = (median(vps), median(mbps));
            let ratio = r.decoded_bytes as f64 / r.bytes_on_disk as f64;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"bench": "convert", "codec": format!("{codec:?}"), "resolution": label,
                        "views_per_s": v, "decoded_mb_per_s": m, "bytes_on_disk": r.bytes_on_disk, "ratio": ratio})
                );
            } else {
                println!(
                    "| convert | {codec:?} | {label} | {v:.1} | {m:.0} | {:.1} | {ratio:.2} |",
                    r.bytes_on_disk as f64 / 1e6
                );
            }
            packs.push((label, codec, out));
        }
    }
    println!("\n| step | codec | resolution | views/s (1 thread) | decoded GB/s | memcpy GB/s | codec/memcpy |");
    println!("|---|---|---|---|---|---|---|");
    for (label, codec, dir) in &packs {
        let pack = Pack::open(dir).expect("open pack");
        let n = pack.manifest().views.len();
        let mut buf = vec![0u8; pack.manifest().max_view_bytes()];
        let mut src = vec![1u8; buf.len()];
        let bytes: u64 = pack
            .manifest()
            .views
            .iter()
            .map(|v| v.record.decoded_len)
            .sum();
        let mut read = vec![];
        let mut copy = vec![];
        for _ in 0..RUNS {
            let t = Instant::now();
            for i in 0..n {
                let len = pack.manifest().views[i].decoded_len();
                pack.read_view_into(i, &mut buf[..len]).expect("read view");
            }
            read.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            for i in 0..n {
                let len = pack.manifest().views[i].decoded_len();
                buf[..len].copy_from_slice(&src[..len]);
                // Keep the copy observable so it cannot be optimised away.
                src[i % len] = buf[(i * 7) % len];
            }
            copy.push(t.elapsed().as_secs_f64());
        }
        let (r, c) = (median(read), median(copy));
        let (read_gbs, copy_gbs) = (bytes as f64 / r / 1e9, bytes as f64 / c / 1e9);
        if json {
            println!(
                "{}",
                serde_json::json!({"bench": "read", "codec": format!("{codec:?}"), "resolution": label,
                    "views_per_s": n as f64 / r, "decoded_gb_per_s": read_gbs, "memcpy_gb_per_s": copy_gbs})
            );
        } else {
            println!(
                "| read+decode | {codec:?} | {label} | {:.1} | {read_gbs:.2} | {copy_gbs:.2} | {:.3} |",
                n as f64 / r,
                read_gbs / copy_gbs
            );
        }
    }
}
