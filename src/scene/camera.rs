//! Cameras: the one place that fixes ramsplat's camera conventions.
//!
//! # Conventions (every importer converts INTO these, every backend reads them)
//! - Axes are OpenCV's: camera x points right, y down, z forward (into the scene).
//! - `world_to_camera` maps a world point `p` to camera coordinates `R·p + t`.
//!   The camera centre in world coordinates is `−Rᵀ·t`.
//! - Pixel `(i, j)` (column `i`, row `j`) covers `[i, i+1) × [j, j+1)`; its centre is
//!   `(i + 0.5, j + 0.5)`. A camera-space point `(x, y, z)` projects to
//!   `(fx·x/z + cx, fy·y/z + cy)` in these continuous pixel coordinates, so the principal point of
//!   an ideal centred camera is `(W/2, H/2)`. COLMAP uses the same convention.
//! - Two projections ([`Projection`]): the ideal pinhole above (the default, and every camera
//!   of a pack made before fisheye views existed), and the ideal equidistant fisheye: with
//!   `r = √(x² + y²)` and `θ = atan2(r, z)`, the point lands at `(fx·θ·x/r + cx, fy·θ·y/r + cy)`
//!   (OpenCV's fisheye model with zero coefficients, gsplat's `camera_model="fisheye"`). A lens's
//!   own distortion never reaches this type: importers resample photos to one of the two
//!   ideal projections at pack time.
//! - Poses are kept in `f64`: they are composed and inverted at import time and scene coordinates
//!   can be large (geo-referenced reconstructions); renderers convert to `f32` once per view.
//!
//! Invariants established by [`Camera::validate`]: positive finite size and focal lengths,
//! finite principal point, a rotation that is orthonormal with determinant +1 (within
//! [`ROTATION_TOLERANCE`]) and a finite translation.

use serde::{Deserialize, Serialize};

/// How far `RᵀR` may stray from identity (max abs entry) and `det R` from 1 before a pose is
/// refused as "not a rotation". COLMAP and NeRF poses are written with 6–17 significant digits;
/// a rotation printed with 6 digits has entries off by up to ~5e-7, so orthogonality holds to
/// ~1e-6. 1e-3 accepts every honest file and still rejects scaled or sheared matrices (a
/// transforms.json with a global scale folded into the rotation has errors ≥ 1e-2).
pub const ROTATION_TOLERANCE: f64 = 1e-3;

/// Focal lengths and principal point, in pixels (see the module doc for the pixel convention).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Intrinsics {
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// A rigid world-to-camera transform: `x_cam = rotation · x_world + translation`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pose {
    /// Row-major 3×3 rotation.
    pub rotation: [[f64; 3]; 3],
    pub translation: [f64; 3],
}

/// How a camera maps camera-space points to its image (module doc). Both are ideal: a lens's
/// distortion is resampled away at pack time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Projection {
    /// `(fx·x/z + cx, fy·y/z + cy)`.
    #[default]
    Pinhole,
    /// The equidistant fisheye: the ray at angle `θ` from the optical axis lands `f·θ` from
    /// the principal point, in the ray's direction (`θ_d = θ`).
    Fisheye,
}

impl Projection {
    /// Whether this is the pinhole (serde leaves it out of a camera, so a pinhole pack's
    /// manifest is what it was before fisheye views existed).
    pub fn is_pinhole(&self) -> bool {
        *self == Projection::Pinhole
    }

    /// The name files and messages use: `pinhole` or `fisheye`.
    pub fn name(&self) -> &'static str {
        match self {
            Projection::Pinhole => "pinhole",
            Projection::Fisheye => "fisheye",
        }
    }
}

/// Largest angle from the optical axis (radians) at which a fisheye camera's ray is kept
/// ([`Camera::pixel_ray`] past it gives `None`): just under 180° of field of view, where
/// `θ = atan2(r, z)` stays well conditioned. The rasterizer draws only what lies past its near
/// plane (`z > 0`), so a fisheye view shows at most a hemisphere either way.
pub const FISHEYE_MAX_THETA: f64 = std::f64::consts::FRAC_PI_2 * 0.999;

