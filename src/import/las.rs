//! LAS and LAZ, the ASPRS LiDAR exchange format (versions 1.0 to 1.4, point formats 0 to 10)
//! and its LASzip compression: the point-cloud importer ([`import`]) and `open_cloud` for
//! `gs-pack convert --points scan.laz`.
//!
//! # Import
//! `import(path)` takes one `.las` or `.laz` file or a folder of them (one cloud per file,
//! extensions matched case-insensitively, sorted by file name; cloud name = file stem, which
//! must be unique), as [`super::ply::import`] does for PLY. Whether a file is compressed is read
//! from its header, not its extension. Each file is read through once at import time (the
//! validation pass) and reopened and streamed in chunks when the pack pipeline pulls it, so no
//! cloud is ever held whole.
//!
//! # What a point becomes
//! - **position**: the record's integers times the header's scale plus its offset, in `f64`,
//!   then rounded to `f32` (the pack's position type). A position beyond `f32`'s range is an
//!   error naming the point. Georeferenced clouds (UTM coordinates in the millions of metres)
//!   lose precision in `f32`: when the spacing of `f32` values at the cloud's largest coordinate
//!   is coarser than the file's own quantum (its smallest scale), a warning says by how much,
//!   and that the points must be in the cameras' frame to seed a training run. Under
//!   [`ImportOptions::points_transform`] the position is moved in `f64` first, and the check
//!   applies to the moved position.
//! - **colour**: point formats 2, 3, 5, 7, 8 and 10 carry 16-bit RGB. The high byte is the
//!   8-bit colour, which is exact for both ways writers widen 8-bit colour (×256 and ×257).
//!   Some writers store 8-bit values unwidened: when no kept point's channel exceeds 255 (and
//!   some is above 0), the values are taken as 8-bit and a warning says so. Formats without
//!   RGB give every point [`DEFAULT_GREY`] with a warning (intensity is the return's strength,
//!   not a colour).
//! - **label**: the ASPRS classification (0 to 31 in formats 0 to 5, 0 to 255 in 6 to 10;
//!   2 ground, 6 building, 7 and 18 noise, …), so a cloud can be filtered or inspected by
//!   class after packing.
//! - **withheld** points (the classification flag the specification uses for "deleted") are
//!   left out, counted, and reported in one warning.
//! - Everything else (GPS time, returns, intensity, extra bytes, waveforms) is skipped.
//!
//! # Checks
//! The header must be self-consistent before a point is read, each failure an
//! [`ImportError`] naming the file and what to do: the `LASF` signature, version 1.x with
//! x ≤ 4, a header size at least its version's, the point data after the header and within
//! the file, a known point format whose records are at least its size, finite non-zero scales
//! and finite offsets, LAS 1.4's two point counts agreeing, every VLR within the header's
//! region. An uncompressed file must hold every record its header counts; bytes after them
//! that no waveform or extended VLR accounts for are a warning (an error under `--strict`).
//! A compressed file must carry the LASzip VLR, whose items must add up to the record size.
//!
//! # LAZ and the memory bound
//! LAZ is decompressed by the `laz` crate, so memory does not grow with the file: a few whole
//! chunks at a time, one per rayon thread, when the file has a chunk table, at least two chunks
//! and chunks of at most [`PAR_CHUNK_BYTES`] decompressed (LASzip's default chunk, 50,000
//! points, is 1 to 3.4 MB), at most [`PAR_BATCH_BYTES`] a call; otherwise on one thread, a
//! record at a time. Only the fields read here are decompressed where the format allows it
//! (layered chunks, point formats 6 to 10). The decompressor sizes some buffers from
//! numbers in the file: the chunk table's length, and, for point formats 6 to 10 (LASzip's
//! layered chunks), each layer's byte count. So before it runs, `check_laz` bounds both by the
//! file itself: the table can list no more chunks than the data has room for (each chunk starts
//! with one raw record) or the points need, its chunks must fit the data and hold the header's
//! points, and every layered chunk's layers must fit within that chunk. A damaged file is
//! refused with its chunk named instead of allocating gigabytes. A panic inside the decoder
//! (damaged data it did not anticipate) is caught and reported as damage at that point, and
//! the decoder's one unbounded recursion (point-wise GPS times, see [`GPS_DECODE_STACK`]) runs
//! on a thread whose reads stop it before its stack runs out.

use std::cell::Cell;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use laz::laszip::ChunkTable;
use laz::{DecompressionSelection, LasZipDecompressor, LazItemType, LazVlr, ParLasZipDecompressor};

use super::decoding;
use super::input::{Input, InputCloud, InputReader};
use super::ply::DEFAULT_GREY;
use super::transform::PointsTransform;
use super::{thousands, ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Format, PointChunk, PointSource};

/// The public header block's size in LAS 1.0 to 1.2; 1.3 adds the waveform offset, 1.4 the
/// extended VLRs and 64-bit counts.
pub const HEADER_1_0: u16 = 227;
pub const HEADER_1_3: u16 = 235;
pub const HEADER_1_4: u16 = 375;

/// Smallest record of each point format (0 to 10), in bytes; a record may be longer (extra
/// bytes), never shorter.
pub const MIN_RECORD: [u16; 11] = [20, 28, 26, 34, 57, 63, 30, 36, 38, 59, 67];

/// A variable-length record's header: reserved u16, user id (16 bytes), record id u16, length u16,
/// description (32 bytes).
pub const VLR_HEADER: u64 = 54;

/// The LASzip VLR's user id (NUL-padded to 16 bytes) and record id.
pub const LASZIP_USER_ID: &[u8] = b"laszip encoded";
pub const LASZIP_RECORD_ID: u16 = 22204;

/// Records read from the file (or decompressed) at a time.
const BATCH_RECORDS: usize = 4096;

/// At most this many bytes of records at a time (records may carry up to 64 KiB of extra
/// bytes each).
const BATCH_BYTES: usize = 1 << 20;

/// Buffer of the plain reader (LAZ's decoder reads through the same).
const FILE_BUFFER: usize = 64 * 1024;

/// Points allocated for a chunk up front (a chunk grows past it only when asked for more).
const INITIAL_CHUNK_CAPACITY: usize = 65_536;

/// Where a point format keeps its 16-bit RGB, if it has one.
pub fn rgb_offset(format: u8) -> Option<usize> {
    match format {
        2 => Some(20),
        3 | 5 => Some(28),
        7 | 8 | 10 => Some(30),
        _ => None,
    }
}

