use std::collections::BTreeMap;

use serde_json::json;

use super::*;

const SHOP: &str = r#"
syntax = "proto3";
package shop;
import "common.proto";
import "google/protobuf/timestamp.proto";

message GetProductRequest {
  int64 id = 1;
  repeated string tags = 2;
  Money max_price = 3;
  Kind kind = 4;
  map<string, int32> counts = 5;
  bytes blob = 6;
  google.protobuf.Timestamp since = 7;
  uint32 page = 8;
  double weight = 9;
  bool fresh = 10;
}

enum Kind { KIND_UNSET = 0; BOOK = 1; GAME = 2; }

message Product { int64 id = 1; string name = 2; Money price = 3; }

service Catalog {
  rpc GetProduct(GetProductRequest) returns (Product);
}
"#;

const COMMON: &str = r#"
syntax = "proto3";
package shop;
message Money { int64 cents = 1; string currency = 2; }
"#;

/// A reader over files in memory, as the callers' readers over a folder.
fn reader(files: &[(&str, &str)]) -> impl Fn(&str) -> Result<Vec<u8>, String> {
    let files: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(n, s)| (n.to_string(), s.as_bytes().to_vec()))
        .collect();
    move |name: &str| {
        files
            .get(name)
            .cloned()
            .ok_or_else(|| format!("{name}: no such file"))
    }
}

fn shop() -> Protos {
    Protos::compile(
        &["protos/shop.proto".to_string()],
        reader(&[("protos/shop.proto", SHOP), ("protos/common.proto", COMMON)]),
    )
    .unwrap()
}

#[test]
fn a_message_written_as_json_encodes_as_protoc_would_and_decodes_back() {
    let protos = shop();
    let method = protos.method("/shop.Catalog/GetProduct").unwrap();
    assert_eq!(method.input().full_name(), "shop.GetProductRequest");
    // id = 42 (field 1, varint), tags = ["a"] (field 2, length-delimited).
    let bytes = Protos::encode(&method.input(), &json!({"id": "42", "tags": ["a"]})).unwrap();
    assert_eq!(bytes, vec![0x08, 42, 0x12, 1, b'a']);
    let product = Protos::encode(
        &method.output(),
        &json!({"id": 7, "name": "lamp", "price": {"cents": 1999, "currency": "EUR"}}),
    )
    .unwrap();
    let back = Protos::decode(&method.output(), &product).unwrap();
    assert_eq!(
        back,
        r#"{"id":"7","name":"lamp","price":{"cents":"1999","currency":"EUR"}}"#
    );
    // JSON names, enums by name, maps, bytes, well-known types, floats and bools are all taken.
    Protos::encode(
        &method.input(),
        &json!({"maxPrice": {"cents": 5}, "kind": "BOOK", "counts": {"a": 1}, "blob": "AAE=",
                "since": "2026-01-01T00:00:00Z", "page": 3, "weight": "NaN", "fresh": true}),
    )
    .unwrap();
}

#[test]
fn a_wrong_field_names_the_type_the_field_and_what_it_has() {
    let protos = shop();
    let input = protos.method("/shop.Catalog/GetProduct").unwrap().input();
    let cases = [
        (
            json!({"idd": 1}),
            "idd",
            "shop.GetProductRequest has no field \"idd\" (its fields: id, tags,",
        ),
        (
            json!({"id": "abc"}),
            "id",
            "shop.GetProductRequest.id is an int64",
        ),
        (
            json!({"tags": "a"}),
            "tags",
            "shop.GetProductRequest.tags is repeated",
        ),
        (
            json!({"tags": ["a", 2]}),
            "tags[1]",
            "shop.GetProductRequest.tags[1] is a string, not 2",
        ),
        (
            json!({"max_price": {"cents": 1, "euros": 2}}),
            "max_price.euros",
            "shop.Money has no field \"euros\"",
        ),
        (
            json!({"max_price": 5}),
            "max_price",
            "shop.Money is a message",
        ),
        (
            json!({"kind": "TOY"}),
            "kind",
            "the enum shop.Kind (one of KIND_UNSET, BOOK, GAME)",
        ),
        (json!({"counts": {"a": "x"}}), "counts.a", "is an int32"),
        (json!({"page": -1}), "page", "a uint32"),
        (json!({"fresh": "yes"}), "fresh", "a bool"),
        (
            json!({"since": "yesterday"}),
            "since",
            "not a google.protobuf.Timestamp",
        ),
        (json!([1]), "", "shop.GetProductRequest is a message"),
    ];
    for (value, path, words) in cases {
        let Err(ProtoError::Field(e)) = Protos::encode(&input, &value) else {
            panic!("{value} was taken");
        };
        assert_eq!(e.path, path, "{value}: {e}");
        assert!(e.why.contains(words), "{value}: {e}");
    }
}

