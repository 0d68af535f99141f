//! Streaming reader of `points3D.bin` / `points3D.txt`.
//!
//! Invariants: memory is one buffered-reader buffer ([`READ_BUFFER_BYTES`]) plus at most one
//! kept text line plus the chunk the caller asked for (plus, opened with
//! [`PointsReader::open_tracks`], one point's track); nothing is sized by the file's count.
//! The binary count (or the text `# Number of points: N` comment, when present) is checked
//! against the records actually found: a file that ends early or goes on past its count is an
//! error naming the file and the point. Duplicate point ids are NOT detected here (that would
//! take memory proportional to the cloud); [`super::read_model`] checks them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::binary::{self, Bin};
use super::text::{self, Lines, TrackTokens};
use super::{ColmapPoint, Encoding, TrackElement};
use crate::dataset::{PointChunk, PointSource};
use crate::import::{ImportError, Location};

/// Read buffer of a file-backed reader. Records are 43+ bytes; 256 KiB amortises syscalls to
/// well under one per 5,000 points while staying negligible next to any RAM budget.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Largest number of points a chunk pre-allocates for, whatever `max_points` the caller passes
/// (the vectors still grow to `max_points` if that many points are there): 64 Ki points are
/// 0.98 MiB of f32 xyz + u8 rgb, so a wild `max_points` never causes a large allocation up front.
const MAX_CHUNK_PREALLOC: usize = 64 * 1024;

enum Inner {
    Binary(Bin<Box<dyn BufRead + Send>>),
    Text {
        lines: Lines<Box<dyn BufRead + Send>>,
        /// The first data line, read while looking for the header comment.
        pending: Option<text::Line>,
    },
}

/// Streams the points of a COLMAP `points3D` file (see the module doc). As a
/// [`PointSource`] it is the cloud named `"sfm"`, xyz converted from f64 to f32.
pub struct PointsReader {
    path: PathBuf,
    inner: Inner,
    declared: Option<u64>,
    /// Points returned so far.
    read: u64,
    done: bool,
    /// Opened by [`PointsReader::open_tracks`]: each point's track is read into `track`.
    tracks: Option<Tracks>,
    /// Where the last point returned starts.
    at: Location,
}

/// The track of the last point a track-reading [`PointsReader`] returned.
struct Tracks {
    /// Text: the tokenizer every line streams through.
    tokens: TrackTokens,
    track: Vec<TrackElement>,
}

impl PointsReader {
    /// Opens `path` (a `points3D.bin` or `.txt`, as `encoding` says).
    pub fn open(path: &Path, encoding: super::Encoding) -> Result<PointsReader, ImportError> {
        let f = crate::fsutil::open_file(path).map_err(|e| ImportError::io(path, e))?;
        PointsReader::from_reader(
            BufReader::with_capacity(READ_BUFFER_BYTES, f),
            path,
            encoding,
        )
    }

    /// [`PointsReader::open`] that also reads every point's track
    /// ([`PointsReader::track`]), for `gs-pack convert --sfm-depths`. The track of one point
    /// is held at a time, growing as its elements are read.
    pub fn open_tracks(path: &Path, encoding: Encoding) -> Result<PointsReader, ImportError> {
        let f = crate::fsutil::open_file(path).map_err(|e| ImportError::io(path, e))?;
        PointsReader::from_reader_opts(
            BufReader::with_capacity(READ_BUFFER_BYTES, f),
            path,
            encoding,
            true,
        )
    }

    /// Reads from any buffered reader; `path` only labels errors. Reads the header (the binary
    /// count, or the text comments up to the first data line) now.
    pub fn from_reader(
        reader: impl BufRead + Send + 'static,
        path: impl Into<PathBuf>,
        encoding: Encoding,
    ) -> Result<PointsReader, ImportError> {
        PointsReader::from_reader_opts(reader, path, encoding, false)
    }

    /// [`PointsReader::from_reader`], reading tracks too when `tracks`
    /// ([`PointsReader::open_tracks`]).
    pub fn from_reader_opts(
        reader: impl BufRead + Send + 'static,
        path: impl Into<PathBuf>,
        encoding: Encoding,
        tracks: bool,
    ) -> Result<PointsReader, ImportError> {
        let mut tracks = tracks.then(|| Tracks {
            tokens: TrackTokens::new(),
            track: Vec::new(),
        });
        let path = path.into();
        let reader: Box<dyn BufRead + Send> = Box::new(reader);
        let (inner, declared) = match encoding {
            Encoding::Binary => {
                let mut b = Bin::new(reader);
                let n = binary::read_count(&mut b, &path, "point")?;
                (Inner::Binary(b), Some(n))
            }
            Encoding::Text => {
                let mut lines = Lines::new(reader);
                let mut declared = None;
                let mut pending = None;
                while let Some(line) =
                    lines.next_line_fed(&path, tracks.as_mut().map(|t| &mut t.tokens))?
                {
                    let t = line.text.trim();
                    if t.is_empty() {
                        continue;
                    }
                    if t.starts_with('#') {
                        if declared.is_none() {
                            declared = text::declared_count(t, "points");
                        }
                        continue;
                    }
                    pending = Some(line);
                    break;
                }
                (Inner::Text { lines, pending }, declared)
            }
        };
        Ok(PointsReader {
            path,
            inner,
            declared,
            read: 0,
            done: false,
            tracks,
            at: Location::Record(0),
        })
    }

