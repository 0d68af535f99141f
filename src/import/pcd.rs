//! PCD, the Point Cloud Library's Point Cloud Data format: a header parser ([`parse_header`]),
//! a streaming LZF decoder ([`LzfDecoder`]) and the point-cloud importer built on them
//! ([`import`], and `open_cloud` for importers whose metadata names a PCD file).
//!
//! # Import
//! `import(path)` takes one `.pcd` file or a folder of them (one cloud per file, extension
//! matched case-insensitively, sorted by file name; cloud name = file stem, which must be
//! unique), as [`super::ply::import`] does for PLY. Each file is read through once at import
//! time (the validation pass below) and reopened and streamed in chunks when the pack pipeline
//! pulls it, so no cloud is ever held whole and no file handle is held in between.
//!
//! # Header
//! ASCII lines up to and including `DATA`; blank lines and lines starting with `#` are skipped.
//! Keywords (each at most once, case-sensitive as PCL writes them):
//! - `VERSION`: `0.5`, `0.6` or `0.7` (also spelled `.5`, `.6`, `.7`); optional, as PCL ignores it.
//! - `FIELDS` (old files: `COLUMNS`): the field names. Names are unique, except PCL's `_`
//!   padding fields.
//! - `SIZE` (bytes per value) and `TYPE` (`I` signed, `U` unsigned, `F` float): required, one per
//!   field. `F` is 4 or 8 bytes, `I` and `U` 1, 2, 4 or 8.
//! - `COUNT`: values per field (default 1 each), at least 1. A field with COUNT > 1 (a
//!   histogram such as FPFH's 33 bins) is skipped, as is every `_` field.
//! - `WIDTH`, `HEIGHT` (default 1): an organized cloud is WIDTH × HEIGHT pixels.
//! - `VIEWPOINT tx ty tz qw qx qy qz`: the sensor pose. PCL keeps it as metadata and does not
//!   transform points on load; neither does this importer. A viewpoint other than the identity
//!   `0 0 0 1 0 0 0` gets a warning saying it is not applied.
//! - `POINTS`: without it, WIDTH × HEIGHT; with both, they must agree. Without WIDTH (files
//!   older than v0.7), the cloud is POINTS × 1.
//! - `DATA ascii|binary|binary_compressed`: the last header line; the data starts on the next
//!   byte.
//!
//! Every malformed or inconsistent header line is an [`ImportError::Parse`] at
//! [`Location::Line`]: unknown keywords, repeated keywords, lists of different lengths, a size
//! that does not fit its type, numbers that are not numbers.
//!
//! # Columns
//! By name, with the PLY importer's rules ([`super::ply`]):
//! - **position** `x y z`: required, `F` (4 or 8 bytes; doubles are rounded to f32, and one
//!   beyond f32's range is an error naming the point). Under
//!   [`ImportOptions::points_transform`] the position is moved in `f64` before rounding.
//! - **colour**: PCL's packed `rgb` (`F 4` or `U 4`: the value's bits are `0x00RRGGBB`, so in
//!   the little-endian file byte 0 is blue), or packed `rgba` (`U 4` or `F 4`, `0xAARRGGBB`;
//!   alpha is ignored); else the first complete triple of [`COLOUR_NAMES`] (integers 0–255;
//!   floats 0–1, scaled by 255, rounded and clamped, NaN 0). A partial triple is an error. No
//!   colour: every point is [`DEFAULT_GREY`] and the scene carries a warning (which mentions
//!   `intensity` when the file has it: LiDAR scans carry return strength, not colour).
//! - **label**: the first present of [`LABEL_NAMES`], an integer type or a float holding
//!   integers, every value within `i32`.
//! - **normals**: `normal_x normal_y normal_z` (PCL's names) or `nx ny nz`; a partial triple is an
//!   error. Moved by a points transform's inverse transpose, keeping their length.
//! - A field that is used must have COUNT 1; the rest are skipped with their bytes accounted.
//!
//! # Invalid points
//! PCL marks a point without a measurement (a pixel of an organized depth image that saw
//! nothing; such a cloud has `is_dense` false) by NaN coordinates. A point with NaN in x, y or z
//! is left out, as PCL's own `removeNaNFromPointCloud` does; the left-out points are counted
//! and reported in one warning. Their other values are not checked against the rules above
//! (PCL leaves anything there: the mOSD scans label theirs 0 or 101; an ASCII token must still
//! be a number). An infinite coordinate is an error naming the point: no tool writes it as a
//! marker, so it is damage.
//!
//! # Data
//! - `ascii`: one point per line, values separated by spaces or tabs, every field's COUNT values
//!   in FIELDS order (padding fields included). A line with the wrong number of values is an
//!   error naming the line and the point. A packed `rgb` of TYPE F is read as the unsigned
//!   integer current PCL writes for it when the token is all digits, else as a float whose bits
//!   are the colour (older PCL); a `nan` there has lost the colour's bits and is an error for a
//!   point that is kept.
//! - `binary`: the points row by row, each field's values packed in FIELDS order, little-endian
//!   (padding fields included).
//! - `binary_compressed`: a little-endian u32 compressed size, a u32 uncompressed size, then that
//!   many bytes of LZF (liblzf's format, see [`LzfDecoder`]). The uncompressed data is
//!   field-major: all points' first field, then all points' second field, and so on, each
//!   `SIZE × COUNT × POINTS` bytes. PCL leaves `_` padding fields out of this layout (its writer
//!   drops them and its reader skips them), so the uncompressed size must be exactly POINTS ×
//!   the bytes of the other fields; anything else is an error.
//!
//! PCL's writer sizes a binary file as its data plus one page (header included), leaving zero
//! bytes after the data, so up to 64 KiB of zero bytes there are accepted silently. Other bytes after the data (or lines after the
//! last ASCII point) are a warning (an error under `--strict`), as trailing PLY data is.
//!
//! # Validation pass and memory bound
//! At import time each file is read through once, decoding only the fields that are used: a
//! truncated or damaged file is refused before the pack pipeline starts, and
//! [`PointSource::declared_len`] is the exact number of points that will be delivered (the
//! NaN points already left out). The streaming pass then delivers exactly that many; if the
//! file changed in between (another header, size or count), it fails saying so.
//!
//! Nothing is allocated by a size read from the file (a header may declare 2^32 points or a
//! COUNT of 10^12): binary rows are read field by field with the gaps skipped, ASCII lines are
//! bounded by [`MAX_ASCII_LINE`], and binary_compressed data is never decompressed whole. One
//! [`LzfDecoder`] per used field keeps only LZF's history window ([`LZF_WINDOW`] bytes, as far
//! as a back-reference reaches) and a fixed input buffer, starts at its field's region of the
//! uncompressed stream, and hands out that field's values in point order, so points come out in
//! row order with O(window × used fields) memory. To start them, a scout decoder decodes the
//! block once up to each used region and forks that field's decoder there
//! ([`LzfDecoder::fork`]), so a pass decodes the block about once; a Kinect frame (6 MB
//! uncompressed) takes a few tens of milliseconds a pass.

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::input::{Input, InputCloud, InputReader};
use super::ply::header::{read_line_bounded, LineRead};
use super::ply::{COLOUR_NAMES, DEFAULT_GREY, LABEL_NAMES};
use super::transform::PointsTransform;
use super::{thousands, ImportError, ImportOptions, ImportedScene, Location};
use crate::dataset::{Format, PointChunk, PointSource};

/// Longest header line accepted: real header lines are short (`FIELDS x y z rgb normal_x …`);
/// the cap keeps a binary file misnamed `.pcd` from being read into memory as one "line".
pub const MAX_HEADER_LINE: usize = 64 * 1024;

/// Largest header accepted, in bytes: room for thousands of comment lines, while bounding what a
/// malformed file can make us read before giving up.
pub const MAX_HEADER_BYTES: u64 = 16 * 1024 * 1024;

/// Longest ASCII data line accepted: 1 MiB holds more than 40,000 printed doubles, far beyond a
/// real point (an FPFH point is 33 values), while bounding what one line can make us hold.
pub const MAX_ASCII_LINE: usize = 1024 * 1024;

/// How far back an LZF back-reference reaches: 13 offset bits, plus one.
pub const LZF_WINDOW: usize = 8192;

/// Compressed bytes an [`LzfDecoder`] reads from its source at a time.
const LZF_INPUT_BUFFER: usize = 16 * 1024;

/// Uncompressed bytes a field's stream decodes at a time.
const FIELD_BUFFER: usize = 4 * 1024;

/// Read buffer of ASCII and binary passes: 64 KiB amortises syscalls at a fixed cost.
const FILE_BUFFER: usize = 64 * 1024;

/// Trailing zero bytes taken for PCL's page padding: its writer stretches a binary file to one
/// page (4 KiB on x86, up to 64 KiB elsewhere) beyond the data.
const PAGE_PADDING_MAX: u64 = 64 * 1024;

/// Initial capacity limit of a chunk's vectors: memory grows with the points actually read,
/// never with a requested or declared size (as the PLY importer's chunks).
const INITIAL_CHUNK_CAPACITY: usize = 65_536;

// ---------------------------------------------------------------------------------------------
// Header
// ---------------------------------------------------------------------------------------------

/// A field's `TYPE` letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// `I`: signed integer.
    Signed,
    /// `U`: unsigned integer.
    Unsigned,
    /// `F`: IEEE float.
    Float,
}

impl FieldType {
    /// The letter of the `TYPE` line.
    pub fn letter(self) -> char {
        match self {
            FieldType::Signed => 'I',
            FieldType::Unsigned => 'U',
            FieldType::Float => 'F',
        }
    }
}

/// One entry of `FIELDS`, with its `SIZE`, `TYPE` and `COUNT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcdField {
    pub name: String,
    /// Bytes per value: 1, 2, 4 or 8 (F: 4 or 8).
    pub size: u8,
    pub ty: FieldType,
    /// Values per point, at least 1.
    pub count: u64,
}

impl PcdField {
    /// Whether this is PCL's `_` padding.
    pub fn is_padding(&self) -> bool {
        self.name == "_"
    }

    /// Bytes of this field in one point (`SIZE × COUNT`; fits u64, checked by [`parse_header`]).
    pub fn bytes(&self) -> u64 {
        u64::from(self.size) * self.count
    }
}

/// The `DATA` encoding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PcdData {
    Ascii,
    Binary,
    BinaryCompressed,
}

impl PcdData {
    /// The keyword on the `DATA` line.
    pub fn keyword(self) -> &'static str {
        match self {
            PcdData::Ascii => "ascii",
            PcdData::Binary => "binary",
            PcdData::BinaryCompressed => "binary_compressed",
        }
    }
}

/// 1-based lines of the header's keywords, for errors found once the whole header is known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderLines {
    pub fields: u64,
    pub size: u64,
    pub ty: u64,
    /// `None`: no COUNT line (every count 1).
    pub count: Option<u64>,
    /// The `POINTS` line, else the `WIDTH` line.
    pub points: u64,
    pub data: u64,
}

/// A parsed PCD header. Invariants: as many sizes, types and counts as fields; every size fits
/// its type; counts are at least 1 and `point_size` did not overflow; non-padding names are
/// unique; `points == width × height`; the viewpoint is finite.
#[derive(Clone, Debug, PartialEq)]
pub struct PcdHeader {
    /// The `VERSION` as written, if any.
    pub version: Option<String>,
    pub fields: Vec<PcdField>,
    pub width: u64,
    pub height: u64,
    pub points: u64,
    /// `tx ty tz qw qx qy qz`.
    pub viewpoint: [f64; 7],
    pub data: PcdData,
    /// Bytes of one point in ASCII/binary row layout: Σ SIZE × COUNT, padding included.
    pub point_size: u64,
    /// Bytes of the header, `DATA` line included: where the data starts.
    pub data_offset: u64,
    pub lines: HeaderLines,
}

/// The identity viewpoint PCL writes when a cloud has no sensor pose.
const IDENTITY_VIEWPOINT: [f64; 7] = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];

impl PcdHeader {
    /// The field called `name` and its index (names other than `_` are unique).
    pub fn field(&self, name: &str) -> Option<(usize, &PcdField)> {
        self.fields.iter().enumerate().find(|(_, f)| f.name == name)
    }

    /// Bytes of one point in binary_compressed's block: the fields without PCL's `_` padding.
    pub fn packed_point_size(&self) -> u64 {
        self.fields
            .iter()
            .filter(|f| !f.is_padding())
            .map(PcdField::bytes)
            .sum()
    }

    /// Whether `VIEWPOINT` is absent or the identity pose.
    pub fn viewpoint_is_identity(&self) -> bool {
        self.viewpoint == IDENTITY_VIEWPOINT
    }

    /// The `FIELDS` line as written (for messages).
    fn field_names(&self) -> String {
        let names: Vec<&str> = self.fields.iter().map(|f| f.name.as_str()).collect();
        names.join(" ")
    }
}

/// A keyword's value and the line it was on.
type Seen<T> = Option<(T, u64)>;

