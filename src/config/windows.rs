//! `window`: local-time maintenance windows.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Local-time maintenance windows, minutes since midnight, `[start, end)`.
/// A window whose end is before its start wraps past midnight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows(pub Vec<(u16, u16)>);

impl Windows {
    pub fn always() -> Windows {
        Windows(vec![(0, 24 * 60)])
    }

    /// Whether `minute` (since local midnight) is inside a window.
    pub fn contains(&self, minute: u16) -> bool {
        self.0.iter().any(|&(s, e)| {
            if s <= e {
                (s..e).contains(&minute)
            } else {
                minute >= s || minute < e
            }
        })
    }
}

impl FromStr for Windows {
    type Err = String;
    fn from_str(s: &str) -> Result<Windows, String> {
        let bad = || {
            format!(
                "invalid window {s:?}: expected \"HH:MM-HH:MM\" in local time, several separated by commas (e.g. \"22:00-06:00, 12:00-13:00\")"
            )
        };
        let hm = |t: &str| -> Option<u16> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
        };
        let mut out = vec![];
        for part in s.split(',') {
            let (a, b) = part.split_once('-').ok_or_else(bad)?;
            let (a, b) = (hm(a).ok_or_else(bad)?, hm(b).ok_or_else(bad)?);
            if a == b {
                return Err(format!("invalid window {part:?}: it is empty"));
            }
            out.push((a, b));
        }
        Ok(Windows(out))
    }
}

impl fmt::Display for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hm = |m: u16| format!("{:02}:{:02}", m / 60, m % 60);
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|&(a, b)| format!("{}-{}", hm(a), hm(b)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

impl Serialize for Windows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Windows {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Windows, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
