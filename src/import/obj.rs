//! Wavefront OBJ meshes read as point clouds: the vertices of the meshes that photogrammetry
//! tools export (Meshroom's `texturedMesh.obj`, RealityCapture's, Metashape's, Polycam's), as
//! the points training starts from (`gs-pack convert … --points mesh.obj`) or as a cloud of
//! their own (`gs-pack convert mesh.obj`). A mesh's vertices lie on the reconstructed surfaces,
//! denser than SfM points, which is what 3DGS's initialisation wants.
//!
//! # What is read
//! Only the geometric vertices, the `v` lines: `v x y z`, `v x y z w` (the weight of rational
//! curves, ignored) or `v x y z r g b` (the vertex colour MeshLab, Meshroom and most exporters
//! write; a seventh value, alpha, is ignored). Faces, texture coordinates (`vt`), normals
//! (`vn`: they belong to face corners, not to vertices), groups, materials and comments are
//! skipped. Colours are in [0, 1] as the extension defines them, or 0–255 in a file any of whose
//! colour values is above 1 (some exporters write bytes); a file without colours gives every
//! point [`super::ply::DEFAULT_GREY`], with a warning. Under
//! [`ImportOptions::points_transform`] each position is moved in `f64` before rounding.
//!
//! # Two passes
//! The cloud is read twice, never held: when opened, to check every vertex line, count the
//! vertices (the cloud's declared length) and tell the colour scale; then line by line as the
//! pack pipeline pulls chunks. A vertex line with fewer than three numbers, a value that is not
//! a number or not finite, a file where some vertices have a colour and others none, bytes
//! that are not text, a line longer than 1 MiB (a file without line breaks is not read whole)
//! and a file without any vertex are errors naming the file and the line.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::input::{Input, InputCloud, InputReader};
use super::transform::PointsTransform;
use super::{ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Format, PointChunk, PointSource};

/// Imports an OBJ file, or a folder of them (each a cloud named by its file stem).
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    super::import_cloud_files(path, &["obj"], Format::Obj, options, open_cloud)
}

/// One OBJ file as the cloud `name` (checked and counted now, streamed when the pack pipeline
/// pulls it).
pub(crate) fn open_cloud(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    ObjCloud::boxed(Input::File(path.to_owned()), path, name, options, warnings)
}

/// An OBJ held in memory as the cloud `name`, with the file importer's checks and warnings;
/// `path` only names it in messages. For the fuzz target and tests.
pub fn cloud_from_bytes(
    bytes: impl Into<Arc<[u8]>>,
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    ObjCloud::boxed(Input::Bytes(bytes.into()), path, name, options, warnings)
}

/// How a file's vertex colours read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Colours {
    /// No vertex has one.
    None,
    /// In [0, 1].
    Unit,
    /// 0–255 (some value is above 1).
    Bytes,
}

/// One parsed vertex line.
struct Vertex {
    xyz: [f64; 3],
    rgb: Option<[f64; 3]>,
}

/// The vertex of `line` (`None` for any other line), or what is wrong with it.
fn vertex(line: &str) -> Result<Option<Vertex>, String> {
    let mut words = line.split_ascii_whitespace();
    if words.next() != Some("v") {
        return Ok(None);
    }
    let mut v = [0f64; 7];
    let mut n = 0;
    for w in words {
        if w.starts_with('#') {
            break;
        }
        if n == v.len() {
            return Err(format!(
                "a vertex with more than {} values; the file is damaged",
                v.len()
            ));
        }
        v[n] = match w.parse::<f64>() {
            Ok(x) if x.is_finite() => x,
            Ok(x) => return Err(format!("value {x} is not a finite number")),
            Err(_) => return Err(format!("{w:?} is not a number")),
        };
        n += 1;
    }
    let xyz = [v[0], v[1], v[2]];
    match n {
        3 | 4 => Ok(Some(Vertex { xyz, rgb: None })),
        6 | 7 => Ok(Some(Vertex {
            xyz,
            rgb: Some([v[3], v[4], v[5]]),
        })),
        _ => Err(format!(
            "a vertex of {n} values; OBJ writes x y z, x y z w or x y z r g b"
        )),
    }
}

