//! Every field of the hcomm CRDs carries a description (what `kubectl explain` shows), and
//! the resources' own descriptions are sentences for people, not kube's derive default.

use serde_json::Value;

/// Properties below these paths are Kubernetes' own types, whose descriptions are stripped
/// on purpose (see `hcomm_crds::group_crd`); `kubectl explain pods` documents them.
const EMBEDDED: [&str; 1] = [".spec.template"];

fn undescribed(node: &Value, path: &str, out: &mut Vec<String>) {
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let here = format!("{path}.{name}");
            let described = property
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            if !described {
                out.push(here.clone());
            }
            if !EMBEDDED.contains(&here.as_str()) {
                undescribed(property, &here, out);
            }
        }
    }
    if let Some(items) = node.get("items") {
        undescribed(items, &format!("{path}[]"), out);
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        undescribed(values, &format!("{path}{{}}"), out);
    }
}

#[test]
fn every_schema_property_has_a_description() {
    for crd in hcomm_crds::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(&version.schema).unwrap();
            let root = &schema["openAPIV3Schema"];
            let mut missing = Vec::new();
            undescribed(root, "", &mut missing);
            assert!(missing.is_empty(), "{name}: no description on {missing:?}");
        }
    }
}

#[test]
fn the_check_itself_finds_a_missing_description() {
    let schema = serde_json::json!({"properties": {
        "spec": {"description": "d", "properties": {"a": {"type": "string"}}},
    }});
    let mut missing = Vec::new();
    undescribed(&schema, "", &mut missing);
    assert_eq!(missing, [".spec.a"]);
}

#[test]
fn the_resources_are_described_for_people() {
    for crd in hcomm_crds::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let description = schema["openAPIV3Schema"]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            description.starts_with("An ") || description.starts_with("What "),
            "{name}: {description:?}"
        );
        assert!(!description.contains("Auto-generated"), "{name}");
    }
}