/// A camera with an image size. Distortion never reaches this type: importers resample photos
/// at pack time, so everything downstream is an ideal [`Projection`].
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Camera {
    pub width: u32,
    pub height: u32,
    pub intrinsics: Intrinsics,
    pub world_to_camera: Pose,
    /// Pinhole unless said (and then left out of JSON, as packs and files before it have it).
    #[serde(default, skip_serializing_if = "Projection::is_pinhole")]
    pub projection: Projection,
}

/// Why a camera was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CameraError {
    #[error("image size {width}x{height} is empty")]
    EmptyImage { width: u32, height: u32 },
    #[error("focal lengths fx={fx}, fy={fy} must be finite and positive")]
    BadFocal { fx: f64, fy: f64 },
    #[error("principal point cx={cx}, cy={cy} is not finite")]
    BadPrincipalPoint { cx: f64, cy: f64 },
    #[error("pose contains NaN or infinite values")]
    NonFinitePose,
    #[error(
        "rotation is not a proper rotation (max |RᵀR − I| = {orthogonality_error:.2e}, det = {det:.6}); \
         the pose may include a scale or shear, or be corrupt"
    )]
    NotRotation { orthogonality_error: f64, det: f64 },
    #[error("quaternion (w={w}, x={x}, y={y}, z={z}) has zero or non-finite length")]
    DegenerateQuaternion { w: f64, x: f64, y: f64, z: f64 },
}

