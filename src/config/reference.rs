//! The configuration reference, made from the tables: `docs/configuration.md`
//! and the `refreshd.toml(5)` man page. A test checks that both files in
//! the repository are what these functions make now.

use std::fmt::Write as _;

use super::table::Entry;
use super::{Config, Coordination, Settings};

/// The sections of the file, in order: (header, what it is, its keys).
pub fn sections() -> Vec<(&'static str, &'static str, Vec<Entry>)> {
    vec![
        (
            "top level",
            "The service: where it keeps its state and how it is reached.",
            Config::reference(),
        ),
        (
            "[defaults] and [[paths]]",
            "How each tree's drive is watched, judged and refreshed. `[defaults]` \
             sets them for every tree; a `[[paths]]` entry (`path = \"/srv/index\"`, \
             required, absolute; trees must not overlap) may override any of them, \
             and may name its fleet `group`. Trees on one drive must agree on every \
             setting (a drive is sampled and refreshed as one): `check-config` names \
             both lines when they do not.",
            Settings::reference(),
        ),
        (
            "[coordination]",
            "Fleet coordination (a refreshd built with the `fleet` feature, as the \
             Debian package is): drives on any host that hold copies of the same data \
             form a group; at most `max_concurrent` of them refresh at once, each \
             holding a slot in etcd. Absent: every daemon decides alone.",
            Coordination::reference(),
        ),
    ]
}

const UNITS: &str = "Sizes: a byte count (`4096`) or `\"512KiB\"`, `\"64MiB\"`, \
    `\"1GB\"` (binary KiB/MiB/GiB/TiB, decimal K/KB/M/MB/G/GB/T/TB). Durations: \
    `\"500ms\"`, `\"30s\"`, `\"15m\"`, `\"6h\"`, `\"30d\"`, `\"2w\"`. Rates: a size \
    per second, `\"50MiB/s\"`.";

/// `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         <!-- Made from the settings tables in src/config (a test checks it is current; \
         `REFRESHD_BLESS=1 cargo test dist_assets` rewrites it). -->\n\n\
         `/etc/refreshd/refreshd.toml` (or `refreshd run --config PATH`). Every key is \
         optional but `[[paths]]`; unknown keys are errors; `refreshd check-config` \
         reports every problem at `file:line:col` and exits 1. `systemctl reload \
         refreshd` applies a new file if it is valid (changes to `[[paths]]`, \
         `state_dir`, `control_socket` and `metrics_listen` need a restart).\n\n",
    );
    let _ = writeln!(out, "{UNITS}\n");
    for (header, about, entries) in sections() {
        let _ = writeln!(out, "## {header}\n\n{about}\n");
        out.push_str("| key | default | meaning |\n|---|---|---|\n");
        for e in entries {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | {} |",
                e.key,
                e.default.replace('|', "\\|"),
                e.doc.replace('|', "\\|")
            );
        }
        out.push('\n');
    }
    out.push_str(
        "## Example\n\nThe shipped `/etc/refreshd/refreshd.toml` shows every key with its \
         default, commented where it has none.\n",
    );
    out
}

fn roff_escape(s: &str) -> String {
    s.replace('\\', "\\e")
        .replace('-', "\\-")
        .replace('\'', "\\(aq")
}

/// `refreshd.toml(5)`.
pub fn roff(version: &str) -> String {
    let mut out = format!(
        ".TH refreshd.toml 5 \"\" \"refreshd {version}\" \"refreshd manual\"\n\
         .SH NAME\nrefreshd.toml \\- configuration of the refreshd daemon\n\
         .SH SYNOPSIS\n/etc/refreshd/refreshd.toml\n\
         .SH DESCRIPTION\nA TOML file. Every key is optional but one \\fB[[paths]]\\fR \
         entry at least; unknown keys are errors. \\fBrefreshd check\\-config\\fR reports \
         every problem at file:line:col and exits 1. \\fBsystemctl reload refreshd\\fR \
         applies a new file if it is valid.\n.PP\n{}\n",
        roff_escape(&UNITS.replace('`', ""))
    );
    for (header, about, entries) in sections() {
        let _ = write!(
            out,
            ".SH {}\n{}\n",
            roff_escape(&header.to_uppercase()),
            roff_escape(&about.replace('`', ""))
        );
        for e in entries {
            let _ = write!(
                out,
                ".TP\n\\fB{}\\fR = {}\n{}\n",
                roff_escape(e.key),
                roff_escape(&e.default),
                roff_escape(&e.doc.replace('`', ""))
            );
        }
    }
    out.push_str(
        ".SH EXAMPLE\n.nf\n[defaults]\nrate = \"50MiB/s\"\nwindow = \"22:00\\-06:00\"\n\n\
         [[paths]]\npath = \"/srv/index\"\n\n[[paths]]\npath = \"/srv/archive\"\n\
         stale_after = \"90d\"\n.fi\n\
         .SH FILES\n/etc/refreshd/refreshd.toml, /usr/share/doc/refreshd/configuration.md\n\
         .SH SEE ALSO\nrefreshd(1), refreshd\\-run(1), refreshd\\-check\\-config(1), refreshctl(1)\n",
    );
    out
}
