//! PlayCanvas's **SOG** ("spatially ordered Gaussians", version 2: written by splat-transform
//! and SuperSplat, read by the PlayCanvas engine and viewer and other web viewers), read and
//! written.
//!
//! Owns the layout below and the quantisation both ways. The facts come from PlayCanvas's
//! format specification (developer.playcanvas.com, "The SOG Format") and splat-transform's
//! reader and writer (`src/lib/readers/read-sog.ts`, `src/lib/writers/write-sog.ts`).
//!
//! # Layout
//! A `meta.json` and lossless WebP images, either as files in one folder (read from the path
//! of its `meta.json`) or as the members of one ZIP archive, a bundled `*.sog` (what ramsplat
//! writes). Every per-Gaussian image is `W × H` texels, `W = 4·⌈√n / 4⌉`,
//! `H = 4·⌈n / W / 4⌉` (at least 4 each here), Gaussian `i` at texel `i` in row-major order,
//! RGBA, 8 bits per channel:
//! - `means_l.webp`, `means_u.webp`: the low and high bytes of a 16-bit fraction per axis
//!   (R, G, B = x, y, z) of `meta.means`' range `[mins, maxs]` of `l(x) = sign(x)·ln(|x| + 1)`;
//!   decoded `x = sign(v)·(e^{|v|} − 1)`, `v = min + (max − min)·q / 65535`;
//! - `quats.webp`: the rotation (`rot_0..rot_3` = w x y z, ramsplat's order) normalised and
//!   negated if need be so that its largest |component| is positive; A = 252 + that
//!   component's index, R G B the other three in index order, each `c` stored
//!   `255·(c·√2 / 2 + ½)` and read `(byte/255·2 − 1)/√2`; the largest is
//!   `√(1 − a² − b² − c²)` (clamped at 0);
//! - `scales.webp`: R G B index `meta.scales.codebook`, the log scales;
//! - `sh0.webp`: R G B index `meta.sh0.codebook`, the DC coefficients; A the opacity
//!   `sigmoid(logit)·255`;
//! - with SH degree `d` ≥ 1, `meta.shN` (`bands` = `d`, `count` palette entries): the other
//!   `m = (d + 1)² − 1` coefficients per channel come from a palette. `shN_labels.webp`: the
//!   Gaussian's entry, R + 256·G. `shN_centroids.webp`, `64·m` texels wide, one row per 64
//!   entries: entry `e`'s coefficient `j` at column `(e mod 64)·m + j` of row `e / 64`, its
//!   R G B (the three channels) indexing `meta.shN.codebook`.
//!
//! `meta.json` also holds `version: 2`, `count` and, for a model trained antialiased,
//! `model: "antialiased"` ([`ModelInfo::antialiased`]). Positions, scales and rotations are
//! the PLY's axes and stored values (no axis flip). Files without `version` are SOG's first
//! version, which is refused by name (splat-transform converts it); `"2dgs"` models are
//! refused (ramsplat renders 3D Gaussians); another `model` value is read as ordinary
//! Gaussians, as splat-transform reads it.
//!
//! # What ramsplat writes
//! Gaussians in the Morton order of their positions ([`compressed_ply::morton_order`]), so
//! neighbouring texels are neighbours in space and the images compress. The codebooks are
//! 1D k-means of 256 entries over the pooled values ([`super::quantize::codebook_1d`]); the SH
//! palette has `min(65536, 2^⌊log₂ n⌋)` entries (splat-transform's size), a tree-structured
//! k-means ([`super::quantize::palette`]), its centroids then quantised with their own 256-entry
//! codebook. The output is a function of the model alone (same bytes every time).
//!
//! # Quantisation (what a round trip loses)
//! Positions: within `(max − min)/(2·65535)` per axis in `l` (the range of the model's `l`),
//! so within `(|x| + 1)` times that in `x` (plus float rounding). Rotations: each stored
//! component within `1/(255·√2)` ≈ 2.8e-3 of the normalised, sign-fixed quaternion. Log
//! scales, DC coefficients: the nearest codebook entry (exact when an attribute has at most
//! 256 distinct values). Opacity: within 0.5/255 after the sigmoid (logits are read back
//! clamped half a level inside (0, 1), as for SPZ and `.splat`). The other SH coefficients:
//! their palette entry's, quantised; with at least as many entries as Gaussians every
//! Gaussian keeps its own (then only the 256-entry codebook rounds). The tests below assert
//! these.
//!
//! # Invariants
//! - Saving refuses what the file could not hold (non-finite values, an all-zero rotation,
//!   more than 16,383² Gaussians, WebP's largest image), holds at most [`encode_bytes`]
//!   beside the model, and writes under a temporary name renamed into place
//!   ([`crate::fsutil::write_atomic_with`]).
//! - Reading checks everything against `count` before using it: the images' sizes (read from
//!   their headers before decoding; at most about four times what `count` needs) and lengths
//!   (a WebP file shorter than its RIFF header says is cut), every codebook index and palette
//!   label (an error names the Gaussian), every quaternion tag, the centroid image's width,
//!   every decoded position (finite); file names in `meta.json` must name files in its own
//!   folder. Images are decoded in turn, at most two alive at once (the two position images;
//!   the palette and its labels).
//! - splat-transform's files read as splat-transform decodes them, and ramsplat's files
//!   decode in splat-transform as here: bit for bit but for opacities of bytes 0 and 255
//!   (`tests/data/sog`).

use std::io::{self, Cursor};
use std::path::{Path, PathBuf};

use image::codecs::webp::WebPDecoder;
use image::{ColorType, ImageDecoder};
use serde::{Deserialize, Serialize};

use super::quantize::{codebook_1d, nearest_1d, palette};
use super::spz::alpha_logit;
use super::webp;
use super::zip::{write_stored, Archive, ZipError};
use super::{compressed_ply, ModelInfo};
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};
use crate::scene::maths::sigmoid;

/// The largest side of a WebP image, so of a SOG's images.
pub const MAX_SIDE: usize = 16383;
/// The most palette entries a 16-bit label can name.
pub const MAX_PALETTE: usize = 1 << 16;
/// Palette entries per row of `shN_centroids.webp`.
const ENTRIES_PER_ROW: usize = 64;
/// The seed of the SH palette's k-means (fixed: the output depends on the model alone).
const PALETTE_SEED: u64 = 0x0053_4f47;

/// Why a SOG could not be read or written. File-level variants name the file.
#[derive(Debug, thiserror::Error)]
pub enum SogError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: Box<SogError>,
    },
    #[error(transparent)]
    Zip(#[from] ZipError),
    #[error("meta.json: {0}")]
    Meta(String),
    #[error("{file}: {reason}")]
    Image { file: String, reason: String },
    #[error("Gaussian {index}: {reason}; the file is damaged")]
    Gaussian { index: usize, reason: String },
    #[error("cannot save: {0}")]
    InvalidModel(String),
    #[error(
        "cannot save {0} Gaussians as SOG: its images hold at most 16,383 × 16,383 (prune the \
         model, or save .spz or .ply)"
    )]
    TooLarge(usize),
}