/// The public header block: what reading the points needs, plus what the checks compare.
#[derive(Clone, Debug, PartialEq)]
pub struct LasHeader {
    pub version: (u8, u8),
    pub header_size: u16,
    /// Byte offset of the first point record.
    pub data_offset: u64,
    pub vlr_count: u32,
    /// The point format, 0 to 10 (LASzip's compression bits removed).
    pub format: u8,
    /// LASzip marks a compressed file by setting the point format's top bits.
    pub compressed: bool,
    pub record_len: u16,
    /// The number of point records (LAS 1.4's 64-bit count where present).
    pub points: u64,
    /// The scales are finite and non-zero and the offsets finite ([`parse_header`] checks),
    /// so two headers compare equal exactly when these bytes do (no NaN).
    pub scale: [f64; 3],
    pub offset: [f64; 3],
    /// Bit 1 of the global encoding: waveform packets are inside this file.
    pub internal_waveform: bool,
    /// LAS 1.3+: where waveform data starts (0: none).
    pub waveform_start: u64,
    /// LAS 1.4: where extended VLRs start, and how many there are.
    pub evlr_start: u64,
    pub evlr_count: u32,
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn le_f64(b: &[u8], at: usize) -> f64 {
    f64::from_bits(le_u64(b, at))
}

/// Parses and checks the public header block from the file's first bytes (`bytes` holds
/// `min(file_len, 375)` of them).
pub fn parse_header(bytes: &[u8], file_len: u64, path: &Path) -> Result<LasHeader, ImportError> {
    let bad = |at: u64, msg: String| ImportError::parse(path, Location::Byte(at), msg);
    if bytes.len() < 4 || &bytes[..4] != b"LASF" {
        return Err(bad(
            0,
            "not a LAS or LAZ file: it does not start with `LASF`".to_owned(),
        ));
    }
    if bytes.len() < usize::from(HEADER_1_0) {
        return Err(bad(
            0,
            format!(
                "the file is {file_len} bytes, shorter than the smallest LAS header \
                 ({HEADER_1_0}); it is truncated"
            ),
        ));
    }
    let version = (bytes[24], bytes[25]);
    if version.0 != 1 || version.1 > 4 {
        return Err(bad(
            24,
            format!(
                "LAS version {}.{} is not one this reads (1.0 to 1.4); convert it with a LAS \
                 tool (e.g. `las2las -set_version 1.4`)",
                version.0, version.1
            ),
        ));
    }
    let needed = match version.1 {
        0..=2 => HEADER_1_0,
        3 => HEADER_1_3,
        _ => HEADER_1_4,
    };
    let header_size = le_u16(bytes, 94);
    if header_size < needed {
        return Err(bad(
            94,
            format!(
                "the header size is {header_size} bytes, but a LAS {}.{} header has {needed}; \
                 the file is damaged",
                version.0, version.1
            ),
        ));
    }
    if u64::from(header_size) > file_len || bytes.len() < usize::from(needed) {
        return Err(bad(
            94,
            format!(
                "the header claims {header_size} bytes, but the file is {file_len}; it is \
                 truncated"
            ),
        ));
    }
    let data_offset = u64::from(le_u32(bytes, 96));
    if data_offset < u64::from(header_size) || data_offset > file_len {
        return Err(bad(
            96,
            format!(
                "the point data is said to start at byte {data_offset}, which is not between \
                 the header's end ({header_size}) and the file's end ({file_len}); the file is \
                 damaged or truncated"
            ),
        ));
    }
    let format_byte = bytes[104];
    let format = format_byte & 0x3f;
    let compressed = format_byte & 0xc0 != 0;
    if format > 10 {
        return Err(bad(
            104,
            format!("point format {format} is not a LAS point format (0 to 10)"),
        ));
    }
    let record_len = le_u16(bytes, 105);
    let min_record = MIN_RECORD[usize::from(format)];
    if record_len < min_record {
        return Err(bad(
            105,
            format!(
                "point records are {record_len} bytes, but point format {format} needs at least \
                 {min_record}; the file is damaged"
            ),
        ));
    }
    let legacy = u64::from(le_u32(bytes, 107));
    let points = if version.1 >= 4 {
        let full = le_u64(bytes, 247);
        if full == 0 {
            legacy
        } else if legacy != 0 && legacy != full {
            return Err(bad(
                107,
                format!(
                    "the header's two point counts disagree ({legacy} in the legacy field, \
                     {full} in LAS 1.4's); the file is damaged, or was edited by a tool that \
                     updated only one: rewrite it with a LAS tool (e.g. `las2las`)"
                ),
            ));
        } else {
            full
        }
    } else {
        legacy
    };
    let three = |at: usize| {
        [
            le_f64(bytes, at),
            le_f64(bytes, at + 8),
            le_f64(bytes, at + 16),
        ]
    };
    let scale = three(131);
    let offset = three(155);
    for (i, axis) in ["x", "y", "z"].into_iter().enumerate() {
        if !scale[i].is_finite() || scale[i] == 0.0 {
            return Err(bad(
                131 + 8 * i as u64,
                format!(
                    "the {axis} scale factor is {}, but it must be a finite non-zero number; \
                     the file is damaged",
                    scale[i]
                ),
            ));
        }
        if !offset[i].is_finite() {
            return Err(bad(
                155 + 8 * i as u64,
                format!(
                    "the {axis} offset is {}, not a finite number; the file is damaged",
                    offset[i]
                ),
            ));
        }
    }
    // The bounds (bytes 179 to 226) are not read: they are often stale, and the coordinate
    // check uses the points themselves.
    let (waveform_start, evlr_start, evlr_count) = (
        if version.1 >= 3 {
            le_u64(bytes, 227)
        } else {
            0
        },
        if version.1 >= 4 {
            le_u64(bytes, 235)
        } else {
            0
        },
        if version.1 >= 4 {
            le_u32(bytes, 243)
        } else {
            0
        },
    );
    Ok(LasHeader {
        version,
        header_size,
        data_offset,
        vlr_count: le_u32(bytes, 100),
        format,
        compressed,
        record_len,
        points,
        scale,
        offset,
        internal_waveform: le_u16(bytes, 6) & 0b10 != 0,
        waveform_start,
        evlr_start,
        evlr_count,
    })
}

/// A reader over an [`Input`], buffered: LAZ's decoder reads a byte at a time.
type Src = BufReader<InputReader>;

fn open_src(input: &Input, at: u64) -> io::Result<Src> {
    Ok(BufReader::with_capacity(FILE_BUFFER, input.open_at(at)?))
}

/// A reader whose reads fail once the GPS-time decoder has recursed too deep
/// ([`recursion_guard`]); given only to that decoder, which reads through it a byte at a time.
struct Guarded<R>(R);

impl<R: Read> Read for Guarded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        recursion_guard()?;
        self.0.read(buf)
    }
}

impl<R: Seek> Seek for Guarded<R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}

/// The LASzip VLR of a compressed file: the `laz` crate's description and the compressor
/// (0 none, 1 point-wise, 2 point-wise chunked, 3 layered chunked).
#[derive(Clone, Debug)]
struct Laszip {
    vlr: LazVlr,
    compressor: u16,
    /// From the chunk table ([`check_laz`]): the number of chunks and the most points one
    /// holds (LASzip's chunk size for fixed-size chunks). `None` without a table.
    chunks: Option<(u64, u64)>,
}

/// Walks the VLRs between the header and the point data; returns the LASzip VLR if present
/// and whether any VLR describes a coordinate reference system.
fn read_vlrs(
    input: &Input,
    h: &LasHeader,
    path: &Path,
) -> Result<(Option<Laszip>, bool), ImportError> {
    let mut at = u64::from(h.header_size);
    let (mut laszip, mut crs) = (None, false);
    for i in 0..h.vlr_count {
        if at + VLR_HEADER > h.data_offset {
            return Err(ImportError::parse(
                path,
                Location::Byte(at),
                format!(
                    "VLR {i} of {} does not fit before the point data (byte {}); the header's \
                     VLR count or data offset is damaged",
                    h.vlr_count, h.data_offset
                ),
            ));
        }
        let mut head = [0u8; VLR_HEADER as usize];
        input
            .read_at(at, &mut head)
            .map_err(|e| ImportError::io(path, e))?;
        let user_id = &head[2..18];
        let user_id = &user_id[..user_id.iter().position(|&b| b == 0).unwrap_or(16)];
        let record_id = le_u16(&head, 18);
        let len = u64::from(le_u16(&head, 20));
        let data_at = at + VLR_HEADER;
        if data_at + len > h.data_offset {
            return Err(ImportError::parse(
                path,
                Location::Byte(at),
                format!(
                    "VLR {i} ({}, record {record_id}) runs {len} bytes past byte {data_at}, \
                     beyond the start of the point data (byte {}); the file is damaged",
                    String::from_utf8_lossy(user_id),
                    h.data_offset
                ),
            ));
        }
        if user_id == LASZIP_USER_ID && record_id == LASZIP_RECORD_ID {
            let mut data = vec![0u8; len as usize];
            input
                .read_at(data_at, &mut data)
                .map_err(|e| ImportError::io(path, e))?;
            let vlr = LazVlr::from_buffer(&data).map_err(|e| {
                ImportError::parse(
                    path,
                    Location::Byte(data_at),
                    format!("the LASzip VLR is damaged ({e}); the file cannot be decompressed"),
                )
            })?;
            let compressor = if data.len() >= 2 { le_u16(&data, 0) } else { 0 };
            laszip = Some(Laszip {
                vlr,
                compressor,
                chunks: None,
            });
        } else if user_id == b"LASF_Projection" {
            crs = true;
        }
        at = data_at + len;
    }
    Ok((laszip, crs))
}

/// How many byte-count layers a LASzip layered item stores per chunk.
fn layers_of(item: LazItemType) -> Option<u64> {
    match item {
        LazItemType::Point14 => Some(9),
        LazItemType::RGB14 | LazItemType::WavePacket14 => Some(1),
        LazItemType::RGBNIR14 => Some(2),
        LazItemType::Byte14(n) => Some(u64::from(n)),
        _ => None,
    }
}

