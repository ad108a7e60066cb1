//! What can go wrong with the state database.

use std::path::PathBuf;

use super::migrate::SCHEMA_VERSION;

/// Error of the state database.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("state database {path}: {source}")]
    Db {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "state database {path} has schema version {found}, written by a newer refreshd \
         (this one knows {SCHEMA_VERSION}): run the newer refreshd, or move the state \
         directory away to start over (refresh history and checkpoints are lost)"
    )]
    Version { path: PathBuf, found: i64 },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