impl Pose {
    pub const IDENTITY: Pose = Pose {
        rotation: [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        translation: [0.0; 3],
    };

    /// Builds a pose from a (w, x, y, z) quaternion, normalised here, and a translation.
    /// COLMAP's `images.bin/txt` store exactly this (world-to-camera, Hamilton convention).
    pub fn from_quaternion_wxyz(q: [f64; 4], translation: [f64; 3]) -> Result<Pose, CameraError> {
        let Some(unit) = super::maths::normalize_quat(q) else {
            let [w, x, y, z] = q;
            return Err(CameraError::DegenerateQuaternion { w, x, y, z });
        };
        let rotation = super::maths::quat_to_rot(unit);
        Ok(Pose {
            rotation,
            translation,
        })
    }

    /// Inverse of a camera-to-world rigid transform given as rotation + camera centre.
    pub fn from_camera_to_world(rotation_c2w: [[f64; 3]; 3], centre: [f64; 3]) -> Pose {
        let r = transpose(rotation_c2w);
        let t = mat_vec(&r, centre);
        Pose {
            rotation: r,
            translation: [-t[0], -t[1], -t[2]],
        }
    }

    /// Camera centre in world coordinates, `−Rᵀ·t`.
    pub fn centre(&self) -> [f64; 3] {
        let c = mat_vec(&transpose(self.rotation), self.translation);
        [-c[0], -c[1], -c[2]]
    }

    /// This world-to-camera pose with its camera moved in its own frame by
    /// `delta = (ρ, φ)`: camera-to-world `C` becomes `C·[Exp(φ) | ρ]`, so the centre moves by
    /// `ρ` along the camera's own axes (scene units) and the camera turns by the axis-angle `φ`
    /// about its centre (camera axes). The rasterizer's pose gradient
    /// ([`crate::render::GaussianGrads::pose`]) is the gradient at `delta = 0` of this map.
    pub fn perturbed(&self, delta: [f64; 6]) -> Pose {
        let c2w = transpose(self.rotation);
        let centre = self.centre();
        let moved = mat_vec(&c2w, [delta[0], delta[1], delta[2]]);
        let rotation_c2w = super::maths::mat3_mul(
            &c2w,
            &super::maths::rotation_exp([delta[3], delta[4], delta[5]]),
        );
        Pose::from_camera_to_world(
            rotation_c2w,
            [
                centre[0] + moved[0],
                centre[1] + moved[1],
                centre[2] + moved[2],
            ],
        )
    }

    /// Applies the transform to a world point.
    pub fn transform(&self, p: [f64; 3]) -> [f64; 3] {
        let r = mat_vec(&self.rotation, p);
        [
            r[0] + self.translation[0],
            r[1] + self.translation[1],
            r[2] + self.translation[2],
        ]
    }

    /// Row-major 4×4 homogeneous matrix (the camera JSON form of `gs-render`).
    pub fn to_matrix4(&self) -> [[f64; 4]; 4] {
        let r = &self.rotation;
        let t = &self.translation;
        [
            [r[0][0], r[0][1], r[0][2], t[0]],
            [r[1][0], r[1][1], r[1][2], t[1]],
            [r[2][0], r[2][1], r[2][2], t[2]],
            [0.0, 0.0, 0.0, 1.0],
        ]
    }

    /// Reads a row-major 4×4 world-to-camera matrix; the bottom row must be (0, 0, 0, 1).
    pub fn from_matrix4(m: [[f64; 4]; 4]) -> Result<Pose, CameraError> {
        if m.iter().flatten().any(|v| !v.is_finite()) {
            return Err(CameraError::NonFinitePose);
        }
        let bottom_ok = m[3][0].abs() < 1e-9
            && m[3][1].abs() < 1e-9
            && m[3][2].abs() < 1e-9
            && (m[3][3] - 1.0).abs() < 1e-9;
        let pose = Pose {
            rotation: [
                [m[0][0], m[0][1], m[0][2]],
                [m[1][0], m[1][1], m[1][2]],
                [m[2][0], m[2][1], m[2][2]],
            ],
            translation: [m[0][3], m[1][3], m[2][3]],
        };
        if !bottom_ok {
            return Err(CameraError::NotRotation {
                orthogonality_error: f64::NAN,
                det: f64::NAN,
            });
        }
        pose.validate()?;
        Ok(pose)
    }

    /// Checks finiteness and that `rotation` is a proper rotation (see [`ROTATION_TOLERANCE`]).
    pub fn validate(&self) -> Result<(), CameraError> {
        let finite = self.rotation.iter().flatten().all(|v| v.is_finite())
            && self.translation.iter().all(|v| v.is_finite());
        if !finite {
            return Err(CameraError::NonFinitePose);
        }
        let r = &self.rotation;
        let mut err: f64 = 0.0;
        for i in 0..3 {
            for j in 0..3 {
                let dot: f64 = (0..3).map(|k| r[k][i] * r[k][j]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                err = err.max((dot - want).abs());
            }
        }
        let det = det3(r);
        if err > ROTATION_TOLERANCE || (det - 1.0).abs() > ROTATION_TOLERANCE {
            return Err(CameraError::NotRotation {
                orthogonality_error: err,
                det,
            });
        }
        Ok(())
    }
}

impl Camera {
    /// Checks every invariant listed in the module doc.
    pub fn validate(&self) -> Result<(), CameraError> {
        if self.width == 0 || self.height == 0 {
            return Err(CameraError::EmptyImage {
                width: self.width,
                height: self.height,
            });
        }
        let Intrinsics { fx, fy, cx, cy } = self.intrinsics;
        if !(fx.is_finite() && fy.is_finite() && fx > 0.0 && fy > 0.0) {
            return Err(CameraError::BadFocal { fx, fy });
        }
        if !(cx.is_finite() && cy.is_finite()) {
            return Err(CameraError::BadPrincipalPoint { cx, cy });
        }
        self.world_to_camera.validate()
    }

    /// The same camera for an image resized to `width × height`. With the pixel-centre-at-0.5
    /// convention the image corners stay at 0 and W, so intrinsics scale by exactly the size
    /// ratio (no half-pixel shift), separately per axis when rounding changes the aspect.
    pub fn resized(&self, width: u32, height: u32) -> Camera {
        let sx = width as f64 / self.width as f64;
        let sy = height as f64 / self.height as f64;
        let k = self.intrinsics;
        Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: k.fx * sx,
                fy: k.fy * sy,
                cx: k.cx * sx,
                cy: k.cy * sy,
            },
            world_to_camera: self.world_to_camera,
            projection: self.projection,
        }
    }

    /// The same camera for the `width × height` window of its image whose top-left pixel
    /// corner is `(x0, y0)`: the principal point moves with the window, the focal lengths stay.
    pub fn cropped(&self, x0: u32, y0: u32, width: u32, height: u32) -> Camera {
        let k = self.intrinsics;
        Camera {
            width,
            height,
            intrinsics: Intrinsics {
                cx: k.cx - x0 as f64,
                cy: k.cy - y0 as f64,
                ..k
            },
            world_to_camera: self.world_to_camera,
            projection: self.projection,
        }
    }

    /// Camera centre in world coordinates.
    pub fn centre(&self) -> [f64; 3] {
        self.world_to_camera.centre()
    }

