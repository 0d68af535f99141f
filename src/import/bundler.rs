//! Bundler importer: the `bundle.out` file (format v0.3) with its image list, as Bundler,
//! VisualSFM, OpenMVG, OpenSfM (`export_bundler`), RealityCapture and Metashape export it,
//! turned into an [`ImportedScene`].
//!
//! # Accepted inputs
//! - a `.out` file (any name), or a folder holding `bundle.out` or `bundle/bundle.out`;
//! - the image list: `list.txt` beside the `.out` file, else in its parent folder (Bundler's
//!   own layout: `list.txt` in the project, `bundle/bundle.out` below it). One line per camera
//!   of the `.out` file, in its order: the image's path (relative to the list's folder, the
//!   dataset root), optionally followed by fields Bundler reads and ramsplat does not (a focal
//!   length from EXIF). `--images DIR` (relative to the root) looks each image's file name up
//!   in DIR instead.
//!
//! # What is read
//! - The header `num_cameras num_points` (after `#` comment lines), then per camera
//!   `f k1 k2`, the rotation `R` (three rows) and the translation `t`: Bundler's camera looks
//!   down −z with y up, projects a world point `X` to `P = R·X + t`, `p = −P/P_z`, and puts it
//!   at `f·(1 + k1‖p‖² + k2‖p‖⁴)·p` from the image centre, y up. In ramsplat's (OpenCV's)
//!   axes that is the world-to-camera pose `diag(1, −1, −1)·[R | t]`, the pinhole
//!   `fx = fy = f`, `cx = W/2`, `cy = H/2` (the centre of a `W×H` photo with pixel centres at
//!   +0.5) and the radial lens `k1`, `k2` ([`Distortion::RadialTangential`]; COLMAP's RADIAL).
//!   Bundler records no image size: each photo's header gives it, so a view needs its image
//!   file even to be described. A camera whose `f` is 0 (and its lines all zeros) was not
//!   registered: it is skipped, and a warning counts such cameras.
//! - Per point: its position, its colour (0–255) and its view list (`count` then `camera key
//!   x y` per observation, checked): the SfM cloud `"sfm"`, positions as f32, colours rounded
//!   and clamped; `--sfm-depths` takes its observations from the view lists
//!   ([`read_observations`]).
//!
//! Refused, naming the file and the line: a malformed header or number, non-finite values, a
//! rotation that is not one, a negative focal length, a list whose line count differs from the
//! camera count, and a file that ends early. A missing image is skipped with a warning, or
//! refused under `--strict`; `--depths` is refused. The file is read line by line: the points
//! go straight into 15 bytes each.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::{
    file_present, folder_of, missing_images_note, ImportError, ImportOptions, ImportedScene,
    Location, ParsedPoints,
};
use crate::dataset::{Distortion, Format, PointSource, ViewSource};
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};

/// The file a folder is looked up for (in it, or in its `bundle/` folder).
pub const BUNDLE_FILE: &str = "bundle.out";
/// The image list looked up beside the bundle file, then in its parent.
pub const LIST_FILE: &str = "list.txt";

/// Where the bundle file of `path` and its image list are.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), ImportError> {
    let file = if path.is_dir() {
        let direct = path.join(BUNDLE_FILE);
        let nested = path.join("bundle").join(BUNDLE_FILE);
        if file_present(&direct)? {
            direct
        } else if file_present(&nested)? {
            nested
        } else {
            return Err(ImportError::invalid(
                path,
                format!(
                    "no {BUNDLE_FILE} in this folder nor in its bundle/ folder; pass the .out \
                     file itself"
                ),
            ));
        }
    } else {
        path.to_owned()
    };
    let folder = folder_of(&file);
    let candidates = [
        Some(folder.join(LIST_FILE)),
        folder.parent().map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".").join(LIST_FILE)
            } else {
                p.join(LIST_FILE)
            }
        }),
    ];
    for c in candidates.iter().flatten() {
        if file_present(c)? {
            return Ok((file, c.clone()));
        }
    }
    Err(ImportError::invalid(
        &file,
        format!(
            "no {LIST_FILE} beside it or in its parent folder: Bundler's image list (one image \
             path per camera, in the file's order) says which photo each camera is; export it \
             with the bundle file"
        ),
    ))
}

/// Imports a Bundler reconstruction; see the module doc for what `path` may be.
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    let (file, list_file) = locate(path)?;
    super::refuse_depths(options, &file, "Bundler files")?;
    let list = read_list(&list_file)?;
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    from_reader(
        BufReader::new(reader),
        &file,
        &list,
        &list_file,
        options,
        photo_size,
    )
}

