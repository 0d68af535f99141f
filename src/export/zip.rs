//! The ZIP archives a bundled SOG model is (`*.sog`): [`write_stored`] writes members stored
//! (uncompressed: WebP images gain nothing from deflate), [`Archive`] reads stored and
//! deflated members through the central directory.
//!
//! Invariants: the writer's output is a function of its members alone (fixed timestamps, no
//! extra fields), so a model converts to the same bytes every time. The reader trusts nothing
//! it reads: every offset and size is checked against the archive's length before it is
//! used, a member's bytes are inflated into at most its declared size (which a member must
//! then fill exactly) and checked against its CRC-32; ZIP64, encryption and multi-disk
//! archives are refused by name. Names are compared exactly, as the SOG reader asks for the
//! names its `meta.json` lists.

use std::io::{self, Read, Write};

/// Why an archive could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("not a ZIP archive (no end-of-central-directory record)")]
    NotZip,
    #[error("the ZIP archive is damaged: {0}")]
    Damaged(String),
    #[error("ZIP member {name}: {reason}")]
    Member { name: String, reason: String },
    #[error("the ZIP archive has no member {0}")]
    Missing(String),
}

const LOCAL: u32 = 0x0403_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const END: u32 = 0x0605_4b50;
/// 1980-01-01 00:00, the earliest DOS date: fixed, so the bytes depend on the members only.
const DOS_DATE: u16 = (1 << 5) | 1;

/// Writes `members` (name, bytes) as a ZIP archive with every member stored. Names must be
/// ASCII; each member and the whole archive must stay under 4 GiB (no ZIP64).
pub fn write_stored(w: &mut impl Write, members: &[(&str, &[u8])]) -> io::Result<()> {
    let too_large = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} is 4 GiB or more, beyond a ZIP archive without ZIP64"),
        )
    };
    let mut offset: u64 = 0;
    let mut central = Vec::new();
    for &(name, bytes) in members {
        debug_assert!(name.is_ascii(), "ZIP member names here are ASCII");
        let size = u32::try_from(bytes.len()).map_err(|_| too_large(name))?;
        let at = u32::try_from(offset).map_err(|_| too_large("the archive"))?;
        let crc = crc32fast::hash(bytes);
        let mut local = Vec::with_capacity(30 + name.len());
        put32(&mut local, LOCAL);
        put16(&mut local, 10); // version needed: 1.0, stored
        put16(&mut local, 0); // flags
        put16(&mut local, 0); // method: stored
        put16(&mut local, 0); // time
        put16(&mut local, DOS_DATE);
        put32(&mut local, crc);
        put32(&mut local, size);
        put32(&mut local, size);
        put16(&mut local, name.len() as u16);
        put16(&mut local, 0); // extra field length
        local.extend_from_slice(name.as_bytes());
        w.write_all(&local)?;
        w.write_all(bytes)?;

        put32(&mut central, CENTRAL);
        put16(&mut central, 20); // made by: MS-DOS, 2.0
        put16(&mut central, 10);
        put16(&mut central, 0);
        put16(&mut central, 0);
        put16(&mut central, 0);
        put16(&mut central, DOS_DATE);
        put32(&mut central, crc);
        put32(&mut central, size);
        put32(&mut central, size);
        put16(&mut central, name.len() as u16);
        put16(&mut central, 0); // extra
        put16(&mut central, 0); // comment
        put16(&mut central, 0); // disk
        put16(&mut central, 0); // internal attributes
        put32(&mut central, 0); // external attributes
        put32(&mut central, at);
        central.extend_from_slice(name.as_bytes());
        offset += local.len() as u64 + bytes.len() as u64;
    }
    let at = u32::try_from(offset).map_err(|_| too_large("the archive"))?;
    w.write_all(&central)?;
    let mut end = Vec::with_capacity(22);
    put32(&mut end, END);
    put16(&mut end, 0); // this disk
    put16(&mut end, 0); // the central directory's disk
    put16(&mut end, members.len() as u16);
    put16(&mut end, members.len() as u16);
    put32(&mut end, central.len() as u32);
    put32(&mut end, at);
    put16(&mut end, 0); // comment length
    w.write_all(&end)
}

fn put16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn put32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// One member, as the central directory describes it.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    method: u16,
    flags: u16,
    crc: u32,
    compressed: u32,
    size: u32,
    local: u32,
}

