//! Where the Ascend libraries are looked for, in order. Pure: the environment is read once by
//! [`LibrarySearch::from_env`] so that the order itself is a plain, tested function.

use std::path::PathBuf;

/// The default CANN install prefix that `set_env.sh` points `ASCEND_HOME_PATH` at.
pub const DEFAULT_ASCEND_LIB64: &str = "/usr/local/Ascend/ascend-toolkit/latest/lib64";

/// Where to look for `libhccl.so` and `libascendcl.so`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LibrarySearch {
    /// An explicit directory (from configuration), tried first.
    pub explicit_dir: Option<PathBuf>,
    /// The value of `ASCEND_HOME_PATH`, if set; `<it>/lib64` is tried second.
    pub ascend_home: Option<String>,
    /// Whether to try the well-known install prefix and finally the bare library name (which
    /// the dynamic loader resolves through `LD_LIBRARY_PATH` and the ld.so cache).
    pub system_fallbacks: bool,
}

impl LibrarySearch {
    /// The search of a normal start: no explicit directory, `ASCEND_HOME_PATH` from the
    /// environment, system fallbacks on.
    pub fn from_env() -> Self {
        Self {
            explicit_dir: None,
            ascend_home: std::env::var("ASCEND_HOME_PATH")
                .ok()
                .filter(|s| !s.is_empty()),
            system_fallbacks: true,
        }
    }

    /// Same, with an explicit directory tried first.
    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.explicit_dir = Some(dir.into());
        self
    }

    /// The candidates for `file_name`, in the order they are tried. The last one (with system
    /// fallbacks) is the bare file name for a plain `dlopen`.
    pub fn candidates(&self, file_name: &str) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(dir) = &self.explicit_dir {
            out.push(dir.join(file_name).display().to_string());
        }
        if let Some(home) = &self.ascend_home {
            out.push(
                PathBuf::from(home)
                    .join("lib64")
                    .join(file_name)
                    .display()
                    .to_string(),
            );
        }
        if self.system_fallbacks {
            out.push(
                PathBuf::from(DEFAULT_ASCEND_LIB64)
                    .join(file_name)
                    .display()
                    .to_string(),
            );
            out.push(file_name.to_string());
        }
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_order_is_explicit_then_ascend_home_then_default_prefix_then_ld_library_path() {
        let s = LibrarySearch {
            explicit_dir: Some("/opt/cann/lib".into()),
            ascend_home: Some("/home/cann".into()),
            system_fallbacks: true,
        };
        assert_eq!(
            s.candidates("libhccl.so"),
            [
                "/opt/cann/lib/libhccl.so",
                "/home/cann/lib64/libhccl.so",
                "/usr/local/Ascend/ascend-toolkit/latest/lib64/libhccl.so",
                "libhccl.so",
            ]
        );
    }

    #[test]
    fn without_fallbacks_only_configured_places_are_tried() {
        let s = LibrarySearch::default().with_dir("/x");
        assert_eq!(s.candidates("libascendcl.so"), ["/x/libascendcl.so"]);
    }
}