/// A photo's size from its header, `None` when the file is absent (see
/// [`super::image::upright_photo_size`]).
fn photo_size(path: &Path, what: &str) -> Result<Option<(u32, u32)>, ImportError> {
    super::image::upright_photo_size(path, what, "a bundle file")
}

/// The image list's text.
fn read_list(list_file: &Path) -> Result<String, ImportError> {
    crate::fsutil::read_file_to_string(list_file).map_err(|e| ImportError::io(list_file, e))
}

/// [`import`] of a bundle file read from `bundle` (named `file` in messages) with the image
/// list `list` (the text of `list_file`, whose folder is the dataset root), asking `photo` for
/// each registered camera's image: its size (width, height), `None` when the file is absent,
/// or an error (the second argument names the camera). `import` asks the photos' headers; the
/// bundle fuzz target answers without files.
pub fn from_reader<R: BufRead>(
    bundle: R,
    file: &Path,
    list: &str,
    list_file: &Path,
    options: &ImportOptions,
    mut photo: impl FnMut(&Path, &str) -> Result<Option<(u32, u32)>, ImportError>,
) -> Result<ImportedScene, ImportError> {
    let file = file.to_path_buf();
    let list_file = list_file.to_path_buf();
    let root = folder_of(&list_file);
    let Bundle {
        images,
        mut lines,
        cameras,
        points,
    } = Bundle::new(bundle, &file, list, &list_file)?;
    let images_dir = options.images.as_ref().map(|d| root.join(d));
    let mut views = Vec::new();
    let mut missing = Vec::new();
    let mut unregistered = 0usize;
    for (index, image) in images.iter().enumerate() {
        let [f, k1, k2] = lines.numbers::<3>("a camera's `f k1 k2`")?;
        let first = lines.line;
        let rows = [
            lines.numbers::<3>("a rotation row")?,
            lines.numbers::<3>("a rotation row")?,
            lines.numbers::<3>("a rotation row")?,
        ];
        let t = lines.numbers::<3>("a camera's translation")?;
        if f == 0.0 {
            unregistered += 1;
            continue;
        }
        let what = format!("camera {index} ({image}), lines {first}–{}", lines.line);
        if f < 0.0 {
            return Err(ImportError::parse(
                &file,
                Location::Line(first),
                format!("{what}: focal length {f} is negative; the file is damaged"),
            ));
        }
        // Bundler's axes (y up, looking down −z) to OpenCV's: negate the y and z rows.
        let flip = |v: [f64; 3]| [v[0], -v[1], -v[2]];
        let pose = Pose {
            rotation: [rows[0], rows[1].map(|v| -v), rows[2].map(|v| -v)],
            translation: flip(t),
        };
        pose.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: what.clone(),
            source,
        })?;
        let image_path = match &images_dir {
            Some(dir) => dir.join(Path::new(image).file_name().unwrap_or_default()),
            None => root.join(image),
        };
        let name = (*image).to_owned();
        let Some((width, height)) = photo(&image_path, &what)? else {
            missing.push(name);
            continue;
        };
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: f,
                fy: f,
                cx: f64::from(width) / 2.0,
                cy: f64::from(height) / 2.0,
            },
            world_to_camera: pose,
            projection: Projection::Pinhole,
        };
        camera.validate().map_err(|source| ImportError::Camera {
            path: file.clone(),
            what: what.clone(),
            source,
        })?;
        views.push(ViewSource {
            name,
            image_path,
            camera,
            distortion: Distortion::RadialTangential {
                k: [k1, k2, 0.0, 0.0, 0.0, 0.0],
                p: [0.0; 2],
            },
            split: None,
            mask_path: None,
            depth: None,
        });
    }

    let mut parsed = ParsedPoints::default();
    let mut observers = Vec::new();
    for _ in 0..points {
        let xyz = lines.numbers::<3>("a point's position")?;
        let position = xyz.map(|v| v as f32);
        if !position.iter().all(|v| v.is_finite()) {
            return Err(lines.error(format!(
                "point position {xyz:?} is not finite in single precision"
            )));
        }
        let rgb = lines.numbers::<3>("a point's colour")?;
        lines.view_list(cameras, &mut observers)?;
        parsed.push(position, rgb);
    }

    views.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = views.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(ImportError::invalid(
            &list_file,
            format!(
                "two cameras read the image {}; every image may be used by one camera only",
                w[0].name
            ),
        ));
    }
    let mut warnings = Vec::new();
    if unregistered > 0 {
        warnings.push(format!(
            "{unregistered} of {cameras} cameras were not registered (focal length 0) and were \
             skipped"
        ));
    }
    let registered = cameras as usize - unregistered;
    let place = images_dir.clone().unwrap_or_else(|| root.clone());
    warnings.extend(missing_images_note(
        &file,
        &mut missing,
        registered,
        "registered cameras",
        &place,
        options.strict,
    )?);
    if views.is_empty() {
        return Err(ImportError::invalid(
            &file,
            if registered == 0 {
                "no registered camera (every focal length is 0)".to_owned()
            } else {
                format!(
                    "no usable camera: {registered} registered cameras, none with an image file; \
                     pass --images DIR to name the folder holding the photos"
                )
            },
        ));
    }
    let no_sfm_points = points == 0;
    let mut clouds: Vec<Box<dyn PointSource<Error = ImportError>>> = Vec::new();
    if !no_sfm_points {
        clouds.push(parsed.into_cloud("sfm"));
    }
    let random_start_note = no_sfm_points.then(|| {
        format!(
            "{} has no points: training will start from random points, which converges more \
             slowly (or give a dense cloud with --points FILE)",
            file.display()
        )
    });
    Ok(ImportedScene {
        format: Format::Bundler,
        root,
        views,
        clouds,
        no_sfm_points,
        missing_images: missing,
        warnings,
        random_start_note,
    })
}