/// Bounds what the LAZ decoder will allocate by what the file holds (see the module
/// documentation): the chunk table's length and sums, and every layered chunk's layer sizes.
/// Returns the number of chunks and the most points one holds, when the file has a table.
fn check_laz(
    input: &Input,
    h: &LasHeader,
    z: &Laszip,
    file_len: u64,
    path: &Path,
) -> Result<Option<(u64, u64)>, ImportError> {
    let damaged = |at: u64, msg: String| {
        ImportError::parse(
            path,
            Location::Byte(at),
            format!("{msg}; the LAZ file is damaged (re-compress its source, or check it with `lasinfo`)"),
        )
    };
    // Summed here in u64: the `laz` crate sums item sizes in u16, which a hostile VLR
    // overflows (a panic, or a wrapped total that would pass this check).
    let items_size: u64 = z.vlr.items().iter().map(|i| u64::from(i.size())).sum();
    if items_size != u64::from(h.record_len) {
        return Err(damaged(
            105,
            format!(
                "the LASzip VLR's items make {items_size}-byte records, but the header says \
                 {}",
                h.record_len
            ),
        ));
    }
    match z.compressor {
        1 => return Ok(None),
        2 | 3 => {}
        c => {
            return Err(damaged(
                h.data_offset,
                format!("the LASzip VLR names compressor {c}, not one LASzip writes (1 to 3)"),
            ))
        }
    }
    let layered = z.compressor == 3;
    let variable = z.vlr.uses_variable_size_chunks();
    // LASzip's offset to the chunk table, at the start of the point data or, when its writer
    // could not seek back, in the file's last 8 bytes.
    let start = h.data_offset;
    if start + 8 > file_len {
        return Err(damaged(
            start,
            "the point data is shorter than its 8-byte chunk-table offset".into(),
        ));
    }
    let mut b8 = [0u8; 8];
    let read =
        |at: u64, buf: &mut [u8]| input.read_at(at, buf).map_err(|e| ImportError::io(path, e));
    read(start, &mut b8)?;
    let mut table = i64::from_le_bytes(b8);
    if table <= start as i64 {
        read(file_len - 8, &mut b8)?;
        table = i64::from_le_bytes(b8);
    }
    if table <= start as i64 {
        if variable || layered {
            return Err(damaged(
                start,
                "the file has no chunk table (its writer did not finish), which its chunks need"
                    .into(),
            ));
        }
        return Ok(None);
    }
    let table = table as u64;
    if table < start + 8 {
        return Err(damaged(
            start,
            format!(
                "the chunk table is said to start at byte {table}, inside its own offset \
                 (bytes {start} to {})",
                start + 8
            ),
        ));
    }
    if table + 8 > file_len {
        return Err(damaged(start, format!("the chunk table is said to start at byte {table}, past the file's end ({file_len})")));
    }
    let mut b4 = [0u8; 4];
    read(table + 4, &mut b4)?;
    let chunks = u64::from(u32::from_le_bytes(b4));
    let data_bytes = table - (start + 8);
    let by_bytes = data_bytes / u64::from(h.record_len.max(1)) + 1;
    let by_points = if variable {
        h.points.saturating_add(1)
    } else {
        h.points
            .div_ceil(u64::from(z.vlr.chunk_size().max(1)))
            .saturating_add(1)
    };
    if chunks > by_bytes.min(by_points) {
        return Err(damaged(
            table,
            format!(
                "the chunk table lists {chunks} chunks, more than {} points in {data_bytes} bytes \
                 of compressed data can fill",
                h.points
            ),
        ));
    }
    let mut src = open_src(input, start).map_err(|e| ImportError::io(path, e))?;
    let entries = decoding(|| ChunkTable::read_from(&mut src, &z.vlr))
        .map_err(|_| damaged(table, "its chunk table made the decoder fail".into()))?
        .map_err(|e| damaged(table, format!("its chunk table cannot be read ({e})")))?;
    let entries = entries.as_ref();
    let bytes: u64 = entries
        .iter()
        .map(|e| e.byte_count)
        .fold(0, u64::saturating_add);
    if bytes > data_bytes {
        return Err(damaged(
            table,
            format!("the chunk table's chunks add up to {bytes} bytes, but only {data_bytes} precede the table"),
        ));
    }
    let held: u64 = if variable {
        entries
            .iter()
            .map(|e| e.point_count)
            .fold(0, u64::saturating_add)
    } else {
        (entries.len() as u64).saturating_mul(u64::from(z.vlr.chunk_size()))
    };
    if held < h.points {
        return Err(damaged(
            table,
            format!(
                "the chunk table's {} chunks hold {held} points, fewer than the header's {}",
                entries.len(),
                h.points
            ),
        ));
    }
    if layered {
        let mut layers = 0u64;
        for item in z.vlr.items() {
            layers += layers_of(item.item_type()).ok_or_else(|| {
                damaged(
                    start,
                    format!(
                        "the LASzip VLR mixes layered chunks with a point-wise item ({:?})",
                        item.item_type()
                    ),
                )
            })?;
        }
        let fixed = u64::from(h.record_len) + 4 + 4 * layers;
        let mut sizes = vec![0u8; 4 * layers as usize];
        let mut chunk_start = start + 8;
        for (i, e) in entries.iter().enumerate() {
            if e.byte_count > 0 {
                if e.byte_count < fixed {
                    return Err(damaged(
                        chunk_start,
                        format!("chunk {i} is {} bytes, too short for its first point and layer sizes ({fixed})", e.byte_count),
                    ));
                }
                read(chunk_start + u64::from(h.record_len) + 4, &mut sizes)?;
                let sum: u64 = sizes.chunks_exact(4).map(|s| u64::from(le_u32(s, 0))).sum();
                if fixed + sum > e.byte_count {
                    return Err(damaged(
                        chunk_start,
                        format!(
                            "chunk {i}'s layers claim {sum} bytes, but the chunk holds {}",
                            e.byte_count - fixed
                        ),
                    ));
                }
            }
            chunk_start += e.byte_count;
        }
    }
    let largest = if variable {
        entries.iter().map(|e| e.point_count).max().unwrap_or(0)
    } else {
        u64::from(z.vlr.chunk_size())
    };
    Ok(Some((entries.len() as u64, largest)))
}

/// The records of one pass, in file order.
enum Records {
    Plain {
        src: Src,
    },
    /// One record at a time.
    Laz {
        dec: Box<LasZipDecompressor<'static, Src>>,
    },
    /// One record at a time, point-wise GPS times among them: on a deep stack, through
    /// guarded reads ([`GPS_DECODE_STACK`]).
    GpsLaz {
        dec: Box<LasZipDecompressor<'static, Guarded<Src>>>,
    },
    /// Several chunks at a time, one per rayon thread, `batch` points a call.
    ParLaz {
        dec: Box<ParLasZipDecompressor<Src>>,
        batch: usize,
    },
}

/// Stack of the thread that decodes point-wise GPS times, and how deep the decoder may recurse
/// in it. LASzip's GPS-time decoder (point formats 1, 3, 4 and 5, and its layered twin, which
/// is never decoded here) calls itself each time the data switches to another time sequence,
/// and damaged data can switch without end: an 8 KB file overflowed an 8 MiB stack (the
/// process aborts; no error can be returned). Those formats are decoded on a thread of
/// [`GPS_DECODE_STACK`] bytes whose reads fail once the stack is [`GPS_DECODE_DEPTH`] deep.
/// The decoder reads a byte each time its interval runs low, which an adaptive model at its
/// most skewed (15-bit counts) delays by at most about 36,000 symbols, a few MiB of frames; the
/// stack is reserved, not touched, beyond what is used.
pub const GPS_DECODE_STACK: usize = 256 << 20;
pub const GPS_DECODE_DEPTH: usize = 16 << 20;

thread_local! {
    /// On a GPS-time decoding thread, the address of a local at its start; 0 elsewhere.
    static STACK_TOP: Cell<usize> = const { Cell::new(0) };
}

/// An address on the current stack.
#[inline(never)]
fn stack_address() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

/// Fails a read made deeper than [`GPS_DECODE_DEPTH`] below the start of a GPS-time decoding
/// thread (stacks grow down on every target this builds for); nothing elsewhere.
fn recursion_guard() -> io::Result<()> {
    let top = STACK_TOP.with(Cell::get);
    if top != 0 && top.saturating_sub(stack_address()) > GPS_DECODE_DEPTH {
        return Err(io::Error::other(format!(
            "its GPS-time data sends the decoder more than {} MiB deep into recursion",
            GPS_DECODE_DEPTH >> 20
        )));
    }
    Ok(())
}

