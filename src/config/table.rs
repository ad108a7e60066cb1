//! One table per config section: each setting is one entry — its field,
//! type, default, TOML key, reader and documentation — and the entry makes
//! the struct's field, its default, the key list, the parser arm, the
//! default the command line shows, and the line of the configuration
//! reference (docs/configuration.md, generated).

use std::path::PathBuf;
use std::time::Duration;

use crate::units::{ByteSize, HumanDuration, Rate};

/// One setting in the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `[defaults]`, `[coordination]`, or "" (the top level).
    pub section: &'static str,
    pub key: &'static str,
    /// The default as TOML would write it, or "unset" and why.
    pub default: String,
    pub doc: String,
}

/// A value as the reference shows it (TOML syntax).
pub trait Shown {
    fn shown(&self) -> String;
}

impl Shown for Duration {
    fn shown(&self) -> String {
        format!("\"{}\"", HumanDuration(*self))
    }
}

impl Shown for ByteSize {
    fn shown(&self) -> String {
        format!("\"{}\"", self.exact())
    }
}

impl Shown for Rate {
    fn shown(&self) -> String {
        format!("\"{}\"", self.exact())
    }
}

impl Shown for f64 {
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl Shown for usize {
    fn shown(&self) -> String {
        self.to_string()
    }
}

impl Shown for String {
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl Shown for PathBuf {
    fn shown(&self) -> String {
        format!("{:?}", self.display().to_string())
    }
}

impl Shown for Vec<String> {
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

impl<T: Shown> Shown for Option<T> {
    fn shown(&self) -> String {
        match self {
            Some(t) => t.shown(),
            None => "unset".into(),
        }
    }
}

/// Enums shown by their serde name.
macro_rules! shown_by_serde {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self) -> String {
                serde_json::to_value(self).map_or_else(|_| String::new(), |v| v.to_string())
            }
        }
    )*};
}
shown_by_serde!(
    crate::engine::types::Strategy,
    crate::engine::types::YieldMode,
    crate::engine::types::IoPriority,
    super::windows::Windows
);

/// Declares a config section as a table. Each entry:
/// `/// doc` `field: Type = default, key "toml_key", read reader;`
/// (`, shown "text"` overrides how the default is shown). Fields after
/// `extra` are part of the struct but not settings (positions, sources).
macro_rules! table {
    (
        $(#[$smeta:meta])*
        pub struct $name:ident in $section:literal {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ty = $default:expr, key $key:literal, read $read:expr
                $(, shown $shown:literal)?;
            )*
        }
        extra {
            $( $(#[$xmeta:meta])* $xfield:ident: $xty:ty = $xdefault:expr; )*
        }
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize)]
        pub struct $name {
            $( $(#[doc = $doc])* pub $field: $ty, )*
            $( $(#[$xmeta])* pub $xfield: $xty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $( $field: $default, )*
                    $( $xfield: $xdefault, )*
                }
            }
        }

        impl $name {
            /// The section's keys, in the table's order.
            pub const KEYS: &'static [&'static str] = &[$($key),*];

            /// Reads `key` into its field; `false` when the key is not
            /// one of this table's. A bad value is a problem in `p` and
            /// leaves the field as it was.
            pub(crate) fn read(
                &mut self,
                p: &mut $crate::config::parser::Parser<'_>,
                key: &str,
                v: &$crate::config::parser::Value<'_>,
            ) -> bool {
                match key {
                    $(
                        $key => {
                            let read: $crate::config::readers::Reader<$ty> = $read;
                            if let Some(x) = read(p, key, v) {
                                self.$field = x;
                            }
                            true
                        }
                    )*
                    _ => false,
                }
            }

            /// The keys whose values differ between two sections.
            pub fn differences(&self, other: &Self) -> Vec<&'static str> {
                let mut out = vec![];
                $( if self.$field != other.$field { out.push($key); } )*
                out
            }

            /// A setting's value as the file would write it.
            pub fn shown(&self, key: &str) -> Option<String> {
                use $crate::config::table::Shown as _;
                match key {
                    $( $key => Some(self.$field.shown()), )*
                    _ => None,
                }
            }

            /// The section's lines of the configuration reference.
            pub fn reference() -> Vec<$crate::config::table::Entry> {
                use $crate::config::table::Shown as _;
                let d = Self::default();
                vec![$(
                    $crate::config::table::Entry {
                        section: $section,
                        key: $key,
                        default: {
                            let over: Option<&str> = None $( .or(Some($shown)) )?;
                            over.map_or_else(|| d.$field.shown(), String::from)
                        },
                        doc: [$($doc.trim()),*].join(" "),
                    },
                )*]
            }
        }
    };
}
pub(crate) use table;
