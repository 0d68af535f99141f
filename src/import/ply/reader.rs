//! Streaming PLY row reader, shared by the point-cloud importer and the 3DGS PLY loader.
//!
//! [`PlyReader`] parses the header, then hands out the rows of ONE selected element (by default
//! `vertex`) as `f64` per scalar property in header order; callers find the columns they want by
//! name with [`PlyElement::scalar_index`]. Every PLY scalar converts to `f64` exactly (integers
//! are at most 32 bits, floats at most f64), so an `f32` read this way and cast back is
//! bit-identical to the file's value. List properties are skipped.
//!
//! # Invariants
//! - Memory is bounded by the header and one row: the source is read forward through a
//!   [`BufRead`], never loaded whole, and nothing is allocated from a declared count (a count of
//!   10^15 costs nothing until rows are actually read). List payloads are skipped in bounded
//!   reads, however large their declared length.
//! - Elements before the selected one are skipped (binary fixed-size rows in one bounded copy,
//!   other rows one at a time); elements after it are never read, so a `face` element after
//!   `vertex` does not cost anything and is not validated.
//! - Data that ends before the declared count is an error naming the file, the element and the
//!   0-based record where it ran out ([`Location::Record`]). ASCII token errors name the 1-based
//!   line of the file ([`Location::Line`]) and the property.
//! - After an error the reader is poisoned: every later call returns an error.
//! - ASCII rows are one line each (`\n` or `\r\n`); whitespace-only lines are ignored for
//!   elements that have properties, since such a line cannot be one of their rows. Float tokens
//!   are parsed at the declared width, so an ASCII `float` equals the binary `float` a writer
//!   would have stored for the same text.
//!
//! # Trailing data
//! Bytes after the last element of a file (non-blank lines in ASCII) are a **warning**, recorded
//! in [`PlyReader::warnings`] when the selected element is the last one and its rows are
//! exhausted, not an error: every row the header declares was read and is self-consistent, and
//! some writers pad files. It can also mean the header *understates* the count (points silently
//! dropped), which is why it is reported at all; importers may escalate it under `--strict`.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::header::{
    parse_header, read_line_bounded, LineRead, PlyElement, PlyFormat, PlyHeader, PropertyKind,
    ScalarType,
};
use crate::import::{ImportError, Location};

/// Longest ASCII data line accepted: 1 MiB holds more than 40,000 printed f64 values (at most
/// 25 characters each), far beyond any real row, while bounding what one line can make us hold.
pub const MAX_ASCII_LINE: usize = 1024 * 1024;

/// Read buffer for files opened by [`PlyReader::open`]: 64 KiB amortises syscalls (a 3DGS row
/// is 248 bytes, so ~260 rows per read) at a fixed, negligible memory cost.
const FILE_BUFFER: usize = 64 * 1024;

/// One property of the selected element, as the row decoder walks it.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// A scalar at byte `offset` of a fixed-size binary row (offset unused otherwise).
    Scalar {
        ty: ScalarType,
        offset: usize,
    },
    List {
        count: ScalarType,
        item: ScalarType,
    },
}

/// A forward-only reader of one element's rows. See the module documentation.
pub struct PlyReader<R = BufReader<File>> {
    src: R,
    path: PathBuf,
    header: PlyHeader,
    /// Element whose rows [`PlyReader::read_row`] returns (`None` when the file has none).
    target: Option<usize>,
    /// Element the source is positioned in and how many of its rows were consumed.
    pos_elem: usize,
    pos_row: u64,
    /// Last 1-based line consumed (ASCII), header included.
    line: u64,
    /// Bytes consumed from the start of the file.
    byte: u64,
    slots: Vec<Slot>,
    /// Scalar properties of the selected element (the row length).
    n_scalars: usize,
    /// Declared rows of the selected element.
    target_count: u64,
    fixed_row: Option<usize>,
    row_buf: Vec<u8>,
    line_buf: Vec<u8>,
    warnings: Vec<String>,
    end_checked: bool,
    failed: bool,
}

impl PlyReader<BufReader<File>> {
    /// Opens a file and parses its header; selects the `vertex` element if there is one, else the
    /// first element.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ImportError> {
        let path = path.as_ref();
        let file = crate::fsutil::open_file(path).map_err(|e| ImportError::io(path, e))?;
        PlyReader::from_reader(BufReader::with_capacity(FILE_BUFFER, file), path)
    }
}

