//! The gsplat side-by-side tools (`tools/gsplat_train.py`, `tools/gsplat_metrics_check.py`,
//! `tools/gpu_bench_table.py`, `tools/gpu-bench.sh`) without a GPU or torch:
//!
//! - the Python files compile (`python3 -m py_compile`) and the shell scripts parse (`bash -n`);
//!   `gpu-bundle.sh` refuses to replace a directory it did not make;
//! - the scoring `gsplat_train.py` applies to gsplat's renders equals ramsplat's: a model
//!   trained briefly on a synthetic pack is rendered by `gs-render --pack --split test`, and
//!   `gsplat_metrics_check.py` re-scores every side-by-side image with the numpy code and
//!   compares with `metrics.json` (PSNR within 1e-4 dB, SSIM within 1e-5).
//!
//! Needs `python3` (and numpy for the second part). Without them the test prints a skip line
//! and passes, unless `GS_REQUIRE_REFERENCE=1` (CI installs numpy and sets it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command starts");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn tools_compile_and_parse() {
    if !common::python_with("tools_compile_and_parse", "py_compile") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "gsplat_train.py",
        "gsplat_metrics_check.py",
        "gpu_bench_table.py",
    ] {
        let src = root().join("tools").join(f);
        // Compiled to a temporary file, so no __pycache__ appears in the checkout.
        let code =
            "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)";
        run(Command::new("python3").args([
            "-c".as_ref(),
            code.as_ref(),
            src.as_os_str(),
            dir.path().join(format!("{f}c")).as_os_str(),
        ]));
    }
    for f in ["gpu-bench.sh", "gpu-bundle.sh", "gpu-verify.sh"] {
        run(Command::new("bash")
            .arg("-n")
            .arg(root().join("tools").join(f)));
    }
}

/// `tools/gpu-bundle.sh DIR` replaces DIR whole, so it refuses a directory it did not make
/// (`tools/gpu-bundle.sh .` would have deleted the checkout), before it builds anything.
#[test]
fn gpu_bundle_replaces_only_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let out = Command::new("bash")
        .arg(root().join("tools/gpu-bundle.sh"))
        .arg(dir.path())
        .output()
        .expect("bash starts");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not a bundle this script made") && err.contains(".gs-gpu-bundle"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("notes.txt")).unwrap(),
        b"mine"
    );
}

fn synth_pack(dir: &Path) -> PathBuf {
    let pack = dir.join("s.pack");
    run(Command::new(env!("CARGO_BIN_EXE_gs-pack")).args([
        "synth".as_ref(),
        "-o".as_ref(),
        dir.join("s").as_os_str(),
        "--views".as_ref(),
        "18".as_ref(),
        "--width".as_ref(),
        "96".as_ref(),
        "--height".as_ref(),
        "72".as_ref(),
        "--points".as_ref(),
        "800".as_ref(),
        "--seed".as_ref(),
        "4".as_ref(),
    ]));
    run(Command::new(env!("CARGO_BIN_EXE_gs-pack")).args([
        "convert".as_ref(),
        dir.join("s").as_os_str(),
        "-o".as_ref(),
        pack.as_os_str(),
        "--test-every".as_ref(),
        "6".as_ref(),
    ]));
    pack
}

