//! Loader benchmark: views/s and peak RSS against `--ram-budget`, from the floor to above the
//! decoded dataset, on a pack of 1080p views, plus the baselines: decode every time (no cache:
//! the budget at the floor), everything decoded into RAM up front and read in place (no loader,
//! no copy: the strict reference for "within 10% of holding everything in RAM"), and the same
//! loader over an in-RAM source (one memcpy per view into a ring slot, as with pinned slots).
//!
//! Run: `cargo bench --bench loader` (or `--profile dev` to reuse the dev build: dependencies,
//! zstd and xxh3 are optimised there too). Environment knobs: `RAMSPLAT_BENCH_VIEWS` (48),
//! `RAMSPLAT_BENCH_CODEC` (zstd | raw | png), `RAMSPLAT_BENCH_EPOCHS` (40: the "after epoch 1"
//! rate needs many warm epochs, a warm epoch of 48 views takes ~15 ms), `RAMSPLAT_BENCH_REPS`
//! (5; medians, repetitions interleaved across points), `RAMSPLAT_BENCH_WORKERS` (2),
//! `RAMSPLAT_BENCH_ONLY` (e.g. `ram,budget:0,110`: a subset of points), `RAMSPLAT_BENCH_PACK`
//! (keep the pack there and reuse it).
//!
//! Content: the 1080×1920 fox photos from `../shared/data/fox/images` (real JPEG content, so
//! zstd sees real photo statistics), cycled to `RAMSPLAT_BENCH_VIEWS` views; where that folder
//! is absent, or with `RAMSPLAT_BENCH_CONTENT=synthetic`, smooth 1920×1080 gradients plus noise.
//!
//! Every point runs in a fresh child process (this binary re-executed), so each peak RSS is the
//! kernel's `VmHWM` of a process that did only that run. Prints a Markdown table and draws the
//! speed/RAM curve to `docs/loader-budget-curve.png` (override with `RAMSPLAT_BENCH_PNG`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use ramsplat::budget::{current_rss_bytes, format_size};
use ramsplat::data::{
    bench::{run_bench_source, BenchOptions},
    sources::PackViews,
};
use ramsplat::data::{plan_memory, LoaderConfig, MemSource, Position, RecordSource, Sampler};
use ramsplat::dataset::Split;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::shard::reader::Pack;
use ramsplat::shard::writer::{PackWriter, WriterOptions};
use ramsplat::shard::{Codec, SourceInfo};

const W: u32 = 1920;
const H: u32 = 1080;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const FOX_IMAGES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/fox/images");

/// The fox photos, decoded to RGB8 (sorted by name), or `None` where they are not available.
fn fox_photos() -> Option<Vec<image::RgbImage>> {
    if std::env::var("RAMSPLAT_BENCH_CONTENT").as_deref() == Ok("synthetic") {
        return None;
    }
    let mut names: Vec<PathBuf> = std::fs::read_dir(FOX_IMAGES)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("jpg")))
        .collect();
    names.sort();
    let photos: Vec<_> = names
        .iter()
        .filter_map(|p| image::open(p).ok().map(|i| i.to_rgb8()))
        .collect();
    (!photos.is_empty()).then_some(photos)
}

fn camera(i: usize, width: u32, height: u32) -> Camera {
    Camera {
        width,
        height,
        intrinsics: Intrinsics {
            fx: 1500.0,
            fy: 1500.0,
            cx: width as f64 / 2.0,
            cy: height as f64 / 2.0,
        },
        world_to_camera: Pose {
            translation: [i as f64 * 0.1, 0.0, 4.0],
            ..Pose::IDENTITY
        },
        projection: Projection::Pinhole,
    }
}

/// Writes the bench pack; returns a description of its content.
fn write_pack(dir: &Path, views: usize, codec: Codec) -> &'static str {
    let options = WriterOptions {
        codec,
        force: true,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &options).unwrap();
    let content = if let Some(photos) = fox_photos() {
        for i in 0..views {
            let p = &photos[i % photos.len()];
            w.add_view(
                &format!("v{i:04}"),
                &camera(i, p.width(), p.height()),
                Split::Train,
                p.as_raw(),
            )
            .unwrap();
        }
        "fox photos"
    } else {
        write_synthetic(&mut w, views);
        "synthetic gradients"
    };
    w.finish(SourceInfo::generated("bench")).unwrap();
    content
}

