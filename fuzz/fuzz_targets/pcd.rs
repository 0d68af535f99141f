//! Fuzz target for the PCD importer (`import::pcd`): arbitrary bytes as a `.pcd` file must give
//! a cloud or a typed error, never a panic, a hang or an allocation sized by a declared count.
//! An accepted cloud streams exactly the points it declared (the validation pass counted them,
//! and bytes in memory cannot change in between), every coordinate finite.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run pcd corpus/pcd seeds/pcd` from `fuzz/` (see
//! fuzz/README.md; libFuzzer's default `-rss_limit_mb=2048` turns an over-allocation into a
//! reported crash).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::import::pcd::cloud_from_bytes;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let mut warnings = Vec::new();
    let Ok(mut cloud) = cloud_from_bytes(
        data.to_vec(),
        std::path::Path::new("fuzz.pcd"),
        "fuzz",
        &ImportOptions::default(),
        &mut warnings,
    ) else {
        return;
    };
    let mut streamed = 0u64;
    loop {
        match cloud.next_chunk(1000) {
            Ok(Some(c)) => {
                assert!(!c.is_empty() && c.len() <= 1000 && c.is_consistent());
                assert_eq!(c.labels.is_some(), cloud.has_labels());
                assert_eq!(c.normals.is_some(), cloud.has_normals());
                assert!(c.xyz.iter().flatten().all(|v| v.is_finite()));
                streamed += c.len() as u64;
            }
            Ok(None) => break,
            Err(e) => panic!("a validated in-memory cloud failed to stream: {e}"),
        }
    }
    assert_eq!(Some(streamed), cloud.declared_len());
});
