//! The pack format: immutable, checksummed, memory-mappable shards plus a JSON manifest.
//!
//! A *pack* is a directory:
//!
//! ```text
//! PACK/
//!   manifest.json        written last; its presence marks a complete pack
//!   shard-00000.gss      sealed shard files, each at most --shard-size (one record may exceed it)
//!   shard-00001.gss
//! ```
//!
//! # Shard file layout (format versions 1 and 2, all integers little-endian)
//!
//! ```text
//! offset 0        shard header, one page (PAGE = 4096 bytes)
//!                   0  magic         [u8; 8] = b"RSPLSHRD"
//!                   8  version       u32     = 2 if the pack holds JPEG views, else 1
//!                  12  page_size     u32     = 4096
//!                  16  shard_index   u32
//!                  20  reserved      u32     = 0
//!                  24  pack_id       u64     same in every shard and the manifest of one pack
//!                  32  header_xxh3   u64     xxh3-64 of bytes 0..32
//!                  40  zero padding to 4096
//! offset k·PAGE   record: 64-byte record header, then the payload, then zero padding to the
//!                 next page boundary, so one record can be read, and its pages released,
//!                 without touching any other record
//!                   0  magic         [u8; 4] = b"RREC"
//!                   4  kind          u8      1 = view, 2 = point chunk
//!                   5  codec         u8      0 = raw, 1 = zstd, 2 = png, 3 = jpeg (views only;
//!                                          jpeg only in version 2)
//!                   6  flags         u16     views: bit 0 alpha (RGBA8 pixels), bit 1 mask,
//!                                          bit 2 inverse depth;
//!                                          point chunks: bit 0 labels, bit 1 normals
//!                   8  item          u32     view index, or chunk index within its cloud
//!                  12  group         u32     views: 0; point chunks: cloud index
//!                  16  a             u32     views: width;  point chunks: number of points
//!                  20  b             u32     views: height; point chunks: 0
//!                  24  stored_len    u64     payload bytes in the file
//!                  32  decoded_len   u64     bytes after decoding
//!                  40  payload_xxh3  u64     xxh3-64 of the stored payload
//!                  48  reserved      u64     = 0
//!                  56  header_xxh3   u64     xxh3-64 of record-header bytes 0..56
//! after the last  record table: record_count × u64 record offsets
//! record          footer, 32 bytes, at the very end of the file:
//!                   0  magic         [u8; 8] = b"RSPLEND\0"
//!                   8  table_offset  u64
//!                  16  record_count  u64
//!                  24  shard_xxh3    u64     xxh3-64 of every byte before the footer
//! ```
//!
//! Decoded payloads:
//! - **view**: RGB8 pixels, row-major, `width × height × 3` bytes, top row first; with view
//!   flag bit 0 ([`VIEW_FLAG_ALPHA`]) RGBA8, `width × height × 4` bytes, straight (not
//!   premultiplied) alpha. The flag was added without a version bump: a version-1 reader
//!   that predates it never saw it set (no importer wrote alpha), RGB views are written
//!   byte-for-byte as before (flag 0, no `alpha` key in the manifest), and a manifest
//!   without the key reads as RGB.
//!   With view flag bit 1 ([`VIEW_FLAG_MASK`]) a loss mask of `width × height` bytes follows
//!   the pixels (0 = the pixel is excluded from the training loss, 255 = it is used; no other
//!   value is written), and the manifest says `"mask": true`. Raw and zstd payloads encode the
//!   concatenation; a PNG payload is `u32 n` (little-endian), the `n`-byte PNG of the pixels,
//!   then a greyscale PNG of the mask. Added without a version bump for the reasons above.
//!   With view flag bit 2 ([`VIEW_FLAG_DEPTH`]) a plane of `width × height` little-endian u16
//!   follows (after the mask, if any): the view's monocular inverse depth as the depth file
//!   held it, resampled to the view's pixels (or, in a pack converted with `--sfm-depths`,
//!   [`SourceInfo::sfm_depths`], a sparse plane: the inverse depth of the SfM points the view
//!   observes at their pixels, see `crate::import::sfm_depth`), and the manifest gives the
//!   view a `"depth"`
//!   entry ([`DepthScale`]) that maps a stored value to the training target (a stored 0 means
//!   no depth at that pixel, [`DepthScale::NO_DEPTH`]). Raw and zstd
//!   payloads encode the concatenation; a PNG payload appends a 16-bit greyscale PNG of the
//!   plane after the colour (and mask) PNGs, each but the last preceded by its `u32` length.
//!   Added without a version bump for the reasons above.
//!   A **JPEG** payload (codec 3, format version 2; RGB views only) is framed as a PNG
//!   payload, with a baseline or progressive JPEG in place of the colour PNG: `u32 n` and
//!   the `n`-byte JPEG when a mask or depth plane follows (those stay PNG, lossless), else the
//!   JPEG alone. It decodes to RGB8 (a greyscale JPEG's value in all three channels) with the
//!   [`jpeg`] module's strict decoder; the manifest's [`ViewEntry::jpeg`] says whether it is
//!   the source file's own data (decoding to exactly the pixels another codec would hold) or
//!   an encoding at some quality, and bounds what decoding it allocates.
//!   [`PixelLayout`] computes the sizes.
//! - **point chunk** of `n` points: `xyz` as `n × 3` f32, then `rgb` as `n × 3` u8, zero
//!   padding to a multiple of 4, then (flag bit 0) `n` i32 labels, then (flag bit 1) `n × 3` f32
//!   normals. [`PointChunkLayout`] computes the offsets; [`PointChunkRef`] reads them.
//!
//! # Invariants
//! - A shard is written under a temporary name, fsynced and renamed: a file named
//!   `shard-*.gss` is always complete. The pack directory itself is built under a temporary
//!   name and renamed into place after `manifest.json` is fsynced, so a killed `gs-pack`
//!   leaves no directory that looks like a pack.
//! - Shards are never modified after sealing; readers map them read-only ([`reader`] is the
//!   only module that uses memmap2) and hand out owned decoded copies, never a handle into
//!   the dataset.
//! - Every record is checked against its `payload_xxh3` before it is decoded; `verify` also
//!   checks header checksums, the record table, the shard checksum and that the manifest
//!   agrees with the shards.
//! - A reader refuses a `version` newer than [`FORMAT_VERSION`] with a message that says to
//!   upgrade ramsplat, and an older one with a message that says to re-pack.

