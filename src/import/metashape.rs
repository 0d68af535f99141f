//! Agisoft Metashape camera XML importer (`File > Export > Export Cameras`, format "Agisoft
//! XML"): the cameras of one chunk, their sensors' calibrations and the chunk's placement in
//! the world, turned into an [`ImportedScene`].
//!
//! # Accepted inputs
//! - the XML file itself (any name), or a folder holding `cameras.xml`;
//! - `<document>` with one `<chunk>` (directly, or inside `<chunks>`); a document with several
//!   chunks is refused (export one chunk at a time).
//!
//! # What is read
//! - `<sensor type="frame">` and `<sensor type="fisheye">` with a `<calibration>` (the one of
//!   class `adjusted` when there are several; otherwise the only one, with a warning when it
//!   is the `initial` one). Its `<resolution>` (else the sensor's) is the image size; `<f>` is
//!   the focal length and `<cx>`, `<cy>` are offsets of the principal point from the image
//!   centre, so the principal point is `(W/2 + cx, H/2 + cy)` in ramsplat's pixel convention
//!   (pixel centres at +0.5, [`crate::scene::camera`]). Metashape projects with
//!   `u = W/2 + cx + x'·(f + b1) + y'·b2`, `v = H/2 + cy + y'·f`, so the affinity `b1` is the
//!   difference of the two focal lengths: `fx = f + b1`, `fy = f`. The skew `b2` has no place
//!   in a pinhole camera: it is ignored while it moves no pixel by more than
//!   [`SKEW_TOLERANCE_PX`] and refused otherwise.
//! - frame sensors: Metashape's Brown model has the same radial polynomial as OpenCV's
//!   (`k1..k3`) and its tangential coefficients in the other order: Metashape's `P1` multiplies
//!   `r² + 2x²` where OpenCV's `p2` does, so `p = [P2, P1]` in
//!   [`Distortion::RadialTangential`]; with a nonzero `k4` (an `r⁸` term, which OpenCV's
//!   model does not have: its `k4` divides) the same lens is [`Distortion::Brown`]. `p3`/`p4`
//!   are refused naming the sensor.
//! - fisheye sensors: Metashape's fisheye model is the equidistant projection `θ = atan(r)`
//!   followed by the radial polynomial `1 + k1 θ² + … + k4 θ⁸`, which is OpenCV's fisheye
//!   model exactly ([`Distortion::Fisheye`]); tangential terms (`p1`, `p2`), which OpenCV's
//!   fisheye model has not, are refused.
//! - Other sensor types (spherical, cylindrical, RPC, …), sensors without a calibration,
//!   calibrations in the `<fx>`/`<fy>` form of old PhotoScan versions (whose principal-point
//!   convention is not this one) and the slave sensors of multi-camera rigs are refused,
//!   naming the sensor, when an aligned camera uses them.
//! - `<camera>` (also inside `<group>`s): `<transform>` is 16 numbers, row-major, the
//!   camera-to-chunk rigid transform in OpenCV camera axes (x right, y down, z forward).
//!   Cameras without a transform were not aligned: they are skipped with one warning that
//!   counts them. A camera whose `<orientation>` (the photo's EXIF rotation) is not 1 is
//!   refused. Disabled cameras (`enabled="false"`) that have a transform are imported,
//!   as nerfstudio's `ns-process-data metashape` does, with a warning that counts them.
//!
//! # World frame
//! Camera transforms are in the chunk's internal frame, which has an arbitrary orientation and
//! scale. Each pose is mapped to Metashape's world frame by the similarity
//! `x_world = s·R·x + t` of the camera's component (`<components>`, Metashape 2.x) when it has
//! one, otherwise by the chunk's `<transform>` (`<rotation>` 3×3 row-major, `<translation>`,
//! `<scale>`; or a 4×4 similarity matrix), otherwise by the identity. So distances are in the
//! units Metashape shows (metres for a scaled or georeferenced project). A georeferenced chunk's
//! world frame is geocentric (ECEF): camera centres millions of metres from the origin, which a
//! warning points out.
//!
//! # Images
//! The image of a camera is its `label`'s file name (Metashape may store a full path) in the
//! images folder: `--images DIR` (relative to the XML's folder), else `images/` beside the XML
//! when it exists, else the XML's folder. The exact name is tried first, then the name with
//! `.png`/`.jpg`/`.jpeg` appended (labels without extension), then with its extension replaced
//! by those. A view is named by its image file's name. Two cameras reading one file are an
//! error; a missing image is skipped with a warning, or refused under `--strict`.
//!
//! # Points
//! The XML holds no points. `points.ply` beside the XML, when present, is imported as the SfM
//! cloud `"sfm"` through [`super::ply`], unchanged: it must already be in the world frame
//! above, i.e. exported (`File > Export > Export Points`, PLY) from the same chunk in its local
//! coordinates, or for a georeferenced chunk in the geocentric system. `gs-pack convert` warns
//! when fewer than half of a sample of them lie inside some camera's image and near the
//! cameras (the check every convert makes: `crate::pack::points_in_view`).
//! Without it, training starts from random points ([`ImportedScene::no_sfm_points`]).
//! Masks and `--depths` are not supported for Metashape projects (the latter is refused).
//!
//! # Invariants of the result
//! Views sorted by name, names unique, every camera validated at the calibration's resolution
//! before undistortion, `split` left to `--test-every`. Malformed XML, non-numeric or
//! non-finite values, non-rigid camera transforms, degenerate similarities, unknown sensor or
//! component ids and a project with no aligned camera are errors naming the file, the line and
//! the record.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use roxmltree::{Document, Node};