/// Photo-like content: smooth gradients plus 4 bits of noise, so zstd compresses it roughly 2×
/// as it does real photos, instead of storing incompressible noise.
fn write_synthetic(w: &mut PackWriter, views: usize) {
    let mut rng = ramsplat::rng::Rng::new(1);
    let mut px = vec![0u8; (W * H * 3) as usize];
    for i in 0..views {
        for y in 0..H as usize {
            for x in 0..W as usize {
                let o = (y * W as usize + x) * 3;
                let n = rng.next_u64();
                px[o] = ((x / 8 + i * 5) as u8).wrapping_add((n & 15) as u8);
                px[o + 1] = ((y / 5) as u8).wrapping_add(((n >> 8) & 15) as u8);
                px[o + 2] = (((x + y) / 16) as u8).wrapping_add(((n >> 16) & 15) as u8);
            }
        }
        w.add_view(&format!("v{i:04}"), &camera(i, W, H), Split::Train, &px)
            .unwrap();
    }
}

fn options(budget: u64) -> BenchOptions {
    BenchOptions {
        ram_budget: budget,
        epochs: env_or("RAMSPLAT_BENCH_EPOCHS", 40),
        workers: env_or("RAMSPLAT_BENCH_WORKERS", 2),
        start: Position { epoch: 0, index: 0 },
        ..Default::default()
    }
}

/// Every view decoded into its own buffer, in record order.
fn preload(views: &dyn RecordSource) -> Vec<Vec<u8>> {
    (0..views.len() as u32)
        .map(|r| {
            let mut buf = vec![0u8; views.decoded_len(r)];
            views.read_into(r, &mut buf).unwrap();
            buf
        })
        .collect()
}

