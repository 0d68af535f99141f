//! Loader benchmark: views/s and peak RSS against `--ram-budget`, from the floor to above the
//! decoded dataset, on a synthetic pack of 1080p views, plus two baselines: decode every time
//! (no cache: the budget at the floor) and everything held in RAM (the same loader and consumer
//! over decoded views preloaded in memory).
//!
//! Run: `cargo bench --bench loader` (or `--profile dev` to reuse the dev build: dependencies,
//! zstd and xxh3 are optimised there too). Environment knobs: `RAMSPLAT_BENCH_VIEWS` (48),
//! `RAMSPLAT_BENCH_CODEC` (zstd | raw | png), `RAMSPLAT_BENCH_EPOCHS` (3), `RAMSPLAT_BENCH_REPS`
//! (3; the table shows medians), `RAMSPLAT_BENCH_WORKERS` (2).
//!
//! Every budget point runs in a fresh child process (this binary re-executed), so each peak RSS
//! is the kernel's `VmHWM` of a process that did only that run. Prints a Markdown table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use ramsplat::budget::{current_rss_bytes, format_size};
use ramsplat::data::bench::{run_bench_source, BenchOptions, PackViews};
use ramsplat::data::{plan_memory, LoaderConfig, MemSource, Position, RecordSource};
use ramsplat::scene::camera::{Camera, Intrinsics, Pose};
use ramsplat::shard::reader::Pack;
use ramsplat::shard::writer::{PackWriter, WriterOptions};
use ramsplat::shard::{Codec, SourceInfo, Split};

const W: u32 = 1920;
const H: u32 = 1080;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Photo-like content: smooth gradients plus 4 bits of noise, so zstd compresses it roughly 2×
/// as it does real photos, instead of storing incompressible noise.
fn write_pack(dir: &Path, views: usize, codec: Codec) {
    let options = WriterOptions {
        codec,
        force: true,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &options).unwrap();
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
        let camera = Camera {
            width: W,
            height: H,
            intrinsics: Intrinsics {
                fx: 1500.0,
                fy: 1500.0,
                cx: W as f64 / 2.0,
                cy: H as f64 / 2.0,
            },
            world_to_camera: Pose {
                translation: [i as f64 * 0.1, 0.0, 4.0],
                ..Pose::IDENTITY
            },
        };
        w.add_view(&format!("v{i:04}"), &camera, Split::Train, &px)
            .unwrap();
    }
    w.finish(SourceInfo {
        path: "bench".into(),
        format: ramsplat::import::Format::Auto,
        missing_images: vec![],
        max_width: None,
        downscale: None,
        test_every: None,
    })
    .unwrap();
}

fn options(budget: u64) -> BenchOptions {
    BenchOptions {
        ram_budget: budget,
        epochs: env_or("RAMSPLAT_BENCH_EPOCHS", 3),
        workers: env_or("RAMSPLAT_BENCH_WORKERS", 2),
        start: Position { epoch: 0, index: 0 },
        ..Default::default()
    }
}

