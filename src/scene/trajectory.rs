//! Smooth camera paths through key cameras: the fly-through a trained model is usually shown
//! with (`gs-render --trajectory N`, gsplat's `render_traj`, nerfstudio's camera paths).
//!
//! [`interpolate`] places `frames` cameras along the keys in their order, evenly in the key
//! index: frame `f` sits at `u = f·(K − 1)/(frames − 1)` between key `⌊u⌋` and the next.
//! Camera centres follow a uniform Catmull–Rom spline through the key centres (it passes
//! through every key and its direction is continuous at them; the end keys are repeated as
//! their own outer neighbours), orientations a spherical linear interpolation between the two
//! keys' quaternions (the shorter way round), and the intrinsics linearly. Every frame has the
//! first key's image size; the other keys' intrinsics are rescaled to it first
//! ([`Camera::resized`]), so keys from images of another size keep their field of view.
//!
//! Invariants: the first and the last frame are the first and the last key (to rounding);
//! every frame's rotation is a proper rotation (it comes from a unit quaternion), so each
//! frame passes [`Camera::validate`] when the keys do.

use super::camera::{Camera, CameraError, Intrinsics, Pose};
use super::maths::{quat_to_rot, rotation_to_quaternion_wxyz};

/// Why a path could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TrajectoryError {
    #[error("a path needs at least 2 key cameras, got {0}")]
    TooFewKeys(usize),
    #[error("a path needs at least 2 frames, got {0}")]
    TooFewFrames(usize),
    #[error("key camera {index}: {source}")]
    BadKey {
        index: usize,
        #[source]
        source: CameraError,
    },
}

/// `frames` cameras along `keys` (see the module doc).
pub fn interpolate(keys: &[Camera], frames: usize) -> Result<Vec<Camera>, TrajectoryError> {
    if keys.len() < 2 {
        return Err(TrajectoryError::TooFewKeys(keys.len()));
    }
    if frames < 2 {
        return Err(TrajectoryError::TooFewFrames(frames));
    }
    for (index, k) in keys.iter().enumerate() {
        k.validate()
            .map_err(|source| TrajectoryError::BadKey { index, source })?;
    }
    let (width, height) = (keys[0].width, keys[0].height);
    let keys: Vec<Camera> = keys.iter().map(|k| k.resized(width, height)).collect();
    let centres: Vec<[f64; 3]> = keys.iter().map(Camera::centre).collect();
    // Camera-to-world quaternions, each flipped to the hemisphere of the previous one so
    // every slerp takes the shorter way.
    let mut quats: Vec<[f64; 4]> = keys
        .iter()
        .map(|k| rotation_to_quaternion_wxyz(&transpose(&k.world_to_camera.rotation)))
        .collect();
    for i in 1..quats.len() {
        if dot4(quats[i - 1], quats[i]) < 0.0 {
            quats[i] = quats[i].map(|v| -v);
        }
    }
    let last = keys.len() - 1;
    let mut out = Vec::with_capacity(frames);
    for f in 0..frames {
        let u = f as f64 * last as f64 / (frames - 1) as f64;
        // The last frame is the last key exactly (segment `last − 1` at t = 1).
        let i = (u.floor() as usize).min(last - 1);
        let t = u - i as f64;
        let p = |j: isize| centres[j.clamp(0, last as isize) as usize];
        let j = i as isize;
        let centre = catmull_rom(p(j - 1), p(j), p(j + 1), p(j + 2), t);
        let q = slerp(quats[i], quats[i + 1], t);
        let c2w = quat_to_rot(q);
        let (a, b) = (keys[i].intrinsics, keys[i + 1].intrinsics);
        let lerp = |x: f64, y: f64| x + (y - x) * t;
        out.push(Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: lerp(a.fx, b.fx),
                fy: lerp(a.fy, b.fy),
                cx: lerp(a.cx, b.cx),
                cy: lerp(a.cy, b.cy),
            },
            world_to_camera: Pose::from_camera_to_world(c2w, centre),
        });
    }
    Ok(out)
}

fn transpose(m: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    std::array::from_fn(|r| std::array::from_fn(|c| m[c][r]))
}

fn dot4(a: [f64; 4], b: [f64; 4]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3]
}

/// Uniform Catmull–Rom between `p1` (t = 0) and `p2` (t = 1).
fn catmull_rom(p0: [f64; 3], p1: [f64; 3], p2: [f64; 3], p3: [f64; 3], t: f64) -> [f64; 3] {
    let (t2, t3) = (t * t, t * t * t);
    std::array::from_fn(|a| {
        0.5 * (2.0 * p1[a]
            + (p2[a] - p0[a]) * t
            + (2.0 * p0[a] - 5.0 * p1[a] + 4.0 * p2[a] - p3[a]) * t2
            + (3.0 * p1[a] - p0[a] - 3.0 * p2[a] + p3[a]) * t3)
    })
}