pub mod jpeg;
pub mod reader;
pub mod writer;

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::dataset::{Format, Split};
use crate::scene::camera::Camera;

/// View record flag: the decoded payload is RGBA8 (4 bytes per pixel) instead of RGB8.
pub const VIEW_FLAG_ALPHA: u16 = 1;
/// View record flag: a loss mask plane (one byte per pixel) follows the pixels.
pub const VIEW_FLAG_MASK: u16 = 2;
/// View record flag: an inverse-depth plane (little-endian u16 per pixel) follows the pixels
/// and the mask.
pub const VIEW_FLAG_DEPTH: u16 = 4;

/// The planes of one decoded view ([`PixelLayout::planes`]).
#[derive(Clone, Copy, Debug)]
pub struct ViewPlanes<'a> {
    /// RGB8 or RGBA8 pixels.
    pub pixels: &'a [u8],
    /// The loss mask, one byte per pixel (0 = excluded).
    pub mask: Option<&'a [u8]>,
    /// The inverse-depth plane, two little-endian bytes per pixel ([`DepthScale`] maps them).
    pub depth: Option<&'a [u8]>,
}

/// How a view's stored inverse-depth values become its training target, in the convention of
/// 3DGS's depth regularization: a depth file's value `v` (8- or 16-bit) means `v / 65536`,
/// which `depth_params.json`'s per-image affine fit maps to the SfM points' inverse depth:
/// `target = v / 65536 · scale + offset`. Without such a fit, `scale = 1, offset = 0` (the
/// file is taken as inverse depth in scene units, × 65536).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DepthScale {
    pub scale: f32,
    pub offset: f32,
}

impl DepthScale {
    /// The file's values as they are: `v / 65536`.
    pub const IDENTITY: DepthScale = DepthScale {
        scale: 1.0,
        offset: 0.0,
    };

    /// The training target of stored value `raw`.
    pub fn target(self, raw: u16) -> f32 {
        raw as f32 * (1.0 / 65536.0) * self.scale + self.offset
    }

