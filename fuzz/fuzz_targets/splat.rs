//! Fuzz target for the `.splat` reader: arbitrary bytes must give a model or a typed error
//! (a length that is not a multiple of the 32-byte row, non-finite values), never a panic.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run splat` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::export::splat;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = splat::decode(data, std::path::Path::new("fuzz.splat")) {
        assert_eq!(g.len() * 32, data.len());
        let _ = splat::encode(&g);
    }
});
