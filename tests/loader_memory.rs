//! Proof that the loader keeps its promises, checked from outside the process: the child's
//! peak RSS as the kernel reports it (`VmHWM`, polled from `/proc/<pid>/status` while it runs
//! and read by the child at its end) stays under `--ram-budget` on a pack 4× larger than the
//! budget; RSS does not grow over 20 epochs; the delivered sequence is identical across runs
//! and across a stop/resume; bytes delivered equal bytes packed; a budget below the floor is
//! the itemised error with a non-zero exit.
//!
//! Every child is the real `gs-pack bench` binary, seeds and stop/resume (`--start`, `--limit`)
//! included.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use ramsplat::budget::{parse_size, parse_status_field};
use ramsplat::data::Position;
use ramsplat::shard::Codec;
use ramsplat::synth::packs::write_noise_pack;
use serde_json::Value;

/// 176 views of 512×512 RGB noise stored raw: 176 × 786,432 B = 138.4 MB decoded (and on
/// disk): 4.1× the 32 MiB budget below (the floor is ~27 MiB: two workers each keep up to
/// 2 MiB of page-cache folio mapped at both ends of the record they decode), small enough to
/// write in a fraction of a second.
const VIEWS: usize = 176;
const SIDE: u32 = 512;
const BUDGET: &str = "32M";
const VIEW_BYTES: u64 = SIDE as u64 * SIDE as u64 * 3;

struct TestPack {
    _dir: tempfile::TempDir,
    path: PathBuf,
    /// Wrapping sum of xxh3 of every view: one epoch's `content_sum`.
    epoch_sum: u64,
}

fn pack() -> &'static TestPack {
    static PACK: OnceLock<TestPack> = OnceLock::new();
    PACK.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("noise.pack");
        let epoch_sum = write_noise_pack(&path, VIEWS, SIDE, SIDE, Codec::Raw, 99).unwrap();
        TestPack {
            _dir: dir,
            path,
            epoch_sum,
        }
    })
}

#[derive(Default, Clone)]
struct Extra {
    seed: Option<u64>,
    start: Option<Position>,
    limit: Option<u64>,
}

struct ChildRun {
    success: bool,
    stdout: String,
    stderr: String,
    /// Largest VmHWM seen while polling the running child.
    polled_peak: u64,
    report: Option<Value>,
}

fn run_child(pack: &Path, budget: &str, epochs: u64, extra: &Extra) -> ChildRun {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gs-pack"));
    cmd.arg("bench").arg(pack).args([
        "--ram-budget",
        budget,
        "--epochs",
        &epochs.to_string(),
        "--workers",
        "2",
    ]);
    if let Some(seed) = extra.seed {
        cmd.args(["--seed", &seed.to_string()]);
    }
    if let Some(p) = extra.start {
        cmd.args(["--start", &format!("{},{}", p.epoch, p.index)]);
    }
    if let Some(l) = extra.limit {
        cmd.args(["--limit", &l.to_string()]);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        out_pipe.read_to_string(&mut s).unwrap();
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        err_pipe.read_to_string(&mut s).unwrap();
        s
    });
    let status_path = format!("/proc/{}/status", child.id());
    let mut polled_peak = 0;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            if let Some(hwm) = parse_status_field(&text, "VmHWM") {
                polled_peak = polled_peak.max(hwm);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    let report = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok());
    ChildRun {
        success: status.success(),
        stdout,
        stderr,
        polled_peak,
        report,
    }
}

impl ChildRun {
    /// The JSON report, or a panic that shows what the child said.
    fn report(self, what: &str) -> Value {
        match self.report {
            Some(r) => r,
            None => panic!(
                "{what}: no JSON line from gs-pack bench (success: {}):\nstdout:\n{}\nstderr:\n{}",
                self.success, self.stdout, self.stderr
            ),
        }
    }
}

fn num(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing or not an integer in {r}"))
}

fn hex(r: &Value, key: &str) -> u64 {
    u64::from_str_radix(
        r[key]
            .as_str()
            .unwrap_or_else(|| panic!("{key} missing in {r}")),
        16,
    )
    .unwrap()
}