/// `gs-pack convert --sfm-depths`: the points each of `views` (the views [`import`] gave for
/// the same `path` and `options`, matched by image name) observes, from the points' view lists
/// (Bundler's tracks). A point enters the table once, when some view observes it; a view lists
/// it once however often its view list names that view's camera. Observations by unregistered
/// cameras or skipped views are not kept; a bundle whose view lists are all empty is refused.
/// Memory: 24 bytes per point kept and 4 per observation.
pub fn read_observations(
    path: &Path,
    _options: &ImportOptions,
    views: &[ViewSource],
) -> Result<super::sfm_depth::SfmObservations, ImportError> {
    let (file, list_file) = locate(path)?;
    let list = read_list(&list_file)?;
    let reader = crate::fsutil::open_file(&file).map_err(|e| ImportError::io(&file, e))?;
    let mut b = Bundle::new(BufReader::new(reader), &file, &list, &list_file)?;
    let view_of_name: HashMap<&str, usize> = views
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.as_str(), i))
        .collect();
    let view_of_camera: Vec<Option<usize>> = b
        .images
        .iter()
        .map(|n| view_of_name.get(n.as_str()).copied())
        .collect();
    for _ in 0..5 * b.cameras {
        b.lines.next_line("a camera's lines")?;
    }
    let mut obs = super::sfm_depth::SfmObservations {
        xyz: Vec::new(),
        views: vec![Vec::new(); views.len()],
        track_elements: 0,
    };
    let mut observers = Vec::new();
    for _ in 0..b.points {
        let xyz = b.lines.numbers::<3>("a point's position")?;
        b.lines.numbers::<3>("a point's colour")?;
        b.lines.view_list(b.cameras, &mut observers)?;
        obs.track_elements += observers.len() as u64;
        let index = u32::try_from(obs.xyz.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or_else(|| {
                b.lines.error(format!(
                    "more than {} points are observed by the packed views, beyond what \
                     --sfm-depths indexes; drop --sfm-depths",
                    u32::MAX - 1
                ))
            })?;
        let mut observed = false;
        for &c in &observers {
            if let Some(v) = view_of_camera[c as usize] {
                let list = &mut obs.views[v];
                if list.last() != Some(&index) {
                    list.push(index);
                }
                observed = true;
            }
        }
        if observed {
            obs.xyz.push(xyz);
        }
    }
    if obs.track_elements == 0 {
        return Err(ImportError::invalid(
            &file,
            "every point's view list is empty: --sfm-depths needs them to know where each image \
             sees a point; export the bundle with its view lists, or drop --sfm-depths",
        ));
    }
    Ok(obs)
}

/// An opened bundle: its image list, and its lines from the first camera on.
struct Bundle<'a, R> {
    /// The list's image paths, one per camera.
    images: Vec<String>,
    lines: Lines<'a, R>,
    cameras: u64,
    points: u64,
}

