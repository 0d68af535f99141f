//! Fuzz target for the Agisoft Metashape importer: arbitrary bytes as a camera XML
//! (`cameras.xml`) into `import::metashape::import` (metadata only: no image needs to exist)
//! must give a scene or an error, never a panic; an accepted scene's cameras are valid.
//!
//! The importer reads a path, so each input is written to `cameras.xml` in a folder of this
//! process's own under the system's temporary directory, which holds nothing else (no
//! `points.ply`, no images).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run metashape corpus/metashape seeds/metashape` from
//! `fuzz/` (see fuzz/README.md).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::metashape::import;
use ramsplat::import::ImportOptions;

fn file() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("ramsplat-fuzz-metashape-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        dir.join("cameras.xml")
    })
}

fuzz_target!(|data: &[u8]| {
    let options = ImportOptions {
        metadata_only: true,
        ..ImportOptions::default()
    };
    let file = file();
    std::fs::write(file, data).expect("write the input");
    if let Ok(scene) = import(file, &options) {
        assert!(!scene.views.is_empty());
        for v in &scene.views {
            v.camera.validate().expect("an accepted camera validates");
            let _ = v.distortion.distort(0.1, -0.2);
        }
    }
});
