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
//! [`ellipse`] orbits instead (gsplat's `ellipse` trajectory): the frames circle the point the
//! keys look at most (the least-squares nearest point to their optical axes) on an ellipse at
//! the keys' mean height above it, in the plane normal to their mean up direction (keys that
//! all look down at a subject from one side tilt it toward them), with radii
//! the 90th percentile of the keys' distances along the plane's principal axes; every frame
//! looks at that point, upright, with the first key's size and intrinsics.
//!
//! Invariants: the first and the last frame of [`interpolate`] are the first and the last key
//! (to rounding); every frame's rotation is a proper rotation, so each frame passes
//! [`Camera::validate`] when the keys do.

use super::camera::{det3, transpose, Camera, CameraError, Intrinsics, Pose};
use super::maths::{
    cross3 as cross, dot3 as dot, quat_to_rot, rotation_to_quaternion_wxyz, sub3 as sub,
};

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
    #[error(
        "the key cameras do not surround a centre ({0}); an orbit needs cameras looking at a \
         common subject from several sides: use the interpolated path instead"
    )]
    NoOrbit(&'static str),
}

type V3 = [f64; 3];

/// The checks both paths make before any arithmetic.
fn check(keys: &[Camera], frames: usize) -> Result<(), TrajectoryError> {
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
    Ok(())
}

fn unit(a: V3) -> Option<V3> {
    let n = dot(a, a).sqrt();
    (n > 1e-12 && n.is_finite()).then(|| a.map(|v| v / n))
}

/// `frames` cameras on an ellipse around what `keys` look at (see the module doc).
pub fn ellipse(keys: &[Camera], frames: usize) -> Result<Vec<Camera>, TrajectoryError> {
    check(keys, frames)?;
    // Camera axes in world space: the rows of the world-to-camera rotation (OpenCV: x right,
    // y down, z forward).
    let centres: Vec<V3> = keys.iter().map(Camera::centre).collect();
    let forward: Vec<V3> = keys.iter().map(|k| k.world_to_camera.rotation[2]).collect();
    // Least-squares point nearest to every optical axis: Σ(I − f fᵀ)·p = Σ(I − f fᵀ)·c.
    let mut m = [[0.0f64; 3]; 3];
    let mut rhs = [0.0f64; 3];
    for (c, f) in centres.iter().zip(&forward) {
        for r in 0..3 {
            for col in 0..3 {
                let proj = f64::from(u8::from(r == col)) - f[r] * f[col];
                m[r][col] += proj;
                rhs[r] += proj * c[col];
            }
        }
    }
    let focus = solve3(m, rhs).ok_or(TrajectoryError::NoOrbit("their axes are parallel"))?;
    let up = unit(keys.iter().fold([0.0; 3], |acc, k| {
        let down = k.world_to_camera.rotation[1];
        [acc[0] - down[0], acc[1] - down[1], acc[2] - down[2]]
    }))
    .ok_or(TrajectoryError::NoOrbit("their up directions cancel out"))?;
    // The plane normal to `up`, its axes along the principal directions of the keys' offsets.
    let offsets: Vec<V3> = centres.iter().map(|&c| sub(c, focus)).collect();
    let height = offsets.iter().map(|&d| dot(d, up)).sum::<f64>() / offsets.len() as f64;
    let seed = if up[0].abs() < 0.9 {
        [1.0, 0.0, 0.0]
    } else {
        [0.0, 1.0, 0.0]
    };
    let e1 = unit(cross(up, seed)).expect("seed is not parallel to up");
    let e2 = cross(up, e1);
    let flat: Vec<(f64, f64)> = offsets.iter().map(|&d| (dot(d, e1), dot(d, e2))).collect();
    let (sxx, sxy, syy) = flat.iter().fold((0.0, 0.0, 0.0), |(a, b, c), &(x, y)| {
        (a + x * x, b + x * y, c + y * y)
    });
    let angle = 0.5 * (2.0 * sxy).atan2(sxx - syy);
    let (sa, ca) = angle.sin_cos();
    let axis1: V3 = std::array::from_fn(|i| ca * e1[i] + sa * e2[i]);
    let axis2 = cross(up, axis1);
    let radius = |axis: V3| {
        let mut d: Vec<f64> = offsets.iter().map(|&o| dot(o, axis).abs()).collect();
        d.sort_by(f64::total_cmp);
        d[((d.len() - 1) as f64 * 0.9).round() as usize]
    };
    let (ra, rb) = (radius(axis1), radius(axis2));
    let spread = ra > 1e-9 && rb > 1e-9;
    if !spread {
        return Err(TrajectoryError::NoOrbit("they stand on a line through it"));
    }
    let first = keys[0];
    let mut out = Vec::with_capacity(frames);
    for f in 0..frames {
        // A closed loop: the frame after the last would be the first.
        let t = std::f64::consts::TAU * f as f64 / frames as f64;
        let (st, ct) = t.sin_cos();
        let centre: V3 = std::array::from_fn(|i| {
            focus[i] + height * up[i] + ra * ct * axis1[i] + rb * st * axis2[i]
        });
        let z = unit(sub(focus, centre)).ok_or(TrajectoryError::NoOrbit("a frame sits on it"))?;
        let down = up.map(|v| -v);
        let x = unit(cross(down, z)).ok_or(TrajectoryError::NoOrbit(
            "a frame looks straight along the up direction",
        ))?;
        let y = cross(z, x);
        let c2w = [[x[0], y[0], z[0]], [x[1], y[1], z[1]], [x[2], y[2], z[2]]];
        out.push(Camera {
            world_to_camera: Pose::from_camera_to_world(c2w, centre),
            ..first
        });
    }
    Ok(out)
}

