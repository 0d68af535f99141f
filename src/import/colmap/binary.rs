//! COLMAP's binary sparse-model encoding (`cameras.bin`, `images.bin`, `points3D.bin`).
//!
//! Layout (little-endian, no padding, no trailing data), as COLMAP's `WriteCamerasBinary`,
//! `WriteImagesBinary` and `WritePoints3DBinary` write it:
//!
//! ```text
//! cameras.bin   u64 count, then per camera:
//!                 u32 camera_id, i32 model_id, u64 width, u64 height, f64 params[P(model)]
//! images.bin    u64 count, then per image:
//!                 u32 image_id, f64 qw qx qy qz, f64 tx ty tz, u32 camera_id,
//!                 name bytes + NUL, u64 num_points2D, num_points2D × (f64 x, f64 y, i64 p3d_id)
//! points3D.bin  u64 count, then per point:
//!                 u64 point3D_id, f64 x y z, u8 r g b, f64 error,
//!                 u64 track_length, track_length × (u32 image_id, u32 point2D_idx)
//! ```
//!
//! Invariants: nothing is ever allocated from a count in the file (vectors grow as records are
//! actually read; skipped observation/track bytes are counted, not buffered; a track read for
//! `--sfm-depths` grows element by element), every error names
//! the file, the byte offset and the record, and a file must end exactly after its last
//! declared record.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Write};
use std::path::Path;

use super::{
    camera_model_by_id, check_camera, check_image, check_point, ColmapCamera, ColmapImage,
    ColmapPoint, Point2D, TrackElement, MAX_NAME_BYTES,
};
use crate::import::{ImportError, Location};

/// Bytes of one 2D observation in `images.bin`: f64 x, f64 y, i64 point3D_id.
const POINT2D_BYTES: u64 = 8 + 8 + 8;
/// Bytes of one track element in `points3D.bin`: u32 image_id, u32 point2D_idx.
const TRACK_ELEMENT_BYTES: u64 = 4 + 4;

/// Why reading a record stopped.
pub(super) enum Fail {
    /// The file ended inside the record.
    Eof,
    Io(io::Error),
    /// The bytes are there but make no sense; the message says what is wrong.
    Bad(String),
}

impl From<io::Error> for Fail {
    fn from(e: io::Error) -> Fail {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Fail::Eof
        } else {
            Fail::Io(e)
        }
    }
}

/// A byte reader that knows its offset, so errors can say where they happened.
pub(super) struct Bin<R> {
    r: R,
    pos: u64,
}

impl<R: BufRead> Bin<R> {
    pub(super) fn new(r: R) -> Bin<R> {
        Bin { r, pos: 0 }
    }

    pub(super) fn pos(&self) -> u64 {
        self.pos
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], Fail> {
        let mut b = [0u8; N];
        let mut filled = 0;
        // Copy out of the reader's buffer (one fill_buf + consume per field in the common
        // case), counting partial copies so an EOF error reports where the file really ends.
        while filled < N {
            let avail = match self.r.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if avail.is_empty() {
                return Err(Fail::Eof);
            }
            let n = avail.len().min(N - filled);
            b[filled..filled + n].copy_from_slice(&avail[..n]);
            self.r.consume(n);
            filled += n;
            self.pos += n as u64;
        }
        Ok(b)
    }

    pub(super) fn u32(&mut self) -> Result<u32, Fail> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    pub(super) fn i32(&mut self) -> Result<i32, Fail> {
        Ok(i32::from_le_bytes(self.bytes()?))
    }

    pub(super) fn u64(&mut self) -> Result<u64, Fail> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    pub(super) fn f64(&mut self) -> Result<f64, Fail> {
        Ok(f64::from_le_bytes(self.bytes()?))
    }