    /// The track of the point [`PointsReader::next_point`] returned last, when the reader was
    /// opened with [`PointsReader::open_tracks`]; empty otherwise.
    pub fn track(&self) -> &[TrackElement] {
        self.tracks.as_ref().map_or(&[], |t| &t.track)
    }

    /// Where the point [`PointsReader::next_point`] returned last starts: its byte offset
    /// (binary) or line (text), for errors about it.
    pub fn location(&self) -> Location {
        self.at
    }

    /// The file this reader reads (or the label it was given).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next point, or `None` after the last one.
    pub fn next_point(&mut self) -> Result<Option<ColmapPoint>, ImportError> {
        if self.done {
            return Ok(None);
        }
        let k = self.read;
        let path = &self.path;
        let point = match &mut self.inner {
            Inner::Binary(b) => {
                // The binary count is authoritative.
                let n = self.declared.unwrap_or(0);
                if k == n {
                    binary::expect_end(b, path, "point", n)?;
                    None
                } else {
                    let start = b.pos();
                    let track = self.tracks.as_mut().map(|t| &mut t.track);
                    let p = binary::read_point(b, track).map_err(|f| {
                        binary::record_error(path, f, b.pos(), start, "point", k, n)
                    })?;
                    self.at = Location::Byte(start);
                    Some(p)
                }
            }
            Inner::Text { lines, pending } => {
                let mut next = pending.take();
                while next.is_none() {
                    match lines.next_line_fed(path, self.tracks.as_mut().map(|t| &mut t.tokens))? {
                        None => break,
                        Some(l) => {
                            let t = l.text.trim();
                            if !t.is_empty() && !t.starts_with('#') {
                                next = Some(l);
                            }
                        }
                    }
                }
                let at = Location::Line(lines.line_no());
                match next {
                    None => {
                        if let Some(n) = self.declared {
                            if k != n {
                                return Err(ImportError::parse(
                                    path,
                                    at,
                                    format!(
                                        "file ends after {k} points, but the header comment declares {n}: \
                                         the file is truncated; re-export the model (or fix the \
                                         `# Number of points` line)"
                                    ),
                                ));
                            }
                        }
                        None
                    }
                    Some(line) => {
                        if self.declared.is_some_and(|n| k >= n) {
                            return Err(ImportError::parse(
                                path,
                                at,
                                format!(
                                    "more points than the {} the header comment declares; fix or \
                                     delete the `# Number of points` line, or re-export the model",
                                    self.declared.unwrap_or(0)
                                ),
                            ));
                        }
                        let p = text::parse_point(&line)
                            .map_err(|m| ImportError::parse(path, at, format!("point {k}: {m}")))?;
                        if let Some(t) = self.tracks.as_mut() {
                            if let Some(m) = t.tokens.error.take() {
                                return Err(ImportError::parse(
                                    path,
                                    at,
                                    format!("point {k} (id {}): {m}", p.id),
                                ));
                            }
                            std::mem::swap(&mut t.track, &mut t.tokens.elements);
                        }
                        self.at = at;
                        Some(p)
                    }
                }
            }
        };
        match point {
            Some(_) => self.read += 1,
            None => self.done = true,
        }
        Ok(point)
    }
}

impl PointSource for PointsReader {
    type Error = ImportError;

    fn name(&self) -> &str {
        "sfm"
    }

    /// The file's own count: untrusted until the reader has reached it (a corrupt file may
    /// declare 2^60 points), so callers must not allocate from it.
    fn declared_len(&self) -> Option<u64> {
        self.declared
    }

    fn has_labels(&self) -> bool {
        false
    }

    fn has_normals(&self) -> bool {
        false
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError> {
        // A request for 0 points is served as 1, so a caller looping until `None` always ends.
        let max_points = max_points.max(1);
        let cap = max_points.min(MAX_CHUNK_PREALLOC);
        let mut chunk = PointChunk {
            xyz: Vec::with_capacity(cap),
            rgb: Vec::with_capacity(cap),
            labels: None,
            normals: None,
        };
        while chunk.len() < max_points {
            let Some(p) = self.next_point()? else { break };
            let xyz = p.xyz.map(|v| v as f32);
            if xyz.iter().any(|v| !v.is_finite()) {
                return Err(ImportError::invalid(
                    &self.path,
                    format!(
                        "point {} (id {}) at ({}, {}, {}) lies outside the f32 range ramsplat trains \
                         in; recentre or rescale the reconstruction",
                        self.read - 1,
                        p.id,
                        p.xyz[0],
                        p.xyz[1],
                        p.xyz[2]
                    ),
                ));
            }
            chunk.xyz.push(xyz);
            chunk.rgb.push(p.rgb);
        }
        Ok(if chunk.is_empty() { None } else { Some(chunk) })
    }
}