/// Runs `f` on a thread of [`GPS_DECODE_STACK`] bytes whose reads are guarded by
/// [`recursion_guard`].
fn on_deep_stack<T: Send>(f: impl FnOnce() -> T + Send) -> io::Result<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("laz-gps".into())
            .stack_size(GPS_DECODE_STACK)
            .spawn_scoped(scope, || {
                STACK_TOP.with(|t| t.set(stack_address()));
                f()
            })?
            .join()
            .map_err(|_| io::Error::other("the GPS-time decoding thread failed"))
    })
}

/// Whether a point-wise item list decodes GPS times (the recursive decoder).
fn has_pointwise_gps(z: &Laszip) -> bool {
    z.vlr
        .items()
        .iter()
        .any(|i| i.item_type() == LazItemType::GpsTime)
}

/// Decompressed bytes of one chunk beyond which LAZ is decoded on one thread: the parallel
/// decoder holds whole chunks (LASzip's default chunk, 50,000 points of 20 to 67 bytes, is
/// 1 to 3.4 MB).
pub const PAR_CHUNK_BYTES: u64 = 4 << 20;

/// Decompressed bytes the parallel decoder produces a call, at most: whole chunks, one per
/// rayon thread.
pub const PAR_BATCH_BYTES: u64 = 16 << 20;

/// Points a call of the parallel decoder, when `z` suits it: a chunk table (the parallel
/// decoder needs one), at least two chunks, chunks of at most [`PAR_CHUNK_BYTES`], and more
/// than one rayon thread, and no point-wise GPS times ([`GPS_DECODE_STACK`]). `None`: decode
/// on one thread, a record at a time.
fn parallel_batch(l: &Layout, z: &Laszip) -> Option<usize> {
    if has_pointwise_gps(z) {
        // Rayon's workers have small stacks and their reads cannot be guarded.
        return None;
    }
    let (chunks, largest) = z.chunks?;
    let threads = rayon::current_num_threads() as u64;
    let chunk_bytes = largest.checked_mul(u64::from(l.header.record_len))?;
    if chunks < 2 || threads < 2 || largest == 0 || chunk_bytes > PAR_CHUNK_BYTES {
        return None;
    }
    let per_call = threads
        .min(chunks)
        .min(PAR_BATCH_BYTES / chunk_bytes)
        .max(1);
    usize::try_from(per_call * largest).ok()
}

/// One pass over a file's records.
struct Pass {
    records: Records,
    /// Records of the header not yet read, and the index of the next.
    left: u64,
    next: u64,
    buf: Vec<u8>,
    /// Records in `buf`, and the next to hand out.
    filled: usize,
    at: usize,
}

impl Pass {
    fn open(l: &Layout) -> Result<Pass, ImportError> {
        let src = open_src(&l.input, l.header.data_offset).map_err(|e| l.io(e))?;
        let records = match &l.laszip {
            None => Records::Plain { src },
            Some(z) => {
                // Layered chunks (point formats 6 to 10) let the decoder skip the layers
                // nothing here reads (intensity, scan angle, user data, point source, GPS
                // time, NIR, waveform, extra bytes): they are seeked over, never allocated.
                let wanted = DecompressionSelection::base()
                    .decompress_z()
                    .decompress_classification()
                    .decompress_flags()
                    .decompress_rgb();
                let failed = |_| l.damaged_at(0, "the decompressor failed to start".into());
                match parallel_batch(l, z) {
                    Some(batch) => {
                        let dec = decoding(|| {
                            ParLasZipDecompressor::selective(src, z.vlr.clone(), wanted)
                        })
                        .map_err(failed)?
                        .map_err(|e| l.damaged_at(0, e.to_string()))?;
                        Records::ParLaz {
                            dec: Box::new(dec),
                            batch,
                        }
                    }
                    None if has_pointwise_gps(z) => {
                        let src = Guarded(src);
                        let dec =
                            decoding(|| LasZipDecompressor::selective(src, z.vlr.clone(), wanted))
                                .map_err(failed)?
                                .map_err(|e| l.damaged_at(0, e.to_string()))?;
                        Records::GpsLaz { dec: Box::new(dec) }
                    }
                    None => {
                        let dec =
                            decoding(|| LasZipDecompressor::selective(src, z.vlr.clone(), wanted))
                                .map_err(failed)?
                                .map_err(|e| l.damaged_at(0, e.to_string()))?;
                        Records::Laz { dec: Box::new(dec) }
                    }
                }
            }
        };
        Ok(Pass {
            records,
            left: l.header.points,
            next: 0,
            buf: Vec::new(),
            filled: 0,
            at: 0,
        })
    }

    /// The next record and its index, `None` after the header's count.
    fn next<'a>(&'a mut self, l: &Layout) -> Result<Option<(u64, &'a [u8])>, ImportError> {
        let len = usize::from(l.header.record_len);
        if self.at == self.filled {
            if self.left == 0 {
                return Ok(None);
            }
            let batch = match &self.records {
                Records::ParLaz { batch, .. } => *batch,
                _ => BATCH_RECORDS.min(BATCH_BYTES / len).max(1),
            };
            let n = self.left.min(batch as u64) as usize;
            self.buf.resize(n * len, 0);
            let first = self.next;
            match &mut self.records {
                Records::Plain { src } => src.read_exact(&mut self.buf).map_err(|e| {
                    if e.kind() == io::ErrorKind::UnexpectedEof {
                        l.changed(&format!("it ends before point {first}"))
                    } else {
                        l.io(e)
                    }
                })?,
                Records::ParLaz { dec, .. } => {
                    let buf = &mut self.buf;
                    let r = decoding(|| dec.decompress_many(buf).map_err(|e| e.to_string()));
                    // Chunks decode at once: the damage lies in this batch.
                    decode_failure(l, first, ", at or after this point", r)?;
                }
                Records::Laz { dec } => {
                    let (r, done) = decode_each(dec, &mut self.buf, len);
                    decode_failure(l, first + done, "", r)?;
                }
                Records::GpsLaz { dec } => {
                    let mut done = 0;
                    let buf = &mut self.buf;
                    let r = on_deep_stack(|| {
                        let (r, n) = decode_each(dec, buf, len);
                        done = n;
                        r
                    })
                    .unwrap_or_else(|e| Ok(Err(e.to_string())));
                    decode_failure(l, first + done, "", r)?;
                }
            }
            self.left -= n as u64;
            self.filled = n;
            self.at = 0;
        }
        let i = self.next;
        let rec = &self.buf[self.at * len..(self.at + 1) * len];
        self.at += 1;
        self.next += 1;
        Ok(Some((i, rec)))
    }
}

/// Decodes `buf`'s records one at a time; returns the outcome (an error, or a caught panic)
/// and how many records were decoded before it.
fn decode_each<R: Read + Seek + Send + Sync>(
    dec: &mut LasZipDecompressor<'static, R>,
    buf: &mut [u8],
    len: usize,
) -> (std::thread::Result<Result<(), String>>, u64) {
    let mut done = 0u64;
    let r = decoding(|| -> Result<(), String> {
        for rec in buf.chunks_exact_mut(len) {
            dec.decompress_one(rec).map_err(|e| e.to_string())?;
            done += 1;
        }
        Ok(())
    });
    (r, done)
}

/// The damage a failed LAZ decode (an error, or a caught panic) reports at point `at`, `where_`
/// qualifying the point.
fn decode_failure(
    l: &Layout,
    at: u64,
    where_: &str,
    r: std::thread::Result<Result<(), String>>,
) -> Result<(), ImportError> {
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(l.damaged_at(
            at,
            format!("its compressed data cannot be decoded{where_} ({e})"),
        )),
        Err(_) => Err(l.damaged_at(
            at,
            format!("its compressed data made the decoder fail{where_}"),
        )),
    }
}

/// One decoded record.
struct Point {
    xyz: [f64; 3],
    rgb: Option<[u16; 3]>,
    class: u8,
    withheld: bool,
}

/// Decodes a record, its position moved by `transform` (in `f64`) when given.
fn decode(rec: &[u8], h: &LasHeader, transform: Option<&PointsTransform>) -> Point {
    let mut xyz =
        std::array::from_fn(|i| f64::from(le_u32(rec, 4 * i) as i32) * h.scale[i] + h.offset[i]);
    if let Some(t) = transform {
        xyz = t.point(xyz);
    }
    let (class, withheld) = if h.format < 6 {
        (rec[15] & 0x1f, rec[15] & 0x80 != 0)
    } else {
        (rec[16], rec[15] & 0x04 != 0)
    };
    let rgb =
        rgb_offset(h.format).map(|o| [le_u16(rec, o), le_u16(rec, o + 2), le_u16(rec, o + 4)]);
    Point {
        xyz,
        rgb,
        class,
        withheld,
    }
}

