//! The committed CRD YAML must be exactly what the Rust types generate.

use std::path::Path;

#[test]
fn committed_crd_yaml_matches_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The chart installs the same files (Helm's crds/ folder).
    let chart = root.join("../charts/hcomm/crds");
    for crd in hcomm_crds::all_crds() {
        for dir in [root, chart.as_path()] {
            check_file(&dir.join(hcomm_crds::crd_file_name(&crd)), &crd);
        }
    }
}

fn check_file(
    path: &Path,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    {
        let expected = hcomm_crds::crd_yaml(crd).expect("CRD serializes");
        let committed = std::fs::read_to_string(path).unwrap_or_else(|err| {
            panic!("{} is missing ({err}); run `cargo crdgen`", path.display())
        });
        assert!(
            committed == expected,
            "{} drifted from the Rust types in crds/src; run `cargo crdgen` and commit the result",
            path.display()
        );
    }
}

#[test]
fn the_group_crd_declares_the_scale_subresource_for_autoscalers() {
    let crd = hcomm_crds::group_crd();
    let version = &crd.spec.versions[0];
    let scale = version
        .subresources
        .as_ref()
        .and_then(|s| s.scale.as_ref())
        .expect("scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );
    assert!(
        version
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["hcg".to_owned()][..])
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        <hcomm_crds::HcommNode as kube::CustomResourceExt>::crd()
            .spec
            .scope,
        "Cluster"
    );
}
