//! E57 (ASTM E2807), the exchange format of terrestrial laser scanners (Leica, FARO, Trimble,
//! NavVis and most registration software export it): the point-cloud importer ([`import`]) and
//! `open_cloud` for `gs-pack convert --points scan.e57`.
//!
//! # Import
//! `import(path)` takes one `.e57` file or a folder of them (one cloud per file, extensions
//! matched case-insensitively, sorted by file name; cloud name = file stem, which must be
//! unique), as [`super::las::import`] does. A file usually holds several scans (one per
//! scanner station, each an E57 `data3D` entry with its pose); they become one cloud, every
//! point labelled with the index of its scan in the file, so a pack can tell the stations
//! apart. Each file is read through once at import (the validation pass) and reopened and
//! streamed in chunks when the pack pipeline pulls it, so no cloud is ever held whole.
//!
//! # What a point becomes
//! - **position**: Cartesian `cartesianX/Y/Z`, or, in a scan without them, spherical
//!   `sphericalRange/Azimuth/Elevation` (`x = r cos e cos a`, `y = r cos e sin a`,
//!   `z = r sin e`), moved by the scan's pose (a rotation quaternion and a translation, from
//!   the scanner's frame to the file's) and then by [`ImportOptions::points_transform`], all in
//!   `f64`, then rounded to the pack's `f32`. A position beyond `f32`'s range is an error
//!   naming the scan and point.
//! - Points whose coordinates the file marks invalid (`cartesianInvalidState` or
//!   `sphericalInvalidState` other than 0: a direction without a range, or nothing: a
//!   scanner's "no return") are left out, counted, and reported in one warning.
//! - **colour**: `colorRed/Green/Blue`, scaled from the scan's colour limits (or, without
//!   them, the fields' integer ranges; 0 to 1 for floating-point colour) to 0–255. Points
//!   whose colour is marked invalid (`isColorInvalid`), and every point of a scan without
//!   colour, are [`DEFAULT_GREY`], counted in a warning (intensity is the return's strength,
//!   not a colour).
//! - **label**: the scan's index in the file.
//! - Everything else (intensity, return and row/column indices, time stamps, images) is
//!   skipped.
//!
//! # Reading, and the memory bound
//! The file header and the XML section (the scans' descriptions) are read by the `e57` crate,
//! after the header's XML length has been checked against the file's size. The points are
//! read here, not by the crate: its reader expands every packet into queues of 16-byte values
//! as it arrives, so a file whose bytestreams are out of step (one field's data far ahead of
//! another's) would grow them without bound, up to 128 bytes per 1-bit value. Here each
//! field's bytestream keeps its packed bytes until a point needs them, and a file whose
//! streams run more than [`MAX_PENDING_BYTES`] apart is refused naming the point. Every
//! 1024-byte page's CRC-32C is checked as it is read, a scan's point count must fit its
//! data (at the bits per point its fields take), every packet must lie within its section,
//! and a field's integer range, scale and offset must be sane, so a damaged file is an error
//! naming the scan, point or byte, never an allocation of what it claims. A panic inside the
//! crate (damage it did not anticipate) is caught and reported.

use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use e57::{E57Reader, PointCloud, RecordDataType, RecordName, RecordValue};

use super::decoding;
use super::input::{Input, InputCloud, InputReader};
use super::ply::DEFAULT_GREY;
use super::transform::PointsTransform;
use super::{thousands, ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Format, PointChunk, PointSource};
use crate::scene::maths::quat_to_rot;

/// The first bytes of every E57 file.
pub const SIGNATURE: &[u8; 8] = b"ASTM-E57";
/// E57's physical page: 1020 bytes of data and their CRC-32C (stored big-endian).
const PAGE: u64 = 1024;
const PAYLOAD: u64 = PAGE - 4;
/// The file header's size.
const HEADER: usize = 48;

/// The most packed bytes the bytestreams may hold waiting for the points that need them:
/// well-formed files keep their streams within a packet or a writer's buffer of each other.
pub const MAX_PENDING_BYTES: usize = 64 << 20;

/// The longest XML section read. Real files' XML is kilobytes to a few megabytes (a few KB
/// per scan); the parser's tree takes several times the text, so a damaged length must not
/// reach it.
pub const MAX_XML_BYTES: u64 = 32 << 20;

/// Read buffer of a file's pages.
const FILE_BUFFER: usize = 64 * 1024;

/// Points a chunk reserves room for before it has seen how many it gets.
const INITIAL_CHUNK_CAPACITY: usize = 65_536;

/// How a field's values are stored in its bytestream.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    F32,
    F64,
    /// `min + raw`, `raw` in `bits` bits.
    Int {
        min: i64,
        bits: u32,
    },
    /// `(min + raw) × scale + offset`.
    Scaled {
        min: i64,
        bits: u32,
        scale: f64,
        offset: f64,
    },
}

impl Kind {
    fn bits(self) -> u32 {
        match self {
            Kind::F32 => 32,
            Kind::F64 => 64,
            Kind::Int { bits, .. } | Kind::Scaled { bits, .. } => bits,
        }
    }

    fn value(self, raw: u64) -> f64 {
        match self {
            Kind::F32 => f64::from(f32::from_bits(raw as u32)),
            Kind::F64 => f64::from_bits(raw),
            Kind::Int { min, .. } => (i128::from(min) + i128::from(raw)) as f64,
            Kind::Scaled {
                min, scale, offset, ..
            } => (i128::from(min) + i128::from(raw)) as f64 * scale + offset,
        }
    }
}

/// Bits of an integer field of range `min..=max`: `None` when `max < min`.
fn integer_bits(min: i64, max: i64) -> Option<u32> {
    let range = i128::from(max) - i128::from(min);
    match range {
        r if r < 0 => None,
        0 => Some(0),
        r => Some(r.ilog2() + 1),
    }
}

/// Where a scan's position comes from: indices into its fields.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Coords {
    Cartesian {
        xyz: [usize; 3],
        invalid: Option<usize>,
    },
    Spherical {
        /// Range, azimuth, elevation.
        rae: [usize; 3],
        invalid: Option<usize>,
    },
}

/// A scan's colour fields and the values that map to 0 and 255.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Colour {
    rgb: [usize; 3],
    invalid: Option<usize>,
    min: [f64; 3],
    max: [f64; 3],
}

/// One scan (an E57 `data3D` entry), checked at import.
#[derive(Clone, Debug, PartialEq)]
struct Scan {
    index: usize,
    /// The scan's name in the file, for messages.
    name: String,
    records: u64,
    /// Physical offset of its compressed-vector section.
    section: u64,
    fields: Vec<Kind>,
    coords: Coords,
    colour: Option<Colour>,
    /// Rotation (row-major) and translation from the scanner's frame to the file's.
    pose: Option<([[f64; 3]; 3], [f64; 3])>,
}

