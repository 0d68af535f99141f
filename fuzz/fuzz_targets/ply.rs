//! Fuzz target for the PLY header parser and row reader: arbitrary bytes must give rows or a
//! typed error, never a panic, a hang or an allocation sized by a declared count.
//!
//! Run: `cargo +nightly fuzz run ply` from the repository root (libFuzzer's default
//! `-rss_limit_mb=2048` turns an over-allocation into a reported crash).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::import::ply::PlyReader;

/// Rows read per element before giving up: bounds the time a tiny input declaring a huge count
/// of zero-size rows can take (every other row consumes input, so input length bounds it).
const MAX_ROWS: usize = 10_000;

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = PlyReader::from_reader(data, "fuzz.ply") else {
        return;
    };
    let names: Vec<String> = reader
        .header()
        .elements
        .iter()
        .map(|e| e.name.clone())
        .collect();
    // The default selection first, then every later element in turn, as a loader would.
    for name in std::iter::once(None).chain(names.iter().map(Some)) {
        if let Some(name) = name {
            if reader.select(name).is_err() {
                continue;
            }
        }
        let Some(element) = reader.element() else {
            return;
        };
        let mut row = vec![0.0f64; element.scalar_count()];
        for _ in 0..MAX_ROWS {
            match reader.read_row(&mut row) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => return,
            }
        }
    }
});
