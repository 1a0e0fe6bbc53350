//! The sections of the HTML report, in page order: header and navigation, validity
//! warnings, the run's facts, operations, endpoints, the split by a response header, errors,
//! charts, size classes and the metadata. Every text from the results is escaped.

use std::fmt::Write as _;

use super::figures::Figure;
use super::figures::{class_label, class_rows, is_delay, level_of};
use super::table::{bytes, fact, mib, ops_table, opt_ms, td};
use crate::metrics::hist::Percentiles;
use crate::metrics::Level;
use crate::report::chart::escape;
use crate::report::ms;
use crate::results::config::ConfigFacts;
use crate::results::store::HostInfo;
use crate::results::summary::Checks;
use crate::results::{ResultSet, TraceCounts};

pub(super) fn header_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let _ = write!(
        out,
        "<header class=\"top\"><h1>creb-rs {} → {}</h1><div class=\"sub\"><span class=\"model\">{}</span>started {} · {:.2} s · {} operations · {}{}{}</div></header>",
        escape(&s.command),
        escape(&s.registry),
        escape(&s.model_label()),
        escape(&s.started_at),
        s.duration_s,
        s.totals.requests,
        if s.totals.errors > 0 {
            format!("<span class=\"flag\">{} errors</span>", s.totals.errors)
        } else {
            "0 errors".to_owned()
        },
        if s.interrupted {
            "<span class=\"flag\">INTERRUPTED</span>"
        } else {
            ""
        },
        scaled_sizes(set)
            .map(|how| format!(" · <span class=\"flag\">sizes {}</span>", escape(&how)))
            .unwrap_or_default()
    );
}

/// How the run's sizes differ from the trace's (`--size-scale`, `--max-object-size`), as
/// its configuration records it.
fn scaled_sizes(set: &ResultSet) -> Option<String> {
    let sizes = ConfigFacts::of(&set.meta.config).sizes?;
    let mut how = Vec::new();
    if sizes.ppb != 1_000_000_000 {
        how.push(format!("×{}", sizes.ppb as f64 / 1e9));
    }
    if let Some(max) = sizes.max {
        how.push(format!("≤ {}", crate::units::ByteSize(max)));
    }
    (!how.is_empty()).then(|| how.join(" "))
}

pub(super) fn nav(out: &mut String, set: &ResultSet, figs: &[Figure]) {
    out.push_str("<nav><a href=\"#run\">run</a><a href=\"#operations\">operations</a>");
    if set.summary.split_by_header.is_some() {
        out.push_str("<a href=\"#split\">by header</a>");
    }
    if super::attribution::present(&set.summary) {
        out.push_str("<a href=\"#attribution\">who costs most</a>");
    }
    out.push_str("<a href=\"#errors\">errors</a>");
    for f in figs {
        let _ = write!(
            out,
            "<a href=\"#fig-{}\">{}</a>",
            f.id,
            escape(&f.title.to_lowercase())
        );
    }
    out.push_str(
        "<a href=\"#size-classes\">size classes</a><a href=\"#metadata\">metadata</a></nav>",
    );
}

pub(super) fn warnings_section(out: &mut String, set: &ResultSet) {
    let w = &set.summary.warnings;
    if w.is_empty() {
        out.push_str("<section class=\"ok\" id=\"warnings\"><h2>Validity</h2><p class=\"muted\">No warnings: the self-checks found nothing that invalidates these numbers.</p></section>");
        return;
    }
    let _ = write!(
        out,
        "<section class=\"warnings\" id=\"warnings\"><h2>⚠ {} warning{} about the validity of this result</h2><ul>",
        w.len(),
        if w.len() == 1 { "" } else { "s" }
    );
    for w in w {
        let _ = write!(
            out,
            "<li><code>{}</code> {}</li>",
            escape(&w.kind),
            escape(&w.message)
        );
    }
    out.push_str("</ul></section>");
}