    /// Fills `out` with the targets of a stored plane (two little-endian bytes per value); a
    /// stored 0 becomes NaN, "no depth here" (see [`DepthScale::NO_DEPTH`]).
    pub fn targets_into(self, plane: &[u8], out: &mut Vec<f32>) {
        out.clear();
        out.extend(
            plane
                .chunks_exact(2)
                .map(|b| match u16::from_le_bytes([b[0], b[1]]) {
                    Self::NO_DEPTH => f32::NAN,
                    raw => self.target(raw),
                }),
        );
    }

    /// The stored value that means "no depth at this pixel": what a depth file holds where
    /// it has no data (sky, a sensor's missing return, outside the photo after undistortion).
    /// An inverse depth of exactly 0 is infinitely far, which no Gaussian can render, so the
    /// trainer leaves those pixels out of the depth loss instead of pushing towards it.
    /// Resampling never averages it with depths: a value made from any 0 is 0.
    pub const NO_DEPTH: u16 = 0;
}

/// How a view's decoded bytes are laid out: RGB8 or straight-alpha RGBA8 pixels, row-major,
/// then, with `mask`, one byte per pixel (0 = excluded from the training loss, nonzero =
/// used), then, with `depth`, one little-endian u16 of inverse depth per pixel. Every consumer
/// of decoded view bytes takes its sizes from here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PixelLayout {
    pub alpha: bool,
    pub mask: bool,
    pub depth: bool,
}

impl PixelLayout {
    /// RGB8 pixels, no mask: the layout of every view before alpha and masks existed.
    pub const RGB: PixelLayout = PixelLayout {
        alpha: false,
        mask: false,
        depth: false,
    };

    /// Bytes per pixel of the colour part: 4 with alpha, else 3.
    pub fn channels(self) -> usize {
        if self.alpha {
            4
        } else {
            3
        }
    }

    /// Bytes of the colour part of a `width × height` view.
    pub fn pixel_bytes(self, width: u32, height: u32) -> usize {
        width as usize * height as usize * self.channels()
    }

    /// Bytes of a whole decoded `width × height` view (colour, then the mask and the
    /// inverse-depth plane if any).
    pub fn len(self, width: u32, height: u32) -> usize {
        let n = width as usize * height as usize;
        n * self.channels() + if self.mask { n } else { 0 } + if self.depth { 2 * n } else { 0 }
    }

    /// The record flags of this layout.
    pub fn flags(self) -> u16 {
        (if self.alpha { VIEW_FLAG_ALPHA } else { 0 })
            | (if self.mask { VIEW_FLAG_MASK } else { 0 })
            | if self.depth { VIEW_FLAG_DEPTH } else { 0 }
    }

    /// The layout of record flags `flags`; `None` when an unknown bit is set.
    pub fn from_flags(flags: u16) -> Option<PixelLayout> {
        (flags & !(VIEW_FLAG_ALPHA | VIEW_FLAG_MASK | VIEW_FLAG_DEPTH) == 0).then_some(
            PixelLayout {
                alpha: flags & VIEW_FLAG_ALPHA != 0,
                mask: flags & VIEW_FLAG_MASK != 0,
                depth: flags & VIEW_FLAG_DEPTH != 0,
            },
        )
    }

    /// Splits decoded view bytes into their planes. `None` when `bytes` is not exactly
    /// [`PixelLayout::len`] long.
    pub fn planes(self, bytes: &[u8], width: u32, height: u32) -> Option<ViewPlanes<'_>> {
        if bytes.len() != self.len(width, height) {
            return None;
        }
        let n = width as usize * height as usize;
        let (pixels, rest) = bytes.split_at(self.pixel_bytes(width, height));
        let (mask, depth) = rest.split_at(if self.mask { n } else { 0 });
        Some(ViewPlanes {
            pixels,
            mask: self.mask.then_some(mask),
            depth: self.depth.then_some(depth),
        })
    }

    /// Splits decoded view bytes into the colour part and the mask (if the layout has one);
    /// an inverse-depth plane is left out. `None` when `bytes` is not exactly
    /// [`PixelLayout::len`] long.
    pub fn split(self, bytes: &[u8], width: u32, height: u32) -> Option<(&[u8], Option<&[u8]>)> {
        self.planes(bytes, width, height)
            .map(|p| (p.pixels, p.mask))
    }

    /// "RGB8", "RGBA8 + mask", "RGB8 + mask + depth", …, for messages.
    pub fn describe(self) -> &'static str {
        match (self.alpha, self.mask, self.depth) {
            (false, false, false) => "RGB8",
            (true, false, false) => "RGBA8",
            (false, true, false) => "RGB8 + mask",
            (true, true, false) => "RGBA8 + mask",
            (false, false, true) => "RGB8 + depth",
            (true, false, true) => "RGBA8 + depth",
            (false, true, true) => "RGB8 + mask + depth",
            (true, true, true) => "RGBA8 + mask + depth",
        }
    }
}

