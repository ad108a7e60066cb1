//! Man pages and shell completions, generated from the commands' clap
//! definitions (`refreshd::cli`, `refreshctl::cli`). They are kept in
//! `dist/` and packaged from there; `packaging::dist_assets_match_the_commands`
//! checks they are current (and rewrites them with REFRESHD_BLESS=1). No
//! hidden verb of the shipped commands does this.

use std::fs;
use std::io;
use std::path::Path;

use clap_complete::Shell;

/// Writes `DIR/man/<name>.1`, one `<name>-<sub>.1` per visible subcommand,
/// and `DIR/completions/{<name>.bash, _<name>, <name>.fish}`.
pub fn write(mut cmd: clap::Command, dir: &Path) -> io::Result<()> {
    let name = cmd.get_name().to_string();
    let man = dir.join("man");
    let comp = dir.join("completions");
    fs::create_dir_all(&man)?;
    fs::create_dir_all(&comp)?;
    cmd.build();
    write_man(&cmd, &name, &man)?;
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let sub_name = format!("{name}-{}", sub.get_name());
        let sub = sub.clone().name(sub_name.clone());
        write_man(&sub, &sub_name, &man)?;
    }
    for (shell, file) in [
        (Shell::Bash, format!("{name}.bash")),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut cmd, &name, &mut out);
        fs::write(comp.join(file), out)?;
    }
    Ok(())
}

fn write_man(cmd: &clap::Command, name: &str, dir: &Path) -> io::Result<()> {
    let mut out = Vec::new();
    // No date in the page: the output depends on the definition only.
    let man = clap_mangen::Man::new(cmd.clone())
        .source(format!("refreshd {}", env!("CARGO_PKG_VERSION")))
        .manual("refreshd manual");
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if cmd.has_subcommands() {
        man.render_subcommands_section(&mut out)?;
    }
    out.extend_from_slice(sections(name).as_bytes());
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    fs::write(dir.join(format!("{name}.1")), out)
}

/// The sections clap does not know: exit status, signals, files, and
/// where to read on.
fn sections(page: &str) -> String {
    let exit_refreshd = ".SH \"EXIT STATUS\"\n0: done (every file refreshed, skipped \
        or interrupted by another process); 1: a file failed or the run was cancelled (for check\\-config: the \
        configuration has a problem); 2: usage, configuration or environment error \
        (nothing was changed).\n";
    let exit_ctl = ".SH \"EXIT STATUS\"\n0: done; 1: the daemon refused the request, \
        cannot be reached, or (now \\-\\-wait) a file failed; 2: usage.\n";
    let files_daemon = ".SH FILES\n/etc/refreshd/refreshd.toml (refreshd.toml(5)), \
        /var/lib/refreshd (state: state.db, journal/), /run/refreshd/control.sock.\n";
    let signals_run = ".SH SIGNALS\nSIGTERM, SIGINT: stop after the I/O in flight; \
        the file being refreshed is checkpointed and resumes at the next start (exit \
        within 5 s). SIGHUP: re\\-read the configuration; a file with problems is \
        refused and the old one stays.\n";
    let signals_refresh = ".SH SIGNALS\nSIGINT, SIGTERM: stop after the I/O in flight; \
        the file being written is reported interrupted and its times are put back.\n";
    let see_also = |extra: &str| {
        format!(
            ".SH \"SEE ALSO\"\n{extra}refreshd.toml(5), \
        /usr/share/doc/refreshd/README.md\n"
        )
    };
    match page {
        "refreshd" => format!(
            "{exit_refreshd}{signals_run}{files_daemon}{}",
            see_also("refreshctl(1), ")
        ),
        "refreshd-run" => format!(
            "{exit_refreshd}{signals_run}{files_daemon}{}",
            see_also("refreshctl(1), ")
        ),
        "refreshd-refresh" => format!(
            "{exit_refreshd}{signals_refresh}.SH FILES\n/var/lib/refreshd/journal \
             (the crash journal, when writable; \\-\\-state\\-dir).\n{}",
            see_also("refreshd\\-survey(1), ")
        ),
        "refreshd-survey" | "refreshd-check-config" => {
            format!("{exit_refreshd}{}", see_also("refreshd(1), "))
        }
        p if p.starts_with("refreshctl") => format!(
            "{exit_ctl}.SH FILES\n/run/refreshd/control.sock (\\-\\-socket, \
             REFRESHCTL_SOCKET).\n{}",
            see_also("refreshd(1), ")
        ),
        _ => String::new(),
    }
}

/// The configuration reference: `man/refreshd.toml.5` and
/// `configuration.md` (docs/), from the settings tables.
pub fn write_config_reference(dir: &Path) -> io::Result<()> {
    let man = dir.join("man");
    fs::create_dir_all(&man)?;
    fs::write(
        man.join("refreshd.toml.5"),
        refreshd::config::reference::roff(env!("CARGO_PKG_VERSION")),
    )?;
    fs::write(
        dir.join("configuration.md"),
        refreshd::config::reference::markdown(),
    )
}
