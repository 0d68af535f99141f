//! Fuzz target for monocular depth maps (`import::depth::prepare_depth`, what `gs-pack convert
//! --depths DIR` runs on each view's `DIR/<name>.png`): arbitrary bytes as the map file must
//! give the view's inverse-depth plane or a typed error, never a panic. The first byte picks
//! how the map is placed: against an image of its own size, a rotated image (EXIF; the camera
//! has the swapped size), an image twice its size (a depth estimator's smaller output,
//! upsampled), or an image of an unrelated shape (the shape error); with or without
//! distortion (undistortion) and at native size or halved (downscaling). An accepted plane has
//! two bytes per pixel of the packed view (the window of the undistorted image that the lens
//! covers, resized).
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run depths corpus/depths seeds/depths` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use image::metadata::Orientation;
use libfuzzer_sys::fuzz_target;
use ramsplat::dataset::{DepthSource, Distortion, ViewSource};
use ramsplat::import::depth::prepare_depth;
use ramsplat::import::image::{covered_rect, target_size, Resize};
use ramsplat::scene::camera::Pose;
use ramsplat::shard::DepthScale;
use ramsplat::synth::packs::centred_camera;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("ramsplat-fuzz-depths-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("view.png");
    if std::fs::write(&path, file).is_err() {
        return;
    }
    // The map's stored size, when its header is readable (otherwise prepare_depth must fail).
    let stored = image::ImageReader::open(&path)
        .ok()
        .and_then(|r| r.with_guessed_format().ok())
        .and_then(|r| r.into_dimensions().ok())
        .unwrap_or((16, 12));
    // Keep each execution small: the decoder limits already bound the allocation.
    if stored.0 as u64 * stored.1 as u64 > 1 << 18 {
        return;
    }
    // The image's stored size and orientation, and the camera's (oriented) size.
    let (image_stored, orientation, size) = match mode % 4 {
        0 => (stored, Orientation::NoTransforms, stored),
        1 => (
            (stored.1, stored.0),
            Orientation::Rotate90,
            (stored.0, stored.1),
        ),
        2 => {
            let big = (stored.0 * 2, stored.1 * 2);
            (big, Orientation::NoTransforms, big)
        }
        _ => {
            let odd = (stored.0 + 3, stored.1);
            (odd, Orientation::NoTransforms, odd)
        }
    };
    let camera = centred_camera(size.0, size.1, Pose::IDENTITY);
    let distortion = if mode & 4 != 0 {
        Distortion::RadialTangential {
            k: [0.05, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0; 2],
        }
    } else {
        Distortion::NONE
    };
    let depth = DepthSource {
        path: path.clone(),
        scale: DepthScale::IDENTITY,
    };
    let view = ViewSource {
        name: "view.jpg".into(),
        image_path: dir.join("view.jpg"),
        camera,
        distortion,
        split: None,
        mask_path: None,
        depth: Some(depth.clone()),
    };
    let resize = if mode & 8 != 0 {
        Resize::Downscale(2)
    } else {
        Resize::None
    };
    if let Ok((w, h, bytes)) = prepare_depth(&view, &depth, image_stored, orientation, resize) {
        assert_eq!((w, h), packed_size(&view, resize));
        assert_eq!(bytes.len(), 2 * w as usize * h as usize);
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
