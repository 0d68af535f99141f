//! PLY header: the types that describe a file's layout and the parser that builds them.
//!
//! Owns [`PlyHeader`], [`PlyElement`], [`PlyProperty`], [`PropertyKind`], [`ScalarType`] and
//! [`PlyFormat`], and [`parse_header`], which reads from any [`BufRead`] up to and including the
//! `end_header` line and leaves the source positioned at the first data byte.
//!
//! Invariants of a parsed [`PlyHeader`]:
//! - the first line was `ply`, exactly one `format` line named a known format with version 1.0,
//!   and the header ended with `end_header` (lines may end in `\n` or `\r\n`);
//! - element names are unique within the file and property names unique within an element, so
//!   lookup by name is unambiguous;
//! - list count types are integers;
//! - nothing was allocated from a declared count: `count` is only a number until rows are read.
//!
//! Every error names the file and the 1-based header line.

use std::io::BufRead;
use std::path::Path;

use crate::import::{ImportError, Location};

/// Longest header line accepted. Real header lines are short (`property float32 f_rest_44` is 26
/// bytes); long ones are comments, and 64 KiB is far beyond any comment a tool writes. The cap
/// keeps a binary file misnamed `.ply` from being read into memory as one "line".
pub const MAX_HEADER_LINE: usize = 64 * 1024;

/// Largest header accepted, in bytes. A 3DGS header with 62 properties is ~1.6 KB; 16 MiB leaves
/// room for thousands of comment lines while bounding what a malformed file can make us hold.
pub const MAX_HEADER_BYTES: u64 = 16 * 1024 * 1024;

/// Encoding of the data section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlyFormat {
    Ascii,
    BinaryLittleEndian,
    BinaryBigEndian,
}

impl PlyFormat {
    /// The keyword used on the `format` line.
    pub fn keyword(self) -> &'static str {
        match self {
            PlyFormat::Ascii => "ascii",
            PlyFormat::BinaryLittleEndian => "binary_little_endian",
            PlyFormat::BinaryBigEndian => "binary_big_endian",
        }
    }
}

/// A PLY scalar type. Every value of every type converts to `f64` exactly (the widest integer is
/// 32 bits, below f64's 53-bit mantissa).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    F32,
    F64,
}

impl ScalarType {
    /// Parses a type name: the original names (`char uchar short ushort int uint float double`)
    /// and the sized aliases (`int8 uint8 int16 uint16 int32 uint32 float32 float64`).
    pub fn from_name(name: &str) -> Option<ScalarType> {
        Some(match name {
            "char" | "int8" => ScalarType::I8,
            "uchar" | "uint8" => ScalarType::U8,
            "short" | "int16" => ScalarType::I16,
            "ushort" | "uint16" => ScalarType::U16,
            "int" | "int32" => ScalarType::I32,
            "uint" | "uint32" => ScalarType::U32,
            "float" | "float32" => ScalarType::F32,
            "double" | "float64" => ScalarType::F64,
            _ => return None,
        })
    }

    /// The original (unsized) PLY name, used in messages and by writers.
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::I8 => "char",
            ScalarType::U8 => "uchar",
            ScalarType::I16 => "short",
            ScalarType::U16 => "ushort",
            ScalarType::I32 => "int",
            ScalarType::U32 => "uint",
            ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    /// Size in bytes in a binary file.
    pub fn size(self) -> usize {
        match self {
            ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F32 | ScalarType::F64)
    }

    /// Inclusive value range of an integer type (`None` for floats).
    pub fn int_range(self) -> Option<(i64, i64)> {
        Some(match self {
            ScalarType::I8 => (i8::MIN as i64, i8::MAX as i64),
            ScalarType::U8 => (0, u8::MAX as i64),
            ScalarType::I16 => (i16::MIN as i64, i16::MAX as i64),
            ScalarType::U16 => (0, u16::MAX as i64),
            ScalarType::I32 => (i32::MIN as i64, i32::MAX as i64),
            ScalarType::U32 => (0, u32::MAX as i64),
            ScalarType::F32 | ScalarType::F64 => return None,
        })
    }
}

