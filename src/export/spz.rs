//! SPZ, Niantic's compressed Gaussian splat format (read by SuperSplat, Spark, gsplat.js;
//! written by Scaniverse and LichtFeld), read (versions 2, 3 and 4) and written (version 3).
//!
//! # Layout written (version 3, the last gzip version)
//! A gzip stream holding a 16-byte little-endian header — magic `0x5053474e` ("NGSP"),
//! version `u32`, number of points `u32`, SH degree `u8`, fractional bits `u8`, flags `u8`
//! (`0x1` antialiased, `0x2` extensions follow the data), reserved `u8` = 0 — then the
//! attributes, each for all points in turn:
//! - positions: 3 × 24-bit signed fixed point (`round(x · 2^fractional_bits)`), little-endian;
//! - alphas: `u8`, `round(sigmoid(opacity) · 255)`;
//! - colours: 3 × `u8`, `round(f_dc · 0.15 · 255 + 127.5)` (the DC SH coefficient, scaled so
//!   values somewhat outside [0, 1] survive);
//! - scales: 3 × `u8`, `round((ln σ + 10) · 16)`;
//! - rotations: 4 bytes, "smallest three": 2 bits index of the largest |component| of the
//!   normalised xyzw quaternion (made positive), then the three others as sign + 9-bit
//!   magnitude of `|q|/√½`, first component in the highest bits;
//! - SH (degree > 0): `u8` per coefficient, colour channel fastest, `round(x·128) + 128`
//!   rounded to 5 significant bits for degree 1 and 4 for degrees 2–3 (as Niantic's packer).
//!
//! SPZ stores right-up-back (OpenGL) axes; 3DGS PLYs (and ramsplat) are right-down-front, so
//! positions, quaternions and SH coefficients are flipped on the way in and out (a 180°
//! rotation about x, exactly undone by the reader).
//!
//! # Version 4, read
//! Niantic's library writes version 4 by default: the same attribute arrays, each compressed
//! on its own with zstd, behind a plain (uncompressed) 32-byte header — magic, version, points
//! (`u32`), SH degree, fractional bits, flags, number of streams (`u8` each), the byte offset of
//! the table of contents (`u32`), 12 reserved bytes — then extension records up to that
//! offset, the table (per stream: compressed and uncompressed size, `u64` each) and the
//! streams back to back, in the attribute order above, an empty attribute (SH of degree 0)
//! having no stream. A file is told apart by its first bytes: `NGSP` for version 4, gzip's
//! `1f 8b` for the others. Every size in the table is checked against what the header's point
//! count and SH degree need, and the streams must end exactly at the end of the file, before
//! anything is decompressed. The header's point count must be backed by the file (9 bytes of
//! positions per point, which zstd does not shrink 1024-fold: Niantic's own bound), and each
//! stream is decompressed in one shot into a buffer of exactly its size, so neither a lying
//! header nor a frame asking for a huge window makes the reader allocate beyond that bound.
//! The format has no checksum
//! (Niantic's writer sets none on its zstd frames; a frame that has one is verified), so a
//! damaged byte inside a stream can decode to other values, which are still valid ones: of
//! 1,500 seeded corruptions of a fixture, 408 read as models (`tests/model_files_hostile.rs`),
//! where the gzip versions' CRC-32 refuses all but a handful. ramsplat keeps writing version 3,
//! which every viewer reads (version 2 is read too: rotations as 3 bytes of xyz).
//!
//! # Extensions and the storage axes
//! Flag `0x2` says extension records follow (type `u32`, length `u32`, payload): after the data
//! in versions 2–3, between the header and the table of contents in version 4. Records of
//! unknown types are skipped by their length, as Niantic's library does (they carry viewer
//! metadata such as orbit limits). One changes the data: Adobe's coordinate-system record
//! (`0xADBE0003`, a `u32`) names the axes the data is stored in instead of right-up-back. The
//! eight systems that only flip axes (`RDF`, `LUF`, …) are read; the eight whose y and z are
//! swapped (`RFD`, …, a quarter turn about x, which rotates the SH) are refused by name rather
//! than read in the wrong axes. There is no agreed meaning to read them by: Niantic's library
//! (commit 21715c3) stores data it is told to store in `RFD` as the letters say `RBU`, and
//! `RBU` as `RFD` (positions checked against the source model: y and z come out negated; its
//! `RBD`, the family's quarter turn itself, matches its letters), because within that family
//! it flips the stored y axis for the letter that names z and the reverse.
//!
//! # Quantisation (what a round trip loses)
//! Positions to `2^-fractional_bits` (12 bits = 1/4096 of a scene unit when the scene fits
//! in ±2048; fewer bits for larger scenes: chosen per file so the farthest point fits);
//! log-scales to 1/16; opacity to 1/255 (stored logits clamped to ±ln(509), so 0 and 255 stay
//! finite); DC colour to 1/(0.15·255) ≈ 0.026 in SH units (0.0074 in RGB); rotations to
//! ~1.4e-3 per component; SH to 1/16 (degree 1) and 1/8 (degrees 2–3), clamped to [−1, 1).
//! Measured on a trained model: see `tests/export_formats.rs`.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::ModelInfo;
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};
use crate::scene::maths::{logit, sigmoid};

/// "NGSP" read as a little-endian `u32`.
pub const MAGIC: u32 = 0x5053_474e;
/// The version written.
pub const VERSION: u32 = 3;
/// Fractional bits of positions when the scene fits (Niantic's choice: 12).
pub const FRACTIONAL_BITS: u8 = 12;
const COLOR_SCALE: f32 = 0.15;
const FLAG_ANTIALIASED: u8 = 0x1;
const FLAG_EXTENSIONS: u8 = 0x2;
const HEADER_LEN: usize = 16;
/// Largest number of points a file may claim (far above any real scene; it bounds the
/// allocation a corrupt header could ask for before the data is checked).
pub const MAX_POINTS: u32 = 1 << 28;
/// The plain header of version 4.
const V4_HEADER_LEN: usize = 32;
/// Most bytes of extension records after the data of a version 2–3 file (real records are tens
/// of bytes; the bound keeps a damaged stream from being read on without end).
const MAX_EXTENSION_BYTES: u64 = 1 << 20;
/// Adobe's coordinate-system extension record (module doc).
const EXT_COORDINATE_SYSTEM: u32 = 0xADBE_0003;
/// The coordinate systems of that record, by value − 1: the axes x, y, z point Right or Left,
/// Up or Down (Front or Back in the second half, whose y and z are swapped), Back or Front.
const COORDINATE_SYSTEMS: [&str; 16] = [
    "LDB", "RDB", "LUB", "RUB", "LDF", "RDF", "LUF", "RUF", "LFD", "RFD", "LFU", "RFU", "LBD",
    "RBD", "LBU", "RBU",
];

