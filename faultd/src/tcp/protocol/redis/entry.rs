//! Redis entries: faults for the single commands of a Redis route that match a command name and a key pattern,
//! and of those the ones a trigger picks.
//!
//! For: the `redis:` list of a route with `protocol: redis` and of a phase naming one (`{ name, match: { command:
//! SET, key: "cart:*" }, share: 30% | every | calls | first, per, error | delay | hang | close }`), their checks,
//! and [`CompiledEntries::decide`], which finds the entry that takes a command and counts it as HTTP's matched
//! entries count theirs (matched, taken). Not for: carrying the effect out (the connection does) or framing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use faultline_units::{Dur, Share};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::resp::Head;
use crate::behaviours::matched::{ConnectionCounts, Trigger, TriggerFields, NEXT_ENTRY};
use crate::behaviours::{Invalid, Per};
use crate::draw::{route_key, CallDraws};
use crate::tally::EntryTally;

/// Which commands an entry considers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisMatch {
    /// The command's name, any case (`SET`, `get`); every command when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A glob over the command's first argument, its key (`cart:*`, `user:?`); `*` any run, `?` one byte, `\`
    /// escapes. Every key (and commands without one) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// One Redis entry: the commands that meet `match` and that its trigger takes get its fault; entries are tried in
/// order and the first that takes a command ends the search; the commands none takes pass through untouched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedisEntry {
    /// The entry's name in the recording; `redis[i]` (its place in the list) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The conditions a command must meet; every command when absent.
    #[serde(rename = "match", default)]
    pub conditions: RedisMatch,
    /// Takes this share of the matching commands, drawn from the seed (`30%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// Takes every Nth matching command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<u64>,
    /// Takes the matching commands with these numbers, counted from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Vec<u64>>,
    /// Takes the first N matching commands of each connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<u64>,
    /// What `every` and `calls` count: `route` (the default) or `connection`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per: Option<Per>,
    /// Answers the command with this error reply instead of forwarding it (`-OOM command not allowed ...`; the
    /// leading `-` may be left out). The server never sees the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Holds the server's reply this long from the command's arrival (replies after it wait too: RESP answers in
    /// order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Dur>,
    /// Never answers the command, nor anything after it on the connection, until the client leaves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<bool>,
    /// Closes the connection once the replies before the command are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<bool>,
}

/// What a taken command gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// This error reply (a whole RESP line), in place of the server's.
    Error(Bytes),
    /// The server's reply, held until this long after the command arrived.
    Delay(Duration),
    /// No reply, nor any after it.
    Hang,
    /// The connection closed.
    Close,
}

impl RedisEntry {
    /// The entry's name in the recording.
    pub fn label(&self, i: usize) -> String {
        self.name.clone().unwrap_or_else(|| format!("redis[{i}]"))
    }

    fn action(&self) -> Option<Action> {
        if let Some(e) = &self.error {
            let text = e.strip_prefix('-').unwrap_or(e);
            return Some(Action::Error(Bytes::from(format!("-{text}\r\n"))));
        }
        if let Some(d) = self.delay {
            return Some(Action::Delay(d.get()));
        }
        if self.hang == Some(true) {
            return Some(Action::Hang);
        }
        (self.close == Some(true)).then_some(Action::Close)
    }

    /// Checks the entry; fields are named relative to it.
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
            return Err(Invalid::new("name", "a name cannot be empty"));
        }
        if let Some(c) = &self.conditions.command {
            if c.is_empty() || c.bytes().any(|b| b.is_ascii_whitespace()) {
                return Err(Invalid::new(
                    "match.command",
                    format!("{c:?} is not a command name such as SET"),
                ));
            }
        }
        let effects: Vec<&str> = [
            ("error", self.error.is_some()),
            ("delay", self.delay.is_some()),
            ("hang", self.hang.is_some()),
            ("close", self.close.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .collect();
        match effects[..] {
            [] => {
                return Err(Invalid::new(
                    "",
                    "give the entry's fault: error, delay, hang or close",
                ))
            }
            [_] => {}
            [first, second, ..] => {
                return Err(Invalid::new(
                    second,
                    format!("give one fault per entry, not both {first} and {second}"),
                ))
            }
        }
        if let Some(e) = &self.error {
            if e.trim_start_matches('-').trim().is_empty() || e.contains(['\r', '\n']) {
                return Err(Invalid::new(
                    "error",
                    "an error reply is one line of text such as \"-OOM command not allowed\"",
                ));
            }
        }
        for (field, value) in [("hang", self.hang), ("close", self.close)] {
            if value == Some(false) {
                return Err(Invalid::new(field, "write true, or leave the field out"));
            }
        }
        self.check_trigger()
    }

    fn check_trigger(&self) -> Result<(), Invalid> {
        self.trigger_fields().check("command")
    }

    fn trigger_fields(&self) -> TriggerFields<'_> {
        TriggerFields {
            share: Some(self.share.is_some()),
            every: self.every,
            calls: self.calls.as_deref(),
            first: self.first,
            per: self.per,
        }
    }

    fn trigger(&self) -> Option<(Trigger, Per)> {
        self.trigger_fields().compile()
    }
}

