//! Which filesystem a file is on, stable across reboots and remounts: the
//! filesystem's UUID (and on btrfs the subvolume), or for this boot only
//! the device number. How it is read from a file is the daemon's business
//! (`refreshd::io::fsid`); this is the value.

use std::fmt;

/// A filesystem (and btrfs subvolume) identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FsId {
    /// The filesystem's UUID; the btrfs subvolume id (0 elsewhere).
    Uuid { uuid: [u8; 16], subvol: u64 },
    /// No UUID could be read: the device number (valid until a reboot),
    /// or a record written before identities were UUIDs.
    Dev(u64),
}

impl FsId {
    /// The key in the state database and journal file names: 32 hex
    /// digits (and `.subvol`), or `dev-MAJ-MIN`. Only `[0-9a-f.-]`.
    pub fn key(&self) -> String {
        match self {
            FsId::Uuid { uuid, subvol } => {
                let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
                if *subvol == 0 {
                    hex
                } else {
                    format!("{hex}.{subvol}")
                }
            }
            FsId::Dev(d) => format!("dev-{}-{}", major(*d), minor(*d)),
        }
    }

    /// Reads a [`FsId::key`] back.
    pub fn parse(key: &str) -> Option<FsId> {
        if let Some(rest) = key.strip_prefix("dev-") {
            let (maj, min) = rest.split_once('-')?;
            return Some(FsId::Dev(makedev(maj.parse().ok()?, min.parse().ok()?)));
        }
        let (hex, subvol) = match key.split_once('.') {
            Some((h, s)) => (h, s.parse().ok()?),
            None => (key, 0),
        };
        if hex.len() != 32 {
            return None;
        }
        let mut uuid = [0u8; 16];
        for (i, b) in uuid.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(FsId::Uuid { uuid, subvol })
    }

    /// Whether a file seen now (on `live`, device `live_dev`) is on this
    /// filesystem: by UUID, or for a [`FsId::Dev`] by device number.
    pub fn holds(&self, live: &FsId, live_dev: u64) -> bool {
        match self {
            FsId::Dev(d) => *d == live_dev,
            uuid => uuid == live,
        }
    }
}

impl fmt::Display for FsId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

impl serde::Serialize for FsId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.key())
    }
}

impl<'de> serde::Deserialize<'de> for FsId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        FsId::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("bad filesystem id {s:?}")))
    }
}

/// Linux's `major(3)`.
pub fn major(dev: u64) -> u32 {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)) as u32
}

/// Linux's `minor(3)`.
pub fn minor(dev: u64) -> u32 {
    (((dev >> 12) & 0xffff_ff00) | (dev & 0xff)) as u32
}

/// Linux's `makedev(3)`.
pub fn makedev(major: u32, minor: u32) -> u64 {
    let (ma, mi) = (u64::from(major), u64::from(minor));
    ((ma & 0xffff_f000) << 32) | ((ma & 0xfff) << 8) | ((mi & 0xffff_ff00) << 12) | (mi & 0xff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_split_and_join_as_glibc_does() {
        for (ma, mi) in [
            (7, 3),
            (259, 1),
            (0, 43),
            (4095, 255),
            (4096, 256),
            (1 << 20, 1 << 30),
        ] {
            let dev = makedev(ma, mi);
            assert_eq!((major(dev), minor(dev)), (ma, mi));
            assert_eq!(dev, libc_makedev(ma, mi));
        }
    }

    /// glibc's formula, written out independently.
    fn libc_makedev(ma: u32, mi: u32) -> u64 {
        let (ma, mi) = (u64::from(ma), u64::from(mi));
        (ma & 0x0000_0fff) << 8
            | (ma & 0xffff_f000) << 32
            | (mi & 0x0000_00ff)
            | (mi & 0xffff_ff00) << 12
    }
}
