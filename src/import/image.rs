//! Image files → the RGB8 pixels that get packed: decoding, undistortion and downscaling.
//!
//! This module owns the whole path from an image file named by a [`ViewSource`] to the pixels
//! and camera stored in a pack ([`prepare_view`]):
//!
//! 1. [`load_rgb8`] decodes JPEG or PNG (format sniffed from the bytes, the extension is only a
//!    fallback) and converts every colour type to RGB8. JPEGs are decoded in strict mode:
//!    corrupt scan data, which a lenient decoder silently fills with grey, is an error naming
//!    the file (accepted with a warning under `gs-pack convert --lenient`). Grey is replicated
//!    to three channels and 16-bit samples are rounded to 8 bits. [`load_rgb8`] drops alpha;
//!    [`prepare_view_pixels`] (what `gs-pack` packs) keeps it: an image with an alpha channel
//!    that is not 255 everywhere (NeRF-synthetic/Blender renders, masked captures) becomes an
//!    RGBA8 view (straight alpha, [`crate::shard::VIEW_FLAG_ALPHA`]); an alpha channel that is
//!    opaque everywhere carries nothing and is dropped (the view costs RGB bytes). Compositing
//!    onto a background colour is a training choice (fixed or random per step), so it is not
//!    baked into the pack: the trainer composites (see `crate::train::alpha`).
//! 2. The decoded size must equal the metadata's camera size; a mismatch is an error (images
//!    resized after SfM, or the wrong images folder), never a silent rescale.
//! 3. [`undistort_rect`] resamples to an ideal image with the *same* size and intrinsics,
//!    cropped to [`covered_rect`]: the window in which every pixel's ray lands in the photo
//!    (a pincushion lens's corners would otherwise be empty, and an empty pixel would teach
//!    the model black). The camera's principal point moves with the crop. The ideal image is
//!    of the view camera's projection ([`ViewSource::camera`]): the pinhole, whose image a
//!    fisheye photo overfills (it sees wider than any pinhole of its size and focal length, so
//!    its periphery is dropped and the centre keeps its full resolution; [`field_of_view`]
//!    says how much is kept), or, for a fisheye lens under `gs-pack convert --keep-fisheye`,
//!    the ideal equidistant fisheye ([`Projection::Fisheye`], the lens's coefficients
//!    removed), which keeps the periphery up to [`FISHEYE_MAX_THETA`] off the axis. A lens
//!    that is the identity for the projection ([`Distortion::is_identity_for`]: a pinhole
//!    photo, or an equidistant photo with zero coefficients kept as a fisheye) is copied bit
//!    for bit.
//! 4. [`resize_area`] downscales with an exact area (box) filter to [`target_size`].
//!
//! Invariants:
//! - [`RgbImage::pixels`] always holds exactly `width × height × 3` bytes, row-major, top row
//!   first, and both sides are ≥ 1.
//! - Pixel `(i, j)` has its centre at `(i + 0.5, j + 0.5)` (see [`crate::scene::camera`]); both
//!   resampling steps use that convention, so an identity undistortion or a factor-1 resize
//!   reproduces the input exactly.
//! - Nothing is allocated from an untrusted header alone: decoding runs under the `image`
//!   crate's default limits (at most 512 MiB per decode), and every later buffer is sized by an
//!   image that was actually decoded.
//! - [`prepare_view`] holds at most two full-size images at once (decoded + undistorted); each
//!   intermediate is dropped as soon as the next one exists. [`prepare_view_pixels`] of an
//!   image with alpha also holds its alpha plane (replicated to three channels, so the same
//!   resampling code runs on it), at most four full-size planes.
//! - Resampling (undistortion, downscaling) of an image with alpha runs on premultiplied
//!   colour, so the colour a renderer left under transparent pixels does not bleed into edges;
//!   the result is un-premultiplied. Without resampling the stored colours are kept exactly.
//!
//! EXIF orientation (JPEG and PNG `Orientation` tags, read by the `image` crate's decoder) is
//! applied at decode, so a portrait phone photo comes out upright, and the camera is checked
//! against the oriented size. One exception keeps datasets whose pose tool ignored the tag
//! working (COLMAP reads pixels in stored order): when the orientation swaps width and height,
//! the oriented size does not match the camera but the stored size does, the stored order is
//! kept ([`prepare_view`]); a size-preserving orientation (180°, mirror) is always applied.
//!
//! # Loss masks
//! A view whose [`ViewSource::mask_path`] is set gets a loss mask ([`prepare_mask`]): any
//! image file whose pixels are 0 (black) where the image must not teach the model (people,
//! sky, the capture rig: COLMAP's and nerfstudio's convention) and nonzero elsewhere. It must
//! have its image's size, in stored pixel order (then it follows the image's EXIF
//! orientation, as COLMAP's masks do) or upright, or be larger with its image a resized copy
//! of it ([`is_resized_copy`]: the original photo's mask of an `images_4` copy), and is then
//! shrunk to the image as coverage first. It goes through the same undistortion and
//! downscaling as the image, as coverage; a packed pixel is used only when everything it
//! covers was used. The packed mask is 0 or 255 per pixel, after the colour bytes
//! ([`crate::shard::VIEW_FLAG_MASK`]); a mask that excludes nothing is dropped.
//!
//! # Inverse-depth maps
//! A view whose [`ViewSource::depth`] is set gets an inverse-depth plane after the mask
//! ([`crate::shard::VIEW_FLAG_DEPTH`]), placed with the same orientation rule and the same
//! geometry (undistortion window, downscale) but resampling values linearly; see
//! `crate::import::depth`, which owns it.

use std::path::Path;

use rayon::prelude::*;

use image::metadata::Orientation;
use image::ImageDecoder;

use super::ImportError;
use crate::dataset::{Distortion, ViewSource};
use crate::scene::camera::{Camera, Intrinsics, Projection, FISHEYE_MAX_THETA};
use crate::shard::{DepthScale, PixelLayout};

use crate::resample::{area_row_u8, premultiply, unpremultiply, AxisTaps, MASK_USED_MIN};
pub use crate::resample::{target_size, Resize};

/// An RGB8 image: `pixels.len() == width × height × 3`, row-major, top row first.
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Pixels are megabytes: never dump them into a test failure or a log line.
        f.debug_struct("RgbImage")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("bytes", &self.pixels.len())
            .finish()
    }
}

impl RgbImage {
    /// A black image. Panics if a side is zero (callers size images from decoded files).
    pub fn new(width: u32, height: u32) -> RgbImage {
        assert!(width > 0 && height > 0, "empty image {width}x{height}");
        RgbImage {
            width,
            height,
            pixels: vec![0; width as usize * height as usize * 3],
        }
    }

    /// The RGB triple of pixel `(x, y)`.
    pub fn get(&self, x: u32, y: u32) -> [u8; 3] {
        let o = (y as usize * self.width as usize + x as usize) * 3;
        [self.pixels[o], self.pixels[o + 1], self.pixels[o + 2]]
    }

    /// Bytes per row.
    fn stride(&self) -> usize {
        self.width as usize * 3
    }
}

/// Maps a decode/open failure of `path` to an [`ImportError`] that says what to do.
fn image_error(path: &Path, e: image::ImageError) -> ImportError {
    match e {
        image::ImageError::IoError(io) => ImportError::io(path, io),
        image::ImageError::Limits(l) => ImportError::invalid(
            path,
            format!(
                "image is too large to decode ({l}); the decoder refuses more than 512 MiB per image. \
                 Downscale the source images, or check the file is not corrupt"
            ),
        ),
        image::ImageError::Unsupported(u) => ImportError::invalid(
            path,
            format!("unsupported image ({u}); only JPEG and PNG are supported, convert the file to one of them"),
        ),
        other => ImportError::invalid(
            path,
            format!(
                "cannot decode image ({other}); the file is truncated, corrupt or not a JPEG/PNG. \
                 Re-export it, or delete it so the frame is skipped"
            ),
        ),
    }
}

fn open_reader(
    path: &Path,
) -> Result<image::ImageReader<std::io::BufReader<std::fs::File>>, ImportError> {
    // The format from the extension at first; sniffing the magic bytes then lets a PNG named
    // .jpg (common in scraped datasets) decode, and falls back to the extension.
    let file = crate::fsutil::open_file(path).map_err(|e| ImportError::io(path, e))?;
    let mut reader = image::ImageReader::new(std::io::BufReader::new(file));
    if let Ok(format) = image::ImageFormat::from_path(path) {
        reader.set_format(format);
    }
    reader
        .with_guessed_format()
        .map_err(|e| ImportError::io(path, e))
}

/// Largest image file [`load_rgb8`] reads into memory. The decoder refuses more than 512 MiB of
/// decoded pixels anyway, and no JPEG/PNG is larger compressed than decoded by more than its
/// headers, so a bigger file is not an image we could use.
const MAX_FILE_BYTES: u64 = 512 << 20;

/// The `image` crate's default decode limit; a JPEG decoding to more is left to `image`, which
/// refuses it with its own message.
const MAX_DECODED_BYTES: u64 = 512 << 20;

/// Whether `bytes` (a JPEG) stops before its end-of-image marker. The JPEG decoder fills a
/// truncated scan with grey and reports success, which would pack a half-grey photo. Entropy-coded
/// data stuffs every 0xFF as `FF 00`, so `FF D9` after the first start-of-scan can only be the
/// EOI marker (data some cameras append after EOI, e.g. motion-photo videos, comes later still).
fn jpeg_is_truncated(bytes: &[u8]) -> bool {
    // Walk the marker segments before the first scan: FF xx, then a big-endian length that
    // counts itself. Thumbnails inside APP1 carry their own EOI, so they must be skipped whole.
    let mut i = 2; // after SOI (FF D8)
    loop {
        while i < bytes.len() && bytes[i] == 0xFF && bytes.get(i + 1) == Some(&0xFF) {
            i += 1; // fill bytes
        }
        if i + 4 > bytes.len() || bytes[i] != 0xFF {
            return true; // ended (or lost sync) before any scan
        }
        let marker = bytes[i + 1];
        let len = u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]) as usize;
        i += 2 + len;
        if marker == 0xDA {
            break;
        }
    }
    !bytes
        .get(i..)
        .is_some_and(|rest| rest.windows(2).any(|w| w == [0xFF, 0xD9]))
}

/// Decodes a JPEG strictly: damage in the entropy-coded scan data (a bad Huffman code, an
/// unexpected marker, data running out of the file) is an error, where the `image` crate's
/// lenient decoder would fill the rest of the image with grey and report success. Output colour
/// space and limits are the ones `image` uses, so a clean file decodes to the same pixels.
/// Known limit: scan data cut short and followed directly by a valid end-of-image marker is
/// zero-filled by the decoder without any error, so it is not detected here.
fn decode_jpeg_strict(bytes: &[u8]) -> Result<image::DynamicImage, String> {
    use zune_jpeg::zune_core::bytestream::ZCursor;
    use zune_jpeg::zune_core::colorspace::ColorSpace;
    use zune_jpeg::zune_core::options::DecoderOptions;
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(usize::MAX)
        .set_max_height(usize::MAX);
    let mut headers = zune_jpeg::JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    headers.decode_headers().map_err(|e| e.to_string())?;
    let out = match headers.input_colorspace() {
        Some(c @ (ColorSpace::RGB | ColorSpace::RGBA | ColorSpace::Luma | ColorSpace::LumaA)) => c,
        _ => ColorSpace::RGB,
    };
    let mut decoder = zune_jpeg::JpegDecoder::new_with_options(
        ZCursor::new(bytes),
        options.jpeg_set_out_colorspace(out),
    );
    let pixels = decoder.decode().map_err(|e| e.to_string())?;
    let (w, h) = decoder
        .dimensions()
        .ok_or_else(|| "no dimensions after decoding".to_owned())?;
    let (w, h) = (w as u32, h as u32);
    let short = || format!("decoder returned a buffer of the wrong size for {w}x{h}");
    Ok(match out {
        ColorSpace::Luma => image::DynamicImage::ImageLuma8(
            image::GrayImage::from_raw(w, h, pixels).ok_or_else(short)?,
        ),
        ColorSpace::LumaA => image::DynamicImage::ImageLumaA8(
            image::GrayAlphaImage::from_raw(w, h, pixels).ok_or_else(short)?,
        ),
        ColorSpace::RGBA => image::DynamicImage::ImageRgba8(
            image::RgbaImage::from_raw(w, h, pixels).ok_or_else(short)?,
        ),
        _ => image::DynamicImage::ImageRgb8(
            image::RgbImage::from_raw(w, h, pixels).ok_or_else(short)?,
        ),
    })
}

/// Decodes a JPEG or PNG file into RGB8 in stored pixel order, with the EXIF orientation that
/// [`orient`] would apply. Truncated files and JPEGs with corrupt scan data are refused.
pub fn load_rgb8_stored(path: &Path) -> Result<(RgbImage, Orientation), ImportError> {
    let (img, orientation, _) = load_rgb8_stored_opts(path, false)?;
    Ok((img, orientation))
}

