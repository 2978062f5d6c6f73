//! Software versions from their version files, where Ascend installs put them (ASCEND.md
//! §7): the driver's `version.info` under the install path `/etc/ascend_install.info` names
//! (`Driver_Install_Path_Param=/usr/local/Ascend` → `<that>/driver/version.info`; the
//! Ascend root when the file is absent), firmware (`<ascend>/firmware/version.info`), CANN
//! (`<ascend>/ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info`, and from 8.5
//! `<ascend>/cann/<arch>-linux/...`; `version.cfg` last). A missing or unreadable file is
//! [`UNKNOWN_VERSION`].

use std::path::{Path, PathBuf};

use hcomm_crds::SoftwareVersions;
use hcomm_crds::node::UNKNOWN_VERSION;

/// The first `version=` / `Version=` value in a version file; `version.cfg`'s
/// `toolkit_installed_version=[arch:8.0.RC2]` form is understood too.
pub fn parse_version_file(text: &str) -> Option<String> {
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let k = k.trim().to_ascii_lowercase();
        let v = v.trim().trim_matches('"');
        if v.is_empty() {
            continue;
        }
        if k == "version" || k == "package_version" || k == "innerversion" {
            return Some(v.to_owned());
        }
        if k.ends_with("installed_version") {
            let inner = v.trim_matches(|c| c == '[' || c == ']');
            let ver = inner.rsplit(':').next().unwrap_or(inner).trim();
            if !ver.is_empty() {
                return Some(ver.to_owned());
            }
        }
    }
    None
}

fn read_version(path: &Path) -> Option<String> {
    parse_version_file(&std::fs::read_to_string(path).ok()?)
}

/// `Driver_Install_Path_Param=` of `/etc/ascend_install.info` (the driver's install root).
pub fn parse_install_info(text: &str) -> Option<PathBuf> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        let v = v.trim().trim_matches('"');
        (k.trim() == "Driver_Install_Path_Param" && !v.is_empty()).then(|| PathBuf::from(v))
    })
}

/// The toolkit's `<arch>-linux/ascend_toolkit_install.info` files under `dir`, sorted.
fn install_infos(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with("-linux"))
                .map(|e| e.path().join("ascend_toolkit_install.info"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn cann_version(ascend: &Path) -> Option<String> {
    let latest = ascend.join("ascend-toolkit/latest");
    let mut candidates = install_infos(&latest);
    candidates.extend(install_infos(&ascend.join("cann")));
    candidates.push(latest.join("version.cfg"));
    candidates.iter().find_map(|p| read_version(p))
}

fn driver_version(ascend_root: &Path, install_info: &Path) -> Option<String> {
    let root = std::fs::read_to_string(install_info)
        .ok()
        .and_then(|t| parse_install_info(&t))
        .unwrap_or_else(|| ascend_root.to_owned());
    read_version(&root.join("driver/version.info"))
}

/// Reads every version under the Ascend install root (`/usr/local/Ascend`); the driver's
/// root comes from `install_info` (`/etc/ascend_install.info`) when it names one.
pub fn collect(ascend_root: &Path, install_info: &Path) -> SoftwareVersions {
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| UNKNOWN_VERSION.to_owned());
    SoftwareVersions {
        driver: or_unknown(driver_version(ascend_root, install_info)),
        firmware: or_unknown(read_version(&ascend_root.join("firmware/version.info"))),
        cann: or_unknown(cann_version(ascend_root)),
        agent: env!("CARGO_PKG_VERSION").to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_files_in_their_several_spellings_parse() {
        assert_eq!(
            parse_version_file("Version=23.0.rc3\nascendhal_version=7.35.19\n").as_deref(),
            Some("23.0.rc3")
        );
        assert_eq!(
            parse_version_file("package_name=Ascend-cann-toolkit\nversion=8.0.RC2\n").as_deref(),
            Some("8.0.RC2")
        );
        assert_eq!(
            parse_version_file("[version]\ntoolkit_installed_version=[aarch64-linux:8.0.RC3]\n")
                .as_deref(),
            Some("8.0.RC3")
        );
        assert_eq!(parse_version_file("nothing here"), None);
    }

    #[test]
    fn a_missing_install_is_unknown_not_a_crash() {
        let v = collect(
            Path::new("/nonexistent/ascend"),
            Path::new("/nonexistent/install.info"),
        );
        assert_eq!(v.driver, UNKNOWN_VERSION);
        assert_eq!(v.cann, UNKNOWN_VERSION);
        assert_eq!(v.agent, env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn a_fake_install_tree_is_read() {
        let root = std::env::temp_dir().join(format!("hcomm-ver-{}", std::process::id()));
        let arch = root.join("ascend-toolkit/latest/x86_64-linux");
        std::fs::create_dir_all(&arch).unwrap();
        std::fs::create_dir_all(root.join("driver")).unwrap();
        std::fs::write(root.join("driver/version.info"), "Version=24.1.0\n").unwrap();
        std::fs::write(arch.join("ascend_toolkit_install.info"), "version=8.0.0\n").unwrap();
        let v = collect(&root, &root.join("no-install.info"));
        assert_eq!(v.driver, "24.1.0");
        assert_eq!(v.cann, "8.0.0");
        assert_eq!(v.firmware, UNKNOWN_VERSION);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_install_info_names_the_drivers_root() {
        assert_eq!(
            parse_install_info("UserName=HwHiAiUser\nDriver_Install_Path_Param=/opt/npu\n"),
            Some(PathBuf::from("/opt/npu"))
        );
        assert_eq!(parse_install_info("UserName=x\n"), None);
        let root = std::env::temp_dir().join(format!("hcomm-ver-info-{}", std::process::id()));
        let driver_root = root.join("opt-npu");
        std::fs::create_dir_all(driver_root.join("driver")).unwrap();
        std::fs::write(
            driver_root.join("driver/version.info"),
            "Version=24.1.rc1\ncompatible_version_fw=[7.0,7.9]\n",
        )
        .unwrap();
        // The documented firmware file.
        std::fs::create_dir_all(root.join("ascend/firmware")).unwrap();
        std::fs::write(
            root.join("ascend/firmware/version.info"),
            "Version=7.1.0.11.220\n",
        )
        .unwrap();
        let info = root.join("ascend_install.info");
        std::fs::write(
            &info,
            format!("Driver_Install_Path_Param={}\n", driver_root.display()),
        )
        .unwrap();
        let v = collect(&root.join("ascend"), &info);
        assert_eq!(v.driver, "24.1.rc1");
        assert_eq!(v.firmware, "7.1.0.11.220");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn cann_8_5_and_later_is_read_from_the_cann_directory() {
        let root = std::env::temp_dir().join(format!("hcomm-ver-cann-{}", std::process::id()));
        let arch = root.join("cann/aarch64-linux");
        std::fs::create_dir_all(&arch).unwrap();
        std::fs::write(
            arch.join("ascend_toolkit_install.info"),
            "package_name=Ascend-cann-toolkit\nversion=8.5.0\n",
        )
        .unwrap();
        let v = collect(&root, &root.join("none"));
        assert_eq!(v.cann, "8.5.0");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
