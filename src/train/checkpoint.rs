//! Training checkpoints: a small self-describing container of named arrays, written atomically
//! into `OUT/checkpoints/`, and the mapping of the full training state onto it.
//!
//! # Container format (version 1, all integers little-endian)
//! ```text
//! offset  size  field
//!      0     8  magic "RSPLCKPT"
//!      8     4  format version (u32) = 1
//!     12     4  reserved, 0
//!     16     8  header length H in bytes (u64), at most MAX_HEADER_BYTES
//!     24     8  xxh3-64 of the H header bytes
//!     32     H  header: UTF-8 JSON (below)
//!   32+H   pad  zero bytes up to the next multiple of 8 = start of the data section D
//!      D     …  the arrays' raw little-endian bytes, each at D + its `offset` (8-aligned)
//! ```
//! Header JSON: `{"format":"ramsplat-checkpoint","meta":{…},"arrays":[{"name","dtype",
//! "shape","offset","bytes","xxh3"}…]}`. `dtype` is one of `f32 f64 u32 u64 u8`; `bytes` must
//! equal the product of `shape` × the dtype's size; arrays must not overlap and must lie inside
//! the file; `xxh3` is the xxh3-64 of the array's bytes (hex). `meta` is free JSON owned by the
//! caller (the training state puts pack id, the views it trains on, config, step, RNG and
//! sampler position there).
//!
//! # Invariants
//! - Written under a hidden temporary name in the same directory, fsynced, renamed into place,
//!   and the directory fsynced: a checkpoint file is complete or absent, never torn. The
//!   `latest` pointer (a one-line text file naming the newest checkpoint) is written the same
//!   way and only after the checkpoint it names is durable.
//! - Reading never allocates from an untrusted count: every array's byte length is checked
//!   against the real file length when the file is opened, a buffer is allocated only for an
//!   array found there with the shape asked for (so a count in `meta`, such as the number of
//!   Gaussians, sizes nothing until an array confirms it), and the header is capped at
//!   [`MAX_HEADER_BYTES`]. Every array is checksummed as it is read.
//! - The Gaussians are stored PRE-activation (log-scales, logit opacities, raw quaternions),
//!   exactly like [`Gaussians`]; loading refuses anything that looks activated (see
//!   [`crate::export::ply::activation_evidence`]) and never "de-activates" values silently.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, Xxh3};

use super::adam::AdamState;
use super::bilagrid::{BilagridConfig, BilateralGrids, GridShape, COEFFS};
use super::densify::{DensifyStats, Model};
use super::depth::DepthConfig;
use super::exposure::{ExposureConfig, Exposures, EXPOSURE_LEN};
use super::pose::{CameraPoses, PoseConfig, POSE_LEN};
use super::{TrainConfig, TrainState, TrainStateRef};
use crate::data::Position;
use crate::dataset::Split;
use crate::export::ply::activation_evidence;
use crate::rng::Rng;
use crate::scene::gaussians::{Field, Gaussians, Group};

/// First 8 bytes of every checkpoint.
pub const MAGIC: [u8; 8] = *b"RSPLCKPT";
/// Container version this build writes and reads.
pub const VERSION: u32 = 1;
/// `format` field of the header JSON.
pub const FORMAT: &str = "ramsplat-checkpoint";
/// Fixed bytes before the header: magic, version, reserved, header length, header checksum.
pub const PREAMBLE_LEN: u64 = 32;
/// Cap on the header JSON: a header lists a few dozen arrays and a config (a few KiB); 16 MiB
/// leaves room for any foreseeable metadata while bounding what a corrupt length can allocate.
pub const MAX_HEADER_BYTES: u64 = 16 << 20;
/// Name of the pointer file naming the newest checkpoint in a checkpoint directory.
pub const LATEST: &str = "latest";
/// I/O chunk for streaming arrays through the checksum (64 KiB: large enough for syscall
/// overhead to vanish, small enough to never matter against the RAM budget).
const CHUNK: usize = 64 << 10;

/// Why a checkpoint could not be written, read or used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: not a ramsplat checkpoint (bad magic bytes); checkpoints are the ckpt-*.bin files \
         gs-train writes under OUT/checkpoints/",
        path.display()
    )]
    BadMagic { path: PathBuf },
    #[error(
        "{}: checkpoint format version {found} is not supported by this build (it reads version \
         {VERSION}); resume with the gs-train that wrote it, or start a fresh run",
        path.display()
    )]
    Version { path: PathBuf, found: u32 },
    #[error(
        "{}: the checkpoint is corrupt ({what}); it was damaged after it was written (a \
         checkpoint is written atomically, so a crash cannot cause this). Delete it and resume \
         from an older one (point {LATEST} at it), or start a fresh run",
        path.display()
    )]
    Corrupt { path: PathBuf, what: String },
    #[error(
        "{}: the checkpoint does not fit this run: {what}",
        path.display()
    )]
    Mismatch { path: PathBuf, what: String },
    #[error(
        "{}: {evidence}. A checkpoint must hold the stored (pre-activation) parameters; \
         refusing to resume from it",
        path.display()
    )]
    Activated { path: PathBuf, evidence: String },
    #[error("{}: no checkpoint to resume from ({why}); run without --resume to start fresh", dir.display())]
    NoCheckpoint { dir: PathBuf, why: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Element type of an array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    U32,
    U64,
    U8,
}

impl DType {
    pub fn size(self) -> u64 {
        match self {
            DType::U8 => 1,
            DType::F32 | DType::U32 => 4,
            DType::F64 | DType::U64 => 8,
        }
    }
}

/// Borrowed data of one array to write.
#[derive(Clone, Copy, Debug)]
pub enum ArrayData<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
    U32(&'a [u32]),
    U64(&'a [u64]),
    U8(&'a [u8]),
}

impl ArrayData<'_> {
    fn dtype(&self) -> DType {
        match self {
            ArrayData::F32(_) => DType::F32,
            ArrayData::F64(_) => DType::F64,
            ArrayData::U32(_) => DType::U32,
            ArrayData::U64(_) => DType::U64,
            ArrayData::U8(_) => DType::U8,
        }
    }

    fn len(&self) -> usize {
        match self {
            ArrayData::F32(v) => v.len(),
            ArrayData::F64(v) => v.len(),
            ArrayData::U32(v) => v.len(),
            ArrayData::U64(v) => v.len(),
            ArrayData::U8(v) => v.len(),
        }
    }

    /// Calls `sink` with the little-endian bytes in chunks of at most [`CHUNK`] bytes.
    fn for_each_chunk(&self, sink: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        fn go<T: Copy, const N: usize>(
            v: &[T],
            to_le: fn(T) -> [u8; N],
            buf: &mut Vec<u8>,
            sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
        ) -> io::Result<()> {
            for part in v.chunks(CHUNK / N) {
                buf.clear();
                for &x in part {
                    buf.extend_from_slice(&to_le(x));
                }
                sink(buf)?;
            }
            Ok(())
        }
        let mut buf = Vec::with_capacity(CHUNK);
        match *self {
            ArrayData::F32(v) => go(v, f32::to_le_bytes, &mut buf, sink),
            ArrayData::F64(v) => go(v, f64::to_le_bytes, &mut buf, sink),
            ArrayData::U32(v) => go(v, u32::to_le_bytes, &mut buf, sink),
            ArrayData::U64(v) => go(v, u64::to_le_bytes, &mut buf, sink),
            ArrayData::U8(v) => {
                for part in v.chunks(CHUNK) {
                    sink(part)?;
                }
                Ok(())
            }
        }
    }
}

/// One named array to write: `data.len()` must equal the product of `shape`.
#[derive(Clone, Debug)]
pub struct ArrayRef<'a> {
    pub name: String,
    pub shape: Vec<u64>,
    pub data: ArrayData<'a>,
}

impl<'a> ArrayRef<'a> {
    pub fn new(name: &str, shape: &[u64], data: ArrayData<'a>) -> ArrayRef<'a> {
        ArrayRef {
            name: name.to_owned(),
            shape: shape.to_vec(),
            data,
        }
    }
}

/// An array's entry in the header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArrayEntry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// From the start of the data section.
    pub offset: u64,
    pub bytes: u64,
    /// xxh3-64 of the bytes, 16 hex digits.
    pub xxh3: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    meta: serde_json::Value,
    arrays: Vec<ArrayEntry>,
}

fn pad8(n: u64) -> u64 {
    n.div_ceil(8) * 8
}

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename, directory fsync).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    write_atomic_with(path, &mut |w| w.write_all(bytes))
}

fn write_atomic_with(
    path: &Path,
    body: &mut dyn FnMut(&mut BufWriter<File>) -> io::Result<()>,
) -> Result<(), CheckpointError> {
    crate::fsutil::write_atomic_with(path, body).map_err(io_err(path))
}