/// Newest on-disk format version (shards and manifest) this ramsplat reads and writes.
/// Version 2 adds JPEG view records ([`Codec::Jpeg`]); a pack without them is written as
/// version 1, byte for byte as before, so older ramsplat builds still read it, while one that
/// has them tells an older build to upgrade instead of failing on an unknown codec.
pub const FORMAT_VERSION: u32 = 2;
/// Oldest format version this ramsplat reads.
pub const OLDEST_FORMAT_VERSION: u32 = 1;

/// The format version of a pack whose views are written with `codec`.
pub fn format_version_for(codec: Codec) -> u32 {
    match codec {
        Codec::Jpeg => 2,
        Codec::Raw | Codec::Zstd | Codec::Png => 1,
    }
}
/// Record alignment. 4 KiB is the base page size on x86-64 and most aarch64 kernels; on a
/// 16/64 KiB-page kernel releasing a record's pages rounds inward, which stays correct.
pub const PAGE: u64 = 4096;
pub const SHARD_MAGIC: [u8; 8] = *b"RSPLSHRD";
pub const RECORD_MAGIC: [u8; 4] = *b"RREC";
pub const FOOTER_MAGIC: [u8; 8] = *b"RSPLEND\0";
pub const RECORD_HEADER_LEN: u64 = 64;
pub const FOOTER_LEN: u64 = 32;
pub const MANIFEST_FILE: &str = "manifest.json";
/// Points per chunk record: 65,536 points decode to at most 1.8 MiB (with labels and normals),
/// small next to one image, so streaming a 4M-point cloud holds a few MiB at a time.
pub const POINTS_PER_CHUNK: usize = 65_536;

/// Name of shard `index` inside a pack.
pub fn shard_file_name(index: u32) -> String {
    format!("shard-{index:05}.gss")
}

/// How view pixels are stored. Point chunks are always zstd.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    /// Uncompressed.
    Raw,
    /// Lossless, fast to decode (the default).
    Zstd,
    /// Lossless, smaller than zstd for photos, slower to decode.
    Png,
    /// A source JPEG's own compressed data where the view's pixels are its decode (lossless
    /// with respect to the source), otherwise the packed pixels encoded at --jpeg-quality
    /// (lossy; with --lossless stored with zstd instead): the smallest packs. Views with transparency are stored as PNG. Masks and
    /// depth planes are always lossless (PNG).
    Jpeg,
}

impl Codec {
    pub fn id(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Zstd => 1,
            Codec::Png => 2,
            Codec::Jpeg => 3,
        }
    }

    pub fn from_id(id: u8) -> Option<Codec> {
        match id {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::Png),
            3 => Some(Codec::Jpeg),
            _ => None,
        }
    }
}

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    View,
    Points,
}

impl RecordKind {
    pub fn id(self) -> u8 {
        match self {
            RecordKind::View => 1,
            RecordKind::Points => 2,
        }
    }

    pub fn from_id(id: u8) -> Option<RecordKind> {
        match id {
            1 => Some(RecordKind::View),
            2 => Some(RecordKind::Points),
            _ => None,
        }
    }
}

/// A 64-bit xxh3 checksum, written as 16 hex digits in JSON.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Checksum(pub u64);

impl fmt::Debug for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for Checksum {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Checksum {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(&s, 16)
            .map(Checksum)
            .map_err(|_| serde::de::Error::custom(format!("checksum {s:?} is not 16 hex digits")))
    }
}

/// Where a record lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRef {
    pub shard: u32,
    /// Offset of the record header (a multiple of [`PAGE`]).
    pub offset: u64,
    pub stored_len: u64,
    pub decoded_len: u64,
    pub checksum: Checksum,
}