/// The strict baseline: every view decoded into RAM up front and the consumer reading the
/// buffers in place (no loader, no threads, no copy), in the same sampler order, doing the same
/// per-view work as `run_bench`'s consumer (xxh3 of the bytes). Prints the same JSON keys the
/// table reads.
fn in_ram_direct(views: &dyn RecordSource) {
    use xxhash_rust::xxh3::xxh3_64;
    let records = preload(views);
    let n = records.len() as u64;
    let epochs = options(0).epochs;
    let mut sampler = Sampler::singletons(options(0).seed, records.len()).unwrap();
    let started = std::time::Instant::now();
    let mut after_first = None;
    let mut sum = 0u64;
    for k in 0..epochs * n {
        if k == n {
            after_first = Some(std::time::Instant::now());
        }
        sum = sum.wrapping_add(xxh3_64(&records[sampler.next().record as usize]));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let rate_after =
        after_first.map(|t| (epochs - 1) as f64 * n as f64 / t.elapsed().as_secs_f64());
    let report = serde_json::json!({
        "views": epochs * n,
        "views_per_s": (epochs * n) as f64 / elapsed,
        "views_per_s_after_first_epoch": rate_after,
        "hit_rate": 0.0,
        "stall_fraction": 0.0,
        "ram_budget_bytes": 0,
        "floor_bytes": 0,
        "peak_rss_bytes": ramsplat::budget::peak_rss_bytes(),
        // No budget applies to the all-in-RAM baseline; unknown without the kernel's figure.
        "within_budget": ramsplat::budget::peak_rss_bytes().map(|_| true),
        "content_sum": format!("{sum:016x}"),
    });
    println!("{report}");
}

/// The loader's memory floor for `source` in this process now (the budget of a run with no
/// cache is this plus slack).
fn floor_bytes(source: &dyn RecordSource) -> u64 {
    let o = options(u64::MAX / 2);
    let cfg = LoaderConfig {
        workers: o.workers,
        prefetch: o.prefetch,
        start: o.start,
        limit: None,
    };
    let baseline = current_rss_bytes().unwrap_or(0);
    plan_memory(u64::MAX / 2, source, &cfg, baseline, Default::default())
        .unwrap()
        .floor
        .total()
}

/// Child: one run. `RAMSPLAT_BENCH_MODE` is `budget:<extra bytes above the floor>`, `ram` (the
/// strict in-RAM baseline) or `ram-loader` (the loader over an in-RAM source).
fn child(pack_dir: &Path, mode: &str) {
    let pack = Arc::new(Pack::open(pack_dir).unwrap());
    let views: Arc<dyn RecordSource> = Arc::new(PackViews::new(pack, Some(Split::Train)));
    let report = if let Some(extra) = mode.strip_prefix("budget:") {
        let extra: u64 = extra.parse().unwrap();
        let floor = floor_bytes(&*views);
        // 1 MiB of slack: run_bench measures the baseline again, a few pages later.
        run_bench_source(views, &options(floor + (1 << 20) + extra), &mut |_, _| {}).unwrap()
    } else if mode == "ram-loader" {
        // The same loader over views decoded into memory up front: each delivery is one memcpy
        // into a ring slot (what the pinned/CUDA path does with a warm cache).
        let mem: Arc<dyn RecordSource> = Arc::new(MemSource::new(preload(&*views)));
        // No cache (budget at its floor): the source itself is the in-RAM dataset.
        let floor = floor_bytes(&*mem);
        run_bench_source(mem, &options(floor + (1 << 20)), &mut |_, _| {}).unwrap()
    } else {
        assert_eq!(mode, "ram", "unknown RAMSPLAT_BENCH_MODE");
        in_ram_direct(&*views);
        return;
    };
    println!("{}", report.to_json_line());
}

fn run_child(pack_dir: &Path, mode: &str) -> serde_json::Value {
    let out = Command::new(std::env::current_exe().unwrap())
        .env("RAMSPLAT_BENCH_CHILD", pack_dir)
        .env("RAMSPLAT_BENCH_MODE", mode)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "child {mode} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("JSON line");
    serde_json::from_str(line).unwrap()
}

/// Single-thread cost of each part of a step, median over the pack's views, to explain the
/// table: the pack read (checksum + decode + page faults + page release), the consumer's hash,
/// and a cache hit's memcpy.
fn per_view_costs(pack_dir: &Path) {
    let pack = Arc::new(Pack::open(pack_dir).unwrap());
    let views = PackViews::new(pack, Some(Split::Train));
    let len = views.decoded_len(0);
    let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
    let (mut read, mut hash, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    let mut sink = 0u64;
    for r in 0..views.len() as u32 {
        let t = std::time::Instant::now();
        views.read_into(r, &mut a).unwrap();
        read.push(t.elapsed().as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        sink ^= xxhash_rust::xxh3::xxh3_64(&a);
        hash.push(t.elapsed().as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        b.copy_from_slice(&a);
        copy.push(t.elapsed().as_secs_f64() * 1e3);
        sink ^= b[r as usize] as u64;
    }
    println!(
        "single thread, median per view ({}): pack read+decode {:.2} ms, consumer xxh3 {:.2} ms, cache-hit memcpy {:.2} ms (sink {})",
        format_size(len as u64),
        median(read),
        median(hash),
        median(copy),
        sink & 1
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if let Ok(dir) = std::env::var("RAMSPLAT_BENCH_CHILD") {
        child(
            Path::new(&dir),
            &std::env::var("RAMSPLAT_BENCH_MODE").unwrap(),
        );
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benchmarks; there is nothing to list.
    }
    let views: usize = env_or("RAMSPLAT_BENCH_VIEWS", 48);
    let codec = match std::env::var("RAMSPLAT_BENCH_CODEC").as_deref() {
        Ok("raw") => Codec::Raw,
        Ok("png") => Codec::Png,
        _ => Codec::Zstd,
    };
    let reps: usize = env_or("RAMSPLAT_BENCH_REPS", 5);
    let tmp = tempfile::tempdir().unwrap();
    // RAMSPLAT_BENCH_PACK keeps the pack between invocations (written once if absent).
    let kept = std::env::var_os("RAMSPLAT_BENCH_PACK").map(PathBuf::from);
    let pack_dir: PathBuf = kept
        .clone()
        .unwrap_or_else(|| tmp.path().join("bench.pack"));
    let t0 = std::time::Instant::now();
    // A kept pack remembers what it holds in a sidecar file (packs themselves are immutable).
    let sidecar = pack_dir.with_extension("content");
    let content: String = match std::fs::read_to_string(&sidecar) {
        Ok(c) if kept.is_some() && pack_dir.join("manifest.json").exists() => c,
        _ => {
            let c = write_pack(&pack_dir, views, codec).to_string();
            if kept.is_some() {
                std::fs::write(&sidecar, &c).unwrap();
            }
            c
        }
    };
    let pack = Pack::open(&pack_dir).unwrap();
    let decoded = pack.manifest().decoded_bytes();
    println!(
        "pack: {views} views of {content} {codec:?}, decoded {}, on disk {} (written in {:.1}s)",
        format_size(decoded),
        format_size(pack.manifest().bytes_on_disk()),
        t0.elapsed().as_secs_f64()
    );
    drop(pack);
    let mut points: Vec<(String, String)> = vec![(
        "decode every time (floor, no cache)".into(),
        "budget:0".into(),
    )];
    for pct in [10u64, 25, 50, 75, 90, 100, 110] {
        let extra = decoded * pct / 100;
        points.push((
            format!("floor + {pct}% of dataset"),
            format!("budget:{extra}"),
        ));
    }
    points.push((
        "everything in RAM, read in place (baseline)".into(),
        "ram".into(),
    ));
    points.push((
        "everything in RAM through the loader (memcpy per view)".into(),
        "ram-loader".into(),
    ));
    // RAMSPLAT_BENCH_ONLY=ram,budget:0,110 runs a subset (percentages name budget points).
    if let Ok(only) = std::env::var("RAMSPLAT_BENCH_ONLY") {
        let keep: Vec<String> = only.split(',').map(|k| k.trim().to_string()).collect();
        points.retain(|(name, mode)| {
            keep.iter()
                .any(|k| k == mode || name.contains(&format!("+ {k}%")))
        });
    }
    per_view_costs(&pack_dir);
    println!();
    // Repetitions are interleaved across points (rep 1 of every point, then rep 2, ...), so a
    // slow drift of the machine's load spreads over all points instead of biasing one.
    let mut runs: Vec<Vec<serde_json::Value>> = vec![Vec::new(); points.len()];
    for rep in 0..reps {
        for (i, (name, mode)) in points.iter().enumerate() {
            eprintln!("rep {}/{reps}: {name}", rep + 1);
            runs[i].push(run_child(&pack_dir, mode));
        }
    }
    let value = |runs: &[serde_json::Value], k: &str| {
        median(
            runs.iter()
                .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
                .collect(),
        )
    };
    let in_ram = points
        .iter()
        .position(|p| p.1 == "ram")
        .map(|i| value(&runs[i], "views_per_s_after_first_epoch"));
    println!(
        "| run | budget | floor | peak RSS | peak ≤ budget | views/s | views/s after epoch 1 | vs in RAM | hit rate | stall |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for ((name, mode), runs) in points.into_iter().zip(&runs) {
        let f = |k: &str| value(runs, k);
        let budget = runs[0]["ram_budget_bytes"].as_u64().unwrap();
        let peak = f("peak_rss_bytes") as u64;
        let ok = runs
            .iter()
            .all(|r| r["within_budget"].as_bool() == Some(true));
        let baseline = mode.starts_with("ram");
        let after = f("views_per_s_after_first_epoch");
        println!(
            "| {name} | {} | {} | {} | {} | {:.1} | {after:.1} | {} | {:.3} | {:.3} |",
            if baseline {
                "-".to_string()
            } else {
                format_size(budget)
            },
            if baseline {
                "-".to_string()
            } else {
                format_size(runs[0]["floor_bytes"].as_u64().unwrap())
            },
            format_size(peak),
            if baseline {
                "-"
            } else if ok {
                "yes"
            } else {
                "NO"
            },
            f("views_per_s"),
            in_ram.map_or("-".into(), |r| format!(
                "{:+.1}%",
                (after / r - 1.0) * 100.0
            )),
            f("hit_rate"),
            f("stall_fraction"),
        );
        rows.push((mode, budget, peak, after));
    }
    let png = std::env::var("RAMSPLAT_BENCH_PNG")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/loader-budget-curve.png")
        });
    if let Some(parent) = png.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    if draw_curve(&png, &rows, decoded, &content) {
        println!("\nchart: {}", png.display());
    }
}

const MIB: f64 = (1u64 << 20) as f64;

/// Views/s (after the first epoch) against the budget, with the two baselines as dashed
/// horizontal lines and the budget at which the decoded dataset fits as a vertical marker.
/// Returns whether it drew (a subset run via `RAMSPLAT_BENCH_ONLY` may lack the references).
fn draw_curve(png: &Path, rows: &[(String, u64, u64, f64)], decoded: u64, content: &str) -> bool {
    use ramsplat::plot::{line_chart, ChartOptions, Series};
    let curve: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.0.starts_with("budget:"))
        .map(|r| (r.1 as f64 / MIB, r.3))
        .collect();
    let level = |mode: &str| rows.iter().find(|r| r.0 == mode).map(|r| r.3);
    let (Some(floor), Some(ram), Some(&(x_lo, _)), Some(&(x_hi, _))) =
        (level("budget:0"), level("ram"), curve.first(), curve.last())
    else {
        eprintln!("chart skipped: it needs the floor, the in-RAM baseline and the budget points");
        return false;
    };
    // Where the whole decoded dataset fits in the cache: the floor budget plus the dataset.
    let fits = rows.iter().find(|r| r.0 == "budget:0").unwrap().1 + decoded;
    let y_hi = curve.iter().map(|p| p.1).fold(ram, f64::max);
    let series = [
        Series {
            markers: true,
            ..Series::new("loader under --ram-budget", curve.clone())
        },
        Series {
            dashed: true,
            ..Series::new(
                "decode every time (no cache)",
                vec![(x_lo, floor), (x_hi, floor)],
            )
        },
        Series {
            dashed: true,
            ..Series::new(
                "everything in RAM, read in place",
                vec![(x_lo, ram), (x_hi, ram)],
            )
        },
        Series {
            dashed: true,
            color: Some(7),
            ..Series::new(
                "floor + decoded dataset",
                vec![(fits as f64 / MIB, 0.0), (fits as f64 / MIB, y_hi)],
            )
        },
    ];
    line_chart(
        png,
        &format!("Loader speed vs RAM budget ({content}, views/s after epoch 1)"),
        "--ram-budget (MiB)",
        "views/s",
        &series,
        &ChartOptions {
            y_from_zero: true,
            ..ChartOptions::default()
        },
    )
    .unwrap();
    true
}
