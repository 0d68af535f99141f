//! RealityCapture / RealityScan importer: the per-image XMP files of a registration export
//! (`Alignment > Export > Registration > Metadata (XMP)`, or RealityScan's `-exportXMP`),
//! turned into an [`ImportedScene`].
//!
//! # Accepted inputs
//! A folder holding the XMP files, one `<stem>.xmp` per photo (the name RealityCapture reads
//! and writes: `IMG_0001.xmp` for `IMG_0001.JPG`). Each photo is the file of the same stem
//! (or, when it is the only one, of the same stem in another case: RealityCapture runs on
//! Windows) with a PNG, JPEG or WebP extension (any case) in the same folder, or in
//! `--images DIR` (relative to the XMP folder). A stem with two such photos is refused (which one the pose
//! belongs to is unclear), and so is a stem whose only photo is of a format ramsplat does
//! not decode (TIFF, DNG: RealityCapture reads them), naming the file. `_common.xmp`, the
//! folder-wide calibration prior RealityCapture reads on import, describes no photo and is
//! not read; nor is an `.xmp` file without RealityCapture's data (another program's sidecar),
//! which a warning counts.
//!
//! # What is read
//! The `xcr:` properties (namespace `http://www.capturingreality.com/ns/xcr/1.1#`) of the
//! document's `rdf:Description`, each as an attribute or as a child element (RealityCapture
//! has written `Position` and `Rotation` either way):
//! - `Rotation`: nine numbers, row-major, the world-to-camera rotation `R` in OpenCV's camera
//!   axes (x right, y down, z forward); `Position`: the camera centre `C`. The world-to-camera
//!   pose is `[R | −R·C]` (RealityCapture's own OpenCV export writes the same `R` with
//!   `t = −R·C`). A file without both holds no registered pose (a calibration prior, or a
//!   photo RealityCapture did not align): it is skipped, and a warning counts such files.
//! - `FocalLength35mm`: the 35 mm-equivalent focal length, which relates the focal length to
//!   the photo's longer side as 36 mm (the long side of a 135 frame) does, so
//!   `fx = FocalLength35mm · max(W, H) / 36` for a `W×H` photo. `AspectRatio` (default 1) is
//!   `fy / fx`. `PrincipalPointU`/`V` (default 0) are the principal point's offset from the
//!   image centre in the same units, so `cx = W/2 + U·max(W, H)`, `cy = H/2 + V·max(W, H)`
//!   (ramsplat's pixel centres are at +0.5, [`crate::scene::camera`]). Because the file
//!   describes the camera relative to the photo's size, a resized copy of the photos
//!   (`--images images_4`) gets its camera from its own size. `Skew` must be 0: a pinhole
//!   camera here has none.
//! - `DistortionModel` and `DistortionCoeficients` (RealityCapture's spelling; six numbers,
//!   `k1 k2 k3 k4 t1 t2`, the slots a model does not use zero): `perspective` (no lens),
//!   `brown3`, `brown4`, `brown3t2`, `brown4t2`. Brown's radial polynomial is OpenCV's, and
//!   its tangential terms are in the other order: `t1` multiplies `r² + 2x²` in x, where
//!   OpenCV's `p2` does (RealityCapture's OpenCV export writes `t2, t1` as `p1, p2`), so
//!   `p = [t2, t1]` in [`Distortion::RadialTangential`]; with a nonzero `k4` (an `r⁸` term,
//!   which OpenCV's model has not: its `k4` divides) the lens is [`Distortion::Brown`]. A
//!   nonzero coefficient in a slot the model does not use is refused (the file contradicts
//!   itself). `division` with `k = 0` is no lens; with another `k` it is refused, and so are
//!   the `rational…` models: how RealityCapture normalises their coordinates is not
//!   documented, and a guess would warp every photo. Re-align with a Brown model
//!   (RealityScan's default, Brown3) and export again.
//! - `Coordinates`: `absolute` (or absent) only, the scene's frame; the other values
//!   RealityCapture knows (`relative`, `rigid`: poses within a rig, as far as is known; their
//!   frame is not documented) are refused. A georeferenced export can put the cameras millions of metres from
//!   the origin, which a warning points out (renderers work in `f32`).
//!
//! # Points
//! The XMP files hold no points, so training starts from random points
//! ([`ImportedScene::no_sfm_points`]) unless `gs-pack convert --points FILE` gives a cloud in
//! the same frame: RealityCapture's sparse point cloud exported as PLY in the XMP files'
//! coordinate system. The note says so, naming a lone `.ply` in the folder when there is one.
//! Masks and `--depths` are not supported (the latter is refused).
//!
//! # Invariants of the result
//! Views sorted by name (the photo's file name), names unique, every camera validated at its
//! photo's stored size before undistortion, `split` left to `--test-every`. Malformed XML,
//! non-numeric or non-finite values, a wrong count of numbers, a rotation that is not one, a
//! property given twice with different values and a folder with no registered camera are
//! errors naming the file and the line.