/// The `--fail-if` verdicts, when the run had any: each expression, what was measured, and
/// whether it held (failing the run, exit 3).
pub(super) fn thresholds_section(out: &mut String, set: &ResultSet) {
    let t = &set.summary.thresholds;
    if t.is_empty() {
        return;
    }
    let held = t.iter().filter(|v| v.held()).count();
    let _ = write!(
        out,
        "<section class=\"{}\" id=\"thresholds\"><h2>Thresholds: {held} of {} held</h2>\
         <table><thead><tr><th>--fail-if</th><th>measured</th><th>verdict</th></tr></thead><tbody>",
        if held > 0 { "warnings" } else { "ok" },
        t.len()
    );
    for v in t {
        let verdict = match v.verdict.as_str() {
            "held" => "held: fails the run",
            "clear" => "clear",
            _ => "not checked: nothing measured",
        };
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td>{verdict}</td></tr>",
            escape(&v.expression),
            escape(v.measured.as_deref().unwrap_or("-"))
        );
    }
    out.push_str("</tbody></table></section>");
}

pub(super) fn run_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    out.push_str("<section id=\"run\"><h2>Run</h2><dl class=\"facts\">");
    run_facts(out, set);
    out.push_str("</dl>");
    hosts_table(out, &set.meta.hosts);
    if let Some(tr) = &s.trace {
        trace_accounting(out, tr);
    }
    if let Some(line) = crate::report::steady_line(s) {
        let class = if s.steady_state.as_ref().and_then(|st| st.steady) == Some(false) {
            "bad"
        } else {
            "muted"
        };
        let _ = write!(
            out,
            "<h3>Steady state</h3><p class=\"{class}\">{}</p>",
            escape(&line)
        );
    }
    if let Some(c) = &s.checks {
        self_checks(out, c);
    }
    out.push_str("</section>");
}

/// What the run was: command, registry, how it was reached, when, its totals.
#[allow(clippy::too_many_lines)]
fn run_facts(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let m = &set.meta;
    fact(out, "command", &s.command);
    fact(out, "mode (model)", &s.model_label());
    fact(out, "registry", &s.registry);
    for e in &m.endpoints {
        let name = if m.endpoints.len() == 1 {
            "protocol".to_owned()
        } else {
            format!("protocol of {}", e.url)
        };
        fact(out, &name, &e.link.describe());
    }
    // A pull generates nothing, so its seed means nothing.
    let seed = if s.command == "pull" {
        "–".to_owned()
    } else {
        s.seed.to_string()
    };
    fact(out, "seed", &seed);
    if m.hosts.is_empty() {
        fact(
            out,
            "shard",
            &format!("{}/{}", s.shard.index, s.shard.count),
        );
        fact(out, "host", &m.host);
    } else {
        let shards: Vec<String> = m
            .hosts
            .iter()
            .map(|h| format!("{}/{}", h.shard.index, h.shard.count))
            .collect();
        fact(out, "shards", &format!("merged: {}", shards.join(", ")));
        fact(out, "hosts", &format!("{} (table below)", m.hosts.len()));
    }
    fact(out, "started at", &s.started_at);
    fact(out, "duration", &format!("{:.3} s", s.duration_s));
    fact(
        out,
        "interrupted",
        if s.interrupted {
            "yes — partial results"
        } else {
            "no"
        },
    );
    fact(out, "interval", &format!("{} s", m.interval_s));
    fact(out, "anchor (interval 0)", &m.anchor);
    fact(out, "actual start", &m.actual_start);
    fact(out, "tool", &format!("{} {}", s.tool.name, s.tool.version));
    fact(out, "in-flight limit", &s.concurrency.to_string());
    if let Some(verify) = ConfigFacts::of(&m.config).verify {
        fact(out, "blob verification", &verify);
    }
    fact(out, "config hash", &m.config_hash);
    fact(out, "dataset hash", &m.dataset_hash);
    fact(out, "result directory", &set.dir.display().to_string());
    let t = &s.totals;
    fact(
        out,
        "totals",
        &format!(
            "{} operations ({} ok, {} errors), {} HTTP requests",
            t.requests, t.ok, t.errors, t.http_requests
        ),
    );
    fact(
        out,
        "bytes",
        &format!(
            "sent {}, received {}",
            bytes(t.bytes_sent),
            bytes(t.bytes_received)
        ),
    );
    fact(
        out,
        "throughput",
        &format!(
            "{:.1} op/s, {} MiB/s",
            s.throughput.requests_per_s,
            mib(s.throughput.bytes_per_s)
        ),
    );
}

