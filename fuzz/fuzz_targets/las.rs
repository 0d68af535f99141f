//! Fuzz target for the LAS/LAZ importer (`import::las`): arbitrary bytes as a `.las`/`.laz`
//! file must give a cloud or a typed error, never a panic that escapes, a hang or an allocation
//! sized by a number in the file (the chunk table's length, a layered chunk's layer sizes, the
//! point count). An accepted cloud streams exactly the points it declared (bytes in memory
//! cannot change between the validation pass and the stream), every coordinate finite.
//!
//! A panic inside the LAZ decoder (its internal assertions on damaged data) is caught by the
//! importer and reported as damage, so it is not a finding here; one anywhere else is.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run las corpus/las seeds/las` from `fuzz/` (see
//! fuzz/README.md; libFuzzer's default `-rss_limit_mb=2048` turns an over-allocation into a
//! reported crash).
#![no_main]

#[path = "common/stream.rs"]
mod stream;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::las::cloud_from_bytes;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let mut warnings = Vec::new();
    let Ok(mut cloud) = cloud_from_bytes(
        data.to_vec(),
        std::path::Path::new("fuzz.laz"),
        "fuzz",
        &ImportOptions::default(),
        &mut warnings,
    ) else {
        return;
    };
    stream::stream_whole(cloud.as_mut());
});
