//! `capacity --fail-if 'capacity < 500/s'`: a CI gate on the answer of a search, in
//! operations per second (`/s`) or as the trace's speed factor (`x`). A search that found
//! no sustained load has a capacity of 0; one that ended at a lower bound (the ceiling, the
//! generator, `--max-time`) is judged on that bound, so a gate it cannot establish fails.

use std::fmt;

use crate::results::capacity::{Capacity, GateVerdict};
use crate::results::thresholds::{split_cmp, Cmp};

/// What a gate compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Operations per second at the capacity (`500/s`).
    PerSecond,
    /// The trace's speed factor at the capacity (`6.5x`).
    Speed,
}

/// One `--fail-if` of a capacity search.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    text: String,
    cmp: Cmp,
    limit: f64,
    unit: Unit,
}

impl Gate {
    /// Parses `capacity CMP N/s` or `capacity CMP Nx`.
    pub fn parse(text: &str) -> Result<Gate, String> {
        let (lhs, cmp, rhs) =
            split_cmp(text).ok_or("no comparison (use >, >=, <, <=, == or !=)")?;
        if lhs != "capacity" {
            return Err(format!(
                "a capacity search's --fail-if is on 'capacity' ('capacity < 500/s' or \
                 'capacity < 4x'), not '{lhs}'; what must hold at each load is --slo"
            ));
        }
        let (number, unit) = if let Some(n) = rhs.strip_suffix("/s") {
            (n, Unit::PerSecond)
        } else if let Some(n) = rhs.strip_suffix('x') {
            (n, Unit::Speed)
        } else {
            return Err(format!(
                "'{rhs}': give operations per second ('500/s') or a speed factor ('4x')"
            ));
        };
        let limit: f64 = number
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("'{rhs}' is not a non-negative number"))?;
        Ok(Gate {
            text: text.to_owned(),
            cmp,
            limit,
            unit,
        })
    }

    /// Judges the search's answer.
    pub fn judge(&self, capacity: &Capacity) -> GateVerdict {
        let value = match self.unit {
            Unit::PerSecond => capacity.requests_per_s,
            Unit::Speed => capacity.speed,
        }
        .unwrap_or(0.0);
        let held = self.cmp.holds(value, self.limit);
        GateVerdict {
            expression: self.text.clone(),
            value,
            verdict: if held { "held" } else { "clear" }.into(),
            at_least: capacity.at_least,
        }
    }

    /// The value with its unit, for messages.
    pub fn show(&self, value: f64) -> String {
        match self.unit {
            Unit::PerSecond => format!("{value:.1} operations/s"),
            Unit::Speed => format!("{value:.3}x"),
        }
    }
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity(speed: Option<f64>, rps: Option<f64>, at_least: bool) -> Capacity {
        Capacity {
            speed,
            requests_per_s: rps,
            at_least,
            ..Capacity::default()
        }
    }

    #[test]
    fn a_gate_compares_the_rate_or_the_speed_and_no_capacity_is_zero() {
        let rate = Gate::parse("capacity < 500/s").unwrap();
        let speed = Gate::parse("capacity<4x").unwrap();
        let found = capacity(Some(6.0), Some(480.0), false);
        assert_eq!(rate.judge(&found).verdict, "held");
        assert_eq!(speed.judge(&found).verdict, "clear");
        let none = capacity(None, None, false);
        assert_eq!(rate.judge(&none).value, 0.0);
        assert_eq!(rate.judge(&none).verdict, "held");
        // A lower bound under the limit cannot establish it: the gate fails.
        let bound = capacity(Some(2.0), Some(300.0), true);
        let v = rate.judge(&bound);
        assert_eq!((v.verdict.as_str(), v.at_least), ("held", true));
    }

    #[test]
    fn a_gate_on_anything_but_capacity_or_without_a_unit_is_refused() {
        for bad in [
            "p99(blob_get) > 2s",
            "capacity < 500",
            "capacity < fast/s",
            "capacity",
        ] {
            assert!(Gate::parse(bad).is_err(), "{bad}");
        }
        assert!(Gate::parse("capacity >= 6.5x").is_ok());
    }
}