/// One view in the manifest: everything needed to schedule and render it without touching
/// the shards.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewEntry {
    pub name: String,
    /// Pinhole camera of the stored (undistorted, possibly downscaled) pixels.
    pub camera: Camera,
    pub split: Split,
    pub codec: Codec,
    pub record: RecordRef,
    /// The pixels are RGBA8 ([`VIEW_FLAG_ALPHA`]); absent (RGB8) in manifests of RGB views.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alpha: bool,
    /// A loss mask follows the pixels ([`VIEW_FLAG_MASK`]); absent in manifests of views
    /// without one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mask: bool,
    /// An inverse-depth plane follows ([`VIEW_FLAG_DEPTH`]), mapped to the training target by
    /// this; absent in manifests of views without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<DepthScale>,
    /// How many of the plane's pixels hold a depth (not [`DepthScale::NO_DEPTH`]), at the
    /// stored size: with [`SourceInfo::sfm_depths`], the number of SfM points the view keeps
    /// and the divisor of its depth loss at any training resolution. Absent without a plane,
    /// and in packs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth_pixels: Option<u64>,
    /// How a view stored as JPEG was made and what decoding it allocates: present exactly when
    /// `codec` is [`Codec::Jpeg`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jpeg: Option<JpegEntry>,
}

/// The manifest's account of one view stored as JPEG.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JpegEntry {
    /// `None`: the source file's compressed data, metadata removed, whose decode is exactly the
    /// view's pixels; `Some(q)`: the packed pixels encoded at quality `q` (lossy).
    pub quality: Option<u8>,
    /// Bytes the decoder allocates besides the output ([`jpeg::decode_scratch`]); the loader's
    /// memory plan reserves the largest for each worker.
    pub decode_scratch: u64,
}

impl ViewEntry {
    /// The layout of the view's decoded bytes.
    pub fn layout(&self) -> PixelLayout {
        PixelLayout {
            alpha: self.alpha,
            mask: self.mask,
            depth: self.depth.is_some(),
        }
    }

    /// Bytes per pixel of the colour part: 4 with alpha, else 3.
    pub fn channels(&self) -> usize {
        self.layout().channels()
    }

    pub fn width(&self) -> u32 {
        self.camera.width
    }

    pub fn height(&self) -> u32 {
        self.camera.height
    }

    /// Bytes of the decoded view ([`ViewEntry::layout`]: colour, then the mask and the
    /// inverse-depth plane if any).
    pub fn decoded_len(&self) -> usize {
        self.record.decoded_len as usize
    }
}

/// One chunk of a point cloud.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkEntry {
    pub points: u32,
    pub record: RecordRef,
}

/// A point cloud: SfM points ("sfm") or one scan of a point-cloud dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CloudEntry {
    pub name: String,
    pub points: u64,
    pub has_labels: bool,
    pub has_normals: bool,
    /// Axis-aligned bounds of the points (min, max); zeros for an empty cloud.
    pub bounds: [[f32; 3]; 2],
    pub chunks: Vec<ChunkEntry>,
}

/// A sealed shard file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub file: String,
    pub bytes: u64,
    pub records: u64,
    pub checksum: Checksum,
}

/// Scene-level numbers derived at pack time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SceneInfo {
    /// Mean of the view camera centres.
    pub camera_centroid: [f64; 3],
    /// 1.1 × the largest distance of a camera centre from the centroid (the original 3DGS
    /// "cameras_extent"); used to scale learning rates and densification thresholds.
    pub extent: f64,
    /// Whether the dataset had no SfM points at all (training starts from random points).
    pub no_sfm_points: bool,
}