/// Writes a container atomically. `meta` is stored verbatim in the header.
pub fn write_container(
    path: &Path,
    meta: &serde_json::Value,
    arrays: &[ArrayRef<'_>],
) -> Result<(), CheckpointError> {
    let invalid = |what: String| CheckpointError::Mismatch {
        path: path.to_owned(),
        what,
    };
    // Pass 1: checksums and offsets (the header precedes the data).
    let mut entries = Vec::with_capacity(arrays.len());
    let mut offset = 0u64;
    for a in arrays {
        let want: u64 = a.shape.iter().product();
        if want != a.data.len() as u64 {
            return Err(invalid(format!(
                "array `{}` has {} elements but shape {:?} (a bug in the caller)",
                a.name,
                a.data.len(),
                a.shape
            )));
        }
        if entries.iter().any(|e: &ArrayEntry| e.name == a.name) {
            return Err(invalid(format!("array `{}` is listed twice", a.name)));
        }
        let mut h = Xxh3::new();
        a.data
            .for_each_chunk(&mut |b| {
                h.update(b);
                Ok(())
            })
            .map_err(io_err(path))?;
        let bytes = a.data.len() as u64 * a.data.dtype().size();
        entries.push(ArrayEntry {
            name: a.name.clone(),
            dtype: a.data.dtype(),
            shape: a.shape.clone(),
            offset,
            bytes,
            xxh3: format!("{:016x}", h.digest()),
        });
        offset = pad8(offset + bytes);
    }
    let header = Header {
        format: FORMAT.to_owned(),
        meta: meta.clone(),
        arrays: entries,
    };
    let json = serde_json::to_vec(&header).map_err(|e| invalid(e.to_string()))?;
    if json.len() as u64 > MAX_HEADER_BYTES {
        return Err(invalid(format!(
            "header of {} bytes exceeds {MAX_HEADER_BYTES}",
            json.len()
        )));
    }
    let data_start = pad8(PREAMBLE_LEN + json.len() as u64);
    write_atomic_with(path, &mut |w| {
        w.write_all(&MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&0u32.to_le_bytes())?;
        w.write_all(&(json.len() as u64).to_le_bytes())?;
        w.write_all(&xxh3_64(&json).to_le_bytes())?;
        w.write_all(&json)?;
        let zeros = [0u8; 8];
        w.write_all(&zeros[..(data_start - PREAMBLE_LEN - json.len() as u64) as usize])?;
        for (a, e) in arrays.iter().zip(&header.arrays) {
            a.data.for_each_chunk(&mut |b| w.write_all(b))?;
            w.write_all(&zeros[..(pad8(e.bytes) - e.bytes) as usize])?;
        }
        Ok(())
    })
}

/// An opened, header-validated container; arrays are read (and checksummed) on demand.
pub struct Container {
    path: PathBuf,
    file: BufReader<File>,
    data_start: u64,
    meta: serde_json::Value,
    arrays: Vec<ArrayEntry>,
}

impl std::fmt::Debug for Container {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Container")
            .field("path", &self.path)
            .field("arrays", &self.arrays)
            .finish()
    }
}

impl Container {
    /// Opens `path` and validates the preamble, the header checksum and every array's extent.
    pub fn open(path: &Path) -> Result<Container, CheckpointError> {
        let corrupt = |what: String| CheckpointError::Corrupt {
            path: path.to_owned(),
            what,
        };
        let file = crate::fsutil::open_file(path).map_err(io_err(path))?;
        let file_len = file.metadata().map_err(io_err(path))?.len();
        let mut file = BufReader::with_capacity(CHUNK, file);
        let mut pre = [0u8; PREAMBLE_LEN as usize];
        if file_len < PREAMBLE_LEN {
            if file_len >= 8 {
                file.read_exact(&mut pre[..8]).map_err(io_err(path))?;
                if pre[..8] != MAGIC {
                    return Err(CheckpointError::BadMagic {
                        path: path.to_owned(),
                    });
                }
            }
            return Err(corrupt(format!(
                "{file_len} bytes, shorter than the {PREAMBLE_LEN}-byte preamble"
            )));
        }
        file.read_exact(&mut pre).map_err(io_err(path))?;
        if pre[..8] != MAGIC {
            return Err(CheckpointError::BadMagic {
                path: path.to_owned(),
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(pre[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(pre[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(CheckpointError::Version {
                path: path.to_owned(),
                found: version,
            });
        }
        if u32_at(12) != 0 {
            return Err(corrupt("reserved preamble field is not zero".into()));
        }
        let header_len = u64_at(16);
        if header_len > MAX_HEADER_BYTES || PREAMBLE_LEN + header_len > file_len {
            return Err(corrupt(format!(
                "header length {header_len} is impossible for a file of {file_len} bytes"
            )));
        }
        let mut json = vec![0u8; header_len as usize];
        file.read_exact(&mut json).map_err(io_err(path))?;
        if xxh3_64(&json) != u64_at(24) {
            return Err(corrupt("header checksum mismatch".into()));
        }
        let header: Header = serde_json::from_slice(&json)
            .map_err(|e| corrupt(format!("header is not valid JSON: {e}")))?;
        if header.format != FORMAT {
            return Err(corrupt(format!(
                "header format {:?}, expected {FORMAT:?}",
                header.format
            )));
        }
        let data_start = pad8(PREAMBLE_LEN + header_len);
        let mut pad = [0u8; 8];
        let pad = &mut pad[..(data_start - PREAMBLE_LEN - header_len) as usize];
        file.read_exact(pad)
            .map_err(|_| corrupt("truncated after the header".into()))?;
        if pad.iter().any(|&b| b != 0) {
            return Err(corrupt("padding after the header is not zero".into()));
        }
        let mut extents: Vec<(u64, u64, &str)> = Vec::with_capacity(header.arrays.len());
        for a in &header.arrays {
            let elems = a
                .shape
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .and_then(|n| n.checked_mul(a.dtype.size()));
            if elems != Some(a.bytes) {
                return Err(corrupt(format!(
                    "array `{}`: {} bytes do not match shape {:?} of {:?}",
                    a.name, a.bytes, a.shape, a.dtype
                )));
            }
            let end = data_start
                .checked_add(a.offset)
                .and_then(|s| s.checked_add(a.bytes));
            if a.offset % 8 != 0 || end.is_none_or(|e| e > file_len) {
                return Err(corrupt(format!(
                    "array `{}` (offset {}, {} bytes) lies outside the {file_len}-byte file \
                     (truncated?)",
                    a.name, a.offset, a.bytes
                )));
            }
            if header.arrays.iter().filter(|b| b.name == a.name).count() > 1 {
                return Err(corrupt(format!("array `{}` is listed twice", a.name)));
            }
            extents.push((a.offset, a.offset + a.bytes, &a.name));
        }
        extents.sort_unstable();
        for w in extents.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(corrupt(format!(
                    "arrays `{}` and `{}` overlap",
                    w[0].2, w[1].2
                )));
            }
        }
        Ok(Container {
            path: path.to_owned(),
            file,
            data_start,
            meta: header.meta,
            arrays: header.arrays,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn meta(&self) -> &serde_json::Value {
        &self.meta
    }

    pub fn arrays(&self) -> &[ArrayEntry] {
        &self.arrays
    }

    pub fn entry(&self, name: &str) -> Option<&ArrayEntry> {
        self.arrays.iter().find(|a| a.name == name)
    }

    fn corrupt(&self, what: String) -> CheckpointError {
        CheckpointError::Corrupt {
            path: self.path.clone(),
            what,
        }
    }

    /// The entry of `name`, checked to have `dtype` and `shape`.
    fn expect(
        &self,
        name: &str,
        dtype: DType,
        shape: &[u64],
    ) -> Result<ArrayEntry, CheckpointError> {
        let e = self
            .entry(name)
            .ok_or_else(|| self.corrupt(format!("array `{name}` is missing")))?;
        if e.dtype != dtype || e.shape != shape {
            return Err(self.corrupt(format!(
                "array `{name}` is {:?} {:?}, expected {dtype:?} {shape:?}",
                e.dtype, e.shape
            )));
        }
        Ok(e.clone())
    }

    /// Streams array `e`'s bytes through its checksum into `decode(chunk, element offset)`.
    fn stream(
        &mut self,
        e: &ArrayEntry,
        decode: &mut dyn FnMut(&[u8], usize),
    ) -> Result<(), CheckpointError> {
        let path = self.path.clone();
        self.file
            .seek(SeekFrom::Start(self.data_start + e.offset))
            .map_err(io_err(&path))?;
        let size = e.dtype.size() as usize;
        let mut h = Xxh3::new();
        let mut buf = vec![0u8; CHUNK - CHUNK % size];
        let mut left = e.bytes as usize;
        let mut done = 0usize;
        while left > 0 {
            let n = left.min(buf.len());
            self.file.read_exact(&mut buf[..n]).map_err(io_err(&path))?;
            h.update(&buf[..n]);
            decode(&buf[..n], done / size);
            done += n;
            left -= n;
        }
        if format!("{:016x}", h.digest()) != e.xxh3 {
            return Err(self.corrupt(format!(
                "array `{}` fails its checksum (bit rot or a partial overwrite)",
                e.name
            )));
        }
        Ok(())
    }

    /// Reads an array of `shape` into `out`, which must hold exactly its values.
    pub fn read_into<T: Scalar>(
        &mut self,
        name: &str,
        shape: &[u64],
        out: &mut [T],
    ) -> Result<(), CheckpointError> {
        let e = self.expect(name, T::DTYPE, shape)?;
        let size = T::DTYPE.size() as usize;
        if e.bytes != (size * out.len()) as u64 {
            return Err(self.corrupt(format!(
                "array `{name}` holds {} bytes, {} values were expected",
                e.bytes,
                out.len()
            )));
        }
        self.stream(&e, &mut |b, at| {
            for (o, c) in out[at..].iter_mut().zip(b.chunks_exact(size)) {
                *o = T::from_le(c);
            }
        })
    }

    /// Reads an array of `shape`.
    pub fn read<T: Scalar>(
        &mut self,
        name: &str,
        shape: &[u64],
    ) -> Result<Vec<T>, CheckpointError> {
        // Checked against the file before the buffer is allocated: `shape` may come from a
        // count in the header, and `open` saw the entry's bytes inside the file.
        self.expect(name, T::DTYPE, shape)?;
        let len: u64 = shape.iter().product();
        let mut out = vec![T::default(); len as usize];
        self.read_into(name, shape, &mut out)?;
        Ok(out)
    }

    /// Reads an f32 array of shape `[n, K]` as `n` rows.
    pub fn read_rows<const K: usize>(
        &mut self,
        name: &str,
        n: u64,
    ) -> Result<Vec<[f32; K]>, CheckpointError> {
        // Checked before allocating, as in `read`.
        self.expect(name, DType::F32, &[n, K as u64])?;
        let mut out = vec![[0f32; K]; n as usize];
        self.read_into(name, &[n, K as u64], out.as_flattened_mut())?;
        Ok(out)
    }
}

/// An element type of the container's arrays.
pub trait Scalar: Copy + Default {
    const DTYPE: DType;
    /// The value of its little-endian bytes (`DTYPE.size()` of them).
    fn from_le(bytes: &[u8]) -> Self;
}

macro_rules! scalar {
    ($t:ty, $d:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $d;
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element"))
            }
        }
    };
}
scalar!(f32, DType::F32);
scalar!(f64, DType::F64);
scalar!(u32, DType::U32);
scalar!(u64, DType::U64);
scalar!(u8, DType::U8);

/// File name of the checkpoint of `iteration` (zero-padded so names sort by iteration).
pub fn checkpoint_file_name(iteration: u64) -> String {
    format!("ckpt-{iteration:08}.bin")
}

/// Points `dir/latest` at `file_name` (atomically; call after the checkpoint is durable).
pub fn write_latest(dir: &Path, file_name: &str) -> Result<(), CheckpointError> {
    write_file_atomic(&dir.join(LATEST), format!("{file_name}\n").as_bytes())
}

/// The checkpoint `dir/latest` names.
pub fn latest(dir: &Path) -> Result<PathBuf, CheckpointError> {
    let pointer = dir.join(LATEST);
    let text = match crate::fsutil::read_file_to_string(&pointer) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::NoCheckpoint {
                dir: dir.to_owned(),
                why: format!("{} does not exist", pointer.display()),
            })
        }
        Err(e) => return Err(io_err(&pointer)(e)),
    };
    let name = text.trim();
    // The pointer names a file in the same directory, nothing else.
    if name.is_empty() || name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return Err(CheckpointError::Corrupt {
            path: pointer,
            what: format!("it should hold a checkpoint file name, not {name:?}"),
        });
    }
    let path = dir.join(name);
    if !crate::fsutil::file_exists(&path).map_err(io_err(&path))? {
        return Err(CheckpointError::NoCheckpoint {
            dir: dir.to_owned(),
            why: format!("{} names {name}, which does not exist", pointer.display()),
        });
    }
    Ok(path)
}

// ---------------------------------------------------------------------------------------------
// The training state on top of the container.
// ---------------------------------------------------------------------------------------------

/// Header `meta` of a training checkpoint: everything of [`TrainState`] that is not an array,
/// plus what identifies the run it belongs to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateMeta {
    /// `"gs-train <version>"`.
    pub created_by: String,
    /// The pack the run trains on (its manifest's random `pack_id`, hex).
    pub pack_id: String,
    /// [`crate::shard::Manifest::content_fingerprint`] of that pack: a re-convert of the same
    /// source with the same options has a new `pack_id` but the same fingerprint, and its
    /// checkpoints stay valid. Absent in checkpoints of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pack_content: Option<String>,
    /// The views the run trains on. Absent in checkpoints of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub views: Option<TrainedViews>,
    /// Completed iterations.
    pub step: u64,
    pub extent: f64,
    pub config: TrainConfig,
    pub growth_stopped: bool,
    /// RNG state (xoshiro256**), verbatim.
    pub rng: [u64; 4],
    /// Loader position of the next view.
    pub position: Position,
    /// Adam steps per group.
    pub adam_steps: [u64; 6],
    pub num_gaussians: u64,
    pub sh_degree: u32,
    /// Views with an exposure matrix (arrays `exposure.*`, `[views, 3, 4]`) and the exposure
    /// optimizer's step count; absent without exposure compensation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposure: Option<PerViewMeta>,
    /// Views with a pose correction (arrays `pose.*`, `[views, 6]`, f64) and the pose
    /// optimizer's step count; absent without pose settings. Same layout as `exposure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pose: Option<PerViewMeta>,
    /// Views with a bilateral grid (arrays `bilagrid.*`, `[views, L, Y, X, 12]`, the shape of
    /// the configuration's grids) and the grids' optimizer step count; absent without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bilagrid: Option<PerViewMeta>,
}

