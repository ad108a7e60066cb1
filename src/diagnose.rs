//! What the host can see about why a whole drive is slow: its link against
//! the fastest it could negotiate (SATA `ata_link`, SAS `sas_phy`, NVMe
//! PCIe speed and width), whether it can be TRIMmed, and who it is (model,
//! firmware), including known cases by model. Reads sysfs under a root
//! (`/sys`, or a fixture tree in tests). Findings are sentences for people.

use std::fs;
use std::path::{Component, Path, PathBuf};

fn read(p: &Path) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && s != "<unknown>")
}

/// The leading number of "6.0 Gbps", "12.0 Gbit", "8.0 GT/s PCIe", "4".
fn rate(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

/// `{sys}/block/{name}/device`, resolved (symlinks followed).
fn device_dir(sys: &Path, name: &str) -> Option<PathBuf> {
    fs::canonicalize(sys.join("block").join(name).join("device")).ok()
}

fn ancestor_named(p: &Path, pred: impl Fn(&str) -> bool) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut found = None;
    for c in p.components() {
        out.push(c);
        if let Component::Normal(n) = c {
            if pred(&n.to_string_lossy()) {
                found = Some(out.clone());
            }
        }
    }
    found
}

fn sata_link(sys: &Path, dev: &Path) -> Option<String> {
    let ata = ancestor_named(dev, |n| {
        n.starts_with("ata") && n[3..].parse::<u32>().is_ok()
    })?;
    let n = ata.file_name()?.to_string_lossy()[3..].to_string();
    let link = sys.join("class/ata_link").join(format!("link{n}"));
    let cur = read(&link.join("sata_spd"))?;
    let max = read(&link.join("hw_sata_spd_limit"))?;
    (rate(&cur)? < rate(&max)?).then(|| {
        format!("the SATA link runs at {cur} of {max}: check the cable, backplane and port")
    })
}

fn sas_link(sys: &Path, dev: &Path) -> Option<String> {
    let port = ancestor_named(dev, |n| n.starts_with("port-"))?;
    let mut slow = vec![];
    for e in fs::read_dir(&port).ok()?.flatten() {
        let phy = e.file_name().to_string_lossy().to_string();
        if !phy.starts_with("phy-") {
            continue;
        }
        let d = sys.join("class/sas_phy").join(&phy);
        let (Some(cur), Some(max)) = (
            read(&d.join("negotiated_linkrate")),
            read(&d.join("maximum_linkrate")),
        ) else {
            continue;
        };
        if rate(&cur).zip(rate(&max)).is_some_and(|(c, m)| c < m) {
            slow.push(format!("{phy} at {cur} of {max}"));
        }
    }
    (!slow.is_empty()).then(|| {
        format!(
            "the SAS link runs below its maximum ({}): check the cable, expander and backplane",
            slow.join(", ")
        )
    })
}

fn nvme_link(dev: &Path) -> Option<String> {
    // …/0000:3d:00.0/nvme/nvme0: the PCI function is above "nvme".
    let nvme = ancestor_named(dev, |n| n == "nvme")?;
    let pci = nvme.parent()?;
    let get = |f: &str| read(&pci.join(f));
    let (cs, ms) = (get("current_link_speed")?, get("max_link_speed")?);
    let (cw, mw) = (get("current_link_width")?, get("max_link_width")?);
    let slow_speed = rate(&cs)? < rate(&ms)?;
    let narrow = rate(&cw)? < rate(&mw)?;
    (slow_speed || narrow).then(|| {
        format!(
            "the PCIe link runs at {cs} x{cw} of {ms} x{mw}: check the slot, riser and BIOS link settings"
        )
    })
}

fn known_model(model: &str, firmware: Option<&str>) -> Option<String> {
    let m = model.to_ascii_uppercase();
    if m.contains("840 EVO") {
        let fixed = firmware.is_some_and(|f| f >= "EXT0DB6Q");
        return Some(if fixed {
            "Samsung 840 EVO with firmware EXT0DB6Q or later (the retention fix)".into()
        } else {
            "Samsung 840 EVO: old data reads slowly (retention); firmware EXT0DB6Q fixes it, \
             rewriting helps until then"
                .into()
        });
    }
    if m.contains("SSD 840") && !m.contains("PRO") {
        return Some(
            "Samsung 840 (TLC): old data reads slowly and no firmware fix exists; periodic \
             rewriting is the remedy"
                .into(),
        );
    }
    None
}

/// Writes since the drive's fresh-speed baseline was measured: heavy
/// writes leave garbage collection behind, which TRIM (fstrim) helps and
/// rewriting data does not.
pub fn written_since(bytes: u64, secs: i64) -> String {
    format!(
        "{} written to the drive since its fresh speed was last measured ({} ago): if garbage \
         collection is behind after heavy writes, fstrim (TRIM) helps, rewriting does not",
        crate::units::format_size(bytes),
        match secs.max(0) {
            s if s < 3600 => format!("{} min", s / 60),
            s if s < 2 * 86_400 => format!("{} h", s / 3600),
            s => format!("{} days", s / 86_400),
        }
    )
}

/// Findings for the drive `name` (e.g. `sda`, `nvme0n1`) under `sys`.
pub fn diagnose(sys: &Path, name: &str) -> Vec<String> {
    let mut out = vec![];
    let block = sys.join("block").join(name);
    let model = read(&block.join("device/model"));
    let firmware =
        read(&block.join("device/firmware_rev")).or_else(|| read(&block.join("device/rev")));
    if let Some(m) = &model {
        out.push(format!(
            "drive: {m}{}",
            firmware
                .as_ref()
                .map_or(String::new(), |f| format!(", firmware {f}"))
        ));
        out.extend(known_model(m, firmware.as_deref()));
    }
    if let Some(dev) = device_dir(sys, name) {
        out.extend(sata_link(sys, &dev));
        out.extend(sas_link(sys, &dev));
        out.extend(nvme_link(&dev));
    }
    if read(&block.join("queue/discard_max_bytes")).as_deref() == Some("0") {
        out.push(
            "no TRIM/discard: slowness from garbage collection after heavy writes cannot be \
             eased by fstrim"
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests;