/// Why an SPZ file could not be read or written. File-level variants name the file.
#[derive(Debug, thiserror::Error)]
pub enum SpzError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<SpzError>,
    },
    #[error("not an SPZ file: the gzip stream is damaged or truncated ({0})")]
    Gzip(#[source] std::io::Error),
    #[error("not an SPZ file: magic {0:#010x}, expected 0x5053474e (\"NGSP\")")]
    BadMagic(u32),
    #[error(
        "SPZ version {0} is not supported (ramsplat reads versions 2 and 3, gzip-compressed, \
         and 4, zstd-compressed behind a plain header)"
    )]
    UnsupportedVersion(u32),
    /// The structure of a version 4 file (header, table of contents, streams) does not hold.
    #[error("SPZ version 4: {0}; the file is damaged or truncated")]
    Damaged(String),
    /// Extension records that do not parse, or a coordinate system ramsplat does not read.
    #[error("SPZ extensions: {0}")]
    Extensions(String),
    #[error("SPZ SH degree {0} is not supported (0 to 4)")]
    BadShDegree(u8),
    #[error("SPZ fractional bits {0} is above 23 (positions are 24-bit)")]
    BadFractionalBits(u8),
    #[error("SPZ header claims {0} points, more than the {MAX_POINTS} this reader accepts")]
    TooManyPoints(u32),
    #[error(
        "SPZ data is {got} bytes, but the header ({points} points, SH degree {sh_degree}) needs \
         {expected}: the file is truncated or corrupt"
    )]
    Truncated {
        points: u32,
        sh_degree: u8,
        expected: usize,
        got: usize,
    },
    #[error(
        "Gaussian {index} is at {value} on axis {axis}: SPZ positions are 24-bit fixed point and \
         cannot hold coordinates beyond ±8388607"
    )]
    OutOfRange {
        index: usize,
        axis: usize,
        value: f32,
    },
    #[error("cannot save: {0}")]
    InvalidModel(String),
}

/// Per SH coefficient 1..=15 (3DGS order), the parity of its basis polynomial in x, y and z
/// (degree 1: y, z, x; degree 2: xy, yz, 3z²−1, xz, x²−y²; degree 3: y(3x²−y²), xyz,
/// y(5z²−1), z(5z²−3), x(5z²−1), z(x²−y²), x(x²−3y²)): flipping an axis multiplies the
/// coefficient by −1 where its parity in that axis is odd.
const SH_PARITY: [[bool; 3]; 15] = {
    const X: [bool; 3] = [true, false, false];
    const Y: [bool; 3] = [false, true, false];
    const Z: [bool; 3] = [false, false, true];
    const EVEN: [bool; 3] = [false, false, false];
    [
        Y,
        Z,
        X,
        [true, true, false],
        [false, true, true],
        EVEN,
        [true, false, true],
        EVEN,
        Y,
        [true, true, true],
        Y,
        Z,
        X,
        Z,
        X,
    ]
};

/// How stored values map to ramsplat's right-down-front axes: the signs by which positions,
/// quaternion vectors (x, y, z; w never flips) and SH coefficients 1..=15 are multiplied, both
/// ways (each is its own inverse).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Axes {
    p: [f32; 3],
    q: [f32; 3],
    sh: [f32; 15],
}

impl Axes {
    /// Data stored with axes of signs `s` against right-down-front (+1: the same direction).
    /// A reflection `F = diag(s)` maps a rotation `R` to `F·R·F`, whose quaternion vector is
    /// `det(F)·F·v`: hence `q`.
    fn flipped(s: [f32; 3]) -> Axes {
        let sign = |odd: [bool; 3]| (0..3).map(|a| if odd[a] { s[a] } else { 1.0 }).product();
        Axes {
            p: s,
            q: [s[1] * s[2], s[0] * s[2], s[0] * s[1]],
            sh: SH_PARITY.map(sign),
        }
    }

    /// SPZ's default storage axes, right-up-back (OpenGL, three.js).
    fn rub() -> Axes {
        Axes::flipped([1.0, -1.0, -1.0])
    }

    /// The axes a coordinate-system record's value names (0, unspecified, is the default).
    fn of_record(value: u32) -> Result<Axes, SpzError> {
        let Some(name) = value
            .checked_sub(1)
            .and_then(|i| COORDINATE_SYSTEMS.get(i as usize))
        else {
            return match value {
                0 => Ok(Axes::rub()),
                _ => Err(SpzError::Extensions(format!(
                    "the coordinate-system record holds {value}, which names no coordinate \
                     system (1 to 16)"
                ))),
            };
        };
        let b = name.as_bytes();
        if matches!(b[1], b'F' | b'B') {
            return Err(SpzError::Extensions(format!(
                "the data is stored in the {name} coordinate system, whose y and z axes are \
                 swapped (a quarter turn that also rotates the SH coefficients), which ramsplat \
                 does not read (Niantic's own library writes some of these systems with y and \
                 z mirrored against their names); re-save the model in right-up-back axes \
                 (SPZ's default) or as a PLY"
            )));
        }
        let sign = |yes: bool| if yes { 1.0 } else { -1.0 };
        Ok(Axes::flipped([
            sign(b[0] == b'R'),
            sign(b[1] == b'D'),
            sign(b[2] == b'F'),
        ]))
    }
}

