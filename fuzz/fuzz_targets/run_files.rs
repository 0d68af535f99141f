//! Fuzz target for the small JSON files a run's tools read back: `depth_params.json`
//! (`import::depth::DepthParams::read`, what `gs-pack convert --depths` reads beside the maps),
//! `exposure.json` (`train::exposure::from_json`, what `gs-render --exposure` reads) and
//! `bilateral_grids.json` with the `.npy` array it names (`train::bilagrid_file::read`, what
//! `gs-render --bilateral-grids` reads). None may panic; what each accepts must be usable.
//!
//! The first byte picks the file (its value mod 3, in the order above); the rest is the file.
//! For the grids, the rest before its first NUL byte is the JSON and the bytes after it the
//! array, written as `bilateral_grids.npy` beside it (the name the JSON is expected to give).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run run_files corpus/run_files seeds/run_files` from
//! `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::import::depth::{DepthParams, Fit};
use ramsplat::train::bilagrid_file::{self, GRIDS_JSON, GRIDS_NPY};
use ramsplat::train::exposure;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-run_files-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    match mode % 3 {
        0 => {
            let path = dir.join("depth_params.json");
            if std::fs::write(&path, rest).is_err() {
                return;
            }
            if let Ok(params) = DepthParams::read(&path) {
                let m = params.median_scale;
                assert!(m.is_finite() && m > 0.0, "median scale {m}");
                // The keys are the file's; probing a few exercises the lookup.
                for key in ["a", "00000", ""] {
                    if let Some(Fit::Reliable(d)) = params.fit(key) {
                        assert!(d.scale.is_finite() && d.offset.is_finite());
                    }
                }
            }
        }
        1 => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(list) = exposure::from_json(text) {
                for (_, matrix) in &list {
                    assert!(matrix.iter().all(|v| v.is_finite()));
                }
            }
        }
        _ => {
            let (json, npy) = match rest.iter().position(|&b| b == 0) {
                Some(at) => (&rest[..at], &rest[at + 1..]),
                None => (rest, &[][..]),
            };
            let path = dir.join(GRIDS_JSON);
            if std::fs::write(&path, json).is_err() || std::fs::write(dir.join(GRIDS_NPY), npy).is_err()
            {
                return;
            }
            if let Ok(grids) = bilagrid_file::read(&path) {
                assert!(grids.shape.invalid().is_none());
                for grid in grids.by_key.values() {
                    assert_eq!(grid.len(), grids.shape.floats());
                    assert!(grid.iter().all(|v| v.is_finite()));
                }
            }
        }
    }
});