/// Checks a `redis:` list: each entry, and that no two share a name (the recording counts entries by name).
pub fn validate_list(list: &[RedisEntry]) -> Result<(), Invalid> {
    for (i, entry) in list.iter().enumerate() {
        entry.validate().map_err(|e| e.at(&format!("[{i}]")))?;
        let name = entry.label(i);
        if let Some(j) = (0..i).find(|&j| list[j].label(j) == name) {
            return Err(Invalid::new(
                format!("[{i}].name"),
                format!(
                    "{name:?} already names entry {j}: the recording counts each entry by its name"
                ),
            ));
        }
    }
    Ok(())
}

/// One entry ready for the connections.
#[derive(Debug)]
struct Compiled {
    id: u64,
    command: Option<String>,
    key: Option<Vec<u8>>,
    trigger: Option<(Trigger, Per)>,
    share: Option<f64>,
    /// The key of its draws: the route's and the entry's names, so an entry's share does not move the others'.
    draw_key: u64,
    seen: AtomicU64,
    tally: Arc<EntryTally>,
    action: Action,
}

/// A route's entries in force, in list order.
#[derive(Debug, Default)]
pub struct CompiledEntries {
    entries: Box<[Compiled]>,
    seed: u64,
}

impl CompiledEntries {
    /// Compiles validated entries of route `route`; `tallies` gives each entry's counts by name, kept across
    /// phases. An entry with no fault (refused by validation) is left out.
    pub fn compile(
        list: &[RedisEntry],
        route: &str,
        seed: u64,
        tallies: &dyn Fn(&str) -> Arc<EntryTally>,
    ) -> CompiledEntries {
        let entries = list
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let label = e.label(i);
                Some(Compiled {
                    id: NEXT_ENTRY.fetch_add(1, Ordering::Relaxed),
                    command: e
                        .conditions
                        .command
                        .as_ref()
                        .map(|c| c.to_ascii_uppercase()),
                    key: e.conditions.key.as_ref().map(|k| k.as_bytes().to_vec()),
                    trigger: e.trigger(),
                    share: e.share.map(Share::fraction),
                    draw_key: route_key(route) ^ route_key(&label).rotate_left(17),
                    seen: AtomicU64::new(0),
                    tally: tallies(&label),
                    action: e.action()?,
                })
            })
            .collect();
        CompiledEntries { entries, seed }
    }

    /// Whether there are no entries (every command passes through).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the first entry that takes this command gives it; `None` when none does. Counts the command as
    /// matched by each entry it meets the conditions of up to the one that takes it.
    pub fn decide(&self, head: &Head<'_>, connection: &ConnectionCounts) -> Option<&Action> {
        self.entries
            .iter()
            .find(|e| e.takes(head, connection, self.seed))
            .map(|e| &e.action)
    }
}

