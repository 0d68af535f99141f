//! Fuzz target for the OBJ importer (`import::obj`): arbitrary bytes as an `.obj` mesh must
//! give a cloud of its vertices or a typed error, never a panic or a hang. An accepted cloud
//! streams exactly the vertices it counted (the validation pass counted them, and bytes in
//! memory cannot change in between), every coordinate finite.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run obj corpus/obj seeds/obj` from `fuzz/` (see
//! fuzz/README.md; libFuzzer's default `-rss_limit_mb=2048` turns an over-allocation into a
//! reported crash).
#![no_main]

#[path = "common/stream.rs"]
mod stream;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::obj::cloud_from_bytes;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let mut warnings = Vec::new();
    let Ok(mut cloud) = cloud_from_bytes(
        data.to_vec(),
        std::path::Path::new("fuzz.obj"),
        "fuzz",
        &ImportOptions::default(),
        &mut warnings,
    ) else {
        return;
    };
    stream::stream_whole(cloud.as_mut());
});
