//! Whether the runtime of a group's collective backend can be loaded on this node: part of
//! verification, so a member of a `backend: hccl` group on a node without the Ascend CANN
//! runtime is refused with a reason that says so (`HcclRuntimeUnavailable`) instead of being
//! verified and failing later, or — worse — being served by another backend.
//!
//! The check is the comm crate's own loader ([`hcomm_comm::hccl::Api::load`]: `dlopen` of
//! `libascendcl.so` and `libhccl.so` along [`LibrarySearch`], then symbol resolution), so
//! the verdict is exactly what building the communicator would meet; nothing is initialised
//! (no `aclInit`, no device bound). `backend: tcp` needs nothing beyond the agent.

use hcomm_comm::hccl::{ACL_LIB, Api, HCCL_LIB, LibrarySearch};
use hcomm_crds::Backend;

/// Loads the backend's runtime (blocking: `dlopen`; run it off the async workers). `Err`
/// is the message for `hcomm.io/verified=False`: the libraries needed, every path tried and
/// the loader's error.
pub fn check(backend: Backend, search: &LibrarySearch) -> Result<(), String> {
    match backend {
        Backend::Tcp => Ok(()),
        Backend::Hccl => Api::load(search).map(|_| ()).map_err(|e| {
            format!(
                "backend hccl needs the Ascend CANN runtime ({HCCL_LIB} and {ACL_LIB}) on this node: {e}"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_needs_no_runtime() {
        let nowhere = LibrarySearch::default().with_dir("/nonexistent/hcomm-test");
        assert_eq!(check(Backend::Tcp, &nowhere), Ok(()));
    }

    #[test]
    fn hccl_without_the_libraries_names_them_the_paths_tried_and_the_loader_error() {
        let nowhere = LibrarySearch::default().with_dir("/nonexistent/hcomm-test");
        let message = check(Backend::Hccl, &nowhere).expect_err("no CANN runtime there");
        assert!(message.contains(HCCL_LIB), "{message}");
        assert!(message.contains(ACL_LIB), "{message}");
        assert!(
            message.contains("/nonexistent/hcomm-test/libascendcl.so"),
            "{message}"
        );
        assert!(message.contains("loader error"), "{message}");
    }
}