impl Compiled {
    fn takes(&self, head: &Head<'_>, connection: &ConnectionCounts, seed: u64) -> bool {
        if self.command.as_deref().is_some_and(|c| c != head.name) {
            return false;
        }
        if let Some(pattern) = &self.key {
            match head.key {
                Some(key) if glob(pattern, key) => {}
                _ => return false,
            }
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        let taken = match (&self.trigger, self.share) {
            (Some((trigger, Per::Route)), _) => trigger.picks(n),
            (Some((trigger, Per::Connection)), _) => trigger.picks(connection.next(self.id)),
            (None, Some(share)) => CallDraws::new(seed, self.draw_key, n).fault < share,
            (None, None) => true,
        };
        self.tally.count(taken);
        taken
    }
}

/// Redis's glob: `*` any run of bytes, `?` one byte, `\` makes the next byte literal.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    // Where the last `*` was, and the text position it is trying to cover up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                t += 1;
                continue;
            }
            Some(&c) => {
                let (lit, width) = if c == b'\\' && p + 1 < pattern.len() {
                    (pattern[p + 1], 2)
                } else {
                    (c, 1)
                };
                if lit == text[t] {
                    p += width;
                    t += 1;
                    continue;
                }
            }
            None => {}
        }
        match star {
            Some((sp, st)) => {
                p = sp + 1;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(yaml: &str) -> RedisEntry {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn globs_match_as_redis_matches_keys() {
        assert!(glob(b"cart:*", b"cart:1"));
        assert!(glob(b"cart:*", b"cart:"));
        assert!(!glob(b"cart:*", b"carts:1"));
        assert!(glob(b"*:1", b"a:b:1"));
        assert!(glob(b"u?er", b"user"));
        assert!(!glob(b"u?er", b"uer"));
        assert!(glob(b"a\\*", b"a*"));
        assert!(!glob(b"a\\*", b"ab"));
        assert!(glob(b"*", b""));
        assert!(glob(b"*a*b*", b"xxaxxbxx"));
    }

    #[test]
    fn an_entry_needs_exactly_one_fault_and_one_trigger_with_the_field_named() {
        assert!(entry("{ match: { command: SET }, error: OOM x }")
            .validate()
            .is_ok());
        let e = entry("{ match: { command: SET } }").validate().unwrap_err();
        assert!(e.message.contains("error, delay, hang or close"), "{e:?}");
        let e = entry("{ error: OOM, delay: 1s }").validate().unwrap_err();
        assert_eq!(e.field, "delay");
        let e = entry("{ error: OOM, share: 10%, every: 2 }")
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "every");
        let e = entry("{ error: \"a\\nb\" }").validate().unwrap_err();
        assert_eq!(e.field, "error");
        let e = entry("{ hang: true, per: connection }")
            .validate()
            .unwrap_err();
        assert_eq!(e.field, "per");
        let list = [
            entry("{ name: a, close: true }"),
            entry("{ name: a, hang: true }"),
        ];
        assert_eq!(validate_list(&list).unwrap_err().field, "[1].name");
    }

    fn head<'a>(name: &'a str, key: &'a str) -> Head<'a> {
        Head {
            name,
            key: Some(key.as_bytes()),
        }
    }

    #[test]
    fn the_first_entry_that_takes_a_command_decides_and_each_counts_what_it_met() {
        let list = [
            entry("{ name: oom, match: { command: set, key: \"cart:*\" }, every: 2, error: \"-OOM no\" }"),
            entry("{ name: slow, match: { command: SET }, delay: 50ms }"),
        ];
        let tallies: std::sync::Mutex<Vec<(String, Arc<EntryTally>)>> = Default::default();
        let get = |name: &str| {
            let t = Arc::new(EntryTally::default());
            tallies.lock().unwrap().push((name.to_string(), t.clone()));
            t
        };
        let c = CompiledEntries::compile(&list, "cache", 7, &get);
        let conn = ConnectionCounts::default();
        assert_eq!(
            c.decide(&head("SET", "cart:1"), &conn),
            Some(&Action::Delay(Duration::from_millis(50)))
        );
        assert_eq!(
            c.decide(&head("SET", "cart:2"), &conn),
            Some(&Action::Error(Bytes::from_static(b"-OOM no\r\n")))
        );
        assert_eq!(c.decide(&head("GET", "cart:2"), &conn), None);
        assert_eq!(
            c.decide(&head("SET", "user:1"), &conn),
            Some(&Action::Delay(Duration::from_millis(50)))
        );
        let counts: Vec<(String, (u64, u64))> = tallies
            .lock()
            .unwrap()
            .iter()
            .map(|(n, t)| (n.clone(), t.read()))
            .collect();
        assert_eq!(counts, [("oom".into(), (2, 1)), ("slow".into(), (2, 2))]);
    }

    #[test]
    fn a_share_takes_about_its_share_the_same_way_for_the_same_seed() {
        let list = [entry("{ share: 30%, error: ERR x }")];
        let get = |_: &str| Arc::new(EntryTally::default());
        let run = |seed| {
            let c = CompiledEntries::compile(&list, "cache", seed, &get);
            let conn = ConnectionCounts::default();
            (0..2000)
                .map(|_| c.decide(&head("GET", "k"), &conn).is_some())
                .collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1));
        let taken = a.iter().filter(|t| **t).count();
        assert!((500..700).contains(&taken), "{taken} of 2000");
    }
}
