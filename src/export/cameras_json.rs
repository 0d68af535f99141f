//! The `cameras.json` the original 3DGS trainer writes beside its model, which its viewers and
//! many tools read: a JSON list of
//! `{"id", "img_name", "width", "height", "position": [x,y,z], "rotation": 3×3, "fx", "fy"}`.
//!
//! Conventions (those of 3DGS's `camera_to_JSON`): `rotation` is the camera-to-world rotation,
//! row-major (`rotation[i][j]` = row `i`, column `j`); `position` is the camera centre in world
//! coordinates; axes are OpenCV's (x right, y down, z forward), as in ramsplat; the principal
//! point is the image centre `(W/2, H/2)` (the format has no field for it). Unknown fields are
//! ignored, so files from tools that add their own fields load.
//!
//! One field of ramsplat's own: `"camera_model": "fisheye"` on the entry of a fisheye camera
//! (the ideal equidistant fisheye, [`Projection::Fisheye`]; gsplat's spelling). It is left out
//! for a pinhole camera, so a file of pinhole cameras is exactly what 3DGS writes, and an
//! entry without it (every 3DGS file's) reads as a pinhole; `"pinhole"` is accepted too.
//!
//! Invariants: [`parse`] returns only cameras that pass [`Camera::validate`]; a camera whose
//! principal point is off-centre is written with its focal lengths only, so [`write`] reports
//! how far it moved ([`CameraEntry::principal_point_offset`]).

use serde::{Deserialize, Serialize};

use crate::scene::camera::{transpose, Camera, CameraError, Intrinsics, Pose, Projection};

/// One entry of a 3DGS `cameras.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CameraEntry {
    pub id: u64,
    pub img_name: String,
    pub width: u32,
    pub height: u32,
    /// Camera centre in world coordinates.
    pub position: [f64; 3],
    /// Camera-to-world rotation, row-major.
    pub rotation: [[f64; 3]; 3],
    pub fx: f64,
    pub fy: f64,
    /// The camera's projection: `"fisheye"`, or left out for a pinhole (see the module doc).
    #[serde(default, skip_serializing_if = "Projection::is_pinhole")]
    pub camera_model: Projection,
}

/// Why a `cameras.json` was refused.
#[derive(Debug, thiserror::Error)]
pub enum CamerasJsonError {
    #[error(
        "not a 3DGS cameras.json (expected a list of {{\"id\",\"img_name\",\"width\",\"height\",\
         \"position\",\"rotation\",\"fx\",\"fy\"}}, and optionally \"camera_model\": \
         \"pinhole\" or \"fisheye\"): {0}"
    )]
    Syntax(#[from] serde_json::Error),
    #[error("entry {index} (id {id}, {img_name:?}): {source}")]
    Camera {
        index: usize,
        id: u64,
        img_name: String,
        #[source]
        source: CameraError,
    },
    #[error("the list is empty: there is no camera to use")]
    Empty,
}

impl CameraEntry {
    /// The entry 3DGS would write for `camera` (principal point dropped: see the module doc).
    pub fn from_camera(id: u64, img_name: &str, camera: &Camera) -> CameraEntry {
        let pose = &camera.world_to_camera;
        CameraEntry {
            id,
            img_name: img_name.to_owned(),
            width: camera.width,
            height: camera.height,
            position: pose.centre(),
            rotation: transpose(pose.rotation),
            fx: camera.intrinsics.fx,
            fy: camera.intrinsics.fy,
            camera_model: camera.projection,
        }
    }

    /// The camera this entry describes, validated.
    pub fn to_camera(&self) -> Result<Camera, CameraError> {
        let pose = Pose::from_camera_to_world(self.rotation, self.position);
        let camera = Camera {
            width: self.width,
            height: self.height,
            intrinsics: Intrinsics {
                fx: self.fx,
                fy: self.fy,
                cx: self.width as f64 / 2.0,
                cy: self.height as f64 / 2.0,
            },
            world_to_camera: pose,
            projection: self.camera_model,
        };
        camera.validate()?;
        Ok(camera)
    }

    /// How far (pixels, max over both axes) `camera`'s principal point is from the image
    /// centre this format assumes.
    pub fn principal_point_offset(camera: &Camera) -> f64 {
        let k = camera.intrinsics;
        (k.cx - camera.width as f64 / 2.0)
            .abs()
            .max((k.cy - camera.height as f64 / 2.0).abs())
    }

    /// The largest [`Self::principal_point_offset`] of `cameras` (0 for none).
    pub fn max_principal_point_offset(cameras: &[Camera]) -> f64 {
        cameras
            .iter()
            .map(Self::principal_point_offset)
            .fold(0.0, f64::max)
    }
}

/// Parses a `cameras.json` into its entries and their validated cameras.
pub fn parse(text: &str) -> Result<Vec<(CameraEntry, Camera)>, CamerasJsonError> {
    let entries: Vec<CameraEntry> = serde_json::from_str(text)?;
    if entries.is_empty() {
        return Err(CamerasJsonError::Empty);
    }
    entries
        .into_iter()
        .enumerate()
        .map(|(index, e)| match e.to_camera() {
            Ok(c) => Ok((e, c)),
            Err(source) => Err(CamerasJsonError::Camera {
                index,
                id: e.id,
                img_name: e.img_name.clone(),
                source,
            }),
        })
        .collect()
}

