//! OpenSfM and OpenDroneMap importer: the cameras, poses and points of an OpenSfM
//! `reconstruction.json` (OpenDroneMap, the drone-mapping toolkit, runs OpenSfM and keeps its
//! output in `opensfm/`), turned into an [`ImportedScene`].
//!
//! # Accepted inputs
//! - the JSON file itself (any name);
//! - an OpenSfM dataset folder holding `reconstruction.json`;
//! - an OpenDroneMap project folder holding `opensfm/reconstruction.json`.
//!
//! The dataset root (what `--images` and `--points` are relative to) is the folder given, or
//! the JSON's folder; for a JSON inside an `opensfm/` folder without `images/`, whose parent
//! has one (OpenDroneMap's layout), that parent.
//!
//! # What is read
//! The file is a list of reconstructions. OpenSfM writes the largest first; the others are
//! parts of the capture it could not connect to it, each in a frame of its own, so only the
//! first is imported, with a warning that counts the shots left out.
//! - `cameras`: OpenSfM normalises image coordinates by the larger image side `S`: pixel
//!   `(i, j)` has `((i + 0.5 − W/2)/S, (j + 0.5 − H/2)/S)`. So, with pixel centres at +0.5
//!   ([`crate::scene::camera`]), `fx = focal_x·S`, `fy = focal_y·S`, `cx = W/2 + c_x·S`,
//!   `cy = H/2 + c_y·S`, for `W×H` the image file's size (the JSON's `width` and `height` may
//!   be the smaller size features were extracted at: OpenDroneMap's; the file must have the
//!   same aspect ratio within a pixel). The projection types map to OpenCV's lens models
//!   ([`Distortion`]):
//!   - `perspective` (`focal`, `k1`, `k2`; principal point at the centre) and `brown`
//!     (`focal_x`, `focal_y`, `c_x`, `c_y`, `k1`, `k2`, `k3`, `p1`, `p2`: OpenCV's
//!     radial–tangential model, the same order), `radial` (`k1`, `k2`) and `simple_radial`
//!     (`k1`): [`Distortion::RadialTangential`];
//!   - `fisheye` (`focal`, `k1`, `k2`: `θ_d = θ·(1 + k1 θ² + k2 θ⁴)`) and `fisheye_opencv`
//!     (`focal_x`, `focal_y`, `c_x`, `c_y`, `k1`..`k4`): [`Distortion::Fisheye`];
//!   - `dual`, `fisheye62`, `fisheye624`, `spherical` and `equirectangular` (360°
//!     panoramas) have no such model and are refused, naming the camera, when a shot uses one.
//!
//!   Missing coefficients are 0, as OpenSfM reads them.
//! - `shots`: the key is the image's file name; `rotation` (an axis-angle vector) and
//!   `translation` are the world-to-camera transform `x_cam = R·x + t` in OpenCV camera axes
//!   (x right, y down, z forward), which is [`Pose`]'s convention. A shot whose camera is not
//!   in the file is an error naming both.
//! - `points`: `coordinates` and `color` (0–255) of the sparse points, packed as the SfM
//!   cloud `"sfm"` (colours rounded and clamped to 0–255). Without points, training starts
//!   from random points ([`ImportedScene::no_sfm_points`]).
//!
//! Rigs, biases, GPS data and panorama shots are not needed: every shot's own pose is in the
//! file. The world frame is OpenSfM's (for a geo-referenced capture a local east-north-up
//! frame in metres around `reference_lla`), which ramsplat uses as it is.
//!
//! # Images
//! A shot's image is its key in the images folder: `--images DIR` (relative to the dataset
//! root), else `images/` under the root when it exists, else the root. OpenSfM reads the
//! stored pixels, ignoring EXIF orientation; a pack keeps them in stored order when the
//! orientation is a quarter turn (which swaps the sides) and the camera has the stored size,
//! so such photos are read as OpenSfM read them, and a photo whose EXIF orientation a pack
//! would apply (a half turn, a mirror) is refused, naming it. A missing image is skipped with
//! a warning, or refused under `--strict`. `--depths` is not supported for OpenSfM datasets
//! (refused).
//!
//! # Masks
//! OpenSfM's `masks/` folder (beside the JSON: OpenSfM's dataset folder) holds, for the images
//! that have one, `<image name>.png`, black where features are ignored (moving objects, the
//! camera's own parts): the loss masks of those views (0 = the pixel does not train; see
//! `crate::import::image::prepare_mask`), looked up as COLMAP's are. Unlike COLMAP's, an
//! image without a mask trains on every pixel, as OpenSfM uses all of it; a warning counts
//! them.
//!
//! # Memory
//! The JSON is parsed as it is read, never held whole: the points go straight into what the
//! pack takes, 15 bytes each (position as f32, colour as u8), the reconstructions after the
//! first are only counted, and unknown fields are skipped.
//!
//! # Invariants of the result
//! Views sorted by name, names unique, every camera validated at its image's size before
//! undistortion, `split` left to `--test-every`. Malformed JSON, wrong types, non-finite
//! values, non-rotations, unknown camera ids and a reconstruction with no usable shot are
//! errors naming the file, the line or the record.

