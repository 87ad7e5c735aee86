//! The matched entries' tests: conditions, triggers, the counts they record, and the fields validation names.

use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderValue, Method, Uri};

use super::*;
use crate::draw::CallDraws;

/// A behaviour compiled with its entries counting into `tallies` (by entry name).
fn compiled(yaml: &str, tallies: &Mutex<BTreeMap<String, Arc<EntryTally>>>) -> CompiledBehaviour {
    let b: Behaviour = serde_saphyr::from_str(yaml).unwrap();
    CompiledBehaviour::compile_with(&b, None, &|name| {
        tallies
            .lock()
            .unwrap()
            .entry(name.to_string())
            .or_default()
            .clone()
    })
    .unwrap()
}

/// A request's method, target and headers.
struct Call {
    method: Method,
    uri: Uri,
    headers: HeaderMap,
}

fn call(method: &str, target: &str, headers: &[(&'static str, &'static str)]) -> Call {
    let mut map = HeaderMap::new();
    for (n, v) in headers {
        map.append(*n, HeaderValue::from_static(v));
    }
    Call {
        method: method.parse().unwrap(),
        uri: target.parse().unwrap(),
        headers: map,
    }
}

/// The status a call gets (200 when healthy), deciding on the behaviour the entries hand it.
fn status(b: &CompiledBehaviour, c: &Call, connection: &ConnectionCounts) -> u16 {
    let facts = CallFacts {
        method: &c.method,
        uri: &c.uri,
        headers: &c.headers,
    };
    let to = b.matched_entry(&facts, connection).map_or(b, |e| &**e);
    match decide(None, to, 1.0, CallDraws::new(1, 2, 3)).action {
        CallAction::Healthy => 200,
        CallAction::Error(e) => e.status,
        CallAction::FailFirst(s) => s,
        other => panic!("unexpected {other:?}"),
    }
}

fn counts(tallies: &Mutex<BTreeMap<String, Arc<EntryTally>>>) -> BTreeMap<String, (u64, u64)> {
    tallies
        .lock()
        .unwrap()
        .iter()
        .map(|(n, t)| (n.clone(), t.read()))
        .collect()
}

const FAIL: &str = "errors: [ { share: 100%, status: 503 } ]";

#[test]
fn a_post_only_entry_fails_posts_and_leaves_gets_to_the_route() {
    let tallies = Mutex::default();
    let b = compiled(
        &format!("matched: [ {{ match: {{ method: post }}, {FAIL} }} ]"),
        &tallies,
    );
    let conn = ConnectionCounts::default();
    assert_eq!(status(&b, &call("POST", "/orders", &[]), &conn), 503);
    assert_eq!(status(&b, &call("GET", "/orders", &[]), &conn), 200);
    assert_eq!(status(&b, &call("POST", "/orders", &[]), &conn), 503);
    assert_eq!(counts(&tallies)["matched[0]"], (2, 2));
}