/// `meta.json`, as written (field order as splat-transform's).
#[derive(Serialize)]
struct MetaOut<'a> {
    version: u32,
    asset: Asset,
    count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    means: Means,
    scales: Coded,
    quats: Files,
    sh0: Coded,
    #[serde(rename = "shN", skip_serializing_if = "Option::is_none")]
    sh_n: Option<ShN>,
}

#[derive(Serialize)]
struct Asset {
    generator: String,
}

#[derive(Serialize, Deserialize)]
struct Means {
    mins: Vec<f64>,
    maxs: Vec<f64>,
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Coded {
    codebook: Vec<f32>,
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Files {
    files: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct ShN {
    count: usize,
    bands: u32,
    codebook: Vec<f32>,
    files: Vec<String>,
}

/// `meta.json`, as read: unknown keys are ignored, `version` is checked by hand.
#[derive(Deserialize)]
struct MetaIn {
    version: Option<serde_json::Value>,
    count: u64,
    #[serde(default)]
    model: Option<String>,
    means: Means,
    scales: Coded,
    quats: Files,
    sh0: Coded,
    #[serde(rename = "shN", default)]
    sh_n: Option<ShN>,
}

/// The images' width and height for `n` Gaussians (at least 4 × 4).
pub fn texture_size(n: usize) -> Result<(usize, usize), SogError> {
    let width = ((n as f64).sqrt() / 4.0).ceil() as usize * 4;
    let width = width.max(4);
    let height = (n.div_ceil(width).div_ceil(4) * 4).max(4);
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(SogError::TooLarge(n));
    }
    Ok((width, height))
}

/// `sign(x)·ln(|x| + 1)`, the position transform, in f64 as splat-transform computes it
/// (not `ln_1p`: the 16-bit step dwarfs the difference, and the same arithmetic gives the
/// same values as the reference).
fn log_transform(x: f32) -> f64 {
    let x = x as f64;
    (x.abs() + 1.0).ln().copysign(x)
}

/// The inverse of [`log_transform`]: `sign(v)·(e^{|v|} − 1)`, as splat-transform's reader
/// computes it, so both readers give the same f32 positions.
fn exp_transform(v: f64) -> f64 {
    (v.abs().exp() - 1.0).copysign(v)
}

/// A quaternion's texel: the three smaller components and the tag.
fn pack_quat(q: [f32; 4]) -> [u8; 4] {
    let q = q.map(|c| c as f64);
    let norm = q.iter().map(|c| c * c).sum::<f64>().sqrt();
    let q = q.map(|c| c / norm);
    let mut largest = 0;
    for i in 1..4 {
        if q[i].abs() > q[largest].abs() {
            largest = i;
        }
    }
    let sign = if q[largest] < 0.0 { -1.0 } else { 1.0 };
    let mut texel = [0u8, 0, 0, 252 + largest as u8];
    for (slot, i) in (0..4).filter(|&i| i != largest).enumerate() {
        let c = q[i] * sign * std::f64::consts::SQRT_2;
        texel[slot] = (255.0 * (0.5 * c + 0.5)).round().clamp(0.0, 255.0) as u8;
    }
    texel
}

/// A quaternion from its texel (the tag already checked to be 252..=255).
fn unpack_quat(texel: [u8; 4]) -> [f32; 4] {
    let largest = (texel[3] - 252) as usize;
    let mut q = [0.0f64; 4];
    let mut sum = 0.0;
    for (slot, i) in (0..4).filter(|&i| i != largest).enumerate() {
        let c = (texel[slot] as f64 / 255.0 * 2.0 - 1.0) / std::f64::consts::SQRT_2;
        q[i] = c;
        sum += c * c;
    }
    q[largest] = (1.0 - sum).max(0.0).sqrt();
    q.map(|c| c as f32)
}

/// An RGBA image as lossless WebP.
fn webp(rgba: &[u8], width: usize, height: usize) -> io::Result<Vec<u8>> {
    super::webp::encode_rgba(rgba, width, height).map_err(io::Error::other)
}

/// Fills the texels of `rgba` from texel `used` on with the one before: readers ignore them,
/// and a value of their own (zero, say) would put a second symbol in a channel's code that
/// otherwise has one (alpha, 255 everywhere else) and cost every texel a bit.
fn repeat_last_texel(rgba: &mut [u8], used: usize) {
    if used == 0 || used * 4 >= rgba.len() {
        return;
    }
    let (head, tail) = rgba.split_at_mut(used * 4);
    let last = &head[head.len() - 4..];
    for t in tail.chunks_exact_mut(4) {
        t.copy_from_slice(last);
    }
}

/// The SOG of `g` as a bundled `.sog` (ZIP) archive.
pub fn encode(g: &Gaussians) -> Result<Vec<u8>, SogError> {
    encode_with_info(g, ModelInfo::default())
}

/// [`encode`], marking the model antialiased where `info` says so.
pub fn encode_with_info(g: &Gaussians, info: ModelInfo) -> Result<Vec<u8>, SogError> {
    let members = members(g, info)?;
    let mut out = Vec::new();
    write_members(&mut out, &members).map_err(|e| SogError::InvalidModel(e.to_string()))?;
    Ok(out)
}

/// What [`encode`] holds at its peak for a model of `n` Gaussians of SH degree `sh_degree`,
/// beside the model itself, at most: [`encode_bytes_per_gaussian`] × `n` +
/// [`encode_fixed_bytes`], what a run that saves SOG plans for (the tests measure the peak
/// with a counting allocator and hold it to this bound).
pub fn encode_bytes(n: usize, sh_degree: u32) -> u64 {
    encode_bytes_per_gaussian(sh_degree) * n as u64 + encode_fixed_bytes(sh_degree)
}

/// [`encode_bytes`]' share per Gaussian: the Morton order and its codes (8 B), one raw image
/// at a time (4 B per texel, within 1.6 texels per Gaussian but for the smallest models, ~1.0
/// for large ones) and the finished WebP images (at most ~4 B per texel each, 7 of them), the
/// pooled values of a codebook (12 B) and, with SH, the palette's vectors (12 B per
/// coefficient beyond DC) with its labels, tree scratch and centroids; all with half again for
/// what the measurement does not reach. Then the WebP encoder's working memory
/// ([`webp::ENCODE_BYTES_PER_PIXEL`]) over the largest image: a per-Gaussian image (1.6
/// texels per Gaussian) or the palette's, one texel per entry and coefficient beyond DC,
/// whose entries are at most one per Gaussian and at most [`MAX_PALETTE`]: `min(m·n, m·P)` ≤
/// `m·n/4 + ¾·m·P`, the first term here, the second in [`encode_fixed_bytes`].
pub fn encode_bytes_per_gaussian(sh_degree: u32) -> u64 {
    let rest = sh_coeffs(sh_degree) as u64 - 1;
    let own = (8 + 4 * 8 + 12 + if rest > 0 { 24 * rest + 12 } else { 0 }) * 3 / 2;
    own + webp::ENCODE_BYTES_PER_PIXEL * 8 / 5 + webp::ENCODE_BYTES_PER_PIXEL * rest / 4
}

/// [`encode_bytes`]' share that does not grow with the model: codebook bins and the dynamic
/// programme's split table (256 × 4,096 × 4 B) within 8 MiB, the WebP encoder's tables
/// ([`webp::ENCODE_FIXED_BYTES`]) and its working memory over ¾ of the largest palette image
/// (see [`encode_bytes_per_gaussian`]; none at SH degree 0).
pub fn encode_fixed_bytes(sh_degree: u32) -> u64 {
    let rest = sh_coeffs(sh_degree) as u64 - 1;
    (8 << 20)
        + webp::ENCODE_FIXED_BYTES
        + webp::ENCODE_BYTES_PER_PIXEL * rest * MAX_PALETTE as u64 * 3 / 4
}

/// The archive's members of `g`'s SOG: `meta.json` and the WebP images, each image encoded
/// as soon as it is built (its raw texels freed), so one raw image is alive at a time.
fn members(g: &Gaussians, info: ModelInfo) -> Result<Vec<(&'static str, Vec<u8>)>, SogError> {
    super::validate_model(g).map_err(SogError::InvalidModel)?;
    if let Some(i) = g.rotations.iter().position(|q| q.iter().all(|&c| c == 0.0)) {
        return Err(SogError::InvalidModel(format!(
            "Gaussian {i} has an all-zero rotation, which no quaternion texel can hold"
        )));
    }
    let n = g.len();
    let (width, height) = texture_size(n)?;
    let texels = width * height;
    let order = compressed_ply::morton_order(g);
    let coeffs = sh_coeffs(g.sh_degree);
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::with_capacity(8);
    let encode_failed = |e: io::Error| SogError::InvalidModel(format!("WebP encoding failed: {e}"));
    // An image of the per-Gaussian texels `texel(i)` gives, Gaussian `order[t]` at texel `t`.
    let image = |texel: &dyn Fn(usize) -> [u8; 4]| -> Result<Vec<u8>, SogError> {
        let mut rgba = vec![0u8; texels * 4];
        for (t, &i) in order.iter().enumerate() {
            rgba[t * 4..t * 4 + 4].copy_from_slice(&texel(i as usize));
        }
        repeat_last_texel(&mut rgba, n);
        webp(&rgba, width, height).map_err(encode_failed)
    };

    // Positions: per-axis bounds of the log transform, 16 bits in two images.
    let mut mins = [0.0f64; 3];
    let mut maxs = [0.0f64; 3];
    if n > 0 {
        mins = [f64::INFINITY; 3];
        maxs = [f64::NEG_INFINITY; 3];
        for m in &g.means {
            for a in 0..3 {
                let l = log_transform(m[a]);
                mins[a] = mins[a].min(l);
                maxs[a] = maxs[a].max(l);
            }
        }
    }
    let quantized = |i: usize| -> [u16; 3] {
        std::array::from_fn(|a| {
            let span = maxs[a] - mins[a];
            if span > 0.0 {
                (65535.0 * (log_transform(g.means[i][a]) - mins[a]) / span)
                    .round()
                    .clamp(0.0, 65535.0) as u16
            } else {
                0
            }
        })
    };
    out.push((
        "means_l.webp",
        image(&|i| {
            let q = quantized(i);
            [q[0] as u8, q[1] as u8, q[2] as u8, 255]
        })?,
    ));
    out.push((
        "means_u.webp",
        image(&|i| {
            let q = quantized(i);
            [(q[0] >> 8) as u8, (q[1] >> 8) as u8, (q[2] >> 8) as u8, 255]
        })?,
    ));
    out.push(("quats.webp", image(&|i| pack_quat(g.rotations[i]))?));

    // Log scales and DC colours: a 256-entry codebook each over the three axes pooled.
    let book_of = |f: &dyn Fn(usize) -> [f32; 3]| -> Vec<f32> {
        if n == 0 {
            return Vec::new();
        }
        let mut pooled: Vec<f32> = (0..n).flat_map(f).collect();
        codebook_1d(&mut pooled, 256)
    };
    let scale_book = book_of(&|i| g.log_scales[i]);
    out.push((
        "scales.webp",
        image(&|i| {
            let s = g.log_scales[i].map(|v| nearest_1d(&scale_book, v) as u8);
            [s[0], s[1], s[2], 255]
        })?,
    ));
    let dc_book = book_of(&|i| g.sh[i * coeffs]);
    out.push((
        "sh0.webp",
        image(&|i| {
            let c = g.sh[i * coeffs].map(|v| nearest_1d(&dc_book, v) as u8);
            let alpha = (sigmoid(g.logit_opacities[i]) * 255.0)
                .round()
                .clamp(0.0, 255.0) as u8;
            [c[0], c[1], c[2], alpha]
        })?,
    ));

    // The other SH coefficients: a palette of vectors, its values through one codebook.
    let mut sh_n = None;
    if g.sh_degree > 0 && n > 0 {
        let m = coeffs - 1;
        let dim = 3 * m;
        let points: Vec<f32> = (0..n)
            .flat_map(|i| {
                g.sh[i * coeffs + 1..(i + 1) * coeffs]
                    .iter()
                    .flatten()
                    .copied()
            })
            .collect();
        let size = MAX_PALETTE.min(1 << n.ilog2());
        let pal = palette(&points, dim, size, PALETTE_SEED);
        drop(points);
        let book = codebook_1d(&mut pal.centroids.clone(), 256);
        let entries = pal.len();
        let rows = entries.div_ceil(ENTRIES_PER_ROW);
        let row_width = ENTRIES_PER_ROW * m;
        let mut centroids = vec![0u8; rows * row_width * 4];
        for e in 0..entries {
            let c = pal.centroid(e);
            for j in 0..m {
                let at = ((e / ENTRIES_PER_ROW) * row_width + (e % ENTRIES_PER_ROW) * m + j) * 4;
                for ch in 0..3 {
                    centroids[at + ch] = nearest_1d(&book, c[j * 3 + ch]) as u8;
                }
                centroids[at + 3] = 255;
            }
        }
        repeat_last_texel(&mut centroids, entries * m);
        let centroids = webp(&centroids, row_width, rows).map_err(encode_failed)?;
        out.push(("shN_centroids.webp", centroids));
        out.push((
            "shN_labels.webp",
            image(&|i| {
                let label = pal.labels[i];
                [label as u8, (label >> 8) as u8, 0, 255]
            })?,
        ));
        sh_n = Some(ShN {
            count: entries,
            bands: g.sh_degree,
            codebook: book,
            files: vec!["shN_centroids.webp".into(), "shN_labels.webp".into()],
        });
    }

    let files = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let meta = MetaOut {
        version: 2,
        asset: Asset {
            generator: format!("ramsplat {}", env!("CARGO_PKG_VERSION")),
        },
        count: n,
        model: info.antialiased.then_some("antialiased"),
        means: Means {
            mins: mins.to_vec(),
            maxs: maxs.to_vec(),
            files: files(&["means_l.webp", "means_u.webp"]),
        },
        scales: Coded {
            codebook: scale_book,
            files: files(&["scales.webp"]),
        },
        quats: Files {
            files: files(&["quats.webp"]),
        },
        sh0: Coded {
            codebook: dc_book,
            files: files(&["sh0.webp"]),
        },
        sh_n,
    };
    let meta = serde_json::to_vec(&meta).expect("meta.json serialises (finite numbers)");
    out.insert(0, ("meta.json", meta));
    Ok(out)
}

/// Writes the members as a stored ZIP.
fn write_members(w: &mut impl io::Write, members: &[(&'static str, Vec<u8>)]) -> io::Result<()> {
    let parts: Vec<(&str, &[u8])> = members.iter().map(|(n, b)| (*n, b.as_slice())).collect();
    write_stored(w, &parts)
}

/// Writes `g` to `path` as a bundled SOG, atomically (temporary file, then rename).
pub fn save(path: &Path, g: &Gaussians) -> Result<(), SogError> {
    save_with_info(path, g, ModelInfo::default())
}

/// [`save`], marking the model antialiased where `info` says so. The images are encoded in
/// memory ([`encode_bytes`]) and the archive streamed to the file.
pub fn save_with_info(path: &Path, g: &Gaussians, info: ModelInfo) -> Result<(), SogError> {
    let members = members(g, info).map_err(|e| SogError::File {
        path: path.to_owned(),
        source: Box::new(e),
    })?;
    crate::fsutil::write_atomic_with(path, &mut |w| write_members(w, &members)).map_err(|source| {
        SogError::Io {
            path: path.to_owned(),
            source,
        }
    })
}

/// Whether `path` names an unbundled SOG's `meta.json` (any name ending so, as
/// splat-transform's, but for a streamed SOG's `lod-meta.json`).
pub fn is_sog_meta(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.to_ascii_lowercase())
        .is_some_and(|n| n.ends_with("meta.json") && !n.ends_with("lod-meta.json"))
}

/// Reads a bundled `.sog`, or an unbundled SOG from the path of its `meta.json`.
pub fn load(path: &Path) -> Result<Gaussians, SogError> {
    load_with_info(path).map(|(g, _)| g)
}

/// [`load`], with whether the model is marked antialiased.
pub fn load_with_info(path: &Path) -> Result<(Gaussians, ModelInfo), SogError> {
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| SogError::Io { path, source }
    };
    let in_file = |e: SogError| SogError::File {
        path: path.to_owned(),
        source: Box::new(e),
    };
    let bytes = crate::fsutil::read_file(path).map_err(io_err(path))?;
    if !is_sog_meta(path) {
        return decode_with_info(&bytes).map_err(in_file);
    }
    let dir = crate::fsutil::parent_dir(path);
    decode_parts(&bytes, &mut |name| {
        let file = dir.join(name);
        crate::fsutil::read_file(&file).map_err(io_err(&file))
    })
    .map_err(in_file)
}

/// Reads a bundled SOG from its bytes.
pub fn decode(bytes: &[u8]) -> Result<Gaussians, SogError> {
    decode_with_info(bytes).map(|(g, _)| g)
}

/// [`decode`], with whether the model is marked antialiased.
pub fn decode_with_info(bytes: &[u8]) -> Result<(Gaussians, ModelInfo), SogError> {
    let zip = Archive::new(bytes)?;
    let meta = zip.read("meta.json")?;
    decode_parts(&meta, &mut |name| Ok(zip.read(name)?))
}

/// A decoded image: RGBA texels.
struct Texels {
    width: usize,
    rgba: Vec<u8>,
}

impl Texels {
    fn texel(&self, i: usize) -> [u8; 4] {
        self.rgba[i * 4..i * 4 + 4].try_into().expect("4 bytes")
    }
}

/// Decodes WebP `bytes` of `file` whose size `check` accepts (given width and height; it
/// returns why not), as RGBA.
fn texels(
    bytes: &[u8],
    file: &str,
    check: &dyn Fn(usize, usize) -> Option<String>,
) -> Result<Texels, SogError> {
    let bad = |reason: String| SogError::Image {
        file: file.to_owned(),
        reason,
    };
    // The RIFF header gives the file's length; the decoder would take a file cut inside its
    // padding or after its image data for a whole one.
    if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        let declared = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as u64 + 8;
        if (bytes.len() as u64) < declared {
            return Err(bad(format!(
                "the WebP file is cut short ({} of the {declared} bytes its header gives)",
                bytes.len()
            )));
        }
    }
    let decoder = WebPDecoder::new(Cursor::new(bytes))
        .map_err(|e| bad(format!("not a WebP image the reader can decode ({e})")))?;
    let (w, h) = decoder.dimensions();
    let (width, height) = (w as usize, h as usize);
    if let Some(why) = check(width, height) {
        return Err(bad(format!("{width} × {height} texels: {why}")));
    }
    let color = decoder.color_type();
    let mut raw = vec![0u8; decoder.total_bytes() as usize];
    decoder
        .read_image(&mut raw)
        .map_err(|e| bad(format!("the WebP image is damaged ({e})")))?;
    let rgba = match color {
        ColorType::Rgba8 => raw,
        ColorType::Rgb8 => raw
            .chunks_exact(3)
            .flat_map(|c| [c[0], c[1], c[2], 255])
            .collect(),
        other => return Err(bad(format!("colour type {other:?}, expected 8-bit RGB(A)"))),
    };
    Ok(Texels { width, rgba })
}

/// `codebook[index]`, or an error naming the Gaussian.
fn lookup(book: &[f32], index: u8, gaussian: usize, what: &str) -> Result<f32, SogError> {
    book.get(index as usize)
        .copied()
        .ok_or_else(|| SogError::Gaussian {
            index: gaussian,
            reason: format!(
                "its {what} index {index} is beyond the {}-entry codebook",
                book.len()
            ),
        })
}

/// Reads a SOG from its `meta.json` text and a reader of the files it names.
fn decode_parts(
    meta: &[u8],
    read: &mut dyn FnMut(&str) -> Result<Vec<u8>, SogError>,
) -> Result<(Gaussians, ModelInfo), SogError> {
    let bad = |s: String| SogError::Meta(s);
    let meta: MetaIn =
        serde_json::from_slice(meta).map_err(|e| bad(format!("not valid SOG metadata ({e})")))?;
    match &meta.version {
        None => {
            return Err(bad(
                "no \"version\": SOG's first version, which ramsplat does not read; convert it \
                 to version 2 with splat-transform (`splat-transform in/meta.json out.sog`)"
                    .into(),
            ))
        }
        Some(v) if v.as_u64() == Some(2) => {}
        Some(v) => return Err(bad(format!("version {v}; ramsplat reads version 2"))),
    }
    let mut info = ModelInfo::default();
    match meta.model.as_deref() {
        Some("antialiased") => info.antialiased = true,
        Some("2dgs") => {
            return Err(bad(
                "model \"2dgs\": 2D Gaussian surfels, which ramsplat does not render".into(),
            ))
        }
        _ => {}
    }
    let max_count = (MAX_SIDE * MAX_SIDE) as u64;
    if meta.count > max_count {
        return Err(bad(format!(
            "count {} is more than a SOG's images can hold ({max_count})",
            meta.count
        )));
    }
    let n = meta.count as usize;
    for (name, v) in [
        ("means.mins", &meta.means.mins),
        ("means.maxs", &meta.means.maxs),
    ] {
        if v.len() != 3 || v.iter().any(|x| !x.is_finite()) {
            return Err(bad(format!(
                "{name} must be three finite numbers, found {v:?}"
            )));
        }
    }
    let books = [
        ("scales", &meta.scales.codebook),
        ("sh0", &meta.sh0.codebook),
    ]
    .into_iter()
    .chain(meta.sh_n.iter().map(|s| ("shN", &s.codebook)));
    for (name, book) in books {
        if book.len() > 256 || book.iter().any(|x| !x.is_finite()) {
            return Err(bad(format!(
                "{name}.codebook must hold at most 256 finite numbers ({} given)",
                book.len()
            )));
        }
    }
    let file = |files: &[String], k: usize, what: &str| -> Result<String, SogError> {
        let name = files.get(k).ok_or_else(|| {
            bad(format!(
                "{what}.files lists {} file(s), needs {}",
                files.len(),
                k + 1
            ))
        })?;
        if name.is_empty() || name.contains(['/', '\\']) || name == "." || name == ".." {
            return Err(bad(format!(
                "{what}.files names {name:?}, not a file beside meta.json"
            )));
        }
        Ok(name.clone())
    };
    let degree = match &meta.sh_n {
        None => 0,
        Some(s) if (1..=MAX_SH_DEGREE).contains(&s.bands) => s.bands,
        Some(s) => {
            return Err(bad(format!(
                "shN.bands is {}; SOG holds 1 to 3 bands beyond DC",
                s.bands
            )))
        }
    };
    let coeffs = sh_coeffs(degree);

    // The per-Gaussian images: enough texels for `count`, and not absurdly more.
    let per_gaussian = |w: usize, h: usize| -> Option<String> {
        let t = w * h;
        if t < n {
            Some(format!("fewer than the {n} Gaussians of meta.json's count"))
        } else if t > 4 * n + 65536 {
            Some(format!(
                "far more than the {n} Gaussians of meta.json's count need"
            ))
        } else {
            None
        }
    };
    let mut load = |name: String,
                    check: &dyn Fn(usize, usize) -> Option<String>|
     -> Result<Texels, SogError> {
        let bytes = read(&name)?;
        texels(&bytes, &name, check)
    };

    let mut g = Gaussians::zeros(n, degree);
    {
        let lo = load(file(&meta.means.files, 0, "means")?, &per_gaussian)?;
        let hi = load(file(&meta.means.files, 1, "means")?, &per_gaussian)?;
        let (mins, maxs) = (&meta.means.mins, &meta.means.maxs);
        for i in 0..n {
            let (l, u) = (lo.texel(i), hi.texel(i));
            for a in 0..3 {
                let q = l[a] as f64 + 256.0 * u[a] as f64;
                let v = mins[a] + (maxs[a] - mins[a]) * (q / 65535.0);
                let x = exp_transform(v) as f32;
                if !x.is_finite() {
                    return Err(SogError::Gaussian {
                        index: i,
                        reason: format!(
                            "its position on axis {a} decodes to {x} (means.mins and maxs \
                             reach beyond what a float holds)"
                        ),
                    });
                }
                g.means[i][a] = x;
            }
        }
    }
    {
        let quats = load(file(&meta.quats.files, 0, "quats")?, &per_gaussian)?;
        for i in 0..n {
            let t = quats.texel(i);
            if !(252..=255).contains(&t[3]) {
                return Err(SogError::Gaussian {
                    index: i,
                    reason: format!(
                        "its quaternion tag (alpha of quats.webp) is {}, not 252 to 255",
                        t[3]
                    ),
                });
            }
            g.rotations[i] = unpack_quat(t);
        }
    }
    {
        let scales = load(file(&meta.scales.files, 0, "scales")?, &per_gaussian)?;
        let book = &meta.scales.codebook;
        for i in 0..n {
            let t = scales.texel(i);
            for (s, &index) in g.log_scales[i].iter_mut().zip(&t[..3]) {
                *s = lookup(book, index, i, "scale")?;
            }
        }
    }
    {
        let sh0 = load(file(&meta.sh0.files, 0, "sh0")?, &per_gaussian)?;
        let book = &meta.sh0.codebook;
        for i in 0..n {
            let t = sh0.texel(i);
            for (c, &index) in g.sh[i * coeffs].iter_mut().zip(&t[..3]) {
                *c = lookup(book, index, i, "colour")?;
            }
            g.logit_opacities[i] = alpha_logit(t[3]);
        }
    }
    if let Some(sh_n) = &meta.sh_n {
        let m = coeffs - 1;
        let entries = sh_n.count;
        if entries > MAX_PALETTE {
            return Err(bad(format!(
                "shN.count {entries} is more than a 16-bit label can name ({MAX_PALETTE})"
            )));
        }
        let rows = entries.div_ceil(ENTRIES_PER_ROW);
        let centroids = load(file(&sh_n.files, 0, "shN")?, &|w, h| {
            if w != ENTRIES_PER_ROW * m {
                Some(format!(
                    "expected {} texels wide ({ENTRIES_PER_ROW} entries of {m} coefficients)",
                    ENTRIES_PER_ROW * m
                ))
            } else if h < rows || h > MAX_PALETTE / ENTRIES_PER_ROW {
                Some(format!("expected {rows} rows for shN.count {entries}"))
            } else {
                None
            }
        })?;
        let labels = load(file(&sh_n.files, 1, "shN")?, &per_gaussian)?;
        for i in 0..n {
            let t = labels.texel(i);
            let label = t[0] as usize + 256 * t[1] as usize;
            if label >= entries {
                return Err(SogError::Gaussian {
                    index: i,
                    reason: format!("its SH palette label {label} is beyond shN.count {entries}"),
                });
            }
            let row = (label / ENTRIES_PER_ROW) * centroids.width + (label % ENTRIES_PER_ROW) * m;
            for j in 0..m {
                let c = centroids.texel(row + j);
                for (v, &index) in g.sh[i * coeffs + 1 + j].iter_mut().zip(&c[..3]) {
                    *v = lookup(&sh_n.codebook, index, i, "SH")?;
                }
            }
        }
    }
    Ok((g, info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::spz::tests::model;

    fn meta_of(bytes: &[u8]) -> serde_json::Value {
        let zip = Archive::new(bytes).unwrap();
        serde_json::from_slice(&zip.read("meta.json").unwrap()).unwrap()
    }

    fn book(meta: &serde_json::Value, key: &str) -> Vec<f32> {
        meta[key]["codebook"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect()
    }

    /// The decoded model is in the file's (Morton) order: pair it back by position.
    fn in_model_order(g: &Gaussians, out: &Gaussians) -> Vec<usize> {
        let order = compressed_ply::morton_order(g);
        let mut back = vec![0; g.len()];
        for (t, &i) in order.iter().enumerate() {
            back[i as usize] = t;
        }
        assert_eq!(out.len(), g.len());
        back
    }

    #[test]
    fn texture_sizes_follow_the_writers_rule() {
        assert_eq!(texture_size(0).unwrap(), (4, 4));
        assert_eq!(texture_size(16).unwrap(), (4, 4));
        assert_eq!(texture_size(17).unwrap(), (8, 4));
        assert_eq!(texture_size(100_000).unwrap(), (320, 316));
        assert!(matches!(
            texture_size(16384 * 16384),
            Err(SogError::TooLarge(_))
        ));
    }

    #[test]
    fn a_round_trip_stays_within_the_documented_bounds() {
        let g = model(3000, 3, 11);
        let bytes = encode(&g).unwrap();
        assert_eq!(
            encode(&g).unwrap(),
            bytes,
            "the same model gives the same bytes"
        );
        let meta = meta_of(&bytes);
        let (out, info) = decode_with_info(&bytes).unwrap();
        assert!(!info.antialiased);
        assert_eq!(out.sh_degree, 3);
        let at = in_model_order(&g, &out);
        let (mins, maxs) = (&meta["means"]["mins"], &meta["means"]["maxs"]);
        let (scale_book, dc_book) = (book(&meta, "scales"), book(&meta, "sh0"));
        assert_eq!(scale_book.len(), 256);
        let mut sh_err = 0.0f64;
        for (i, &t) in at.iter().enumerate() {
            for a in 0..3 {
                let span = maxs[a].as_f64().unwrap() - mins[a].as_f64().unwrap();
                let bound =
                    (g.means[i][a].abs() as f64 + 1.0) * span / (2.0 * 65535.0) * 1.001 + 1e-6;
                let err = (out.means[t][a] as f64 - g.means[i][a] as f64).abs();
                assert!(err <= bound, "Gaussian {i} axis {a}: {err} > {bound}");
                let s = g.log_scales[i][a];
                assert_eq!(out.log_scales[t][a], scale_book[nearest_1d(&scale_book, s)]);
                let dc = g.sh[i * 16][a];
                assert_eq!(out.sh[t * 16][a], dc_book[nearest_1d(&dc_book, dc)]);
                for j in 1..16 {
                    sh_err += (out.sh[t * 16 + j][a] - g.sh[i * 16 + j][a]).abs() as f64;
                }
            }
            let p = sigmoid(g.logit_opacities[i]);
            let back = sigmoid(out.logit_opacities[t]);
            assert!(
                (p - back).abs() <= 0.5 / 255.0 + 1e-6,
                "opacity {p} → {back}"
            );
            // Rotations: compare the normalised, sign-fixed quaternions.
            let q = g.rotations[i];
            let norm = q.iter().map(|c| c * c).sum::<f32>().sqrt();
            let largest = (0..4)
                .max_by(|&a, &b| q[a].abs().total_cmp(&q[b].abs()))
                .unwrap();
            let sign = q[largest].signum();
            let r = out.rotations[t];
            let step = 1.0 / (255.0 * std::f32::consts::SQRT_2);
            for c in (0..4).filter(|&c| c != largest) {
                let err = (r[c] - q[c] * sign / norm).abs();
                assert!(err <= step + 1e-6, "Gaussian {i} component {c}: {err}");
            }
            assert!((r[largest] - q[largest].abs() / norm).abs() <= 3.0 * step + 1e-5);
        }
        // The SH beyond DC: 3000 Gaussians get a palette of 2048 entries; each Gaussian's
        // coefficients are its entry's, the mean of the Gaussians labelled with it, through
        // the codebook.
        assert_eq!(meta["shN"]["count"].as_u64().unwrap(), 2048);
        let zip = Archive::new(&bytes).unwrap();
        let labels = zip.read("shN_labels.webp").unwrap();
        let labels = texels(&labels, "shN_labels.webp", &|_, _| None).unwrap();
        let label = |t: usize| labels.rgba[t * 4] as usize + 256 * labels.rgba[t * 4 + 1] as usize;
        let sh_book = book(&meta, "shN");
        let mut members = vec![Vec::new(); 2048];
        for i in 0..g.len() {
            members[label(at[i])].push(i);
        }
        for (e, group) in members.iter().enumerate().filter(|(_, m)| !m.is_empty()) {
            for k in 1..16 {
                for a in 0..3 {
                    let mean = group
                        .iter()
                        .map(|&i| g.sh[i * 16 + k][a] as f64)
                        .sum::<f64>()
                        / group.len() as f64;
                    let want = sh_book[nearest_1d(&sh_book, mean as f32)];
                    for &i in group {
                        let got = out.sh[at[i] * 16 + k][a];
                        // The mean in f64 against the palette's may round to the other side
                        // of a codebook midpoint: then the neighbouring entry.
                        let j = nearest_1d(&sh_book, got);
                        assert!(
                            got == want
                                || (j as isize - nearest_1d(&sh_book, want) as isize).abs() == 1,
                            "entry {e} coefficient {k}.{a}: {got} against {want}"
                        );
                    }
                }
            }
        }
        let mean = sh_err / (3000.0 * 45.0);
        eprintln!("mean SH error of uniform random coefficients in ±0.5: {mean}");
    }

    /// At most 256 distinct values per attribute and as many palette entries as
    /// Gaussians (512 = 2⁹): scales, colours and SH come back exactly.
    #[test]
    fn few_distinct_values_round_trip_exactly() {
        let mut g = model(512, 2, 4);
        let levels = |v: f32| (v * 8.0).round() / 8.0;
        for s in &mut g.log_scales {
            *s = s.map(levels);
        }
        for c in &mut g.sh {
            *c = c.map(levels);
        }
        let out = decode(&encode(&g).unwrap()).unwrap();
        let at = in_model_order(&g, &out);
        for (i, &t) in at.iter().enumerate() {
            assert_eq!(out.log_scales[t], g.log_scales[i]);
            assert_eq!(out.sh[t * 9..t * 9 + 9], g.sh[i * 9..i * 9 + 9]);
        }
    }

    /// A SOG made here from the specification's formulas, not by the writer: the reader
    /// gives the values the specification says.
    #[test]
    fn the_reader_follows_the_specification() {
        let (w, h) = (4, 4);
        let image = |texels: &[[u8; 4]]| {
            let mut rgba = vec![0u8; w * h * 4];
            for (i, t) in texels.iter().enumerate() {
                rgba[i * 4..i * 4 + 4].copy_from_slice(t);
            }
            webp(&rgba, w, h).unwrap()
        };
        let means_l = image(&[[0x34, 0, 255, 255], [0, 0, 0, 255]]);
        let means_u = image(&[[0x12, 0, 255, 255], [0x80, 0, 0, 255]]);
        // Gaussian 0: largest component z (tag 255), x = y = w = 0 stored as 127.5 → 128.
        let quats = image(&[[128, 128, 128, 255], [255, 128, 128, 252]]);
        let scales = image(&[[0, 1, 2, 255], [2, 2, 2, 255]]);
        let sh0 = image(&[[1, 0, 1, 255], [0, 0, 0, 0]]);
        // Palette of 2 entries (one band, m = 3): Gaussian 0 → entry 1, Gaussian 1 → entry 0.
        let labels = image(&[[1, 0, 0, 255], [0, 0, 0, 255]]);
        let mut cent = vec![0u8; 64 * 3 * 4];
        for j in 0..3 {
            cent[(3 + j) * 4..(3 + j) * 4 + 4].copy_from_slice(&[j as u8, 1, 2, 255]);
        }
        let centroids = webp(&cent, 64 * 3, 1).unwrap();
        let meta = serde_json::json!({
            "version": 2, "count": 2, "model": "antialiased",
            "means": {"mins": [-1.0, 0.0, 0.5], "maxs": [1.0, 2.0, 0.5],
                      "files": ["means_l.webp", "means_u.webp"]},
            "scales": {"codebook": [-3.0, -2.0, -1.0], "files": ["scales.webp"]},
            "quats": {"files": ["quats.webp"]},
            "sh0": {"codebook": [0.25, -0.5], "files": ["sh0.webp"]},
            "shN": {"count": 2, "bands": 1, "codebook": [0.1, 0.2, 0.3],
                    "files": ["shN_centroids.webp", "shN_labels.webp"]},
            "unknown": "ignored"
        })
        .to_string();
        let members: Vec<(&str, &[u8])> = vec![
            ("quats.webp", &quats),
            ("meta.json", meta.as_bytes()),
            ("means_l.webp", &means_l),
            ("means_u.webp", &means_u),
            ("scales.webp", &scales),
            ("sh0.webp", &sh0),
            ("shN_centroids.webp", &centroids),
            ("shN_labels.webp", &labels),
        ];
        let mut zip = Vec::new();
        write_stored(&mut zip, &members).unwrap();
        let (g, info) = decode_with_info(&zip).unwrap();
        assert!(info.antialiased);
        assert_eq!((g.len(), g.sh_degree), (2, 1));
        let inv = |v: f64| (v.signum() * (v.abs().exp() - 1.0)) as f32;
        let x0 = -1.0 + 2.0 * (0x1234 as f64 / 65535.0);
        assert!((g.means[0][0] - inv(x0)).abs() < 1e-6);
        assert_eq!(g.means[0][1], 0.0);
        assert!((g.means[0][2] - inv(0.5)).abs() < 1e-6);
        assert!((g.means[1][0] - inv(-1.0 + 2.0 * (0x8000 as f64 / 65535.0))).abs() < 1e-6);
        let c = (128.0 / 255.0 * 2.0 - 1.0) / std::f32::consts::SQRT_2;
        let largest = (1.0 - 3.0 * c * c).sqrt();
        for (got, want) in g.rotations[0].iter().zip([c, c, c, largest]) {
            assert!((got - want).abs() < 1e-6, "{:?}", g.rotations[0]);
        }
        let one = 1.0 / std::f32::consts::SQRT_2;
        assert!((g.rotations[1][0] - (1.0 - one * one - 2.0 * c * c).sqrt()).abs() < 1e-6);
        assert!((g.rotations[1][1] - one).abs() < 1e-6);
        assert_eq!(g.log_scales[0], [-3.0, -2.0, -1.0]);
        assert_eq!(g.log_scales[1], [-1.0; 3]);
        assert_eq!(g.sh[0], [-0.5, 0.25, -0.5]);
        assert_eq!(g.sh[4], [0.25; 3]);
        assert!(sigmoid(g.logit_opacities[0]) > 0.99 && sigmoid(g.logit_opacities[1]) < 0.01);
        // Gaussian 0 takes entry 1: coefficient j is (codebook[j], codebook[1], codebook[2]).
        // Gaussian 1 takes entry 0, whose texels are zero: codebook[0] throughout.
        for j in 0..3 {
            assert_eq!(g.sh[1 + j], [[0.1, 0.2, 0.3][j], 0.2, 0.3]);
            assert_eq!(g.sh[5 + j], [0.1; 3]);
        }
    }

    #[test]
    fn antialiased_models_say_so_and_degree_zero_has_no_palette() {
        let g = model(50, 0, 2);
        let bytes = encode_with_info(&g, ModelInfo::with_mode(true)).unwrap();
        let meta = meta_of(&bytes);
        assert_eq!(meta["model"], "antialiased");
        assert!(meta.get("shN").is_none());
        let (out, info) = decode_with_info(&bytes).unwrap();
        assert!(info.antialiased);
        assert_eq!((out.len(), out.sh_degree), (50, 0));
        assert!(meta_of(&encode(&g).unwrap()).get("model").is_none());
        // An empty model is a valid SOG.
        let empty = decode(&encode(&Gaussians::empty(3)).unwrap()).unwrap();
        assert_eq!(empty.len(), 0);
    }

    #[test]
    fn an_unbundled_folder_reads_as_the_bundle() {
        let g = model(200, 1, 8);
        let bytes = encode(&g).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let zip = Archive::new(&bytes).unwrap();
        for name in zip.names() {
            std::fs::write(dir.path().join(name), zip.read(name).unwrap()).unwrap();
        }
        let from_folder = load(&dir.path().join("meta.json")).unwrap();
        assert_eq!(from_folder, decode(&bytes).unwrap());
        let file = dir.path().join("model.sog");
        save(&file, &g).unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), bytes);
        assert!(is_sog_meta(Path::new("out/scene.meta.json")));
        assert!(!is_sog_meta(Path::new("out/lod-meta.json")));
        std::fs::write(dir.path().join("lod-meta.json"), "{}").unwrap();
        let e = crate::export::load_model(
            &dir.path().join("lod-meta.json"),
            &crate::export::ply::LoadOptions::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("streamed SOG"), "{e}");
    }

    /// Rewrites member `name` of a bundle.
    fn with_member(bytes: &[u8], name: &str, new: &[u8]) -> Vec<u8> {
        let zip = Archive::new(bytes).unwrap();
        let names: Vec<String> = zip.names().map(str::to_owned).collect();
        let data: Vec<Vec<u8>> = names
            .iter()
            .map(|n| {
                if n == name {
                    new.to_vec()
                } else {
                    zip.read(n).unwrap()
                }
            })
            .collect();
        let members: Vec<(&str, &[u8])> = names
            .iter()
            .zip(&data)
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let mut out = Vec::new();
        write_stored(&mut out, &members).unwrap();
        out
    }

    fn edit_meta(bytes: &[u8], edit: impl Fn(&mut serde_json::Value)) -> Vec<u8> {
        let mut meta = meta_of(bytes);
        edit(&mut meta);
        with_member(bytes, "meta.json", meta.to_string().as_bytes())
    }

    #[test]
    fn damaged_files_are_refused_naming_what_is_wrong() {
        let g = model(40, 1, 3);
        let bytes = encode(&g).unwrap();
        let err = |b: &[u8]| decode(b).unwrap_err().to_string();

        let e = err(&edit_meta(&bytes, |m| {
            m.as_object_mut().unwrap().remove("version");
        }));
        assert!(
            e.contains("first version") && e.contains("splat-transform"),
            "{e}"
        );
        let e = err(&edit_meta(&bytes, |m| m["version"] = 3.into()));
        assert!(e.contains("version 3"), "{e}");
        let e = err(&edit_meta(&bytes, |m| m["model"] = "2dgs".into()));
        assert!(e.contains("2dgs"), "{e}");
        let e = err(&edit_meta(&bytes, |m| m["count"] = 4000.into()));
        assert!(
            e.contains("means_l.webp") && e.contains("fewer than the 4000"),
            "{e}"
        );
        let huge = webp(&vec![0u8; 300 * 300 * 4], 300, 300).unwrap();
        let e = err(&with_member(&bytes, "means_l.webp", &huge));
        assert!(e.contains("300 × 300") && e.contains("far more"), "{e}");
        let e = err(&edit_meta(&bytes, |m| {
            m["scales"]["codebook"] = serde_json::json!([0.5])
        }));
        assert!(e.contains("Gaussian") && e.contains("scale index"), "{e}");
        let e = err(&edit_meta(&bytes, |m| m["shN"]["count"] = 1.into()));
        assert!(e.contains("SH palette label"), "{e}");
        let e = err(&edit_meta(&bytes, |m| {
            m["sh0"]["files"] = serde_json::json!(["../sh0.webp"])
        }));
        assert!(e.contains("not a file beside meta.json"), "{e}");
        let e = err(&edit_meta(&bytes, |m| {
            m["means"]["mins"] = serde_json::json!([0, 1])
        }));
        assert!(e.contains("means.mins"), "{e}");
        let e = err(&edit_meta(&bytes, |m| m["shN"]["bands"] = 4.into()));
        assert!(e.contains("shN.bands"), "{e}");

        // A quaternion tag outside 252..=255.
        let zip = Archive::new(&bytes).unwrap();
        let quats = zip.read("quats.webp").unwrap();
        let mut t = texels(&quats, "quats.webp", &|_, _| None).unwrap();
        t.rgba[3] = 7;
        let e = err(&with_member(
            &bytes,
            "quats.webp",
            &webp(&t.rgba, t.width, t.rgba.len() / 4 / t.width).unwrap(),
        ));
        assert!(
            e.contains("Gaussian 0") && e.contains("quaternion tag"),
            "{e}"
        );
        let e = err(&with_member(&bytes, "sh0.webp", b"RIFF0000WEBPnope"));
        assert!(e.contains("sh0.webp") && e.contains("WebP"), "{e}");
        let e = err(&with_member(&bytes, "meta.json", b"{"));
        assert!(e.contains("meta.json"), "{e}");

        // A centroid image of the wrong width for the bands.
        let e = err(&edit_meta(&bytes, |m| m["shN"]["bands"] = 2.into()));
        assert!(
            e.contains("shN_centroids.webp") && e.contains("wide"),
            "{e}"
        );
    }

    /// Files of splat-transform, PlayCanvas's reference writer and reader
    /// (tests/data/sog/README.md): its SOG of a model reads here as splat-transform itself
    /// decodes it, and so does ramsplat's SOG of the same model, which the writer still
    /// produces byte for byte.
    #[test]
    fn files_read_as_splat_transform_reads_them() {
        use crate::export::ply::{self, LoadOptions};
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = root.join("tests/data/sog");
        for (file, decoded) in [
            (
                "splat-transform-100-sh1.sog",
                "splat-transform-100-sh1.decoded.ply",
            ),
            (
                "ramsplat-100-sh1.sog",
                "ramsplat-100-sh1.decoded-by-splat-transform.ply",
            ),
        ] {
            let ours = load(&dir.join(file)).unwrap();
            let theirs = ply::load(&dir.join(decoded), &LoadOptions::default()).unwrap();
            assert_eq!((ours.len(), ours.sh_degree), (100, 1), "{file}");
            assert_eq!(ours.means, theirs.means, "{file}");
            assert_eq!(ours.log_scales, theirs.log_scales, "{file}");
            assert_eq!(ours.rotations, theirs.rotations, "{file}");
            assert_eq!(ours.sh, theirs.sh, "{file}");
            for (i, (&a, &b)) in ours
                .logit_opacities
                .iter()
                .zip(&theirs.logit_opacities)
                .enumerate()
            {
                // Alike but for bytes 0 and 255, which splat-transform reads 1e-6 inside (0, 1)
                // and ramsplat half a level inside, as its other readers do.
                let (pa, pb) = (sigmoid(a), sigmoid(b));
                let ends = !(0.25 / 255.0..=254.75 / 255.0).contains(&pb);
                let bound = if ends { 0.5 / 255.0 + 1e-6 } else { 1e-6 };
                assert!(
                    (pa - pb).abs() <= bound,
                    "{file}: Gaussian {i}: opacity {pa} vs {pb}"
                );
            }
        }
        let source =
            crate::export::spz::load(&root.join("fuzz/seeds/spz/model-100-sh1.spz")).unwrap();
        assert!(
            encode(&source).unwrap() == std::fs::read(dir.join("ramsplat-100-sh1.sog")).unwrap(),
            "the writer's output changed: regenerate tests/data/sog as its README says"
        );
    }

    #[test]
    fn saving_refuses_what_a_sog_cannot_hold() {
        let mut g = model(10, 0, 1);
        g.rotations[3] = [0.0; 4];
        let e = encode(&g).unwrap_err().to_string();
        assert!(
            e.contains("Gaussian 3") && e.contains("all-zero rotation"),
            "{e}"
        );
        g.rotations[3] = [1.0, 0.0, 0.0, 0.0];
        g.means[2][1] = f32::NAN;
        assert!(matches!(encode(&g), Err(SogError::InvalidModel(_))));
    }
}
