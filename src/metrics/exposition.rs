//! A registry's own Prometheus metrics (`--registry-metrics`): the text exposition format
//! read into series, and what changed between a scrape before the run and one after. Only
//! cumulative series are kept (`_total`, `_count`, `_sum`): their differences are what
//! happened during the run. The headline is the registry's request count, to set beside
//! creb-rs's own (distribution: `registry_http_requests_total`).

use std::collections::BTreeMap;

/// Series (`name{labels}` as written) and their values.
pub type Series = BTreeMap<String, f64>;

/// The cumulative series of an exposition: `name{labels} value [timestamp]` lines, comments
/// and gauges left out. A line that cannot be read is skipped.
pub fn parse(text: &str) -> Series {
    let mut out = Series::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, rest) = match line.rfind('}') {
            Some(close) if line.contains('{') => (&line[..=close], &line[close + 1..]),
            _ => match line.split_once(char::is_whitespace) {
                Some((name, rest)) => (name, rest),
                None => continue,
            },
        };
        let name = series.split('{').next().unwrap_or_default();
        if !["_total", "_count", "_sum"]
            .iter()
            .any(|s| name.ends_with(s))
        {
            continue;
        }
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        if value.is_finite() {
            out.insert(series.to_owned(), value);
        }
    }
    out
}

/// What a cumulative value grew by from `before` to `after`: a value that went down belongs
/// to a restarted registry, which counts from 0 again.
pub fn growth(before: f64, after: f64) -> f64 {
    if after >= before {
        after - before
    } else {
        after
    }
}

/// What each series grew by from `before` to `after` (a series new in `after` from 0; one
/// that went down, a restarted registry, counts from 0 again).
pub fn delta(before: &Series, after: &Series) -> Series {
    after
        .iter()
        .map(|(k, v)| (k.clone(), growth(before.get(k).copied().unwrap_or(0.0), *v)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

/// The registry's count of HTTP requests in `series`: the sum of the series of the request
/// counters registries export (distribution's `registry_http_requests_total`, zot's
/// `zot_http_requests_total`), or `None` when there is none.
pub fn requests(series: &Series) -> Option<f64> {
    let counters = ["registry_http_requests_total", "zot_http_requests_total"];
    let matching: Vec<f64> = series
        .iter()
        .filter(|(k, _)| counters.contains(&k.split('{').next().unwrap_or_default()))
        .map(|(_, v)| *v)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

/// The registry's request duration histogram in `series`: the sums of its `_sum` (seconds)
/// and `_count` series (distribution's `registry_http_request_duration_seconds`, zot's
/// `zot_http_method_latency_seconds`), or `None` when there is none.
pub fn duration(series: &Series) -> Option<(f64, f64)> {
    let histograms = [
        "registry_http_request_duration_seconds",
        "zot_http_method_latency_seconds",
    ];
    let (mut sum, mut count, mut seen) = (0.0, 0.0, false);
    for (k, v) in series {
        let name = k.split('{').next().unwrap_or_default();
        for h in histograms {
            match name.strip_prefix(h) {
                Some("_sum") => (sum, seen) = (sum + v, true),
                Some("_count") => (count, seen) = (count + v, true),
                _ => {}
            }
        }
    }
    seen.then_some((sum, count))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP registry_http_requests_total The number of requests\n\
        # TYPE registry_http_requests_total counter\n\
        registry_http_requests_total{code=\"200\",handler=\"base\",method=\"get\"} 1\n\
        registry_http_in_flight_requests{handler=\"base\"} 0\n\
        go_goroutines 12\n";
    const AFTER: &str = "registry_http_requests_total{code=\"200\",handler=\"base\",method=\"get\"} 4\n\
        registry_http_requests_total{code=\"201\",handler=\"blob_upload\",method=\"put\"} 2 1700000000000\n\
        registry_http_request_duration_seconds_sum{handler=\"a b\",method=\"get\"} 0.25\n\
        registry_http_request_duration_seconds_count{handler=\"a b\",method=\"get\"} 6\n\
        broken_total{x=\"1\"} nope\n";

    #[test]
    fn counters_are_read_and_their_growth_taken() {
        let (b, a) = (parse(BEFORE), parse(AFTER));
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(a.len(), 4, "{a:?}");
        let d = delta(&b, &a);
        assert_eq!(
            d[r#"registry_http_requests_total{code="200",handler="base",method="get"}"#],
            3.0
        );
        assert_eq!(requests(&d), Some(5.0));
        assert_eq!(
            d[r#"registry_http_request_duration_seconds_count{handler="a b",method="get"}"#],
            6.0
        );
        assert_eq!(requests(&Series::new()), None);
        // A restarted registry counts from zero again.
        let restarted = parse("x_total 2\n");
        assert_eq!(delta(&parse("x_total 10\n"), &restarted)["x_total"], 2.0);
    }
}