/// The header of a per-view optimizer's state ([`StateMeta::exposure`], [`StateMeta::pose`]):
/// the rows of its arrays and the optimizer's step count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerViewMeta {
    pub views: u64,
    pub steps: u64,
}

/// Which of a pack's views a run trains on ([`StateMeta::views`]). A run resumed on other views
/// would not continue the one that was interrupted, and one resumed with `--eval` after
/// training on every view would score test views it has learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainedViews {
    /// Every view of the pack (`gs-train` without `--eval`).
    All,
    /// The pack's training split; its test views are held out (`gs-train --eval`).
    TrainSplit,
    /// Every view, the test views only their left halves (`gs-train --eval --exposure`: 3DGS's
    /// `--train_test_exp`, which scores them on their right halves).
    TestLeftHalves,
}

impl TrainedViews {
    /// The views a run trains on, from its `--eval` and its settings.
    pub fn of_run(eval: bool, config: &TrainConfig) -> TrainedViews {
        match (eval, config.exposure.is_some()) {
            (false, _) => TrainedViews::All,
            (true, false) => TrainedViews::TrainSplit,
            (true, true) => TrainedViews::TestLeftHalves,
        }
    }

    /// The split the loader reads: `None` for every view.
    pub fn split(self) -> Option<Split> {
        (self == TrainedViews::TrainSplit).then_some(Split::Train)
    }

    /// The run that trains on these views, as its flags say.
    fn describe(self) -> &'static str {
        match self {
            TrainedViews::All => "every view of the pack (without --eval)",
            TrainedViews::TrainSplit => "the training views, the test views held out (--eval)",
            TrainedViews::TestLeftHalves => {
                "every view, the test views' left halves only (--eval with --exposure)"
            }
        }
    }
}

/// Array names of the exposure matrices and their Adam moments.
const EXPOSURE_ARRAYS: [&str; 3] = ["exposure.values", "exposure.exp_avg", "exposure.exp_avg_sq"];

/// Array names of the bilateral grids and their Adam moments.
const BILAGRID_ARRAYS: [&str; 3] = ["bilagrid.values", "bilagrid.exp_avg", "bilagrid.exp_avg_sq"];

/// The array shape of `views` grids of `shape`.
fn grid_array_shape(shape: GridShape, views: u64) -> [u64; 5] {
    [
        views,
        shape.l as u64,
        shape.y as u64,
        shape.x as u64,
        COEFFS as u64,
    ]
}

/// Array names of the pose corrections, their Adam moments and the injected noise.
const POSE_ARRAYS: [&str; 4] = [
    "pose.values",
    "pose.exp_avg",
    "pose.exp_avg_sq",
    "pose.noise",
];

/// What a loaded checkpoint must match: the run's pack and configuration.
#[derive(Clone, Debug)]
pub struct Expected<'a> {
    pub pack_id: &'a str,
    /// The pack's content fingerprint; a checkpoint whose fingerprint matches is accepted even
    /// when the pack id differs (the pack was re-converted from the same source).
    pub pack_content: Option<&'a str>,
    pub config: &'a TrainConfig,
    /// Continue past the checkpoint's planned end to `config.iterations` (`gs-train --resume
    /// --extend`): the iteration counts may differ (the run's must be larger), and the resumed
    /// state keeps the original position schedule ([`extended`]).
    pub extend: bool,
    /// The views the run trains on and how many there are (the loader's records per epoch),
    /// when known: the checkpoint must have trained on the same ones, and its loader position
    /// must lie among them.
    pub views: Option<(TrainedViews, u64)>,
}

