//! Fuzz target for the RealityCapture importer: arbitrary bytes as an XMP file into
//! `import::realitycapture::parse_xmp`, and an accepted camera at a photo size taken from the
//! input, must give a camera or an error, never a panic; an accepted camera validates and its
//! lens evaluates.
//!
//! The photo size: the input's first four bytes (two little-endian u16, each at least 1) when
//! it starts with a NUL byte followed by them; otherwise 4000×3000. The XMP text is the rest.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run realitycapture corpus/realitycapture
//! seeds/realitycapture` from `fuzz/` (see fuzz/README.md).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::realitycapture::{parse_xmp, Xmp};

fuzz_target!(|data: &[u8]| {
    let (size, text) = match data {
        [0, a, b, c, d, rest @ ..] => (
            (
                u32::from(u16::from_le_bytes([*a, *b]).max(1)),
                u32::from(u16::from_le_bytes([*c, *d]).max(1)),
            ),
            rest,
        ),
        _ => ((4000, 3000), data),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(Xmp::Camera(xmp)) = parse_xmp(text, Path::new("fuzz/a.xmp")) {
        assert!(xmp.focal_35mm > 0.0 && xmp.aspect_ratio > 0.0);
        if let Ok(camera) = xmp.camera(size.0, size.1) {
            camera.validate().expect("an accepted camera validates");
            let _ = xmp.distortion.distort(0.1, -0.2);
        }
    }
});