/// What a property holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertyKind {
    Scalar(ScalarType),
    /// `property list COUNT ITEM NAME`: a per-row count followed by that many items.
    List {
        count: ScalarType,
        item: ScalarType,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlyProperty {
    pub name: String,
    pub kind: PropertyKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlyElement {
    pub name: String,
    /// Declared number of rows. Untrusted: never allocate from it.
    pub count: u64,
    /// All properties, lists included, in header order.
    pub properties: Vec<PlyProperty>,
}

impl PlyElement {
    /// Scalar properties in header order, as a reader row holds them (lists are skipped).
    pub fn scalars(&self) -> impl Iterator<Item = (&str, ScalarType)> + '_ {
        self.properties.iter().filter_map(|p| match p.kind {
            PropertyKind::Scalar(t) => Some((p.name.as_str(), t)),
            PropertyKind::List { .. } => None,
        })
    }

    /// Number of scalar properties: the length of a row buffer for [`super::PlyReader::read_row`].
    pub fn scalar_count(&self) -> usize {
        self.scalars().count()
    }

    /// Index of the scalar property `name` within a row, with its type. `None` if there is no
    /// such property or it is a list.
    pub fn scalar_index(&self, name: &str) -> Option<(usize, ScalarType)> {
        self.scalars()
            .enumerate()
            .find(|(_, (n, _))| *n == name)
            .map(|(i, (_, t))| (i, t))
    }

    pub fn property(&self, name: &str) -> Option<&PlyProperty> {
        self.properties.iter().find(|p| p.name == name)
    }

    /// Bytes per row in a binary file, when every property is a scalar (lists make rows
    /// variable-sized).
    pub fn fixed_row_size(&self) -> Option<u64> {
        self.properties
            .iter()
            .map(|p| match p.kind {
                PropertyKind::Scalar(t) => Some(t.size() as u64),
                PropertyKind::List { .. } => None,
            })
            .sum()
    }
}

/// A parsed header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlyHeader {
    pub format: PlyFormat,
    /// Elements in file order (the order their data appears in).
    pub elements: Vec<PlyElement>,
    /// `comment` lines, without the keyword.
    pub comments: Vec<String>,
    /// `obj_info` lines, without the keyword.
    pub obj_info: Vec<String>,
    /// Bytes from the start of the file to the first data byte (the header, `end_header\n`
    /// included).
    pub len_bytes: u64,
    /// Number of header lines, `end_header` included: the data of an ASCII file starts on line
    /// `lines + 1`.
    pub lines: u64,
}

impl PlyHeader {
    /// Index and description of the element `name`.
    pub fn element(&self, name: &str) -> Option<(usize, &PlyElement)> {
        self.elements
            .iter()
            .enumerate()
            .find(|(_, e)| e.name == name)
    }

    /// Exact size in bytes of a binary file that holds exactly the declared data, when every
    /// element has fixed-size rows; `None` for ASCII files or when a list makes rows vary. Lets
    /// an importer detect a lying header from the file size before reading any data.
    pub fn expected_binary_len(&self) -> Option<u128> {
        if self.format == PlyFormat::Ascii {
            return None;
        }
        let mut total = self.len_bytes as u128;
        for e in &self.elements {
            // u64 × u64 fits in u128, and at most a few thousand elements fit in a 16 MiB
            // header, so the sum cannot overflow either.
            total += e.count as u128 * e.fixed_row_size()? as u128;
        }
        Some(total)
    }
}

/// Result of reading one bounded line.
pub(crate) enum LineRead {
    /// A line; the buffer holds it without its `\n` / `\r\n`.
    Complete,
    /// End of input; the buffer holds the unterminated remainder (possibly empty).
    Eof,
    /// The line exceeded the limit; nothing more of it is held.
    TooLong,
}