#[test]
fn numpy_scoring_equals_gs_render() {
    if !common::python_with("numpy_scoring_equals_gs_render", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = synth_pack(dir.path());
    let model = dir.path().join("model");
    run(Command::new(env!("CARGO_BIN_EXE_gs-train")).args([
        pack.as_os_str(),
        "-o".as_ref(),
        model.as_os_str(),
        "--iterations".as_ref(),
        "60".as_ref(),
        "--backend".as_ref(),
        "cpu".as_ref(),
        "--seed".as_ref(),
        "2".as_ref(),
        "--sh-degree".as_ref(),
        "1".as_ref(),
    ]));
    let renders = dir.path().join("r");
    run(Command::new(env!("CARGO_BIN_EXE_gs-render")).args([
        "--ply".as_ref(),
        model
            .join("point_cloud/iteration_60/point_cloud.ply")
            .as_os_str(),
        "--pack".as_ref(),
        pack.as_os_str(),
        "--split".as_ref(),
        "test".as_ref(),
        "-o".as_ref(),
        renders.as_os_str(),
    ]));
    let text = run(Command::new("python3")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(root().join("tools/gsplat_metrics_check.py"))
        .arg(&renders));
    eprintln!("{text}");
    assert!(text.contains("3 views; means"), "{text}");
}

/// The profiled windows of both trainers reach `gpu_bench_table.py`'s table, one row per
/// window in iteration order, with the model's size and the intersections then: ours from a
/// real `gs-train --profile-at` report, gsplat's from `gsplat_train.py`'s own `PhaseTimer`
/// (host clocks, no torch) driven through the phases of its loop.
#[test]
fn profile_windows_reach_the_side_by_side_table() {
    if !common::python_with("profile_windows_reach_the_side_by_side_table", "numpy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pack = synth_pack(dir.path());
    let run_dir = dir.path().join("ours");
    let log = run(Command::new(env!("CARGO_BIN_EXE_gs-train"))
        .arg(&pack)
        .arg("-o")
        .arg(&run_dir)
        .args(["--iterations", "40", "--backend", "cpu", "--sh-degree", "1"])
        .args(["--checkpoint-every", "0", "--profile-steps", "4"])
        .args(["--profile-at", "3", "30"]));
    assert!(
        log.contains("4 steps from iteration 30, host clock; "),
        "{log}"
    );
    let out = dir.path().join("bench");
    std::fs::create_dir_all(out.join("fox-ours.segments")).unwrap();
    std::fs::copy(
        run_dir.join("report.json"),
        out.join("fox-ours.segments/0.json"),
    )
    .unwrap();
    // gsplat's side: the harness's timer over 40 steps of its phases, windows from iterations
    // 3 and 30; the step's size is 100 + step Gaussians and 1000 + step intersections.
    let code = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from gsplat_train import PhaseTimer
t = PhaseTimer(False, [2, 29], 4)
for step in range(40):
    for name in ("start", "upload", "render", "loss", "backward", "optimizer", "strategy"):
        t.mark(step, name)
    t.size(step, 100 + step, 1000 + step)
report = {"iterations": 40, "iterations_per_s": 10.0, "train_s": 4.0, "wall_s": 5.0,
          "segments": 1, "test_psnr": 20.0, "test_ssim": 0.5, "test_views": 3,
          "num_gaussians": 139, "peak_rss_bytes": 1 << 30, "peak_device_bytes": None,
          "backend": "gsplat (timer only)", "seed": 1, "jit_compile_s": None,
          "ssim_loss": "none", "device_name": "cpu", "phase_ms": t.medians()}
json.dump(report, open(sys.argv[2], "w"))
"#;
    run(Command::new("python3")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-c", code])
        .arg(root().join("tools"))
        .arg(out.join("fox-gsplat.json")));
    // The harness refuses windows gs-train refuses, before it needs torch.
    let bad = Command::new("python3")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(root().join("tools/gsplat_train.py"))
        .args([
            "data",
            "out",
            "--profile-steps",
            "10",
            "--profile-at",
            "20",
            "25",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--profile-at [20, 25]: each window"),
        "{bad:?}"
    );
    let table = run(Command::new("python3")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .arg(root().join("tools/gpu_bench_table.py"))
        .arg(&out));
    eprintln!("{table}");
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("| 3 |") || l.starts_with("| 30 |"))
        .collect();
    assert_eq!(rows.len(), 4, "{table}");
    // gsplat's windows: steps 2-5 and 29-32, medians of their sizes (int of 103.5 and 1003.5).
    assert!(
        rows[0].starts_with("| 3 | gsplat | 4 | 103 | 1,003 | "),
        "{table}"
    );
    assert!(
        rows[2].starts_with("| 30 | gsplat | 4 | 130 | 1,030 | "),
        "{table}"
    );
    // Ours: the report's windows, with the CPU engine's sizes and its rasterizer's stages.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("report.json")).unwrap())
            .unwrap();
    for (row, w) in [rows[1], rows[3]]
        .iter()
        .zip(report["phase_ms"].as_array().unwrap())
    {
        let want = format!(
            "| {} | ramsplat | 4 | {} | ",
            w["from_iteration"], w["num_gaussians"]
        );
        assert!(row.starts_with(&want), "{row} vs {want}");
        let cells: Vec<&str> = row.trim_end_matches(" |").split(" | ").collect();
        let stages = &cells[cells.len() - 5..];
        for (name, cell) in [
            "project",
            "binning",
            "rasterize",
            "rasterize_bwd",
            "project_bwd",
        ]
        .iter()
        .zip(stages)
        {
            let ms: f64 = cell
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}: {cell:?} in {row}"));
            assert!(ms >= 0.0, "{row}");
        }
    }
}