use std::collections::HashMap;
use std::fmt;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::{
    file_present, folder_of, missing_images_note, ImportError, ImportOptions, ImportedScene,
    Location, ParsedPoints,
};
use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};

/// The file a folder is looked up for (in it, or in its `opensfm/` folder).
pub const RECONSTRUCTION_FILE: &str = "reconstruction.json";

/// The folder OpenDroneMap keeps OpenSfM's files in, inside its project folder.
pub const ODM_FOLDER: &str = "opensfm";

/// Where the reconstruction file of `path` is, and the dataset root (module doc).
pub fn locate(path: &Path) -> Result<(PathBuf, PathBuf), ImportError> {
    let file = if path.is_dir() {
        let direct = path.join(RECONSTRUCTION_FILE);
        let odm = path.join(ODM_FOLDER).join(RECONSTRUCTION_FILE);
        if file_present(&direct)? {
            direct
        } else if file_present(&odm)? {
            odm
        } else {
            return Err(ImportError::invalid(
                path,
                format!(
                    "no {RECONSTRUCTION_FILE} in this folder nor in its {ODM_FOLDER}/ folder; \
                     run OpenSfM's reconstruct step (or OpenDroneMap) first, or pass the JSON \
                     file itself"
                ),
            ));
        }
    } else {
        path.to_owned()
    };
    let folder = folder_of(&file);
    // OpenDroneMap: project/opensfm/reconstruction.json, photos in project/images.
    let odm_project = folder
        .file_name()
        .is_some_and(|n| n == ODM_FOLDER)
        .then(|| folder.parent())
        .flatten()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .filter(|p| !folder.join("images").is_dir() && p.join("images").is_dir());
    let root = odm_project.map_or(folder.clone(), Path::to_owned);
    Ok((file, root))
}

/// Imports an OpenSfM reconstruction; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let (file, root) = locate(path)?;
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    from_reader(BufReader::new(reader), &file, root, options)
}

