//! `--fail-if EXPR`: conditions on a finished run that make it exit with status 1.
//!
//! Grammar: `METRIC CMP VALUE`, with `CMP` one of `>`, `>=`, `<`, `<=`, `==`, `!=`.
//!
//! | metric | meaning | value units |
//! |---|---|---|
//! | `pNN(OP)` (`p50`, `p99`, `p99.9`, `p999`) | latency percentile of OP's successes | `us`, `ms` (default), `s`, `m` |
//! | `pNN(OP).service`, `.lag`, `.ttfb` | service time, schedule lag, time to first byte | as above |
//! | `mean(OP)`, `max(OP)` (with the same suffixes) | | as above |
//! | `error_rate`, `error_rate(OP)` | failed / all operations | `%` or a fraction |
//! | `errors`, `errors(OP)`, `errors(KIND)` | failures (KIND: `timeout`, `http_429`, …) | count (`10k`) |
//! | `rps`, `rps(OP)` | completed operations per second | count |
//! | `throughput`, `throughput(OP)` | bytes per second | `512`, `10MiB` |
//! | `count(OP)` | operations | count |
//! | `warnings` | validity warnings raised | count |
//!
//! `OP` is an operation or session name (`blob_get`, `image_pull`, …) or `all` (every
//! workload operation together). Percentiles come from the exact histograms, not from the
//! rounded numbers of `summary.json`.
//!
//! `VALUE` may be relative to a baseline run (`--baseline DIR`): `baseline * 1.10`,
//! `baseline`, the same metric measured in that run times the factor. Such a threshold
//! holds only beyond the uncertainty of both runs: for `>`, the lower bound of this run's
//! 95% interval above the baseline's upper bound times the factor (for `<`, this run's
//! upper bound below the baseline's lower bound times the factor); where a run has no
//! interval of that figure (only percentiles of one operation have them), its value
//! stands for both bounds.

use std::fmt;

use hdrhistogram::Histogram;