/// An OBJ file's vertices, streamed (module doc).
struct ObjCloud {
    input: Input,
    path: PathBuf,
    name: String,
    vertices: u64,
    colours: Colours,
    transform: Option<PointsTransform>,
    /// The streaming pass, opened at the first chunk: the reader, its line buffer and the
    /// 1-based number of the line last read.
    reader: Option<BufReader<InputReader>>,
    buf: String,
    line: u64,
    emitted: u64,
}

impl ObjCloud {
    fn error(&self, line: u64, msg: impl Into<String>) -> ImportError {
        ImportError::parse(&self.path, Location::Line(line), msg)
    }

    /// The next vertex of the stream with its line number, `None` at the end.
    fn next_vertex(&mut self) -> Result<Option<(Vertex, u64)>, ImportError> {
        loop {
            let reader = match &mut self.reader {
                Some(r) => r,
                None => {
                    let r = self
                        .input
                        .open_at(0)
                        .map_err(|e| ImportError::io(&self.path, e))?;
                    self.reader.insert(BufReader::new(r))
                }
            };
            self.buf.clear();
            let read = read_line(reader, &mut self.buf).map_err(|e| match e {
                LineError::Io(e) => ImportError::io(&self.path, e),
                LineError::NotText => ImportError::parse(
                    &self.path,
                    Location::Line(self.line + 1),
                    "not text (OBJ is a text format): is this a binary file named .obj?",
                ),
                LineError::TooLong => ImportError::parse(
                    &self.path,
                    Location::Line(self.line + 1),
                    format!(
                        "a line longer than {} MiB (OBJ lines are short): is this a binary \
                         file named .obj?",
                        MAX_LINE >> 20
                    ),
                ),
            })?;
            if read == 0 {
                return Ok(None);
            }
            self.line += 1;
            let line = self.line;
            match vertex(&self.buf) {
                Ok(Some(v)) => return Ok(Some((v, line))),
                Ok(None) => continue,
                Err(msg) => return Err(self.error(line, msg)),
            }
        }
    }

    /// The packed position and colour of vertex `v` on line `line`.
    fn point(&self, v: &Vertex, line: u64) -> Result<([f32; 3], [u8; 3]), ImportError> {
        let xyz = match &self.transform {
            Some(t) => t.point(v.xyz),
            None => v.xyz,
        };
        let pos = xyz.map(|c| c as f32);
        if let Some(k) = (0..3).find(|&k| !pos[k].is_finite()) {
            let how = if self.transform.is_some() {
                "moved by --points-transform to"
            } else {
                "at"
            };
            return Err(self.error(
                line,
                format!(
                    "vertex ({}, {}, {}) is {how} `{}` = {}, beyond f32's range (positions are \
                     stored as f32)",
                    v.xyz[0],
                    v.xyz[1],
                    v.xyz[2],
                    ["x", "y", "z"][k],
                    xyz[k]
                ),
            ));
        }
        let rgb = match (self.colours, v.rgb) {
            (Colours::None, _) | (_, None) => super::ply::DEFAULT_GREY,
            (Colours::Unit, Some(c)) => c.map(|x| (x * 255.0).round().clamp(0.0, 255.0) as u8),
            (Colours::Bytes, Some(c)) => c.map(|x| x.round().clamp(0.0, 255.0) as u8),
        };
        Ok((pos, rgb))
    }
}

/// The longest line read (a vertex line is well under 200 bytes): a file without line breaks
/// is refused at this length instead of read whole into memory.
const MAX_LINE: u64 = 1 << 20;

/// What reading a line can fail with.
enum LineError {
    Io(std::io::Error),
    NotText,
    TooLong,
}

/// Reads one line into `buf` (`\n` included), refusing bytes that are not UTF-8 and lines
/// longer than [`MAX_LINE`]: 0 at the end.
fn read_line(r: &mut impl BufRead, buf: &mut String) -> Result<usize, LineError> {
    match r.by_ref().take(MAX_LINE + 1).read_line(buf) {
        Ok(n) if n as u64 > MAX_LINE => Err(LineError::TooLong),
        Ok(n) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(LineError::NotText),
        Err(e) => Err(LineError::Io(e)),
    }
}

