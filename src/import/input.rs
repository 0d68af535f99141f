//! Where a streamed point cloud's bytes come from: a file, reopened for each pass over it, or
//! bytes in memory (the fuzz targets and tests).
//!
//! The PCD and LAS importers read a cloud twice (a validation pass at import, the stream when
//! packing) and some readers open several positions at once (PCD's compressed fields), so an
//! [`Input`] hands out independent readers rather than being one. Readers are unbuffered:
//! each importer buffers as its reads need (LAZ's decoder reads a byte at a time, PCD's binary
//! rows a record at a time).

use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{ImportError, ImportOptions};
use crate::dataset::PointSource;

/// A point cloud read through an [`Input`] (PCD, LAS, E57): checked and counted when opened,
/// streamed when the pack pipeline pulls it.
pub(crate) trait InputCloud: PointSource<Error = ImportError> + Sized + 'static {
    /// Opens `input` as the cloud `name`; `path` names it in messages. Warnings for the user
    /// go to `warnings`.
    fn open(
        input: Input,
        path: &Path,
        name: String,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Self, ImportError>;

    /// [`InputCloud::open`], boxed as the importers hand clouds out.
    fn boxed(
        input: Input,
        path: &Path,
        name: &str,
        options: &ImportOptions,
        warnings: &mut Vec<String>,
    ) -> Result<Box<dyn PointSource<Error = ImportError>>, ImportError> {
        let cloud = Self::open(input, path, name.to_owned(), options, warnings)?;
        Ok(Box::new(cloud))
    }
}

/// A cloud's bytes.
#[derive(Clone, Debug)]
pub(crate) enum Input {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

/// One independent reader over an [`Input`].
#[derive(Debug)]
pub(crate) enum InputReader {
    File(File),
    Bytes(Cursor<Arc<[u8]>>),
}

impl Input {
    /// The length in bytes (a file's, as it is now).
    pub(crate) fn len(&self) -> io::Result<u64> {
        match self {
            Input::File(p) => Ok(std::fs::metadata(p)?.len()),
            Input::Bytes(b) => Ok(b.len() as u64),
        }
    }

    /// A new reader positioned at byte `offset`.
    pub(crate) fn open_at(&self, offset: u64) -> io::Result<InputReader> {
        let mut r = match self {
            Input::File(p) => InputReader::File(crate::fsutil::open_file(p)?),
            Input::Bytes(b) => InputReader::Bytes(Cursor::new(Arc::clone(b))),
        };
        r.seek(SeekFrom::Start(offset))?;
        Ok(r)
    }

    /// Reads exactly `buf.len()` bytes at byte `offset`.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.open_at(offset)?.read_exact(buf)
    }
}

impl Read for InputReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            InputReader::File(f) => f.read(buf),
            InputReader::Bytes(c) => c.read(buf),
        }
    }
}

impl Seek for InputReader {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match self {
            InputReader::File(f) => f.seek(pos),
            InputReader::Bytes(c) => c.seek(pos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_and_bytes_read_the_same_at_any_offset() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.bin");
        std::fs::write(&path, &bytes).unwrap();
        let inputs = [Input::File(path), Input::Bytes(bytes.clone().into())];
        for input in &inputs {
            assert_eq!(input.len().unwrap(), 10_000);
            for at in [0u64, 1, 4095, 9_999] {
                let mut rest = Vec::new();
                input.open_at(at).unwrap().read_to_end(&mut rest).unwrap();
                assert_eq!(rest, bytes[at as usize..]);
            }
            let mut four = [0u8; 4];
            input.read_at(300, &mut four).unwrap();
            assert_eq!(four, bytes[300..304]);
            // Two readers are independent.
            let (mut a, mut b) = (input.open_at(0).unwrap(), input.open_at(5).unwrap());
            let (mut x, mut y) = ([0u8; 1], [0u8; 1]);
            a.read_exact(&mut x).unwrap();
            b.read_exact(&mut y).unwrap();
            assert_eq!((x[0], y[0]), (bytes[0], bytes[5]));
            let err = input.read_at(9_998, &mut four).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        }
    }
}