#[test]
fn peak_rss_stays_under_the_budget_on_data_4x_larger_and_does_not_grow() {
    let p = pack();
    let budget = parse_size(BUDGET).unwrap();
    assert!(
        VIEWS as u64 * VIEW_BYTES >= 4 * budget,
        "the pack must be ≥ 4× the budget"
    );
    let epochs = 20;
    let run = run_child(&p.path, BUDGET, epochs, &Extra::default());
    let polled_peak = run.polled_peak;
    let r = run.report("20 epochs");
    let peak = num(&r, "peak_rss_bytes");
    assert!(
        peak <= budget,
        "child's own VmHWM {peak} > budget {budget}: {r}"
    );
    assert!(
        polled_peak <= budget,
        "polled VmHWM {polled_peak} > budget {budget}: {r}"
    );
    assert!(polled_peak > 0, "polling saw the child");
    assert_eq!(num(&r, "views"), epochs * VIEWS as u64);
    // Bytes delivered equal bytes packed, byte for byte (content checksums).
    assert_eq!(num(&r, "bytes"), epochs * VIEWS as u64 * VIEW_BYTES);
    assert_eq!(hex(&r, "content_sum"), p.epoch_sum.wrapping_mul(epochs));
    // No growth: once the cache has filled (epoch 2), RSS stays flat to within 1 MiB (a few
    // pages of allocator and page-table noise; a leak of one view per epoch would be 15 MiB).
    let rss: Vec<u64> = r["rss_after_epoch"]
        .as_array()
        .expect("rss_after_epoch")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(rss.len(), epochs as usize);
    let settled = rss[2];
    for (e, &v) in rss.iter().enumerate().skip(2) {
        assert!(
            v <= settled + (1 << 20),
            "RSS grew to {v} at epoch {e} from {settled}: {rss:?}"
        );
    }
    // The cache got the budget left above the floor and was used.
    assert!(
        num(&r, "cache_bytes") > 0 && r["hit_rate"].as_f64().unwrap() > 0.0,
        "{r}"
    );
}

#[test]
fn same_seed_same_sequence_and_stop_resume_continues_it() {
    let p = pack();
    let epochs = 3;
    let seeded = Extra {
        seed: Some(5),
        ..Default::default()
    };
    let a = run_child(&p.path, BUDGET, epochs, &seeded);
    let b = run_child(&p.path, BUDGET, epochs, &seeded);
    let (a, b) = (a.report("run a"), b.report("run b"));
    assert_eq!(a["sequence_sum"], b["sequence_sum"]);
    let other = run_child(
        &p.path,
        BUDGET,
        epochs,
        &Extra {
            seed: Some(6),
            ..Default::default()
        },
    )
    .report("run c");
    assert_ne!(a["sequence_sum"], other["sequence_sum"]);
    // Stop after 200 views (inside epoch 1), resume from the reported position.
    let head = run_child(
        &p.path,
        BUDGET,
        epochs,
        &Extra {
            limit: Some(200),
            ..seeded.clone()
        },
    )
    .report("head");
    let end = Position {
        epoch: head["end"]["epoch"].as_u64().unwrap(),
        index: head["end"]["index"].as_u64().unwrap(),
    };
    assert_eq!(
        end,
        Position {
            epoch: 1,
            index: 200 - VIEWS as u64
        }
    );
    let tail = run_child(
        &p.path,
        BUDGET,
        epochs,
        &Extra {
            start: Some(end),
            ..seeded
        },
    )
    .report("tail");
    assert_eq!(
        num(&head, "views") + num(&tail, "views"),
        epochs * VIEWS as u64
    );
    assert_eq!(
        hex(&head, "sequence_sum").wrapping_add(hex(&tail, "sequence_sum")),
        hex(&a, "sequence_sum"),
        "stop + resume delivers the uninterrupted sequence"
    );
    // The default seed is deterministic too.
    let x = run_child(&p.path, BUDGET, 1, &Extra::default()).report("default x");
    let y = run_child(&p.path, BUDGET, 1, &Extra::default()).report("default y");
    assert_eq!(x["sequence_sum"], y["sequence_sum"]);
}

