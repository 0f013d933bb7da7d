//! Owns turning one disk's device node and its ancestors into a `Disk`: class, identity,
//! sizes, partitions, mounts, holders and the USB, SATA or MMC link behind it.

use super::model::*;
use super::parse::{self, ClassSignals, MountEntry};
use crate::sysfs::node::{attr_with, decoded_property, nonempty, DevNode};
use crate::sysfs::{AttrError, SysfsRoot};

/// Collects fields that could not be filled, with their reasons.
struct Gaps(Vec<Missing>);

impl Gaps {
    fn take<T>(&mut self, field: &str, where_: &str, r: Result<T, AttrError>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.0.push(Missing {
                    field: field.to_string(),
                    reason: format!("{where_}: {e}"),
                });
                None
            }
        }
    }
    fn note(&mut self, field: &str, reason: String) {
        self.0.push(Missing {
            field: field.to_string(),
            reason,
        });
    }
}

/// Builds the inventory entry of one whole disk.
pub fn disk(sys: &SysfsRoot, node: &dyn DevNode<'_>, mounts: &[MountEntry]) -> Disk {
    let mut gaps = Gaps(Vec::new());
    let name = node.sysname();
    let devpath = node.devpath();
    let mut d = Disk {
        name: name.clone(),
        devpath: devpath.clone(),
        ..Disk::default()
    };
    d.devnum = gaps.take("devnum", "dev", node.attr("dev"));
    d.dev_node = match node.property("DEVNAME") {
        Some(n) if n.starts_with('/') => n,
        Some(n) => format!("/dev/{n}"),
        None => format!("/dev/{name}"),
    };

    // Ancestors, nearest first. Each is read once; the USB, SCSI and MMC parts pick theirs.
    let mut ancestors: Vec<Box<dyn DevNode<'_> + '_>> = Vec::new();
    {
        let mut cur = node.parent();
        while let Some(p) = cur {
            let next = p.parent();
            // Parents borrow nothing from their children (they borrow the root), so the
            // chain can be kept by value.
            ancestors.push(p);
            cur = next;
            if ancestors.len() > 64 {
                break;
            }
        }
    }
    let subsystems: Vec<Option<String>> = ancestors.iter().map(|a| a.subsystem()).collect();
    let find = |sub: &str, devtype: Option<&str>| {
        ancestors.iter().zip(&subsystems).position(|(a, s)| {
            s.as_deref() == Some(sub) && (devtype.is_none() || a.devtype().as_deref() == devtype)
        })
    };

    let scsi = find("scsi", Some("scsi_device")).map(|i| &ancestors[i]);
    let mmc_card = find("mmc", None).map(|i| &ancestors[i]);
    // A namespace's parent is its controller (`nvme`), or with native multipath its subsystem
    // (`nvme-subsystem`), which carries the same model, serial and firmware_rev.
    let nvme = find("nvme", None)
        .or_else(|| find("nvme-subsystem", None))
        .map(|i| &ancestors[i]);

    let scsi_vendor = scsi.and_then(|s| nonempty(s.attr("vendor")).ok());
    let mmc_type = mmc_card.and_then(|c| {
        nonempty(c.attr("type"))
            .ok()
            .or_else(|| c.property("MMC_TYPE"))
            .or_else(|| node.property("MMC_TYPE"))
    });
    let id_bus = node.property("ID_BUS");
    let sub_refs: Vec<&str> = subsystems.iter().filter_map(|s| s.as_deref()).collect();
    let drivers: Vec<String> = ancestors.iter().filter_map(|a| a.driver()).collect();
    d.class = parse::classify(&ClassSignals {
        name: &name,
        devpath: &devpath,
        ancestor_subsystems: sub_refs,
        mmc_type: mmc_type.as_deref(),
        id_bus: id_bus.as_deref(),
        scsi_vendor: scsi_vendor.as_deref(),
        ancestor_drivers: drivers.iter().map(String::as_str).collect(),
    });

    // Identity: the SCSI inquiry strings, else MMC/NVMe attributes, else udev's.
    d.vendor = scsi_vendor
        .clone()
        .or_else(|| decoded_property(node, "ID_VENDOR"));
    d.model = scsi
        .and_then(|s| nonempty(s.attr("model")).ok())
        .or_else(|| nvme.and_then(|n| nonempty(n.attr("model")).ok()))
        .or_else(|| mmc_card.and_then(|c| nonempty(c.attr("name")).ok()))
        .or_else(|| decoded_property(node, "ID_MODEL"));
    d.firmware = scsi
        .and_then(|s| nonempty(s.attr("rev")).ok())
        .or_else(|| nvme.and_then(|n| nonempty(n.attr("firmware_rev")).ok()))
        .or_else(|| mmc_card.and_then(|c| nonempty(c.attr("fwrev")).ok()));
    d.serial = node
        .property("ID_SERIAL_SHORT")
        .filter(|s| !s.is_empty())
        .or_else(|| nvme.and_then(|n| nonempty(n.attr("serial")).ok()))
        .or_else(|| mmc_card.and_then(|c| nonempty(c.attr("serial")).ok()));
    d.id_path = node.property("ID_PATH").filter(|s| !s.is_empty());

    d.size_bytes = gaps
        .take("size_bytes", "size", attr_with(node, "size", parse::uint))
        // sysfs `size` is always in 512-byte sectors, whatever the logical block size.
        .map(|sectors| sectors * 512);
    d.logical_block_size_bytes = gaps.take(
        "logical_block_size_bytes",
        "queue/logical_block_size",
        attr_with(node, "queue/logical_block_size", parse::uint),
    );
    d.physical_block_size_bytes = gaps.take(
        "physical_block_size_bytes",
        "queue/physical_block_size",
        attr_with(node, "queue/physical_block_size", parse::uint),
    );
    d.rotational = gaps.take(
        "rotational",
        "queue/rotational",
        attr_with(node, "queue/rotational", parse::flag),
    );
    d.removable = gaps.take(
        "removable",
        "removable",
        attr_with(node, "removable", parse::flag),
    );
    d.read_only = gaps.take("read_only", "ro", attr_with(node, "ro", parse::flag));

    if let Some(dev) = &d.devnum {
        d.mounts = mounts_of(mounts, dev);
    }
    d.holders = sys.list(&devpath, "holders");
    d.partitions = partitions(sys, &devpath, mounts);

    if d.class == DeviceClass::Usb {
        let mut link = usb_link(&ancestors, &subsystems, &mut gaps);
        if link.driver.is_none() {
            // udev exports often lack the interface device; udev's own ID_USB_DRIVER names it.
            link.driver = node.property("ID_USB_DRIVER").filter(|s| !s.is_empty());
        }
        if link.driver.is_none() {
            gaps.note(
                "usb.driver",
                "no driver bound to the mass-storage interface and no ID_USB_DRIVER".into(),
            );
        }
        d.usb = Some(link);
    }
    if d.class == DeviceClass::Sata {
        d.sata = sata_link(sys, &devpath, &mut gaps);
    }
    if let Some(card) = mmc_card {
        let mut m = MmcInfo {
            card: card.sysname(),
            card_type: mmc_type.clone(),
            ..MmcInfo::default()
        };
        m.name = nonempty(card.attr("name"))
            .ok()
            .or_else(|| node.property("MMC_NAME"));
        m.manfid = nonempty(card.attr("manfid")).ok();
        m.oemid = nonempty(card.attr("oemid")).ok();
        m.prv = nonempty(card.attr("prv")).ok();
        m.date = nonempty(card.attr("date")).ok();
        m.serial = nonempty(card.attr("serial")).ok();
        m.cid = nonempty(card.attr("cid")).ok();
        m.csd = nonempty(card.attr("csd")).ok();
        m.speed_claims = card.attr("ssr").ok().and_then(|s| parse::sd_ssr(&s));
        m.area = parse::emmc_area(&name).filter(|_| mmc_type.as_deref() == Some("MMC"));
        let host = card.parent().map(|h| h.sysname());
        if let Some(h) = &host {
            // debugfs is root-only and often not mounted: best effort, reason kept.
            let ios = sys.attr(&format!("/kernel/debug/{h}"), "ios");
            if let Ok(ios) = &ios {
                m.timing = parse::mmc_ios_timing(ios);
                m.clock_hz = parse::mmc_ios_clock_hz(ios);
            }
            gaps.take(
                "mmc.timing",
                &format!("/kernel/debug/{h}/ios"),
                ios.map(|_| ()),
            );
        }
        m.host = host;
        if m.card_type.is_none() {
            gaps.note(
                "mmc.card_type",
                format!(
                    "{}: attribute type and property MMC_TYPE absent",
                    card.devpath()
                ),
            );
        }
        d.mmc = Some(m);
    }
    d.health = crate::health::collect(
        sys,
        &crate::health::Target {
            name: &d.name,
            devpath: &d.devpath,
            dev_node: &d.dev_node,
            devnum: d.devnum.as_deref(),
            class: d.class,
            mmc_card: mmc_card.map(|c| c.devpath()),
            mmc_type: mmc_type.as_deref(),
            emmc_area: d.mmc.as_ref().and_then(|m| m.area),
            mmc_timing: d.mmc.as_ref().and_then(|m| m.timing.as_deref()),
            usb_device: ancestors
                .iter()
                .zip(&subsystems)
                .find(|(a, s)| {
                    s.as_deref() == Some("usb") && a.devtype().as_deref() == Some("usb_device")
                })
                .map(|(a, _)| a.devpath()),
            pci_function: find("pci", None).map(|i| ancestors[i].devpath()),
            ancestors: ancestors.iter().map(|a| a.devpath()).collect(),
        },
    );
    d.missing = gaps.0;
    d
}