/// Where the pack came from (informational; never used to locate data).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub path: String,
    pub format: Format,
    /// Frames listed by the dataset whose images were missing and skipped.
    pub missing_images: Vec<String>,
    /// The `--max-width` / `--downscale` / `--test-every` settings used.
    pub max_width: Option<u32>,
    pub downscale: Option<u32>,
    pub test_every: Option<u32>,
    /// The `--images` folder of a COLMAP conversion, when not the default `images/`. Absent in
    /// packs written without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<String>,
    /// The `--depths` folder the inverse-depth maps came from. Absent in packs without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depths: Option<String>,
    /// The views' inverse-depth planes are *sparse* (`gs-pack convert --sfm-depths`): each
    /// holds, at the pixel where it projects, the inverse depth of every SfM point its image
    /// observes (its track in the COLMAP model), the nearest point where several share a
    /// pixel, and no depth ([`DepthScale::NO_DEPTH`]) everywhere else. The trainer then
    /// averages the depth loss over those pixels instead of every pixel (gsplat's
    /// `--depth_loss`), and a loader that resizes the plane keeps points instead of averaging
    /// ([`crate::resample::point_row_u16`]). Absent (false) in packs of dense maps or none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sfm_depths: bool,
    /// The `--points` cloud that replaced the dataset's own points. Absent in packs without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<String>,
    /// The `--points-transform` applied to those points (or to a converted point cloud), as
    /// the 3×4 matrix `[A | t]` row by row, inverted already under
    /// `--invert-points-transform`. Absent in packs without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points_transform: Option<[[f64; 4]; 3]>,
}

impl SourceInfo {
    /// A pack written by a program rather than converted from a dataset (benchmarks, tests,
    /// the demo): `path` says which; no conversion settings, nothing missing.
    pub fn generated(path: &str) -> SourceInfo {
        SourceInfo {
            path: path.into(),
            format: Format::Auto,
            missing_images: vec![],
            max_width: None,
            downscale: None,
            test_every: None,
            images: None,
            depths: None,
            sfm_depths: false,
            points: None,
            points_transform: None,
        }
    }
}

/// The pack's table of contents, `manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always "ramsplat-pack".
    pub format: String,
    pub version: u32,
    /// Random id shared with every shard header of this pack (detects mixed-up shards).
    pub pack_id: Checksum,
    pub created_by: String,
    pub source: SourceInfo,
    pub scene: SceneInfo,
    pub shards: Vec<ShardEntry>,
    pub views: Vec<ViewEntry>,
    pub clouds: Vec<CloudEntry>,
}

impl Manifest {
    pub const FORMAT: &'static str = "ramsplat-pack";

    /// The clouds training starts from (the one named "sfm", or every cloud when none has that
    /// name) and their total point count.
    pub fn sfm_clouds(&self) -> (Vec<usize>, u64) {
        let has_sfm = self.clouds.iter().any(|c| c.name == "sfm");
        let clouds: Vec<usize> = (0..self.clouds.len())
            .filter(|&c| !has_sfm || self.clouds[c].name == "sfm")
            .collect();
        let total = clouds.iter().map(|&c| self.clouds[c].points).sum();
        (clouds, total)
    }

