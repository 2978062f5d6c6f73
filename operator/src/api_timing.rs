//! How long each of the operator's Kubernetes API calls takes, as the operator sees it
//! (`hcomm_operator_api_request_duration_seconds{verb,resource}`): a tower layer on the
//! kube client's stack.
//!
//! Why: with its reads from watch caches, a reconcile's time is its writes — which ones,
//! and how slow, is what this says (it showed the Event writes, awaited one by one, as
//! the operator's most frequent call: `hcomm_events`). The apiserver's own latency
//! metric neither tells this client's calls from the kubelet's or kwok's nor counts the
//! wait in this client's connection. The labels are the apiserver's own (`apiserver_request_total`'s verbs,
//! `resource` or `resource/subresource`), so the two compare line for line. A watch is
//! timed to its response headers, i.e. until the stream opened.
//!
//! Each call is also logged at debug (`api call verb=… resource=… took_ms=…`, inside the
//! reconcile's span), beside each reconcile's own time (`reconciled took=…`): a histogram
//! says how slow the calls are, the log says which ones one slow round waited on.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request};
use prometheus::{HistogramOpts, HistogramVec};
use tower::{Layer, Service};

/// The histogram, unregistered (the caller registers it).
pub fn histogram() -> HistogramVec {
    HistogramVec::new(
        HistogramOpts::new(
            "api_request_duration_seconds",
            "Kubernetes API calls of the operator, by the apiserver's verb and \
             resource[/subresource]: from the request to its response headers (a watch: \
             until its stream opened).",
        )
        .buckets(vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ]),
        &["verb", "resource"],
    )
    .expect("valid")
}

/// The layer that times every request through the client.
#[derive(Debug, Clone)]
pub struct ApiTimingLayer {
    histogram: HistogramVec,
}

impl ApiTimingLayer {
    pub fn new(histogram: HistogramVec) -> Self {
        ApiTimingLayer { histogram }
    }
}

impl<S> Layer<S> for ApiTimingLayer {
    type Service = ApiTiming<S>;

    fn layer(&self, inner: S) -> ApiTiming<S> {
        ApiTiming {
            inner,
            histogram: self.histogram.clone(),
        }
    }
}

/// [`ApiTimingLayer`]'s service.
#[derive(Debug, Clone)]
pub struct ApiTiming<S> {
    inner: S,
    histogram: HistogramVec,
}

impl<S, B> Service<Request<B>> for ApiTiming<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(
            request.method(),
            request.uri().path(),
            request.uri().query(),
        );
        let timer = self
            .histogram
            .with_label_values(&[verb, &resource])
            .start_timer();
        let response = self.inner.call(request);
        Box::pin(async move {
            let out = response.await;
            let took = timer.stop_and_record();
            tracing::debug!(verb, %resource, took_ms = took * 1e3, "api call");
            out
        })
    }
}

/// The apiserver's verb and `resource[/subresource]` of a request, from its method, path
/// and query (Kubernetes' REST paths: `/api/v1/[namespaces/NS/]RESOURCE[/NAME[/SUB]]`,
/// `/apis/GROUP/VERSION/...`). Any other path is `other`, so names never become labels.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return (verb(method, false, query), "other".into()),
    };
    let rest = match rest {
        // A namespace itself: `/api/v1/namespaces/NS[/SUB]`.
        ["namespaces", name] => &["namespaces", name][..],
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => ((*resource).to_owned(), false),
        [resource, _name] => ((*resource).to_owned(), true),
        [resource, _name, sub] => (format!("{resource}/{sub}"), true),
        _ => ("other".into(), false),
    };
    (verb(method, named, query), resource)
}

/// The apiserver's verb for a method on a named object or a collection.
fn verb(method: &Method, named: bool, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match *method {
        Method::GET if watch => "WATCH",
        Method::GET if named => "GET",
        Method::GET => "LIST",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE if named => "DELETE",
        Method::DELETE => "DELETECOLLECTION",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(method: Method, uri: &str) -> (&'static str, String) {
        let (path, query) = uri
            .split_once('?')
            .map_or((uri, None), |(p, q)| (p, Some(q)));
        classify(&method, path, query)
    }

    #[test]
    fn requests_are_labelled_as_the_apiserver_counts_them() {
        let pods = "/api/v1/namespaces/ns/pods";
        assert_eq!(c(Method::GET, pods), ("LIST", "pods".into()));
        assert_eq!(
            c(
                Method::GET,
                &format!("{pods}?labelSelector=a%3Db&watch=true")
            ),
            ("WATCH", "pods".into())
        );
        assert_eq!(
            c(Method::GET, &format!("{pods}/w-0")),
            ("GET", "pods".into())
        );
        assert_eq!(
            c(Method::PATCH, &format!("{pods}/w-0/status?fieldManager=x")),
            ("PATCH", "pods/status".into())
        );
        assert_eq!(c(Method::POST, pods), ("POST", "pods".into()));
        assert_eq!(c(Method::DELETE, pods), ("DELETECOLLECTION", "pods".into()));
        assert_eq!(
            c(
                Method::PATCH,
                "/apis/hcomm.io/v1alpha1/namespaces/t/hcommgroups/g/status"
            ),
            ("PATCH", "hcommgroups/status".into())
        );
        assert_eq!(
            c(Method::GET, "/apis/hcomm.io/v1alpha1/hcommgroups?watch=1"),
            ("WATCH", "hcommgroups".into())
        );
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/t"),
            ("GET", "namespaces".into())
        );
        assert_eq!(
            c(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/hcomm"
            ),
            ("PUT", "leases".into())
        );
    }

    #[test]
    fn paths_outside_the_rest_layout_never_become_labels() {
        assert_eq!(c(Method::GET, "/version"), ("LIST", "other".into()));
        assert_eq!(
            c(Method::GET, "/api/v1/namespaces/t/pods/w-0/log/extra/more"),
            ("LIST", "other".into())
        );
    }
}
