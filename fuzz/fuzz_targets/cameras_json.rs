//! Fuzz target for the 3DGS `cameras.json` list parser (`gs-render --cameras`): arbitrary
//! text must give cameras or a typed error, never a panic; every camera it accepts validates.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run cameras_json` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::export::cameras_json;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(list) = cameras_json::parse(text) {
        for (entry, camera) in &list {
            assert!(
                camera.validate().is_ok(),
                "accepted an invalid camera: {entry:?}"
            );
            // Writing back what was read must not panic either.
            let _ = cameras_json::to_string(std::slice::from_ref(entry));
        }
    }
});