/// Solves `m·x = b` by Cramer's rule; `None` when `m` is (nearly) singular.
fn solve3(m: [[f64; 3]; 3], b: V3) -> Option<V3> {
    let d = det3(&m);
    let scale = m.iter().flatten().map(|v| v.abs()).fold(0.0, f64::max);
    // Also refuses a NaN determinant.
    let invertible = d.abs() > 1e-9 * scale * scale * scale;
    if !invertible {
        return None;
    }
    Some(std::array::from_fn(|i| {
        let mut mi = m;
        for r in 0..3 {
            mi[r][i] = b[r];
        }
        det3(&mi) / d
    }))
}

/// `frames` cameras along `keys` (see the module doc).
pub fn interpolate(keys: &[Camera], frames: usize) -> Result<Vec<Camera>, TrajectoryError> {
    check(keys, frames)?;
    let (width, height) = (keys[0].width, keys[0].height);
    let keys: Vec<Camera> = keys.iter().map(|k| k.resized(width, height)).collect();
    let centres: Vec<[f64; 3]> = keys.iter().map(Camera::centre).collect();
    // Camera-to-world quaternions, each flipped to the hemisphere of the previous one so
    // every slerp takes the shorter way.
    let mut quats: Vec<[f64; 4]> = keys
        .iter()
        .map(|k| rotation_to_quaternion_wxyz(&transpose(k.world_to_camera.rotation)))
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
            // A path keeps the projection of the key it leaves from.
            projection: keys[i].projection,
        });
    }
    Ok(out)
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
    use crate::scene::camera::Projection;

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
            projection: Projection::Pinhole,
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

    /// A camera at `centre` looking at `target`, upright for world up = −y (OpenCV world).
    fn look_at(centre: V3, target: V3) -> Camera {
        let z = unit(sub(target, centre)).unwrap();
        let x = unit(cross([0.0, 1.0, 0.0], z)).unwrap();
        let y = cross(z, x);
        let c2w = [[x[0], y[0], z[0]], [x[1], y[1], z[1]], [x[2], y[2], z[2]]];
        Camera {
            world_to_camera: Pose::from_camera_to_world(c2w, centre),
            ..key([0.0; 3], 0.0, 80.0, (40, 30))
        }
    }

    #[test]
    fn the_orbit_circles_what_the_keys_look_at() {
        // Five keys evenly round a circle of radius 3 about (1, 0, 2), 1 unit above it (up =
        // −y), all looking at it: their tilted up vectors average to the true up. (From one
        // side only, the average leans toward the subject, and so does the orbit: the up
        // direction is the keys' mean, as gsplat's normalisation takes it.)
        let target = [1.0, 0.0, 2.0];
        let keys: Vec<Camera> = (0..5)
            .map(|i| {
                let a = std::f64::consts::TAU * i as f64 / 5.0 + 0.3;
                look_at([1.0 + 3.0 * a.cos(), -1.0, 2.0 + 3.0 * a.sin()], target)
            })
            .collect();
        let path = ellipse(&keys, 24).unwrap();
        assert_eq!(path.len(), 24);
        let mut angles = Vec::new();
        for cam in &path {
            cam.validate().unwrap();
            assert_eq!((cam.width, cam.height), (40, 30));
            let c = cam.centre();
            let d = sub(c, target);
            assert!((d[1] + 1.0).abs() < 1e-9, "height {}", -d[1]);
            // Radii: the 90th percentile of the keys' extents along the principal axes, so
            // between 3·cos 36° and 3 for five points evenly round the circle.
            let r = (d[0] * d[0] + d[2] * d[2]).sqrt();
            assert!(r > 2.4 && r < 3.0 + 1e-9, "radius {r}");
            // Looks at the target, upright (camera y, "down", points along world +y).
            let rot = cam.world_to_camera.rotation;
            let to_target = unit(sub(target, c)).unwrap();
            assert!(dot(rot[2], to_target) > 1.0 - 1e-9);
            assert!(rot[1][1] > 0.0, "upside down: {rot:?}");
            angles.push(d[2].atan2(d[0]));
        }
        // One full turn, evenly, without repeating the first frame.
        let mut turn = 0.0;
        for w in angles.windows(2) {
            let mut step = w[1] - w[0];
            if step > std::f64::consts::PI {
                step -= std::f64::consts::TAU;
            } else if step < -std::f64::consts::PI {
                step += std::f64::consts::TAU;
            }
            turn += step;
        }
        assert!(
            (turn.abs() - std::f64::consts::TAU * 23.0 / 24.0).abs() < 0.2,
            "{turn}"
        );
    }

    #[test]
    fn parallel_keys_have_no_orbit() {
        let keys: Vec<Camera> = (0..4)
            .map(|i| key([i as f64, 0.0, 0.0], 0.0, 80.0, (40, 30)))
            .collect();
        assert!(matches!(
            ellipse(&keys, 10),
            Err(TrajectoryError::NoOrbit(_))
        ));
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
