//! Fuzz target for the compressed PLY reader (PlayCanvas/SuperSplat `*.compressed.ply`):
//! arbitrary bytes must give a model or a typed error, never a panic, a hang or an allocation
//! sized by a declared count the input cannot back. A decoded model is consistent and finite,
//! and re-encodes (the writer accepts what the reader gives).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run compressed_ply` from `fuzz/` (see fuzz/README.md).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use ramsplat::export::{compressed_ply, validate_model};

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = compressed_ply::decode(data, Path::new("fuzz.compressed.ply")) {
        if let Err(e) = validate_model(&g) {
            panic!("a decoded model is inconsistent or not finite: {e}");
        }
        assert!(g.rotations.iter().all(|q| q.iter().any(|&c| c != 0.0)));
        if let Err(e) = compressed_ply::encode(&g) {
            panic!("a decoded model does not re-encode: {e}");
        }
    }
});