/// Parses a PCD header from any buffered source, consuming it up to and including the `DATA`
/// line. `path` names the source in errors, each of which names its 1-based line.
pub fn parse_header<R: BufRead>(src: &mut R, path: &Path) -> Result<PcdHeader, ImportError> {
    let err = |line: u64, msg: String| ImportError::parse(path, Location::Line(line), msg);
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut len_bytes = 0u64;
    let mut version: Seen<String> = None;
    let mut names: Seen<Vec<String>> = None;
    let mut sizes: Seen<Vec<u8>> = None;
    let mut types: Seen<Vec<FieldType>> = None;
    let mut counts: Seen<Vec<u64>> = None;
    let mut width: Seen<u64> = None;
    let mut height: Seen<u64> = None;
    let mut points: Seen<u64> = None;
    let mut viewpoint: Seen<[f64; 7]> = None;
    let data: (PcdData, u64);
    loop {
        line_no += 1;
        let (kind, n) = read_line_bounded(src, &mut buf, MAX_HEADER_LINE)
            .map_err(|e| ImportError::io(path, e))?;
        len_bytes += n;
        if len_bytes > MAX_HEADER_BYTES {
            return Err(err(
                line_no,
                format!("the PCD header exceeds {MAX_HEADER_BYTES} bytes without a DATA line; the file is not a PCD or is damaged"),
            ));
        }
        let ends = || {
            err(
                line_no,
                format!(
                    "the file ends inside the PCD header after {} line(s), without a DATA line; it is truncated or not a PCD",
                    line_no - 1
                ),
            )
        };
        match kind {
            LineRead::TooLong => {
                return Err(err(
                    line_no,
                    format!(
                        "header line longer than {MAX_HEADER_LINE} bytes; {}",
                        if line_no == 1 {
                            "this is not a PCD file"
                        } else {
                            "is the DATA line missing?"
                        }
                    ),
                ))
            }
            LineRead::Eof if buf.iter().all(u8::is_ascii_whitespace) => return Err(ends()),
            _ => {}
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            return Err(err(
                line_no,
                "header line is not text; this is not a PCD file, or its DATA line is missing"
                    .into(),
            ));
        };
        let mut tokens = text.split_ascii_whitespace();
        let Some(keyword) = tokens.next() else {
            continue;
        };
        if keyword.starts_with('#') {
            if matches!(kind, LineRead::Eof) {
                return Err(ends());
            }
            continue;
        }
        // Bounded by the line's length (MAX_HEADER_LINE).
        let args: Vec<&str> = tokens.collect();
        let first = |seen: Option<u64>| -> Result<(), ImportError> {
            match seen {
                Some(l) => Err(err(
                    line_no,
                    format!("a second {keyword} line (the first is line {l}); a PCD header has each keyword once"),
                )),
                None => Ok(()),
            }
        };
        let one_number = |what: &str| -> Result<u64, ImportError> {
            match args.as_slice() {
                [v] => v.parse::<u64>().map_err(|_| {
                    err(
                        line_no,
                        format!("{keyword} `{v}` is not a non-negative integer ({what})"),
                    )
                }),
                _ => Err(err(
                    line_no,
                    format!("{keyword} takes one number ({what}), got {}", args.len()),
                )),
            }
        };
        match keyword {
            "VERSION" => {
                first(version.as_ref().map(|v| v.1))?;
                match args.as_slice() {
                    [v @ ("0.5" | "0.6" | "0.7" | ".5" | ".6" | ".7")] => {
                        version = Some(((*v).to_owned(), line_no));
                    }
                    _ => {
                        return Err(err(
                            line_no,
                            format!(
                                "VERSION `{}` is not a PCD version this reader knows (0.5, 0.6 or 0.7); save the cloud with a current PCL",
                                args.join(" ")
                            ),
                        ))
                    }
                }
            }
            "FIELDS" | "COLUMNS" => {
                first(names.as_ref().map(|v| v.1))?;
                if args.is_empty() {
                    return Err(err(line_no, format!("{keyword} names no fields")));
                }
                for (i, a) in args.iter().enumerate() {
                    if *a != "_" && args[..i].contains(a) {
                        return Err(err(
                            line_no,
                            format!("field `{a}` is named twice; field names must be unique (only PCL's `_` padding may repeat)"),
                        ));
                    }
                }
                names = Some((args.iter().map(|s| (*s).to_owned()).collect(), line_no));
            }
            "SIZE" => {
                first(sizes.as_ref().map(|v| v.1))?;
                let mut v = Vec::with_capacity(args.len());
                for (i, a) in args.iter().enumerate() {
                    match *a {
                        "1" | "2" | "4" | "8" => v.push(a.as_bytes()[0] - b'0'),
                        _ => {
                            return Err(err(
                                line_no,
                                format!("SIZE `{a}` (value {} of the line) is not 1, 2, 4 or 8 bytes", i + 1),
                            ))
                        }
                    }
                }
                sizes = Some((v, line_no));
            }
            "TYPE" => {
                first(types.as_ref().map(|v| v.1))?;
                let mut v = Vec::with_capacity(args.len());
                for (i, a) in args.iter().enumerate() {
                    v.push(match *a {
                        "I" => FieldType::Signed,
                        "U" => FieldType::Unsigned,
                        "F" => FieldType::Float,
                        _ => {
                            return Err(err(
                                line_no,
                                format!("TYPE `{a}` (value {} of the line) is not I, U or F", i + 1),
                            ))
                        }
                    });
                }
                types = Some((v, line_no));
            }
            "COUNT" => {
                first(counts.as_ref().map(|v| v.1))?;
                let mut v = Vec::with_capacity(args.len());
                for (i, a) in args.iter().enumerate() {
                    match a.parse::<u64>() {
                        Ok(c) if c >= 1 => v.push(c),
                        _ => {
                            return Err(err(
                                line_no,
                                format!("COUNT `{a}` (value {} of the line) is not a positive integer", i + 1),
                            ))
                        }
                    }
                }
                counts = Some((v, line_no));
            }
            "WIDTH" => {
                first(width.map(|v| v.1))?;
                width = Some((one_number("points per row")?, line_no));
            }
            "HEIGHT" => {
                first(height.map(|v| v.1))?;
                height = Some((one_number("rows")?, line_no));
            }
            "POINTS" => {
                first(points.map(|v| v.1))?;
                points = Some((one_number("the number of points")?, line_no));
            }
            "VIEWPOINT" => {
                first(viewpoint.map(|v| v.1))?;
                let parsed: Vec<f64> = args
                    .iter()
                    .map_while(|a| a.parse::<f64>().ok().filter(|v| v.is_finite()))
                    .collect();
                if args.len() != 7 || parsed.len() != 7 {
                    return Err(err(
                        line_no,
                        format!(
                            "VIEWPOINT takes 7 finite numbers (tx ty tz qw qx qy qz), got `{}`",
                            args.join(" ")
                        ),
                    ));
                }
                let mut v = [0.0; 7];
                v.copy_from_slice(&parsed);
                viewpoint = Some((v, line_no));
            }
            "DATA" => {
                let d = match args.as_slice() {
                    ["ascii"] => PcdData::Ascii,
                    ["binary"] => PcdData::Binary,
                    ["binary_compressed"] => PcdData::BinaryCompressed,
                    _ => {
                        return Err(err(
                            line_no,
                            format!(
                                "DATA `{}` is not ascii, binary or binary_compressed",
                                args.join(" ")
                            ),
                        ))
                    }
                };
                data = (d, line_no);
                break;
            }
            other => {
                return Err(err(
                    line_no,
                    format!(
                        "unknown header keyword `{}`; a PCD header holds VERSION, FIELDS, SIZE, TYPE, COUNT, WIDTH, HEIGHT, VIEWPOINT, POINTS and DATA{}",
                        other.chars().take(40).collect::<String>(),
                        if line_no == 1 { " (is this a PCD file?)" } else { "" }
                    ),
                ))
            }
        }
        if matches!(kind, LineRead::Eof) {
            return Err(ends());
        }
    }

    let (data, data_line) = data;
    let Some((names, fields_line)) = names else {
        return Err(err(data_line, "no FIELDS line before DATA".into()));
    };
    let Some((sizes, size_line)) = sizes else {
        return Err(err(data_line, "no SIZE line before DATA".into()));
    };
    let Some((types, type_line)) = types else {
        return Err(err(data_line, "no TYPE line before DATA".into()));
    };
    let n = names.len();
    let mismatch = |what: &str, line: u64, got: usize| {
        err(
            line,
            format!("{what} lists {got} values but FIELDS (line {fields_line}) names {n} fields; give one per field"),
        )
    };
    if sizes.len() != n {
        return Err(mismatch("SIZE", size_line, sizes.len()));
    }
    if types.len() != n {
        return Err(mismatch("TYPE", type_line, types.len()));
    }
    let count_line = counts.as_ref().map(|c| c.1);
    let counts = match counts {
        Some((c, line)) if c.len() != n => return Err(mismatch("COUNT", line, c.len())),
        Some((c, _)) => c,
        None => vec![1; n],
    };
    let mut fields = Vec::with_capacity(n);
    let mut point_size = 0u64;
    for (((name, size), ty), count) in names.into_iter().zip(sizes).zip(types).zip(counts) {
        if ty == FieldType::Float && !matches!(size, 4 | 8) {
            return Err(err(
                type_line,
                format!("field `{name}` is TYPE F with SIZE {size}; float fields are 4 or 8 bytes"),
            ));
        }
        let field = PcdField {
            name,
            size,
            ty,
            count,
        };
        point_size = u64::from(size)
            .checked_mul(count)
            .and_then(|b| point_size.checked_add(b))
            .ok_or_else(|| {
                err(
                    count_line.unwrap_or(size_line),
                    format!(
                        "field `{}`'s COUNT makes a point larger than 2^64 bytes",
                        field.name
                    ),
                )
            })?;
        fields.push(field);
    }

    // WIDTH, HEIGHT and POINTS: PCL's rules (a file before v0.7 may have only POINTS).
    let (width, height, points_line) = match (width, height, points) {
        (Some((w, wl)), h, _) => (w, h.map_or(1, |h| h.0), points.map_or(wl, |p| p.1)),
        (None, Some((_, hl)), _) => {
            return Err(err(
                hl,
                "HEIGHT is given but WIDTH is not; give WIDTH (points per row)".into(),
            ))
        }
        (None, None, Some((p, pl))) => (p, 1, pl),
        (None, None, None) => {
            return Err(err(
                data_line,
                "no WIDTH or POINTS line before DATA: the number of points is unknown".into(),
            ))
        }
    };
    let Some(wh) = width.checked_mul(height) else {
        return Err(err(
            points_line,
            format!("WIDTH {width} × HEIGHT {height} overflows"),
        ));
    };
    let points = match points {
        Some((p, line)) if p != wh => {
            return Err(err(
                line,
                format!(
                "POINTS {p} disagrees with WIDTH {width} × HEIGHT {height} = {wh}; fix one of them"
            ),
            ))
        }
        _ => wh,
    };
    Ok(PcdHeader {
        version: version.map(|v| v.0),
        fields,
        width,
        height,
        points,
        viewpoint: viewpoint.map_or(IDENTITY_VIEWPOINT, |v| v.0),
        data,
        point_size,
        data_offset: len_bytes,
        lines: HeaderLines {
            fields: fields_line,
            size: size_line,
            ty: type_line,
            count: count_line,
            points: points_line,
            data: data_line,
        },
    })
}

// ---------------------------------------------------------------------------------------------
// Streaming LZF
// ---------------------------------------------------------------------------------------------

/// What an LZF block can be wrong with. Offsets are into the compressed block (add the block's
/// file offset for a byte of the file).
#[derive(Debug)]
pub enum LzfError {
    /// Reading the source failed, or it ended before the block's declared size.
    Io(io::Error),
    /// The block ends inside an instruction, or before the declared output is complete.
    Truncated {
        at: u64,
        produced: u64,
        expected: u64,
    },
    /// A back-reference reaches before the start of the output.
    BeforeStart {
        at: u64,
        distance: u32,
        produced: u64,
    },
    /// An instruction would produce more than the declared uncompressed size.
    Overrun {
        at: u64,
        len: u32,
        produced: u64,
        expected: u64,
    },
    /// Compressed bytes remain once the declared output is complete.
    Trailing { at: u64, left: u64 },
}

impl LzfError {
    /// The offset in the compressed block of the instruction at fault.
    pub fn offset(&self) -> Option<u64> {
        match self {
            LzfError::Io(_) => None,
            LzfError::Truncated { at, .. }
            | LzfError::BeforeStart { at, .. }
            | LzfError::Overrun { at, .. }
            | LzfError::Trailing { at, .. } => Some(*at),
        }
    }
}

impl std::fmt::Display for LzfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LzfError::Io(e) => write!(f, "{e}"),
            LzfError::Truncated {
                produced, expected, ..
            } => write!(
                f,
                "the LZF block ends after {produced} of its {expected} uncompressed bytes (inside an instruction or too early)"
            ),
            LzfError::BeforeStart {
                distance, produced, ..
            } => write!(
                f,
                "an LZF back-reference at uncompressed byte {produced} reaches back {distance} (to byte {}), before the start of the data",
                *produced as i64 - i64::from(*distance)
            ),
            LzfError::Overrun {
                len,
                produced,
                expected,
                ..
            } => write!(
                f,
                "an LZF instruction of {len} bytes at uncompressed byte {produced} runs past the declared uncompressed size {expected}"
            ),
            LzfError::Trailing { left, .. } => write!(
                f,
                "{left} compressed bytes remain after the declared uncompressed size was produced"
            ),
        }
    }
}

/// The instruction being carried out across calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    None,
    /// Literal bytes still to copy from the input.
    Literal(u32),
    /// Bytes still to copy from `distance` bytes back in the output.
    Copy {
        left: u32,
        distance: u32,
    },
}

/// A streaming decoder of one liblzf block (`lzf_decompress`'s format, which PCL's
/// binary_compressed data uses).
///
/// Each instruction starts with a control byte `c`:
/// - `c < 32`: a literal run of `c + 1` bytes, which follow;
/// - otherwise a back-reference of length `(c >> 5) + 2`, or, when `c >> 5 == 7`, of
///   `7 + next byte + 2` (up to 264); then one more byte `lo`, and the copy starts
///   `((c & 31) << 8 | lo) + 1` bytes back in the output (at most [`LZF_WINDOW`]). The copy may
///   overlap its own output (a distance of 1 repeats the last byte).
///
/// Memory is fixed: the history window ([`LZF_WINDOW`] bytes) and an input buffer, whatever
/// the block's sizes say ([`LzfDecoder::buffer_bytes`]). The output is handed out in pieces
/// ([`LzfDecoder::read`]) or skipped ([`LzfDecoder::skip`]); [`LzfDecoder::finish`] checks the
/// end of the block as liblzf does: the input must end exactly where the declared output does.
pub struct LzfDecoder<R> {
    src: R,
    input: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    /// Compressed bytes consumed by instructions.
    in_pos: u64,
    /// Compressed bytes read from `src` (never beyond `in_len`).
    fetched: u64,
    in_len: u64,
    /// The last [`LZF_WINDOW`] output bytes, output byte `i` at `i % LZF_WINDOW`.
    window: Box<[u8]>,
    out_pos: u64,
    out_len: u64,
    pending: Pending,
}

impl<R: Read> LzfDecoder<R> {
    /// A decoder of the `compressed_len` bytes `src` starts with, which must decode to exactly
    /// `uncompressed_len` bytes.
    pub fn new(src: R, compressed_len: u64, uncompressed_len: u64) -> LzfDecoder<R> {
        LzfDecoder {
            src,
            input: vec![0; LZF_INPUT_BUFFER].into_boxed_slice(),
            in_start: 0,
            in_end: 0,
            in_pos: 0,
            fetched: 0,
            in_len: compressed_len,
            window: vec![0; LZF_WINDOW].into_boxed_slice(),
            out_pos: 0,
            out_len: uncompressed_len,
            pending: Pending::None,
        }
    }

    /// Uncompressed bytes produced (read or skipped) so far.
    pub fn produced(&self) -> u64 {
        self.out_pos
    }

    /// Bytes this decoder holds, fixed at creation: the window and the input buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.window.len() + self.input.len()
    }

    /// How far into the block this decoder has read its source (ahead of what it decoded: the
    /// input buffer holds the difference).
    pub fn source_position(&self) -> u64 {
        self.fetched
    }

    /// A second decoder in this one's state (window, pending instruction, buffered input),
    /// reading on from `src`, which must be positioned [`LzfDecoder::source_position`] bytes
    /// into the block. What one decoder decoded need not be decoded again by the other: the
    /// importer decodes up to each used field's region once, forking a decoder there.
    pub fn fork<S: Read>(&self, src: S) -> LzfDecoder<S> {
        LzfDecoder {
            src,
            input: self.input.clone(),
            in_start: self.in_start,
            in_end: self.in_end,
            in_pos: self.in_pos,
            fetched: self.fetched,
            in_len: self.in_len,
            window: self.window.clone(),
            out_pos: self.out_pos,
            out_len: self.out_len,
            pending: self.pending,
        }
    }

    /// Fills `out` with the next uncompressed bytes, or as many as remain; returns how many (0
    /// once the declared output is complete).
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, LzfError> {
        let n = (out.len() as u64).min(self.out_len - self.out_pos) as usize;
        self.produce(Some(&mut out[..n]), n)?;
        Ok(n)
    }

    /// Decodes and discards the next `n` uncompressed bytes (fewer if fewer remain); returns
    /// how many.
    pub fn skip(&mut self, n: u64) -> Result<u64, LzfError> {
        let n = n.min(self.out_len - self.out_pos);
        let mut left = n;
        while left > 0 {
            let k = left.min(1 << 30) as usize;
            self.produce(None, k)?;
            left -= k as u64;
        }
        Ok(n)
    }

    /// Decodes the rest of the block and checks that it ends exactly at the declared output.
    pub fn finish(&mut self) -> Result<(), LzfError> {
        self.skip(u64::MAX)?;
        if self.in_pos != self.in_len {
            return Err(LzfError::Trailing {
                at: self.in_pos,
                left: self.in_len - self.in_pos,
            });
        }
        Ok(())
    }

    /// Produces exactly `n` bytes (`n` ≤ what remains), into `out` if given.
    fn produce(&mut self, mut out: Option<&mut [u8]>, n: usize) -> Result<(), LzfError> {
        const MASK: usize = LZF_WINDOW - 1;
        let mut done = 0;
        while done < n {
            match self.pending {
                Pending::None => self.start_instruction()?,
                Pending::Literal(left) => {
                    if self.in_start == self.in_end {
                        self.fetch()?;
                    }
                    let k = (left as usize)
                        .min(n - done)
                        .min(self.in_end - self.in_start);
                    let bytes = &self.input[self.in_start..self.in_start + k];
                    if let Some(o) = out.as_deref_mut() {
                        o[done..done + k].copy_from_slice(bytes);
                    }
                    let mut at = self.out_pos as usize & MASK;
                    let mut rest = bytes;
                    while !rest.is_empty() {
                        let m = rest.len().min(LZF_WINDOW - at);
                        self.window[at..at + m].copy_from_slice(&rest[..m]);
                        rest = &rest[m..];
                        at = (at + m) & MASK;
                    }
                    self.in_start += k;
                    self.in_pos += k as u64;
                    self.out_pos += k as u64;
                    done += k;
                    let left = left - k as u32;
                    self.pending = if left == 0 {
                        Pending::None
                    } else {
                        Pending::Literal(left)
                    };
                }
                Pending::Copy { left, distance } => {
                    let k = (left as usize).min(n - done);
                    let mut w = self.out_pos as usize;
                    let d = distance as usize;
                    // Byte by byte: the source may overlap what this copy writes.
                    match out.as_deref_mut() {
                        Some(o) => {
                            for slot in &mut o[done..done + k] {
                                let b = self.window[w.wrapping_sub(d) & MASK];
                                self.window[w & MASK] = b;
                                *slot = b;
                                w = w.wrapping_add(1);
                            }
                        }
                        None => {
                            for _ in 0..k {
                                self.window[w & MASK] = self.window[w.wrapping_sub(d) & MASK];
                                w = w.wrapping_add(1);
                            }
                        }
                    }
                    self.out_pos += k as u64;
                    done += k;
                    let left = left - k as u32;
                    self.pending = if left == 0 {
                        Pending::None
                    } else {
                        Pending::Copy { left, distance }
                    };
                }
            }
        }
        Ok(())
    }

    /// Reads the next instruction's control (and parameter) bytes and checks it before any of
    /// its output is produced, as liblzf does.
    fn start_instruction(&mut self) -> Result<(), LzfError> {
        let at = self.in_pos;
        let truncated = |s: &Self| LzfError::Truncated {
            at,
            produced: s.out_pos,
            expected: s.out_len,
        };
        if self.in_pos == self.in_len {
            return Err(truncated(self));
        }
        let ctrl = u32::from(self.next_byte()?);
        let (len, pending);
        if ctrl < 32 {
            len = ctrl + 1;
            if self.in_len - self.in_pos < u64::from(len) {
                return Err(truncated(self));
            }
            pending = Pending::Literal(len);
        } else {
            let mut l = ctrl >> 5;
            if self.in_pos == self.in_len {
                return Err(truncated(self));
            }
            if l == 7 {
                l += u32::from(self.next_byte()?);
                if self.in_pos == self.in_len {
                    return Err(truncated(self));
                }
            }
            let distance = ((ctrl & 31) << 8 | u32::from(self.next_byte()?)) + 1;
            len = l + 2;
            if u64::from(distance) > self.out_pos {
                return Err(LzfError::BeforeStart {
                    at,
                    distance,
                    produced: self.out_pos,
                });
            }
            pending = Pending::Copy {
                left: len,
                distance,
            };
        }
        if self.out_len - self.out_pos < u64::from(len) {
            return Err(LzfError::Overrun {
                at,
                len,
                produced: self.out_pos,
                expected: self.out_len,
            });
        }
        self.pending = pending;
        Ok(())
    }

    fn next_byte(&mut self) -> Result<u8, LzfError> {
        if self.in_start == self.in_end {
            self.fetch()?;
        }
        let b = self.input[self.in_start];
        self.in_start += 1;
        self.in_pos += 1;
        Ok(b)
    }

    /// Refills the (exhausted) input buffer, never reading past the block.
    fn fetch(&mut self) -> Result<(), LzfError> {
        let want = (self.input.len() as u64).min(self.in_len - self.fetched) as usize;
        if want == 0 {
            return Err(LzfError::Truncated {
                at: self.in_pos,
                produced: self.out_pos,
                expected: self.out_len,
            });
        }
        loop {
            match self.src.read(&mut self.input[..want]) {
                Ok(0) => {
                    return Err(LzfError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!(
                            "the file ends {} bytes into the compressed block, which declares {}",
                            self.fetched, self.in_len
                        ),
                    )))
                }
                Ok(k) => {
                    self.in_start = 0;
                    self.in_end = k;
                    self.fetched += k as u64;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LzfError::Io(e)),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Columns
// ---------------------------------------------------------------------------------------------

/// What a used field is read as. Indexes [`Raw`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    X,
    Y,
    Z,
    /// PCL's packed `rgb` / `rgba`.
    Packed,
    R,
    G,
    B,
    Label,
    Nx,
    Ny,
    Nz,
}