use std::collections::HashMap;
use std::path::Path;

use roxmltree::{Document, Node};

use super::{missing_images_note, ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{mat_vec, Camera, CameraError, Intrinsics, Pose, Projection};

/// The XML namespace of RealityCapture's properties.
pub const XCR_NAMESPACE: &str = "http://www.capturingreality.com/ns/xcr/1.1#";

/// RDF's namespace, whose `Description` element holds the properties.
const RDF_NAMESPACE: &str = "http://www.w3.org/1999/02/22-rdf-syntax-ns#";

/// The folder-wide prior RealityCapture reads on import; it describes no photo.
pub const COMMON_XMP: &str = "_common.xmp";

/// An XMP file needs a few kilobytes; this refuses a photo or a model given the extension by
/// mistake before reading it all.
pub const MAX_XMP_BYTES: u64 = 1 << 20;

/// The photo extensions ramsplat decodes (any case).
const PHOTO_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// Camera centres farther than this from the origin (in world units) suggest a georeferenced
/// frame, where f32 rendering loses precision.
const FAR_FROM_ORIGIN: f64 = 1.0e5;

/// A skew this small is rounding, not a camera property (RealityCapture writes 0 unless a K+
/// model estimated one).
const SKEW_TOLERANCE: f64 = 1e-9;

/// A registered camera's pose as the file gives it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct XmpPose {
    /// World-to-camera rotation, OpenCV's camera axes.
    pub rotation: [[f64; 3]; 3],
    /// Camera centre in the world.
    pub position: [f64; 3],
}

/// One XMP file's camera, relative to its photo's size (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct XmpCamera {
    pub pose: XmpPose,
    /// 35 mm-equivalent focal length: `fx = focal_35mm · max(W, H) / 36`.
    pub focal_35mm: f64,
    /// `fy / fx`.
    pub aspect_ratio: f64,
    /// The principal point's offset from the image centre, in units of the longer side.
    pub principal_point: [f64; 2],
    pub distortion: Distortion,
}

/// What an XMP file holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Xmp {
    /// No RealityCapture property: another program's sidecar.
    Foreign,
    /// RealityCapture's properties without a pose: a prior, or a photo it did not align.
    Unregistered,
    Camera(XmpCamera),
}

impl XmpCamera {
    /// The camera of this file's `width × height` photo.
    pub fn camera(&self, width: u32, height: u32) -> Result<Camera, CameraError> {
        let (w, h) = (f64::from(width), f64::from(height));
        let side = w.max(h);
        let fx = self.focal_35mm * side / 36.0;
        let r = self.pose.rotation;
        let rc = mat_vec(&r, self.pose.position);
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx,
                fy: fx * self.aspect_ratio,
                cx: w / 2.0 + self.principal_point[0] * side,
                cy: h / 2.0 + self.principal_point[1] * side,
            },
            world_to_camera: Pose {
                rotation: r,
                translation: [-rc[0], -rc[1], -rc[2]],
            },
            projection: Projection::Pinhole,
        };
        camera.validate()?;
        Ok(camera)
    }
}

/// One `xcr:` property: its value and the line it is on.
struct Property<'a> {
    value: &'a str,
    line: u64,
}

/// The `xcr:` properties of a parsed XMP document, by name.
struct Properties<'a> {
    file: &'a Path,
    map: HashMap<&'a str, Property<'a>>,
}