#[test]
fn budget_below_the_floor_is_an_itemised_error() {
    let p = pack();
    let run = run_child(&p.path, "4M", 1, &Extra::default());
    assert!(!run.success, "must exit non-zero:\n{}", run.stdout);
    for needle in [
        "below the memory floor",
        "baseline",
        "prefetch ring",
        "decode scratch",
        "--prefetch",
        "--max-width",
    ] {
        assert!(
            run.stderr.contains(needle),
            "missing {needle:?} in stderr:\n{}",
            run.stderr
        );
    }
}

/// The cache policy end to end, through the real binary: with per-epoch permutations the
/// known-future policy hits about as often as the cache's share of the data allows (goal:
/// ≥ 0.95 × cache/dataset after the cold first epoch), far above LRU.
#[test]
fn belady_hits_its_share_of_the_data_and_lru_does_not() {
    let p = pack();
    let epochs = 6;
    let run = |policy: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_gs-pack"))
            .arg("bench")
            .arg(&p.path)
            .args(["--ram-budget", "60M", "--epochs", &epochs.to_string()])
            .args(["--policy", policy])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str::<Value>(l).ok())
            .unwrap_or_else(|| panic!("no report: {text}"))
    };
    let (belady, lru) = (run("belady"), run("lru"));
    let share = num(&belady, "cache_bytes") as f64 / num(&belady, "dataset_decoded_bytes") as f64;
    assert!((0.2..0.8).contains(&share), "cache share {share}");
    // Hits happen only after the first (cold) epoch.
    let warm = |r: &Value| r["hit_rate"].as_f64().unwrap() * epochs as f64 / (epochs - 1) as f64;
    assert!(
        warm(&belady) >= 0.95 * share,
        "belady warm hit rate {} < 0.95 × {share}",
        warm(&belady)
    );
    assert!(
        warm(&lru) < 0.8 * warm(&belady),
        "lru {} vs belady {}",
        warm(&lru),
        warm(&belady)
    );
    assert_eq!(
        belady["content_sum"], lru["content_sum"],
        "same bytes either way"
    );
}

/// The seed scale (600 views of 1600×1066, 4M SfM points, 2.9 GiB decoded): the loader stays
/// under 512M, 1G and 2G by the kernel's VmHWM, polled and read by the child itself. Writes
/// the 3 GB pack unless `RAMSPLAT_SCALE_PACK` names one already written
/// (`ramsplat::synth::packs::write_scale_pack`); prints each run's figures.
/// `cargo test --release --test loader_memory -- --ignored --nocapture seed_scale`
#[test]
#[ignore = "writes and reads a 3 GB pack: run on demand (see the doc comment)"]
fn seed_scale_bench_stays_under_512m_1g_and_2g() {
    let dir = tempfile::tempdir().unwrap();
    let path = match std::env::var_os("RAMSPLAT_SCALE_PACK") {
        Some(p) => PathBuf::from(p),
        None => {
            let p = dir.path().join("scale.pack");
            ramsplat::synth::packs::write_scale_pack(&p, 600, 1600, 1066, 4_000_000, 0).unwrap();
            p
        }
    };
    for budget in ["512M", "1G", "2G"] {
        let run = run_child(&path, budget, 2, &Extra::default());
        let polled = run.polled_peak;
        let r = run.report(budget);
        let cap = parse_size(budget).unwrap();
        let peak = num(&r, "peak_rss_bytes");
        eprintln!(
            "--ram-budget {budget}: peak {peak} B (polled {polled} B), floor {} B, cache {} B, \
             headroom {} B, hit rate {:.3}, {:.1} views/s",
            num(&r, "floor_bytes"),
            num(&r, "cache_bytes"),
            cap - peak.max(polled),
            r["hit_rate"].as_f64().unwrap(),
            r["views_per_s"].as_f64().unwrap()
        );
        assert!(num(&r, "dataset_views") >= 600, "{r}");
        assert!(peak <= cap && polled <= cap, "{budget}: {r}");
        assert_eq!(r["within_budget"], Value::Bool(true));
    }
}