/// [`import`] of the reconstruction read from `reader` (the file `file`, for messages), for the
/// dataset root `root` (the images are looked up from it). Public for the fuzz target, which
/// reads bytes under [`ImportOptions::metadata_only`].
pub fn from_reader(
    reader: impl std::io::Read,
    file: &Path,
    root: PathBuf,
    options: &ImportOptions,
) -> Result<ImportedScene, ImportError> {
    let file = file.to_owned();
    super::refuse_depths(options, &file, "OpenSfM datasets")?;
    let mut de = serde_json::Deserializer::from_reader(reader);
    let list = Reconstructions::deserialize(&mut de)
        .and_then(|l| de.end().map(|()| l))
        .map_err(|e| super::json_error(&file, &e, "OpenSfM"))?;
    let Some(rec) = list.first else {
        return Err(ImportError::invalid(
            &file,
            "the file lists no reconstruction; OpenSfM could not reconstruct the images \
             (check its logs), or this is not an OpenSfM reconstruction",
        ));
    };

    let images_dir = match &options.images {
        Some(dir) => root.join(dir),
        None => Some(root.join("images"))
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| root.clone()),
    };
    // OpenSfM's dataset folder is the JSON's.
    let masks_dir = file
        .parent()
        .map(|d| d.join("masks"))
        .filter(|d| d.is_dir());
    let mut unmasked = 0usize;
    let mut warnings = Vec::new();
    if !list.other_shots.is_empty() {
        let counts: Vec<String> = list.other_shots.iter().map(|n| n.to_string()).collect();
        warnings.push(format!(
            "{} holds {} reconstructions; the first ({} shots) was imported and the other {} \
             ({} shots) left out: OpenSfM could not connect them to it, so each lies in a frame \
             of its own",
            file.display(),
            list.other_shots.len() + 1,
            rec.shots.len(),
            list.other_shots.len(),
            counts.join(", ")
        ));
    }
    let mut shots: Vec<(&String, &ShotJson)> = rec.shots.iter().collect();
    shots.sort_by(|a, b| a.0.cmp(b.0));
    let mut views = Vec::new();
    let mut missing = Vec::new();
    for (name, shot) in shots {
        let err = |msg: String| ImportError::invalid(&file, format!("shot {name:?}: {msg}"));
        let camera_json = rec.cameras.get(&shot.camera).ok_or_else(|| {
            err(format!(
                "its camera {:?} is not among the reconstruction's cameras; the file is \
                 damaged: export it again",
                shot.camera
            ))
        })?;
        let lens = Lens::of(camera_json).map_err(|msg| {
            ImportError::invalid(&file, format!("camera {:?}: {msg}", shot.camera))
        })?;
        let pose = Pose {
            rotation: crate::scene::maths::rotation_exp(shot.rotation),
            translation: shot.translation,
        };
        pose.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: format!("shot {name:?}"),
            source,
        })?;
        let image_path = images_dir.join(name);
        // The key is a file name; one that climbs out of the folder is not an image of it.
        if Path::new(name)
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(err(
                "its name is not a plain file name (OpenSfM names shots by their image's file \
                 name); the file is damaged"
                    .to_owned(),
            ));
        }
        let (width, height) = if options.metadata_only {
            (lens.width, lens.height)
        } else {
            if !file_present(&image_path)? {
                missing.push(name.clone());
                continue;
            }
            super::image::stored_photo_size(
                &image_path,
                &format!("shot {name:?}"),
                (lens.width, lens.height),
                "OpenSfM",
            )?
        };
        let camera = Camera {
            width,
            height,
            intrinsics: lens.intrinsics(width, height),
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        camera.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: format!("shot {name:?} (camera {:?})", shot.camera),
            source,
        })?;
        let mask_path = match &masks_dir {
            Some(dir) => super::colmap::find_mask(dir, name)?,
            None => None,
        };
        unmasked += usize::from(masks_dir.is_some() && mask_path.is_none());
        views.push(ViewSource {
            name: name.clone(),
            image_path,
            camera,
            distortion: lens.distortion,
            split: None,
            mask_path,
            depth: None,
        });
    }
    if let (Some(dir), true) = (&masks_dir, unmasked > 0) {
        warnings.push(format!(
            "{unmasked} of {} images have no mask in {} (OpenSfM's <image name>.png) and train \
             on every pixel",
            views.len(),
            dir.display()
        ));
    }
    let listed = rec.shots.len();
    warnings.extend(missing_images_note(
        &file,
        &mut missing,
        listed,
        "shots",
        &images_dir,
        options.strict,
    )?);
    if views.is_empty() {
        let msg = if listed == 0 {
            "the reconstruction has no shots; OpenSfM registered no image".to_owned()
        } else {
            format!(
                "no usable shot: {listed} shots, none with an image file in {}; pass --images \
                 DIR to name the folder holding the photos",
                images_dir.display()
            )
        };
        return Err(ImportError::invalid(&file, msg));
    }

    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    let no_sfm_points = rec.points.0.is_empty();
    if !no_sfm_points && !options.metadata_only {
        clouds.push(rec.points.0.into_cloud("sfm"));
    }
    let random_start_note = no_sfm_points.then(|| {
        format!(
            "{} has no points: training will start from random points, which converges more \
             slowly than from the reconstruction's (or give a dense cloud with --points FILE, \
             e.g. OpenDroneMap's odm_filterpoints/point_cloud.ply)",
            file.display()
        )
    });
    Ok(ImportedScene {
        format: Format::Opensfm,
        root,
        views,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

/// The tracks file OpenSfM writes beside the reconstruction: which feature of which image
/// each track (point) is.
pub const TRACKS_FILE: &str = "tracks.csv";

/// `gs-pack convert --sfm-depths`: the points of the first reconstruction each of `views` (the
/// views [`import`] gave for the same `path` and `options`, matched by image name) observes,
/// from `tracks.csv` beside the JSON (OpenSfM's tracks: a line per observation, tab-separated,
/// the image name then the track id, which is the point's key; a first line naming the
/// version, `OPENSFM_TRACKS_VERSION_v…`, is skipped). Observations of tracks the
/// reconstruction did not triangulate, or of images that are not packed views, are not kept
/// (tracks.csv lists every matched feature). A point enters the table once, when some view
/// observes it; each view lists it once, in the reconstruction's point order. A tracks file
/// with no observation of a reconstructed point by a packed view is refused. Memory: the
/// point keys and positions (about 60 bytes per point) while the tracks are read, then 24 bytes
/// per observed point and 4 per observation.
pub fn read_observations(
    path: &Path,
    _options: &ImportOptions,
    views: &[ViewSource],
) -> Result<super::sfm_depth::SfmObservations, ImportError> {
    let (file, _) = locate(path)?;
    let tracks = folder_of(&file).join(TRACKS_FILE);
    if !file_present(&tracks)? {
        return Err(ImportError::invalid(
            &tracks,
            format!(
                "no {TRACKS_FILE} beside {}: --sfm-depths supervises depth at the points each \
                 image observes, which OpenSfM lists there (OpenSfM's create_tracks step writes \
                 it; OpenDroneMap keeps it in opensfm/); restore it, or drop --sfm-depths",
                file.display()
            ),
        ));
    }
    // The first reconstruction's points by key.
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    let mut de = serde_json::Deserializer::from_reader(BufReader::new(reader));
    let keyed = FirstPoints::deserialize(&mut de)
        .and_then(|l| de.end().map(|()| l))
        .map_err(|e| super::json_error(&file, &e, "OpenSfM"))?;
    let view_of_name: HashMap<&str, usize> = views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    let text =
        crate::fsutil::read_file_to_string(&tracks).map_err(|e| ImportError::io(&tracks, e))?;
    let mut lists: Vec<Vec<u32>> = vec![Vec::new(); views.len()];
    let mut track_elements = 0u64;
    for (n, line) in text.lines().enumerate() {
        if (n == 0 && line.starts_with("OPENSFM_TRACKS_VERSION")) || line.trim().is_empty() {
            continue;
        }
        let mut fields = line.split('\t');
        let (Some(image), Some(track)) = (fields.next(), fields.next()) else {
            return Err(ImportError::parse(
                &tracks,
                Location::Line(n as u64 + 1),
                "a line with fewer than two tab-separated fields (image, track id); the file is \
                 damaged: run OpenSfM's create_tracks again, or drop --sfm-depths",
            ));
        };
        track_elements += 1;
        if let (Some(&v), Some(&p)) = (view_of_name.get(image), keyed.index.get(track)) {
            lists[v].push(p);
        }
    }
    // Each view's points once, in the reconstruction's order; only observed points kept
    // (renumbered in that order, so each list stays sorted).
    let mut remap = vec![u32::MAX; keyed.xyz.len()];
    for list in &mut lists {
        list.sort_unstable();
        list.dedup();
        for &p in list.iter() {
            remap[p as usize] = 0;
        }
    }
    let mut xyz = Vec::new();
    for (r, &at) in remap.iter_mut().zip(&keyed.xyz) {
        if *r == 0 {
            *r = xyz.len() as u32;
            xyz.push(at);
        }
    }
    if xyz.is_empty() {
        return Err(ImportError::invalid(
            &tracks,
            format!(
                "none of its {track_elements} observations is of a point of {} by a packed view \
                 (is it another reconstruction's tracks file?); --sfm-depths has nothing to \
                 supervise: drop it",
                file.display()
            ),
        ));
    }
    for list in &mut lists {
        for p in list.iter_mut() {
            *p = remap[*p as usize];
        }
    }
    Ok(super::sfm_depth::SfmObservations {
        xyz,
        views: lists,
        track_elements,
    })
}

/// The camera model of an OpenSfM camera, in its normalised units.
#[derive(Clone, Copy, Debug)]
struct Lens {
    /// The size OpenSfM knew the images at.
    width: u32,
    height: u32,
    focal: [f64; 2],
    /// Principal point offset from the centre, in units of the larger side.
    centre: [f64; 2],
    distortion: Distortion,
}

impl Lens {
    /// The lens of `c` (module doc), or what is wrong with it.
    fn of(c: &CameraJson) -> Result<Lens, String> {
        let kind = c.projection_type.as_deref().unwrap_or("perspective");
        let side = |v: Option<f64>, what: &str| -> Result<u32, String> {
            match v {
                Some(v) if v.fract() == 0.0 && v >= 1.0 && v <= f64::from(u32::MAX) => Ok(v as u32),
                Some(v) => Err(format!(
                    "{what} {v} is not a positive whole number of pixels"
                )),
                None => Err(format!("no {what}; the file is damaged: export it again")),
            }
        };
        let (width, height) = (side(c.width, "width")?, side(c.height, "height")?);
        let need = |v: Option<f64>, what: &str| -> Result<f64, String> {
            match v {
                Some(v) if v.is_finite() && v > 0.0 => Ok(v),
                Some(v) => Err(format!("{what} {v} is not a positive number")),
                None => Err(format!("a {kind} camera needs {what}, which is missing")),
            }
        };
        let coef = |v: Option<f64>, what: &str| -> Result<f64, String> {
            match v {
                None => Ok(0.0),
                Some(v) if v.is_finite() => Ok(v),
                Some(v) => Err(format!("{what} {v} is not a finite number")),
            }
        };
        let (k1, k2, k3, k4) = (
            coef(c.k1, "k1")?,
            coef(c.k2, "k2")?,
            coef(c.k3, "k3")?,
            coef(c.k4, "k4")?,
        );
        let (p1, p2) = (coef(c.p1, "p1")?, coef(c.p2, "p2")?);
        let centre = [coef(c.c_x, "c_x")?, coef(c.c_y, "c_y")?];
        let radtan = |k: [f64; 3], p: [f64; 2]| Distortion::RadialTangential {
            k: [k[0], k[1], k[2], 0.0, 0.0, 0.0],
            p,
        };
        let (focal, centre, distortion) = match kind {
            "perspective" => {
                let f = need(c.focal, "focal")?;
                ([f, f], [0.0; 2], radtan([k1, k2, 0.0], [0.0; 2]))
            }
            "brown" => (
                [need(c.focal_x, "focal_x")?, need(c.focal_y, "focal_y")?],
                centre,
                radtan([k1, k2, k3], [p1, p2]),
            ),
            "radial" => (
                [need(c.focal_x, "focal_x")?, need(c.focal_y, "focal_y")?],
                centre,
                radtan([k1, k2, 0.0], [0.0; 2]),
            ),
            "simple_radial" => (
                [need(c.focal_x, "focal_x")?, need(c.focal_y, "focal_y")?],
                centre,
                radtan([k1, 0.0, 0.0], [0.0; 2]),
            ),
            "fisheye" => {
                let f = need(c.focal, "focal")?;
                (
                    [f, f],
                    [0.0; 2],
                    Distortion::Fisheye {
                        k: [k1, k2, 0.0, 0.0],
                    },
                )
            }
            "fisheye_opencv" => (
                [need(c.focal_x, "focal_x")?, need(c.focal_y, "focal_y")?],
                centre,
                Distortion::Fisheye {
                    k: [k1, k2, k3, k4],
                },
            ),
            "spherical" | "equirectangular" => {
                return Err(format!(
                    "projection type {kind:?} is a 360° panorama, which neither a pinhole nor a \
                     fisheye image can hold; reconstruct from perspective or fisheye photos (or \
                     cut the panoramas into perspective views first)"
                ))
            }
            "dual" | "fisheye62" | "fisheye624" => {
                return Err(format!(
                    "projection type {kind:?} has no OpenCV lens model to resample its photos \
                     with; calibrate the camera as brown or fisheye_opencv (OpenSfM's \
                     camera_models_overrides.json) and reconstruct again"
                ))
            }
            other => {
                return Err(format!(
                    "projection type {other:?} is not one OpenSfM writes (perspective, brown, \
                     radial, simple_radial, fisheye, fisheye_opencv, …)"
                ))
            }
        };
        Ok(Lens {
            width,
            height,
            focal,
            centre,
            distortion,
        })
    }

    /// The pinhole intrinsics of an image of `width × height` pixels.
    fn intrinsics(&self, width: u32, height: u32) -> Intrinsics {
        let (w, h) = (f64::from(width), f64::from(height));
        let size = w.max(h);
        Intrinsics {
            fx: self.focal[0] * size,
            fy: self.focal[1] * size,
            cx: w / 2.0 + self.centre[0] * size,
            cy: h / 2.0 + self.centre[1] * size,
        }
    }
}

/// The top-level list: the first reconstruction whole, the others' shot counts.
struct Reconstructions {
    first: Option<ReconstructionJson>,
    other_shots: Vec<usize>,
}

impl<'de> Deserialize<'de> for Reconstructions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Reconstructions;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of reconstructions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<ReconstructionJson>()?;
                let mut other_shots = Vec::new();
                while let Some(other) = seq.next_element::<OtherReconstruction>()? {
                    other_shots.push(other.shots.0);
                }
                Ok(Reconstructions { first, other_shots })
            }
        }
        d.deserialize_seq(V)
    }
}

