//! Fuzz target for loss masks (`import::image::prepare_mask`, what `gs-pack` runs on a
//! COLMAP `masks/` file or a nerfstudio `mask_path`): arbitrary bytes as the mask file must
//! give a mask or a typed error, never a panic. The first byte picks how the mask's image is
//! placed: stored order with no orientation, stored order rotated by EXIF (the camera has the
//! swapped size), or a camera of an unrelated size (the size error); with or without
//! distortion (undistortion) and at native size or halved (downscaling). An accepted mask has
//! a byte per pixel of the packed view (the window of the undistorted image that the lens
//! covers, resized), each 0 or 255, at least one 0.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run masks` from `fuzz/` (see fuzz/README.md).
#![no_main]

use image::metadata::Orientation;
use libfuzzer_sys::fuzz_target;
use ramsplat::dataset::{Distortion, ViewSource};
use ramsplat::import::image::{covered_rect, prepare_mask, target_size, Resize};
use ramsplat::scene::camera::Pose;
use ramsplat::synth::packs::centred_camera;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-masks-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("mask.png");
    if std::fs::write(&path, file).is_err() {
        return;
    }
    // The mask's stored size, when its header is readable (otherwise prepare_mask must fail).
    let stored = image::ImageReader::open(&path)
        .ok()
        .and_then(|r| r.with_guessed_format().ok())
        .and_then(|r| r.into_dimensions().ok())
        .unwrap_or((16, 12));
    // Keep each execution small: the decoder limits already bound the allocation.
    if stored.0 as u64 * stored.1 as u64 > 1 << 20 {
        return;
    }
    let (size, orientation) = match mode % 3 {
        0 => (stored, Orientation::NoTransforms),
        1 => ((stored.1, stored.0), Orientation::Rotate90),
        _ => ((stored.0 + 1, stored.1), Orientation::NoTransforms),
    };
    let (w, h) = size;
    let camera = centred_camera(w, h, Pose::IDENTITY);
    let distortion = if mode & 4 != 0 {
        Distortion::RadialTangential {
            k: [0.05, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0; 2],
        }
    } else {
        Distortion::NONE
    };
    let view = ViewSource {
        name: "view.png".into(),
        image_path: dir.join("view.png"),
        camera,
        distortion,
        split: None,
        mask_path: Some(path.clone()),
        depth: None,
    };
    let resize = if mode & 8 != 0 {
        Resize::Downscale(2)
    } else {
        Resize::None
    };
    if let Ok(Some(mask)) = prepare_mask(&view, &path, stored, orientation, resize) {
        let (tw, th) = packed_size(&view, resize);
        assert_eq!(mask.len(), tw as usize * th as usize);
        assert!(mask.iter().all(|&m| m == 0 || m == 255));
        assert!(mask.contains(&0));
    }
});

/// The size the view's image is packed at: the window of its undistorted image that the lens
/// covers (the whole image without distortion), then resized.
fn packed_size(view: &ViewSource, resize: Resize) -> (u32, u32) {
    let c = &view.camera;
    let rect = covered_rect(
        c.width,
        c.height,
        &c.intrinsics,
        &view.distortion,
        c.projection,
    );
    target_size(rect.width(), rect.height(), resize)
}