impl InputCloud for ObjCloud {
    fn open(
        input: Input,
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Self, ImportError> {
        let mut cloud = ObjCloud {
            input,
            path: path.to_owned(),
            name,
            vertices: 0,
            colours: Colours::None,
            transform: options.points_transform.clone(),
            reader: None,
            buf: String::new(),
            line: 0,
            emitted: 0,
        };
        // The checking pass: every vertex line, the count, the colour scale.
        let (mut coloured, mut plain, mut above_one) = (0u64, 0u64, false);
        let mut first = [None::<u64>; 2];
        while let Some((v, line)) = cloud.next_vertex()? {
            match v.rgb {
                Some(c) => {
                    coloured += 1;
                    first[0].get_or_insert(line);
                    above_one |= c.iter().any(|&x| x > 1.0);
                }
                None => {
                    plain += 1;
                    first[1].get_or_insert(line);
                }
            }
            cloud.point(&v, line)?;
            if coloured > 0 && plain > 0 {
                let (c, p) = (first[0].unwrap_or(0), first[1].unwrap_or(0));
                return Err(cloud.error(
                    line,
                    format!(
                        "some vertices have a colour (the first on line {c}) and others none \
                         (the first on line {p}); the file is damaged: export it again"
                    ),
                ));
            }
        }
        cloud.vertices = coloured + plain;
        if cloud.vertices == 0 {
            return Err(ImportError::invalid(
                path,
                "no vertex (`v` line): not an OBJ mesh, or an empty one",
            ));
        }
        cloud.colours = match (coloured > 0, above_one) {
            (false, _) => Colours::None,
            (true, false) => Colours::Unit,
            (true, true) => Colours::Bytes,
        };
        if cloud.colours == Colours::None {
            warnings.push(format!(
                "{}: its vertices have no colour (`v x y z r g b`); points get grey {}",
                path.display(),
                super::ply::DEFAULT_GREY[0]
            ));
        }
        // The stream starts again from the top.
        cloud.reader = None;
        cloud.line = 0;
        Ok(cloud)
    }
}

impl PointSource for ObjCloud {
    type Error = ImportError;

    fn name(&self) -> &str {
        &self.name
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.vertices)
    }

    fn has_labels(&self) -> bool {
        false
    }