/// `saved` continued to `iterations` (`--extend`): the position learning rate keeps its
/// schedule length (it reached its final value at the original end and stays there, as 3DGS's
/// does past its 30,000 steps), everything else is unchanged; iterations only grow.
pub fn extended(saved: &TrainConfig, iterations: u64) -> TrainConfig {
    TrainConfig {
        iterations,
        position_lr_max_steps: Some(saved.position_lr_max_steps.unwrap_or(saved.iterations)),
        exposure: saved.exposure.as_ref().map(|e| ExposureConfig {
            max_steps: Some(e.max_steps.unwrap_or(saved.iterations)),
            ..e.clone()
        }),
        pose: saved.pose.as_ref().map(|p| PoseConfig {
            max_steps: Some(p.max_steps.unwrap_or(saved.iterations)),
            ..p.clone()
        }),
        depth: saved.depth.as_ref().map(|d| DepthConfig {
            max_steps: Some(d.max_steps.unwrap_or(saved.iterations)),
            ..d.clone()
        }),
        bilagrid: saved.bilagrid.as_ref().map(|b| BilagridConfig {
            max_steps: Some(b.max_steps.unwrap_or(saved.iterations)),
            ..b.clone()
        }),
        ..saved.clone()
    }
}

/// The Gaussians groups stored per checkpoint: parameters and both Adam moments.
const GROUPS: [&str; 3] = ["params", "adam.exp_avg", "adam.exp_avg_sq"];

/// One array per [`Field`], named `prefix.field`.
fn gaussian_arrays<'a>(prefix: &str, g: &'a Gaussians, out: &mut Vec<ArrayRef<'a>>) {
    for f in Field::ALL {
        out.push(ArrayRef::new(
            &format!("{prefix}.{}", f.name()),
            &f.shape(g.len(), g.sh_degree),
            ArrayData::F32(g.field(f)),
        ));
    }
}

/// Writes the state as `dir/ckpt-STEP.bin` (atomically), then points `dir/latest` at it.
/// Returns the checkpoint's path.
pub fn save_state(
    dir: &Path,
    state: TrainStateRef<'_>,
    pack_id: &str,
) -> Result<PathBuf, CheckpointError> {
    save_state_of(dir, state, pack_id, None, None)
}

/// [`save_state`], recording the pack's content fingerprint and the views the run trains on as
/// well (see [`StateMeta`]).
pub fn save_state_of(
    dir: &Path,
    state: TrainStateRef<'_>,
    pack_id: &str,
    pack_content: Option<&str>,
    views: Option<TrainedViews>,
) -> Result<PathBuf, CheckpointError> {
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let name = checkpoint_file_name(state.step);
    let path = dir.join(&name);
    let m = state.model;
    m.check_shapes().map_err(|e| CheckpointError::Mismatch {
        path: path.clone(),
        what: format!("refusing to save an inconsistent model: {e}"),
    })?;
    let meta = StateMeta {
        created_by: format!("gs-train {}", env!("CARGO_PKG_VERSION")),
        pack_id: pack_id.to_owned(),
        pack_content: pack_content.map(str::to_owned),
        views,
        step: state.step,
        extent: state.extent,
        config: state.config.clone(),
        growth_stopped: state.growth_stopped,
        rng: state.rng,
        position: state.position,
        adam_steps: m.adam.steps,
        num_gaussians: m.len() as u64,
        sh_degree: m.gaussians.sh_degree,
        exposure: state.config.exposure.as_ref().map(|_| PerViewMeta {
            views: state.exposure.len() as u64,
            steps: state.exposure.steps,
        }),
        pose: state.config.pose.as_ref().map(|_| PerViewMeta {
            views: state.poses.len() as u64,
            steps: state.poses.steps,
        }),
        bilagrid: state.grids.map(|g| PerViewMeta {
            views: g.len() as u64,
            steps: g.steps,
        }),
    };
    let meta = serde_json::to_value(&meta).map_err(|e| CheckpointError::Mismatch {
        path: path.clone(),
        what: format!("cannot encode the state: {e}"),
    })?;
    let n = m.len() as u64;
    let mut arrays = Vec::new();
    gaussian_arrays(GROUPS[0], &m.gaussians, &mut arrays);
    gaussian_arrays(GROUPS[1], &m.adam.exp_avg, &mut arrays);
    gaussian_arrays(GROUPS[2], &m.adam.exp_avg_sq, &mut arrays);
    arrays.push(ArrayRef::new(
        "stats.grad_accum",
        &[n],
        ArrayData::F32(&m.stats.grad_accum),
    ));
    arrays.push(ArrayRef::new(
        "stats.denom",
        &[n],
        ArrayData::U32(&m.stats.denom),
    ));
    arrays.push(ArrayRef::new(
        "stats.max_radii",
        &[n],
        ArrayData::U32(&m.stats.max_radii),
    ));
    if state.config.exposure.is_some() {
        let ex = state.exposure;
        let shape = [ex.len() as u64, 3, 4];
        for (name, rows) in
            EXPOSURE_ARRAYS
                .into_iter()
                .zip([&ex.values, &ex.exp_avg, &ex.exp_avg_sq])
        {
            arrays.push(ArrayRef::new(
                name,
                &shape,
                ArrayData::F32(rows.as_flattened()),
            ));
        }
    }
    if state.config.pose.is_some() {
        let p = state.poses;
        let shape = [p.len() as u64, POSE_LEN as u64];
        for (name, rows) in
            POSE_ARRAYS
                .into_iter()
                .zip([&p.values, &p.exp_avg, &p.exp_avg_sq, &p.noise])
        {
            arrays.push(ArrayRef::new(
                name,
                &shape,
                ArrayData::F64(rows.as_flattened()),
            ));
        }
    }
    if let Some(g) = state.grids {
        let shape = grid_array_shape(g.shape, g.len() as u64);
        for (name, a) in BILAGRID_ARRAYS
            .into_iter()
            .zip([&g.values, &g.exp_avg, &g.exp_avg_sq])
        {
            arrays.push(ArrayRef::new(name, &shape, ArrayData::F32(a)));
        }
    }
    write_container(&path, &meta, &arrays)?;
    write_latest(dir, &name)?;
    Ok(path)
}

fn read_gaussians(
    c: &mut Container,
    prefix: &str,
    n: u64,
    sh_degree: u32,
) -> Result<Gaussians, CheckpointError> {
    // Every field's array is checked against the file before the model is allocated: `n` is
    // the header's count.
    for f in Field::ALL {
        let name = format!("{prefix}.{}", f.name());
        c.expect(&name, DType::F32, &f.shape(n as usize, sh_degree))?;
    }
    let mut g = Gaussians::zeros(n as usize, sh_degree);
    for f in Field::ALL {
        let name = format!("{prefix}.{}", f.name());
        c.read_into(&name, &f.shape(n as usize, sh_degree), g.field_mut(f))?;
    }
    Ok(g)
}

/// First non-finite value of a group, as "array `name`, Gaussian i".
fn first_non_finite(prefix: &str, g: &Gaussians) -> Option<String> {
    Field::ALL.into_iter().find_map(|f| {
        let (flat, per) = (g.field(f), f.width(g.sh_degree));
        flat.iter().position(|v| !v.is_finite()).map(|i| {
            format!(
                "`{prefix}.{}` of Gaussian {} is {}",
                f.name(),
                i / per,
                flat[i]
            )
        })
    })
}

/// Names the fields where two configurations differ, down to the nested one
/// (`densify.absgrad: checkpoint true, this run false`).
fn config_differences(saved: &TrainConfig, run: &TrainConfig) -> Vec<String> {
    // Through JSON text: an f32 setting then reads as written (0.0008), where a direct
    // `to_value` would widen it to 0.0007999999797903001.
    let value = |c: &TrainConfig| -> serde_json::Value {
        serde_json::to_string(c)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    };
    let (a, b) = (value(saved), value(run));
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec!["(unreadable configuration)".into()];
    };
    let mut out = Vec::new();
    // Both sides' keys: a setting left out when off (`resolution`, `optimizer.sparse`) may be
    // on one side only.
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let null = serde_json::Value::Null;
    for k in keys {
        // The intersection cap follows --ram-budget and only bounds an allocation (a render
        // over it fails loudly), so a resume may change the budget. How the run started
        // (`--init`, `initial_sh_degree`): a resume takes it from the checkpoint.
        if k == "max_intersection_bytes" || k == "initial_sh_degree" {
            continue;
        }
        if k == "resolution" {
            if saved.resolution != run.resolution {
                out.push(format!(
                    "resolution (-r / --data-factor): checkpoint {}, this run {}",
                    saved.resolution, run.resolution
                ));
            }
            continue;
        }
        value_differences(
            k,
            a.get(k).unwrap_or(&null),
            b.get(k).unwrap_or(&null),
            &mut out,
        );
    }
    out
}