#[test]
fn header_path_query_and_grpc_metadata_conditions_all_have_to_hold() {
    let tallies = Mutex::default();
    let b = compiled(
        &format!(
            "matched:\n  - {{ name: acme, match: {{ header: {{ X-Tenant: '^acme$' }}, path: '^/orders/9', query: {{ 'user id': '^a b$' }} }}, {FAIL} }}\n  - {{ name: grpc, match: {{ grpc_metadata: {{ x-tenant: globex }} }}, errors: [ {{ share: 100%, status: 429 }} ] }}\n"
        ),
        &tallies,
    );
    let conn = ConnectionCounts::default();
    let acme = [("x-tenant", "acme")];
    assert_eq!(
        status(&b, &call("GET", "/orders/91?user%20id=a+b", &acme), &conn),
        503
    );
    // Each condition alone is not enough.
    assert_eq!(
        status(
            &b,
            &call("GET", "/orders/91?user%20id=a+b", &[("x-tenant", "acme-2")]),
            &conn
        ),
        200
    );
    assert_eq!(
        status(&b, &call("GET", "/orders/81?user%20id=a+b", &acme), &conn),
        200
    );
    assert_eq!(
        status(&b, &call("GET", "/orders/91?user%20id=ab", &acme), &conn),
        200
    );
    assert_eq!(status(&b, &call("GET", "/orders/91", &acme), &conn), 200);
    // One of a repeated header's values is enough.
    let both = [("x-tenant", "globex"), ("x-tenant", "acme")];
    assert_eq!(
        status(
            &b,
            &call("GET", "/orders/9?user+id=a%20b&x=1", &both),
            &conn
        ),
        503
    );
    // Metadata matches gRPC calls only.
    let grpc = [
        ("content-type", "application/grpc+proto"),
        ("x-tenant", "globex"),
    ];
    assert_eq!(
        status(&b, &call("POST", "/shop.Cart/Add", &grpc), &conn),
        429
    );
    assert_eq!(
        status(
            &b,
            &call("POST", "/shop.Cart/Add", &[("x-tenant", "globex")]),
            &conn
        ),
        200
    );
    assert_eq!(counts(&tallies)["acme"], (2, 2));
    assert_eq!(counts(&tallies)["grpc"], (1, 1));
}

#[test]
fn every_third_matching_call_is_taken_and_other_calls_do_not_count() {
    let tallies = Mutex::default();
    let b = compiled(
        &format!("matched: [ {{ match: {{ method: POST }}, every: 3, {FAIL} }} ]"),
        &tallies,
    );
    let conn = ConnectionCounts::default();
    let mut failed = Vec::new();
    for n in 1..=10 {
        assert_eq!(status(&b, &call("GET", "/", &[]), &conn), 200);
        if status(&b, &call("POST", "/", &[]), &conn) == 503 {
            failed.push(n);
        }
    }
    assert_eq!(failed, [3, 6, 9]);
    assert_eq!(counts(&tallies)["matched[0]"], (10, 3));
}

#[test]
fn listed_call_numbers_are_taken_per_route_or_per_connection() {
    let tallies = Mutex::default();
    let b = compiled(
        &format!("matched: [ {{ calls: [2, 1], {FAIL} }}, {{ calls: [2], per: connection, errors: [ {{ share: 100%, status: 500 }} ] }} ]"),
        &tallies,
    );
    let (one, two) = (ConnectionCounts::default(), ConnectionCounts::default());
    let get = call("GET", "/", &[]);
    // The route's calls 1 and 2 go to the first entry; the second entry sees each connection's other calls.
    let seen: Vec<u16> = [&one, &two, &one, &one, &two, &two]
        .into_iter()
        .map(|c| status(&b, &get, c))
        .collect();
    assert_eq!(seen, [503, 503, 200, 500, 200, 500]);
    assert_eq!(counts(&tallies)["matched[0]"], (6, 2));
    assert_eq!(counts(&tallies)["matched[1]"], (4, 2));
}

#[test]
fn first_takes_the_first_calls_of_each_connection() {
    let tallies = Mutex::default();
    let b = compiled(&format!("matched: [ {{ first: 1, {FAIL} }} ]"), &tallies);
    let get = call("GET", "/", &[]);
    for _ in 0..3 {
        let conn = ConnectionCounts::default();
        let seen: Vec<u16> = (0..3).map(|_| status(&b, &get, &conn)).collect();
        assert_eq!(seen, [503, 200, 200]);
    }
    assert_eq!(counts(&tallies)["matched[0]"], (9, 3));
}