impl<'a> Properties<'a> {
    /// Every `xcr:` attribute and child element of the document's `rdf:Description`s. A
    /// property given twice with different values is refused.
    fn collect(file: &'a Path, doc: &'a Document<'a>) -> Result<Properties<'a>, ImportError> {
        let line = |node: Node| u64::from(doc.text_pos_at(node.range().start).row);
        let mut map: HashMap<&'a str, Property<'a>> = HashMap::new();
        let mut add = |name: &'a str, value: &'a str, at: u64| match map.get(name) {
            Some(p) if p.value.trim() != value.trim() => Err(ImportError::parse(
                file,
                Location::Line(at),
                format!(
                    "xcr:{name} is given twice, as {:?} (line {}) and as {value:?}; the file \
                     contradicts itself: export it from RealityCapture again",
                    p.value, p.line
                ),
            )),
            Some(_) => Ok(()),
            None => {
                map.insert(name, Property { value, line: at });
                Ok(())
            }
        };
        for desc in doc.descendants().filter(|n| {
            n.is_element()
                && n.tag_name().name() == "Description"
                && n.tag_name().namespace() == Some(RDF_NAMESPACE)
        }) {
            for a in desc.attributes() {
                if a.namespace() == Some(XCR_NAMESPACE) {
                    add(a.name(), a.value(), line(desc))?;
                }
            }
            for c in desc
                .children()
                .filter(|c| c.is_element() && c.tag_name().namespace() == Some(XCR_NAMESPACE))
            {
                add(c.tag_name().name(), c.text().unwrap_or(""), line(c))?;
            }
        }
        Ok(Properties { file, map })
    }

    fn error(&self, line: u64, msg: String) -> ImportError {
        ImportError::parse(self.file, Location::Line(line), msg)
    }

    /// The property's `N` numbers, `None` when it is absent.
    fn numbers<const N: usize>(&self, name: &str) -> Result<Option<[f64; N]>, ImportError> {
        let Some(p) = self.map.get(name) else {
            return Ok(None);
        };
        let words: Vec<&str> = p.value.split_whitespace().collect();
        if words.len() != N {
            return Err(self.error(
                p.line,
                format!(
                    "xcr:{name} holds {} numbers ({:?}), not {N}; export the XMP files from \
                     RealityCapture again",
                    words.len(),
                    p.value.trim()
                ),
            ));
        }
        let mut out = [0.0; N];
        for (v, w) in out.iter_mut().zip(&words) {
            *v = match w.parse::<f64>() {
                Ok(x) if x.is_finite() => x,
                _ => {
                    return Err(
                        self.error(p.line, format!("xcr:{name}: {w:?} is not a finite number"))
                    )
                }
            };
        }
        Ok(Some(out))
    }

    /// The property's one number, `default` when it is absent.
    fn number(&self, name: &str, default: Option<f64>) -> Result<f64, ImportError> {
        match (self.numbers::<1>(name)?, default) {
            (Some([v]), _) => Ok(v),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(ImportError::invalid(
                self.file,
                format!(
                    "a registered camera (it has xcr:Rotation and xcr:Position) without \
                     xcr:{name}; export the XMP files from RealityCapture again"
                ),
            )),
        }
    }

    /// The line of a property (for messages about its value), or the file's first line.
    fn line(&self, name: &str) -> u64 {
        self.map.get(name).map_or(1, |p| p.line)
    }
}

/// Parses one XMP file's text (`file` names it in errors).
pub fn parse_xmp(text: &str, file: &Path) -> Result<Xmp, ImportError> {
    let doc = Document::parse(text).map_err(|e| {
        ImportError::parse(
            file,
            Location::Line(u64::from(e.pos().row)),
            format!("not well-formed XML ({e}); export the XMP files from RealityCapture again"),
        )
    })?;
    let props = Properties::collect(file, &doc)?;
    if props.map.is_empty() {
        return Ok(Xmp::Foreign);
    }
    let (Some(rows), Some(position)) = (
        props.numbers::<9>("Rotation")?,
        props.numbers::<3>("Position")?,
    ) else {
        return Ok(Xmp::Unregistered);
    };
    if let Some(p) = props.map.get("Coordinates") {
        if p.value.trim() != "absolute" {
            return Err(props.error(
                p.line,
                format!(
                    "xcr:Coordinates is {:?}: only absolute coordinates (the scene's frame) are \
                     read; export the registration with absolute coordinates",
                    p.value.trim()
                ),
            ));
        }
    }
    let rotation = [
        [rows[0], rows[1], rows[2]],
        [rows[3], rows[4], rows[5]],
        [rows[6], rows[7], rows[8]],
    ];
    let focal_35mm = props.number("FocalLength35mm", None)?;
    if focal_35mm <= 0.0 {
        return Err(props.error(
            props.line("FocalLength35mm"),
            format!("xcr:FocalLength35mm is {focal_35mm}, not a positive focal length"),
        ));
    }
    let aspect_ratio = props.number("AspectRatio", Some(1.0))?;
    if aspect_ratio <= 0.0 {
        return Err(props.error(
            props.line("AspectRatio"),
            format!("xcr:AspectRatio is {aspect_ratio}, not a positive ratio"),
        ));
    }
    let skew = props.number("Skew", Some(0.0))?;
    if skew.abs() > SKEW_TOLERANCE {
        return Err(props.error(
            props.line("Skew"),
            format!(
                "xcr:Skew is {skew}: a skewed camera is not supported (a pinhole camera here \
                 has none); align with a distortion model without skew (not a K+ model) and \
                 export again"
            ),
        ));
    }
    let principal_point = [
        props.number("PrincipalPointU", Some(0.0))?,
        props.number("PrincipalPointV", Some(0.0))?,
    ];
    let distortion = lens(&props)?;
    Ok(Xmp::Camera(XmpCamera {
        pose: XmpPose { rotation, position },
        focal_35mm,
        aspect_ratio,
        principal_point,
        distortion,
    }))
}

/// The lens of `DistortionModel` and `DistortionCoeficients` (see the module doc).
fn lens(props: &Properties) -> Result<Distortion, ImportError> {
    const COEFFS: &str = "DistortionCoeficients";
    let model = props
        .map
        .get("DistortionModel")
        .map_or("perspective", |p| p.value.trim());
    let c = props.numbers::<6>(COEFFS)?.unwrap_or([0.0; 6]);
    let at = props.line("DistortionModel");
    // Which of k1 k2 k3 k4 t1 t2 the model uses.
    let used: [bool; 6] = match model {
        "perspective" => [false; 6],
        "division" => [true, false, false, false, false, false],
        "brown3" => [true, true, true, false, false, false],
        "brown4" => [true, true, true, true, false, false],
        "brown3t2" => [true, true, true, false, true, true],
        "brown4t2" => [true; 6],
        "rationalP2D1" | "rationalP2D1T2" => {
            return Err(props.error(
                at,
                format!(
                    "the lens model {model:?} is not supported (RealityCapture does not document \
                     its normalisation); re-align with a Brown model (Brown3, RealityScan's \
                     default) and export the XMP files again"
                ),
            ))
        }
        other => {
            return Err(props.error(
                at,
                format!(
                    "unknown xcr:DistortionModel {other:?}; ramsplat reads perspective, brown3, \
                     brown4, brown3t2 and brown4t2"
                ),
            ))
        }
    };
    const SLOTS: [&str; 6] = ["k1", "k2", "k3", "k4", "t1", "t2"];
    if let Some(i) = (0..6).find(|&i| !used[i] && c[i] != 0.0) {
        return Err(props.error(
            props.line(COEFFS),
            format!(
                "xcr:{COEFFS} gives {} = {} but the lens model {model:?} has no such term, so \
                 which of the two is right is unclear: check the photos' lens model in \
                 RealityCapture and export the registration again",
                SLOTS[i], c[i]
            ),
        ));
    }
    let [k1, k2, k3, k4, t1, t2] = c;
    if model == "division" {
        if k1 != 0.0 {
            return Err(props.error(
                at,
                format!(
                    "the division lens model (k = {k1}) is not supported: RealityCapture does not \
                     document how it normalises the model's coordinates, and a guess would warp \
                     every photo; re-align with a Brown model (Brown3, RealityScan's default) \
                     and export the XMP files again"
                ),
            ));
        }
        return Ok(Distortion::NONE);
    }
    // RealityCapture's t1 multiplies r² + 2x² in x, which is OpenCV's p2.
    Ok(Distortion::brown_polynomial([k1, k2, k3, k4], [t2, t1]))
}

/// Reads one XMP file (at most [`MAX_XMP_BYTES`]).
fn read_xmp(path: &Path) -> Result<Xmp, ImportError> {
    let len = std::fs::metadata(path)
        .map_err(|e| ImportError::io(path, e))?
        .len();
    if len > MAX_XMP_BYTES {
        return Err(ImportError::invalid(
            path,
            format!(
                "{len} bytes: far larger than an XMP sidecar (at most {MAX_XMP_BYTES}); is this \
                 another kind of file named .xmp?"
            ),
        ));
    }
    let text = crate::fsutil::read_file_to_string(path).map_err(|e| ImportError::io(path, e))?;
    parse_xmp(&text, path)
}

/// Whether `name`'s extension is `ext` (any case).
fn has_extension(name: &str, ext: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case(ext))
}