impl<'a, R: BufRead> Bundle<'a, R> {
    /// Reads the header of `file` (from `reader`) and the image list `list` (the text of
    /// `list_file`), checking that the list names one image per camera.
    fn new(
        reader: R,
        file: &'a Path,
        list: &str,
        list_file: &Path,
    ) -> Result<Bundle<'a, R>, ImportError> {
        let images: Vec<String> = list
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect();
        let mut lines = Lines {
            reader,
            file,
            line: 0,
            buf: String::new(),
        };
        let header = lines.numbers::<2>("the header `num_cameras num_points`")?;
        let count = |v: f64, what: &str| -> Result<u64, ImportError> {
            if v.fract() == 0.0 && (0.0..1e12).contains(&v) {
                Ok(v as u64)
            } else {
                Err(lines.error(format!("{what} {v} is not a count")))
            }
        };
        let cameras = count(header[0], "num_cameras")?;
        let points = count(header[1], "num_points")?;
        if cameras != images.len() as u64 {
            return Err(ImportError::invalid(
                list_file,
                format!(
                    "{} images listed, but {} has {cameras} cameras: the list must name one image \
                     per camera, in order; export the two together",
                    images.len(),
                    file.display()
                ),
            ));
        }
        Ok(Bundle {
            images,
            lines,
            cameras,
            points,
        })
    }
}

/// The bundle file's lines, read one at a time with their numbers.
struct Lines<'a, R> {
    reader: R,
    file: &'a Path,
    /// The number of the last line read (1-based).
    line: u64,
    buf: String,
}