impl Scan {
    fn label(&self) -> String {
        format!("scan {} ({})", self.index, self.name)
    }
}

/// Builds a [`Scan`] from the crate's description, refusing what cannot be read.
fn scan_of(index: usize, pc: &PointCloud, file_len: u64, path: &Path) -> Result<Scan, ImportError> {
    let name = pc
        .name
        .clone()
        .or_else(|| pc.guid.clone())
        .unwrap_or_else(|| "unnamed".into());
    let refuse = |msg: String| {
        ImportError::invalid(
            path,
            format!(
                "scan {index} ({name}): {msg}; the file is damaged or not one this reader supports"
            ),
        )
    };
    let mut fields = Vec::with_capacity(pc.prototype.len());
    for r in &pc.prototype {
        let kind = match r.data_type {
            RecordDataType::Single { .. } => Kind::F32,
            RecordDataType::Double { .. } => Kind::F64,
            RecordDataType::Integer { min, max } => Kind::Int {
                min,
                bits: integer_bits(min, max).ok_or_else(|| {
                    refuse(format!(
                        "field {:?} has maximum {max} below its minimum {min}",
                        r.name
                    ))
                })?,
            },
            RecordDataType::ScaledInteger {
                min,
                max,
                scale,
                offset,
            } => {
                if !(scale.is_finite() && scale != 0.0 && offset.is_finite()) {
                    return Err(refuse(format!(
                        "field {:?} has scale {scale} and offset {offset}; a scale must be finite \
                         and non-zero, an offset finite",
                        r.name
                    )));
                }
                Kind::Scaled {
                    min,
                    bits: integer_bits(min, max).ok_or_else(|| {
                        refuse(format!(
                            "field {:?} has maximum {max} below its minimum {min}",
                            r.name
                        ))
                    })?,
                    scale,
                    offset,
                }
            }
        };
        fields.push(kind);
    }
    let find = |n: RecordName| pc.prototype.iter().position(|r| r.name == n);
    let triple = |a, b, c| match (find(a), find(b), find(c)) {
        (Some(a), Some(b), Some(c)) => Some([a, b, c]),
        _ => None,
    };
    let coords = if let Some(xyz) = triple(
        RecordName::CartesianX,
        RecordName::CartesianY,
        RecordName::CartesianZ,
    ) {
        Coords::Cartesian {
            xyz,
            invalid: find(RecordName::CartesianInvalidState),
        }
    } else if let Some(rae) = triple(
        RecordName::SphericalRange,
        RecordName::SphericalAzimuth,
        RecordName::SphericalElevation,
    ) {
        Coords::Spherical {
            rae,
            invalid: find(RecordName::SphericalInvalidState),
        }
    } else {
        return Err(refuse(
            "it has neither Cartesian (cartesianX/Y/Z) nor spherical coordinates".into(),
        ));
    };
    let colour = match triple(
        RecordName::ColorRed,
        RecordName::ColorGreen,
        RecordName::ColorBlue,
    ) {
        None => None,
        Some(rgb) => {
            let limits = pc.color_limits.as_ref();
            let limit = |v: Option<&RecordValue>, field: usize| -> Option<f64> {
                Some(match (v?, fields[field]) {
                    (RecordValue::Single(s), _) => f64::from(*s),
                    (RecordValue::Double(d), _) => *d,
                    (RecordValue::Integer(i), _) => *i as f64,
                    (RecordValue::ScaledInteger(i), Kind::Scaled { scale, offset, .. }) => {
                        *i as f64 * scale + offset
                    }
                    (RecordValue::ScaledInteger(i), _) => *i as f64,
                })
            };
            // Without limits: an integer field's own range, floating-point colour 0 to 1.
            let own = |field: usize| -> (f64, f64) {
                match (fields[field], &pc.prototype[field].data_type) {
                    (Kind::Int { .. }, RecordDataType::Integer { min, max }) => {
                        (*min as f64, *max as f64)
                    }
                    (
                        Kind::Scaled { scale, offset, .. },
                        RecordDataType::ScaledInteger { min, max, .. },
                    ) => (*min as f64 * scale + offset, *max as f64 * scale + offset),
                    _ => (0.0, 1.0),
                }
            };
            let (mut min, mut max) = ([0.0; 3], [0.0; 3]);
            for k in 0..3 {
                let (lo, hi) = match limits {
                    Some(l) => {
                        let (lo, hi) = [
                            (&l.red_min, &l.red_max),
                            (&l.green_min, &l.green_max),
                            (&l.blue_min, &l.blue_max),
                        ][k];
                        let (own_lo, own_hi) = own(rgb[k]);
                        (
                            limit(lo.as_ref(), rgb[k]).unwrap_or(own_lo),
                            limit(hi.as_ref(), rgb[k]).unwrap_or(own_hi),
                        )
                    }
                    None => own(rgb[k]),
                };
                if !(lo.is_finite() && hi.is_finite() && hi > lo) {
                    return Err(refuse(format!(
                        "its colour limits {lo} to {hi} (channel {k}) are not an increasing range"
                    )));
                }
                (min[k], max[k]) = (lo, hi);
            }
            Some(Colour {
                rgb,
                invalid: find(RecordName::IsColorInvalid),
                min,
                max,
            })
        }
    };
    let pose = match &pc.transform {
        None => None,
        Some(t) => {
            let q = &t.rotation;
            let tr = [t.translation.x, t.translation.y, t.translation.z];
            let norm = (q.w * q.w + q.x * q.x + q.y * q.y + q.z * q.z).sqrt();
            if !(norm.is_finite() && norm > 0.5 && norm < 2.0) || tr.iter().any(|v| !v.is_finite())
            {
                return Err(refuse(format!(
                    "its pose (rotation {} {} {} {}, translation {tr:?}) is not a rotation \
                     quaternion and a finite translation",
                    q.w, q.x, q.y, q.z
                )));
            }
            let r = quat_to_rot([q.w / norm, q.x / norm, q.y / norm, q.z / norm]);
            Some((r, tr))
        }
    };
    // Every point takes at least the bits of its fields (those of a constant field, none), so
    // the count must fit the file: this bounds a count no data backs before it is looped over.
    let bits: u64 = fields.iter().map(|k| u64::from(k.bits())).sum();
    if pc.records > 0 && bits == 0 {
        return Err(refuse(format!(
            "its {} points carry no data (every field is a constant)",
            pc.records
        )));
    }
    if u128::from(pc.records) * u128::from(bits) > u128::from(file_len) * 8 {
        return Err(refuse(format!(
            "it claims {} points of {bits} bits, more than the file's {} bytes hold",
            thousands(pc.records),
            thousands(file_len)
        )));
    }
    if pc.records > 0 && pc.file_offset >= file_len {
        return Err(refuse(format!(
            "its points are said to start at byte {}, past the file's end ({file_len})",
            pc.file_offset
        )));
    }
    Ok(Scan {
        index,
        name,
        records: pc.records,
        section: pc.file_offset,
        fields,
        coords,
        colour,
        pose,
    })
}