    /// Camera-to-world 4×4 in OpenGL axes (x right, y up, z back): NeRF's and nerfstudio's
    /// `transform_matrix`, the inverse of what the NeRF importer reads.
    pub fn opengl_camera_to_world(&self) -> [[f64; 4]; 4] {
        let r = self.world_to_camera.rotation;
        let c = self.centre();
        let mut m = [[0.0; 4]; 4];
        for i in 0..3 {
            // Column j of the camera-to-world rotation is row j of the world-to-camera one;
            // OpenCV's y (down) and z (forward) become OpenGL's −y and −z.
            m[i][0] = r[0][i];
            m[i][1] = -r[1][i];
            m[i][2] = -r[2][i];
            m[i][3] = c[i];
        }
        m[3][3] = 1.0;
        m
    }

    /// Projects a world point; `None` when it is at or behind the camera plane.
    pub fn project(&self, p: [f64; 3]) -> Option<[f64; 2]> {
        self.project_camera_point(self.world_to_camera.transform(p))
    }

    /// Projects a camera-space point by [`Camera::projection`]; `None` when it is at or behind
    /// the camera plane (`z ≤ 0`; the renderers draw from their near plane on).
    pub fn project_camera_point(&self, [x, y, z]: [f64; 3]) -> Option<[f64; 2]> {
        if z <= 0.0 || z.is_nan() {
            return None;
        }
        let k = self.intrinsics;
        let [nx, ny] = match self.projection {
            Projection::Pinhole => [x / z, y / z],
            Projection::Fisheye => {
                let s = equidistant_scale(x.hypot(y), z);
                [x * s, y * s]
            }
        };
        Some([k.fx * nx + k.cx, k.fy * ny + k.cy])
    }

    /// The camera-space direction (unit length) of the ray through image point `(u, v)`
    /// (continuous pixel coordinates); `None` for a fisheye point more than
    /// [`FISHEYE_MAX_THETA`] off the axis. The inverse of [`Camera::project_camera_point`].
    pub fn pixel_ray(&self, u: f64, v: f64) -> Option<[f64; 3]> {
        let k = self.intrinsics;
        let (nx, ny) = ((u - k.cx) / k.fx, (v - k.cy) / k.fy);
        let d = match self.projection {
            Projection::Pinhole => [nx, ny, 1.0],
            Projection::Fisheye => {
                // The point lies θ = |n| (radians) off the axis, in n's direction.
                let theta = nx.hypot(ny);
                if theta > FISHEYE_MAX_THETA || theta.is_nan() {
                    return None;
                }
                let s = if theta > 0.0 {
                    theta.sin() / theta
                } else {
                    1.0
                };
                [nx * s, ny * s, theta.cos()]
            }
        };
        let n = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
        Some(d.map(|c| c / n))
    }

    /// Horizontal and vertical field of view in radians, through the principal axis of a
    /// centred camera (a fisheye's is `W/fx` and `H/fy`: its angle is linear in the radius).
    pub fn fov(&self) -> (f64, f64) {
        let k = self.intrinsics;
        let (w, h) = (self.width as f64, self.height as f64);
        match self.projection {
            Projection::Pinhole => (
                2.0 * (w / (2.0 * k.fx)).atan(),
                2.0 * (h / (2.0 * k.fy)).atan(),
            ),
            Projection::Fisheye => (w / k.fx, h / k.fy),
        }
    }
}

/// `θ/r` with `θ = atan2(r, z)`, the equidistant projection's factor from a camera-space point
/// to its normalised image point (`r = √(x² + y²)`, `z > 0`); `1/z` on the axis.
pub fn equidistant_scale(r: f64, z: f64) -> f64 {
    if r > 0.0 {
        r.atan2(z) / r
    } else {
        1.0 / z
    }
}

pub(crate) fn transpose(m: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    [
        [m[0][0], m[1][0], m[2][0]],
        [m[0][1], m[1][1], m[2][1]],
        [m[0][2], m[1][2], m[2][2]],
    ]
}

pub(crate) fn mat_vec(m: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
    [
        m[0][0] * v[0] + m[0][1] * v[1] + m[0][2] * v[2],
        m[1][0] * v[0] + m[1][1] * v[1] + m[1][2] * v[2],
        m[2][0] * v[0] + m[2][1] * v[1] + m[2][2] * v[2],
    ]
}

