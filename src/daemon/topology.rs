//! Which controller a drive is behind (the HBA, SATA or NVMe controller:
//! the last PCI device on its sysfs path), so that the drives sharing one
//! controller's bandwidth are capped together (`max_active_per_controller`).

use std::path::Path;

/// The controller of block device `name`, from `/sys/block/<name>`'s
/// real path: `pci-<address>`, or "virtual" (loop, dm, md, zram).
pub fn controller_of(sys: &Path, name: &str) -> String {
    match std::fs::canonicalize(sys.join("block").join(name)) {
        Ok(p) => controller_from_path(&p),
        Err(_) => "unknown".into(),
    }
}

/// The last PCI function (`dddd:bb:dd.f`) on a sysfs device path.
pub fn controller_from_path(p: &Path) -> String {
    p.components()
        .filter_map(|c| c.as_os_str().to_str())
        .rfind(|c| is_pci_address(c))
        .map_or_else(|| "virtual".into(), |a| format!("pci-{a}"))
}

fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_is_the_last_pci_function_on_the_path() {
        let cases = [
            // SATA behind AHCI.
            ("/sys/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda", "pci-0000:00:1f.2"),
            // SAS behind an HBA behind a PCIe switch port, through an expander.
            ("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/host7/port-7:0/expander-7:0/port-7:0:3/end_device-7:0:3/target7:0:3/7:0:3:0/block/sdd", "pci-0000:01:00.0"),
            // NVMe: each drive is its own controller.
            ("/sys/devices/pci0000:00/0000:00:03.0/nvme/nvme0/nvme0n1", "pci-0000:00:03.0"),
            ("/sys/devices/pci0000:00/0000:00:04.0/virtio1/block/vda", "pci-0000:00:04.0"),
            ("/sys/devices/virtual/block/loop3", "virtual"),
        ];
        for (path, want) in cases {
            assert_eq!(controller_from_path(Path::new(path)), want, "{path}");
        }
    }

    #[test]
    fn loop_devices_are_virtual_and_missing_ones_unknown() {
        let sys = Path::new("/sys");
        if sys.join("block/loop0").exists() {
            assert_eq!(controller_of(sys, "loop0"), "virtual");
        }
        assert_eq!(controller_of(sys, "no-such-disk"), "unknown");
    }
}
