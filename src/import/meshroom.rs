//! Meshroom / AliceVision importer: the cameras, poses and points of an AliceVision SfMData
//! file (`.sfm` or `.json`, the JSON that Meshroom's nodes pass along), turned into an
//! [`ImportedScene`].
//!
//! # Accepted inputs
//! - the file itself (any name: Meshroom's StructureFromMotion node writes `cameras.sfm`,
//!   its ConvertSfMFormat node `sfm.sfm` or `sfm.json`);
//! - a folder holding one of [`SFM_FILES`] (a Meshroom node's cache folder), the first found
//!   in that order: a converted file keeps the points, `cameras.sfm` has none.
//!
//! The dataset root (what `--images` and `--points` are relative to) is the file's folder.
//! Meshroom's own `sfm.abc` is Alembic, which is not read: the error says how to convert it.
//!
//! # What is read
//! AliceVision's JSON writer stores every number as a string (`"1.5"`) and an empty list as
//! `""`; other writers use plain numbers. Both are read, and vectors may be lists or
//! `{"x": …, "y": …}` objects (read in order, as AliceVision does).
//! - `version` (`[major, minor, revision]`) chooses how the intrinsics are read; layouts
//!   1.0 to 1.2.11 are known (later 1.2 revisions are read as 1.2.11, with a warning; another
//!   major or minor version is refused).
//! - `intrinsics`: `width`, `height`, the focal lengths in pixels (`pxFocalLength` before
//!   1.2.2; after, `focalLength` in millimetres with `sensorWidth` and `pixelRatio`, whose
//!   meaning changed in 1.2.5 and 1.2.11: `fy = focalLength·width/sensorWidth`,
//!   `fx = fy/pixelRatio` since 1.2.11), the principal point (from the top-left corner before
//!   1.2.1, from the image centre since), and the lens: before 1.2.8 one `type` (`pinhole`,
//!   `radial1`, `radial3`, `brown`, `fisheye4`), since `type` `pinhole` with a
//!   `distortionType` (`none`, `radialk1`, `radialk3`, `brown`, `fisheye`). They map to
//!   OpenCV's models ([`Distortion`]): `radialk1`/`radialk3` are `k1..k3` of the radial
//!   factor `1 + k1 r² + k2 r⁴ + k3 r⁶`, `brown` is `k1 k2 k3 t1 t2` with `t1, t2` OpenCV's
//!   `p1, p2` (the same tangential terms), `fisheye` is OpenCV's fisheye `k1..k4`. The
//!   equidistant (360°) camera, the `fisheye1`, `radialk3pt` and 3DEqualizer lens models
//!   (an `undistortionType` other than `none`) are refused, naming the intrinsic, when a
//!   reconstructed view uses one.
//!
//!   AliceVision puts pixel centres at whole coordinates (its image sampler reads pixel
//!   `(i, j)` at `(i, j)`); ramsplat puts them at +0.5 ([`crate::scene::camera`]), so
//!   `cx = ppx + 0.5`, `cy = ppy + 0.5` for AliceVision's principal point `(ppx, ppy)`
//!   (`width/2 + offset`).
//! - `poses`: `rotation` (nine values, the world-to-camera rotation `R` column by column:
//!   AliceVision stores Eigen's column-major order) and `center` (the camera centre `C`), so
//!   `x_cam = R·(x − C)` in OpenCV's camera axes, which is [`Pose`]'s convention with
//!   `t = −R·C`.
//! - `rigs`: a view that is part of a rig (`rigId`, `subPoseId`) whose `isPoseIndependant` is
//!   false (AliceVision writes the flag only then; absent, a view has a pose of its own) has
//!   the rig's pose followed by its sub-pose (`R = R_sub·R_rig`, `t = R_sub·t_rig + t_sub`),
//!   as AliceVision composes them; an uninitialised sub-pose leaves the view unreconstructed.
//! - `views`: each view's image `path` and its `poseId` and `intrinsicId`. A view whose pose is
//!   not in `poses` was not reconstructed (Meshroom lists every input image): it is left out,
//!   with a warning counting them.
//! - `structure`: each landmark's `X` and `color` (0–255), packed as the SfM cloud `"sfm"`.
//!   Without landmarks (`cameras.sfm`), training starts from random points
//!   ([`ImportedScene::no_sfm_points`]) and a note says how to get them.
//!
//! # Images
//! A view's image is, with `--images DIR` (relative to the root), its path's file name in
//! `DIR`; otherwise its path as written (Meshroom writes absolute paths; a relative one is
//! taken from the root) when that file exists, else its file name in `images/` under the
//! root, else in the root (for a project moved to another machine). A view is named by its
//! file name, or, when two views share one (the cameras of a rig), by its path below the
//! folder all the views' images share. AliceVision reads the stored pixels, ignoring EXIF
//! orientation: a photo whose orientation a pack would apply (a half turn, a mirror) is
//! refused by name. An image of the intrinsic's shape at another size (a resized copy) gets
//! the camera scaled to it. A missing image is skipped with a warning, or refused under
//! `--strict`. `--depths` is not supported (refused).
//!
//! # Memory
//! The JSON is parsed as it is read, never held whole: the landmarks go straight into what the
//! pack takes, 15 bytes each (position as f32, colour as u8), their observations are skipped,
//! and unknown fields are skipped.
//!
//! # Invariants of the result
//! Views sorted by name, names unique, every camera validated at its image's size before
//! undistortion, `split` left to `--test-every`. Malformed JSON, wrong types, non-finite
//! values, non-rotations, unknown intrinsic ids and a file with no usable view are errors
//! naming the file, the line or the record.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::BufReader;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::{
    file_present, folder_of, missing_images_note, ImportError, ImportOptions, ImportedScene,
    ParsedPoints,
};
use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};

/// The SfMData files a folder is searched for, in this order.
pub const SFM_FILES: [&str; 3] = ["sfm.json", "sfm.sfm", "cameras.sfm"];

