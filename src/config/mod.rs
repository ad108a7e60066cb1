//! The daemon's configuration: TOML → a validated [`Config`]. Every key is
//! one entry of a table ([`table`]): the top level here, the tree settings
//! in [`settings`], `[coordination]` in [`coordination`]. Validation
//! reports every problem at once, each at `file:line:col`; unknown keys
//! are errors. What depends on the machine (trees, drives, the state
//! directory) is checked by `daemon::placement`, not here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::de::DeTable;

pub mod coordination;
pub mod parser;
pub mod readers;
pub mod reference;
pub mod settings;
pub mod table;
#[cfg(test)]
mod tests;
pub mod url;
pub mod windows;

pub use crate::engine::types::{IoPriority, Strategy, YieldMode};
pub use coordination::Coordination;
pub use parser::{ConfigError, Position, Problem};
pub use settings::Settings;
pub use windows::Windows;

use parser::{Parser, Value};
use table::table;

/// Where the daemon reads its configuration.
pub const DEFAULT_PATH: &str = "/etc/refreshd/refreshd.toml";
/// Where the daemon keeps its state, and the one-shot its crash journal.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/refreshd";

table! {
    /// The validated configuration.
    pub struct Config in "" {
        /// SQLite state (inventory, drive baselines and forecast rounds,
        /// checkpoints) and the crash journal. One daemon per state
        /// directory.
        state_dir: PathBuf = DEFAULT_STATE_DIR.into(), key "state_dir", read readers::abs_path;
        /// Control socket for refreshctl (mode 0600 in a root-owned
        /// runtime directory).
        control_socket: PathBuf = crate::protocol::DEFAULT_SOCKET.into(), key "control_socket",
            read readers::abs_path;
        /// Prometheus/OpenMetrics endpoint; loopback only by default. ""
        /// turns it off.
        metrics_listen: String = "127.0.0.1:9964".into(), key "metrics_listen",
            read readers::listen_address;
        /// Members of this group may use the read-only refreshctl verbs
        /// (status, drives, plan, survey). Unset: root only.
        control_group: Option<String> = None, key "control_group",
            read |p, k, v| p.value(k, v).map(Some), shown "unset (root only)";
        /// Drives refreshed at the same time.
        max_active_drives: usize = 1, key "max_active_drives", read readers::count;
        /// Drives behind one controller (HBA, SATA or NVMe controller:
        /// `refreshctl drives` shows each drive's) refreshed at the same
        /// time; they share its bandwidth. Unset: only `max_active_drives`
        /// bounds them.
        max_active_per_controller: Option<usize> = None, key "max_active_per_controller",
            read |p, k, v| readers::count(p, k, v).map(Some);
    }
    extra {
        /// The file it came from (for messages and SIGHUP).
        source: Option<PathBuf> = None;
        /// Refreshes coordinated across hosts through etcd (`None`: alone).
        coordination: Option<Coordination> = None;
        defaults: Settings = Settings::default();
        paths: Vec<PathConfig> = vec![];
        /// Where each top-level key is in the file (for messages).
        #[serde(skip)]
        at: BTreeMap<&'static str, Position> = BTreeMap::new();
    }
}

/// One configured tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PathConfig {
    pub path: PathBuf,
    pub settings: Settings,
    /// Its fleet group, when not `[coordination]`'s `group`.
    pub group: Option<String>,
    /// Line and column of `path` in the file (for messages).
    #[serde(skip)]
    pub at: Position,
    /// The settings this entry sets itself, and where.
    #[serde(skip)]
    pub set_at: BTreeMap<&'static str, Position>,
}

/// Sections and keys of the top level that are not settings.
const SECTIONS: &[&str] = &["coordination", "defaults", "paths"];

/// Reads and validates `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    match load_partial(path) {
        (Some(cfg), problems) if problems.is_empty() => Ok(cfg),
        (_, problems) => Err(ConfigError { problems }),
    }
}

/// Reads `path` as far as it can be read: the config made of what is
/// valid (`None` when the file cannot be read), and every problem — so
/// that `check-config` can also check the valid trees on the machine and
/// report everything in one pass.
pub fn load_partial(path: &Path) -> (Option<Config>, Vec<Problem>) {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let (mut cfg, problems) = parse_partial(&text, &name);
            cfg.source = Some(path.to_path_buf());
            (Some(cfg), problems)
        }
        Err(e) => (
            None,
            vec![Problem {
                file: name,
                at: None,
                message: format!("cannot read the config file: {e}"),
            }],
        ),
    }
}

/// Validates config text; `file` names it in messages.
pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    match parse_partial(text, file) {
        (cfg, problems) if problems.is_empty() => Ok(cfg),
        (_, problems) => Err(ConfigError { problems }),
    }
}