/// A file's header and scans, read and checked.
fn read_scans(input: &Input, path: &Path) -> Result<(Vec<Scan>, [u8; HEADER], u64), ImportError> {
    let file_len = input.len().map_err(|e| ImportError::io(path, e))?;
    let mut header = [0u8; HEADER];
    if file_len < PAGE {
        return Err(ImportError::invalid(
            path,
            format!("{file_len} bytes is shorter than one E57 page (1024); the file is truncated or not E57"),
        ));
    }
    input
        .read_at(0, &mut header)
        .map_err(|e| ImportError::io(path, e))?;
    if &header[..8] != SIGNATURE {
        return Err(ImportError::parse(
            path,
            Location::Byte(0),
            "the file does not start with `ASTM-E57`; it is not an E57 file",
        ));
    }
    let u64_at = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
    let (major, physical_len, xml_offset, xml_len, page) = (
        u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")),
        u64_at(16),
        u64_at(24),
        u64_at(32),
        u64_at(40),
    );
    if major != 1 {
        return Err(ImportError::parse(
            path,
            Location::Byte(8),
            format!("E57 version {major} (this reader knows version 1)"),
        ));
    }
    if page != PAGE {
        return Err(ImportError::parse(
            path,
            Location::Byte(40),
            format!("the page size is {page} bytes, not E57's 1024; the file is damaged"),
        ));
    }
    if physical_len != file_len || file_len % PAGE != 0 {
        return Err(ImportError::parse(
            path,
            Location::Byte(16),
            format!(
                "the header says the file is {physical_len} bytes, but it is {file_len}; it is \
                 truncated or damaged (copy it again)"
            ),
        ));
    }
    if xml_len > MAX_XML_BYTES {
        return Err(ImportError::parse(
            path,
            Location::Byte(32),
            format!(
                "the XML section is said to be {xml_len} bytes; more than {} MiB is not read \
                 (real files' is kilobytes): the file is damaged",
                MAX_XML_BYTES >> 20
            ),
        ));
    }
    if xml_offset >= file_len || xml_len > file_len {
        return Err(ImportError::parse(
            path,
            Location::Byte(24),
            format!(
                "the XML section ({xml_len} bytes at byte {xml_offset}) does not fit the \
                 {file_len}-byte file; it is damaged"
            ),
        ));
    }
    let reader = BufReader::with_capacity(
        FILE_BUFFER,
        input.open_at(0).map_err(|e| ImportError::io(path, e))?,
    );
    let pcs = decoding(|| E57Reader::new(reader).map(|r| r.pointclouds()))
        .map_err(|_| {
            ImportError::invalid(
                path,
                "its XML section made the E57 reader fail; the file is damaged",
            )
        })?
        .map_err(|e| {
            ImportError::invalid(
                path,
                format!("its E57 structure cannot be read ({e}); the file is damaged"),
            )
        })?;
    let scans = pcs
        .iter()
        .enumerate()
        .map(|(i, pc)| scan_of(i, pc, file_len, path))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((scans, header, file_len))
}

/// CRC-checked reads of a file's logical bytes (its pages without their checksums).
struct Paged {
    src: BufReader<InputReader>,
    pages: u64,
    page: Box<[u8; PAGE as usize]>,
    loaded: Option<u64>,
    /// Physical offset `src` is at.
    src_at: u64,
    /// Logical offset of the next read.
    pos: u64,
}

/// Why a read of the points failed: damage at a physical byte, or the file system.
enum ReadError {
    Damage(u64, String),
    Io(io::Error),
}

impl Paged {
    fn open(input: &Input, file_len: u64) -> io::Result<Paged> {
        Ok(Paged {
            src: BufReader::with_capacity(FILE_BUFFER, input.open_at(0)?),
            pages: file_len / PAGE,
            page: Box::new([0; PAGE as usize]),
            loaded: None,
            src_at: 0,
            pos: 0,
        })
    }

    /// The physical offset of logical offset `pos`.
    fn physical(pos: u64) -> u64 {
        pos / PAYLOAD * PAGE + pos % PAYLOAD
    }

    fn seek_physical(&mut self, at: u64) -> Result<(), ReadError> {
        if at % PAGE >= PAYLOAD {
            return Err(ReadError::Damage(
                at,
                "an offset points into a page's checksum".into(),
            ));
        }
        self.pos = at / PAGE * PAYLOAD + at % PAGE;
        Ok(())
    }

    fn load(&mut self, page: u64) -> Result<(), ReadError> {
        if page >= self.pages {
            return Err(ReadError::Damage(
                page * PAGE,
                "the data runs past the file's end".into(),
            ));
        }
        let at = page * PAGE;
        if self.src_at != at {
            self.src.seek(SeekFrom::Start(at)).map_err(ReadError::Io)?;
        }
        self.src
            .read_exact(&mut self.page[..])
            .map_err(ReadError::Io)?;
        self.src_at = at + PAGE;
        let (data, crc) = self.page.split_at(PAYLOAD as usize);
        let want = u32::from_be_bytes(crc.try_into().expect("4 bytes"));
        let got = crc32c::crc32c(data);
        if got != want {
            self.loaded = None;
            return Err(ReadError::Damage(
                at,
                format!("page {page}'s checksum is {want:08x}, its data's {got:08x}"),
            ));
        }
        self.loaded = Some(page);
        Ok(())
    }

    fn read(&mut self, mut buf: &mut [u8]) -> Result<(), ReadError> {
        while !buf.is_empty() {
            let page = self.pos / PAYLOAD;
            if self.loaded != Some(page) {
                self.load(page)?;
            }
            let off = (self.pos % PAYLOAD) as usize;
            let n = buf.len().min(PAYLOAD as usize - off);
            buf[..n].copy_from_slice(&self.page[off..off + n]);
            buf = &mut buf[n..];
            self.pos += n as u64;
        }
        Ok(())
    }
}

/// One field's packed values waiting for their points.
#[derive(Default)]
struct Stream {
    bytes: Vec<u8>,
    /// Bits of `bytes` already taken.
    bit: usize,
}