/// A merged result's hosts, one row each.
fn hosts_table(out: &mut String, hosts: &[HostInfo]) {
    if !hosts.is_empty() {
        out.push_str("<h3>Hosts (merged result)</h3><div class=\"scroll\"><table><thead><tr><th>host</th><th>shard</th><th>actual start</th><th>start skew</th><th>operations</th><th>errors</th><th>p99</th><th>directory</th></tr></thead><tbody>");
        for h in hosts {
            let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(&h.host));
            td(out, format!("{}/{}", h.shard.index, h.shard.count));
            td(out, &h.actual_start);
            td(out, h.start_skew_ms.map_or_else(|| "–".into(), ms));
            td(out, h.requests);
            if h.errors > 0 {
                let _ = write!(out, "<td class=\"bad\">{}</td>", h.errors);
            } else {
                td(out, 0);
            }
            td(out, h.p99_ms.map_or_else(|| "–".into(), ms));
            let _ = write!(
                out,
                "<td class=\"mono\" style=\"text-align:left\">{}</td></tr>",
                escape(&h.dir)
            );
        }
        out.push_str("</tbody></table></div>");
    }
}

/// Every trace record accounted for: replayed, folded or skipped (and why).
fn trace_accounting(out: &mut String, tr: &TraceCounts) {
    let skipped: u64 = tr.skipped.values().sum();
    let balanced = tr.records == tr.replayed + tr.folded + skipped;
    out.push_str("<h3>Trace accounting</h3><table><thead><tr><th>records</th><th>replayed</th><th>folded</th><th>skipped</th>");
    for reason in tr.skipped.keys() {
        let _ = write!(out, "<th>skipped: {}</th>", escape(reason));
    }
    out.push_str("</tr></thead><tbody><tr>");
    let _ = write!(out, "<td style=\"text-align:right\">{}</td>", tr.records);
    td(out, tr.replayed);
    td(out, tr.folded);
    td(out, skipped);
    for n in tr.skipped.values() {
        td(out, n);
    }
    let _ = write!(
        out,
        "</tr></tbody></table><p class=\"muted\">records = replayed + folded + skipped: {}. Folded records were carried out inside another operation (a PATCH or closing PUT of an upload replayed as one session).</p>",
        if balanced {
            "balanced".to_owned()
        } else {
            format!(
                "<span class=\"bad\">does not add up ({} ≠ {})</span>",
                tr.records,
                tr.replayed + tr.folded + skipped
            )
        }
    );
}

/// A self-check's percentiles in ms: p50, p99 and the maximum.
fn spread(p: &Percentiles) -> String {
    format!(
        "p50 {} · p99 {} · max {}",
        p.p50.map_or_else(|| "–".into(), ms),
        p.p99.map_or_else(|| "–".into(), ms),
        ms(p.max)
    )
}

/// How the generator kept up: its timer, the event loops' reads, CPU, in-flight cap and
/// shared start.
fn self_checks(out: &mut String, c: &Checks) {
    out.push_str("<h3>Self-checks</h3><dl class=\"facts\">");
    if let Some(p) = &c.canary_wake_ms {
        fact(out, "canary wake-up (10 ms sleep)", &spread(p));
    }
    if let Some(p) = (c.event_loops.as_ref()).and_then(|l| l.answer_wait_ms.as_ref()) {
        fact(out, "answers waiting for the event loop", &spread(p));
    }
    match (c.cpu_seconds, c.cpu_share) {
        (Some(sec), Some(share)) => fact(
            out,
            "generator CPU",
            &format!("{sec:.2} s, {:.1}% of {} cores", share * 100.0, c.cores),
        ),
        _ => fact(
            out,
            "generator CPU",
            &format!("not measured ({} cores)", c.cores),
        ),
    }
    fact(
        out,
        "in-flight cap binding",
        &format!("{:.1}% of the run", c.cap_binding_share * 100.0),
    );
    fact(out, "max in flight", &c.max_in_flight.to_string());
    fact(out, "shared start", c.start_at.as_deref().unwrap_or("–"));
    fact(
        out,
        "start skew",
        &c.start_skew_ms.map_or_else(|| "–".into(), ms),
    );
    out.push_str("</dl>");
}