#[derive(Deserialize)]
struct ReconstructionJson {
    cameras: HashMap<String, CameraJson>,
    #[serde(default)]
    shots: HashMap<String, ShotJson>,
    #[serde(default)]
    points: Points,
}

#[derive(Deserialize)]
struct OtherReconstruction {
    #[serde(default)]
    shots: Count,
}

#[derive(Deserialize)]
struct CameraJson {
    projection_type: Option<String>,
    width: Option<f64>,
    height: Option<f64>,
    focal: Option<f64>,
    focal_x: Option<f64>,
    focal_y: Option<f64>,
    c_x: Option<f64>,
    c_y: Option<f64>,
    k1: Option<f64>,
    k2: Option<f64>,
    k3: Option<f64>,
    k4: Option<f64>,
    p1: Option<f64>,
    p2: Option<f64>,
}

#[derive(Deserialize)]
struct ShotJson {
    camera: String,
    rotation: [f64; 3],
    #[serde(default)]
    translation: [f64; 3],
}

/// The first reconstruction's points by key (for the tracks), the rest of the file skipped.
struct FirstPoints {
    /// Key → index into `xyz`.
    index: HashMap<Box<str>, u32>,
    xyz: Vec<[f64; 3]>,
}

impl<'de> Deserialize<'de> for FirstPoints {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Rec {
            #[serde(default)]
            points: KeyedPoints,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FirstPoints;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of reconstructions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<Rec>()?;
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                let p = first.map(|r| r.points).unwrap_or_default();
                Ok(FirstPoints {
                    index: p.index,
                    xyz: p.xyz,
                })
            }
        }
        d.deserialize_seq(V)
    }
}

