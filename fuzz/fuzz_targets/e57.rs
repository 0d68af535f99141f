//! Fuzz target for the E57 importer (`import::e57`): arbitrary bytes as an `.e57` file must give
//! a cloud or a typed error, never a panic that escapes, a hang or an allocation sized by a
//! number in the file (a point count, an XML length, a packet's bytestream sizes, bytestreams
//! out of step). An accepted cloud streams exactly the points it declared, every coordinate
//! finite.
//!
//! E57 checks a CRC-32C on every 1024-byte page, which almost every mutation breaks, so the
//! target first gives every whole page a fresh checksum (the first input byte chooses: odd
//! keeps the bytes as they are, to fuzz the checksum path too): mutations then reach the XML,
//! the section headers, the packets and the bit unpacking.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run e57 corpus/e57 seeds/e57` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

#[path = "common/stream.rs"]
mod stream;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::e57::cloud_from_bytes;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 0 {
        for page in bytes.chunks_exact_mut(1024) {
            let crc = crc32c::crc32c(&page[..1020]);
            page[1020..].copy_from_slice(&crc.to_be_bytes());
        }
    }
    let mut warnings = Vec::new();
    let Ok(mut cloud) = cloud_from_bytes(
        bytes,
        std::path::Path::new("fuzz.e57"),
        "fuzz",
        &ImportOptions::default(),
        &mut warnings,
    ) else {
        return;
    };
    stream::stream_whole(cloud.as_mut());
});
