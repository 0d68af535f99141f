//! Writes packs: encodes records, appends them page-aligned to shards, seals shards and the
//! manifest with write-to-temp + fsync + rename.
//!
//! A [`PackWriter`] builds the whole pack inside a hidden temporary directory next to the
//! destination (`.NAME.partial-PID`), so nothing at the destination path changes until
//! [`PackWriter::finish`] has fsynced every shard and the manifest and renamed the directory into
//! place. Dropping a writer without finishing removes the temporary directory; a killed process
//! leaves only the hidden `.partial` directory, which never looks like a pack (it has no
//! manifest until the very end, and it is not at the destination path), and which the next
//! convert into the same destination removes once its process is gone.
//!
//! Installation never destroys anything but an old pack: the final rename refuses an existing
//! destination ([`crate::fsutil::rename_noreplace`]), so a folder or file that appears at the
//! destination during the run survives and, of two concurrent converts into one new
//! destination, exactly one succeeds. `--force` replaces only a directory that
//! [`check_replaceable_pack`] recognises, by an atomic exchange; the old pack is deleted only
//! after the new one is in place. A destination that is an empty directory when the writer
//! starts (`mkdir out && gs-pack convert … -o out`) is taken without `--force`: it is removed
//! just before the final rename, by `rmdir`, which refuses a directory that is no longer empty,
//! so a file put there during the run survives and the convert is refused as raced.
//!
//! Encoding is split from writing ([`encode_view`] is a pure function), so the pack pipeline can
//! encode views on several threads and append them in order on one. [`encode_view_as`] is the
//! whole of it: under [`Codec::Jpeg`] it keeps a source JPEG only when the kept bytes decode to
//! exactly the view's pixels (see [`super::jpeg`]). The shards' format version follows the
//! writer's codec ([`super::format_version_for`]): 2 for JPEG packs, 1 otherwise.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::{
    format_version_for, jpeg, shard_file_name, Checksum, ChunkEntry, CloudEntry, Codec, DepthScale,
    JpegEntry, Manifest, PixelLayout, PointChunkLayout, RecordKind, RecordRef, SceneInfo,
    ShardEntry, ShardError, SourceInfo, Split, ViewEntry, FOOTER_MAGIC, MANIFEST_FILE, PAGE,
    POINTS_PER_CHUNK, RECORD_HEADER_LEN, RECORD_MAGIC, SHARD_MAGIC,
};
use crate::dataset::{PointChunk, PointSource};
use crate::scene::camera::Camera;

/// Default zstd level: level 3 (zstd's own default) compresses RGB8 photos within a few percent
/// of level 9 at several times the speed; decode speed barely depends on the level.
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

/// Default `--jpeg-quality`: at 95 with full-resolution chroma the encoding error is far
/// below what a trained model reproduces (the test
/// `reencoded_jpeg_views_stay_close_to_their_pixels` bounds it), at a fraction of zstd's size.
pub const DEFAULT_JPEG_QUALITY: u8 = 95;

/// Default shard size (`--shard-size`): large enough that a pack of thousands of views has
/// tens of files, small enough that a damaged shard loses little.
pub const DEFAULT_SHARD_SIZE: u64 = 512 << 20;

#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// A new shard is started when the current one would grow past this many bytes.
    pub shard_size: u64,
    pub codec: Codec,
    pub zstd_level: i32,
    /// Quality (1 to 100) of views [`Codec::Jpeg`] encodes rather than keeps.
    pub jpeg_quality: u8,
    /// Under [`Codec::Jpeg`], store views that cannot keep their source JPEG with zstd.
    pub lossless: bool,
    /// Replace an existing pack at the destination.
    pub force: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            shard_size: DEFAULT_SHARD_SIZE,
            codec: Codec::Zstd,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            jpeg_quality: DEFAULT_JPEG_QUALITY,
            lossless: false,
            force: false,
        }
    }
}

/// Errors of the pack writer beyond shard I/O.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error("point cloud {name:?}: {msg}")]
    BadCloud { name: String, msg: String },
    #[error("{}: already exists; pass --force to replace it", path.display())]
    Exists { path: PathBuf },
    /// `--force` only ever replaces a ramsplat pack.
    #[error(
        "{}: {what}, not a ramsplat pack; --force only replaces a pack (manifest.json and \
         shard-*.gss files), so nothing was changed: choose another -o or move it away",
        path.display()
    )]
    NotAPack { path: PathBuf, what: String },
    /// Something appeared at the destination while the pack was being written.
    #[error(
        "{}: was created by someone else while this pack was being written; it was left \
         untouched and this pack was discarded (run again with another -o, or --force if it \
         is a pack to replace)",
        path.display()
    )]
    Raced { path: PathBuf },
    #[error("view {name:?}: {msg}")]
    BadView { name: String, msg: String },
    #[error("the dataset is empty: no views and no points to pack")]
    Empty,
}