/// The storage axes the extension `records` (at byte `at` of the file or stream, for the
/// messages) declare: right-up-back unless a coordinate-system record says otherwise. Records
/// of other types are skipped by their length.
fn stored_axes(records: &[u8], at: usize) -> Result<Axes, SpzError> {
    let mut axes = Axes::rub();
    let mut i = 0;
    while i < records.len() {
        let word = |o: usize| {
            records
                .get(o..o + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        };
        let (Some(kind), Some(len)) = (word(i), word(i + 4)) else {
            return Err(SpzError::Extensions(format!(
                "the record at byte {} is cut short ({} bytes left, a record header is 8)",
                at + i,
                records.len() - i
            )));
        };
        let end = (i + 8)
            .checked_add(len as usize)
            .filter(|&e| e <= records.len());
        let Some(end) = end else {
            return Err(SpzError::Extensions(format!(
                "the record of type {kind:#010x} at byte {} claims {len} bytes, but only {} \
                 follow",
                at + i,
                records.len() - i - 8
            )));
        };
        if kind == EXT_COORDINATE_SYSTEM {
            let value = word(i + 8).filter(|_| len >= 4).ok_or_else(|| {
                SpzError::Extensions(format!(
                    "the coordinate-system record at byte {} holds {len} bytes, not a u32",
                    at + i
                ))
            })?;
            axes = Axes::of_record(value)?;
        }
        i = end;
    }
    Ok(axes)
}

fn to_u8(x: f32) -> u8 {
    x.round().clamp(0.0, 255.0) as u8
}

fn quantize_sh(x: f32, bucket: i32) -> u8 {
    let q = (x * 128.0).round() as i32 + 128;
    let q = (q + bucket / 2) / bucket * bucket;
    q.clamp(0, 255) as u8
}

/// Logit of an 8-bit alpha, clamped half a level inside (0, 1) so it stays finite.
pub(crate) fn alpha_logit(a: u8) -> f32 {
    logit((a as f32 / 255.0).clamp(0.5 / 255.0, 254.5 / 255.0))
}

/// Coefficients (beyond DC) per channel for a degree, up to 4 (SPZ's maximum).
fn rest_dim(degree: u8) -> usize {
    ((degree as usize + 1) * (degree as usize + 1)) - 1
}

/// The largest fractional bit count ≤ [`FRACTIONAL_BITS`] at which every position fits.
fn fractional_bits_for(g: &Gaussians) -> Result<u8, SpzError> {
    let mut worst = (0.0f32, 0usize, 0usize);
    for (i, m) in g.means.iter().enumerate() {
        for (a, &v) in m.iter().enumerate() {
            if v.abs() > worst.0 {
                worst = (v.abs(), i, a);
            }
        }
    }
    let limit = ((1 << 23) - 1) as f32;
    for bits in (0..=FRACTIONAL_BITS).rev() {
        if (worst.0 * (1u32 << bits) as f32).round() <= limit {
            return Ok(bits);
        }
    }
    Err(SpzError::OutOfRange {
        index: worst.1,
        axis: worst.2,
        value: g.means[worst.1][worst.2],
    })
}

/// Encodes `g` as a gzip-compressed SPZ version 3 file.
pub fn encode(g: &Gaussians) -> Result<Vec<u8>, SpzError> {
    encode_with_info(g, ModelInfo::default())
}

/// [`encode`], with the antialiased flag (`0x1`) set when `info` says so.
pub fn encode_with_info(g: &Gaussians, info: ModelInfo) -> Result<Vec<u8>, SpzError> {
    let bits = checked_bits(g)?;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    write_raw(&mut enc, g, bits, info).map_err(SpzError::Gzip)?;
    enc.finish().map_err(SpzError::Gzip)
}

/// Validates `g` for SPZ and returns the fractional bits of its positions.
fn checked_bits(g: &Gaussians) -> Result<u8, SpzError> {
    super::validate_model(g).map_err(SpzError::InvalidModel)?;
    fractional_bits_for(g)
}

/// Writes the uncompressed SPZ stream of `g` (header, then each attribute for every Gaussian)
/// to `w` a few bytes at a time: nothing the size of the model is held, so saving a model
/// mid-run costs the RAM budget nothing beyond the writer's buffer.
fn write_raw(w: &mut impl Write, g: &Gaussians, bits: u8, info: ModelInfo) -> io::Result<()> {
    let n = g.len();
    let coeffs = sh_coeffs(g.sh_degree);
    w.write_all(&MAGIC.to_le_bytes())?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(n as u32).to_le_bytes())?;
    let flags = if info.antialiased {
        FLAG_ANTIALIASED
    } else {
        0
    };
    w.write_all(&[g.sh_degree as u8, bits, flags, 0])?;
    let axes = Axes::rub();
    let scale = (1u32 << bits) as f32;
    for m in &g.means {
        for (v, flip) in m.iter().zip(axes.p) {
            let fixed = (v * flip * scale).round() as i32;
            w.write_all(&fixed.to_le_bytes()[..3])?;
        }
    }
    for &o in &g.logit_opacities {
        w.write_all(&[to_u8(sigmoid(o) * 255.0)])?;
    }
    for i in 0..n {
        let dc = g.sh[i * coeffs];
        w.write_all(&dc.map(|c| to_u8(c * (COLOR_SCALE * 255.0) + 0.5 * 255.0)))?;
    }
    for s in &g.log_scales {
        w.write_all(&s.map(|v| to_u8((v + 10.0) * 16.0)))?;
    }
    for q in &g.rotations {
        w.write_all(&pack_smallest_three(*q, axes.q).to_le_bytes())?;
    }
    let mut row = Vec::with_capacity(3 * coeffs);
    for i in 0..n {
        row.clear();
        for k in 1..coeffs {
            let bucket = if k <= 3 { 1 << (8 - 5) } else { 1 << (8 - 4) };
            for c in 0..3 {
                row.push(quantize_sh(
                    axes.sh[k - 1] * g.sh[i * coeffs + k][c],
                    bucket,
                ));
            }
        }
        w.write_all(&row)?;
    }
    Ok(())
}

/// wxyz (ramsplat) → the 4-byte smallest-three code of the normalised xyzw, its vector part
/// multiplied by `flip` (the storage axes').
fn pack_smallest_three(q: [f32; 4], flip: [f32; 3]) -> u32 {
    let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    let q = [
        q[1] / n * flip[0],
        q[2] / n * flip[1],
        q[3] / n * flip[2],
        q[0] / n,
    ];
    let mut largest = 0;
    for i in 1..4 {
        if q[i].abs() > q[largest].abs() {
            largest = i;
        }
    }
    let negate = q[largest] < 0.0;
    let mut comp = largest as u32;
    for (i, &v) in q.iter().enumerate() {
        if i != largest {
            let negbit = ((v < 0.0) ^ negate) as u32;
            let mag = (511.0 * (v.abs() / std::f32::consts::FRAC_1_SQRT_2) + 0.5) as u32;
            comp = (comp << 10) | (negbit << 9) | mag.min(511);
        }
    }
    comp
}