use super::ply::open_cloud;
use super::{
    file_present, folder_of, missing_images_note, ImportError, ImportOptions, ImportedScene,
    Location,
};
use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{mat_vec, Camera, CameraError, Intrinsics, Pose, Projection};

/// The file a folder is looked up for.
pub const CAMERAS_FILE: &str = "cameras.xml";

/// The point cloud read from beside the XML, when present.
pub const POINTS_FILE: &str = "points.ply";

/// The largest pixel shift the ignored skew `b2` may cause at the image's top or bottom edge:
/// a hundredth of a pixel is far below what training resolves.
pub const SKEW_TOLERANCE_PX: f64 = 0.01;

/// Image extensions tried for a label without one (appended) or with another one (replaced).
const IMAGE_EXTENSIONS: [&str; 6] = ["png", "jpg", "jpeg", "PNG", "JPG", "JPEG"];

/// Camera centres farther than this from the origin (in world units) suggest a geocentric
/// frame, where f32 rendering loses precision.
const FAR_FROM_ORIGIN: f64 = 1.0e5;

/// Imports a Metashape camera XML; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let file = if path.is_dir() {
        let f = path.join(CAMERAS_FILE);
        if !file_present(&f)? {
            return Err(ImportError::invalid(
                path,
                format!(
                    "no {CAMERAS_FILE} in this folder; export it from Metashape (File > Export > \
                     Export Cameras, Agisoft XML) or pass the XML file itself"
                ),
            ));
        }
        f
    } else {
        path.to_owned()
    };
    let root = folder_of(&file);
    super::refuse_depths(options, &file, "Metashape projects")?;
    let text = crate::fsutil::read_file_to_string(&file).map_err(|e| ImportError::io(&file, e))?;
    let doc = Document::parse(&text).map_err(|e| {
        ImportError::parse(
            &file,
            Location::Line(u64::from(e.pos().row)),
            format!("not well-formed XML ({e}); re-export the cameras from Metashape"),
        )
    })?;
    let x = Xml {
        file: &file,
        doc: &doc,
    };
    let chunk = x.chunk()?;
    let chunk_transform = match child(chunk, "transform") {
        Some(t) => Some(x.similarity(t, "the chunk's <transform>")?),
        None => None,
    };
    let components = x.components(chunk)?;
    let mut sensors: HashMap<&str, Node> = HashMap::new();
    for n in child(chunk, "sensors")
        .into_iter()
        .flat_map(|s| s.children())
        .filter(|n| n.has_tag_name("sensor"))
    {
        let id = n.attribute("id").unwrap_or("");
        if sensors.insert(id, n).is_some() {
            return Err(x.error(
                n,
                format!(
                    "a second <sensor> with id {id:?}: cameras could not tell which one they \
                     use; re-export the cameras"
                ),
            ));
        }
    }
    let cameras_node = child(chunk, "cameras").ok_or_else(|| {
        ImportError::invalid(
            &file,
            "the chunk has no <cameras>; is this a Metashape camera export?",
        )
    })?;

    let images_dir = match &options.images {
        Some(dir) => root.join(dir),
        None => Some(root.join("images"))
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| root.clone()),
    };
    let mut lenses: HashMap<&str, Lens> = HashMap::new();
    let mut warnings = Vec::new();
    let mut views = Vec::new();
    let mut missing = Vec::new();
    let mut unaligned: Vec<String> = Vec::new();
    let mut disabled = 0usize;
    let mut cameras_total = 0usize;
    let mut max_distance: f64 = 0.0;
    for cam in cameras_node
        .descendants()
        .filter(|n| n.has_tag_name("camera"))
    {
        cameras_total += 1;
        let at = x.line(cam);
        let id = cam.attribute("id").unwrap_or("?");
        let Some(transform) = child(cam, "transform") else {
            unaligned.push(cam.attribute("label").unwrap_or(id).to_owned());
            continue;
        };
        let label = cam.attribute("label").ok_or_else(|| {
            ImportError::parse(&file, at, format!("camera id {id} has no label attribute"))
        })?;
        let what = format!("camera {id} ({label})");
        let err = |msg: String| ImportError::parse(&file, at, format!("{what}: {msg}"));
        // Metashape keeps the photo's EXIF orientation here; which way the calibration and
        // pose then read the stored pixels is not documented, so only upright photos are read.
        if let Some(o) = child(cam, "orientation") {
            let v = o.text().unwrap_or("").trim();
            if v != "1" {
                return Err(err(format!(
                    "its image orientation is {v:?} (an EXIF rotation or flip), which is not \
                     supported; save the photos upright (orientation 1), re-align and export \
                     again"
                )));
            }
        }
        if cam.attribute("master_id").is_some() {
            return Err(err(
                "it belongs to a multi-camera rig (master_id), whose poses are not supported; \
                 export the rig's cameras as separate, independently aligned cameras"
                    .to_owned(),
            ));
        }
        if matches!(cam.attribute("enabled"), Some("false" | "0")) {
            disabled += 1;
        }
        let sensor_id = cam
            .attribute("sensor_id")
            .ok_or_else(|| err("no sensor_id attribute".to_owned()))?;
        let lens = match lenses.get(sensor_id) {
            Some(l) => l.clone(),
            None => {
                let node = *sensors.get(sensor_id).ok_or_else(|| {
                    err(format!(
                        "sensor_id {sensor_id} names no <sensor> of the chunk; re-export the \
                         cameras"
                    ))
                })?;
                let lens = x.lens(node)?;
                if lens.initial {
                    warnings.push(format!(
                        "sensor {sensor_id}: only its initial calibration is in the file (no \
                         adjusted one); it is used as it is"
                    ));
                }
                lenses.insert(sensor_id, lens.clone());
                lens
            }
        };
        let similarity = match cam.attribute("component_id") {
            Some(c) => match components.get(c) {
                Some(Some(s)) => Some(*s),
                Some(None) => chunk_transform,
                None => {
                    return Err(err(format!(
                        "component_id {c} names no <component> of the chunk; re-export the \
                         cameras"
                    )))
                }
            },
            None => chunk_transform,
        };
        let c2l = x
            .numbers::<16>(transform, "its <transform>")
            .map_err(&err)?;
        let pose = camera_pose(&c2l, similarity.as_ref()).map_err(|e| match e {
            Ok(msg) => err(msg),
            Err(source) => ImportError::Camera {
                path: file.clone(),
                what: what.clone(),
                source,
            },
        })?;

        let (name, image_path, exists) = find_image(&images_dir, label).map_err(&err)?;
        if !exists && !options.metadata_only {
            missing.push(name);
            continue;
        }
        let camera = Camera {
            width: lens.width,
            height: lens.height,
            intrinsics: lens.intrinsics,
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        camera.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: what.clone(),
            source,
        })?;
        max_distance = max_distance.max(norm(pose.centre()));
        let camera = super::camera_for_images(options, camera, &image_path, &name)?;
        views.push((
            label.to_owned(),
            ViewSource {
                name,
                image_path,
                camera,
                distortion: lens.distortion,
                split: None,
                mask_path: None,
                depth: None,
            },
        ));
    }

    views.sort_by(|a, b| a.1.name.cmp(&b.1.name));
    if let Some(w) = views.windows(2).find(|w| w[0].1.name == w[1].1.name) {
        return Err(ImportError::invalid(
            &file,
            format!(
                "cameras '{}' and '{}' both read the image {}; every image may be used by one \
                 camera only: remove the duplicate camera in Metashape and re-export",
                w[0].0,
                w[1].0,
                w[0].1.image_path.display()
            ),
        ));
    }
    let views: Vec<ViewSource> = views.into_iter().map(|(_, v)| v).collect();
    if !unaligned.is_empty() {
        warnings.push(format!(
            "{} of {cameras_total} cameras have no pose (not aligned in Metashape) and were \
             skipped (first: {})",
            unaligned.len(),
            unaligned[0]
        ));
    }
    if disabled > 0 {
        warnings.push(format!(
            "{disabled} cameras are disabled in Metashape but aligned; they were imported, as \
             nerfstudio does (remove them from the export to leave them out)"
        ));
    }
    let aligned = cameras_total - unaligned.len();
    warnings.extend(missing_images_note(
        &file,
        &mut missing,
        aligned,
        "aligned cameras",
        &images_dir,
        options.strict,
    )?);
    if views.is_empty() {
        let msg = if aligned == 0 {
            format!(
                "no aligned camera: {cameras_total} cameras listed, none with a <transform>; \
                 align the photos in Metashape (Workflow > Align Photos) and export again"
            )
        } else {
            format!(
                "no usable camera: {aligned} aligned cameras, none with an image file in {}; \
                 pass --images DIR to name the folder holding the photos",
                images_dir.display()
            )
        };
        return Err(ImportError::invalid(&file, msg));
    }
    if max_distance > FAR_FROM_ORIGIN {
        warnings.push(format!(
            "camera centres lie up to {max_distance:.0} units from the origin (a georeferenced, \
             geocentric world frame?); renderers work in f32, so precision is lost that far \
             out: set a local coordinate system on the chunk in Metashape and export again"
        ));
    }

    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    let points = root.join(POINTS_FILE);
    if !options.metadata_only && file_present(&points)? {
        // Whether the points lie where the cameras look is checked on every convert
        // (`crate::pack::points_in_view`).
        clouds.push(open_cloud(&points, "sfm", options, &mut warnings)?);
    }
    let no_sfm_points = clouds.is_empty();
    let random_start_note = no_sfm_points.then(|| {
        format!(
            "no {POINTS_FILE} beside the XML: training will start from random points, which \
             converges more slowly than from Metashape's points (File > Export > Export Points, \
             PLY, saved as {POINTS_FILE} beside the XML, or given with --points FILE)"
        )
    });
    Ok(ImportedScene {
        format: Format::Metashape,
        root,
        views,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

/// A sensor's camera model: size, pinhole intrinsics and lens.
#[derive(Clone, Debug)]
struct Lens {
    width: u32,
    height: u32,
    intrinsics: Intrinsics,
    distortion: Distortion,
    /// Whether this came from an `initial` calibration (no adjusted one in the file).
    initial: bool,
}

/// A similarity transform `x ↦ s·R·x + t`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Similarity {
    rotation: [[f64; 3]; 3],
    translation: [f64; 3],
    scale: f64,
}

/// The parsed document and its file, for messages that name the line.
struct Xml<'a, 'input> {
    file: &'a Path,
    doc: &'a Document<'input>,
}

impl<'a, 'input> Xml<'a, 'input> {
    fn line(&self, node: Node) -> Location {
        Location::Line(u64::from(self.doc.text_pos_at(node.range().start).row))
    }

    fn error(&self, node: Node, msg: impl Into<String>) -> ImportError {
        ImportError::parse(self.file, self.line(node), msg)
    }

    /// The one `<chunk>` of the document.
    fn chunk(&self) -> Result<Node<'a, 'input>, ImportError> {
        let top = self.doc.root_element();
        if !top.has_tag_name("document") {
            return Err(self.error(
                top,
                format!(
                    "the root element is <{}>, not <document>; is this a Metashape camera export \
                     (File > Export > Export Cameras, Agisoft XML)?",
                    top.tag_name().name()
                ),
            ));
        }
        let mut chunks: Vec<Node> = top.children().filter(|n| n.has_tag_name("chunk")).collect();
        if let Some(list) = child(top, "chunks") {
            chunks.extend(list.children().filter(|n| n.has_tag_name("chunk")));
        }
        match chunks.as_slice() {
            [one] => Ok(*one),
            [] => Err(self.error(top, "the document has no <chunk>; re-export the cameras")),
            [_, second, ..] => Err(self.error(
                *second,
                format!(
                    "the document has {} chunks; export the cameras of one chunk at a time",
                    chunks.len()
                ),
            )),
        }
    }

    /// `N` whitespace-separated finite numbers of `node`'s text.
    fn numbers<const N: usize>(&self, node: Node, what: &str) -> Result<[f64; N], String> {
        let text = node.text().unwrap_or("");
        let mut out = [0.0; N];
        let mut n = 0;
        for word in text.split_whitespace() {
            if n == N {
                return Err(format!("{what} has more than {N} numbers"));
            }
            out[n] = parse_number(word).map_err(|e| format!("{what}: {e}"))?;
            n += 1;
        }
        if n != N {
            return Err(format!("{what} has {n} numbers; expected {N}"));
        }
        Ok(out)
    }

    /// A `<transform>` with `<rotation>`, `<translation>`, `<scale>` children (each optional:
    /// identity, zero, one), or 16 numbers of a 4×4 similarity matrix.
    fn similarity(&self, node: Node, what: &str) -> Result<Similarity, ImportError> {
        let err = |msg: String| self.error(node, format!("{what}: {msg}"));
        let has_children = node.children().any(|n| n.is_element());
        let s = if has_children {
            let rotation = match child(node, "rotation") {
                Some(r) => {
                    let v = self.numbers::<9>(r, "<rotation>").map_err(err)?;
                    [[v[0], v[1], v[2]], [v[3], v[4], v[5]], [v[6], v[7], v[8]]]
                }
                None => Pose::IDENTITY.rotation,
            };
            let translation = match child(node, "translation") {
                Some(t) => self.numbers::<3>(t, "<translation>").map_err(err)?,
                None => [0.0; 3],
            };
            let scale = match child(node, "scale") {
                Some(s) => self.numbers::<1>(s, "<scale>").map_err(err)?[0],
                None => 1.0,
            };
            Similarity {
                rotation,
                translation,
                scale,
            }
        } else {
            let m = self.numbers::<16>(node, "the matrix").map_err(err)?;
            if m[12..15].iter().any(|v| v.abs() > 1e-9) || (m[15] - 1.0).abs() > 1e-9 {
                return Err(err(format!(
                    "bottom row is {:?}, not [0, 0, 0, 1]: not a similarity transform",
                    &m[12..]
                )));
            }
            let a = [[m[0], m[1], m[2]], [m[4], m[5], m[6]], [m[8], m[9], m[10]]];
            let scale = det3(&a).cbrt();
            if !(scale.is_finite() && scale > 0.0) {
                return Err(err(format!(
                    "its 3×3 part has determinant {} (a similarity's is the cube of a positive \
                     scale)",
                    det3(&a)
                )));
            }
            Similarity {
                rotation: a.map(|row| row.map(|v| v / scale)),
                translation: [m[3], m[7], m[11]],
                scale,
            }
        };
        if !(s.scale.is_finite() && s.scale > 0.0) {
            return Err(err(format!(
                "scale {} is not a positive number; fix the chunk's transform in Metashape",
                s.scale
            )));
        }
        Pose {
            rotation: s.rotation,
            translation: s.translation,
        }
        .validate()
        .map_err(|e| {
            err(format!(
                "{e}; fix the transform in Metashape and export again"
            ))
        })?;
        Ok(s)
    }

    /// The components' transforms by id (`None`: a component without one).
    fn components(
        &self,
        chunk: Node<'a, 'input>,
    ) -> Result<HashMap<&'a str, Option<Similarity>>, ImportError> {
        let mut out = HashMap::new();
        let Some(list) = child(chunk, "components") else {
            return Ok(out);
        };
        for c in list.children().filter(|n| n.has_tag_name("component")) {
            let id = c.attribute("id").unwrap_or("");
            let t = match child(c, "transform") {
                Some(t) => Some(self.similarity(t, &format!("component {id}'s <transform>"))?),
                None => None,
            };
            out.insert(id, t);
        }
        Ok(out)
    }

    /// The camera model of `<sensor>` `node` (see the module doc for what is accepted).
    fn lens(&self, node: Node) -> Result<Lens, ImportError> {
        let id = node.attribute("id").unwrap_or("?");
        let label = node.attribute("label").unwrap_or("");
        let err = |msg: String| self.error(node, format!("sensor {id} ({label:?}): {msg}"));
        let kind = node.attribute("type").unwrap_or("frame");
        let fisheye = match kind {
            "frame" => false,
            "fisheye" => true,
            other => {
                return Err(err(format!(
                    "sensor type {other:?} is not supported (only frame and fisheye cameras \
                     map to OpenCV's lens models); export undistorted frame images instead"
                )))
            }
        };
        if node.attribute("master_id").is_some()
            || child(node, "location").is_some()
            || child(node, "rotation").is_some()
        {
            return Err(err(
                "it is a slave sensor of a multi-camera rig (an offset from its master), which \
                 is not supported; export the rig's cameras as separate, independently aligned \
                 cameras"
                    .to_owned(),
            ));
        }
        let calibrations: Vec<Node> = node
            .children()
            .filter(|n| n.has_tag_name("calibration"))
            .collect();
        let (calib, initial) =
            match calibrations
                .iter()
                .find(|c| c.attribute("class") == Some("adjusted"))
            {
                Some(c) => (*c, false),
                None => {
                    match calibrations.as_slice() {
                        [one] => (*one, one.attribute("class") == Some("initial")),
                        [] => return Err(err(
                            "it has no <calibration>; calibrate the camera in Metashape (Align \
                         Photos) and export again"
                                .to_owned(),
                        )),
                        _ => return Err(err(
                            "it has several <calibration>s and none of class \"adjusted\"; export \
                         again after aligning"
                                .to_owned(),
                        )),
                    }
                }
            };
        let resolution = child(calib, "resolution")
            .or_else(|| child(node, "resolution"))
            .ok_or_else(|| err("no <resolution> (image size)".to_owned()))?;
        let side = |key: &str| -> Result<u32, ImportError> {
            let v = resolution
                .attribute(key)
                .ok_or_else(|| err(format!("<resolution> has no {key}")))?;
            match v.trim().parse::<u32>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(err(format!(
                    "<resolution> {key}={v:?} is not a positive whole number of pixels"
                ))),
            }
        };
        let (width, height) = (side("width")?, side("height")?);
        let value = |key: &str| -> Result<Option<f64>, ImportError> {
            match child(calib, key) {
                None => Ok(None),
                Some(n) => self
                    .numbers::<1>(n, &format!("<{key}>"))
                    .map(|v| Some(v[0]))
                    .map_err(&err),
            }
        };
        let coeff = |key: &str| value(key).map(|v| v.unwrap_or(0.0));
        let Some(f) = value("f")? else {
            let msg = if child(calib, "fx").is_some() {
                "its calibration has <fx>/<fy> (the format of old PhotoScan versions), whose \
                 principal point convention is not Metashape's; export again from Metashape \
                 1.5 or later"
            } else {
                "its calibration has no focal length <f>"
            };
            return Err(err(msg.to_owned()));
        };
        if f <= 0.0 {
            return Err(err(format!(
                "focal length <f> {f} is not positive; the calibration is broken, calibrate the \
                 camera again"
            )));
        }
        let (b1, b2) = (coeff("b1")?, coeff("b2")?);
        // y' reaches about (H/2)/f at the top and bottom edges, where the skew moves pixels
        // by b2·y'.
        let skew_px = b2.abs() * f64::from(height) / (2.0 * f);
        if skew_px > SKEW_TOLERANCE_PX {
            return Err(err(format!(
                "its skew b2 = {b2} moves pixels by up to {skew_px:.3} px, which a pinhole \
                 camera cannot represent; re-align with b2 fixed at 0 (Camera Calibration), or \
                 undistort the photos in Metashape and export those"
            )));
        }
        let [k1, k2, k3, k4] = [coeff("k1")?, coeff("k2")?, coeff("k3")?, coeff("k4")?];
        let [p1, p2, p3, p4] = [coeff("p1")?, coeff("p2")?, coeff("p3")?, coeff("p4")?];
        if p3 != 0.0 || p4 != 0.0 {
            return Err(err(format!(
                "higher-order tangential terms p3 = {p3}, p4 = {p4} are not supported by \
                 OpenCV's lens models; re-align with them fixed at 0"
            )));
        }
        let distortion = if fisheye {
            if p1 != 0.0 || p2 != 0.0 {
                return Err(err(format!(
                    "a fisheye sensor with tangential terms p1 = {p1}, p2 = {p2}, which OpenCV's \
                     fisheye model does not have; re-align with them fixed at 0"
                )));
            }
            Distortion::Fisheye {
                k: [k1, k2, k3, k4],
            }
        } else {
            // Metashape's P1 multiplies r² + 2x² in x', which is OpenCV's p2.
            Distortion::brown_polynomial([k1, k2, k3, k4], [p2, p1])
        };
        let intrinsics = Intrinsics {
            fx: f + b1,
            fy: f,
            cx: f64::from(width) / 2.0 + coeff("cx")?,
            cy: f64::from(height) / 2.0 + coeff("cy")?,
        };
        if intrinsics.fx <= 0.0 {
            return Err(err(format!(
                "f + b1 = {} is not a positive focal length",
                intrinsics.fx
            )));
        }
        Ok(Lens {
            width,
            height,
            intrinsics,
            distortion,
            initial,
        })
    }
}

