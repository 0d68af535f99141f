//! Reads packs: the only module that maps files (memmap2), always read-only.
//!
//! [`Pack::open`] parses and cross-checks `manifest.json`, maps every shard and checks each
//! shard's header and footer; it touches no record payload. [`Pack::read_view_into`] and
//! [`Pack::read_chunk_into`] check one record's header and payload checksum, decode it into a
//! caller-owned buffer and then drop the record's pages from this process's mapping
//! (`madvise(MADV_DONTNEED)`), so reading a dataset many times larger than RAM leaves the
//! resident set where it was: file pages count in RSS while mapped and touched, and without
//! the release they would accumulate up to the whole dataset (the page cache itself is the
//! kernel's and is not charged to the process).
//!
//! Why mmap + release rather than `pread` into an owned buffer: the compressed bytes are used
//! once, straight from the mapping, so no per-worker staging buffer of the largest record's
//! size is needed; both keep RSS bounded by the records being decoded at that moment. A
//! consumer only ever receives decoded *copies*, never a handle into the mapping.
//!
//! # Views at another size
//! [`Pack::resized`] presents a pack's views at a run's resolution (`gs-train -r 2`): the
//! manifest it shows holds each view's camera and decoded length at that size, and
//! [`Pack::read_view_into`] decodes the stored view into a scratch buffer of the stored size
//! and resamples it into the caller's buffer ([`resample_view`], the packer's area filter and
//! its alpha and mask rules, from [`crate::resample`]). Every consumer of the manifest (the
//! loader, the memory plan, evaluation, initialisation) then sees one consistent, smaller
//! pack; the stored entries stay behind it for the checks and for
//! [`Pack::content_fingerprint`], which names the pack on disk whatever size it is read at.
//!
//! Invariant relied upon by every `unsafe` here: shards are immutable once sealed (written to a
//! temporary name, fsynced, renamed) and ramsplat never opens them for writing. Another program
//! truncating or rewriting a shard while it is mapped is outside that contract (as for any
//! mmap reader, e.g. ripgrep); `verify` detects a file changed between runs.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, UncheckedAdvice};

use xxhash_rust::xxh3::xxh3_64;

use crate::resample::{
    area_row_u16, area_row_u8, point_row_u16, premultiply, target_size, unpremultiply, AxisTaps,
    DepthRule, Resize, MASK_USED_MIN,
};

use super::{
    Checksum, Codec, Manifest, PixelLayout, PointChunkLayout, RecordKind, RecordRef, ShardError,
    ViewEntry, FOOTER_LEN, FOOTER_MAGIC, FORMAT_VERSION, MANIFEST_FILE, OLDEST_FORMAT_VERSION,
    PAGE, RECORD_HEADER_LEN, RECORD_MAGIC, SHARD_MAGIC,
};

/// The widest aligned window a read fault on a file mapping can map at once: fault-around maps
/// the already-cached pages of a 64 KiB window (the default `fault_around_bytes`), and a large
/// folio of the page cache is mapped whole, up to a PMD (2 MiB on x86-64). Measured: reading
/// each record of a 4.9 MB pack once, releasing only the records' own pages, left 2.7 MB of
/// neighbours mapped (Linux 6.18, ext4); releasing these windows leaves none.
pub const FAULT_AROUND: u64 = 2 << 20;

/// Largest manifest accepted (a pack of 100k views has a manifest of ~60 MB).
const MAX_MANIFEST_BYTES: u64 = 1 << 30;

struct Shard {
    path: PathBuf,
    map: Mmap,
}

/// An open, read-only pack. `Send + Sync`: share it as `Arc<Pack>` between loader workers.
pub struct Pack {
    dir: PathBuf,
    /// The manifest as presented: the stored one, with views at [`Pack::resized`]'s size.
    manifest: Manifest,
    shards: Vec<Shard>,
    /// Set when some view is presented at another size than stored.
    resized: Option<Resized>,
}

/// What [`Pack::resized`] keeps of the stored manifest.
struct Resized {
    resize: Resize,
    /// The stored entry of every view (index = view index).
    views: Vec<ViewEntry>,
    /// The stored manifest's [`Manifest::content_fingerprint`].
    fingerprint: String,
}

/// A record header as read back from a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeaderInfo {
    pub kind: RecordKind,
    pub codec: u8,
    pub flags: u16,
    pub item: u32,
    pub group: u32,
    pub a: u32,
    pub b: u32,
    pub stored_len: u64,
    pub decoded_len: u64,
    pub checksum: u64,
}

/// What `verify` checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub shards: usize,
    pub records: u64,
    pub bytes: u64,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

thread_local! {
    /// One zstd decompression context per thread, reused: creating one per record would churn
    /// ~100 KiB allocations that glibc may keep resident.
    static DCTX: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

fn zstd_decode(src: &[u8], dst: &mut [u8]) -> Result<usize, String> {
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        ctx.decompress(dst, src)
            .map_err(|code| zstd::zstd_safe::get_error_name(code).to_owned())
    })
}

