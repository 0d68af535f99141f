//! Fuzz target for the OpenSfM / OpenDroneMap importer: arbitrary bytes as a
//! `reconstruction.json` into `import::opensfm::from_reader` (metadata only: no image is
//! looked up) must give a scene or an error, never a panic; an accepted scene's cameras are
//! valid and its points finite.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run opensfm corpus/opensfm seeds/opensfm` from `fuzz/`
//! (see fuzz/README.md).
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use ramsplat::import::opensfm::from_reader;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let options = ImportOptions {
        metadata_only: true,
        ..ImportOptions::default()
    };
    let file = Path::new("fuzz/reconstruction.json");
    if let Ok(scene) = from_reader(data, file, PathBuf::from("fuzz"), &options) {
        assert!(!scene.views.is_empty());
        for v in &scene.views {
            v.camera.validate().expect("an accepted camera validates");
            let _ = v.distortion.distort(0.1, -0.2);
        }
    }
});
