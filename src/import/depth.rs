//! Monocular inverse-depth maps for 3DGS's depth regularization (`gs-pack convert --depths`):
//! finding each view's map, reading `depth_params.json`, and turning a map into the
//! inverse-depth plane a pack stores ([`crate::shard::VIEW_FLAG_DEPTH`]).
//!
//! The files are those of the official 3DGS workflow: Depth Anything V2 writes
//! `DEPTHS/<image name without its extension>.png` (8- or 16-bit, grey or colour), and
//! `utils/make_depth_scale.py` fits, per image, `scale` and `offset` so that
//! `value / 65536 · scale + offset` matches the SfM points' inverse depth, writing them to
//! `depth_params.json` keyed by the same extension-less name.
//!
//! Owns these rules, as 3DGS applies them:
//! - A map's value is read as the file holds it (an 8-bit file's 0..255 too: 3DGS divides by
//!   2^16 whatever the bit depth); a colour file gives its blue channel, which is channel 0 of
//!   the BGR array OpenCV's `imread` returns (Depth Anything's grey maps have three equal
//!   channels). The stored u16 is that value; [`crate::shard::DepthScale`] maps it.
//! - The median scale is the median (numpy's: the mean of the middle two of an even count) of
//!   the scales in `depth_params.json` that are positive. A fit is *unreliable* when its scale
//!   is below 0.2 or above 5 times that median (or not a number: `make_depth_scale.py` writes
//!   `NaN` for an image without SfM points); 3DGS then zeroes the view's depth mask, so the
//!   view is packed without a depth plane and trains exactly as 3DGS trains it.
//! - A map is placed like the view's loss mask (`crate::import::image::prepare_mask`): the
//!   image's size in stored pixel order (it then follows the image's EXIF orientation) or
//!   upright, or a resized copy of either of another size but the same aspect ratio within a
//!   pixel (Depth Anything may work at its own resolution; 3DGS resizes the map to the
//!   image), brought to that size first: by the area mean when smaller, bilinearly when
//!   larger. Then the image's undistortion (bilinear), crop and area downscale run on the
//!   values, linearly (no premultiplication, no threshold), in f32; the result is rounded to
//!   the nearest u16. A map of the image's size that needs no resampling (its lens the
//!   identity for the view's projection, and no downscale) is stored exactly.
//! - A 0 is no depth ([`crate::shard::DepthScale::NO_DEPTH`]: sky, a sensor's missing return,
//!   outside the photo after undistortion), never a value: a resampled value that any 0 takes
//!   part in (a tap of positive weight) is 0, so no-depth regions may grow by a pixel but a
//!   pixel at their edge never gets a mean of depth and nothing (half its inverse depth,
//!   twice as far), as a loss mask's excluded regions grow ([`crate::resample`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use image::metadata::Orientation;
use rayon::prelude::*;

use super::image::{
    covered_rect, is_resized_copy, side_file_placement, swaps_sides, target_size, LensMap, Resize,
};
use super::ImportError;
use crate::dataset::{DepthSource, ViewSource};
use crate::resample::AxisTaps;
use crate::shard::DepthScale;

/// The file 3DGS's `make_depth_scale.py` writes (COLMAP: in `sparse/0/`).
pub const DEPTH_PARAMS_FILE: &str = "depth_params.json";

/// A depth map larger than this is refused before it is read (as images are).
const MAX_FILE_BYTES: u64 = 512 << 20;

/// A parsed `depth_params.json`.
#[derive(Clone, Debug)]
pub struct DepthParams {
    pub path: PathBuf,
    /// Each entry's scale as written (`None`: not a finite number) and its fit (`None` where
    /// the scale or the offset is `NaN` or infinite: no usable fit).
    entries: HashMap<String, (Option<f64>, Option<DepthScale>)>,
    /// Median of the positive scales.
    pub median_scale: f64,
}

/// What `depth_params.json` says of one view.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fit {
    /// Train on the map with this scale.
    Reliable(DepthScale),
    /// Scale outside 0.2–5× the median, or not a number: no depth loss on this view.
    Unreliable,
}

