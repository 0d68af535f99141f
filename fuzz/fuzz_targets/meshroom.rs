//! Fuzz target for the Meshroom / AliceVision importer: arbitrary bytes as an SfMData file
//! into `import::meshroom::from_reader` (metadata only: no image is looked up) must give a
//! scene or an error, never a panic; an accepted scene's cameras are valid.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run meshroom corpus/meshroom seeds/meshroom` from `fuzz/`
//! (see fuzz/README.md).
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use ramsplat::import::meshroom::from_reader;
use ramsplat::import::ImportOptions;

fuzz_target!(|data: &[u8]| {
    let options = ImportOptions {
        metadata_only: true,
        ..ImportOptions::default()
    };
    let file = Path::new("fuzz/sfm.json");
    if let Ok(scene) = from_reader(data, file, PathBuf::from("fuzz"), &options) {
        assert!(!scene.views.is_empty());
        for v in &scene.views {
            v.camera.validate().expect("an accepted camera validates");
            let _ = v.distortion.distort(0.1, -0.2);
        }
    }
});