impl Pack {
    /// Opens the pack at `dir`: reads the manifest, maps and checks every shard's header/footer.
    pub fn open(dir: &Path) -> Result<Pack, ShardError> {
        let mpath = dir.join(MANIFEST_FILE);
        let io = |p: &Path, e: std::io::Error| ShardError::Io {
            path: p.to_owned(),
            source: e,
        };
        // A manifest that is a directory or a pipe is named for what it is (a pipe must not
        // be opened blocking: that waits for a writer forever).
        if !crate::fsutil::file_exists(&mpath).map_err(|e| io(&mpath, e))? {
            return Err(ShardError::NotAPack {
                path: dir.to_owned(),
            });
        }
        let len = std::fs::metadata(&mpath).map_err(|e| io(&mpath, e))?.len();
        if len > MAX_MANIFEST_BYTES {
            return Err(ShardError::BadManifest {
                path: mpath,
                msg: format!("{len} bytes is larger than any manifest ramsplat writes"),
            });
        }
        let bytes = crate::fsutil::read_file(&mpath).map_err(|e| io(&mpath, e))?;
        // Check the version before the schema, so a newer pack gets the "upgrade" message
        // rather than a schema error.
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| ShardError::BadManifest {
                path: mpath.clone(),
                msg: e.to_string(),
            })?;
        if value.get("format").and_then(|f| f.as_str()) != Some(Manifest::FORMAT) {
            return Err(ShardError::BadManifest {
                path: mpath,
                msg: format!("\"format\" is not {:?}", Manifest::FORMAT),
            });
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v > FORMAT_VERSION as u64 => {
                return Err(ShardError::TooNew {
                    path: mpath,
                    found: v.min(u32::MAX as u64) as u32,
                })
            }
            Some(v) if v < OLDEST_FORMAT_VERSION as u64 => {
                return Err(ShardError::TooOld {
                    path: mpath,
                    found: v as u32,
                })
            }
            Some(_) => {}
            None => {
                return Err(ShardError::BadManifest {
                    path: mpath,
                    msg: "missing \"version\"".into(),
                })
            }
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| ShardError::BadManifest {
                path: mpath.clone(),
                msg: e.to_string(),
            })?;
        let mut shards = Vec::with_capacity(manifest.shards.len());
        for (i, entry) in manifest.shards.iter().enumerate() {
            let path = dir.join(&entry.file);
            // The kind of file first, from its metadata: opening a pipe would block.
            let meta = std::fs::metadata(&path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    // A shard the manifest lists is gone: damage, not an I/O hiccup.
                    ShardError::Corrupt {
                        path: path.clone(),
                        what: format!("shard {i}"),
                        msg: format!(
                            "missing: the manifest lists {:?} ({} bytes) but there is no such file",
                            entry.file, entry.bytes
                        ),
                    }
                } else {
                    io(&path, e)
                }
            })?;
            if let Some(kind) = crate::fsutil::not_a_file(&meta) {
                return Err(ShardError::Corrupt {
                    path,
                    what: format!("shard {i}"),
                    msg: format!(
                        "{kind}, where the manifest lists {:?}, a file of {} bytes",
                        entry.file, entry.bytes
                    ),
                });
            }
            let file = crate::fsutil::open_file(&path).map_err(|e| io(&path, e))?;
            let flen = file.metadata().map_err(|e| io(&path, e))?.len();
            if flen != entry.bytes {
                return Err(ShardError::Corrupt {
                    path,
                    what: "file".into(),
                    msg: format!(
                        "{flen} bytes, the manifest says {} (truncated or replaced?)",
                        entry.bytes
                    ),
                });
            }
            // SAFETY: the file is opened read-only and shards are immutable once sealed (module
            // doc); we never create a mutable view of the mapping.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| io(&path, e))?;
            let shard = Shard { path, map };
            check_shard_frame(&shard, i as u32, manifest.pack_id.0, entry.records)?;
            shards.push(shard);
        }
        let pack = Pack {
            dir: dir.to_owned(),
            manifest,
            shards,
            resized: None,
        };
        pack.check_manifest_refs()?;
        Ok(pack)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// This pack with its views presented at `resize` (see the module doc): views that
    /// `resize` makes smaller get the camera and decoded length of that size, and are
    /// resampled as they are read; the others are read as stored. Clouds are unchanged.
    pub fn resized(mut self, resize: Resize) -> Pack {
        if let Some(r) = self.resized.take() {
            // Resizing a resized pack starts again from the stored views.
            self.manifest.views = r.views;
        }
        let stored = self.manifest.views.clone();
        let mut changed = false;
        for v in &mut self.manifest.views {
            let (w, h) = target_size(v.width(), v.height(), resize);
            if (w, h) != (v.width(), v.height()) {
                v.camera = v.camera.resized(w, h);
                v.record.decoded_len = v.layout().len(w, h) as u64;
                changed = true;
            }
        }
        if changed {
            let fingerprint = Manifest {
                views: stored.clone(),
                ..self.manifest.clone()
            }
            .content_fingerprint();
            self.resized = Some(Resized {
                resize,
                views: stored,
                fingerprint,
            });
        }
        self
    }

    /// The resize [`Pack::resized`] applied (`Resize::None` when every view is read as
    /// stored).
    pub fn resize(&self) -> Resize {
        self.resized.as_ref().map_or(Resize::None, |r| r.resize)
    }

    /// View `index`'s entry as stored, whatever size it is presented at.
    pub fn stored_view(&self, index: usize) -> Option<&ViewEntry> {
        self.stored_views().get(index)
    }

    /// Every view's entry as stored.
    fn stored_views(&self) -> &[ViewEntry] {
        match &self.resized {
            Some(r) => &r.views,
            None => &self.manifest.views,
        }
    }

    /// [`Manifest::content_fingerprint`] of the pack as stored: the same whatever size its
    /// views are presented at (a run records the size in its own settings).
    pub fn content_fingerprint(&self) -> String {
        match &self.resized {
            Some(r) => r.fingerprint.clone(),
            None => self.manifest.content_fingerprint(),
        }
    }

    /// Bytes [`Pack::read_view_into`] allocates besides the caller's buffer while it reads view
    /// `index`: for a resampled view, the stored view decoded whole, the filter's taps and row
    /// accumulator ([`resample_heap_bytes`]); 0 for a view read as stored.
    pub fn resample_scratch(&self, index: usize) -> usize {
        match (self.stored_view(index), self.manifest.views.get(index)) {
            (Some(s), Some(v)) if s.record.decoded_len != v.record.decoded_len => {
                s.decoded_len()
                    + resample_heap_bytes(
                        v.layout(),
                        (s.width(), s.height()),
                        (v.width(), v.height()),
                    )
            }
            _ => 0,
        }
    }

    /// Bytes [`Pack::read_view_into`] allocates besides the caller's buffer while it reads
    /// view `index`, all told: the JPEG decoder's scratch of a view stored as JPEG (the bound
    /// the manifest records, [`super::JpegEntry::decode_scratch`]) and, for a view read at
    /// another size, [`Pack::resample_scratch`] (held at the same time).
    pub fn decode_scratch(&self, index: usize) -> usize {
        let jpeg = self
            .stored_view(index)
            .and_then(|s| s.jpeg)
            .map_or(0, |j| j.decode_scratch as usize);
        jpeg + self.resample_scratch(index)
    }

    /// The largest [`Pack::decode_scratch`] over views `indices`.
    pub fn max_decode_scratch(&self, indices: impl IntoIterator<Item = usize>) -> usize {
        indices
            .into_iter()
            .map(|i| self.decode_scratch(i))
            .max()
            .unwrap_or(0)
    }

    /// Bounds and camera checks of every record the manifest names (no payload access).
    fn check_manifest_refs(&self) -> Result<(), ShardError> {
        let mpath = self.dir.join(MANIFEST_FILE);
        let bad = |msg: String| ShardError::BadManifest {
            path: mpath.clone(),
            msg,
        };
        let refs = self
            .manifest
            .views
            .iter()
            .map(|v| (format!("view {:?}", v.name), &v.record))
            .chain(self.manifest.clouds.iter().flat_map(|c| {
                c.chunks
                    .iter()
                    .enumerate()
                    .map(move |(k, ch)| (format!("cloud {:?} chunk {k}", c.name), &ch.record))
            }));
        for (what, r) in refs {
            let shard = self.shards.get(r.shard as usize).ok_or_else(|| {
                bad(format!(
                    "{what} names shard {} of {}",
                    r.shard,
                    self.shards.len()
                ))
            })?;
            let end = r.offset.checked_add(RECORD_HEADER_LEN + r.stored_len);
            let limit = shard.map.len() as u64 - FOOTER_LEN;
            if !r.offset.is_multiple_of(PAGE) || r.offset < PAGE || end.is_none_or(|e| e > limit) {
                return Err(bad(format!(
                    "{what} has an out-of-range record at byte {}",
                    r.offset
                )));
            }
        }
        for (i, v) in self.manifest.views.iter().enumerate() {
            v.camera
                .validate()
                .map_err(|e| bad(format!("view {i} ({:?}): invalid camera: {e}", v.name)))?;
            if let Some(d) = v
                .depth
                .filter(|d| !(d.scale.is_finite() && d.offset.is_finite()))
            {
                return Err(bad(format!(
                    "view {i} ({:?}): depth scale {} and offset {} must be finite",
                    v.name, d.scale, d.offset
                )));
            }
            // A count of the plane's depths (the divisor of an SfM depth mean) belongs to a
            // plane and cannot exceed its pixels.
            if let Some(n) = v.depth_pixels {
                let pixels = v.camera.width as u64 * v.camera.height as u64;
                if v.depth.is_none() || n > pixels {
                    return Err(bad(format!(
                        "view {i} ({:?}): {n} depth pixels listed for {}",
                        v.name,
                        match v.depth {
                            None => "a view without an inverse-depth plane".to_owned(),
                            Some(_) => format!("a plane of {pixels} pixels"),
                        }
                    )));
                }
            }
            match (v.codec, v.jpeg) {
                (Codec::Jpeg, _) if self.manifest.version < 2 => {
                    return Err(bad(format!(
                        "view {i} ({:?}) is stored as JPEG, which format version {} packs do \
                         not hold",
                        v.name, self.manifest.version
                    )))
                }
                (Codec::Jpeg, _) if v.alpha => {
                    return Err(bad(format!(
                        "view {i} ({:?}) is stored as JPEG but has an alpha channel",
                        v.name
                    )))
                }
                (Codec::Jpeg, Some(j))
                    if j.decode_scratch
                        <= super::jpeg::max_decode_scratch(v.camera.width, v.camera.height) => {}
                (Codec::Jpeg, Some(j)) => {
                    return Err(bad(format!(
                        "view {i} ({:?}): a JPEG decode scratch of {} bytes is more than any \
                         {}x{} JPEG needs",
                        v.name, j.decode_scratch, v.camera.width, v.camera.height
                    )))
                }
                (Codec::Jpeg, None) => {
                    return Err(bad(format!(
                        "view {i} ({:?}) is stored as JPEG but has no \"jpeg\" entry",
                        v.name
                    )))
                }
                (_, Some(_)) => {
                    return Err(bad(format!(
                        "view {i} ({:?}) has a \"jpeg\" entry but is stored as {:?}",
                        v.name, v.codec
                    )))
                }
                (_, None) => {}
            }
            let want = v.layout().len(v.camera.width, v.camera.height) as u64;
            if v.record.decoded_len != want {
                return Err(bad(format!(
                    "view {i} ({:?}): decoded length {} does not match {}x{} {}",
                    v.name,
                    v.record.decoded_len,
                    v.camera.width,
                    v.camera.height,
                    v.layout().describe()
                )));
            }
        }
        for c in &self.manifest.clouds {
            for ch in &c.chunks {
                let want = PointChunkLayout::new(ch.points as usize, c.has_labels, c.has_normals)
                    .total as u64;
                if ch.record.decoded_len != want {
                    return Err(bad(format!(
                        "cloud {:?}: chunk decoded length disagrees with its point count",
                        c.name
                    )));
                }
            }
        }
        Ok(())
    }

    fn corrupt(&self, r: &RecordRef, what: &str, msg: impl Into<String>) -> ShardError {
        ShardError::Corrupt {
            path: self.shards[r.shard as usize].path.clone(),
            what: format!("record at byte {} ({what})", r.offset),
            msg: msg.into(),
        }
    }

    /// Checks the header and payload checksum of a record and returns its payload.
    fn checked_payload(
        &self,
        r: &RecordRef,
        what: &str,
    ) -> Result<(RecordHeaderInfo, &[u8]), ShardError> {
        let map = &self.shards[r.shard as usize].map;
        let start = r.offset as usize;
        let hdr = &map[start..start + RECORD_HEADER_LEN as usize];
        let info = parse_record_header(hdr).map_err(|m| self.corrupt(r, what, m))?;
        if info.checksum != r.checksum.0 {
            return Err(self.corrupt(
                r,
                what,
                format!(
                    "record header checksum {} does not match the {} in {MANIFEST_FILE}",
                    Checksum(info.checksum),
                    r.checksum
                ),
            ));
        }
        if info.stored_len != r.stored_len || info.decoded_len != r.decoded_len {
            return Err(self.corrupt(
                r,
                what,
                format!(
                    "record header says {} stored / {} decoded bytes, {MANIFEST_FILE} says {} / {}",
                    info.stored_len, info.decoded_len, r.stored_len, r.decoded_len
                ),
            ));
        }
        let payload = &map[start + RECORD_HEADER_LEN as usize
            ..start + (RECORD_HEADER_LEN + r.stored_len) as usize];
        let sum = xxh3_64(payload);
        if sum != r.checksum.0 {
            return Err(self.corrupt(
                r,
                what,
                format!(
                    "payload checksum {} does not match the stored {}",
                    Checksum(sum),
                    r.checksum
                ),
            ));
        }
        Ok((info, payload))
    }

    /// Drops the pages of a record from this process's resident set, together with the
    /// [`FAULT_AROUND`] windows at both ends: reading the record made the kernel map those
    /// neighbouring cached pages too, and left mapped they would add up, record by record, to
    /// a share of the whole pack that no budget item owns. A neighbour another worker is
    /// decoding meanwhile is only faulted in again (from the page cache).
    fn release(&self, r: &RecordRef) {
        let map = &self.shards[r.shard as usize].map;
        let base = map.as_ptr() as usize;
        let rec_start = r.offset as usize;
        let rec_end =
            rec_start + (RECORD_HEADER_LEN + r.stored_len).next_multiple_of(PAGE) as usize;
        let window = FAULT_AROUND as usize;
        // Fault-around windows are aligned in the address space; the map starts page-aligned.
        let start = ((base + rec_start) & !(window - 1)).max(base) - base;
        let end = ((base + rec_end).next_multiple_of(window) - base).min(map.len());
        // SAFETY: the mapping is a read-only MAP_SHARED map of an immutable file (module doc), so
        // MADV_DONTNEED cannot change what any reader observes: a later access (another worker
        // decoding a neighbouring record) re-reads the same bytes from the file. The range lies
        // inside the map and is page-aligned at its start (the map's start, or an address
        // aligned to the window, a multiple of the page size); no `&[u8]` into it outlives
        // this call's caller. Failure only means the pages stay resident a little longer.
        let _ =
            unsafe { map.unchecked_advise_range(UncheckedAdvice::DontNeed, start, end - start) };
    }

    /// Checks, decodes view `index` (its [`ViewEntry::layout`], `decoded_len` bytes, at the
    /// size the manifest presents: see [`Pack::resized`]) into `out` and releases the record's
    /// pages. `out.len()` must equal the view's decoded length.
    pub fn read_view_into(&self, index: usize, out: &mut [u8]) -> Result<(), ShardError> {
        let v = self
            .manifest
            .views
            .get(index)
            .ok_or(ShardError::OutOfRange {
                what: "view",
                index,
                len: self.manifest.views.len(),
            })?;
        if out.len() != v.decoded_len() {
            return Err(ShardError::BufferSize {
                what: format!("view {index} ({:?})", v.name),
                want: v.decoded_len(),
                got: out.len(),
            });
        }
        let stored = self.stored_view(index).expect("same views as the manifest");
        if stored.record.decoded_len == v.record.decoded_len {
            return self.read_stored_view_into(index, stored, out);
        }
        let mut full = vec![0u8; stored.decoded_len()];
        self.read_stored_view_into(index, stored, &mut full)?;
        // SfM depths are sparse points, which an area mean would erase.
        let depth_rule = if self.manifest.source.sfm_depths {
            DepthRule::Points
        } else {
            DepthRule::AreaMean
        };
        resample_view(
            v.layout(),
            depth_rule,
            (stored.width(), stored.height()),
            &mut full,
            (v.width(), v.height()),
            out,
        );
        Ok(())
    }

    /// The checked payload of view `index` (`v`, its stored entry): the checksums hold and the
    /// record header is this view's.
    fn view_payload(&self, index: usize, v: &ViewEntry, what: &str) -> Result<&[u8], ShardError> {
        let r = &v.record;
        let (info, payload) = self.checked_payload(r, what)?;
        if info.kind != RecordKind::View
            || info.item != index as u32
            || Codec::from_id(info.codec) != Some(v.codec)
            || PixelLayout::from_flags(info.flags) != Some(v.layout())
        {
            return Err(self.corrupt(r, what, "record is not this view"));
        }
        Ok(payload)
    }

    /// View `index` as stored, checked but not decoded: its record's payload (copied) with
    /// everything [`super::writer::PackWriter::add_encoded_view`] needs to write it into
    /// another pack unchanged (`gs-pack partition`). The record's pages are released.
    pub fn encoded_view(&self, index: usize) -> Result<super::writer::EncodedView, ShardError> {
        let v = self.stored_view(index).ok_or(ShardError::OutOfRange {
            what: "view",
            index,
            len: self.manifest.views.len(),
        })?;
        let r = &v.record;
        let what = format!("view {index} {:?}", v.name);
        let result = (|| {
            let payload = self.view_payload(index, v, &what)?;
            Ok(super::writer::EncodedView {
                name: v.name.clone(),
                camera: v.camera,
                split: v.split,
                codec: v.codec,
                payload: payload.to_vec(),
                decoded_len: r.decoded_len,
                checksum: r.checksum,
                layout: v.layout(),
                depth: v.depth,
                depth_pixels: v.depth_pixels,
                jpeg: v.jpeg,
            })
        })();
        self.release(r);
        result
    }

    /// [`Pack::read_view_into`] of view `index` as stored (`v`, its stored entry) into `out`
    /// of its stored decoded length.
    fn read_stored_view_into(
        &self,
        index: usize,
        v: &ViewEntry,
        out: &mut [u8],
    ) -> Result<(), ShardError> {
        let r = &v.record;
        let what = format!("view {index} {:?}", v.name);
        let result = (|| {
            let payload = self.view_payload(index, v, &what)?;
            let decode_err = |msg: String| ShardError::Decode {
                path: self.shards[r.shard as usize].path.clone(),
                offset: r.offset,
                view: v.name.clone(),
                msg,
            };
            match v.codec {
                Codec::Raw => out.copy_from_slice(payload),
                Codec::Zstd => {
                    let n = zstd_decode(payload, out).map_err(decode_err)?;
                    if n != out.len() {
                        return Err(decode_err(format!(
                            "{n} bytes decoded, {} expected",
                            out.len()
                        )));
                    }
                }
                Codec::Png | Codec::Jpeg => {
                    let layout = v.layout();
                    let (w, h) = (v.camera.width, v.camera.height);
                    let n = w as usize * h as usize;
                    let (pixels_out, rest) = out.split_at_mut(layout.pixel_bytes(w, h));
                    let (mask_out, depth_out) = rest.split_at_mut(if layout.mask { n } else { 0 });
                    // Each part but the last is preceded by its u32 length (see the module doc).
                    let count = 1 + usize::from(layout.mask) + usize::from(layout.depth);
                    let mut parts = Vec::with_capacity(count);
                    let mut rest = payload;
                    for _ in 1..count {
                        let len = rest
                            .get(..4)
                            .and_then(|b| <[u8; 4]>::try_from(b).ok())
                            .map(|b| u32::from_le_bytes(b) as usize)
                            .filter(|&len| len <= rest.len() - 4)
                            .ok_or_else(|| {
                                decode_err(format!(
                                    "the length of part {} of {count} is out of range",
                                    parts.len() + 1
                                ))
                            })?;
                        parts.push(&rest[4..4 + len]);
                        rest = &rest[4 + len..];
                    }
                    parts.push(rest);
                    if v.codec == Codec::Jpeg {
                        // check_manifest_refs made sure a JPEG view has its entry.
                        let scratch = v.jpeg.map_or(0, |j| j.decode_scratch);
                        super::jpeg::decode_rgb_into(parts[0], w, h, scratch, pixels_out)
                            .map_err(|e| decode_err(format!("JPEG: {e}")))?;
                    } else {
                        let colour = if layout.alpha {
                            image::ColorType::Rgba8
                        } else {
                            image::ColorType::Rgb8
                        };
                        decode_png(parts[0], w, h, colour, pixels_out).map_err(decode_err)?;
                    }
                    if layout.mask {
                        decode_png(parts[1], w, h, image::ColorType::L8, mask_out)
                            .map_err(decode_err)?;
                    }
                    if layout.depth {
                        decode_png(parts[count - 1], w, h, image::ColorType::L16, depth_out)
                            .map_err(decode_err)?;
                        // The decoder yields native-endian samples; the plane is little-endian.
                        for b in depth_out.chunks_exact_mut(2) {
                            let v = u16::from_ne_bytes([b[0], b[1]]);
                            b.copy_from_slice(&v.to_le_bytes());
                        }
                    }
                }
            }
            Ok(())
        })();
        self.release(r);
        result
    }

    /// Checks and decodes chunk `chunk` of cloud `cloud` into `out` (exactly its decoded
    /// length), releases its pages and returns the layout of the decoded bytes.
    pub fn read_chunk_into(
        &self,
        cloud: usize,
        chunk: usize,
        out: &mut [u8],
    ) -> Result<PointChunkLayout, ShardError> {
        let c = self
            .manifest
            .clouds
            .get(cloud)
            .ok_or(ShardError::OutOfRange {
                what: "cloud",
                index: cloud,
                len: self.manifest.clouds.len(),
            })?;
        let ch = c.chunks.get(chunk).ok_or(ShardError::OutOfRange {
            what: "chunk",
            index: chunk,
            len: c.chunks.len(),
        })?;
        let r = &ch.record;
        let layout = PointChunkLayout::new(ch.points as usize, c.has_labels, c.has_normals);
        if out.len() != layout.total {
            return Err(ShardError::BufferSize {
                what: format!("cloud {:?} chunk {chunk}", c.name),
                want: layout.total,
                got: out.len(),
            });
        }
        let what = format!("cloud {:?} chunk {chunk}", c.name);
        let result = (|| {
            let (info, payload) = self.checked_payload(r, &what)?;
            if info.kind != RecordKind::Points
                || info.item != chunk as u32
                || info.group != cloud as u32
            {
                return Err(self.corrupt(r, &what, "record is not this point chunk"));
            }
            let n = zstd_decode(payload, out).map_err(|m| self.corrupt(r, &what, m))?;
            if n != out.len() {
                return Err(self.corrupt(
                    r,
                    &what,
                    format!("{n} bytes decoded, {} expected", out.len()),
                ));
            }
            Ok(layout)
        })();
        self.release(r);
        result
    }

    /// Checks every checksum of every shard (headers, record headers and payloads, record
    /// tables, whole-shard checksums) and that the manifest agrees with the shards.
    /// `progress(done_bytes, total_bytes)` is called after each record.
    pub fn verify(&self, progress: &dyn Fn(u64, u64)) -> Result<VerifyReport, ShardError> {
        let total: u64 = self.shards.iter().map(|s| s.map.len() as u64).sum();
        let mut done = 0u64;
        let mut report = VerifyReport::default();
        let mut by_offset = std::collections::HashMap::new();
        // What the shards hold: the stored entries, whatever size the views are presented at.
        let views = self.stored_views();
        for (i, v) in views.iter().enumerate() {
            by_offset.insert(
                (v.record.shard, v.record.offset),
                (RecordKind::View, 0u32, i as u32),
            );
        }
        for (ci, c) in self.manifest.clouds.iter().enumerate() {
            for (k, ch) in c.chunks.iter().enumerate() {
                by_offset.insert(
                    (ch.record.shard, ch.record.offset),
                    (RecordKind::Points, ci as u32, k as u32),
                );
            }
        }
        for (si, (shard, entry)) in self.shards.iter().zip(&self.manifest.shards).enumerate() {
            let map = &shard.map[..];
            let corrupt = |what: String, msg: String| ShardError::Corrupt {
                path: shard.path.clone(),
                what,
                msg,
            };
            let footer = &map[map.len() - FOOTER_LEN as usize..];
            let body = &map[..map.len() - FOOTER_LEN as usize];
            let want = u64_at(footer, 24);
            // Record by record first, so a damaged record is named precisely; the whole-shard
            // checksum below then catches damage in padding or the table.
            let table_offset = u64_at(footer, 8) as usize;
            let count = u64_at(footer, 16) as usize;
            let table = &map[table_offset..table_offset + count * 8];
            for k in 0..count {
                let offset = u64_at(table, k * 8);
                let what = format!("record {k} at byte {offset}");
                if !offset.is_multiple_of(PAGE)
                    || offset < PAGE
                    || offset + RECORD_HEADER_LEN > table_offset as u64
                {
                    return Err(corrupt(what, "record table entry is out of range".into()));
                }
                let hdr = &map[offset as usize..(offset + RECORD_HEADER_LEN) as usize];
                let info = parse_record_header(hdr).map_err(|m| corrupt(what.clone(), m))?;
                let end = offset + RECORD_HEADER_LEN + info.stored_len;
                if end > table_offset as u64 {
                    return Err(corrupt(what, "payload runs past the record table".into()));
                }
                let payload = &map[(offset + RECORD_HEADER_LEN) as usize..end as usize];
                let sum = xxh3_64(payload);
                if sum != info.checksum {
                    return Err(corrupt(
                        what,
                        format!(
                            "payload checksum {} does not match the stored {}",
                            Checksum(sum),
                            Checksum(info.checksum)
                        ),
                    ));
                }
                let expected = by_offset.remove(&(si as u32, offset));
                let listed = match expected {
                    Some((RecordKind::View, _, i)) => Some(views[i as usize].record.checksum),
                    Some((RecordKind::Points, c, k)) => Some(
                        self.manifest.clouds[c as usize].chunks[k as usize]
                            .record
                            .checksum,
                    ),
                    None => None,
                };
                if let Some(listed) = listed.filter(|l| l.0 != info.checksum) {
                    return Err(corrupt(
                        what,
                        format!(
                            "payload checksum {} (as its record header also says) does not match the {listed} in {MANIFEST_FILE}",
                            Checksum(info.checksum)
                        ),
                    ));
                }
                let agrees = match expected {
                    Some((RecordKind::View, _, i)) => {
                        let v = &views[i as usize];
                        // The flags say which planes (alpha, mask, inverse depth) the
                        // payload holds; the manifest's entry must say the same.
                        info.kind == RecordKind::View
                            && info.item == i
                            && info.checksum == v.record.checksum.0
                            && info.stored_len == v.record.stored_len
                            && info.decoded_len == v.record.decoded_len
                            && Codec::from_id(info.codec) == Some(v.codec)
                            && PixelLayout::from_flags(info.flags) == Some(v.layout())
                            && (info.a, info.b) == (v.camera.width, v.camera.height)
                    }
                    Some((RecordKind::Points, c, k)) => {
                        let ch = &self.manifest.clouds[c as usize].chunks[k as usize];
                        info.kind == RecordKind::Points
                            && info.group == c
                            && info.item == k
                            && info.checksum == ch.record.checksum.0
                    }
                    None => false,
                };
                if !agrees {
                    return Err(corrupt(
                        what,
                        "record is not the one the manifest lists at this offset".into(),
                    ));
                }
                report.records += 1;
                done += end.next_multiple_of(PAGE) - offset;
                progress(done, total);
                let r = RecordRef {
                    shard: si as u32,
                    offset,
                    stored_len: info.stored_len,
                    decoded_len: info.decoded_len,
                    checksum: Checksum(info.checksum),
                };
                self.release(&r);
            }
            let sum = xxh3_64(body);
            if sum != want {
                return Err(corrupt(
                    "shard".into(),
                    format!(
                        "shard checksum {} does not match the {} stored in its footer (damage outside the records)",
                        Checksum(sum),
                        Checksum(want)
                    ),
                ));
            }
            if Checksum(sum) != entry.checksum {
                return Err(corrupt(
                    "shard".into(),
                    format!(
                        "shard checksum {} (as its footer also says) does not match the {} in {MANIFEST_FILE}",
                        Checksum(sum),
                        entry.checksum
                    ),
                ));
            }
            report.shards += 1;
            report.bytes += map.len() as u64;
            done = done.max(report.bytes);
            progress(done, total);
        }
        if let Some(((s, o), _)) = by_offset.into_iter().next() {
            return Err(ShardError::BadManifest {
                path: self.dir.join(MANIFEST_FILE),
                msg: format!(
                    "lists a record at shard {s} byte {o} that the shard's table does not have"
                ),
            });
        }
        Ok(report)
    }
}

