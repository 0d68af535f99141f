//! Helpers shared by the integration tests (each test file that needs them says `mod common;`).

use std::process::Command;

/// Whether `python3 -c "import MODULES"` works (`modules`: a comma-separated import list).
/// Without it the calling test prints a skip line and should return; under
/// `GS_REQUIRE_REFERENCE=1` (CI, which installs numpy and xxhash) a missing module is a
/// failure instead.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn python_with(test: &str, modules: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let required = std::env::var("GS_REQUIRE_REFERENCE").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{test}: GS_REQUIRE_REFERENCE=1 but `python3 -c \"import {modules}\"` fails; \
             install what is missing (python3 -m pip install numpy xxhash)"
        );
        eprintln!(
            "SKIPPED {test}: python3 with {modules} is not available (set \
             GS_REQUIRE_REFERENCE=1 to make this a failure)"
        );
    }
    ok
}

/// Runs `cmd` to its end with its output captured, killing it and failing the test if it has
/// not exited after 60 s: for the commands given a named pipe, which would wait for a writer
/// forever if they opened it, so a regression fails instead of hanging CI.
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn output_within_60s(cmd: &mut Command) -> std::process::Output {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().expect("kill");
            panic!("{cmd:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Makes a named pipe at `path` (`mkfifo`).
#[allow(dead_code)] // not every test binary that includes this module uses it
pub fn mkfifo(path: &std::path::Path) {
    let ok = Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", path.display());
}
