use super::*;

/// A command's head as the scanner gave it, owned so that events can be compared.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnedHead {
    name: String,
    key: Option<Vec<u8>>,
}

fn owned(head: Head<'_>) -> OwnedHead {
    OwnedHead {
        name: head.name.to_string(),
        key: head.key.map(<[u8]>::to_vec),
    }
}

/// An event with the head it made known.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Head(OwnedHead),
    End(Ended),
}

/// A frame that ended, with its command's head when the end made it known.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ended {
    head: Option<OwnedHead>,
    error: Option<String>,
    push: bool,
}

/// Feeds `input` in pieces of `step` bytes and collects every event with the offset it ended at.
fn events(side: Side, input: &[u8], step: usize) -> Result<Vec<(usize, Seen)>, Garbage> {
    let mut s = Scanner::new(side);
    let mut out = Vec::new();
    let mut at = 0;
    for piece in input.chunks(step) {
        let mut pos = 0;
        while pos < piece.len() {
            let (n, event) = s.advance(&piece[pos..])?;
            pos += n;
            let seen = match event {
                None => continue,
                Some(Event::Head) => Seen::Head(owned(s.head())),
                Some(Event::End(end)) => Seen::End(Ended {
                    head: end.head.then(|| owned(s.head())),
                    error: end.error,
                    push: end.push,
                }),
            };
            out.push((at + pos, seen));
        }
        at += piece.len();
    }
    Ok(out)
}

fn ends(side: Side, input: &[u8]) -> Vec<(usize, Ended)> {
    let whole = events(side, input, input.len().max(1)).unwrap();
    for step in [1, 2, 3, 7] {
        assert_eq!(
            events(side, input, step).unwrap(),
            whole,
            "fed {step} bytes at a time"
        );
    }
    whole
        .into_iter()
        .filter_map(|(at, e)| match e {
            Seen::End(end) => Some((at, end)),
            Seen::Head(_) => None,
        })
        .collect()
}

fn head(name: &str, key: Option<&str>) -> OwnedHead {
    OwnedHead {
        name: name.into(),
        key: key.map(|k| k.as_bytes().to_vec()),
    }
}

#[test]
fn a_pipeline_of_commands_frames_each_with_its_name_and_key_whatever_the_chunking() {
    let input =
        b"*3\r\n$3\r\nset\r\n$6\r\ncart:1\r\n$1\r\nx\r\n*1\r\n$4\r\nPING\r\nGET k\r\n\r\n*0\r\n";
    let all = events(Side::Client, input, input.len()).unwrap();
    assert_eq!(all[0].1, Seen::Head(head("SET", Some("cart:1"))));
    let e = ends(Side::Client, input);
    assert_eq!(e.len(), 5);
    assert_eq!(e[0].0, 32);
    assert_eq!(e[0].1.head, None, "the head came before the end");
    assert_eq!(e[1].1.head, Some(head("PING", None)));
    assert_eq!(e[2].1.head, Some(head("GET", Some("k"))));
    assert_eq!(e[3].1.head, None, "an empty inline line is no command");
    assert_eq!(e[4].1.head, None, "*0 is no command");
    assert_eq!(e[4].0, input.len());
}

#[test]
fn replies_of_every_type_end_where_they_end_and_errors_give_their_first_word() {
    let input: &[u8] = b"+OK\r\n-OOM command not allowed\r\n:5\r\n$-1\r\n$3\r\nabc\r\n*2\r\n*1\r\n:1\r\n$0\r\n\r\n\
_\r\n,1.5\r\n#t\r\n!9\r\nLOADING x\r\n=7\r\ntxt:abc\r\n(123\r\n%1\r\n+a\r\n:1\r\n~1\r\n+x\r\n*-1\r\n*0\r\n";
    let e = ends(Side::Server, input);
    let errors: Vec<Option<String>> = e.iter().map(|(_, end)| end.error.clone()).collect();
    assert_eq!(e.len(), 16);
    assert_eq!(errors[1].as_deref(), Some("OOM"));
    assert_eq!(errors[9].as_deref(), Some("LOADING"));
    assert_eq!(errors.iter().flatten().count(), 2);
    assert_eq!(e.last().unwrap().0, input.len());
}

#[test]
fn a_push_is_marked_and_an_attribute_belongs_to_the_reply_after_it() {
    let input = b">2\r\n+message\r\n+x\r\n|1\r\n+ttl\r\n:3\r\n+OK\r\n";
    let e = ends(Side::Server, input);
    assert_eq!(e.len(), 2);
    assert!(e[0].1.push);
    assert!(!e[1].1.push);
    assert_eq!(e[1].0, input.len());
}

#[test]
fn a_huge_key_gives_its_head_after_the_captured_bytes_without_waiting_for_the_rest() {
    let key = vec![b'k'; CAPTURE * 3];
    let mut input = format!("*2\r\n$3\r\nGET\r\n${}\r\n", key.len()).into_bytes();
    let head_by = input.len() + CAPTURE;
    input.extend_from_slice(&key);
    input.extend_from_slice(b"\r\n");
    let all = events(Side::Client, &input, 1000).unwrap();
    assert!(
        matches!(&all[0], (at, Seen::Head(h)) if *at == head_by && h.key.as_ref().unwrap().len() == CAPTURE)
    );
    assert!(matches!(all[1].1, Seen::End(_)));
}

#[test]
fn garbage_and_bounds_are_refused_never_panicking() {
    let bad: &[&[u8]] = &[
        b"?x\r\n",
        b"$abc\r\n",
        b"$-5\r\n",
        b"+OK\n",
        b"$3\r\nabcXY",
        b"#x\r\n",
        b"$999999999999\r\n",
    ];
    for input in bad {
        assert!(
            events(Side::Server, input, input.len()).is_err(),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert!(
        events(Side::Client, b"*1\r\n:1\r\n", 9).is_err(),
        "a command element must be a bulk string"
    );
    let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
    assert_eq!(
        events(Side::Server, deep.as_bytes(), 100),
        Err(Garbage::TooDeep)
    );
    let long = vec![b'a'; MAX_LINE + 10];
    assert_eq!(events(Side::Client, &long, 4096), Err(Garbage::LineTooLong));
}

#[test]
fn a_truncated_frame_waits_for_the_rest() {
    let mut s = Scanner::new(Side::Server);
    assert_eq!(s.advance(b"$5\r\nab").unwrap(), (6, None));
    assert!(!s.at_boundary());
    let (n, e) = s.advance(b"cde\r\n").unwrap();
    assert_eq!(n, 5);
    assert!(matches!(e, Some(Event::End(_))));
    assert!(s.at_boundary());
}
