//! The standard 3DGS PLY layout, read and written.
//!
//! # Layout
//! One `vertex` element, one row per Gaussian, float32 properties (binary little-endian by
//! default, ASCII on request), in this order when we write:
//!
//! ```text
//! x y z                      mean
//! nx ny nz                   unused by 3DGS, written as 0 (viewers expect them)
//! f_dc_0 f_dc_1 f_dc_2       SH coefficient 0 (DC), R G B
//! f_rest_0 .. f_rest_{3·(K−1)−1}   SH coefficients 1..K−1, CHANNEL-MAJOR: all R, then all G,
//!                            then all B (K = (d+1)² for SH degree d: 0, 9, 24 or 45 f_rest)
//! opacity                    logit of the opacity
//! scale_0 scale_1 scale_2    natural log of the per-axis standard deviation
//! rot_0 rot_1 rot_2 rot_3    quaternion w x y z, not necessarily normalised
//! ```
//!
//! Values are the *stored* (pre-activation) parameters, exactly [`Gaussians`]' fields, so a
//! save/load round trip is bit-exact in both encodings: binary copies the f32 bits; ASCII
//! prints each f32 with Rust's shortest round-trip representation, checked to parse back to the
//! same f32 also through an f64 parser (which is what [`crate::import::ply`] uses), with a
//! fall-back to the exact f64 digits if that double rounding ever differed.
//!
//! # Reading
//! Built on the crate's streaming PLY reader ([`crate::import::ply`]); properties are looked up
//! BY NAME, so property order does not matter and extra properties (e.g. `red green blue`, or
//! the normals) are ignored; `nx ny nz` are optional. The SH degree is inferred from the
//! number of `f_rest_*` properties (0, 9, 24, 45 → degree 0..3; 72, degree 4, is read and cut
//! to 3, which the loaded [`ModelInfo`] says); any other count, or a gap in
//! the `f_rest_i` numbering, is an error. Gaussians are pushed row by row: nothing is allocated
//! from the header's declared count. Any NaN or infinite value (or a double that overflows
//! f32) is an error naming the vertex index and the property.
//!
//! A `filter_3D` property is Mip-Splatting's 3D smoothing filter, which its trainer saves beside
//! the unfiltered scales and opacities: the filter is folded into them as the file is read
//! ([`crate::scene::filter3d`]; a negative size is an error), the model is read as antialiased
//! (Mip-Splatting trains with a compensated 2D filter, the nearest of ramsplat's modes), and
//! [`ModelInfo::fused_filter_3d`] says so. Ignoring the property, as viewers do, draws every
//! Gaussian narrower and more opaque than it was trained. [`LoadOptions::unfused_filter_3d`]
//! reads the unfiltered values instead, for a run that trains through a filter of its own.
//!
//! Header comments say how to render the model ([`ModelInfo`]): [`ANTIALIASED_COMMENT`], and
//! [`FOLDED_FILTER_COMMENT`] when its scales and opacities hold a folded 3D filter (written by
//! `gs-train --filter-3d`, and by any writer given a model read with its `filter_3D` folded in).
//!
//! # Refusing files saved with activated values
//! A model exported with `sigmoid(opacity)` and `exp(scale)` instead of the stored values loads
//! "fine" and then renders as a fog of huge, half-transparent Gaussians (the failure that once
//! turned a resumed run into a 52 GB allocation). [`activation_evidence`] flags a file when
//! ALL of these hold:
//! 1. every `opacity` lies in [0, 1]: sigmoid outputs do. Stored logits of a real model are
//!    mostly negative: 3DGS initialises them at logit(0.1) ≈ −2.2, resets them to ≤ logit(0.01)
//!    ≈ −4.6, and training spreads them over roughly [−6, +10].
//! 2. every `scale_*` is > 0: exp outputs are. Stored log-scales of a real model are mostly
//!    negative, since Gaussians are far smaller than one scene unit.
//! 3. read as log-scales, the largest Gaussian, `exp(max scale)`, is wider than 0.1 × the
//!    diagonal of the means' bounding box. 3DGS prunes Gaussians larger than 0.1 × the scene
//!    extent, so an honest model has essentially none, while an activated file's values of
//!    ≥ 0 exponentiate to ≥ 1 unit (and to astronomically large sizes in scenes measured in
//!    millimetres).
//!
//! False positives need an honest file that meets all three: every opacity logit in [0, 1]
//! (every opacity in [0.5, 0.73]), every Gaussian wider than one scene unit on every axis, and
//! at least one wider than a tenth of the scene. That essentially only happens for hand-made
//! toy files (e.g. one Gaussian, whose bounding box is a point); [`LoadOptions::allow_activated`]
//! (`gs-render --allow-activated`) loads those anyway. False negatives (an activated file that
//! passes) need a scene so large that the largest activated scale s still has
//! `exp(s) < 0.1 × extent`; such a model renders wrong but bounded.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::ModelInfo;
use crate::import::ImportError;
use crate::scene::gaussians::{sh_coeffs, Gaussians, MAX_SH_DEGREE};

/// Encoding of a written file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlyEncoding {
    /// `binary_little_endian 1.0`, float32: what 3DGS writes and viewers expect.
    #[default]
    BinaryLittleEndian,
    /// `ascii 1.0`: for inspection and diffing; about 3× larger.
    Ascii,
}

