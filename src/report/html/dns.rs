//! report.html's DNS section: what faultd's resolver answered per name, over the run and per phase.
//!
//! Not for: charts (the queries per bucket are in result.json's `dns.names.*.series`).

use std::fmt::Write as _;

use super::escape;
use crate::report::result::DnsSummary;

/// One table per name (and one for other names when they were asked): per phase, queries and answers by outcome.
pub(super) fn dns_section(h: &mut String, dns: &DnsSummary) {
    let _ = write!(
        h,
        "<section><h2>DNS</h2><p>faultd's resolver at <code>{}</code>, measured by faultd.</p>",
        escape(&dns.listen)
    );
    let other = std::iter::once(("(other names)", &dns.other)).filter(|(_, n)| n.queries > 0);
    for (name, n) in dns.names.iter().map(|(k, v)| (k.as_str(), v)).chain(other) {
        let outcomes: Vec<&String> = n.answers.keys().collect();
        let _ = write!(
            h,
            "<h3>{}</h3><p>{} queries, {} delayed (longest {:.1} ms).</p><table class=\"dns\"><thead><tr><th>phase</th><th>queries</th>",
            escape(name),
            n.queries,
            n.delayed,
            n.delay_max_ms
        );
        for o in &outcomes {
            let _ = write!(h, "<th>{}</th>", escape(o));
        }
        h.push_str("</tr></thead><tbody>");
        for p in &n.phases {
            let _ = write!(h, "<tr><td>{}</td><td>{}</td>", escape(&p.name), p.queries);
            for o in &outcomes {
                let _ = write!(h, "<td>{}</td>", p.answers.get(*o).copied().unwrap_or(0));
            }
            h.push_str("</tr>");
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("</section>\n");
}