    /// Skips `count × size` bytes without buffering them; EOF before the end is `Fail::Eof`.
    fn skip_items(&mut self, count: u64, size: u64, what: &str) -> Result<(), Fail> {
        let Some(mut left) = count.checked_mul(size) else {
            return Err(Fail::Bad(format!(
                "{what} count {count} is impossibly large (× {size} bytes overflows 64 bits)"
            )));
        };
        while left > 0 {
            let avail = match self.r.fill_buf() {
                Ok(b) => b.len() as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if avail == 0 {
                return Err(Fail::Eof);
            }
            let n = avail.min(left);
            // n ≤ avail, which came from a slice length, so it fits usize.
            self.r.consume(n as usize);
            self.pos += n;
            left -= n;
        }
        Ok(())
    }

    /// A NUL-terminated name of at most [`MAX_NAME_BYTES`] bytes (the NUL excluded).
    fn name(&mut self) -> Result<String, Fail> {
        let mut out = Vec::new();
        loop {
            let buf = match self.r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if buf.is_empty() {
                return Err(Fail::Eof);
            }
            let (take, done) = match buf.iter().position(|&c| c == 0) {
                Some(i) => (i, true),
                None => (buf.len(), false),
            };
            if out.len() + take > MAX_NAME_BYTES {
                return Err(Fail::Bad(format!(
                    "image name has no NUL terminator within {MAX_NAME_BYTES} bytes \
                     (names are relative file paths; the file is corrupt)"
                )));
            }
            out.extend_from_slice(&buf[..take]);
            let used = take + usize::from(done);
            self.r.consume(used);
            self.pos += used as u64;
            if done {
                break;
            }
        }
        String::from_utf8(out).map_err(|e| {
            Fail::Bad(format!(
                "image name is not valid UTF-8 (bad byte at name offset {})",
                e.utf8_error().valid_up_to()
            ))
        })
    }

    /// True when no byte is left.
    fn at_eof(&mut self) -> io::Result<bool> {
        loop {
            match self.r.fill_buf() {
                Ok(b) => return Ok(b.is_empty()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads the leading record count.
pub(super) fn read_count<R: BufRead>(
    b: &mut Bin<R>,
    path: &Path,
    what: &str,
) -> Result<u64, ImportError> {
    b.u64().map_err(|f| match f {
        Fail::Io(e) => ImportError::io(path, e),
        _ => ImportError::parse(
            path,
            Location::Byte(b.pos()),
            format!(
                "file ends before its 8-byte {what} count: the file is empty or truncated; \
                 re-export the model (COLMAP `model_converter --output_type BIN`)"
            ),
        ),
    })
}

/// Turns a record-level failure into an error naming the file, offset and record.
pub(super) fn record_error(
    path: &Path,
    f: Fail,
    pos: u64,
    record_start: u64,
    what: &str,
    k: u64,
    declared: u64,
) -> ImportError {
    match f {
        Fail::Io(e) => ImportError::io(path, e),
        Fail::Eof => ImportError::parse(
            path,
            Location::Byte(pos),
            format!(
                "file ends inside {what} record {k} (which starts at byte {record_start}), but the \
                 header declares {declared} {what}s: the file is truncated or its count is corrupt; \
                 re-export the model (COLMAP `model_converter --output_type BIN`)"
            ),
        ),
        Fail::Bad(msg) => ImportError::parse(
            path,
            Location::Byte(record_start),
            format!("{what} record {k}: {msg}"),
        ),
    }
}

/// Checks that the file ends right after the last declared record.
pub(super) fn expect_end<R: BufRead>(
    b: &mut Bin<R>,
    path: &Path,
    what: &str,
    declared: u64,
) -> Result<(), ImportError> {
    if b.at_eof().map_err(|e| ImportError::io(path, e))? {
        return Ok(());
    }
    Err(ImportError::parse(
        path,
        Location::Byte(b.pos()),
        format!(
            "unexpected bytes after the last of the {declared} {what}s the header declares: the \
             count or the file is corrupt; re-export the model (COLMAP `model_converter`)"
        ),
    ))
}

fn read_camera<R: BufRead>(b: &mut Bin<R>) -> Result<ColmapCamera, Fail> {
    let id = b.u32()?;
    let model_id = b.i32()?;
    let width = b.u64()?;
    let height = b.u64()?;
    let Some(model) = camera_model_by_id(model_id) else {
        return Err(Fail::Bad(format!(
            "camera {id} has unknown camera model id {model_id} (COLMAP knows ids 0..=11); the \
             file is corrupt or from a newer COLMAP: undistort with `colmap image_undistorter` \
             and pack its output"
        )));
    };
    let mut params = Vec::with_capacity(model.num_params);
    for _ in 0..model.num_params {
        params.push(b.f64()?);
    }
    let cam = ColmapCamera {
        id,
        model_id,
        width,
        height,
        params,
    };
    check_camera(&cam).map_err(Fail::Bad)?;
    Ok(cam)
}

/// Parses a whole `cameras.bin`.
pub(super) fn read_cameras<R: BufRead>(
    r: R,
    path: &Path,
) -> Result<Vec<ColmapCamera>, ImportError> {
    let mut b = Bin::new(r);
    let n = read_count(&mut b, path, "camera")?;
    let mut out: Vec<ColmapCamera> = Vec::new();
    let mut seen = HashSet::new();
    for k in 0..n {
        let start = b.pos();
        let cam = read_camera(&mut b)
            .map_err(|f| record_error(path, f, b.pos(), start, "camera", k, n))?;
        if !seen.insert(cam.id) {
            return Err(ImportError::parse(
                path,
                Location::Byte(start),
                format!(
                    "camera record {k}: camera id {} appears twice; ids must be unique (the file is \
                     corrupt or was merged by hand)",
                    cam.id
                ),
            ));
        }
        out.push(cam);
    }
    expect_end(&mut b, path, "camera", n)?;
    Ok(out)
}

fn read_image<R: BufRead>(b: &mut Bin<R>) -> Result<ColmapImage, Fail> {
    let id = b.u32()?;
    let mut qvec = [0.0; 4];
    for q in &mut qvec {
        *q = b.f64()?;
    }
    let mut tvec = [0.0; 3];
    for t in &mut tvec {
        *t = b.f64()?;
    }
    let camera_id = b.u32()?;
    let name = b.name()?;
    let num_points2d = b.u64()?;
    b.skip_items(num_points2d, POINT2D_BYTES, "2D observation")?;
    let img = ColmapImage {
        id,
        qvec,
        tvec,
        camera_id,
        name,
    };
    check_image(&img).map_err(Fail::Bad)?;
    Ok(img)
}

/// Parses a whole `images.bin`, skipping the 2D observations.
pub(super) fn read_images<R: BufRead>(r: R, path: &Path) -> Result<Vec<ColmapImage>, ImportError> {
    let mut b = Bin::new(r);
    let n = read_count(&mut b, path, "image")?;
    let mut out: Vec<ColmapImage> = Vec::new();
    let mut ids = HashSet::new();
    let mut names: HashMap<String, u32> = HashMap::new();
    for k in 0..n {
        let start = b.pos();
        let img =
            read_image(&mut b).map_err(|f| record_error(path, f, b.pos(), start, "image", k, n))?;
        if let Some(msg) = duplicate_image(&img, &mut ids, &mut names) {
            return Err(ImportError::parse(
                path,
                Location::Byte(start),
                format!("image record {k}: {msg}"),
            ));
        }
        out.push(img);
    }
    expect_end(&mut b, path, "image", n)?;
    Ok(out)
}

/// Records `img` in the id and name sets; a message when either was already taken.
pub(super) fn duplicate_image(
    img: &ColmapImage,
    ids: &mut HashSet<u32>,
    names: &mut HashMap<String, u32>,
) -> Option<String> {
    if !ids.insert(img.id) {
        return Some(format!(
            "image id {} appears twice; ids must be unique (the file is corrupt or was merged by hand)",
            img.id
        ));
    }
    if let Some(other) = names.insert(img.name.clone(), img.id) {
        return Some(format!(
            "image {} has the name {:?}, already used by image {other}; names must be unique \
             (remove the duplicate registration)",
            img.id, img.name
        ));
    }
    None
}

/// Fixed part of a point record: u64 id, 3 f64 xyz, 3 u8 rgb, f64 error, u64 track length.
const POINT_FIXED_BYTES: usize = 8 + 3 * 8 + 3 + 8 + 8;

/// One point record; its track is read into `track` (cleared first) when given, else skipped
/// unbuffered. The fixed part is read in one copy: points are the bulk of a model, and one
/// buffer access per record instead of ten doubles throughput. A track grows as its elements
/// are read, never from its declared length.
pub(super) fn read_point<R: BufRead>(
    b: &mut Bin<R>,
    track: Option<&mut Vec<TrackElement>>,
) -> Result<ColmapPoint, Fail> {
    let r: [u8; POINT_FIXED_BYTES] = b.bytes()?;
    let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8-byte slice"));
    let f64_at = |i: usize| f64::from_bits(u64_at(i));
    let p = ColmapPoint {
        id: u64_at(0),
        xyz: [f64_at(8), f64_at(16), f64_at(24)],
        rgb: [r[32], r[33], r[34]],
        error: f64_at(35),
    };
    let track_len = u64_at(43);
    match track {
        None => b.skip_items(track_len, TRACK_ELEMENT_BYTES, "track")?,
        Some(track) => {
            track.clear();
            for _ in 0..track_len {
                let e: [u8; TRACK_ELEMENT_BYTES as usize] = b.bytes()?;
                track.push(TrackElement {
                    image_id: u32::from_le_bytes([e[0], e[1], e[2], e[3]]),
                    point2d_idx: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
                });
            }
        }
    }
    check_point(&p).map_err(Fail::Bad)?;
    Ok(p)
}

pub(super) fn write_cameras(w: &mut impl Write, cameras: &[ColmapCamera]) -> io::Result<()> {
    w.write_all(&(cameras.len() as u64).to_le_bytes())?;
    for c in cameras {
        w.write_all(&c.id.to_le_bytes())?;
        w.write_all(&c.model_id.to_le_bytes())?;
        w.write_all(&c.width.to_le_bytes())?;
        w.write_all(&c.height.to_le_bytes())?;
        for p in &c.params {
            w.write_all(&p.to_le_bytes())?;
        }
    }
    Ok(())
}

/// Writes the images; image `k` gets the 2D observations `observations[k]` (none when
/// `observations` is shorter).
pub(super) fn write_images(
    w: &mut impl Write,
    images: &[ColmapImage],
    observations: &[Vec<Point2D>],
) -> io::Result<()> {
    w.write_all(&(images.len() as u64).to_le_bytes())?;
    for (k, i) in images.iter().enumerate() {
        w.write_all(&i.id.to_le_bytes())?;
        for v in i.qvec.iter().chain(&i.tvec) {
            w.write_all(&v.to_le_bytes())?;
        }
        w.write_all(&i.camera_id.to_le_bytes())?;
        w.write_all(i.name.as_bytes())?;
        w.write_all(&[0])?;
        let obs = observations.get(k).map_or(&[][..], Vec::as_slice);
        w.write_all(&(obs.len() as u64).to_le_bytes())?;
        for o in obs {
            w.write_all(&o.xy[0].to_le_bytes())?;
            w.write_all(&o.xy[1].to_le_bytes())?;
            w.write_all(&o.point3d_id.to_le_bytes())?;
        }
    }
    Ok(())
}

/// Writes one point record with its track.
pub(super) fn write_point(
    w: &mut impl Write,
    p: &ColmapPoint,
    track: &[TrackElement],
) -> io::Result<()> {
    w.write_all(&p.id.to_le_bytes())?;
    for v in p.xyz {
        w.write_all(&v.to_le_bytes())?;
    }
    w.write_all(&p.rgb)?;
    w.write_all(&p.error.to_le_bytes())?;
    w.write_all(&(track.len() as u64).to_le_bytes())?;
    for e in track {
        w.write_all(&e.image_id.to_le_bytes())?;
        w.write_all(&e.point2d_idx.to_le_bytes())?;
    }
    Ok(())
}