/// Options for [`load`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Load a file even though it looks like it holds activated values (see the module doc).
    pub allow_activated: bool,
    /// Read a Mip-Splatting file's own unfiltered scales and opacities, its `filter_3D` not
    /// folded in (for a run that trains through a filter of its own; the loaded
    /// [`ModelInfo::fused_filter_3d`] still says the file held one).
    pub unfused_filter_3d: bool,
}

/// Why a Gaussian PLY could not be read or written. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum GaussianPlyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The PLY itself is malformed (header, truncated data, bad token): from the PLY reader.
    #[error(transparent)]
    Ply(#[from] ImportError),
    #[error("{}: the file has no `vertex` element, so it is not a 3D Gaussian Splatting model", path.display())]
    NoVertexElement { path: PathBuf },
    #[error(
        "{}: vertex property `{name}` is missing (or is a list); a 3DGS model needs x y z, \
         f_dc_0..2, opacity, scale_0..2 and rot_0..3. Is this a plain point cloud? Use \
         `gs-pack convert` for point clouds.",
        path.display()
    )]
    MissingProperty { path: PathBuf, name: String },
    #[error(
        "{}: {count} `f_rest_*` properties do not match an SH degree (0, 9, 24, 45 or 72 for \
         degree 0, 1, 2, 3 or 4){detail}",
        path.display()
    )]
    BadShCount {
        path: PathBuf,
        count: usize,
        detail: String,
    },
    #[error(
        "{}: vertex {vertex}: property `{property}` is {value}; the model is corrupt (a \
         diverged training run saves NaN): re-export it from a healthy checkpoint",
        path.display()
    )]
    NonFinite {
        path: PathBuf,
        vertex: u64,
        property: String,
        value: f64,
    },
    #[error(
        "{}: vertex {vertex}: rotation `rot_0..rot_3` is all zeros, which is no rotation (it \
         cannot be normalised, so the Gaussian would vanish silently); the model is corrupt: \
         re-export it from a healthy checkpoint",
        path.display()
    )]
    ZeroRotation { path: PathBuf, vertex: u64 },
    #[error(
        "{}: vertex {vertex}: `filter_3D` (Mip-Splatting's 3D filter, a standard deviation) is \
         {value}, below 0; the model is corrupt: re-export it from a healthy checkpoint",
        path.display()
    )]
    NegativeFilter {
        path: PathBuf,
        vertex: u64,
        value: f64,
    },
    #[error("{}: {evidence}", path.display())]
    Activated { path: PathBuf, evidence: String },
    #[error("{}: cannot save: {msg}", path.display())]
    InvalidModel { path: PathBuf, msg: String },
}

/// The vertex property in which Mip-Splatting saves each Gaussian's 3D smoothing filter (a
/// standard deviation in scene units) beside its unfiltered scales and opacity. A file that
/// has it is read with the filter folded in ([`crate::scene::filter3d`]).
pub const FILTER_3D_PROPERTY: &str = "filter_3D";

