//! Owns the JSON Schemas of what this build writes, derived from the writer's own types (the
//! `schema` feature): the report (`docs/report.schema.json`) and the power-cut verdict
//! (`docs/power-cut.schema.json`). `scripts/maint/gen-schema.sh` writes them; tests/report_schema.rs
//! fails when the files in docs/ differ from what the types give, so a field added, renamed
//! or dropped changes the published schema in the same commit.
//!
//! The types give the shape: fields, which are required, enums, nesting. What no type can
//! say is added here, once, as data: a document holds only what the writer writes (every
//! object is closed), timestamps are RFC 3339, and the rules that tie one field to another
//! (a failed cell has its reasons, a finished report its exit code).

use schemars::gen::SchemaSettings;
use schemars::JsonSchema;
use serde_json::{json, Map, Value};

use super::schema::Report;
use crate::exit::Exit;
use crate::metric;
use crate::workload::powercut::Verdict as PowerCutVerdict;

/// The files this module writes, by their name in docs/, with their text.
pub fn files() -> Vec<(&'static str, String)> {
    [
        ("report.schema.json", report()),
        ("power-cut.schema.json", power_cut()),
    ]
    .into_iter()
    .map(|(name, v)| {
        let mut text = serde_json::to_string_pretty(&v).expect("a schema serialises");
        text.push('\n');
        (name, text)
    })
    .collect()
}

/// The report's schema (the newest schema version, the one this build writes).
pub fn report() -> Value {
    let mut v = generate::<Report>(
        "report.schema.json",
        "usbperf factory report",
        &format!(
            "One `usbperf-matrix run` on one unit, or one `power-cut verify` (schema_version \
             {version}; schema 1 is docs/report.v1.schema.json, frozen: no build writes it). \
             Generated from the writer's types by scripts/maint/gen-schema.sh: do not edit. Every \
             verdict and cell reason is a record: its kind, the rule, metric, measured figure, \
             limit and unit, the device and port it concerns, and the text for people. YAML \
             and JSON reports carry the same content. Units are in field names (_bytes, _ns, \
             _mbps, mib_per_s).",
            version = super::schema::SCHEMA_VERSION
        ),
    );
    let props = &mut v["properties"];
    props["schema_version"] = json!({ "const": super::schema::SCHEMA_VERSION });
    props["report_id"]["pattern"] =
        json!("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
    // A report of this build always has its id (the type reads schema 1's absent one too).
    props["exit_code"]["enum"] = json!(EXIT_CODES);
    required(&mut v, "report_id");
    let defs = &mut v["definitions"];
    defs["Tool"]["properties"]["name"] = json!({ "const": "usbperf-matrix" });
    defs["Tool"]["properties"]["features"]["items"] = json!({ "enum": ["udev", "uring"] });
    // A reason's figure is one of the metric table's, in its unit; a link's cause one the
    // link check names.
    let reason = &mut defs["Reason"]["properties"];
    let mut units: Vec<&str> = metric::ALL.iter().map(|m| m.unit).collect();
    units.sort_unstable();
    units.dedup();
    reason["metric"]["enum"] = json!(metric::ALL.iter().map(|m| m.id).collect::<Vec<_>>());
    reason["unit"]["enum"] = json!(units);
    reason["cause"] = json!({ "$ref": "#/definitions/LinkCause" });
    rules(&mut v, REPORT_RULES);
    for (name, rule) in DEFINITION_RULES {
        let def = v["definitions"]
            .get_mut(*name)
            .unwrap_or_else(|| panic!("no definition {name} in the report's schema"));
        rules(def, rule);
    }
    v
}

/// The power-cut verdict file (`power-cut verify --out`).
pub fn power_cut() -> Value {
    generate::<PowerCutVerdict>(
        "power-cut.schema.json",
        "usbperf power-cut verdict",
        "What `power-cut verify` judged of a region after a power cut, as `--out` writes it \
         (and as a report's device carries it under power_cut). Generated from the writer's \
         types by scripts/maint/gen-schema.sh: do not edit.",
    )
}

/// The exit codes a report stands for (`crate::exit::Exit`).
const EXIT_CODES: [u8; 5] = [
    Exit::Pass as u8,
    Exit::VerdictFailed as u8,
    Exit::Usage as u8,
    Exit::Incomplete as u8,
    Exit::Error as u8,
];

/// Rules between the fields of a report: a report still running has no exit code; a
/// finished one has its end and exit code; an interrupted one exits 3.
const REPORT_RULES: &str = r#"[
  {"if": {"properties": {"status": {"const": "running"}}},
   "then": {"not": {"required": ["exit_code"]}},
   "else": {"required": ["finished_at", "exit_code"]}},
  {"if": {"properties": {"status": {"const": "interrupted"}}, "required": ["status"]},
   "then": {"properties": {"exit_code": {"const": 3}}}}
]"#;

