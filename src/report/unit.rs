//! Owns the unit's identity in a report: which board this is (device-tree model and serial,
//! or DMI), which installation (machine-id, hostname), which kernel, CPU and memory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Who produced a report. Every field is best effort: a board without a device tree or DMI
/// still gets a report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UnitIdentity {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<String>,
    /// `/proc/device-tree/model`, or DMI `sys_vendor product_name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `/proc/device-tree/serial-number`, or DMI `product_serial`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Where `model` and `serial` came from: `device-tree` or `dmi`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub identity_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    pub cpu_count: usize,
    pub memory_bytes: u64,
    /// The image the unit runs, from os-release: what tells one build from the next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageIdentity>,
}

/// The os-release(5) fields that name an image build. Yocto's `os-release` recipe writes `ID`,
/// `VERSION_ID` (the distro's version) and `PRETTY_NAME` by default, and `BUILD_ID` (the
/// build's date and time) or `IMAGE_VERSION` where a distro adds them to `OS_RELEASE_FIELDS`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ImageIdentity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretty_name: Option<String>,
}

/// os-release is a few hundred bytes; more is not an os-release file, and is not read.
pub const OS_RELEASE_MAX_BYTES: usize = 16 << 10;
/// A value longer than this is cut: it is a label, not a document.
const OS_RELEASE_MAX_VALUE: usize = 256;

/// Parses os-release(5): `KEY=value` lines, the value bare or in single or double quotes
/// (`\"`, `\\`, `\$` and `` \` `` escaped in double quotes), `#` comments. Unknown keys and
/// malformed lines are skipped; `None` when no field named an image.
pub fn parse_os_release(text: &str) -> Option<ImageIdentity> {
    let mut img = ImageIdentity::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, raw)) = line.split_once('=') else {
            continue;
        };
        let value = unquote(raw.trim());
        if value.is_empty() {
            continue;
        }
        let value: String = value.chars().take(OS_RELEASE_MAX_VALUE).collect();
        let slot = match key.trim() {
            "ID" => &mut img.id,
            "VERSION_ID" => &mut img.version_id,
            "BUILD_ID" => &mut img.build_id,
            "IMAGE_ID" => &mut img.image_id,
            "IMAGE_VERSION" => &mut img.image_version,
            "PRETTY_NAME" => &mut img.pretty_name,
            _ => continue,
        };
        *slot = Some(value);
    }
    (img != ImageIdentity::default()).then_some(img)
}

fn unquote(v: &str) -> String {
    let b = v.as_bytes();
    if b.len() >= 2 && b[0] == b'\'' && b[b.len() - 1] == b'\'' {
        return v[1..v.len() - 1].to_string();
    }
    if b.len() >= 2 && b[0] == b'"' && b[b.len() - 1] == b'"' {
        let mut out = String::new();
        let mut chars = v[1..v.len() - 1].chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some(e @ ('"' | '\\' | '$' | '`')) => out.push(e),
                    Some(e) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => out.push('\\'),
                }
            } else {
                out.push(c);
            }
        }
        return out;
    }
    v.to_string()
}