/// What [`PackWriter::add_cloud`] can fail with: the writer's own error, or the point source's
/// error unchanged (the writer knows nothing of where points come from).
#[derive(Debug, thiserror::Error)]
pub enum CloudError<E> {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error(transparent)]
    Source(E),
}

/// A source that cannot fail has only the writer's errors.
impl From<CloudError<std::convert::Infallible>> for WriteError {
    fn from(e: CloudError<std::convert::Infallible>) -> WriteError {
        match e {
            CloudError::Write(w) => w,
            CloudError::Source(never) => match never {},
        }
    }
}

/// A view encoded and checksummed, ready to append.
#[derive(Clone, Debug)]
pub struct EncodedView {
    pub name: String,
    pub camera: Camera,
    pub split: Split,
    pub codec: Codec,
    pub payload: Vec<u8>,
    pub decoded_len: u64,
    pub checksum: Checksum,
    /// How the decoded bytes are laid out.
    pub layout: PixelLayout,
    /// How the inverse-depth plane's values map to the training target: `Some` exactly when
    /// `layout.depth` (the manifest's [`ViewEntry::depth`]).
    pub depth: Option<DepthScale>,
    /// The plane's pixels that hold a depth: `Some` exactly when `layout.depth` (the
    /// manifest's [`ViewEntry::depth_pixels`]).
    pub depth_pixels: Option<u64>,
    /// `Some` exactly when `codec` is [`Codec::Jpeg`] (the manifest's [`ViewEntry::jpeg`]).
    pub jpeg: Option<JpegEntry>,
}

/// Encodes RGB8 pixels of `camera.width × camera.height` with `codec`. Pure and thread-safe.
/// See [`encode_view_pixels`] for RGBA8 and masks.
pub fn encode_view(
    name: &str,
    camera: &Camera,
    split: Split,
    rgb8: &[u8],
    codec: Codec,
    zstd_level: i32,
) -> Result<EncodedView, WriteError> {
    encode_view_pixels(
        name,
        camera,
        split,
        rgb8,
        PixelLayout::RGB,
        codec,
        zstd_level,
    )
}

/// Encodes the decoded bytes of a `camera.width × camera.height` view laid out as `layout`
/// says (RGB8 or straight-alpha RGBA8, then the loss mask if any) with `codec`. Pure and
/// thread-safe. A layout with an inverse-depth plane needs its [`DepthScale`]: see
/// [`encode_view_depth`].
pub fn encode_view_pixels(
    name: &str,
    camera: &Camera,
    split: Split,
    bytes: &[u8],
    layout: PixelLayout,
    codec: Codec,
    zstd_level: i32,
) -> Result<EncodedView, WriteError> {
    encode_view_depth(name, camera, split, bytes, layout, None, codec, zstd_level)
}

/// [`encode_view_pixels`] of any layout: `depth` is the [`DepthScale`] of the inverse-depth
/// plane, given exactly when `layout.depth` (the plane is `camera.width × camera.height`
/// little-endian u16 after the colour and the mask). Pure and thread-safe. [`Codec::Jpeg`]
/// encodes at [`DEFAULT_JPEG_QUALITY`]; see [`encode_view_as`] for the other settings.
#[allow(clippy::too_many_arguments)]
pub fn encode_view_depth(
    name: &str,
    camera: &Camera,
    split: Split,
    bytes: &[u8],
    layout: PixelLayout,
    depth: Option<DepthScale>,
    codec: Codec,
    zstd_level: i32,
) -> Result<EncodedView, WriteError> {
    let options = WriterOptions {
        codec,
        zstd_level,
        ..Default::default()
    };
    encode_view_as(name, camera, split, bytes, layout, depth, &options, None)
}