impl Stream {
    fn pending(&self) -> usize {
        self.bytes.len() - self.bit / 8
    }

    fn append(&mut self, data: &[u8]) {
        let used = self.bit / 8;
        if used > 0 {
            self.bytes.drain(..used);
            self.bit -= used * 8;
        }
        self.bytes.extend_from_slice(data);
    }

    /// The next `bits` (1 to 64) bits, least significant first; `None` if not all are here.
    fn take(&mut self, bits: u32) -> Option<u64> {
        let bits = bits as usize;
        if self.bytes.len() * 8 - self.bit < bits {
            return None;
        }
        let start = self.bit / 8;
        let end = (self.bit + bits).div_ceil(8);
        let mut word = [0u8; 16];
        word[..end - start].copy_from_slice(&self.bytes[start..end]);
        let v = (u128::from_le_bytes(word) >> (self.bit % 8)) as u64;
        self.bit += bits;
        Some(if bits == 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        })
    }
}

/// A scan's points, decoded one at a time from its compressed-vector section.
struct ScanReader {
    paged: Paged,
    /// The packet being read, reused.
    packet: Vec<u8>,
    /// [`MAX_PENDING_BYTES`], or less in tests.
    max_pending: usize,
    /// Logical offset where the section ends.
    end: u64,
    streams: Vec<Stream>,
    values: Vec<f64>,
    left: u64,
    next: u64,
}

/// A decoded point: its position in the file's frame (pose applied), its colour, or why it
/// has none.
struct Decoded {
    xyz: [f64; 3],
    rgb: Option<[u8; 3]>,
}

impl ScanReader {
    fn open(
        input: &Input,
        file_len: u64,
        scan: &Scan,
        max_pending: usize,
    ) -> Result<ScanReader, ReadError> {
        let mut paged = Paged::open(input, file_len).map_err(ReadError::Io)?;
        let reader = |paged, end| ScanReader {
            paged,
            packet: Vec::new(),
            max_pending,
            end,
            streams: (0..scan.fields.len()).map(|_| Stream::default()).collect(),
            values: vec![0.0; scan.fields.len()],
            left: scan.records,
            next: 0,
        };
        if scan.records == 0 {
            // Nothing to read: an empty scan's section is not looked at (writers may leave
            // its offset at 0).
            return Ok(reader(paged, 0));
        }
        paged.seek_physical(scan.section)?;
        let mut head = [0u8; 32];
        paged.read(&mut head)?;
        let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().expect("8"));
        let (id, length, data) = (head[0], u64_at(8), u64_at(16));
        if id != 1 {
            return Err(ReadError::Damage(
                scan.section,
                format!("its section starts with id {id}, not a compressed vector's 1"),
            ));
        }
        let start = paged.pos - 32;
        // Compared with what remains of the file's logical bytes, so that no sum or product
        // of a damaged length can overflow (a fuzz find).
        let logical_len = paged.pages * PAYLOAD;
        if length < 32 || length > logical_len.saturating_sub(start) {
            return Err(ReadError::Damage(
                scan.section,
                format!(
                    "its section is said to be {length} bytes, which does not fit between its \
                     start and the file's end"
                ),
            ));
        }
        let end = start + length;
        paged.seek_physical(data)?;
        if paged.pos < start + 32 || paged.pos >= end {
            return Err(ReadError::Damage(
                scan.section,
                format!("its first data packet (byte {data}) lies outside its section"),
            ));
        }
        Ok(reader(paged, end))
    }

    /// Reads the next packet, appending a data packet's bytes to their streams.
    fn packet(&mut self) -> Result<(), ReadError> {
        let p = &mut self.paged;
        let start = p.pos;
        let at = Paged::physical(start);
        if start + 4 > self.end {
            return Err(ReadError::Damage(
                at,
                format!(
                    "point {}: the section ends before the point's data",
                    self.next
                ),
            ));
        }
        let mut head = [0u8; 4];
        p.read(&mut head)?;
        let len = u64::from(u16::from_le_bytes([head[2], head[3]])) + 1;
        if len < 6 {
            return Err(ReadError::Damage(
                at,
                format!("a packet of {len} bytes is shorter than a packet header"),
            ));
        }
        if start + len > self.end {
            return Err(ReadError::Damage(
                at,
                format!("a packet of {len} bytes runs past the end of its section"),
            ));
        }
        match head[0] {
            // Index and ignored packets hold no point data.
            0 | 2 => {
                p.pos = start + len;
                return Ok(());
            }
            1 => {}
            t => {
                return Err(ReadError::Damage(
                    at,
                    format!("a packet of unknown type {t}"),
                ));
            }
        }
        // The rest of the packet at once (at most 64 KiB): the bytestream count, their sizes,
        // then their bytes.
        let body = &mut self.packet;
        body.resize((len - 4) as usize, 0);
        p.read(body)?;
        let count = usize::from(u16::from_le_bytes([body[0], body[1]]));
        if count != self.streams.len() {
            return Err(ReadError::Damage(
                at,
                format!(
                    "a data packet holds {count} bytestreams, but the scan has {} fields",
                    self.streams.len()
                ),
            ));
        }
        let mut next = 2 + 2 * count;
        for (i, stream) in self.streams.iter_mut().enumerate() {
            let size = body
                .get(2 + 2 * i..4 + 2 * i)
                .map(|b| usize::from(u16::from_le_bytes([b[0], b[1]])));
            let Some(bytes) = size.and_then(|n| body.get(next..next + n)) else {
                return Err(ReadError::Damage(
                    at,
                    format!("a data packet's {count} bytestreams run past its {len} bytes"),
                ));
            };
            stream.append(bytes);
            next += bytes.len();
        }
        p.pos = start + len;
        let pending: usize = self.streams.iter().map(Stream::pending).sum();
        if pending > self.max_pending {
            return Err(ReadError::Damage(
                at,
                format!(
                    "point {}: its fields' data run more than {} bytes apart (a field's bytes \
                     far ahead of another's)",
                    self.next, self.max_pending
                ),
            ));
        }
        Ok(())
    }

    /// The next point, `None` after the scan's last; a point whose coordinates are marked
    /// invalid decodes to `Ok(Some(None))`.
    fn next(&mut self, scan: &Scan) -> Result<Option<Option<Decoded>>, ReadError> {
        if self.left == 0 {
            return Ok(None);
        }
        for (i, &kind) in scan.fields.iter().enumerate() {
            let bits = kind.bits();
            let raw = if bits == 0 {
                0
            } else {
                loop {
                    if let Some(v) = self.streams[i].take(bits) {
                        break v;
                    }
                    self.packet()?;
                }
            };
            self.values[i] = kind.value(raw);
        }
        let point = self.next;
        self.left -= 1;
        self.next += 1;
        let v = &self.values;
        let state = |i: Option<usize>| i.map_or(0.0, |i| v[i]);
        let local = match scan.coords {
            Coords::Cartesian { xyz, invalid } => {
                if state(invalid) != 0.0 {
                    return Ok(Some(None));
                }
                xyz.map(|i| v[i])
            }
            Coords::Spherical { rae, invalid } => {
                if state(invalid) != 0.0 {
                    return Ok(Some(None));
                }
                let (r, a, e) = (v[rae[0]], v[rae[1]], v[rae[2]]);
                [r * e.cos() * a.cos(), r * e.cos() * a.sin(), r * e.sin()]
            }
        };
        if local.iter().any(|c| !c.is_finite()) {
            return Err(ReadError::Damage(
                Paged::physical(self.paged.pos),
                format!("point {point}: its coordinates {local:?} are not finite"),
            ));
        }
        let xyz = match &scan.pose {
            None => local,
            Some((r, t)) => std::array::from_fn(|k| {
                r[k][0] * local[0] + r[k][1] * local[1] + r[k][2] * local[2] + t[k]
            }),
        };
        let rgb = scan.colour.as_ref().and_then(|c| {
            if state(c.invalid) != 0.0 {
                return None;
            }
            Some(std::array::from_fn(|k| {
                let t = (v[c.rgb[k]] - c.min[k]) / (c.max[k] - c.min[k]);
                (t * 255.0).round().clamp(0.0, 255.0) as u8
            }))
        });
        Ok(Some(Some(Decoded { xyz, rgb })))
    }
}