fn mounts_of(mounts: &[MountEntry], devnum: &str) -> Vec<Mount> {
    mounts
        .iter()
        .filter(|m| m.devnum == devnum)
        .map(|m| Mount {
            mountpoint: m.mountpoint.clone(),
            fstype: m.fstype.clone(),
            read_only: m.read_only,
        })
        .collect()
}

fn partitions(sys: &SysfsRoot, devpath: &str, mounts: &[MountEntry]) -> Vec<Partition> {
    sys.list(devpath, "")
        .into_iter()
        .filter(|n| sys.exists(&format!("{devpath}/{n}"), "partition"))
        .map(|n| {
            let p = format!("{devpath}/{n}");
            let devnum = sys.attr(&p, "dev").ok();
            Partition {
                mounts: devnum
                    .as_deref()
                    .map(|d| mounts_of(mounts, d))
                    .unwrap_or_default(),
                devnum,
                number: sys.attr_parse(&p, "partition", |s| s.parse().ok()).ok(),
                size_bytes: sys
                    .attr_parse(&p, "size", parse::uint)
                    .ok()
                    .map(|s| s * 512),
                start_sector: sys.attr_parse(&p, "start", parse::uint).ok(),
                holders: sys.list(&p, "holders"),
                name: n,
            }
        })
        .collect()
}

