//! The operator's errors, each with a short fixed category used as the metric label
//! (`hcomm_operator_reconcile_errors_total{category}`) and as the Event reason.
//!
//! The error policy in [`crate::reconcile`] decides by kind: an invalid spec waits for an
//! edit, everything else is transient and requeues soon.

use std::time::Duration;

/// Everything that can go wrong while reconciling or running the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec cannot be planned; the group waits for an edit.
    #[error("invalid spec of HcommGroup {group}: {reason}")]
    InvalidSpec {
        /// namespace/name of the group.
        group: String,
        /// What is wrong, for people.
        reason: String,
    },
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the operator was doing.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// An object could not be serialized.
    #[error("serialize {what}: {source}")]
    Serialize {
        /// What was serialized.
        what: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// An object the operator reads lacks a field it needs.
    #[error("{object} has no {field}")]
    MissingField {
        /// The object.
        object: String,
        /// The field.
        field: &'static str,
    },
    /// The leader Lease was lost; the process stops acting.
    #[error("lost the leader lease {lease}")]
    LeaseLost {
        /// namespace/name of the Lease.
        lease: String,
    },
    /// The group's Secret could not be made (see `crate::group_secret`).
    #[error("group secret: {0}")]
    Secret(String),
    /// The metrics/health server failed.
    #[error("metrics server on {addr}: {source}")]
    Server {
        /// The listen address.
        addr: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// How long a round the API server refused waits before it is tried again (a spec edit
/// tries at once).
pub const REFUSED_RETRY: Duration = Duration::from_secs(30);

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The short, fixed category of this error: a metric label and an Event reason.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidSpec { .. } => hcomm_crds::contract::GroupReason::InvalidSpec.as_str(),
            Self::Kube { source, .. } => match source {
                kube::Error::Api(status) if status.code == 409 => "Conflict",
                kube::Error::Api(status) if status.code == 404 => "NotFound",
                kube::Error::Api(_) => "ApiError",
                _ => "ClientError",
            },
            Self::Serialize { .. } => "Serialization",
            Self::MissingField { .. } => "MissingField",
            Self::LeaseLost { .. } => "LeaseLost",
            Self::Server { .. } => "Server",
            Self::Secret(_) => "GroupSecret",
        }
    }

    /// The API server answered 404: the object is gone (or never was).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Kube { source: kube::Error::Api(status), .. } if status.code == 404)
    }

    /// The API server refused the request as it stands (400 Bad Request, 403 Forbidden:
    /// a quota, admission, RBAC; 422 Invalid): trying again at once would be refused
    /// again, and only the group's owner (or the cluster's) can change that. The API
    /// server's words then.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Self::Kube {
                action,
                source: kube::Error::Api(status),
            } if matches!(status.code, 400 | 403 | 422) => {
                Some(format!("{action}: {}", status.message))
            }
            _ => None,
        }
    }

    /// How long to wait before retrying, or `None` to wait for a change of the object.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::InvalidSpec { .. } => None,
            Self::Kube { .. } if self.refusal().is_some() => Some(REFUSED_RETRY),
            Self::Kube { .. } => Some(Duration::from_secs(2)),
            _ => Some(Duration::from_secs(10)),
        }
    }

    /// A closure that wraps a kube error with what was being done.
    pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube { action, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_spec_waits_for_an_edit_and_has_a_fixed_category() {
        let error = Error::InvalidSpec {
            group: "default/x".into(),
            reason: "bad".into(),
        };
        assert_eq!(
            error.category(),
            hcomm_crds::contract::GroupReason::InvalidSpec.as_str()
        );
        assert_eq!(error.retry_after(), None);
    }

    #[test]
    fn a_conflict_is_transient() {
        let status = kube::core::Status::failure("conflict", "Conflict").with_code(409);
        let error = Error::Kube {
            action: "apply".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        assert_eq!(error.category(), "Conflict");
        assert!(error.retry_after().is_some());
        assert!(!error.is_not_found());
        let gone = Error::Kube {
            action: "get".into(),
            source: kube::Error::Api(Box::new(
                kube::core::Status::failure("gone", "NotFound").with_code(404),
            )),
        };
        assert!(gone.is_not_found());
        assert_eq!(error.refusal(), None);
    }

    #[test]
    fn a_refused_write_is_said_in_the_api_servers_words_and_tried_less_often() {
        let status = kube::core::Status::failure(
            "poddisruptionbudgets.policy \"d\" is forbidden: exceeded quota: q",
            "Forbidden",
        )
        .with_code(403);
        let error = Error::Kube {
            action: "apply PodDisruptionBudget ns/d".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        assert_eq!(
            error.refusal().as_deref(),
            Some(
                "apply PodDisruptionBudget ns/d: poddisruptionbudgets.policy \"d\" is forbidden: \
                 exceeded quota: q"
            )
        );
        assert_eq!(error.retry_after(), Some(REFUSED_RETRY));
    }
}