const ROLES: usize = 11;

const ALL_ROLES: [Role; ROLES] = [
    Role::X,
    Role::Y,
    Role::Z,
    Role::Packed,
    Role::R,
    Role::G,
    Role::B,
    Role::Label,
    Role::Nx,
    Role::Ny,
    Role::Nz,
];

/// One point's used values, each as the little-endian bits of its field (zero-extended), by
/// [`Role`].
type Raw = [u64; ROLES];

/// The bits an ASCII `nan` in a packed `F` colour field becomes: no 4-byte value has them, so
/// the decoder can tell the colour was lost (an error only if the point is kept).
const LOST_COLOUR: u64 = u64::MAX;

/// The field a role reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Col {
    field: usize,
    ty: FieldType,
    size: u8,
}

/// How the colour columns are interpreted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ColourKind {
    None,
    /// `0x??RRGGBB` in one 4-byte field.
    Packed,
    /// Integer triple, 0–255 as is.
    Bytes,
    /// Float triple, 0–1 × 255.
    Unit,
}

/// The fields a cloud uses, decided from its header.
#[derive(Clone, Debug, PartialEq)]
struct Columns {
    cols: [Option<Col>; ROLES],
    colour: ColourKind,
}

/// A numeric value of a field.
#[derive(Clone, Copy, Debug)]
enum Num {
    I(i64),
    U(u64),
    F(f64),
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::I(v) => write!(f, "{v}"),
            Num::U(v) => write!(f, "{v}"),
            Num::F(v) => write!(f, "{v}"),
        }
    }
}

fn num(col: Col, raw: u64) -> Num {
    match (col.ty, col.size) {
        (FieldType::Float, 4) => Num::F(f64::from(f32::from_bits(raw as u32))),
        (FieldType::Float, _) => Num::F(f64::from_bits(raw)),
        (FieldType::Unsigned, _) => Num::U(raw),
        (FieldType::Signed, s) => {
            let shift = 64 - 8 * u32::from(s);
            Num::I(((raw << shift) as i64) >> shift)
        }
    }
}

/// Decides the used fields of `h`; warnings go to `warnings`.
fn columns(path: &Path, h: &PcdHeader, warnings: &mut Vec<String>) -> Result<Columns, ImportError> {
    let at = |line: u64, msg: String| ImportError::parse(path, Location::Line(line), msg);
    let fields_line = h.lines.fields;
    let mut cols: [Option<Col>; ROLES] = [None; ROLES];
    // A used field must be one value per point.
    let take = |name: &str| -> Result<Option<Col>, ImportError> {
        let Some((i, f)) = h.field(name) else {
            return Ok(None);
        };
        if f.count != 1 {
            return Err(at(
                h.lines.count.unwrap_or(fields_line),
                format!(
                    "field `{name}` has COUNT {}; a position, colour, label or normal field must be one value per point",
                    f.count
                ),
            ));
        }
        Ok(Some(Col {
            field: i,
            ty: f.ty,
            size: f.size,
        }))
    };

    for (role, name) in [(Role::X, "x"), (Role::Y, "y"), (Role::Z, "z")] {
        let Some(col) = take(name)? else {
            return Err(at(
                fields_line,
                format!(
                    "no `{name}` field (FIELDS {}); a point cloud needs x, y and z",
                    h.field_names()
                ),
            ));
        };
        if col.ty != FieldType::Float {
            return Err(at(
                h.lines.ty,
                format!(
                    "field `{name}` is TYPE {}; positions must be F (float or double): integer coordinates have no known scale",
                    col.ty.letter()
                ),
            ));
        }
        cols[role as usize] = Some(col);
    }

    // Colour: packed first (PCL's own), then the PLY importer's triples.
    let mut sources: Vec<String> = Vec::new();
    let mut colour = ColourKind::None;
    for name in ["rgb", "rgba"] {
        if h.field(name).is_none() {
            continue;
        }
        sources.push(format!("`{name}`"));
        if colour != ColourKind::None {
            continue;
        }
        let col = take(name)?.expect("present");
        if col.size != 4 || col.ty == FieldType::Signed {
            return Err(at(
                h.lines.ty,
                format!(
                    "field `{name}` is TYPE {} SIZE {}; PCL's packed colour is F 4 or U 4 (0x00RRGGBB)",
                    col.ty.letter(),
                    col.size
                ),
            ));
        }
        cols[Role::Packed as usize] = Some(col);
        colour = ColourKind::Packed;
    }
    for names in COLOUR_NAMES {
        let found: Vec<Option<Col>> = names.iter().map(|n| take(n)).collect::<Result<_, _>>()?;
        if found.iter().all(Option::is_none) {
            continue;
        }
        if let Some(k) = found.iter().position(Option::is_none) {
            return Err(at(
                fields_line,
                format!(
                    "colour fields {names:?} are incomplete: `{}` is missing; give all three or none",
                    names[k]
                ),
            ));
        }
        sources.push(names.join(" "));
        if colour != ColourKind::None {
            continue;
        }
        let found: Vec<Col> = found.into_iter().flatten().collect();
        colour = if found.iter().all(|c| c.ty == FieldType::Float) {
            ColourKind::Unit
        } else if found.iter().all(|c| c.ty != FieldType::Float) {
            ColourKind::Bytes
        } else {
            return Err(at(
                h.lines.ty,
                format!("colour fields {names:?} mix integer and float types"),
            ));
        };
        for (role, c) in [Role::R, Role::G, Role::B].into_iter().zip(found) {
            cols[role as usize] = Some(c);
        }
    }
    if sources.len() > 1 {
        warnings.push(format!(
            "{}: several colour fields ({}); using {} and ignoring the others",
            path.display(),
            sources.join(", "),
            sources[0]
        ));
    }
    if colour == ColourKind::None {
        let intensity = if h.field("intensity").is_some() {
            "; its `intensity` field is the return strength of a LiDAR or depth sensor, not colour, and is not used"
        } else {
            ""
        };
        warnings.push(format!(
            "{}: no colour fields (rgb, rgba, r g b or red green blue); points get grey {}{intensity}",
            path.display(),
            DEFAULT_GREY[0]
        ));
    }

    let present: Vec<&'static str> = LABEL_NAMES
        .iter()
        .copied()
        .filter(|n| h.field(n).is_some())
        .collect();
    if let Some(&name) = present.first() {
        cols[Role::Label as usize] = take(name)?;
    }
    if present.len() > 1 {
        warnings.push(format!(
            "{}: several label fields {present:?}; using `{}` and ignoring the others",
            path.display(),
            present[0]
        ));
    }

    for names in [["normal_x", "normal_y", "normal_z"], ["nx", "ny", "nz"]] {
        let found: Vec<Option<Col>> = names.iter().map(|n| take(n)).collect::<Result<_, _>>()?;
        if found.iter().all(Option::is_none) {
            continue;
        }
        if let Some(k) = found.iter().position(Option::is_none) {
            return Err(at(
                fields_line,
                format!(
                    "normal fields {names:?} are incomplete: `{}` is missing; give all three or none",
                    names[k]
                ),
            ));
        }
        if cols[Role::Nx as usize].is_none() {
            for (role, c) in [Role::Nx, Role::Ny, Role::Nz].into_iter().zip(found) {
                cols[role as usize] = c;
            }
        }
    }
    Ok(Columns { cols, colour })
}

// ---------------------------------------------------------------------------------------------
// Rows: one point's used values at a time, per DATA kind
// ---------------------------------------------------------------------------------------------

/// Everything a pass needs to know about a cloud, fixed at import.
struct Layout {
    path: PathBuf,
    input: Input,
    header: PcdHeader,
    columns: Columns,
    /// The role of each header field, if it is used.
    field_roles: Vec<Option<Role>>,
    /// binary_compressed: the block's compressed and uncompressed sizes.
    block: Option<(u32, u32)>,
    /// Where the point data ends in the file (binary kinds).
    data_end: u64,
    file_len: u64,
    /// `--points-transform`, applied to positions in `f64` and to normals.
    transform: Option<PointsTransform>,
}

impl Layout {
    fn io(&self, e: io::Error) -> ImportError {
        ImportError::io(&self.path, e)
    }

    /// The used roles with their fields, in field (row) order.
    fn used(&self) -> Vec<(Role, Col)> {
        let mut used: Vec<(Role, Col)> = ALL_ROLES
            .iter()
            .filter_map(|&r| self.columns.cols[r as usize].map(|c| (r, c)))
            .collect();
        used.sort_by_key(|(_, c)| c.field);
        used
    }

    /// Decodes one point's values: `None` for a point with NaN coordinates (left out).
    fn decode(&self, raw: &Raw, point: u64) -> Result<Option<Decoded>, String> {
        let cols = &self.columns.cols;
        let col = |r: Role| cols[r as usize].expect("role is used");
        let name = |r: Role| self.header.fields[col(r).field].name.as_str();
        let mut xyz = [0f64; 3];
        for (k, r) in [Role::X, Role::Y, Role::Z].into_iter().enumerate() {
            let Num::F(v) = num(col(r), raw[r as usize]) else {
                unreachable!("positions are F")
            };
            xyz[k] = v;
        }
        if xyz.iter().any(|v| v.is_nan()) {
            return Ok(None);
        }
        if let Some(t) = &self.transform {
            if xyz.iter().all(|v| v.is_finite()) {
                let moved = t.point(xyz);
                if let Some(k) = (0..3).find(|&k| !(moved[k] as f32).is_finite()) {
                    return Err(format!(
                        "point {point}: ({}, {}, {}) is moved by --points-transform to `{}` = {}, beyond f32's range (positions are stored as f32); check the transform",
                        xyz[0], xyz[1], xyz[2], ["x", "y", "z"][k], moved[k]
                    ));
                }
                xyz = moved;
            }
        }
        let mut pos = [0f32; 3];
        for (k, r) in [Role::X, Role::Y, Role::Z].into_iter().enumerate() {
            let v = xyz[k];
            if v.is_infinite() {
                return Err(format!(
                    "point {point}: `{}` = {v} is not a finite coordinate; PCL marks missing points with NaN, so an infinite one is damage: remove or fix the point",
                    name(r)
                ));
            }
            pos[k] = v as f32;
            if !pos[k].is_finite() {
                return Err(format!(
                    "point {point}: `{}` = {v} is beyond f32's range (positions are stored as f32); rescale the cloud",
                    name(r)
                ));
            }
        }
        let rgb = match self.columns.colour {
            ColourKind::None => DEFAULT_GREY,
            ColourKind::Packed => {
                let v = raw[Role::Packed as usize];
                if v == LOST_COLOUR {
                    return Err(format!(
                        "point {point}: packed colour `{}` is written as nan, which has lost the colour's bits (older PCL printed opaque colours so); save the cloud as binary, or with `rgb` as TYPE U",
                        name(Role::Packed)
                    ));
                }
                let v = v as u32;
                [(v >> 16) as u8, (v >> 8) as u8, v as u8]
            }
            ColourKind::Unit => {
                [Role::R, Role::G, Role::B].map(|r| match num(col(r), raw[r as usize]) {
                    // NaN becomes 0, as in the PLY importer.
                    Num::F(v) => (v * 255.0).round().clamp(0.0, 255.0) as u8,
                    _ => unreachable!("unit colours are F"),
                })
            }
            ColourKind::Bytes => {
                let mut rgb = [0u8; 3];
                for (k, r) in [Role::R, Role::G, Role::B].into_iter().enumerate() {
                    let v = num(col(r), raw[r as usize]);
                    rgb[k] = match v {
                        Num::I(i) => u8::try_from(i).ok(),
                        Num::U(u) => u8::try_from(u).ok(),
                        Num::F(_) => None,
                    }
                    .ok_or_else(|| {
                        format!(
                            "point {point}: colour `{}` = {v} is outside 0..255",
                            name(r)
                        )
                    })?;
                }
                rgb
            }
        };
        let label = match cols[Role::Label as usize] {
            None => None,
            Some(c) => {
                let v = num(c, raw[Role::Label as usize]);
                let l = match v {
                    Num::I(i) => i32::try_from(i).ok(),
                    Num::U(u) => i32::try_from(u).ok(),
                    Num::F(f) => {
                        (f.fract() == 0.0 && f >= f64::from(i32::MIN) && f <= f64::from(i32::MAX))
                            .then_some(f as i32)
                    }
                };
                Some(l.ok_or_else(|| {
                    format!(
                        "point {point}: label `{}` = {v} is not an integer in the i32 range (labels are stored as i32); renumber the labels",
                        name(Role::Label)
                    )
                })?)
            }
        };
        let normal = cols[Role::Nx as usize].map(|_| {
            let n = [Role::Nx, Role::Ny, Role::Nz].map(|r| match num(col(r), raw[r as usize]) {
                Num::I(i) => i as f32,
                Num::U(u) => u as f32,
                Num::F(f) => f as f32,
            });
            match &self.transform {
                Some(t) => t.normal(n),
                None => n,
            }
        });
        Ok(Some(Decoded {
            xyz: pos,
            rgb,
            label,
            normal,
        }))
    }
}

/// One kept point.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Decoded {
    xyz: [f32; 3],
    rgb: [u8; 3],
    label: Option<i32>,
    normal: Option<[f32; 3]>,
}

