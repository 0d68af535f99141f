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
use ramsplat::dataset::{DepthSource, ViewSource};
use ramsplat::import::depth::prepare_depth;
use ramsplat::scene::camera::Pose;
use ramsplat::shard::DepthScale;
use ramsplat::synth::packs::centred_camera;

#[path = "common/side_file.rs"]
mod side_file;
use side_file::SideFile;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let Some(SideFile { dir, path, stored }) =
        side_file::write("depths", "view.png", file, 1 << 18)
    else {
        return;
    };
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
    let depth = DepthSource {
        path: path.clone(),
        scale: DepthScale::IDENTITY,
    };
    let view = ViewSource {
        name: "view.jpg".into(),
        image_path: dir.join("view.jpg"),
        camera: centred_camera(size.0, size.1, Pose::IDENTITY),
        distortion: side_file::lens(mode),
        split: None,
        mask_path: None,
        depth: Some(depth.clone()),
    };
    let resize = side_file::resize(mode);
    if let Ok((w, h, bytes)) = prepare_depth(&view, &depth, image_stored, orientation, resize) {
        assert_eq!((w, h), side_file::packed_size(&view, resize));
        assert_eq!(bytes.len(), 2 * w as usize * h as usize);
    }
});