pub(crate) fn det3(m: &[[f64; 3]; 3]) -> f64 {
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
}

/// The single-camera JSON `gs-render --camera` reads (and `tools/reference_render.py`
/// writes): `{"width", "height", "fx", "fy", "cx", "cy", "world_to_camera": 4×4 row-major}`,
/// and `"camera_model": "fisheye"` for an equidistant fisheye (`"pinhole"` when left out,
/// gsplat's spelling); unknown fields (a "name", say) are ignored.
#[derive(Debug, Deserialize)]
struct CameraJson {
    width: u32,
    height: u32,
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
    world_to_camera: [[f64; 4]; 4],
    #[serde(default)]
    camera_model: Projection,
}

/// Why a camera JSON text was refused.
#[derive(Debug, thiserror::Error)]
pub enum CameraJsonError {
    #[error(
        "not a camera JSON (expected {{\"width\",\"height\",\"fx\",\"fy\",\"cx\",\"cy\",\
         \"world_to_camera\": 4x4 row-major}}, and optionally \"camera_model\": \"pinhole\" or \
         \"fisheye\")"
    )]
    Syntax(#[source] serde_json::Error),
    #[error("world_to_camera must be a rigid 4x4 transform with bottom row 0 0 0 1")]
    Pose(#[source] CameraError),
    #[error("invalid camera")]
    Invalid(#[source] CameraError),
}

impl Camera {
    /// Parses and validates a camera JSON (see [`CameraJsonError`] for what is refused).
    pub fn from_json(text: &str) -> Result<Camera, CameraJsonError> {
        let j: CameraJson = serde_json::from_str(text).map_err(CameraJsonError::Syntax)?;
        let camera = Camera {
            width: j.width,
            height: j.height,
            intrinsics: Intrinsics {
                fx: j.fx,
                fy: j.fy,
                cx: j.cx,
                cy: j.cy,
            },
            world_to_camera: Pose::from_matrix4(j.world_to_camera)
                .map_err(CameraJsonError::Pose)?,
            projection: j.camera_model,
        };
        camera.validate().map_err(CameraJsonError::Invalid)?;
        Ok(camera)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approx(a: [f64; 3], b: [f64; 3]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn quaternion_identity_and_quarter_turn() {
        let p = Pose::from_quaternion_wxyz([1.0, 0.0, 0.0, 0.0], [0.0; 3]).unwrap();
        assert_eq!(p.rotation, Pose::IDENTITY.rotation);
        // 90° about z maps x to y.
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let p = Pose::from_quaternion_wxyz([h, 0.0, 0.0, h], [0.0; 3]).unwrap();
        assert!(approx(p.transform([1.0, 0.0, 0.0]), [0.0, 1.0, 0.0]));
        // Unnormalised input is normalised.
        let p2 = Pose::from_quaternion_wxyz([2.0, 0.0, 0.0, 2.0], [0.0; 3]).unwrap();
        assert!(approx(p2.transform([1.0, 0.0, 0.0]), [0.0, 1.0, 0.0]));
    }

    #[test]
    fn zero_quaternion_is_refused() {
        assert!(matches!(
            Pose::from_quaternion_wxyz([0.0; 4], [0.0; 3]),
            Err(CameraError::DegenerateQuaternion { .. })
        ));
    }

    #[test]
    fn centre_round_trips_through_camera_to_world() {
        let h = std::f64::consts::FRAC_1_SQRT_2;
        let p = Pose::from_quaternion_wxyz([h, h, 0.0, 0.0], [1.0, 2.0, 3.0]).unwrap();
        let c = p.centre();
        assert!(approx(p.transform(c), [0.0; 3]));
        let q = Pose::from_camera_to_world(transpose(p.rotation), c);
        assert!(approx(q.translation, p.translation));
    }

    #[test]
    fn scaled_rotation_is_refused() {
        let mut p = Pose::IDENTITY;
        p.rotation[0][0] = 2.0;
        assert!(matches!(p.validate(), Err(CameraError::NotRotation { .. })));
        p.rotation[0][0] = -1.0; // reflection: orthogonal but det −1
        assert!(matches!(p.validate(), Err(CameraError::NotRotation { .. })));
        p.rotation[0][0] = f64::NAN;
        assert_eq!(p.validate(), Err(CameraError::NonFinitePose));
    }

    #[test]
    fn projection_uses_pixel_centre_convention() {
        let cam = Camera {
            width: 4,
            height: 2,
            intrinsics: Intrinsics {
                fx: 2.0,
                fy: 2.0,
                cx: 2.0,
                cy: 1.0,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        };
        // The optical axis hits the image centre, the shared corner of the 4 middle pixels.
        assert_eq!(cam.project([0.0, 0.0, 1.0]), Some([2.0, 1.0]));
        assert_eq!(cam.project([0.0, 0.0, -1.0]), None);
        let half = cam.resized(2, 1);
        assert_eq!(half.intrinsics.cx, 1.0);
        assert_eq!(half.project([0.0, 0.0, 1.0]), Some([1.0, 0.5]));
    }

    /// The equidistant fisheye: a ray θ off the axis lands f·θ from the principal point, in
    /// its own direction; `pixel_ray` inverts `project_camera_point` up to just under 90°; on
    /// the axis it is the pinhole's; `fov` is linear in the size.
    #[test]
    fn fisheye_projection_is_equidistant_and_pixel_ray_inverts_it() {
        let cam = Camera {
            width: 400,
            height: 300,
            intrinsics: Intrinsics {
                fx: 100.0,
                fy: 90.0,
                cx: 201.0,
                cy: 149.5,
            },
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Fisheye,
        };
        // 60° off the axis in x: θ = π/3 → 100·π/3 px right of the centre.
        let t = std::f64::consts::FRAC_PI_3;
        let [u, v] = cam.project_camera_point([t.sin(), 0.0, t.cos()]).unwrap();
        assert!((u - (201.0 + 100.0 * t)).abs() < 1e-12 && (v - 149.5).abs() < 1e-12);
        // Scale along the ray does not matter; the axis is the principal point.
        let [u2, _] = cam
            .project_camera_point([3.0 * t.sin(), 0.0, 3.0 * t.cos()])
            .unwrap();
        assert!((u2 - u).abs() < 1e-12);
        assert_eq!(
            cam.project_camera_point([0.0, 0.0, 2.0]),
            Some([201.0, 149.5])
        );
        assert_eq!(cam.project_camera_point([1.0, 0.0, 0.0]), None);
        // Round trips through pixel_ray, near and far from the axis.
        for (u, v) in [
            (201.0, 149.5),
            (201.3, 149.4),
            (120.0, 230.0),
            (310.0, 80.0),
        ] {
            let d = cam.pixel_ray(u, v).unwrap();
            assert!((d[0] * d[0] + d[1] * d[1] + d[2] * d[2] - 1.0).abs() < 1e-12);
            let back = cam.project_camera_point(d).unwrap();
            assert!(
                (back[0] - u).abs() < 1e-9 && (back[1] - v).abs() < 1e-9,
                "{u},{v} → {back:?}"
            );
        }
        // θ past FISHEYE_MAX_THETA (a 190° image) has no ray.
        assert_eq!(cam.pixel_ray(201.0 + 100.0 * 1.58, 149.5), None);
        // The same camera as a pinhole disagrees off the axis only.
        let pin = Camera {
            projection: Projection::Pinhole,
            ..cam
        };
        assert_eq!(
            pin.project_camera_point([0.0, 0.0, 2.0]),
            Some([201.0, 149.5])
        );
        let [up, _] = pin.project_camera_point([t.sin(), 0.0, t.cos()]).unwrap();
        assert!((up - (201.0 + 100.0 * t.tan())).abs() < 1e-9);
        let (fw, fh) = cam.fov();
        assert!((fw - 4.0).abs() < 1e-12 && (fh - 300.0 / 90.0).abs() < 1e-12);
        // Left out of JSON when pinhole, named when fisheye, and read back.
        let pj = serde_json::to_string(&pin).unwrap();
        assert!(!pj.contains("projection"), "{pj}");
        let fj = serde_json::to_string(&cam).unwrap();
        assert!(fj.contains("\"projection\":\"fisheye\""), "{fj}");
        assert_eq!(serde_json::from_str::<Camera>(&fj).unwrap(), cam);
        assert_eq!(serde_json::from_str::<Camera>(&pj).unwrap(), pin);
    }
}
