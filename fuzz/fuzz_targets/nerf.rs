//! Fuzz target for the NeRF / instant-ngp / nerfstudio importer: arbitrary bytes as a
//! `transforms.json` into `import::nerf::import` (metadata only: no image needs to exist) must
//! give a scene or an error, never a panic; an accepted scene's cameras are valid.
//!
//! The importer reads a path, so each input is written to `transforms.json` in a folder of
//! this process's own that holds nothing else: a `file_path`, `mask_path` or `ply_file_path`
//! in the input finds no file there (`common/dataset_file.rs`).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run nerf corpus/nerf seeds/nerf` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common/dataset_file.rs"]
mod dataset_file;

fuzz_target!(|data: &[u8]| {
    dataset_file::import_written(
        "nerf",
        "transforms.json",
        data,
        ramsplat::import::nerf::import,
    );
});