/// The first child element of `node` named `name`.
fn child<'a, 'input>(node: Node<'a, 'input>, name: &str) -> Option<Node<'a, 'input>> {
    node.children().find(|n| n.has_tag_name(name))
}

/// A finite number.
fn parse_number(word: &str) -> Result<f64, String> {
    match word.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(v) => Err(format!("{v} is not a finite number")),
        Err(_) => Err(format!("{word:?} is not a number")),
    }
}

/// The world-to-camera pose of a camera whose camera-to-chunk transform is `m` (row-major
/// 4×4), mapped to the world by `similarity`. `Err(Ok(msg))`: a malformed matrix;
/// `Err(Err(_))`: a camera error (not a rotation).
fn camera_pose(
    m: &[f64; 16],
    similarity: Option<&Similarity>,
) -> Result<Pose, Result<String, CameraError>> {
    if m[12..15].iter().any(|v| v.abs() > 1e-9) || (m[15] - 1.0).abs() > 1e-9 {
        return Err(Ok(format!(
            "its <transform>'s bottom row is {:?}, not [0, 0, 0, 1]: not a rigid transform",
            &m[12..]
        )));
    }
    let a = [[m[0], m[1], m[2]], [m[4], m[5], m[6]], [m[8], m[9], m[10]]];
    let c = [m[3], m[7], m[11]];
    // The camera transform must be rigid on its own: the chunk's scale lives in the chunk's
    // transform, and a scaled camera matrix would be read as a wrong rotation.
    Pose {
        rotation: a,
        translation: c,
    }
    .validate()
    .map_err(Err)?;
    let (rotation, centre) = match similarity {
        None => (a, c),
        Some(s) => {
            // x_world = s·R·(A·x_cam + c) + t: the camera's axes turn by R (the scale only
            // stretches the camera's own units, which projection does not see) and its centre
            // moves to s·R·c + t.
            let rc = mat_vec(&s.rotation, c);
            (
                mat_mul(&s.rotation, &a),
                [0, 1, 2].map(|i| s.scale * rc[i] + s.translation[i]),
            )
        }
    };
    Ok(Pose::from_camera_to_world(rotation, centre))
}