/// The stem of a file name (`a.b.jpg` → `a.b`).
fn stem(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(s, _)| s)
}

/// The files of one stem in the photos' folder.
#[derive(Clone, Default)]
struct StemFiles {
    /// Those of an extension ramsplat decodes, sorted.
    photos: Vec<String>,
    /// The others (TIFF, DNG, …; not `.xmp`), sorted.
    others: Vec<String>,
}

/// The files of `dir` by stem.
fn files_by_stem(dir: &Path) -> Result<HashMap<String, StemFiles>, ImportError> {
    let mut out: HashMap<String, StemFiles> = HashMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ImportError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ImportError::io(dir, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if has_extension(&name, "xmp") || entry.path().is_dir() {
            continue;
        }
        let slot = out.entry(stem(&name).to_owned()).or_default();
        if PHOTO_EXTENSIONS.iter().any(|e| has_extension(&name, e)) {
            slot.photos.push(name);
        } else {
            slot.others.push(name);
        }
    }
    for files in out.values_mut() {
        files.photos.sort();
        files.others.sort();
    }
    Ok(out)
}

/// Imports a RealityCapture XMP export; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    if !path.is_dir() {
        return Err(ImportError::invalid(
            path,
            "a RealityCapture export is read as the folder holding its XMP files (one per \
             photo); pass that folder",
        ));
    }
    let root = path.to_owned();
    super::refuse_depths(options, &root, "RealityCapture exports")?;
    let mut xmps = Vec::new();
    let mut plys = Vec::new();
    for entry in std::fs::read_dir(&root).map_err(|e| ImportError::io(&root, e))? {
        let entry = entry.map_err(|e| ImportError::io(&root, e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if has_extension(&name, "xmp") && name != COMMON_XMP && !entry.path().is_dir() {
            xmps.push(name);
        } else if has_extension(&name, "ply") {
            plys.push(name);
        }
    }
    xmps.sort();
    if xmps.is_empty() {
        return Err(ImportError::invalid(
            &root,
            "the folder holds no .xmp files; export the registration from RealityCapture \
             (Alignment > Export > Registration > Metadata (XMP)) into the photos' folder",
        ));
    }
    let images_dir = options
        .images
        .as_ref()
        .map_or_else(|| root.clone(), |d| root.join(d));
    let files = files_by_stem(&images_dir)?;

    let mut views = Vec::new();
    let mut foreign = 0usize;
    let mut unregistered = 0usize;
    let mut missing = Vec::new();
    let mut max_distance: f64 = 0.0;
    for xmp_name in &xmps {
        let file = root.join(xmp_name);
        let xmp = match read_xmp(&file)? {
            Xmp::Foreign => {
                foreign += 1;
                continue;
            }
            Xmp::Unregistered => {
                unregistered += 1;
                continue;
            }
            Xmp::Camera(c) => c,
        };
        let key = stem(xmp_name);
        // RealityCapture runs on Windows, where `IMG_1.xmp` is the sidecar of `img_1.JPG`: a
        // stem of another case is taken when it is the only one.
        let stem_files = files.get(key).or_else(|| {
            let mut like = files.iter().filter(|(k, _)| k.eq_ignore_ascii_case(key));
            match (like.next(), like.next()) {
                (Some((_, f)), None) => Some(f),
                _ => None,
            }
        });
        let StemFiles { photos, others } = stem_files.cloned().unwrap_or_default();
        let name = match photos.as_slice() {
            [one] => one.clone(),
            [] if others.is_empty() => {
                missing.push(key.to_owned());
                continue;
            }
            [] => {
                return Err(ImportError::invalid(
                    images_dir.join(&others[0]),
                    format!(
                        "the photo of {xmp_name} is not a PNG, JPEG or WebP file, which is what \
                         ramsplat decodes; convert the photos (keeping their names' stems) and \
                         convert again"
                    ),
                ))
            }
            several => {
                return Err(ImportError::invalid(
                    &file,
                    format!(
                        "{} photos have its stem ({}), so which one it describes is unclear; \
                         move the others away",
                        several.len(),
                        several.join(", ")
                    ),
                ))
            }
        };
        let image_path = images_dir.join(&name);
        let what = format!("{xmp_name} ({name})");
        let Some((width, height)) =
            super::image::upright_photo_size(&image_path, &what, "an XMP file")?
        else {
            missing.push(key.to_owned());
            continue;
        };
        let camera = xmp
            .camera(width, height)
            .map_err(|source| ImportError::Camera {
                path: file.clone(),
                what: format!("the camera of {name}"),
                source,
            })?;
        max_distance = max_distance.max(norm(camera.centre()));
        views.push(ViewSource {
            name,
            image_path,
            camera,
            distortion: xmp.distortion,
            split: None,
            mask_path: None,
            depth: None,
        });
    }
    views.sort_by(|a, b| a.name.cmp(&b.name));

    let registered = xmps.len() - foreign - unregistered;
    if registered == 0 {
        return Err(ImportError::invalid(
            &root,
            if foreign == xmps.len() {
                format!(
                    "none of the {} .xmp files holds RealityCapture's camera data (its xcr: \
                     properties); export the registration from RealityCapture (Alignment > \
                     Export > Registration > Metadata (XMP)), or pass --format for another \
                     kind of dataset in this folder",
                    xmps.len()
                )
            } else {
                format!(
                    "none of the {} .xmp files holds a registered camera (xcr:Rotation and \
                     xcr:Position); align the photos in RealityCapture and export the \
                     registration",
                    xmps.len()
                )
            },
        ));
    }
    let mut warnings = Vec::new();
    if foreign > 0 {
        warnings.push(format!(
            "{foreign} of {} .xmp files hold no RealityCapture data (another program's \
             sidecars?) and were not read",
            xmps.len()
        ));
    }
    if unregistered > 0 {
        warnings.push(format!(
            "{unregistered} of {} .xmp files have no pose (photos RealityCapture did not align, \
             or calibration priors) and were skipped",
            xmps.len()
        ));
    }
    warnings.extend(missing_images_note(
        &root,
        &mut missing,
        registered,
        "registered cameras",
        &images_dir,
        options.strict,
    )?);
    if views.is_empty() {
        return Err(ImportError::invalid(
            &root,
            format!(
                "no usable camera: {registered} registered cameras, none with a photo in {}; \
                 pass --images DIR to name the folder holding the photos",
                images_dir.display()
            ),
        ));
    }
    if max_distance > FAR_FROM_ORIGIN {
        warnings.push(format!(
            "camera centres lie up to {max_distance:.0} units from the origin (a georeferenced \
             export?); renderers work in f32, so precision is lost that far out: export the \
             registration in a local coordinate system"
        ));
    }
    let clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    let hint = match plys.as_slice() {
        [one] => format!(
            " (if {one} in the folder is RealityCapture's point cloud exported in the XMP \
             files' coordinates, pass --points {one})"
        ),
        _ => String::new(),
    };
    let random_start_note = Some(format!(
        "RealityCapture's XMP files hold no points: training will start from random points, \
         which converges more slowly; export the sparse point cloud as PLY in the XMP files' \
         coordinate system and give it with --points FILE{hint}"
    ));
    Ok(ImportedScene {
        format: Format::Realitycapture,
        root,
        views,
        clouds,
        no_sfm_points: true,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

fn norm(v: [f64; 3]) -> f64 {
    (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered camera's XMP text with the given extra `xcr:` attributes.
    fn text(extra: &str) -> String {
        format!(
            "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF \
             xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><rdf:Description \
             xmlns:xcr=\"{XCR_NAMESPACE}\" xcr:FocalLength35mm=\"36\" {extra}>\
             <xcr:Rotation>0 1 0 -1 0 0 0 0 1</xcr:Rotation>\
             <xcr:Position>1 2 3</xcr:Position></rdf:Description></rdf:RDF></x:xmpmeta>"
        )
    }

    fn parse(extra: &str) -> XmpCamera {
        match parse_xmp(&text(extra), Path::new("a.xmp")).unwrap() {
            Xmp::Camera(c) => c,
            other => panic!("{other:?}"),
        }
    }

    /// The camera: focal length and principal point in units of the longer side, `fy` by the
    /// aspect ratio, the pose `[R | −R·C]`.
    #[test]
    fn the_camera_is_relative_to_the_longer_side() {
        let c = parse(
            "xcr:AspectRatio=\"1.5\" xcr:PrincipalPointU=\"0.25\" xcr:PrincipalPointV=\"-0.125\"",
        )
        .camera(80, 40)
        .unwrap();
        assert_eq!(
            c.intrinsics,
            Intrinsics {
                fx: 80.0,
                fy: 120.0,
                cx: 60.0,
                cy: 10.0
            }
        );
        assert_eq!(c.world_to_camera.translation, [-2.0, 1.0, -3.0]);
        assert_eq!(c.centre(), [1.0, 2.0, 3.0]);
    }

    /// RealityCapture's `t1` multiplies `r² + 2x²` in x (OpenCV's `p2`); a nonzero `k4` makes
    /// the lens the Brown model; `division` with `k = 0` and `perspective` are no lens.
    #[test]
    fn lenses_map_to_opencv_terms() {
        let d =
            parse("xcr:DistortionModel=\"brown3t2\" xcr:DistortionCoeficients=\"0 0 0 0 0.01 0\"")
                .distortion;
        let (x, y) = (0.3, -0.2);
        let (xd, yd) = d.distort(x, y);
        let r2: f64 = x * x + y * y;
        assert!((xd - (x + 0.01 * (r2 + 2.0 * x * x))).abs() < 1e-15, "{xd}");
        assert!((yd - (y + 2.0 * 0.01 * x * y)).abs() < 1e-15, "{yd}");
        assert_eq!(
            parse("xcr:DistortionModel=\"brown4t2\" xcr:DistortionCoeficients=\"1 2 3 4 5 6\"")
                .distortion,
            Distortion::Brown {
                k: [1.0, 2.0, 3.0, 4.0],
                p: [6.0, 5.0]
            }
        );
        for model in ["perspective", "division"] {
            let c = parse(&format!(
                "xcr:DistortionModel=\"{model}\" xcr:DistortionCoeficients=\"0 0 0 0 0 0\""
            ));
            assert!(c.distortion.is_none(), "{model}");
        }
    }

    /// A file without both pose properties is unregistered; one without `xcr:` properties is
    /// another program's.
    #[test]
    fn files_without_a_pose_or_without_xcr_are_told_apart() {
        let no_rotation = text("").replace("<xcr:Rotation>0 1 0 -1 0 0 0 0 1</xcr:Rotation>", "");
        assert_eq!(
            parse_xmp(&no_rotation, Path::new("a.xmp")).unwrap(),
            Xmp::Unregistered
        );
        let foreign = "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF \
                       xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\
                       <rdf:Description/></rdf:RDF></x:xmpmeta>";
        assert_eq!(
            parse_xmp(foreign, Path::new("a.xmp")).unwrap(),
            Xmp::Foreign
        );
    }
}