impl<R: BufRead> PlyReader<R> {
    /// Parses the header from any buffered source. `path` names the source in errors.
    pub fn from_reader(mut src: R, path: impl Into<PathBuf>) -> Result<Self, ImportError> {
        let path = path.into();
        let header = parse_header(&mut src, &path)?;
        let target = header
            .element("vertex")
            .map(|(i, _)| i)
            .or(if header.elements.is_empty() {
                None
            } else {
                Some(0)
            });
        let mut r = PlyReader {
            src,
            path,
            line: header.lines,
            byte: header.len_bytes,
            header,
            target: None,
            pos_elem: 0,
            pos_row: 0,
            slots: Vec::new(),
            n_scalars: 0,
            target_count: 0,
            fixed_row: None,
            row_buf: Vec::new(),
            line_buf: Vec::new(),
            warnings: Vec::new(),
            end_checked: false,
            failed: false,
        };
        if let Some(t) = target {
            r.set_target(t);
        }
        Ok(r)
    }

    pub fn header(&self) -> &PlyHeader {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The selected element, whose rows [`PlyReader::read_row`] returns.
    pub fn element(&self) -> Option<&PlyElement> {
        self.target.map(|t| &self.header.elements[t])
    }

    /// Rows of the selected element returned so far.
    pub fn rows_read(&self) -> u64 {
        match self.target {
            Some(t) if t == self.pos_elem => self.pos_row,
            Some(t) if t < self.pos_elem => self.header.elements[t].count,
            _ => 0,
        }
    }

    /// Non-fatal findings (trailing data after the last element).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Selects the element whose rows [`PlyReader::read_row`] returns. The reader is
    /// forward-only: the element must not have been passed, nor any of its rows read.
    pub fn select(&mut self, name: &str) -> Result<&PlyElement, ImportError> {
        let Some((i, _)) = self.header.element(name) else {
            let names: Vec<&str> = self
                .header
                .elements
                .iter()
                .map(|e| e.name.as_str())
                .collect();
            return Err(ImportError::invalid(
                &self.path,
                format!("no element `{name}` in the PLY header (elements: {names:?})"),
            ));
        };
        if i < self.pos_elem || (i == self.pos_elem && self.pos_row > 0) {
            return Err(ImportError::invalid(
                &self.path,
                format!("element `{name}` was already read past; PlyReader is forward-only, open the file again"),
            ));
        }
        self.set_target(i);
        Ok(&self.header.elements[i])
    }

    fn set_target(&mut self, t: usize) {
        let e = &self.header.elements[t];
        let mut offset = 0;
        self.slots = e
            .properties
            .iter()
            .map(|p| match p.kind {
                PropertyKind::Scalar(ty) => {
                    let s = Slot::Scalar { ty, offset };
                    offset += ty.size();
                    s
                }
                PropertyKind::List { count, item } => Slot::List { count, item },
            })
            .collect();
        self.fixed_row = e.fixed_row_size().map(|n| n as usize);
        self.n_scalars = e.scalar_count();
        self.target_count = e.count;
        self.row_buf = vec![0; self.fixed_row.unwrap_or(0)];
        self.target = Some(t);
        self.end_checked = false;
    }

    /// Reads the next row of the selected element into `out` (one `f64` per scalar property,
    /// header order; `out.len()` must be [`PlyElement::scalar_count`]). Returns `Ok(false)` once
    /// the element's declared rows are exhausted (and on every later call).
    pub fn read_row(&mut self, out: &mut [f64]) -> Result<bool, ImportError> {
        if self.failed {
            return Err(ImportError::invalid(
                &self.path,
                "an earlier error stopped this PLY reader",
            ));
        }
        let r = self.read_row_inner(out);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn read_row_inner(&mut self, out: &mut [f64]) -> Result<bool, ImportError> {
        let Some(target) = self.target else {
            return Ok(false);
        };
        let want = self.n_scalars;
        if out.len() != want {
            return Err(ImportError::invalid(
                &self.path,
                format!(
                    "row buffer holds {} values but element `{}` has {want} scalar properties",
                    out.len(),
                    self.header.elements[target].name
                ),
            ));
        }
        while self.pos_elem < target {
            self.skip_rest_of_element()?;
        }
        if self.pos_elem > target {
            return Ok(false);
        }
        if self.pos_row >= self.target_count {
            if !self.end_checked {
                self.end_checked = true;
                if target + 1 == self.header.elements.len() {
                    self.check_trailing()?;
                }
            }
            return Ok(false);
        }
        match self.header.format {
            PlyFormat::Ascii => self.ascii_row(Some(out))?,
            _ => self.binary_row(Some(out))?,
        }
        self.pos_row += 1;
        Ok(true)
    }

    /// Consumes the remaining rows of the element at `pos_elem` and moves to the next one.
    fn skip_rest_of_element(&mut self) -> Result<(), ImportError> {
        let e = &self.header.elements[self.pos_elem];
        let remaining = e.count - self.pos_row;
        match (self.header.format, e.fixed_row_size()) {
            (PlyFormat::Ascii, _) => {
                let has_props = !e.properties.is_empty();
                for _ in 0..remaining {
                    self.next_data_line(has_props)?;
                    self.pos_row += 1;
                }
            }
            (_, Some(row)) => {
                let total = remaining as u128 * row as u128;
                let got = self.skip_bytes(total.min(u64::MAX as u128) as u64)? as u128;
                if got < total {
                    // `row` > 0 here: a zero-size row skips zero bytes and never falls short.
                    self.pos_row += (got / row as u128) as u64;
                    return Err(self.truncated());
                }
            }
            (_, None) => {
                let props: Vec<PropertyKind> = e.properties.iter().map(|p| p.kind).collect();
                for _ in 0..remaining {
                    for (j, &k) in props.iter().enumerate() {
                        match k {
                            PropertyKind::Scalar(t) => self.skip_exact(t.size() as u64)?,
                            PropertyKind::List { count, item } => self.skip_list(count, item, j)?,
                        }
                    }
                    self.pos_row += 1;
                }
            }
        }
        self.pos_elem += 1;
        self.pos_row = 0;
        Ok(())
    }

    /// The "data ran out" error for the current position.
    fn truncated(&self) -> ImportError {
        let e = &self.header.elements[self.pos_elem];
        ImportError::parse(
            &self.path,
            Location::Record(self.pos_row),
            format!(
                "element `{}` declares {} rows but the data ends inside row {} ({}); the file is truncated or its header overstates the count: re-export it or fix the `element {}` line",
                e.name,
                e.count,
                self.pos_row,
                if self.header.format == PlyFormat::Ascii {
                    format!("after line {}", self.line)
                } else {
                    format!("byte {}", self.byte)
                },
                e.name
            ),
        )
    }

    fn io(&self, e: std::io::Error) -> ImportError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            self.truncated()
        } else {
            ImportError::io(&self.path, e)
        }
    }