    /// A fingerprint (xxh3-64, hex) of everything training reads from the pack: every view's
    /// name, camera, split and stored-record checksum and length, every point chunk's checksum,
    /// and the scene numbers; not the random `pack_id`, the shard layout, the creation tool or
    /// the source path. Conversion is deterministic, so re-converting the same source with the
    /// same options gives the same fingerprint, and a checkpoint made on the old pack can be
    /// resumed on the new one (see `train::checkpoint::StateMeta::pack_content`).
    pub fn content_fingerprint(&self) -> String {
        let views: Vec<_> = self
            .views
            .iter()
            .map(|v| {
                (
                    &v.name,
                    &v.camera,
                    v.split,
                    v.record.checksum.0,
                    v.record.decoded_len,
                )
            })
            .collect();
        let clouds: Vec<_> = self
            .clouds
            .iter()
            .map(|c| {
                let chunks: Vec<_> = c
                    .chunks
                    .iter()
                    .map(|k| (k.points, k.record.checksum.0))
                    .collect();
                (&c.name, c.points, c.has_labels, c.has_normals, chunks)
            })
            .collect();
        let json =
            serde_json::to_vec(&(views, clouds, &self.scene)).expect("manifest content serialises");
        format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&json))
    }

    /// Indices of views in `split`, in pack order.
    pub fn split_indices(&self, split: Split) -> Vec<usize> {
        self.views
            .iter()
            .enumerate()
            .filter(|(_, v)| v.split == split)
            .map(|(i, _)| i)
            .collect()
    }

    /// Sum of decoded bytes of every view and point chunk.
    pub fn decoded_bytes(&self) -> u64 {
        let views: u64 = self.views.iter().map(|v| v.record.decoded_len).sum();
        let points: u64 = self
            .clouds
            .iter()
            .flat_map(|c| &c.chunks)
            .map(|c| c.record.decoded_len)
            .sum();
        views + points
    }

    /// Bytes of all shard files.
    pub fn bytes_on_disk(&self) -> u64 {
        self.shards.iter().map(|s| s.bytes).sum()
    }

    /// Largest decoded view in bytes (sizes the prefetch ring's slots).
    pub fn max_view_bytes(&self) -> usize {
        self.views
            .iter()
            .map(|v| v.decoded_len())
            .max()
            .unwrap_or(0)
    }

    /// Pixels of the largest view (whatever its channels).
    pub fn max_view_pixels(&self) -> u64 {
        self.views
            .iter()
            .map(|v| v.width() as u64 * v.height() as u64)
            .max()
            .unwrap_or(0)
    }

    /// Whether any view was packed with alpha (the trainer then holds a composited RGB8
    /// copy of the step's view).
    pub fn has_alpha(&self) -> bool {
        self.views.iter().any(|v| v.alpha)
    }

    /// Whether any view carries a loss mask.
    pub fn has_masks(&self) -> bool {
        self.views.iter().any(|v| v.mask)
    }

    /// Whether any view carries an inverse-depth plane.
    pub fn has_depths(&self) -> bool {
        self.views.iter().any(|v| v.depth.is_some())
    }

    /// Largest decoded point chunk in bytes.
    pub fn max_chunk_bytes(&self) -> usize {
        self.clouds
            .iter()
            .flat_map(|c| &c.chunks)
            .map(|c| c.record.decoded_len as usize)
            .max()
            .unwrap_or(0)
    }
}

/// Byte offsets of the parts of a decoded point chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointChunkLayout {
    pub points: usize,
    pub rgb_offset: usize,
    pub labels_offset: Option<usize>,
    pub normals_offset: Option<usize>,
    pub total: usize,
}

impl PointChunkLayout {
    pub fn new(points: usize, has_labels: bool, has_normals: bool) -> PointChunkLayout {
        let rgb_offset = points * 12;
        let mut end = (rgb_offset + points * 3).next_multiple_of(4);
        let labels_offset = has_labels.then(|| {
            let o = end;
            end += points * 4;
            o
        });
        let normals_offset = has_normals.then(|| {
            let o = end;
            end += points * 12;
            o
        });
        PointChunkLayout {
            points,
            rgb_offset,
            labels_offset,
            normals_offset,
            total: end,
        }
    }
}

/// Read-only typed access to a decoded point chunk.
#[derive(Clone, Copy, Debug)]
pub struct PointChunkRef<'a> {
    pub layout: PointChunkLayout,
    pub bytes: &'a [u8],
}