/// [`load_rgb8_stored`], and with `lenient` a JPEG whose scan data is corrupt is accepted as
/// the lenient decoder fills it (damaged blocks grey); the third value is then the warning to
/// show, naming the file.
pub fn load_rgb8_stored_opts(
    path: &Path,
    lenient: bool,
) -> Result<(RgbImage, Orientation, Option<String>), ImportError> {
    let (rgb, _alpha, orientation, warning) = load_stored_opts(path, lenient)?;
    Ok((rgb, orientation, warning))
}

/// [`load_rgb8_stored_opts`], and the alpha plane (replicated to three channels) when the file
/// has an alpha channel that is not 255 everywhere.
#[allow(clippy::type_complexity)]
pub fn load_stored_opts(
    path: &Path,
    lenient: bool,
) -> Result<(RgbImage, Option<RgbImage>, Orientation, Option<String>), ImportError> {
    let len = std::fs::metadata(path)
        .map_err(|e| ImportError::io(path, e))?
        .len();
    if len > MAX_FILE_BYTES {
        return Err(ImportError::invalid(
            path,
            format!("file is {len} bytes, more than the {MAX_FILE_BYTES}-byte limit for one image; is it really a JPEG/PNG?"),
        ));
    }
    let bytes = crate::fsutil::read_file(path).map_err(|e| ImportError::io(path, e))?;
    // Sniff the format from the magic bytes (a PNG named .jpg is common in scraped datasets);
    // fall back to the extension.
    let guessed = image::guess_format(&bytes)
        .ok()
        .or_else(|| image::ImageFormat::from_path(path).ok());
    let Some(format) = guessed else {
        return Err(ImportError::invalid(
            path,
            "not a JPEG or PNG file (unrecognised content and extension); convert it or delete it",
        ));
    };
    if format == image::ImageFormat::Jpeg
        && bytes.starts_with(&[0xFF, 0xD8])
        && jpeg_is_truncated(&bytes)
    {
        return Err(ImportError::invalid(
            path,
            "JPEG is truncated (no end-of-image marker after its scan data); the copy or download \
             was probably interrupted. Copy the file again, or delete it so the frame is skipped",
        ));
    }
    let mut reader = image::ImageReader::new(std::io::Cursor::new(&bytes[..]));
    reader.set_format(format);
    let mut decoder = reader.into_decoder().map_err(|e| image_error(path, e))?;
    // A missing or unreadable EXIF block is "no transform", as every viewer treats it.
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let mut warning = None;
    let strict = (format == image::ImageFormat::Jpeg && decoder.total_bytes() <= MAX_DECODED_BYTES)
        .then(|| decode_jpeg_strict(&bytes));
    let decoded = match strict {
        Some(Ok(img)) => img,
        Some(Err(why)) => {
            // The lenient decoder tells "damaged scan data it can fill" from "not decodable".
            let filled =
                image::DynamicImage::from_decoder(decoder).map_err(|e| image_error(path, e))?;
            if !lenient {
                return Err(ImportError::invalid(
                    path,
                    format!(
                        "JPEG scan data is corrupt ({why}); the decoder would fill the damaged \
                         part with grey. Copy or re-export the file, delete it so the frame is \
                         skipped, or pass --lenient to pack it as decoded"
                    ),
                ));
            }
            warning = Some(format!(
                "{}: JPEG scan data is corrupt ({why}); packed as decoded (damaged part grey) \
                 because of --lenient",
                path.display()
            ));
            filled
        }
        None => image::DynamicImage::from_decoder(decoder).map_err(|e| image_error(path, e))?,
    };
    // `into_rgb8` moves the buffer when the file already is RGB8 (every JPEG the fox and
    // COLMAP datasets hold), and converts otherwise.
    let alpha = decoded.color().has_alpha().then(|| {
        let a = decoded.to_luma_alpha8();
        a.pixels().map(|p| p.0[1]).collect::<Vec<u8>>()
    });
    let rgb = decoded.into_rgb8();
    let (width, height) = rgb.dimensions();
    if width == 0 || height == 0 {
        return Err(ImportError::invalid(
            path,
            format!("image is empty ({width}x{height}); re-export it or delete it"),
        ));
    }
    let alpha = alpha
        .filter(|a| a.iter().any(|&v| v != 255))
        .map(|a| RgbImage {
            width,
            height,
            pixels: a.iter().flat_map(|&v| [v; 3]).collect(),
        });
    Ok((
        RgbImage {
            width,
            height,
            pixels: rgb.into_raw(),
        },
        alpha,
        orientation,
        warning,
    ))
}

/// Decodes a JPEG or PNG file into RGB8 with its EXIF orientation applied (see the module doc
/// for colour conversions; alpha is dropped). Truncated files are refused.
pub fn load_rgb8(path: &Path) -> Result<RgbImage, ImportError> {
    let (img, orientation) = load_rgb8_stored(path)?;
    Ok(orient(img, orientation))
}

/// Whether `o` exchanges width and height.
pub(super) fn swaps_sides(o: Orientation) -> bool {
    matches!(
        o,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    )
}

/// Applies an EXIF orientation to the pixels.
pub fn orient(img: RgbImage, o: Orientation) -> RgbImage {
    if o == Orientation::NoTransforms {
        return img;
    }
    let buf = image::RgbImage::from_raw(img.width, img.height, img.pixels)
        .expect("RgbImage holds width x height x 3 bytes");
    let mut d = image::DynamicImage::ImageRgb8(buf);
    d.apply_orientation(o);
    let rgb = d.into_rgb8();
    let (width, height) = rgb.dimensions();
    RgbImage {
        width,
        height,
        pixels: rgb.into_raw(),
    }
}

/// Width and height of an image file as [`load_rgb8`] returns it (EXIF orientation applied),
/// reading only its header.
pub fn image_dimensions(path: &Path) -> Result<(u32, u32), ImportError> {
    header_sizes(path).map(|(oriented, _)| oriented)
}

/// Width and height of an image.
type Size = (u32, u32);

/// An image file's EXIF orientation and stored size, from its header alone.
fn header(path: &Path) -> Result<(Orientation, Size), ImportError> {
    let mut decoder = open_reader(path)?
        .into_decoder()
        .map_err(|e| image_error(path, e))?;
    let o = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    Ok((o, decoder.dimensions()))
}

/// An image file's (EXIF-oriented, stored) sizes, from its header alone.
fn header_sizes(path: &Path) -> Result<(Size, Size), ImportError> {
    let (o, (w, h)) = header(path)?;
    Ok((if swaps_sides(o) { (h, w) } else { (w, h) }, (w, h)))
}

/// An image file's stored size, and whether a pack applies its EXIF orientation to a camera
/// of that size (any orientation but the identity, except a rotation that swaps the sides:
/// [`prepare_view`] keeps the stored order then), from its header alone.
pub(crate) fn stored_size_and_orientation(path: &Path) -> Result<(Size, bool), ImportError> {
    let (o, size) = header(path)?;
    Ok((size, o != Orientation::NoTransforms && !swaps_sides(o)))
}

/// A photo's stored size from its header, `None` when the file is absent, for a format whose
/// cameras are described by the photo's own size (Bundler's, RealityCapture's) and that does
/// not say whether the tool that made it applied the photo's EXIF orientation: a photo whose
/// orientation a pack applies without swapping its sides (a half turn, a mirror) is refused,
/// naming `what` (the camera) and `files` (what does not say: "a bundle file").
pub(crate) fn upright_photo_size(
    path: &Path,
    what: &str,
    files: &str,
) -> Result<Option<Size>, ImportError> {
    if !super::file_present(path)? {
        return Ok(None);
    }
    let why = format!("; {files} does not say whether the tool that made it did");
    unturned_size(path, what, &why).map(Some)
}

/// The stored size of the photo at `path` (of `view`), refused when its EXIF orientation is
/// one a pack applies without swapping the sides, which the reconstruction did not (`why`
/// says so, after "which a pack applies").
fn unturned_size(path: &Path, view: &str, why: &str) -> Result<Size, ImportError> {
    let (size, applied) = stored_size_and_orientation(path)?;
    if applied {
        return Err(ImportError::invalid(
            path,
            format!(
                "{view}: the photo's EXIF orientation turns or mirrors it without swapping its \
                 sides, which a pack applies{why}: save the photos without the orientation tag \
                 (for example `exiftool -Orientation=1 -n FILE`) and reconstruct again"
            ),
        ));
    }
    Ok(size)
}

/// The stored size of the photo at `path` of `view` (say `"shot \"a.jpg\""`), whose camera
/// `tool` (an SfM program that reads the stored pixels and ignores EXIF orientation: OpenSfM,
/// AliceVision) knew at `camera_size`: refused when the photo's EXIF orientation is one a pack
/// applies without swapping the sides (a half turn, a mirror: the pixels would no longer be
/// those the tool saw), or when the photo has another shape than the camera (the same shape
/// at another size is a resized copy, either way). Reads only the file's header.
pub(crate) fn stored_photo_size(
    path: &Path,
    view: &str,
    camera_size: Size,
    tool: &str,
) -> Result<Size, ImportError> {
    let why = format!(" and {tool} does not (it reads the stored pixels)");
    let stored = unturned_size(path, view, &why)?;
    if !is_resized_copy(stored, camera_size) && !is_resized_copy(camera_size, stored) {
        return Err(ImportError::invalid(
            path,
            format!(
                "{view}: the image is {}x{} but its camera is {}x{}, another shape; the \
                 reconstruction was made from other images: pass --images DIR to name them",
                stored.0, stored.1, camera_size.0, camera_size.1
            ),
        ));
    }
    Ok(stored)
}

/// The camera of the image file at `path` when that file is a resized copy of the image
/// `camera` was calibrated for (`gs-pack convert --images images_4`: Mip-NeRF 360 ships its
/// photos downscaled by 2, 4 and 8 beside the originals). Reads only the file's header.
///
/// The file is a copy when [`is_resized_copy`] of the camera's size. Then every intrinsic
/// scales by its axis's size ratio ([`Camera::resized`]: with pixel centres at +0.5 the image
/// corners stay at 0 and W, so there is no half-pixel shift), and distortion coefficients,
/// which act on normalised coordinates, are unchanged. The size compared is the EXIF-oriented
/// one, else the stored one (the rule [`prepare_view`] applies to a camera of the stored
/// size); the same size gives the camera back unchanged. Anything else is an error naming the
/// view, both sizes and what to check.
pub fn camera_for_file(camera: &Camera, path: &Path, view: &str) -> Result<Camera, ImportError> {
    let (oriented, stored) = header_sizes(path)?;
    let full = (camera.width, camera.height);
    match [oriented, stored]
        .into_iter()
        .find(|&s| is_resized_copy(s, full))
    {
        Some((w, h)) => Ok(camera.resized(w, h)),
        None => Err(ImportError::invalid(
            path,
            format!(
                "view '{view}': the image is {}x{} but its camera was calibrated at {}x{}, and \
                 it is not a resized copy of such an image (a copy is no larger and keeps the \
                 aspect ratio within a pixel); point --images at a copy of the images the model \
                 was made from",
                oriented.0, oriented.1, camera.width, camera.height
            ),
        )),
    }
}

/// Whether an image of size `small` can be a resized copy of one of size `big`: no larger, and
/// one scale factor `s` puts each side within the pixel a resizing tool rounds it to
/// (`|w − W·s| < 1` and `|h − H·s| < 1` for some `s`, i.e. `|w·H − h·W| < W + H`).
pub fn is_resized_copy(small: (u32, u32), big: (u32, u32)) -> bool {
    let (w, h) = (small.0 as u64, small.1 as u64);
    let (bw, bh) = (big.0 as u64, big.1 as u64);
    w <= bw && h <= bh && (w * bh).abs_diff(h * bw) < bw + bh
}

/// Where a view's ideal image samples its photo: the ideal camera has the photo's size and
/// intrinsics and the view's [`Projection`]; pixel centre `(i + 0.5, j + 0.5)` has the
/// normalised point `((u − cx)/fx, (v − cy)/fy)`, the ray that the pinhole (a point `(X/Z, Y/Z)`,
/// [`Distortion::distort`]) or the equidistant fisheye (`θ · direction`,
/// [`Distortion::distort_equidistant`]) gives it, which the lens moves to a point of the photo.
pub(super) struct LensMap<'a> {
    intrinsics: Intrinsics,
    distortion: &'a Distortion,
    projection: Projection,
    /// Whether the lens maps every ray to itself ([`Distortion::is_identity_for`]).
    identity: bool,
    /// The photo's size.
    size: (f64, f64),
    /// Squared largest normalised radius with content: the lens's fold-over ([`valid_radius`],
    /// [`valid_angle`]), and for a fisheye image [`FISHEYE_MAX_THETA`] (the renderers draw
    /// nothing past it).
    r2_valid: f64,
}

