//! SPZ, Niantic's compressed Gaussian splat format (read by SuperSplat, Spark, gsplat.js;
//! written by Scaniverse and LichtFeld), read and written.
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
//! Niantic's library has since moved to version 4 (zstd-compressed streams with a table of
//! contents); its loader still reads versions 1–3, as do the web viewers, so ramsplat writes 3
//! and reads 2 and 3 (v2: rotations as 3 bytes of xyz). Version 4 files are refused by name.
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
        "SPZ version {0} is not supported (ramsplat reads 2 and 3; version 4 is zstd-based: \
         re-save it as version 3 with Niantic's tools)"
    )]
    UnsupportedVersion(u32),
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

/// The axis flips from ramsplat/PLY (right-down-front) to SPZ (right-up-back) and back.
const FLIP_P: [f32; 3] = [1.0, -1.0, -1.0];
/// Flips of the quaternion's x, y, z (w never flips).
const FLIP_Q: [f32; 3] = [1.0, -1.0, -1.0];
/// Flips of SH coefficients 1..=15 (each basis function's parity in y and z).
const FLIP_SH: [f32; 15] = [
    -1.0, -1.0, 1.0, -1.0, 1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0,
];

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
    let scale = (1u32 << bits) as f32;
    for m in &g.means {
        for a in 0..3 {
            let fixed = (m[a] * FLIP_P[a] * scale).round() as i32;
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
        w.write_all(&pack_smallest_three(*q).to_le_bytes())?;
    }
    let mut row = Vec::with_capacity(3 * coeffs);
    for i in 0..n {
        row.clear();
        for k in 1..coeffs {
            let bucket = if k <= 3 { 1 << (8 - 5) } else { 1 << (8 - 4) };
            for c in 0..3 {
                row.push(quantize_sh(
                    FLIP_SH[k - 1] * g.sh[i * coeffs + k][c],
                    bucket,
                ));
            }
        }
        w.write_all(&row)?;
    }
    Ok(())
}

/// wxyz (ramsplat) → the 4-byte smallest-three code of the normalised, axis-flipped xyzw.
fn pack_smallest_three(q: [f32; 4]) -> u32 {
    let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    let q = [
        q[1] / n * FLIP_Q[0],
        q[2] / n * FLIP_Q[1],
        q[3] / n * FLIP_Q[2],
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

/// The 4-byte smallest-three code → wxyz in ramsplat's axes.
fn unpack_smallest_three(mut comp: u32) -> [f32; 4] {
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
    [q[3], q[0] * FLIP_Q[0], q[1] * FLIP_Q[1], q[2] * FLIP_Q[2]]
}

/// Decodes an SPZ file (gzip, versions 2 and 3). SH degree 4 is read and cut to 3.
pub fn decode(bytes: &[u8]) -> Result<Gaussians, SpzError> {
    decode_with_info(bytes).map(|(g, _)| g)
}

/// [`decode`], with the header's antialiased flag.
pub fn decode_with_info(bytes: &[u8]) -> Result<(Gaussians, ModelInfo), SpzError> {
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
    let points = u32_at(8);
    let (degree, bits, flags) = (header[12], header[13], header[14]);
    if degree > 4 {
        return Err(SpzError::BadShDegree(degree));
    }
    if bits > 23 {
        return Err(SpzError::BadFractionalBits(bits));
    }
    if points > MAX_POINTS {
        return Err(SpzError::TooManyPoints(points));
    }
    let n = points as usize;
    let rot_len = if version >= 3 { 4 } else { 3 };
    let dim = rest_dim(degree);
    let expected = n * (9 + 1 + 3 + 3 + rot_len + dim * 3);
    // Read no more than the header says (plus one byte to detect trailing data), growing the
    // buffer as data arrives, so a lying header cannot make us allocate for it up front.
    let mut data = Vec::new();
    (&mut dec)
        .take(expected as u64 + 1)
        .read_to_end(&mut data)
        .map_err(SpzError::Gzip)?;
    if data.len() < expected || (data.len() > expected && flags & FLAG_EXTENSIONS == 0) {
        return Err(SpzError::Truncated {
            points,
            sh_degree: degree,
            expected,
            got: data.len(),
        });
    }
    let info = ModelInfo {
        antialiased: flags & FLAG_ANTIALIASED != 0,
    };
    let out_degree = (degree as u32).min(MAX_SH_DEGREE);
    let coeffs = sh_coeffs(out_degree);
    let (pos, rest) = data.split_at(n * 9);
    let (alpha, rest) = rest.split_at(n);
    let (color, rest) = rest.split_at(n * 3);
    let (scale, rest) = rest.split_at(n * 3);
    let (rot, rest) = rest.split_at(n * rot_len);
    let sh = &rest[..n * dim * 3];
    let inv = 1.0 / (1u32 << bits) as f32;
    // `n` is backed by the data (the slices above); a field SPZ does not carry stays zero.
    let mut g = Gaussians::zeros(n, out_degree);
    g.means = pos
        .chunks_exact(9)
        .map(|p| {
            let mut m = [0.0f32; 3];
            for a in 0..3 {
                let b = &p[a * 3..a * 3 + 3];
                let v = i32::from_le_bytes([b[0], b[1], b[2], 0]) << 8 >> 8;
                m[a] = v as f32 * inv * FLIP_P[a];
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
                unpack_smallest_three(u32::from_le_bytes([r[0], r[1], r[2], r[3]]))
            } else {
                let xyz = [0, 1, 2].map(|a| r[a] as f32 / 127.5 - 1.0);
                let w = (1.0 - xyz.iter().map(|v| v * v).sum::<f32>())
                    .max(0.0)
                    .sqrt();
                [
                    w,
                    xyz[0] * FLIP_Q[0],
                    xyz[1] * FLIP_Q[1],
                    xyz[2] * FLIP_Q[2],
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
                [0, 1, 2].map(|a| FLIP_SH[k - 1] * (s[a] as f32 - 128.0) / 128.0);
        }
    }
    Ok((g, info))
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
            assert_eq!(back.len(), g.len());
            assert_eq!(back.sh_degree, degree);
            let coeffs = sh_coeffs(degree);
            for i in 0..g.len() {
                for a in 0..3 {
                    assert!((back.means[i][a] - g.means[i][a]).abs() <= 0.5 / 4096.0 + 1e-6);
                    assert!(
                        (back.log_scales[i][a] - g.log_scales[i][a]).abs() <= 1.0 / 32.0 + 1e-5
                    );
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
                    (s(back.logit_opacities[i]) - s(g.logit_opacities[i])).abs()
                        <= 0.5 / 255.0 + 1e-5
                );
                assert!(same_rotation(back.rotations[i], g.rotations[i]) > 0.99999 - 1e-5);
            }
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
            save_with_info(&path, &g, ModelInfo { antialiased: true }).unwrap();
            let file = std::fs::read(&path).unwrap();
            let mem = encode_with_info(&g, ModelInfo { antialiased: true }).unwrap();
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
}