/// A ZIP archive in memory, its central directory read.
pub struct Archive<'a> {
    bytes: &'a [u8],
    entries: Vec<Entry>,
}

impl<'a> Archive<'a> {
    /// Reads the central directory of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Result<Archive<'a>, ZipError> {
        let damaged = |what: String| ZipError::Damaged(what);
        // The end record is the last 22 bytes but for a comment of up to 65,535 bytes.
        let lowest = bytes.len().saturating_sub(22 + 0xffff);
        let end = (lowest..=bytes.len().saturating_sub(22))
            .rev()
            .find(|&at| bytes.len() >= 22 && get32(bytes, at) == END)
            .ok_or(ZipError::NotZip)?;
        let (disk, cd_disk) = (get16(bytes, end + 4), get16(bytes, end + 6));
        let count = get16(bytes, end + 10) as usize;
        let (cd_size, cd_at) = (get32(bytes, end + 12) as usize, get32(bytes, end + 16));
        if disk != 0 || cd_disk != 0 {
            return Err(damaged("a multi-disk archive, which is not read".into()));
        }
        if cd_at == u32::MAX || count == 0xffff {
            return Err(damaged("a ZIP64 archive, which is not read".into()));
        }
        let cd_at = cd_at as usize;
        if cd_at.checked_add(cd_size).is_none_or(|e| e > end) {
            return Err(damaged(format!(
                "its central directory ({cd_size} bytes at {cd_at}) lies outside the archive"
            )));
        }
        let mut entries = Vec::with_capacity(count.min(cd_size / 46));
        let mut at = cd_at;
        for k in 0..count {
            if at + 46 > cd_at + cd_size || get32(bytes, at) != CENTRAL {
                return Err(damaged(format!(
                    "central directory entry {k} of {count} is missing or has a bad signature"
                )));
            }
            let name_len = get16(bytes, at + 28) as usize;
            let extra = get16(bytes, at + 30) as usize;
            let comment = get16(bytes, at + 32) as usize;
            let next = at + 46 + name_len + extra + comment;
            if next > cd_at + cd_size {
                return Err(damaged(format!(
                    "central directory entry {k} runs past the directory's end"
                )));
            }
            entries.push(Entry {
                name: String::from_utf8_lossy(&bytes[at + 46..at + 46 + name_len]).into_owned(),
                flags: get16(bytes, at + 8),
                method: get16(bytes, at + 10),
                crc: get32(bytes, at + 16),
                compressed: get32(bytes, at + 20),
                size: get32(bytes, at + 24),
                local: get32(bytes, at + 42),
            });
            at = next;
        }
        Ok(Archive { bytes, entries })
    }

    /// The members' names, in directory order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// The bytes of member `name`, inflated and checked against its CRC-32.
    pub fn read(&self, name: &str) -> Result<Vec<u8>, ZipError> {
        let e = self
            .entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| ZipError::Missing(name.to_owned()))?;
        let bad = |reason: String| ZipError::Member {
            name: name.to_owned(),
            reason,
        };
        if e.flags & 1 != 0 {
            return Err(bad("encrypted, which is not read".into()));
        }
        if e.size == u32::MAX || e.compressed == u32::MAX {
            return Err(bad("a ZIP64 member, which is not read".into()));
        }
        let local = e.local as usize;
        if local + 30 > self.bytes.len() || get32(self.bytes, local) != LOCAL {
            return Err(bad(format!("no local header at byte {local}")));
        }
        let start = local
            + 30
            + get16(self.bytes, local + 26) as usize
            + get16(self.bytes, local + 28) as usize;
        let data = start
            .checked_add(e.compressed as usize)
            .filter(|&end| end <= self.bytes.len())
            .map(|end| &self.bytes[start..end])
            .ok_or_else(|| {
                bad(format!(
                    "its {} bytes run past the archive's end",
                    e.compressed
                ))
            })?;
        let out = match e.method {
            0 if e.compressed == e.size => data.to_vec(),
            0 => {
                return Err(bad(format!(
                    "stored, but its sizes differ ({} and {} bytes)",
                    e.compressed, e.size
                )))
            }
            8 => {
                let mut out =
                    Vec::with_capacity((e.size as usize).min(data.len().saturating_mul(64)));
                flate2::read::DeflateDecoder::new(data)
                    .take(e.size as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|err| bad(format!("cannot be inflated: {err}")))?;
                if out.len() != e.size as usize {
                    return Err(bad(format!(
                        "inflates to {}{} bytes, not the {} its entry says",
                        out.len(),
                        if out.len() > e.size as usize { "+" } else { "" },
                        e.size
                    )));
                }
                out
            }
            m => {
                return Err(bad(format!(
                    "compression method {m}, which is not read (only stored and deflate)"
                )))
            }
        };
        if crc32fast::hash(&out) != e.crc {
            return Err(bad(
                "its CRC-32 does not match: the archive is damaged".into()
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_members_read_back_and_the_bytes_are_repeatable() {
        let members: [(&str, &[u8]); 3] = [("a.txt", b"hello"), ("empty", b""), ("b", &[7; 300])];
        let mut out = Vec::new();
        write_stored(&mut out, &members).unwrap();
        let mut again = Vec::new();
        write_stored(&mut again, &members).unwrap();
        assert_eq!(out, again);
        let zip = Archive::new(&out).unwrap();
        assert_eq!(zip.names().collect::<Vec<_>>(), vec!["a.txt", "empty", "b"]);
        for (name, bytes) in members {
            assert_eq!(zip.read(name).unwrap(), bytes);
        }
        assert!(matches!(zip.read("c"), Err(ZipError::Missing(_))));
    }

    /// A deflated member with a data descriptor and an archive comment (as other tools write).
    #[test]
    fn deflated_members_with_descriptors_are_read() {
        let data = b"meta meta meta meta meta meta".repeat(20);
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&data).unwrap();
        let packed = enc.finish().unwrap();
        let crc = crc32fast::hash(&data);
        let name = b"meta.json";
        let mut z = Vec::new();
        put32(&mut z, LOCAL);
        put16(&mut z, 20);
        put16(&mut z, 0x8);
        put16(&mut z, 8);
        put16(&mut z, 0);
        put16(&mut z, DOS_DATE);
        put32(&mut z, 0);
        put32(&mut z, 0);
        put32(&mut z, 0);
        put16(&mut z, name.len() as u16);
        put16(&mut z, 0);
        z.extend_from_slice(name);
        z.extend_from_slice(&packed);
        put32(&mut z, 0x0807_4b50);
        put32(&mut z, crc);
        put32(&mut z, packed.len() as u32);
        put32(&mut z, data.len() as u32);
        let cd_at = z.len();
        put32(&mut z, CENTRAL);
        put16(&mut z, 20);
        put16(&mut z, 20);
        put16(&mut z, 0x8);
        put16(&mut z, 8);
        put16(&mut z, 0);
        put16(&mut z, DOS_DATE);
        put32(&mut z, crc);
        put32(&mut z, packed.len() as u32);
        put32(&mut z, data.len() as u32);
        put16(&mut z, name.len() as u16);
        for _ in 0..4 {
            put16(&mut z, 0);
        }
        put32(&mut z, 0);
        put32(&mut z, 0);
        z.extend_from_slice(name);
        let cd_size = z.len() - cd_at;
        put32(&mut z, END);
        put16(&mut z, 0);
        put16(&mut z, 0);
        put16(&mut z, 1);
        put16(&mut z, 1);
        put32(&mut z, cd_size as u32);
        put32(&mut z, cd_at as u32);
        put16(&mut z, 5);
        z.extend_from_slice(b"hello");
        assert_eq!(Archive::new(&z).unwrap().read("meta.json").unwrap(), data);
    }

    #[test]
    fn damage_is_refused_with_the_member_named() {
        let mut out = Vec::new();
        write_stored(&mut out, &[("x.webp", b"0123456789")]).unwrap();
        let mut flipped = out.clone();
        flipped[30 + 6 + 3] ^= 1; // a byte of the member's data
        let err = Archive::new(&flipped).unwrap().read("x.webp").unwrap_err();
        assert!(
            err.to_string().contains("x.webp") && err.to_string().contains("CRC"),
            "{err}"
        );
        assert!(matches!(
            Archive::new(b"PK not really"),
            Err(ZipError::NotZip)
        ));
        // Truncated before the end record.
        assert!(Archive::new(&out[..out.len() - 5]).is_err());
        // A central directory that points past the archive.
        let mut shifted = out.clone();
        let end = shifted.len() - 22;
        shifted[end + 16..end + 20].copy_from_slice(&(out.len() as u32).to_le_bytes());
        assert!(matches!(Archive::new(&shifted), Err(ZipError::Damaged(_))));
    }
}