/// Decodes a PNG that must hold a `width × height` image of `colour` into `out`.
fn decode_png(
    png: &[u8],
    width: u32,
    height: u32,
    colour: image::ColorType,
    out: &mut [u8],
) -> Result<(), String> {
    let dec = image::codecs::png::PngDecoder::new(std::io::Cursor::new(png))
        .map_err(|e| e.to_string())?;
    if image::ImageDecoder::dimensions(&dec) != (width, height)
        || image::ImageDecoder::color_type(&dec) != colour
    {
        return Err(format!(
            "PNG does not hold the view's {width}x{height} {colour:?}"
        ));
    }
    image::ImageDecoder::read_image(dec, out).map_err(|e| e.to_string())
}

fn parse_record_header(h: &[u8]) -> Result<RecordHeaderInfo, String> {
    if h[0..4] != RECORD_MAGIC {
        return Err("bad record magic".into());
    }
    let hc = xxh3_64(&h[0..56]);
    if hc != u64_at(h, 56) {
        return Err("record header checksum mismatch".into());
    }
    let kind = RecordKind::from_id(h[4]).ok_or_else(|| format!("unknown record kind {}", h[4]))?;
    Ok(RecordHeaderInfo {
        kind,
        codec: h[5],
        flags: u16::from_le_bytes([h[6], h[7]]),
        item: u32_at(h, 8),
        group: u32_at(h, 12),
        a: u32_at(h, 16),
        b: u32_at(h, 20),
        stored_len: u64_at(h, 24),
        decoded_len: u64_at(h, 32),
        checksum: u64_at(h, 40),
    })
}