/// [`parse`], keeping what is valid: syntax errors first (what follows
/// from them may be noise), then the rest by position.
pub fn parse_partial(text: &str, file: &str) -> (Config, Vec<Problem>) {
    let mut p = Parser::new(text, file);
    let (root, errors) = DeTable::parse_recoverable(text);
    for e in errors {
        let span = e.span().unwrap_or(0..0);
        p.problem(span, e.message().to_string());
    }
    let syntax = p.problems.len();
    let cfg = read_config(&mut p, root.get_ref());
    let mut problems = p.problems;
    problems[syntax..].sort_by_key(|q| q.at);
    (cfg, problems)
}

fn find<'t, 'i>(t: &'t DeTable<'i>, key: &str) -> Option<&'t Value<'i>> {
    t.iter()
        .find(|(k, _)| k.get_ref().as_ref() == key)
        .map(|(_, v)| v)
}

fn read_config(p: &mut Parser<'_>, root: &DeTable<'_>) -> Config {
    let mut cfg = Config::default();
    // Defaults first: path entries override them.
    if let Some(v) = find(root, "defaults") {
        match v.get_ref().as_table() {
            Some(t) => read_settings(
                p,
                t,
                &mut cfg.defaults,
                " in [defaults]",
                &mut BTreeMap::new(),
            ),
            None => p.problem(v.span(), "`defaults` must be a table".into()),
        }
    }
    for (k, v) in root.iter() {
        let key = k.get_ref().as_ref();
        if SECTIONS.contains(&key) {
            continue;
        }
        if cfg.read(p, key, v) {
            if let Some(k) = Config::KEYS.iter().find(|&&known| known == key) {
                cfg.at.insert(k, p.line_col(v.span().start));
            }
        } else {
            let known: Vec<&str> = Config::KEYS.iter().chain(SECTIONS).copied().collect();
            p.unknown(k, "", &known);
        }
    }
    if let Some(v) = find(root, "coordination") {
        cfg.coordination = coordination::section(p, v);
    }
    let has_coordination = find(root, "coordination").is_some();
    match find(root, "paths") {
        Some(v) => read_paths(p, v, &mut cfg, has_coordination),
        None => p.problem_at(
            (1, 1),
            "no [[paths]] entry: at least one tree to watch must be configured".into(),
        ),
    }
    cfg
}

fn read_settings(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    s: &mut Settings,
    section: &str,
    set_at: &mut BTreeMap<&'static str, Position>,
) {
    for (k, v) in t.iter() {
        let key = k.get_ref().as_ref();
        if s.read(p, key, v) {
            if let Some(k) = Settings::KEYS.iter().find(|&&known| known == key) {
                set_at.insert(k, p.line_col(v.span().start));
            }
        } else {
            p.unknown(k, section, Settings::KEYS);
        }
    }
}

fn read_paths(p: &mut Parser<'_>, v: &Value<'_>, cfg: &mut Config, has_coordination: bool) {
    let Some(entries) = v.get_ref().as_array() else {
        p.problem(
            v.span(),
            "`paths` must be an array of tables: [[paths]]".into(),
        );
        return;
    };
    for entry in entries.iter() {
        let Some(t) = entry.get_ref().as_table() else {
            p.problem(
                entry.span(),
                "each `paths` entry must be a table with `path`".into(),
            );
            continue;
        };
        if let Some(tree) = read_tree(p, t, entry, &cfg.defaults, has_coordination) {
            match cfg.paths.iter().find(|o| overlap(&o.path, &tree.path)) {
                Some(other) => p.problem_at(
                    tree.at,
                    format!(
                        "path {} overlaps {} (each tree may be configured once)",
                        crate::pathtext::text(&tree.path),
                        crate::pathtext::text(&other.path)
                    ),
                ),
                None => cfg.paths.push(tree),
            }
        }
    }
}

fn overlap(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn read_tree(
    p: &mut Parser<'_>,
    t: &DeTable<'_>,
    entry: &Value<'_>,
    defaults: &Settings,
    has_coordination: bool,
) -> Option<PathConfig> {
    let mut settings = defaults.clone();
    let mut set_at = BTreeMap::new();
    let rest: DeTable<'_> = t
        .iter()
        .filter(|(k, _)| !matches!(k.get_ref().as_ref(), "path" | "group"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    read_settings(p, &rest, &mut settings, " in [[paths]]", &mut set_at);
    let group = find(t, "group").and_then(|v| coordination::path_group(p, v, has_coordination));
    let Some(v) = find(t, "path") else {
        p.problem(entry.span(), "[[paths]] entry without `path`".into());
        return None;
    };
    let path = readers::abs_path(p, "path", v)?;
    Some(PathConfig {
        path,
        settings,
        group,
        at: p.line_col(v.span().start),
        set_at,
    })
}