    /// Skips up to `n` bytes; returns how many were skipped (fewer only at end of input).
    fn skip_bytes(&mut self, n: u64) -> Result<u64, ImportError> {
        let mut left = n;
        while left > 0 {
            let avail = match self.src.fill_buf() {
                Ok(a) => a.len(),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ImportError::io(&self.path, e)),
            };
            if avail == 0 {
                break;
            }
            let take = (avail as u64).min(left) as usize;
            self.src.consume(take);
            self.byte += take as u64;
            left -= take as u64;
        }
        Ok(n - left)
    }

    fn skip_exact(&mut self, n: u64) -> Result<(), ImportError> {
        if self.skip_bytes(n)? < n {
            return Err(self.truncated());
        }
        Ok(())
    }

    fn read_scalar(&mut self, ty: ScalarType) -> Result<f64, ImportError> {
        let mut b = [0u8; 8];
        let n = ty.size();
        self.src.read_exact(&mut b[..n]).map_err(|e| self.io(e))?;
        self.byte += n as u64;
        Ok(decode(
            ty,
            &b[..n],
            self.header.format == PlyFormat::BinaryBigEndian,
        ))
    }

    /// Reads a binary list count and skips its items.
    fn skip_list(
        &mut self,
        count: ScalarType,
        item: ScalarType,
        property: usize,
    ) -> Result<(), ImportError> {
        let at = self.byte;
        let n = self.read_scalar(count)?;
        if n < 0.0 {
            let e = &self.header.elements[self.pos_elem];
            let name = &e.properties[property].name;
            return Err(ImportError::parse(
                &self.path,
                Location::Record(self.pos_row),
                format!("list `{name}` of element `{}` has a negative length {n} (byte {at}); the file is corrupt", e.name),
            ));
        }
        // n ≤ u32::MAX (integer count types only), item size ≤ 8: the product fits in u64.
        self.skip_exact(n as u64 * item.size() as u64)
    }

    fn binary_row(&mut self, mut out: Option<&mut [f64]>) -> Result<(), ImportError> {
        let big = self.header.format == PlyFormat::BinaryBigEndian;
        if self.fixed_row.is_some() {
            let mut buf = std::mem::take(&mut self.row_buf);
            let r = self.src.read_exact(&mut buf);
            if let Err(e) = r {
                self.row_buf = buf;
                return Err(self.io(e));
            }
            self.byte += buf.len() as u64;
            if let Some(out) = out {
                for (o, s) in out.iter_mut().zip(self.slots.iter()) {
                    if let Slot::Scalar { ty, offset } = *s {
                        *o = decode(ty, &buf[offset..offset + ty.size()], big);
                    }
                }
            }
            self.row_buf = buf;
            return Ok(());
        }
        let mut k = 0;
        for i in 0..self.slots.len() {
            match self.slots[i] {
                Slot::Scalar { ty, .. } => {
                    let v = self.read_scalar(ty)?;
                    if let Some(out) = out.as_deref_mut() {
                        out[k] = v;
                    }
                    k += 1;
                }
                Slot::List { count, item } => {
                    self.skip_list(count, item, i)?;
                }
            }
        }
        Ok(())
    }

    /// Reads the next data line into `line_buf`, skipping blank lines when the element has
    /// properties (a blank line cannot be one of its rows). End of input is [`Self::truncated`].
    fn next_data_line(&mut self, skip_blank: bool) -> Result<(), ImportError> {
        loop {
            let (kind, n) = read_line_bounded(&mut self.src, &mut self.line_buf, MAX_ASCII_LINE)
                .map_err(|e| ImportError::io(&self.path, e))?;
            self.byte += n;
            match kind {
                LineRead::TooLong => {
                    return Err(ImportError::parse(
                        &self.path,
                        Location::Line(self.line + 1),
                        format!("line longer than {MAX_ASCII_LINE} bytes in element `{}`; the file is corrupt", self.header.elements[self.pos_elem].name),
                    ))
                }
                LineRead::Eof if self.line_buf.iter().all(u8::is_ascii_whitespace) => return Err(self.truncated()),
                LineRead::Eof | LineRead::Complete => {}
            }
            self.line += 1;
            if !(skip_blank && self.line_buf.iter().all(u8::is_ascii_whitespace)) {
                return Ok(());
            }
        }
    }

    fn ascii_row(&mut self, out: Option<&mut [f64]>) -> Result<(), ImportError> {
        let e = &self.header.elements[self.pos_elem];
        let has_props = !e.properties.is_empty();
        self.next_data_line(has_props)?;
        let line = self.line;
        let e = &self.header.elements[self.pos_elem];
        let err = |msg: String| {
            ImportError::parse(
                &self.path,
                Location::Line(line),
                format!("element `{}` row {}: {msg}", e.name, self.pos_row),
            )
        };
        let text = std::str::from_utf8(&self.line_buf)
            .map_err(|_| err("the line is not text (is the format line wrong?)".into()))?;
        let n_tokens = || text.split_ascii_whitespace().count();
        let mut tokens = text.split_ascii_whitespace();
        let mut out = out;
        let mut k = 0;
        for p in &e.properties {
            match p.kind {
                PropertyKind::Scalar(ty) => {
                    let Some(tok) = tokens.next() else {
                        return Err(err(format!(
                            "expected a value for property `{}` but the line has only {} value(s)",
                            p.name,
                            n_tokens()
                        )));
                    };
                    let v = parse_token(tok, ty).map_err(|why| {
                        err(format!(
                            "property `{}` ({}): `{}` {why}",
                            p.name,
                            ty.name(),
                            shorten(tok)
                        ))
                    })?;
                    if let Some(out) = out.as_deref_mut() {
                        out[k] = v;
                    }
                    k += 1;
                }
                PropertyKind::List { count, item } => {
                    let Some(tok) = tokens.next() else {
                        return Err(err(format!(
                            "expected the length of list `{}` but the line has only {} value(s)",
                            p.name,
                            n_tokens()
                        )));
                    };
                    let n = parse_token(tok, count).map_err(|why| {
                        err(format!(
                            "list `{}` length: `{}` {why}",
                            p.name,
                            shorten(tok)
                        ))
                    })?;
                    if n < 0.0 {
                        return Err(err(format!("list `{}` has negative length {n}", p.name)));
                    }
                    for j in 0..n as u64 {
                        let Some(tok) = tokens.next() else {
                            return Err(err(format!(
                                "list `{}` declares {n} items but the line ends after {j}",
                                p.name
                            )));
                        };
                        parse_token(tok, item).map_err(|why| {
                            err(format!(
                                "list `{}` item {j} ({}): `{}` {why}",
                                p.name,
                                item.name(),
                                shorten(tok)
                            ))
                        })?;
                    }
                }
            }
        }
        if tokens.next().is_some() {
            return Err(err(format!(
                "the line has {} values, more than the {} properties of the element declare; the header does not match the data",
                n_tokens(),
                e.properties.len()
            )));
        }
        Ok(())
    }

    /// Called once the last element is exhausted: notes any data that follows.
    fn check_trailing(&mut self) -> Result<(), ImportError> {
        let name = &self.header.elements[self.pos_elem].name;
        match self.header.format {
            PlyFormat::Ascii => loop {
                let (kind, _) =
                    read_line_bounded(&mut self.src, &mut self.line_buf, MAX_ASCII_LINE)
                        .map_err(|e| ImportError::io(&self.path, e))?;
                self.line += 1;
                let blank = self.line_buf.iter().all(u8::is_ascii_whitespace);
                if matches!(kind, LineRead::TooLong) || !blank {
                    self.warnings.push(format!(
                        "{}: line {}: text after the last row of the last element `{name}` was ignored; the header may understate its count",
                        self.path.display(),
                        self.line
                    ));
                    return Ok(());
                }
                if matches!(kind, LineRead::Eof) {
                    return Ok(());
                }
            },
            _ => {
                let extra = self
                    .src
                    .fill_buf()
                    .map_err(|e| ImportError::io(&self.path, e))?
                    .len();
                if extra > 0 {
                    self.warnings.push(format!(
                        "{}: byte {}: data continues after the last row of the last element `{name}` and was ignored; the header may understate its count",
                        self.path.display(),
                        self.byte
                    ));
                }
                Ok(())
            }
        }
    }
}