#[test]
fn methods_and_types_not_in_the_files_say_what_is() {
    let protos = shop();
    let e = protos
        .method("/shop.Catalog/GetPrice")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has no method GetPrice (its methods: GetProduct)"),
        "{e}"
    );
    let e = protos.method("/shop.Prices/Get").unwrap_err().to_string();
    assert!(
        e.contains("no service shop.Prices (they define: shop.Catalog)"),
        "{e}"
    );
    let e = protos.message("shop.Price").unwrap_err().to_string();
    assert!(
        e.contains("shop.GetProductRequest, shop.Money, shop.Product"),
        "{e}"
    );
    assert!(protos.message(".shop.Money").is_ok());
    // The google.rpc error details come with every set.
    assert!(protos.message("google.rpc.RetryInfo").is_ok());
    assert!(Protos::builtin().message("google.rpc.ErrorInfo").is_ok());
}

#[test]
fn files_that_do_not_compile_say_where() {
    let e = Protos::compile(
        &["bad.proto".to_string()],
        reader(&[(
            "bad.proto",
            "syntax = \"proto3\";\npackage x;\nmessage A {\n  int32 a = 1\n}\n",
        )]),
    )
    .unwrap_err();
    let ProtoError::Compile { at, why } = &e else {
        panic!("{e}")
    };
    assert_eq!(at, "bad.proto:5", "{why}");
    assert!(why.contains("expected ';'"), "{why}");
    let e = Protos::compile(
        &["a.proto".to_string()],
        reader(&[(
            "a.proto",
            "syntax = \"proto3\";\nimport \"missing.proto\";\n",
        )]),
    )
    .unwrap_err()
    .to_string();
    assert_eq!(e, "a.proto:2: import 'missing.proto' not found");
    let e = Protos::compile(&["none.proto".to_string()], reader(&[]))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "none.proto: none.proto: no such file");
}

#[test]
fn an_import_is_found_in_the_folders_above_its_file() {
    // A buf-style tree: protos/shop/v1/shop.proto imports "shop/v1/common.proto", found under protos/.
    let shop = SHOP.replace("package shop;", "package shop.v1;").replace(
        "import \"common.proto\";",
        "import \"shop/v1/common.proto\";",
    );
    let common = COMMON.replace("package shop;", "package shop.v1;");
    let protos = Protos::compile(
        &["protos/shop/v1/shop.proto".to_string()],
        reader(&[
            ("protos/shop/v1/shop.proto", &shop),
            ("protos/shop/v1/common.proto", &common),
        ]),
    )
    .unwrap();
    assert!(protos.method("/shop.v1.Catalog/GetProduct").is_ok());
}

#[test]
fn a_status_packs_its_details_as_any() {
    let protos = Protos::builtin();
    let retry = protos.message("google.rpc.RetryInfo").unwrap();
    let detail = Protos::encode(&retry, &json!({"retry_delay": "1.5s"})).unwrap();
    let status = Protos::status_details(14, "busy", &[("google.rpc.RetryInfo".into(), detail)]);
    let back = Protos::decode(&protos.message("google.rpc.Status").unwrap(), &status).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&back).unwrap(),
        json!({"code": 14, "message": "busy", "details": [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retry_delay": "1.500s"}
        ]})
    );
}

#[test]
fn a_message_is_hex_or_json_and_hex_of_digits_alone_reads_as_written() {
    #[derive(Debug, serde::Deserialize)]
    struct R {
        message: MessageSpec,
    }
    let r: R = serde_saphyr::from_str("message: 0a023432").unwrap();
    assert_eq!(r.message, MessageSpec::Hex("0a023432".into()));
    let r: R = serde_saphyr::from_str("message: '0801'").unwrap();
    assert_eq!(r.message.hex(), Some("0801"));
    let r: R = serde_saphyr::from_str("message: { json: { id: 1, tags: [a] } }").unwrap();
    assert_eq!(r.message.json(), Some(&json!({"id": 1, "tags": ["a"]})));
    // YAML reads these as numbers; a message never starts with a zero byte, so the hex is restored exactly.
    for hex in ["0801", "12", "08011001", "1001", "0899"] {
        let r: R = serde_saphyr::from_str(&format!("message: {hex}")).unwrap();
        assert_eq!(r.message.hex(), Some(hex));
    }
    let e = serde_saphyr::from_str::<R>("message: 123456789012345678901234")
        .unwrap_err()
        .to_string();
    assert!(e.contains("quote it"), "{e}");
    let e = serde_saphyr::from_str::<R>("message: { jsn: {} }")
        .unwrap_err()
        .to_string();
    assert!(e.contains("jsn"), "{e}");
    let back: R = serde_json::from_str(&format!(
        "{{\"message\": {}}}",
        serde_json::to_string(&MessageSpec::Json(JsonMessage {
            json: json!({"a": 1})
        }))
        .unwrap()
    ))
    .unwrap();
    assert_eq!(back.message.json(), Some(&json!({"a": 1})));
}
