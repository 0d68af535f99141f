//! PlayCanvas's **compressed PLY** (`*.compressed.ply`: written by SuperSplat and
//! splat-transform, read by SuperSplat, the PlayCanvas engine and other web viewers), read and
//! written.
//!
//! Owns the layout below, the Morton order the writer puts Gaussians in, and the quantisation
//! both ways. The facts come from PlayCanvas's own code: the engine's reader
//! (`src/framework/parsers/ply.js`, `src/scene/gsplat/gsplat-compressed-data.js` and the
//! `compressed` vertex shader chunks) and the writers of SuperSplat (`src/splat-serialize.ts`,
//! before it moved to splat-transform) and splat-transform
//! (`src/lib/writers/compressed-chunk.ts`, `write-compressed-ply.ts`; its reader
//! `src/lib/readers/decompress-ply.ts`).
//!
//! # Layout
//! A binary little-endian PLY with two or three elements, in this order:
//! - `chunk`, one row per 256 Gaussians (`ceil(n / 256)` rows), `float` properties
//!   `min_x min_y min_z max_x max_y max_z` (the chunk's position bounds),
//!   `min_scale_x min_scale_y min_scale_z max_scale_x max_scale_y max_scale_z` (bounds of the
//!   *log* scales) and, in files from newer writers (always in ours),
//!   `min_r min_g min_b max_r max_g max_b` (bounds of the DC colour `0.5 + C0 · f_dc`). Files
//!   without the colour bounds (12 properties) are read too: their colour is the packed value
//!   itself, in [0, 1].
//! - `vertex`, one row per Gaussian, four `uint` words; Gaussian `i` belongs to chunk `i / 256`
//!   and each field is a fraction `t = q / (2^bits − 1)` of its chunk's range,
//!   decoded `min · (1 − t) + max · t`:
//!   - `packed_position`: x in bits 21..32 (11 bits), y in bits 11..21 (10), z in bits 0..11
//!     (11);
//!   - `packed_rotation`: bits 30..32 the index (0..3, into `rot_0..rot_3` = w x y z, which is
//!     ramsplat's order) of the largest |component| of the normalised quaternion, negated as a
//!     whole so that component is positive; then the other three components in index order at
//!     bits 20..30, 10..20 and 0..10, each `v / √2 + 0.5` as 10-bit unorm (so
//!     `v = (t − 0.5) · √2`: they lie in [−1/√2, 1/√2]). The largest is
//!     `√(1 − a² − b² − c²)` (clamped at 0);
//!   - `packed_scale`: the log scales, 11-10-11 bits as positions;
//!   - `packed_color`: r g b in bits 24..32, 16..24, 8..16 (8 bits each, fractions of the chunk's
//!     colour range) and opacity `sigmoid(logit)` in bits 0..8, absolute.
//! - `sh` (SH degree 1–3 only), one row per Gaussian, `uchar f_rest_0 ..` (9, 24 or 45 of them:
//!   the degree; ours leaves out top bands that are all within half a step of 0, see
//!   [`stored_sh_degree`]), in the standard 3DGS PLY order (channel-major: all R coefficients, then G,
//!   then B). The engine decodes a byte `q` as `q · 8/255 − 4` (CPU and shader alike), so we
//!   write `round((v + 4) · 255/8)` clamped to 0..255 and read back exactly the engine's value.
//!   (SuperSplat's and splat-transform's writers truncate `256 · (v/8 + 0.5)` instead, which
//!   the engine reads up to 1/32 off; splat-transform's reader decodes `(q + 0.5)/32 − 4`,
//!   within 1/64 of the engine's value.)
//!
//! Positions, scales and rotations are the PLY's axes and stored values unchanged (no axis
//! flip, unlike SPZ). Header comments carry [`super::ply::ANTIALIASED_COMMENT`] when the
//! model was trained antialiased and [`super::ply::FOLDED_FILTER_COMMENT`] when it holds a
//! folded 3D filter, as in ramsplat's plain PLY; other readers skip them.
//!
//! # Order
//! The writer **reorders** the Gaussians, as SuperSplat and splat-transform do: by the 30-bit
//! Morton code of their position in the model's bounding box (10 bits per axis, ties kept in
//! model order), so each chunk covers a small region and its 11/10-bit grid is fine. Reading
//! gives the Gaussians in file order. Nothing in ramsplat depends on the order of a model.
//!
//! # Quantisation (what a round trip loses)
//! Per axis, with `e` the extent of the Gaussian's chunk (`max − min`): positions to within
//! `e/(2·2047)` on x and z and `e/(2·1023)` on y; log-scales likewise; DC colour within
//! `e/(2·255)` in colour units, so the DC coefficient within `e/(2·255·C0)`; opacity within
//! 0.5/255 after the sigmoid (logits are read back clamped half a level inside (0, 1), as for
//! SPZ and `.splat`); each of the three stored quaternion components within `√2/(2·1023)` ≈
//! 6.9e-4 of the normalised, sign-fixed quaternion, and the reconstructed largest one within
//! three times that; SH coefficients within 4/255 ≈ 0.0157 when in [−4, 4], clamped beyond (and within
//! the same 4/255 of 0 in a band left out). 0 itself is not a decodable value: a coefficient
//! near 0 in a band that is kept comes back about ±4/255 off, which dominates what a round
//! trip of a trained model loses (docs/commands.md, Ecosystem formats).
//! Add float rounding (a few ulp of the chunk's bounds). The tests below assert these bounds.
//!
//! # Invariants
//! - A saved file is exactly what [`encode`] returns, written under a temporary name and
//!   renamed into place ([`crate::fsutil::write_atomic_with`]). Saving streams the rows: it
//!   holds the Morton order (4 bytes per Gaussian, 8 while it is sorted) and the chunk table
//!   (72 bytes per 256), no copy of the model.
//! - Saving refuses what the file could not hold: non-finite values, an all-zero rotation, a
//!   chunk whose range overflows `f32`.
//! - Reading uses the crate's one PLY parser ([`crate::import::ply`]), looks properties up by
//!   name (extra properties are ignored), requires `chunk`, `vertex`, `sh` in that order (as
//!   every writer puts them and the engine needs), checks the types (`float`, `uint`, `uchar`),
//!   the chunk count against `ceil(n / 256)`, the `sh` row count against `n`, and refuses
//!   non-finite chunk bounds by chunk and property. Nothing is allocated from a declared count.
//!   [`super::load_model`] also reads a compressed PLY named plain `.ply`
//!   ([`is_compressed_ply`] looks at its header).

use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use super::ModelInfo;
use crate::import::ply::{PlyElement, PlyFormat, PlyReader, PropertyKind, ScalarType};
use crate::import::ImportError;
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};
use crate::scene::maths::{rgb_to_sh_dc, sh_dc_to_rgb, sigmoid};

/// Gaussians per chunk (fixed by the format).
pub const CHUNK_SIZE: usize = 256;

/// The `chunk` element's properties, in the order written; the first 12 are required.
pub const CHUNK_PROPERTIES: [&str; 18] = [
    "min_x",
    "min_y",
    "min_z",
    "max_x",
    "max_y",
    "max_z",
    "min_scale_x",
    "min_scale_y",
    "min_scale_z",
    "max_scale_x",
    "max_scale_y",
    "max_scale_z",
    "min_r",
    "min_g",
    "min_b",
    "max_r",
    "max_g",
    "max_b",
];

/// The `vertex` element's properties, in the order written.
pub const VERTEX_PROPERTIES: [&str; 4] = [
    "packed_position",
    "packed_rotation",
    "packed_scale",
    "packed_color",
];

/// SH coefficients are stored over [−SH_RANGE, SH_RANGE].
pub const SH_RANGE: f32 = 4.0;

