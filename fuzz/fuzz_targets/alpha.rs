//! Fuzz target for the alpha path of the importer (`import::image::prepare_view_pixels`):
//! arbitrary bytes as an image file (PNG/JPEG sniffed) must give a view or a typed error,
//! never a panic. An accepted image is prepared at its own size (stored bytes kept: RGB8 or
//! RGBA8 of the right length) and downscaled by 2 (premultiplied resampling of colour and
//! alpha), and the RGBA result is composited over a colour as the trainer does.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run alpha` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::dataset::{Distortion, ViewSource};
use ramsplat::import::image::{image_dimensions, prepare_view_pixels, Resize};
use ramsplat::scene::camera::Pose;
use ramsplat::synth::packs::centred_camera;

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-alpha-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("view.png");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let Ok((w, h)) = image_dimensions(&path) else {
        return;
    };
    // Keep each execution small: the decoder limits already bound the allocation.
    if w as u64 * h as u64 > 1 << 20 {
        return;
    }
    let camera = centred_camera(w, h, Pose::IDENTITY);
    let view = ViewSource {
        name: "view.png".into(),
        image_path: path.clone(),
        camera,
        distortion: Distortion::NONE,
        split: None,
        mask_path: None,
        depth: None,
    };
    for resize in [Resize::None, Resize::Downscale(2)] {
        if let Ok(p) = prepare_view_pixels(&view, resize, false) {
            let want = p.layout.len(p.camera.width, p.camera.height);
            assert_eq!(p.pixels.len(), want);
            if p.layout.alpha {
                let mut rgb = Vec::new();
                ramsplat::train::alpha::composite_rgba8(&p.pixels, [0.25, 0.5, 1.0], &mut rgb);
                assert_eq!(rgb.len(), want / 4 * 3);
            }
        }
    }
});