/// Checks a shard's header page and footer (not its records).
fn check_shard_frame(
    shard: &Shard,
    index: u32,
    pack_id: u64,
    records: u64,
) -> Result<(), ShardError> {
    let map = &shard.map[..];
    let corrupt = |what: &str, msg: String| ShardError::Corrupt {
        path: shard.path.clone(),
        what: what.into(),
        msg,
    };
    if (map.len() as u64) < PAGE + FOOTER_LEN {
        return Err(corrupt(
            "file",
            format!("{} bytes is too short for a shard", map.len()),
        ));
    }
    if map[0..8] != SHARD_MAGIC {
        return Err(corrupt("header", "not a ramsplat shard (bad magic)".into()));
    }
    let version = u32_at(map, 8);
    // Integrity before the version: a flipped bit in the version field must read as damage,
    // not as "newer than this ramsplat supports".
    let stored = u64_at(map, 32);
    let computed = xxh3_64(&map[0..32]);
    if computed != stored {
        let hint = if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            format!(
                " (its version field reads {version}, this ramsplat reads {OLDEST_FORMAT_VERSION} \
                 to {FORMAT_VERSION})"
            )
        } else {
            String::new()
        };
        return Err(corrupt(
            "header",
            format!(
                "header checksum {} does not match the stored {}{hint}",
                Checksum(computed),
                Checksum(stored)
            ),
        ));
    }
    if version > FORMAT_VERSION {
        return Err(ShardError::TooNew {
            path: shard.path.clone(),
            found: version,
        });
    }
    if version < OLDEST_FORMAT_VERSION {
        return Err(ShardError::TooOld {
            path: shard.path.clone(),
            found: version,
        });
    }
    if u32_at(map, 12) as u64 != PAGE || u32_at(map, 16) != index {
        return Err(corrupt(
            "header",
            format!("page size or shard index differ from shard {index}"),
        ));
    }
    if u64_at(map, 24) != pack_id {
        return Err(corrupt(
            "header",
            "belongs to a different pack (pack id differs from the manifest)".into(),
        ));
    }
    let footer = &map[map.len() - FOOTER_LEN as usize..];
    if footer[0..8] != FOOTER_MAGIC {
        return Err(corrupt(
            "footer",
            "bad footer magic (truncated file?)".into(),
        ));
    }
    let table_offset = u64_at(footer, 8);
    let count = u64_at(footer, 16);
    let table_end = count
        .checked_mul(8)
        .and_then(|b| b.checked_add(table_offset));
    if count != records || table_offset < PAGE || table_end != Some(map.len() as u64 - FOOTER_LEN) {
        return Err(corrupt(
            "footer",
            "record table is inconsistent with the file size or the manifest".into(),
        ));
    }
    Ok(())
}

