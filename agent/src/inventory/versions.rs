//! Software versions from their version files: driver (`<ascend>/driver/version.info`),
//! firmware (`<ascend>/firmware/version.info`), CANN toolkit
//! (`<ascend>/ascend-toolkit/latest/*/ascend_toolkit_install.info` or `.../version.cfg`).
//! A missing or unreadable file is [`UNKNOWN_VERSION`].

use std::path::Path;

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

fn cann_version(ascend: &Path) -> Option<String> {
    let latest = ascend.join("ascend-toolkit/latest");
    let dirs = std::fs::read_dir(&latest).ok()?;
    let mut candidates = Vec::new();
    for e in dirs.flatten() {
        candidates.push(e.path().join("ascend_toolkit_install.info"));
    }
    candidates.sort();
    candidates.push(latest.join("version.cfg"));
    candidates.iter().find_map(|p| read_version(p))
}

/// Reads every version under the Ascend install root (`/usr/local/Ascend`).
pub fn collect(ascend_root: &Path) -> SoftwareVersions {
    let or_unknown = |v: Option<String>| v.unwrap_or_else(|| UNKNOWN_VERSION.to_owned());
    SoftwareVersions {
        driver: or_unknown(read_version(&ascend_root.join("driver/version.info"))),
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
        let v = collect(Path::new("/nonexistent/ascend"));
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
        let v = collect(&root);
        assert_eq!(v.driver, "24.1.0");
        assert_eq!(v.cann, "8.0.0");
        assert_eq!(v.firmware, UNKNOWN_VERSION);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