/// Points with their keys (positions only).
#[derive(Default)]
struct KeyedPoints {
    index: HashMap<Box<str>, u32>,
    xyz: Vec<[f64; 3]>,
}

impl<'de> Deserialize<'de> for KeyedPoints {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct At {
            coordinates: [f64; 3],
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyedPoints;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of points")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = KeyedPoints::default();
                while let Some((id, p)) = map.next_entry::<Box<str>, At>()? {
                    let index = u32::try_from(out.xyz.len())
                        .ok()
                        .filter(|&i| i < u32::MAX)
                        .ok_or_else(|| {
                            de::Error::custom("more points than --sfm-depths indexes")
                        })?;
                    if out.index.insert(id, index).is_some() {
                        return Err(de::Error::custom("a point key appears twice"));
                    }
                    out.xyz.push(p.coordinates);
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// The entries of a map, counted and skipped.
#[derive(Default)]
struct Count(usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of shots")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut n = 0;
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(Count(n))
            }
        }
        d.deserialize_map(V)
    }
}

/// The points of a reconstruction as they are packed (position as f32, colour as u8, keys
/// dropped).
#[derive(Default)]
struct Points(ParsedPoints);

#[derive(Deserialize)]
struct PointJson {
    coordinates: [f64; 3],
    color: [f64; 3],
}