/// A file, its checked scans and how they are read.
struct Layout {
    path: PathBuf,
    input: Input,
    file_len: u64,
    header: [u8; HEADER],
    scans: Vec<Scan>,
    transform: Option<PointsTransform>,
}

impl Layout {
    fn error(&self, scan: &Scan, e: ReadError) -> ImportError {
        match e {
            ReadError::Io(e) => ImportError::io(&self.path, e),
            ReadError::Damage(at, msg) => ImportError::parse(
                &self.path,
                Location::Byte(at),
                format!(
                    "{}: {msg}; the E57 file is damaged (copy or export it again)",
                    scan.label()
                ),
            ),
        }
    }

    fn changed(&self, what: &str) -> ImportError {
        ImportError::invalid(
            &self.path,
            format!("the file changed since it was imported ({what}); run the import again"),
        )
    }

    /// Where a decoded point goes: its position moved by the transform, and checked.
    fn position(&self, scan: &Scan, point: u64, xyz: [f64; 3]) -> Result<[f32; 3], ImportError> {
        let moved = match &self.transform {
            Some(t) => t.point(xyz),
            None => xyz,
        };
        let out = moved.map(|v| v as f32);
        if let Some(k) = (0..3).find(|&k| !out[k].is_finite()) {
            let how = if self.transform.is_some() {
                ", moved by --points-transform,"
            } else {
                ""
            };
            return Err(ImportError::parse(
                &self.path,
                Location::Record(point),
                format!(
                    "{}: point {point}'s {} = {:e}{how} is beyond a 32-bit float's range",
                    scan.label(),
                    ["x", "y", "z"][k],
                    moved[k]
                ),
            ));
        }
        Ok(out)
    }
}

/// One E57 file as a [`PointSource`]: checked and counted at import (the validation pass),
/// streamed scan by scan when the pack pipeline pulls it.
struct E57Cloud {
    name: String,
    layout: Layout,
    /// Points the validation pass kept: exactly what the stream delivers.
    kept: u64,
    delivered: u64,
    /// The scan being streamed and its reader.
    scan: usize,
    reader: Option<ScanReader>,
    done: bool,
}

impl InputCloud for E57Cloud {
    fn open(
        input: Input,
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<E57Cloud, ImportError> {
        let (scans, header, file_len) = read_scans(&input, path)?;
        let layout = Layout {
            path: path.to_owned(),
            input,
            file_len,
            header,
            scans,
            transform: options.points_transform.clone(),
        };
        // The validation pass: every point of every scan read, decoded and checked.
        let (mut kept, mut invalid, mut grey_invalid) = (0u64, 0u64, 0u64);
        let mut kept_by_scan = Vec::with_capacity(layout.scans.len());
        for scan in &layout.scans {
            let kept_before = kept;
            let mut r = ScanReader::open(&layout.input, file_len, scan, MAX_PENDING_BYTES)
                .map_err(|e| layout.error(scan, e))?;
            loop {
                let point = r.next;
                let Some(p) = r.next(scan).map_err(|e| layout.error(scan, e))? else {
                    break;
                };
                match p {
                    None => invalid += 1,
                    Some(d) => {
                        layout.position(scan, point, d.xyz)?;
                        // Grey for want of colour fields is counted by scan below.
                        grey_invalid += u64::from(d.rgb.is_none() && scan.colour.is_some());
                        kept += 1;
                    }
                }
            }
            kept_by_scan.push(kept - kept_before);
        }
        let display = path.display();
        let total: u64 = layout.scans.iter().map(|s| s.records).sum();
        if layout.scans.is_empty() {
            warnings.push(format!("{display}: the file holds no scans"));
        }
        if invalid > 0 {
            warnings.push(format!(
                "{display}: {} of {} points have no valid position (the scanner's \"no return\", \
                 or a direction without a range) and are left out",
                thousands(invalid),
                thousands(total)
            ));
        }
        let no_colour: Vec<usize> = layout
            .scans
            .iter()
            .filter(|s| s.colour.is_none() && kept_by_scan[s.index] > 0)
            .map(|s| s.index)
            .collect();
        if !no_colour.is_empty() {
            let grey: u64 = no_colour.iter().map(|&i| kept_by_scan[i]).sum();
            let list: Vec<String> = no_colour.iter().map(usize::to_string).collect();
            warnings.push(format!(
                "{display}: {} of {} points get grey {DEFAULT_GREY:?}: scan{} {} {} no colour \
                 (a return's intensity is its strength, not a colour: colourise the scans from \
                 their photos first to give the points colour)",
                thousands(grey),
                thousands(kept),
                if list.len() == 1 { "" } else { "s" },
                list.join(", "),
                if list.len() == 1 { "has" } else { "have" }
            ));
        }
        if grey_invalid > 0 {
            warnings.push(format!(
                "{display}: {} of {} points get grey {DEFAULT_GREY:?}: their colour is marked \
                 invalid",
                thousands(grey_invalid),
                thousands(kept)
            ));
        }
        Ok(E57Cloud {
            name,
            layout,
            kept,
            delivered: 0,
            scan: 0,
            reader: None,
            done: false,
        })
    }
}

impl E57Cloud {
    /// Checks, before streaming, that the file is the one that was validated.
    fn check_unchanged(&self) -> Result<(), ImportError> {
        let l = &self.layout;
        let (scans, header, len) = read_scans(&l.input, &l.path)?;
        if len != l.file_len {
            return Err(l.changed(&format!("its size is {len} bytes, was {}", l.file_len)));
        }
        if header != l.header || scans != l.scans {
            return Err(l.changed("its header or scans differ"));
        }
        Ok(())
    }
}

impl PointSource for E57Cloud {
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
        if self.scan == 0 && self.reader.is_none() && self.delivered == 0 {
            self.check_unchanged()?;
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
            let Some(scan) = l.scans.get(self.scan) else {
                self.done = true;
                if self.delivered != self.kept {
                    return Err(l.changed(&format!(
                        "it now has {} points with a valid position, the import counted {}",
                        self.delivered, self.kept
                    )));
                }
                break;
            };
            if self.reader.is_none() {
                self.reader = Some(
                    ScanReader::open(&l.input, l.file_len, scan, MAX_PENDING_BYTES)
                        .map_err(|e| l.error(scan, e))?,
                );
            }
            let r = self.reader.as_mut().expect("opened above");
            let point = r.next;
            match r.next(scan).map_err(|e| l.error(scan, e))? {
                None => {
                    self.reader = None;
                    self.scan += 1;
                }
                Some(None) => {}
                Some(Some(d)) => {
                    if self.delivered == self.kept {
                        return Err(l.changed(&format!(
                            "it has more points with a valid position than the {} the import \
                             counted",
                            self.kept
                        )));
                    }
                    self.delivered += 1;
                    chunk.xyz.push(l.position(scan, point, d.xyz)?);
                    chunk.rgb.push(d.rgb.unwrap_or(DEFAULT_GREY));
                    if let Some(labels) = chunk.labels.as_mut() {
                        labels.push(scan.index as i32);
                    }
                }
            }
        }
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk))
    }
}