/// Spherical linear interpolation of unit quaternions with `a·b ≥ 0`; unit length out.
fn slerp(a: [f64; 4], b: [f64; 4], t: f64) -> [f64; 4] {
    let cos = dot4(a, b).min(1.0);
    let q: [f64; 4] = if cos > 0.9995 {
        // Nearly equal: the chord is the arc to ~1e-7; lerp, then normalise.
        std::array::from_fn(|k| a[k] + (b[k] - a[k]) * t)
    } else {
        let theta = cos.acos();
        let (wa, wb) = (
            ((1.0 - t) * theta).sin() / theta.sin(),
            (t * theta).sin() / theta.sin(),
        );
        std::array::from_fn(|k| wa * a[k] + wb * b[k])
    };
    let n = dot4(q, q).sqrt();
    q.map(|v| v / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(centre: [f64; 3], yaw: f64, f: f64, size: (u32, u32)) -> Camera {
        // Looking along +z rotated by `yaw` about the y axis (OpenCV axes: y down).
        let (s, c) = yaw.sin_cos();
        let c2w = [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]];
        Camera {
            width: size.0,
            height: size.1,
            intrinsics: Intrinsics {
                fx: f,
                fy: f,
                cx: size.0 as f64 / 2.0,
                cy: size.1 as f64 / 2.0,
            },
            world_to_camera: Pose::from_camera_to_world(c2w, centre),
        }
    }

    fn close(a: &Camera, b: &Camera) -> bool {
        let (p, q) = (a.world_to_camera, b.world_to_camera);
        let rot =
            (0..3).all(|r| (0..3).all(|c| (p.rotation[r][c] - q.rotation[r][c]).abs() < 1e-9));
        let ca = a.centre();
        let cb = b.centre();
        rot && (0..3).all(|k| (ca[k] - cb[k]).abs() < 1e-9)
            && (a.intrinsics.fx - b.intrinsics.fx).abs() < 1e-9
            && (a.width, a.height) == (b.width, b.height)
    }

    #[test]
    fn the_path_passes_through_every_key_and_is_smooth() {
        let keys = [
            key([0.0, 0.0, 0.0], 0.0, 100.0, (64, 48)),
            key([1.0, 0.0, 0.5], 0.6, 120.0, (64, 48)),
            key([2.0, -0.3, 0.2], 1.4, 90.0, (64, 48)),
            key([2.5, 0.0, -1.0], 2.9, 100.0, (64, 48)),
        ];
        // 3 segments × 10 + 1: frames 0, 10, 20, 30 sit on the keys.
        let path = interpolate(&keys, 31).unwrap();
        assert_eq!(path.len(), 31);
        for (k, key) in keys.iter().enumerate() {
            assert!(close(&path[10 * k], key), "frame {} vs key {k}", 10 * k);
        }
        let mut max_step: f64 = 0.0;
        for pair in path.windows(2) {
            pair[1].validate().unwrap();
            let (a, b) = (pair[0].centre(), pair[1].centre());
            let step = (0..3).map(|i| (a[i] - b[i]).powi(2)).sum::<f64>().sqrt();
            max_step = max_step.max(step);
            // Orientation moves by at most the largest key-to-key turn / 10, plus slack.
            let ra = pair[0].world_to_camera.rotation;
            let rb = pair[1].world_to_camera.rotation;
            let trace: f64 = (0..3)
                .map(|i| (0..3).map(|j| ra[i][j] * rb[i][j]).sum::<f64>())
                .sum();
            let angle = ((trace - 1.0) / 2.0).clamp(-1.0, 1.0).acos();
            assert!(
                angle < 1.5 / 10.0 + 1e-6,
                "turn of {angle} rad between frames"
            );
        }
        // Keys are ≤ 1.3 apart; a frame tenth of a segment never jumps far.
        assert!(max_step < 0.25, "step {max_step}");
    }

    #[test]
    fn slerp_takes_the_short_way_and_sizes_follow_the_first_key() {
        // Yaw 3.0 and −3.0 are 0.28 rad apart the short way round (through ±π).
        let keys = [
            key([0.0; 3], 3.0, 100.0, (64, 48)),
            key([0.0, 0.0, 1.0], -3.0, 50.0, (32, 24)),
        ];
        let path = interpolate(&keys, 3).unwrap();
        let mid = path[1].world_to_camera.rotation;
        // Halfway is yaw π: the camera looks along −z (c2w column z = (0, 0, −1)).
        assert!((mid[2][2] + 1.0).abs() < 1e-9, "{mid:?}");
        // The second key, at 32×24 with f = 50, is f = 100 at the first key's 64×48.
        assert_eq!((path[2].width, path[2].height), (64, 48));
        assert!((path[2].intrinsics.fx - 100.0).abs() < 1e-9);
        assert!(close(&path[2], &keys[1].resized(64, 48)));
    }

    #[test]
    fn too_few_keys_or_frames_and_bad_keys_are_refused() {
        let k = key([0.0; 3], 0.0, 100.0, (8, 8));
        assert!(matches!(
            interpolate(&[k], 10),
            Err(TrajectoryError::TooFewKeys(1))
        ));
        assert!(matches!(
            interpolate(&[k, k], 1),
            Err(TrajectoryError::TooFewFrames(1))
        ));
        let mut bad = k;
        bad.intrinsics.fx = f64::NAN;
        assert!(matches!(
            interpolate(&[k, bad], 4),
            Err(TrajectoryError::BadKey { index: 1, .. })
        ));
    }
}
