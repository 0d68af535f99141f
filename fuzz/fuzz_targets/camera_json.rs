//! Fuzz target for the single-camera JSON of `gs-render --camera` (width, height, fx, fy, cx,
//! cy, world_to_camera; unknown fields ignored): the same steps as the binary's reader —
//! serde into the documented fields, `Pose::from_matrix4`, `Camera::validate` — on arbitrary
//! text must give a camera or an error, never a panic.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run camera_json` from `fuzz/` (see fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::scene::camera::{Camera, Intrinsics, Pose};

/// The fields `gs-render --camera` reads (src/bin/gs-render.rs `CameraJson`).
#[derive(serde::Deserialize)]
struct CameraJson {
    width: u32,
    height: u32,
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
    world_to_camera: [[f64; 4]; 4],
}

fuzz_target!(|data: &[u8]| {
    let Ok(j) = serde_json::from_slice::<CameraJson>(data) else {
        return;
    };
    let Ok(pose) = Pose::from_matrix4(j.world_to_camera) else {
        return;
    };
    let camera = Camera {
        width: j.width,
        height: j.height,
        intrinsics: Intrinsics {
            fx: j.fx,
            fy: j.fy,
            cx: j.cx,
            cy: j.cy,
        },
        world_to_camera: pose,
    };
    if camera.validate().is_ok() {
        // What a valid camera is used for must not panic: its centre, projection, field of view.
        let c = camera.centre();
        let _ = camera.project([c[0], c[1], c[2] + 1.0]);
        let _ = camera.fov();
        let _ = camera.world_to_camera.to_matrix4();
    }
});