fn hop(node: &dyn DevNode<'_>) -> UsbHop {
    UsbHop {
        port_path: node.sysname(),
        speed_mbps: node
            .attr("speed")
            .ok()
            .and_then(|s| parse::usb_speed_mbps(&s)),
        version: node
            .attr("version")
            .ok()
            .and_then(|s| parse::usb_version(&s)),
        vendor_id: nonempty(node.attr("idVendor")).ok(),
        product_id: nonempty(node.attr("idProduct")).ok(),
        product: nonempty(node.attr("product")).ok(),
        ports: node.attr("maxchild").ok().and_then(|s| s.parse().ok()),
    }
}

/// Walks from the mass-storage interface up to the root hub. Never by name order: the chain
/// of parents is the only thing that ties `sdb` to its port.
fn usb_link(
    ancestors: &[Box<dyn DevNode<'_> + '_>],
    subsystems: &[Option<String>],
    gaps: &mut Gaps,
) -> UsbLink {
    let mut link = UsbLink::default();
    let mut usb_devices: Vec<usize> = Vec::new();
    for (i, a) in ancestors.iter().enumerate() {
        if subsystems[i].as_deref() != Some("usb") {
            continue;
        }
        match a.devtype().as_deref() {
            Some("usb_interface") if link.interface.is_none() && usb_devices.is_empty() => {
                link.interface = Some(a.sysname());
                link.driver = a.driver();
            }
            Some("usb_device") => usb_devices.push(i),
            _ => {}
        }
    }
    let Some(&first) = usb_devices.first() else {
        gaps.note(
            "usb",
            "no USB device among the disk's parents (the USB tree was not recorded)".into(),
        );
        return link;
    };
    let dev = &ancestors[first];
    let h = hop(dev.as_ref());
    link.port_path = h.port_path.clone();
    link.speed_mbps = gaps.take(
        "usb.speed_mbps",
        &format!("{}/speed", dev.devpath()),
        attr_with(dev.as_ref(), "speed", parse::usb_speed_mbps),
    );
    link.version = h.version.clone();
    // What the device can do, whatever it linked at: its BOS capabilities (absent on devices
    // before USB 2.01), else bcdUSB.
    let bos = dev
        .attr_bytes("bos_descriptors", parse::BOS_MAX_BYTES)
        .ok()
        .and_then(|b| parse::bos_caps(&b));
    if let Some((mbps, from_bos)) = super::linkcheck::capability(h.version.as_deref(), bos.as_ref())
    {
        link.capable_mbps = Some(mbps);
        link.capable_from_bos = from_bos;
    }
    // The hub port it is plugged into, and that port's SuperSpeed twin where it has one.
    link.port = dev.link("port");
    if link.port.is_some() {
        link.port_peer = dev.link("port/peer");
    }
    link.vendor_id = h.vendor_id.clone().or_else(|| dev.property("ID_VENDOR_ID"));
    link.product_id = h.product_id.clone().or_else(|| dev.property("ID_MODEL_ID"));
    link.manufacturer = nonempty(dev.attr("manufacturer")).ok();
    link.product = h.product.clone();
    link.serial = nonempty(dev.attr("serial")).ok();
    link.bus = dev
        .attr("busnum")
        .ok()
        .and_then(|s| s.parse().ok())
        .or_else(|| dev.property("BUSNUM").and_then(|s| s.parse().ok()));
    link.devnum = dev
        .attr("devnum")
        .ok()
        .and_then(|s| s.parse().ok())
        .or_else(|| dev.property("DEVNUM").and_then(|s| s.parse().ok()));

    let mut chain_speeds: Vec<Option<f64>> = vec![link.speed_mbps];
    for &i in &usb_devices[1..] {
        let a = &ancestors[i];
        let mut h = hop(a.as_ref());
        let is_root = a.sysname().starts_with("usb");
        if is_root {
            if h.speed_mbps.is_none() {
                // udev exports lack `speed`; the root hub's product id still names its
                // generation (1d6b:0002 is a USB 2 root hub).
                if let Some(s) = a
                    .property("PRODUCT")
                    .and_then(|p| parse::root_hub_speed_from_product(&p))
                {
                    h.speed_mbps = Some(s);
                    link.root_hub_speed_inferred = true;
                }
            }
            chain_speeds.push(h.speed_mbps);
            link.host_controller_driver = ancestors.get(i + 1).and_then(|c| c.driver());
            link.root_hub = Some(h);
        } else {
            chain_speeds.push(h.speed_mbps);
            link.hubs.push(h);
        }
    }
    if link.root_hub.is_none() {
        gaps.note("usb.root_hub", "no root hub (usbN) above the device".into());
    }
    // The slowest hop bounds the link; unknown hops make the minimum unknown.
    link.min_chain_speed_mbps = if chain_speeds.iter().all(Option::is_some) {
        chain_speeds.iter().flatten().copied().reduce(f64::min)
    } else {
        gaps.note(
            "usb.min_chain_speed_mbps",
            "the speed of at least one device on the path is unknown".into(),
        );
        None
    };
    link
}