/// The image of the camera labelled `label` in `dir`: (view name, path, whether it exists).
fn find_image(dir: &Path, label: &str) -> Result<(String, PathBuf, bool), String> {
    // Metashape may store the photo's full path (either separator) as the label.
    let file_name = label.rsplit(['/', '\\']).next().unwrap_or("");
    if file_name.is_empty() || file_name == "." || file_name == ".." {
        return Err(format!("its label {label:?} names no image file"));
    }
    // Something other than a file under an image's name is an error, not a missing image.
    let present = |p: &Path| file_present(p).map_err(|e| e.to_string());
    let exact = dir.join(file_name);
    if present(&exact)? {
        return Ok((file_name.to_owned(), exact, true));
    }
    let stem = Path::new(file_name)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| s != file_name);
    let candidates = IMAGE_EXTENSIONS
        .iter()
        .map(|ext| format!("{file_name}.{ext}"))
        .chain(
            stem.iter()
                .flat_map(|s| IMAGE_EXTENSIONS.iter().map(move |ext| format!("{s}.{ext}"))),
        );
    for name in candidates {
        let p = dir.join(&name);
        if present(&p)? {
            return Ok((name, p, true));
        }
    }
    Ok((file_name.to_owned(), exact, false))
}

fn mat_mul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut out = [[0.0; 3]; 3];
    for (i, row) in out.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    out
}

fn det3(m: &[[f64; 3]; 3]) -> f64 {
    m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}