use super::summary::Summary;
pub use super::summary::{BaselineVerdict, MaxErrors, ThresholdVerdict};
use crate::metrics::{ErrorKind, Level, Op, Stats, StatsTable};
use crate::units::{parse_count, parse_duration, parse_size};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Cmp {
    /// Whether `actual CMP limit`.
    pub fn holds(self, actual: f64, limit: f64) -> bool {
        match self {
            Cmp::Gt => actual > limit,
            Cmp::Ge => actual >= limit,
            Cmp::Lt => actual < limit,
            Cmp::Le => actual <= limit,
            Cmp::Eq => (actual - limit).abs() < 1e-9,
            Cmp::Ne => (actual - limit).abs() >= 1e-9,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Series {
    Latency,
    Service,
    Lag,
    Ttfb,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stat {
    Quantile(f64),
    Mean,
    Max,
}

/// Which operations a metric covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    All,
    Op(Op),
}

#[derive(Debug, Clone, PartialEq)]
enum Metric {
    Latency {
        stat: Stat,
        scope: Scope,
        series: Series,
    },
    ErrorRate(Scope),
    Errors(Scope),
    ErrorsOfKind(ErrorKind),
    Rps(Scope),
    Throughput(Scope),
    Count(Scope),
    Warnings,
}

/// A parsed `--fail-if` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub text: String,
    metric: Metric,
    cmp: Cmp,
    limit: Limit,
}

/// What a threshold compares with.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Limit {
    /// In the metric's unit: ms for latencies, a fraction for rates, a count, bytes/s.
    Value(f64),
    /// The same metric in the baseline run, times this factor.
    Baseline(f64),
}

/// A finished run thresholds compare with (`--baseline DIR`): its summary and its
/// whole-run histograms.
#[derive(Debug)]
pub struct Baseline {
    pub summary: Summary,
    pub table: StatsTable,
    /// Where it was read from, and its dataset's fingerprint (a baseline must have run the
    /// same workload: `store::workload_difference`).
    pub dir: std::path::PathBuf,
    pub dataset_hash: String,
}

/// `baseline`, `baseline * F`: the factor; `None` when `value` is not relative to one.
fn baseline_factor(value: &str) -> Option<Result<f64, String>> {
    let rest = value.strip_prefix("baseline")?.trim();
    if rest.is_empty() {
        return Some(Ok(1.0));
    }
    Some(
        rest.strip_prefix('*')
            .map(str::trim)
            .and_then(|f| f.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| format!("'{value}': use baseline or baseline * FACTOR (e.g. 1.10)")),
    )
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--fail-if '{text}': {reason}")]
pub struct ThresholdError {
    pub text: String,
    pub reason: String,
}

/// How a threshold came out.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The condition holds: the run fails. Carries the measured value.
    Holds(f64),
    Clear(f64),
    /// Nothing to measure (the operation never ran).
    NoData,
}

/// `LHS CMP RHS`, split at the first comparison (trimmed sides).
pub fn split_cmp(text: &str) -> Option<(&str, Cmp, &str)> {
    for (token, cmp) in [
        (">=", Cmp::Ge),
        ("<=", Cmp::Le),
        ("==", Cmp::Eq),
        ("!=", Cmp::Ne),
        (">", Cmp::Gt),
        ("<", Cmp::Lt),
    ] {
        if let Some(i) = text.find(token) {
            return Some((text[..i].trim(), cmp, text[i + token.len()..].trim()));
        }
    }
    None
}

fn scope(arg: Option<&str>) -> Result<Scope, String> {
    match arg {
        None | Some("all") | Some("*") => Ok(Scope::All),
        Some(name) => Op::from_name(name)
            .map(Scope::Op)
            .ok_or_else(|| unknown_operation(name)),
    }
}

/// An unknown operation's error: the nearest known name, and every one of them.
fn unknown_operation(name: &str) -> String {
    let known: Vec<&str> = Op::ALL
        .iter()
        .filter(|op| op.level() != Level::Request)
        .map(|op| op.name())
        .collect();
    let nearest = known
        .iter()
        .map(|k| (strsim::jaro_winkler(name, k), *k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(String::new(), |(_, k)| format!(" (did you mean '{k}'?)"));
    format!(
        "unknown operation '{name}'{nearest}; the operations are all, {}",
        known.join(", ")
    )
}

/// A latency limit: a duration with its unit (`250ms`, `2s`), or a bare number read as
/// milliseconds (as k6 reads its thresholds), never negative.
fn parse_latency(value: &str) -> Result<f64, String> {
    let ms = match value.parse::<f64>() {
        Ok(ms) => ms,
        Err(_) => parse_duration(value).map(|d| d.as_secs_f64() * 1000.0)?,
    };
    if !ms.is_finite() || ms < 0.0 {
        return Err(format!(
            "'{value}' is not a latency (e.g. 250ms, 2s; a bare number is ms)"
        ));
    }
    Ok(ms)
}

/// A share of operations: `1%` or `0.01`, between 0 and 100% (a rate outside it could
/// never be measured, so an expression on it would mean nothing).
fn parse_rate(value: &str) -> Result<f64, String> {
    let rate = match value.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<f64>()
            .map(|v| v / 100.0)
            .map_err(|_| format!("'{value}' is not a percentage"))?,
        None => value
            .parse::<f64>()
            .map_err(|_| format!("'{value}' is not a fraction or a percentage"))?,
    };
    if !(0.0..=1.0).contains(&rate) {
        return Err(format!(
            "'{value}' is not a share of operations: give one between 0% and 100% (or 0 and 1)"
        ));
    }
    Ok(rate)
}

/// A count or a rate: never negative (no run measures one).
fn parse_number(value: &str) -> Result<f64, String> {
    let n = value
        .parse::<f64>()
        .or_else(|_| parse_count(value).map(|c| c as f64))?;
    if !n.is_finite() || n < 0.0 {
        return Err(format!("'{value}' is negative: no run counts below 0"));
    }
    Ok(n)
}

impl Threshold {
    #[allow(clippy::too_many_lines)]
    pub fn parse(text: &str) -> Result<Threshold, ThresholdError> {
        let err = |reason: String| ThresholdError {
            text: text.to_owned(),
            reason,
        };
        let (lhs, cmp, rhs) = split_cmp(text)
            .ok_or_else(|| err("no comparison (use >, >=, <, <=, == or !=)".into()))?;
        if rhs.is_empty() {
            return Err(err("no value after the comparison".into()));
        }
        let (call, suffix) = match lhs.rfind(')') {
            Some(i) => (&lhs[..=i], lhs[i + 1..].trim()),
            None => [".latency", ".service", ".lag", ".ttfb"]
                .iter()
                .find(|s| lhs.ends_with(*s))
                .map_or((lhs, ""), |s| (&lhs[..lhs.len() - s.len()], *s)),
        };
        let (name, arg) = match call.split_once('(') {
            Some((name, rest)) => {
                let arg = rest
                    .strip_suffix(')')
                    .ok_or_else(|| err("unbalanced parenthesis".into()))?
                    .trim();
                (name.trim(), Some(arg))
            }
            None => (call.trim(), None),
        };
        let series = match suffix {
            "" | ".latency" => Series::Latency,
            ".service" => Series::Service,
            ".lag" => Series::Lag,
            ".ttfb" => Series::Ttfb,
            other => {
                return Err(err(format!(
                    "unknown suffix '{other}' (use .service, .lag or .ttfb)"
                )))
            }
        };
        let stat = stat_of(name).map_err(err)?;
        // Relative to a baseline: the metric's own unit does not matter.
        let relative = baseline_factor(rhs).transpose().map_err(err)?;
        let rhs = if relative.is_some() { "0" } else { rhs };
        let (metric, limit) = match (stat, name) {
            (Some(stat), _) => {
                if arg.is_none() {
                    return Err(err(format!("{name} needs an operation, e.g. {name}(blob_get)")));
                }
                let metric = Metric::Latency {
                    stat,
                    scope: scope(arg).map_err(err)?,
                    series,
                };
                (metric, parse_latency(rhs).map_err(err)?)
            }
            (None, "error_rate") => (Metric::ErrorRate(scope(arg).map_err(err)?), parse_rate(rhs).map_err(err)?),
            (None, "errors") => {
                let metric = match arg {
                    Some(a) if Op::from_name(a).is_none() && a != "all" => Metric::ErrorsOfKind(
                        ErrorKind::from_key(a)
                            .ok_or_else(|| err(format!("'{a}' is neither an operation nor an error kind")))?,
                    ),
                    _ => Metric::Errors(scope(arg).map_err(err)?),
                };
                (metric, parse_number(rhs).map_err(err)?)
            }
            (None, "rps") => (Metric::Rps(scope(arg).map_err(err)?), parse_number(rhs).map_err(err)?),
            (None, "throughput") => (
                Metric::Throughput(scope(arg).map_err(err)?),
                parse_size(rhs).map(|b| b as f64).map_err(err)?,
            ),
            (None, "count") => (Metric::Count(scope(arg).map_err(err)?), parse_number(rhs).map_err(err)?),
            (None, "warnings") => (Metric::Warnings, parse_number(rhs).map_err(err)?),
            (None, other) => {
                return Err(err(format!(
                    "unknown metric '{other}' (pNN, mean, max, error_rate, errors, rps, throughput, count, warnings)"
                )))
            }
        };
        if !suffix.is_empty() && !matches!(metric, Metric::Latency { .. }) {
            return Err(err(format!("'{suffix}' applies to latency metrics only")));
        }
        Ok(Threshold {
            text: text.to_owned(),
            metric,
            cmp,
            limit: relative.map_or(Limit::Value(limit), Limit::Baseline),
        })
    }

    fn stats(table: &StatsTable, scope: Scope) -> Option<Stats> {
        match scope {
            Scope::Op(op) => table.op_total(op),
            Scope::All => {
                let mut total: Option<Stats> = None;
                for op in table.ops() {
                    if op.level() != Level::Operation {
                        continue;
                    }
                    if let Some(s) = table.op_total(op) {
                        match &mut total {
                            Some(t) => t.add(&s),
                            None => total = Some(s),
                        }
                    }
                }
                total
            }
        }
    }

    fn measure(&self, summary: &Summary, table: &StatsTable) -> Option<f64> {
        let duration = summary.duration_s.max(1e-9);
        match &self.metric {
            Metric::Latency { stat, .. } => {
                let h = self.latency_histogram(table)?;
                let us = match stat {
                    Stat::Quantile(q) => h.value_at_quantile(*q) as f64,
                    Stat::Mean => h.mean(),
                    Stat::Max => h.max() as f64,
                };
                Some(us / 1000.0)
            }
            Metric::ErrorRate(scope) => {
                let s = Self::stats(table, *scope)?;
                (s.count > 0).then(|| s.errors as f64 / s.count as f64)
            }
            Metric::Errors(scope) => {
                Some(Self::stats(table, *scope).map_or(0.0, |s| s.errors as f64))
            }
            Metric::ErrorsOfKind(kind) => {
                Some(summary.errors.get(&kind.key()).copied().unwrap_or(0) as f64)
            }
            Metric::Rps(scope) => {
                Some(Self::stats(table, *scope).map_or(0.0, |s| s.count as f64 / duration))
            }
            Metric::Throughput(scope) => Some(
                Self::stats(table, *scope)
                    .map_or(0.0, |s| (s.bytes_sent + s.bytes_received) as f64 / duration),
            ),
            Metric::Count(scope) => {
                Some(Self::stats(table, *scope).map_or(0.0, |s| s.count as f64))
            }
            Metric::Warnings => Some(summary.warnings.len() as f64),
        }
    }

    /// The samples a latency expression reads (its series of its scope); `None` for any
    /// other metric, or nothing measured.
    fn latency_histogram(&self, table: &StatsTable) -> Option<Histogram<u64>> {
        let Metric::Latency { scope, series, .. } = &self.metric else {
            return None;
        };
        let s = Self::stats(table, *scope)?;
        let h = match series {
            Series::Latency => Some(s.latency),
            Series::Service => s.service,
            Series::Lag => s.schedule_lag,
            Series::Ttfb => s.ttfb,
        }?;
        (!h.is_empty()).then_some(h)
    }

    /// Whether a percentile's samples on the wrong side of `limit` (ms) are too many to be
    /// chance, were the objective met (the wrong side: past the limit of `pNN < L`, at or
    /// below it for `pNN > L`; at most 1 − q of the samples, or q, lie there then). What
    /// breaks an objective whose percentile has no interval: 20 samples put their p99 on
    /// their largest, and one late sample of them would otherwise decide. Other
    /// expressions: their value decides.
    fn wrong_side_beyond_chance(&self, table: &StatsTable, limit: f64) -> bool {
        let Metric::Latency {
            stat: Stat::Quantile(q),
            ..
        } = self.metric
        else {
            return true;
        };
        let Some(h) = self.latency_histogram(table) else {
            return true;
        };
        let limit_us = limit * 1000.0;
        // A sample's value as the percentile reads it: its bucket's highest equivalent.
        let (wrong, share): (fn(f64, f64) -> bool, f64) = match self.cmp {
            Cmp::Lt => (|v, l| v >= l, 1.0 - q),
            Cmp::Le => (|v, l| v > l, 1.0 - q),
            Cmp::Gt => (|v, l| v <= l, q),
            Cmp::Ge => (|v, l| v < l, q),
            Cmp::Eq | Cmp::Ne => return true,
        };
        let beyond: u64 = h
            .iter_recorded()
            .filter(|v| wrong(v.value_iterated_to() as f64, limit_us))
            .map(|v| v.count_at_value())
            .sum();
        crate::metrics::uncertainty::too_many_to_be_chance(h.len(), beyond, share)
    }

    pub fn evaluate(&self, summary: &Summary, table: &StatsTable) -> Verdict {
        match (self.measure(summary, table), self.limit) {
            (None, _) => Verdict::NoData,
            (Some(v), Limit::Value(limit)) if self.cmp.holds(v, limit) => Verdict::Holds(v),
            (Some(v), _) => Verdict::Clear(v),
        }
    }

    /// Decides an objective (an expression that must hold, `capacity --slo`) on a run,
    /// beyond the uncertainty of its figure: `met` when its whole 95% interval satisfies the
    /// expression, `broken` when none of it does, `undecided` when it straddles the limit.
    /// Without an interval the value decides whether it is met; a percentile is broken then
    /// only when its samples past the limit are too many to be chance (one of 20 past a p99's
    /// limit is not: `undecided`, and the search runs the step again, longer). With the
    /// measured value and the interval.
    pub fn decide(
        &self,
        summary: &Summary,
        table: &StatsTable,
    ) -> (&'static str, Option<f64>, Option<[f64; 2]>) {
        let (Some(v), Limit::Value(limit)) = (self.measure(summary, table), self.limit) else {
            return ("no_data", None, None);
        };
        let interval = self.interval(summary);
        let x = Uncertain::new(v, interval);
        let verdict = match relation(self.cmp, x, Uncertain::exact(limit)) {
            Relation::Always => "met",
            Relation::Never
                if interval.is_none() && !self.wrong_side_beyond_chance(table, limit) =>
            {
                "undecided"
            }
            Relation::Never => "broken",
            Relation::Straddles => "undecided",
        };
        (verdict, Some(v), interval)
    }

    /// The registry's own share of a latency objective: the same statistic and limit on
    /// the service time (send to end: no schedule lag, no wait for an in-flight slot) of the
    /// operations it covers — a session's (`image_pull`) are every workload operation, which
    /// a session cannot be faster than. `None` for an objective on anything but latency.
    pub fn service_side(&self) -> Option<Threshold> {
        let Metric::Latency {
            stat,
            scope,
            series: Series::Latency,
        } = self.metric
        else {
            return None;
        };
        let (scope, name) = match scope {
            Scope::Op(op) if op.level() == Level::Session => (Scope::All, "all".to_owned()),
            Scope::Op(op) => (scope, op.name().to_owned()),
            Scope::All => (scope, "all".to_owned()),
        };
        let stat_name = match stat {
            Stat::Quantile(q) => format!("p{}", q * 100.0),
            Stat::Mean => "mean".into(),
            Stat::Max => "max".into(),
        };
        let Limit::Value(limit) = self.limit else {
            return None;
        };
        let cmp = match self.cmp {
            Cmp::Gt => ">",
            Cmp::Ge => ">=",
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Eq => "==",
            Cmp::Ne => "!=",
        };
        Some(Threshold {
            text: format!("{stat_name}({name}).service {cmp} {limit}ms"),
            metric: Metric::Latency {
                stat,
                scope,
                series: Series::Service,
            },
            cmp: self.cmp,
            limit: self.limit,
        })
    }

    /// The limit of a latency expression in ms (`p99(image_pull) < 100ms`: 100), to draw it
    /// beside the curves it limits; `None` for other metrics or a baseline's limit.
    pub fn latency_limit_ms(&self) -> Option<f64> {
        match (&self.metric, self.limit) {
            (Metric::Latency { .. }, Limit::Value(ms)) => Some(ms),
            _ => None,
        }
    }

    /// Whether the expression, as an objective that must hold, fails on `summary`: its
    /// measured value does not satisfy it (no data: not failed).
    pub fn fails(&self, summary: &Summary, table: &StatsTable) -> bool {
        matches!(self.evaluate(summary, table), Verdict::Clear(_))
    }

    /// Whether the expression, as an objective that must hold, fails on `summary` even with
    /// its limit moved `margin` (in the metric's unit) in the measured value's favour: a
    /// `< 150ms` objective fails beyond 20 ms when the value is over 170 ms. An equality, or
    /// a limit taken from a baseline, has no side to move to: never failed beyond a margin.
    pub fn fails_beyond(&self, summary: &Summary, table: &StatsTable, margin: f64) -> bool {
        let (Some(v), Limit::Value(limit)) = (self.measure(summary, table), self.limit) else {
            return false;
        };
        let eased = match self.cmp {
            Cmp::Lt | Cmp::Le => limit + margin,
            Cmp::Gt | Cmp::Ge => limit - margin,
            Cmp::Eq | Cmp::Ne => return false,
        };
        !self.cmp.holds(v, eased)
    }

    /// Whether the threshold compares with a baseline run.
    pub fn needs_baseline(&self) -> bool {
        matches!(self.limit, Limit::Baseline(_))
    }

    /// The 95% interval of the measured figure in `summary`, where the run has one: a
    /// standard percentile (p50, p90, p99, p99.9) of one operation.
    fn interval(&self, summary: &Summary) -> Option<[f64; 2]> {
        let Metric::Latency {
            stat: Stat::Quantile(q),
            scope: Scope::Op(op),
            series,
        } = &self.metric
        else {
            return None;
        };
        let o = summary
            .operations
            .get(op.name())
            .or_else(|| summary.sessions.get(op.name()))?;
        let p = match series {
            Series::Latency => o.latency_ms,
            Series::Service => o.service_ms,
            Series::Lag => o.schedule_lag_ms,
            Series::Ttfb => o.ttfb_ms,
        }?;
        match (q * 1000.0).round() as u64 {
            500 => p.p50_ci,
            900 => p.p90_ci,
            990 => p.p99_ci,
            999 => p.p999_ci,
            _ => None,
        }
    }

    /// Judges a threshold relative to `baseline`: see the module's documentation. A
    /// percentile either run has no interval of (too few samples around it) cannot be told
    /// from noise: `undecided`, with the reason, never a failure on its own.
    fn against(
        &self,
        summary: &Summary,
        table: &StatsTable,
        baseline: &Baseline,
    ) -> ThresholdVerdict {
        let Limit::Baseline(factor) = self.limit else {
            unreachable!("only thresholds relative to a baseline are judged against one")
        };
        let value = self.measure(summary, table);
        let base = self.measure(&baseline.summary, &baseline.table);
        let (mine, theirs) = (self.interval(summary), self.interval(&baseline.summary));
        let mut undecided = None;
        let verdict = match (value, base) {
            (Some(v), Some(b)) => {
                if let Some(why) = self.without_interval(mine, theirs) {
                    undecided = Some(why);
                    "undecided"
                } else {
                    // A failure only beyond both runs' uncertainty.
                    let limit = Uncertain::new(b, theirs).times(factor);
                    match relation(self.cmp, Uncertain::new(v, mine), limit) {
                        Relation::Always => "held",
                        Relation::Never | Relation::Straddles => "clear",
                    }
                }
            }
            _ => "no_data",
        };
        ThresholdVerdict {
            expression: self.to_string(),
            value,
            measured: value.map(|v| self.show(v)),
            verdict: verdict.into(),
            baseline: Some(BaselineVerdict {
                value: base,
                limit: base.map(|b| b * factor),
                interval: mine,
                baseline_interval: theirs,
                undecided,
            }),
        }
    }

    /// Why a percentile compared with a baseline cannot be decided: which run has no 95%
    /// interval of it, and what would give one. `None` for a figure that has its intervals,
    /// or one that never has any (a rate, a count, a mean: compared by value).
    fn without_interval(&self, mine: Option<[f64; 2]>, theirs: Option<[f64; 2]>) -> Option<String> {
        let Metric::Latency {
            stat: Stat::Quantile(q),
            scope,
            ..
        } = self.metric
        else {
            return None;
        };
        let standard = matches!((q * 1000.0).round() as u64, 500 | 900 | 990 | 999);
        if !standard || scope == Scope::All {
            return None;
        }
        let missing = match (mine, theirs) {
            (Some(_), Some(_)) => return None,
            (None, None) => "neither run has",
            (None, Some(_)) => "this run has",
            (Some(_), None) => "the baseline has",
        };
        let lower = match (q * 1000.0).round() as u64 {
            999 => " or p99",
            990 => " or p90",
            _ => "",
        };
        Some(format!(
            "{missing} no 95% interval of this percentile (too few samples around it to tell a \
             change from noise): decide it with longer runs{lower}"
        ))
    }

    /// The measured value with the metric's unit, for messages.
    pub fn show(&self, value: f64) -> String {
        match self.metric {
            Metric::Latency { .. } => format!("{value:.3} ms"),
            Metric::ErrorRate(_) => format!("{:.3}%", value * 100.0),
            Metric::Throughput(_) => format!("{} /s", crate::units::ByteSize(value as u64)),
            Metric::Rps(_) => format!("{value:.3}"),
            _ => format!("{value}"),
        }
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A figure with its 95% interval (a point when it has none).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Uncertain {
    pub value: f64,
    pub interval: [f64; 2],
}

impl Uncertain {
    pub fn new(value: f64, interval: Option<[f64; 2]>) -> Uncertain {
        Uncertain {
            value,
            interval: interval.unwrap_or([value, value]),
        }
    }

    pub fn exact(value: f64) -> Uncertain {
        Uncertain::new(value, None)
    }

    fn times(self, factor: f64) -> Uncertain {
        Uncertain {
            value: self.value * factor,
            interval: self.interval.map(|v| v * factor),
        }
    }
}

/// How `x CMP y` stands given both figures' uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// It holds for every value of both intervals.
    Always,
    /// It holds for none.
    Never,
    /// The intervals straddle: the data cannot say.
    Straddles,
}

/// The one rule every verdict beyond uncertainty follows — a capacity step's objectives
/// (`x` against a limit), a `--baseline` gate and `compare`'s disjoint intervals (`x`
/// against another run's figure): `x CMP y` is decided only where the intervals do not
/// overlap across the comparison. (`==` and `!=` compare the values.)
pub fn relation(cmp: Cmp, x: Uncertain, y: Uncertain) -> Relation {
    let ([xlo, xhi], [ylo, yhi]) = (x.interval, y.interval);
    let (always, never) = match cmp {
        Cmp::Lt | Cmp::Le => (cmp.holds(xhi, ylo), !cmp.holds(xlo, yhi)),
        Cmp::Gt | Cmp::Ge => (cmp.holds(xlo, yhi), !cmp.holds(xhi, ylo)),
        Cmp::Eq | Cmp::Ne => (cmp.holds(x.value, y.value), !cmp.holds(x.value, y.value)),
    };
    match (always, never) {
        (true, _) => Relation::Always,
        (false, true) => Relation::Never,
        (false, false) => Relation::Straddles,
    }
}

/// Evaluates every threshold, in order, those relative to a baseline against `baseline`.
pub fn verdicts(
    thresholds: &[Threshold],
    summary: &Summary,
    table: &StatsTable,
    baseline: Option<&Baseline>,
) -> Vec<ThresholdVerdict> {
    thresholds
        .iter()
        .map(|t| {
            if let (true, Some(b)) = (t.needs_baseline(), baseline) {
                return t.against(summary, table, b);
            }
            let (value, verdict) = match t.evaluate(summary, table) {
                Verdict::Holds(v) => (Some(v), "held"),
                Verdict::Clear(v) => (Some(v), "clear"),
                Verdict::NoData => (None, "no_data"),
            };
            ThresholdVerdict {
                expression: t.to_string(),
                value,
                measured: value.map(|v| t.show(v)),
                verdict: verdict.into(),
                baseline: None,
            }
        })
        .collect()
}

/// Prints the verdicts that fail the run (and those without data) on stderr; returns
/// whether any holds.
pub fn report(verdicts: &[ThresholdVerdict]) -> bool {
    let mut failed = false;
    for v in verdicts {
        match (v.verdict.as_str(), &v.measured) {
            ("held", Some(m)) => {
                failed = true;
                let against = v.baseline.as_ref().map_or(String::new(), |b| {
                    let beyond = match (b.interval, b.baseline_interval) {
                        (Some(_), Some(_)) => " (beyond both runs' 95% intervals)",
                        _ => " (compared by value: this figure has no interval)",
                    };
                    b.limit.map_or(String::new(), |l| {
                        format!(" against a baseline limit of {l:.3}{beyond}")
                    })
                });
                eprintln!(
                    "creb-rs: --fail-if '{}' holds: measured {m}{against}",
                    v.expression
                );
            }
            ("no_data", _) => eprintln!(
                "creb-rs: --fail-if '{}': nothing measured, not checked",
                v.expression
            ),
            ("undecided", _) => {
                let why = v.baseline.as_ref().and_then(|b| b.undecided.as_deref());
                eprintln!(
                    "creb-rs: warning: --fail-if '{}' is undecided: {}",
                    v.expression,
                    why.unwrap_or("too close to the baseline to decide")
                );
            }
            _ => {}
        }
    }
    failed
}

/// Parses every expression of `--fail-if`, or the first error.
pub fn parse_all(texts: &[String]) -> Result<Vec<Threshold>, ThresholdError> {
    texts.iter().map(|t| Threshold::parse(t)).collect()
}

/// The statistic a metric name asks for: `pNN` (`p999` is p99.9), `mean`, `max`; `None`
/// for the other metrics.
fn stat_of(name: &str) -> Result<Option<Stat>, String> {
    let Some(q) = name
        .strip_prefix('p')
        .filter(|q| !q.is_empty() && q.chars().all(|c| c.is_ascii_digit() || c == '.'))
    else {
        return Ok(match name {
            "mean" => Some(Stat::Mean),
            "max" => Some(Stat::Max),
            _ => None,
        });
    };
    let q: f64 = if q == "999" {
        99.9
    } else {
        q.parse().map_err(|_| format!("bad percentile '{name}'"))?
    };
    if !(0.0..=100.0).contains(&q) {
        return Err(format!("percentile {q} is not between 0 and 100"));
    }
    Ok(Some(Stat::Quantile(q / 100.0)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::metrics::{HttpStatuses, Outcome, Sample, SizeClass, Timing};
    use crate::results::summary::{HistogramInfo, Shard, Throughput, Tool, Totals};
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::time::Duration;
    use tokio::time::Instant;

    /// 100 blob GETs whose service times are 10, 20, …, 1000 ms (each 5 ms late), the
    /// first three failed with a 429.
    pub(crate) fn table() -> StatsTable {
        let mut t = StatsTable::default();
        let end = Instant::now();
        for i in 1..=100u64 {
            let outcome = if i <= 3 {
                Outcome::Error(ErrorKind::Http(429))
            } else {
                Outcome::Ok
            };
            t.record(&Sample {
                op: Op::BlobGet,
                outcome,
                size_class: SizeClass::Under1MiB,
                timing: Timing {
                    intended: Some(end - Duration::from_millis(i * 10 + 5)),
                    ready: None,
                    sent: end - Duration::from_millis(i * 10),
                    first_byte: None,
                    end,
                },
                bytes_sent: 0,
                bytes_received: 1000,
                http: HttpStatuses::one(Some(200)),
            });
        }
        t
    }

    /// A run of 10 s with no checks, beside [`table`].
    pub(crate) fn summary() -> Summary {
        Summary {
            schema_version: 1,
            tool: Tool::current(),
            command: "replay".into(),
            mode: "delay".into(),
            model: "open".into(),
            concurrency: 1,
            registry: "r".into(),
            seed: 1,
            shard: Shard { index: 0, count: 1 },
            started_at: String::new(),
            duration_s: 10.0,
            warmup_s: None,
            warmup: None,
            interrupted: false,
            trace: None,
            totals: Totals::default(),
            throughput: Throughput::default(),
            operations: BTreeMap::new(),
            sessions: BTreeMap::new(),
            errors: BTreeMap::from([("http_429".to_owned(), 3)]),
            events: BTreeMap::new(),
            warnings: Vec::new(),
            checks: None,
            histograms: HistogramInfo::current(),
            config: serde_json::json!({}),
            endpoints: None,
            thresholds: Vec::new(),
            max_errors: None,
            split_by_header: None,
            steady_state: None,
            by_repository: Vec::new(),
            by_client: Vec::new(),
            attribution: None,
        }
    }

    fn verdict(text: &str) -> Verdict {
        Threshold::parse(text)
            .unwrap()
            .evaluate(&summary(), &table())
    }

    #[test]
    fn an_objective_fails_beyond_a_margin_only_past_the_eased_limit() {
        let beyond = |text: &str, margin: f64| {
            Threshold::parse(text)
                .unwrap()
                .fails_beyond(&summary(), &table(), margin)
        };
        // The p99 is about 1000 ms.
        assert!(beyond("p99(blob_get) < 900ms", 0.0));
        assert!(beyond("p99(blob_get) < 900ms", 50.0));
        assert!(!beyond("p99(blob_get) < 900ms", 200.0));
        assert!(beyond("p99(blob_get) > 2s", 500.0));
        assert!(!beyond("p99(blob_get) > 2s", 1500.0));
        assert!(!beyond("p99(blob_get) < 2s", 0.0));
        // An equality has no side to ease: never beyond.
        assert!(!beyond("errors(http_429) == 0", 0.0));
        // No data: not failed.
        assert!(!beyond("p99(tag_list) < 1ms", 0.0));
    }

    #[test]
    fn evaluation_table() {
        // 97 successes at 45, 55, …, 1005 ms from their intended start.
        assert!(
            matches!(verdict("p99(blob_get) > 900ms"), Verdict::Holds(v) if (990.0..=1010.0).contains(&v))
        );
        assert!(matches!(verdict("p99(blob_get) > 2s"), Verdict::Clear(_)));
        assert!(matches!(
            verdict("p50(blob_get).service > 400"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            verdict("max(blob_get).lag >= 5ms"),
            Verdict::Holds(_)
        ));
        assert!(matches!(verdict("error_rate > 1%"), Verdict::Holds(v) if (v - 0.03).abs() < 1e-9));
        assert!(matches!(
            verdict("error_rate(blob_get) > 0.05"),
            Verdict::Clear(_)
        ));
        assert!(matches!(verdict("errors(http_429) > 0"), Verdict::Holds(_)));
        assert!(matches!(verdict("errors(timeout) > 0"), Verdict::Clear(_)));
        assert!(matches!(verdict("rps < 100"), Verdict::Holds(v) if (v - 10.0).abs() < 1e-9));
        assert!(matches!(
            verdict("throughput(blob_get) < 1MiB"),
            Verdict::Holds(_)
        ));
        assert!(matches!(
            verdict("count(blob_get) != 100"),
            Verdict::Clear(_)
        ));
        assert!(matches!(verdict("warnings > 0"), Verdict::Clear(_)));
        assert_eq!(verdict("p99(manifest_get) > 1s"), Verdict::NoData);
    }

    #[test]
    fn an_objective_is_decided_beyond_its_interval() {
        let table = table();
        let mut s = summary();
        let decide = |s: &Summary, text: &str| Threshold::parse(text).unwrap().decide(s, &table).0;
        // No interval: the value decides whether it is met (97 successes, 45 ms to 1,005
        // ms, p99 ≈ 1 s)...
        assert_eq!(decide(&s, "p99(blob_get) < 2s"), "met");
        // ...and it is broken only when its samples past the limit are too many to be
        // chance: 51 of 97 at 500 ms or more, 11 at 900 ms.
        assert_eq!(decide(&s, "p99(blob_get) < 500ms"), "broken");
        assert_eq!(decide(&s, "p99(blob_get) < 900ms"), "broken");
        // One past 1 s (62% by chance were the p99 under it), two past 990 ms (25%): the
        // largest sample in disguise is no verdict.
        assert_eq!(decide(&s, "p99(blob_get) < 1s"), "undecided");
        assert_eq!(decide(&s, "p99(blob_get) <= 990ms"), "undecided");
        // The other side: 56 of 97 at or below 600 ms happen 8% of the time were the median
        // above it, 76 below 800 ms never.
        assert_eq!(decide(&s, "p50(blob_get) > 600ms"), "undecided");
        assert_eq!(decide(&s, "p50(blob_get) > 800ms"), "broken");
        // A maximum is its largest sample: one past the limit breaks it.
        assert_eq!(decide(&s, "max(blob_get) < 1s"), "broken");
        // An interval of 900–1100 ms straddles a 1 s objective: undecided.
        let latency = crate::metrics::hist::Percentiles {
            p99_ci: Some([900.0, 1100.0]),
            ..Default::default()
        };
        let op = super::super::summary::OpSummary {
            latency_ms: Some(latency),
            ..serde_json::from_value(serde_json::json!({
                "count": 0, "ok": 0, "errors": 0, "bytes": 0, "bytes_sent": 0,
                "bytes_received": 0, "requests_per_s": 0.0, "bytes_per_s": 0.0,
                "latency_ms": null, "ttfb_ms": null, "error_latency_ms": null,
                "errors_by_kind": {}, "size_classes": {}
            }))
            .unwrap()
        };
        s.operations.insert("blob_get".into(), op);
        assert_eq!(decide(&s, "p99(blob_get) < 1s"), "undecided");
        assert_eq!(decide(&s, "p99(blob_get) < 2s"), "met");
        assert_eq!(decide(&s, "p99(blob_get) < 800ms"), "broken");
    }

    #[test]
    fn one_rule_decides_beyond_uncertainty() {
        let u = |lo: f64, hi: f64| Uncertain::new((lo + hi) / 2.0, Some([lo, hi]));
        for (cmp, x, y, want) in [
            (
                Cmp::Lt,
                u(1.0, 2.0),
                Uncertain::exact(3.0),
                Relation::Always,
            ),
            (
                Cmp::Lt,
                u(1.0, 4.0),
                Uncertain::exact(3.0),
                Relation::Straddles,
            ),
            (Cmp::Lt, u(3.5, 4.0), Uncertain::exact(3.0), Relation::Never),
            (Cmp::Gt, u(5.0, 6.0), u(3.0, 4.0), Relation::Always),
            (Cmp::Gt, u(5.0, 6.0), u(3.0, 5.5), Relation::Straddles),
            (Cmp::Gt, u(1.0, 2.0), u(3.0, 4.0), Relation::Never),
            (
                Cmp::Eq,
                Uncertain::exact(2.0),
                Uncertain::exact(2.0),
                Relation::Always,
            ),
        ] {
            assert_eq!(relation(cmp, x, y), want, "{cmp:?} {x:?} {y:?}");
        }
        // A point figure is its own interval.
        assert_eq!(Uncertain::new(2.0, None).interval, [2.0, 2.0]);
        assert_eq!(Uncertain::exact(2.0).times(1.5).interval, [3.0, 3.0]);
    }

    #[test]
    fn rates_and_latencies_no_run_can_measure_are_refused() {
        for (text, why) in [
            ("error_rate < -1%", "between 0% and 100%"),
            ("error_rate < 101%", "between 0% and 100%"),
            ("error_rate < 1.5", "between 0% and 100%"),
            ("p99(blob_get) < -2", "not a latency"),
            ("rps > -5", "negative"),
        ] {
            let e = Threshold::parse(text).unwrap_err();
            assert!(e.reason.contains(why), "{text}: {e}");
        }
        // A bare number is milliseconds.
        let t = Threshold::parse("p99(blob_get) < 2").unwrap();
        assert_eq!(t.latency_limit_ms(), Some(2.0));
        assert_eq!(
            Threshold::parse("p99(blob_get) < 2s")
                .unwrap()
                .latency_limit_ms(),
            Some(2000.0)
        );
    }

    #[test]
    fn a_percentile_without_intervals_is_undecided_against_a_baseline() {
        let t = Threshold::parse("p99(blob_get) > baseline * 1.10").unwrap();
        let base = Baseline {
            summary: summary(),
            table: table(),
            dir: std::path::PathBuf::from("base"),
            dataset_hash: String::new(),
        };
        // Neither run has a p99 interval (100 samples): undecided, whatever the values.
        let v = t.against(&summary(), &table(), &base);
        assert_eq!(v.verdict, "undecided", "{v:?}");
        let why = v.baseline.unwrap().undecided.unwrap();
        assert!(why.contains("neither run has"), "{why}");
        // A rate never has intervals: compared by value.
        let rate = Threshold::parse("rps(blob_get) > baseline * 1.10").unwrap();
        assert_eq!(rate.against(&summary(), &table(), &base).verdict, "clear");
    }

    #[test]
    fn limits_relative_to_a_baseline_parse() {
        let t = Threshold::parse("p99(blob_get) > baseline * 1.10").unwrap();
        assert_eq!(t.limit, Limit::Baseline(1.10));
        assert!(t.needs_baseline());
        let t = Threshold::parse("rps(blob_get) < baseline").unwrap();
        assert_eq!(t.limit, Limit::Baseline(1.0));
        assert!(!Threshold::parse("rps < 100").unwrap().needs_baseline());
        for bad in [
            "p99(blob_get) > baseline * x",
            "p99(blob_get) > baseline + 1",
        ] {
            let e = Threshold::parse(bad).unwrap_err();
            assert!(e.reason.contains("baseline * FACTOR"), "{e}");
        }
    }

    #[test]
    fn bad_expressions_say_why() {
        for (text, why) in [
            ("p99(blob_get)", "no comparison"),
            ("p99(blob_get) >", "no value"),
            ("p99(blob_fetch) > 1s", "unknown operation"),
            ("p99(blobget) > 1s", "did you mean 'blob_get'?"),
            ("p99(nothing) > 1s", "the operations are all, "),
            ("p99 > 1s", "needs an operation"),
            ("p101(blob_get) > 1s", "between 0 and 100"),
            ("latency > 1s", "unknown metric"),
            ("error_rate.lag > 1%", "latency metrics only"),
            (
                "errors(nonsense) > 1",
                "neither an operation nor an error kind",
            ),
            ("p99(blob_get > 1s", "unbalanced"),
            ("rps < lots", "does not start with a number"),
        ] {
            let e = Threshold::parse(text).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in ".{0,40}") {
            let _ = Threshold::parse(&s);
        }
    }

    #[test]
    fn max_errors_tolerates_a_count_or_a_share() {
        let count: MaxErrors = "5".parse().unwrap();
        assert!(!count.exceeded(5, 10));
        assert!(count.exceeded(6, 1000));
        let share: MaxErrors = "1%".parse().unwrap();
        assert!(!share.exceeded(10, 1000));
        assert!(share.exceeded(11, 1000));
        assert!(MaxErrors::default().exceeded(1, 1_000_000));
        assert!(!MaxErrors::default().exceeded(0, 0));
        assert_eq!(share.to_string(), "1%");
        assert!("x".parse::<MaxErrors>().is_err());
        assert!("101%".parse::<MaxErrors>().is_err());
    }
}
