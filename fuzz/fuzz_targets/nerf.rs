//! Fuzz target for the NeRF / instant-ngp / nerfstudio importer: arbitrary bytes as a
//! `transforms.json` into `import::nerf::import` (metadata only: no image needs to exist) must
//! give a scene or an error, never a panic; an accepted scene's cameras are valid and its
//! lenses distort finitely near the axis.
//!
//! The importer reads a path, so each input is written to `transforms.json` in a folder of
//! this process's own under the system's temporary directory, which holds nothing else: a
//! `file_path`, `mask_path` or `ply_file_path` in the input finds no file there.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run nerf corpus/nerf seeds/nerf` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::nerf::import;
use ramsplat::import::ImportOptions;

fn file() -> &'static PathBuf {
    static F: OnceLock<PathBuf> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-nerf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("fuzz folder");
        dir.join("transforms.json")
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
