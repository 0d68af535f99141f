//! COLMAP's text sparse-model encoding (`cameras.txt`, `images.txt`, `points3D.txt`).
//!
//! Format, as COLMAP's `Write*Text` functions write it: lines starting with `#` are comments
//! and blank lines are ignored, except that every image takes **two** lines: the data line
//! `IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME` and, right after it, a line of 2D
//! observations (possibly empty) that is skipped here without being stored. Cameras are
//! `CAMERA_ID MODEL_NAME WIDTH HEIGHT PARAMS...`, points `POINT3D_ID X Y Z R G B ERROR TRACK...`.
//! The header comments `# Number of cameras: N` (`images`, `points`) are optional; when
//! present the record count must match, which catches files truncated at a line boundary.
//!
//! Invariants: at most [`MAX_LINE_BYTES`] of any line are kept in memory (longer observation
//! and track tails are streamed past; a track read for `--sfm-depths` is parsed as it streams
//! by [`TrackTokens`], its elements growing as read), every error names the file and the
//! 1-based line, and
//! the writer prints floats in Rust's shortest round-trip form so text round trips are exact.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Write};
use std::path::Path;

use super::binary::duplicate_image;
use super::{
    camera_model_by_id, camera_model_by_name, check_camera, check_image, check_point, ColmapCamera,
    ColmapImage, ColmapPoint, Point2D, TrackElement, CAMERA_MODELS,
};
use crate::import::{ImportError, Location};

/// Longest line prefix kept in memory. The longest line whose content is parsed is an image
/// line: nine numbers (at most ~330 characters each even for 1e±300 written without an
/// exponent) plus a name, which is a relative path of at most PATH_MAX = 4096 bytes on Linux,
/// so under 8 KiB; 64 KiB leaves a wide margin and still bounds memory per line.
pub(super) const MAX_LINE_BYTES: usize = 64 * 1024;

/// One line as read: the kept prefix (trailing newline removed) and how it ended.
pub(super) struct Line {
    pub(super) text: String,
    /// The line was longer than [`MAX_LINE_BYTES`]; `text` is a prefix.
    pub(super) clipped: bool,
    /// The line ended with `\n` (false only for the last line of a file).
    pub(super) newline: bool,
}

/// A line reader that counts lines and never holds more than [`MAX_LINE_BYTES`] of one.
pub(super) struct Lines<R> {
    r: R,
    /// Lines read so far, i.e. the 1-based number of the last line returned.
    line: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub(super) fn new(r: R) -> Lines<R> {
        Lines {
            r,
            line: 0,
            buf: Vec::new(),
        }
    }

    /// 1-based number of the last line returned (0 before the first).
    pub(super) fn line_no(&self) -> u64 {
        self.line
    }

    /// Reads one line, keeping at most `keep` bytes of it (0 skips it without storing).
    /// `None` at the end of the file.
    fn read(&mut self, keep: usize) -> io::Result<Option<(bool, bool)>> {
        self.read_fed(keep, None)
    }

    /// [`Lines::read`], also handing every byte of the line, kept or not, to `feed` (reset
    /// first), so a track longer than the kept prefix is still read whole.
    fn read_fed(
        &mut self,
        keep: usize,
        mut feed: Option<&mut TrackTokens>,
    ) -> io::Result<Option<(bool, bool)>> {
        if let Some(f) = feed.as_deref_mut() {
            f.reset();
        }
        self.buf.clear();
        let mut any = false;
        let mut clipped = false;
        loop {
            let avail = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if !any {
                    return Ok(None);
                }
                if let Some(f) = feed.as_deref_mut() {
                    f.finish();
                }
                self.line += 1;
                return Ok(Some((clipped, false)));
            }
            any = true;
            let (len, done) = match avail.iter().position(|&c| c == b'\n') {
                Some(i) => (i, true),
                None => (avail.len(), false),
            };
            if let Some(f) = feed.as_deref_mut() {
                f.feed(&avail[..len]);
                if done {
                    f.finish();
                }
            }
            let room = keep.saturating_sub(self.buf.len());
            if len > room {
                clipped = true;
            }
            self.buf.extend_from_slice(&avail[..len.min(room)]);
            self.r.consume(len + usize::from(done));
            if done {
                self.line += 1;
                return Ok(Some((clipped, true)));
            }
        }
    }

    /// The next line, its kept prefix decoded as UTF-8 (a clipped line loses a partial
    /// character at the cut; an unclipped line must be valid UTF-8).
    pub(super) fn next_line(&mut self, path: &Path) -> Result<Option<Line>, ImportError> {
        self.next_line_fed(path, None)
    }

    /// [`Lines::next_line`], handing the whole line to `feed` too ([`Lines::read_fed`]).
    pub(super) fn next_line_fed(
        &mut self,
        path: &Path,
        feed: Option<&mut TrackTokens>,
    ) -> Result<Option<Line>, ImportError> {
        let Some((clipped, newline)) = self
            .read_fed(MAX_LINE_BYTES, feed)
            .map_err(|e| ImportError::io(path, e))?
        else {
            return Ok(None);
        };
        let text = match std::str::from_utf8(&self.buf) {
            Ok(s) => s.to_owned(),
            Err(e) if clipped && e.error_len().is_none() => {
                String::from_utf8_lossy(&self.buf[..e.valid_up_to()]).into_owned()
            }
            Err(e) => {
                return Err(ImportError::parse(
                    path,
                    Location::Line(self.line),
                    format!(
                        "line is not valid UTF-8 (bad byte at column {}); COLMAP text files are \
                         UTF-8: re-export the model",
                        e.valid_up_to() + 1
                    ),
                ))
            }
        };
        Ok(Some(Line {
            text,
            clipped,
            newline,
        }))
    }
}