fn f32_at(b: &[u8], o: usize) -> f32 {
    f32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

impl<'a> PointChunkRef<'a> {
    /// `bytes` must be at least `layout.total` long.
    pub fn new(layout: PointChunkLayout, bytes: &'a [u8]) -> Option<PointChunkRef<'a>> {
        (bytes.len() >= layout.total).then_some(PointChunkRef { layout, bytes })
    }

    pub fn len(&self) -> usize {
        self.layout.points
    }

    pub fn is_empty(&self) -> bool {
        self.layout.points == 0
    }

    pub fn xyz(&self, i: usize) -> [f32; 3] {
        let o = i * 12;
        [
            f32_at(self.bytes, o),
            f32_at(self.bytes, o + 4),
            f32_at(self.bytes, o + 8),
        ]
    }

    pub fn rgb(&self, i: usize) -> [u8; 3] {
        let o = self.layout.rgb_offset + i * 3;
        [self.bytes[o], self.bytes[o + 1], self.bytes[o + 2]]
    }

    pub fn label(&self, i: usize) -> Option<i32> {
        self.layout.labels_offset.map(|base| {
            let o = base + i * 4;
            i32::from_le_bytes([
                self.bytes[o],
                self.bytes[o + 1],
                self.bytes[o + 2],
                self.bytes[o + 3],
            ])
        })
    }

    pub fn normal(&self, i: usize) -> Option<[f32; 3]> {
        self.layout.normals_offset.map(|base| {
            let o = base + i * 12;
            [
                f32_at(self.bytes, o),
                f32_at(self.bytes, o + 4),
                f32_at(self.bytes, o + 8),
            ]
        })
    }

    /// Copies the chunk into owned vectors.
    pub fn to_chunk(&self) -> crate::dataset::PointChunk {
        let n = self.len();
        crate::dataset::PointChunk {
            xyz: (0..n).map(|i| self.xyz(i)).collect(),
            rgb: (0..n).map(|i| self.rgb(i)).collect(),
            labels: self
                .layout
                .labels_offset
                .map(|_| (0..n).map(|i| self.label(i).unwrap_or(0)).collect()),
            normals: self
                .layout
                .normals_offset
                .map(|_| (0..n).map(|i| self.normal(i).unwrap_or([0.0; 3])).collect()),
        }
    }
}

/// Shard and manifest errors. Each names the pack file and, where known, the record.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a ramsplat pack (no {MANIFEST_FILE}); create one with `gs-pack convert`", path.display())]
    NotAPack { path: PathBuf },
    #[error("{}: invalid manifest: {msg}", path.display())]
    BadManifest { path: PathBuf, msg: String },
    #[error(
        "{}: pack format version {found} is newer than this ramsplat supports ({FORMAT_VERSION}); upgrade ramsplat",
        path.display()
    )]
    TooNew { path: PathBuf, found: u32 },
    #[error(
        "{}: pack format version {found} is older than this ramsplat reads ({OLDEST_FORMAT_VERSION}); re-pack the dataset with `gs-pack convert --force`",
        path.display()
    )]
    TooOld { path: PathBuf, found: u32 },
    #[error("{}: {what}: {msg}; the pack is damaged, re-create it with `gs-pack convert --force`", path.display())]
    Corrupt {
        path: PathBuf,
        /// "header", "record 12 at byte 49152 (view 'IMG_3.jpg')", "footer", ...
        what: String,
        msg: String,
    },
    #[error("{}: record at byte {offset} (view {view:?}): decoding failed: {msg}", path.display())]
    Decode {
        path: PathBuf,
        offset: u64,
        view: String,
        msg: String,
    },
    #[error("output buffer of {got} bytes cannot hold the {want} decoded bytes of {what}")]
    BufferSize {
        what: String,
        want: usize,
        got: usize,
    },
    #[error("{what} index {index} is out of range (pack has {len})")]
    OutOfRange {
        what: &'static str,
        index: usize,
        len: usize,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_format_from_a_later_build_still_reads() {
        let with = |format: &str| {
            format!(
                r#"{{"path":"/d","format":"{format}","missing_images":[],"max_width":null,"downscale":null,"test_every":8}}"#
            )
        };
        // Every format this build writes reads back as itself.
        for f in [Format::Colmap, Format::Nerf, Format::Las, Format::E57] {
            let json = serde_json::to_string(&f).unwrap();
            let s: SourceInfo = serde_json::from_str(&with(json.trim_matches('"'))).unwrap();
            assert_eq!(s.format, f);
        }
        // One it does not know is recorded as `Other`, and the manifest still opens.
        let s: SourceInfo = serde_json::from_str(&with("gaussian-zip")).unwrap();
        assert_eq!((s.format, s.test_every), (Format::Other, Some(8)));
    }

    #[test]
    fn point_layout_offsets() {
        let l = PointChunkLayout::new(3, true, true);
        assert_eq!(l.rgb_offset, 36);
        assert_eq!(l.labels_offset, Some(48)); // 36 + 9 = 45, padded to 48
        assert_eq!(l.normals_offset, Some(60));
        assert_eq!(l.total, 96);
        let plain = PointChunkLayout::new(4, false, false);
        assert_eq!(
            (plain.labels_offset, plain.normals_offset, plain.total),
            (None, None, 60)
        );
    }

    #[test]
    fn checksum_serialises_as_hex() {
        let s = serde_json::to_string(&Checksum(0xdead_beef)).unwrap();
        assert_eq!(s, "\"00000000deadbeef\"");
        let back: Checksum = serde_json::from_str(&s).unwrap();
        assert_eq!(back, Checksum(0xdead_beef));
        assert!(serde_json::from_str::<Checksum>("\"xyz\"").is_err());
    }
}