/// Child: one run. `RAMSPLAT_BENCH_MODE` is `budget:<extra bytes above the floor>` or `ram`.
fn child(pack_dir: &Path, mode: &str) {
    let pack = Arc::new(Pack::open(pack_dir).unwrap());
    let views: Arc<dyn RecordSource> = Arc::new(PackViews::new(pack, Some(Split::Train)));
    let report = if let Some(extra) = mode.strip_prefix("budget:") {
        let extra: u64 = extra.parse().unwrap();
        let o = options(u64::MAX / 2);
        let cfg = LoaderConfig {
            workers: o.workers,
            prefetch: o.prefetch,
            start: o.start,
            limit: None,
        };
        let floor = plan_memory(
            u64::MAX / 2,
            &*views,
            &cfg,
            current_rss_bytes().unwrap_or(0),
            vec![],
        )
        .unwrap()
        .floor
        .total();
        // 1 MiB of slack: run_bench measures the baseline again, a few pages later.
        run_bench_source(views, &options(floor + (1 << 20) + extra), &mut |_, _| {}).unwrap()
    } else {
        // Everything in RAM: decode every view once into memory, then run the same loader and
        // consumer over the in-memory copies (each delivery is one memcpy into a ring slot).
        let mut records = Vec::with_capacity(views.len());
        for r in 0..views.len() as u32 {
            let mut buf = vec![0u8; views.decoded_len(r)];
            views.read_into(r, &mut buf).unwrap();
            records.push(buf);
        }
        let mem: Arc<dyn RecordSource> = Arc::new(MemSource::new(records));
        // No cache (budget at its floor): the source itself is the in-RAM dataset.
        let o = options(u64::MAX / 2);
        let cfg = LoaderConfig {
            workers: o.workers,
            prefetch: o.prefetch,
            start: o.start,
            limit: None,
        };
        let floor = plan_memory(
            u64::MAX / 2,
            &*mem,
            &cfg,
            current_rss_bytes().unwrap_or(0),
            vec![],
        )
        .unwrap()
        .floor
        .total();
        run_bench_source(mem, &options(floor + (1 << 20)), &mut |_, _| {}).unwrap()
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
    let reps: usize = env_or("RAMSPLAT_BENCH_REPS", 3);
    let tmp = tempfile::tempdir().unwrap();
    let pack_dir: PathBuf = tmp.path().join("bench.pack");
    let t0 = std::time::Instant::now();
    write_pack(&pack_dir, views, codec);
    let pack = Pack::open(&pack_dir).unwrap();
    let decoded = pack.manifest().decoded_bytes();
    println!(
        "pack: {views} views {W}x{H} {codec:?}, decoded {}, on disk {} (written in {:.1}s)",
        format_size(decoded),
        format_size(pack.manifest().bytes_on_disk()),
        t0.elapsed().as_secs_f64()
    );
    drop(pack);
    let mut points: Vec<(String, String)> = vec![(
        "decode every time (floor, no cache)".into(),
        "budget:0".into(),
    )];
    for pct in [10u64, 25, 50, 90, 110] {
        let extra = decoded * pct / 100;
        points.push((
            format!("floor + {pct}% of dataset"),
            format!("budget:{extra}"),
        ));
    }
    points.push(("everything in RAM (baseline)".into(), "ram".into()));
    per_view_costs(&pack_dir);
    println!();
    let mut curve: Vec<(f64, f64)> = Vec::new();
    let mut in_ram = None;
    println!("| run | budget | floor | peak RSS | peak ≤ budget | views/s | views/s after epoch 1 | hit rate | stall |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, mode) in points {
        let runs: Vec<serde_json::Value> = (0..reps).map(|_| run_child(&pack_dir, &mode)).collect();
        let f = |k: &str| {
            median(
                runs.iter()
                    .map(|r| r[k].as_f64().unwrap_or(f64::NAN))
                    .collect(),
            )
        };
        let budget = runs[0]["ram_budget_bytes"].as_u64().unwrap();
        if mode == "ram" {
            in_ram = Some(f("views_per_s_after_first_epoch"));
        } else {
            curve.push((budget as f64 / MIB, f("views_per_s_after_first_epoch")));
        }
        let peak = f("peak_rss_bytes") as u64;
        let ok = runs
            .iter()
            .all(|r| r["within_budget"].as_bool() == Some(true));
        println!(
            "| {name} | {} | {} | {} | {} | {:.1} | {:.1} | {:.3} | {:.3} |",
            if mode == "ram" {
                "-".to_string()
            } else {
                format_size(budget)
            },
            format_size(runs[0]["floor_bytes"].as_u64().unwrap()),
            format_size(peak),
            if mode == "ram" {
                "-"
            } else if ok {
                "yes"
            } else {
                "NO"
            },
            f("views_per_s"),
            f("views_per_s_after_first_epoch"),
            f("hit_rate"),
            f("stall_fraction"),
        );
    }
    draw_curve(&curve, in_ram, decoded as f64 / MIB, views, codec);
}

const MIB: f64 = (1u64 << 20) as f64;

/// Draws the speed/RAM trade-off to docs/loader-budget-curve.png (the README shows it).
fn draw_curve(
    curve: &[(f64, f64)],
    in_ram: Option<f64>,
    decoded_mib: f64,
    views: usize,
    codec: Codec,
) {
    use ramsplat::plot::{line_chart, ChartOptions, Series};
    let Some(&(x_lo, _)) = curve.first() else {
        return;
    };
    let x_hi = curve.last().map_or(x_lo, |p| p.0);
    let mut series = vec![Series {
        markers: true,
        ..Series::new("ramsplat loader under --ram-budget", curve.to_vec())
    }];
    if let Some(v) = in_ram {
        series.push(Series {
            dashed: true,
            ..Series::new(
                "everything decoded in RAM (baseline)",
                vec![(x_lo, v), (x_hi, v)],
            )
        });
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/loader-budget-curve.png");
    let _ = std::fs::create_dir_all(path.parent().expect("docs dir"));
    let title = format!(
        "Loader throughput vs RAM budget ({views} views {W}x{H} {codec:?}, {decoded_mib:.0} MiB decoded)"
    );
    match line_chart(
        &path,
        &title,
        "--ram-budget (MiB)",
        "views/s after the first epoch",
        &series,
        &ChartOptions {
            y_from_zero: true,
            ..ChartOptions::default()
        },
    ) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("chart not written: {e}"),
    }
}