impl DepthParams {
    /// Reads `path`. Every entry must be an object with numeric `scale` and `offset`
    /// (`NaN`/`Infinity`, which Python's `json` writes, read as an unusable fit); at least one
    /// scale must be positive.
    pub fn read(path: &Path) -> Result<DepthParams, ImportError> {
        let text =
            crate::fsutil::read_file_to_string(path).map_err(|e| ImportError::io(path, e))?;
        let value: serde_json::Value =
            serde_json::from_str(&python_json_to_json(&text)).map_err(|e| {
                ImportError::invalid(
                    path,
                    format!(
                        "not valid JSON ({e}); regenerate it with 3DGS's \
                         utils/make_depth_scale.py"
                    ),
                )
            })?;
        let Some(object) = value.as_object() else {
            return Err(ImportError::invalid(
                path,
                "expected a JSON object {\"<image name without extension>\": {\"scale\": s, \
                 \"offset\": o}, ...}; regenerate it with 3DGS's utils/make_depth_scale.py",
            ));
        };
        let mut entries = HashMap::with_capacity(object.len());
        for (key, entry) in object {
            let field = |name: &str| -> Result<Option<f64>, ImportError> {
                match entry.get(name) {
                    Some(serde_json::Value::Number(n)) => Ok(n.as_f64()),
                    // NaN/Infinity (see `python_json_to_json`).
                    Some(serde_json::Value::Null) => Ok(None),
                    Some(other) => Err(ImportError::invalid(
                        path,
                        format!(
                            "entry {key:?}: \"{name}\" is {other}, not a number; regenerate the \
                             file with 3DGS's utils/make_depth_scale.py"
                        ),
                    )),
                    None => Err(ImportError::invalid(
                        path,
                        format!(
                            "entry {key:?} has no \"{name}\" (each entry is {{\"scale\": s, \
                             \"offset\": o}}); regenerate the file with 3DGS's \
                             utils/make_depth_scale.py"
                        ),
                    )),
                }
            };
            let (scale, offset) = (field("scale")?, field("offset")?);
            let fit = match (scale, offset) {
                (Some(s), Some(o)) => Some(DepthScale {
                    scale: s as f32,
                    offset: o as f32,
                })
                .filter(|d| d.scale.is_finite() && d.offset.is_finite()),
                _ => None,
            };
            entries.insert(key.clone(), (scale, fit));
        }
        // Every positive scale counts, as in 3DGS, also one whose offset is unusable.
        let mut positive: Vec<f64> = entries
            .values()
            .filter_map(|(scale, _)| *scale)
            .filter(|&s| s > 0.0)
            .collect();
        if positive.is_empty() {
            return Err(ImportError::invalid(
                path,
                "no entry has a positive scale, so no view's depth map can be mapped to inverse \
                 depth (3DGS takes the median positive scale as the reference); check that the \
                 depth maps and the SfM points belong to the same images, and regenerate it \
                 with 3DGS's utils/make_depth_scale.py",
            ));
        }
        positive.sort_by(f64::total_cmp);
        let n = positive.len();
        // Halves first: the sum of two scales near f64::MAX would overflow (halving is exact,
        // so finite medians round as the sum's half would).
        let median_scale = if n % 2 == 1 {
            positive[n / 2]
        } else {
            positive[n / 2 - 1] / 2.0 + positive[n / 2] / 2.0
        };
        Ok(DepthParams {
            path: path.to_owned(),
            entries,
            median_scale,
        })
    }

    /// The fit of the image whose extension-less name is `key`; `None` when there is no entry.
    pub fn fit(&self, key: &str) -> Option<Fit> {
        let (_, fit) = self.entries.get(key)?;
        Some(match fit {
            Some(d)
                if d.scale as f64 >= 0.2 * self.median_scale
                    && d.scale as f64 <= 5.0 * self.median_scale =>
            {
                Fit::Reliable(*d)
            }
            _ => Fit::Unreliable,
        })
    }
}