fn shorten(tok: &str) -> String {
    let s: String = tok.chars().take(32).collect();
    if s.len() < tok.len() {
        format!("{s}…")
    } else {
        s
    }
}

/// Parses an ASCII token as `ty`. Floats are parsed at their declared width (an `f32` token is
/// rounded to f32 exactly as a binary writer would have stored it), integers must be in range.
fn parse_token(tok: &str, ty: ScalarType) -> Result<f64, &'static str> {
    match ty {
        ScalarType::F32 => tok
            .parse::<f32>()
            .map(f64::from)
            .map_err(|_| "is not a number"),
        ScalarType::F64 => tok.parse::<f64>().map_err(|_| "is not a number"),
        _ => {
            let v: i64 = tok.parse().map_err(|_| "is not an integer")?;
            let (lo, hi) = ty.int_range().unwrap_or((i64::MIN, i64::MAX));
            if v < lo || v > hi {
                return Err("is out of range for the type");
            }
            Ok(v as f64)
        }
    }
}

fn bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// Decodes one binary scalar (`b.len() >= ty.size()`, guaranteed by the row layout).
fn decode(ty: ScalarType, b: &[u8], big: bool) -> f64 {
    macro_rules! dec {
        ($t:ty, $n:literal) => {{
            let a = bytes::<$n>(b);
            f64::from(if big {
                <$t>::from_be_bytes(a)
            } else {
                <$t>::from_le_bytes(a)
            })
        }};
    }
    match ty {
        ScalarType::I8 => dec!(i8, 1),
        ScalarType::U8 => dec!(u8, 1),
        ScalarType::I16 => dec!(i16, 2),
        ScalarType::U16 => dec!(u16, 2),
        ScalarType::I32 => dec!(i32, 4),
        ScalarType::U32 => dec!(u32, 4),
        ScalarType::F32 => dec!(f32, 4),
        ScalarType::F64 => dec!(f64, 8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(bytes: &[u8]) -> PlyReader<&[u8]> {
        PlyReader::from_reader(bytes, "t.ply").unwrap()
    }

    fn rows<R: BufRead>(r: &mut PlyReader<R>) -> Result<Vec<Vec<f64>>, ImportError> {
        let mut out = Vec::new();
        let mut row = vec![0.0; r.element().map_or(0, |e| e.scalar_count())];
        while r.read_row(&mut row)? {
            out.push(row.clone());
        }
        Ok(out)
    }

    const ALL_TYPES: &str = "property char a\nproperty uchar b\nproperty short c\nproperty ushort d\nproperty int e\nproperty uint f\nproperty float g\nproperty double h\n";

    /// Extreme values of every type; the float is a subnormal and the double has all 53 bits.
    fn extremes() -> Vec<f64> {
        vec![
            -128.0,
            255.0,
            -32768.0,
            65535.0,
            i32::MIN as f64,
            u32::MAX as f64,
            f32::from_bits(1) as f64,
            0.1f64 + 0.2,
        ]
    }

    fn binary_row(big: bool) -> Vec<u8> {
        let v = extremes();
        let mut out = Vec::new();
        macro_rules! p {
            ($t:ty, $x:expr) => {
                out.extend_from_slice(&if big {
                    ($x as $t).to_be_bytes()
                } else {
                    ($x as $t).to_le_bytes()
                })
            };
        }
        p!(i8, v[0]);
        p!(u8, v[1]);
        p!(i16, v[2]);
        p!(u16, v[3]);
        p!(i32, v[4]);
        p!(u32, v[5]);
        p!(f32, v[6]);
        p!(f64, v[7]);
        out
    }

    #[test]
    fn every_type_decodes_exactly_in_every_format() {
        for (fmt, big) in [("binary_little_endian", false), ("binary_big_endian", true)] {
            let mut f = format!("ply\nformat {fmt} 1.0\nelement vertex 2\n{ALL_TYPES}end_header\n")
                .into_bytes();
            f.extend(binary_row(big));
            f.extend(binary_row(big));
            let got = rows(&mut reader(&f)).unwrap();
            assert_eq!(got, vec![extremes(), extremes()], "{fmt}");
            assert_eq!((got[0][6] as f32).to_bits(), 1);
        }
        let v = extremes();
        let line = format!(
            "{} {} {} {} {} {} {:e} {}",
            v[0], v[1], v[2], v[3], v[4], v[5], v[6] as f32, v[7]
        );
        let f = format!("ply\r\nformat ascii 1.0\r\nelement vertex 2\r\n{}end_header\r\n{line}\r\n\r\n  {line}  \r\n", ALL_TYPES.replace('\n', "\r\n"));
        let got = rows(&mut reader(f.as_bytes())).unwrap();
        assert_eq!(got, vec![extremes(), extremes()]);
    }

    #[test]
    fn ascii_range_and_type_errors() {
        for (ty, tok, want) in [
            ("uchar", "256", "out of range"),
            ("char", "-129", "out of range"),
            ("int", "1.5", "not an integer"),
            ("float", "1,5", "not a number"),
        ] {
            let f = format!(
                "ply\nformat ascii 1.0\nelement vertex 1\nproperty {ty} v\nend_header\n{tok}\n"
            );
            let e = rows(&mut reader(f.as_bytes())).unwrap_err();
            assert!(
                matches!(
                    e,
                    ImportError::Parse {
                        at: Location::Line(6),
                        ..
                    }
                ),
                "{e}"
            );
            assert!(
                e.to_string().contains(want) && e.to_string().contains("`v`"),
                "{e}"
            );
        }
    }

    #[test]
    fn skips_elements_before_and_selects_after() {
        // `pad` (no properties, absurd count) and `tri` (lists) come before `vertex`, `face` after.
        for fmt in ["ascii", "binary_little_endian"] {
            let ascii = fmt == "ascii";
            let pad = if ascii { 0 } else { 1_000_000_000_000_000u64 };
            let mut f = format!(
                "ply\nformat {fmt} 1.0\nelement pad {pad}\nelement tri 2\nproperty list uchar int idx\nproperty uchar flag\n\
element vertex 2\nproperty float x\nproperty list int uchar l\nproperty float y\nelement face 1\nproperty short k\nend_header\n"
            )
            .into_bytes();
            if ascii {
                f.extend(b"3 1 2 3 9\n0 8\n1.5 2 7 7 -2\n2.5 0 -3\n12\n");
            } else {
                f.extend([3, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 9, 0, 8]);
                f.extend(1.5f32.to_le_bytes());
                f.extend(2i32.to_le_bytes());
                f.extend([7, 7]);
                f.extend((-2f32).to_le_bytes());
                f.extend(2.5f32.to_le_bytes());
                f.extend(0i32.to_le_bytes());
                f.extend((-3f32).to_le_bytes());
                f.extend(12i16.to_le_bytes());
            }
            let mut r = reader(&f);
            assert_eq!(r.element().unwrap().name, "vertex");
            assert_eq!(
                rows(&mut r).unwrap(),
                vec![vec![1.5, -2.0], vec![2.5, -3.0]],
                "{fmt}"
            );
            assert_eq!(r.rows_read(), 2);
            assert!(r.select("tri").is_err(), "forward-only");
            assert_eq!(r.select("face").unwrap().count, 1);
            assert_eq!(rows(&mut r).unwrap(), vec![vec![12.0]], "{fmt}");
            assert!(r.warnings().is_empty(), "{:?}", r.warnings());

            let mut r = reader(&f);
            r.select("tri").unwrap();
            assert_eq!(rows(&mut r).unwrap(), vec![vec![9.0], vec![8.0]], "{fmt}");
            assert!(r
                .select("nope")
                .unwrap_err()
                .to_string()
                .contains("no element `nope`"));
        }
    }

    #[test]
    fn misuse_and_poisoning() {
        let f = b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nend_header\nq\n1\n";
        let mut r = reader(f);
        assert!(r
            .read_row(&mut [0.0; 2])
            .unwrap_err()
            .to_string()
            .contains("row buffer"));
        let mut r = reader(f);
        assert!(r.read_row(&mut [0.0]).is_err());
        assert!(r
            .read_row(&mut [0.0])
            .unwrap_err()
            .to_string()
            .contains("earlier error"));
        // No elements at all: nothing to read, no error.
        let mut r = reader(b"ply\nformat ascii 1.0\nend_header\n");
        assert!(r.element().is_none() && !r.read_row(&mut []).unwrap());
    }

    #[test]
    fn negative_binary_list_length_is_an_error() {
        let mut f = b"ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty list char int l\nend_header\n".to_vec();
        f.push(0xff);
        let e = rows(&mut reader(&f)).unwrap_err();
        assert!(e.to_string().contains("negative length"), "{e}");
    }

    #[test]
    fn trailing_data_is_a_warning() {
        let mut f =
            b"ply\nformat binary_big_endian 1.0\nelement vertex 1\nproperty uchar v\nend_header\n"
                .to_vec();
        f.extend([5, 6]);
        let mut r = reader(&f);
        assert_eq!(rows(&mut r).unwrap(), vec![vec![5.0]]);
        assert!(r.warnings()[0].contains("byte 79"), "{:?}", r.warnings());
        let f =
            b"ply\nformat ascii 1.0\nelement vertex 1\nproperty uchar v\nend_header\n5\n\n  \n6\n";
        let mut r = reader(f);
        assert_eq!(rows(&mut r).unwrap(), vec![vec![5.0]]);
        assert!(r.warnings()[0].contains("line 9"), "{:?}", r.warnings());
        let f = b"ply\nformat ascii 1.0\nelement vertex 1\nproperty uchar v\nend_header\n5\n\n";
        let mut r = reader(f);
        rows(&mut r).unwrap();
        assert!(r.warnings().is_empty());
    }
}