/// How 16-bit colour channels become 8-bit.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ColourScale {
    /// The specification's 16-bit values: the high byte.
    Sixteen,
    /// A writer's unwidened 8-bit values: as they are.
    Eight,
}

/// A file, its checked header and how its records are read.
struct Layout {
    path: PathBuf,
    input: Input,
    file_len: u64,
    header: LasHeader,
    laszip: Option<Laszip>,
    /// `--points-transform`, applied to positions in `f64`.
    transform: Option<PointsTransform>,
}

impl Layout {
    fn io(&self, e: io::Error) -> ImportError {
        ImportError::io(&self.path, e)
    }

    fn changed(&self, what: &str) -> ImportError {
        ImportError::invalid(
            &self.path,
            format!("the file changed since it was imported ({what}); run the import again"),
        )
    }

    fn damaged_at(&self, point: u64, msg: String) -> ImportError {
        ImportError::parse(
            &self.path,
            Location::Record(point),
            format!("{msg}; the LAZ file is damaged (re-compress its source, or check it with `lasinfo`)"),
        )
    }

    fn read_header(input: &Input, path: &Path) -> Result<(LasHeader, u64), ImportError> {
        let file_len = input.len().map_err(|e| ImportError::io(path, e))?;
        let n = file_len.min(u64::from(HEADER_1_4)) as usize;
        let mut bytes = vec![0u8; n];
        input
            .read_at(0, &mut bytes)
            .map_err(|e| ImportError::io(path, e))?;
        Ok((parse_header(&bytes, file_len, path)?, file_len))
    }
}

/// One LAS or LAZ file as a [`PointSource`]: checked and counted at import (the validation
/// pass), streamed when the pack pipeline pulls it.
struct LasCloud {
    name: String,
    layout: Layout,
    colour: ColourScale,
    /// Points the validation pass kept: exactly what the stream delivers.
    kept: u64,
    delivered: u64,
    pass: Option<Pass>,
    done: bool,
}

/// The `f32` spacing at `v` (the distance to the next representable `f32`).
fn f32_spacing(v: f64) -> f64 {
    let f = v.abs() as f32;
    f64::from(f32::from_bits(f.to_bits() + 1) - f)
}

impl InputCloud for LasCloud {
    fn open(
        input: Input,
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<LasCloud, ImportError> {
        let (header, file_len) = Layout::read_header(&input, path)?;
        let (laszip, crs) = read_vlrs(&input, &header, path)?;
        let laszip =
            match (header.compressed, laszip) {
                (true, Some(mut z)) => {
                    z.chunks = check_laz(&input, &header, &z, file_len, path)?;
                    Some(z)
                }
                (true, None) => return Err(ImportError::parse(
                    path,
                    Location::Byte(104),
                    "the point format marks the file as compressed (LAZ), but it has no LASzip \
                     VLR describing how; the file is damaged",
                )),
                // A LASzip VLR a tool left in an uncompressed file describes nothing.
                (false, _) => None,
            };
        let layout = Layout {
            path: path.to_owned(),
            input,
            file_len,
            header,
            laszip,
            transform: options.points_transform.clone(),
        };
        let h = &layout.header;
        let mut trailing = None;
        if layout.laszip.is_none() {
            let need = h
                .points
                .checked_mul(u64::from(h.record_len))
                .and_then(|b| b.checked_add(h.data_offset));
            match need {
                Some(end) if end <= file_len => {
                    let accounted = (h.internal_waveform && h.waveform_start >= end)
                        || (h.evlr_count > 0 && h.evlr_start >= end);
                    if end < file_len && !accounted {
                        trailing = Some(format!(
                            "{} bytes follow the {} point records and would be ignored; the header may understate the point count",
                            file_len - end,
                            thousands(h.points)
                        ));
                    }
                }
                _ => {
                    let room = (file_len - h.data_offset) / u64::from(h.record_len);
                    return Err(ImportError::parse(
                        path,
                        Location::Record(room),
                        format!(
                            "the header counts {} points of {} bytes, but the file holds only {} \
                             of them; it is truncated (copy it again)",
                            thousands(h.points),
                            h.record_len,
                            thousands(room)
                        ),
                    ));
                }
            }
        }

        // The validation pass: every record read, decoded and checked.
        let mut pass = Pass::open(&layout)?;
        let (mut kept, mut withheld, mut max_channel, mut max_abs) = (0u64, 0u64, 0u16, 0f64);
        while let Some((i, rec)) = pass.next(&layout)? {
            let p = decode(rec, h, layout.transform.as_ref());
            if p.withheld {
                withheld += 1;
                continue;
            }
            for (axis, v) in ["x", "y", "z"].into_iter().zip(p.xyz) {
                if !(v as f32).is_finite() {
                    let (how, wrong) = match layout.transform {
                        Some(_) => (
                            "record × scale + offset, moved by --points-transform",
                            format!("the header's {axis} scale or offset, or the transform,"),
                        ),
                        None => (
                            "record × scale + offset",
                            format!("the header's {axis} scale or offset"),
                        ),
                    };
                    return Err(ImportError::parse(
                        path,
                        Location::Record(i),
                        format!(
                            "{axis} = {v:e} ({how}) is beyond a 32-bit float's range; {wrong} is \
                             wrong"
                        ),
                    ));
                }
                max_abs = max_abs.max(v.abs());
            }
            if let Some(rgb) = p.rgb {
                max_channel = max_channel.max(rgb[0]).max(rgb[1]).max(rgb[2]);
            }
            kept += 1;
        }
        drop(pass);
        let display = path.display();
        if let Some(msg) = trailing {
            if options.strict {
                return Err(ImportError::invalid(
                    path,
                    format!("{msg} (refused under --strict)"),
                ));
            }
            warnings.push(format!("{display}: {msg}"));
        }
        if withheld > 0 {
            warnings.push(format!(
                "{display}: {} of {} points are flagged withheld (deleted) and are left out",
                thousands(withheld),
                thousands(h.points)
            ));
        }
        let has_rgb = rgb_offset(h.format).is_some();
        let colour = if has_rgb && kept > 0 && max_channel > 0 && max_channel <= 255 {
            warnings.push(format!(
                "{display}: every colour channel is at most {max_channel}, so the colours are \
                 taken as 8-bit values (LAS specifies 16-bit ones, but some writers store 8-bit \
                 colour as it is)"
            ));
            ColourScale::Eight
        } else {
            ColourScale::Sixteen
        };
        if !has_rgb {
            warnings.push(format!(
                "{display}: point format {} has no colour; points get grey {DEFAULT_GREY:?} (a \
                 LiDAR return's intensity is its strength, not a colour: colourise the scan \
                 from photos first to give the points colour)",
                h.format
            ));
        }
        // The file's quantum, in the frame the points are packed in.
        let quantum = h.scale.iter().fold(f64::INFINITY, |m, s| m.min(s.abs()))
            * layout.transform.as_ref().map_or(1.0, |t| t.mean_scale());
        let spacing = f32_spacing(max_abs);
        if spacing > quantum {
            let (reach, advice) = match layout.transform {
                Some(_) => (
                    "moved by --points-transform, coordinates still reach",
                    "check that the transform brings the cloud into the cameras' frame",
                ),
                None => (
                    "coordinates reach",
                    "points seeding a training run must be in the cameras' frame anyway: move \
                     the cloud there (--points-transform FILE, the registration's matrix)",
                ),
            };
            warnings.push(format!(
                "{display}: {reach} {max_abs:.3}{}, where 32-bit floats (the pack's positions) \
                 are {spacing} apart, coarser than the file's {quantum} quantum; {advice}",
                if crs {
                    " (the file is georeferenced)"
                } else {
                    ""
                }
            ));
        }
        Ok(LasCloud {
            name,
            layout,
            colour,
            kept,
            delivered: 0,
            pass: None,
            done: false,
        })
    }
}

impl LasCloud {
    /// Reopens the file for the streaming pass, checking it is the one that was validated.
    fn reopen(&self) -> Result<Pass, ImportError> {
        let l = &self.layout;
        let (header, len) = Layout::read_header(&l.input, &l.path)?;
        if len != l.file_len {
            return Err(l.changed(&format!("its size is {len} bytes, was {}", l.file_len)));
        }
        if header != l.header {
            return Err(l.changed("its header differs"));
        }
        Pass::open(l)
    }
}

impl PointSource for LasCloud {
    type Error = ImportError;

