//! PLY: a general streaming reader ([`PlyReader`], [`parse_header`]) and the point-cloud importer
//! built on it ([`import`]).
//!
//! The reader is format-neutral (it knows nothing of points or Gaussians): the 3DGS loader in
//! `export::ply` reuses it and looks its columns up by name. See [`reader`] for its memory and
//! error invariants and the trailing-data policy.
//!
//! # Point-cloud import
//! `import(path)` takes one `.ply` file or a folder of them (one cloud per file, extension
//! matched case-insensitively, sorted by file name; cloud name = file stem, which must be unique).
//! Headers are parsed and checked at import time; each file is reopened and streamed in chunks
//! when the pack pipeline pulls it, so no cloud is ever held whole and a folder of thousands of
//! files holds no open file handles.
//!
//! Properties of the `vertex` element, matched by exact name:
//! - **position** `x y z`: required, `float` or `double`. Stored as f32 (the pack's point type),
//!   so doubles are rounded. A non-finite position (NaN, ±inf, or a double beyond f32's range)
//!   is an error naming the record: the trainer cannot use such a point and silently dropping
//!   points would make the cloud disagree with its declared count. Under
//!   [`ImportOptions::points_transform`] the position is moved in `f64` first, and it is the
//!   moved position that must fit.
//! - **colour**, the first complete triple of `red green blue`, `r g b`,
//!   `diffuse_red diffuse_green diffuse_blue`. Integer types are taken as 0–255 (a value outside
//!   that range is an error); `float`/`double` are taken as 0–1, scaled by 255, rounded and
//!   clamped (NaN becomes 0). A partial triple is an error. No colour at all: every point gets
//!   grey [`DEFAULT_GREY`] and the scene carries a warning.
//! - **label**, the first present of [`LABEL_NAMES`] (in that order: the generic name first, then
//!   instance-level before semantic-level ids, since per-segment ids are what a pack's labels
//!   mean). Must be an integer type, or a float holding integers; every value must fit `i32`
//!   (a `uint` above `i32::MAX` is an error naming the record). Other label-like properties
//!   present are ignored with a warning naming them.
//! - **normals** `nx ny nz`, any scalar type, stored as f32; a partial triple is an error.
//!   Moved by a points transform's inverse transpose, keeping their length.
//! - Anything else (unknown properties, lists, other elements such as `face`) is ignored.
//!
//! Binary files whose rows are all fixed-size are checked against the file size at import time:
//! a file too short for its header is refused at once, naming the element and the record where
//! the data runs out; trailing bytes are a warning (an error under `--strict`).

pub mod header;
pub mod reader;

use std::path::{Path, PathBuf};

pub use header::{
    parse_header, PlyElement, PlyFormat, PlyHeader, PlyProperty, PropertyKind, ScalarType,
};
pub use reader::PlyReader;

use super::transform::PointsTransform;
use super::{ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Format, PointChunk, PointSource};

/// Colour given to every point of a cloud without colour properties: mid-grey (128 of 255), the
/// neutral value the trainer's SH DC initialisation maps to ~zero.
pub const DEFAULT_GREY: [u8; 3] = [128, 128, 128];

/// Accepted names of the per-point integer label, in order of precedence.
pub const LABEL_NAMES: &[&str] = &[
    "label",
    "instance",
    "instance_id",
    "instance_label",
    "segment",
    "segment_id",
    "segment_label",
    "class",
    "class_id",
    "semantic",
    "semantic_id",
    "semantic_label",
];

/// Accepted colour triples, in order of precedence.
pub const COLOUR_NAMES: &[[&str; 3]] = &[
    ["red", "green", "blue"],
    ["r", "g", "b"],
    ["diffuse_red", "diffuse_green", "diffuse_blue"],
];

/// Initial capacity limit of a chunk's vectors: the caller's `max_points` is honoured, but memory
/// grows with the rows actually read, never with a requested or declared size. 65,536 points is
/// ~1.7 MB of chunk at most before growth.
const INITIAL_CHUNK_CAPACITY: usize = 65_536;

/// Imports one `.ply` file or a folder of them (see the module documentation).
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    super::import_cloud_files(path, &["ply"], Format::Ply, options, open_cloud)
}

/// How the colour columns are interpreted.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ColourScale {
    /// Integer type: 0–255 as is.
    Byte,
    /// Float type: 0–1, ×255.
    Unit,
}