/// Serialises entries as 3DGS does (a JSON list), pretty-printed.
pub fn to_string(entries: &[CameraEntry]) -> String {
    serde_json::to_string_pretty(entries).expect("camera entries serialise") + "\n"
}

/// 3DGS's `img_name` for a view name: the file name without directories or extension
/// ("images/IMG_01.jpg" → "IMG_01").
pub fn img_name(view_name: &str) -> String {
    let base = view_name.rsplit(['/', '\\']).next().unwrap_or(view_name);
    match base.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem.to_owned(),
        _ => base.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn camera() -> Camera {
        let h = std::f64::consts::FRAC_1_SQRT_2;
        Camera {
            width: 64,
            height: 48,
            intrinsics: Intrinsics {
                fx: 50.0,
                fy: 51.0,
                cx: 32.0,
                cy: 24.0,
            },
            world_to_camera: Pose::from_quaternion_wxyz([h, 0.3, 0.0, h], [1.0, -2.0, 3.0])
                .unwrap(),
            projection: Projection::Pinhole,
        }
    }

    #[test]
    fn entry_round_trips_a_centred_camera() {
        let c = camera();
        let e = CameraEntry::from_camera(7, "IMG_7", &c);
        let text = to_string(std::slice::from_ref(&e));
        let parsed = parse(&text).unwrap();
        // serde_json's float parsing may be one ulp off; everything else is exact.
        assert_eq!((parsed[0].0.id, &parsed[0].0.img_name), (7, &e.img_name));
        let back = parsed[0].1;
        assert_eq!(back.intrinsics, c.intrinsics);
        for i in 0..3 {
            assert!(
                (back.world_to_camera.translation[i] - c.world_to_camera.translation[i]).abs()
                    < 1e-12
            );
            for j in 0..3 {
                assert!(
                    (back.world_to_camera.rotation[i][j] - c.world_to_camera.rotation[i][j]).abs()
                        < 1e-12
                );
            }
        }
    }

    #[test]
    fn reads_the_3dgs_layout_and_ignores_unknown_fields() {
        // As 3DGS writes it (identity camera at (0, 0, -4) looking down +z), plus a field of
        // another tool's.
        let text = r#"[{"id": 0, "img_name": "r_0", "width": 800, "height": 600,
            "position": [0.0, 0.0, -4.0],
            "rotation": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            "fy": 1111.0, "fx": 1111.0, "name": "cam_00"}]"#;
        let cams = parse(text).unwrap();
        let c = cams[0].1;
        assert_eq!(c.intrinsics.cx, 400.0);
        assert_eq!(c.intrinsics.cy, 300.0);
        assert_eq!(c.world_to_camera.translation, [0.0, 0.0, 4.0]);
        // The world origin is straight ahead, at the image centre.
        assert_eq!(c.project([0.0, 0.0, 0.0]), Some([400.0, 300.0]));
    }

    #[test]
    fn bad_entries_are_named() {
        let text = r#"[{"id": 3, "img_name": "x", "width": 8, "height": 8,
            "position": [0,0,0], "rotation": [[2,0,0],[0,1,0],[0,0,1]], "fx": 1, "fy": 1}]"#;
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("entry 0 (id 3, \"x\")"), "{e}");
        assert!(matches!(parse("[]"), Err(CamerasJsonError::Empty)));
        assert!(matches!(parse("{}"), Err(CamerasJsonError::Syntax(_))));
    }

    /// A fisheye camera's entry says so and reads back as a fisheye; a pinhole's has no
    /// `camera_model` (the file stays as 3DGS writes it); an unknown model is refused.
    #[test]
    fn fisheye_entries_carry_their_camera_model() {
        let pin = camera();
        let fish = Camera {
            projection: Projection::Fisheye,
            ..camera()
        };
        let entries = [
            CameraEntry::from_camera(0, "pin", &pin),
            CameraEntry::from_camera(1, "fish", &fish),
        ];
        let text = to_string(&entries);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(json[0].get("camera_model").is_none(), "{text}");
        assert_eq!(json[1]["camera_model"], "fisheye");
        let parsed = parse(&text).unwrap();
        assert_eq!(parsed[0].1.projection, Projection::Pinhole);
        assert_eq!(parsed[1].1.projection, Projection::Fisheye);
        // (serde_json's float parsing may be one ulp off in the rotation.)
        assert_eq!(parsed[1].0.camera_model, Projection::Fisheye);
        assert_eq!(parsed[1].1.intrinsics, fish.intrinsics);
        let explicit = text.replacen("\"id\": 0,", "\"id\": 0, \"camera_model\": \"pinhole\",", 1);
        assert_ne!(explicit, text);
        assert_eq!(
            parse(&explicit).unwrap()[0].1.projection,
            Projection::Pinhole
        );
        let odd = text.replace("\"fisheye\"", "\"orthographic\"");
        let e = parse(&odd).unwrap_err().to_string();
        assert!(
            e.contains("camera_model") && e.contains("orthographic"),
            "{e}"
        );
    }

    #[test]
    fn img_name_is_the_stem() {
        assert_eq!(img_name("images/IMG_01.jpg"), "IMG_01");
        assert_eq!(img_name("r_0"), "r_0");
        assert_eq!(img_name(".hidden"), ".hidden");
    }
}
