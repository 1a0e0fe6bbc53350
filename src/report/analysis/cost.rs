//! `cost` as people read it: the prices' provenance and the workload measured, then the
//! month's bill (storage, egress by tier, requests, fees), rendered from an [`Estimate`].

use crate::analysis::cost::Estimate;
use crate::units::{grouped, ByteSize};

fn money(v: f64) -> String {
    format!("{v:.2}")
}

fn gb(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} GB")
    } else {
        format!("{v:.2} GB")
    }
}

/// The human breakdown: what the prices and the workload are, then the month's bill.
pub fn text(e: &Estimate) -> String {
    let mut s = String::new();
    basis_text(e, &mut s);
    bill_text(e, &mut s);
    s
}

/// The prices' provenance, the workload measured and the month it is projected to.
fn basis_text(e: &Estimate, s: &mut String) {
    use std::fmt::Write;
    let p = &e.provider;
    let _ = writeln!(s, "cost: {} ({}), region {}", p.name, p.key, p.region);
    let _ = writeln!(
        s,
        "prices: list prices as of {} from {}; check them before relying on this estimate",
        p.as_of,
        p.sources.join(", ")
    );
    for caveat in &p.caveats {
        let _ = writeln!(s, "  note: {caveat}");
    }
    let w = &e.workload;
    for note in &w.notes {
        let _ = writeln!(s, "  warning: {note}");
    }
    let _ = writeln!(
        s,
        "workload ({}): {} egress, {} ingress, {} stored, {} reads, {} writes over {:.0} s",
        w.source,
        ByteSize(w.egress_bytes),
        ByteSize(w.ingress_bytes),
        ByteSize(w.storage_bytes),
        grouped(w.read_requests),
        grouped(w.write_requests),
        w.span_s
    );
    let basis = match e.projection.basis {
        "scale_to" => "scaled to the requested monthly egress",
        _ => "measured rate scaled to a month",
    };
    let _ = writeln!(
        s,
        "month ({} h, {basis}, x{:.4}): {} egress, {} stored, {:.0} reads, {:.0} writes; ingress rate {}/month",
        e.projection.hours_per_month,
        e.projection.scale_factor,
        gb(e.monthly_usage.egress_gb),
        gb(e.monthly_usage.storage_gb),
        e.monthly_usage.read_requests,
        e.monthly_usage.write_requests,
        gb(e.projection.ingress_gb_per_month),
    );
}

/// The month's bill, line by line, and the total.
fn bill_text(e: &Estimate, s: &mut String) {
    use std::fmt::Write;
    let m = &e.monthly;
    let _ = writeln!(s);
    // One line of the bill: what is charged, and its cost right-aligned.
    let mut line = |what: &str, cost: &str| {
        let _ = writeln!(s, "{what:<44} {cost:>14}");
    };
    line("per month", &e.provider.currency);
    let storage = &m.storage;
    line(
        &format!(
            "storage  {} billable of {} ({} included) x {:.4}",
            gb(storage.billable_gb),
            gb(storage.gb),
            gb(storage.included_gb),
            storage.per_gb_month
        ),
        &money(storage.cost),
    );
    line(
        &format!("egress   {}", gb(m.egress.gb)),
        &money(m.egress.cost),
    );
    for t in m.egress.tiers.iter().filter(|t| t.gb > 0.0) {
        let range = match t.to_gb {
            Some(to) => format!("{:.0}-{:.0} GB", t.from_gb, to),
            None => format!("over {:.0} GB", t.from_gb),
        };
        line(
            &format!("  {range}: {} x {}", gb(t.gb), t.per_gb),
            &money(t.cost),
        );
    }
    let requests = &m.requests;
    line(
        &format!(
            "requests {:.0} reads, {:.0} writes",
            requests.reads, requests.writes
        ),
        &money(requests.cost),
    );
    line(
        &format!(
            "fees     {}/day, {}/month",
            m.fees.per_day, m.fees.per_month
        ),
        &money(m.fees.cost),
    );
    line("total per month", &money(m.total));
    if e.projection.months != 1.0 {
        line(
            &format!("total over {} months", e.projection.months),
            &money(e.total),
        );
    }
}