    fn has_normals(&self) -> bool {
        false
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError> {
        let want = (self.vertices - self.emitted).min(max_points as u64) as usize;
        if want == 0 {
            return Ok(None);
        }
        let mut chunk = PointChunk {
            xyz: Vec::with_capacity(want),
            rgb: Vec::with_capacity(want),
            labels: None,
            normals: None,
        };
        while chunk.len() < want {
            let Some((v, line)) = self.next_vertex()? else {
                return Err(self.error(
                    self.line,
                    format!(
                        "the file ends after {} of the {} vertices it held when it was opened; \
                         was it changed while packing?",
                        self.emitted + chunk.len() as u64,
                        self.vertices
                    ),
                ));
            };
            let (xyz, rgb) = self.point(&v, line)?;
            chunk.xyz.push(xyz);
            chunk.rgb.push(rgb);
        }
        self.emitted += chunk.len() as u64;
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(text: &str, options: &ImportOptions) -> Result<(Vec<PointChunk>, Vec<String>), String> {
        let mut warnings = Vec::new();
        let mut cloud = cloud_from_bytes(
            text.as_bytes().to_vec(),
            Path::new("mesh.obj"),
            "mesh",
            options,
            &mut warnings,
        )
        .map_err(|e| e.to_string())?;
        let mut chunks = Vec::new();
        while let Some(c) = cloud.next_chunk(2).map_err(|e| e.to_string())? {
            chunks.push(c);
        }
        Ok((chunks, warnings))
    }

    fn points(chunks: &[PointChunk]) -> Vec<([f32; 3], [u8; 3])> {
        chunks
            .iter()
            .flat_map(|c| c.xyz.iter().copied().zip(c.rgb.iter().copied()))
            .collect()
    }

    /// The vertices of a mesh with faces, texture coordinates, normals, groups and comments,
    /// in order; colours in [0, 1] scaled to bytes, a weight ignored.
    #[test]
    fn vertices_are_read_and_everything_else_skipped() {
        let text = "# exported\nmtllib mesh.mtl\no part\nv 1 2 3 1.0 0.5 0.0\nvt 0.5 0.5\n\
                    vn 0 0 1\nv -1.5 0 2e1 0 0 1 # a comment\n  v 0 0 0 0.2 0.4 0.6 1\n\
                    f 1/1/1 2/1/1 3/1/1\nusemtl m\ng group\n";
        let (chunks, warnings) = open(text, &ImportOptions::default()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            points(&chunks),
            [
                ([1.0, 2.0, 3.0], [255, 128, 0]),
                ([-1.5, 0.0, 20.0], [0, 0, 255]),
                ([0.0, 0.0, 0.0], [51, 102, 153])
            ]
        );
        // Byte colours, told by a value above 1; no colours: grey, with a warning.
        let (chunks, _) = open("v 0 0 0 255 0 10\nv 1 1 1 0.5 1 1\n", &Default::default()).unwrap();
        assert_eq!(points(&chunks)[0].1, [255, 0, 10]);
        assert_eq!(points(&chunks)[1].1, [1, 1, 1]);
        let (chunks, warnings) = open("v 0 0 0\nv 1 2 3 1\n", &Default::default()).unwrap();
        assert_eq!(points(&chunks)[1], ([1.0, 2.0, 3.0], [128; 3]));
        assert!(warnings[0].contains("no colour"), "{warnings:?}");
    }

    /// `--points-transform` moves every vertex in f64 before rounding.
    #[test]
    fn the_points_transform_moves_the_vertices() {
        let t = PointsTransform::new(
            [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 2.0]],
            [10.0, 0.0, 0.5],
        )
        .unwrap();
        let options = ImportOptions {
            points_transform: Some(t),
            ..Default::default()
        };
        let (chunks, _) = open("v 1 2 3\n", &options).unwrap();
        assert_eq!(points(&chunks)[0].0, [8.0, 1.0, 6.5]);
    }

    /// Damage is refused naming the line; every truncation and 2,000 seeded corruptions of a
    /// valid file give a cloud or an error, never a panic.
    #[test]
    fn damaged_files_are_refused_by_line() {
        let refused = |text: &str, want: &[&str]| {
            let e = open(text, &ImportOptions::default())
                .map(|_| ())
                .unwrap_err();
            assert!(e.contains("mesh.obj"), "{e}");
            for w in want {
                assert!(e.contains(w), "missing {w:?} in: {e}");
            }
        };
        refused("v 1 2\n", &["line 1", "a vertex of 2 values"]);
        refused("vt 0 0\nv 1 2 x\n", &["line 2", "\"x\" is not a number"]);
        refused("v 1 2 inf\n", &["line 1", "not a finite number"]);
        refused("v 1e39 0 0\n", &["line 1", "beyond f32's range"]);
        refused(
            "v 0 0 0 1 1 1\nv 1 1 1\n",
            &[
                "line 2",
                "colour (the first on line 1) and others none (the first on line 2)",
            ],
        );
        refused("f 1 2 3\n# no vertices\n", &["no vertex"]);
        refused("v 1 2 3 4 5 6 7 8\n", &["more than 7 values"]);
        let mut bad = b"v 1 2 3\n".to_vec();
        bad.extend_from_slice(&[0xff, 0xfe, b'\n']);
        let mut warnings = Vec::new();
        let e = cloud_from_bytes(
            bad,
            Path::new("mesh.obj"),
            "mesh",
            &Default::default(),
            &mut warnings,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("line 2") && e.contains("not text"), "{e}");
        let long = format!("v 1 2 3\n# {}\n", "x".repeat(MAX_LINE as usize));
        let e = open(&long, &Default::default()).map(|_| ()).unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("longer than 1 MiB"),
            "{e}"
        );

        let whole = "v 0.5 1 2 0.1 0.2 0.3\nvt 0 1\nv 3 4 5 0.4 0.5 0.6\nf 1 2 1\n";
        for cut in 0..whole.len() {
            let _ = open(&whole[..cut], &Default::default());
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"v0123456789.-e # \nfntx";
        for _ in 0..2000 {
            let mut b = whole.as_bytes().to_vec();
            for _ in 0..1 + next() % 3 {
                let at = (next() % b.len() as u64) as usize;
                b[at] = alphabet[(next() % alphabet.len() as u64) as usize];
            }
            if let Ok((chunks, _)) = open(&String::from_utf8_lossy(&b), &Default::default()) {
                assert!(chunks.iter().all(|c| c.is_consistent()));
            }
        }
    }
}
