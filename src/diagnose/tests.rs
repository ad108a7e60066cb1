//! Fixture sysfs trees: SATA, SAS and NVMe links, full and downgraded.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::symlink;

use super::*;

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, format!("{s}\n")).unwrap();
}

/// `{sys}/block/{name}/device` → `{sys}/devices/{dev}` (a relative link,
/// as sysfs has), with a model and a firmware.
fn block(sys: &Path, name: &str, dev: &str, model: &str, fw: &str) {
    let d = sys.join("devices").join(dev);
    fs::create_dir_all(&d).unwrap();
    write(&d.join("model"), model);
    write(&d.join("rev"), fw);
    let b = sys.join("block").join(name);
    fs::create_dir_all(b.join("queue")).unwrap();
    write(&b.join("queue/discard_max_bytes"), "2147450880");
    symlink(&d, b.join("device")).unwrap();
}

fn sata(cur: &str) -> (tempfile::TempDir, Vec<String>) {
    let t = tempfile::tempdir().unwrap();
    let sys = t.path();
    block(
        sys,
        "sda",
        "pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0",
        "Samsung SSD 840 EVO 1TB",
        "EXT0BB6Q",
    );
    write(&sys.join("class/ata_link/link3/sata_spd"), cur);
    write(
        &sys.join("class/ata_link/link3/hw_sata_spd_limit"),
        "6.0 Gbps",
    );
    let f = diagnose(sys, "sda");
    (t, f)
}

#[test]
fn sata_link_downgraded_and_the_840_evo_named() {
    let (_t, f) = sata("1.5 Gbps");
    assert!(
        f.iter()
            .any(|s| s.contains("SATA link runs at 1.5 Gbps of 6.0 Gbps")),
        "{f:?}"
    );
    assert!(
        f.iter()
            .any(|s| s.contains("840 EVO") && s.contains("EXT0DB6Q fixes it")),
        "{f:?}"
    );
    let (_t, f) = sata("6.0 Gbps");
    assert!(
        !f.iter().any(|s| s.contains("SATA link")),
        "a full link is not a finding: {f:?}"
    );
}

#[test]
fn sas_phy_below_its_maximum() {
    for (cur, slow) in [("3.0 Gbit", true), ("12.0 Gbit", false)] {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        let port = "pci0000:00/0000:00:03.0/host0/port-0:1";
        block(
            sys,
            "sdb",
            &format!("{port}/end_device-0:1/target0:0:1/0:0:1:0"),
            "HUSMM1680ASS200",
            "A204",
        );
        fs::create_dir_all(sys.join("devices").join(port).join("phy-0:1")).unwrap();
        write(&sys.join("class/sas_phy/phy-0:1/negotiated_linkrate"), cur);
        write(
            &sys.join("class/sas_phy/phy-0:1/maximum_linkrate"),
            "12.0 Gbit",
        );
        let f = diagnose(sys, "sdb");
        assert_eq!(
            f.iter().any(|s| s.contains("SAS link runs below")),
            slow,
            "{cur}: {f:?}"
        );
    }
}

#[test]
fn nvme_pcie_speed_or_width_below_its_maximum() {
    for (speed, width, slow) in [
        ("8.0 GT/s PCIe", "4", true),
        ("16.0 GT/s PCIe", "2", true),
        ("16.0 GT/s PCIe", "4", false),
    ] {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        let pci = "pci0000:00/0000:00:1d.0/0000:3d:00.0";
        let d = sys.join("devices").join(pci);
        write(&d.join("current_link_speed"), speed);
        write(&d.join("max_link_speed"), "16.0 GT/s PCIe");
        write(&d.join("current_link_width"), width);
        write(&d.join("max_link_width"), "4");
        block(
            sys,
            "nvme0n1",
            &format!("{pci}/nvme/nvme0"),
            "Samsung SSD 980 PRO 1TB",
            "5B2QGXA7",
        );
        let f = diagnose(sys, "nvme0n1");
        assert_eq!(
            f.iter().any(|s| s.contains("PCIe link runs at")),
            slow,
            "{speed} x{width}: {f:?}"
        );
    }
}

#[test]
fn no_trim_and_the_plain_840_are_named() {
    let t = tempfile::tempdir().unwrap();
    let sys = t.path();
    block(
        sys,
        "sdc",
        "pci0000:00/ata5/host4/target4:0:0/4:0:0:0",
        "Samsung SSD 840 Series",
        "DXT09B0Q",
    );
    write(&sys.join("block/sdc/queue/discard_max_bytes"), "0");
    let f = diagnose(sys, "sdc");
    assert!(
        f.iter().any(|s| s.contains("no firmware fix exists")),
        "{f:?}"
    );
    assert!(f.iter().any(|s| s.contains("no TRIM")), "{f:?}");
    assert!(
        f[0].starts_with("drive: Samsung SSD 840 Series, firmware DXT09B0Q"),
        "{f:?}"
    );
}
