//! Fuzz target for the Agisoft Metashape importer: arbitrary bytes as a camera XML
//! (`cameras.xml`) into `import::metashape::import` (metadata only: no image needs to exist)
//! must give a scene or an error, never a panic; an accepted scene's cameras are valid.
//!
//! The importer reads a path, so each input is written to `cameras.xml` in a folder of this
//! process's own that holds nothing else (no `points.ply`, no images;
//! `common/dataset_file.rs`).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run metashape corpus/metashape seeds/metashape` from
//! `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/dataset_file.rs"]
mod dataset_file;

fuzz_target!(|data: &[u8]| {
    dataset_file::import_written(
        "metashape",
        "cameras.xml",
        data,
        ramsplat::import::metashape::import,
    );
});
