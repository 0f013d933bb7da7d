//! Owns the USB storage topology: disks regrouped by root hub, hub and port, the shape
//! `lsusb -t` shows, built from each disk's parent chain.

use serde::{Deserialize, Serialize};

use super::model::{Disk, UsbHop};

/// A USB device in the tree: a hub or a storage device, with the disks behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TreeNode {
    pub hop: UsbHop,
    /// Mass-storage interface and its driver (storage devices only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Kernel names of the disks this device provides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<TreeNode>,
}

/// One USB bus: its root hub and the storage below it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bus {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<u32>,
    pub root: TreeNode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_controller_driver: Option<String>,
}

/// Regroups USB disks into buses; disks whose chain has no root hub go under an unnamed one.
pub fn build(disks: &[Disk]) -> Vec<Bus> {
    let mut buses: Vec<Bus> = Vec::new();
    for d in disks {
        let Some(u) = &d.usb else { continue };
        let root_hop = u.root_hub.clone().unwrap_or_else(|| UsbHop {
            port_path: "usb?".into(),
            ..UsbHop::default()
        });
        let bi = match buses
            .iter()
            .position(|b| b.root.hop.port_path == root_hop.port_path)
        {
            Some(i) => i,
            None => {
                buses.push(Bus {
                    bus: u.bus,
                    root: leaf(root_hop),
                    host_controller_driver: u.host_controller_driver.clone(),
                });
                buses.len() - 1
            }
        };
        // Path from the root down: hubs (stored nearest-first) reversed, then the device.
        let mut node = &mut buses[bi].root;
        for h in u.hubs.iter().rev() {
            node = child(node, h);
        }
        let dev = UsbHop {
            port_path: u.port_path.clone(),
            speed_mbps: u.speed_mbps,
            version: u.version.clone(),
            vendor_id: u.vendor_id.clone(),
            product_id: u.product_id.clone(),
            product: u.product.clone(),
            ports: None,
        };
        let leaf = child(node, &dev);
        leaf.interface = u.interface.clone();
        leaf.driver = u.driver.clone();
        leaf.disks.push(d.name.clone());
    }
    buses.sort_by_key(|b| (b.bus, b.root.hop.port_path.clone()));
    for b in &mut buses {
        sort(&mut b.root);
    }
    buses
}

fn leaf(hop: UsbHop) -> TreeNode {
    TreeNode {
        hop,
        interface: None,
        driver: None,
        disks: Vec::new(),
        children: Vec::new(),
    }
}

fn child<'n>(node: &'n mut TreeNode, hop: &UsbHop) -> &'n mut TreeNode {
    let i = match node
        .children
        .iter()
        .position(|c| c.hop.port_path == hop.port_path)
    {
        Some(i) => i,
        None => {
            node.children.push(leaf(hop.clone()));
            node.children.len() - 1
        }
    };
    &mut node.children[i]
}

fn sort(n: &mut TreeNode) {
    n.children.sort_by_key(|c| port_number(&c.hop.port_path));
    for c in &mut n.children {
        sort(c);
    }
}

/// The port on the parent hub: the last number of `1-1.4` is 4; of `2-3` is 3.
pub fn port_number(port_path: &str) -> Option<u32> {
    port_path
        .rsplit(['.', '-'])
        .next()
        .and_then(|s| s.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::port_number;

    #[test]
    fn port_numbers() {
        for (p, want) in [
            ("1-1", Some(1)),
            ("1-1.4", Some(4)),
            ("3-10.2.7", Some(7)),
            ("usb1", None),
        ] {
            assert_eq!(port_number(p), want, "{p}");
        }
    }
}