pub(super) fn operations_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    let delay = is_delay(set);
    let ops: Vec<_> = s
        .operations
        .iter()
        .filter(|(n, _)| level_of(n) != Some(Level::Request))
        .collect();
    let requests: Vec<_> = s
        .operations
        .iter()
        .filter(|(n, _)| level_of(n) == Some(Level::Request))
        .collect();
    let sessions: Vec<_> = s.sessions.iter().collect();
    let what = if delay {
        "Response time from the intended start (the schedule) to the end of the body, successes only; service time from the send; lag from the intended start to the send."
    } else {
        "Latency from the send to the end of the body, successes only."
    };
    let _ = write!(
        out,
        "<section id=\"operations\"><h2>Operations</h2><p class=\"muted\">{}</p>",
        escape(what)
    );
    ops_table(out, &ops, delay, "op");
    if !requests.is_empty() {
        out.push_str("<h3>HTTP requests inside operations</h3><p class=\"muted\">The single exchanges of uploads, redirect hops and token fetches; not counted in the totals.</p>");
        ops_table(out, &requests, delay, "sub");
    }
    if !sessions.is_empty() {
        out.push_str("<h3>Sessions</h3><p class=\"muted\">An image pull or push as a whole: from the (intended) start of its first operation to the end of its last.</p>");
        ops_table(out, &sessions, delay, "session");
    }
    out.push_str("</section>");
}

/// Runs over several endpoints: one line per node.
/// The registry's own metrics (`--registry-metrics`) beside creb-rs's counts.
pub(super) fn registry_metrics_section(out: &mut String, set: &ResultSet) {
    if set.registry_metrics.is_empty() {
        return;
    }
    out.push_str("<section id=\"registry-metrics\"><h2>The registry's own metrics</h2><p class=\"muted\">Read from the registry's Prometheus endpoint before, during and after the run (registry-metrics.json). Its request count and creb-rs's count of HTTP exchanges agree unless something else talked to the registry, or one side miscounts. The mean duration is the registry's own, without the network.</p>");
    out.push_str("<div class=\"scroll\"><table class=\"ops\"><thead><tr><th>endpoint</th><th>registry requests</th><th>creb-rs HTTP requests</th><th>agreement</th><th>registry mean duration</th><th>busiest interval</th></tr></thead><tbody>");
    for l in crate::report::registry_lines(&set.registry_metrics) {
        let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(&l.url));
        td(out, escape(&l.registry_requests));
        td(out, escape(&l.creb_requests));
        if l.agreement == "agree" {
            td(out, "agree");
        } else {
            let _ = write!(out, "<td class=\"bad\">{}</td>", escape(&l.agreement));
        }
        td(out, escape(&l.mean_duration));
        td(out, escape(&l.busiest));
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>");
}