/// The newest SfMData layout this reader knows.
const NEWEST: Version = Version(1, 2, 11);

/// Where the SfMData file of `path` is (module doc).
pub fn locate(path: &Path) -> Result<PathBuf, ImportError> {
    if !path.is_dir() {
        return Ok(path.to_owned());
    }
    for name in SFM_FILES {
        let file = path.join(name);
        if file_present(&file)? {
            return Ok(file);
        }
    }
    let alembic = path.join("sfm.abc");
    let hint = if file_present(&alembic)? {
        format!(
            "{} is Alembic, which ramsplat does not read: convert it with Meshroom's \
             ConvertSfMFormat node (SfM File Format: json or sfm), or with \
             `aliceVision_convertSfMFormat -i sfm.abc -o sfm.json`, and pass that file",
            alembic.display()
        )
    } else {
        "run Meshroom's StructureFromMotion node first, or pass the .sfm / .json file itself"
            .to_owned()
    };
    Err(ImportError::invalid(
        path,
        format!("no {} in this folder; {hint}", SFM_FILES.join(", ")),
    ))
}

/// Imports an AliceVision SfMData file; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let file = locate(path)?;
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    let root = folder_of(&file);
    from_reader(BufReader::new(reader), &file, root, options)
}

/// [`import`] of the SfMData read from `reader` (the file `file`, for messages), for the
/// dataset root `root` (the images are looked up from it). Public for the fuzz target, which
/// reads bytes under [`ImportOptions::metadata_only`].
pub fn from_reader(
    reader: impl std::io::Read,
    file: &Path,
    root: PathBuf,
    options: &ImportOptions,
) -> Result<ImportedScene, ImportError> {
    let file = file.to_owned();
    super::refuse_depths(options, &file, "Meshroom / AliceVision files")?;
    let sfm: SfmJson<Landmarks> = parse(reader, &file)?;
    let mut warnings = sfm.version_warning(&file);
    let (views, unreconstructed) = reconstructed(&sfm, &file)?;
    let listed = views.len();
    if unreconstructed > 0 {
        warnings.push(format!(
            "{unreconstructed} of {} views of {} were not reconstructed (no pose) and are left \
             out",
            sfm.views.len(),
            file.display()
        ));
    }
    let images_dir = options.images.as_ref().map(|dir| root.join(dir));
    let mut out = Vec::new();
    let mut missing = Vec::new();
    // Where the first missing image was looked for (its path as written, or --images).
    let mut missing_from: Option<PathBuf> = None;
    let mut lenses: HashMap<u32, Lens> = HashMap::new();
    for view in views {
        let lens = match lenses.get(&view.intrinsic) {
            Some(lens) => *lens,
            None => {
                let json = sfm.intrinsics.get(&view.intrinsic).ok_or_else(|| {
                    ImportError::invalid(
                        &file,
                        format!(
                            "view {} ({:?}): its intrinsic {} is not among the file's \
                             intrinsics; the file is damaged: export it again",
                            view.id, view.name, view.intrinsic
                        ),
                    )
                })?;
                let lens = Lens::of(json, sfm.version).map_err(|msg| {
                    ImportError::invalid(&file, format!("intrinsic {}: {msg}", view.intrinsic))
                })?;
                *lenses.entry(view.intrinsic).or_insert(lens)
            }
        };
        let what = format!("view {} ({:?})", view.id, view.name);
        view.pose.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: what.clone(),
            source,
        })?;
        let written = root.join(&view.path);
        let file_name = parts(&view.path).last().copied().unwrap_or_default();
        let image_path = match &images_dir {
            Some(dir) => dir.join(file_name),
            None if options.metadata_only => written,
            None => {
                let candidates = [
                    written.clone(),
                    root.join("images").join(file_name),
                    root.join(file_name),
                ];
                let mut found = None;
                for c in candidates {
                    if file_present(&c)? {
                        found = Some(c);
                        break;
                    }
                }
                found.unwrap_or(written)
            }
        };
        let mut camera = Camera {
            width: lens.width,
            height: lens.height,
            intrinsics: lens.intrinsics(),
            world_to_camera: view.pose,
            projection: Projection::Pinhole,
        };
        if !options.metadata_only {
            if !file_present(&image_path)? {
                missing.push(view.name.clone());
                missing_from.get_or_insert_with(|| folder_of(&image_path));
                continue;
            }
            let (w, h) = super::image::stored_photo_size(
                &image_path,
                &what,
                (lens.width, lens.height),
                "AliceVision",
            )?;
            if (w, h) != (lens.width, lens.height) {
                camera = camera.resized(w, h);
            }
        }
        camera.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: format!("{what} (intrinsic {})", view.intrinsic),
            source,
        })?;
        out.push(ViewSource {
            name: view.name,
            image_path,
            camera,
            distortion: lens.distortion,
            split: None,
            mask_path: None,
            depth: None,
        });
    }
    let place = missing_from.unwrap_or_else(|| root.clone());
    warnings.extend(missing_images_note(
        &file,
        &mut missing,
        listed,
        "reconstructed views",
        &place,
        options.strict,
    )?);
    if out.is_empty() {
        let msg = if listed == 0 {
            format!(
                "no reconstructed view: the file lists {} views and {} poses; run Meshroom's \
                 StructureFromMotion node (a CameraInit file has no poses yet)",
                sfm.views.len(),
                sfm.poses.len()
            )
        } else {
            format!(
                "no usable view: {listed} reconstructed views, none with an image file where \
                 its path points nor in {}; pass --images DIR to name the folder holding the \
                 photos",
                root.join("images").display()
            )
        };
        return Err(ImportError::invalid(&file, msg));
    }

    let no_sfm_points = sfm.structure.0.is_empty();
    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    if !no_sfm_points && !options.metadata_only {
        clouds.push(sfm.structure.0.into_cloud("sfm"));
    }
    let random_start_note = no_sfm_points.then(|| {
        format!(
            "{} has no landmarks (Meshroom's cameras.sfm holds only the cameras): training will \
             start from random points, which converges more slowly than from the SfM points; \
             convert the StructureFromMotion node's sfm.abc to sfm.json with ConvertSfMFormat \
             and pack that, or start from the mesh's vertices with --points \
             texturedMesh.obj (the Texturing node's)",
            file.display()
        )
    });
    Ok(ImportedScene {
        format: Format::Meshroom,
        root,
        views: out,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

/// `gs-pack convert --sfm-depths`: the landmarks each of `views` (the views [`import`] gave
/// for the same `path` and `options`, matched by name) observes, from the landmarks'
/// `observations` (each names the observing view by its `observationId`). Observations by
/// views that are not packed are not kept. A point enters the table once, when some packed
/// view observes it; each view lists it once, in the file's landmark order. A file whose
/// landmarks have no observation by a packed view (`cameras.sfm` has no landmarks; a
/// converted file may have been written without observations) is refused. Memory: the
/// landmarks' positions and observing views (24 bytes per landmark and 4 per observation)
/// while the file is read.
pub fn read_observations(
    path: &Path,
    _options: &ImportOptions,
    views: &[ViewSource],
) -> Result<super::sfm_depth::SfmObservations, ImportError> {
    let file = locate(path)?;
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    let sfm: SfmJson<Observed> = parse(BufReader::new(reader), &file)?;
    let (reconstructed, _) = reconstructed(&sfm, &file)?;
    let index_of_name: HashMap<&str, usize> = views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    let view_of_id: HashMap<u32, usize> = reconstructed
        .iter()
        .filter_map(|v| index_of_name.get(v.name.as_str()).map(|&i| (v.id, i)))
        .collect();
    let observed = sfm.structure;
    let mut lists: Vec<Vec<u32>> = vec![Vec::new(); views.len()];
    let mut xyz = Vec::new();
    let mut track_elements = 0u64;
    for (x, observers) in observed.points.iter().zip(observed.observers()) {
        track_elements += observers.len() as u64;
        let mut seen = false;
        let index = u32::try_from(xyz.len()).unwrap_or(u32::MAX);
        for id in observers {
            if let Some(&v) = view_of_id.get(id) {
                if lists[v].last() != Some(&index) {
                    lists[v].push(index);
                }
                seen = true;
            }
        }
        if seen {
            if index == u32::MAX {
                return Err(ImportError::invalid(
                    &file,
                    "more observed landmarks than --sfm-depths indexes (2³² − 1)",
                ));
            }
            xyz.push(*x);
        }
    }
    if xyz.is_empty() {
        return Err(ImportError::invalid(
            &file,
            format!(
                "none of its {} landmarks has an observation by a packed view ({track_elements} \
                 observations in all): --sfm-depths supervises depth at the points each image \
                 observes; pack a file written with its observations (Meshroom's \
                 ConvertSfMFormat with Observations on), or drop --sfm-depths",
                observed.points.len()
            ),
        ));
    }
    Ok(super::sfm_depth::SfmObservations {
        xyz,
        views: lists,
        track_elements,
    })
}

/// Parses a whole SfMData file, landmarks into `L`.
fn parse<L: Default + for<'de> Deserialize<'de>>(
    reader: impl std::io::Read,
    file: &Path,
) -> Result<SfmJson<L>, ImportError> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let sfm = SfmJson::<L>::deserialize(&mut de)
        .and_then(|s| de.end().map(|()| s))
        .map_err(|e| super::json_error(file, &e, "AliceVision"))?;
    let Some(version) = sfm.version else {
        return Err(ImportError::invalid(
            file,
            "no \"version\": not an AliceVision SfMData file (Meshroom's .sfm / .json); pass \
             --format for another kind of file",
        ));
    };
    if version.0 != 1 || version.1 > 2 {
        return Err(ImportError::invalid(
            file,
            format!(
                "SfMData version {version} is a layout this ramsplat does not know (it reads 1.0 \
                 to {NEWEST}); convert the file with an older AliceVision, or update ramsplat"
            ),
        ));
    }
    Ok(sfm)
}

/// A reconstructed view: where its image is, how it is named, its camera's intrinsic and pose.
struct Reconstructed {
    id: u32,
    name: String,
    /// The image path as written.
    path: String,
    intrinsic: u32,
    pose: Pose,
}

/// The views of `sfm` that have a pose (module doc: rigs), named and sorted by name, and how
/// many have none.
fn reconstructed<L>(
    sfm: &SfmJson<L>,
    file: &Path,
) -> Result<(Vec<Reconstructed>, usize), ImportError> {
    let mut out = Vec::new();
    let mut unreconstructed = 0;
    for (n, v) in sfm.views.iter().enumerate() {
        let record = |msg: String| ImportError::parse(file, super::Location::Record(n as u64), msg);
        let id = v
            .view_id
            .ok_or_else(|| record("a view without viewId".to_owned()))?
            .0;
        let Some(pose_id) = v.pose_id else {
            unreconstructed += 1;
            continue;
        };
        let Some(&pose) = sfm.poses.get(&pose_id.0) else {
            unreconstructed += 1;
            continue;
        };
        let pose = match (v.rig_id, v.sub_pose_id) {
            // AliceVision takes a view as pose-independent unless it says otherwise.
            (Some(rig), Some(sub)) if v.is_pose_independant.is_some_and(|f| !f.0) => {
                let rig_poses = sfm.rigs.get(&rig.0).ok_or_else(|| {
                    record(format!(
                        "view {id}: its rig {} is not among the file's rigs; the file is \
                         damaged: export it again",
                        rig.0
                    ))
                })?;
                let sub_pose = rig_poses.get(sub.0 as usize).ok_or_else(|| {
                    record(format!(
                        "view {id}: its rig {} has no sub-pose {} ({} sub-poses); the file is \
                         damaged: export it again",
                        rig.0,
                        sub.0,
                        rig_poses.len()
                    ))
                })?;
                match sub_pose {
                    Some(sub) => compose(sub, &pose),
                    None => {
                        unreconstructed += 1;
                        continue;
                    }
                }
            }
            _ => pose,
        };
        let intrinsic = v
            .intrinsic_id
            .ok_or_else(|| record(format!("view {id} has a pose but no intrinsicId")))?
            .0;
        let path = v.path.clone();
        if parts(&path).last().is_none_or(|p| *p == "..") || path.ends_with(['/', '\\']) {
            return Err(record(format!(
                "view {id}: its path {:?} names no image file; the file is damaged: export it \
                 again",
                v.path
            )));
        }
        out.push(Reconstructed {
            id,
            name: String::new(),
            path,
            intrinsic,
            pose,
        });
    }
    name_views(&mut out, file)?;
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((out, unreconstructed))
}

/// The parts of a path as AliceVision writes it: split at `/` and at `\\` (a project made on
/// Windows), empty and `.` parts dropped.
fn parts(path: &str) -> Vec<&str> {
    path.split(['/', '\\'])
        .filter(|p| !p.is_empty() && *p != ".")
        .collect()
}

/// Names each view by its file name, or, when two share one, by its path below the folder all
/// the images share.
fn name_views(views: &mut [Reconstructed], file: &Path) -> Result<(), ImportError> {
    let all: Vec<Vec<&str>> = views.iter().map(|v| parts(&v.path)).collect();
    let twice = |names: &[String]| {
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        sorted
            .windows(2)
            .find(|w| w[0] == w[1])
            .map(|w| w[0].clone())
    };
    let mut names: Vec<String> = all
        .iter()
        .map(|p| p.last().copied().unwrap_or_default().to_owned())
        .collect();
    if twice(&names).is_some() {
        // The folders every path starts with (never the file name itself).
        let shared = all.iter().skip(1).fold(
            all.first().map_or(0, |p| p.len().saturating_sub(1)),
            |n, p| {
                let common = all[0].iter().zip(p).take_while(|(a, b)| a == b).count();
                n.min(common).min(p.len().saturating_sub(1))
            },
        );
        names = all.iter().map(|p| p[shared..].join("/")).collect();
        // A name is a plain relative path (an export writes the view's image by its name).
        if let Some(at) = all.iter().position(|p| p[shared..].contains(&"..")) {
            return Err(ImportError::invalid(
                file,
                format!(
                    "the image paths {:?} and {:?} differ in their parent folders (\"..\"), \
                     which no view name can hold; write the project with absolute image paths \
                     (Meshroom's own)",
                    views[0].path, views[at].path
                ),
            ));
        }
        if let Some(name) = twice(&names) {
            let at = names.iter().position(|n| *n == name).unwrap_or(0);
            return Err(ImportError::invalid(
                file,
                format!(
                    "two reconstructed views use the same image {:?}; the file is damaged: \
                     export it again",
                    views[at].path
                ),
            ));
        }
    }
    for (v, name) in views.iter_mut().zip(names) {
        v.name = name;
    }
    Ok(())
}

/// The pose of a rig's camera: the rig's pose, then the camera's sub-pose.
fn compose(sub: &Pose, rig: &Pose) -> Pose {
    Pose {
        rotation: crate::scene::maths::mat3_mul(&sub.rotation, &rig.rotation),
        translation: sub.transform(rig.translation),
    }
}

/// An SfMData layout version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The camera model of an AliceVision intrinsic, in pixels.
#[derive(Clone, Copy, Debug)]
struct Lens {
    width: u32,
    height: u32,
    focal: [f64; 2],
    /// AliceVision's principal point (pixel centres at whole coordinates).
    principal: [f64; 2],
    distortion: Distortion,
}

impl Lens {
    /// The lens of `c`, read by the rules of `version` (module doc), or what is wrong with it.
    fn of(c: &IntrinsicJson, version: Option<Version>) -> Result<Lens, String> {
        let version = version.unwrap_or(NEWEST).min(NEWEST);
        let side = |v: Option<Num>, what: &str| -> Result<u32, String> {
            match v.map(|n| n.0) {
                Some(v) if v.fract() == 0.0 && v >= 1.0 && v <= f64::from(u32::MAX) => Ok(v as u32),
                Some(v) => Err(format!(
                    "{what} {v} is not a positive whole number of pixels"
                )),
                None => Err(format!("no {what}; the file is damaged: export it again")),
            }
        };
        let (width, height) = (side(c.width, "width")?, side(c.height, "height")?);
        let (w, h) = (f64::from(width), f64::from(height));
        let number = |v: Option<Num>, what: &str| -> Result<f64, String> {
            match v.map(|n| n.0) {
                Some(v) if v.is_finite() => Ok(v),
                Some(v) => Err(format!("{what} {v} is not a finite number")),
                None => Err(format!("no {what}; the file is damaged: export it again")),
            }
        };
        let positive = |v: f64, what: &str| -> Result<f64, String> {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(format!(
                    "{what} {v} is not a positive number (an uncalibrated camera: reconstruct \
                     the scene before packing it)"
                ))
            }
        };

        // The projection and the lens: one name before 1.2.8, three fields since.
        let kind = c.kind.to_ascii_lowercase();
        let (projection, distortion, undistortion) = if version < Version(1, 2, 8) {
            match kind.as_str() {
                "pinhole" => ("pinhole", "none", "none"),
                "radial1" => ("pinhole", "radialk1", "none"),
                "radial3" => ("pinhole", "radialk3", "none"),
                "brown" => ("pinhole", "brown", "none"),
                "fisheye4" => ("pinhole", "fisheye", "none"),
                "fisheye1" => ("pinhole", "fisheye1", "none"),
                "3deanamorphic4" => ("pinhole", "none", "3deanamorphic4"),
                "equidistant" => ("equidistant", "none", "none"),
                "equidistant_r3" => ("equidistant", "radialk3pt", "none"),
                other => {
                    return Err(format!(
                        "type {other:?} is not one AliceVision {version} writes (pinhole, \
                         radial1, radial3, brown, fisheye4, fisheye1, equidistant, …)"
                    ))
                }
            }
        } else {
            let field = |v: &Option<String>, what: &str| -> Result<String, String> {
                v.as_ref()
                    .map(|s| s.to_ascii_lowercase())
                    .ok_or_else(|| format!("no {what}; the file is damaged: export it again"))
            };
            let d = field(&c.distortion_type, "distortionType")?;
            let u = field(&c.undistortion_type, "undistortionType")?;
            let p: &str = &kind;
            let known = |s: &str, list: &[&'static str]| list.iter().find(|k| **k == s).copied();
            let p = known(p, &["pinhole", "equidistant"]).ok_or_else(|| {
                format!("type {p:?} is not one AliceVision writes (pinhole, equidistant)")
            })?;
            let d = known(
                &d,
                &[
                    "none",
                    "radialk1",
                    "radialk3",
                    "radialk3pt",
                    "brown",
                    "fisheye",
                    "fisheye1",
                ],
            )
            .ok_or_else(|| format!("distortionType {d:?} is not one AliceVision writes"))?;
            let u = known(
                &u,
                &[
                    "none",
                    "radialk3",
                    "3deanamorphic4",
                    "3declassicld",
                    "3deradial4",
                ],
            )
            .ok_or_else(|| format!("undistortionType {u:?} is not one AliceVision writes"))?;
            (p, d, u)
        };
        if projection == "equidistant" {
            return Err(
                "an equidistant camera (a 360° fisheye with its image circle) has no OpenCV lens \
                 model to resample its photos with; calibrate the lens as pinhole with the \
                 fisheye distortion (Meshroom's CameraInit: fisheye4) and reconstruct again"
                    .to_owned(),
            );
        }
        if undistortion != "none" {
            return Err(format!(
                "its lens is the undistortion model {undistortion:?} (3DEqualizer's), which has \
                 no OpenCV equivalent; calibrate the camera as radial3, brown or fisheye4 and \
                 reconstruct again"
            ));
        }
        let count = match distortion {
            "none" => 0,
            "radialk1" => 1,
            "radialk3" => 3,
            "brown" => 5,
            "fisheye" => 4,
            other => {
                return Err(format!(
                    "its distortion model {other:?} has no OpenCV equivalent; calibrate the \
                     camera as radial3, brown or fisheye4 and reconstruct again"
                ))
            }
        };
        let params = c.distortion_params.as_ref().map_or(&[][..], |p| &p.0[..]);
        // AliceVision keeps a model's default (all zero) coefficients when the list is empty.
        let k: Vec<f64> = match params.len() {
            0 => vec![0.0; count],
            n if n == count => params.to_vec(),
            n => {
                return Err(format!(
                    "its {distortion} lens has {count} distortion parameters but the file lists \
                     {n}; the file is damaged: export it again"
                ))
            }
        };
        if let Some(bad) = k.iter().find(|v| !v.is_finite()) {
            return Err(format!("distortion parameter {bad} is not a finite number"));
        }
        let radtan = |k: [f64; 3], p: [f64; 2]| Distortion::RadialTangential {
            k: [k[0], k[1], k[2], 0.0, 0.0, 0.0],
            p,
        };
        let distortion = match distortion {
            "radialk1" => radtan([k[0], 0.0, 0.0], [0.0; 2]),
            "radialk3" => radtan([k[0], k[1], k[2]], [0.0; 2]),
            "brown" => radtan([k[0], k[1], k[2]], [k[3], k[4]]),
            "fisheye" => Distortion::Fisheye {
                k: [k[0], k[1], k[2], k[3]],
            },
            _ => Distortion::NONE,
        };

        // Focal lengths in pixels.
        let sensor = match c.sensor_width {
            Some(_) => positive(number(c.sensor_width, "sensorWidth")?, "sensorWidth")?,
            None => 36.0,
        };
        let mm_to_px = w / sensor;
        let ratio = |what: &str| -> Result<f64, String> {
            match c.pixel_ratio {
                Some(_) => positive(number(c.pixel_ratio, "pixelRatio")?, what),
                None => Ok(1.0),
            }
        };
        let px = c.px_focal_length.as_ref().map_or(&[][..], |p| &p.0[..]);
        let focal = if version < Version(1, 2, 2) {
            // One focal length before 1.2.0, then one per axis.
            match (version < Version(1, 2, 0), px) {
                (true, [f]) => [*f, *f],
                (false, [fx, fy]) => [*fx, *fy],
                (_, []) => {
                    return Err("no pxFocalLength; the file is damaged: export it again".to_owned())
                }
                (one, other) => {
                    return Err(format!(
                        "pxFocalLength has {} values; AliceVision {version} writes {}",
                        other.len(),
                        if one { 1 } else { 2 }
                    ))
                }
            }
        } else {
            let fmm = positive(number(c.focal_length, "focalLength")?, "focalLength")?;
            if version < Version(1, 2, 5) {
                // "pixelRatio" held fx/fy then.
                let fx = fmm * mm_to_px;
                [fx, fx / ratio("pixelRatio")?]
            } else if version < Version(1, 2, 11) {
                let fx = fmm * mm_to_px;
                [fx, fmm * ratio("pixelRatio")? * mm_to_px]
            } else {
                // focalLength is the vertical focal length, in millimetres of the sensor width.
                let fy = fmm * mm_to_px;
                [fmm / ratio("pixelRatio")? * mm_to_px, fy]
            }
        };
        let focal = [
            positive(focal[0], "the horizontal focal length")?,
            positive(focal[1], "the vertical focal length")?,
        ];
        let pp = c.principal_point.as_ref().map_or(&[][..], |p| &p.0[..]);
        let [px, py] = match pp {
            [x, y] if x.is_finite() && y.is_finite() => [*x, *y],
            [_, _] => return Err(format!("principalPoint {pp:?} is not finite")),
            _ => {
                return Err(format!(
                    "principalPoint has {} values, not 2; the file is damaged: export it again",
                    pp.len()
                ))
            }
        };
        let principal = if version < Version(1, 2, 1) {
            [px, py]
        } else {
            [w / 2.0 + px, h / 2.0 + py]
        };
        Ok(Lens {
            width,
            height,
            focal,
            principal,
            distortion,
        })
    }

    /// The pinhole intrinsics of the intrinsic's image size, pixel centres at +0.5.
    fn intrinsics(&self) -> Intrinsics {
        Intrinsics {
            fx: self.focal[0],
            fy: self.focal[1],
            cx: self.principal[0] + 0.5,
            cy: self.principal[1] + 0.5,
        }
    }
}

impl<L> SfmJson<L> {
    /// The warning for a file newer than [`NEWEST`], if it is.
    fn version_warning(&self, file: &Path) -> Vec<String> {
        match self.version {
            Some(v) if v > NEWEST => vec![format!(
                "{} is SfMData version {v}, newer than the newest layout ramsplat knows \
                 ({NEWEST}); it was read as {NEWEST}: check the packed cameras (gs-pack info)",
                file.display()
            )],
            _ => Vec::new(),
        }
    }
}

/// The whole file: views, intrinsics and poses by id, landmarks read into `L`.
struct SfmJson<L> {
    version: Option<Version>,
    views: Vec<ViewJson>,
    intrinsics: BTreeMap<u32, IntrinsicJson>,
    poses: HashMap<u32, Pose>,
    /// Each rig's sub-poses in order, `None` where uninitialised.
    rigs: HashMap<u32, Vec<Option<Pose>>>,
    structure: L,
}

impl<'de, L: Default + Deserialize<'de>> Deserialize<'de> for SfmJson<L> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<L>(PhantomData<L>);
        impl<'de, L: Default + Deserialize<'de>> Visitor<'de> for V<L> {
            type Value = SfmJson<L>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an AliceVision SfMData object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = SfmJson {
                    version: None,
                    views: Vec::new(),
                    intrinsics: BTreeMap::new(),
                    poses: HashMap::new(),
                    rigs: HashMap::new(),
                    structure: L::default(),
                };
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "version" => {
                            let v = map.next_value::<Nums>()?.0;
                            let part = |x: f64| -> Result<u32, A::Error> {
                                if x.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&x) {
                                    Ok(x as u32)
                                } else {
                                    Err(de::Error::custom(format!(
                                        "version part {x} is not a whole number"
                                    )))
                                }
                            };
                            let [a, b, c] = v[..] else {
                                return Err(de::Error::custom(format!(
                                    "version has {} parts, not 3",
                                    v.len()
                                )));
                            };
                            out.version = Some(Version(part(a)?, part(b)?, part(c)?));
                        }
                        "views" => out.views = map.next_value::<List<ViewJson>>()?.0,
                        "intrinsics" => {
                            for i in map.next_value::<List<IntrinsicJson>>()?.0 {
                                let id = i.intrinsic_id.0;
                                if out.intrinsics.insert(id, i).is_some() {
                                    return Err(de::Error::custom(format!(
                                        "intrinsic {id} is listed twice"
                                    )));
                                }
                            }
                        }
                        "poses" => {
                            for p in map.next_value::<List<PoseJson>>()?.0 {
                                let id = p.pose_id.0;
                                let pose =
                                    p.pose.transform.pose().map_err(|m| {
                                        de::Error::custom(format!("pose {id}: {m}"))
                                    })?;
                                if out.poses.insert(id, pose).is_some() {
                                    return Err(de::Error::custom(format!(
                                        "pose {id} is listed twice"
                                    )));
                                }
                            }
                        }
                        "rigs" => {
                            for r in map.next_value::<List<RigJson>>()?.0 {
                                let id = r.rig_id.0;
                                let mut subs = Vec::new();
                                for (n, s) in r.sub_poses.0.into_iter().enumerate() {
                                    let pose = s.pose.pose().map_err(|m| {
                                        de::Error::custom(format!("rig {id}, sub-pose {n}: {m}"))
                                    })?;
                                    subs.push(
                                        (!s.status.eq_ignore_ascii_case("uninitialized"))
                                            .then_some(pose),
                                    );
                                }
                                if out.rigs.insert(id, subs).is_some() {
                                    return Err(de::Error::custom(format!(
                                        "rig {id} is listed twice"
                                    )));
                                }
                            }
                        }
                        "structure" => out.structure = map.next_value::<L>()?,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ViewJson {
    view_id: Option<Id>,
    pose_id: Option<Id>,
    intrinsic_id: Option<Id>,
    rig_id: Option<Id>,
    sub_pose_id: Option<Id>,
    is_pose_independant: Option<Flag>,
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IntrinsicJson {
    intrinsic_id: Id,
    width: Option<Num>,
    height: Option<Num>,
    sensor_width: Option<Num>,
    #[serde(rename = "type")]
    kind: String,
    distortion_type: Option<String>,
    undistortion_type: Option<String>,
    px_focal_length: Option<Nums>,
    focal_length: Option<Num>,
    pixel_ratio: Option<Num>,
    principal_point: Option<Nums>,
    distortion_params: Option<Nums>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PoseJson {
    pose_id: Id,
    pose: CameraPoseJson,
}

#[derive(Deserialize)]
struct CameraPoseJson {
    transform: Pose3Json,
}

#[derive(Deserialize)]
struct Pose3Json {
    rotation: Nums,
    center: Nums,
}

impl Pose3Json {
    /// The world-to-camera pose (module doc), or what is wrong with the values.
    fn pose(&self) -> Result<Pose, String> {
        let (r, c) = (&self.rotation.0, &self.center.0);
        if r.len() != 9 || c.len() != 3 {
            return Err(format!(
                "a rotation of {} values and a center of {} (9 and 3 expected)",
                r.len(),
                c.len()
            ));
        }
        if let Some(bad) = r.iter().chain(c).find(|v| !v.is_finite()) {
            return Err(format!("{bad} is not a finite number"));
        }
        // Column-major `R` read row by row is `Rᵀ`, the camera-to-world rotation.
        let c2w = std::array::from_fn(|row| std::array::from_fn(|col| r[3 * row + col]));
        Ok(Pose::from_camera_to_world(c2w, [c[0], c[1], c[2]]))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RigJson {
    rig_id: Id,
    #[serde(default)]
    sub_poses: List<SubPoseJson>,
}

#[derive(Deserialize)]
struct SubPoseJson {
    #[serde(default)]
    status: String,
    pose: Pose3Json,
}

/// The landmarks as they are packed (position as f32, colour as u8; ids and observations
/// dropped).
#[derive(Default)]
struct Landmarks(ParsedPoints);

#[derive(Deserialize)]
struct LandmarkJson {
    #[serde(rename = "X")]
    x: Nums,
    color: Nums,
}

impl<'de> Deserialize<'de> for Landmarks {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Landmarks;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of landmarks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                empty(v).map(|()| Landmarks::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = ParsedPoints::default();
                let mut n = 0u64;
                while let Some(p) = seq.next_element::<LandmarkJson>()? {
                    let (xyz, rgb) = landmark(&p.x.0, &p.color.0)
                        .map_err(|m| de::Error::custom(format!("landmark {n}: {m}")))?;
                    out.push(xyz.map(|v| v as f32), rgb);
                    n += 1;
                }
                Ok(Landmarks(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A landmark's position (finite in single precision) and colour, or what is wrong.
fn landmark(x: &[f64], color: &[f64]) -> Result<([f64; 3], [f64; 3]), String> {
    let (&[a, b, c], &[r, g, bl]) = (x, color) else {
        return Err(format!(
            "X has {} values and color {} (3 each expected)",
            x.len(),
            color.len()
        ));
    };
    if ![a, b, c].iter().all(|v| (*v as f32).is_finite()) {
        return Err(format!(
            "X {:?} is not finite in single precision",
            [a, b, c]
        ));
    }
    if ![r, g, bl].iter().all(|v| v.is_finite()) {
        return Err(format!("color {:?} is not finite", [r, g, bl]));
    }
    Ok(([a, b, c], [r, g, bl]))
}

/// The landmarks' positions and observing view ids (for `--sfm-depths`).
#[derive(Default)]
struct Observed {
    points: Vec<[f64; 3]>,
    /// `observers[ends[i-1]..ends[i]]` are landmark `i`'s view ids.
    ids: Vec<u32>,
    ends: Vec<usize>,
}

impl Observed {
    /// Each landmark's observing view ids, in order.
    fn observers(&self) -> impl Iterator<Item = &[u32]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.ids[a..b])
    }
}

#[derive(Deserialize)]
struct ObservedLandmarkJson {
    #[serde(rename = "X")]
    x: Nums,
    color: Nums,
    #[serde(default)]
    observations: List<ObservationJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObservationJson {
    observation_id: Id,
}

impl<'de> Deserialize<'de> for Observed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Observed;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of landmarks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                empty(v).map(|()| Observed::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Observed::default();
                while let Some(p) = seq.next_element::<ObservedLandmarkJson>()? {
                    let (xyz, _) = landmark(&p.x.0, &p.color.0).map_err(|m| {
                        de::Error::custom(format!("landmark {}: {m}", out.points.len()))
                    })?;
                    out.points.push(xyz);
                    out.ids
                        .extend(p.observations.0.iter().map(|o| o.observation_id.0));
                    out.ends.push(out.ids.len());
                }
                Ok(out)
            }
        }
        d.deserialize_any(V)
    }
}

/// `Ok` for the empty string AliceVision writes for an empty list.
fn empty<E: de::Error>(v: &str) -> Result<(), E> {
    if v.is_empty() {
        Ok(())
    } else {
        Err(de::Error::invalid_value(de::Unexpected::Str(v), &"a list"))
    }
}

/// A list, or the empty string AliceVision writes for an empty one.
struct List<T>(Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = List<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                empty(v).map(|()| List(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = seq.next_element()? {
                    out.push(x);
                }
                Ok(List(out))
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A number, written as a JSON number or as a string holding one.
#[derive(Clone, Copy, Debug)]
struct Num(f64);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Num, E> {
                v.trim()
                    .parse()
                    .map(Num)
                    .map_err(|_| de::Error::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// Numbers: a list, an object's values in order (`{"x": …, "y": …}`), a single number, or
/// the empty string (none).
struct Nums(Vec<f64>);

impl<'de> Deserialize<'de> for Nums {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Nums;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of numbers")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Nums, E> {
                Ok(Nums(vec![v]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Nums, E> {
                Ok(Nums(vec![v as f64]))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Nums, E> {
                Ok(Nums(vec![v as f64]))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Nums, E> {
                if v.is_empty() {
                    return Ok(Nums(Vec::new()));
                }
                Num::deserialize(de::value::StrDeserializer::<E>::new(v)).map(|n| Nums(vec![n.0]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Nums, A::Error> {
                let mut out = Vec::new();
                while let Some(n) = seq.next_element::<Num>()? {
                    // At most a 3×3 matrix: anything longer is not AliceVision's.
                    if out.len() == 16 {
                        return Err(de::Error::custom("more than 16 numbers in a vector"));
                    }
                    out.push(n.0);
                }
                Ok(Nums(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Nums, A::Error> {
                let mut out = Vec::new();
                while let Some((_, n)) = map.next_entry::<IgnoredAny, Num>()? {
                    if out.len() == 16 {
                        return Err(de::Error::custom("more than 16 numbers in a vector"));
                    }
                    out.push(n.0);
                }
                Ok(Nums(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// An AliceVision index (`IndexT`, 32 bits), as a number or a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Id(u32);

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an id (a whole number below 2³²)")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                u32::try_from(v)
                    .map(Id)
                    .map_err(|_| de::Error::invalid_value(de::Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                u32::try_from(v)
                    .map(Id)
                    .map_err(|_| de::Error::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                v.trim()
                    .parse()
                    .map(Id)
                    .map_err(|_| de::Error::invalid_value(de::Unexpected::Str(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// A flag, as a JSON boolean or as the strings AliceVision writes (`"true"`, `"0"`, …).
#[derive(Clone, Copy, Debug)]
struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true or false")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flag, E> {
                match v {
                    0 | 1 => Ok(Flag(v == 1)),
                    _ => Err(de::Error::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Flag, E> {
                match v.trim() {
                    "true" | "1" => Ok(Flag(true)),
                    "false" | "0" => Ok(Flag(false)),
                    _ => Err(de::Error::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::detect;

    /// Files told apart by name or extension, and folders by the files Meshroom leaves in a
    /// node's cache folder (a converted file before `cameras.sfm`; `sfm.abc` alone is refused
    /// with the conversion to run).
    #[test]
    fn sfmdata_files_are_found_where_meshroom_puts_them() {
        let tmp = tempfile::tempdir().unwrap();
        let node = tmp.path().join("StructureFromMotion").join("1a2b3c");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::write(node.join("sfm.abc"), "Ogawa").unwrap();
        let e = locate(&node).unwrap_err().to_string();
        assert!(
            e.contains("is Alembic") && e.contains("ConvertSfMFormat"),
            "{e}"
        );
        std::fs::write(node.join("cameras.sfm"), "{}").unwrap();
        assert_eq!(detect(&node).unwrap(), Format::Meshroom);
        assert_eq!(locate(&node).unwrap(), node.join("cameras.sfm"));
        std::fs::write(node.join("sfm.json"), "{}").unwrap();
        assert_eq!(locate(&node).unwrap(), node.join("sfm.json"));
        for name in ["cameras.sfm", "sfm.json", "scene.sfm", "cameras_v2.json"] {
            let f = tmp.path().join(name);
            std::fs::write(&f, "{}").unwrap();
            assert_eq!(detect(&f).unwrap(), Format::Meshroom, "{name}");
        }
    }

    /// Views are named by file name, or by the path below the shared folders when file names
    /// repeat (a rig's cameras), with either separator; names never climb out of a folder.
    #[test]
    fn views_are_named_by_file_name_or_their_path_below_the_shared_folders() {
        let named = |paths: &[&str]| -> Result<Vec<String>, String> {
            let mut views: Vec<Reconstructed> = paths
                .iter()
                .map(|p| Reconstructed {
                    id: 0,
                    name: String::new(),
                    path: (*p).to_owned(),
                    intrinsic: 0,
                    pose: Pose {
                        rotation: [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
                        translation: [0.0; 3],
                    },
                })
                .collect();
            name_views(&mut views, Path::new("x.sfm")).map_err(|e| e.to_string())?;
            Ok(views.into_iter().map(|v| v.name).collect())
        };
        assert_eq!(
            named(&["/data/shoot/a.jpg", "C:\\Users\\me\\b.JPG", "./c.png"]).unwrap(),
            ["a.jpg", "b.JPG", "c.png"]
        );
        assert_eq!(
            named(&[
                "/data/rig/cam0/0001.jpg",
                "/data/rig/cam1/0001.jpg",
                "/data/rig/x.jpg"
            ])
            .unwrap(),
            ["cam0/0001.jpg", "cam1/0001.jpg", "x.jpg"]
        );
        assert_eq!(
            named(&["C:/rig/cam0/1.jpg", "C:\\rig\\cam1\\1.jpg"]).unwrap(),
            ["cam0/1.jpg", "cam1/1.jpg"]
        );
        let e = named(&["/a/1.jpg", "/a/./1.jpg"]).unwrap_err();
        assert!(
            e.contains("two reconstructed views use the same image"),
            "{e}"
        );
        let e = named(&["../1.jpg", "1.jpg"]).unwrap_err();
        assert!(e.contains("differ in their parent folders"), "{e}");
    }

    /// The poses compose as AliceVision's `Pose3` product: a point seen by the rig's camera
    /// lands where the rig pose then the sub-pose put it.
    #[test]
    fn rig_poses_compose_rig_then_sub_pose() {
        let rig = Pose {
            rotation: crate::scene::maths::rotation_exp([0.1, -0.4, 0.25]),
            translation: [0.5, -1.0, 3.0],
        };
        let sub = Pose {
            rotation: crate::scene::maths::rotation_exp([-0.3, 0.2, 0.05]),
            translation: [0.1, 0.0, -0.2],
        };
        let apply = |p: &Pose, x: [f64; 3]| -> [f64; 3] {
            std::array::from_fn(|r| {
                (0..3).map(|k| p.rotation[r][k] * x[k]).sum::<f64>() + p.translation[r]
            })
        };
        let x = [0.7, -2.0, 4.5];
        let want = apply(&sub, apply(&rig, x));
        let got = apply(&compose(&sub, &rig), x);
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }

    /// A column-major rotation with its centre gives `t = −R·C`.
    #[test]
    fn poses_read_column_major_rotation_and_centre() {
        let r = crate::scene::maths::rotation_exp([0.3, 0.1, -0.2]);
        let c = [1.0, 2.0, -3.0];
        let json = Pose3Json {
            rotation: Nums((0..9).map(|i| r[i % 3][i / 3]).collect()),
            center: Nums(c.to_vec()),
        };
        let p = json.pose().unwrap();
        assert_eq!(p.rotation, r);
        for (row, t) in r.iter().zip(p.translation) {
            let want: f64 = -row.iter().zip(c).map(|(a, b)| a * b).sum::<f64>();
            assert!((t - want).abs() < 1e-15);
        }
    }
}