/// Property names in the order we write them, for an SH degree.
pub fn property_names(sh_degree: u32) -> Vec<String> {
    let rest = 3 * (sh_coeffs(sh_degree) - 1);
    let mut names: Vec<String> = [
        "x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.extend((0..rest).map(|i| format!("f_rest_{i}")));
    names.push("opacity".into());
    names.extend((0..3).map(|i| format!("scale_{i}")));
    names.extend((0..4).map(|i| format!("rot_{i}")));
    names
}

/// Checks the structure-of-arrays invariant of [`Gaussians`] and that every value is finite.
pub(crate) fn validate_for_save(g: &Gaussians) -> Result<(), String> {
    if g.sh_degree > MAX_SH_DEGREE {
        return Err(format!(
            "SH degree {} is above the maximum {MAX_SH_DEGREE}",
            g.sh_degree
        ));
    }
    let n = g.len();
    let k = sh_coeffs(g.sh_degree);
    if let Some(bad) = g.shape_mismatch(n) {
        return Err(format!(
            "`{}` holds {} values but {n} Gaussians of SH degree {} need {}",
            bad.field.name(),
            bad.got,
            g.sh_degree,
            bad.expected
        ));
    }
    for i in 0..n {
        let mut row = Vec::with_capacity(62);
        push_row(g, i, k, &mut row);
        if let Some(j) = row.iter().position(|v| !v.is_finite()) {
            return Err(format!(
                "Gaussian {i}: `{}` is {}; refusing to write a model that cannot be loaded",
                property_names(g.sh_degree)[j],
                row[j]
            ));
        }
    }
    Ok(())
}

/// Appends Gaussian `i`'s row in [`property_names`] order.
fn push_row(g: &Gaussians, i: usize, k: usize, row: &mut Vec<f32>) {
    row.extend_from_slice(&g.means[i]);
    row.extend_from_slice(&[0.0; 3]);
    let sh = &g.sh[i * k..(i + 1) * k];
    row.extend_from_slice(&sh[0]);
    for c in 0..3 {
        row.extend(sh[1..].iter().map(|coef| coef[c]));
    }
    row.push(g.logit_opacities[i]);
    row.extend_from_slice(&g.log_scales[i]);
    row.extend_from_slice(&g.rotations[i]);
}

/// Formats an f32 so that both an f32 parser and an f64 parser followed by `as f32` give back
/// the same bits: the shortest round-trip form, or the exact f64 digits when double rounding
/// through f64 would land elsewhere (only possible within ~2⁻²⁹ relative of an f32 midpoint).
fn ascii_f32(v: f32, out: &mut String) {
    use std::fmt::Write as _;
    let start = out.len();
    let _ = write!(out, "{v}");
    let back = out[start..].parse::<f64>().map(|d| d as f32);
    if back.map(f32::to_bits) != Ok(v.to_bits()) {
        out.truncate(start);
        let _ = write!(out, "{}", v as f64);
    }
}

/// The header of a binary little-endian point-cloud PLY of `n` points, each `x y z` float and
/// `red green blue` uchar (the layout SfM tools write and nerfstudio's `ply_file_path` names);
/// the rows follow as [`write_point_row`] writes them.
pub fn write_points_header(w: &mut impl Write, n: u64, comment: &str) -> io::Result<()> {
    write!(
        w,
        "ply\nformat binary_little_endian 1.0\ncomment {comment}\nelement vertex {n}\n\
         property float x\nproperty float y\nproperty float z\n\
         property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n"
    )
}

/// One row of the point-cloud PLY [`write_points_header`] starts.
pub fn write_point_row(w: &mut impl Write, xyz: [f32; 3], rgb: [u8; 3]) -> io::Result<()> {
    let mut row = [0u8; 15];
    for (k, v) in xyz.iter().enumerate() {
        row[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
    }
    row[12..].copy_from_slice(&rgb);
    w.write_all(&row)
}

/// The header comment that marks a model trained with antialiased rasterization (read back
/// by [`load_with_info`]; other readers skip comments). Only its first two words are matched.
pub const ANTIALIASED_COMMENT: &str =
    "rasterize_mode antialiased (render with the Mip-Splatting 2D filter, as gsplat's rasterize_mode=\"antialiased\")";

/// The header comment that marks a model whose scales and opacities hold a 3D smoothing filter
/// folded in ([`ModelInfo::folded_filter_3d`]; read back by [`load_with_info`], other readers
/// skip comments). Only its first two words are matched.
pub const FOLDED_FILTER_COMMENT: &str =
    "filter_3d folded (Mip-Splatting's 3D filter is in the scales and opacities, as its fused export writes them)";

/// Whether a header's comments carry [`ANTIALIASED_COMMENT`] (its first two words).
pub(crate) fn says_antialiased(comments: &[String]) -> bool {
    has_comment(comments, ANTIALIASED_COMMENT)
}

/// Whether a header's comments carry [`FOLDED_FILTER_COMMENT`] (its first two words).
pub(crate) fn says_folded_filter(comments: &[String]) -> bool {
    has_comment(comments, FOLDED_FILTER_COMMENT)
}

/// Whether one of `comments` starts with the first two words of `mark`.
fn has_comment(comments: &[String], mark: &str) -> bool {
    let marker: Vec<&str> = mark.split_whitespace().take(2).collect();
    comments.iter().any(|c| {
        let words: Vec<&str> = c.split_whitespace().take(2).collect();
        words == marker
    })
}

/// The header comments that say how to render a model (`info`), one line each.
pub(crate) fn info_comments(info: &ModelInfo) -> String {
    let mut lines = String::new();
    if info.antialiased {
        lines.push_str(&format!("comment {ANTIALIASED_COMMENT}\n"));
    }
    if info.folded_filter_3d {
        lines.push_str(&format!("comment {FOLDED_FILTER_COMMENT}\n"));
    }
    lines
}

/// Writes `g` as a 3DGS PLY to `w`. `g` must pass validation (see [`save`]).
fn write_ply<W: Write>(
    w: &mut W,
    g: &Gaussians,
    encoding: PlyEncoding,
    info: ModelInfo,
) -> io::Result<()> {
    let format = match encoding {
        PlyEncoding::BinaryLittleEndian => "binary_little_endian",
        PlyEncoding::Ascii => "ascii",
    };
    let mut header = format!(
        "ply\nformat {format} 1.0\ncomment ramsplat {} (stored pre-activation values)\n",
        env!("CARGO_PKG_VERSION"),
    );
    header.push_str(&info_comments(&info));
    header.push_str(&format!("element vertex {}\n", g.len()));
    for name in property_names(g.sh_degree) {
        header.push_str("property float ");
        header.push_str(&name);
        header.push('\n');
    }
    header.push_str("end_header\n");
    w.write_all(header.as_bytes())?;
    let k = sh_coeffs(g.sh_degree);
    let mut row = Vec::with_capacity(62);
    let mut bytes = Vec::with_capacity(62 * 4);
    let mut text = String::new();
    for i in 0..g.len() {
        row.clear();
        push_row(g, i, k, &mut row);
        match encoding {
            PlyEncoding::BinaryLittleEndian => {
                bytes.clear();
                for v in &row {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                w.write_all(&bytes)?;
            }
            PlyEncoding::Ascii => {
                text.clear();
                for (j, &v) in row.iter().enumerate() {
                    if j > 0 {
                        text.push(' ');
                    }
                    ascii_f32(v, &mut text);
                }
                text.push('\n');
                w.write_all(text.as_bytes())?;
            }
        }
    }
    Ok(())
}

/// Saves `g` to `path` atomically ([`crate::fsutil::write_atomic_with`]: temporary file in the
/// same directory, fsync, rename, directory fsync). Refuses inconsistent array lengths and non-finite values
/// (the file could not be loaded back).
pub fn save(path: &Path, g: &Gaussians, encoding: PlyEncoding) -> Result<(), GaussianPlyError> {
    save_with_info(path, g, encoding, ModelInfo::default())
}

/// [`save`], marking the file with what `info` says (see [`ANTIALIASED_COMMENT`]).
pub fn save_with_info(
    path: &Path,
    g: &Gaussians,
    encoding: PlyEncoding,
    info: ModelInfo,
) -> Result<(), GaussianPlyError> {
    validate_for_save(g).map_err(|msg| GaussianPlyError::InvalidModel {
        path: path.to_owned(),
        msg,
    })?;
    // 1 MiB buffer: thousands of rows per write syscall, small next to any model.
    crate::fsutil::write_atomic_with(path, &mut |w| write_ply(w, g, encoding, info)).map_err(
        |source| GaussianPlyError::Io {
            path: path.to_owned(),
            source,
        },
    )
}

/// Column indices of the properties we read, resolved by name.
struct Columns {
    mean: [usize; 3],
    dc: [usize; 3],
    /// Channel-major: `rest[c·(K−1) + (k−1)]`, `K` the file's coefficient count.
    rest: Vec<usize>,
    opacity: usize,
    scale: [usize; 3],
    rot: [usize; 4],
    /// Mip-Splatting's 3D filter ([`FILTER_3D_PROPERTY`]), when the file has one.
    filter_3d: Option<usize>,
    /// The degree read: the file's, at most [`MAX_SH_DEGREE`].
    sh_degree: u32,
    /// The file's degree (`f_rest_*` count).
    file_sh_degree: u32,
}

fn resolve_columns(
    path: &Path,
    element: &crate::import::ply::PlyElement,
) -> Result<Columns, GaussianPlyError> {
    let col = |name: &str| -> Result<usize, GaussianPlyError> {
        element.scalar_index(name).map(|(i, _)| i).ok_or_else(|| {
            GaussianPlyError::MissingProperty {
                path: path.to_owned(),
                name: name.to_owned(),
            }
        })
    };
    let rest_count = element
        .properties
        .iter()
        .filter(|p| {
            p.name
                .strip_prefix("f_rest_")
                .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    // Degree 4 (72 `f_rest_*`, as SPZ's degree 4 converts) is read and cut to MAX_SH_DEGREE.
    let file_sh_degree = (0..=MAX_SH_DEGREE + 1)
        .find(|&d| 3 * (sh_coeffs(d) - 1) == rest_count)
        .ok_or_else(|| GaussianPlyError::BadShCount {
            path: path.to_owned(),
            count: rest_count,
            detail: String::new(),
        })?;
    let mut rest = Vec::with_capacity(rest_count);
    for i in 0..rest_count {
        let name = format!("f_rest_{i}");
        rest.push(element.scalar_index(&name).map(|(j, _)| j).ok_or_else(|| {
            GaussianPlyError::BadShCount {
                path: path.to_owned(),
                count: rest_count,
                detail: format!(
                    ", but `{name}` is missing: they must be numbered f_rest_0..f_rest_{}",
                    rest_count - 1
                ),
            }
        })?);
    }
    Ok(Columns {
        mean: [col("x")?, col("y")?, col("z")?],
        dc: [col("f_dc_0")?, col("f_dc_1")?, col("f_dc_2")?],
        rest,
        opacity: col("opacity")?,
        scale: [col("scale_0")?, col("scale_1")?, col("scale_2")?],
        rot: [col("rot_0")?, col("rot_1")?, col("rot_2")?, col("rot_3")?],
        filter_3d: element.scalar_index(FILTER_3D_PROPERTY).map(|(i, _)| i),
        sh_degree: file_sh_degree.min(MAX_SH_DEGREE),
        file_sh_degree,
    })
}

/// Loads a 3DGS PLY into [`Gaussians`] (stored values), refusing activated files unless
/// `options.allow_activated`.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Gaussians, GaussianPlyError> {
    load_with_info(path, options).map(|(g, _)| g)
}

/// [`load`], with what the header's comments say about rendering the model.
pub fn load_with_info(
    path: &Path,
    options: &LoadOptions,
) -> Result<(Gaussians, ModelInfo), GaussianPlyError> {
    let mut reader = crate::import::ply::PlyReader::open(path)?;
    if reader.header().element("vertex").is_none() {
        return Err(GaussianPlyError::NoVertexElement {
            path: path.to_owned(),
        });
    }
    let element = reader.select("vertex")?.clone();
    let cols = resolve_columns(path, &element)?;
    let comments = &reader.header().comments;
    // A `filter_3D` is folded in as the file is read, unless the caller trains its own.
    let fold = cols.filter_3d.is_some() && !options.unfused_filter_3d;
    let info = ModelInfo {
        // Mip-Splatting trains with a compensated 2D filter: antialiased is the nearest mode.
        antialiased: says_antialiased(comments) || cols.filter_3d.is_some(),
        cut_sh_degree: (cols.file_sh_degree > cols.sh_degree).then_some(cols.file_sh_degree),
        fused_filter_3d: cols.filter_3d.is_some(),
        folded_filter_3d: says_folded_filter(comments) || fold,
    };
    let names: Vec<&str> = element.scalars().map(|(n, _)| n).collect();
    let k = sh_coeffs(cols.sh_degree);
    // Coefficients per channel in the file (channel-major), of which the first k − 1 are kept.
    let file_rest = sh_coeffs(cols.file_sh_degree) - 1;
    // Every field named: the vertex count is not trusted for an up-front allocation, so the
    // loop below pushes, and a new field must be read (or defaulted) there.
    let mut g = Gaussians {
        sh_degree: cols.sh_degree,
        means: Vec::new(),
        log_scales: Vec::new(),
        rotations: Vec::new(),
        logit_opacities: Vec::new(),
        sh: Vec::new(),
    };
    let mut row = vec![0.0f64; element.scalar_count()];
    let mut vertex: u64 = 0;
    // Every column we use, in file order, so a bad value is reported at its first property.
    let mut used: Vec<usize> = cols
        .mean
        .iter()
        .chain(&cols.dc)
        .chain(&cols.rest)
        .chain(std::iter::once(&cols.opacity))
        .chain(&cols.scale)
        .chain(&cols.rot)
        .chain(&cols.filter_3d)
        .copied()
        .collect();
    // The filter of each Gaussian, folded in once the activated-file check has seen the values
    // the file holds.
    let mut filters: Vec<f32> = Vec::new();
    used.sort_unstable();
    while reader.read_row(&mut row)? {
        for &j in &used {
            // A double beyond f32's range becomes infinite here and is refused too.
            if !(row[j] as f32).is_finite() {
                return Err(GaussianPlyError::NonFinite {
                    path: path.to_owned(),
                    vertex,
                    property: names[j].to_owned(),
                    value: row[j],
                });
            }
        }
        let v = |j: usize| row[j] as f32;
        if cols.rot.iter().all(|&j| v(j) == 0.0) {
            return Err(GaussianPlyError::ZeroRotation {
                path: path.to_owned(),
                vertex,
            });
        }
        g.means.push(cols.mean.map(v));
        g.log_scales.push(cols.scale.map(v));
        g.rotations.push(cols.rot.map(v));
        g.logit_opacities.push(v(cols.opacity));
        if let Some(j) = cols.filter_3d {
            // A NaN was refused above, so this is a negative size.
            if v(j) < 0.0 {
                return Err(GaussianPlyError::NegativeFilter {
                    path: path.to_owned(),
                    vertex,
                    value: row[j],
                });
            }
            filters.push(v(j));
        }
        g.sh.push(cols.dc.map(v));
        for coef in 1..k {
            g.sh.push([0, 1, 2].map(|c| v(cols.rest[c * file_rest + (coef - 1)])));
        }
        vertex += 1;
    }
    if !options.allow_activated {
        if let Some(evidence) = activation_evidence(&g) {
            return Err(GaussianPlyError::Activated {
                path: path.to_owned(),
                evidence,
            });
        }
    }
    if fold {
        for (i, &f) in filters.iter().enumerate() {
            (g.log_scales[i], g.logit_opacities[i]) =
                crate::scene::filter3d::fuse(g.log_scales[i], g.logit_opacities[i], f);
        }
    }
    Ok((g, info))
}

/// The activated-file heuristic of the module doc: `Some(explanation)` when `g`'s stored
/// values look like activated ones.
pub fn activation_evidence(g: &Gaussians) -> Option<String> {
    if g.is_empty() {
        return None;
    }
    let (mut omin, mut omax) = (f32::INFINITY, f32::NEG_INFINITY);
    for &o in &g.logit_opacities {
        omin = omin.min(o);
        omax = omax.max(o);
    }
    if !(omin >= 0.0 && omax <= 1.0) {
        return None;
    }
    let mut smin = f32::INFINITY;
    let mut smax = f32::NEG_INFINITY;
    for s in g.log_scales.iter().flatten() {
        smin = smin.min(*s);
        smax = smax.max(*s);
    }
    if smin <= 0.0 {
        return None;
    }
    let mut lo = [f64::INFINITY; 3];
    let mut hi = [f64::NEG_INFINITY; 3];
    for m in &g.means {
        for a in 0..3 {
            lo[a] = lo[a].min(m[a] as f64);
            hi[a] = hi[a].max(m[a] as f64);
        }
    }
    let extent = (0..3).map(|a| (hi[a] - lo[a]).powi(2)).sum::<f64>().sqrt();
    let largest = (smax as f64).exp();
    if largest <= 0.1 * extent {
        return None;
    }
    Some(format!(
        "this looks like a model saved with ACTIVATED values (opacity after the sigmoid, scale \
         after exp) instead of the stored pre-activation values a 3DGS PLY holds: all {n} \
         opacities lie in [{omin}, {omax}] (stored logits are mostly negative), all scale_* \
         values are positive (min {smin}; stored log-scales are mostly negative), and read as \
         log-scales the largest Gaussian would be {largest:.3e} wide in a scene {extent:.3e} \
         across. Re-export it with opacity = logit(o) and scale = ln(s)",
        n = g.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Random stored values in realistic ranges plus awkward floats (−0, subnormals, extremes)
    /// that a bit-exact round trip must preserve.
    fn random_model(seed: u64, n: usize, sh_degree: u32) -> Gaussians {
        let mut rng = Rng::new(seed);
        let mut u = |lo: f64, hi: f64| rng.uniform(lo, hi) as f32;
        let k = sh_coeffs(sh_degree);
        let mut g = Gaussians::zeros(n, sh_degree);
        for i in 0..n {
            g.means[i] = [u(-5.0, 5.0), u(-5.0, 5.0), u(-5.0, 5.0)];
            g.log_scales[i] = [u(-7.0, 0.0), u(-7.0, 0.0), u(-7.0, 0.0)];
            g.rotations[i] = [u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0), u(-1.0, 1.0)];
            g.logit_opacities[i] = u(-6.0, 6.0);
            for c in 0..k {
                g.sh[i * k + c] = [u(-2.0, 2.0), u(-2.0, 2.0), u(-2.0, 2.0)];
            }
        }
        let awkward = [
            -0.0f32,
            1e-40,
            f32::MIN_POSITIVE,
            3.4e38,
            -1.17549e-38,
            0.1,
            1.0 / 3.0,
        ];
        for (i, v) in awkward.into_iter().enumerate() {
            if i < n {
                g.means[i][0] = v;
                g.sh[i * k][1] = v;
            }
        }
        g
    }

    fn assert_bit_equal(a: &Gaussians, b: &Gaussians) {
        fn bits<const N: usize>(v: &[[f32; N]]) -> Vec<u32> {
            v.iter().flatten().map(|x| x.to_bits()).collect()
        }
        assert_eq!(a.sh_degree, b.sh_degree);
        assert_eq!(bits(&a.means), bits(&b.means));
        assert_eq!(bits(&a.log_scales), bits(&b.log_scales));
        assert_eq!(bits(&a.rotations), bits(&b.rotations));
        assert_eq!(bits(&a.sh), bits(&b.sh));
        let oa: Vec<u32> = a.logit_opacities.iter().map(|x| x.to_bits()).collect();
        let ob: Vec<u32> = b.logit_opacities.iter().map(|x| x.to_bits()).collect();
        assert_eq!(oa, ob);
    }

    /// Writes a binary little-endian float PLY with arbitrary property names and rows.
    fn write_custom(path: &Path, names: &[&str], rows: &[Vec<f32>]) {
        let mut out = format!(
            "ply\nformat binary_little_endian 1.0\nelement vertex {}\n",
            rows.len()
        );
        for n in names {
            out.push_str(&format!("property float {n}\n"));
        }
        out.push_str("end_header\n");
        let mut bytes = out.into_bytes();
        for r in rows {
            assert_eq!(r.len(), names.len());
            for v in r {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// One honest Gaussian row (in `property_names(0)` order) with distinct values.
    fn row0(i: usize) -> Vec<f32> {
        let f = i as f32;
        vec![
            f,
            f + 0.5,
            -f,
            0.0,
            0.0,
            0.0,
            0.1,
            0.2,
            0.3,
            -2.0 - f,
            -3.0,
            -3.5,
            -4.0,
            1.0,
            0.0,
            0.0,
            0.0,
        ]
    }

    #[test]
    fn round_trip_every_degree_and_encoding_is_bit_exact() {
        let dir = tempfile::tempdir().unwrap();
        for degree in 0..=MAX_SH_DEGREE {
            let g = random_model(degree as u64, 257, degree);
            for enc in [PlyEncoding::BinaryLittleEndian, PlyEncoding::Ascii] {
                let path = dir.path().join(format!("m{degree}-{enc:?}.ply"));
                save(&path, &g, enc).unwrap();
                let back = load(&path, &LoadOptions::default()).unwrap();
                assert_bit_equal(&g, &back);
                // No temporary file is left behind.
                let leftovers = std::fs::read_dir(dir.path())
                    .unwrap()
                    .filter(|e| {
                        e.as_ref()
                            .unwrap()
                            .file_name()
                            .to_string_lossy()
                            .contains(".tmp-")
                    })
                    .count();
                assert_eq!(leftovers, 0);
            }
        }
    }

    #[test]
    fn header_is_the_standard_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.ply");
        let g = random_model(1, 3, 3);
        save(&path, &g, PlyEncoding::BinaryLittleEndian).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        let header_end = text.find("end_header\n").unwrap() + "end_header\n".len();
        let props: Vec<&str> = text[..header_end]
            .lines()
            .filter_map(|l| l.strip_prefix("property float "))
            .collect();
        assert_eq!(props.len(), 62);
        assert_eq!(
            &props[..9],
            &["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        );
        assert_eq!(props[9], "f_rest_0");
        assert_eq!(props[53], "f_rest_44");
        assert_eq!(
            &props[54..],
            &["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
        );
        assert_eq!(bytes.len() - header_end, 3 * 62 * 4);
        // Channel-major f_rest: f_rest_0 is coefficient 1 of R, f_rest_15 coefficient 1 of G.
        let at = |row: usize, col: usize| {
            let o = header_end + (row * 62 + col) * 4;
            f32::from_le_bytes(bytes[o..o + 4].try_into().unwrap())
        };
        assert_eq!(at(1, 9).to_bits(), g.sh[16 + 1][0].to_bits());
        assert_eq!(at(1, 9 + 15).to_bits(), g.sh[16 + 1][1].to_bits());
        assert_eq!(at(1, 9 + 30 + 14).to_bits(), g.sh[16 + 15][2].to_bits());
        assert_eq!(at(2, 3), 0.0); // nx
        assert_eq!(at(2, 54).to_bits(), g.logit_opacities[2].to_bits());
    }

    #[test]
    fn permuted_and_extra_properties_are_read_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.ply");
        let names = property_names(1);
        let k = sh_coeffs(1);
        let mut g = random_model(4, 5, 1);
        g.means[0][0] = 1.25;
        // File columns: reversed standard order, normals dropped, two unknown properties.
        let mut order: Vec<usize> = (0..names.len()).filter(|&j| !(3..6).contains(&j)).collect();
        order.reverse();
        let mut file_names: Vec<&str> = order.iter().map(|&j| names[j].as_str()).collect();
        file_names.insert(3, "confidence");
        file_names.push("red");
        let rows: Vec<Vec<f32>> = (0..g.len())
            .map(|i| {
                let mut std_row = Vec::new();
                push_row(&g, i, k, &mut std_row);
                let mut r: Vec<f32> = order.iter().map(|&j| std_row[j]).collect();
                r.insert(3, 77.0);
                r.push(9.0);
                r
            })
            .collect();
        write_custom(&path, &file_names, &rows);
        let back = load(&path, &LoadOptions::default()).unwrap();
        assert_bit_equal(&g, &back);
    }

    #[test]
    fn nan_and_inf_name_vertex_and_property() {
        let dir = tempfile::tempdir().unwrap();
        let names = property_names(0);
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        for (bad, col) in [
            (f32::NAN, 11usize),
            (f32::INFINITY, 0),
            (f32::NEG_INFINITY, 16),
        ] {
            let path = dir.path().join("nan.ply");
            let mut rows: Vec<Vec<f32>> = (0..4).map(row0).collect();
            rows[2][col] = bad;
            write_custom(&path, &names, &rows);
            let err = load(&path, &LoadOptions::default()).unwrap_err();
            match &err {
                GaussianPlyError::NonFinite {
                    vertex, property, ..
                } => {
                    assert_eq!(*vertex, 2);
                    assert_eq!(property, names[col]);
                }
                other => panic!("unexpected {other:?}"),
            }
            let msg = err.to_string();
            assert!(msg.contains("nan.ply") && msg.contains("vertex 2"), "{msg}");
        }
    }

    #[test]
    fn mip_splatting_filter_is_folded_in_and_said() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mip.ply");
        let g = random_model(11, 6, 3);
        let k = sh_coeffs(3);
        let mut names = property_names(3);
        names.push(FILTER_3D_PROPERTY.to_owned());
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        // As Mip-Splatting's trainer saves it: the unfiltered values, the filter beside them
        // (one Gaussian without a filter).
        let filters = [0.02f32, 0.0, 0.005, 0.1, 0.03, 0.01];
        let rows: Vec<Vec<f32>> = (0..6)
            .map(|i| {
                let mut row = Vec::new();
                push_row(&g, i, k, &mut row);
                row.push(filters[i]);
                row
            })
            .collect();
        write_custom(&path, &names, &rows);
        let (m, info) = load_with_info(&path, &LoadOptions::default()).unwrap();
        assert!(info.fused_filter_3d && info.antialiased);
        let note = info.filter_3d_note(&path).unwrap();
        assert!(
            note.contains("mip.ply") && note.contains("filter_3D"),
            "{note}"
        );
        assert_eq!(
            (m.means.clone(), m.rotations.clone()),
            (g.means.clone(), g.rotations.clone())
        );
        assert_eq!(m.sh, g.sh);
        for (i, &f) in filters.iter().enumerate() {
            let want = crate::scene::filter3d::fuse(g.log_scales[i], g.logit_opacities[i], f);
            assert_eq!(
                (m.log_scales[i], m.logit_opacities[i]),
                want,
                "Gaussian {i}"
            );
            if f > 0.0 {
                assert!(m.log_scales[i]
                    .iter()
                    .zip(&g.log_scales[i])
                    .all(|(a, b)| a > b));
                assert!(m.logit_opacities[i] < g.logit_opacities[i]);
            } else {
                assert_eq!(m.log_scales[i], g.log_scales[i]);
            }
        }
        // The folded model is marked, and so is the file it is saved as (a comment).
        assert!(info.folded_filter_3d);
        let fused = dir.path().join("fused.ply");
        save_with_info(&fused, &m, PlyEncoding::Ascii, info).unwrap();
        let (back, back_info) = load_with_info(&fused, &LoadOptions::default()).unwrap();
        assert_bit_equal(&back, &m);
        assert!(back_info.folded_filter_3d && back_info.antialiased && !back_info.fused_filter_3d);
        // For a run training through a filter of its own: the file's unfiltered values, bit
        // for bit, not marked as folded (but said to have held a filter).
        let (raw, raw_info) = load_with_info(
            &path,
            &LoadOptions {
                unfused_filter_3d: true,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        assert_bit_equal(&raw, &g);
        assert!(raw_info.fused_filter_3d && !raw_info.folded_filter_3d);
        assert!(raw_info.filter_3d_note(&path).is_none());
        // The standard file of the same model reads as it is, and is not marked.
        let plain = dir.path().join("plain.ply");
        save(&plain, &g, PlyEncoding::BinaryLittleEndian).unwrap();
        let (_, info) = load_with_info(&plain, &LoadOptions::default()).unwrap();
        assert!(
            !info.fused_filter_3d
                && !info.folded_filter_3d
                && !info.antialiased
                && info.filter_3d_note(&plain).is_none()
        );
        // A negative or non-finite filter is named, vertex and property.
        for (bad, what) in [(-0.01f32, "below 0"), (f32::NAN, "NaN")] {
            let mut rows = rows.clone();
            rows[4][names.len() - 1] = bad;
            write_custom(&path, &names, &rows);
            let msg = load(&path, &LoadOptions::default())
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("mip.ply")
                    && msg.contains("vertex 4")
                    && msg.contains("filter_3D")
                    && msg.contains(what),
                "{msg}"
            );
        }
    }

    #[test]
    fn missing_property_and_bad_sh_count_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.ply");
        let names = property_names(0);
        let short: Vec<&str> = names[..names.len() - 1]
            .iter()
            .map(|s| s.as_str())
            .collect();
        let rows: Vec<Vec<f32>> = (0..2).map(|i| row0(i)[..16].to_vec()).collect();
        write_custom(&path, &short, &rows);
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        assert!(
            matches!(&err, GaussianPlyError::MissingProperty { name, .. } if name == "rot_3"),
            "{err:?}"
        );
        assert!(err.to_string().contains("rot_3"));

        // 10 f_rest properties match no SH degree.
        let path = dir.path().join("rest.ply");
        let mut names: Vec<String> = property_names(0);
        for i in 0..10 {
            names.insert(9 + i, format!("f_rest_{i}"));
        }
        let name_refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let rows: Vec<Vec<f32>> = (0..2)
            .map(|i| {
                let mut r = row0(i);
                r.splice(9..9, [0.0; 10]);
                r
            })
            .collect();
        write_custom(&path, &name_refs, &rows);
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        assert!(
            matches!(err, GaussianPlyError::BadShCount { count: 10, .. }),
            "{err:?}"
        );

        // 9 f_rest with a gap in the numbering (f_rest_3 renamed f_rest_9).
        let path = dir.path().join("gap.ply");
        let mut names: Vec<String> = property_names(1);
        names[9 + 3] = "f_rest_9".into();
        let name_refs: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let rows: Vec<Vec<f32>> = (0..2)
            .map(|i| {
                let mut r = row0(i);
                r.splice(9..9, [0.0; 9]);
                r
            })
            .collect();
        write_custom(&path, &name_refs, &rows);
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        assert!(err.to_string().contains("f_rest_3"), "{err}");

        // A plain point cloud: no Gaussian properties at all.
        let path = dir.path().join("cloud.ply");
        write_custom(&path, &["x", "y", "z"], &[vec![0.0, 1.0, 2.0]]);
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        assert!(
            matches!(err, GaussianPlyError::MissingProperty { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn activated_file_is_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("activated.ply");
        let mut honest = random_model(8, 500, 0);
        // Drop the awkward extremes (a 3.4e38 coordinate would make the scene infinitely wide).
        for i in 0..8 {
            honest.means[i] = honest.means[100 + i];
        }
        let mut activated = honest.clone();
        for o in &mut activated.logit_opacities {
            *o = 1.0 / (1.0 + (-*o).exp());
        }
        for s in activated.log_scales.iter_mut().flatten() {
            *s = s.exp();
        }
        // Saving is not refused: Gaussians is trusted to hold stored values.
        save(&path, &activated, PlyEncoding::BinaryLittleEndian).unwrap();
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        assert!(matches!(err, GaussianPlyError::Activated { .. }), "{err:?}");
        let msg = err.to_string();
        // The evidence and the fix; no tool's flag (each binary adds its own advice).
        assert!(
            msg.contains("ACTIVATED") && msg.contains("Re-export") && !msg.contains("gs-render"),
            "{msg}"
        );
        let forced = load(
            &path,
            &LoadOptions {
                allow_activated: true,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        assert_bit_equal(&activated, &forced);
        // The honest model passes, and so does one with only activated opacities.
        assert!(activation_evidence(&honest).is_none());
        let mut half = honest.clone();
        half.logit_opacities = activated.logit_opacities.clone();
        assert!(activation_evidence(&half).is_none());
        // Scales in millimetres read as log-scales explode: still flagged.
        let mut mm = activated.clone();
        for m in mm.means.iter_mut().flatten() {
            *m *= 1000.0;
        }
        for s in mm.log_scales.iter_mut().flatten() {
            *s *= 1000.0;
        }
        assert!(activation_evidence(&mm).is_some());
    }

    #[test]
    fn save_refuses_inconsistent_or_non_finite_models() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.ply");
        let mut g = random_model(2, 4, 1);
        g.sh.pop();
        let err = save(&path, &g, PlyEncoding::Ascii).unwrap_err();
        assert!(
            matches!(err, GaussianPlyError::InvalidModel { .. }),
            "{err:?}"
        );
        let mut g = random_model(2, 4, 1);
        g.rotations[3][2] = f32::NAN;
        let err = save(&path, &g, PlyEncoding::Ascii).unwrap_err();
        assert!(
            err.to_string().contains("Gaussian 3") && err.to_string().contains("rot_2"),
            "{err}"
        );
        assert!(!path.exists());
        // An empty model is a valid (empty) file.
        let empty = Gaussians::default();
        save(&path, &empty, PlyEncoding::BinaryLittleEndian).unwrap();
        assert_bit_equal(&empty, &load(&path, &LoadOptions::default()).unwrap());
    }

    #[test]
    fn a_zero_quaternion_is_refused_naming_the_vertex() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.ply");
        let mut g = Gaussians::zeros(3, 0);
        for i in 0..3 {
            g.means[i] = [i as f32, 0.0, 0.0];
            g.log_scales[i] = [-3.0; 3];
            g.rotations[i] = if i == 1 {
                [0.0; 4]
            } else {
                [1.0, 0.0, 0.0, 0.0]
            };
            g.logit_opacities[i] = 0.0;
            g.sh[i] = [0.1; 3];
        }
        save(&path, &g, PlyEncoding::Ascii).unwrap();
        let e = load(&path, &LoadOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("vertex 1") && e.contains("all zeros"), "{e}");
    }

    #[test]
    fn ascii_floats_round_trip_through_f64_parsing() {
        let mut rng = Rng::new(99);
        let mut s = String::new();
        for _ in 0..200_000 {
            let v = f32::from_bits(rng.next_u64() as u32);
            if !v.is_finite() {
                continue;
            }
            s.clear();
            ascii_f32(v, &mut s);
            assert_eq!(
                (s.parse::<f64>().unwrap() as f32).to_bits(),
                v.to_bits(),
                "{s}"
            );
            assert_eq!(s.parse::<f32>().unwrap().to_bits(), v.to_bits(), "{s}");
        }
    }
}