    fn name(&self) -> &str {
        &self.name
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.kept)
    }

    fn has_labels(&self) -> bool {
        true
    }

    fn has_normals(&self) -> bool {
        false
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError> {
        if self.done {
            return Ok(None);
        }
        if max_points == 0 {
            return Err(ImportError::invalid(
                &self.layout.path,
                "next_chunk called with max_points = 0",
            ));
        }
        if self.pass.is_none() {
            self.pass = Some(self.reopen()?);
        }
        let cap = max_points.min(INITIAL_CHUNK_CAPACITY);
        let mut chunk = PointChunk {
            xyz: Vec::with_capacity(cap),
            rgb: Vec::with_capacity(cap),
            labels: Some(Vec::with_capacity(cap)),
            normals: None,
        };
        let l = &self.layout;
        while chunk.len() < max_points {
            let pass = self.pass.as_mut().expect("opened above");
            let Some((_, rec)) = pass.next(l)? else {
                self.pass = None;
                self.done = true;
                if self.delivered != self.kept {
                    return Err(l.changed(&format!(
                        "it now has {} points that are not withheld, the import counted {}",
                        self.delivered, self.kept
                    )));
                }
                break;
            };
            let p = decode(rec, &l.header, l.transform.as_ref());
            if p.withheld {
                continue;
            }
            if self.delivered == self.kept {
                return Err(l.changed(&format!(
                    "it has more points that are not withheld than the {} the import counted",
                    self.kept
                )));
            }
            self.delivered += 1;
            chunk.xyz.push(p.xyz.map(|v| v as f32));
            chunk.rgb.push(match (p.rgb, self.colour) {
                (None, _) => DEFAULT_GREY,
                (Some(c), ColourScale::Sixteen) => c.map(|v| (v >> 8) as u8),
                // At most 255 in every kept point (the validation pass's finding).
                (Some(c), ColourScale::Eight) => c.map(|v| v.min(255) as u8),
            });
            if let Some(labels) = chunk.labels.as_mut() {
                labels.push(i32::from(p.class));
            }
        }
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk))
    }
}

/// Imports one `.las`/`.laz` file or a folder of them (see the module documentation).
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    super::import_cloud_files(path, &["las", "laz"], Format::Las, options, open_cloud)
}

/// One LAS or LAZ file as the cloud `name` (checked and counted now, streamed when the pack
/// pipeline pulls it), for `--points`.
pub(crate) fn open_cloud(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    LasCloud::boxed(Input::File(path.to_owned()), path, name, options, warnings)
}

