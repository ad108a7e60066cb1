//! A physical drive as the daemon names it.

use serde::{Deserialize, Serialize};

/// A whole drive as the kernel names it (`sda`, `nvme0n1`, `loop3`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Drive {
    pub name: String,
    /// "major:minor" of the whole drive.
    pub dev: String,
    /// Stable identity: wwid, else model+serial, else (loop) the backing
    /// file, else the name.
    pub id: String,
    pub model: Option<String>,
    pub serial: Option<String>,
}
