//! The gsplat side-by-side tools (`tools/gsplat_train.py`, `tools/gsplat_metrics_check.py`,
//! `tools/gpu_bench_table.py`, `tools/gpu-bench.sh`) without a GPU or torch:
//!
//! - the Python files compile (`python3 -m py_compile`) and the shell script parses (`bash -n`);
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