/// Appends `path: checkpoint A, this run B` for every leaf where `a` and `b` differ; objects
/// on both sides are compared key by key (a key on one side only counts as `null` on the
/// other), anything else as a whole.
fn value_differences(
    path: &str,
    a: &serde_json::Value,
    b: &serde_json::Value,
    out: &mut Vec<String>,
) {
    match (a.as_object(), b.as_object()) {
        (Some(x), Some(y)) => {
            let null = serde_json::Value::Null;
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (x.get(k).unwrap_or(&null), y.get(k).unwrap_or(&null));
                value_differences(&format!("{path}.{k}"), va, vb, out);
            }
        }
        _ if a != b => out.push(format!("{path}: checkpoint {a}, this run {b}")),
        _ => {}
    }
}

/// The state header of the checkpoint at `path` (its container header validated, no array
/// read): what run it belongs to, before [`load_state`] reads the rest.
pub fn read_meta(path: &Path) -> Result<StateMeta, CheckpointError> {
    meta_of(&Container::open(path)?)
}

fn meta_of(c: &Container) -> Result<StateMeta, CheckpointError> {
    serde_json::from_value(c.meta().clone()).map_err(|e| CheckpointError::Corrupt {
        path: c.path().to_owned(),
        what: format!("its state header is unreadable: {e}"),
    })
}

/// Loads and validates a checkpoint written by [`save_state`]: checksums, shapes, finite
/// values, pre-activation parameters, and that it belongs to `expected`'s pack and config.
pub fn load_state(path: &Path, expected: &Expected<'_>) -> Result<TrainState, CheckpointError> {
    let mut c = Container::open(path)?;
    let corrupt = |what: String| CheckpointError::Corrupt {
        path: path.to_owned(),
        what,
    };
    let mismatch = |what: String| CheckpointError::Mismatch {
        path: path.to_owned(),
        what,
    };
    let meta = meta_of(&c)?;
    let same_content = matches!(
        (meta.pack_content.as_deref(), expected.pack_content),
        (Some(a), Some(b)) if a == b
    );
    if meta.pack_id != expected.pack_id && !same_content {
        return Err(mismatch(format!(
            "it was made from pack {} but this run trains on pack {}; resume with the pack it \
             was made from (or one re-converted from the same source with the same options), \
             or train into a new -o directory",
            meta.pack_id, expected.pack_id
        )));
    }
    // The run's settings as the checkpoint would hold them: a resume inherits the position
    // schedule's length (set by an earlier --extend), and --extend compares everything but
    // the iteration count, which must grow.
    let mut run = expected.config.clone();
    if run.position_lr_max_steps.is_none() {
        run.position_lr_max_steps = meta.config.position_lr_max_steps;
    }
    if let (Some(r), Some(m)) = (run.exposure.as_mut(), meta.config.exposure.as_ref()) {
        if r.max_steps.is_none() {
            r.max_steps = m.max_steps;
        }
    }
    if let (Some(r), Some(m)) = (run.pose.as_mut(), meta.config.pose.as_ref()) {
        if r.max_steps.is_none() {
            r.max_steps = m.max_steps;
        }
    }
    if let (Some(r), Some(m)) = (run.depth.as_mut(), meta.config.depth.as_ref()) {
        if r.max_steps.is_none() {
            r.max_steps = m.max_steps;
        }
    }
    if let (Some(r), Some(m)) = (run.bilagrid.as_mut(), meta.config.bilagrid.as_ref()) {
        if r.max_steps.is_none() {
            r.max_steps = m.max_steps;
        }
    }
    if expected.extend {
        let (want, planned) = (run.iterations, meta.config.iterations);
        if want <= planned {
            return Err(mismatch(format!(
                "--extend continues a run past its planned {planned} iterations, but \
                 --iterations is {want}: give more than {planned}, or resume without --extend"
            )));
        }
        // Only the iteration count is set aside; every other setting must be the run's own.
        run.iterations = planned;
    }
    let mut diffs = config_differences(&meta.config, &run);
    if let (Some(saved), Some((views, _))) = (meta.views, expected.views) {
        if saved != views {
            diffs.push(format!(
                "views: checkpoint {}, this run {}",
                saved.describe(),
                views.describe()
            ));
        }
    }
    if !diffs.is_empty() {
        let longer = run.iterations > meta.config.iterations;
        let screen = (
            meta.config.densify.prune_screen_radius,
            run.densify.prune_screen_radius,
        );
        let hint = if longer && diffs.len() == 1 && diffs[0].starts_with("iterations:") {
            " (to train past the original end, add --extend)".to_string()
        } else if let (Some(px), None) = screen {
            // Checkpoints from before screen-size pruning became opt-in carry the old default
            // (20 px) without the flag that now asks for it.
            format!(
                " (this checkpoint prunes by screen size, the default before 2026-11-26: add \
                 --prune-screen-radius {px})"
            )
        } else {
            String::new()
        };
        return Err(mismatch(format!(
            "it was made with different training settings ({}){hint}; resume with the same \
             options as the original run (a resumed run must reach the uninterrupted run's \
             result), or train into a new -o directory",
            diffs.join("; ")
        )));
    }
    if let Some((views, records)) = expected.views {
        let p = meta.position;
        if p.index >= records {
            let at = format!(
                "its loader position (epoch {}, view {} of the epoch) lies past the {records} \
                 views this run trains on",
                p.epoch, p.index
            );
            return Err(match meta.views {
                // Checkpoints of older builds do not say which views they trained on.
                None => mismatch(format!(
                    "{at}: the run that wrote it trained on other views (this one trains on \
                     {}); resume with the flags the run was started with, or train into a new \
                     -o directory",
                    views.describe()
                )),
                Some(_) => corrupt(at),
            });
        }
    }
    if meta.sh_degree != meta.config.sh_degree {
        return Err(corrupt(format!(
            "the model's SH degree {} differs from the configured {}",
            meta.sh_degree, meta.config.sh_degree
        )));
    }
    // Each group's Adam step count grows by at most one per iteration; its bias correction
    // reads the count, so a larger one would resume another optimizer state than was saved.
    if let Some((g, steps)) = Group::ALL
        .into_iter()
        .map(|g| (g, meta.adam_steps[g.index()]))
        .find(|&(_, steps)| steps > meta.step)
    {
        return Err(corrupt(format!(
            "Adam has stepped the {g:?} group {steps} times in {} iterations (at most once per \
             iteration)",
            meta.step
        )));
    }
    // So does each per-view optimizer's (every view's state steps at most once an iteration:
    // see Trainer::step), whose learning-rate schedules and bias corrections read it too.
    if let Some((what, steps)) = [
        ("exposure", meta.exposure),
        ("camera pose", meta.pose),
        ("bilateral grid", meta.bilagrid),
    ]
    .into_iter()
    .filter_map(|(what, m)| Some((what, m?.steps)))
    .find(|&(_, steps)| steps > meta.step)
    {
        return Err(corrupt(format!(
            "the {what} optimizer has stepped {steps} times in {} iterations (at most once per \
             iteration)",
            meta.step
        )));
    }
    if !(meta.extent.is_finite() && meta.extent > 0.0) {
        return Err(corrupt(format!("scene extent {} is invalid", meta.extent)));
    }
    let n = meta.num_gaussians;
    let gaussians = read_gaussians(&mut c, GROUPS[0], n, meta.sh_degree)?;
    if let Some(what) = first_non_finite(GROUPS[0], &gaussians) {
        return Err(corrupt(format!(
            "{what}: the run had diverged when this checkpoint was written; resume from an \
             older checkpoint"
        )));
    }
    // Refuse activated values before reading anything else (never reinterpret them).
    if let Some(evidence) = activation_evidence(&gaussians) {
        return Err(CheckpointError::Activated {
            path: path.to_owned(),
            evidence,
        });
    }
    let exp_avg = read_gaussians(&mut c, GROUPS[1], n, meta.sh_degree)?;
    let exp_avg_sq = read_gaussians(&mut c, GROUPS[2], n, meta.sh_degree)?;
    for (prefix, g) in [(GROUPS[1], &exp_avg), (GROUPS[2], &exp_avg_sq)] {
        if let Some(what) = first_non_finite(prefix, g) {
            return Err(corrupt(what));
        }
    }
    let negative = Field::ALL
        .into_iter()
        .any(|f| exp_avg_sq.field(f).iter().any(|&v| v < 0.0));
    if negative {
        return Err(corrupt(
            "a second Adam moment is negative (it is a mean of squares)".into(),
        ));
    }
    let grad_accum = c.read::<f32>("stats.grad_accum", &[n])?;
    if let Some(i) = grad_accum.iter().position(|v| !v.is_finite() || *v < 0.0) {
        return Err(corrupt(format!(
            "`stats.grad_accum` of Gaussian {i} is {} (a sum of norms is finite and ≥ 0)",
            grad_accum[i]
        )));
    }
    let stats = DensifyStats {
        grad_accum,
        denom: c.read::<u32>("stats.denom", &[n])?,
        max_radii: c.read::<u32>("stats.max_radii", &[n])?,
    };
    let model = Model {
        gaussians,
        adam: AdamState {
            exp_avg,
            exp_avg_sq,
            steps: meta.adam_steps,
        },
        stats,
    };
    model
        .check_shapes()
        .map_err(|e| corrupt(format!("inconsistent model: {e}")))?;
    if Rng::from_state(meta.rng).is_none() {
        return Err(corrupt("the RNG state is all zero".into()));
    }
    let exposure = match read_per_view::<f32, EXPOSURE_LEN, 3>(
        &mut c,
        EXPOSURE_ARRAYS,
        &[3, 4],
        meta.config.exposure.is_some(),
        meta.exposure,
        ("compensate exposure", "exposure state"),
        corrupt,
    )? {
        None => Exposures::default(),
        Some(PerViewState {
            arrays: [values, exp_avg, exp_avg_sq],
            steps,
        }) => {
            let ex = Exposures {
                values,
                exp_avg,
                exp_avg_sq,
                steps,
            };
            if let Some(why) = ex.invalid() {
                return Err(corrupt(why));
            }
            ex
        }
    };
    let poses = match read_per_view::<f64, POSE_LEN, 4>(
        &mut c,
        POSE_ARRAYS,
        &[POSE_LEN as u64],
        meta.config.pose.is_some(),
        meta.pose,
        ("optimise camera poses", "camera pose state"),
        corrupt,
    )? {
        None => CameraPoses::default(),
        Some(PerViewState {
            arrays: [values, exp_avg, exp_avg_sq, noise],
            steps,
        }) => {
            let p = CameraPoses {
                values,
                exp_avg,
                exp_avg_sq,
                noise,
                steps,
            };
            if let Some(why) = p.invalid() {
                return Err(corrupt(why));
            }
            p
        }
    };
    let grids = match (&meta.config.bilagrid, meta.bilagrid) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(corrupt(
                "its settings learn bilateral grids but it holds none".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(corrupt(
                "it holds bilateral grids but its settings do not learn them".into(),
            ))
        }
        (Some(cfg), Some(m)) => {
            if let Some(why) = cfg.shape.invalid() {
                return Err(corrupt(why));
            }
            let shape = grid_array_shape(cfg.shape, m.views);
            let mut g = BilateralGrids::new(cfg.shape);
            for (name, a) in
                BILAGRID_ARRAYS
                    .into_iter()
                    .zip([&mut g.values, &mut g.exp_avg, &mut g.exp_avg_sq])
            {
                // Checked against the file before the buffer is allocated.
                c.expect(name, DType::F32, &shape)?;
                *a = vec![0.0; shape.iter().product::<u64>() as usize];
                c.read_into(name, &shape, a)?;
            }
            g.steps = m.steps;
            if let Some(why) = g.invalid() {
                return Err(corrupt(why));
            }
            Some(g)
        }
    };
    let config = if expected.extend {
        extended(&meta.config, expected.config.iterations)
    } else {
        meta.config
    };
    Ok(TrainState {
        config,
        extent: meta.extent,
        step: meta.step,
        model,
        growth_stopped: meta.growth_stopped,
        rng: meta.rng,
        position: meta.position,
        exposure,
        poses,
        grids,
    })
}