/// Imports one `.e57` file or a folder of them (see the module documentation).
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    super::import_cloud_files(path, &["e57"], Format::E57, options, open_cloud)
}

/// One E57 file as the cloud `name` (checked and counted now, streamed when the pack pipeline
/// pulls it), for `--points`.
pub(crate) fn open_cloud(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    E57Cloud::boxed(Input::File(path.to_owned()), path, name, options, warnings)
}

/// An E57 file held in memory as the cloud `name`, with the file importer's checks and
/// warnings; `path` only names it in messages. For the fuzz target and tests: a file is better
/// read through [`import`], which never holds it whole.
pub fn cloud_from_bytes(
    bytes: impl Into<Arc<[u8]>>,
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    E57Cloud::boxed(Input::Bytes(bytes.into()), path, name, options, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::e57::{e57_bytes, E57Coords, E57Point, E57Scan};

    type Opened = (Box<dyn PointSource<Error = ImportError>>, Vec<String>);

    fn open(bytes: Vec<u8>) -> Result<Opened, ImportError> {
        let mut warnings = Vec::new();
        let c = cloud_from_bytes(
            bytes,
            Path::new("scan.e57"),
            "scan",
            &ImportOptions::default(),
            &mut warnings,
        )?;
        Ok((c, warnings))
    }

    fn read_all(c: &mut dyn PointSource<Error = ImportError>, chunk: usize) -> PointChunk {
        let mut all = PointChunk {
            labels: Some(Vec::new()),
            ..Default::default()
        };
        while let Some(ch) = c.next_chunk(chunk).unwrap() {
            assert!(ch.is_consistent() && ch.len() <= chunk);
            all.xyz.extend(ch.xyz);
            all.rgb.extend(ch.rgb);
            all.labels.as_mut().unwrap().extend(ch.labels.unwrap());
        }
        all
    }

    /// `v` rotated by the unit quaternion `q` (w, x, y, z) as `q v q*`: a different route
    /// from the importer's rotation matrix.
    fn rotate(q: [f64; 4], v: [f64; 3]) -> [f64; 3] {
        let mul = |a: [f64; 4], b: [f64; 4]| {
            [
                a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
                a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
                a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
                a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
            ]
        };
        let r = mul(mul(q, [0.0, v[0], v[1], v[2]]), [q[0], -q[1], -q[2], -q[3]]);
        [r[1], r[2], r[3]]
    }

    fn point(i: usize, xyz: [f64; 3]) -> E57Point {
        E57Point {
            xyz,
            rgb: [(i * 40) as u8, 7, (255 - i) as u8],
            invalid: [0, 0, 0, 1, 0, 2][i % 6],
            colour_invalid: i % 4 == 1,
        }
    }

    #[test]
    fn every_coordinate_kind_pose_and_flag_reads_back() {
        let norm = (0.9f64 * 0.9 + 0.1 + 0.2 * 0.2 + 0.3 * 0.3).sqrt();
        let q = [0.9 / norm, 0.1f64.sqrt() / norm, 0.2 / norm, -0.3 / norm];
        let cart: Vec<E57Point> = (0..40)
            .map(|i| {
                point(
                    i,
                    [
                        i as f64 * 0.37 - 5.0,
                        2.5 - i as f64 * 0.11,
                        i as f64 * 0.05,
                    ],
                )
            })
            .collect();
        let sph: Vec<E57Point> = (0..30)
            .map(|i| {
                point(
                    i,
                    [
                        1.0 + i as f64 * 0.2,
                        -3.0 + i as f64 * 0.2,
                        -1.2 + i as f64 * 0.08,
                    ],
                )
            })
            .collect();
        let scans = vec![
            E57Scan {
                name: "posed".into(),
                coords: E57Coords::CartesianF64,
                points: cart.clone(),
                colour: true,
                invalid_states: true,
                pose: Some((q, [100.0, -20.0, 3.5])),
            },
            E57Scan {
                name: "scaled".into(),
                coords: E57Coords::CartesianScaled,
                points: cart.clone(),
                colour: false,
                invalid_states: false,
                pose: None,
            },
            E57Scan {
                name: "spherical".into(),
                coords: E57Coords::Spherical,
                points: sph.clone(),
                colour: true,
                invalid_states: true,
                pose: None,
            },
        ];
        let (mut c, warnings) = open(e57_bytes(&scans)).unwrap();
        // Scans 0 and 2 leave out their invalid points (states 1 and 2).
        let valid = |pts: &[E57Point]| pts.iter().filter(|p| p.invalid == 0).count();
        let kept = valid(&cart) + cart.len() + valid(&sph);
        assert_eq!(c.declared_len(), Some(kept as u64));
        let got = read_all(c.as_mut(), 7);
        let mut want: Vec<([f64; 3], [u8; 3], i32)> = Vec::new();
        for p in cart.iter().filter(|p| p.invalid == 0) {
            let r = rotate(q, p.xyz);
            let rgb = if p.colour_invalid {
                DEFAULT_GREY
            } else {
                p.rgb
            };
            want.push(([r[0] + 100.0, r[1] - 20.0, r[2] + 3.5], rgb, 0));
        }
        for p in &cart {
            // Stored as integers of 0.1 mm.
            want.push((p.xyz.map(|v| (v / 1e-4).round() * 1e-4), DEFAULT_GREY, 1));
        }
        for p in sph.iter().filter(|p| p.invalid == 0) {
            let [r, a, e] = p.xyz;
            let rgb = if p.colour_invalid {
                DEFAULT_GREY
            } else {
                p.rgb
            };
            want.push((
                [r * e.cos() * a.cos(), r * e.cos() * a.sin(), r * e.sin()],
                rgb,
                2,
            ));
        }
        assert_eq!(got.len(), want.len());
        for (k, (xyz, rgb, label)) in want.iter().enumerate() {
            assert_eq!(
                (got.rgb[k], got.labels.as_ref().unwrap()[k]),
                (*rgb, *label),
                "point {k}"
            );
            for a in 0..3 {
                let tol = 1e-6 * (1.0 + xyz[a].abs());
                assert!(
                    (f64::from(got.xyz[k][a]) - xyz[a]).abs() <= tol,
                    "point {k}: {:?} {xyz:?}",
                    got.xyz[k]
                );
            }
        }
        let w = warnings.join("\n");
        let invalid = (cart.len() - valid(&cart)) + (sph.len() - valid(&sph));
        assert!(
            w.contains(&format!(
                "{invalid} of {} points have no valid position",
                2 * cart.len() + sph.len()
            )),
            "{w}"
        );
        assert!(w.contains("scan 1 has no colour"), "{w}");
    }

    #[test]
    fn many_packets_read_back_exactly_on_any_chunk_size() {
        let scan = E57Scan::grid(70_000, true);
        let bytes = e57_bytes(std::slice::from_ref(&scan));
        for chunk in [1usize, 999, 100_000] {
            let (mut c, _) = open(bytes.clone()).unwrap();
            let got = read_all(c.as_mut(), chunk);
            assert_eq!(got.len(), scan.points.len());
            for (k, p) in scan.points.iter().enumerate().step_by(chunk.max(7)) {
                assert_eq!(got.xyz[k], p.xyz.map(|v| v as f32), "point {k}");
                assert_eq!(got.rgb[k], p.rgb, "point {k}");
            }
        }
    }

    /// The file's logical bytes: its pages without their checksums.
    fn logical(bytes: &[u8]) -> Vec<u8> {
        bytes
            .chunks(PAGE as usize)
            .flat_map(|p| p[..PAYLOAD as usize].to_vec())
            .collect()
    }

    /// Pages with fresh checksums around logical bytes.
    fn physical(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in data.chunks(PAYLOAD as usize) {
            out.extend_from_slice(p);
            out.extend(crc32c::crc32c(p).to_be_bytes());
        }
        out
    }

    /// Replaces `from` (which must occur once) with `to` (of the same length) in the XML and
    /// fixes the checksums.
    fn xml_patched(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let mut data = logical(bytes);
        let hits: Vec<usize> = (0..data.len() - from.len())
            .filter(|&i| &data[i..i + from.len()] == from.as_bytes())
            .collect();
        assert_eq!(hits.len(), 1, "{from}");
        data[hits[0]..hits[0] + to.len()].copy_from_slice(to.as_bytes());
        physical(&data)
    }

    fn refused(bytes: Vec<u8>, at: Option<Location>, needle: &str) {
        let e = match open(bytes) {
            Err(e) => e,
            Ok((mut c, _)) => match (|| {
                while c.next_chunk(1000)?.is_some() {}
                Ok::<_, ImportError>(())
            })() {
                Err(e) => e,
                Ok(()) => panic!("accepted, expected {needle:?}"),
            },
        };
        let msg = e.to_string();
        assert!(msg.contains(needle) && msg.contains("scan.e57"), "{msg}");
        if let Some(at) = at {
            assert!(
                matches!(e, ImportError::Parse { at: got, .. } if got == at),
                "{msg}"
            );
        }
    }

    #[test]
    fn damaged_headers_and_descriptions_are_refused_saying_what() {
        let good = e57_bytes(&[E57Scan::grid(300, true)]);
        // A header field patched at byte `at`: the error names byte `named`.
        let field = |at: usize, with: &[u8], named: u64, needle: &str| {
            let mut data = logical(&good);
            data[at..at + with.len()].copy_from_slice(with);
            refused(physical(&data), Some(Location::Byte(named)), needle)
        };
        field(0, b"ASTM-E58", 0, "not an E57 file");
        field(8, &2u32.to_le_bytes(), 8, "E57 version 2");
        field(40, &2048u64.to_le_bytes(), 40, "page size is 2048");
        field(16, &1024u64.to_le_bytes(), 16, "truncated or damaged");
        field(24, &u64::MAX.to_le_bytes(), 24, "does not fit");
        field(
            32,
            &(1u64 << 40).to_le_bytes(),
            32,
            "more than 32 MiB is not read",
        );
        // An XML length within the cap but past the file's end names the section's offset.
        field(32, &(1u64 << 20).to_le_bytes(), 24, "does not fit");
        refused(good[..1000].to_vec(), None, "shorter than one E57 page");
        // More points than the data holds: refused by the count (a huge claim) or where the
        // data ends (a small one).
        refused(
            xml_patched(&good, "recordCount=\"300\"", "recordCount=\"900\""),
            None,
            "more than the file's",
        );
        refused(
            xml_patched(&good, "recordCount=\"300\"", "recordCount=\"301\""),
            None,
            "ends before the point's data",
        );
        // A section length at u64's end (a fuzz find: the end's offset overflowed).
        let input = Input::Bytes(good.clone().into());
        let (scans, _, _) = read_scans(&input, Path::new("x")).unwrap();
        let at = (scans[0].section / PAGE * PAYLOAD + scans[0].section % PAGE) as usize;
        for length in [u64::MAX - 3, 1 << 40, 8] {
            let mut data = logical(&good);
            data[at + 8..at + 16].copy_from_slice(&length.to_le_bytes());
            refused(
                physical(&data),
                Some(Location::Byte(scans[0].section)),
                &format!("its section is said to be {length} bytes, which does not fit"),
            );
        }
        // A colour field whose range is upside down.
        let mut data = logical(&good);
        let find = |d: &[u8], what: &[u8], from: usize| {
            from + d[from..]
                .windows(what.len())
                .position(|w| w == what)
                .unwrap()
        };
        let max = find(&data, b"maximum=\"255\"", find(&data, b"<colorRed", 0));
        data[max..max + 13].copy_from_slice(b"maximum=\"-25\"");
        // (The crate refuses it while reading the XML; the importer's own check stands behind.)
        refused(physical(&data), None, "colorRed");
    }

    #[test]
    fn an_empty_scans_section_is_not_read() {
        let bytes = e57_bytes(&[E57Scan::grid(0, true), E57Scan::grid(10, true)]);
        // The empty scan's offset pointed at the file's start, which is no section.
        let bytes = xml_patched(&bytes, "fileOffset=\"48\"", "fileOffset=\"00\"");
        let (mut c, _) = open(bytes).unwrap();
        let got = read_all(c.as_mut(), 4);
        assert_eq!(got.len(), 10);
        assert!(got.labels.unwrap().iter().all(|&l| l == 1));
    }

    #[test]
    fn files_and_folders_are_detected_and_named_by_stem() {
        use crate::import::{detect, open};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("b.E57"), e57_bytes(&[E57Scan::grid(10, true)])).unwrap();
        std::fs::write(
            d.join("a.e57"),
            e57_bytes(&[E57Scan::grid(5, false), E57Scan::grid(15, true)]),
        )
        .unwrap();
        assert_eq!(detect(&d.join("b.E57")).unwrap(), Format::E57);
        assert_eq!(detect(d).unwrap(), Format::E57);
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
        std::fs::write(d.join("c.pcd"), "x").unwrap();
        let e = detect(d).unwrap_err().to_string();
        assert!(
            e.contains(".pcd (1) and .e57 (2)") && e.contains("pcd, las, e57 or obj"),
            "{e}"
        );
        assert_eq!(
            open(d, Format::E57, &ImportOptions::default())
                .unwrap()
                .clouds
                .len(),
            2
        );
        // Images belong to datasets with cameras.
        let options = ImportOptions {
            images: Some("images".into()),
            ..ImportOptions::default()
        };
        let e = open(d, Format::E57, &options).unwrap_err().to_string();
        assert!(e.contains("this is an E57 point cloud"), "{e}");
    }

    #[test]
    fn a_file_changed_after_import_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scan.e57");
        std::fs::write(&path, e57_bytes(&[E57Scan::grid(300, true)])).unwrap();
        let mut warnings = Vec::new();
        let mut c = open_cloud(&path, "scan", &ImportOptions::default(), &mut warnings).unwrap();
        std::fs::write(&path, e57_bytes(&[E57Scan::grid(200, true)])).unwrap();
        let e = c.next_chunk(100).unwrap_err().to_string();
        assert!(e.contains("changed since it was imported"), "{e}");
    }

    /// Rewrites every data packet of the file's first scan so that each field's bytes come
    /// after all of the previous field's: the same packets and sizes, the streams as far out
    /// of step as they can be.
    fn out_of_step(bytes: &[u8]) -> Vec<u8> {
        let input = Input::Bytes(bytes.to_vec().into());
        let (scans, _, _) = read_scans(&input, Path::new("x")).unwrap();
        let mut data = logical(bytes);
        let log = |phys: u64| (phys / PAGE * PAYLOAD + phys % PAGE) as usize;
        let start = log(scans[0].section);
        let u64_at = |d: &[u8], at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
        let end = start + u64_at(&data, start + 8) as usize;
        let mut at = log(u64_at(&data, start + 16));
        let fields = scans[0].fields.len();
        // (payload start, capacity) of each packet, and each stream's bytes in order.
        let (mut frames, mut streams) = (Vec::new(), vec![Vec::new(); fields]);
        while at < end {
            let len = u16::from_le_bytes([data[at + 2], data[at + 3]]) as usize + 1;
            assert_eq!(data[at], 1, "only data packets");
            let sizes: Vec<usize> = (0..fields)
                .map(|i| u16::from_le_bytes([data[at + 6 + 2 * i], data[at + 7 + 2 * i]]) as usize)
                .collect();
            let mut p = at + 6 + 2 * fields;
            for (i, &n) in sizes.iter().enumerate() {
                streams[i].extend_from_slice(&data[p..p + n]);
                p += n;
            }
            frames.push((at, sizes.iter().sum::<usize>()));
            at += len;
        }
        let all: Vec<(usize, u8)> = streams
            .iter()
            .enumerate()
            .flat_map(|(i, s)| s.iter().map(move |&b| (i, b)))
            .collect();
        let mut next = 0;
        for (at, cap) in frames {
            let mut sizes = vec![0u16; fields];
            for k in 0..cap {
                let (i, b) = all[next + k];
                sizes[i] += 1;
                data[at + 6 + 2 * fields + k] = b;
            }
            next += cap;
            for (i, s) in sizes.iter().enumerate() {
                data[at + 6 + 2 * i..at + 8 + 2 * i].copy_from_slice(&s.to_le_bytes());
            }
        }
        physical(&data)
    }

    #[test]
    fn streams_out_of_step_read_right_and_are_bounded() {
        let scan = E57Scan::grid(20_000, true);
        let bytes = out_of_step(&e57_bytes(std::slice::from_ref(&scan)));
        // Read right: the reader waits for each field's bytes, however far behind.
        let (mut c, _) = open(bytes.clone()).unwrap();
        let got = read_all(c.as_mut(), 4096);
        for (k, p) in scan.points.iter().enumerate() {
            assert_eq!(
                (got.xyz[k], got.rgb[k]),
                (p.xyz.map(|v| v as f32), p.rgb),
                "point {k}"
            );
        }
        // Bounded: x's 160 KB come before y's first byte.
        let input = Input::Bytes(bytes.into());
        let (scans, _, len) = read_scans(&input, Path::new("x")).unwrap();
        let mut r = ScanReader::open(&input, len, &scans[0], 100_000)
            .ok()
            .unwrap();
        let e = loop {
            match r.next(&scans[0]) {
                Ok(Some(_)) => {}
                Ok(None) => panic!("the streams were not held to 100,000 bytes"),
                Err(ReadError::Damage(_, msg)) => break msg,
                Err(ReadError::Io(e)) => panic!("{e}"),
            }
        };
        assert!(
            e.contains("point 0: its fields' data run more than 100000 bytes apart"),
            "{e}"
        );
    }
}
