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
    clap_mangen::Man::new(cmd.clone())
        .source(format!("refreshd {}", env!("CARGO_PKG_VERSION")))
        .manual("refreshd manual")
        .render(&mut out)?;
    fs::write(dir.join(format!("{name}.1")), out)
}