/// Python's `json.dump` writes the bare tokens `NaN`, `Infinity` and `-Infinity`, which JSON
/// does not have: each becomes `null` (outside strings), so the file parses and the fit reads
/// as unusable.
fn python_json_to_json(text: &str) -> std::borrow::Cow<'_, str> {
    if !(text.contains("NaN") || text.contains("Infinity")) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_string = true;
        }
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| rest.starts_with(t));
        match token {
            Some(t) => {
                out.push_str("null");
                rest = &rest[t.len()..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out.into()
}

/// The `--depths` folder: relative to the dataset root (like `--images`), or absolute; it must
/// exist.
pub fn depths_dir(root: &Path, dir: &Path) -> Result<PathBuf, ImportError> {
    // `Path::join` keeps an absolute `dir` as it is.
    let d = root.join(dir);
    if !d.is_dir() {
        return Err(ImportError::invalid(
            &d,
            format!(
                "--depths {}: no such folder (a relative --depths is taken from the dataset \
                 root {}, like --images); make the maps with Depth Anything V2 \
                 (run.py --encoder vitl --pred-only --grayscale --img-path IMAGES --outdir \
                 DEPTHS)",
                dir.display(),
                root.display()
            ),
        ));
    }
    Ok(d)
}

/// The depth map 3DGS reads for the image whose extension-less name is `key`.
pub fn depth_file(dir: &Path, key: &str) -> PathBuf {
    dir.join(format!("{key}.png"))
}

/// `name` without its last extension, as 3DGS keys depth maps and fits (subfolders kept).
pub fn strip_extension(name: &str) -> &str {
    let file_start = name.rfind('/').map_or(0, |i| i + 1);
    match name[file_start..].rfind('.') {
        Some(dot) if dot > 0 => &name[..file_start + dot],
        _ => name,
    }
}

/// The one-line note `gs-pack convert` prints when some fits are unreliable.
pub fn unreliable_note(unreliable: usize, views: usize, params: &DepthParams) -> String {
    format!(
        "{unreliable} of {views} views' depth fits in {} are unreliable (scale outside 0.2–5× \
         the median {:.3}, or not a number): packed without depth, as 3DGS trains them without \
         the depth loss",
        params.path.display(),
        params.median_scale
    )
}

/// The view's depth map checked to exist: `Err` names the view, the map expected and how to
/// make it.
pub fn existing_depth_file(view: &str, path: PathBuf) -> Result<PathBuf, ImportError> {
    if super::file_present(&path)? {
        return Ok(path);
    }
    Err(ImportError::invalid(
        &path,
        format!(
            "view '{view}' has no depth map (--depths expects one per image, named after the \
             image without its extension, .png); run Depth Anything V2 on every image, or drop \
             --depths"
        ),
    ))
}

/// A single-channel f32 raster (inverse-depth values), row-major, top row first.
#[derive(Clone, Debug, PartialEq)]
struct Plane {
    width: u32,
    height: u32,
    values: Vec<f32>,
}

impl Plane {
    fn at(&self, x: usize, y: usize) -> f32 {
        self.values[y * self.width as usize + x]
    }
}

/// Decodes a depth map's values (see the module doc for channels and bit depths).
fn load_map(view: &str, path: &Path) -> Result<Plane, ImportError> {
    let len = std::fs::metadata(path)
        .map_err(|e| ImportError::io(path, e))?
        .len();
    if len > MAX_FILE_BYTES {
        return Err(ImportError::invalid(
            path,
            format!("the depth map of view '{view}' is {len} bytes, more than the {MAX_FILE_BYTES}-byte limit"),
        ));
    }
    let bytes = crate::fsutil::read_file(path).map_err(|e| ImportError::io(path, e))?;
    let bad = |why: String| {
        ImportError::invalid(
            path,
            format!(
                "cannot decode the depth map of view '{view}' ({why}); it must be an 8- or \
                 16-bit PNG as Depth Anything V2 writes: re-run the depth estimator on this image"
            ),
        )
    };
    let format = image::guess_format(&bytes).map_err(|e| bad(e.to_string()))?;
    let decoded =
        image::load_from_memory_with_format(&bytes, format).map_err(|e| bad(e.to_string()))?;
    use image::ColorType as C;
    let (width, height) = (decoded.width(), decoded.height());
    let values: Vec<f32> = match decoded.color() {
        C::L8 | C::La8 => decoded.to_luma8().pixels().map(|p| p.0[0] as f32).collect(),
        C::L16 | C::La16 => decoded
            .to_luma16()
            .pixels()
            .map(|p| p.0[0] as f32)
            .collect(),
        // OpenCV's channel 0 of a colour image is blue (BGR order).
        C::Rgb8 | C::Rgba8 => decoded.to_rgb8().pixels().map(|p| p.0[2] as f32).collect(),
        C::Rgb16 | C::Rgba16 => decoded.to_rgb16().pixels().map(|p| p.0[2] as f32).collect(),
        other => return Err(bad(format!("{other:?} samples"))),
    };
    if width == 0 || height == 0 {
        return Err(bad(format!("it is empty ({width}x{height})")));
    }
    Ok(Plane {
        width,
        height,
        values,
    })
}

/// The inverse-depth plane of `view` (its [`ViewSource::depth`] map), placed like its image:
/// `width × height` little-endian u16 of the packed view. `image_stored` is the image file's
/// size in stored pixel order and `orientation` its EXIF orientation.
pub fn prepare_depth(
    view: &ViewSource,
    depth: &DepthSource,
    image_stored: (u32, u32),
    orientation: Orientation,
    resize: Resize,
) -> Result<(u32, u32, Vec<u8>), ImportError> {
    let path = &depth.path;
    let map = load_map(&view.name, path)?;
    let size = (map.width, map.height);
    let cam = (view.camera.width, view.camera.height);
    // As a loss mask (see the module doc), but a map may also be smaller than its image (a
    // depth estimator may work at its own resolution).
    let same_shape = |a: (u32, u32), b: (u32, u32)| is_resized_copy(a, b) || is_resized_copy(b, a);
    let Some((orientation, target)) =
        side_file_placement(size, image_stored, orientation, cam, same_shape)
    else {
        return Err(ImportError::invalid(
            path,
            format!(
                "the depth map of view '{}' is {}x{} but its image {} is {}x{}; a depth map must \
                 have its image's aspect ratio (its size, or a resized copy of it): re-run the \
                 depth estimator on this image",
                view.name,
                size.0,
                size.1,
                view.image_path.display(),
                cam.0,
                cam.1
            ),
        ));
    };
    let map = resample(&map, target.0, target.1);
    let placed = place(view, map, orientation, resize)?;
    let bytes = placed
        .values
        .iter()
        // Convex combinations of u16 values: in [0, 65535]; +0.5 and a saturating cast round.
        .flat_map(|&v| ((v + 0.5) as u16).to_le_bytes())
        .collect();
    Ok((placed.width, placed.height, bytes))
}

/// `src` brought to `width × height`: itself, the area mean when no side grows, else
/// bilinear (pixel centres at +0.5, edge pixels replicated), as OpenCV's `resize` that 3DGS
/// uses.
fn resample(src: &Plane, width: u32, height: u32) -> Plane {
    if (width, height) == (src.width, src.height) {
        return src.clone();
    }
    if width <= src.width && height <= src.height {
        return resize_area(src, width, height);
    }
    let (sx, sy) = (
        src.width as f64 / width as f64,
        src.height as f64 / height as f64,
    );
    let mut values = Vec::with_capacity(width as usize * height as usize);
    for j in 0..height {
        for i in 0..width {
            values.push(sample_bilinear(
                src,
                (i as f64 + 0.5) * sx,
                (j as f64 + 0.5) * sy,
            ));
        }
    }
    Plane {
        width,
        height,
        values,
    }
}

/// [`crate::import::image`]'s `place` for a plane of values: orientation, undistortion to the
/// covered window, area downscale to [`target_size`]; the same geometry, so the plane lines up
/// with the view's pixels.
fn place(
    view: &ViewSource,
    stored: Plane,
    orientation: Orientation,
    resize: Resize,
) -> Result<Plane, ImportError> {
    let cam = view.camera;
    let keep_stored =
        swaps_sides(orientation) && (stored.width, stored.height) == (cam.width, cam.height);
    let plane = if keep_stored {
        stored
    } else {
        orient(stored, orientation)
    };
    if (plane.width, plane.height) != (cam.width, cam.height) {
        return Err(ImportError::invalid(
            &view.image_path,
            format!(
                "view '{}': its depth map placed is {}x{} but its camera says {}x{}",
                view.name, plane.width, plane.height, cam.width, cam.height
            ),
        ));
    }
    let (width, height, ideal) = if cam.projection.is_pinhole() && view.distortion.is_none() {
        (cam.width, cam.height, plane)
    } else {
        let rect = covered_rect(
            cam.width,
            cam.height,
            &cam.intrinsics,
            &view.distortion,
            cam.projection,
        );
        if rect.is_empty() {
            return Err(ImportError::invalid(
                &view.image_path,
                format!(
                    "view '{}': its lens model ({:?}) sends no pixel of the undistorted image \
                     into the photo",
                    view.name, view.distortion
                ),
            ));
        }
        let map = LensMap::new(
            cam.width,
            cam.height,
            &cam.intrinsics,
            &view.distortion,
            cam.projection,
        );
        let mut values = vec![0f32; rect.width() as usize * rect.height() as usize];
        values
            .par_chunks_mut(rect.width() as usize)
            .enumerate()
            .for_each(|(j, row)| {
                for (i, v) in row.iter_mut().enumerate() {
                    let (x, y) = (rect.x0 + i as u32, rect.y0 + j as u32);
                    if let Some((u, w)) = map.source(x, y) {
                        *v = if map.is_identity() {
                            plane.values[y as usize * plane.width as usize + x as usize]
                        } else {
                            sample_bilinear(&plane, u, w)
                        };
                    } // else: no content, 0 (no depth)
                }
            });
        (
            rect.width(),
            rect.height(),
            Plane {
                width: rect.width(),
                height: rect.height(),
                values,
            },
        )
    };
    let (w, h) = target_size(width, height, resize);
    Ok(if (w, h) == (width, height) {
        ideal
    } else {
        resize_area(&ideal, w, h)
    })
}

/// Applies an EXIF orientation (as `image::DynamicImage::apply_orientation` does).
fn orient(p: Plane, o: Orientation) -> Plane {
    use image::imageops::{
        flip_horizontal as fliph, flip_vertical as flipv, rotate180, rotate270, rotate90,
    };
    if o == Orientation::NoTransforms {
        return p;
    }
    let buf =
        image::ImageBuffer::<image::Luma<f32>, Vec<f32>>::from_raw(p.width, p.height, p.values)
            .expect("a plane holds width x height values");
    let out = match o {
        Orientation::NoTransforms => buf,
        Orientation::Rotate90 => rotate90(&buf),
        Orientation::Rotate180 => rotate180(&buf),
        Orientation::Rotate270 => rotate270(&buf),
        Orientation::FlipHorizontal => fliph(&buf),
        Orientation::FlipVertical => flipv(&buf),
        Orientation::Rotate90FlipH => fliph(&rotate90(&buf)),
        Orientation::Rotate270FlipH => fliph(&rotate270(&buf)),
    };
    let (width, height) = out.dimensions();
    Plane {
        width,
        height,
        values: out.into_raw(),
    }
}

/// Bilinear sample at `(u, v)` (pixel centres at +0.5, neighbours clamped to the plane), the
/// image pipeline's rule without rounding; 0 (no depth) when a tap of positive weight is 0.
fn sample_bilinear(src: &Plane, u: f64, v: f64) -> f32 {
    let sx = u - 0.5;
    let sy = v - 0.5;
    let x0i = sx.floor() as i64;
    let y0i = sy.floor() as i64;
    let tx = (sx - x0i as f64) as f32;
    let ty = (sy - y0i as f64) as f32;
    let max_x = src.width as i64 - 1;
    let max_y = src.height as i64 - 1;
    let x0 = x0i.clamp(0, max_x) as usize;
    let x1 = (x0i + 1).clamp(0, max_x) as usize;
    let y0 = y0i.clamp(0, max_y) as usize;
    let y1 = (y0i + 1).clamp(0, max_y) as usize;
    let taps = [
        (x0, y0, (1.0 - tx) * (1.0 - ty)),
        (x1, y0, tx * (1.0 - ty)),
        (x0, y1, (1.0 - tx) * ty),
        (x1, y1, tx * ty),
    ];
    if taps.iter().any(|&(x, y, w)| w > 0.0 && src.at(x, y) == 0.0) {
        return 0.0;
    }
    let top = src.at(x0, y0) + (src.at(x1, y0) - src.at(x0, y0)) * tx;
    let bottom = src.at(x0, y1) + (src.at(x1, y1) - src.at(x0, y1)) * tx;
    top + (bottom - top) * ty
}

/// The image pipeline's area (box) downscale on values: each output is the overlap-weighted
/// mean of the source area it covers, or 0 (no depth) when any of it is 0.
fn resize_area(src: &Plane, width: u32, height: u32) -> Plane {
    let width = width.clamp(1, src.width);
    let height = height.clamp(1, src.height);
    if (width, height) == (src.width, src.height) {
        return src.clone();
    }
    let xs = AxisTaps::new(src.width, width);
    let ys = AxisTaps::new(src.height, height);
    let mut values = vec![0f32; width as usize * height as usize];
    values
        .par_chunks_mut(width as usize)
        .enumerate()
        .for_each(|(oy, row)| {
            let (sy0, wy) = ys.taps(oy);
            for (ox, out) in row.iter_mut().enumerate() {
                let (sx0, wx) = xs.taps(ox);
                let mut sum = 0f64;
                let mut no_depth = false;
                for (k, &wyk) in wy.iter().enumerate() {
                    for (m, &wxm) in wx.iter().enumerate() {
                        let v = src.at(sx0 + m, sy0 + k);
                        no_depth |= v == 0.0 && wyk * wxm > 0.0;
                        sum += (wyk * wxm) as f64 * v as f64;
                    }
                }
                *out = if no_depth {
                    0.0
                } else {
                    (sum / (xs.total[ox] as f64 * ys.total[oy] as f64)) as f32
                };
            }
        });
    Plane {
        width,
        height,
        values,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Distortion;
    use crate::import::image::prepare_view_pixels;
    use crate::scene::camera::{Camera, Intrinsics, Pose};
    use image::ImageEncoder;

    fn write(path: &Path, text: &str) -> PathBuf {
        std::fs::write(path, text).unwrap();
        path.to_owned()
    }

    #[test]
    fn params_follow_3dgs_median_and_reliability() {
        let dir = tempfile::tempdir().unwrap();
        // -1 and NaN are not positive and do not count in the median.
        let p = write(
            &dir.path().join("depth_params.json"),
            r#"{"a": {"scale": 0.5, "offset": 0.1}, "b": {"scale": 1, "offset": 0},
                "c": {"scale": 2.0, "offset": -0.5}, "d": {"scale": 3, "offset": 0},
                "e": {"scale": -1.0, "offset": 0}, "f": {"scale": NaN, "offset": 0.2},
                "dir/g": {"scale": 0.2, "offset": 0}, "h": {"scale": 8.0, "offset": Infinity},
                "k\"NaN": {"scale": 7.4, "offset": 0}}"#,
        );
        let params = DepthParams::read(&p).unwrap();
        // Positive: 0.2 0.5 1 [2] 3 7.4 8 (h's scale counts though its offset is unusable).
        assert_eq!(params.median_scale, 2.0);
        let fit = |k: &str| params.fit(k);
        assert_eq!(
            fit("c"),
            Some(Fit::Reliable(DepthScale {
                scale: 2.0,
                offset: -0.5
            }))
        );
        assert_eq!(
            fit("a"),
            Some(Fit::Reliable(DepthScale {
                scale: 0.5,
                offset: 0.1
            }))
        );
        assert_eq!(fit("e"), Some(Fit::Unreliable));
        assert_eq!(fit("f"), Some(Fit::Unreliable));
        assert_eq!(fit("dir/g"), Some(Fit::Unreliable)); // 0.2 < 0.2 × 2
        assert_eq!(fit("h"), Some(Fit::Unreliable)); // offset not finite
        assert_eq!(
            fit("k\"NaN"),
            Some(Fit::Reliable(DepthScale {
                scale: 7.4,
                offset: 0.0
            }))
        );
        assert_eq!(fit("zzz"), None);

        // numpy's median of an even count: the mean of the middle two.
        let p = write(
            &dir.path().join("even.json"),
            r#"{"a": {"scale": 1, "offset": 0}, "b": {"scale": 2, "offset": 0}}"#,
        );
        assert_eq!(DepthParams::read(&p).unwrap().median_scale, 1.5);
        // Two scales near f64::MAX: their sum would overflow, their mean does not.
        let p = write(
            &dir.path().join("huge.json"),
            r#"{"a": {"scale": 1.5e308, "offset": 0}, "b": {"scale": 1.7e308, "offset": 0}}"#,
        );
        assert_eq!(DepthParams::read(&p).unwrap().median_scale, 1.6e308);

        // No positive scale, a non-numeric scale, a missing offset, not an object: errors
        // naming the file and the entry.
        for (text, want) in [
            (
                r#"{"a": {"scale": 0, "offset": 1}}"#,
                "no entry has a positive scale",
            ),
            (
                r#"{"a": {"scale": "1.0", "offset": 1}}"#,
                "entry \"a\": \"scale\" is \"1.0\", not a number",
            ),
            (r#"{"a": {"scale": 1.0}}"#, "entry \"a\" has no \"offset\""),
            (r#"[1, 2]"#, "expected a JSON object"),
            (r#"{"a": "#, "not valid JSON"),
        ] {
            let p = write(&dir.path().join("bad.json"), text);
            let e = DepthParams::read(&p).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("bad.json"), "{text}: {e}");
        }
    }

    #[test]
    fn names_lose_only_their_last_extension() {
        assert_eq!(strip_extension("00001.jpg"), "00001");
        assert_eq!(strip_extension("cam0/img.1.JPG"), "cam0/img.1");
        assert_eq!(strip_extension("a.b/noext"), "a.b/noext");
        assert_eq!(strip_extension(".hidden"), ".hidden");
        assert_eq!(
            python_json_to_json(r#"{"NaN": NaN, "x": -Infinity, "s": "a\"Infinity"}"#),
            r#"{"NaN": null, "x": null, "s": "a\"Infinity"}"#
        );
    }

    fn camera(width: u32, height: u32) -> Camera {
        crate::synth::packs::centred_camera(width, height, Pose::IDENTITY)
    }

    fn rgb_png(path: &Path, w: u32, h: u32) {
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([(x * 10 + y) as u8, 0, 0]))
            .save(path)
            .unwrap();
    }

    fn depth_png(path: &Path, w: u32, h: u32, f: impl Fn(u32, u32) -> u16) {
        let values: Vec<u8> = (0..h)
            .flat_map(|y| (0..w).map(move |x| (x, y)))
            .flat_map(|(x, y)| f(x, y).to_ne_bytes())
            .collect();
        let enc = image::codecs::png::PngEncoder::new(std::fs::File::create(path).unwrap());
        enc.write_image(&values, w, h, image::ExtendedColorType::L16)
            .unwrap();
    }

    fn view(dir: &Path, w: u32, h: u32, depth: &Path) -> ViewSource {
        let image_path = dir.join("img.png");
        rgb_png(&image_path, w, h);
        ViewSource {
            name: "img.png".into(),
            image_path,
            camera: camera(w, h),
            distortion: Distortion::NONE,
            split: None,
            mask_path: None,
            depth: Some(DepthSource {
                path: depth.to_owned(),
                scale: DepthScale {
                    scale: 2.0,
                    offset: 0.25,
                },
            }),
        }
    }

    /// The plane of a prepared view, as u16.
    fn plane(v: &ViewSource, resize: Resize) -> (u32, u32, Vec<u16>) {
        let p = prepare_view_pixels(v, resize, false).unwrap();
        assert!(p.layout.depth);
        assert_eq!(p.depth, v.depth.as_ref().map(|d| d.scale));
        let (w, h) = (p.camera.width, p.camera.height);
        let planes = p.layout.planes(&p.pixels, w, h).unwrap();
        let d = planes.depth.unwrap();
        (
            w,
            h,
            d.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect(),
        )
    }

    #[test]
    fn a_map_of_the_image_size_is_stored_exactly_and_downscales_as_a_mean() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d.png");
        let f = |x: u32, y: u32| (x * 1000 + y * 7919 + 3) as u16;
        depth_png(&d, 8, 6, f);
        let v = view(dir.path(), 8, 6, &d);
        let (w, h, got) = plane(&v, Resize::None);
        assert_eq!((w, h), (8, 6));
        let want: Vec<u16> = (0..6).flat_map(|y| (0..8).map(move |x| f(x, y))).collect();
        assert_eq!(got, want);
        // Downscaled by 2: the exact mean of each 2×2 block, rounded to nearest (values, not
        // coverage or premultiplied colour).
        let (w, h, got) = plane(&v, Resize::Downscale(2));
        assert_eq!((w, h), (4, 3));
        for y in 0..3 {
            for x in 0..4 {
                let mean = (f(2 * x, 2 * y) as f64
                    + f(2 * x + 1, 2 * y) as f64
                    + f(2 * x, 2 * y + 1) as f64
                    + f(2 * x + 1, 2 * y + 1) as f64)
                    / 4.0;
                assert_eq!(got[(y * 4 + x) as usize], (mean + 0.5) as u16, "({x}, {y})");
            }
        }
    }

    /// A 0 is no depth, never averaged: a downscaled value any 0 takes part in is 0 (the
    /// others stay exact means), and so is an upscaled one with a 0 among its taps.
    #[test]
    fn no_depth_is_never_averaged_into_a_depth() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d.png");
        // 8×6 with a no-depth pixel at (5, 2) and a no-depth column x = 0.
        let f = |x: u32, y: u32| {
            if x == 0 || (x, y) == (5, 2) {
                0
            } else {
                (x * 1000 + y * 300 + 7) as u16
            }
        };
        depth_png(&d, 8, 6, f);
        let v = view(dir.path(), 8, 6, &d);
        let (w, h, got) = plane(&v, Resize::Downscale(2));
        assert_eq!((w, h), (4, 3));
        for y in 0..3 {
            for x in 0..4 {
                let block =
                    [(0, 0), (1, 0), (0, 1), (1, 1)].map(|(dx, dy)| f(2 * x + dx, 2 * y + dy));
                let want = if block.contains(&0) {
                    0
                } else {
                    (block.iter().map(|&v| v as f64).sum::<f64>() / 4.0 + 0.5) as u16
                };
                assert_eq!(got[(y * 4 + x) as usize], want, "({x}, {y})");
            }
        }
        assert_eq!(got[0], 0, "the no-depth column");
        assert_eq!(got[4 + 2], 0, "the block holding (5, 2)");
        assert!(got[4 + 1] > 0);
        // A half-size map brought up to the image: outputs whose bilinear taps reach the
        // no-depth pixel (1, 1) of the small map are no depth; the far corner is not.
        let small = dir.path().join("small.png");
        depth_png(&small, 4, 3, |x, y| if (x, y) == (1, 1) { 0 } else { 5000 });
        let v = view(dir.path(), 8, 6, &small);
        let (_, _, got) = plane(&v, Resize::None);
        let at = |x: usize, y: usize| got[y * 8 + x];
        // Output (2, 2) samples the small map at (1.25, 1.25) - 0.5: taps (0..1, 0..1).
        assert_eq!(at(2, 2), 0);
        assert_eq!(at(3, 3), 0, "centred on the no-depth pixel");
        assert_eq!(at(7, 5), 5000);
        assert_eq!(at(0, 5), 5000, "taps (0, 2) only: clamped, far from (1, 1)");
    }

    #[test]
    fn a_map_of_another_size_with_the_image_aspect_is_resampled_and_others_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        // Half size (Depth Anything's own resolution): bilinear up, so a linear ramp stays a
        // ramp in the interior (from 1000: a 0 would be no depth).
        let small = dir.path().join("small.png");
        depth_png(&small, 4, 3, |x, _| (x * 4000 + 1000) as u16);
        let v = view(dir.path(), 8, 6, &small);
        let (_, _, got) = plane(&v, Resize::None);
        // Output x centre (i + 0.5) / 2 in the map: value 4000·((i + 0.5)/2 − 0.5) + 1000,
        // clamped.
        for i in 0..8u32 {
            let u = ((i as f64 + 0.5) / 2.0 - 0.5).clamp(0.0, 3.0);
            assert_eq!(got[i as usize], (4000.0 * u + 1000.5) as u16, "x {i}");
        }
        // Double size: the 2×2 means.
        let big = dir.path().join("big.png");
        depth_png(&big, 16, 12, |x, y| (x * 100 + y + 1) as u16);
        let v = view(dir.path(), 8, 6, &big);
        let (_, _, got) = plane(&v, Resize::None);
        assert_eq!(got[0], 52); // mean of 1, 2, 101, 102 = 51.5 → 52
                                // Another aspect ratio: refused naming the map, the view and both sizes.
        let wrong = dir.path().join("wrong.png");
        depth_png(&wrong, 8, 8, |_, _| 1);
        let v = view(dir.path(), 8, 6, &wrong);
        let e = prepare_view_pixels(&v, Resize::None, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("wrong.png")
                && e.contains("'img.png'")
                && e.contains("8x8")
                && e.contains("8x6"),
            "{e}"
        );
    }

    #[test]
    fn eight_bit_grey_and_16_bit_colour_maps_are_read_as_3dgs_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        // 8-bit: the value as it is (3DGS divides by 2^16 whatever the bit depth).
        let grey = dir.path().join("grey.png");
        image::GrayImage::from_fn(4, 2, |x, _| image::Luma([200 + x as u8]))
            .save(&grey)
            .unwrap();
        let (_, _, got) = plane(&view(dir.path(), 4, 2, &grey), Resize::None);
        assert_eq!(&got[..4], &[200, 201, 202, 203]);
        // 16-bit RGB: OpenCV's channel 0 of BGR, the blue channel.
        let rgb = dir.path().join("rgb.png");
        let img = image::ImageBuffer::<image::Rgb<u16>, Vec<u16>>::from_fn(4, 2, |x, y| {
            image::Rgb([1, 2, 40000 + x as u16 + 10 * y as u16])
        });
        image::DynamicImage::ImageRgb16(img).save(&rgb).unwrap();
        let (_, _, got) = plane(&view(dir.path(), 4, 2, &rgb), Resize::None);
        assert_eq!(
            got,
            [40000, 40001, 40002, 40003, 40010, 40011, 40012, 40013]
        );
        // A corrupt file: an error naming it and the view.
        let bad = dir.path().join("bad.png");
        let mut bytes = std::fs::read(&rgb).unwrap();
        bytes.truncate(bytes.len() / 2);
        std::fs::write(&bad, bytes).unwrap();
        let e = prepare_view_pixels(&view(dir.path(), 4, 2, &bad), Resize::None, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.png") && e.contains("depth map of view 'img.png'"),
            "{e}"
        );
    }

    /// Through a distorted lens (pincushion: the undistorted image is cropped) and a
    /// downscale, the plane keeps the colour's geometry: a map whose values are 256 × the
    /// image's red channel comes out as 256 × the packed red channel, within the colour's
    /// u8 rounding (±0.5 · 256; downscaled, the colour is rounded after undistortion and again
    /// after the mean: ±1 · 256) and the plane's own (±0.5).
    #[test]
    fn a_distorted_view_places_its_map_with_the_colour_geometry() {
        let dir = tempfile::tempdir().unwrap();
        let (w, h) = (40u32, 30u32);
        // 1..=255: a 0 in the map would be no depth.
        let red = |x: u32, y: u32| ((x * 5 + y * 3) % 255 + 1) as u8;
        let d = dir.path().join("d.png");
        depth_png(&d, w, h, |x, y| red(x, y) as u16 * 256);
        let mut v = view(dir.path(), w, h, &d);
        // Replaces the helper's image.
        image::RgbImage::from_fn(w, h, |x, y| image::Rgb([red(x, y), 0, 0]))
            .save(&v.image_path)
            .unwrap();
        v.camera.intrinsics = Intrinsics {
            fx: 30.0,
            fy: 30.0,
            cx: 20.3,
            cy: 14.8,
        };
        v.distortion = Distortion::RadialTangential {
            k: [0.2, 0.05, 0.0, 0.0, 0.0, 0.0],
            p: [0.001, -0.002],
        };
        for (resize, tol) in [(Resize::None, 128.5), (Resize::Downscale(2), 256.5)] {
            let p = prepare_view_pixels(&v, resize, false).unwrap();
            let (pw, ph) = (p.camera.width, p.camera.height);
            assert!(pw < w, "the lens crops the image");
            let planes = p.layout.planes(&p.pixels, pw, ph).unwrap();
            let depth = planes.depth.unwrap();
            for (k, px) in planes.pixels.chunks_exact(3).enumerate() {
                let got = u16::from_le_bytes([depth[2 * k], depth[2 * k + 1]]) as f64;
                let want = px[0] as f64 * 256.0;
                assert!(
                    (got - want).abs() <= tol,
                    "{resize:?} pixel {k}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    fn a_map_in_stored_order_follows_the_image_orientation() {
        let dir = tempfile::tempdir().unwrap();
        // A 3×2 stored map and a camera of the upright 2×3 size of an image tagged "rotate
        // 90° clockwise" (EXIF 6): the map is rotated like the image.
        let d = dir.path().join("d.png");
        depth_png(&d, 3, 2, |x, y| (10 * x + y) as u16);
        let stored = Plane {
            width: 3,
            height: 2,
            values: (0..2)
                .flat_map(|y| (0..3).map(move |x| (10 * x + y) as f32))
                .collect(),
        };
        let rotated = orient(stored.clone(), Orientation::Rotate90);
        assert_eq!((rotated.width, rotated.height), (2, 3));
        // The image crate's rotation of the same pixels.
        let mut img =
            image::DynamicImage::ImageLuma16(image::ImageBuffer::from_fn(3, 2, |x, y| {
                image::Luma([(10 * x + y) as u16])
            }));
        img.apply_orientation(Orientation::Rotate90);
        let want: Vec<f32> = img.to_luma16().pixels().map(|p| p.0[0] as f32).collect();
        assert_eq!(rotated.values, want);
        for o in [
            Orientation::Rotate90FlipH,
            Orientation::Rotate270FlipH,
            Orientation::FlipVertical,
        ] {
            let mut img =
                image::DynamicImage::ImageLuma16(image::ImageBuffer::from_fn(3, 2, |x, y| {
                    image::Luma([(10 * x + y) as u16])
                }));
            img.apply_orientation(o);
            let want: Vec<f32> = img.to_luma16().pixels().map(|p| p.0[0] as f32).collect();
            assert_eq!(orient(stored.clone(), o).values, want, "{o:?}");
        }
    }
}