/// A LAS or LAZ file held in memory as the cloud `name`, with the file importer's checks and
/// warnings; `path` only names it in messages. For the fuzz target and tests: a file is better
/// read through [`import`], which never holds it whole.
pub fn cloud_from_bytes(
    bytes: impl Into<Arc<[u8]>>,
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    LasCloud::boxed(Input::Bytes(bytes.into()), path, name, options, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::las::{las_bytes, las_points, LasPoint as P, LasSpec as Spec, LazChunks};

    /// A cloud and the warnings its import gave.
    type Opened = (Box<dyn PointSource<Error = ImportError>>, Vec<String>);

    fn open(bytes: Vec<u8>) -> Result<Opened, ImportError> {
        open_with(bytes, &ImportOptions::default())
    }

    fn open_with(bytes: Vec<u8>, options: &ImportOptions) -> Result<Opened, ImportError> {
        let mut warnings = Vec::new();
        let c = cloud_from_bytes(bytes, Path::new("scan.las"), "scan", options, &mut warnings)?;
        Ok((c, warnings))
    }

    fn read_all(
        c: &mut dyn PointSource<Error = ImportError>,
        max: usize,
    ) -> Result<PointChunk, ImportError> {
        let mut all = PointChunk {
            xyz: vec![],
            rgb: vec![],
            labels: Some(vec![]),
            normals: None,
        };
        while let Some(ch) = c.next_chunk(max)? {
            assert!(ch.len() <= max && ch.is_consistent());
            all.xyz.extend(ch.xyz);
            all.rgb.extend(ch.rgb);
            all.labels.as_mut().unwrap().extend(ch.labels.unwrap());
        }
        Ok(all)
    }

    fn expect_points(spec: &Spec, pts: &[P], got: &PointChunk, eight_bit: bool) {
        let kept: Vec<&P> = pts.iter().filter(|p| !p.withheld).collect();
        assert_eq!(got.len(), kept.len());
        for (k, p) in kept.iter().enumerate() {
            let want: [f32; 3] = std::array::from_fn(|i| {
                (f64::from(p.xyz[i]) * spec.scale[i] + spec.offset[i]) as f32
            });
            assert_eq!(got.xyz[k], want, "point {k}");
            let rgb = if rgb_offset(spec.format).is_none() {
                DEFAULT_GREY
            } else if eight_bit {
                p.rgb.map(|v| v as u8)
            } else {
                p.rgb.map(|v| (v >> 8) as u8)
            };
            assert_eq!(got.rgb[k], rgb, "point {k}");
            assert_eq!(got.labels.as_ref().unwrap()[k], i32::from(p.class));
        }
    }

    fn msg(e: &ImportError) -> String {
        e.to_string()
    }

    /// Runs `f` on a rayon pool of `threads` threads: one decodes LAZ a record at a time,
    /// more decode chunks in parallel ([`parallel_batch`]).
    fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(f)
    }

    #[test]
    fn every_point_format_reads_back_from_las_and_laz() {
        let pts = las_points(1000);
        for format in 0..=10u8 {
            let minor = if format < 6 { 2 } else { 4 };
            for spec in [
                Spec::new(minor, format),
                Spec::new(minor, format).laz(LazChunks::Fixed(128)),
                Spec::new(minor, format).laz(LazChunks::Variable(70)),
            ] {
                let bytes = las_bytes(&spec, &pts);
                for threads in [1, 4] {
                    let (mut c, warnings) = with_threads(threads, || open(bytes.clone())).unwrap();
                    assert_eq!(c.declared_len(), Some(1000));
                    assert!(c.has_labels() && !c.has_normals());
                    let got = with_threads(threads, || read_all(c.as_mut(), 333)).unwrap();
                    expect_points(&spec, &pts, &got, false);
                    assert_eq!(
                        warnings.iter().any(|w| w.contains("has no colour")),
                        rgb_offset(format).is_none(),
                        "{format}: {warnings:?}"
                    );
                    // The stream ends, and stays ended.
                    assert!(c.next_chunk(10).unwrap().is_none());
                }
            }
        }
    }

    #[test]
    fn the_parallel_decoder_is_chosen_only_where_it_fits() {
        /// The batch `parallel_batch` gives a file of `spec` on `threads` threads.
        fn batch(spec: &Spec, n: usize, threads: usize) -> Option<usize> {
            let input = Input::Bytes(las_bytes(spec, &las_points(n)).into());
            let path = Path::new("x");
            let (header, file_len) = Layout::read_header(&input, path).unwrap();
            let mut z = read_vlrs(&input, &header, path).unwrap().0.unwrap();
            z.chunks = check_laz(&input, &header, &z, file_len, path).unwrap();
            let l = Layout {
                path: path.into(),
                input,
                file_len,
                header,
                laszip: Some(z.clone()),
                transform: None,
            };
            with_threads(threads, || parallel_batch(&l, &z))
        }
        let fixed = Spec::new(2, 2).laz(LazChunks::Fixed(100));
        assert_eq!(batch(&fixed, 400, 1), None);
        assert_eq!(batch(&fixed, 400, 3), Some(300));
        assert_eq!(batch(&fixed, 400, 8), Some(400)); // four chunks
        let variable = Spec::new(4, 7).laz(LazChunks::Variable(70));
        assert_eq!(batch(&variable, 400, 2), Some(140));
        // Point-wise GPS times: one guarded thread (`GPS_DECODE_STACK`).
        for format in [1, 3, 4, 5] {
            let gps = Spec::new(2, format).laz(LazChunks::Fixed(100));
            assert_eq!(batch(&gps, 400, 4), None, "{format}");
        }
        // One chunk: nothing to share.
        let one = Spec::new(2, 2).laz(LazChunks::Fixed(1000));
        assert_eq!(batch(&one, 400, 4), None);
        // Chunks of more than 4 MiB decompressed (200,000 × 26 bytes): one thread.
        let big = Spec::new(2, 2).laz(LazChunks::Fixed(200_000));
        assert_eq!(batch(&big, 400_001, 4), None);
        // At 150,000 points (3.9 MB) they are shared, four at a time (16 MiB at most).
        let fits = Spec::new(2, 2).laz(LazChunks::Fixed(150_000));
        assert_eq!(batch(&fits, 600_001, 8), Some(600_000));
    }

    #[test]
    fn versions_extra_bytes_and_foreign_vlrs() {
        let pts = las_points(300);
        for minor in 0..=4u8 {
            let mut spec = Spec::new(minor, 3);
            spec.extra = 7;
            spec.vlrs = vec![
                ("LASF_Projection".into(), 34735, vec![1; 40]),
                ("other".into(), 1, vec![]),
            ];
            let (mut c, _) = open(las_bytes(&spec, &pts)).unwrap();
            expect_points(&spec, &pts, &read_all(c.as_mut(), 1000).unwrap(), false);
            let spec = spec.laz(LazChunks::Fixed(50));
            let (mut c, _) = open(las_bytes(&spec, &pts)).unwrap();
            expect_points(&spec, &pts, &read_all(c.as_mut(), 1000).unwrap(), false);
        }
    }

    #[test]
    fn withheld_points_are_left_out_and_counted() {
        let mut pts = las_points(500);
        for (i, p) in pts.iter_mut().enumerate() {
            p.withheld = i % 10 == 3;
        }
        for spec in [
            Spec::new(2, 3),
            Spec::new(4, 7),
            Spec::new(4, 7).laz(LazChunks::Fixed(64)),
        ] {
            let (mut c, warnings) = open(las_bytes(&spec, &pts)).unwrap();
            assert_eq!(c.declared_len(), Some(450));
            expect_points(&spec, &pts, &read_all(c.as_mut(), 100).unwrap(), false);
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("50 of 500 points are flagged withheld")),
                "{warnings:?}"
            );
        }
    }

    #[test]
    fn eight_bit_colours_are_recognised() {
        let mut pts = las_points(200);
        for p in &mut pts {
            p.rgb = p.rgb.map(|v| v >> 8);
        }
        let spec = Spec::new(2, 2);
        let (mut c, warnings) = open(las_bytes(&spec, &pts)).unwrap();
        expect_points(&spec, &pts, &read_all(c.as_mut(), 64).unwrap(), true);
        assert!(warnings.iter().any(|w| w.contains("8-bit")), "{warnings:?}");
        // One channel above 255 anywhere: 16-bit, no warning.
        pts[150].rgb[2] = 256;
        let (mut c, warnings) = open(las_bytes(&spec, &pts)).unwrap();
        expect_points(&spec, &pts, &read_all(c.as_mut(), 64).unwrap(), false);
        assert!(
            !warnings.iter().any(|w| w.contains("8-bit")),
            "{warnings:?}"
        );
    }

    #[test]
    fn georeferenced_coordinates_warn_about_f32_precision() {
        let pts = las_points(50);
        let mut spec = Spec::new(2, 3);
        spec.offset = [500_000.0, 4_200_000.0, 100.0];
        spec.scale = [0.01; 3];
        spec.vlrs = vec![("LASF_Projection".into(), 34735, vec![0; 8])];
        let (_, warnings) = open(las_bytes(&spec, &pts)).unwrap();
        let w = warnings
            .iter()
            .find(|w| w.contains("32-bit floats"))
            .expect("a warning");
        assert!(
            w.contains("0.5 apart") && w.contains("georeferenced"),
            "{w}"
        );
        // Local coordinates at millimetres: no warning.
        let (_, warnings) = open(las_bytes(&Spec::new(2, 3), &pts)).unwrap();
        assert!(
            !warnings.iter().any(|w| w.contains("32-bit floats")),
            "{warnings:?}"
        );
    }

    /// Patches `bytes` at `at` with `with`.
    fn patched(bytes: &[u8], at: usize, with: &[u8]) -> Vec<u8> {
        let mut b = bytes.to_vec();
        b[at..at + with.len()].copy_from_slice(with);
        b
    }

    fn refused(bytes: Vec<u8>, at: Location, needle: &str) {
        match open(bytes) {
            Err(e @ ImportError::Parse { at: got, .. }) => {
                assert_eq!(got, at, "{e}");
                assert!(
                    msg(&e).contains(needle) && msg(&e).contains("scan.las"),
                    "{e}"
                );
            }
            Err(e) => panic!("wrong error for {needle:?}: {e}"),
            Ok(_) => panic!("accepted, expected {needle:?}"),
        }
    }

    #[test]
    fn damaged_headers_are_refused_naming_the_field() {
        let good = las_bytes(&Spec::new(4, 7), &las_points(20));
        refused(
            good[..200].to_vec(),
            Location::Byte(0),
            "shorter than the smallest LAS header",
        );
        // A field patched at byte `at`: the error names that byte.
        let field = |at: usize, with: &[u8], needle: &str| {
            refused(patched(&good, at, with), Location::Byte(at as u64), needle)
        };
        field(0, b"LASG", "does not start with `LASF`");
        field(24, &[2, 0], "LAS version 2.0");
        field(94, &300u16.to_le_bytes(), "a LAS 1.4 header has 375");
        field(94, &60_000u16.to_le_bytes(), "truncated");
        field(
            96,
            &100u32.to_le_bytes(),
            "point data is said to start at byte 100",
        );
        field(96, &u32::MAX.to_le_bytes(), "damaged or truncated");
        field(104, &[11], "point format 11");
        field(104, &[0x87], "no LASzip VLR"); // compressed, without the LASzip VLR
        field(105, &20u16.to_le_bytes(), "needs at least 36");
        field(107, &19u32.to_le_bytes(), "two point counts disagree (19");
        field(139, &0f64.to_le_bytes(), "y scale factor is 0");
        field(147, &f64::NAN.to_le_bytes(), "z scale factor is NaN");
        field(155, &f64::INFINITY.to_le_bytes(), "x offset is inf");
        // The minor version names the version's first byte.
        refused(
            patched(&good, 25, &[5]),
            Location::Byte(24),
            "LAS version 1.5",
        );
        // A point count beyond the data names the first missing point.
        for count in [21, u64::MAX] {
            let bytes = patched(&good, 247, &count.to_le_bytes());
            refused(bytes, Location::Record(20), "holds only 20");
        }
        // VLRs.
        let mut spec = Spec::new(2, 3);
        spec.vlrs = vec![("a".into(), 1, vec![0; 10])];
        let with_vlr = las_bytes(&spec, &las_points(5));
        refused(
            patched(&with_vlr, 100, &2u32.to_le_bytes()),
            Location::Byte(291),
            "VLR 1 of 2 does not fit",
        );
        refused(
            patched(&with_vlr, 227 + 20, &11u16.to_le_bytes()),
            Location::Byte(227),
            "VLR 0 (a, record 1) runs 11 bytes",
        );
        // A position beyond f32.
        let mut spec = Spec::new(2, 0);
        spec.scale = [1e300, 1.0, 1.0];
        refused(
            las_bytes(&spec, &las_points(3)),
            Location::Record(0),
            "x = -1.0000000000000001e305",
        );
    }

    #[test]
    fn bounds_are_not_read() {
        // NaN bounds (found by the fuzz target: the stream then saw "another" header, as NaN
        // is not equal to itself) and bounds that exclude every point.
        let pts = las_points(30);
        let good = las_bytes(&Spec::new(2, 3), &pts);
        let mut bad = patched(&good, 179, &f64::NAN.to_le_bytes());
        bad = patched(&bad, 187, &1e9f64.to_le_bytes());
        let (mut c, _) = open(bad).unwrap();
        expect_points(
            &Spec::new(2, 3),
            &pts,
            &read_all(c.as_mut(), 7).unwrap(),
            false,
        );
    }

    #[test]
    fn trailing_bytes_warn_or_refuse_under_strict() {
        let mut bytes = las_bytes(&Spec::new(2, 3), &las_points(10));
        bytes.extend([1, 2, 3]);
        let (_, warnings) = open(bytes.clone()).unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("3 bytes follow the 10 point records")),
            "{warnings:?}"
        );
        let strict = ImportOptions {
            strict: true,
            ..ImportOptions::default()
        };
        let e = open_with(bytes, &strict).map(|_| ()).unwrap_err();
        assert!(msg(&e).contains("refused under --strict"), "{e}");
    }

    /// Where the LASzip VLR's data and the point data start in a file written by [`write`]
    /// with no other VLRs.
    fn laz_offsets(bytes: &[u8]) -> (usize, usize) {
        (
            usize::from(le_u16(bytes, 94)) + VLR_HEADER as usize,
            le_u32(bytes, 96) as usize,
        )
    }

    #[test]
    fn damaged_laz_is_refused_before_it_can_allocate() {
        let pts = las_points(400);
        let fixed = las_bytes(&Spec::new(2, 3).laz(LazChunks::Fixed(100)), &pts);
        let (vlr_at, data_at) = laz_offsets(&fixed);
        let table = i64::from_le_bytes(fixed[data_at..data_at + 8].try_into().unwrap()) as usize;
        // A chunk table claiming four billion chunks.
        refused(
            patched(&fixed, table + 4, &u32::MAX.to_le_bytes()),
            Location::Byte(table as u64),
            "lists 4294967295 chunks",
        );
        // Chunks that cannot hold the header's points.
        refused(
            patched(&fixed, table + 4, &3u32.to_le_bytes()),
            Location::Byte(table as u64),
            "3 chunks hold 300 points, fewer than the header's 400",
        );
        // A chunk-table offset inside itself (found by the fuzz target), and past the end.
        refused(
            patched(&fixed, data_at, &(data_at as i64 + 3).to_le_bytes()),
            Location::Byte(data_at as u64),
            "inside its own offset",
        );
        // A point count at u64's end.
        let mut spec = Spec::new(4, 7).laz(LazChunks::Variable(70));
        spec.extra = 0;
        let variable = las_bytes(&spec, &pts);
        let (_, vdata_at) = laz_offsets(&variable);
        let vtable =
            i64::from_le_bytes(variable[vdata_at..vdata_at + 8].try_into().unwrap()) as u64;
        refused(
            patched(&variable, 247, &u64::MAX.to_le_bytes()),
            Location::Byte(vtable),
            "hold 400 points, fewer than the header's 18446744073709551615",
        );
        refused(
            patched(&fixed, data_at, &(1i64 << 40).to_le_bytes()),
            Location::Byte(data_at as u64),
            "past the file's end",
        );
        // Items that do not make the header's record size.
        let mut bad = fixed.clone();
        bad[105..107].copy_from_slice(&35u16.to_le_bytes());
        refused(bad, Location::Byte(105), "items make 34-byte records");
        // An unknown compressor.
        refused(
            patched(&fixed, vlr_at, &9u16.to_le_bytes()),
            Location::Byte(vlr_at as u64),
            "Compressor type 9",
        );

        // Layered (point format 6+): a layer claiming four gigabytes.
        let layered = las_bytes(&Spec::new(4, 7).laz(LazChunks::Fixed(100)), &pts);
        let (vlr_at, data_at) = laz_offsets(&layered);
        // Items whose sizes overflow 16 bits (found by the fuzz target: the `laz` crate sums
        // them in u16). The second item, RGB14, becomes 65,530 extra bytes.
        let mut item = [0u8; 4];
        item[..2].copy_from_slice(&14u16.to_le_bytes());
        item[2..].copy_from_slice(&65_530u16.to_le_bytes());
        refused(
            patched(&layered, vlr_at + 34 + 6, &item),
            Location::Byte(105),
            "items make 65560-byte records",
        );
        let first_chunk = data_at + 8;
        let sizes = first_chunk + 36 + 4;
        refused(
            patched(&layered, sizes + 4, &u32::MAX.to_le_bytes()),
            Location::Byte(first_chunk as u64),
            "chunk 0's layers claim",
        );
        // Variable-size chunks without their table.
        let variable = las_bytes(&Spec::new(4, 7).laz(LazChunks::Variable(70)), &pts);
        let (_, data_at) = laz_offsets(&variable);
        let mut bad = patched(&variable, data_at, &0i64.to_le_bytes());
        let n = bad.len();
        bad[n - 8..].copy_from_slice(&0i64.to_le_bytes());
        refused(bad, Location::Byte(data_at as u64), "no chunk table");
    }

    #[test]
    fn damaged_compressed_data_is_an_error_at_a_point_never_a_panic() {
        for threads in [1, 4] {
            with_threads(threads, damaged_compressed_data_is_an_error);
        }
    }

    fn damaged_compressed_data_is_an_error() {
        let pts = las_points(400);
        for spec in [
            Spec::new(2, 3).laz(LazChunks::Fixed(100)),
            Spec::new(4, 8).laz(LazChunks::Fixed(100)),
            Spec::new(4, 7).laz(LazChunks::Variable(70)),
        ] {
            let good = las_bytes(&spec, &pts);
            let (_, data_at) = laz_offsets(&good);
            let table = i64::from_le_bytes(good[data_at..data_at + 8].try_into().unwrap()) as usize;
            // Flip bytes all over the compressed data: each file is refused or read; a read one
            // delivers exactly the points it declared.
            let mut refusals = 0;
            for k in (data_at + 8..table).step_by(37) {
                let mut bad = good.clone();
                bad[k] ^= 0xa5;
                match open(bad) {
                    Ok((mut c, _)) => {
                        let n = c.declared_len().unwrap() as usize;
                        assert_eq!(read_all(c.as_mut(), 1000).unwrap().len(), n);
                    }
                    Err(e) => {
                        assert!(msg(&e).contains("scan.las"), "{e}");
                        refusals += 1;
                    }
                }
            }
            assert!(refusals > 0, "{spec:?}: no flipped byte was noticed");
            // Truncated anywhere in its data.
            for cut in [data_at + 4, data_at + 20, (data_at + table) / 2, table + 3] {
                let e = open(good[..cut].to_vec()).map(|_| ()).unwrap_err();
                assert!(msg(&e).contains("scan.las"), "{e}");
            }
        }
    }

    #[test]
    fn a_file_changed_after_import_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.las");
        let pts = las_points(100);
        std::fs::write(&path, las_bytes(&Spec::new(2, 3), &pts)).unwrap();
        let mut warnings = Vec::new();
        let mut c = open_cloud(&path, "a", &ImportOptions::default(), &mut warnings).unwrap();
        let mut other = pts.clone();
        other[7].withheld = true;
        std::fs::write(&path, las_bytes(&Spec::new(2, 3), &other)).unwrap();
        let e = read_all(c.as_mut(), 1000).unwrap_err();
        assert!(
            msg(&e).contains("changed since it was imported") && msg(&e).contains("99"),
            "{e}"
        );
        std::fs::write(&path, las_bytes(&Spec::new(2, 3), &pts[..99])).unwrap();
        let mut c = open_cloud(&path, "a", &ImportOptions::default(), &mut warnings).unwrap();
        std::fs::write(&path, las_bytes(&Spec::new(2, 3), &pts)).unwrap();
        let e = read_all(c.as_mut(), 1000).unwrap_err();
        assert!(msg(&e).contains("its size is"), "{e}");
    }

    #[test]
    fn files_and_folders_are_detected_and_named_by_stem() {
        use crate::import::{detect, open};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("b.LAZ"),
            las_bytes(&Spec::new(2, 3).laz(LazChunks::Fixed(50)), &las_points(10)),
        )
        .unwrap();
        std::fs::write(
            d.join("a.las"),
            las_bytes(&Spec::new(4, 6), &las_points(20)),
        )
        .unwrap();
        assert_eq!(detect(&d.join("b.LAZ")).unwrap(), Format::Las);
        assert_eq!(detect(d).unwrap(), Format::Las);
        let scene = open(d, Format::Auto, &ImportOptions::default()).unwrap();
        let clouds: Vec<_> = scene
            .clouds
            .iter()
            .map(|c| (c.name().to_owned(), c.declared_len()))
            .collect();
        assert_eq!(
            clouds,
            [("a".to_owned(), Some(20)), ("b".to_owned(), Some(10))]
        );
        // A folder of two kinds of clouds is ambiguous; --format chooses.
        std::fs::write(d.join("c.ply"), "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n").unwrap();
        let e = detect(d).unwrap_err();
        assert!(
            msg(&e).contains(".ply (1) and .las/.laz (2)") && msg(&e).contains("--format"),
            "{e}"
        );
        let scene = open(d, Format::Las, &ImportOptions::default()).unwrap();
        assert_eq!(scene.clouds.len(), 2);
        // Images and depth maps belong to datasets with cameras.
        let options = ImportOptions {
            images: Some("images".into()),
            ..ImportOptions::default()
        };
        let e = open(d, Format::Las, &options).unwrap_err();
        assert!(msg(&e).contains("this is a LAS point cloud"), "{e}");
    }
}
