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
use ramsplat::dataset::ViewSource;
use ramsplat::import::image::prepare_mask;
use ramsplat::scene::camera::Pose;
use ramsplat::synth::packs::centred_camera;

#[path = "common/side_file.rs"]
mod side_file;
use side_file::SideFile;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, file)) = data.split_first() else {
        return;
    };
    let Some(SideFile { dir, path, stored }) = side_file::write("masks", "mask.png", file, 1 << 20)
    else {
        return;
    };
    let (size, orientation) = match mode % 3 {
        0 => (stored, Orientation::NoTransforms),
        1 => ((stored.1, stored.0), Orientation::Rotate90),
        _ => ((stored.0 + 1, stored.1), Orientation::NoTransforms),
    };
    let view = ViewSource {
        name: "view.png".into(),
        image_path: dir.join("view.png"),
        camera: centred_camera(size.0, size.1, Pose::IDENTITY),
        distortion: side_file::lens(mode),
        split: None,
        mask_path: Some(path.clone()),
        depth: None,
    };
    let resize = side_file::resize(mode);
    if let Ok(Some(mask)) = prepare_mask(&view, &path, stored, orientation, resize) {
        let (tw, th) = side_file::packed_size(&view, resize);
        assert_eq!(mask.len(), tw as usize * th as usize);
        assert!(mask.iter().all(|&m| m == 0 || m == 255));
        assert!(mask.contains(&0));
    }
});