/// `--split-by-header`: each operation's count and latency by the header's value (a cache's
/// hits beside its misses).
pub(super) fn header_split_section(out: &mut String, set: &ResultSet) {
    let Some(split) = &set.summary.split_by_header else {
        return;
    };
    let _ = write!(
        out,
        "<section id=\"split\"><h2>By <code>{}</code></h2><p class=\"muted\">Every operation also counted by the value its last answer gave this header (--split-by-header): each line's latency is of that value's successes only. (none): answers without the header; (other): values after the first 16 distinct ones.</p>",
        escape(&split.header)
    );
    out.push_str("<div class=\"scroll\"><table class=\"ops\"><thead><tr><th>operation</th><th>value</th><th>count</th><th>share</th><th>ok</th><th>errors</th><th>p50</th><th>p90</th><th>p99</th><th>max</th></tr></thead><tbody>");
    for (op, total) in &set.summary.operations {
        for (value, ops) in &split.values {
            let Some(c) = ops.get(op) else { continue };
            let _ = write!(
                out,
                "<tr><td class=\"name\">{}</td><td class=\"name\">{}</td>",
                escape(op),
                escape(value)
            );
            td(out, c.count);
            td(
                out,
                format!("{:.1}%", c.count as f64 * 100.0 / total.count.max(1) as f64),
            );
            td(out, c.ok);
            if c.errors > 0 {
                let _ = write!(out, "<td class=\"bad\">{}</td>", c.errors);
            } else {
                td(out, 0);
            }
            let l = c.latency_ms.as_ref();
            td(out, opt_ms(l, |p| p.p50));
            td(out, opt_ms(l, |p| p.p90));
            td(out, opt_ms(l, |p| p.p99));
            td(out, opt_ms(l, |p| Some(p.max)));
            out.push_str("</tr>");
        }
    }
    out.push_str("</tbody></table></div>");
    if !split.hit_ratio.is_empty() {
        out.push_str("<h3>What the cache saved</h3><div class=\"scroll\"><table class=\"ops\" id=\"hit-ratio\"><thead><tr><th>operation</th><th>count</th><th>hits</th><th>of operations</th><th>of bytes</th></tr></thead><tbody>");
        for (op, h) in &split.hit_ratio {
            let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(op));
            td(out, h.count);
            td(out, h.hits);
            td(out, format!("{:.1}%", h.requests * 100.0));
            td(out, format!("{:.1}%", h.bytes * 100.0));
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></div>");
    }
    out.push_str("</section>");
}

pub(super) fn endpoints_section(out: &mut String, set: &ResultSet) {
    let Some(endpoints) = &set.summary.endpoints else {
        return;
    };
    let s = &set.summary;
    out.push_str("<section id=\"endpoints\"><h2>Endpoints</h2><p class=\"muted\">Every workload operation is counted on exactly the endpoint that carried it (or, failing as endpoint_down, the one it was meant for): the lines add up to the totals. Latency is that of the operation the node carried most; percentiles never mix operations.</p>");
    out.push_str("<div class=\"scroll\"><table class=\"ops\"><thead><tr><th>#</th><th>endpoint</th><th>count</th><th>share</th><th>ok</th><th>errors</th><th>req/s</th><th>MiB/s</th><th>busiest op</th><th>p50</th><th>p99</th><th style=\"text-align:left\">down/up</th></tr></thead><tbody>");
    let all = s.totals.requests.max(1) as f64;
    let secs = s.duration_s.max(1e-9);
    let mut by_index: Vec<_> = endpoints.iter().collect();
    by_index.sort_by_key(|(_, e)| e.index);
    for (url, e) in by_index {
        let main = e.busiest_op();
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=\"name\">{}</td>",
            e.index,
            escape(url)
        );
        td(out, e.totals.requests);
        td(
            out,
            format!("{:.1}%", e.totals.requests as f64 * 100.0 / all),
        );
        td(out, e.totals.ok);
        if e.totals.errors > 0 {
            let _ = write!(out, "<td class=\"bad\">{}</td>", e.totals.errors);
        } else {
            td(out, 0);
        }
        td(out, format!("{:.1}", e.totals.requests as f64 / secs));
        td(
            out,
            mib((e.totals.bytes_received + e.totals.bytes_sent) as f64 / secs),
        );
        td(out, escape(main.map_or("–", |(n, _)| n)));
        let l = main.and_then(|(_, o)| o.latency_ms.as_ref());
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p99));
        let transitions: Vec<String> = e
            .transitions
            .iter()
            .map(|t| {
                let host = t
                    .host
                    .as_deref()
                    .map_or(String::new(), |h| format!(" ({h})"));
                format!("{} at {:.1} s{host}", t.state, t.offset_s)
            })
            .collect();
        let _ = write!(
            out,
            "<td style=\"text-align:left\">{}</td></tr>",
            escape(&if transitions.is_empty() {
                "–".to_owned()
            } else {
                transitions.join(", ")
            })
        );
    }
    out.push_str("</tbody></table></div></section>");
}