/// Rules between the fields of one definition, by its name.
const DEFINITION_RULES: &[(&str, &str)] = &[
    // A failed verdict says why.
    (
        "Verdict",
        r#"[{"if": {"properties": {"pass": {"const": false}}},
             "then": {"required": ["reasons"], "properties": {"reasons": {"minItems": 1}}}}]"#,
    ),
    // A reason of a kind that judges a figure names the rule, the figure and its limit.
    (
        "Reason",
        r#"[{"if": {"properties": {"kind": {"const": "threshold"}}},
             "then": {"required": ["rule", "metric", "limit", "unit"]}},
            {"if": {"properties": {"kind": {"enum": ["link", "sata_link", "health"]}}},
             "then": {"required": ["rule", "metric", "limit", "unit", "device"]}},
            {"if": {"properties": {"kind": {"const": "kernel_event"}}},
             "then": {"required": ["event"]}}]"#,
    ),
    // A cell that did not pass says why; one that ran has its figures.
    (
        "Cell",
        r#"[{"if": {"properties": {"status": {"enum": ["failed", "error", "skipped"]}}},
             "then": {"required": ["reasons"], "properties": {"reasons": {"minItems": 1}}}},
            {"if": {"properties": {"status": {"enum": ["passed", "failed"]}}},
             "then": {"required": ["result"]}}]"#,
    ),
];

/// RFC 3339 as the writer spells a time (chrono's, UTC or an offset).
const TIMESTAMP: &str =
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$";

/// The schema of `T` as a document: draft 2019-09 (schemars 0.8 writes array-form tuple
/// `items`, which 2020-12 spells differently), every object closed and every time RFC 3339.
/// An `Option` may be null: most are left out when absent, but a few are written as null
/// (a test's unset size or runtime, a curve without a knee).
fn generate<T: JsonSchema>(file: &str, title: &str, description: &str) -> Value {
    let settings = SchemaSettings::draft2019_09();
    let root = settings.into_generator().into_root_schema_for::<T>();
    let mut v = serde_json::to_value(root).expect("a schema is JSON");
    close(&mut v);
    let obj = v.as_object_mut().expect("a root schema is an object");
    let mut head = Map::new();
    for key in ["$schema"] {
        if let Some(x) = obj.remove(key) {
            head.insert(key.into(), x);
        }
    }
    head.insert(
        "$id".into(),
        json!(format!(
            "https://github.com/usbperf/meta-usbperf/docs/{file}"
        )),
    );
    head.insert("title".into(), json!(title));
    head.insert("description".into(), json!(description));
    obj.remove("title");
    obj.remove("description");
    head.append(obj);
    Value::Object(head)
}

/// Closes every object schema that lists its properties (a key the writer never writes is
/// refused) and gives every `date-time` string the writer's spelling.
fn close(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if m.contains_key("properties") && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            if m.get("format").and_then(Value::as_str) == Some("date-time") {
                m.insert("pattern".into(), json!(TIMESTAMP));
            }
            m.values_mut().for_each(close);
        }
        Value::Array(a) => a.iter_mut().for_each(close),
        _ => {}
    }
}

/// Adds `name` to a schema's required properties.
fn required(schema: &mut Value, name: &str) {
    let list = schema["required"]
        .as_array_mut()
        .expect("the schema lists required properties");
    if !list.iter().any(|n| n == name) {
        list.push(json!(name));
        list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    }
}

/// Appends rules (a JSON array of `if`/`then` schemas) to a schema's `allOf`.
fn rules(schema: &mut Value, rules: &str) {
    let Value::Array(new) = serde_json::from_str(rules).expect("the rules are JSON") else {
        panic!("rules are an array");
    };
    let obj = schema.as_object_mut().expect("a schema object");
    match obj.entry("allOf").or_insert_with(|| json!([])) {
        Value::Array(all) => all.extend(new),
        _ => panic!("allOf is an array"),
    }
}