impl<'a> LensMap<'a> {
    pub(super) fn new(
        width: u32,
        height: u32,
        intrinsics: &Intrinsics,
        distortion: &'a Distortion,
        projection: Projection,
    ) -> Self {
        let Intrinsics { fx, fy, cx, cy } = *intrinsics;
        let (w, h) = (width as f64, height as f64);
        // Largest normalised radius any pixel centre has (a corner of the image).
        let r_corner = [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)]
            .iter()
            .map(|&(u, v)| ((u - cx) / fx).hypot((v - cy) / fy))
            .fold(0.0, f64::max);
        let r_valid = match projection {
            Projection::Pinhole => valid_radius(distortion, r_corner),
            Projection::Fisheye => valid_angle(distortion, r_corner).min(FISHEYE_MAX_THETA),
        };
        LensMap {
            intrinsics: *intrinsics,
            distortion,
            projection,
            identity: distortion.is_identity_for(projection),
            size: (w, h),
            r2_valid: r_valid * r_valid,
        }
    }

    /// Whether the lens maps every ray of the ideal image to itself: a pixel with content is
    /// the photo's own pixel, to be copied rather than resampled.
    pub(super) fn is_identity(&self) -> bool {
        self.identity
    }

    /// The photo point (pixel coordinates) ideal pixel `(i, j)` samples; `None` when its ray
    /// lands outside the photo `[0, W] × [0, H]`, beyond the lens model's fold-over radius
    /// (where a polynomial model maps several rays onto one photo pixel and the content would
    /// be a mirrored copy), or, in a fisheye image, past [`FISHEYE_MAX_THETA`] or where the
    /// lens sees no ray: the pixel has no content.
    #[inline]
    pub(super) fn source(&self, i: u32, j: u32) -> Option<(f64, f64)> {
        let Intrinsics { fx, fy, cx, cy } = self.intrinsics;
        let x = (i as f64 + 0.5 - cx) / fx;
        let y = (j as f64 + 0.5 - cy) / fy;
        if x * x + y * y > self.r2_valid {
            return None;
        }
        let (xd, yd) = match self.projection {
            Projection::Pinhole => self.distortion.distort(x, y),
            Projection::Fisheye => self.distortion.distort_equidistant(x, y)?,
        };
        let u = fx * xd + cx;
        let v = fy * yd + cy;
        // `!(a <= b)` also rejects NaN (a ray where the rational model's denominator is 0).
        if !(u >= 0.0 && u <= self.size.0 && v >= 0.0 && v <= self.size.1) {
            return None;
        }
        Some((u, v))
    }
}

/// A window `[x0, x1) × [y0, y1)` of an image's pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PixelRect {
    pub x0: u32,
    pub y0: u32,
    pub x1: u32,
    pub y1: u32,
}

impl PixelRect {
    /// The whole `width × height` image.
    pub fn full(width: u32, height: u32) -> PixelRect {
        PixelRect {
            x0: 0,
            y0: 0,
            x1: width,
            y1: height,
        }
    }

    /// 0 for an empty window (whose sides may have crossed).
    pub fn width(&self) -> u32 {
        self.x1.saturating_sub(self.x0)
    }

    /// 0 for an empty window (whose sides may have crossed).
    pub fn height(&self) -> u32 {
        self.y1.saturating_sub(self.y0)
    }

    pub fn is_empty(&self) -> bool {
        self.x0 >= self.x1 || self.y0 >= self.y1
    }

    /// `camera` (of the whole image) for this window of it.
    pub fn camera(&self, camera: &Camera) -> Camera {
        camera.cropped(self.x0, self.y0, self.width(), self.height())
    }
}

/// The window of a view's ideal image (the photo's size and intrinsics, of `projection`) that
/// a pack keeps: the whole image when every pixel's ray lands in the photo, otherwise the image
/// with its edges cropped until none of the window's border pixels is empty (a pixel whose ray
/// lands outside the photo or past the lens model's fold-over radius, [`valid_radius`]; a lens
/// that pushes the corners' rays out of the photo, pincushion, leaves them empty; in a fisheye
/// image also a pixel past [`FISHEYE_MAX_THETA`]).
/// Each side moves in by a pixel while its border row or column has an empty pixel, all four
/// at once, so the window stays around the principal point; the window is never larger than
/// the photo, so the view costs no more memory than it would uncropped. COLMAP's
/// `image_undistorter` (the tool 3DGS datasets are made with) likewise crops its output
/// until no pixel is blank, at the same focal length. The region a lens covers is
/// star-shaped around the principal point in practice, so a window with full borders is full
/// inside; [`undistort_rect`] leaves any exception black. Empty when no pixel has content.
pub fn covered_rect(
    width: u32,
    height: u32,
    intrinsics: &Intrinsics,
    distortion: &Distortion,
    projection: Projection,
) -> PixelRect {
    let mut r = PixelRect::full(width, height);
    if projection.is_pinhole() && distortion.is_none() {
        return r;
    }
    let map = LensMap::new(width, height, intrinsics, distortion, projection);
    while !r.is_empty() {
        let row = |j: u32| (r.x0..r.x1).all(|i| map.source(i, j).is_some());
        let col = |i: u32| (r.y0..r.y1).all(|j| map.source(i, j).is_some());
        let (top, bottom, left, right) = (row(r.y0), row(r.y1 - 1), col(r.x0), col(r.x1 - 1));
        if top && bottom && left && right {
            break;
        }
        r.y0 += u32::from(!top);
        r.y1 -= u32::from(!bottom);
        r.x0 += u32::from(!left);
        r.x1 -= u32::from(!right);
    }
    r
}

/// Resamples `src` (a photo through a lens with `distortion`) to the ideal pinhole image with
/// the same size and the same `intrinsics` ([`undistort_rect`] of the whole image).
pub fn undistort(src: &RgbImage, intrinsics: &Intrinsics, distortion: &Distortion) -> RgbImage {
    undistort_rect(
        src,
        intrinsics,
        distortion,
        Projection::Pinhole,
        PixelRect::full(src.width, src.height),
    )
}

/// The window `rect` of the ideal image of `projection` of `src` (a photo through a lens with
/// `distortion`) with the photo's size and `intrinsics`: output pixel `(i, j)` is ideal pixel
/// `(rect.x0 + i, rect.y0 + j)`.
///
/// Each ideal pixel centre's ray is moved by the lens (`LensMap`: [`Distortion::distort`]
/// for a pinhole image, [`Distortion::distort_equidistant`] for a fisheye one) to a photo
/// point, which is sampled bilinearly (source pixel centres at `+0.5`; within the image's
/// outer half-pixel the edge pixel is replicated). A pixel whose ray lands outside the photo
/// or beyond the lens model's fold-over radius ([`valid_radius`]), or in a fisheye image past
/// [`FISHEYE_MAX_THETA`], is black; [`covered_rect`] gives the window without such pixels.
/// When the lens is the identity for `projection` ([`Distortion::is_identity_for`]: no
/// distortion, or a fisheye lens with zero coefficients kept as a fisheye image) every pixel
/// with content is the photo's own pixel, copied bit for bit.
pub fn undistort_rect(
    src: &RgbImage,
    intrinsics: &Intrinsics,
    distortion: &Distortion,
    projection: Projection,
    rect: PixelRect,
) -> RgbImage {
    let mut out = RgbImage::new(rect.width(), rect.height());
    let full = rect == PixelRect::full(src.width, src.height);
    if projection.is_pinhole() && distortion.is_none() && full {
        out.pixels.copy_from_slice(&src.pixels);
        return out;
    }
    let map = LensMap::new(src.width, src.height, intrinsics, distortion, projection);
    let stride = out.stride();
    out.pixels
        .par_chunks_mut(stride)
        .enumerate()
        .for_each(|(j, row)| {
            for (i, px) in row.chunks_exact_mut(3).enumerate() {
                let (x, y) = (rect.x0 + i as u32, rect.y0 + j as u32);
                if let Some((u, v)) = map.source(x, y) {
                    if map.is_identity() {
                        px.copy_from_slice(&src.get(x, y));
                    } else {
                        px.copy_from_slice(&sample_bilinear(src, u, v));
                    }
                } // else: no content, black
            }
        });
    out
}

/// The radius (in normalised image coordinates, searched up to `r_max`) up to which the lens's
/// radial mapping `r ↦ r·radial(r²)` keeps increasing. Past its first maximum a polynomial
/// model folds back (strong barrel `k1 < 0`: at `r = 1/√(−3·k1)` for k1 alone), so rays beyond
/// it have no meaningful source pixel. Sampled in 4096 steps: each step is at most
/// `r_max/4096` (a quarter of a pixel for an image with `r_max·f` ≈ 1000 px), finer than the
/// pixel grid that uses it. Returns `f64::INFINITY` when the mapping is monotonic up to `r_max`.
pub fn valid_radius(distortion: &Distortion, r_max: f64) -> f64 {
    // The radial part alone: tangential terms are tiny next to it and not radially symmetric.
    let radial_only = distortion.radial_only();
    const STEPS: u32 = 4096;
    let step = r_max / STEPS as f64;
    let mut prev = 0.0;
    for n in 1..=STEPS {
        let r = n as f64 * step;
        let rd = radial_only.distort(r, 0.0).0;
        // Stops at a NaN too (the rational model's denominator reaching 0): not `Greater`.
        if rd.partial_cmp(&prev) != Some(std::cmp::Ordering::Greater) {
            return (n - 1) as f64 * step;
        }
        prev = rd;
    }
    f64::INFINITY
}

/// The angle from the optical axis (radians, searched up to `theta_max`) up to which the lens
/// maps rays to increasing radii ([`Distortion::ray_radius`]): [`valid_radius`] for an ideal
/// fisheye image, whose normalised radius is the angle itself. A fisheye lens is defined past
/// 90° and folds back only where its polynomial does; a pinhole-type lens sees no ray from 90°
/// on, so its angle stops there. Sampled in 4096 steps, like [`valid_radius`]; returns
/// `f64::INFINITY` when the mapping is monotonic up to `theta_max`.
pub fn valid_angle(distortion: &Distortion, theta_max: f64) -> f64 {
    const STEPS: u32 = 4096;
    let step = theta_max / STEPS as f64;
    let mut prev = 0.0;
    for n in 1..=STEPS {
        let t = n as f64 * step;
        let rd = distortion.ray_radius(t).unwrap_or(f64::NAN);
        // Stops at a NaN too (past 90° for a pinhole-type lens): not `Greater`.
        if rd.partial_cmp(&prev) != Some(std::cmp::Ordering::Greater) {
            return (n - 1) as f64 * step;
        }
        prev = rd;
    }
    f64::INFINITY
}

/// Fields of view in degrees (horizontal, vertical: along the row and the column through the
/// principal point) of a photo through its lens and of the ideal image a pack keeps of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldOfView {
    /// The photo's. `None` on an axis whose image edge lies past the lens model's fold-over,
    /// where the model does not say which ray the edge sees.
    pub photo: [Option<f64>; 2],
    /// The ideal image's (the window of the photo's size, intrinsics and projection that is
    /// kept).
    pub kept: [f64; 2],
}

