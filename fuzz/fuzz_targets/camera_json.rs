//! Fuzz target for the single-camera JSON of `gs-render --camera` (width, height, fx, fy, cx,
//! cy, world_to_camera; unknown fields ignored): `Camera::from_json`, the parser the binary
//! calls, on arbitrary text must give a camera or an error, never a panic.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run camera_json` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::scene::camera::Camera;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(camera) = Camera::from_json(text) {
        // What a valid camera is used for must not panic: its centre, projection, field of view.
        let c = camera.centre();
        let _ = camera.project([c[0], c[1], c[2] + 1.0]);
        let _ = camera.fov();
        let _ = camera.world_to_camera.to_matrix4();
    }
});
