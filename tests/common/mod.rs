//! Helpers shared by the integration tests (each test file that needs them says `mod common;`).

use std::process::Command;

/// Whether `python3 -c "import MODULES"` works (`modules`: a comma-separated import list).
/// Without it the calling test prints a skip line and should return; under
/// `GS_REQUIRE_REFERENCE=1` (CI, which installs numpy and xxhash) a missing module is a
/// failure instead.
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