/// The arrays of a per-view optimizer's state (`names`, each `[views, row_shape…]` of `T`, `W`
/// values per view) and its step count, as `meta` announces them; `None` when neither the
/// settings (`configured`) nor the checkpoint have that state. A checkpoint whose settings and
/// state disagree is refused, naming what the settings do and which state is there or missing
/// (`(doing, state)`). Each entry's shape is checked against the file before anything is
/// allocated.
fn read_per_view<T: Scalar, const W: usize, const N: usize>(
    c: &mut Container,
    names: [&str; N],
    row_shape: &[u64],
    configured: bool,
    meta: Option<PerViewMeta>,
    (doing, state): (&str, &str),
    corrupt: impl Fn(String) -> CheckpointError,
) -> Result<Option<PerViewState<T, W, N>>, CheckpointError> {
    debug_assert_eq!(row_shape.iter().product::<u64>(), W as u64);
    let m = match (configured, meta) {
        (false, None) => return Ok(None),
        (true, Some(m)) => m,
        (true, None) => {
            return Err(corrupt(format!(
                "its settings {doing} but it holds no {state}"
            )))
        }
        (false, Some(_)) => {
            return Err(corrupt(format!(
                "it holds {state} but its settings do not {doing}"
            )))
        }
    };
    let shape: Vec<u64> = std::iter::once(m.views)
        .chain(row_shape.iter().copied())
        .collect();
    let mut arrays = Vec::with_capacity(N);
    for name in names {
        c.expect(name, T::DTYPE, &shape)?;
        let mut rows = vec![[T::default(); W]; m.views as usize];
        c.read_into(name, &shape, rows.as_flattened_mut())?;
        arrays.push(rows);
    }
    let arrays: [Vec<[T; W]>; N] = arrays
        .try_into()
        .unwrap_or_else(|_| unreachable!("one array per name"));
    Ok(Some(PerViewState {
        arrays,
        steps: m.steps,
    }))
}

/// A per-view optimizer's state as [`read_per_view`] reads it.
#[derive(Debug)]
struct PerViewState<T, const W: usize, const N: usize> {
    /// The arrays in the order of their names: a row of `W` values per view.
    arrays: [Vec<[T; W]>; N],
    steps: u64,
}

#[cfg(test)]
mod container_tests {
    use super::*;

    fn sample(dir: &Path) -> PathBuf {
        let path = dir.join("c.bin");
        let a = [1.5f32, -2.0, 3.25, f32::MIN_POSITIVE, 7.0, 8.0];
        let b = [u64::MAX, 3];
        let c = [0.1f64];
        write_container(
            &path,
            &serde_json::json!({"step": 7}),
            &[
                ArrayRef::new("a", &[2, 3], ArrayData::F32(&a)),
                ArrayRef::new("b", &[2], ArrayData::U64(&b)),
                ArrayRef::new("c", &[1], ArrayData::F64(&c)),
                ArrayRef::new("empty", &[0, 3], ArrayData::F32(&[])),
            ],
        )
        .unwrap();
        path
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let mut c = Container::open(&path).unwrap();
        assert_eq!(c.meta()["step"], 7);
        assert_eq!(
            c.read_rows::<3>("a", 2).unwrap(),
            vec![[1.5, -2.0, 3.25], [f32::MIN_POSITIVE, 7.0, 8.0]]
        );
        assert_eq!(c.read::<u64>("b", &[2]).unwrap(), vec![u64::MAX, 3]);
        assert_eq!(c.read::<f64>("c", &[1]).unwrap(), vec![0.1]);
        assert!(c.read_rows::<3>("empty", 0).unwrap().is_empty());
        // Wrong shape or dtype is refused by name.
        let e = c.read_rows::<3>("a", 3).unwrap_err().to_string();
        assert!(e.contains("array `a`") && e.contains("expected"), "{e}");
        let e = c.read::<f32>("missing", &[1]).unwrap_err().to_string();
        assert!(e.contains("`missing` is missing"), "{e}");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let good = fs::read(&path).unwrap();
        let data_start = Container::open(&path).unwrap().data_start as usize;
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            let p = dir.path().join("bad.bin");
            fs::write(&p, &bad).unwrap();
            let result = Container::open(&p).and_then(|mut c| {
                c.read_rows::<3>("a", 2)?;
                c.read::<u64>("b", &[2])?;
                c.read::<f64>("c", &[1])?;
                Ok(())
            });
            assert!(result.is_err(), "flip at byte {i} went unnoticed");
        }
        // The sample's arrays (24 + 16 + 8 bytes) need no padding between them, so every byte
        // of the file was covered above.
        assert_eq!(good.len(), data_start + 48);
    }

    #[test]
    fn truncation_and_bad_lengths_are_refused_without_huge_allocations() {
        let dir = tempfile::tempdir().unwrap();
        let path = sample(dir.path());
        let good = fs::read(&path).unwrap();
        for cut in [0, 5, 20, 40, good.len() - 1] {
            let p = dir.path().join("cut.bin");
            fs::write(&p, &good[..cut]).unwrap();
            let e = Container::open(&p).and_then(|mut c| c.read::<f64>("c", &[1]).map(|_| ()));
            assert!(e.is_err(), "truncated at {cut}");
        }
        // A header length of 2^60 must be refused before any allocation.
        let mut bad = good.clone();
        bad[16..24].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let p = dir.path().join("len.bin");
        fs::write(&p, &bad).unwrap();
        let e = Container::open(&p).unwrap_err().to_string();
        assert!(e.contains("header length"), "{e}");
        fs::write(&p, b"PLY\nnot a checkpoint at all, just text....").unwrap();
        assert!(matches!(
            Container::open(&p),
            Err(CheckpointError::BadMagic { .. })
        ));
    }

    #[test]
    fn latest_pointer() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            latest(dir.path()),
            Err(CheckpointError::NoCheckpoint { .. })
        ));
        let name = checkpoint_file_name(1200);
        assert_eq!(name, "ckpt-00001200.bin");
        fs::write(dir.path().join(&name), b"x").unwrap();
        write_latest(dir.path(), &name).unwrap();
        assert_eq!(latest(dir.path()).unwrap(), dir.path().join(&name));
        write_file_atomic(&dir.path().join(LATEST), b"../etc/passwd\n").unwrap();
        assert!(matches!(
            latest(dir.path()),
            Err(CheckpointError::Corrupt { .. })
        ));
    }
}

