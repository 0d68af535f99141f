//! Proof that the loader keeps its promises, checked from outside the process: the child's
//! peak RSS as the kernel reports it (`VmHWM`, polled from `/proc/<pid>/status` while it runs
//! and read by the child at its end) stays under `--ram-budget` on a pack 4× larger than the
//! budget; RSS does not grow over 20 epochs; the delivered sequence is identical across runs
//! and across a stop/resume; bytes delivered equal bytes packed; a budget below the floor is
//! the itemised error with a non-zero exit.
//!
//! The child is the real `gs-pack bench` when that subcommand exists; otherwise (and for the
//! resume options the CLI does not expose) this test binary re-executes itself into
//! [`child_entry`], which runs the same library function `gs-pack bench` wraps
//! (`ramsplat::data::bench::run_bench`) in a fresh process.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use ramsplat::budget::{parse_size, parse_status_field};
use ramsplat::data::bench::{run_bench, write_noise_pack, BenchOptions};
use ramsplat::data::Position;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::Codec;
use serde_json::Value;

/// 128 views of 512×512 RGB noise stored raw: 128 × 786,432 B = 100.7 MB decoded (and on
/// disk): 4.2× the 24 MiB budget below, small enough to write in a fraction of a second.
const VIEWS: usize = 128;
const SIDE: u32 = 512;
const BUDGET: &str = "24M";
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
    via_cli: bool,
}

fn cli_has_bench() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| {
        Command::new(env!("CARGO_BIN_EXE_gs-pack"))
            .args(["bench", "--help"])
            .output()
            .map(|o| {
                o.status.success() && String::from_utf8_lossy(&o.stdout).contains("--ram-budget")
            })
            .unwrap_or(false)
    })
}

fn run_child(pack: &Path, budget: &str, epochs: u64, extra: &Extra) -> ChildRun {
    let needs_library = extra.seed.is_some() || extra.start.is_some() || extra.limit.is_some();
    let via_cli = !needs_library && cli_has_bench();
    let mut cmd = if via_cli {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gs-pack"));
        c.arg("bench").arg(pack).args([
            "--ram-budget",
            budget,
            "--epochs",
            &epochs.to_string(),
            "--workers",
            "2",
        ]);
        c
    } else {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env("RAMSPLAT_CHILD_PACK", pack)
            .env("RAMSPLAT_CHILD_BUDGET", budget)
            .env("RAMSPLAT_CHILD_EPOCHS", epochs.to_string());
        if let Some(s) = extra.seed {
            c.env("RAMSPLAT_CHILD_SEED", s.to_string());
        }
        if let Some(p) = extra.start {
            c.env("RAMSPLAT_CHILD_START", format!("{},{}", p.epoch, p.index));
        }
        if let Some(l) = extra.limit {
            c.env("RAMSPLAT_CHILD_LIMIT", l.to_string());
        }
        c
    };
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
        // The libtest child prints "test child_entry ... " before the line; the CLI prints it
        // alone. Either way the report is the JSON object that ends the line.
        .find_map(|l| l.find('{').and_then(|i| serde_json::from_str(&l[i..]).ok()));
    ChildRun {
        success: status.success(),
        stdout,
        stderr,
        polled_peak,
        report,
        via_cli,
    }
}

impl ChildRun {
    /// The JSON report, or a panic that shows what the child said.
    fn report(self, what: &str) -> Value {
        match self.report {
            Some(r) => r,
            None => panic!(
                "{what}: no JSON line from the child (cli: {}, success: {}):\nstdout:\n{}\nstderr:\n{}",
                self.via_cli, self.success, self.stdout, self.stderr
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

/// Not a test of its own: the body of the re-executed child (does nothing in a normal run).
#[test]
fn child_entry() {
    let Ok(pack_path) = std::env::var("RAMSPLAT_CHILD_PACK") else {
        return;
    };
    let env = |k: &str| std::env::var(k).ok();
    let mut opts = BenchOptions {
        ram_budget: parse_size(&env("RAMSPLAT_CHILD_BUDGET").unwrap()).unwrap(),
        epochs: env("RAMSPLAT_CHILD_EPOCHS").unwrap().parse().unwrap(),
        workers: 2,
        ..Default::default()
    };
    if let Some(s) = env("RAMSPLAT_CHILD_SEED") {
        opts.seed = s.parse().unwrap();
    }
    if let Some(s) = env("RAMSPLAT_CHILD_START") {
        let (e, i) = s.split_once(',').unwrap();
        opts.start = Position {
            epoch: e.parse().unwrap(),
            index: i.parse().unwrap(),
        };
    }
    if let Some(l) = env("RAMSPLAT_CHILD_LIMIT") {
        opts.limit = Some(l.parse().unwrap());
    }
    let pack = std::sync::Arc::new(Pack::open(Path::new(&pack_path)).unwrap());
    match run_bench(pack, &opts, &mut |_, _| {}) {
        Ok(report) => println!("{}", report.to_json_line()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
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
    // Stop after 150 views (inside epoch 1), resume from the reported position.
    let head = run_child(
        &p.path,
        BUDGET,
        epochs,
        &Extra {
            limit: Some(150),
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
            index: 150 - VIEWS as u64
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
    // The CLI's default seed is deterministic too.
    if cli_has_bench() {
        let x = run_child(&p.path, BUDGET, 1, &Extra::default()).report("cli x");
        let y = run_child(&p.path, BUDGET, 1, &Extra::default()).report("cli y");
        assert_eq!(x["sequence_sum"], y["sequence_sum"]);
    }
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