/// Skips `n` bytes of a buffered source; false if it ends first.
fn skip_bytes<R: BufRead>(src: &mut R, mut n: u64) -> io::Result<bool> {
    while n > 0 {
        let avail = match src.fill_buf() {
            Ok(a) => a.len(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail == 0 {
            return Ok(false);
        }
        let k = (avail as u64).min(n);
        src.consume(k as usize);
        n -= k;
    }
    Ok(true)
}

/// `ascii` rows: one non-blank line per point.
struct AsciiRows {
    src: BufReader<InputReader>,
    line: Vec<u8>,
    /// The last line consumed (1-based, header included).
    line_no: u64,
}

impl AsciiRows {
    fn next(&mut self, layout: &Layout, point: u64, raw: &mut Raw) -> Result<(), ImportError> {
        let err =
            |line: u64, msg: String| ImportError::parse(&layout.path, Location::Line(line), msg);
        loop {
            self.line_no += 1;
            let (kind, _) = read_line_bounded(&mut self.src, &mut self.line, MAX_ASCII_LINE)
                .map_err(|e| layout.io(e))?;
            match kind {
                LineRead::TooLong => {
                    return Err(err(
                        self.line_no,
                        format!("point {point}: line longer than {MAX_ASCII_LINE} bytes; the file is damaged"),
                    ))
                }
                LineRead::Eof if self.line.iter().all(u8::is_ascii_whitespace) => {
                    return Err(err(
                        self.line_no,
                        format!(
                            "the file ends after {point} of its {} points; it is truncated, or POINTS (line {}) overstates the count",
                            layout.header.points, layout.header.lines.points
                        ),
                    ))
                }
                _ => {}
            }
            if !self.line.iter().all(u8::is_ascii_whitespace) {
                break;
            }
        }
        let need: u128 = layout
            .header
            .fields
            .iter()
            .map(|f| u128::from(f.count))
            .sum();
        let mut tokens = self
            .line
            .split(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c'))
            .filter(|t| !t.is_empty());
        let mut seen = 0u128;
        for (f, role) in layout.header.fields.iter().zip(&layout.field_roles) {
            for _ in 0..f.count {
                let Some(tok) = tokens.next() else {
                    return Err(err(
                        self.line_no,
                        format!("point {point}: {seen} values, but the fields need {need} (FIELDS {}); the line is damaged", layout.header.field_names()),
                    ));
                };
                seen += 1;
                if let Some(r) = role {
                    let col = layout.columns.cols[*r as usize].expect("role is used");
                    raw[*r as usize] =
                        parse_token(tok, col, *r == Role::Packed).ok_or_else(|| {
                            err(
                                self.line_no,
                                format!(
                                    "point {point}: field `{}` value `{}` is not a {} {} number",
                                    f.name,
                                    String::from_utf8_lossy(&tok[..tok.len().min(40)]),
                                    col.ty.letter(),
                                    col.size
                                ),
                            )
                        })?;
                }
            }
        }
        if tokens.next().is_some() {
            return Err(err(
                self.line_no,
                format!("point {point}: more than the {need} values the fields need (FIELDS {}); the line is damaged", layout.header.field_names()),
            ));
        }
        Ok(())
    }

    /// After the last point: the first non-blank line that follows, if any.
    fn trailing(&mut self, layout: &Layout) -> Result<Option<u64>, ImportError> {
        loop {
            self.line_no += 1;
            let (kind, _) = read_line_bounded(&mut self.src, &mut self.line, MAX_ASCII_LINE)
                .map_err(|e| layout.io(e))?;
            let blank = self.line.iter().all(u8::is_ascii_whitespace);
            if matches!(kind, LineRead::TooLong) || !blank {
                return Ok(Some(self.line_no));
            }
            if matches!(kind, LineRead::Eof) {
                return Ok(None);
            }
        }
    }
}

/// Parses an ASCII token as a value of `col` into its little-endian bits; `None` if it is not
/// one. `packed`: PCL's packed colour (see the module documentation).
fn parse_token(tok: &[u8], col: Col, packed: bool) -> Option<u64> {
    let s = std::str::from_utf8(tok).ok()?;
    let bits = |size: u8| {
        if size == 8 {
            u64::MAX
        } else {
            (1u64 << (8 * size)) - 1
        }
    };
    match col.ty {
        FieldType::Float if packed => {
            if s.bytes().all(|b| b.is_ascii_digit()) {
                s.parse::<u32>().ok().map(u64::from)
            } else if s.trim_start_matches(['+', '-']).eq_ignore_ascii_case("nan") {
                Some(LOST_COLOUR)
            } else {
                s.parse::<f32>().ok().map(|v| u64::from(v.to_bits()))
            }
        }
        FieldType::Float if col.size == 4 => s.parse::<f32>().ok().map(|v| u64::from(v.to_bits())),
        FieldType::Float => s.parse::<f64>().ok().map(f64::to_bits),
        FieldType::Unsigned => s.parse::<u64>().ok().filter(|&v| v <= bits(col.size)),
        FieldType::Signed => {
            let v = s.parse::<i64>().ok()?;
            let shift = 64 - 8 * u32::from(col.size);
            // Fits when sign-extending its low `size` bytes gives it back.
            (((v << shift) >> shift) == v).then_some(v as u64 & bits(col.size))
        }
    }
}

/// `binary` rows: fixed-size, each used field read where it sits and the rest skipped.
struct BinaryRows {
    src: BufReader<InputReader>,
    /// (bytes to skip before it, role, size) per used field, in row order.
    segments: Vec<(u64, Role, u8)>,
    /// Bytes after the last used field.
    tail: u64,
}

impl BinaryRows {
    fn new(layout: &Layout, src: InputReader) -> BinaryRows {
        let mut offset = 0u64;
        let mut at = 0u64;
        let mut segments = Vec::new();
        for (f, role) in layout.header.fields.iter().zip(&layout.field_roles) {
            if let Some(r) = role {
                segments.push((offset - at, *r, f.size));
                at = offset + u64::from(f.size);
            }
            offset += f.bytes();
        }
        BinaryRows {
            src: BufReader::with_capacity(FILE_BUFFER, src),
            segments,
            tail: offset - at,
        }
    }

    fn next(&mut self, layout: &Layout, point: u64, raw: &mut Raw) -> Result<(), ImportError> {
        let short = || {
            ImportError::parse(
                &layout.path,
                Location::Record(point),
                format!("point {point}: the file ends inside it; it changed since it was checked at import, run the import again"),
            )
        };
        for &(gap, role, size) in &self.segments {
            if !skip_bytes(&mut self.src, gap).map_err(|e| layout.io(e))? {
                return Err(short());
            }
            let mut b = [0u8; 8];
            self.src
                .read_exact(&mut b[..usize::from(size)])
                .map_err(|e| match e.kind() {
                    io::ErrorKind::UnexpectedEof => short(),
                    _ => layout.io(e),
                })?;
            raw[role as usize] = u64::from_le_bytes(b);
        }
        if !skip_bytes(&mut self.src, self.tail).map_err(|e| layout.io(e))? {
            return Err(short());
        }
        Ok(())
    }
}

/// One used field of a binary_compressed block: its own decoder, skipped to its region, and a
/// small buffer of its decoded values.
struct FieldStream {
    role: Role,
    size: u8,
    region: u64,
    dec: LzfDecoder<InputReader>,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
}

/// `binary_compressed` rows: one [`FieldStream`] per used field, read in lockstep.
struct CompressedRows {
    streams: Vec<FieldStream>,
    block_start: u64,
}

impl CompressedRows {
    fn new(layout: &Layout) -> Result<CompressedRows, ImportError> {
        let h = &layout.header;
        let (compressed, uncompressed) = layout.block.expect("binary_compressed has a block");
        let block_start = h.data_offset + 8;
        let open = |at: u64| {
            layout
                .input
                .open_at(block_start + at)
                .map_err(|e| layout.io(e))
        };
        // One scout decodes up to each used field's region (in region order) and forks that
        // field's decoder there, so nothing before the last region is decoded twice.
        let mut scout = LzfDecoder::new(open(0)?, u64::from(compressed), u64::from(uncompressed));
        let mut streams = Vec::new();
        for (role, col) in layout.used() {
            // The field's region: all points of the (non-padding) fields before it.
            let before: u64 = h.fields[..col.field]
                .iter()
                .filter(|f| !f.is_padding())
                .map(PcdField::bytes)
                .sum();
            let region = before * h.points;
            scout
                .skip(region - scout.produced())
                .map_err(|e| lzf_error(layout, block_start, e))?;
            let dec = scout.fork(open(scout.source_position())?);
            streams.push(FieldStream {
                role,
                size: col.size,
                region,
                dec,
                buf: vec![0; FIELD_BUFFER].into_boxed_slice(),
                pos: 0,
                len: 0,
            });
        }
        Ok(CompressedRows {
            streams,
            block_start,
        })
    }

    fn next(&mut self, layout: &Layout, raw: &mut Raw) -> Result<(), ImportError> {
        for s in &mut self.streams {
            let size = usize::from(s.size);
            if s.len - s.pos >= size {
                let mut b = [0u8; 8];
                b[..size].copy_from_slice(&s.buf[s.pos..s.pos + size]);
                s.pos += size;
                raw[s.role as usize] = u64::from_le_bytes(b);
                continue;
            }
            // A value split across two refills.
            let mut v = 0u64;
            for k in 0..u32::from(s.size) {
                if s.pos == s.len {
                    s.len = s
                        .dec
                        .read(&mut s.buf)
                        .map_err(|e| lzf_error(layout, self.block_start, e))?;
                    s.pos = 0;
                    // The regions lie inside the declared size, which was checked.
                    if s.len == 0 {
                        return Err(ImportError::invalid(
                            &layout.path,
                            "the compressed data ends before its fields' regions do; the file changed since it was checked at import, run the import again",
                        ));
                    }
                }
                v |= u64::from(s.buf[s.pos]) << (8 * k);
                s.pos += 1;
            }
            raw[s.role as usize] = v;
        }
        Ok(())
    }

    /// Decodes the rest of the block (after the last used region) and checks its end.
    fn finish(&mut self, layout: &Layout) -> Result<(), ImportError> {
        let last = self
            .streams
            .iter_mut()
            .max_by_key(|s| s.region)
            .expect("x, y and z are used");
        last.dec
            .finish()
            .map_err(|e| lzf_error(layout, self.block_start, e))
    }
}

fn lzf_error(layout: &Layout, block_start: u64, e: LzfError) -> ImportError {
    match e.offset() {
        None => match e {
            LzfError::Io(io) => layout.io(io),
            _ => unreachable!("only Io has no offset"),
        },
        Some(at) => ImportError::parse(
            &layout.path,
            Location::Byte(block_start + at),
            format!(
                "{e}; the binary_compressed data is damaged: save the cloud again from its source"
            ),
        ),
    }
}

enum Rows {
    Ascii(AsciiRows),
    Binary(BinaryRows),
    Compressed(CompressedRows),
}

/// One pass over a cloud's points, in file order.
struct Scan {
    rows: Rows,
    /// Points read so far (the index of the next).
    point: u64,
    raw: Raw,
}

impl Scan {
    fn open(layout: &Layout) -> Result<Scan, ImportError> {
        let h = &layout.header;
        let open = || {
            layout
                .input
                .open_at(h.data_offset)
                .map_err(|e| layout.io(e))
        };
        let rows = match h.data {
            PcdData::Ascii => Rows::Ascii(AsciiRows {
                src: BufReader::with_capacity(FILE_BUFFER, open()?),
                line: Vec::new(),
                line_no: h.lines.data,
            }),
            PcdData::Binary => Rows::Binary(BinaryRows::new(layout, open()?)),
            PcdData::BinaryCompressed => Rows::Compressed(CompressedRows::new(layout)?),
        };
        Ok(Scan {
            rows,
            point: 0,
            raw: [0; ROLES],
        })
    }

    /// The next point of the file: `Some(None)` for one left out (NaN coordinates), `None` at
    /// the end.
    fn next(&mut self, layout: &Layout) -> Result<Option<Option<Decoded>>, ImportError> {
        if self.point == layout.header.points {
            return Ok(None);
        }
        let point = self.point;
        let location = match &mut self.rows {
            Rows::Ascii(r) => {
                r.next(layout, point, &mut self.raw)?;
                Location::Line(r.line_no)
            }
            Rows::Binary(r) => {
                r.next(layout, point, &mut self.raw)?;
                Location::Record(point)
            }
            Rows::Compressed(r) => {
                r.next(layout, &mut self.raw)?;
                Location::Record(point)
            }
        };
        self.point += 1;
        layout
            .decode(&self.raw, point)
            .map(Some)
            .map_err(|msg| ImportError::parse(&layout.path, location, msg))
    }
}

// ---------------------------------------------------------------------------------------------
// The cloud
// ---------------------------------------------------------------------------------------------

/// One PCD file as a [`PointSource`]: checked and counted at import (the validation pass),
/// reopened and streamed on the first [`PointSource::next_chunk`].
struct PcdCloud {
    name: String,
    layout: Layout,
    /// Points the validation pass kept: exactly what the stream delivers.
    valid: u64,
    delivered: u64,
    scan: Option<Scan>,
    done: bool,
}

impl InputCloud for PcdCloud {
    fn open(
        input: Input,
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<PcdCloud, ImportError> {
        let io_err = |e| ImportError::io(path, e);
        let file_len = input.len().map_err(io_err)?;
        let header = parse_header(
            &mut BufReader::with_capacity(FILE_BUFFER, input.open_at(0).map_err(io_err)?),
            path,
        )?;
        let columns = columns(path, &header, warnings)?;
        let field_roles = header
            .fields
            .iter()
            .enumerate()
            .map(|(i, _)| {
                ALL_ROLES
                    .iter()
                    .copied()
                    .find(|&r| columns.cols[r as usize].is_some_and(|c| c.field == i))
            })
            .collect();
        let (block, data_end) = data_extent(&input, path, &header, file_len)?;
        let layout = Layout {
            path: path.to_owned(),
            input,
            header,
            columns,
            field_roles,
            block,
            data_end,
            file_len,
            transform: options.points_transform.clone(),
        };

        // The validation pass: every point read and decoded, the kept ones counted.
        let mut scan = Scan::open(&layout)?;
        let (mut valid, mut nan) = (0u64, 0u64);
        while let Some(p) = scan.next(&layout)? {
            match p {
                Some(_) => valid += 1,
                None => nan += 1,
            }
        }
        let trailing = match &mut scan.rows {
            Rows::Ascii(r) => r.trailing(&layout)?.map(|line| {
                format!(
                    "line {line} follows the last of the {} points and would be ignored; POINTS may understate the count",
                    layout.header.points
                )
            }),
            Rows::Compressed(r) => {
                r.finish(&layout)?;
                trailing_bytes(&layout)?
            }
            Rows::Binary(_) => trailing_bytes(&layout)?,
        };
        drop(scan);
        if let Some(msg) = trailing {
            if options.strict {
                return Err(ImportError::invalid(
                    path,
                    format!("{msg} (refused under --strict)"),
                ));
            }
            warnings.push(format!("{}: {msg}", path.display()));
        }
        if nan > 0 {
            warnings.push(format!(
                "{}: {} of {} points have NaN coordinates (no measurement at those sensor pixels) and are left out",
                path.display(),
                thousands(nan),
                thousands(layout.header.points)
            ));
        }
        if !layout.header.viewpoint_is_identity() {
            let v = layout.header.viewpoint;
            warnings.push(format!(
                "{}: VIEWPOINT {} {} {} {} {} {} {} (the sensor pose) is not applied: points are packed in the file's own frame, as PCL loads them; transform the cloud first if it must be in the viewpoint's frame",
                path.display(),
                v[0], v[1], v[2], v[3], v[4], v[5], v[6]
            ));
        }
        Ok(PcdCloud {
            name,
            layout,
            valid,
            delivered: 0,
            scan: None,
            done: false,
        })
    }
}

impl PcdCloud {
    fn changed(&self, what: &str) -> ImportError {
        ImportError::invalid(
            &self.layout.path,
            format!("the file changed since it was imported ({what}); run the import again"),
        )
    }

    /// Reopens the file for the streaming pass, checking it is the one that was validated.
    fn reopen(&self) -> Result<Scan, ImportError> {
        let l = &self.layout;
        let len = l.input.len().map_err(|e| l.io(e))?;
        if len != l.file_len {
            return Err(self.changed(&format!("its size is {len} bytes, was {}", l.file_len)));
        }
        let header = parse_header(
            &mut BufReader::with_capacity(FILE_BUFFER, l.input.open_at(0).map_err(|e| l.io(e))?),
            &l.path,
        )?;
        if header != l.header {
            return Err(self.changed("its header differs"));
        }
        if l.block.is_some() && read_block_sizes(&l.input, &l.path, &l.header, len)? != l.block {
            return Err(self.changed("its compressed block's sizes differ"));
        }
        Scan::open(l)
    }
}

/// Reads binary_compressed's two sizes (`None` for other kinds).
fn read_block_sizes(
    input: &Input,
    path: &Path,
    h: &PcdHeader,
    file_len: u64,
) -> Result<Option<(u32, u32)>, ImportError> {
    if h.data != PcdData::BinaryCompressed {
        return Ok(None);
    }
    if file_len.saturating_sub(h.data_offset) < 8 {
        return Err(ImportError::parse(
            path,
            Location::Byte(h.data_offset),
            format!(
                "the file ends {} bytes after the header, inside the compressed block's two sizes (8 bytes); it is truncated",
                file_len.saturating_sub(h.data_offset)
            ),
        ));
    }
    let mut b = [0u8; 8];
    input
        .open_at(h.data_offset)
        .and_then(|mut r| r.read_exact(&mut b))
        .map_err(|e| ImportError::io(path, e))?;
    Ok(Some((
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
    )))
}

/// Checks that the file holds the data its header declares: returns binary_compressed's
/// sizes and where the data ends (binary kinds; the file's end for ASCII).
fn data_extent(
    input: &Input,
    path: &Path,
    h: &PcdHeader,
    file_len: u64,
) -> Result<(Option<(u32, u32)>, u64), ImportError> {
    match h.data {
        PcdData::Ascii => Ok((None, file_len)),
        PcdData::Binary => {
            let need = u128::from(h.points) * u128::from(h.point_size);
            let have = u128::from(file_len.saturating_sub(h.data_offset));
            if have < need {
                let point = (have / u128::from(h.point_size.max(1))) as u64;
                return Err(ImportError::parse(
                    path,
                    Location::Record(point),
                    format!(
                        "{} points of {} bytes need {need} bytes of data but the file has {have} after its header: it ends inside point {point}; the file is truncated or POINTS (line {}) overstates the count",
                        h.points, h.point_size, h.lines.points
                    ),
                ));
            }
            Ok((None, h.data_offset + need as u64))
        }
        PcdData::BinaryCompressed => {
            let (compressed, uncompressed) =
                read_block_sizes(input, path, h, file_len)?.expect("binary_compressed");
            let need = u128::from(h.points) * u128::from(h.packed_point_size());
            if u128::from(uncompressed) != need {
                return Err(ImportError::parse(
                    path,
                    Location::Byte(h.data_offset + 4),
                    format!(
                        "the compressed block declares {uncompressed} uncompressed bytes, but {} points of {} bytes (FIELDS {}, without `_` padding) are {need}; the header and the data disagree",
                        h.points,
                        h.packed_point_size(),
                        h.field_names()
                    ),
                ));
            }
            let block_start = h.data_offset + 8;
            let have = file_len - block_start;
            if u64::from(compressed) > have {
                return Err(ImportError::parse(
                    path,
                    Location::Byte(h.data_offset),
                    format!(
                        "the compressed block declares {compressed} bytes but only {have} follow its sizes; the file is truncated"
                    ),
                ));
            }
            Ok((
                Some((compressed, uncompressed)),
                block_start + u64::from(compressed),
            ))
        }
    }
}

/// What follows a binary file's data: nothing, or PCL's zero page padding (both fine), or a
/// description of the bytes that would be ignored.
fn trailing_bytes(layout: &Layout) -> Result<Option<String>, ImportError> {
    let n = layout.file_len - layout.data_end;
    if n == 0 {
        return Ok(None);
    }
    let describe = || {
        Some(format!(
            "{n} bytes follow the point data and would be ignored; the header may understate POINTS"
        ))
    };
    if n > PAGE_PADDING_MAX {
        return Ok(describe());
    }
    let mut src = layout
        .input
        .open_at(layout.data_end)
        .map_err(|e| layout.io(e))?;
    let mut buf = [0u8; 4096];
    let mut left = n;
    while left > 0 {
        let k = (left as usize).min(buf.len());
        src.read_exact(&mut buf[..k]).map_err(|e| layout.io(e))?;
        if buf[..k].iter().any(|&b| b != 0) {
            return Ok(describe());
        }
        left -= k as u64;
    }
    Ok(None)
}

impl PointSource for PcdCloud {
    type Error = ImportError;

    fn name(&self) -> &str {
        &self.name
    }

    fn declared_len(&self) -> Option<u64> {
        Some(self.valid)
    }

    fn has_labels(&self) -> bool {
        self.layout.columns.cols[Role::Label as usize].is_some()
    }

    fn has_normals(&self) -> bool {
        self.layout.columns.cols[Role::Nx as usize].is_some()
    }

    fn next_chunk(&mut self, max_points: usize) -> Result<Option<PointChunk>, ImportError> {
        if self.done {
            return Ok(None);
        }
        if max_points == 0 {
            return Err(ImportError::invalid(
                &self.layout.path,
                "next_chunk called with max_points = 0",
            ));
        }
        if self.scan.is_none() {
            self.scan = Some(self.reopen()?);
        }
        let cap = max_points.min(INITIAL_CHUNK_CAPACITY);
        let mut chunk = PointChunk {
            xyz: Vec::with_capacity(cap),
            rgb: Vec::with_capacity(cap),
            labels: self.has_labels().then(|| Vec::with_capacity(cap)),
            normals: self.has_normals().then(|| Vec::with_capacity(cap)),
        };
        while chunk.len() < max_points {
            let scan = self.scan.as_mut().expect("opened above");
            let Some(p) = scan.next(&self.layout)? else {
                self.scan = None;
                self.done = true;
                if self.delivered != self.valid {
                    return Err(self.changed(&format!(
                        "it now has {} points with coordinates, the import counted {}",
                        self.delivered, self.valid
                    )));
                }
                break;
            };
            let Some(p) = p else { continue };
            if self.delivered == self.valid {
                return Err(self.changed(&format!(
                    "it has more points with coordinates than the {} the import counted",
                    self.valid
                )));
            }
            self.delivered += 1;
            chunk.xyz.push(p.xyz);
            chunk.rgb.push(p.rgb);
            if let (Some(l), Some(v)) = (chunk.labels.as_mut(), p.label) {
                l.push(v);
            }
            if let (Some(n), Some(v)) = (chunk.normals.as_mut(), p.normal) {
                n.push(v);
            }
        }
        if chunk.is_empty() {
            return Ok(None);
        }
        Ok(Some(chunk))
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

/// Imports one `.pcd` file or a folder of them (see the module documentation).
pub fn import(path: &Path, options: &ImportOptions) -> Result<ImportedScene, ImportError> {
    super::import_cloud_files(path, &["pcd"], Format::Pcd, options, open_cloud)
}

/// One PCD file as the cloud `name` (checked and counted now, streamed when the pack pipeline
/// pulls it), for importers whose metadata names a point cloud.
pub(crate) fn open_cloud(
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    PcdCloud::boxed(Input::File(path.to_owned()), path, name, options, warnings)
}

/// A PCD held in memory as the cloud `name`, with the file importer's checks and warnings;
/// `path` only names it in messages. For the fuzz target and tests: a file is better read
/// through [`import`], which never holds it whole.
pub fn cloud_from_bytes(
    bytes: impl Into<Arc<[u8]>>,
    path: &Path,
    name: &str,
    options: &ImportOptions,
    warnings: &mut Vec<String>,
) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
    PcdCloud::boxed(Input::Bytes(bytes.into()), path, name, options, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::HashMap;
    use std::io::Write;

    // -----------------------------------------------------------------------------------------
    // A test compressor and writer
    // -----------------------------------------------------------------------------------------

    /// What a compressed block is made of: the decoder must have met each kind.
    #[derive(Debug, Default)]
    struct LzfStats {
        literals: usize,
        /// Back-references of 3..=8 bytes (length in the control byte).
        short_refs: usize,
        /// Back-references of 9..=264 bytes (a length byte follows).
        long_refs: usize,
        /// Back-references shorter than their length (the copy reads its own output).
        overlapping: usize,
        max_distance: usize,
    }

    /// A greedy LZF compressor (liblzf's format): literal runs of up to 32 bytes, and
    /// back-references of 3..=264 bytes up to 8,192 bytes back found through a table of the last
    /// position of each 3-byte prefix.
    fn lzf_compress(data: &[u8], stats: &mut LzfStats) -> Vec<u8> {
        fn flush(out: &mut Vec<u8>, lit: &mut Vec<u8>, stats: &mut LzfStats) {
            for run in lit.chunks(32) {
                out.push((run.len() - 1) as u8);
                out.extend_from_slice(run);
                stats.literals += 1;
            }
            lit.clear();
        }
        let mut out = Vec::new();
        let mut lit = Vec::new();
        let mut table: HashMap<[u8; 3], usize> = HashMap::new();
        let mut i = 0;
        while i < data.len() {
            let mut best = None;
            if i + 3 <= data.len() {
                let key = [data[i], data[i + 1], data[i + 2]];
                if let Some(&j) = table.get(&key) {
                    let distance = i - j;
                    if distance <= LZF_WINDOW {
                        let max = (data.len() - i).min(264);
                        let mut len = 0;
                        while len < max && data[j + len] == data[i + len] {
                            len += 1;
                        }
                        if len >= 3 {
                            best = Some((len, distance));
                        }
                    }
                }
                table.insert(key, i);
            }
            let Some((len, distance)) = best else {
                lit.push(data[i]);
                i += 1;
                continue;
            };
            flush(&mut out, &mut lit, stats);
            let (off, l) = (distance - 1, len - 2);
            if l < 7 {
                out.push(((l << 5) | (off >> 8)) as u8);
                stats.short_refs += 1;
            } else {
                out.push(((7 << 5) | (off >> 8)) as u8);
                out.push((l - 7) as u8);
                stats.long_refs += 1;
            }
            out.push((off & 255) as u8);
            stats.overlapping += usize::from(distance < len);
            stats.max_distance = stats.max_distance.max(distance);
            for k in i + 1..i + len {
                if k + 3 <= data.len() {
                    table.insert([data[k], data[k + 1], data[k + 2]], k);
                }
            }
            i += len;
        }
        flush(&mut out, &mut lit, stats);
        out
    }

    /// liblzf's decoder on whole buffers (as PCL runs it), to check the streaming one against.
    fn naive_decompress(block: &[u8], out_len: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut ip = 0;
        while ip < block.len() {
            let ctrl = usize::from(block[ip]);
            ip += 1;
            if ctrl < 32 {
                let n = ctrl + 1;
                if out.len() + n > out_len || ip + n > block.len() {
                    return None;
                }
                out.extend_from_slice(&block[ip..ip + n]);
                ip += n;
            } else {
                let mut len = ctrl >> 5;
                if ip >= block.len() {
                    return None;
                }
                if len == 7 {
                    len += usize::from(block[ip]);
                    ip += 1;
                    if ip >= block.len() {
                        return None;
                    }
                }
                let back = ((ctrl & 31) << 8) + usize::from(block[ip]) + 1;
                ip += 1;
                if out.len() + len + 2 > out_len || back > out.len() {
                    return None;
                }
                for _ in 0..len + 2 {
                    out.push(out[out.len() - back]);
                }
            }
        }
        (out.len() == out_len).then_some(out)
    }

    /// A field of a test file.
    #[derive(Clone, Debug)]
    struct Spec {
        name: &'static str,
        ty: FieldType,
        size: u8,
        count: u64,
    }

    fn spec(name: &'static str, ty: FieldType, size: u8, count: u64) -> Spec {
        Spec {
            name,
            ty,
            size,
            count,
        }
    }

    /// A test file: fields, and each point's values as bits (Σ COUNT per point, field order).
    struct TestFile {
        fields: Vec<Spec>,
        rows: Vec<Vec<u64>>,
        viewpoint: &'static str,
        /// ASCII: a packed `F` colour printed as a float (older PCL), not as its integer.
        packed_float_text: bool,
    }

    fn ascii_value(s: &Spec, bits: u64, packed_float_text: bool) -> String {
        let packed = matches!(s.name, "rgb" | "rgba");
        match (s.ty, s.size) {
            (FieldType::Float, 4) if packed && packed_float_text => {
                format!("{:e}", f32::from_bits(bits as u32))
            }
            (FieldType::Float, 4) if packed => (bits as u32).to_string(),
            (FieldType::Float, 4) => {
                let v = f32::from_bits(bits as u32);
                if v.is_nan() {
                    "nan".into()
                } else {
                    format!("{v}")
                }
            }
            (FieldType::Float, _) => {
                let v = f64::from_bits(bits);
                if v.is_nan() {
                    "nan".into()
                } else {
                    format!("{v}")
                }
            }
            (FieldType::Unsigned, _) => bits.to_string(),
            (FieldType::Signed, size) => {
                let shift = 64 - 8 * u32::from(size);
                (((bits << shift) as i64) >> shift).to_string()
            }
        }
    }

    fn header_text(f: &TestFile, data: PcdData) -> String {
        let list =
            |g: &dyn Fn(&Spec) -> String| f.fields.iter().map(g).collect::<Vec<_>>().join(" ");
        format!(
            "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS {}\nSIZE {}\nTYPE {}\nCOUNT {}\nWIDTH {}\nHEIGHT 1\nVIEWPOINT {}\nPOINTS {}\nDATA {}\n",
            list(&|s| s.name.to_owned()),
            list(&|s| s.size.to_string()),
            list(&|s| s.ty.letter().to_string()),
            list(&|s| s.count.to_string()),
            f.rows.len(),
            f.viewpoint,
            f.rows.len(),
            data.keyword()
        )
    }

    /// The file's bytes, and (binary_compressed) what its block is made of.
    fn encode(f: &TestFile, data: PcdData, stats: &mut LzfStats) -> Vec<u8> {
        let mut out = header_text(f, data).into_bytes();
        let bytes = |s: &Spec, bits: u64| bits.to_le_bytes()[..usize::from(s.size)].to_vec();
        match data {
            PcdData::Ascii => {
                for row in &f.rows {
                    let mut vals = row.iter();
                    let mut line = Vec::new();
                    for s in &f.fields {
                        for _ in 0..s.count {
                            line.push(ascii_value(s, *vals.next().unwrap(), f.packed_float_text));
                        }
                    }
                    out.extend_from_slice(line.join(" ").as_bytes());
                    out.push(b'\n');
                }
            }
            PcdData::Binary => {
                for row in &f.rows {
                    let mut vals = row.iter();
                    for s in &f.fields {
                        for _ in 0..s.count {
                            out.extend(bytes(s, *vals.next().unwrap()));
                        }
                    }
                }
            }
            PcdData::BinaryCompressed => {
                // Field-major, without `_` padding (PCL's layout).
                let mut raw = Vec::new();
                let mut start = 0;
                for s in &f.fields {
                    let n = s.count as usize;
                    if s.name != "_" {
                        for row in &f.rows {
                            for &v in &row[start..start + n] {
                                raw.extend(bytes(s, v));
                            }
                        }
                    }
                    start += n;
                }
                let block = lzf_compress(&raw, stats);
                out.extend_from_slice(&(block.len() as u32).to_le_bytes());
                out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
                out.extend_from_slice(&block);
            }
        }
        out
    }

    fn encode_plain(f: &TestFile, data: PcdData) -> Vec<u8> {
        encode(f, data, &mut LzfStats::default())
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Colour {
        None,
        /// `rgb` F 4.
        RgbF,
        /// `rgb` U 4.
        RgbU,
        /// `rgba` U 4.
        Rgba,
        /// `r g b` U 1.
        Bytes,
        /// `red green blue` F 4 (0–1).
        Unit,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Normals {
        None,
        Pcl,
        Short,
    }

    #[derive(Clone, Copy, Debug)]
    struct Opts {
        xyz_double: bool,
        colour: Colour,
        labels: bool,
        normals: Normals,
        /// A histogram (COUNT 3), `_` padding (COUNT 3 and 2) and a `intensity` field.
        extra: bool,
        /// `label` (U 4) before x y z, as the mOSD scans have it; else `label` (I 4) last.
        label_first: bool,
        /// Every k-th point (from 0) has a NaN coordinate; 0: none.
        nan_every: usize,
        packed_float_text: bool,
    }

    const BASE: Opts = Opts {
        xyz_double: false,
        colour: Colour::RgbF,
        labels: true,
        normals: Normals::None,
        extra: false,
        label_first: false,
        nan_every: 0,
        packed_float_text: false,
    };

    #[derive(Clone, Copy, Debug)]
    struct Pt {
        xyz: [f32; 3],
        rgb: [u8; 3],
        label: i32,
        n: [f32; 3],
    }

    fn cloud(n: usize) -> Vec<Pt> {
        let mut rng = Rng::new(11);
        (0..n)
            .map(|i| Pt {
                xyz: [
                    (rng.normal() * 10.0) as f32,
                    rng.next_f32() - 0.5,
                    rng.uniform(-1e6, 1e6) as f32,
                ],
                rgb: [
                    rng.below(256) as u8,
                    rng.below(256) as u8,
                    (i * 37 % 256) as u8,
                ],
                label: rng.below(200) as i32,
                n: [rng.next_f32(), -rng.next_f32(), 0.25],
            })
            .collect()
    }

    fn is_nan_point(o: Opts, i: usize) -> bool {
        o.nan_every > 0 && i.is_multiple_of(o.nan_every)
    }

    fn test_file(pts: &[Pt], o: Opts) -> TestFile {
        use FieldType::{Float as F, Signed as I, Unsigned as U};
        let mut fields = Vec::new();
        let label_first = o.labels && o.label_first;
        if label_first {
            fields.push(spec("label", U, 4, 1));
        }
        let xs = if o.xyz_double { 8 } else { 4 };
        for n in ["x", "y", "z"] {
            fields.push(spec(n, F, xs, 1));
        }
        if o.extra {
            fields.push(spec("_", U, 1, 3));
            fields.push(spec("fpfh", F, 4, 3));
        }
        match o.colour {
            Colour::None => {}
            Colour::RgbF => fields.push(spec("rgb", F, 4, 1)),
            Colour::RgbU => fields.push(spec("rgb", U, 4, 1)),
            Colour::Rgba => fields.push(spec("rgba", U, 4, 1)),
            Colour::Bytes => fields.extend(["r", "g", "b"].map(|n| spec(n, U, 1, 1))),
            Colour::Unit => fields.extend(["red", "green", "blue"].map(|n| spec(n, F, 4, 1))),
        }
        match o.normals {
            Normals::None => {}
            Normals::Pcl => {
                for n in ["normal_x", "normal_y", "normal_z"] {
                    fields.push(spec(n, F, 4, 1));
                }
            }
            Normals::Short => {
                for n in ["nx", "ny", "nz"] {
                    fields.push(spec(n, F, 4, 1));
                }
            }
        }
        if o.labels && !label_first {
            fields.push(spec("label", I, 4, 1));
        }
        if o.extra {
            fields.push(spec("intensity", U, 2, 1));
            fields.push(spec("_", U, 1, 2));
        }
        let rows = pts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let nan = is_nan_point(o, i);
                let mut row = Vec::new();
                let f32b = |v: f32| u64::from(v.to_bits());
                let coord = |k: usize| {
                    let v = if nan && k == (i / o.nan_every.max(1)) % 3 {
                        f32::NAN
                    } else {
                        p.xyz[k]
                    };
                    if o.xyz_double {
                        f64::from(v).to_bits()
                    } else {
                        f32b(v)
                    }
                };
                // A left-out point's other fields are not checked: give it a label no i32 holds.
                let label = if nan { 0xFFFF_FFF0 } else { p.label as u32 };
                if label_first {
                    row.push(u64::from(label));
                }
                row.extend((0..3).map(coord));
                if o.extra {
                    row.extend([1, 2, 3]);
                    row.extend([0.5f32, -1.0, 2.0].map(f32b));
                }
                let [r, g, b] = p.rgb.map(u64::from);
                let packed = (r << 16) | (g << 8) | b;
                match o.colour {
                    Colour::None => {}
                    Colour::RgbF | Colour::RgbU => row.push(packed),
                    Colour::Rgba => row.push(packed | ((i as u64 * 7) & 255) << 24),
                    Colour::Bytes => row.extend([r, g, b]),
                    Colour::Unit => row.extend(p.rgb.map(|c| f32b(f32::from(c) / 255.0))),
                }
                if o.normals != Normals::None {
                    row.extend(p.n.map(f32b));
                }
                if o.labels && !label_first {
                    row.push(u64::from(label));
                }
                if o.extra {
                    row.push(i as u64 * 1000 % 65536);
                    row.extend([0, 0]);
                }
                row
            })
            .collect();
        TestFile {
            fields,
            rows,
            viewpoint: "0 0 0 1 0 0 0",
            packed_float_text: o.packed_float_text,
        }
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
            assert!(!c.is_empty() && c.len() <= chunk && c.is_consistent());
            all.xyz.extend(c.xyz);
            all.rgb.extend(c.rgb);
            if let Some(l) = &mut all.labels {
                l.extend(c.labels.unwrap());
            }
            if let Some(n) = &mut all.normals {
                n.extend(c.normals.unwrap());
            }
        }
        assert!(
            src.next_chunk(chunk)?.is_none(),
            "a finished source stays finished"
        );
        Ok(all)
    }

    type Opened = (Box<dyn PointSource<Error = ImportError>>, Vec<String>);

    fn open_bytes(bytes: &[u8]) -> Result<Opened, ImportError> {
        open_bytes_with(bytes, &ImportOptions::default())
    }

    fn open_bytes_with(bytes: &[u8], options: &ImportOptions) -> Result<Opened, ImportError> {
        let mut warnings = Vec::new();
        let src = cloud_from_bytes(
            bytes.to_vec(),
            Path::new("mem.pcd"),
            "mem",
            options,
            &mut warnings,
        )?;
        Ok((src, warnings))
    }

    /// Opens and streams in chunks of 7.
    fn read_bytes(bytes: &[u8]) -> Result<(PointChunk, Vec<String>), ImportError> {
        let (mut src, warnings) = open_bytes(bytes)?;
        let pts = drain(src.as_mut(), 7)?;
        assert_eq!(src.declared_len(), Some(pts.len() as u64));
        Ok((pts, warnings))
    }

    fn msg(e: &ImportError) -> String {
        e.to_string()
    }

    fn at(e: &ImportError) -> Option<Location> {
        match e {
            ImportError::Parse { at, .. } => Some(*at),
            _ => None,
        }
    }

    const KINDS: [PcdData; 3] = [PcdData::Ascii, PcdData::Binary, PcdData::BinaryCompressed];

    // -----------------------------------------------------------------------------------------
    // Header
    // -----------------------------------------------------------------------------------------

    fn header(text: &str) -> Result<PcdHeader, ImportError> {
        parse_header(&mut text.as_bytes(), Path::new("h.pcd"))
    }

    #[test]
    fn header_keywords_and_defaults() {
        let text = "# .PCD v0.7 - Point Cloud Data file format\r\nVERSION .7\r\n\r\nFIELDS x y z rgb _ fpfh\r\nSIZE 4 4 8 4 1 4\r\nTYPE F F F U U F\r\nCOUNT 1 1 1 1 3 33\r\n# a comment\r\nWIDTH 640\r\nHEIGHT 480\r\nVIEWPOINT 1 2 3 0.5 0.5 0.5 0.5\r\nPOINTS 307200\r\nDATA binary_compressed\r\nrest";
        let h = header(text).unwrap();
        assert_eq!(h.version.as_deref(), Some(".7"));
        let names: Vec<&str> = h.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["x", "y", "z", "rgb", "_", "fpfh"]);
        assert_eq!(h.fields[2].size, 8);
        assert_eq!(h.fields[3].ty, FieldType::Unsigned);
        assert_eq!(h.fields[5].count, 33);
        assert!(h.fields[4].is_padding());
        assert_eq!((h.width, h.height, h.points), (640, 480, 307_200));
        assert_eq!(h.viewpoint, [1.0, 2.0, 3.0, 0.5, 0.5, 0.5, 0.5]);
        assert!(!h.viewpoint_is_identity());
        assert_eq!(h.data, PcdData::BinaryCompressed);
        assert_eq!(h.point_size, 4 + 4 + 8 + 4 + 3 + 33 * 4);
        assert_eq!(h.packed_point_size(), 4 + 4 + 8 + 4 + 33 * 4);
        assert_eq!(h.data_offset as usize, text.len() - "rest".len());
        assert_eq!(h.lines.fields, 4);
        assert_eq!(h.lines.count, Some(7));
        assert_eq!(h.lines.points, 12);
        assert_eq!(h.lines.data, 13);

        // Defaults: COUNT 1, HEIGHT 1, POINTS = WIDTH × HEIGHT, identity viewpoint, no version.
        let h = header("FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 5\nDATA ascii\n").unwrap();
        assert_eq!(h.version, None);
        assert!(h.fields.iter().all(|f| f.count == 1));
        assert_eq!((h.width, h.height, h.points), (5, 1, 5));
        assert!(h.viewpoint_is_identity());
        assert_eq!(h.lines.count, None);
        // Files before v0.7: POINTS only, and the old COLUMNS name.
        let h =
            header("VERSION 0.5\nCOLUMNS x y z\nSIZE 4 4 4\nTYPE F F F\nPOINTS 9\nDATA binary\n")
                .unwrap();
        assert_eq!((h.width, h.height, h.points), (9, 1, 9));
        assert_eq!(h.data, PcdData::Binary);
        for v in ["0.5", "0.6", "0.7", ".5", ".6", ".7"] {
            let t = format!("VERSION {v}\nFIELDS x\nSIZE 4\nTYPE F\nWIDTH 1\nDATA ascii\n");
            assert_eq!(header(&t).unwrap().version.as_deref(), Some(v));
        }
        // The DATA line may be the file's last, unterminated (an empty cloud).
        let h =
            header("FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 0\nPOINTS 0\nDATA ascii").unwrap();
        assert_eq!(h.points, 0);
    }

    #[test]
    fn header_errors_name_their_line() {
        let base = |over: &[(&str, &str)]| {
            let mut lines = vec![
                ("VERSION", "VERSION 0.7"),
                ("FIELDS", "FIELDS x y z"),
                ("SIZE", "SIZE 4 4 4"),
                ("TYPE", "TYPE F F F"),
                ("COUNT", "COUNT 1 1 1"),
                ("WIDTH", "WIDTH 2"),
                ("HEIGHT", "HEIGHT 1"),
                ("VIEWPOINT", "VIEWPOINT 0 0 0 1 0 0 0"),
                ("POINTS", "POINTS 2"),
                ("DATA", "DATA ascii"),
            ];
            for (k, v) in over {
                match lines.iter().position(|l| l.0 == *k) {
                    Some(i) => lines[i].1 = v,
                    None => lines.insert(lines.len() - 1, ("", v)),
                }
            }
            let lines: Vec<&str> = lines
                .iter()
                .map(|l| l.1)
                .filter(|l| !l.is_empty())
                .collect();
            lines.join("\n") + "\n"
        };
        let long_comment = format!("# {}", "x".repeat(MAX_HEADER_LINE));
        let cases: Vec<(String, u64, &str)> = vec![
            (base(&[("VERSION", "VERSION 0.8")]), 1, "VERSION `0.8`"),
            (base(&[("VERSION", "VERSION")]), 1, "not a PCD version"),
            (base(&[("FIELDS", "FIELDS x y x")]), 2, "`x` is named twice"),
            (base(&[("FIELDS", "FIELDS")]), 2, "names no fields"),
            (base(&[("SIZE", "SIZE 4 3 4")]), 3, "SIZE `3` (value 2"),
            (base(&[("TYPE", "TYPE F D F")]), 4, "TYPE `D` (value 2"),
            (base(&[("COUNT", "COUNT 1 0 1")]), 5, "COUNT `0`"),
            (
                base(&[("SIZE", "SIZE 4 4")]),
                3,
                "SIZE lists 2 values but FIELDS (line 2) names 3",
            ),
            (base(&[("TYPE", "TYPE F F F F")]), 4, "TYPE lists 4 values"),
            (base(&[("COUNT", "COUNT 1 1")]), 5, "COUNT lists 2 values"),
            (
                base(&[("SIZE", "SIZE 4 2 4")]),
                4,
                "`y` is TYPE F with SIZE 2",
            ),
            (
                base(&[
                    ("COUNT", "COUNT 1 1 18446744073709551615"),
                    ("SIZE", "SIZE 4 4 8"),
                ]),
                5,
                "larger than 2^64",
            ),
            (
                base(&[("WIDTH", "WIDTH two")]),
                6,
                "WIDTH `two` is not a non-negative integer",
            ),
            (base(&[("WIDTH", "WIDTH 2 1")]), 6, "WIDTH takes one number"),
            (base(&[("HEIGHT", "HEIGHT -1")]), 7, "HEIGHT `-1`"),
            (
                base(&[("VIEWPOINT", "VIEWPOINT 0 0 0 1 0 0")]),
                8,
                "VIEWPOINT takes 7 finite numbers",
            ),
            (
                base(&[("VIEWPOINT", "VIEWPOINT 0 0 nan 1 0 0 0")]),
                8,
                "VIEWPOINT takes 7",
            ),
            (
                base(&[("POINTS", "POINTS 3")]),
                9,
                "POINTS 3 disagrees with WIDTH 2 × HEIGHT 1 = 2",
            ),
            (
                base(&[("DATA", "DATA binary_lzf")]),
                10,
                "DATA `binary_lzf`",
            ),
            (
                base(&[("DATA", "DATA ascii binary")]),
                10,
                "DATA `ascii binary`",
            ),
            (
                base(&[
                    ("HEIGHT", "HEIGHT 4294967296"),
                    ("WIDTH", "WIDTH 4294967296"),
                ]),
                9,
                "overflows",
            ),
            (
                base(&[("WIDTH", ""), ("HEIGHT", ""), ("POINTS", "")]),
                7,
                "no WIDTH or POINTS",
            ),
            (
                base(&[("WIDTH", "")]),
                6,
                "HEIGHT is given but WIDTH is not",
            ),
            (base(&[("FIELDS", "")]), 9, "no FIELDS line"),
            (base(&[("SIZE", "")]), 9, "no SIZE line"),
            (base(&[("TYPE", ""), ("COUNT", "")]), 8, "no TYPE line"),
            (
                base(&[("EXTRA", "WIDTH 2")]),
                10,
                "a second WIDTH line (the first is line 6)",
            ),
            (
                base(&[("EXTRA", "FIELDS x y z")]),
                10,
                "a second FIELDS line (the first is line 2)",
            ),
            (
                base(&[("EXTRA", "TYPES F F F")]),
                10,
                "unknown header keyword `TYPES`",
            ),
            (base(&[("VERSION", "ply")]), 1, "(is this a PCD file?)"),
            (
                base(&[("DATA", "")]),
                10,
                "ends inside the PCD header after 9 line(s)",
            ),
            (base(&[("DATA", "# DATA ascii")]), 11, "without a DATA line"),
            (base(&[("VERSION", &long_comment)]), 1, "longer than"),
            (
                base(&[("COUNT", "COUNT 1 1 1\u{0}\u{ff}")]),
                5,
                "COUNT `1\u{0}\u{ff}`",
            ),
            (
                String::new(),
                1,
                "ends inside the PCD header after 0 line(s)",
            ),
        ];
        for (text, line, want) in &cases {
            let e = header(text).unwrap_err();
            assert_eq!(at(&e), Some(Location::Line(*line)), "{text:?}: {e}");
            assert!(
                msg(&e).contains(want) && msg(&e).contains("h.pcd"),
                "{text:?}: {e} should contain {want:?}"
            );
        }
        // Not text at all.
        let e =
            parse_header(&mut &b"\x89PNG\r\n\x1a\n\xff\xfe"[..], Path::new("h.pcd")).unwrap_err();
        assert!(
            msg(&e).contains("line 1") && msg(&e).contains("not text"),
            "{e}"
        );
    }

    #[test]
    fn column_rules_name_their_header_line() {
        let with = |fields: &str, sizes: &str, types: &str, counts: &str| {
            format!("VERSION 0.7\nFIELDS {fields}\nSIZE {sizes}\nTYPE {types}\nCOUNT {counts}\nWIDTH 0\nDATA ascii\n")
        };
        let cases: Vec<(String, u64, &str)> = vec![
            (
                with("x y", "4 4", "F F", "1 1"),
                2,
                "no `z` field (FIELDS x y)",
            ),
            (
                with("x y z", "4 4 4", "F I F", "1 1 1"),
                4,
                "`y` is TYPE I; positions must be F",
            ),
            (
                with("x y z", "4 4 4", "F F F", "1 2 1"),
                5,
                "`y` has COUNT 2",
            ),
            (
                with("x y z rgb", "4 4 4 4", "F F F I", "1 1 1 1"),
                4,
                "`rgb` is TYPE I SIZE 4",
            ),
            (
                with("x y z rgba", "4 4 4 8", "F F F F", "1 1 1 1"),
                4,
                "`rgba` is TYPE F SIZE 8",
            ),
            (
                with("x y z rgb", "4 4 4 4", "F F F F", "1 1 1 3"),
                5,
                "`rgb` has COUNT 3",
            ),
            (
                with("x y z r g", "4 4 4 1 1", "F F F U U", "1 1 1 1 1"),
                2,
                "`b` is missing",
            ),
            (
                with(
                    "x y z red green blue",
                    "4 4 4 1 4 1",
                    "F F F U F U",
                    "1 1 1 1 1 1",
                ),
                4,
                "mix integer and float",
            ),
            (
                with(
                    "x y z normal_x normal_z",
                    "4 4 4 4 4",
                    "F F F F F",
                    "1 1 1 1 1",
                ),
                2,
                "`normal_y` is missing",
            ),
            (
                with("x y z label", "4 4 4 4", "F F F U", "1 1 1 2"),
                5,
                "`label` has COUNT 2",
            ),
        ];
        for (text, line, want) in &cases {
            let e = open_bytes(text.as_bytes()).map(|_| ()).unwrap_err();
            assert_eq!(at(&e), Some(Location::Line(*line)), "{text}: {e}");
            assert!(msg(&e).contains(want), "{e} should contain {want:?}");
        }
    }

    // -----------------------------------------------------------------------------------------
    // Data
    // -----------------------------------------------------------------------------------------

    #[test]
    fn every_encoding_imports_identical_points() {
        let pts = cloud(23);
        let mut files = 0;
        for data in KINDS {
            for bits in 0..288usize {
                let o = Opts {
                    xyz_double: bits & 1 != 0,
                    colour: [
                        Colour::None,
                        Colour::RgbF,
                        Colour::RgbU,
                        Colour::Rgba,
                        Colour::Bytes,
                        Colour::Unit,
                    ][(bits >> 1) % 6],
                    labels: (bits / 12) % 2 == 1,
                    normals: [Normals::None, Normals::Pcl, Normals::Short][(bits / 24) % 3],
                    extra: (bits / 72) % 2 == 1,
                    label_first: (bits / 144) % 2 == 1,
                    nan_every: if bits % 5 == 0 { 4 } else { 0 },
                    packed_float_text: bits % 3 == 0,
                };
                let bytes = encode_plain(&test_file(&pts, o), data);
                files += 1;
                let (mut src, warnings) =
                    open_bytes(&bytes).unwrap_or_else(|e| panic!("{data:?} {o:?}: {e}"));
                let kept: Vec<&Pt> = pts
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !is_nan_point(o, *i))
                    .map(|(_, p)| p)
                    .collect();
                assert_eq!(
                    src.declared_len(),
                    Some(kept.len() as u64),
                    "{data:?} {o:?}"
                );
                assert_eq!(src.has_labels(), o.labels);
                assert_eq!(src.has_normals(), o.normals != Normals::None);
                let got = drain(src.as_mut(), 7).unwrap();
                assert_eq!(got.len(), kept.len(), "{data:?} {o:?}");
                for (i, p) in kept.iter().enumerate() {
                    // Bit-exact: f32 positions survive every encoding, doubles included.
                    assert_eq!(
                        got.xyz[i].map(f32::to_bits),
                        p.xyz.map(f32::to_bits),
                        "{data:?} {o:?} point {i}"
                    );
                    let want_rgb = if o.colour == Colour::None {
                        DEFAULT_GREY
                    } else {
                        p.rgb
                    };
                    assert_eq!(got.rgb[i], want_rgb, "{data:?} {o:?} point {i}");
                    if o.labels {
                        assert_eq!(got.labels.as_ref().unwrap()[i], p.label);
                    }
                    if o.normals != Normals::None {
                        assert_eq!(got.normals.as_ref().unwrap()[i], p.n);
                    }
                }
                let grey = warnings.iter().any(|w| w.contains("no colour fields"));
                assert_eq!(grey, o.colour == Colour::None, "{warnings:?}");
                assert_eq!(
                    warnings.iter().any(|w| w.contains("`intensity`")),
                    o.colour == Colour::None && o.extra,
                    "{warnings:?}"
                );
                let nan = warnings.iter().any(|w| w.contains("NaN coordinates"));
                assert_eq!(nan, o.nan_every > 0, "{warnings:?}");

                // The same points in chunks of 1, and in one chunk of exactly the cloud.
                for chunk in [1, kept.len().max(1)] {
                    let (mut again, _) = open_bytes(&bytes).unwrap();
                    assert!(
                        drain(again.as_mut(), chunk).unwrap() == got,
                        "{data:?} {o:?}"
                    );
                }
            }
        }
        assert_eq!(files, 3 * 288);
    }

    #[test]
    fn chunks_split_exactly_at_their_size() {
        let pts = cloud(20);
        let bytes = encode_plain(&test_file(&pts, BASE), PcdData::BinaryCompressed);
        for (chunk, sizes) in [
            (1, vec![1; 20]),
            (7, vec![7, 7, 6]),
            (20, vec![20]),
            (21, vec![20]),
            (10, vec![10, 10]),
        ] {
            let (mut src, _) = open_bytes(&bytes).unwrap();
            let mut got = Vec::new();
            while let Some(c) = src.next_chunk(chunk).unwrap() {
                got.push(c.len());
            }
            assert_eq!(got, sizes, "chunk {chunk}");
        }
        let (mut src, _) = open_bytes(&bytes).unwrap();
        assert!(msg(&src.next_chunk(0).unwrap_err()).contains("max_points = 0"));
    }

    #[test]
    fn packed_colour_byte_order() {
        use FieldType::{Float as F, Unsigned as U};
        // 0x00FF8040: red 0xFF, green 0x80, blue 0x40; byte 0 of the file's value is blue.
        let packed = 0x00FF_8040u64;
        assert_eq!(packed.to_le_bytes()[0], 0x40);
        for (name, ty, value) in [
            ("rgb", F, packed),
            ("rgb", U, packed),
            // rgba: 0xAARRGGBB, alpha ignored.
            ("rgba", U, 0x7FFF_8040),
            ("rgba", F, 0x11FF_8040),
        ] {
            for packed_float_text in [false, true] {
                let f = TestFile {
                    fields: vec![
                        spec("x", F, 4, 1),
                        spec("y", F, 4, 1),
                        spec("z", F, 4, 1),
                        spec(name, ty, 4, 1),
                    ],
                    rows: vec![vec![0, 0, 0, value]],
                    viewpoint: "0 0 0 1 0 0 0",
                    packed_float_text,
                };
                for data in KINDS {
                    let (got, _) = read_bytes(&encode_plain(&f, data)).unwrap();
                    assert_eq!(got.rgb, vec![[0xFF, 0x80, 0x40]], "{name} {ty:?} {data:?}");
                }
            }
        }
        // The binary bytes themselves: B G R A.
        let text = "FIELDS x y z rgb\nSIZE 4 4 4 4\nTYPE F F F F\nWIDTH 1\nDATA binary\n";
        let mut bytes = text.as_bytes().to_vec();
        bytes.extend_from_slice(&[0; 12]);
        bytes.extend_from_slice(&[0x03, 0x02, 0x01, 0x00]);
        assert_eq!(read_bytes(&bytes).unwrap().0.rgb, vec![[1, 2, 3]]);

        // ASCII: current PCL prints a packed F colour as its integer, older PCL as the float.
        let head = "FIELDS x y z rgb\nSIZE 4 4 4 4\nTYPE F F F F\nWIDTH 3\nDATA ascii\n";
        let float = format!("{:e}", f32::from_bits(0x0001_0203));
        let text = format!("{head}0 0 0 66051\n0 0 0 {float}\nnan nan nan nan\n");
        let (got, _) = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(got.rgb, vec![[1, 2, 3], [1, 2, 3]]);
        // A kept point whose colour is `nan` has lost it.
        let text = format!("{head}0 0 0 66051\n0 0 0 nan\n0 0 0 1\n");
        let e = read_bytes(text.as_bytes()).unwrap_err();
        assert_eq!(at(&e), Some(Location::Line(7)), "{e}");
        assert!(
            msg(&e).contains("point 1") && msg(&e).contains("lost the colour"),
            "{e}"
        );
    }

    #[test]
    fn nan_points_are_left_out_and_counted() {
        let pts = cloud(2_000);
        let o = Opts {
            nan_every: 3,
            label_first: true,
            ..BASE
        };
        for data in KINDS {
            let bytes = encode_plain(&test_file(&pts, o), data);
            let (mut src, warnings) = open_bytes(&bytes).unwrap();
            // 0, 3, …, 1998: 667 points.
            assert_eq!(src.declared_len(), Some(2_000 - 667));
            assert_eq!(
                warnings,
                ["mem.pcd: 667 of 2,000 points have NaN coordinates (no measurement at those sensor pixels) and are left out"]
            );
            let got = drain(src.as_mut(), 100).unwrap();
            let want: Vec<[f32; 3]> = pts
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 3 != 0)
                .map(|(_, p)| p.xyz)
                .collect();
            assert_eq!(got.xyz, want, "{data:?}: scan order kept");
        }
        // Every point NaN: an empty cloud, said so.
        let all = Opts {
            nan_every: 1,
            ..BASE
        };
        let (mut src, warnings) =
            open_bytes(&encode_plain(&test_file(&pts[..5], all), PcdData::Binary)).unwrap();
        assert_eq!(src.declared_len(), Some(0));
        assert!(warnings[0].contains("5 of 5 points"), "{warnings:?}");
        assert!(src.next_chunk(10).unwrap().is_none());
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(307_200), "307,200");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn infinite_and_unrepresentable_coordinates_are_errors() {
        use FieldType::Float as F;
        for (size, bad, want) in [
            (
                4,
                u64::from(f32::INFINITY.to_bits()),
                "not a finite coordinate",
            ),
            (8, f64::NEG_INFINITY.to_bits(), "not a finite coordinate"),
            (8, 1e300f64.to_bits(), "beyond f32's range"),
        ] {
            let f = TestFile {
                fields: vec![
                    spec("x", F, size, 1),
                    spec("y", F, 4, 1),
                    spec("z", F, 4, 1),
                ],
                rows: vec![
                    vec![
                        if size == 8 {
                            1f64.to_bits()
                        } else {
                            1f32.to_bits().into()
                        },
                        0,
                        0,
                    ],
                    vec![bad, 0, 0],
                ],
                viewpoint: "0 0 0 1 0 0 0",
                packed_float_text: false,
            };
            for data in KINDS {
                let e = read_bytes(&encode_plain(&f, data)).unwrap_err();
                let want_at = match data {
                    PcdData::Ascii => Location::Line(13),
                    _ => Location::Record(1),
                };
                assert_eq!(at(&e), Some(want_at), "{data:?}: {e}");
                assert!(
                    msg(&e).contains("point 1")
                        && msg(&e).contains(want)
                        && msg(&e).contains("`x`"),
                    "{e}"
                );
            }
        }
        // NaN wins over an infinite coordinate of the same point: it is left out.
        let text = "FIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nWIDTH 2\nDATA ascii\ninf nan 0\n1 2 3\n";
        let (got, _) = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(got.xyz, vec![[1.0, 2.0, 3.0]]);
    }

    #[test]
    fn label_rules() {
        let head = |ty: &str, size: u8, extra: &str| {
            format!("FIELDS x y z label{extra}\nSIZE 4 4 4 {size}{}\nTYPE F F F {ty}{}\nWIDTH 3\nDATA ascii\n",
                if extra.is_empty() { "" } else { " 4" },
                if extra.is_empty() { "" } else { " U" })
        };
        // Signed and float labels that are integers.
        let text = format!(
            "{}0 0 0 -7\n0 0 0 2147483647\n0 0 0 -2147483648\n",
            head("I", 8, "")
        );
        assert_eq!(
            read_bytes(text.as_bytes()).unwrap().0.labels,
            Some(vec![-7, i32::MAX, i32::MIN])
        );
        let text = format!("{}0 0 0 3\n0 0 0 -4\n0 0 0 1e3\n", head("F", 4, ""));
        assert_eq!(
            read_bytes(text.as_bytes()).unwrap().0.labels,
            Some(vec![3, -4, 1000])
        );
        // Out of i32, or not an integer: an error naming the point.
        for (ty, size, value) in [
            ("U", 4, "4294967295"),
            ("I", 8, "-2147483649"),
            ("F", 4, "2.5"),
            ("F", 8, "nan"),
        ] {
            let text = format!("{}0 0 0 1\n0 0 0 {value}\n0 0 0 1\n", head(ty, size, ""));
            let e = read_bytes(text.as_bytes()).unwrap_err();
            assert_eq!(at(&e), Some(Location::Line(7)), "{e}");
            assert!(
                msg(&e).contains("point 1")
                    && msg(&e).contains("label `label`")
                    && msg(&e).contains("i32"),
                "{e}"
            );
        }
        // A value that does not fit its own TYPE/SIZE is a token error.
        let text = format!("{}0 0 0 1\n0 0 0 256\n0 0 0 1\n", head("U", 1, ""));
        let e = read_bytes(text.as_bytes()).unwrap_err();
        assert!(msg(&e).contains("value `256` is not a U 1 number"), "{e}");
        // Precedence: `label` over `class`, with a warning.
        let text = format!(
            "{}0 0 0 1 9\n0 0 0 2 9\n0 0 0 3 9\n",
            head("U", 4, " class")
        );
        let (got, warnings) = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(got.labels, Some(vec![1, 2, 3]));
        assert!(
            warnings.iter().any(|w| w.contains("\"label\", \"class\"")),
            "{warnings:?}"
        );
    }

    #[test]
    fn colour_triples_follow_the_ply_rules() {
        let text = "FIELDS x y z r g b\nSIZE 4 4 4 4 4 4\nTYPE F F F F F F\nWIDTH 2\nDATA ascii\n0 0 0 1.5 -0.2 0.5\n0 0 0 0.002 0.998 nan\n";
        assert_eq!(
            read_bytes(text.as_bytes()).unwrap().0.rgb,
            vec![[255, 0, 128], [1, 254, 0]]
        );
        let text = "FIELDS x y z red green blue\nSIZE 4 4 4 2 2 2\nTYPE F F F U U U\nWIDTH 2\nDATA ascii\n0 0 0 1 2 3\n0 0 0 1 256 3\n";
        let e = read_bytes(text.as_bytes()).unwrap_err();
        assert!(
            msg(&e).contains("point 1") && msg(&e).contains("`green` = 256"),
            "{e}"
        );
        // Packed and a triple: packed wins, with a warning.
        let text = "FIELDS x y z rgb r g b\nSIZE 4 4 4 4 1 1 1\nTYPE F F F U U U U\nWIDTH 1\nDATA ascii\n0 0 0 66051 9 9 9\n";
        let (got, warnings) = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(got.rgb, vec![[1, 2, 3]]);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("several colour fields (`rgb`, r g b)")),
            "{warnings:?}"
        );
    }

    #[test]
    fn ascii_lines_with_the_wrong_number_of_values_name_line_and_point() {
        let head = "# c\nFIELDS x y z _ h\nSIZE 4 4 4 1 4\nTYPE F F F U F\nCOUNT 1 1 1 2 3\nWIDTH 3\nDATA ascii\n";
        let good = "1 2 3 0 0 1 2 3";
        // Blank lines between points are not points.
        let text = format!("{head}{good}\n\n  \n{good}\r\n{good}");
        let (got, _) = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(got.len(), 3);
        for (line, want) in [
            ("1 2 3 0 0 1 2", "7 values, but the fields need 8"),
            ("1 2 3 0 0 1 2 3 4", "more than the 8 values"),
            (
                "1 2 zz 0 0 1 2 3",
                "field `z` value `zz` is not a F 4 number",
            ),
        ] {
            let text = format!("{head}{good}\n{line}\n{good}\n");
            let e = read_bytes(text.as_bytes()).unwrap_err();
            assert_eq!(at(&e), Some(Location::Line(9)), "{e}");
            assert!(msg(&e).contains("point 1") && msg(&e).contains(want), "{e}");
        }
        // Too few lines: the end is named.
        let text = format!("{head}{good}\n{good}\n\n");
        let e = read_bytes(text.as_bytes()).unwrap_err();
        assert!(
            msg(&e).contains("ends after 2 of its 3 points") && msg(&e).contains("POINTS (line 6)"),
            "{e}"
        );
        // A huge COUNT on padding costs nothing: the line simply has too few values.
        let text = "FIELDS x y z _\nSIZE 4 4 4 1\nTYPE F F F U\nCOUNT 1 1 1 1000000000000\nWIDTH 1\nDATA ascii\n1 2 3 4\n";
        assert!(msg(&read_bytes(text.as_bytes()).unwrap_err())
            .contains("4 values, but the fields need 1000000000003"));
    }

    #[test]
    fn trailing_data_is_padding_a_warning_or_refused_under_strict() {
        let f = test_file(&cloud(4), BASE);
        let strict = ImportOptions {
            strict: true,
            ..Default::default()
        };
        for data in [PcdData::Binary, PcdData::BinaryCompressed] {
            // PCL's page padding: zero bytes, silently.
            let mut bytes = encode_plain(&f, data);
            bytes.resize(bytes.len() + 3_900, 0);
            let (_, warnings) = open_bytes_with(&bytes, &strict).unwrap();
            assert!(warnings.is_empty(), "{warnings:?}");
            // Anything else: a warning, refused under --strict.
            bytes.push(1);
            let (mut src, warnings) = open_bytes(&bytes).unwrap();
            assert_eq!(drain(src.as_mut(), 3).unwrap().len(), 4);
            assert!(
                warnings
                    .iter()
                    .any(|w| w.contains("3901 bytes follow the point data")),
                "{warnings:?}"
            );
            let e = open_bytes_with(&bytes, &strict).map(|_| ()).unwrap_err();
            assert!(msg(&e).contains("--strict"), "{e}");
        }
        let mut bytes = encode_plain(&f, PcdData::Ascii);
        bytes.extend_from_slice(b"\n\n1 2 3 4\n");
        let (_, warnings) = open_bytes(&bytes).unwrap();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("line 18 follows the last of the 4 points")),
            "{warnings:?}"
        );
        assert!(open_bytes_with(&bytes, &strict).is_err());
    }

    #[test]
    fn viewpoint_is_kept_as_metadata_with_a_warning() {
        let pts = cloud(3);
        let mut f = test_file(&pts, BASE);
        f.viewpoint = "1 2 3 0.7071 0 0.7071 0";
        let (got, warnings) = read_bytes(&encode_plain(&f, PcdData::Binary)).unwrap();
        assert_eq!(
            got.xyz,
            pts.iter().map(|p| p.xyz).collect::<Vec<_>>(),
            "points untransformed"
        );
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("VIEWPOINT 1 2 3 0.7071 0 0.7071 0")
                && warnings[0].contains("not applied"),
            "{warnings:?}"
        );
    }

    #[test]
    fn binary_and_compressed_sizes_are_checked_before_streaming() {
        let f = test_file(&cloud(6), BASE);
        // binary: the point where the data runs out.
        let bytes = encode_plain(&f, PcdData::Binary);
        let e = open_bytes(&bytes[..bytes.len() - 5])
            .map(|_| ())
            .unwrap_err();
        assert_eq!(at(&e), Some(Location::Record(5)), "{e}");
        assert!(msg(&e).contains("ends inside point 5"), "{e}");

        let bytes = encode_plain(&f, PcdData::BinaryCompressed);
        let data_offset = parse_header(&mut &bytes[..], Path::new("h.pcd"))
            .unwrap()
            .data_offset as usize;
        let set =
            |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let compressed =
            u32::from_le_bytes(bytes[data_offset..data_offset + 4].try_into().unwrap());
        let uncompressed =
            u32::from_le_bytes(bytes[data_offset + 4..data_offset + 8].try_into().unwrap());
        assert_eq!(uncompressed, 6 * 20);
        // The uncompressed size must be POINTS × the point's bytes.
        let mut b = bytes.clone();
        set(&mut b, data_offset + 4, uncompressed + 1);
        let e = open_bytes(&b).map(|_| ()).unwrap_err();
        assert_eq!(at(&e), Some(Location::Byte(data_offset as u64 + 4)));
        assert!(
            msg(&e).contains("declares 121 uncompressed bytes, but 6 points of 20 bytes"),
            "{e}"
        );
        // The compressed size must fit the file.
        let mut b = bytes.clone();
        set(&mut b, data_offset, compressed + 1);
        let e = open_bytes(&b).map(|_| ()).unwrap_err();
        assert_eq!(at(&e), Some(Location::Byte(data_offset as u64)));
        assert!(msg(&e).contains("only"), "{e}");
        let mut b = bytes.clone();
        set(&mut b, data_offset, u32::MAX);
        assert!(open_bytes(&b).is_err());
        // A block that declares less than it holds: the rest is not LZF padding but trailing data
        // (here: zero bytes after a shortened block, which are taken as page padding, so the
        // block itself must be found too short).
        let mut b = bytes.clone();
        set(&mut b, data_offset, compressed - 1);
        let e = open_bytes(&b).map(|_| ()).unwrap_err();
        assert!(matches!(at(&e), Some(Location::Byte(_))), "{e}");
    }

    #[test]
    fn a_file_that_changes_after_import_fails_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let pts = cloud(10);
        let o = Opts {
            nan_every: 4,
            ..BASE
        };
        for data in KINDS {
            let f = test_file(&pts, o);
            let path = write_file(dir.path(), "c.pcd", &encode_plain(&f, data));
            // Another header.
            let mut scene = import(&path, &ImportOptions::default()).unwrap();
            write_file(
                dir.path(),
                "c.pcd",
                &encode_plain(&test_file(&pts[..9], o), data),
            );
            let e = drain(scene.clouds[0].as_mut(), 4).unwrap_err();
            assert!(
                msg(&e).contains("changed since it was imported"),
                "{data:?}: {e}"
            );
            // Same header and size, one more NaN point.
            write_file(dir.path(), "c.pcd", &encode_plain(&f, data));
            let mut scene = import(&path, &ImportOptions::default()).unwrap();
            assert_eq!(scene.clouds[0].declared_len(), Some(7));
            let mut f2 = test_file(&pts, o);
            let one = u64::from(f32::NAN.to_bits());
            f2.rows[9][1] = one;
            write_file(dir.path(), "c.pcd", &encode_plain(&f2, data));
            let e = drain(scene.clouds[0].as_mut(), 4).unwrap_err();
            assert!(
                msg(&e).contains("changed since it was imported"),
                "{data:?}: {e}"
            );
            if data == PcdData::Binary {
                // Same size and header: the count tells.
                assert!(
                    msg(&e).contains("now has 6 points with coordinates, the import counted 7"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn folder_import_sorts_by_name_and_detection_knows_pcd() {
        use crate::import::{detect, open};
        let dir = tempfile::tempdir().unwrap();
        let bytes = encode_plain(&test_file(&cloud(5), BASE), PcdData::Ascii);
        for name in ["b.pcd", "a.PCD", "c.pcd"] {
            write_file(dir.path(), name, &bytes);
        }
        write_file(dir.path(), "notes.txt", b"not a cloud");
        assert_eq!(detect(dir.path()).unwrap(), Format::Pcd);
        assert_eq!(detect(&dir.path().join("a.PCD")).unwrap(), Format::Pcd);
        let scene = open(dir.path(), Format::Auto, &ImportOptions::default()).unwrap();
        let names: Vec<&str> = scene.clouds.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(scene.format, Format::Pcd);
        assert!(scene.views.is_empty() && !scene.no_sfm_points);

        // A folder with PLY and PCD clouds: --format chooses, and only that extension is read.
        let ply = b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n1 2 3\n";
        write_file(dir.path(), "d.ply", ply);
        let e = detect(dir.path()).unwrap_err();
        assert!(
            msg(&e).contains(".ply (1) and .pcd (3)")
                && msg(&e).contains("--format ply, pcd, las, e57 or obj"),
            "{e}"
        );
        let scene = open(dir.path(), Format::Pcd, &ImportOptions::default()).unwrap();
        assert_eq!(scene.clouds.len(), 3);
        let scene = open(dir.path(), Format::Ply, &ImportOptions::default()).unwrap();
        assert_eq!(scene.clouds.len(), 1);

        // Stems must be unique.
        write_file(dir.path(), "a.pcd", &bytes);
        let e = import(dir.path(), &ImportOptions::default()).unwrap_err();
        assert!(msg(&e).contains("cloud name `a`"), "{e}");
        let empty = tempfile::tempdir().unwrap();
        assert!(
            msg(&import(empty.path(), &ImportOptions::default()).unwrap_err()).contains("no .pcd")
        );
        // Guess failures mention PCD.
        let e = detect(empty.path()).unwrap_err();
        assert!(msg(&e).contains(".pcd") && msg(&e).contains("|pcd"), "{e}");
        let e = detect(&write_file(empty.path(), "x.pts", b"")).unwrap_err();
        assert!(msg(&e).contains(".pcd"), "{e}");

        // --images and --depths mean nothing to a point cloud.
        for options in [
            ImportOptions {
                images: Some("imgs".into()),
                ..Default::default()
            },
            ImportOptions {
                depths: Some("d".into()),
                ..Default::default()
            },
        ] {
            let e = open(&dir.path().join("b.pcd"), Format::Auto, &options).unwrap_err();
            assert!(
                msg(&e).contains("PCD point cloud, which has no images"),
                "{e}"
            );
        }
    }

    #[test]
    fn every_truncation_fails_unless_it_leaves_a_valid_file() {
        let o = Opts {
            extra: true,
            normals: Normals::Pcl,
            nan_every: 3,
            ..BASE
        };
        let f = test_file(&cloud(6), o);
        for data in KINDS {
            let bytes = encode_plain(&f, data);
            let last_token = bytes[..bytes.len() - 1]
                .iter()
                .rposition(|&b| b == b' ')
                .unwrap()
                + 1;
            for cut in 0..bytes.len() {
                let r = open_bytes(&bytes[..cut]).and_then(|(mut s, _)| drain(s.as_mut(), 4));
                match r {
                    Err(_) => {}
                    // ASCII cut inside its last number reads that number's prefix, which no
                    // reader can tell from a file written without a final newline.
                    Ok(_) if data == PcdData::Ascii && cut >= last_token => {}
                    Ok(p) => panic!(
                        "{data:?}: cut at {cut} of {} gave {} points",
                        bytes.len(),
                        p.len()
                    ),
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // LZF
    // -----------------------------------------------------------------------------------------

    fn decode_all(block: &[u8], out_len: u64) -> Result<Vec<u8>, LzfError> {
        let mut d = LzfDecoder::new(block, block.len() as u64, out_len);
        let mut out = vec![0; out_len as usize];
        let n = d.read(&mut out)?;
        assert_eq!(n, out.len());
        d.finish()?;
        Ok(out)
    }

    #[test]
    fn lzf_hand_made_blocks() {
        // A literal run, then a back-reference of 3 bytes from 3 back.
        assert_eq!(
            decode_all(&[2, b'a', b'b', b'c', 0x20, 2], 6).unwrap(),
            b"abcabc"
        );
        // A reference overlapping its own output: 5 bytes from 1 back.
        assert_eq!(decode_all(&[0, b'x', 0x60, 0], 6).unwrap(), b"xxxxxx");
        // A long reference: length 7 + 10 + 2 = 19, from 2 back.
        let mut want = b"ab".repeat(11);
        want.pop();
        assert_eq!(decode_all(&[1, b'a', b'b', 0xE0, 10, 1], 21).unwrap(), want);
        // The longest reference, 264 bytes.
        assert_eq!(
            decode_all(&[0, 7, 0xE0, 255, 0], 265).unwrap(),
            vec![7; 265]
        );
        // The farthest reference: 8,192 bytes back, across the window's wrap.
        let data: Vec<u8> = (0..LZF_WINDOW + 100).map(|i| (i * 7 % 251) as u8).collect();
        let mut block = Vec::new();
        for run in data.chunks(32) {
            block.push(run.len() as u8 - 1);
            block.extend_from_slice(run);
        }
        block.extend_from_slice(&[0x20 | 31, 255]);
        let mut want = data.clone();
        want.extend_from_slice(&data[100..103]);
        assert_eq!(decode_all(&block, want.len() as u64).unwrap(), want);
        // An empty block is an empty output.
        assert_eq!(decode_all(&[], 0).unwrap(), b"");

        // Damage, each found where it is.
        let cases: Vec<(&[u8], u64, &str, u64)> = vec![
            (&[0x20, 0], 3, "before the start", 0),
            (
                &[0, b'a', 0x20, 1],
                4,
                "back-reference at uncompressed byte 1 reaches back 2 (to byte -1), before the start",
                2,
            ),
            (
                &[3, 1, 2, 3, 4],
                3,
                "of 4 bytes at uncompressed byte 0 runs past the declared uncompressed size 3",
                0,
            ),
            (&[0, 1, 0x20, 0], 3, "runs past", 2),
            (&[5, 1, 2], 6, "ends after 0 of its 6", 0),
            (&[0, 1, 0x20], 4, "ends after 1 of its 4", 2),
            (&[0, 1, 0xE0, 5], 20, "ends after 1", 2),
            (&[0, 1], 5, "ends after 1 of its 5", 2),
            (&[0, 1, 0, 2], 1, "2 compressed bytes remain", 2),
        ];
        for (block, out_len, want, offset) in cases {
            let e = decode_all(block, out_len).unwrap_err();
            assert!(
                e.to_string().contains(want),
                "{block:?}: {e} should contain {want:?}"
            );
            assert_eq!(e.offset(), Some(offset), "{block:?}: {e}");
            assert!(
                naive_decompress(block, out_len as usize).is_none(),
                "{block:?}"
            );
        }
        // The source ends before the block's declared size.
        let mut d = LzfDecoder::new(&[0u8, 1][..], 10, 5);
        let e = d.read(&mut [0; 5]).unwrap_err();
        assert!(matches!(e, LzfError::Io(_)), "{e}");
    }

    /// Data whose compression needs every kind of instruction: noise, runs, and repeats near and
    /// far.
    fn mixed_data(n: usize, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let mut data = Vec::with_capacity(n);
        while data.len() < n {
            match rng.below(4) {
                0 => data.extend((0..rng.below(100)).map(|_| rng.below(256) as u8)),
                1 => data.extend(std::iter::repeat_n(
                    rng.below(256) as u8,
                    rng.below(600) as usize,
                )),
                _ if data.len() > 16 => {
                    let back = 1 + rng.below(data.len().min(9000) as u64) as usize;
                    let len = rng.below(300) as usize;
                    for _ in 0..len {
                        data.push(data[data.len() - back]);
                    }
                }
                _ => data.push(1),
            }
        }
        data.truncate(n);
        data
    }

    #[test]
    fn lzf_streams_in_any_pieces_and_agrees_with_whole_buffer_decoding() {
        let mut stats = LzfStats::default();
        for seed in 0..6 {
            let data = mixed_data(50_000, seed);
            let block = lzf_compress(&data, &mut stats);
            assert_eq!(
                naive_decompress(&block, data.len()).as_deref(),
                Some(&data[..])
            );
            assert_eq!(decode_all(&block, data.len() as u64).unwrap(), data);
            // Pieces of odd sizes, with skips between them.
            let mut d = LzfDecoder::new(&block[..], block.len() as u64, data.len() as u64);
            let mut rng = Rng::new(seed);
            let mut pos = 0;
            while pos < data.len() {
                let n = 1 + rng.below(5000) as usize;
                if rng.below(3) == 0 {
                    let skipped = d.skip(n as u64).unwrap() as usize;
                    pos += skipped;
                } else {
                    let mut buf = vec![0; n];
                    let got = d.read(&mut buf).unwrap();
                    assert_eq!(buf[..got], data[pos..pos + got]);
                    pos += got;
                }
                assert_eq!(d.produced(), pos as u64);
            }
            assert_eq!(d.read(&mut [0; 4]).unwrap(), 0);
            d.finish().unwrap();
        }
        // The test data met every instruction the format has.
        assert!(
            stats.literals > 0 && stats.short_refs > 0 && stats.long_refs > 0,
            "{stats:?}"
        );
        assert!(
            stats.overlapping > 0 && stats.max_distance > 8000,
            "{stats:?}"
        );

        // Corrupted blocks: the streaming decoder fails exactly when liblzf's would, and agrees
        // on the output otherwise.
        let data = mixed_data(3_000, 99);
        let block = lzf_compress(&data, &mut LzfStats::default());
        let mut rng = Rng::new(5);
        for _ in 0..3_000 {
            let mut b = block.clone();
            for _ in 0..1 + rng.below(3) {
                let i = rng.below(b.len() as u64) as usize;
                b[i] = rng.below(256) as u8;
            }
            let cut = if rng.below(4) == 0 {
                rng.below(b.len() as u64) as usize
            } else {
                b.len()
            };
            let b = &b[..cut];
            let want = naive_decompress(b, data.len());
            let got = decode_all(b, data.len() as u64).ok();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_forked_decoder_goes_on_where_its_parent_is() {
        let data = mixed_data(40_000, 8);
        let block = lzf_compress(&data, &mut LzfStats::default());
        let mut rng = Rng::new(2);
        for _ in 0..50 {
            let mut a = LzfDecoder::new(&block[..], block.len() as u64, data.len() as u64);
            let at = rng.below(data.len() as u64 + 1);
            a.skip(at).unwrap();
            let pos = a.source_position() as usize;
            let mut b = a.fork(&block[pos..]);
            let (mut ra, mut rb) = (vec![0; data.len()], vec![0; data.len()]);
            let na = a.read(&mut ra).unwrap();
            let nb = b.read(&mut rb).unwrap();
            assert_eq!(
                (na, nb),
                (data.len() - at as usize, data.len() - at as usize)
            );
            assert!(ra[..na] == data[at as usize..] && rb[..nb] == data[at as usize..]);
            a.finish().unwrap();
            b.finish().unwrap();
        }
    }

    #[test]
    fn the_decoders_memory_is_the_window_whatever_the_data_size() {
        let small = LzfDecoder::new(&[][..], 0, 0).buffer_bytes();
        assert_eq!(small, LZF_WINDOW + LZF_INPUT_BUFFER);
        for n in [1usize << 12, 1 << 22] {
            let data = mixed_data(n, 3);
            let block = lzf_compress(&data, &mut LzfStats::default());
            let mut d = LzfDecoder::new(&block[..], block.len() as u64, n as u64);
            let mut buf = [0u8; 1000];
            let mut at = 0;
            loop {
                let k = d.read(&mut buf).unwrap();
                if k == 0 {
                    break;
                }
                assert_eq!(buf[..k], data[at..at + k]);
                at += k;
                assert_eq!(d.buffer_bytes(), small);
            }
            d.finish().unwrap();
        }
        // A cloud of 200,000 points (4 MB of field-major data): its streams hold one decoder
        // and one small buffer per used field, however many points there are.
        let pts: Vec<Pt> = cloud(1_000).into_iter().cycle().take(200_000).collect();
        let bytes = encode_plain(
            &test_file(
                &pts,
                Opts {
                    normals: Normals::Pcl,
                    ..BASE
                },
            ),
            PcdData::BinaryCompressed,
        );
        let (src, _) = open_bytes(&bytes).unwrap();
        drop(src);
        let input = Input::Bytes(bytes.into());
        let mut warnings = Vec::new();
        let mut cloud = PcdCloud::open(
            input,
            Path::new("m.pcd"),
            "m".into(),
            &ImportOptions::default(),
            &mut warnings,
        )
        .unwrap();
        let c = cloud.next_chunk(1000).unwrap().unwrap();
        assert_eq!(c.len(), 1000);
        let Some(Scan {
            rows: Rows::Compressed(rows),
            ..
        }) = &cloud.scan
        else {
            panic!("streaming a binary_compressed cloud")
        };
        // x y z rgb normal_x normal_y normal_z label.
        assert_eq!(rows.streams.len(), 8);
        for s in &rows.streams {
            assert_eq!(
                s.dec.buffer_bytes() + s.buf.len(),
                LZF_WINDOW + LZF_INPUT_BUFFER + FIELD_BUFFER
            );
        }
        assert_eq!(drain(&mut cloud, 65_536).unwrap().len(), 199_000);
    }

    // -----------------------------------------------------------------------------------------
    // Real data
    // -----------------------------------------------------------------------------------------

    const MOSD: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/mosd_kinect_labeled"
    );

    /// The three mOSD Kinect frames (PCD v0.7 binary_compressed, `label x y z rgba`, 640×480 with
    /// NaN pixels) import to exactly the points of the PLY copies made of them: NaN points
    /// dropped, scan order kept, rgba split into red green blue (see SOURCE.md there).
    #[test]
    fn mosd_pcd_frames_match_their_ply_conversions() {
        let dir = Path::new(MOSD);
        if !dir.join("pcd").is_dir() || !dir.join("ply").is_dir() {
            eprintln!("skipped: {} is absent", dir.display());
            return;
        }
        let mut pcd = import(&dir.join("pcd"), &ImportOptions::default()).unwrap();
        let mut ply =
            crate::import::ply::import(&dir.join("ply"), &ImportOptions::default()).unwrap();
        let names: Vec<&str> = pcd.clouds.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["learn33", "test45", "test63"]);
        assert_eq!(
            pcd.warnings.len(),
            3,
            "one NaN warning per frame: {:?}",
            pcd.warnings
        );
        for (a, b) in pcd.clouds.iter_mut().zip(ply.clouds.iter_mut()) {
            assert_eq!(a.name(), b.name());
            let n = b.declared_len().unwrap();
            assert_eq!(a.declared_len(), Some(n), "{}", a.name());
            assert!(a.has_labels() && !a.has_normals());
            let want = format!(
                "{}.pcd: {} of 307,200 points have NaN coordinates (no measurement at those sensor pixels) and are left out",
                a.name(),
                thousands(307_200 - n)
            );
            assert!(
                pcd.warnings.iter().any(|w| w.ends_with(&want)),
                "{want} in {:?}",
                pcd.warnings
            );
            let got = drain(a.as_mut(), 4096).unwrap();
            let want = drain(b.as_mut(), 1 << 20).unwrap();
            assert_eq!(got.len() as u64, n);
            assert!(
                got.xyz
                    .iter()
                    .zip(&want.xyz)
                    .all(|(p, q)| p.map(f32::to_bits) == q.map(f32::to_bits)),
                "{}: positions",
                a.name()
            );
            assert!(got.rgb == want.rgb, "{}: colours", a.name());
            assert!(got.labels == want.labels, "{}: labels", a.name());
        }
        // test63's 124,828 invalid pixels, as SOURCE.md counts them.
        assert!(pcd
            .warnings
            .iter()
            .any(|w| w.contains("test63.pcd: 124,828 of 307,200 points")));
    }
}
