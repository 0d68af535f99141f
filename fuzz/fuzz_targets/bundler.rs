//! Fuzz target for the Bundler importer: arbitrary bytes as a `bundle.out` file into
//! `import::bundler::from_reader`, with the photos' sizes answered without files, must give a
//! scene or an error, never a panic; an accepted scene's cameras are valid and it has a view.
//!
//! The image list: the input's bytes before its first NUL byte, when it has one (the bundle
//! file is the rest); otherwise one line per camera the header declares (`img0.jpg`, …, at most
//! 4096), so that mutations of the bundle file reach its cameras and points. The photo of a
//! name whose hash is divisible by 7 is absent; the others' sizes come from the hash too.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run bundler corpus/bundler seeds/bundler` from `fuzz/`
//! (see fuzz/README.md).
#![no_main]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use ramsplat::import::bundler::from_reader;
use ramsplat::import::ImportOptions;

/// One line per camera of the header (the first line that is not blank or a comment), when
/// it starts with a count of at most 4096.
fn list_for(bundle: &[u8]) -> String {
    let text = String::from_utf8_lossy(bundle);
    let cameras = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|w| w.parse::<usize>().ok())
        .filter(|&n| n <= 4096)
        .unwrap_or(0);
    (0..cameras).map(|i| format!("img{i}.jpg\n")).collect()
}

fuzz_target!(|data: &[u8]| {
    let (list, bundle) = match data.iter().position(|&b| b == 0) {
        Some(at) => (
            String::from_utf8_lossy(&data[..at]).into_owned(),
            &data[at + 1..],
        ),
        None => (list_for(data), data),
    };
    let photo = |path: &Path, _: &str| {
        let mut h = DefaultHasher::new();
        path.hash(&mut h);
        let h = h.finish();
        Ok((h % 7 != 0).then_some((1 + (h >> 8) as u32 % 4096, 1 + (h >> 20) as u32 % 4096)))
    };
    let options = ImportOptions::default();
    let (file, list_file) = (Path::new("fuzz/bundle.out"), Path::new("fuzz/list.txt"));
    if let Ok(scene) = from_reader(bundle, file, &list, list_file, &options, photo) {
        assert!(!scene.views.is_empty());
        assert_eq!(scene.clouds.len(), usize::from(!scene.no_sfm_points));
        for v in &scene.views {
            v.camera.validate().expect("an accepted camera validates");
            let _ = v.distortion.distort(0.1, -0.2);
        }
    }
});