/// Why a compressed PLY could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CompressedPlyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The PLY itself is malformed or truncated: from the PLY reader (names the element and
    /// the record where the data ran out).
    #[error(transparent)]
    Ply(#[from] ImportError),
    #[error(
        "{}: the PLY is `{format}`, but a compressed PLY is binary_little_endian (the only \
         encoding viewers read): re-export it with SuperSplat or splat-transform",
        path.display()
    )]
    NotBinaryLittleEndian { path: PathBuf, format: &'static str },
    #[error(
        "{}: no `{element}` element (elements: {found:?}); a compressed PLY has `chunk`, \
         `vertex` and optionally `sh`{hint}",
        path.display()
    )]
    MissingElement {
        path: PathBuf,
        element: &'static str,
        found: Vec<String>,
        hint: &'static str,
    },
    #[error(
        "{}: elements are in the order {found:?}; a compressed PLY has `chunk` before `vertex` \
         before `sh` (the chunk bounds are needed to decode the vertices): re-export it",
        path.display()
    )]
    ElementOrder { path: PathBuf, found: Vec<String> },
    #[error("{}: element `{element}` has no property `{property}`{hint}", path.display())]
    MissingProperty {
        path: PathBuf,
        element: &'static str,
        property: String,
        hint: &'static str,
    },
    #[error(
        "{}: element `{element}` property `{property}` is `{found}`, but the compressed PLY \
         layout has `{expected}` there: the file was not written as a compressed PLY",
        path.display()
    )]
    WrongType {
        path: PathBuf,
        element: &'static str,
        property: String,
        found: &'static str,
        expected: &'static str,
    },
    #[error(
        "{}: {chunks} `chunk` rows for {vertices} vertices, but every 256 vertices need one \
         chunk ({expected}): the header is corrupt or the file was cut and re-headed",
        path.display()
    )]
    ChunkCount {
        path: PathBuf,
        chunks: u64,
        vertices: u64,
        expected: u64,
    },
    #[error(
        "{}: element `sh` has {count} `f_rest_*` properties; compressed PLY stores 9, 24 or 45 \
         (SH degree 1, 2 or 3)",
        path.display()
    )]
    ShCount { path: PathBuf, count: usize },
    #[error(
        "{}: element `sh` has {rows} rows for {vertices} vertices; it needs one per vertex",
        path.display()
    )]
    ShRows {
        path: PathBuf,
        rows: u64,
        vertices: u64,
    },
    #[error(
        "{}: chunk {chunk}: property `{property}` is {value}; its Gaussians cannot be decoded \
         (the file is corrupt): re-export it",
        path.display()
    )]
    NonFiniteChunk {
        path: PathBuf,
        chunk: u64,
        property: &'static str,
        value: f64,
    },
    #[error(
        "{}: vertex {vertex} (chunk {chunk}): its colour decodes to {value} on channel \
         {channel}, beyond what a DC coefficient holds in single precision (the chunk's colour \
         bounds are corrupt): re-export it",
        path.display()
    )]
    ColourOverflow {
        path: PathBuf,
        vertex: u64,
        chunk: u64,
        channel: usize,
        value: f32,
    },
    #[error(
        "{}: cannot save: chunk {chunk} (Gaussians in Morton order from {first}): {attribute} \
         on axis {axis} spans {min} to {max}, a range beyond f32; remove the outlying \
         Gaussians first",
        path.display()
    )]
    RangeOverflow {
        path: PathBuf,
        chunk: usize,
        first: usize,
        attribute: &'static str,
        axis: usize,
        min: f32,
        max: f32,
    },
    #[error("{}: cannot save: {msg}", path.display())]
    InvalidModel { path: PathBuf, msg: String },
}

/// `t` in [0, 1] as a `bits`-bit unsigned normalised integer (rounded to nearest).
fn unorm(t: f32, bits: u32) -> u32 {
    let top = ((1u32 << bits) - 1) as f32;
    (t * top + 0.5).floor().clamp(0.0, top) as u32
}

/// The low `bits` bits of `word` as a fraction of their maximum.
fn from_unorm(word: u32, bits: u32) -> f32 {
    let top = (1u32 << bits) - 1;
    (word & top) as f32 / top as f32
}