impl<R: BufRead> Lines<'_, R> {
    fn error(&self, msg: String) -> ImportError {
        ImportError::parse(self.file, Location::Line(self.line), msg)
    }

    /// The next line that is not a `#` comment or blank.
    fn next_line(&mut self, what: &str) -> Result<&str, ImportError> {
        loop {
            self.buf.clear();
            let n = self
                .reader
                .read_line(&mut self.buf)
                .map_err(|e| ImportError::io(self.file, e))?;
            if n == 0 {
                return Err(ImportError::parse(
                    self.file,
                    Location::Line(self.line + 1),
                    format!("the file ends where {what} should be (cut short while copying?)"),
                ));
            }
            self.line += 1;
            let t = self.buf.trim();
            if !t.is_empty() && !t.starts_with('#') {
                return Ok(self.buf.trim());
            }
        }
    }

    /// The next line as exactly `N` finite numbers.
    fn numbers<const N: usize>(&mut self, what: &str) -> Result<[f64; N], ImportError> {
        let text = self.next_line(what)?.to_owned();
        let mut out = [0.0; N];
        let mut n = 0;
        for word in text.split_whitespace() {
            if n == N {
                return Err(self.error(format!("{what}: more than {N} numbers")));
            }
            out[n] = match word.parse::<f64>() {
                Ok(v) if v.is_finite() => v,
                _ => return Err(self.error(format!("{what}: {word:?} is not a finite number"))),
            };
            n += 1;
        }
        if n != N {
            return Err(self.error(format!("{what}: {n} numbers, expected {N}")));
        }
        Ok(out)
    }

    /// A point's view list into `observers` (its cameras, in order): a count, then `camera key
    /// x y` per observation, each camera an index below `cameras`.
    fn view_list(&mut self, cameras: u64, observers: &mut Vec<u64>) -> Result<(), ImportError> {
        observers.clear();
        let text = self.next_line("a point's view list")?.to_owned();
        let mut words = text.split_whitespace();
        let count = words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .ok_or_else(|| self.error("a point's view list does not start with a count".into()))?;
        let rest: Vec<&str> = words.collect();
        // Divided, not multiplied: a count near u64::MAX times four would wrap (found by the
        // fuzz target) and could then match.
        if !rest.len().is_multiple_of(4) || (rest.len() / 4) as u64 != count {
            return Err(self.error(format!(
                "a point's view list: {count} observations need four numbers each after the \
                 count (camera, key, x, y), found {}",
                rest.len()
            )));
        }
        for obs in rest.chunks_exact(4) {
            match obs[0].parse::<u64>() {
                Ok(c) if c < cameras => observers.push(c),
                _ => {
                    return Err(self.error(format!(
                        "a point's view list names camera {:?}, not one of the {cameras}",
                        obs[0]
                    )))
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::detect;

    /// Bundler's layout (`list.txt` in the project, `bundle/bundle.out` below it) and the flat
    /// one are found from the folder or the `.out` file; without a list the file is refused.
    #[test]
    fn bundles_and_their_lists_are_found() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("p");
        std::fs::create_dir_all(project.join("bundle")).unwrap();
        let out = project.join("bundle").join(BUNDLE_FILE);
        std::fs::write(&out, "0 0\n").unwrap();
        std::fs::write(project.join(LIST_FILE), "").unwrap();
        assert_eq!(detect(&project).unwrap(), Format::Bundler);
        assert_eq!(detect(&out).unwrap(), Format::Bundler);
        assert_eq!(
            locate(&project).unwrap(),
            (out.clone(), project.join(LIST_FILE))
        );
        // A list beside the file wins over one above it.
        std::fs::write(project.join("bundle").join(LIST_FILE), "").unwrap();
        assert_eq!(
            locate(&out).unwrap(),
            (out.clone(), project.join("bundle").join(LIST_FILE))
        );
        let flat = tmp.path().join("flat");
        std::fs::create_dir_all(&flat).unwrap();
        std::fs::write(flat.join(BUNDLE_FILE), "0 0\n").unwrap();
        let e = locate(&flat).unwrap_err().to_string();
        assert!(e.contains("no list.txt beside it or in its parent"), "{e}");
    }

    /// `from_reader` takes the photos' sizes from its lookup, skips a camera whose photo is
    /// absent (with the missing-image warning), refuses when the lookup does, and reads the
    /// bundle's cameras and points as `import` does from files (the fuzz target's seed).
    #[test]
    fn from_reader_asks_the_lookup_for_each_registered_photo() {
        let bundle = "# Bundle file v0.3\n3 2\n800 -0.01 0.002\n1 0 0\n0 1 0\n0 0 1\n0 0 -4\n\
                      0 0 0\n0 0 0\n0 0 0\n0 0 0\n0 0 0\n\
                      750 0 0\n1 0 0\n0 1 0\n0 0 1\n0.3 0 -4\n\
                      0.5 0.25 -1\n255 128 0\n2 0 0 12.5 -3.25 2 1 10.0 -3.0\n\
                      -0.5 0 0.5\n10 200 30\n1 2 5 -20 40\n";
        let list = "a.jpg 800\nb.jpg\nc.jpg\n";
        let (file, list_file) = (Path::new("p/bundle.out"), Path::new("p/list.txt"));
        let mut asked = Vec::new();
        let scene = from_reader(
            bundle.as_bytes(),
            file,
            list,
            list_file,
            &ImportOptions::default(),
            |path, _| {
                asked.push(path.to_path_buf());
                Ok((!path.ends_with("c.jpg")).then_some((640, 480)))
            },
        )
        .unwrap();
        // Camera 1 is unregistered (f = 0): its photo is not asked for.
        assert_eq!(asked, [Path::new("p/a.jpg"), Path::new("p/c.jpg")]);
        assert_eq!(scene.views.len(), 1);
        let v = &scene.views[0];
        assert_eq!(
            (v.name.as_str(), v.camera.width, v.camera.height),
            ("a.jpg", 640, 480)
        );
        assert_eq!(v.camera.intrinsics.cx, 320.0);
        assert_eq!(scene.missing_images, ["c.jpg"]);
        assert!(!scene.no_sfm_points);
        assert!(scene
            .warnings
            .iter()
            .any(|w| w.contains("1 of 3 cameras were not registered")));

        let e = from_reader(
            bundle.as_bytes(),
            file,
            list,
            list_file,
            &ImportOptions::default(),
            |path, what| Err(ImportError::invalid(path, format!("{what}: refused"))),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("camera 0 (a.jpg), lines 3–7: refused"), "{e}");
    }

    /// A view list whose count times four wraps around u64 (found by the fuzz target: it
    /// overflowed, and wrapped in release builds could have matched the numbers given) is
    /// refused like any other count that does not fit its numbers.
    #[test]
    fn a_view_list_count_that_wraps_is_refused() {
        let bundle = "1 1\n800 0 0\n1 0 0\n0 1 0\n0 0 1\n0 0 -4\n0 0 0\n255 0 0\n\
                      4611686018427387905 0 0 1 2\n";
        let e = from_reader(
            bundle.as_bytes(),
            Path::new("p/bundle.out"),
            "a.jpg\n",
            Path::new("p/list.txt"),
            &ImportOptions::default(),
            |_, _| Ok(Some((64, 48))),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 9")
                && e.contains("4611686018427387905 observations need four numbers each"),
            "{e}"
        );
    }
}