/// [`encode_view_depth`] with every setting, and for [`Codec::Jpeg`] the view's source file
/// (`source_jpeg`, its bytes as read, when it is a JPEG): its compressed data is kept (metadata
/// removed, [`jpeg::strip`]) when decoding the kept bytes gives exactly the view's pixels, and
/// the pixels are encoded at `options.jpeg_quality` otherwise, or with `options.lossless`
/// stored with zstd (only the encoding options are read). A view with transparency is stored as PNG under [`Codec::Jpeg`] (JPEG
/// has no alpha channel). Pure and thread-safe.
#[allow(clippy::too_many_arguments)]
pub fn encode_view_as(
    name: &str,
    camera: &Camera,
    split: Split,
    bytes: &[u8],
    layout: PixelLayout,
    depth: Option<DepthScale>,
    options: &WriterOptions,
    source_jpeg: Option<&[u8]>,
) -> Result<EncodedView, WriteError> {
    let bad = |msg: String| WriteError::BadView {
        name: name.to_owned(),
        msg,
    };
    camera
        .validate()
        .map_err(|e| bad(format!("invalid camera: {e}")))?;
    match depth {
        _ if layout.depth != depth.is_some() => {
            return Err(bad(format!(
                "the layout {} {}",
                layout.describe(),
                if layout.depth {
                    "has an inverse-depth plane but no depth scale was given"
                } else {
                    "has no inverse-depth plane but a depth scale was given"
                }
            )))
        }
        Some(d) if !(d.scale.is_finite() && d.offset.is_finite()) => {
            return Err(bad(format!(
                "the depth scale {} and offset {} must be finite",
                d.scale, d.offset
            )))
        }
        _ => {}
    }
    let Some(planes) = layout.planes(bytes, camera.width, camera.height) else {
        return Err(bad(format!(
            "{} bytes given, {}x{} {} needs {}",
            bytes.len(),
            camera.width,
            camera.height,
            layout.describe(),
            layout.len(camera.width, camera.height)
        )));
    };
    let depth_pixels = planes.depth.map(|plane| {
        plane
            .chunks_exact(2)
            .filter(|b| u16::from_le_bytes([b[0], b[1]]) != DepthScale::NO_DEPTH)
            .count() as u64
    });
    let kept = match (options.codec, source_jpeg) {
        (Codec::Jpeg, Some(source)) if !layout.alpha => {
            keep_source_jpeg(source, camera, planes.pixels)
        }
        _ => None,
    };
    let codec = match options.codec {
        Codec::Jpeg if layout.alpha => Codec::Png,
        Codec::Jpeg if kept.is_none() && options.lossless => Codec::Zstd,
        c => c,
    };
    let png = |data: &[u8], colour: image::ExtendedColorType, out: &mut Vec<u8>| {
        let enc = image::codecs::png::PngEncoder::new(out);
        image::ImageEncoder::write_image(enc, data, camera.width, camera.height, colour)
            .map_err(|e| bad(format!("png: {e}")))
    };
    let colour = if layout.alpha {
        image::ExtendedColorType::Rgba8
    } else {
        image::ExtendedColorType::Rgb8
    };
    let mut jpeg_entry = None;
    let payload = match codec {
        Codec::Raw => bytes.to_vec(),
        Codec::Zstd => zstd::bulk::compress(bytes, options.zstd_level)
            .map_err(|e| bad(format!("zstd: {e}")))?,
        Codec::Png | Codec::Jpeg => {
            let mut parts = Vec::with_capacity(3);
            if codec == Codec::Png {
                let mut out = Vec::new();
                png(planes.pixels, colour, &mut out)?;
                parts.push(out);
            } else {
                let (frame, data, quality) = match kept {
                    Some((frame, kept)) => (frame, kept, None),
                    None => {
                        let q = options.jpeg_quality;
                        let data = jpeg::encode_rgb(planes.pixels, camera.width, camera.height, q)
                            .map_err(|e| bad(format!("jpeg: {e}")))?;
                        let frame = jpeg::frame(&data)
                            .map_err(|e| bad(format!("the JPEG encoder's output: {e}")))?;
                        (frame, data, Some(q))
                    }
                };
                jpeg_entry = Some(JpegEntry {
                    quality,
                    decode_scratch: jpeg::decode_scratch(&frame),
                });
                parts.push(data);
            }
            // Masks and depth planes are always lossless PNG.
            if let Some(mask) = planes.mask {
                let mut out = Vec::new();
                png(mask, image::ExtendedColorType::L8, &mut out)?;
                parts.push(out);
            }
            if let Some(plane) = planes.depth {
                // The PNG encoder takes 16-bit samples in native byte order.
                let depth_ne: Vec<u8> = plane
                    .chunks_exact(2)
                    .flat_map(|b| u16::from_le_bytes([b[0], b[1]]).to_ne_bytes())
                    .collect();
                let mut out = Vec::new();
                png(&depth_ne, image::ExtendedColorType::L16, &mut out)?;
                parts.push(out);
            }
            // Each part but the last is preceded by its u32 length: colour[, mask][, depth].
            // Colour alone and colour + mask are framed as before depth planes existed.
            let last = parts.len() - 1;
            let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 4).sum());
            for (k, part) in parts.iter().enumerate() {
                if k < last {
                    let n = u32::try_from(part.len())
                        .map_err(|_| bad("a part of the view exceeds 4 GiB".into()))?;
                    out.extend_from_slice(&n.to_le_bytes());
                }
                out.extend_from_slice(part);
            }
            out
        }
    };
    let checksum = Checksum(xxh3_64(&payload));
    Ok(EncodedView {
        name: name.to_owned(),
        camera: *camera,
        split,
        codec,
        payload,
        decoded_len: bytes.len() as u64,
        checksum,
        layout,
        depth,
        depth_pixels,
        jpeg: jpeg_entry,
    })
}