/// Reads one line of at most `limit` bytes into `buf` (cleared first), consuming its `\n`, and
/// strips a trailing `\r`. Returns the bytes consumed from the source as well.
pub(crate) fn read_line_bounded<R: BufRead>(
    src: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<(LineRead, u64)> {
    buf.clear();
    let mut consumed = 0u64;
    loop {
        let avail = match src.fill_buf() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            strip_cr(buf);
            return Ok((LineRead::Eof, consumed));
        }
        let (take, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let content = if done { take - 1 } else { take };
        if buf.len() + content > limit {
            return Ok((LineRead::TooLong, consumed));
        }
        buf.extend_from_slice(&avail[..content]);
        src.consume(take);
        consumed += take as u64;
        if done {
            strip_cr(buf);
            return Ok((LineRead::Complete, consumed));
        }
    }
}

fn strip_cr(buf: &mut Vec<u8>) {
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
}

/// Parses a header from `src`, leaving it at the first data byte. `path` only names the file
/// in errors.
pub fn parse_header<R: BufRead>(src: &mut R, path: &Path) -> Result<PlyHeader, ImportError> {
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut len_bytes = 0u64;
    let mut format: Option<PlyFormat> = None;
    let mut elements: Vec<PlyElement> = Vec::new();
    let mut comments = Vec::new();
    let mut obj_info = Vec::new();
    let err = |line: u64, msg: String| ImportError::parse(path, Location::Line(line), msg);

    loop {
        line_no += 1;
        let (kind, n) = read_line_bounded(src, &mut buf, MAX_HEADER_LINE)
            .map_err(|e| ImportError::io(path, e))?;
        len_bytes += n;
        if len_bytes > MAX_HEADER_BYTES {
            return Err(err(
                line_no,
                format!("PLY header exceeds {MAX_HEADER_BYTES} bytes without end_header; the file is not a PLY or is corrupt"),
            ));
        }
        match kind {
            LineRead::TooLong => {
                return Err(err(
                    line_no,
                    format!(
                        "header line longer than {MAX_HEADER_LINE} bytes{}",
                        if line_no == 1 {
                            "; this is not a PLY file"
                        } else {
                            "; is end_header missing?"
                        }
                    ),
                ))
            }
            LineRead::Eof if buf.is_empty() => {
                return Err(err(
                    line_no,
                    if line_no == 1 {
                        "empty file; expected a PLY header starting with `ply`".to_owned()
                    } else {
                        format!("file ends inside the PLY header after {} line(s): no end_header line; the file is truncated or not a PLY", line_no - 1)
                    },
                ))
            }
            LineRead::Eof => {
                // The last header line has no newline; `end_header` must be followed by one.
                if trimmed(&buf) == b"end_header" {
                    return Err(err(
                        line_no,
                        "end_header is not followed by a newline; the file is truncated".into(),
                    ));
                }
            }
            LineRead::Complete => {}
        }
        let text = String::from_utf8_lossy(&buf);
        if line_no == 1 {
            if text.trim_end() != "ply" {
                return Err(err(
                    1,
                    "first line is not `ply`; this is not a PLY file".into(),
                ));
            }
            continue;
        }
        if matches!(kind, LineRead::Eof) {
            return Err(err(
                line_no,
                "file ends inside the PLY header: no end_header line; the file is truncated or not a PLY".into(),
            ));
        }
        let mut words = text.split_ascii_whitespace();
        let Some(keyword) = words.next() else {
            continue; // tolerate blank header lines
        };
        let rest: Vec<&str> = words.collect();
        match keyword {
            "comment" | "obj_info" => {
                let body = text.trim_start()[keyword.len()..].trim().to_owned();
                if keyword == "comment" {
                    comments.push(body);
                } else {
                    obj_info.push(body);
                }
            }
            "format" => {
                if format.is_some() {
                    return Err(err(line_no, "second `format` line".into()));
                }
                let [name, version] = rest[..] else {
                    return Err(err(
                        line_no,
                        "expected `format ascii|binary_little_endian|binary_big_endian 1.0`".into(),
                    ));
                };
                let f = match name {
                    "ascii" => PlyFormat::Ascii,
                    "binary_little_endian" => PlyFormat::BinaryLittleEndian,
                    "binary_big_endian" => PlyFormat::BinaryBigEndian,
                    other => {
                        return Err(err(
                            line_no,
                            format!("unknown format `{other}`; expected ascii, binary_little_endian or binary_big_endian"),
                        ))
                    }
                };
                if version != "1.0" && version != "1" {
                    return Err(err(
                        line_no,
                        format!("unsupported PLY version `{version}`; only 1.0 exists"),
                    ));
                }
                format = Some(f);
            }
            "element" => {
                let [name, count] = rest[..] else {
                    return Err(err(line_no, "expected `element NAME COUNT`".into()));
                };
                let count: u64 = count.parse().map_err(|_| {
                    err(
                        line_no,
                        format!("element `{name}` count `{count}` is not a non-negative integer"),
                    )
                })?;
                if elements.iter().any(|e| e.name == name) {
                    return Err(err(line_no, format!("element `{name}` is declared twice")));
                }
                elements.push(PlyElement {
                    name: name.to_owned(),
                    count,
                    properties: Vec::new(),
                });
            }
            "property" => {
                let Some(element) = elements.last_mut() else {
                    return Err(err(line_no, "`property` before any `element` line".into()));
                };
                let ty = |name: &str| {
                    ScalarType::from_name(name).ok_or_else(|| {
                        err(
                            line_no,
                            format!("unknown property type `{name}`; expected char, uchar, short, ushort, int, uint, float, double or int8..float64"),
                        )
                    })
                };
                let (kind, name) = match rest[..] {
                    ["list", count, item, name] => {
                        let count = ty(count)?;
                        if count.is_float() {
                            return Err(err(
                                line_no,
                                format!(
                                    "list `{name}` has a {} count; list counts must be integers",
                                    count.name()
                                ),
                            ));
                        }
                        (
                            PropertyKind::List {
                                count,
                                item: ty(item)?,
                            },
                            name,
                        )
                    }
                    ["list", ..] => {
                        return Err(err(
                            line_no,
                            "expected `property list COUNT_TYPE ITEM_TYPE NAME`".into(),
                        ))
                    }
                    [t, name] => (PropertyKind::Scalar(ty(t)?), name),
                    _ => return Err(err(line_no, "expected `property TYPE NAME`".into())),
                };
                if element.properties.iter().any(|p| p.name == name) {
                    return Err(err(
                        line_no,
                        format!(
                            "property `{name}` appears twice in element `{}`",
                            element.name
                        ),
                    ));
                }
                element.properties.push(PlyProperty {
                    name: name.to_owned(),
                    kind,
                });
            }
            "end_header" => {
                if !rest.is_empty() {
                    return Err(err(line_no, "unexpected words after end_header".into()));
                }
                let Some(format) = format else {
                    return Err(err(line_no, "header has no `format` line".into()));
                };
                return Ok(PlyHeader {
                    format,
                    elements,
                    comments,
                    obj_info,
                    len_bytes,
                    lines: line_no,
                });
            }
            other => {
                let shown: String = other.chars().take(40).collect();
                return Err(err(
                    line_no,
                    format!("unknown header keyword `{shown}`; is end_header missing or the header corrupt?"),
                ));
            }
        }
    }
}

fn trimmed(b: &[u8]) -> &[u8] {
    let s = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let e = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(s, |i| i + 1);
    &b[s..e]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Read};

    fn parse(text: &[u8]) -> Result<(PlyHeader, Vec<u8>), ImportError> {
        let mut c = Cursor::new(text);
        let h = parse_header(&mut c, Path::new("t.ply"))?;
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        Ok((h, rest))
    }

    fn line_of(e: ImportError) -> (u64, String) {
        let s = e.to_string();
        match e {
            ImportError::Parse {
                at: Location::Line(l),
                ..
            } => (l, s),
            other => panic!("expected a header line error, got {other:?}"),
        }
    }

    #[test]
    fn parses_all_keywords_and_types() {
        let text = b"ply\r\nformat binary_big_endian 1.0\r\ncomment made by  hand \r\nobj_info v1\r\n\
element vertex 3\r\nproperty float32 x\r\nproperty double y\r\nproperty int8 a\r\nproperty uchar b\r\n\
property short c\r\nproperty uint16 d\r\nproperty int e\r\nproperty uint32 f\r\n\
property list uint8 int vertex_indices\r\nelement face 0\r\nend_header\r\nDATA";
        let (h, rest) = parse(text).unwrap();
        assert_eq!(rest, b"DATA");
        assert_eq!(h.len_bytes as usize, text.len() - 4);
        assert_eq!(h.lines, 16);
        assert_eq!(h.format, PlyFormat::BinaryBigEndian);
        assert_eq!(h.comments, vec!["made by  hand".to_owned()]);
        assert_eq!(h.obj_info, vec!["v1".to_owned()]);
        let (i, v) = h.element("vertex").unwrap();
        assert_eq!((i, v.count, v.properties.len()), (0, 3, 9));
        assert_eq!(v.scalar_count(), 8);
        assert_eq!(v.scalar_index("y"), Some((1, ScalarType::F64)));
        assert_eq!(v.scalar_index("f"), Some((7, ScalarType::U32)));
        assert_eq!(v.scalar_index("vertex_indices"), None);
        assert_eq!(
            v.property("vertex_indices").unwrap().kind,
            PropertyKind::List {
                count: ScalarType::U8,
                item: ScalarType::I32
            }
        );
        assert_eq!(v.fixed_row_size(), None);
        let types: Vec<_> = v.scalars().map(|(_, t)| t).collect();
        use ScalarType::*;
        assert_eq!(types, vec![F32, F64, I8, U8, I16, U16, I32, U32]);
        assert_eq!(h.element("face").unwrap().0, 1);
    }

    #[test]
    fn expected_len_for_fixed_rows() {
        let text = b"ply\nformat binary_little_endian 1.0\nelement vertex 1000000000000000\nproperty float x\nproperty uchar r\nend_header\n";
        let (h, _) = parse(text).unwrap();
        assert_eq!(
            h.expected_binary_len(),
            Some(text.len() as u128 + 5 * 1_000_000_000_000_000)
        );
        let (h, _) =
            parse(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nend_header\n")
                .unwrap();
        assert_eq!(h.expected_binary_len(), None);
    }

    #[test]
    fn errors_name_the_line() {
        let cases: &[(&[u8], u64, &str)] = &[
            (b"", 1, "empty file"),
            (b"plx\nformat ascii 1.0\n", 1, "not a PLY"),
            (b"ply\nformat ascii 2.0\nend_header\n", 2, "version"),
            (b"ply\nformat utf8 1.0\nend_header\n", 2, "unknown format"),
            (b"ply\nformat ascii 1.0\nelement vertex -3\nend_header\n", 3, "count"),
            (b"ply\nformat ascii 1.0\nproperty float x\nend_header\n", 3, "before any"),
            (b"ply\nformat ascii 1.0\nelement v 1\nproperty half x\nend_header\n", 4, "unknown property type"),
            (b"ply\nformat ascii 1.0\nelement v 1\nproperty list float int i\nend_header\n", 4, "must be integers"),
            (b"ply\nformat ascii 1.0\nelement v 1\nproperty float x\nproperty float x\nend_header\n", 5, "twice"),
            (b"ply\nformat ascii 1.0\nelement v 1\nelement v 2\nend_header\n", 4, "twice"),
            (b"ply\nelement v 1\nend_header\n", 3, "no `format`"),
            (b"ply\nformat ascii 1.0\nelement v 1\nproperty float x\n", 5, "no end_header"),
            (b"ply\nformat ascii 1.0\nelement v 1\nproperty float x", 4, "no end_header"),
            (b"ply\nformat ascii 1.0\nend_header", 3, "not followed by a newline"),
            (b"ply\nformat ascii 1.0\nelemnt v 1\nend_header\n", 3, "unknown header keyword"),
        ];
        for (text, want_line, want_msg) in cases {
            let (line, msg) = line_of(parse(text).unwrap_err());
            assert_eq!(line, *want_line, "{msg}");
            assert!(
                msg.contains(want_msg),
                "{msg:?} should contain {want_msg:?}"
            );
            assert!(msg.starts_with("t.ply: line "), "{msg}");
        }
    }

    #[test]
    fn overlong_line_is_refused_without_reading_it_all() {
        let mut text = b"ply\nformat ascii 1.0\ncomment ".to_vec();
        text.extend(vec![b'a'; MAX_HEADER_LINE + 10]);
        let (line, msg) = line_of(parse(&text).unwrap_err());
        assert_eq!(line, 3, "{msg}");
        // Binary junk on line 1.
        let junk = vec![0u8; MAX_HEADER_LINE * 2];
        let (line, _) = line_of(parse(&junk).unwrap_err());
        assert_eq!(line, 1);
    }
}
