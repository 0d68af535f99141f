//! Fuzz target for the COLMAP sparse-model parsers: every input is fed to the cameras, images
//! and points3D parsers in both encodings, the last with and without reading tracks (as
//! `--sfm-depths` does). The parsers must return `Ok` or a typed error, never panic, hang, or
//! allocate from a count found in the input (libFuzzer's `-rss_limit_mb` catches the last). Run with `RUSTC_BOOTSTRAP=1 cargo fuzz run colmap` from the repository root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::import::colmap::{
    parse_cameras_bytes, parse_images_bytes, parse_points_bytes, parse_tracks_bytes, Encoding,
};

fuzz_target!(|data: &[u8]| {
    for encoding in [Encoding::Binary, Encoding::Text] {
        let _ = parse_cameras_bytes(data, encoding);
        let _ = parse_images_bytes(data, encoding);
        let _ = parse_points_bytes(data, encoding);
        let _ = parse_tracks_bytes(data, encoding);
    }
});