/// The 4-byte smallest-three code → wxyz in ramsplat's axes (`flip`: the storage axes').
fn unpack_smallest_three(mut comp: u32, flip: [f32; 3]) -> [f32; 4] {
    let largest = (comp >> 30) as usize;
    let mut q = [0.0f32; 4];
    let mut sum = 0.0;
    for i in (0..4).rev() {
        if i != largest {
            let mag = comp & 511;
            let neg = (comp >> 9) & 1 == 1;
            comp >>= 10;
            let v = std::f32::consts::FRAC_1_SQRT_2 * mag as f32 / 511.0;
            q[i] = if neg { -v } else { v };
            sum += q[i] * q[i];
        }
    }
    q[largest] = (1.0 - sum).max(0.0).sqrt();
    [q[3], q[0] * flip[0], q[1] * flip[1], q[2] * flip[2]]
}

/// Decodes an SPZ file: versions 2 and 3 (gzip) or 4 (zstd streams), told apart by their first
/// bytes. SH degree 4 is read and cut to 3.
pub fn decode(bytes: &[u8]) -> Result<Gaussians, SpzError> {
    decode_with_info(bytes).map(|(g, _)| g)
}

/// [`decode`], with the header's antialiased flag.
pub fn decode_with_info(bytes: &[u8]) -> Result<(Gaussians, ModelInfo), SpzError> {
    if bytes.starts_with(&MAGIC.to_le_bytes()) {
        decode_v4(bytes)
    } else {
        decode_gzip(bytes)
    }
}

/// What the fixed header says of the data that follows it.
struct Header {
    points: u32,
    degree: u8,
    bits: u8,
    flags: u8,
}

impl Header {
    /// Checks the fields every version shares.
    fn checked(points: u32, degree: u8, bits: u8, flags: u8) -> Result<Header, SpzError> {
        if degree > 4 {
            return Err(SpzError::BadShDegree(degree));
        }
        if bits > 23 {
            return Err(SpzError::BadFractionalBits(bits));
        }
        if points > MAX_POINTS {
            return Err(SpzError::TooManyPoints(points));
        }
        Ok(Header {
            points,
            degree,
            bits,
            flags,
        })
    }

    /// The bytes of each attribute array, in file order: positions, alphas, colours, scales,
    /// rotations (`rot_len` bytes each), SH.
    fn sizes(&self, rot_len: usize) -> [usize; 6] {
        let n = self.points as usize;
        [9, 1, 3, 3, rot_len, 3 * rest_dim(self.degree)].map(|b| b * n)
    }

    fn info(&self) -> ModelInfo {
        let degree = self.degree as u32;
        ModelInfo {
            antialiased: self.flags & FLAG_ANTIALIASED != 0,
            cut_sh_degree: (degree > MAX_SH_DEGREE).then_some(degree),
            fused_filter_3d: false,
            folded_filter_3d: false,
        }
    }
}

/// Names of the attribute arrays, in file order (for messages).
const ATTRIBUTES: [&str; 6] = [
    "positions",
    "alphas",
    "colours",
    "scales",
    "rotations",
    "spherical harmonics",
];

/// Versions 2 and 3: one gzip stream of the 16-byte header, the arrays and, with flag `0x2`,
/// extension records.
fn decode_gzip(bytes: &[u8]) -> Result<(Gaussians, ModelInfo), SpzError> {
    let mut header = [0u8; HEADER_LEN];
    let mut dec = flate2::read::GzDecoder::new(bytes);
    dec.read_exact(&mut header).map_err(SpzError::Gzip)?;
    let u32_at = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
    let magic = u32_at(0);
    if magic != MAGIC {
        return Err(SpzError::BadMagic(magic));
    }
    let version = u32_at(4);
    if !(2..=3).contains(&version) {
        return Err(SpzError::UnsupportedVersion(version));
    }
    let h = Header::checked(u32_at(8), header[12], header[13], header[14])?;
    let rot_len = if version >= 3 { 4 } else { 3 };
    let sizes = h.sizes(rot_len);
    let expected: usize = sizes.iter().sum();
    // Read no more than the header says (plus one byte to detect trailing data), growing the
    // buffer as data arrives, so a lying header cannot make us allocate for it up front.
    let mut data = Vec::new();
    (&mut dec)
        .take(expected as u64 + 1)
        .read_to_end(&mut data)
        .map_err(SpzError::Gzip)?;
    let extensions = h.flags & FLAG_EXTENSIONS != 0;
    if data.len() < expected || (data.len() > expected && !extensions) {
        return Err(SpzError::Truncated {
            points: h.points,
            sh_degree: h.degree,
            expected,
            got: data.len(),
        });
    }
    let axes = if extensions {
        (&mut dec)
            .take(MAX_EXTENSION_BYTES)
            .read_to_end(&mut data)
            .map_err(SpzError::Gzip)?;
        stored_axes(&data[expected..], HEADER_LEN + expected)?
    } else {
        Axes::rub()
    };
    let mut arrays = [&[][..]; 6];
    let mut rest = &data[..expected];
    for (a, &size) in arrays.iter_mut().zip(&sizes) {
        (*a, rest) = rest.split_at(size);
    }
    Ok((unpack(&h, rot_len, arrays, axes), h.info()))
}

