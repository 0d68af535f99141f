//! A LAS/LAZ writer for tests, fuzz seeds and benchmarks of [`crate::import::las`]: any LAS
//! version (1.0 to 1.4) and point format (0 to 10), extra bytes, foreign VLRs, and LAZ through
//! the `laz` crate's LASzip compressor with fixed- or variable-size chunks.
//!
//! Records carry the fields the importer reads (coordinates, RGB, classification, the
//! withheld flag) and deterministic filler in the rest (intensity, returns, NIR, extra bytes),
//! so a reader that takes a field from the wrong offset reads wrong values.

use std::io::{Cursor, Seek, SeekFrom};

use laz::{LasZipCompressor, LazVlrBuilder};

use crate::import::las::{
    rgb_offset, HEADER_1_0, HEADER_1_3, HEADER_1_4, LASZIP_RECORD_ID, MIN_RECORD, VLR_HEADER,
};

/// One point as stored: the record's integer coordinates, 16-bit RGB (written only by formats
/// with colour), ASPRS classification and withheld flag.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LasPoint {
    pub xyz: [i32; 3],
    pub rgb: [u16; 3],
    pub class: u8,
    pub withheld: bool,
}

/// How a LAZ file's points are split into LASzip chunks.
#[derive(Clone, Copy, Debug)]
pub enum LazChunks {
    /// Every chunk this many points (LASzip's default is 50,000).
    Fixed(u32),
    /// Variable-size chunks (as COPC writes), closed every this many points here.
    Variable(u32),
}

/// How [`las_bytes`] lays a file out.
#[derive(Clone, Debug)]
pub struct LasSpec {
    /// LAS 1.`minor`.
    pub minor: u8,
    /// Point format 0 to 10.
    pub format: u8,
    /// Extra bytes after each record's standard fields.
    pub extra: u16,
    pub scale: [f64; 3],
    pub offset: [f64; 3],
    /// `Some`: LAZ, with these chunks.
    pub laz: Option<LazChunks>,
    /// VLRs before the LASzip one: user id (at most 16 bytes), record id, data.
    pub vlrs: Vec<(String, u16, Vec<u8>)>,
}

impl LasSpec {
    /// LAS 1.`minor`, point format `format`, millimetre-scale coordinates around an offset.
    pub fn new(minor: u8, format: u8) -> LasSpec {
        LasSpec {
            minor,
            format,
            extra: 0,
            scale: [0.001, 0.002, 0.0005],
            offset: [1000.0, -250.0, 12.5],
            laz: None,
            vlrs: vec![],
        }
    }

    /// The same, compressed as LAZ with `chunks`.
    pub fn laz(mut self, chunks: LazChunks) -> LasSpec {
        self.laz = Some(chunks);
        self
    }
}

/// `n` points spread over ±100 m × ±150 m × ±10 m (at [`LasSpec::new`]'s scales) with varied
/// 16-bit colours (red widened from 8 bits by ×257, green by ×256, blue full 16-bit) and
/// classes 0 to 18; none withheld. The same formula as `tools/las_fixtures.py`.
pub fn las_points(n: usize) -> Vec<LasPoint> {
    (0..n as i64)
        .map(|i| LasPoint {
            xyz: [
                ((i * 7919) % 200_001 - 100_000) as i32,
                ((i * 104_729) % 150_001 - 75_000) as i32,
                ((i * 31) % 40_001 - 20_000) as i32,
            ],
            rgb: [
                (((i * 37) % 256) * 257) as u16,
                (((i * 91) % 256) * 256) as u16,
                ((i * 4099) % 65_536) as u16,
            ],
            class: (i % 19) as u8,
            withheld: false,
        })
        .collect()
}