/// libata link of a disk below `.../ataN/hostM/...`: the link directory under the port holds
/// `ata_link/linkX/sata_spd`.
fn sata_link(sys: &SysfsRoot, devpath: &str, gaps: &mut Gaps) -> Option<SataLink> {
    let comps: Vec<&str> = devpath.split('/').collect();
    let idx = comps.iter().position(|c| parse::is_ata_port_name(c))?;
    let port_dir = comps[..=idx].join("/");
    let mut out = SataLink {
        port: comps[idx].to_string(),
        ..SataLink::default()
    };
    let links: Vec<String> = sys
        .list(&port_dir, "")
        .into_iter()
        .filter(|n| n.starts_with("link"))
        .collect();
    if links.is_empty() {
        gaps.note(
            "sata.sata_spd_gbps",
            format!("{port_dir}: no libata link directory (ata_link not recorded)"),
        );
        return Some(out);
    }
    // With a port multiplier there are several links; the first with a live link speaks for
    // a directly attached disk, which is what embedded boards have.
    for l in &links {
        let class_dir = format!("{port_dir}/{l}/ata_link/{l}");
        let spd = sys.attr_parse(&class_dir, "sata_spd", parse::sata_spd_gbps);
        if out.link.is_none() || spd.is_ok() {
            out.link = Some(l.clone());
            out.sata_spd_limit_gbps = sys
                .attr_parse(&class_dir, "sata_spd_limit", parse::sata_spd_gbps)
                .ok();
            out.hw_sata_spd_limit_gbps = sys
                .attr_parse(&class_dir, "hw_sata_spd_limit", parse::sata_spd_gbps)
                .ok();
            out.xfer_mode = sys
                .list(&format!("{port_dir}/{l}"), "")
                .into_iter()
                .find(|n| n.starts_with("dev"))
                .and_then(|dv| {
                    sys.attr(&format!("{port_dir}/{l}/{dv}/ata_device/{dv}"), "xfer_mode")
                        .ok()
                });
            match spd {
                Ok(v) => {
                    out.sata_spd_gbps = Some(v);
                    break;
                }
                Err(e) if l == links.last().unwrap_or(l) => {
                    gaps.note("sata.sata_spd_gbps", format!("{class_dir}/sata_spd: {e}"))
                }
                Err(_) => {}
            }
        }
    }
    Some(out)
}