/// Longest token of a track read whole: a u32 has at most 10 digits; a few more allow a sign
/// and leading zeros. A longer token is no IMAGE_ID or POINT2D_IDX.
const MAX_TRACK_TOKEN: usize = 24;

/// Reads the track of a `points3D.txt` line as its bytes stream past ([`Lines::read_fed`]):
/// skips the first [`TrackTokens::FIXED_FIELDS`] fields, then pairs the rest into
/// [`TrackElement`]s, which grow as they are read. Holds at most one token besides them; the
/// first problem is kept in `error` (the rest of the line is then only counted).
pub(super) struct TrackTokens {
    /// Fields seen on this line so far.
    field: usize,
    token: [u8; MAX_TRACK_TOKEN],
    /// Bytes of the current token (may exceed [`MAX_TRACK_TOKEN`]; only that many are kept).
    token_len: usize,
    /// The IMAGE_ID waiting for its POINT2D_IDX.
    image_id: Option<u32>,
    pub(super) elements: Vec<TrackElement>,
    pub(super) error: Option<String>,
}

impl TrackTokens {
    /// `POINT3D_ID X Y Z R G B ERROR` come before the track.
    const FIXED_FIELDS: usize = 8;

    pub(super) fn new() -> TrackTokens {
        TrackTokens {
            field: 0,
            token: [0; MAX_TRACK_TOKEN],
            token_len: 0,
            image_id: None,
            elements: Vec::new(),
            error: None,
        }
    }

    fn reset(&mut self) {
        self.field = 0;
        self.token_len = 0;
        self.image_id = None;
        self.elements.clear();
        self.error = None;
    }

    fn feed(&mut self, bytes: &[u8]) {
        for &c in bytes {
            if c.is_ascii_whitespace() {
                self.end_token();
            } else {
                if self.token_len < MAX_TRACK_TOKEN {
                    self.token[self.token_len] = c;
                }
                self.token_len += 1;
            }
        }
    }

    fn end_token(&mut self) {
        if self.token_len == 0 {
            return;
        }
        let field = self.field;
        self.field += 1;
        let len = self.token_len;
        self.token_len = 0;
        if field < Self::FIXED_FIELDS || self.error.is_some() {
            return;
        }
        let k = field - Self::FIXED_FIELDS;
        let what = if k.is_multiple_of(2) {
            "IMAGE_ID"
        } else {
            "POINT2D_IDX"
        };
        let kept = &self.token[..len.min(MAX_TRACK_TOKEN)];
        let value = (len <= MAX_TRACK_TOKEN)
            .then(|| std::str::from_utf8(kept).ok()?.parse::<u32>().ok())
            .flatten();
        let Some(value) = value else {
            self.error = Some(format!(
                "track value {k} ({what}) {:?}{} is not a valid u32; the track is \
                 IMAGE_ID POINT2D_IDX pairs: fix the line or re-export the model",
                String::from_utf8_lossy(kept),
                if len > MAX_TRACK_TOKEN { "…" } else { "" }
            ));
            return;
        };
        match self.image_id.take() {
            None => self.image_id = Some(value),
            Some(image_id) => self.elements.push(TrackElement {
                image_id,
                point2d_idx: value,
            }),
        }
    }

    /// Ends the line: the last token, and a lone IMAGE_ID left over.
    fn finish(&mut self) {
        self.end_token();
        if self.error.is_none() {
            if let Some(image_id) = self.image_id.take() {
                self.error = Some(format!(
                    "the track ends with IMAGE_ID {image_id} and no POINT2D_IDX (an odd number \
                     of track values); the line is cut or corrupt: re-export the model"
                ));
            }
        }
    }
}