/// Heap bytes [`resample_view`] allocates (an upper bound): both axes' taps and one output
/// row's accumulator.
pub fn resample_heap_bytes(layout: PixelLayout, from: (u32, u32), to: (u32, u32)) -> usize {
    AxisTaps::heap_bytes(from.0, to.0)
        + AxisTaps::heap_bytes(from.1, to.1)
        + to.0 as usize * layout.channels() * std::mem::size_of::<f32>()
}

/// Resamples one decoded view of `layout` from `from` to `to` pixels (each side no larger)
/// into `out`, with the rules `gs-pack convert --downscale` packs by: colour by the area
/// filter (RGBA on premultiplied colour), the mask as coverage thresholded at
/// [`MASK_USED_MIN`], the inverse-depth plane by `depth`'s rule: a dense map by the area mean
/// of its stored values (no depth where any value it covers is a stored 0, as the packer's
/// filter rules), sparse points by keeping the nearest in each output pixel
/// ([`point_row_u16`]). `src` is the caller's scratch: RGBA colour is premultiplied in place.
///
/// # Panics
/// If `src` or `out` is not `layout`'s length at its size, or a side of `to` is 0 or larger
/// than `from`'s.
pub fn resample_view(
    layout: PixelLayout,
    depth_rule: DepthRule,
    from: (u32, u32),
    src: &mut [u8],
    to: (u32, u32),
    out: &mut [u8],
) {
    assert_eq!(src.len(), layout.len(from.0, from.1), "source view size");
    assert_eq!(out.len(), layout.len(to.0, to.1), "resampled view size");
    assert!(
        (1..=from.0).contains(&to.0) && (1..=from.1).contains(&to.1),
        "resampling {from:?} to {to:?} is not a downscale"
    );
    let (xs, ys) = (AxisTaps::new(from.0, to.0), AxisTaps::new(from.1, to.1));
    let (n_from, n_to) = (
        from.0 as usize * from.1 as usize,
        to.0 as usize * to.1 as usize,
    );
    let (colour, rest) = src.split_at_mut(layout.pixel_bytes(from.0, from.1));
    let (mask, depth) = rest.split_at_mut(if layout.mask { n_from } else { 0 });
    let (out_colour, out_rest) = out.split_at_mut(layout.pixel_bytes(to.0, to.1));
    let (out_mask, out_depth) = out_rest.split_at_mut(if layout.mask { n_to } else { 0 });
    let ch = layout.channels();
    let row_len = to.0 as usize * ch;
    let mut acc = vec![0f32; row_len];
    if layout.alpha {
        for px in colour.chunks_exact_mut(4) {
            let a = px[3];
            px[..3].iter_mut().for_each(|c| *c = premultiply(*c, a));
        }
        for (oy, row) in out_colour.chunks_exact_mut(row_len).enumerate() {
            area_row_u8::<4>(colour, &xs, &ys, oy, &mut acc, row);
        }
        for px in out_colour.chunks_exact_mut(4) {
            let a = px[3];
            px[..3].iter_mut().for_each(|c| *c = unpremultiply(*c, a));
        }
    } else {
        for (oy, row) in out_colour.chunks_exact_mut(row_len).enumerate() {
            area_row_u8::<3>(colour, &xs, &ys, oy, &mut acc, row);
        }
    }
    if layout.mask {
        for (oy, row) in out_mask.chunks_exact_mut(to.0 as usize).enumerate() {
            area_row_u8::<1>(mask, &xs, &ys, oy, &mut acc, row);
        }
        for m in out_mask.iter_mut() {
            *m = if *m >= MASK_USED_MIN { 255 } else { 0 };
        }
    }
    if layout.depth {
        for (oy, row) in out_depth.chunks_exact_mut(to.0 as usize * 2).enumerate() {
            match depth_rule {
                DepthRule::AreaMean => area_row_u16(depth, &xs, &ys, oy, row),
                DepthRule::Points => point_row_u16(depth, from, to, oy, row),
            }
        }
    }
}

#[cfg(test)]
mod tests;