#[test]
fn an_entry_is_laid_over_the_behaviour_it_sits_in() {
    let tallies = Mutex::default();
    let b = compiled(
        "latency: { fixed: 40ms }\nerrors: [ { share: 100%, status: 500 } ]\nmatched: [ { match: { method: GET }, errors: [] } ]\n",
        &tallies,
    );
    let conn = ConnectionCounts::default();
    let get = call("GET", "/", &[]);
    let entry = b
        .matched_entry(
            &CallFacts {
                method: &get.method,
                uri: &get.uri,
                headers: &get.headers,
            },
            &conn,
        )
        .unwrap();
    // The entry clears the errors and keeps the latency.
    let d = decide(None, entry, 1.0, CallDraws::new(1, 2, 3));
    assert_eq!(
        (d.action, d.delay),
        (CallAction::Healthy, Duration::from_millis(40))
    );
    assert_eq!(status(&b, &call("PUT", "/", &[]), &conn), 500);
}

#[test]
fn validation_names_the_field_of_the_entry_that_is_wrong() {
    let wrong = |yaml: &str| {
        let b: Behaviour = serde_saphyr::from_str(yaml).unwrap();
        let e = b.validate().unwrap_err();
        (e.field, e.message)
    };
    let (field, message) =
        wrong("matched: [ { errors: [] }, { match: { header: { x-tenant: '(' } } } ]");
    assert_eq!(field, "matched[1].match.header.x-tenant");
    assert!(message.contains("not a regular expression"), "{message}");
    let (field, message) = wrong("matched: [ { every: 3, calls: [1] } ]");
    assert_eq!(field, "matched[0].calls");
    assert!(message.contains("not both every and calls"), "{message}");
    assert_eq!(
        wrong("matched: [ { calls: [1, 0] } ]").0,
        "matched[0].calls[1]"
    );
    assert_eq!(wrong("matched: [ { every: 0 } ]").0, "matched[0].every");
    assert_eq!(
        wrong("matched: [ { first: 2, per: route } ]").0,
        "matched[0].per"
    );
    assert_eq!(
        wrong("matched: [ { per: connection } ]").0,
        "matched[0].per"
    );
    assert_eq!(
        wrong("matched: [ { match: { method: 'P O' } } ]").0,
        "matched[0].match.method"
    );
    assert_eq!(
        wrong("matched: [ { match: { grpc_metadata: { trace-bin: x } } } ]").0,
        "matched[0].match.grpc_metadata.trace-bin"
    );
    assert_eq!(
        wrong("matched: [ { name: a }, { name: a } ]").0,
        "matched[1].name"
    );
    // The entry's shares are added to the behaviour's it sits in.
    let (field, message) =
        wrong("hang: 60%\nmatched: [ { errors: [ { share: 50%, status: 503 } ] } ]");
    assert_eq!(field, "matched[0].errors");
    assert!(message.contains("110%"), "{message}");
    assert_eq!(wrong("matched: [ { toxics: [] } ]").0, "matched[0].toxics");
    assert!(serde_saphyr::from_str::<Behaviour>("matched: [ { matched: [] } ]").is_err());
}

#[test]
fn a_behaviour_without_entries_hands_every_call_to_itself() {
    let tallies = Mutex::default();
    let b = compiled("errors: [ { share: 100%, status: 502 } ]", &tallies);
    let conn = ConnectionCounts::default();
    assert_eq!(
        status(&b, &call("POST", "/", &[("x-tenant", "acme")]), &conn),
        502
    );
    assert!(counts(&tallies).is_empty());
    assert!(conn.counts.lock().unwrap().is_empty());
}

#[test]
fn the_time_scale_reaches_an_entrys_durations_and_leaves_its_counts() {
    let mut b: Behaviour =
        serde_saphyr::from_str("matched: [ { every: 4, latency: { fixed: 2s } } ]").unwrap();
    b.scale_time(0.5);
    let entry = &b.matched.as_ref().unwrap()[0];
    let scaled: Behaviour = serde_saphyr::from_str("latency: { fixed: 1s }").unwrap();
    assert_eq!(
        (entry.latency.as_ref(), entry.every),
        (scaled.latency.as_ref(), Some(4))
    );
}