/// Version 4: the plain header, extension records, the table of contents and one zstd stream
/// per non-empty attribute array (module doc).
fn decode_v4(bytes: &[u8]) -> Result<(Gaussians, ModelInfo), SpzError> {
    let damaged = |msg: String| SpzError::Damaged(msg);
    if bytes.len() < V4_HEADER_LEN {
        return Err(damaged(format!(
            "the file is {} bytes, shorter than the {V4_HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
    let version = u32_at(4);
    if version != 4 {
        return Err(SpzError::UnsupportedVersion(version));
    }
    let h = Header::checked(u32_at(8), bytes[12], bytes[13], bytes[14])?;
    let (streams, toc_at) = (bytes[15] as usize, u32_at(16) as usize);
    // Each point takes 9 bytes of positions alone; no zstd stream of real data shrinks them by
    // more than 1024 (Niantic's library refuses past the same bound).
    if h.points as u64 * 9 > bytes.len() as u64 * 1024 {
        return Err(damaged(format!(
            "the header claims {} points, more than a file of {} bytes can hold",
            h.points,
            bytes.len()
        )));
    }
    let sizes = h.sizes(4);
    let present: Vec<usize> = (0..6).filter(|&a| sizes[a] > 0).collect();
    if streams != present.len() {
        return Err(damaged(format!(
            "the header counts {streams} streams, but {} points of SH degree {} make {}",
            h.points,
            h.degree,
            present.len()
        )));
    }
    let toc_end = toc_at + 16 * streams;
    if toc_at < V4_HEADER_LEN || toc_end > bytes.len() {
        return Err(damaged(format!(
            "the table of contents at byte {toc_at} ({streams} entries of 16 bytes) does not \
             lie between the header and the end of the file ({} bytes)",
            bytes.len()
        )));
    }
    let axes = if h.flags & FLAG_EXTENSIONS != 0 {
        stored_axes(&bytes[V4_HEADER_LEN..toc_at], V4_HEADER_LEN)?
    } else {
        Axes::rub()
    };
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
    let mut arrays: [Vec<u8>; 6] = Default::default();
    let mut at = toc_end;
    for (k, &a) in present.iter().enumerate() {
        let (packed, unpacked) = (u64_at(toc_at + 16 * k), u64_at(toc_at + 16 * k + 8));
        if unpacked != sizes[a] as u64 {
            return Err(damaged(format!(
                "the table of contents gives the {} stream {unpacked} bytes, but {} points \
                 need {}",
                ATTRIBUTES[a], h.points, sizes[a]
            )));
        }
        let Some(stream) = usize::try_from(packed)
            .ok()
            .and_then(|p| bytes.get(at..at.checked_add(p)?))
        else {
            return Err(damaged(format!(
                "the {} stream ({packed} compressed bytes from byte {at}) runs past the end of \
                 the file ({} bytes)",
                ATTRIBUTES[a],
                bytes.len()
            )));
        };
        at += stream.len();
        // One-shot decompression into a buffer of exactly the size the header and the table
        // agree on (bounded by the file's size above): the output is the decoder's window, so
        // a frame header asking for a large window allocates nothing, and more data than the
        // buffer holds is an error.
        let out = zstd::bulk::decompress(stream, sizes[a]).map_err(|e| {
            damaged(format!(
                "the {} stream does not decompress to its {} bytes ({e})",
                ATTRIBUTES[a], sizes[a]
            ))
        })?;
        if out.len() != sizes[a] {
            return Err(damaged(format!(
                "the {} stream decompresses to {} bytes, not the {} its table entry gives",
                ATTRIBUTES[a],
                out.len(),
                sizes[a]
            )));
        }
        arrays[a] = out;
    }
    if at != bytes.len() {
        return Err(damaged(format!(
            "the streams end at byte {at}, but the file holds {} bytes",
            bytes.len()
        )));
    }
    let arrays = [0, 1, 2, 3, 4, 5].map(|a| &arrays[a][..]);
    Ok((unpack(&h, 4, arrays, axes), h.info()))
}

/// The Gaussians of the attribute `arrays` (file order, each of the size [`Header::sizes`]
/// gives), stored in `axes`.
fn unpack(h: &Header, rot_len: usize, arrays: [&[u8]; 6], axes: Axes) -> Gaussians {
    let [pos, alpha, color, scale, rot, sh] = arrays;
    let n = h.points as usize;
    let dim = rest_dim(h.degree);
    let out_degree = (h.degree as u32).min(MAX_SH_DEGREE);
    let coeffs = sh_coeffs(out_degree);
    let inv = 1.0 / (1u32 << h.bits) as f32;
    // `n` is backed by the data (the arrays have its sizes); a field SPZ does not carry stays
    // zero.
    let mut g = Gaussians::zeros(n, out_degree);
    g.means = pos
        .chunks_exact(9)
        .map(|p| {
            let mut m = [0.0f32; 3];
            for a in 0..3 {
                let b = &p[a * 3..a * 3 + 3];
                let v = i32::from_le_bytes([b[0], b[1], b[2], 0]) << 8 >> 8;
                m[a] = v as f32 * inv * axes.p[a];
            }
            m
        })
        .collect();
    g.logit_opacities = alpha.iter().map(|&a| alpha_logit(a)).collect();
    g.log_scales = scale
        .chunks_exact(3)
        .map(|s| [0, 1, 2].map(|a| s[a] as f32 / 16.0 - 10.0))
        .collect();
    g.rotations = rot
        .chunks_exact(rot_len)
        .map(|r| {
            if rot_len == 4 {
                unpack_smallest_three(u32::from_le_bytes([r[0], r[1], r[2], r[3]]), axes.q)
            } else {
                let xyz = [0, 1, 2].map(|a| r[a] as f32 / 127.5 - 1.0);
                let w = (1.0 - xyz.iter().map(|v| v * v).sum::<f32>())
                    .max(0.0)
                    .sqrt();
                [
                    w,
                    xyz[0] * axes.q[0],
                    xyz[1] * axes.q[1],
                    xyz[2] * axes.q[2],
                ]
            }
        })
        .collect();
    for i in 0..n {
        let c = &color[i * 3..i * 3 + 3];
        g.sh[i * coeffs] = [0, 1, 2].map(|a| (c[a] as f32 / 255.0 - 0.5) / COLOR_SCALE);
        for k in 1..coeffs {
            let s = &sh[(i * dim + k - 1) * 3..(i * dim + k) * 3];
            g.sh[i * coeffs + k] =
                [0, 1, 2].map(|a| axes.sh[k - 1] * (s[a] as f32 - 128.0) / 128.0);
        }
    }
    g
}

/// Writes `g` to `path` as SPZ, atomically (temporary file, then rename).
pub fn save(path: &Path, g: &Gaussians) -> Result<(), SpzError> {
    save_with_info(path, g, ModelInfo::default())
}

/// [`save`] with the antialiased flag `info` gives.
pub fn save_with_info(path: &Path, g: &Gaussians, info: ModelInfo) -> Result<(), SpzError> {
    let bits = checked_bits(g).map_err(|e| SpzError::File {
        path: path.to_owned(),
        source: Box::new(e),
    })?;
    // Streamed through the compressor into the file: no copy of the model in memory.
    crate::fsutil::write_atomic_with(path, &mut |w| {
        let mut enc = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        write_raw(&mut enc, g, bits, info)?;
        enc.finish().map(|_| ())
    })
    .map_err(|source| SpzError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Reads an SPZ file.
pub fn load(path: &Path) -> Result<Gaussians, SpzError> {
    load_with_info(path).map(|(g, _)| g)
}

/// [`load`], with the header's antialiased flag.
pub fn load_with_info(path: &Path) -> Result<(Gaussians, ModelInfo), SpzError> {
    let bytes = crate::fsutil::read_file(path).map_err(|source| SpzError::Io {
        path: path.to_owned(),
        source,
    })?;
    decode_with_info(&bytes).map_err(|e| SpzError::File {
        path: path.to_owned(),
        source: Box::new(e),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rng::Rng;

    pub(crate) fn model(n: usize, degree: u32, seed: u64) -> Gaussians {
        let mut rng = Rng::new(seed);
        let mut u = |lo: f32, hi: f32| lo + (hi - lo) * rng.next_f32();
        let coeffs = sh_coeffs(degree);
        let mut g = Gaussians::zeros(n, degree);
        for i in 0..n {
            g.means[i] = [u(-5.0, 5.0), u(-5.0, 5.0), u(-5.0, 5.0)];
            g.log_scales[i] = [u(-6.0, 0.0), u(-6.0, 0.0), u(-6.0, 0.0)];
            g.rotations[i] = [u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0)];
            g.logit_opacities[i] = u(-4.0, 4.0);
            g.sh[i * coeffs] = [u(-1.5, 1.5), u(-1.5, 1.5), u(-1.5, 1.5)];
            for c in 1..coeffs {
                g.sh[i * coeffs + c] = [u(-0.5, 0.5), u(-0.5, 0.5), u(-0.5, 0.5)];
            }
        }
        g
    }

    /// Same rotation up to sign: |<a, b>| of the normalised quaternions.
    fn same_rotation(a: [f32; 4], b: [f32; 4]) -> f32 {
        let na = a.iter().map(|v| v * v).sum::<f32>().sqrt();
        let nb = b.iter().map(|v| v * v).sum::<f32>().sqrt();
        (a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (na * nb)).abs()
    }

    #[test]
    fn round_trip_is_within_the_stated_quantisation() {
        for degree in 0..=3 {
            let g = model(500, degree, 7 + degree as u64);
            let back = decode(&encode(&g).unwrap()).unwrap();
            assert_within_quantisation(&back, &g);
        }
    }

    /// `back` is `g` as SPZ stores it: every value within the module doc's quantisation.
    fn assert_within_quantisation(back: &Gaussians, g: &Gaussians) {
        let degree = g.sh_degree;
        assert_eq!(back.len(), g.len());
        assert_eq!(back.sh_degree, degree);
        let coeffs = sh_coeffs(degree);
        for i in 0..g.len() {
            for a in 0..3 {
                assert!((back.means[i][a] - g.means[i][a]).abs() <= 0.5 / 4096.0 + 1e-6);
                assert!((back.log_scales[i][a] - g.log_scales[i][a]).abs() <= 1.0 / 32.0 + 1e-5);
                let dc = (back.sh[i * coeffs][a] - g.sh[i * coeffs][a]).abs();
                assert!(dc <= 0.5 / (0.15 * 255.0) + 1e-5, "dc {dc}");
                for k in 1..coeffs {
                    let tol = if k <= 3 { 4.5 / 128.0 } else { 8.5 / 128.0 };
                    let d = (back.sh[i * coeffs + k][a] - g.sh[i * coeffs + k][a]).abs();
                    assert!(d <= tol, "sh {k}: {d}");
                }
            }
            let s = |x: f32| 1.0 / (1.0 + (-x).exp());
            assert!(
                (s(back.logit_opacities[i]) - s(g.logit_opacities[i])).abs() <= 0.5 / 255.0 + 1e-5
            );
            assert!(same_rotation(back.rotations[i], g.rotations[i]) > 0.99999 - 1e-5);
        }
    }

    /// `save` streams the file through the compressor (no copy of the model in memory); what
    /// it writes is what `encode` returns.
    #[test]
    fn saving_streams_what_encode_returns() {
        let dir = tempfile::tempdir().unwrap();
        let raw = |gz: &[u8]| {
            let mut v = Vec::new();
            flate2::read::GzDecoder::new(gz)
                .read_to_end(&mut v)
                .unwrap();
            v
        };
        for degree in 0..=3 {
            let g = model(300, degree, 40 + degree as u64);
            let path = dir.path().join(format!("m{degree}.spz"));
            save_with_info(&path, &g, ModelInfo::with_mode(true)).unwrap();
            let file = std::fs::read(&path).unwrap();
            let mem = encode_with_info(&g, ModelInfo::with_mode(true)).unwrap();
            assert_eq!(raw(&file), raw(&mem), "degree {degree}");
            assert_eq!(load(&path).unwrap(), decode(&mem).unwrap());
        }
    }

    #[test]
    fn the_axes_flip_as_spz_expects() {
        // A point below the camera axis (ramsplat y down = +1) is up-negative in SPZ (y = −1).
        let mut g = model(1, 0, 1);
        g.means[0] = [0.5, 1.0, 2.0];
        let bytes = encode(&g).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut raw)
            .unwrap();
        assert_eq!(&raw[0..4], b"NGSP");
        assert_eq!(u32::from_le_bytes(raw[4..8].try_into().unwrap()), 3);
        assert_eq!(raw[13], 12);
        let fixed = |o: usize| i32::from_le_bytes([raw[o], raw[o + 1], raw[o + 2], 0]) << 8 >> 8;
        assert_eq!(fixed(16), 2048);
        assert_eq!(fixed(19), -4096);
        assert_eq!(fixed(22), -8192);
    }

    #[test]
    fn large_scenes_use_fewer_fractional_bits() {
        let mut g = model(3, 0, 2);
        g.means[1] = [5000.0, 0.0, 0.0];
        let back = decode(&encode(&g).unwrap()).unwrap();
        assert_eq!(back.means[1][0], 5000.0);
        g.means[1] = [1e8, 0.0, 0.0];
        assert!(matches!(
            encode(&g),
            Err(SpzError::OutOfRange {
                index: 1,
                axis: 0,
                ..
            })
        ));
    }

    #[test]
    fn damage_is_refused_by_name() {
        let g = model(10, 1, 3);
        let bytes = encode(&g).unwrap();
        assert!(matches!(
            decode(&bytes[..bytes.len() / 2]),
            Err(SpzError::Gzip(_))
        ));
        assert!(matches!(decode(b"not gzip"), Err(SpzError::Gzip(_))));
        let gz = |raw: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        };
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&bytes[..])
            .read_to_end(&mut raw)
            .unwrap();
        let mut bad = raw.clone();
        bad[0] = b'X';
        assert!(matches!(decode(&gz(&bad)), Err(SpzError::BadMagic(_))));
        let mut bad = raw.clone();
        bad[4] = 4;
        assert!(matches!(
            decode(&gz(&bad)),
            Err(SpzError::UnsupportedVersion(4))
        ));
        let mut bad = raw.clone();
        bad[8..12].copy_from_slice(&11u32.to_le_bytes());
        assert!(matches!(decode(&gz(&bad)), Err(SpzError::Truncated { .. })));
        let mut bad = raw.clone();
        bad[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&gz(&bad)), Err(SpzError::TooManyPoints(_))));
        let mut bad = raw;
        bad.push(0);
        assert!(matches!(decode(&gz(&bad)), Err(SpzError::Truncated { .. })));
    }

    /// The fixtures Niantic's own library wrote (tests/data/spz/README.md).
    fn niantic(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/spz")
            .join(name)
    }

    /// Niantic's library's version 3 and 4 files of one model decode to the same Gaussians, and
    /// those are the source PLY within SPZ's quantisation: the version 4 reader agrees with the
    /// format's reference implementation, not only with ramsplat's own writer.
    #[test]
    fn niantic_files_of_versions_3_and_4_decode_alike() {
        let source = crate::export::ply::load(
            &niantic("src.ply"),
            &crate::export::ply::LoadOptions::default(),
        )
        .unwrap();
        let v3 = load(&niantic("v3.spz")).unwrap();
        let (v4, info) = load_with_info(&niantic("v4.spz")).unwrap();
        assert!(!info.antialiased);
        assert_eq!(v4, v3);
        assert_eq!(v4.len(), 64);
        assert_within_quantisation(&v4, &source);
    }

    /// Data stored in other axes by the coordinate-system extension (RDF: none flipped
    /// against ramsplat's; RUF: y flipped) is read back in ramsplat's axes: what the default
    /// right-up-back file holds, up to the quantisation's rounding of mirrored SH values. A
    /// system with y and z swapped (RFD) is refused by name.
    #[test]
    fn niantic_files_in_other_axes_are_read_in_ours_or_refused() {
        let rub = load(&niantic("v4.spz")).unwrap();
        for name in ["v4rdf.spz", "v4ruf.spz"] {
            let g = load(&niantic(name)).unwrap();
            assert_eq!(g.means, rub.means, "{name}");
            assert_eq!(g.log_scales, rub.log_scales, "{name}");
            assert_eq!(g.logit_opacities, rub.logit_opacities, "{name}");
            let coeffs = sh_coeffs(3);
            for i in 0..g.len() {
                assert!(same_rotation(g.rotations[i], rub.rotations[i]) > 1.0 - 1e-6);
                assert_eq!(g.sh[i * coeffs], rub.sh[i * coeffs], "{name}: DC");
                for k in 1..coeffs {
                    for c in 0..3 {
                        let d = (g.sh[i * coeffs + k][c] - rub.sh[i * coeffs + k][c]).abs();
                        // One quantisation step: 8/128 for degree 1, 16/128 beyond.
                        let step = if k <= 3 { 8.0 } else { 16.0 } / 128.0;
                        assert!(d <= step + 1e-6, "{name}: Gaussian {i} SH {k}: {d}");
                    }
                }
            }
        }
        // Version 3 carries its records after the data, inside the gzip stream.
        assert_eq!(
            load(&niantic("v3ruf.spz")).unwrap(),
            load(&niantic("v4ruf.spz")).unwrap()
        );
        let e = load(&niantic("v4rfd.spz")).unwrap_err().to_string();
        assert!(
            e.contains("v4rfd.spz") && e.contains("RFD coordinate system") && e.contains("PLY"),
            "{e}"
        );
    }

    /// The SH flips of every axis reflection keep the colour seen in every direction:
    /// `Σ s_k c_k Y_k(F d) = Σ c_k Y_k(d)` for `F = diag(s)`, which checks [`SH_PARITY`]; and
    /// right-up-back gives the flips ramsplat's writer has always used.
    #[test]
    fn axis_flips_keep_the_colour_in_every_direction() {
        use crate::scene::sh::eval;
        let mut rng = Rng::new(11);
        let coeffs: Vec<[f64; 3]> = (0..16)
            .map(|_| [0, 1, 2].map(|_| rng.next_f32() as f64 - 0.5))
            .collect();
        for bits in 0..8u32 {
            let s = [0, 1, 2].map(|a| if bits >> a & 1 == 1 { -1.0f32 } else { 1.0 });
            let axes = Axes::flipped(s);
            let flipped: Vec<[f64; 3]> = coeffs
                .iter()
                .enumerate()
                .map(|(k, c)| match k {
                    0 => *c,
                    k => c.map(|v| v * axes.sh[k - 1] as f64),
                })
                .collect();
            for _ in 0..20 {
                let d = [0, 1, 2].map(|_| rng.next_f32() as f64 - 0.5);
                let fd = [0, 1, 2].map(|a| d[a] * s[a] as f64);
                let (a, b) = (eval(d, 3, &coeffs), eval(fd, 3, &flipped));
                for c in 0..3 {
                    assert!((a[c] - b[c]).abs() < 1e-12, "flips {s:?}: {a:?} vs {b:?}");
                }
            }
        }
        let rub = Axes::rub();
        assert_eq!((rub.p, rub.q), ([1.0, -1.0, -1.0], [1.0, -1.0, -1.0]));
        assert_eq!(
            rub.sh,
            [-1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0]
        );
    }

    /// A damaged version 4 file is refused, saying what does not hold, before anything is
    /// decompressed where the structure tells: the table of contents, the stream sizes, the
    /// file's end, the version, the extension records.
    #[test]
    fn damaged_version_4_files_are_refused_by_name() {
        let good = std::fs::read(niantic("v4.spz")).unwrap();
        let err = |b: &[u8]| decode(b).unwrap_err().to_string();
        let toc = u32::from_le_bytes(good[16..20].try_into().unwrap()) as usize;
        for cut in [0, 20, 31, toc + 10, good.len() - 1] {
            let e = err(&good[..cut]);
            assert!(
                e.contains("damaged or truncated") || e.contains("gzip"),
                "cut {cut}: {e}"
            );
        }
        let mut bad = good.clone();
        bad.push(0);
        assert!(
            err(&bad).contains("the streams end at byte"),
            "{}",
            err(&bad)
        );
        let mut bad = good.clone();
        bad[4] = 5;
        assert!(err(&bad).contains("SPZ version 5 is not supported"));
        let mut bad = good.clone();
        bad[15] = 5; // five streams for SH degree 3
        assert!(err(&bad).contains("counts 5 streams"), "{}", err(&bad));
        let mut bad = good.clone();
        bad[toc + 8] ^= 1; // the positions' uncompressed size
        assert!(
            err(&bad).contains("gives the positions stream"),
            "{}",
            err(&bad)
        );
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&(u32::MAX >> 4).to_le_bytes());
        assert!(err(&bad).contains("more than a file of"), "{}", err(&bad));
        let mut bad = good.clone();
        bad[toc] = bad[toc].wrapping_add(1); // the positions' compressed size
        assert!(err(&bad).contains("damaged or truncated"), "{}", err(&bad));
        // Extension records that run past the header zone.
        let ext = std::fs::read(niantic("v4rdf.spz")).unwrap();
        let mut bad = ext.clone();
        bad[36..40].copy_from_slice(&100u32.to_le_bytes());
        assert!(err(&bad).contains("claims 100 bytes"), "{}", err(&bad));
        let mut bad = ext;
        bad[40..44].copy_from_slice(&17u32.to_le_bytes());
        assert!(
            err(&bad).contains("names no coordinate system"),
            "{}",
            err(&bad)
        );
    }

    /// The fixture's streams, decompressed, re-assembled into a version 4 file with the first
    /// stream compressed by `first` (the rest at zstd's default).
    fn reassembled(first: impl Fn(&[u8]) -> Vec<u8>) -> Vec<u8> {
        let good = std::fs::read(niantic("v4.spz")).unwrap();
        let toc = u32::from_le_bytes(good[16..20].try_into().unwrap()) as usize;
        let n = good[15] as usize;
        let mut at = toc + 16 * n;
        let mut toc_bytes = Vec::new();
        let mut streams = Vec::new();
        for k in 0..n {
            let e = &good[toc + 16 * k..];
            let packed = u64::from_le_bytes(e[..8].try_into().unwrap()) as usize;
            let raw = zstd::decode_all(&good[at..at + packed]).unwrap();
            at += packed;
            let z = if k == 0 {
                first(&raw)
            } else {
                zstd::encode_all(&raw[..], 3).unwrap()
            };
            toc_bytes.extend_from_slice(&(z.len() as u64).to_le_bytes());
            toc_bytes.extend_from_slice(&(raw.len() as u64).to_le_bytes());
            streams.extend_from_slice(&z);
        }
        let mut out = good[..toc].to_vec();
        out.extend_from_slice(&toc_bytes);
        out.extend_from_slice(&streams);
        out
    }

    /// Streams from other zstd writers read alike: a streaming encoder's frame (no content
    /// size, a window far beyond the stream: decompressed in one shot, so that window is never
    /// allocated), and one whose data runs past its table entry is refused.
    #[test]
    fn zstd_frames_of_other_writers_read_alike() {
        let want = load(&niantic("v4.spz")).unwrap();
        let plain = reassembled(|raw| zstd::encode_all(raw, 3).unwrap());
        assert_eq!(decode(&plain).unwrap(), want);
        let streamed = |raw: &[u8]| {
            let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            e.window_log(27).unwrap();
            e.include_contentsize(false).unwrap();
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        };
        assert_eq!(decode(&reassembled(streamed)).unwrap(), want);
        let longer = reassembled(|raw| {
            let mut more = raw.to_vec();
            more.push(0);
            zstd::encode_all(&more[..], 3).unwrap()
        });
        // The table still says the positions' size; the frame holds one byte more.
        let toc = u32::from_le_bytes(longer[16..20].try_into().unwrap()) as usize;
        let mut longer = longer;
        longer[toc + 8..toc + 16].copy_from_slice(&576u64.to_le_bytes());
        let e = decode(&longer).unwrap_err().to_string();
        assert!(
            e.contains("the positions stream does not decompress to its 576 bytes"),
            "{e}"
        );
    }

    /// SH degree 4 (Niantic's writer takes it) is read and cut to 3, and the loaded info says
    /// so; the kept coefficients are the source's (the same the PLY reader keeps from the
    /// degree-4 source PLY, whose 24 coefficients per channel are laid out channel-major).
    #[test]
    fn degree_4_is_cut_to_3_and_said() {
        use crate::export::ply;
        let (from_ply, ply_info) =
            ply::load_with_info(&niantic("src4.ply"), &ply::LoadOptions::default()).unwrap();
        assert_eq!((from_ply.sh_degree, ply_info.cut_sh_degree), (3, Some(4)));
        let (g, info) = load_with_info(&niantic("v4sh4.spz")).unwrap();
        assert_eq!((g.sh_degree, info.cut_sh_degree), (3, Some(4)));
        assert_within_quantisation(&g, &from_ply);
        let note = info.sh_cut_note(Path::new("m.spz")).unwrap();
        assert!(note.starts_with("m.spz stores SH degree 4; ramsplat keeps degrees 0 to 3"));
        assert_eq!(
            load_with_info(&niantic("v4.spz")).unwrap().1.cut_sh_degree,
            None
        );
    }
}