/// What a comment line says about the record count, if it is a `# Number of <what>: N` line.
pub(super) fn declared_count(comment: &str, what: &str) -> Option<u64> {
    let key = format!("Number of {what}:");
    let rest = &comment[comment.find(&key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Splits off the first `n` whitespace-separated fields; returns them and the trimmed rest.
fn fields(line: &str, n: usize) -> (Vec<&str>, &str) {
    let mut out = Vec::with_capacity(n);
    let mut rest = line.trim_start();
    while out.len() < n && !rest.is_empty() {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        out.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    (out, rest.trim_end())
}

fn num<T: std::str::FromStr>(tok: &str, field: &str) -> Result<T, String> {
    tok.parse().map_err(|_| {
        format!(
            "{field} {tok:?} is not a valid {}",
            std::any::type_name::<T>()
        )
    })
}

fn parse_camera(line: &str) -> Result<ColmapCamera, String> {
    let (f, rest) = fields(line, 4);
    if f.len() < 4 {
        return Err(format!(
            "expected CAMERA_ID MODEL WIDTH HEIGHT PARAMS..., found {} field(s)",
            f.len()
        ));
    }
    let id: u32 = num(f[0], "CAMERA_ID")?;
    let Some(model) = camera_model_by_name(f[1]) else {
        let known: Vec<&str> = CAMERA_MODELS.iter().map(|m| m.name).collect();
        return Err(format!(
            "camera {id} has unknown camera model {:?} (COLMAP's models are {}); undistort \
             with `colmap image_undistorter` and pack its output",
            f[1],
            known.join(", ")
        ));
    };
    let width: u64 = num(f[2], "WIDTH")?;
    let height: u64 = num(f[3], "HEIGHT")?;
    let params = rest
        .split_whitespace()
        .map(|t| num::<f64>(t, "parameter"))
        .collect::<Result<Vec<_>, _>>()?;
    if params.len() != model.num_params {
        return Err(format!(
            "camera {id} ({}) has {} parameters, but that model takes {}; fix the line or \
             re-export the model with COLMAP",
            model.name,
            params.len(),
            model.num_params
        ));
    }
    let cam = ColmapCamera {
        id,
        model_id: model.id,
        width,
        height,
        params,
    };
    check_camera(&cam)?;
    Ok(cam)
}

/// Reads the data lines of a text file, handing each (with its line number) to `record`;
/// `after` is called after each data line (images skip their observation line there).
/// Checks the `# Number of <what>: N` header when there is one.
fn for_each_record<R: BufRead>(
    lines: &mut Lines<R>,
    path: &Path,
    what: &str,
    mut record: impl FnMut(&mut Lines<R>, Line, u64) -> Result<(), ImportError>,
) -> Result<u64, ImportError> {
    let mut declared = None;
    let mut count = 0u64;
    while let Some(line) = lines.next_line(path)? {
        let t = line.text.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with('#') {
            if count == 0 && declared.is_none() {
                declared = declared_count(t, what);
            }
            continue;
        }
        if let Some(n) = declared {
            if count >= n {
                return Err(ImportError::parse(
                    path,
                    Location::Line(lines.line_no()),
                    format!(
                        "more {what} than the {n} the header comment declares; fix or delete the \
                         `# Number of {what}` line, or re-export the model"
                    ),
                ));
            }
        }
        record(lines, line, count)?;
        count += 1;
    }
    if let Some(n) = declared {
        if count != n {
            return Err(ImportError::parse(
                path,
                Location::Line(lines.line_no()),
                format!(
                    "file ends after {count} {what}, but the header comment declares {n}: the file \
                     is truncated; re-export the model (or fix the `# Number of {what}` line)"
                ),
            ));
        }
    }
    Ok(count)
}

fn clipped_error(path: &Path, line: u64) -> ImportError {
    ImportError::parse(
        path,
        Location::Line(line),
        format!(
            "line is longer than {MAX_LINE_BYTES} bytes, more than any valid record needs; the \
             file is corrupt"
        ),
    )
}

/// Parses a whole `cameras.txt`.
pub(super) fn read_cameras<R: BufRead>(
    r: R,
    path: &Path,
) -> Result<Vec<ColmapCamera>, ImportError> {
    let mut lines = Lines::new(r);
    let mut out: Vec<ColmapCamera> = Vec::new();
    let mut seen = HashSet::new();
    for_each_record(&mut lines, path, "cameras", |lines, line, _| {
        let at = Location::Line(lines.line_no());
        if line.clipped {
            return Err(clipped_error(path, lines.line_no()));
        }
        let cam = parse_camera(&line.text).map_err(|m| ImportError::parse(path, at, m))?;
        if !seen.insert(cam.id) {
            return Err(ImportError::parse(
                path,
                at,
                format!(
                    "camera id {} appears twice; ids must be unique (remove the duplicate line)",
                    cam.id
                ),
            ));
        }
        out.push(cam);
        Ok(())
    })?;
    Ok(out)
}

fn parse_image(line: &str) -> Result<ColmapImage, String> {
    let (f, name) = fields(line, 9);
    if f.len() < 9 || name.is_empty() {
        return Err(format!(
            "expected IMAGE_ID QW QX QY QZ TX TY TZ CAMERA_ID NAME, found {} field(s)",
            f.len() + usize::from(!name.is_empty())
        ));
    }
    let id: u32 = num(f[0], "IMAGE_ID")?;
    let mut qvec = [0.0; 4];
    for (q, (tok, field)) in qvec
        .iter_mut()
        .zip(f[1..5].iter().zip(["QW", "QX", "QY", "QZ"]))
    {
        *q = num(tok, field)?;
    }
    let mut tvec = [0.0; 3];
    for (t, (tok, field)) in tvec.iter_mut().zip(f[5..8].iter().zip(["TX", "TY", "TZ"])) {
        *t = num(tok, field)?;
    }
    let camera_id: u32 = num(f[8], "CAMERA_ID")?;
    let img = ColmapImage {
        id,
        qvec,
        tvec,
        camera_id,
        name: name.to_owned(),
    };
    check_image(&img)?;
    Ok(img)
}

/// Parses a whole `images.txt`, skipping the 2D-observation line after each image.
pub(super) fn read_images<R: BufRead>(r: R, path: &Path) -> Result<Vec<ColmapImage>, ImportError> {
    let mut lines = Lines::new(r);
    let mut out: Vec<ColmapImage> = Vec::new();
    let mut ids = HashSet::new();
    let mut names: HashMap<String, u32> = HashMap::new();
    for_each_record(&mut lines, path, "images", |lines, line, _| {
        let at = Location::Line(lines.line_no());
        if line.clipped {
            return Err(clipped_error(path, lines.line_no()));
        }
        let img = parse_image(&line.text).map_err(|m| ImportError::parse(path, at, m))?;
        if !line.newline {
            // COLMAP always writes a (possibly empty) observation line after an image line;
            // an image line without its newline is a file cut mid-line (the name may be cut).
            return Err(ImportError::parse(
                path,
                at,
                "file ends inside this image line (no newline, no 2D-observation line after it): \
                 the file is truncated; re-export the model",
            ));
        }
        if let Some(msg) = duplicate_image(&img, &mut ids, &mut names) {
            return Err(ImportError::parse(path, at, msg));
        }
        // The observation line; its absence at the very end of the file is tolerated, as
        // COLMAP's own reader does. Anything else must look like one (X Y POINT3D_ID triples,
        // possibly none): a missing observation line would otherwise swallow the next image.
        check_observation_line(lines, path, &img)?;
        out.push(img);
        Ok(())
    })?;
    Ok(out)
}

/// Bytes of an observation line inspected (the rest of a long line is skipped unread).
const OBSERVATION_PREFIX: usize = 4096;

/// Reads the 2D-observation line after `img`'s line and checks it is one: only numbers, in
/// triples. A line that is not (typically the next image's line, when the observation line was
/// deleted) is an error naming the line and the remedy.
fn check_observation_line<R: BufRead>(
    lines: &mut Lines<R>,
    path: &Path,
    img: &ColmapImage,
) -> Result<(), ImportError> {
    let Some((clipped, _)) = lines
        .read(OBSERVATION_PREFIX)
        .map_err(|e| ImportError::io(path, e))?
    else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&lines.buf);
    let mut tokens: Vec<&str> = text.split_whitespace().collect();
    if clipped {
        tokens.pop(); // possibly cut mid-number
    }
    let numeric = tokens.iter().all(|t| t.parse::<f64>().is_ok());
    if numeric && (clipped || tokens.len().is_multiple_of(3)) {
        return Ok(());
    }
    Err(ImportError::parse(
        path,
        Location::Line(lines.line_no()),
        format!(
            "expected the 2D-observation line of image {} ({:?}): X Y POINT3D_ID triples, or an \
             empty line; found {}. Every image takes two lines; if the observation line of \
             image {} was deleted, insert an empty line after it",
            img.id,
            img.name,
            if numeric {
                format!("{} numbers, not a multiple of 3", tokens.len())
            } else {
                format!("{:?}", text.chars().take(80).collect::<String>())
            },
            img.id
        ),
    ))
}

/// Parses the first eight fields of a point line (the track after them is ignored). A clipped
/// line is fine as long as the eight fields end before the cut.
pub(super) fn parse_point(line: &Line) -> Result<ColmapPoint, String> {
    let (f, rest) = fields(&line.text, 8);
    // With a clipped line the 8th field is only known complete if something follows it.
    if f.len() < 8 || (line.clipped && rest.is_empty()) {
        return Err(if line.clipped {
            format!("line is longer than {MAX_LINE_BYTES} bytes before its 8th field; the file is corrupt")
        } else {
            format!(
                "expected POINT3D_ID X Y Z R G B ERROR TRACK..., found {} field(s)",
                f.len()
            )
        });
    }
    let p = ColmapPoint {
        id: num(f[0], "POINT3D_ID")?,
        xyz: [num(f[1], "X")?, num(f[2], "Y")?, num(f[3], "Z")?],
        rgb: [num(f[4], "R")?, num(f[5], "G")?, num(f[6], "B")?],
        error: num(f[7], "ERROR")?,
    };
    check_point(&p)?;
    Ok(p)
}

pub(super) fn write_cameras(w: &mut impl Write, cameras: &[ColmapCamera]) -> io::Result<()> {
    writeln!(w, "# Camera list with one line of data per camera:")?;
    writeln!(w, "#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]")?;
    writeln!(w, "# Number of cameras: {}", cameras.len())?;
    for c in cameras {
        // The caller validated the model id.
        let name = camera_model_by_id(c.model_id).map_or("UNKNOWN", |m| m.name);
        write!(w, "{} {name} {} {}", c.id, c.width, c.height)?;
        for p in &c.params {
            write!(w, " {p:?}")?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// A mean for a header comment: `0` when there is nothing to average (as files written
/// before observations were), else the shortest round-trip decimal.
fn mean(total: u64, count: u64) -> String {
    if total == 0 || count == 0 {
        "0".to_owned()
    } else {
        format!("{}", total as f64 / count as f64)
    }
}

/// Writes the images; image `k` gets the 2D observations `observations[k]` (an empty line when
/// `observations` is shorter).
pub(super) fn write_images(
    w: &mut impl Write,
    images: &[ColmapImage],
    observations: &[Vec<Point2D>],
) -> io::Result<()> {
    writeln!(w, "# Image list with two lines of data per image:")?;
    writeln!(
        w,
        "#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME"
    )?;
    writeln!(w, "#   POINTS2D[] as (X, Y, POINT3D_ID)")?;
    let total: u64 = observations.iter().map(|o| o.len() as u64).sum();
    writeln!(
        w,
        "# Number of images: {}, mean observations per image: {}",
        images.len(),
        mean(total, images.len() as u64)
    )?;
    for (k, i) in images.iter().enumerate() {
        let [qw, qx, qy, qz] = i.qvec;
        let [tx, ty, tz] = i.tvec;
        writeln!(
            w,
            "{} {qw:?} {qx:?} {qy:?} {qz:?} {tx:?} {ty:?} {tz:?} {} {}",
            i.id, i.camera_id, i.name
        )?;
        // The 2D observation line (empty without observations).
        let obs = observations.get(k).map_or(&[][..], Vec::as_slice);
        for (n, o) in obs.iter().enumerate() {
            let sep = if n == 0 { "" } else { " " };
            write!(w, "{sep}{:?} {:?} {}", o.xy[0], o.xy[1], o.point3d_id)?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// The header of `points3D.txt` for `count` points with `track_elements` track elements.
pub(super) fn write_points_header(
    w: &mut impl Write,
    count: u64,
    track_elements: u64,
) -> io::Result<()> {
    writeln!(w, "# 3D point list with one line of data per point:")?;
    writeln!(
        w,
        "#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)"
    )?;
    writeln!(
        w,
        "# Number of points: {count}, mean track length: {}",
        mean(track_elements, count)
    )
}

pub(super) fn write_point(
    w: &mut impl Write,
    p: &ColmapPoint,
    track: &[TrackElement],
) -> io::Result<()> {
    let [x, y, z] = p.xyz;
    let [r, g, b] = p.rgb;
    write!(w, "{} {x:?} {y:?} {z:?} {r} {g} {b} {:?}", p.id, p.error)?;
    for e in track {
        write!(w, " {} {}", e.image_id, e.point2d_idx)?;
    }
    writeln!(w)
}