#[cfg(test)]
mod state_tests {
    use super::*;

    /// A model with distinct, honest (pre-activation) values everywhere.
    fn state(n: usize) -> TrainState {
        let mut rng = Rng::new(5);
        let mut r = |lo: f64, hi: f64| rng.uniform(lo, hi) as f32;
        let sh_degree = 1;
        let mut g = Gaussians::zeros(n, sh_degree);
        for f in Field::ALL {
            let (lo, hi) = match f {
                Field::Means => (-2., 2.),
                Field::LogScales => (-5., -2.),
                Field::LogitOpacities => (-4., 3.),
                _ => (-1., 1.),
            };
            g.field_mut(f).fill_with(|| r(lo, hi));
        }
        // Quaternions far from zero length.
        g.rotations
            .iter_mut()
            .for_each(|q| q[0] = 0.5 + 0.5 * q[0].abs());
        let mut model = Model::new(g.clone());
        model.adam.exp_avg = Gaussians {
            means: g.log_scales.clone(),
            ..g.clone()
        };
        let mut sq = g.clone();
        for f in Field::ALL {
            sq.field_mut(f).iter_mut().for_each(|v| *v = v.abs());
        }
        model.adam.exp_avg_sq = sq;
        model.adam.steps = [7, 7, 7, 6, 7, 5];
        model.stats.grad_accum = (0..n).map(|i| i as f32 * 0.5).collect();
        model.stats.denom = (0..n as u32).collect();
        model.stats.max_radii = (0..n as u32).map(|i| 3 * i).collect();
        // Exposure compensation on, so its arrays round-trip too.
        let mut exposure = Exposures::default();
        exposure.step(0.01, 2, &std::array::from_fn(|k| k as f64 - 5.5));
        exposure.step(0.01, 0, &std::array::from_fn(|k| 0.25 * k as f64));
        // Pose optimisation with noise on, so its arrays round-trip too (f64, bit-exact).
        let mut poses = CameraPoses::default();
        poses.ensure(3, 0.01, &mut Rng::new(4));
        poses.step(1e-5, 1e-6, 1, &std::array::from_fn(|k| k as f64 - 2.5));
        poses.step(
            1e-5,
            1e-6,
            2,
            &std::array::from_fn(|k| 0.1 / (k as f64 + 1.0)),
        );
        TrainState {
            config: TrainConfig {
                iterations: 100,
                sh_degree,
                exposure: Some(ExposureConfig::default()),
                pose: Some(PoseConfig {
                    noise: 0.01,
                    ..PoseConfig::default()
                }),
                ..TrainConfig::default()
            },
            extent: 3.5,
            step: 42,
            model,
            growth_stopped: true,
            rng: Rng::new(9).state(),
            position: Position { epoch: 3, index: 2 },
            exposure,
            poses,
            grids: None,
        }
    }

    #[test]
    fn bilateral_grids_round_trip_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = state(11);
        let shape = GridShape { x: 3, y: 2, l: 2 };
        s.config.exposure = None;
        s.exposure = Exposures::default();
        s.config.bilagrid = Some(BilagridConfig {
            shape,
            ..BilagridConfig::default()
        });
        let mut g = BilateralGrids::new(shape);
        g.ensure(3);
        let grad: Vec<f64> = (0..shape.floats())
            .map(|k| (k as f64 - 17.0) * 1e-3)
            .collect();
        g.step(1e-3, 10.0, Some((1, &grad)));
        g.step(1e-3, 10.0, Some((2, &grad)));
        s.grids = Some(g);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        let expected = Expected {
            pack_id: "abc",
            pack_content: None,
            config: &s.config,
            extend: false,
            views: None,
        };
        let back = load_state(&path, &expected).unwrap();
        assert_eq!(back, s);
        let arrays = Container::open(&path).unwrap();
        let names: Vec<&str> = arrays.arrays().iter().map(|e| e.name.as_str()).collect();
        for name in BILAGRID_ARRAYS {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        // A run that does not learn grids refuses the checkpoint, naming the setting.
        let mut plain = s.config.clone();
        plain.bilagrid = None;
        let err = load_state(
            &path,
            &Expected {
                config: &plain,
                ..expected
            },
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("bilagrid"), "{err}");
    }

