//! Fuzz target for the SPZ reader: arbitrary bytes (gzip stream or not) must give a model or a
//! typed error, never a panic, a hang or an allocation sized by a declared count that the
//! input cannot back. A decoded model re-encodes (the writer accepts what the reader gives).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run spz` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::export::spz;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = spz::decode(data) {
        assert_eq!(g.means.len(), g.logit_opacities.len());
        let _ = spz::encode(&g);
    }
});