/// The fields of view of a photo of size `width × height` with `intrinsics` and lens
/// `distortion`, and of the window `kept` of its ideal image of `projection` (see
/// [`FieldOfView`]; [`covered_rect`] gives the window a pack keeps). The photo's edge angles
/// invert the lens's radial mapping numerically (a 4096-step scan for its first monotonic
/// stretch, then bisection to 1e-12 rad); a pinhole window's are `atan` of its edges'
/// normalised distances from the principal point, a fisheye window's those distances
/// themselves (the equidistant projection's radius is the angle).
pub fn field_of_view(
    width: u32,
    height: u32,
    intrinsics: &Intrinsics,
    distortion: &Distortion,
    projection: Projection,
    kept: PixelRect,
) -> FieldOfView {
    let Intrinsics { fx, fy, cx, cy } = *intrinsics;
    let (w, h) = (width as f64, height as f64);
    // Normalised distances of the four edges from the principal point: left, right, top,
    // bottom (a principal point outside the image gives a negative distance on one side).
    let edges = [cx / fx, (w - cx) / fx, cy / fy, (h - cy) / fy];
    let window = [
        (cx - kept.x0 as f64) / fx,
        (kept.x1 as f64 - cx) / fx,
        (cy - kept.y0 as f64) / fy,
        (kept.y1 as f64 - cy) / fy,
    ];
    // A fisheye model is defined past 90° (θ is its variable); a pinhole-type model only in
    // front of the camera.
    let theta_max = match distortion {
        Distortion::Fisheye { .. } => std::f64::consts::PI,
        Distortion::RadialTangential { .. } | Distortion::Brown { .. } => {
            std::f64::consts::FRAC_PI_2
        }
    };
    let radius_at = |t: f64| distortion.ray_radius(t).unwrap_or(f64::NAN);
    // The angle of the ray that lands at normalised distance `e` from the principal point.
    let photo_angle = |e: f64| -> Option<f64> {
        const STEPS: u32 = 4096;
        let step = theta_max / STEPS as f64;
        let target = e.abs();
        let mut prev = 0.0;
        for n in 1..STEPS {
            let t = n as f64 * step;
            let r = radius_at(t);
            // Stops at a fold-over, and at a NaN (the rational model's denominator at 0).
            if r.partial_cmp(&prev) != Some(std::cmp::Ordering::Greater) {
                return None;
            }
            if r >= target {
                let (mut lo, mut hi) = (t - step, t);
                while hi - lo > 1e-12 {
                    let mid = 0.5 * (lo + hi);
                    if radius_at(mid) < target {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                return Some(e.signum() * 0.5 * (lo + hi));
            }
            prev = r;
        }
        None
    };
    let deg = f64::to_degrees;
    let photo = [
        photo_angle(edges[0]).zip(photo_angle(edges[1])),
        photo_angle(edges[2]).zip(photo_angle(edges[3])),
    ]
    .map(|a| a.map(|(p, q)| deg(p + q)));
    let angle = |e: f64| match projection {
        Projection::Pinhole => e.atan(),
        Projection::Fisheye => e,
    };
    let kept = [
        deg(angle(window[0]) + angle(window[1])),
        deg(angle(window[2]) + angle(window[3])),
    ];
    FieldOfView { photo, kept }
}

/// Bilinear sample at continuous pixel coordinates `(u, v)` (centres at +0.5), clamping the
/// neighbour indices to the image. The caller guarantees `0 ≤ u ≤ W` and `0 ≤ v ≤ H`.
#[inline]
fn sample_bilinear(src: &RgbImage, u: f64, v: f64) -> [u8; 3] {
    // sx ≥ −0.5, so `(sx + 1) as i64 − 1` is floor(sx) without a libm call (truncation of a
    // positive number is its floor).
    let sx = u - 0.5;
    let sy = v - 0.5;
    let x0i = (sx + 1.0) as i64 - 1;
    let y0i = (sy + 1.0) as i64 - 1;
    let tx = (sx - x0i as f64) as f32;
    let ty = (sy - y0i as f64) as f32;
    let max_x = src.width as i64 - 1;
    let max_y = src.height as i64 - 1;
    let x0 = x0i.clamp(0, max_x) as usize * 3;
    let x1 = (x0i + 1).clamp(0, max_x) as usize * 3;
    let stride = src.stride();
    let r0 = y0i.clamp(0, max_y) as usize * stride;
    let r1 = (y0i + 1).clamp(0, max_y) as usize * stride;
    let p = &src.pixels;
    let (a, b) = (&p[r0 + x0..r0 + x0 + 3], &p[r0 + x1..r0 + x1 + 3]);
    let (d, e) = (&p[r1 + x0..r1 + x0 + 3], &p[r1 + x1..r1 + x1 + 3]);
    let mut rgb = [0u8; 3];
    for c in 0..3 {
        let top = a[c] as f32 + (b[c] as f32 - a[c] as f32) * tx;
        let bottom = d[c] as f32 + (e[c] as f32 - d[c] as f32) * tx;
        // A convex combination of bytes is in [0, 255]; +0.5 then truncation rounds to
        // nearest (`as` saturates, so rounding noise past 255 cannot wrap).
        rgb[c] = (top + (bottom - top) * ty + 0.5) as u8;
    }
    rgb
}

/// Antialiased downscale of `src` to `width × height` with an area (box) filter: every output
/// pixel is the mean of the source area it covers, each source pixel weighted by its overlap.
/// For integer factors this is the exact mean of each `N×N` block (rounded to nearest, ties
/// up). Upscaling is never needed, so each requested side is clamped to `[1, source side]`.
///
/// Runs over output rows in parallel; besides the output it only holds one row accumulator
/// per worker thread.
pub fn resize_area(src: &RgbImage, width: u32, height: u32) -> RgbImage {
    let width = width.clamp(1, src.width);
    let height = height.clamp(1, src.height);
    if (width, height) == (src.width, src.height) {
        return src.clone();
    }
    let xs = AxisTaps::new(src.width, width);
    let ys = AxisTaps::new(src.height, height);
    let mut out = RgbImage::new(width, height);
    let out_stride = out.stride();
    out.pixels
        .par_chunks_mut(out_stride)
        .enumerate()
        .for_each_init(
            || vec![0f32; out_stride],
            |acc, (oy, row)| area_row_u8::<3>(&src.pixels, &xs, &ys, oy, acc, row),
        );
    out
}

/// Loads the image of `view`, checks it against the view's camera, undistorts it if the view
/// has distortion, resizes it, and returns the camera of the returned pixels.
pub fn prepare_view(view: &ViewSource, resize: Resize) -> Result<(Camera, RgbImage), ImportError> {
    prepare_view_opts(view, resize, false).map(|(c, img, _)| (c, img))
}

/// [`prepare_view`]; with `lenient`, a JPEG with corrupt scan data is accepted and the third
/// value is the warning to show (see [`load_rgb8_stored_opts`]).
pub fn prepare_view_opts(
    view: &ViewSource,
    resize: Resize,
    lenient: bool,
) -> Result<(Camera, RgbImage, Option<String>), ImportError> {
    let (stored, orientation, warning) = load_rgb8_stored_opts(&view.image_path, lenient)?;
    let (cam, img) = place(view, stored, orientation, resize)?;
    Ok((cam, img, warning))
}

/// A view's bytes as packed: RGB8 or RGBA8 (straight alpha), then the loss mask, then the
/// inverse-depth plane, as `layout` says.
#[derive(Debug)]
pub struct PreparedView {
    pub camera: Camera,
    pub pixels: Vec<u8>,
    pub layout: PixelLayout,
    /// The inverse-depth plane's scale: `Some` exactly when `layout.depth`.
    pub depth: Option<DepthScale>,
    /// See [`load_rgb8_stored_opts`].
    pub warning: Option<String>,
}

/// [`prepare_view_opts`], keeping the image's alpha and adding the view's loss mask (see the
/// module doc) and inverse-depth plane (`crate::import::depth`): what `gs-pack` packs.
pub fn prepare_view_pixels(
    view: &ViewSource,
    resize: Resize,
    lenient: bool,
) -> Result<PreparedView, ImportError> {
    let (stored, alpha, orientation, warning) = load_stored_opts(&view.image_path, lenient)?;
    let stored_size = (stored.width, stored.height);
    let (camera, mut pixels, has_alpha) = match alpha {
        None => {
            let (camera, img) = place(view, stored, orientation, resize)?;
            (camera, img.pixels, false)
        }
        Some(alpha) => {
            let (camera, pixels) = place_rgba(view, stored, alpha, orientation, resize)?;
            (camera, pixels, true)
        }
    };
    let mask = match &view.mask_path {
        Some(path) => prepare_mask(view, path, stored_size, orientation, resize)?,
        None => None,
    };
    if let Some(mask) = &mask {
        pixels.extend_from_slice(mask);
    }
    if let Some(depth) = &view.depth {
        let (w, h, plane) =
            super::depth::prepare_depth(view, depth, stored_size, orientation, resize)?;
        // The same geometry as the pixels' by construction; a mismatch is a bug here.
        if (w, h) != (camera.width, camera.height) {
            return Err(ImportError::invalid(
                &depth.path,
                format!(
                    "view '{}': the depth plane came out {w}x{h} but the image {}x{}; this is a \
                     bug in ramsplat, please report it",
                    view.name, camera.width, camera.height
                ),
            ));
        }
        pixels.extend_from_slice(&plane);
    }
    Ok(PreparedView {
        camera,
        pixels,
        layout: PixelLayout {
            alpha: has_alpha,
            mask: mask.is_some(),
            depth: view.depth.is_some(),
        },
        depth: view.depth.as_ref().map(|d| d.scale),
        warning,
    })
}

/// Places colour and alpha planes of one image (see [`place`]) and interleaves them into
/// straight-alpha RGBA8; resampling runs on premultiplied colour (see the module doc).
fn place_rgba(
    view: &ViewSource,
    stored: RgbImage,
    alpha: RgbImage,
    orientation: Orientation,
    resize: Resize,
) -> Result<(Camera, Vec<u8>), ImportError> {
    let resamples = resamples(view, resize);
    let mut colour = stored;
    if resamples {
        for (c, a) in colour.pixels.iter_mut().zip(&alpha.pixels) {
            *c = premultiply(*c, *a);
        }
    }
    let (camera, colour) = place(view, colour, orientation, resize)?;
    let (_, alpha) = place(view, alpha, orientation, resize)?;
    let mut pixels = Vec::with_capacity(colour.pixels.len() / 3 * 4);
    for (c, a) in colour
        .pixels
        .chunks_exact(3)
        .zip(alpha.pixels.chunks_exact(3))
    {
        let a = a[0];
        for &v in c {
            pixels.push(if resamples { unpremultiply(v, a) } else { v });
        }
        pixels.push(a);
    }
    Ok((camera, pixels))
}

/// Whether packing `view` at `resize` resamples its pixels (undistortion or downscaling; a
/// lens that is the identity for the view's projection copies its pixels, even where it
/// crops).
fn resamples(view: &ViewSource, resize: Resize) -> bool {
    !view.distortion.is_identity_for(view.camera.projection)
        || target_size(view.camera.width, view.camera.height, resize)
            != (view.camera.width, view.camera.height)
}

/// How a per-pixel file that goes with an image (a loss mask, a depth map) of `size` is placed:
/// the orientation to apply and the size to resample it to first, or `None` when its size fits
/// the image neither way. `image_stored` is the image file's size in stored pixel order,
/// `orientation` its EXIF orientation and `upright` its camera's (upright) size. A file made
/// from the stored pixels (COLMAP reads pixels in stored order) follows the image's
/// orientation; one made from the upright image is already placed. Exact sizes win; then
/// `fits(size, reference)` says whether a file of another size may be resampled to
/// `reference` (masks only shrink, depth maps go either way).
pub fn side_file_placement(
    size: (u32, u32),
    image_stored: (u32, u32),
    orientation: Orientation,
    upright: (u32, u32),
    fits: impl Fn((u32, u32), (u32, u32)) -> bool,
) -> Option<(Orientation, (u32, u32))> {
    if size == image_stored {
        Some((orientation, image_stored))
    } else if size == upright {
        Some((Orientation::NoTransforms, upright))
    } else if fits(size, image_stored) {
        Some((orientation, image_stored))
    } else if fits(size, upright) {
        Some((Orientation::NoTransforms, upright))
    } else {
        None
    }
}

/// The loss mask of `view` read from `path`, placed like its image (see the module doc):
/// `width × height` bytes of the packed view, 0 (excluded) or 255 (used); `None` when the
/// mask excludes nothing (it would cost bytes and change no gradient). `image_stored` is the
/// image file's size in stored pixel order and `orientation` its EXIF orientation.
pub fn prepare_mask(
    view: &ViewSource,
    path: &Path,
    image_stored: (u32, u32),
    orientation: Orientation,
    resize: Resize,
) -> Result<Option<Vec<u8>>, ImportError> {
    let (decoded, _, _, _) = load_stored_opts(path, false)?;
    let size = (decoded.width, decoded.height);
    let cam = (view.camera.width, view.camera.height);
    // A mask larger than its image, of which the image is a resized copy (the masks of the
    // original photos with `--images images_4`), is brought to the image's size first, as
    // coverage; a smaller one would have to be invented.
    let fits = |file: (u32, u32), image: (u32, u32)| is_resized_copy(image, file);
    let Some((orientation, target)) =
        side_file_placement(size, image_stored, orientation, cam, fits)
    else {
        return Err(ImportError::invalid(
            path,
            format!(
                "the mask of view '{}' is {}x{} but its image {} is {}x{}; a mask must have its \
                 image's size, or a size its image is a resized copy of (regenerate it from {}, \
                 or remove it to use every pixel)",
                view.name,
                size.0,
                size.1,
                view.image_path.display(),
                cam.0,
                cam.1,
                view.image_path.display()
            ),
        ));
    };
    // Binary first (any nonzero channel = used), so resampling yields coverage.
    let pixels = decoded
        .pixels
        .chunks_exact(3)
        .flat_map(|p| [if p.iter().any(|&c| c != 0) { 255 } else { 0 }; 3])
        .collect();
    let binary = RgbImage {
        width: size.0,
        height: size.1,
        pixels,
    };
    let shrunk = target != size;
    let binary = if shrunk {
        resize_area(&binary, target.0, target.1)
    } else {
        binary
    };
    let resamples = shrunk || resamples(view, resize);
    let (_, placed) = place(view, binary, orientation, resize)?;
    // A resampled pixel is used only when everything it covers was used (coverage ≥ 254/255
    // absorbs the filters' rounding): excluded regions may grow by a pixel, never shrink.
    let mask: Vec<u8> = placed
        .pixels
        .chunks_exact(3)
        .map(|p| {
            let used = if resamples {
                p[0] >= MASK_USED_MIN
            } else {
                p[0] != 0
            };
            if used {
                255
            } else {
                0
            }
        })
        .collect();
    Ok(mask.contains(&0).then_some(mask))
}

/// Steps 2–4 of the module doc on decoded pixels: orientation, size check, undistortion,
/// downscaling; returns the camera of the returned pixels.
fn place(
    view: &ViewSource,
    stored: RgbImage,
    orientation: Orientation,
    resize: Resize,
) -> Result<(Camera, RgbImage), ImportError> {
    let path = &view.image_path;
    let cam = view.camera;
    let keep_stored =
        swaps_sides(orientation) && (stored.width, stored.height) == (cam.width, cam.height);
    let decoded = if keep_stored {
        stored
    } else {
        orient(stored, orientation)
    };
    if (decoded.width, decoded.height) != (cam.width, cam.height) {
        return Err(ImportError::invalid(
            path,
            format!(
                "view '{}': the image is {}x{} but its camera says {}x{}; the images were probably \
                 resized after SfM/pose estimation, or this is the wrong images folder. Point the \
                 dataset at the original images (a COLMAP workspace can use a resized copy such \
                 as images_4 with `gs-pack convert --images images_4`, which scales each camera \
                 to it)",
                view.name, decoded.width, decoded.height, cam.width, cam.height
            ),
        ));
    }
    let (cam, ideal) = if cam.projection.is_pinhole() && view.distortion.is_none() {
        (cam, decoded)
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
                path,
                format!(
                    "view '{}': its lens model ({:?}) sends no pixel of the undistorted image \
                     into the photo; the camera's distortion coefficients are wrong (re-run the \
                     calibration or the reconstruction)",
                    view.name, view.distortion
                ),
            ));
        }
        let u = undistort_rect(
            &decoded,
            &cam.intrinsics,
            &view.distortion,
            cam.projection,
            rect,
        );
        drop(decoded);
        // The crop keeps the projection (`Camera::cropped`).
        (rect.camera(&cam), u)
    };
    let (w, h) = target_size(cam.width, cam.height, resize);
    if (w, h) == (cam.width, cam.height) {
        return Ok((cam, ideal));
    }
    let small = resize_area(&ideal, w, h);
    drop(ideal);
    Ok((cam.resized(small.width, small.height), small))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scene::camera::Pose;
    use crate::scene::camera::Projection;
    use std::path::PathBuf;

    fn fox(rel: &str) -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/data/fox/")).join(rel)
    }

    fn pattern(width: u32, height: u32, f: impl Fn(u32, u32) -> [u8; 3]) -> RgbImage {
        let mut img = RgbImage::new(width, height);
        for y in 0..height {
            for x in 0..width {
                let o = (y as usize * width as usize + x as usize) * 3;
                img.pixels[o..o + 3].copy_from_slice(&f(x, y));
            }
        }
        img
    }

    fn camera(width: u32, height: u32, k: Intrinsics) -> Camera {
        Camera {
            width,
            height,
            intrinsics: k,
            world_to_camera: Pose::IDENTITY,
            projection: Projection::Pinhole,
        }
    }

    #[test]
    fn target_sizes() {
        assert_eq!(target_size(1080, 1920, Resize::None), (1080, 1920));
        assert_eq!(target_size(1080, 1920, Resize::Downscale(8)), (135, 240));
        assert_eq!(target_size(1080, 1920, Resize::Downscale(1)), (1080, 1920));
        assert_eq!(target_size(1080, 1920, Resize::Downscale(0)), (1080, 1920));
        // 1080/7 = 154.29 → 154; 1920/7 = 274.29 → 274; 10/4 = 2.5 → 3 (ties up).
        assert_eq!(target_size(1080, 1920, Resize::Downscale(7)), (154, 274));
        assert_eq!(target_size(10, 10, Resize::Downscale(4)), (3, 3));
        assert_eq!(target_size(3, 3, Resize::Downscale(100)), (1, 1));
        // 4946x3286 (a 16 MP photo) → 1600 wide, 3286·1600/4946 = 1063.0 → 1063.
        assert_eq!(
            target_size(4946, 3286, Resize::MaxWidth(1600)),
            (1600, 1063)
        );
        assert_eq!(
            target_size(1080, 1920, Resize::MaxWidth(1600)),
            (1080, 1920)
        );
        assert_eq!(target_size(1600, 900, Resize::MaxWidth(1600)), (1600, 900));
        assert_eq!(target_size(2000, 1, Resize::MaxWidth(100)), (100, 1));
    }

    #[test]
    fn resize_integer_factor_is_exact_block_mean() {
        let src = pattern(12, 8, |x, y| {
            [
                (x * 20 + y) as u8,
                (y * 31) as u8,
                ((x * 7 + y * 13) % 256) as u8,
            ]
        });
        let out = resize_area(&src, 6, 4);
        assert_eq!((out.width, out.height), (6, 4));
        for oy in 0..4 {
            for ox in 0..6 {
                for c in 0..3 {
                    let sum: u32 = (0..2)
                        .flat_map(|dy| (0..2).map(move |dx| (dx, dy)))
                        .map(|(dx, dy)| src.get(ox * 2 + dx, oy * 2 + dy)[c] as u32)
                        .sum();
                    let want = ((sum + 2) / 4) as u8; // round half up
                    assert_eq!(out.get(ox, oy)[c], want, "pixel ({ox},{oy}) channel {c}");
                }
            }
        }
        // Factor 3, with a 256-level range so exact ties (x.5) are exercised too.
        let src = pattern(9, 3, |x, y| {
            [(x * 29 + y) as u8, 255 - (x * 3) as u8, (x % 2) as u8 * 255]
        });
        let out = resize_area(&src, 3, 1);
        for ox in 0..3 {
            for c in 0..3 {
                let sum: u32 = (0..3)
                    .flat_map(|dy| (0..3).map(move |dx| (dx, dy)))
                    .map(|(dx, dy)| src.get(ox * 3 + dx, dy)[c] as u32)
                    .sum();
                assert_eq!(
                    out.get(ox, 0)[c] as u32,
                    (sum * 2 + 9) / 18,
                    "pixel {ox} channel {c}"
                );
            }
        }
    }

    #[test]
    fn resize_non_integer_factor_matches_supersampled_area_mean() {
        // 10x6 → 4x4: factors 2.5 and 1.5. Replicating every source pixel 2x2 makes them the
        // integer factors 5 and 3, whose block means are the exact area-weighted reference.
        let src = pattern(10, 6, |x, y| {
            [
                (x * 25 + y * 3) as u8,
                (y * 40 + x) as u8,
                ((x * 57 + y * 91) % 256) as u8,
            ]
        });
        let out = resize_area(&src, 4, 4);
        for oy in 0..4u32 {
            for ox in 0..4u32 {
                for c in 0..3 {
                    let mut sum = 0.0;
                    for sy in oy * 3..oy * 3 + 3 {
                        for sx in ox * 5..ox * 5 + 5 {
                            sum += src.get(sx / 2, sy / 2)[c] as f64;
                        }
                    }
                    let want = sum / 15.0;
                    let got = out.get(ox, oy)[c] as f64;
                    // f32 accumulation of fractional weights: within rounding of the exact mean.
                    assert!(
                        (got - want).abs() <= 0.5 + 1e-3,
                        "({ox},{oy}) c{c}: {got} vs {want}"
                    );
                }
            }
        }
        // A constant image stays exactly constant, and requests to upscale are clamped.
        let flat = pattern(7, 5, |_, _| [200, 13, 77]);
        let small = resize_area(&flat, 3, 2);
        assert!(small.pixels.chunks(3).all(|p| p == [200, 13, 77]));
        let same = resize_area(&flat, 50, 50);
        assert_eq!(same, flat);
    }

    /// Inverts `Distortion::distort` (test reference only): a fisheye lens by bisection on the
    /// ray angle, the radial–tangential model by fixed-point iteration.
    fn undistort_point(d: &Distortion, xd: f64, yd: f64) -> (f64, f64) {
        if let Distortion::Fisheye { .. } = d {
            let rd = xd.hypot(yd);
            let (mut lo, mut hi) = (0.0f64, std::f64::consts::FRAC_PI_2 - 1e-9);
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if d.distort(mid.tan(), 0.0).0 < rd {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let r = lo.tan();
            return if rd == 0.0 {
                (0.0, 0.0)
            } else {
                (xd * r / rd, yd * r / rd)
            };
        }
        let (mut x, mut y) = (xd, yd);
        for _ in 0..100 {
            let (ex, ey) = d.distort(x, y);
            x -= ex - xd;
            y -= ey - yd;
        }
        let (ex, ey) = d.distort(x, y);
        assert!(
            (ex - xd).abs() < 1e-12 && (ey - yd).abs() < 1e-12,
            "no convergence"
        );
        (x, y)
    }

    #[test]
    fn undistort_restores_an_analytically_distorted_pattern() {
        let (w, h) = (160u32, 120u32);
        let k = Intrinsics {
            fx: 110.0,
            fy: 105.0,
            cx: 81.3,
            cy: 58.7,
        };
        // A smooth pattern over *ideal* (undistorted) normalised coordinates; its wavelength in
        // pixels is 2π·fx/ω ≈ 40 px.
        let g = |x: f64, y: f64| -> [f64; 3] {
            [
                127.5 + 100.0 * (17.0 * x + 0.3).sin() * (16.0 * y).cos(),
                127.5 + 100.0 * (15.0 * x - 12.0 * y).cos(),
                127.5 + 100.0 * (16.0 * y + 1.0).sin(),
            ]
        };
        let lenses = [
            // The fox dataset's lens.
            Distortion::RadialTangential {
                k: [0.0578421, -0.0805099, 0.0, 0.0, 0.0, 0.0],
                p: [-0.000980296, 0.00015575],
            },
            // Strong barrel with tangential terms.
            Distortion::RadialTangential {
                k: [-0.25, 0.05, 0.01, 0.0, 0.0, 0.0],
                p: [0.004, -0.003],
            },
            // A fisheye lens (82°×65° through its centre); the pinhole keeps 72°×59° of it.
            Distortion::Fisheye {
                k: [0.03, -0.01, 0.002, 0.0],
            },
        ];
        for d in lenses {
            // The photo: source pixel (i, j) sees the ideal ray that distorts onto its centre.
            let distorted = pattern(w, h, |i, j| {
                let xd = (i as f64 + 0.5 - k.cx) / k.fx;
                let yd = (j as f64 + 0.5 - k.cy) / k.fy;
                let (x, y) = undistort_point(&d, xd, yd);
                g(x, y).map(|v| v.round() as u8)
            });
            let out = undistort(&distorted, &k, &d);
            // Tolerance: bilinear interpolation error ≤ h²/8·max|f''| per axis = ω²/fx²·100/8
            // ≈ (0.155)²·12.5 ≈ 0.3 per axis (0.6 for both), plus 0.5 source quantisation and
            // 0.5 output rounding: 1.6, so 2 levels.
            let mut worst = 0.0f64;
            let mut checked = 0;
            for j in 0..h {
                for i in 0..w {
                    let x = (i as f64 + 0.5 - k.cx) / k.fx;
                    let y = (j as f64 + 0.5 - k.cy) / k.fy;
                    let (xd, yd) = d.distort(x, y);
                    let (u, v) = (k.fx * xd + k.cx, k.fy * yd + k.cy);
                    // Away from the border: the sample and its bilinear footprint lie 2 px
                    // inside the source.
                    if !(u >= 2.0 && u <= w as f64 - 2.0 && v >= 2.0 && v <= h as f64 - 2.0) {
                        continue;
                    }
                    let want = g(x, y);
                    let got = out.get(i, j);
                    for c in 0..3 {
                        worst = worst.max((got[c] as f64 - want[c]).abs());
                    }
                    checked += 1;
                }
            }
            assert!(
                checked > (w * h) as usize / 2,
                "only {checked} pixels checked"
            );
            assert!(worst <= 2.0, "worst error {worst} levels for {d:?}");
        }
    }

    #[test]
    fn undistort_identity_is_exact_and_outside_is_black() {
        let src = pattern(31, 17, |x, y| {
            [(x * 8) as u8, (y * 15) as u8, ((x + y) * 5) as u8]
        });
        let k = Intrinsics {
            fx: 30.0,
            fy: 30.0,
            cx: 15.5,
            cy: 8.5,
        };
        assert_eq!(undistort(&src, &k, &Distortion::NONE), src);
        // A tiny distortion still samples at (almost exactly) the source pixel centres, which
        // checks the +0.5 convention on both sides: a half-pixel slip would blur every edge.
        let tiny = Distortion::RadialTangential {
            k: [1e-9, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0, 0.0],
        };
        assert_eq!(undistort(&src, &k, &tiny), src);
        // Strong pincushion: the corners' rays land outside the photo and come out black; the
        // centre pixel's ray is the optical axis and is unchanged.
        let pin = Distortion::RadialTangential {
            k: [0.8, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0, 0.0],
        };
        let white = pattern(31, 17, |_, _| [255, 255, 255]);
        let out = undistort(&white, &k, &pin);
        assert_eq!(out.get(0, 0), [0, 0, 0]);
        assert_eq!(out.get(30, 16), [0, 0, 0]);
        assert_eq!(out.get(15, 8), [255, 255, 255]);
    }

    #[test]
    fn fold_over_beyond_the_valid_radius_is_black() {
        // k1 = −0.6 alone: r·(1 − 0.6 r²) peaks at r = 1/√1.8 ≈ 0.7454.
        let d = Distortion::RadialTangential {
            k: [-0.6, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0, 0.0],
        };
        let r = valid_radius(&d, 1.2);
        assert!((r - 1.8f64.sqrt().recip()).abs() < 1.2 / 4096.0, "{r}");
        assert_eq!(valid_radius(&Distortion::NONE, 1.2), f64::INFINITY);
        // The fox lens is monotonic over its whole image (corner radius ≈ 0.81).
        let fox_lens = Distortion::RadialTangential {
            k: [0.0578421, -0.0805099, 0.0, 0.0, 0.0, 0.0],
            p: [-0.000980296, 0.00015575],
        };
        assert_eq!(valid_radius(&fox_lens, 0.81), f64::INFINITY);
        // 100x100, f = 50: corners at r ≈ 1.41. Without the limit the corner rays would land
        // back inside the photo (r_d(1.41) ≈ −0.27) and pick up mirrored content.
        let white = pattern(100, 100, |_, _| [255, 255, 255]);
        let k = Intrinsics {
            fx: 50.0,
            fy: 50.0,
            cx: 50.0,
            cy: 50.0,
        };
        let out = undistort(&white, &k, &d);
        assert_eq!(out.get(0, 0), [0, 0, 0]);
        assert_eq!(out.get(99, 99), [0, 0, 0]);
        // r = 0.7 (35 px from the centre) is inside the valid radius.
        assert_eq!(out.get(84, 49), [255, 255, 255]);
        // r = 0.8 (40 px) is beyond it.
        assert_eq!(out.get(89, 49), [0, 0, 0]);
    }

    #[test]
    fn field_of_view_of_a_fisheye_photo_and_its_pinhole_image() {
        use std::f64::consts::FRAC_PI_3;
        // A pure equidistant lens with the left and right edges at 60° off the axis: 120°
        // across, 60° top to bottom.
        let f = 100.0 / FRAC_PI_3;
        let k = Intrinsics {
            fx: f,
            fy: f,
            cx: 100.0,
            cy: 50.0,
        };
        let full = PixelRect::full(200, 100);
        let fisheye = Distortion::Fisheye { k: [0.0; 4] };
        assert_eq!(
            covered_rect(200, 100, &k, &fisheye, Projection::Pinhole),
            full
        );
        let fov = field_of_view(200, 100, &k, &fisheye, Projection::Pinhole, full);
        let [h, v] = fov.photo.map(Option::unwrap);
        assert!(
            (h - 120.0).abs() < 1e-9 && (v - 60.0).abs() < 1e-9,
            "{fov:?}"
        );
        // The pinhole of the same focal length: 2·atan(π/3) and 2·atan(π/6).
        let want = [FRAC_PI_3, FRAC_PI_3 / 2.0].map(|e| 2.0 * e.atan().to_degrees());
        assert!((fov.kept[0] - want[0]).abs() < 1e-9, "{fov:?}");
        assert!((fov.kept[1] - want[1]).abs() < 1e-9, "{fov:?}");
        // A pinhole photo keeps its whole field of view; an off-centre principal point counts
        // each side's share.
        let k2 = Intrinsics { cx: 150.0, ..k };
        let fov = field_of_view(200, 100, &k2, &Distortion::NONE, Projection::Pinhole, full);
        let want = (150.0 / f).atan().to_degrees() + (50.0 / f).atan().to_degrees();
        assert!((fov.photo[0].unwrap() - want).abs() < 1e-9, "{fov:?}");
        assert!((fov.kept[0] - want).abs() < 1e-9, "{fov:?}");
        // k1 = −0.3 folds over at θ = 1/√0.9 (radius 0.7027): the photo's horizontal edges
        // (at 1.047) are past it; its vertical ones (0.524) are not.
        let folded = Distortion::Fisheye {
            k: [-0.3, 0.0, 0.0, 0.0],
        };
        let fov = field_of_view(200, 100, &k, &folded, Projection::Pinhole, full);
        assert_eq!(fov.photo[0], None);
        assert!(fov.photo[1].is_some());
        // A window: the angles of its own edges.
        let window = PixelRect {
            x0: 40,
            y0: 10,
            x1: 180,
            y1: 100,
        };
        let fov = field_of_view(200, 100, &k, &folded, Projection::Pinhole, window);
        let want = (60.0 / f).atan().to_degrees() + (80.0 / f).atan().to_degrees();
        assert!((fov.kept[0] - want).abs() < 1e-9, "{fov:?}");
    }

    /// An equidistant photo with zero coefficients kept as a fisheye image is the photo itself:
    /// copied bit for bit, nothing cropped while every pixel is within FISHEYE_MAX_THETA; a
    /// focal length that puts the corners past it (beyond 90° off the axis) crops the edges
    /// until the window's borders are inside, and every kept pixel is still the photo's own.
    #[test]
    fn an_equidistant_photo_kept_as_a_fisheye_is_copied_bit_for_bit() {
        let src = pattern(40, 30, |x, y| {
            [(x * 6 + y) as u8, (y * 8 + x * 3) as u8, (x * y) as u8]
        });
        let lens = Distortion::Fisheye { k: [0.0; 4] };
        assert!(lens.is_identity_for(Projection::Fisheye));
        assert!(!lens.is_identity_for(Projection::Pinhole));
        // Corners 25 px from the centre: at f = 20 they are 71.6° off the axis.
        let k = Intrinsics {
            fx: 20.0,
            fy: 20.0,
            cx: 20.0,
            cy: 15.0,
        };
        let full = PixelRect::full(40, 30);
        assert_eq!(covered_rect(40, 30, &k, &lens, Projection::Fisheye), full);
        let out = undistort_rect(&src, &k, &lens, Projection::Fisheye, full);
        assert_eq!(out, src);
        let fov = field_of_view(40, 30, &k, &lens, Projection::Fisheye, full);
        let [h, v] = fov.photo.map(Option::unwrap);
        assert!((fov.kept[0] - h).abs() < 1e-9 && (fov.kept[1] - v).abs() < 1e-9);
        assert!((h - 2.0f64.to_degrees()).abs() < 1e-9, "{fov:?}");
        // At f = 12 the corners are 119° off the axis: cropped to the pixels within 89.9°.
        let k = Intrinsics {
            fx: 12.0,
            fy: 12.0,
            ..k
        };
        let rect = covered_rect(40, 30, &k, &lens, Projection::Fisheye);
        assert!(rect != full && !rect.is_empty(), "{rect:?}");
        let angle =
            |x: u32, y: u32| ((x as f64 + 0.5 - k.cx) / k.fx).hypot((y as f64 + 0.5 - k.cy) / k.fy);
        let whole = undistort_rect(&src, &k, &lens, Projection::Fisheye, full);
        for y in 0..30 {
            for x in 0..40 {
                let inside = angle(x, y) <= FISHEYE_MAX_THETA;
                let want = if inside { src.get(x, y) } else { [0; 3] };
                assert_eq!(whole.get(x, y), want, "({x}, {y})");
                let in_rect = x >= rect.x0 && x < rect.x1 && y >= rect.y0 && y < rect.y1;
                assert!(!in_rect || inside, "({x}, {y}) kept past 90°");
            }
        }
        // Each side stopped at the first border with every pixel inside.
        let row_inside = |y: u32| (rect.x0..rect.x1).all(|x| angle(x, y) <= FISHEYE_MAX_THETA);
        assert!(row_inside(rect.y0) && row_inside(rect.y1 - 1));
        assert!(!(rect.x0..rect.x1).all(|x| angle(x, rect.y0 - 1) <= FISHEYE_MAX_THETA));
        let kept = undistort_rect(&src, &k, &lens, Projection::Fisheye, rect);
        assert_eq!(kept.pixels, rect_of(&src, rect));
        // A pinhole-type lens sees nothing from 90° on: an equidistant image of a pinhole
        // photo stops there too (and is resampled, not copied).
        assert!(!Distortion::NONE.is_identity_for(Projection::Fisheye));
        let map = LensMap::new(40, 30, &k, &Distortion::NONE, Projection::Fisheye);
        assert!(!map.is_identity());
        assert_eq!(map.source(0, 0), None);
        let (u, v) = map.source(20, 15).unwrap();
        assert!(
            (u - 20.5).abs() < 1e-3 && (v - 15.5).abs() < 1e-3,
            "{u} {v}"
        );
    }

    /// A photo through a fisheye lens with coefficients resampled to the ideal equidistant
    /// image of its size and intrinsics: the scene is a smooth pattern over the ideal image's
    /// normalised coordinates `θ·direction`, and the photo is made from it by inverting the
    /// lens independently (bisection on θ_d), so the packed pixel at `(a, b)` must be the
    /// pattern at `(a, b)` up to resampling error. The fisheye image keeps the periphery the
    /// pinhole image of the same focal length drops.
    #[test]
    fn a_fisheye_lens_resamples_to_the_ideal_equidistant_image() {
        let (w, h) = (96u32, 72u32);
        let k = Intrinsics {
            fx: 40.0,
            fy: 40.0,
            cx: 48.0,
            cy: 36.0,
        };
        let coeffs = [0.04, -0.02, 0.004, -0.0005];
        let lens = Distortion::Fisheye { k: coeffs };
        let theta_d = |t: f64| {
            t * (1.0
                + coeffs[0] * t.powi(2)
                + coeffs[1] * t.powi(4)
                + coeffs[2] * t.powi(6)
                + coeffs[3] * t.powi(8))
        };
        let g = |a: f64, b: f64| -> [f64; 3] {
            [
                127.5 + 100.0 * (3.0 * a + 0.2).sin() * (2.5 * b).cos(),
                127.5 + 100.0 * (2.0 * a - 3.0 * b).cos(),
                127.5 + 100.0 * (3.0 * b + 1.0).sin(),
            ]
        };
        let photo = pattern(w, h, |i, j| {
            let xd = (i as f64 + 0.5 - k.cx) / k.fx;
            let yd = (j as f64 + 0.5 - k.cy) / k.fy;
            let rd = xd.hypot(yd);
            let (mut lo, mut hi) = (0.0f64, 2.5f64);
            for _ in 0..200 {
                let mid = 0.5 * (lo + hi);
                if theta_d(mid) < rd {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let s = if rd == 0.0 { 1.0 } else { lo / rd };
            g(xd * s, yd * s).map(|c| c.round() as u8)
        });
        let rect = covered_rect(w, h, &k, &lens, Projection::Fisheye);
        let out = undistort_rect(&photo, &k, &lens, Projection::Fisheye, rect);
        let (mut worst, mut checked) = (0.0f64, 0);
        for j in 0..rect.height() {
            for i in 0..rect.width() {
                let a = ((rect.x0 + i) as f64 + 0.5 - k.cx) / k.fx;
                let b = ((rect.y0 + j) as f64 + 0.5 - k.cy) / k.fy;
                // Away from the photo's outer 2 px, where the edge pixel is replicated.
                let t = a.hypot(b);
                let s = if t == 0.0 { 1.0 } else { theta_d(t) / t };
                let (u, v) = (k.fx * a * s + k.cx, k.fy * b * s + k.cy);
                if !(u >= 2.0 && u <= w as f64 - 2.0 && v >= 2.0 && v <= h as f64 - 2.0) {
                    continue;
                }
                let got = out.get(i, j);
                for (c, want) in g(a, b).iter().enumerate() {
                    worst = worst.max((got[c] as f64 - want).abs());
                }
                checked += 1;
            }
        }
        assert!(checked > (w * h) as usize / 2, "{checked}");
        // Bilinear error of a pattern this smooth plus two roundings; a lens applied the
        // wrong way round or a half-pixel slip costs tens of levels.
        assert!(worst <= 3.0, "worst error {worst} levels");
        // The fisheye image keeps more of the photo than the pinhole image does.
        let fish = field_of_view(w, h, &k, &lens, Projection::Fisheye, rect);
        let pin_rect = covered_rect(w, h, &k, &lens, Projection::Pinhole);
        let pin = field_of_view(w, h, &k, &lens, Projection::Pinhole, pin_rect);
        assert!(fish.kept[0] > pin.kept[0] + 10.0, "{fish:?} {pin:?}");
        assert!(fish.kept[1] > pin.kept[1] + 5.0, "{fish:?} {pin:?}");
        // No more than the photo sees, but for the half pixel between the window's outermost
        // pixel centres (which have content) and its edges, on either side.
        let half_pixel = (0.5 / k.fx).to_degrees();
        for axis in 0..2 {
            let photo = fish.photo[axis].unwrap();
            assert!(
                fish.kept[axis] <= photo + 2.0 * half_pixel,
                "{fish:?} {rect:?}"
            );
            assert!(
                fish.kept[axis] >= photo - 4.0 * half_pixel,
                "{fish:?} {rect:?}"
            );
        }
    }

    #[test]
    fn load_converts_grey_rgba_and_16_bit() {
        let dir = tempfile::tempdir().unwrap();
        let grey = dir.path().join("grey.png");
        image::GrayImage::from_fn(3, 2, |x, y| image::Luma([(x * 50 + y) as u8]))
            .save(&grey)
            .unwrap();
        let img = load_rgb8(&grey).unwrap();
        assert_eq!((img.width, img.height), (3, 2));
        assert_eq!(img.get(2, 1), [101, 101, 101]);

        let rgba = dir.path().join("rgba.png");
        image::RgbaImage::from_fn(2, 2, |x, _| {
            image::Rgba([10, 20, 30, if x == 0 { 0 } else { 255 }])
        })
        .save(&rgba)
        .unwrap();
        let img = load_rgb8(&rgba).unwrap();
        // Alpha is dropped, not composited: a fully transparent pixel keeps its colour.
        assert_eq!(img.get(0, 0), [10, 20, 30]);
        assert_eq!(img.get(1, 1), [10, 20, 30]);

        let deep = dir.path().join("deep.png");
        image::ImageBuffer::<image::Rgb<u16>, Vec<u16>>::from_fn(1, 1, |_, _| {
            image::Rgb([65535, 0, 32896])
        })
        .save(&deep)
        .unwrap();
        // 32896 = 128·257 is exactly 8-bit 128.
        assert_eq!(load_rgb8(&deep).unwrap().get(0, 0), [255, 0, 128]);

        // A PNG named .jpg still decodes (format sniffed from the bytes).
        let misnamed = dir.path().join("really_png.jpg");
        std::fs::copy(&grey, &misnamed).unwrap();
        assert_eq!(load_rgb8(&misnamed).unwrap().get(2, 1), [101, 101, 101]);
        assert_eq!(image_dimensions(&misnamed).unwrap(), (3, 2));
    }

    #[test]
    fn corrupt_and_missing_images_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.jpg");
        std::fs::write(&bad, b"this is not a jpeg at all, just garbage bytes").unwrap();
        let view = ViewSource {
            name: "bad.jpg".into(),
            image_path: bad.clone(),
            camera: camera(
                4,
                4,
                Intrinsics {
                    fx: 4.0,
                    fy: 4.0,
                    cx: 2.0,
                    cy: 2.0,
                },
            ),
            distortion: Distortion::NONE,
            split: None,
            mask_path: None,
            depth: None,
        };
        let err = prepare_view(&view, Resize::None).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ImportError::Invalid { .. }), "{msg}");
        assert!(
            msg.contains("bad.jpg") && msg.contains("cannot decode"),
            "{msg}"
        );
        // A truncated real JPEG is also refused, not decoded into half an image.
        let bytes = std::fs::read(fox("images/0001.jpg")).unwrap();
        let cut = dir.path().join("cut.jpg");
        std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
        let msg = load_rgb8(&cut).unwrap_err().to_string();
        assert!(
            msg.contains("cut.jpg") && msg.contains("truncated"),
            "{msg}"
        );
        // Cut inside the headers (before the scan) too.
        std::fs::write(&cut, &bytes[..300]).unwrap();
        assert!(load_rgb8(&cut).is_err());
        // A truncated PNG is refused by the PNG decoder itself.
        let png = dir.path().join("cut.png");
        image::RgbImage::from_fn(64, 64, |x, y| {
            image::Rgb([(x * 3) as u8, (y * 5 % 256) as u8, (x ^ y) as u8])
        })
        .save(&png)
        .unwrap();
        let full = std::fs::read(&png).unwrap();
        std::fs::write(&png, &full[..full.len() / 2]).unwrap();
        let msg = load_rgb8(&png).unwrap_err().to_string();
        assert!(msg.contains("cut.png"), "{msg}");
        // Every real fox JPEG passes the truncation check (no false positives).
        for e in std::fs::read_dir(fox("images")).unwrap() {
            let p = e.unwrap().path();
            assert!(
                !jpeg_is_truncated(&std::fs::read(&p).unwrap()),
                "{}",
                p.display()
            );
        }
        let missing = load_rgb8(&dir.path().join("nope.png")).unwrap_err();
        assert!(matches!(missing, ImportError::Io { .. }));
        assert!(missing.to_string().contains("nope.png"));
    }

    /// `--images images_4`: Mip-NeRF 360's garden is 5187×3361 and its images_4 1297×841
    /// (each side rounded up): the camera scales per axis; the same size is the same camera;
    /// a larger file or another aspect ratio is not a copy.
    #[test]
    fn a_resized_copy_gets_its_camera_scaled_per_axis() {
        let dir = tempfile::tempdir().unwrap();
        let k = Intrinsics {
            fx: 4000.0,
            fy: 4010.0,
            cx: 2593.5,
            cy: 1680.5,
        };
        let cam = camera(5187, 3361, k);
        let file = |w: u32, h: u32| {
            let p = dir.path().join(format!("{w}x{h}.png"));
            image::RgbImage::new(w, h).save(&p).unwrap();
            p
        };
        let c = camera_for_file(&cam, &file(1297, 841), "v").unwrap();
        assert_eq!((c.width, c.height), (1297, 841));
        let (sx, sy) = (1297.0 / 5187.0, 841.0 / 3361.0);
        assert_eq!(c.intrinsics.fx, 4000.0 * sx);
        assert_eq!(c.intrinsics.cx, 2593.5 * sx);
        assert_eq!(c.intrinsics.fy, 4010.0 * sy);
        assert_eq!(c.intrinsics.cy, 1680.5 * sy);
        assert_eq!(c.world_to_camera, cam.world_to_camera);
        // Rounded down instead, and the other factors of the dataset.
        for (w, h) in [(1296, 840), (2594, 1681), (649, 421), (5187, 3361)] {
            let c = camera_for_file(&cam, &file(w, h), "v").unwrap();
            assert_eq!((c.width, c.height), (w, h));
        }
        assert_eq!(camera_for_file(&cam, &file(5187, 3361), "v").unwrap(), cam);
        for (w, h, why) in [
            (5188, 3362, "larger"),
            (1297, 860, "taller than the aspect"),
            (1320, 841, "wider than the aspect"),
            (841, 1297, "portrait without an orientation tag"),
        ] {
            let path = file(w, h);
            let e = camera_for_file(&cam, &path, "v7").unwrap_err().to_string();
            assert!(
                e.contains(&format!("{w}x{h}"))
                    && e.contains("5187x3361")
                    && e.contains("view 'v7'")
                    && e.contains(&path.display().to_string()),
                "{why}: {e}"
            );
        }
    }

    #[test]
    fn jpeg_scan_damage_is_an_error_unless_lenient_and_clean_files_decode_as_image_does() {
        let dir = tempfile::tempdir().unwrap();
        let rgb = image::RgbImage::from_fn(96, 64, |x, y| {
            image::Rgb([
                (x * 7 % 256) as u8,
                (y * 13 % 256) as u8,
                ((x ^ y) * 3) as u8,
            ])
        });
        let grey = image::GrayImage::from_fn(40, 30, |x, y| image::Luma([(x * y % 256) as u8]));
        let (a, b) = (dir.path().join("rgb.jpg"), dir.path().join("grey.jpg"));
        rgb.save(&a).unwrap();
        grey.save(&b).unwrap();
        // Clean files: the strict decoder gives exactly what the `image` crate gives.
        for p in [&a, &b] {
            let (got, _, warning) = load_rgb8_stored_opts(p, false).unwrap();
            assert!(warning.is_none());
            assert_eq!(got.pixels, image::open(p).unwrap().to_rgb8().into_raw());
        }
        // Scan bytes overwritten mid-file (all-one bits: no valid Huffman code), the end-of-image
        // marker kept: not "truncated", but damaged.
        let mut cut = std::fs::read(&a).unwrap();
        let sos = cut.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        let mid = sos + (cut.len() - sos) / 2;
        for k in 0..16 {
            cut[mid + 2 * k..mid + 2 * k + 2].copy_from_slice(&[0xFF, 0x00]);
        }
        let bad = dir.path().join("bad.jpg");
        std::fs::write(&bad, &cut).unwrap();
        assert!(!jpeg_is_truncated(&cut));
        let msg = load_rgb8(&bad).unwrap_err().to_string();
        assert!(
            msg.contains("bad.jpg")
                && msg.contains("scan data is corrupt")
                && msg.contains("--lenient"),
            "{msg}"
        );
        let (img, _, warning) = load_rgb8_stored_opts(&bad, true).unwrap();
        assert_eq!((img.width, img.height), (96, 64));
        let warning = warning.expect("a warning under lenient");
        assert!(warning.contains("bad.jpg"), "{warning}");
    }

    #[test]
    fn size_mismatch_names_both_sizes_and_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("small.png");
        image::RgbImage::new(8, 6).save(&p).unwrap();
        let view = ViewSource {
            name: "small.png".into(),
            image_path: p,
            camera: camera(
                16,
                12,
                Intrinsics {
                    fx: 16.0,
                    fy: 16.0,
                    cx: 8.0,
                    cy: 6.0,
                },
            ),
            distortion: Distortion::NONE,
            split: None,
            mask_path: None,
            depth: None,
        };
        let msg = prepare_view(&view, Resize::None).unwrap_err().to_string();
        assert!(
            msg.contains("small.png") && msg.contains("8x6") && msg.contains("16x12"),
            "{msg}"
        );
        assert!(
            msg.contains("resized after SfM") && msg.contains("wrong images folder"),
            "{msg}"
        );
    }

    /// A 3×2 PNG (pixel (x, y) = [10x + y, 0, 0]) carrying an EXIF orientation tag.
    fn png_with_orientation(path: &Path, exif_orientation: u8) {
        use image::ImageEncoder;
        let img = image::RgbImage::from_fn(3, 2, |x, y| image::Rgb([(10 * x + y) as u8, 0, 0]));
        // TIFF header (little-endian), one IFD entry: tag 0x0112 Orientation, SHORT, count 1.
        let mut exif = vec![
            b'I', b'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
        ];
        exif.extend_from_slice(&[exif_orientation, 0, 0, 0, 0, 0, 0, 0]);
        let mut enc = image::codecs::png::PngEncoder::new(std::fs::File::create(path).unwrap());
        enc.set_exif_metadata(exif).unwrap();
        enc.write_image(img.as_raw(), 3, 2, image::ExtendedColorType::Rgb8)
            .unwrap();
    }

    fn view_of(path: &Path, width: u32, height: u32) -> ViewSource {
        ViewSource {
            name: "o.png".into(),
            image_path: path.to_owned(),
            camera: camera(
                width,
                height,
                Intrinsics {
                    fx: 4.0,
                    fy: 4.0,
                    cx: width as f64 / 2.0,
                    cy: height as f64 / 2.0,
                },
            ),
            distortion: Distortion::NONE,
            split: None,
            mask_path: None,
            depth: None,
        }
    }

    #[test]
    fn exif_orientation_is_applied_and_checked_against_the_camera() {
        let dir = tempfile::tempdir().unwrap();
        // 6 = rotate 90° clockwise: stored 3×2 displays as 2×3, stored column 0 becomes the top
        // row read right to left.
        let p = dir.path().join("o.png");
        png_with_orientation(&p, 6);
        assert_eq!(image_dimensions(&p).unwrap(), (2, 3));
        let img = load_rgb8(&p).unwrap();
        assert_eq!((img.width, img.height), (2, 3));
        assert_eq!(img.get(0, 0)[0], 1); // stored (0, 1)
        assert_eq!(img.get(1, 0)[0], 0); // stored (0, 0)
        assert_eq!(img.get(1, 2)[0], 20); // stored (2, 0)
                                          // A camera of the oriented size gets the upright pixels.
        let (cam, got) = prepare_view(&view_of(&p, 2, 3), Resize::None).unwrap();
        assert_eq!((cam.width, cam.height), (2, 3));
        assert_eq!(got, img);
        // A camera of the stored size (a pose tool that ignored the tag, as COLMAP does) keeps
        // the stored order.
        let (_, got) = prepare_view(&view_of(&p, 3, 2), Resize::None).unwrap();
        assert_eq!((got.width, got.height), (3, 2));
        assert_eq!(got.get(2, 1)[0], 21);
        // 3 = rotate 180°: same size, always applied.
        let q = dir.path().join("r.png");
        png_with_orientation(&q, 3);
        let (_, got) = prepare_view(&view_of(&q, 3, 2), Resize::None).unwrap();
        assert_eq!(got.get(0, 0)[0], 21);
        assert_eq!(got.get(2, 1)[0], 0);
    }

    fn grey_png(path: &Path, w: u32, h: u32, f: impl Fn(u32, u32) -> u8) {
        image::GrayImage::from_fn(w, h, |x, y| image::Luma([f(x, y)]))
            .save(path)
            .unwrap();
    }

    /// The packed mask of a prepared view (its bytes after the colour).
    fn packed_mask(p: &PreparedView) -> &[u8] {
        assert!(p.layout.mask);
        let n = p.layout.pixel_bytes(p.camera.width, p.camera.height);
        &p.pixels[n..]
    }

    #[test]
    fn masks_follow_their_image_orientation_and_size() {
        let dir = tempfile::tempdir().unwrap();
        // Stored 3×2 with orientation 6 (rotate 90° clockwise): displayed 2×3, stored pixel
        // (0, 0) lands at upright (1, 0).
        let img = dir.path().join("o.png");
        png_with_orientation(&img, 6);
        let mut view = view_of(&img, 2, 3);
        let want: Vec<u8> = (0..6).map(|i| if i == 1 { 0 } else { 255 }).collect();
        // A mask in stored order (3×2, as COLMAP makes them) follows the orientation...
        let stored = dir.path().join("stored.png");
        grey_png(&stored, 3, 2, |x, y| if (x, y) == (0, 0) { 0 } else { 7 });
        view.mask_path = Some(stored);
        let p = prepare_view_pixels(&view, Resize::None, false).unwrap();
        assert_eq!(p.pixels.len(), 2 * 3 * 3 + 6);
        assert_eq!(packed_mask(&p), want);
        // ...and one made on the upright image (2×3) is already placed.
        let upright = dir.path().join("upright.png");
        grey_png(
            &upright,
            2,
            3,
            |x, y| if (x, y) == (1, 0) { 0 } else { 255 },
        );
        view.mask_path = Some(upright);
        let p = prepare_view_pixels(&view, Resize::None, false).unwrap();
        assert_eq!(packed_mask(&p), want);
        // Any other size is an error naming the mask, the view and both sizes.
        let wrong = dir.path().join("wrong.png");
        grey_png(&wrong, 8, 2, |_, _| 0);
        view.mask_path = Some(wrong.clone());
        let e = prepare_view_pixels(&view, Resize::None, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&wrong.display().to_string())
                && e.contains("8x2")
                && e.contains("2x3")
                && e.contains("must have its image's size"),
            "{e}"
        );
        // A mask that excludes nothing is dropped: the view packs as plain RGB.
        let full = dir.path().join("full.png");
        grey_png(&full, 3, 2, |_, _| 255);
        view.mask_path = Some(full);
        let p = prepare_view_pixels(&view, Resize::None, false).unwrap();
        assert_eq!(p.layout, PixelLayout::RGB);
        assert_eq!(p.pixels.len(), 2 * 3 * 3);
    }

    #[test]
    fn downscaled_masks_exclude_every_pixel_that_covers_an_excluded_one() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("i.png");
        image::RgbImage::from_fn(8, 6, |x, y| image::Rgb([x as u8, y as u8, 9]))
            .save(&img)
            .unwrap();
        let mask = dir.path().join("m.png");
        // One excluded pixel at (2, 2) and an excluded 2×2 block at (6..8, 4..6).
        grey_png(&mask, 8, 6, |x, y| {
            u8::from(!((x, y) == (2, 2) || (x >= 6 && y >= 4)))
        });
        let mut view = view_of(&img, 8, 6);
        view.mask_path = Some(mask);
        // Native size: nonzero (here 1) is used, 0 excluded, packed as 255 / 0.
        let p = prepare_view_pixels(&view, Resize::None, false).unwrap();
        let m = packed_mask(&p);
        assert_eq!(m.iter().filter(|&&v| v == 0).count(), 5);
        assert!(m.iter().all(|&v| v == 0 || v == 255));
        // Halved: the 4×3 pixels covering (2, 2) and the block are excluded, the rest used.
        let p = prepare_view_pixels(&view, Resize::Downscale(2), false).unwrap();
        assert_eq!((p.camera.width, p.camera.height), (4, 3));
        let m = packed_mask(&p);
        let excluded: Vec<usize> = (0..12).filter(|&i| m[i] == 0).collect();
        assert_eq!(excluded, [5, 11], "{m:?}");
    }

    /// `--images images_2` with the masks of the original photos: a mask twice its image's size
    /// is shrunk to it as coverage, so every image pixel that covers an excluded mask pixel is
    /// excluded; a larger mask of another aspect ratio is still refused.
    #[test]
    fn a_mask_of_the_original_photo_fits_its_resized_copy() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("i.png");
        image::RgbImage::from_fn(4, 3, |x, y| image::Rgb([x as u8, y as u8, 9]))
            .save(&img)
            .unwrap();
        // The original 8×6 photo's mask: (2, 2) and the block (6..8, 4..6) excluded.
        let mask = dir.path().join("m.png");
        grey_png(&mask, 8, 6, |x, y| {
            u8::from(!((x, y) == (2, 2) || (x >= 6 && y >= 4)))
        });
        let mut view = view_of(&img, 4, 3);
        view.mask_path = Some(mask);
        let p = prepare_view_pixels(&view, Resize::None, false).unwrap();
        let m = packed_mask(&p);
        let excluded: Vec<usize> = (0..12).filter(|&i| m[i] == 0).collect();
        assert_eq!(excluded, [5, 11], "{m:?}");
        assert!(m.iter().all(|&v| v == 0 || v == 255));
        let wrong = dir.path().join("w.png");
        grey_png(&wrong, 16, 4, |_, _| 0);
        view.mask_path = Some(wrong);
        let e = prepare_view_pixels(&view, Resize::None, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("16x4") && e.contains("resized copy"), "{e}");
    }

    /// The pixels of `rect` of `img`, row by row.
    fn rect_of(img: &RgbImage, rect: PixelRect) -> Vec<u8> {
        (rect.y0..rect.y1)
            .flat_map(|j| (rect.x0..rect.x1).flat_map(move |i| img.get(i, j)))
            .collect()
    }

    #[test]
    fn covered_rect_crops_only_what_the_lens_leaves_empty() {
        let k = Intrinsics {
            fx: 30.0,
            fy: 30.0,
            cx: 15.5,
            cy: 8.5,
        };
        let rt = |k1: f64| Distortion::RadialTangential {
            k: [k1, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.0, 0.0],
        };
        // A pinhole, barrel distortion (rays move inwards) and a fisheye at the same focal
        // length (θ_d < tan θ) keep the whole image.
        for d in [
            Distortion::NONE,
            rt(-0.1),
            Distortion::Brown {
                k: [-0.1, 0.0, 0.0, -0.05],
                p: [0.0; 2],
            },
            Distortion::Fisheye { k: [0.0; 4] },
        ] {
            assert_eq!(
                covered_rect(31, 17, &k, &d, Projection::Pinhole),
                PixelRect::full(31, 17),
                "{d:?}"
            );
        }
        // Strong pincushion (OpenCV's model, and the Brown model's r⁸ term alone): the
        // corners' rays leave the photo, so the window shrinks around the principal point until
        // its border has content, and it all has content inside.
        let brown_pin = Distortion::Brown {
            k: [0.0, 0.0, 0.0, 40.0],
            p: [0.0; 2],
        };
        let r = covered_rect(31, 17, &k, &brown_pin, Projection::Pinhole);
        assert!(r != PixelRect::full(31, 17) && !r.is_empty(), "{r:?}");
        let map = LensMap::new(31, 17, &k, &brown_pin, Projection::Pinhole);
        assert!((r.y0..r.y1).all(|j| (r.x0..r.x1).all(|i| map.source(i, j).is_some())));
        let pin = rt(0.8);
        let r = covered_rect(31, 17, &k, &pin, Projection::Pinhole);
        assert!(r != PixelRect::full(31, 17) && !r.is_empty(), "{r:?}");
        assert!(r.x0 <= 15 && r.x1 > 15 && r.y0 <= 8 && r.y1 > 8, "{r:?}");
        let map = LensMap::new(31, 17, &k, &pin, Projection::Pinhole);
        for j in r.y0..r.y1 {
            for i in r.x0..r.x1 {
                assert!(map.source(i, j).is_some(), "({i}, {j}) in {r:?}");
            }
        }
        let src = pattern(31, 17, |x, y| [(x * 8) as u8, (y * 15) as u8, 77]);
        let out = undistort_rect(&src, &k, &pin, Projection::Pinhole, r);
        assert_eq!((out.width, out.height), (r.width(), r.height()));
        assert_eq!(out.pixels, rect_of(&undistort(&src, &k, &pin), r));
        // A lens that folds over before the nearest pixel centre leaves nothing: packing its
        // view is refused, naming it.
        let off = Intrinsics { cx: 15.25, ..k };
        let none = covered_rect(31, 17, &off, &rt(-1e6), Projection::Pinhole);
        assert!(
            none.is_empty() && none.width() * none.height() == 0,
            "{none:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.png");
        image::RgbImage::from_pixel(31, 17, image::Rgb([9, 9, 9]))
            .save(&path)
            .unwrap();
        let view = ViewSource {
            name: "a.png".into(),
            image_path: path,
            camera: camera(31, 17, off),
            distortion: rt(-1e6),
            split: None,
            mask_path: None,
            depth: None,
        };
        let e = prepare_view(&view, Resize::None).unwrap_err().to_string();
        assert!(
            e.contains("'a.png'") && e.contains("sends no pixel of the undistorted image"),
            "{e}"
        );
        // The camera of a window: the principal point moves with it.
        let cam = camera(31, 17, k);
        let c = PixelRect {
            x0: 3,
            y0: 2,
            x1: 30,
            y1: 15,
        }
        .camera(&cam);
        assert_eq!((c.width, c.height), (27, 13));
        assert_eq!(
            c.intrinsics,
            Intrinsics {
                cx: 12.5,
                cy: 6.5,
                ..k
            }
        );
    }

    #[test]
    fn prepare_real_fox_view_undistorted_and_downscaled() {
        let k = Intrinsics {
            fx: 1375.52,
            fy: 1374.49,
            cx: 554.558,
            cy: 965.268,
        };
        let view = ViewSource {
            name: "images/0001.jpg".into(),
            image_path: fox("images/0001.jpg"),
            camera: camera(1080, 1920, k),
            distortion: Distortion::RadialTangential {
                k: [0.0578421, -0.0805099, 0.0, 0.0, 0.0, 0.0],
                p: [-0.000980296, 0.00015575],
            },
            split: None,
            mask_path: None,
            depth: None,
        };
        // The fox lens moves the rays of the pinhole image's edge rows and columns (1.6 % of
        // its pixels) out of the photo by up to a few pixels: those edges are cropped.
        let map = LensMap::new(1080, 1920, &k, &view.distortion, Projection::Pinhole);
        let empty = (0..1920)
            .flat_map(|j| (0..1080).map(move |i| (i, j)))
            .filter(|&(i, j)| map.source(i, j).is_none())
            .count();
        assert!((33_000..34_500).contains(&empty), "{empty} empty pixels");
        let rect = covered_rect(1080, 1920, &k, &view.distortion, Projection::Pinhole);
        assert_eq!(
            rect,
            PixelRect {
                x0: 6,
                y0: 11,
                x1: 1073,
                y1: 1913
            }
        );
        for j in rect.y0..rect.y1 {
            for i in rect.x0..rect.x1 {
                assert!(map.source(i, j).is_some(), "({i}, {j}) is empty");
            }
        }
        let (cam, img) = prepare_view(&view, Resize::Downscale(8)).unwrap();
        // 1067×1902 / 8, rounded.
        assert_eq!((img.width, img.height), (133, 238));
        assert_eq!(img.pixels.len(), 133 * 238 * 3);
        let want = rect.camera(&view.camera).resized(133, 238);
        assert_eq!(cam, want);
        let eps = 1e-9;
        assert!((cam.intrinsics.fx - k.fx * 133.0 / 1067.0).abs() < eps);
        assert!((cam.intrinsics.cx - (k.cx - 6.0) * 133.0 / 1067.0).abs() < eps);
        assert!((cam.intrinsics.cy - (k.cy - 11.0) * 238.0 / 1902.0).abs() < eps);
        assert_eq!(cam.world_to_camera, Pose::IDENTITY);

        // Same pipeline by hand: undistort the window at full size, then the area filter.
        let full = load_rgb8(&view.image_path).unwrap();
        let und = undistort_rect(&full, &k, &view.distortion, Projection::Pinhole, rect);
        let whole = undistort(&full, &k, &view.distortion);
        assert_ne!(
            whole, full,
            "the fox lens distortion must change the pixels"
        );
        assert_eq!(
            und,
            RgbImage {
                width: rect.width(),
                height: rect.height(),
                pixels: rect_of(&whole, rect),
            },
            "a window of the whole undistorted image"
        );
        let by_hand = resize_area(&und, 133, 238);
        assert_eq!(by_hand, img);
    }

    #[test]
    fn alpha_is_kept_exactly_and_resampled_premultiplied() {
        let dir = tempfile::tempdir().unwrap();
        // 4×2 RGBA: left 2×2 block opaque red and transparent magenta garbage side by side,
        // right 2×2 block all transparent.
        let px: Vec<u8> = [
            [255, 0, 0, 255],
            [255, 0, 255, 0],
            [9, 9, 9, 0],
            [9, 9, 9, 0],
            [255, 0, 0, 255],
            [255, 0, 255, 0],
            [9, 9, 9, 0],
            [9, 9, 9, 0],
        ]
        .concat();
        let p = dir.path().join("a.png");
        image::RgbaImage::from_raw(4, 2, px.clone())
            .unwrap()
            .save(&p)
            .unwrap();
        let full = prepare_view_pixels(&view_of(&p, 4, 2), Resize::None, false).unwrap();
        assert!(full.layout.alpha);
        assert_eq!(full.pixels, px, "no resampling: stored bytes kept exactly");
        // 2× down: the left pixel is half-covered red (no magenta bleeds in), the right one
        // fully transparent.
        let half = prepare_view_pixels(&view_of(&p, 4, 2), Resize::Downscale(2), false).unwrap();
        assert_eq!((half.camera.width, half.camera.height), (2, 1));
        assert_eq!(half.pixels, vec![255, 0, 0, 128, 0, 0, 0, 0]);
        // Alpha that is 255 everywhere carries nothing: the view is RGB.
        let q = dir.path().join("opaque.png");
        image::RgbaImage::from_pixel(4, 2, image::Rgba([1, 2, 3, 255]))
            .save(&q)
            .unwrap();
        let opaque = prepare_view_pixels(&view_of(&q, 4, 2), Resize::None, false).unwrap();
        assert!(!opaque.layout.alpha);
        assert_eq!(opaque.pixels, [1, 2, 3].repeat(8));
    }
}