/// Row indices of the columns a cloud uses.
#[derive(Clone, Debug)]
struct Columns {
    xyz: [usize; 3],
    colour: Option<([usize; 3], [&'static str; 3], ColourScale)>,
    label: Option<(usize, &'static str)>,
    normals: Option<[usize; 3]>,
    width: usize,
}

/// Finds the columns of `vertex`; warnings go to `warnings`.
fn columns(
    path: &Path,
    v: &PlyElement,
    warnings: &mut Vec<String>,
) -> Result<Columns, ImportError> {
    let describe = |name: &str| match v.property(name).map(|p| p.kind) {
        Some(PropertyKind::List { .. }) => format!("`{name}` is a list"),
        _ => format!("`{name}` is missing"),
    };
    let mut xyz = [0; 3];
    for (slot, name) in xyz.iter_mut().zip(["x", "y", "z"]) {
        let Some((i, ty)) = v.scalar_index(name) else {
            return Err(ImportError::invalid(
                path,
                format!("element `vertex` needs scalar float properties x, y and z, but {}; this is not a point cloud PLY", describe(name)),
            ));
        };
        if !ty.is_float() {
            return Err(ImportError::invalid(
                path,
                format!("vertex property `{name}` is {}; positions must be float or double (integer coordinates have no known scale)", ty.name()),
            ));
        }
        *slot = i;
    }

    let mut colour = None;
    for names in COLOUR_NAMES {
        let found: Vec<_> = names.iter().map(|n| v.scalar_index(n)).collect();
        if found.iter().all(Option::is_none) {
            continue;
        }
        if let Some(k) = found.iter().position(Option::is_none) {
            return Err(ImportError::invalid(
                path,
                format!(
                    "vertex has colour properties {names:?} but {}; give all three or none",
                    describe(names[k])
                ),
            ));
        }
        let cols: Vec<(usize, ScalarType)> = found.into_iter().flatten().collect();
        let scale = if cols.iter().all(|c| c.1.is_float()) {
            ColourScale::Unit
        } else if cols.iter().all(|c| !c.1.is_float()) {
            ColourScale::Byte
        } else {
            return Err(ImportError::invalid(
                path,
                format!("colour properties {names:?} mix integer and float types"),
            ));
        };
        colour = Some(([cols[0].0, cols[1].0, cols[2].0], *names, scale));
        break;
    }
    if colour.is_none() {
        // A trained 3DGS model has no colour triple, its colour is in SH coefficients: its
        // centres alone are a poor start, and gs-train can start from the whole model.
        let model = ["f_dc_0", "opacity", "scale_0", "rot_0"]
            .iter()
            .all(|n| v.scalar_index(n).is_some());
        warnings.push(format!(
            "{}: no colour properties (red green blue, r g b or diffuse_*); points get grey {}{}",
            path.display(),
            DEFAULT_GREY[0],
            if model {
                " (this is a 3D Gaussian Splatting model: to start training from it, Gaussians \
                 and colours included, use gs-train --init MODEL.ply)"
            } else {
                ""
            }
        ));
    }

    let present: Vec<&'static str> = LABEL_NAMES
        .iter()
        .copied()
        .filter(|n| v.scalar_index(n).is_some())
        .collect();
    let label = present
        .first()
        .map(|&n| (v.scalar_index(n).map_or(0, |(i, _)| i), n));
    if present.len() > 1 {
        warnings.push(format!(
            "{}: several label properties {present:?}; using `{}` and ignoring the others",
            path.display(),
            present[0]
        ));
    }

    let normal_idx: Vec<_> = ["nx", "ny", "nz"]
        .iter()
        .map(|n| v.scalar_index(n))
        .collect();
    let normals = if normal_idx.iter().all(Option::is_some) {
        let n: Vec<usize> = normal_idx.into_iter().flatten().map(|c| c.0).collect();
        Some([n[0], n[1], n[2]])
    } else if let Some(k) = normal_idx
        .iter()
        .position(Option::is_none)
        .filter(|_| normal_idx.iter().any(Option::is_some))
    {
        return Err(ImportError::invalid(
            path,
            format!(
                "vertex has some of the normal properties nx ny nz but {}; give all three or none",
                describe(["nx", "ny", "nz"][k])
            ),
        ));
    } else {
        None
    };

    Ok(Columns {
        xyz,
        colour,
        label,
        normals,
        width: v.scalar_count(),
    })
}

/// One PLY file as the cloud `name` (its header checked now, its rows streamed when the pack
/// pipeline pulls them), for importers whose metadata names a point cloud (nerfstudio's
/// `ply_file_path`).
pub(crate) fn open_cloud(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    Ok(Box::new(PlyCloud::open(
        path,
        name.to_owned(),
        options,
        warnings,
    )?))
}

/// One PLY file as a [`PointSource`]: the header is checked at import, the file is reopened
/// and streamed on the first [`PointSource::next_chunk`].
struct PlyCloud {
    name: String,
    path: PathBuf,
    header: PlyHeader,
    columns: Columns,
    count: u64,
    /// `--points-transform`, applied to positions in `f64` and to normals.
    transform: Option<PointsTransform>,
    reader: Option<PlyReader>,
    row: Vec<f64>,
    done: bool,
}

impl PlyCloud {
    fn open(
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<PlyCloud, ImportError> {
        let reader = PlyReader::open(path)?;
        let header = reader.header().clone();
        drop(reader);
        let Some((_, vertex)) = header.element("vertex") else {
            let names: Vec<&str> = header.elements.iter().map(|e| e.name.as_str()).collect();
            return Err(ImportError::invalid(
                path,
                format!("no `vertex` element (elements: {names:?}); this PLY holds no point cloud"),
            ));
        };
        let columns = columns(path, vertex, warnings)?;
        let count = vertex.count;
        if let Some(expected) = header.expected_binary_len() {
            let actual = std::fs::metadata(path)
                .map_err(|e| ImportError::io(path, e))?
                .len() as u128;
            check_binary_len(path, &header, expected, actual, options, warnings)?;
        }
        Ok(PlyCloud {
            name,
            path: path.to_owned(),
            header,
            row: vec![0.0; columns.width],
            columns,
            count,
            transform: options.points_transform.clone(),
            reader: None,
            done: false,
        })
    }

    fn record_err(&self, record: u64, msg: String) -> ImportError {
        ImportError::parse(
            &self.path,
            Location::Record(record),
            format!("vertex {record}: {msg}"),
        )
    }
}

/// Compares a fixed-row binary file's size with what its header declares.
fn check_binary_len(
    path: &Path,
    header: &PlyHeader,
    expected: u128,
    actual: u128,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<(), ImportError> {
    if actual > expected {
        let msg = format!(
            "{} bytes follow the last declared element and would be ignored; the header may understate a count",
            actual - expected
        );
        if options.strict {
            return Err(ImportError::invalid(
                path,
                format!("{msg} (refused under --strict)"),
            ));
        }
        warnings.push(format!("{}: {msg}", path.display()));
        return Ok(());
    }
    if actual == expected {
        return Ok(());
    }
    // Find the element and row where the data runs out.
    let mut start = header.len_bytes as u128;
    for e in &header.elements {
        let row = e.fixed_row_size().unwrap_or(0) as u128;
        let size = e.count as u128 * row;
        if actual < start + size {
            let record = ((actual.max(start) - start) / row.max(1)) as u64;
            return Err(ImportError::parse(
                path,
                Location::Record(record),
                format!(
                    "element `{}` declares {} rows of {row} bytes but the file ({actual} bytes) ends inside row {record}; the file is truncated or its header overstates the count: re-export it or fix the `element {}` line",
                    e.name, e.count, e.name
                ),
            ));
        }
        start += size;
    }
    Ok(())
}

impl PointSource for PlyCloud {
    type Error = ImportError;

    fn name(&self) -> &str {
        &self.name
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.count)
    }

    fn has_labels(&self) -> bool {
        self.columns.label.is_some()
    }

    fn has_normals(&self) -> bool {
        self.columns.normals.is_some()
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError> {
        if self.done {
            return Ok(None);
        }
        if max_points == 0 {
            return Err(ImportError::invalid(
                &self.path,
                "next_chunk called with max_points = 0",
            ));
        }
        if self.reader.is_none() {
            let mut r = PlyReader::open(&self.path)?;
            if *r.header() != self.header {
                return Err(ImportError::invalid(&self.path, "the file changed since it was imported (its header differs); run the import again"));
            }
            r.select("vertex")?;
            self.reader = Some(r);
        }
        let cap = max_points.min(INITIAL_CHUNK_CAPACITY);
        let c = self.columns.clone();
        let mut chunk = PointChunk {
            xyz: Vec::with_capacity(cap),
            rgb: Vec::with_capacity(cap),
            labels: c.label.map(|_| Vec::with_capacity(cap)),
            normals: c.normals.map(|_| Vec::with_capacity(cap)),
        };
        while chunk.len() < max_points {
            let Some(reader) = self.reader.as_mut() else {
                break;
            };
            let record = reader.rows_read();
            if !reader.read_row(&mut self.row)? {
                self.done = true;
                self.reader = None;
                break;
            }
            let row = &self.row;
            let mut xyz64 = c.xyz.map(|i| row[i]);
            if let Some(t) = &self.transform {
                xyz64 = t.point(xyz64);
            }
            let xyz = xyz64.map(|v| v as f32);
            if !xyz.iter().all(|v| v.is_finite()) {
                let moved = match &self.transform {
                    Some(_) => format!(
                        " (({}, {}, {}) after --points-transform)",
                        xyz64[0], xyz64[1], xyz64[2]
                    ),
                    None => String::new(),
                };
                return Err(self.record_err(
                    record,
                    format!("position ({}, {}, {}){moved} is not finite in f32; remove invalid points before importing", row[c.xyz[0]], row[c.xyz[1]], row[c.xyz[2]]),
                ));
            }
            chunk.xyz.push(xyz);
            let rgb = match c.colour {
                None => DEFAULT_GREY,
                Some((idx, _, ColourScale::Unit)) => {
                    idx.map(|i| (row[i] * 255.0).round().clamp(0.0, 255.0) as u8)
                }
                Some((idx, names, ColourScale::Byte)) => {
                    let mut rgb = [0u8; 3];
                    for k in 0..3 {
                        let v = row[idx[k]];
                        if !(0.0..=255.0).contains(&v) {
                            return Err(self.record_err(
                                record,
                                format!("colour `{}` = {v} is outside 0..255", names[k]),
                            ));
                        }
                        rgb[k] = v as u8;
                    }
                    rgb
                }
            };
            chunk.rgb.push(rgb);
            if let (Some((i, name)), Some(labels)) = (c.label, chunk.labels.as_mut()) {
                let v = row[i];
                if v.fract() != 0.0 || v < i32::MIN as f64 || v > i32::MAX as f64 {
                    return Err(self.record_err(
                        record,
                        format!("label `{name}` = {v} is not an integer in the i32 range (labels are stored as i32); renumber the labels"),
                    ));
                }
                labels.push(v as i32);
            }
            if let (Some(idx), Some(normals)) = (c.normals, chunk.normals.as_mut()) {
                let n = idx.map(|i| row[i] as f32);
                normals.push(match &self.transform {
                    Some(t) => t.normal(n),
                    None => n,
                });
            }
        }
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::io::Write;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Colour {
        None,
        Uchar,
        Float,
    }

    #[derive(Clone, Copy, Debug)]
    struct Opts {
        format: PlyFormat,
        xyz_double: bool,
        colour: Colour,
        labels: bool,
        normals: bool,
        /// An unknown scalar and a list property inside `vertex`.
        extra: bool,
        /// A `face` element after `vertex`.
        face: bool,
    }

    const BASE: Opts = Opts {
        format: PlyFormat::BinaryLittleEndian,
        xyz_double: false,
        colour: Colour::Uchar,
        labels: true,
        normals: false,
        extra: false,
        face: false,
    };

    struct Pt {
        xyz: [f32; 3],
        rgb: [u8; 3],
        label: i32,
        n: [f32; 3],
    }

    fn cloud(n: usize) -> Vec<Pt> {
        let mut rng = Rng::new(7);
        (0..n)
            .map(|i| Pt {
                // Mixed magnitudes and signs, including values with no short decimal form.
                xyz: [
                    (rng.normal() * 10.0) as f32,
                    rng.next_f32() - 0.5,
                    (rng.uniform(-1e6, 1e6)) as f32,
                ],
                rgb: [
                    rng.below(256) as u8,
                    rng.below(256) as u8,
                    (i * 37 % 256) as u8,
                ],
                label: rng.below(200) as i32 - 50,
                n: [rng.next_f32(), -rng.next_f32(), 0.25],
            })
            .collect()
    }

    /// A value written to a PLY: `(type, f64 value)`; the writer encodes it per format.
    fn put(out: &mut Vec<u8>, fmt: PlyFormat, ty: ScalarType, v: f64, sep: &mut bool) {
        let big = fmt == PlyFormat::BinaryBigEndian;
        macro_rules! b {
            ($t:ty) => {{
                let x = v as $t;
                out.extend_from_slice(&if big {
                    x.to_be_bytes()
                } else {
                    x.to_le_bytes()
                })
            }};
        }
        match fmt {
            PlyFormat::Ascii => {
                if *sep {
                    out.push(b' ');
                }
                *sep = true;
                let s = match ty {
                    ScalarType::F32 => format!("{}", v as f32),
                    ScalarType::F64 => format!("{v}"),
                    _ => format!("{}", v as i64),
                };
                out.extend_from_slice(s.as_bytes());
            }
            _ => match ty {
                ScalarType::I8 => b!(i8),
                ScalarType::U8 => b!(u8),
                ScalarType::I16 => b!(i16),
                ScalarType::U16 => b!(u16),
                ScalarType::I32 => b!(i32),
                ScalarType::U32 => b!(u32),
                ScalarType::F32 => b!(f32),
                ScalarType::F64 => b!(f64),
            },
        }
    }

    fn write_ply(points: &[Pt], o: Opts, declared: Option<u64>) -> Vec<u8> {
        use ScalarType::*;
        let xt = if o.xyz_double { F64 } else { F32 };
        let mut h = format!(
            "ply\nformat {} 1.0\ncomment generated by a test\nelement vertex {}\n",
            o.format.keyword(),
            declared.unwrap_or(points.len() as u64)
        );
        h += &format!(
            "property {0} x\nproperty {0} y\nproperty {0} z\n",
            xt.name()
        );
        if o.extra {
            h += "property ushort intensity\nproperty list uchar float weights\n";
        }
        match o.colour {
            Colour::None => {}
            Colour::Uchar => h += "property uchar red\nproperty uchar green\nproperty uchar blue\n",
            Colour::Float => h += "property float red\nproperty float green\nproperty float blue\n",
        }
        if o.normals {
            h += "property float nx\nproperty float ny\nproperty float nz\n";
        }
        if o.labels {
            h += "property int label\n";
        }
        if o.face {
            h += "element face 2\nproperty list uchar int vertex_indices\n";
        }
        h += "end_header\n";
        let mut out = h.into_bytes();
        let f = o.format;
        for (i, p) in points.iter().enumerate() {
            let s = &mut false;
            for v in p.xyz {
                put(&mut out, f, xt, v as f64, s);
            }
            if o.extra {
                put(&mut out, f, U16, (i * 1000 % 65536) as f64, s);
                let k = i % 3;
                put(&mut out, f, U8, k as f64, s);
                for j in 0..k {
                    put(&mut out, f, F32, j as f64 * 0.5, s);
                }
            }
            match o.colour {
                Colour::None => {}
                Colour::Uchar => p
                    .rgb
                    .iter()
                    .for_each(|&c| put(&mut out, f, U8, c as f64, s)),
                Colour::Float => p
                    .rgb
                    .iter()
                    .for_each(|&c| put(&mut out, f, F32, (c as f32 / 255.0) as f64, s)),
            }
            if o.normals {
                p.n.iter().for_each(|&c| put(&mut out, f, F32, c as f64, s));
            }
            if o.labels {
                put(&mut out, f, I32, p.label as f64, s);
            }
            if f == PlyFormat::Ascii {
                out.push(b'\n');
            }
        }
        if o.face {
            for face in [[0, 1, 2], [2, 3, 0]] {
                let s = &mut false;
                put(&mut out, f, U8, 3.0, s);
                face.iter()
                    .for_each(|&v| put(&mut out, f, I32, v as f64, s));
                if f == PlyFormat::Ascii {
                    out.push(b'\n');
                }
            }
        }
        out
    }

    fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
        p
    }

    /// Streams a source to the end in chunks of `chunk` points and concatenates them.
    fn drain(
        src: &mut dyn PointSource<Error = ImportError>,
        chunk: usize,
    ) -> Result<PointChunk, ImportError> {
        let mut all = PointChunk {
            labels: src.has_labels().then(Vec::new),
            normals: src.has_normals().then(Vec::new),
            ..Default::default()
        };
        while let Some(c) = src.next_chunk(chunk)? {
            assert!(!c.is_empty() && c.len() <= chunk);
            assert_eq!(c.rgb.len(), c.len());
            all.xyz.extend(c.xyz);
            all.rgb.extend(c.rgb);
            if let Some(l) = &mut all.labels {
                l.extend(c.labels.unwrap());
            }
            if let Some(n) = &mut all.normals {
                n.extend(c.normals.unwrap());
            }
        }
        Ok(all)
    }

    fn import_one(path: &Path) -> Result<(ImportedScene, PointChunk), ImportError> {
        let mut scene = import(path, &ImportOptions::default())?;
        assert_eq!(scene.clouds.len(), 1);
        let pts = drain(scene.clouds[0].as_mut(), 7)?;
        Ok((scene, pts))
    }

    fn msg(e: &ImportError) -> String {
        e.to_string()
    }

    #[test]
    fn every_encoding_imports_identical_points() {
        let pts = cloud(23);
        let dir = tempfile::tempdir().unwrap();
        let mut n = 0;
        for format in [
            PlyFormat::Ascii,
            PlyFormat::BinaryLittleEndian,
            PlyFormat::BinaryBigEndian,
        ] {
            for bits in 0..64u32 {
                let o = Opts {
                    format,
                    xyz_double: bits & 1 != 0,
                    colour: [Colour::None, Colour::Uchar, Colour::Float][(bits >> 1) as usize % 3],
                    labels: bits & 4 != 0,
                    normals: bits & 8 != 0,
                    extra: bits & 16 != 0,
                    face: bits & 32 != 0,
                };
                let path = write_file(dir.path(), &format!("c{n}.ply"), &write_ply(&pts, o, None));
                n += 1;
                let (scene, got) = import_one(&path).unwrap_or_else(|e| panic!("{o:?}: {e}"));
                assert_eq!(scene.clouds[0].declared_len(), Some(23));
                assert_eq!(scene.clouds[0].name(), format!("c{}", n - 1));
                assert!(scene.views.is_empty() && !scene.no_sfm_points);
                assert_eq!(got.len(), pts.len(), "{o:?}");
                for (i, p) in pts.iter().enumerate() {
                    // Bit-exact: f32 positions survive every encoding and width.
                    assert_eq!(
                        got.xyz[i].map(f32::to_bits),
                        p.xyz.map(f32::to_bits),
                        "{o:?} point {i}"
                    );
                    let want_rgb = if o.colour == Colour::None {
                        DEFAULT_GREY
                    } else {
                        p.rgb
                    };
                    assert_eq!(got.rgb[i], want_rgb, "{o:?} point {i}");
                    if o.normals {
                        assert_eq!(got.normals.as_ref().unwrap()[i], p.n);
                    }
                    if o.labels {
                        assert_eq!(got.labels.as_ref().unwrap()[i], p.label);
                    }
                }
                assert_eq!(got.labels.is_some(), o.labels);
                assert_eq!(got.normals.is_some(), o.normals);
                let warned = scene.warnings.iter().any(|w| w.contains("no colour"));
                assert_eq!(
                    warned,
                    o.colour == Colour::None,
                    "{o:?}: {:?}",
                    scene.warnings
                );
            }
        }
    }

    #[test]
    fn folder_import_sorts_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(5);
        for name in ["b.ply", "a.PLY", "c.ply"] {
            write_file(dir.path(), name, &write_ply(&pts, BASE, None));
        }
        write_file(dir.path(), "notes.txt", b"not a cloud");
        let scene = import(dir.path(), &ImportOptions::default()).unwrap();
        let names: Vec<&str> = scene.clouds.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(scene.format, Format::Ply);

        write_file(dir.path(), "a.ply", &write_ply(&pts, BASE, None));
        let e = import(dir.path(), &ImportOptions::default()).unwrap_err();
        assert!(msg(&e).contains("cloud name `a`"), "{e}");

        let empty = tempfile::tempdir().unwrap();
        assert!(
            msg(&import(empty.path(), &ImportOptions::default()).unwrap_err()).contains("no .ply")
        );
    }

    #[test]
    fn lying_header_names_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(20);
        for o in [
            BASE,
            Opts {
                extra: true,
                ..BASE
            },
            Opts {
                format: PlyFormat::Ascii,
                ..BASE
            },
            Opts {
                format: PlyFormat::BinaryBigEndian,
                extra: true,
                ..BASE
            },
        ] {
            for declared in [21, 1_000_000_000_000_000] {
                let path = write_file(dir.path(), "lie.ply", &write_ply(&pts, o, Some(declared)));
                let e = import_one(&path).map(|_| ()).unwrap_err();
                let s = msg(&e);
                assert!(
                    matches!(
                        e,
                        ImportError::Parse {
                            at: Location::Record(20),
                            ..
                        }
                    ),
                    "{o:?}: {s}"
                );
                assert!(
                    s.contains("lie.ply")
                        && s.contains("`vertex`")
                        && s.contains(&declared.to_string()),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn truncated_binary_fails_at_every_cut() {
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(6);
        for o in [
            BASE,
            Opts {
                extra: true,
                normals: true,
                ..BASE
            },
            Opts {
                format: PlyFormat::BinaryBigEndian,
                xyz_double: true,
                ..BASE
            },
        ] {
            let bytes = write_ply(&pts, o, None);
            for cut in 0..bytes.len() {
                let path = write_file(dir.path(), "cut.ply", &bytes[..cut]);
                assert!(
                    import_one(&path).is_err(),
                    "{o:?}: cut at {cut} of {} was accepted",
                    bytes.len()
                );
                // The reader alone (no file-size check) must fail too.
                let r = PlyReader::from_reader(&bytes[..cut], "mem.ply");
                if let Ok(mut r) = r {
                    let mut row = vec![0.0; r.element().unwrap().scalar_count()];
                    let res = (0..100).try_for_each(|_| r.read_row(&mut row).map(|_| ()));
                    assert!(res.is_err(), "{o:?}: reader accepted cut at {cut}");
                }
            }
        }
    }

    #[test]
    fn face_after_vertex_is_not_read() {
        // Cutting inside the face data does not affect the vertices, which are all read.
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(4);
        let bytes = write_ply(&pts, Opts { face: true, ..BASE }, None);
        let path = write_file(dir.path(), "f.ply", &bytes[..bytes.len() - 3]);
        let (_, got) = import_one(&path).unwrap();
        assert_eq!(got.len(), 4);
    }

    #[test]
    fn bad_ascii_token_names_line_and_property() {
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(3);
        let text = String::from_utf8(write_ply(
            &pts,
            Opts {
                format: PlyFormat::Ascii,
                ..BASE
            },
            None,
        ))
        .unwrap();
        let header_lines = text.lines().position(|l| l == "end_header").unwrap() + 1;
        // Row 1 (line header_lines + 2): its green value becomes "zz".
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let mut toks: Vec<&str> = lines[header_lines + 1].split(' ').collect();
        toks[4] = "zz";
        lines[header_lines + 1] = toks.join(" ");
        let path = write_file(dir.path(), "bad.ply", (lines.join("\n") + "\n").as_bytes());
        let e = import_one(&path).map(|_| ()).unwrap_err();
        let want = (header_lines + 2) as u64;
        assert!(
            matches!(e, ImportError::Parse { at: Location::Line(l), .. } if l == want),
            "{e}"
        );
        assert!(
            msg(&e).contains("`green`") && msg(&e).contains("`zz`"),
            "{e}"
        );

        // A missing value and an extra value.
        for (edit, want_msg) in [(" 1 2", "more than"), ("", "only")] {
            let mut lines2: Vec<String> = text.lines().map(str::to_owned).collect();
            let l = &mut lines2[header_lines];
            if edit.is_empty() {
                let cut = l.rfind(' ').unwrap();
                l.truncate(cut);
            } else {
                l.push_str(edit);
            }
            let path = write_file(
                dir.path(),
                "bad2.ply",
                (lines2.join("\n") + "\n").as_bytes(),
            );
            let e = import_one(&path).map(|_| ()).unwrap_err();
            let want = (header_lines + 1) as u64;
            assert!(
                matches!(e, ImportError::Parse { at: Location::Line(l), .. } if l == want),
                "{e}"
            );
            assert!(msg(&e).contains(want_msg), "{e}");
        }
    }

    #[test]
    fn header_problems_are_clear() {
        let dir = tempfile::tempdir().unwrap();
        let cases: &[(&str, &str)] = &[
            ("ply\nformat ascii 1.0\nelement vertex 1\nproperty float y\nproperty float z\nend_header\n1 2\n", "`x` is missing"),
            ("ply\nformat ascii 1.0\nelement vertex 1\nproperty list uchar float x\nproperty float y\nproperty float z\nend_header\n", "`x` is a list"),
            ("ply\nformat ascii 1.0\nelement vertex 1\nproperty int x\nproperty float y\nproperty float z\nend_header\n", "float or double"),
            ("ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n", "no end_header"),
            ("ply\nformat ascii 1.0\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n", "no `vertex` element"),
            ("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nproperty float y\nproperty float z\nproperty uchar red\nproperty uchar blue\nend_header\n", "`green` is missing"),
            ("ply\nformat ascii 1.0\nelement vertex 0\nproperty float x\nproperty float y\nproperty float z\nproperty float nx\nend_header\n", "`ny` is missing"),
        ];
        for (text, want) in cases {
            let path = write_file(dir.path(), "h.ply", text.as_bytes());
            let e = import(&path, &ImportOptions::default())
                .map(|_| ())
                .unwrap_err();
            assert!(
                msg(&e).contains(want) && msg(&e).contains("h.ply"),
                "{e} should contain {want:?}"
            );
        }
    }

    #[test]
    fn label_and_colour_rules() {
        let dir = tempfile::tempdir().unwrap();
        let head = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\n";
        // uint above i32::MAX is refused, naming the record.
        let text = format!("{head}property uint segment\nend_header\n0 0 0 5\n0 0 0 4294967295\n");
        let path = write_file(dir.path(), "l.ply", text.as_bytes());
        let e = import_one(&path).map(|_| ()).unwrap_err();
        assert!(
            matches!(
                e,
                ImportError::Parse {
                    at: Location::Record(1),
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            msg(&e).contains("`segment`") && msg(&e).contains("i32"),
            "{e}"
        );

        // Precedence: `label` wins over `class`, with a warning; float colours clamp and round.
        let text = format!("{head}property int class\nproperty float r\nproperty float g\nproperty float b\nproperty short label\nend_header\n0 0 0 9 1.5 -0.2 0.5 -3\n1 1 1 9 0.002 0.998 nan 7\n");
        let path = write_file(dir.path(), "p.ply", text.as_bytes());
        let (scene, got) = import_one(&path).unwrap();
        assert_eq!(got.labels, Some(vec![-3, 7]));
        assert_eq!(got.rgb, vec![[255, 0, 128], [1, 254, 0]]);
        assert!(
            scene
                .warnings
                .iter()
                .any(|w| w.contains("\"label\", \"class\"")),
            "{:?}",
            scene.warnings
        );

        // Integer colours above 255 are refused.
        let text = format!("{head}property ushort red\nproperty ushort green\nproperty ushort blue\nend_header\n0 0 0 1 2 3\n0 0 0 1 256 3\n");
        let path = write_file(dir.path(), "c.ply", text.as_bytes());
        let e = import_one(&path).map(|_| ()).unwrap_err();
        assert!(
            matches!(
                e,
                ImportError::Parse {
                    at: Location::Record(1),
                    ..
                }
            ) && msg(&e).contains("`green`"),
            "{e}"
        );

        // Non-finite position.
        let text = format!("{head}end_header\n0 0 0\n0 nan 0\n");
        let path = write_file(dir.path(), "n.ply", text.as_bytes());
        let e = import_one(&path).map(|_| ()).unwrap_err();
        assert!(
            matches!(
                e,
                ImportError::Parse {
                    at: Location::Record(1),
                    ..
                }
            ) && msg(&e).contains("not finite"),
            "{e}"
        );
    }

    #[test]
    fn trailing_bytes_warn_or_refuse_under_strict() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = write_ply(&cloud(3), BASE, None);
        bytes.extend_from_slice(b"junk");
        let path = write_file(dir.path(), "t.ply", &bytes);
        let (scene, got) = import_one(&path).unwrap();
        assert_eq!(got.len(), 3);
        assert!(
            scene.warnings.iter().any(|w| w.contains("4 bytes follow")),
            "{:?}",
            scene.warnings
        );
        let strict = ImportOptions {
            strict: true,
            ..Default::default()
        };
        assert!(msg(&import(&path, &strict).unwrap_err()).contains("--strict"));
    }

    #[test]
    fn zero_vertices_stream_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), "e.ply", &write_ply(&[], BASE, None));
        let (_, got) = import_one(&path).unwrap();
        assert!(got.is_empty());
    }

    #[test]
    fn a_gaussian_model_as_a_cloud_points_to_gs_train_init() {
        let dir = tempfile::tempdir().unwrap();
        let mut model = String::from(
            "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n\
             property float z\n",
        );
        for p in ["f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "rot_0"] {
            model += &format!("property float {p}\n");
        }
        model += "end_header\n0 0 0 0.1 0.2 0.3 1 -2 1\n1 1 1 0.1 0.2 0.3 1 -2 1\n";
        let path = write_file(dir.path(), "model.ply", model.as_bytes());
        let scene = import(&path, &ImportOptions::default()).unwrap();
        assert_eq!(scene.warnings.len(), 1, "{:?}", scene.warnings);
        assert!(
            scene.warnings[0]
                .contains("points get grey 128 (this is a 3D Gaussian Splatting model")
                && scene.warnings[0].contains("gs-train --init MODEL.ply"),
            "{:?}",
            scene.warnings
        );
        // A plain cloud without colour gets the plain warning.
        let plain = "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\n\
                     property float z\nproperty float opacity\nend_header\n0 0 0 1\n";
        let path = write_file(dir.path(), "plain.ply", plain.as_bytes());
        let scene = import(&path, &ImportOptions::default()).unwrap();
        assert!(
            scene.warnings[0].ends_with("points get grey 128"),
            "{:?}",
            scene.warnings
        );
    }

    const MOSD: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/mosd_kinect_labeled/ply"
    );

    #[test]
    fn mosd_kinect_clouds() {
        let dir = Path::new(MOSD);
        let mut scene = import(dir, &ImportOptions::default()).unwrap();
        assert!(scene.warnings.is_empty(), "{:?}", scene.warnings);
        let names: Vec<&str> = scene.clouds.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["learn33", "test45", "test63"]);
        // Counts from the headers (and SOURCE.md): 307,200 pixels minus the NaN ones each drops.
        let want = [(179_131u64, 9usize), (173_769, 9), (182_372, 25)];
        for (cloud, (count, n_labels)) in scene.clouds.iter_mut().zip(want) {
            assert_eq!(cloud.declared_len(), Some(count));
            assert!(cloud.has_labels() && !cloud.has_normals());
            let big = drain(cloud.as_mut(), 1 << 20).unwrap();
            assert_eq!(big.len() as u64, count);
            assert!(big.xyz.iter().flatten().all(|v| v.is_finite()));
            let mut labels = big.labels.clone().unwrap();
            labels.sort_unstable();
            labels.dedup();
            assert_eq!(labels.len(), n_labels, "{}: {labels:?}", cloud.name());
            // Inside the bounding box SOURCE.md gives (metres, Kinect frame, z forward).
            assert!(big
                .xyz
                .iter()
                .all(|p| p[2] > 0.5 && p[2] < 1.7 && p[0].abs() < 0.6 && p[1].abs() < 0.42));
            if cloud.name() == "test63" {
                assert!(labels.contains(&101), "{labels:?}");
                assert_eq!(
                    labels,
                    [
                        1, 2, 3, 4, 5, 6, 20, 30, 40, 50, 60, 70, 80, 90, 100, 101, 102, 110, 120,
                        130, 131, 140, 150, 151, 160
                    ]
                );
            }
            // A fresh source streamed in small chunks gives the same points.
            let mut again = import(
                &dir.join(format!("{}.ply", cloud.name())),
                &ImportOptions::default(),
            )
            .unwrap();
            let small = drain(again.clouds[0].as_mut(), 1000).unwrap();
            assert!(small == big, "{}: chunked read differs", cloud.name());
        }
    }
}