impl<'de> Deserialize<'de> for Points {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Points;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of points")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = ParsedPoints::default();
                while let Some((id, p)) = map.next_entry::<String, PointJson>()? {
                    let xyz = p.coordinates.map(|v| v as f32);
                    if !xyz.iter().all(|v| v.is_finite()) {
                        return Err(de::Error::custom(format!(
                            "point {id:?}: coordinates {:?} are not finite in single precision",
                            p.coordinates
                        )));
                    }
                    if !p.color.iter().all(|v| v.is_finite()) {
                        return Err(de::Error::custom(format!(
                            "point {id:?}: color {:?} is not finite",
                            p.color
                        )));
                    }
                    out.push(xyz, p.color);
                }
                Ok(Points(out))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::detect;

    /// The layouts told apart without `--format`: the JSON by its name, an OpenSfM dataset
    /// folder, and an OpenDroneMap project whose photos are beside `opensfm/` (its root).
    #[test]
    fn reconstructions_are_found_where_opensfm_and_opendronemap_put_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dataset = tmp.path().join("dataset");
        std::fs::create_dir_all(dataset.join("images")).unwrap();
        std::fs::write(dataset.join(RECONSTRUCTION_FILE), "[]").unwrap();
        assert_eq!(detect(&dataset).unwrap(), Format::Opensfm);
        assert_eq!(
            detect(&dataset.join(RECONSTRUCTION_FILE)).unwrap(),
            Format::Opensfm
        );
        let (file, root) = locate(&dataset).unwrap();
        assert_eq!(
            (file, root),
            (dataset.join(RECONSTRUCTION_FILE), dataset.clone())
        );

        let project = tmp.path().join("odm");
        std::fs::create_dir_all(project.join("images")).unwrap();
        std::fs::create_dir_all(project.join(ODM_FOLDER)).unwrap();
        let json = project.join(ODM_FOLDER).join(RECONSTRUCTION_FILE);
        std::fs::write(&json, "[]").unwrap();
        assert_eq!(detect(&project).unwrap(), Format::Opensfm);
        // From the project folder or the JSON itself, the root is the project.
        assert_eq!(locate(&project).unwrap(), (json.clone(), project.clone()));
        assert_eq!(locate(&json).unwrap(), (json.clone(), project.clone()));
        // An opensfm/ folder with images of its own is its own root.
        std::fs::create_dir_all(project.join(ODM_FOLDER).join("images")).unwrap();
        assert_eq!(
            locate(&json).unwrap(),
            (json.clone(), project.join(ODM_FOLDER))
        );
        let e = locate(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("no reconstruction.json in this folder"), "{e}");
    }
}