    #[test]
    fn state_round_trip_is_exact_and_latest_points_at_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(37);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        assert_eq!(path, dir.path().join("ckpt-00000042.bin"));
        assert_eq!(latest(dir.path()).unwrap(), path);
        let back = load(&path, "abc", &s.config, false).unwrap();
        assert_eq!(back, s);
    }

    /// [`load_state`] with no pack content to compare.
    fn load(
        path: &Path,
        pack_id: &str,
        config: &TrainConfig,
        extend: bool,
    ) -> Result<TrainState, CheckpointError> {
        load_state(
            path,
            &Expected {
                pack_id,
                pack_content: None,
                config,
                extend,
                views: None,
            },
        )
    }

    /// Per-view state is read only when the settings and the header agree that it is there,
    /// and as the header sizes it: each disagreement is refused, naming it.
    #[test]
    fn per_view_state_must_match_settings_and_header() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(20);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        let mut c = Container::open(&path).unwrap();
        let header = meta_of(&c).unwrap().pose;
        let corrupt = |what: String| CheckpointError::Corrupt {
            path: path.clone(),
            what,
        };
        let what = ("optimise camera poses", "camera pose state");
        let mut read = |configured: bool, meta: Option<PerViewMeta>| {
            read_per_view::<f64, POSE_LEN, 4>(
                &mut c,
                POSE_ARRAYS,
                &[POSE_LEN as u64],
                configured,
                meta,
                what,
                corrupt,
            )
        };
        let got = read(true, header).unwrap().expect("pose state");
        assert_eq!(got.steps, s.poses.steps);
        assert_eq!(got.arrays[0], s.poses.values);
        assert_eq!(got.arrays[3], s.poses.noise);
        assert!(read(false, None).unwrap().is_none());
        let e = read(true, None).unwrap_err().to_string();
        assert!(
            e.contains("optimise camera poses but it holds no camera pose state"),
            "{e}"
        );
        let e = read(false, header).unwrap_err().to_string();
        assert!(
            e.contains("holds camera pose state but its settings do not"),
            "{e}"
        );
        // A header that claims more views than the arrays hold: refused before allocating.
        let more = header.map(|m| PerViewMeta {
            views: m.views + 1,
            ..m
        });
        let e = read(true, more).unwrap_err().to_string();
        assert!(
            e.contains("pose.values") && e.contains("expected F64 [4, 6]"),
            "{e}"
        );
    }

    /// `path` with its header's `meta` edited by `edit`, under a fresh header checksum (what
    /// a writer's bug, not bit rot, would leave).
    fn edit_meta(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let bytes = fs::read(path).unwrap();
        let len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
        let end = PREAMBLE_LEN + len;
        let mut header: serde_json::Value =
            serde_json::from_slice(&bytes[PREAMBLE_LEN as usize..end as usize]).unwrap();
        edit(&mut header["meta"]);
        let json = serde_json::to_vec(&header).unwrap();
        let mut out = bytes[..16].to_vec();
        out.extend_from_slice(&(json.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxh3_64(&json).to_le_bytes());
        out.extend_from_slice(&json);
        out.resize(pad8(PREAMBLE_LEN + json.len() as u64) as usize, 0);
        out.extend_from_slice(&bytes[pad8(end) as usize..]);
        fs::write(path, out).unwrap();
    }

    /// Asserts `e` is the refusal `corrupt` names (damage, or else a checkpoint of another
    /// run) and says `says`.
    fn assert_refused(e: CheckpointError, corrupt: bool, says: &str) {
        let msg = e.to_string();
        let kind = match e {
            CheckpointError::Corrupt { .. } => true,
            CheckpointError::Mismatch { .. } => false,
            _ => panic!("neither corrupt nor a mismatch: {msg}"),
        };
        assert!(kind == corrupt && msg.contains(says), "{msg}");
    }

    /// Counts in the header size nothing before the arrays they describe are found in the
    /// file: a Gaussian count of 2⁵⁰ (a 236 PB model) is refused as corrupt, naming the first
    /// array that disagrees, where it used to abort the process allocating the model.
    #[test]
    fn header_counts_are_checked_before_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(20);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        edit_meta(&path, |m| m["num_gaussians"] = (1u64 << 50).into());
        assert_refused(
            load(&path, "abc", &s.config, false).unwrap_err(),
            true,
            "array `params.means` is F32 [20, 3], expected F32 [1125899906842624, 3]",
        );
    }

    /// A checkpoint is resumed only on the views it trained on: which ones is in its header,
    /// and its loader position must lie among the run's views. A checkpoint of an older build,
    /// which does not say, is refused only when its position is out of range, and then as
    /// written by another run, not as damaged.
    #[test]
    fn views_and_loader_position_must_fit_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(20);
        let path = save_state_of(
            dir.path(),
            (&s).into(),
            "abc",
            None,
            Some(TrainedViews::All),
        )
        .unwrap();
        let with = |views| {
            load_state(
                &path,
                &Expected {
                    pack_id: "abc",
                    pack_content: None,
                    config: &s.config,
                    extend: false,
                    views: Some(views),
                },
            )
        };
        // Position (epoch 3, index 2): inside 3 views, not inside 2.
        assert_eq!(with((TrainedViews::All, 3)).unwrap(), s);
        assert_refused(
            with((TrainedViews::TrainSplit, 3)).unwrap_err(),
            false,
            "views: checkpoint every view of the pack (without --eval), this run the training \
             views, the test views held out (--eval)",
        );
        assert_refused(
            with((TrainedViews::All, 2)).unwrap_err(),
            true,
            "its loader position (epoch 3, view 2 of the epoch) lies past the 2 views",
        );
        edit_meta(&path, |m| {
            m.as_object_mut().unwrap().remove("views");
        });
        assert_eq!(with((TrainedViews::TrainSplit, 3)).unwrap(), s);
        assert_refused(
            with((TrainedViews::TrainSplit, 2)).unwrap_err(),
            false,
            "the run that wrote it trained on other views",
        );
    }

    /// An Adam group or per-view optimizer that has stepped more often than the run has iterated
    /// is refused as damaged, naming it; as many steps as iterations is a normal run.
    #[test]
    fn adam_steps_cannot_exceed_the_iterations() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(20);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        let step = s.step;
        let load_it = || load(&path, "abc", &s.config, false);
        edit_meta(&path, |m| m["adam_steps"][3] = step.into());
        assert_eq!(load_it().unwrap().model.adam.steps[3], step);
        edit_meta(&path, |m| m["adam_steps"][3] = (step + 1).into());
        assert_refused(
            load_it().unwrap_err(),
            true,
            &format!(
                "Adam has stepped the Opacity group {} times in {step} iterations",
                step + 1
            ),
        );
        // The same for the per-view optimizers (exposure and pose are on in `state`).
        edit_meta(&path, |m| m["adam_steps"][3] = step.into());
        for (key, what) in [("exposure", "exposure"), ("pose", "camera pose")] {
            edit_meta(&path, |m| m[key]["steps"] = step.into());
            assert_eq!(load_it().unwrap().step, step, "{key}");
            edit_meta(&path, |m| m[key]["steps"] = (step + 1).into());
            assert_refused(
                load_it().unwrap_err(),
                true,
                &format!(
                    "the {what} optimizer has stepped {} times in {step} iterations",
                    step + 1
                ),
            );
            edit_meta(&path, |m| m[key]["steps"] = 2.into());
        }
    }

    #[test]
    fn refusals_name_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(20);
        let path = save_state(dir.path(), (&s).into(), "abc").unwrap();
        // Another pack.
        let e = load(&path, "def", &s.config, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pack abc") && e.contains("pack def"), "{e}");
        // Other settings.
        let other = TrainConfig {
            iterations: 200,
            ..s.config.clone()
        };
        let e = load(&path, "abc", &other, false).unwrap_err().to_string();
        assert!(
            e.contains("iterations: checkpoint 100, this run 200") && e.contains("add --extend"),
            "{e}"
        );
        // A setting left out of the checkpoint (off) but on in this run, and the other way:
        // both are differences, named as the flags name them.
        let smaller = TrainConfig {
            resolution: crate::resample::Resize::Downscale(2),
            ..s.config.clone()
        };
        let e = load(&path, "abc", &smaller, false).unwrap_err().to_string();
        assert!(
            e.contains("resolution (-r / --data-factor): checkpoint the stored size, this run downscaled 2×"),
            "{e}"
        );
        let mut small = s.clone();
        small.config.resolution = crate::resample::Resize::Downscale(2);
        let small_dir = tempfile::tempdir().unwrap();
        let small_path = save_state(small_dir.path(), (&small).into(), "abc").unwrap();
        let e = load(&small_path, "abc", &s.config, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("checkpoint downscaled 2×, this run the stored size"),
            "{e}"
        );
        load(&small_path, "abc", &small.config, false).unwrap();
        // A checkpoint made with screen-size pruning (the default before it became opt-in),
        // resumed with today's default: the message names the flag that restores it.
        let mut old_default = s.clone();
        old_default.config.densify.prune_screen_radius = Some(20);
        let old_dir = tempfile::tempdir().unwrap();
        let old_path = save_state(old_dir.path(), (&old_default).into(), "abc").unwrap();
        let e = load(&old_path, "abc", &s.config, false)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("densify.prune_screen_radius: checkpoint 20, this run null")
                && e.contains("add --prune-screen-radius 20"),
            "{e}"
        );
        // --extend: a larger iteration count continues the run with the position schedule's
        // original length; a smaller or equal one is refused, and so is any other change.
        let extend = |config: &TrainConfig| load(&path, "abc", config, true);
        let longer = extend(&other).unwrap();
        assert_eq!(longer.config.iterations, 200);
        assert_eq!(longer.config.position_lr_max_steps, Some(100));
        assert_eq!(longer.config, extended(&s.config, 200));
        assert!(longer.model == s.model && longer.step == s.step && longer.rng == s.rng);
        let lr = |c: &TrainConfig, step| c.position_schedule(1.0).at(step);
        assert_eq!(lr(&longer.config, 150), lr(&s.config, 100));
        assert_eq!(lr(&longer.config, 50), lr(&s.config, 50));
        let e = extend(&s.config).unwrap_err().to_string();
        assert!(
            e.contains("past its planned 100 iterations, but --iterations is 100"),
            "{e}"
        );
        let changed = TrainConfig {
            iterations: 200,
            lambda_dssim: 0.5,
            ..s.config.clone()
        };
        let e = extend(&changed).unwrap_err().to_string();
        assert!(
            e.contains("lambda_dssim") && !e.contains("iterations:"),
            "{e}"
        );
        // A checkpoint of the extended run resumes plainly with its own iteration count (the
        // schedule length comes from the checkpoint) and extends again from it.
        let mut ext = s.clone();
        ext.config = longer.config.clone();
        let dir2 = tempfile::tempdir().unwrap();
        let path2 = save_state(dir2.path(), (&ext).into(), "abc").unwrap();
        let plain = TrainConfig {
            iterations: 200,
            ..s.config.clone()
        };
        let again = |config: &TrainConfig, extend: bool| load(&path2, "abc", config, extend);
        assert_eq!(again(&plain, false).unwrap().config, longer.config);
        let further = TrainConfig {
            iterations: 300,
            ..s.config.clone()
        };
        assert_eq!(
            again(&further, true).unwrap().config.position_lr_max_steps,
            Some(100)
        );
        // Activated values (sigmoid opacities, exp scales) are refused, not converted.
        let mut act = s.clone();
        let g = &mut act.model.gaussians;
        g.logit_opacities
            .iter_mut()
            .for_each(|o| *o = 1.0 / (1.0 + (-*o).exp()));
        g.log_scales
            .iter_mut()
            .flatten()
            .for_each(|v| *v = v.exp() + 1.0);
        let p2 = save_state(&dir.path().join("act"), (&act).into(), "abc").unwrap();
        let e = load(&p2, "abc", &s.config, false).unwrap_err();
        assert!(matches!(e, CheckpointError::Activated { .. }), "{e}");
        assert!(e.to_string().contains("ACTIVATED"), "{e}");
        // A NaN parameter.
        let mut nan = s.clone();
        nan.model.gaussians.means[4][1] = f32::NAN;
        let p3 = save_state(&dir.path().join("nan"), (&nan).into(), "abc").unwrap();
        let e = load(&p3, "abc", &s.config, false).unwrap_err().to_string();
        assert!(
            e.contains("params.means") && e.contains("Gaussian 4"),
            "{e}"
        );
        // A flipped bit in the data.
        let mut bytes = fs::read(&path).unwrap();
        let at = bytes.len() - 10;
        bytes[at] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let e = load(&path, "abc", &s.config, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("corrupt") && e.contains("checksum"), "{e}");
    }
}