/// `source`'s compressed data without metadata ([`jpeg::strip`]) and its frame, when decoding
/// it gives exactly `pixels` (RGB8 of `camera`'s size): the view was packed as the file
/// decodes, with no undistortion, resize or orientation applied.
fn keep_source_jpeg(
    source: &[u8],
    camera: &Camera,
    pixels: &[u8],
) -> Option<(jpeg::Frame, Vec<u8>)> {
    let (frame, kept) = jpeg::strip(source).ok()?;
    if (frame.width, frame.height) != (camera.width, camera.height)
        || !matches!(frame.sampling.len(), 1 | 3)
    {
        return None;
    }
    let mut decoded = vec![0u8; pixels.len()];
    jpeg::decode_rgb_into(
        &kept,
        camera.width,
        camera.height,
        jpeg::decode_scratch(&frame),
        &mut decoded,
    )
    .ok()?;
    (decoded == pixels).then_some((frame, kept))
}

/// Serialises a point chunk into the decoded layout of the format spec.
pub fn point_chunk_bytes(chunk: &PointChunk) -> (PointChunkLayout, Vec<u8>) {
    let n = chunk.len();
    let layout = PointChunkLayout::new(n, chunk.labels.is_some(), chunk.normals.is_some());
    let mut out = vec![0u8; layout.total];
    for (i, p) in chunk.xyz.iter().enumerate() {
        for (k, v) in p.iter().enumerate() {
            out[i * 12 + k * 4..i * 12 + k * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
    }
    for (i, c) in chunk.rgb.iter().enumerate() {
        out[layout.rgb_offset + i * 3..layout.rgb_offset + i * 3 + 3].copy_from_slice(c);
    }
    if let (Some(base), Some(labels)) = (layout.labels_offset, &chunk.labels) {
        for (i, l) in labels.iter().enumerate() {
            out[base + i * 4..base + i * 4 + 4].copy_from_slice(&l.to_le_bytes());
        }
    }
    if let (Some(base), Some(normals)) = (layout.normals_offset, &chunk.normals) {
        for (i, p) in normals.iter().enumerate() {
            for (k, v) in p.iter().enumerate() {
                out[base + i * 12 + k * 4..base + i * 12 + k * 4 + 4]
                    .copy_from_slice(&v.to_le_bytes());
            }
        }
    }
    (layout, out)
}

/// Fields of a record header that vary (see the format spec in the module above).
struct RecordHeader {
    kind: RecordKind,
    codec: u8,
    flags: u16,
    item: u32,
    group: u32,
    a: u32,
    b: u32,
    stored_len: u64,
    decoded_len: u64,
    checksum: u64,
}

impl RecordHeader {
    fn encode(&self) -> [u8; RECORD_HEADER_LEN as usize] {
        let mut h = [0u8; RECORD_HEADER_LEN as usize];
        h[0..4].copy_from_slice(&RECORD_MAGIC);
        h[4] = self.kind.id();
        h[5] = self.codec;
        h[6..8].copy_from_slice(&self.flags.to_le_bytes());
        h[8..12].copy_from_slice(&self.item.to_le_bytes());
        h[12..16].copy_from_slice(&self.group.to_le_bytes());
        h[16..20].copy_from_slice(&self.a.to_le_bytes());
        h[20..24].copy_from_slice(&self.b.to_le_bytes());
        h[24..32].copy_from_slice(&self.stored_len.to_le_bytes());
        h[32..40].copy_from_slice(&self.decoded_len.to_le_bytes());
        h[40..48].copy_from_slice(&self.checksum.to_le_bytes());
        let hc = xxh3_64(&h[0..56]);
        h[56..64].copy_from_slice(&hc.to_le_bytes());
        h
    }
}

/// The shard being written.
struct OpenShard {
    index: u32,
    partial: PathBuf,
    file: BufWriter<File>,
    hasher: Xxh3,
    pos: u64,
    offsets: Vec<u64>,
}

impl OpenShard {
    fn create(dir: &Path, index: u32, pack_id: u64, version: u32) -> Result<OpenShard, ShardError> {
        let partial = dir.join(format!("{}.partial", shard_file_name(index)));
        let file = File::create(&partial).map_err(|e| io_err(&partial, e))?;
        let mut shard = OpenShard {
            index,
            partial,
            file: BufWriter::with_capacity(1 << 20, file),
            hasher: Xxh3::new(),
            pos: 0,
            offsets: Vec::new(),
        };
        let mut header = vec![0u8; PAGE as usize];
        header[0..8].copy_from_slice(&SHARD_MAGIC);
        header[8..12].copy_from_slice(&version.to_le_bytes());
        header[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        header[16..20].copy_from_slice(&index.to_le_bytes());
        header[24..32].copy_from_slice(&pack_id.to_le_bytes());
        let hc = xxh3_64(&header[0..32]);
        header[32..40].copy_from_slice(&hc.to_le_bytes());
        shard.write(&header)?;
        Ok(shard)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ShardError> {
        self.file
            .write_all(bytes)
            .map_err(|e| io_err(&self.partial, e))?;
        self.hasher.update(bytes);
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn pad_to_page(&mut self) -> Result<(), ShardError> {
        const ZEROS: [u8; PAGE as usize] = [0; PAGE as usize];
        let pad = self.pos.next_multiple_of(PAGE) - self.pos;
        self.write(&ZEROS[..pad as usize])
    }

    /// Appends one record; returns its offset.
    fn append(&mut self, header: &RecordHeader, payload: &[u8]) -> Result<u64, ShardError> {
        debug_assert!(self.pos.is_multiple_of(PAGE));
        let offset = self.pos;
        self.write(&header.encode())?;
        self.write(payload)?;
        self.pad_to_page()?;
        self.offsets.push(offset);
        Ok(offset)
    }

    /// Writes the table and footer, fsyncs and renames the file to its final name.
    fn seal(mut self, dir: &Path) -> Result<ShardEntry, ShardError> {
        let table_offset = self.pos;
        let mut table = Vec::with_capacity(self.offsets.len() * 8);
        for o in &self.offsets {
            table.extend_from_slice(&o.to_le_bytes());
        }
        self.write(&table)?;
        let checksum = self.hasher.digest();
        let mut footer = [0u8; 32];
        footer[0..8].copy_from_slice(&FOOTER_MAGIC);
        footer[8..16].copy_from_slice(&table_offset.to_le_bytes());
        footer[16..24].copy_from_slice(&(self.offsets.len() as u64).to_le_bytes());
        footer[24..32].copy_from_slice(&checksum.to_le_bytes());
        self.file
            .write_all(&footer)
            .map_err(|e| io_err(&self.partial, e))?;
        let bytes = self.pos + footer.len() as u64;
        let file = self
            .file
            .into_inner()
            .map_err(|e| io_err(&self.partial, e.into_error()))?;
        file.sync_all().map_err(|e| io_err(&self.partial, e))?;
        drop(file);
        let name = shard_file_name(self.index);
        let fin = dir.join(&name);
        crate::fsutil::install(&self.partial, &fin).map_err(|e| io_err(&fin, e))?;
        Ok(ShardEntry {
            file: name,
            bytes,
            records: self.offsets.len() as u64,
            checksum: Checksum(checksum),
        })
    }
}

fn io_err(path: &Path, source: std::io::Error) -> ShardError {
    ShardError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Builds a pack. See the module doc for the crash-safety contract.
pub struct PackWriter {
    dest: PathBuf,
    tmp: PathBuf,
    options: WriterOptions,
    pack_id: u64,
    shard: Option<OpenShard>,
    shards: Vec<ShardEntry>,
    views: Vec<ViewEntry>,
    names: std::collections::HashSet<String>,
    clouds: Vec<CloudEntry>,
    /// `dest` was an empty directory at [`PackWriter::create`]: [`PackWriter::install`] removes
    /// it (only while still empty) to put the pack in its place.
    fill_empty: bool,
    finished: bool,
}

impl PackWriter {
    /// Starts a pack at `dest`. Fails if `dest` exists, unless it is an empty directory or
    /// `options.force` is set (then it must be a pack: [`check_replaceable_pack`]).
    pub fn create(dest: &Path, options: &WriterOptions) -> Result<PackWriter, WriteError> {
        let mut fill_empty = false;
        match fs::symlink_metadata(dest) {
            // A real directory (not a link to one) with nothing in it: nothing to lose.
            Ok(m)
                if m.is_dir()
                    && fs::read_dir(dest)
                        .map_err(|e| io_err(dest, e))?
                        .next()
                        .is_none() =>
            {
                fill_empty = true;
            }
            Ok(_) if !options.force => {
                return Err(WriteError::Exists {
                    path: dest.to_owned(),
                })
            }
            Ok(_) => check_replaceable_pack(dest)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(dest, e).into()),
        }
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(|e| io_err(&parent, e))?;
        let file_name = dest
            .file_name()
            .ok_or_else(|| io_err(dest, std::io::Error::other("destination has no file name")))?;
        let tmp = parent.join(format!(
            ".{}.partial-{}",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        remove_stale_partials(&parent, &file_name.to_string_lossy());
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
        }
        fs::create_dir(&tmp).map_err(|e| io_err(&tmp, e))?;
        // The pack id only has to differ between packs; time, pid and the destination path make
        // collisions between two packs a reader could confuse practically impossible.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let pack_id =
            xxh3_64(format!("{now}-{}-{}", std::process::id(), dest.display()).as_bytes());
        Ok(PackWriter {
            dest: dest.to_owned(),
            tmp,
            options: options.clone(),
            pack_id,
            shard: None,
            shards: Vec::new(),
            views: Vec::new(),
            names: Default::default(),
            clouds: Vec::new(),
            fill_empty,
            finished: false,
        })
    }

    pub fn options(&self) -> &WriterOptions {
        &self.options
    }

    /// Number of views appended so far.
    pub fn view_count(&self) -> usize {
        self.views.len()
    }

    /// Encodes and appends one view (RGB8, `camera.width × camera.height`).
    pub fn add_view(
        &mut self,
        name: &str,
        camera: &Camera,
        split: Split,
        rgb8: &[u8],
    ) -> Result<(), WriteError> {
        let v = encode_view(
            name,
            camera,
            split,
            rgb8,
            self.options.codec,
            self.options.zstd_level,
        )?;
        self.add_encoded_view(v)
    }

    /// Appends a view encoded by [`encode_view`].
    pub fn add_encoded_view(&mut self, v: EncodedView) -> Result<(), WriteError> {
        if !self.names.insert(v.name.clone()) {
            return Err(WriteError::BadView {
                name: v.name,
                msg: "a view with this name was already packed (names must be unique)".into(),
            });
        }
        if v.layout.depth != v.depth.is_some() || v.layout.depth != v.depth_pixels.is_some() {
            return Err(WriteError::BadView {
                name: v.name,
                msg: "an inverse-depth plane needs its depth scale and pixel count, and only it \
                      has them"
                    .into(),
            });
        }
        if (v.codec == Codec::Jpeg) != v.jpeg.is_some()
            || (v.codec == Codec::Jpeg && format_version_for(self.options.codec) < 2)
        {
            return Err(WriteError::BadView {
                name: v.name,
                msg: "a JPEG view needs its JPEG entry and a pack written with codec jpeg".into(),
            });
        }
        let index = self.views.len() as u32;
        let header = RecordHeader {
            kind: RecordKind::View,
            codec: v.codec.id(),
            flags: v.layout.flags(),
            item: index,
            group: 0,
            a: v.camera.width,
            b: v.camera.height,
            stored_len: v.payload.len() as u64,
            decoded_len: v.decoded_len,
            checksum: v.checksum.0,
        };
        let record = self.append(&header, &v.payload)?;
        self.views.push(ViewEntry {
            name: v.name,
            camera: v.camera,
            split: v.split,
            codec: v.codec,
            record,
            alpha: v.layout.alpha,
            mask: v.layout.mask,
            depth: v.depth,
            depth_pixels: v.depth_pixels,
            jpeg: v.jpeg,
        });
        Ok(())
    }

    /// Streams a point cloud into chunk records of [`POINTS_PER_CHUNK`] points.
    pub fn add_cloud<S: PointSource + ?Sized>(
        &mut self,
        source: &mut S,
    ) -> Result<&CloudEntry, CloudError<S::Error>> {
        let cloud_index = self.clouds.len() as u32;
        let mut entry = CloudEntry {
            name: source.name().to_owned(),
            points: 0,
            has_labels: source.has_labels(),
            has_normals: source.has_normals(),
            bounds: [[f32::INFINITY; 3], [f32::NEG_INFINITY; 3]],
            chunks: Vec::new(),
        };
        while let Some(chunk) = source
            .next_chunk(POINTS_PER_CHUNK)
            .map_err(CloudError::Source)?
        {
            if chunk.is_empty() {
                continue;
            }
            let consistent = chunk.is_consistent()
                && chunk.labels.is_some() == entry.has_labels
                && chunk.normals.is_some() == entry.has_normals;
            if !consistent {
                return Err(WriteError::BadCloud {
                    name: entry.name,
                    msg: "the point source produced a chunk with mismatched attribute arrays"
                        .into(),
                }
                .into());
            }
            for p in &chunk.xyz {
                for (k, &v) in p.iter().enumerate() {
                    entry.bounds[0][k] = entry.bounds[0][k].min(v);
                    entry.bounds[1][k] = entry.bounds[1][k].max(v);
                }
            }
            let (layout, bytes) = point_chunk_bytes(&chunk);
            // Level 3: points are a small fraction of a pack; speed matters more than ratio.
            let payload = zstd::bulk::compress(&bytes, DEFAULT_ZSTD_LEVEL)
                .map_err(|e| WriteError::from(io_err(Path::new(&entry.name), e)))?;
            let header = RecordHeader {
                kind: RecordKind::Points,
                codec: Codec::Zstd.id(),
                flags: u16::from(entry.has_labels) | (u16::from(entry.has_normals) << 1),
                item: entry.chunks.len() as u32,
                group: cloud_index,
                a: layout.points as u32,
                b: 0,
                stored_len: payload.len() as u64,
                decoded_len: layout.total as u64,
                checksum: xxh3_64(&payload),
            };
            let record = self.append(&header, &payload)?;
            entry.points += chunk.len() as u64;
            entry.chunks.push(ChunkEntry {
                points: chunk.len() as u32,
                record,
            });
        }
        if entry.points == 0 {
            entry.bounds = [[0.0; 3]; 2];
        }
        self.clouds.push(entry);
        Ok(self.clouds.last().expect("just pushed"))
    }

    fn append(&mut self, header: &RecordHeader, payload: &[u8]) -> Result<RecordRef, WriteError> {
        let record_bytes = (RECORD_HEADER_LEN + payload.len() as u64).next_multiple_of(PAGE);
        let roll = self.shard.as_ref().is_some_and(|s| {
            !s.offsets.is_empty() && s.pos + record_bytes > self.options.shard_size
        });
        if roll {
            let s = self.shard.take().expect("checked above");
            self.shards.push(s.seal(&self.tmp)?);
        }
        if self.shard.is_none() {
            self.shard = Some(OpenShard::create(
                &self.tmp,
                self.shards.len() as u32,
                self.pack_id,
                format_version_for(self.options.codec),
            )?);
        }
        let shard = self.shard.as_mut().expect("created above");
        let offset = shard.append(header, payload)?;
        Ok(RecordRef {
            shard: shard.index,
            offset,
            stored_len: header.stored_len,
            decoded_len: header.decoded_len,
            checksum: Checksum(header.checksum),
        })
    }

    /// Seals the last shard, writes the manifest and moves the pack into place.
    pub fn finish(mut self, source: SourceInfo) -> Result<Manifest, WriteError> {
        if self.views.is_empty() && self.clouds.iter().all(|c| c.points == 0) {
            return Err(WriteError::Empty);
        }
        if let Some(s) = self.shard.take() {
            self.shards.push(s.seal(&self.tmp)?);
        }
        let no_sfm_points = self.clouds.is_empty() || self.clouds.iter().all(|c| c.points == 0);
        let manifest = Manifest {
            format: Manifest::FORMAT.to_owned(),
            version: format_version_for(self.options.codec),
            pack_id: Checksum(self.pack_id),
            created_by: format!("ramsplat {}", env!("CARGO_PKG_VERSION")),
            source,
            scene: scene_info(&self.views, no_sfm_points),
            shards: std::mem::take(&mut self.shards),
            views: std::mem::take(&mut self.views),
            clouds: std::mem::take(&mut self.clouds),
        };
        let path = self.tmp.join(MANIFEST_FILE);
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| io_err(&path, e.into()))?;
        write_synced(&path, &json)?;
        sync_dir(&self.tmp)?;
        self.install()?;
        if let Some(parent) = self.dest.parent() {
            // Make the rename durable; failure here is not worth losing a complete pack over.
            let _ = sync_dir(if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            });
        }
        self.finished = true;
        Ok(manifest)
    }

    /// Moves the finished temporary directory to `dest` without ever replacing something that
    /// is not a pack (see the module doc).
    fn install(&mut self) -> Result<(), WriteError> {
        if self.fill_empty {
            // `rmdir` removes the directory only while it is empty; if something was put there
            // during the run it stays, and the rename below finds it (raced, or with `--force`
            // the pack check refuses it).
            match fs::remove_dir(&self.dest) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::DirectoryNotEmpty | std::io::ErrorKind::NotADirectory
                    ) || e.raw_os_error() == Some(libc::EEXIST) => {}
                Err(e) => return Err(io_err(&self.dest, e).into()),
            }
        }
        match crate::fsutil::rename_noreplace(&self.tmp, &self.dest) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => {}
            Err(e) => return Err(io_err(&self.dest, e).into()),
        }
        if !self.options.force {
            // Free at `create`, taken now: someone else's; never touch it.
            return Err(WriteError::Raced {
                path: self.dest.clone(),
            });
        }
        check_replaceable_pack(&self.dest)?;
        match crate::fsutil::exchange(&self.tmp, &self.dest) {
            Ok(()) => {
                // `tmp` now holds what was at `dest`. It was a pack a moment ago; if it was
                // swapped for something else in between, put it back.
                if let Err(e) = check_replaceable_pack(&self.tmp) {
                    let _ = crate::fsutil::exchange(&self.tmp, &self.dest);
                    return Err(e);
                }
                fs::remove_dir_all(&self.tmp).map_err(|e| io_err(&self.tmp, e))?;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                // No atomic exchange: move the old pack aside, install, then delete the old one;
                // on failure the old pack goes back.
                // `.NAME.partial-PID.old`: hidden, per process, removed below or, if this
                // process dies first, by the next convert into the same destination.
                let mut trash = self.tmp.clone().into_os_string();
                trash.push(".old");
                let trash = PathBuf::from(trash);
                crate::fsutil::install(&self.dest, &trash).map_err(|e| io_err(&self.dest, e))?;
                if let Err(e) = crate::fsutil::rename_noreplace(&self.tmp, &self.dest) {
                    let _ = crate::fsutil::rename_noreplace(&trash, &self.dest);
                    return Err(io_err(&self.dest, e).into());
                }
                fs::remove_dir_all(&trash).map_err(|e| io_err(&trash, e))?;
                Ok(())
            }
            Err(e) => Err(io_err(&self.dest, e).into()),
        }
    }
}

/// Succeeds only if `path` is a directory holding nothing but a ramsplat pack: `manifest.json`
/// (whose `format` is [`Manifest::FORMAT`]) and/or `shard-NNNNN.gss` files that start with the
/// shard magic, and at least one of them. A damaged pack (bad checksums, unparsable manifest but
/// intact shard magic) still counts, so that re-converting it with `--force` works; a directory
/// holding any other file, a symlink or a regular file never does.
pub fn check_replaceable_pack(path: &Path) -> Result<(), WriteError> {
    let not = |what: String| {
        Err(WriteError::NotAPack {
            path: path.to_owned(),
            what,
        })
    };
    let meta = fs::symlink_metadata(path).map_err(|e| io_err(path, e))?;
    if meta.file_type().is_symlink() {
        return not("a symbolic link".into());
    }
    if !meta.is_dir() {
        return not("a regular file".into());
    }
    let mut manifest_ok = false;
    let mut shards = 0usize;
    for entry in fs::read_dir(path).map_err(|e| io_err(path, e))? {
        let entry = entry.map_err(|e| io_err(path, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ft = entry.file_type().map_err(|e| io_err(&entry.path(), e))?;
        let is_shard_name = name.len() == "shard-00000.gss".len()
            && name.starts_with("shard-")
            && name.ends_with(".gss")
            && name[6..11].bytes().all(|b| b.is_ascii_digit());
        if ft.is_file() && name == MANIFEST_FILE {
            let format = fs::read(entry.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| v.get("format").and_then(|f| f.as_str()).map(str::to_owned));
            manifest_ok = format.as_deref() == Some(Manifest::FORMAT);
        } else if ft.is_file() && is_shard_name {
            let mut magic = [0u8; 8];
            let ok = File::open(entry.path())
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
                .is_ok()
                && magic == SHARD_MAGIC;
            if !ok {
                return not(format!("a directory whose {name} is not a ramsplat shard"));
            }
            shards += 1;
        } else {
            return not(format!(
                "a directory holding {name:?}, which no ramsplat pack contains"
            ));
        }
    }
    if !manifest_ok && shards == 0 {
        return not("a directory without a ramsplat manifest.json or shard".into());
    }
    Ok(())
}

/// Removes `.NAME.partial-PID` directories (and `.old` siblings) next to the destination whose
/// process no longer runs: leftovers of a killed convert (or `gs-pack export`) into the same
/// destination.
pub(crate) fn remove_stale_partials(parent: &Path, file_name: &str) {
    let prefix = format!(".{file_name}.partial-");
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else {
            continue;
        };
        let pid = rest.strip_suffix(".old").unwrap_or(rest);
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks whether `pid` exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    true
}

impl Drop for PackWriter {
    fn drop(&mut self) {
        if !self.finished {
            // An abandoned pack leaves nothing behind; errors here have no one to report to.
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Camera centroid and the original 3DGS extent (1.1 × max distance from the centroid).
fn scene_info(views: &[ViewEntry], no_sfm_points: bool) -> SceneInfo {
    let n = views.len().max(1) as f64;
    let mut c = [0.0; 3];
    for v in views {
        let p = v.camera.centre();
        for k in 0..3 {
            c[k] += p[k] / n;
        }
    }
    let max_d = views
        .iter()
        .map(|v| {
            let p = v.camera.centre();
            ((p[0] - c[0]).powi(2) + (p[1] - c[1]).powi(2) + (p[2] - c[2]).powi(2)).sqrt()
        })
        .fold(0.0, f64::max);
    SceneInfo {
        camera_centroid: c,
        extent: 1.1 * max_d,
        no_sfm_points,
    }
}

/// Writes `bytes` to `path` atomically ([`crate::fsutil::write_atomic`]).
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ShardError> {
    crate::fsutil::write_atomic(path, bytes).map_err(|e| io_err(path, e))
}

fn sync_dir(dir: &Path) -> Result<(), ShardError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}