/// The record of `p` in `spec`'s point format.
fn record(spec: &LasSpec, p: &LasPoint) -> Vec<u8> {
    let min = usize::from(MIN_RECORD[usize::from(spec.format)]);
    let mut r = vec![0u8; min + usize::from(spec.extra)];
    for (i, v) in p.xyz.iter().enumerate() {
        r[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    r[12..14].copy_from_slice(&((p.xyz[0] as u16) ^ 0x5a5a).to_le_bytes()); // intensity
    if spec.format < 6 {
        r[14] = 0b0000_1001; // return 1 of 1
        r[15] = (p.class & 0x1f) | if p.withheld { 0x80 } else { 0 };
    } else {
        r[14] = 0x11; // return 1 of 1
        r[15] = if p.withheld { 0x04 } else { 0 };
        r[16] = p.class;
    }
    if let Some(o) = rgb_offset(spec.format) {
        for (k, c) in p.rgb.iter().enumerate() {
            r[o + 2 * k..o + 2 * k + 2].copy_from_slice(&c.to_le_bytes());
        }
        if matches!(spec.format, 8 | 10) {
            r[36..38].copy_from_slice(&p.rgb[1].to_le_bytes()); // NIR
        }
    }
    for (k, b) in r[min..].iter_mut().enumerate() {
        *b = k as u8 ^ p.class;
    }
    r
}

/// A VLR: its 54-byte header and `data`.
fn vlr(user: &str, id: u16, data: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; VLR_HEADER as usize];
    let user = &user.as_bytes()[..user.len().min(16)];
    v[2..2 + user.len()].copy_from_slice(user);
    v[18..20].copy_from_slice(&id.to_le_bytes());
    v[20..22].copy_from_slice(&(data.len() as u16).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A LAS file (LAZ under `spec.laz`) of `pts`: header, `spec.vlrs`, the LASzip VLR if
/// compressed, then the point data. The header's bounds are left zero (the importer does not
/// read them).
pub fn las_bytes(spec: &LasSpec, pts: &[LasPoint]) -> Vec<u8> {
    let header_size = match spec.minor {
        0..=2 => HEADER_1_0,
        3 => HEADER_1_3,
        _ => HEADER_1_4,
    };
    let laz_vlr = spec.laz.map(|chunks| {
        let b = LazVlrBuilder::default()
            .with_point_format(spec.format, spec.extra)
            .expect("a LAS point format");
        match chunks {
            LazChunks::Fixed(n) => b.with_fixed_chunk_size(n),
            LazChunks::Variable(_) => b.with_variable_chunk_size(),
        }
        .build()
    });
    let mut vlrs = Vec::new();
    for (user, id, data) in &spec.vlrs {
        vlrs.extend(vlr(user, *id, data));
    }
    if let Some(v) = &laz_vlr {
        let mut data = Vec::new();
        v.write_to(&mut data).expect("writing to memory");
        vlrs.extend(vlr("laszip encoded", LASZIP_RECORD_ID, &data));
    }
    let count = spec.vlrs.len() + usize::from(laz_vlr.is_some());
    let data_offset = usize::from(header_size) + vlrs.len();
    let mut out = vec![0u8; usize::from(header_size)];
    out[..4].copy_from_slice(b"LASF");
    out[24] = 1;
    out[25] = spec.minor;
    out[94..96].copy_from_slice(&header_size.to_le_bytes());
    out[96..100].copy_from_slice(&(data_offset as u32).to_le_bytes());
    out[100..104].copy_from_slice(&(count as u32).to_le_bytes());
    out[104] = spec.format | if spec.laz.is_some() { 0x80 } else { 0 };
    let len = MIN_RECORD[usize::from(spec.format)] + spec.extra;
    out[105..107].copy_from_slice(&len.to_le_bytes());
    // LAS 1.4 leaves the legacy count zero for formats 6 to 10.
    if spec.format < 6 || spec.minor < 4 {
        out[107..111].copy_from_slice(&(pts.len() as u32).to_le_bytes());
    }
    if spec.minor >= 4 {
        out[247..255].copy_from_slice(&(pts.len() as u64).to_le_bytes());
    }
    for i in 0..3 {
        out[131 + 8 * i..139 + 8 * i].copy_from_slice(&spec.scale[i].to_le_bytes());
        out[155 + 8 * i..163 + 8 * i].copy_from_slice(&spec.offset[i].to_le_bytes());
    }
    out.extend(vlrs);
    match (laz_vlr, spec.laz) {
        (Some(v), Some(chunks)) => {
            let close_every = match chunks {
                LazChunks::Variable(n) => Some(n.max(1) as usize),
                LazChunks::Fixed(_) => None,
            };
            let mut cur = Cursor::new(out);
            cur.seek(SeekFrom::End(0)).expect("seeking in memory");
            let mut c = LasZipCompressor::new(cur, v).expect("a LASzip compressor");
            for (i, p) in pts.iter().enumerate() {
                c.compress_one(&record(spec, p))
                    .expect("compressing to memory");
                if close_every.is_some_and(|n| i % n == n - 1) {
                    c.finish_current_chunk().expect("compressing to memory");
                }
            }
            c.done().expect("compressing to memory");
            c.into_inner().into_inner()
        }
        _ => {
            for p in pts {
                out.extend(record(spec, p));
            }
            out
        }
    }
}