/// Where `v` lies in [min, max], as a fraction (0 for an empty range).
fn fraction(v: f32, min: f32, max: f32) -> f32 {
    if max > min {
        ((v - min) / (max - min)).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// The decoder's interpolation, written as the engine writes it.
fn lerp(min: f32, max: f32, t: f32) -> f32 {
    min * (1.0 - t) + max * t
}

/// Three fractions as the 11-10-11 word (x highest).
fn pack_111011(t: [f32; 3]) -> u32 {
    (unorm(t[0], 11) << 21) | (unorm(t[1], 10) << 11) | unorm(t[2], 11)
}

fn unpack_111011(w: u32) -> [f32; 3] {
    [
        from_unorm(w >> 21, 11),
        from_unorm(w >> 11, 10),
        from_unorm(w, 11),
    ]
}

/// A quaternion `w x y z` (ramsplat's order, = rot_0..rot_3), non-zero, as the 2-10-10-10 word.
fn pack_rotation(q: [f32; 4]) -> u32 {
    let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
    let mut a = q.map(|v| v / n);
    let mut largest = 0;
    for i in 1..4 {
        if a[i].abs() > a[largest].abs() {
            largest = i;
        }
    }
    if a[largest] < 0.0 {
        a = a.map(|v| -v);
    }
    let mut word = largest as u32;
    for (i, &v) in a.iter().enumerate() {
        if i != largest {
            word = (word << 10) | unorm(v * std::f32::consts::FRAC_1_SQRT_2 + 0.5, 10);
        }
    }
    word
}

/// The 2-10-10-10 word as a unit quaternion `w x y z`.
fn unpack_rotation(w: u32) -> [f32; 4] {
    let c = |shift: u32| (from_unorm(w >> shift, 10) - 0.5) * std::f32::consts::SQRT_2;
    let small = [c(20), c(10), c(0)];
    let largest = (w >> 30) as usize;
    let m = (1.0 - small.iter().map(|v| v * v).sum::<f32>())
        .max(0.0)
        .sqrt();
    let mut q = [0.0f32; 4];
    let mut k = 0;
    for (i, v) in q.iter_mut().enumerate() {
        if i == largest {
            *v = m;
        } else {
            *v = small[k];
            k += 1;
        }
    }
    q
}

/// An SH coefficient as the byte the engine decodes closest to it.
fn quantize_sh(v: f32) -> u8 {
    ((v + SH_RANGE) * (255.0 / (2.0 * SH_RANGE)))
        .round()
        .clamp(0.0, 255.0) as u8
}

/// The engine's decoding of an SH byte: `q · 8/255 − 4`.
fn dequantize_sh(q: u8) -> f32 {
    q as f32 * (2.0 * SH_RANGE / 255.0) - SH_RANGE
}

/// Why a compressed PLY can hold a lower SH degree than its model ([`stored_sh_degree`]), as
/// the programs that write one say it.
pub const BANDS_LEFT_OUT: &str =
    "compressed PLY leaves out top SH bands whose coefficients are all within 4/255 of 0";

/// The SH degree the writer stores for `g`: its own, less every top band whose coefficients
/// all lie within half a quantisation step (4/255) of 0. The engine cannot decode 0 (its
/// nearest values are ±4/255), so storing such a band adds an error of about 4/255 to each of
/// its coefficients, while leaving it out loses at most as much, and usually far less (a band
/// still at the 0 it started from, or barely trained).
pub fn stored_sh_degree(g: &Gaussians) -> u32 {
    let coeffs = sh_coeffs(g.sh_degree);
    let half_step = SH_RANGE / 255.0;
    let mut degree = g.sh_degree;
    while degree > 0 {
        let band = sh_coeffs(degree - 1)..sh_coeffs(degree);
        let negligible = (0..g.len()).all(|i| {
            g.sh[i * coeffs + band.start..i * coeffs + band.end]
                .iter()
                .flatten()
                .all(|v| v.abs() <= half_step)
        });
        if !negligible {
            break;
        }
        degree -= 1;
    }
    degree
}

/// Spreads the low 10 bits of `v` to every third bit.
fn spread3(v: u32) -> u32 {
    let mut x = v & 0x3ff;
    x = (x | (x << 16)) & 0x0300_00ff;
    x = (x | (x << 8)) & 0x0300_f00f;
    x = (x | (x << 4)) & 0x030c_30c3;
    x = (x | (x << 2)) & 0x0924_9249;
    x
}

/// The order the writer stores Gaussians in: by the Morton code of their position on a 1024³
/// grid over the model's bounding box (x in the lowest bit), ties in model order.
pub fn morton_order(g: &Gaussians) -> Vec<u32> {
    let mut lo = [f32::INFINITY; 3];
    let mut hi = [f32::NEG_INFINITY; 3];
    for m in &g.means {
        for a in 0..3 {
            lo[a] = lo[a].min(m[a]);
            hi[a] = hi[a].max(m[a]);
        }
    }
    let cell = |v: f32, a: usize| -> u32 {
        let span = hi[a] as f64 - lo[a] as f64;
        if span > 0.0 {
            ((1024.0 * (v as f64 - lo[a] as f64) / span).floor() as u32).min(1023)
        } else {
            0
        }
    };
    let codes: Vec<u32> = g
        .means
        .iter()
        .map(|m| {
            spread3(cell(m[0], 0)) | (spread3(cell(m[1], 1)) << 1) | (spread3(cell(m[2], 2)) << 2)
        })
        .collect();
    let mut order: Vec<u32> = (0..g.len() as u32).collect();
    order.sort_by_key(|&i| codes[i as usize]);
    order
}

/// One chunk's bounds, in [`CHUNK_PROPERTIES`] order.
type ChunkRow = [f32; 18];

/// Gaussian `i`'s DC colour, `0.5 + C0 · f_dc`.
fn colour(g: &Gaussians, i: usize) -> [f32; 3] {
    g.sh[i * sh_coeffs(g.sh_degree)].map(sh_dc_to_rgb)
}

/// A per-Gaussian triple the chunk table bounds: its name, where its bounds start in a
/// [`ChunkRow`], and its value for a Gaussian.
type Attribute<'a> = (&'static str, usize, &'a dyn Fn(usize) -> [f32; 3]);

/// Bounds of the chunk of Gaussians `members` (indices into `g`), or the attribute and axis
/// whose range overflows f32 with its min and max.
fn chunk_row(g: &Gaussians, members: &[u32]) -> Result<ChunkRow, (&'static str, usize, f32, f32)> {
    let mut row = [0.0f32; 18];
    let attributes: [Attribute<'_>; 3] = [
        ("position", 0, &|i| g.means[i]),
        ("log-scale", 6, &|i| g.log_scales[i]),
        ("DC colour", 12, &|i| colour(g, i)),
    ];
    for (name, at, value) in attributes {
        let mut lo = [f32::INFINITY; 3];
        let mut hi = [f32::NEG_INFINITY; 3];
        for &i in members {
            let v = value(i as usize);
            for a in 0..3 {
                lo[a] = lo[a].min(v[a]);
                hi[a] = hi[a].max(v[a]);
            }
        }
        for a in 0..3 {
            if !(hi[a] - lo[a]).is_finite() {
                return Err((name, a, lo[a], hi[a]));
            }
        }
        row[at..at + 3].copy_from_slice(&lo);
        row[at + 3..at + 6].copy_from_slice(&hi);
    }
    Ok(row)
}

/// The four packed words of Gaussian `i` in a chunk with bounds `row`.
fn pack_vertex(g: &Gaussians, i: usize, row: &ChunkRow) -> [u32; 4] {
    let fractions =
        |v: [f32; 3], at: usize| [0, 1, 2].map(|a| fraction(v[a], row[at + a], row[at + 3 + a]));
    let c = fractions(colour(g, i), 12);
    let alpha = unorm(sigmoid(g.logit_opacities[i]), 8);
    [
        pack_111011(fractions(g.means[i], 0)),
        pack_rotation(g.rotations[i]),
        pack_111011(fractions(g.log_scales[i], 6)),
        (unorm(c[0], 8) << 24) | (unorm(c[1], 8) << 16) | (unorm(c[2], 8) << 8) | alpha,
    ]
}

/// What the writer needs besides the model: its order and the chunk table.
struct Plan {
    order: Vec<u32>,
    chunks: Vec<ChunkRow>,
    /// [`stored_sh_degree`].
    sh_degree: u32,
}

/// Validates `g` for this format and plans its file.
fn plan(g: &Gaussians, path: &Path) -> Result<Plan, CompressedPlyError> {
    let invalid = |msg: String| CompressedPlyError::InvalidModel {
        path: path.to_owned(),
        msg,
    };
    super::validate_model(g).map_err(invalid)?;
    if let Some(i) = g.rotations.iter().position(|q| q.iter().all(|&v| v == 0.0)) {
        return Err(invalid(format!(
            "Gaussian {i}: the rotation is all zeros, which no quaternion encoding can hold \
             (it is no rotation): the model is corrupt"
        )));
    }
    let order = morton_order(g);
    let mut chunks = Vec::with_capacity(order.len().div_ceil(CHUNK_SIZE));
    for (chunk, members) in order.chunks(CHUNK_SIZE).enumerate() {
        let row = chunk_row(g, members).map_err(|(attribute, axis, min, max)| {
            CompressedPlyError::RangeOverflow {
                path: path.to_owned(),
                chunk,
                first: chunk * CHUNK_SIZE,
                attribute,
                axis,
                min,
                max,
            }
        })?;
        chunks.push(row);
    }
    Ok(Plan {
        order,
        chunks,
        sh_degree: stored_sh_degree(g),
    })
}

/// Writes the file of `g` planned as `plan`.
fn write_file(w: &mut impl Write, g: &Gaussians, plan: &Plan, info: ModelInfo) -> io::Result<()> {
    let n = g.len();
    let coeffs = sh_coeffs(g.sh_degree);
    let kept = sh_coeffs(plan.sh_degree);
    let mut header = format!(
        "ply\nformat binary_little_endian 1.0\ncomment ramsplat {} (PlayCanvas compressed PLY)\n",
        env!("CARGO_PKG_VERSION")
    );
    header.push_str(&super::ply::info_comments(&info));
    header.push_str(&format!("element chunk {}\n", plan.chunks.len()));
    for p in CHUNK_PROPERTIES {
        header.push_str(&format!("property float {p}\n"));
    }
    header.push_str(&format!("element vertex {n}\n"));
    for p in VERTEX_PROPERTIES {
        header.push_str(&format!("property uint {p}\n"));
    }
    if kept > 1 {
        header.push_str(&format!("element sh {n}\n"));
        for k in 0..3 * (kept - 1) {
            header.push_str(&format!("property uchar f_rest_{k}\n"));
        }
    }
    header.push_str("end_header\n");
    w.write_all(header.as_bytes())?;
    for row in &plan.chunks {
        for v in row {
            w.write_all(&v.to_le_bytes())?;
        }
    }
    for (members, row) in plan.order.chunks(CHUNK_SIZE).zip(&plan.chunks) {
        for &i in members {
            for word in pack_vertex(g, i as usize, row) {
                w.write_all(&word.to_le_bytes())?;
            }
        }
    }
    if kept > 1 {
        let mut bytes = Vec::with_capacity(3 * (kept - 1));
        for &i in &plan.order {
            let sh = &g.sh[i as usize * coeffs..i as usize * coeffs + kept];
            bytes.clear();
            for c in 0..3 {
                bytes.extend(sh[1..].iter().map(|coef| quantize_sh(coef[c])));
            }
            w.write_all(&bytes)?;
        }
    }
    Ok(())
}

/// Encodes `g` as a compressed PLY (in [`morton_order`]).
pub fn encode(g: &Gaussians) -> Result<Vec<u8>, CompressedPlyError> {
    encode_with_info(g, ModelInfo::default())
}

/// [`encode`], with the antialiased comment when `info` says so.
pub fn encode_with_info(g: &Gaussians, info: ModelInfo) -> Result<Vec<u8>, CompressedPlyError> {
    let path = Path::new("<memory>");
    let plan = plan(g, path)?;
    let mut out = Vec::new();
    write_file(&mut out, g, &plan, info).expect("writing to a Vec cannot fail");
    Ok(out)
}

/// Writes `g` to `path` as a compressed PLY, atomically (temporary file, then rename).
pub fn save(path: &Path, g: &Gaussians) -> Result<(), CompressedPlyError> {
    save_with_info(path, g, ModelInfo::default())
}

/// [`save`], with the antialiased comment when `info` says so.
pub fn save_with_info(
    path: &Path,
    g: &Gaussians,
    info: ModelInfo,
) -> Result<(), CompressedPlyError> {
    let plan = plan(g, path)?;
    crate::fsutil::write_atomic_with(path, &mut |w| write_file(w, g, &plan, info)).map_err(
        |source| CompressedPlyError::Io {
            path: path.to_owned(),
            source,
        },
    )
}

/// Reads a compressed PLY.
pub fn load(path: &Path) -> Result<Gaussians, CompressedPlyError> {
    load_with_info(path).map(|(g, _)| g)
}

/// [`load`], with what the header's comments say about rendering the model.
pub fn load_with_info(path: &Path) -> Result<(Gaussians, ModelInfo), CompressedPlyError> {
    read(PlyReader::open(path)?)
}

/// Decodes a compressed PLY's bytes (`path` only names it in errors).
pub fn decode(bytes: &[u8], path: &Path) -> Result<Gaussians, CompressedPlyError> {
    decode_with_info(bytes, path).map(|(g, _)| g)
}

/// [`decode`], with what the header's comments say about rendering the model.
pub fn decode_with_info(
    bytes: &[u8],
    path: &Path,
) -> Result<(Gaussians, ModelInfo), CompressedPlyError> {
    read(PlyReader::from_reader(bytes, path)?)
}

/// Whether `path` opens as a PLY whose header has a `chunk` element and a `vertex` element
/// with `packed_position`: a compressed PLY, whatever its name (false when unreadable).
pub fn is_compressed_ply(path: &Path) -> bool {
    PlyReader::open(path).is_ok_and(|r| {
        let h = r.header();
        h.element("chunk").is_some()
            && h.element("vertex")
                .is_some_and(|(_, e)| e.property("packed_position").is_some())
    })
}

/// What to do about a file that lacks part of the layout.
const INCOMPLETE: &str = ": the file is not a complete compressed PLY; re-export it (SuperSplat, \
                          splat-transform or gs-render --convert OUT.compressed.ply)";

/// The columns of `element` named `names`, each of type `ty`.
fn columns(
    path: &Path,
    element: &PlyElement,
    label: &'static str,
    names: &[&str],
    ty: ScalarType,
    hint: &'static str,
) -> Result<Vec<usize>, CompressedPlyError> {
    names
        .iter()
        .map(|&name| {
            let Some(p) = element.property(name) else {
                return Err(CompressedPlyError::MissingProperty {
                    path: path.to_owned(),
                    element: label,
                    property: name.to_owned(),
                    hint,
                });
            };
            match (p.kind, element.scalar_index(name)) {
                (PropertyKind::Scalar(t), Some((j, _))) if t == ty => Ok(j),
                (kind, _) => Err(CompressedPlyError::WrongType {
                    path: path.to_owned(),
                    element: label,
                    property: name.to_owned(),
                    found: match kind {
                        PropertyKind::Scalar(t) => t.name(),
                        PropertyKind::List { .. } => "list",
                    },
                    expected: ty.name(),
                }),
            }
        })
        .collect()
}

fn read<R: BufRead>(
    mut reader: PlyReader<R>,
) -> Result<(Gaussians, ModelInfo), CompressedPlyError> {
    let path = reader.path().to_owned();
    let header = reader.header().clone();
    if header.format != PlyFormat::BinaryLittleEndian {
        return Err(CompressedPlyError::NotBinaryLittleEndian {
            path,
            format: header.format.keyword(),
        });
    }
    let info = ModelInfo::with_mode(super::ply::says_antialiased(&header.comments))
        .with_folded_filter(super::ply::says_folded_filter(&header.comments));
    let names: Vec<String> = header.elements.iter().map(|e| e.name.clone()).collect();
    let find = |name: &'static str, hint: &'static str| {
        header
            .element(name)
            .ok_or_else(|| CompressedPlyError::MissingElement {
                path: path.clone(),
                element: name,
                found: names.clone(),
                hint,
            })
    };
    let plain_hint = if header
        .element("vertex")
        .is_some_and(|(_, e)| e.property("x").is_some())
    {
        ": this looks like a standard 3DGS PLY; name it .ply, not .compressed.ply"
    } else {
        INCOMPLETE
    };
    let (ci, chunk_el) = find("chunk", plain_hint)?;
    let (vi, vertex_el) = find("vertex", INCOMPLETE)?;
    let sh_el = header.element("sh");
    if ci > vi || sh_el.is_some_and(|(si, _)| si < vi) {
        return Err(CompressedPlyError::ElementOrder { path, found: names });
    }
    let n = vertex_el.count;
    let expected = n.div_ceil(CHUNK_SIZE as u64);
    if chunk_el.count != expected {
        return Err(CompressedPlyError::ChunkCount {
            path,
            chunks: chunk_el.count,
            vertices: n,
            expected,
        });
    }
    let has_colour = CHUNK_PROPERTIES[12..]
        .iter()
        .any(|&p| chunk_el.property(p).is_some());
    let chunk_names = if has_colour {
        &CHUNK_PROPERTIES[..]
    } else {
        &CHUNK_PROPERTIES[..12]
    };
    let chunk_cols = columns(
        &path,
        chunk_el,
        "chunk",
        chunk_names,
        ScalarType::F32,
        INCOMPLETE,
    )?;
    let vertex_cols = columns(
        &path,
        vertex_el,
        "vertex",
        &VERTEX_PROPERTIES,
        ScalarType::U32,
        plain_hint,
    )?;
    let (sh_degree, sh_cols) = match sh_el {
        None => (0, Vec::new()),
        Some((_, e)) => {
            let count = e
                .properties
                .iter()
                .filter(|p| p.name.starts_with("f_rest_"))
                .count();
            let degree = (1..=MAX_SH_DEGREE)
                .find(|&d| 3 * (sh_coeffs(d) - 1) == count)
                .ok_or(CompressedPlyError::ShCount {
                    path: path.clone(),
                    count,
                })?;
            if e.count != n {
                return Err(CompressedPlyError::ShRows {
                    path,
                    rows: e.count,
                    vertices: n,
                });
            }
            let names: Vec<String> = (0..count).map(|k| format!("f_rest_{k}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let cols = columns(&path, e, "sh", &names, ScalarType::U8, INCOMPLETE)?;
            (degree, cols)
        }
    };

    // Chunk table: rows are pushed as read (the count is checked against the vertices, and
    // the reader fails where the data runs out).
    let mut chunks: Vec<ChunkRow> = Vec::new();
    let mut row = vec![0.0f64; chunk_el.scalar_count()];
    reader.select("chunk")?;
    while reader.read_row(&mut row)? {
        let mut bounds = [0.0f32; 18];
        for (k, &j) in chunk_cols.iter().enumerate() {
            let v = row[j] as f32;
            if !v.is_finite() {
                return Err(CompressedPlyError::NonFiniteChunk {
                    path,
                    chunk: chunks.len() as u64,
                    property: CHUNK_PROPERTIES[k],
                    value: row[j],
                });
            }
            bounds[k] = v;
        }
        chunks.push(bounds);
    }

    let mut g = Gaussians::empty(sh_degree);
    let mut dc: Vec<[f32; 3]> = Vec::new();
    let mut row = vec![0.0f64; vertex_el.scalar_count()];
    reader.select("vertex")?;
    while reader.read_row(&mut row)? {
        let i = g.means.len();
        let b = &chunks[i / CHUNK_SIZE];
        let word = |k: usize| row[vertex_cols[k]] as u32;
        let interpolate =
            |t: [f32; 3], at: usize| [0, 1, 2].map(|a| lerp(b[at + a], b[at + 3 + a], t[a]));
        g.means.push(interpolate(unpack_111011(word(0)), 0));
        g.rotations.push(unpack_rotation(word(1)));
        g.log_scales.push(interpolate(unpack_111011(word(2)), 6));
        let c = word(3);
        let t = [
            from_unorm(c >> 24, 8),
            from_unorm(c >> 16, 8),
            from_unorm(c >> 8, 8),
        ];
        let rgb = if has_colour { interpolate(t, 12) } else { t };
        // Positions and log-scales interpolate finite bounds, so they are finite; the colour's
        // conversion to SH divides by 0.28 and overflows for bounds near f32's limit, which no
        // writer of a finite model produces.
        let sh_dc = rgb.map(rgb_to_sh_dc);
        if let Some(channel) = sh_dc.iter().position(|v| !v.is_finite()) {
            return Err(CompressedPlyError::ColourOverflow {
                path,
                vertex: i as u64,
                chunk: (i / CHUNK_SIZE) as u64,
                channel,
                value: rgb[channel],
            });
        }
        dc.push(sh_dc);
        g.logit_opacities.push(super::spz::alpha_logit(c as u8));
    }

    let coeffs = sh_coeffs(sh_degree);
    if sh_degree == 0 {
        g.sh = dc;
    } else {
        let mut row = vec![0.0f64; sh_el.expect("degree > 0 has sh").1.scalar_count()];
        reader.select("sh")?;
        let mut i = 0;
        while reader.read_row(&mut row)? {
            g.sh.push(dc[i]);
            for k in 1..coeffs {
                g.sh.push(
                    [0, 1, 2]
                        .map(|c| dequantize_sh(row[sh_cols[c * (coeffs - 1) + (k - 1)]] as u8)),
                );
            }
            i += 1;
        }
    }
    Ok((g, info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::spz::tests::model;
    use crate::export::ModelFormat;
    use crate::scene::sh::SH_C0;

    /// Half a quantisation step of a `bits`-bit fraction of `extent`, plus float rounding of
    /// bounds as large as `magnitude`.
    fn half_step(extent: f32, bits: u32, magnitude: f32) -> f32 {
        extent / (2.0 * ((1u32 << bits) - 1) as f32) + 4.0 * f32::EPSILON * magnitude + 1e-7
    }

    /// Per chunk of `order`: (min, max) of a per-Gaussian triple.
    fn extents(order: &[u32], value: impl Fn(usize) -> [f32; 3]) -> Vec<([f32; 3], [f32; 3])> {
        order
            .chunks(CHUNK_SIZE)
            .map(|members| {
                let mut lo = [f32::INFINITY; 3];
                let mut hi = [f32::NEG_INFINITY; 3];
                for &i in members {
                    let v = value(i as usize);
                    for a in 0..3 {
                        lo[a] = lo[a].min(v[a]);
                        hi[a] = hi[a].max(v[a]);
                    }
                }
                (lo, hi)
            })
            .collect()
    }

    /// Asserts `back` (file order) is `g` (model order) within the stated quantisation.
    fn assert_within_bounds(g: &Gaussians, back: &Gaussians) {
        assert_eq!(back.len(), g.len());
        // Top bands within half a step of 0 are left out (their coefficients read as 0).
        assert_eq!(back.sh_degree, stored_sh_degree(g));
        let order = morton_order(g);
        let coeffs = sh_coeffs(g.sh_degree);
        let kept = sh_coeffs(back.sh_degree);
        let pos = extents(&order, |i| g.means[i]);
        let scale = extents(&order, |i| g.log_scales[i]);
        let col = extents(&order, |i| g.sh[i * coeffs].map(sh_dc_to_rgb));
        let bits = [11, 10, 11];
        let rot_step = std::f32::consts::SQRT_2 / 1023.0;
        for (j, &i) in order.iter().enumerate() {
            let i = i as usize;
            let c = j / CHUNK_SIZE;
            for a in 0..3 {
                let check = |what: &str, got: f32, want: f32, (lo, hi): ([f32; 3], [f32; 3]), b| {
                    let tol = half_step(hi[a] - lo[a], b, lo[a].abs().max(hi[a].abs()));
                    assert!(
                        (got - want).abs() <= tol,
                        "Gaussian {i} {what} axis {a}: {got} vs {want} (tolerance {tol})"
                    );
                };
                check("position", back.means[j][a], g.means[i][a], pos[c], bits[a]);
                check(
                    "log-scale",
                    back.log_scales[j][a],
                    g.log_scales[i][a],
                    scale[c],
                    bits[a],
                );
                let (lo, hi) = col[c];
                let tol =
                    half_step(hi[a] - lo[a], 8, lo[a].abs().max(hi[a].abs())) / SH_C0 as f32 + 1e-6;
                let d = (back.sh[j * kept][a] - g.sh[i * coeffs][a]).abs();
                assert!(
                    d <= tol,
                    "Gaussian {i} DC {a}: off by {d} (tolerance {tol})"
                );
                for k in 1..coeffs {
                    let want = g.sh[i * coeffs + k][a];
                    let got = if k < kept {
                        back.sh[j * kept + k][a]
                    } else {
                        0.0
                    };
                    let d = (got - want).abs();
                    let tol = if want.abs() <= SH_RANGE {
                        SH_RANGE / 255.0 + 1e-6
                    } else {
                        want.abs() - SH_RANGE + 1e-6
                    };
                    assert!(d <= tol, "Gaussian {i} SH {k} channel {a}: off by {d}");
                }
            }
            let d = (sigmoid(back.logit_opacities[j]) - sigmoid(g.logit_opacities[i])).abs();
            assert!(d <= 0.5 / 255.0 + 1e-6, "Gaussian {i} opacity off by {d}");
            // Rotation: the original, normalised and with its largest component made positive.
            let q = g.rotations[i];
            let n = q.iter().map(|v| v * v).sum::<f32>().sqrt();
            let mut q = q.map(|v| v / n);
            let largest = (0..4)
                .reduce(|m, k| if q[k].abs() > q[m].abs() { k } else { m })
                .unwrap();
            if q[largest] < 0.0 {
                q = q.map(|v| -v);
            }
            for (k, want) in q.iter().enumerate() {
                let tol = if k == largest {
                    1.5 * rot_step + 1e-5
                } else {
                    0.5 * rot_step + 1e-6
                };
                let d = (back.rotations[j][k] - want).abs();
                assert!(d <= tol, "Gaussian {i} rotation component {k} off by {d}");
            }
        }
    }

    #[test]
    fn random_models_round_trip_within_the_stated_quantisation() {
        for degree in 0..=3 {
            for n in [1, 255, 256, 257, 1000] {
                let mut g = model(n, degree, 100 + degree as u64 * 7 + n as u64);
                if degree > 0 && n > 3 {
                    // Beyond ±4 the SH byte clamps.
                    g.sh[sh_coeffs(degree) + 1] = [5.0, -6.0, 3.9];
                }
                let bytes = encode(&g).unwrap();
                let back = decode(&bytes, Path::new("m.compressed.ply")).unwrap();
                assert_eq!(back.len(), n, "degree {degree}, {n} Gaussians");
                assert_within_bounds(&g, &back);
            }
        }
    }

    /// The bounds assumed above are the format's, not slack: a rotation step, a position
    /// step and an SH step are each reached (to within 10%) somewhere in a large model.
    #[test]
    fn the_bounds_are_tight() {
        let g = model(4000, 1, 5);
        let back = decode(&encode(&g).unwrap(), Path::new("m")).unwrap();
        let order = morton_order(&g);
        let mut worst_sh: f32 = 0.0;
        let mut worst_pos_fraction: f32 = 0.0;
        let pos = extents(&order, |i| g.means[i]);
        for (j, &i) in order.iter().enumerate() {
            let i = i as usize;
            let (lo, hi) = pos[j / CHUNK_SIZE];
            let e = (hi[0] - lo[0]) / 2047.0;
            worst_pos_fraction =
                worst_pos_fraction.max((back.means[j][0] - g.means[i][0]).abs() / e);
            worst_sh = worst_sh.max((back.sh[j * 4 + 1][0] - g.sh[i * 4 + 1][0]).abs());
        }
        assert!(
            worst_pos_fraction > 0.45 && worst_pos_fraction <= 0.5 + 5e-3,
            "{worst_pos_fraction}"
        );
        assert!(worst_sh > 0.9 * 4.0 / 255.0, "{worst_sh}");
    }

    /// Three Gaussians whose packed words are worked out by hand: a transposed or misplaced
    /// bit field, a missing √2, a wrong sign convention or SH order changes a byte.
    #[test]
    fn header_and_words_are_byte_exact() {
        let dc = |rgb: [f32; 3]| rgb.map(rgb_to_sh_dc);
        let g = Gaussians {
            sh_degree: 1,
            means: vec![[0.0, 0.0, 0.0], [2.0, 1.0, -4.0], [0.5, 0.25, -1.0]],
            log_scales: vec![[-1.0, -2.0, -3.0], [1.0, 0.0, -1.0], [0.5, -1.0, -2.5]],
            rotations: vec![
                [0.7, 0.1, -0.5, 0.5],
                [0.1, -0.7, 0.5, 0.5],
                [2.0, 0.0, 0.0, 0.0],
            ],
            logit_opacities: vec![-1.098_612_3, 10.0, 0.0],
            sh: vec![
                [0.0; 3],
                [1.0, 0.0, 2.0],
                [-0.5, 0.1, -4.0],
                [0.25, -0.3, 5.0],
                dc([1.0; 3]),
                [0.0; 3],
                [0.0; 3],
                [0.0; 3],
                dc([0.625, 0.875, 0.5625]),
                [0.0; 3],
                [0.0; 3],
                [0.0; 3],
            ],
        };
        // Bounding box (0,0,−4)–(2,1,0) on a 1024³ grid: G0 (0,0,1023), G1 (1023,1023,0),
        // G2 (256,256,768). Interleaved (x lowest), G1's top bit is y's 9th (28), G0's and
        // G2's z's 9th (29); below that G2 has x's and y's 8th: order G1, G0, G2.
        assert_eq!(morton_order(&g), vec![1, 0, 2]);
        let bytes = encode_with_info(&g, ModelInfo::with_mode(true)).unwrap();
        let header = format!(
            "ply\nformat binary_little_endian 1.0\n\
             comment ramsplat {} (PlayCanvas compressed PLY)\n\
             comment {}\n\
             element chunk 1\n\
             property float min_x\nproperty float min_y\nproperty float min_z\n\
             property float max_x\nproperty float max_y\nproperty float max_z\n\
             property float min_scale_x\nproperty float min_scale_y\nproperty float min_scale_z\n\
             property float max_scale_x\nproperty float max_scale_y\nproperty float max_scale_z\n\
             property float min_r\nproperty float min_g\nproperty float min_b\n\
             property float max_r\nproperty float max_g\nproperty float max_b\n\
             element vertex 3\n\
             property uint packed_position\nproperty uint packed_rotation\n\
             property uint packed_scale\nproperty uint packed_color\n\
             element sh 3\n\
             property uchar f_rest_0\nproperty uchar f_rest_1\nproperty uchar f_rest_2\n\
             property uchar f_rest_3\nproperty uchar f_rest_4\nproperty uchar f_rest_5\n\
             property uchar f_rest_6\nproperty uchar f_rest_7\nproperty uchar f_rest_8\n\
             end_header\n",
            env!("CARGO_PKG_VERSION"),
            crate::export::ply::ANTIALIASED_COMMENT
        );
        assert_eq!(String::from_utf8_lossy(&bytes[..header.len()]), header);
        let data = &bytes[header.len()..];
        assert_eq!(data.len(), 18 * 4 + 3 * 16 + 3 * 9);
        let f = |k: usize| f32::from_le_bytes(data[4 * k..4 * k + 4].try_into().unwrap());
        let white = sh_dc_to_rgb(rgb_to_sh_dc(1.0));
        let chunk: Vec<f32> = (0..18).map(f).collect();
        assert_eq!(
            chunk,
            [
                0.0, 0.0, -4.0, 2.0, 1.0, 0.0, // position bounds
                -1.0, -2.0, -3.0, 1.0, 0.0, -1.0, // log-scale bounds
                0.5, 0.5, 0.5, white, white, white, // colour bounds (G0 is DC 0 = 0.5)
            ]
        );
        let words: Vec<u32> = data[72..72 + 48]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let expected: [u32; 12] = [
            // G1: position fractions (1, 1, 0): 2047<<21 | 1023<<11 | 0.
            0xFFFF_F800,
            // (0.1, −0.7, 0.5, 0.5): largest |.| is rot_1, negative, so the quaternion is
            // negated; rot_0 −0.1 → round((−0.1/√2 + 0.5)·1023) = 439, rot_2, rot_3 −0.5 →
            // 150: 1<<30 | 439<<20 | 150<<10 | 150.
            0x5B72_5896,
            // Scale fractions (1, 1, 1).
            0xFFFF_FFFF,
            // Colour fractions (1, 1, 1), opacity sigmoid(10) → 255.
            0xFFFF_FFFF,
            // G0: position fractions (0, 0, 1).
            0x0000_07FF,
            // (0.7, 0.1, −0.5, 0.5): largest rot_0, positive; 0.1 → 584, −0.5 → 150,
            // 0.5 → 873: 0<<30 | 584<<20 | 150<<10 | 873.
            0x2482_5B69,
            // Scale fractions (0, 0, 0).
            0x0000_0000,
            // Colour (0, 0, 0), opacity 0.25 → round(63.75) = 64.
            0x0000_0040,
            // G2: position fractions (0.25, 0.25, 0.75): 512<<21 | 256<<11 | 1535.
            0x4008_05FF,
            // Identity (w = 2 normalises to 1): 0<<30 | 512<<20 | 512<<10 | 512.
            0x2008_0200,
            // Scale fractions (0.75, 0.5, 0.25): 1535<<21 | 512<<11 | 512.
            (1535 << 21) | (512 << 11) | 512,
            // Colour fractions (0.25, 0.75, 0.125) → 64, 191, 32; opacity 0.5 → 128.
            0x40BF_2080,
        ];
        for (k, (got, want)) in words.iter().zip(expected).enumerate() {
            assert_eq!(*got, want, "word {k}: {got:#010x}, expected {want:#010x}");
        }
        // SH rows in file order (G1, G0, G2), channel-major: round((v + 4)·255/8).
        let sh = &data[120..];
        assert_eq!(&sh[..9], &[128; 9]);
        assert_eq!(&sh[9..18], &[159, 112, 135, 128, 131, 118, 191, 0, 255]);
        assert_eq!(&sh[18..], &[128; 9]);
        let (back, info) = decode_with_info(&bytes, Path::new("m")).unwrap();
        assert!(info.antialiased);
        assert_within_bounds(&g, &back);
    }

    /// Older files (SuperSplat before the colour bounds) have 12 chunk properties: the packed
    /// colour is the colour itself.
    #[test]
    fn files_without_colour_bounds_are_read() {
        let mut file = b"ply\nformat binary_little_endian 1.0\nelement chunk 1\n".to_vec();
        for p in &CHUNK_PROPERTIES[..12] {
            file.extend_from_slice(format!("property float {p}\n").as_bytes());
        }
        file.extend_from_slice(b"element vertex 1\n");
        for p in VERTEX_PROPERTIES {
            file.extend_from_slice(format!("property uint {p}\n").as_bytes());
        }
        file.extend_from_slice(b"end_header\n");
        for v in [
            0.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, -2.0, -2.0, -2.0, 0.0, 0.0, 0.0,
        ] {
            file.extend_from_slice(&v.to_le_bytes());
        }
        // r 255, g 51, b 0, alpha 255.
        let rgba: u32 = (255 << 24) | (51 << 16) | 255;
        for w in [0xFFFF_FFFFu32, 0x2008_0200, 0, rgba] {
            file.extend_from_slice(&w.to_le_bytes());
        }
        let g = decode(&file, Path::new("old.compressed.ply")).unwrap();
        assert_eq!(g.sh_degree, 0);
        assert_eq!(g.means[0], [1.0, 1.0, 1.0]);
        assert_eq!(g.log_scales[0], [-2.0; 3]);
        let rgb = g.sh[0].map(sh_dc_to_rgb);
        assert!((rgb[0] - 1.0).abs() < 1e-6 && (rgb[1] - 0.2).abs() < 1e-6 && rgb[2].abs() < 1e-6);
        assert!(sigmoid(g.logit_opacities[0]) > 0.99);
        // 512 of 1023 is half a step above the middle: (512/1023 − 0.5)·√2 ≈ 6.9e-4.
        let small = (512.0 / 1023.0 - 0.5) * std::f32::consts::SQRT_2;
        let q = g.rotations[0];
        assert!(
            (q[0] - (1.0 - 3.0 * small * small).sqrt()).abs() < 1e-7,
            "{q:?}"
        );
        assert!(q[1..].iter().all(|&v| (v - small).abs() < 1e-7), "{q:?}");
    }

    #[test]
    fn degenerate_chunks_are_exact_or_refused() {
        // All Gaussians alike: every range is empty, so every value comes back exactly.
        let mut g = model(300, 2, 3);
        for i in 1..g.len() {
            g.means[i] = g.means[0];
            g.log_scales[i] = g.log_scales[0];
            let k = sh_coeffs(2);
            g.sh[i * k] = g.sh[0];
        }
        let back = decode(&encode(&g).unwrap(), Path::new("m")).unwrap();
        assert_eq!(back.means, g.means);
        assert_eq!(back.log_scales, g.log_scales);
        assert_within_bounds(&g, &back);
        // One Gaussian.
        let g1 = model(1, 3, 4);
        let back = decode(&encode(&g1).unwrap(), Path::new("m")).unwrap();
        assert_eq!(back.means, g1.means);
        assert_within_bounds(&g1, &back);
        // An empty model is an empty file (no chunk rows; no SH band holds anything).
        let g0 = Gaussians::empty(1);
        let back = decode(&encode(&g0).unwrap(), Path::new("m")).unwrap();
        assert_eq!(back, Gaussians::empty(0));

        let p = Path::new("bad.compressed.ply");
        let mut bad = model(10, 0, 5);
        bad.means[7][1] = f32::NAN;
        let e = save(p, &bad).unwrap_err();
        assert!(matches!(e, CompressedPlyError::InvalidModel { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("bad.compressed.ply") && msg.contains("Gaussian 7") && msg.contains("`y`"),
            "{msg}"
        );
        let mut bad = model(10, 0, 5);
        bad.log_scales[3][2] = f32::INFINITY;
        let msg = encode(&bad).unwrap_err().to_string();
        assert!(
            msg.contains("Gaussian 3") && msg.contains("scale_2"),
            "{msg}"
        );
        let mut bad = model(10, 0, 5);
        bad.rotations[4] = [0.0; 4];
        let msg = encode(&bad).unwrap_err().to_string();
        assert!(
            msg.contains("Gaussian 4") && msg.contains("all zeros"),
            "{msg}"
        );
        let mut bad = model(10, 0, 5);
        bad.means[2][0] = -3e38;
        bad.means[8][0] = 3e38;
        let e = encode(&bad).unwrap_err();
        assert!(
            matches!(
                e,
                CompressedPlyError::RangeOverflow {
                    chunk: 0,
                    attribute: "position",
                    axis: 0,
                    ..
                }
            ),
            "{e}"
        );
        assert!(!p.exists());
    }

    /// Top bands whose coefficients all lie within half a step of 0 are left out; one
    /// coefficient beyond keeps its band (and those below).
    #[test]
    fn negligible_top_bands_are_left_out() {
        let mut g = model(600, 3, 31);
        let k = sh_coeffs(3);
        let tiny = |i: usize, c: usize| 0.015 * (((i * 7 + c * 3) % 5) as f32 - 2.0) / 2.0;
        for i in 0..g.len() {
            for c in 4..k {
                g.sh[i * k + c] = [0, 1, 2].map(|a| tiny(i + c, a));
            }
        }
        assert_eq!(stored_sh_degree(&g), 1);
        let bytes = encode(&g).unwrap();
        let (header, _) = split(&bytes);
        assert!(
            header.contains("property uchar f_rest_8\nend_header"),
            "{header}"
        );
        let back = decode(&bytes, Path::new("m")).unwrap();
        assert_eq!(back.sh_degree, 1);
        assert_within_bounds(&g, &back);
        // Never-trained bands (all zeros) leave degree 0: no `sh` element.
        let mut z = g.clone();
        for i in 0..z.len() {
            for c in 1..k {
                z.sh[i * k + c] = [0.0; 3];
            }
        }
        assert_eq!(stored_sh_degree(&z), 0);
        assert!(!split(&encode(&z).unwrap()).0.contains("element sh"));
        // One coefficient past half a step (in band 3, Gaussian 599, blue) keeps degree 3.
        g.sh[599 * k + 15][2] = SH_RANGE / 255.0 + 1e-3;
        assert_eq!(stored_sh_degree(&g), 3);
        let back = decode(&encode(&g).unwrap(), Path::new("m")).unwrap();
        assert_eq!(back.sh_degree, 3);
        assert_within_bounds(&g, &back);
    }

    #[test]
    fn saving_writes_what_encode_returns_and_load_reads_it() {
        let dir = tempfile::tempdir().unwrap();
        let g = model(700, 3, 11);
        let path = dir.path().join("m.compressed.ply");
        save_with_info(&path, &g, ModelInfo::with_mode(true)).unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            encode_with_info(&g, ModelInfo::with_mode(true)).unwrap()
        );
        let (back, info) = load_with_info(&path).unwrap();
        assert!(info.antialiased && !info.folded_filter_3d);
        assert_within_bounds(&g, &back);
        // A model holding a folded 3D filter says so, in a comment of its own.
        let folded = dir.path().join("f.compressed.ply");
        save_with_info(
            &folded,
            &g,
            ModelInfo::with_mode(false).with_folded_filter(true),
        )
        .unwrap();
        let (_, folded_info) = load_with_info(&folded).unwrap();
        assert!(folded_info.folded_filter_3d && !folded_info.antialiased);
        std::fs::remove_file(&folded).unwrap();
        // Through the format-neutral entry points, chosen by the name.
        let (back2, info2) =
            crate::export::load_model(&path, &crate::export::ply::LoadOptions::default()).unwrap();
        assert_eq!((&back2, info2), (&back, info));
        let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no temporary file is left behind");
        // Renamed to a plain `.ply`, it is recognised by its header; a real PLY is not.
        let plain = dir.path().join("renamed.ply");
        std::fs::copy(&path, &plain).unwrap();
        assert!(is_compressed_ply(&plain));
        let (back3, _) =
            crate::export::load_model(&plain, &crate::export::ply::LoadOptions::default()).unwrap();
        assert_eq!(back3, back2);
        let real = dir.path().join("real.ply");
        crate::export::ply::save(
            &real,
            &g,
            crate::export::ply::PlyEncoding::BinaryLittleEndian,
        )
        .unwrap();
        assert!(!is_compressed_ply(&real));
    }

    #[test]
    fn the_format_is_chosen_by_name() {
        let f = |s: &str| ModelFormat::from_path(Path::new(s));
        assert_eq!(f("out/m.compressed.ply"), Some(ModelFormat::CompressedPly));
        assert_eq!(f("M.Compressed.PLY"), Some(ModelFormat::CompressedPly));
        assert_eq!(f("m.ply"), Some(ModelFormat::Ply));
        assert_eq!(f("compressed.ply"), Some(ModelFormat::Ply));
        assert_eq!(f("m.compressed"), None);
        assert_eq!(
            ModelFormat::from_name("compressed-ply"),
            Some(ModelFormat::CompressedPly)
        );
        assert_eq!(
            ModelFormat::from_name("compressed_ply"),
            Some(ModelFormat::CompressedPly)
        );
        assert_eq!(
            Path::new("it/point_cloud.ply").with_extension(ModelFormat::CompressedPly.extension()),
            Path::new("it/point_cloud.compressed.ply")
        );
    }

    /// Splits an encoded file into its header text and data.
    fn split(bytes: &[u8]) -> (String, Vec<u8>) {
        let end = bytes
            .windows(11)
            .position(|w| w == b"end_header\n")
            .unwrap()
            + 11;
        (
            String::from_utf8(bytes[..end].to_vec()).unwrap(),
            bytes[end..].to_vec(),
        )
    }

    fn refusal(header: &str, data: &[u8]) -> CompressedPlyError {
        let mut file = header.as_bytes().to_vec();
        file.extend_from_slice(data);
        decode(&file, Path::new("hostile.compressed.ply")).unwrap_err()
    }

    /// Asserts the message names the file and every one of `words`.
    fn names(e: &CompressedPlyError, words: &[&str]) {
        let msg = e.to_string();
        assert!(msg.contains("hostile.compressed.ply"), "{msg}");
        for w in words {
            assert!(msg.contains(w), "{msg:?} should name {w:?}");
        }
    }

    #[test]
    fn hostile_files_are_refused_by_name() {
        let g = model(600, 1, 21);
        let (header, data) = split(&encode(&g).unwrap());
        let chunk_len = 3 * 18 * 4;
        let vertex_len = 600 * 16;

        // Truncated in each element: the reader names the element and the row.
        for (cut, element, row) in [
            (chunk_len - 5, "`chunk`", "row 2"),
            (chunk_len + 16 * 300 + 3, "`vertex`", "row 300"),
            (chunk_len + vertex_len + 9 * 17 + 1, "`sh`", "row 17"),
        ] {
            let e = refusal(&header, &data[..cut]);
            assert!(matches!(e, CompressedPlyError::Ply(_)), "{e}");
            names(&e, &[element, row, "truncated"]);
        }

        let e = refusal(&header.replace("binary_little_endian", "ascii"), &data);
        assert!(
            matches!(e, CompressedPlyError::NotBinaryLittleEndian { .. }),
            "{e}"
        );
        names(&e, &["ascii", "binary_little_endian"]);
        let e = refusal(
            &header.replace("binary_little_endian", "binary_big_endian"),
            &data,
        );
        names(&e, &["binary_big_endian"]);

        let e = refusal(&header.replace("element chunk 3", "element chunk 2"), &data);
        assert!(
            matches!(
                e,
                CompressedPlyError::ChunkCount {
                    chunks: 2,
                    vertices: 600,
                    expected: 3,
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["2 `chunk` rows", "600 vertices", "(3)"]);

        let e = refusal(&header.replace("packed_scale", "packed_scales"), &data);
        assert!(
            matches!(
                e,
                CompressedPlyError::MissingProperty {
                    element: "vertex",
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["`vertex`", "`packed_scale`", "re-export it"]);
        let e = refusal(&header.replace("property float max_scale_y\n", ""), &data);
        names(&e, &["`chunk`", "`max_scale_y`"]);
        // A partial set of colour bounds is missing the rest.
        let e = refusal(&header.replace("property float max_g\n", ""), &data);
        names(&e, &["`chunk`", "`max_g`"]);
        let e = refusal(&header.replace("f_rest_4\n", "f_rest_9\n"), &data);
        names(&e, &["`sh`", "`f_rest_4`"]);

        let e = refusal(
            &header.replace("uint packed_color", "float packed_color"),
            &data,
        );
        assert!(matches!(e, CompressedPlyError::WrongType { .. }), "{e}");
        names(&e, &["`vertex`", "`packed_color`", "`float`", "`uint`"]);
        let e = refusal(&header.replace("float min_y", "double min_y"), &data);
        names(&e, &["`chunk`", "`min_y`", "`double`", "`float`"]);
        let e = refusal(&header.replace("uchar f_rest_8", "float f_rest_8"), &data);
        names(&e, &["`sh`", "`f_rest_8`", "`float`", "`uchar`"]);
        let e = refusal(
            &header.replace("uint packed_rotation", "list uchar uint packed_rotation"),
            &data,
        );
        names(&e, &["`packed_rotation`", "`list`"]);

        // Missing elements: no chunk (a plain 3DGS PLY named .compressed.ply says so).
        let plain = {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("m.ply");
            crate::export::ply::save(&p, &g, crate::export::ply::PlyEncoding::BinaryLittleEndian)
                .unwrap();
            std::fs::read(p).unwrap()
        };
        let (ph, pd) = split(&plain);
        let e = refusal(&ph, &pd);
        assert!(
            matches!(
                e,
                CompressedPlyError::MissingElement {
                    element: "chunk",
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["`chunk`", "standard 3DGS PLY"]);
        let e = refusal(
            &header.replace("element vertex 600", "element vertices 600"),
            &data,
        );
        names(&e, &["no `vertex` element", "vertices"]);

        // Elements out of order.
        let reordered = {
            let start = header.find("element vertex").unwrap();
            let end = header.find("element sh").unwrap();
            let vertex_block = &header[start..end];
            let h = header.replace(vertex_block, "");
            let at = h.find("element chunk").unwrap();
            format!("{}{}{}", &h[..at], vertex_block, &h[at..])
        };
        let e = refusal(&reordered, &data);
        assert!(matches!(e, CompressedPlyError::ElementOrder { .. }), "{e}");
        names(&e, &["\"vertex\", \"chunk\", \"sh\""]);

        // SH: a count that is no degree, rows that are not one per vertex.
        let e = refusal(
            &header.replace(
                "property uchar f_rest_8\n",
                "property uchar f_rest_8\nproperty uchar f_rest_9\n",
            ),
            &data,
        );
        assert!(
            matches!(e, CompressedPlyError::ShCount { count: 10, .. }),
            "{e}"
        );
        names(&e, &["10 `f_rest_*`", "9, 24 or 45"]);
        let e = refusal(&header.replace("element sh 600", "element sh 599"), &data);
        assert!(
            matches!(
                e,
                CompressedPlyError::ShRows {
                    rows: 599,
                    vertices: 600,
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["599 rows", "600 vertices"]);

        // A non-finite chunk bound is named by chunk and property.
        let mut bad = data.clone();
        bad[(18 + 1) * 4..(18 + 2) * 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let e = refusal(&header, &bad);
        assert!(
            matches!(
                e,
                CompressedPlyError::NonFiniteChunk {
                    chunk: 1,
                    property: "min_y",
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["chunk 1", "`min_y`", "NaN"]);

        // Finite colour bounds whose colour overflows as a DC coefficient (found by the
        // fuzz target): named by vertex, chunk and channel, not returned as infinity.
        let mut bad = data.clone();
        for property in [12, 15] {
            let at = (18 + property) * 4;
            bad[at..at + 4].copy_from_slice(&3e38f32.to_le_bytes());
        }
        let e = refusal(&header, &bad);
        assert!(
            matches!(
                e,
                CompressedPlyError::ColourOverflow {
                    vertex: 256,
                    chunk: 1,
                    channel: 0,
                    ..
                }
            ),
            "{e}"
        );
        names(&e, &["vertex 256", "chunk 1", "channel 0"]);
    }
}