/// Reads the first of `paths` that exists, capped at [`OS_RELEASE_MAX_BYTES`].
fn read_os_release(paths: &[PathBuf]) -> Option<ImageIdentity> {
    use std::io::Read;
    for p in paths {
        let Ok(f) = std::fs::File::open(p) else {
            continue;
        };
        let mut buf = Vec::new();
        if f.take(OS_RELEASE_MAX_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .is_err()
            || buf.len() > OS_RELEASE_MAX_BYTES
        {
            return None;
        }
        return parse_os_release(&String::from_utf8_lossy(&buf));
    }
    None
}

/// Where to read identity from (the real root in production; fixtures in tests).
#[derive(Debug, Clone)]
pub struct IdentitySources {
    pub device_tree: PathBuf,
    pub dmi: PathBuf,
    pub machine_id: PathBuf,
    /// os-release, the first that exists (`/etc/os-release`, then `/usr/lib/os-release`).
    pub os_release: Vec<PathBuf>,
}

impl Default for IdentitySources {
    fn default() -> Self {
        IdentitySources {
            device_tree: PathBuf::from("/proc/device-tree"),
            dmi: PathBuf::from("/sys/class/dmi/id"),
            machine_id: PathBuf::from("/etc/machine-id"),
            os_release: vec![
                PathBuf::from("/etc/os-release"),
                PathBuf::from("/usr/lib/os-release"),
            ],
        }
    }
}

/// Device-tree strings end with NUL; DMI and machine-id with a newline.
fn read_clean(p: &Path) -> Option<String> {
    let raw = std::fs::read(p).ok()?;
    let s = String::from_utf8_lossy(&raw)
        .trim_matches(|c: char| c == '\0' || c.is_whitespace())
        .to_string();
    (!s.is_empty()).then_some(s)
}

/// Reads the identity of the running unit.
pub fn identify(src: &IdentitySources) -> UnitIdentity {
    let mut u = UnitIdentity {
        machine_id: read_clean(&src.machine_id),
        ..UnitIdentity::default()
    };
    if let Ok(un) = nix::sys::utsname::uname() {
        u.hostname = Some(un.nodename().to_string_lossy().into_owned());
        u.kernel_release = Some(un.release().to_string_lossy().into_owned());
        u.architecture = Some(un.machine().to_string_lossy().into_owned());
    }
    let dt_model = read_clean(&src.device_tree.join("model"));
    let dt_serial = read_clean(&src.device_tree.join("serial-number"));
    if dt_model.is_some() || dt_serial.is_some() {
        u.model = dt_model;
        u.serial = dt_serial;
        u.identity_source = Some("device-tree".into());
    } else {
        let vendor = read_clean(&src.dmi.join("sys_vendor"));
        let product = read_clean(&src.dmi.join("product_name"));
        let model = [vendor, product]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" ");
        u.model = (!model.is_empty()).then_some(model);
        // product_serial is root-only; placeholders like "To Be Filled By O.E.M." say nothing.
        u.serial = read_clean(&src.dmi.join("product_serial"))
            .filter(|s| !s.to_ascii_lowercase().contains("filled") && s != "0");
        if u.model.is_some() || u.serial.is_some() {
            u.identity_source = Some("dmi".into());
        }
    }
    let mut sys = sysinfo::System::new();
    sys.refresh_cpu();
    sys.refresh_memory();
    u.cpu_count = sys.cpus().len();
    u.cpu_model = sys
        .cpus()
        .first()
        .map(|c| c.brand().trim().to_string())
        .filter(|s| !s.is_empty());
    u.memory_bytes = sys.total_memory();
    u.image = read_os_release(&src.os_release);
    u
}

pub use usbperf_report::wire::unit_name;

/// `unit_name` of a unit's identity.
pub fn name_of(u: &UnitIdentity) -> Option<String> {
    unit_name(
        u.serial.as_deref(),
        u.machine_id.as_deref(),
        u.hostname.as_deref(),
    )
}