pub(super) fn errors_section(out: &mut String, set: &ResultSet) {
    let s = &set.summary;
    out.push_str("<section id=\"errors\"><h2>Errors and events</h2>");
    if s.errors.is_empty() {
        out.push_str("<p class=\"muted\">No failed operations.</p>");
    } else {
        out.push_str("<table><thead><tr><th>kind</th><th>count</th><th style=\"text-align:left\">by operation</th></tr></thead><tbody>");
        for (kind, n) in &s.errors {
            let by: Vec<String> = s
                .operations
                .iter()
                .chain(s.sessions.iter())
                .filter_map(|(op, o)| o.errors_by_kind.get(kind).map(|k| format!("{op} {k}")))
                .collect();
            let _ = write!(
                out,
                "<tr><td class=\"name\">{}</td><td class=\"bad\">{}</td><td style=\"text-align:left\">{}</td></tr>",
                escape(kind),
                n,
                escape(&by.join(", "))
            );
        }
        out.push_str("</tbody></table>");
    }
    if !s.events.is_empty() {
        out.push_str(
            "<h3>Events</h3><table><thead><tr><th>event</th><th>count</th></tr></thead><tbody>",
        );
        for (name, n) in &s.events {
            let _ = write!(out, "<tr><td class=\"name\">{}</td>", escape(name));
            td(out, n);
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
    }
    out.push_str("</section>");
}

pub(super) fn charts_section(out: &mut String, figs: &[Figure]) {
    out.push_str("<section id=\"charts\"><h2>Charts</h2>");
    for f in figs.iter().filter(|f| f.id != "size-classes") {
        let _ = write!(
            out,
            "<figure id=\"fig-{}\">{}<figcaption>{}</figcaption></figure>",
            f.id,
            f.svg,
            escape(&f.caption)
        );
    }
    out.push_str("</section>");
}

pub(super) fn size_class_section(out: &mut String, set: &ResultSet, figs: &[Figure]) {
    out.push_str("<section id=\"size-classes\"><h2>Size classes</h2>");
    if let Some(f) = figs.iter().find(|f| f.id == "size-classes") {
        let _ = write!(
            out,
            "<figure id=\"fig-{}\">{}<figcaption>{}</figcaption></figure>",
            f.id,
            f.svg,
            escape(&f.caption)
        );
    }
    let rows = class_rows(set);
    out.push_str("<div class=\"scroll\"><table><thead><tr><th>operation</th><th>size class</th><th>count</th><th>ok</th><th>errors</th><th>bytes</th><th>p50</th><th>p99</th><th>max</th></tr></thead><tbody>");
    for (op, class, c) in rows {
        let _ = write!(
            out,
            "<tr><td class=\"name\">{}</td><td style=\"text-align:left\">{}</td>",
            escape(op),
            escape(class_label(class))
        );
        td(out, c.count);
        td(out, c.ok);
        td(out, c.errors);
        td(out, bytes(c.bytes));
        let l = c.latency_ms.as_ref();
        td(out, opt_ms(l, |p| p.p50));
        td(out, opt_ms(l, |p| p.p99));
        td(out, opt_ms(l, |p| Some(p.max)));
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div></section>");
}

pub(super) fn metadata_section(out: &mut String, set: &ResultSet) -> anyhow::Result<()> {
    out.push_str("<section id=\"metadata\"><h2>Metadata</h2>");
    let h = &set.summary.histograms;
    let _ = write!(
        out,
        "<p class=\"muted\">Histograms: {} to {} {} with {} significant digits. {}</p>",
        h.lowest_discernible,
        h.highest_trackable,
        escape(&h.unit),
        h.significant_digits,
        escape(&set.meta.clock)
    );
    let config = serde_json::to_string_pretty(&set.meta.config)?;
    let _ = write!(
        out,
        "<h3>Resolved configuration</h3><pre class=\"mono\" id=\"config\">{}</pre>",
        escape(&config)
    );
    let mut meta = serde_json::to_value(&set.meta)?;
    if let Some(obj) = meta.as_object_mut() {
        obj.remove("config");
    }
    let _ = write!(
        out,
        "<h3>meta.json (without the configuration)</h3><pre class=\"mono\" id=\"meta\">{}</pre></section>",
        escape(&serde_json::to_string_pretty(&meta)?)
    );
    Ok(())
}