/// A file-name-safe form of the unit's name (`unit_name`).
pub fn file_label(u: &UnitIdentity) -> String {
    let raw = name_of(u).unwrap_or_else(|| "unit".into());
    let s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "unit".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_tree_wins_over_dmi_and_labels_are_safe() {
        let d = std::env::temp_dir().join(format!("usbperf-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("dt")).unwrap();
        std::fs::create_dir_all(d.join("dmi")).unwrap();
        // Device-tree properties are NUL-terminated strings (Toradex module as an example).
        std::fs::write(d.join("dt/model"), b"Toradex Apalis iMX8QM V1.1 on Ixora\0").unwrap();
        std::fs::write(d.join("dt/serial-number"), b"06612345\0").unwrap();
        std::fs::write(d.join("dmi/product_name"), b"Standard PC\n").unwrap();
        std::fs::write(d.join("mid"), b"0123456789abcdef0123456789abcdef\n").unwrap();
        let src = IdentitySources {
            device_tree: d.join("dt"),
            dmi: d.join("dmi"),
            machine_id: d.join("mid"),
            os_release: vec![d.join("missing-os-release"), d.join("os-release")],
        };
        std::fs::write(
            d.join("os-release"),
            include_str!("../../tests/fixtures/os-release/debian-12.os-release"),
        )
        .unwrap();
        let u = identify(&src);
        assert_eq!(
            u.model.as_deref(),
            Some("Toradex Apalis iMX8QM V1.1 on Ixora")
        );
        assert_eq!(u.serial.as_deref(), Some("06612345"));
        assert_eq!(u.identity_source.as_deref(), Some("device-tree"));
        assert_eq!(
            u.machine_id.as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        assert!(u.cpu_count >= 1 && u.memory_bytes > 0);
        assert_eq!(file_label(&u), "06612345");
        // The first os-release that exists names the image.
        let img = u.image.as_ref().expect("the image from os-release");
        assert_eq!(img.id.as_deref(), Some("debian"));
        assert_eq!(img.version_id.as_deref(), Some("12"));
        // One past the cap is not an os-release file: nothing is read from it.
        std::fs::write(d.join("os-release"), "ID=x\n".repeat(OS_RELEASE_MAX_BYTES)).unwrap();
        assert_eq!(identify(&src).image, None);
        std::fs::remove_file(d.join("os-release")).unwrap();
        assert_eq!(identify(&src).image, None);

        std::fs::remove_dir_all(d.join("dt")).unwrap();
        std::fs::write(d.join("dmi/sys_vendor"), b"QEMU\n").unwrap();
        std::fs::write(d.join("dmi/product_serial"), b"To Be Filled By O.E.M.\n").unwrap();
        let u = identify(&src);
        assert_eq!(u.model.as_deref(), Some("QEMU Standard PC"));
        assert_eq!(u.serial, None);
        assert_eq!(u.identity_source.as_deref(), Some("dmi"));
        assert_eq!(file_label(&u), "0123456789ab");
        let odd = UnitIdentity {
            serial: Some("a/b c".into()),
            ..UnitIdentity::default()
        };
        assert_eq!(file_label(&odd), "a_b_c");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn os_release_names_the_image() {
        let debian = include_str!("../../tests/fixtures/os-release/debian-12.os-release");
        let img = |id: &str, ver: &str, pretty: &str| ImageIdentity {
            id: Some(id.into()),
            version_id: Some(ver.into()),
            pretty_name: Some(pretty.into()),
            ..ImageIdentity::default()
        };
        let rows: &[(&str, Option<ImageIdentity>)] = &[
            (debian, Some(img("debian", "12", "Debian GNU/Linux 12 (bookworm)"))),
            (
                "ID=poky\nVERSION_ID=5.0.5\nPRETTY_NAME=\"Poky (Yocto Project Reference Distro) 5.0.5 (scarthgap)\"\n",
                Some(img("poky", "5.0.5", "Poky (Yocto Project Reference Distro) 5.0.5 (scarthgap)")),
            ),
            (
                "# a comment\nID='acme'\nVERSION_ID=\"7.2.0\"\nBUILD_ID=\"2026-11-30 \\\"rc1\\\"\"\nIMAGE_VERSION=7.2.0-42\nnot a line\nIMAGE_ID=line-image\nPRETTY_NAME=''\n",
                Some(ImageIdentity {
                    id: Some("acme".into()),
                    version_id: Some("7.2.0".into()),
                    build_id: Some("2026-11-30 \"rc1\"".into()),
                    image_id: Some("line-image".into()),
                    image_version: Some("7.2.0-42".into()),
                    pretty_name: None,
                }),
            ),
            ("NAME=\"Only a name\"\n", None),
            ("", None),
        ];
        for (text, want) in rows {
            assert_eq!(&parse_os_release(text), want, "{text}");
        }
        let long = format!("ID={}\n", "x".repeat(1000));
        let got = parse_os_release(&long).unwrap().id.unwrap();
        assert_eq!(got.len(), OS_RELEASE_MAX_VALUE);
    }

    #[test]
    fn one_name_in_one_order() {
        type Row<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
        );
        let table: &[Row] = &[
            (
                Some("SN-1"),
                Some("0123456789abcdef"),
                Some("host"),
                Some("SN-1"),
            ),
            (
                None,
                Some("0123456789abcdef"),
                Some("host"),
                Some("0123456789ab"),
            ),
            (
                Some("  "),
                Some(" 0123456789abcdef\n"),
                Some("host"),
                Some("0123456789ab"),
            ),
            (None, None, Some("host"), Some("host")),
            (None, Some(""), Some(" "), None),
        ];
        for (serial, mid, host, want) in table {
            assert_eq!(
                unit_name(*serial, *mid, *host).as_deref(),
                *want,
                "{serial:?} {mid:?} {host:?}"
            );
        }
    }
}
