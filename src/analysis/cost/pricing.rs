//! The pricing table (`data/pricing.toml`, compiled in; `--pricing FILE` replaces it) and the
//! pure cost model over it.
//!
//! Units: a GB is 2^30 bytes (cloud bills count binary gigabytes, so a "10 TB" tier boundary
//! is 10,240 GB); a month is [`HOURS_PER_MONTH`] hours, the convention of AWS, Azure, GCP and
//! IBM price pages. A daily price is charged `730 / 24` days a month.
//!
//! The model, for one month of the projected workload:
//! - **storage**: `max(0, stored GB − included GB) × (per_gb_month + per_gb_day × 730/24)`;
//! - **egress**: the month's egress GB split over the tiers (cumulative boundaries, the last
//!   unbounded), each slice at its tier's rate; free allowances are tiers at 0;
//! - **requests**: reads (GET, HEAD) and writes (PUT, PATCH, POST, DELETE) per million;
//! - **fees**: `per_day × 730/24 + per_month`.
//!
//! The total over `months` is the monthly total times `months` (tiers reset every month).
//! Invariants: a validated table has non-negative finite prices and strictly increasing
//! tier bounds ending in an unbounded tier, so every estimate is finite and non-negative.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The table shipped with the binary.
pub const BUILTIN_PRICING: &str = include_str!("../../../data/pricing.toml");

/// Hours in a billing month.
pub const HOURS_PER_MONTH: f64 = 730.0;
/// Bytes in a billed GB.
pub const GB: f64 = 1_073_741_824.0;
/// Days in a billing month.
pub const DAYS_PER_MONTH: f64 = HOURS_PER_MONTH / 24.0;

/// Why a pricing table or an estimate is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    #[error("{origin}: not a valid pricing table: {message}")]
    Parse { origin: String, message: String },
    #[error("{origin}: provider `{provider}`: {reason}")]
    Invalid {
        origin: String,
        provider: String,
        reason: String,
    },
    #[error("unknown provider `{name}` (the pricing table has: {known})")]
    UnknownProvider { name: String, known: String },
    #[error("provider `{provider}` has no region `{region}` (it has: {known})")]
    UnknownRegion {
        provider: String,
        region: String,
        known: String,
    },
    #[error("{0}")]
    Workload(String),
}

/// The whole table.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PricingTable {
    pub providers: BTreeMap<String, Provider>,
}

/// One provider (or tier of a provider) as `--provider` names it.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    pub name: String,
    pub currency: String,
    /// The date the figures are list prices as of.
    pub as_of: String,
    /// The region the base prices are for.
    pub region: String,
    pub sources: Vec<String>,
    #[serde(default)]
    pub caveats: Vec<String>,
    pub storage: StoragePrice,
    pub egress: EgressPrice,
    #[serde(default)]
    pub requests: RequestPrice,
    #[serde(default)]
    pub fees: Fees,
    #[serde(default)]
    pub regions: BTreeMap<String, RegionOverride>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoragePrice {
    #[serde(default)]
    pub per_gb_month: f64,
    #[serde(default)]
    pub per_gb_day: f64,
    #[serde(default)]
    pub included_gb: f64,
}

impl StoragePrice {
    /// The price of a GB for a whole month.
    pub fn monthly_rate(&self) -> f64 {
        self.per_gb_month + self.per_gb_day * DAYS_PER_MONTH
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EgressPrice {
    pub tiers: Vec<Tier>,
}

/// A slice of the month's egress: up to `up_to_gb` (cumulative), at `per_gb`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    #[serde(default)]
    pub up_to_gb: Option<f64>,
    pub per_gb: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RequestPrice {
    #[serde(default)]
    pub per_million_reads: f64,
    #[serde(default)]
    pub per_million_writes: f64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fees {
    #[serde(default)]
    pub per_day: f64,
    #[serde(default)]
    pub per_month: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegionOverride {
    #[serde(default)]
    pub storage: Option<StoragePrice>,
    #[serde(default)]
    pub egress: Option<EgressPrice>,
    #[serde(default)]
    pub caveats: Vec<String>,
}

impl PricingTable {
    /// The table compiled into the binary.
    pub fn builtin() -> Result<PricingTable, PricingError> {
        PricingTable::parse(BUILTIN_PRICING, "built-in data/pricing.toml")
    }

    /// Parses and validates a table; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<PricingTable, PricingError> {
        let table: PricingTable = toml::from_str(text).map_err(|e| PricingError::Parse {
            origin: origin.to_owned(),
            message: e.to_string(),
        })?;
        for (key, p) in &table.providers {
            let invalid = |reason: String| PricingError::Invalid {
                origin: origin.to_owned(),
                provider: key.clone(),
                reason,
            };
            validate_storage(&p.storage).map_err(invalid)?;
            validate_tiers(&p.egress.tiers).map_err(invalid)?;
            for (name, value) in [
                ("requests.per_million_reads", p.requests.per_million_reads),
                ("requests.per_million_writes", p.requests.per_million_writes),
                ("fees.per_day", p.fees.per_day),
                ("fees.per_month", p.fees.per_month),
            ] {
                check_price(name, value).map_err(invalid)?;
            }
            for (region, o) in &p.regions {
                if let Some(s) = &o.storage {
                    validate_storage(s).map_err(|r| invalid(format!("region {region}: {r}")))?;
                }
                if let Some(e) = &o.egress {
                    validate_tiers(&e.tiers)
                        .map_err(|r| invalid(format!("region {region}: {r}")))?;
                }
            }
        }
        Ok(table)
    }

    /// The prices of `provider` in `region` (its base region if `None`).
    pub fn resolve(
        &self,
        provider: &str,
        region: Option<&str>,
    ) -> Result<ResolvedPricing, PricingError> {
        let p = self
            .providers
            .get(provider)
            .ok_or_else(|| PricingError::UnknownProvider {
                name: provider.to_owned(),
                known: self
                    .providers
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let mut resolved = ResolvedPricing {
            key: provider.to_owned(),
            name: p.name.clone(),
            currency: p.currency.clone(),
            as_of: p.as_of.clone(),
            region: p.region.clone(),
            sources: p.sources.clone(),
            caveats: p.caveats.clone(),
            storage: p.storage,
            egress: p.egress.tiers.clone(),
            requests: p.requests,
            fees: p.fees,
        };
        match region {
            None => {}
            Some(r) if r == p.region => {}
            Some(r) => {
                let o = p
                    .regions
                    .get(r)
                    .ok_or_else(|| PricingError::UnknownRegion {
                        provider: provider.to_owned(),
                        region: r.to_owned(),
                        known: std::iter::once(p.region.clone())
                            .chain(p.regions.keys().cloned())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })?;
                resolved.region = r.to_owned();
                if let Some(s) = o.storage {
                    resolved.storage = s;
                }
                if let Some(e) = &o.egress {
                    resolved.egress = e.tiers.clone();
                }
                resolved.caveats.extend(o.caveats.iter().cloned());
            }
        }
        Ok(resolved)
    }
}

fn check_price(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("{name} = {v} is not a non-negative number"))
    }
}

fn validate_storage(s: &StoragePrice) -> Result<(), String> {
    check_price("storage.per_gb_month", s.per_gb_month)?;
    check_price("storage.per_gb_day", s.per_gb_day)?;
    check_price("storage.included_gb", s.included_gb)
}

fn validate_tiers(tiers: &[Tier]) -> Result<(), String> {
    let Some(last) = tiers.last() else {
        return Err("egress.tiers is empty (use [{ per_gb = 0.0 }] for free egress)".into());
    };
    if last.up_to_gb.is_some() {
        return Err("the last egress tier must have no up_to_gb (it takes the rest)".into());
    }
    let mut previous = 0.0;
    for (i, t) in tiers.iter().enumerate() {
        check_price(&format!("egress.tiers[{i}].per_gb"), t.per_gb)?;
        if i + 1 < tiers.len() {
            match t.up_to_gb {
                Some(b) if b.is_finite() && b > previous => previous = b,
                Some(b) => {
                    return Err(format!(
                        "egress.tiers[{i}].up_to_gb = {b} must be finite and above the previous bound ({previous})"
                    ))
                }
                None => {
                    return Err(format!(
                        "egress.tiers[{i}] needs up_to_gb: only the last tier is unbounded"
                    ))
                }
            }
        }
    }
    Ok(())
}

/// One provider's prices in one region: what an estimate uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedPricing {
    pub key: String,
    pub name: String,
    pub currency: String,
    pub as_of: String,
    pub region: String,
    pub sources: Vec<String>,
    pub caveats: Vec<String>,
    #[serde(skip)]
    pub storage: StoragePrice,
    #[serde(skip)]
    pub egress: Vec<Tier>,
    #[serde(skip)]
    pub requests: RequestPrice,
    #[serde(skip)]
    pub fees: Fees,
}

/// A month of workload, the input of [`estimate_month`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MonthlyUsage {
    pub egress_gb: f64,
    pub storage_gb: f64,
    pub read_requests: f64,
    pub write_requests: f64,
}

/// One egress tier's share of the bill.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TierCost {
    pub from_gb: f64,
    /// `None` for the last, unbounded tier.
    pub to_gb: Option<f64>,
    pub gb: f64,
    pub per_gb: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StorageCost {
    pub gb: f64,
    pub included_gb: f64,
    pub billable_gb: f64,
    /// `per_gb_month + per_gb_day × 730/24`.
    pub per_gb_month: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EgressCost {
    pub gb: f64,
    pub tiers: Vec<TierCost>,
    pub cost: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RequestCost {
    pub reads: f64,
    pub writes: f64,
    pub per_million_reads: f64,
    pub per_million_writes: f64,
    pub cost: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FeeCost {
    pub per_day: f64,
    pub per_month: f64,
    pub cost: f64,
}

/// One month's bill, itemized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MonthlyCost {
    pub storage: StorageCost,
    pub egress: EgressCost,
    pub requests: RequestCost,
    pub fees: FeeCost,
    pub total: f64,
}

/// Splits `gb` over `tiers`.
pub fn egress_cost(gb: f64, tiers: &[Tier]) -> EgressCost {
    let gb = gb.max(0.0);
    let mut out = Vec::with_capacity(tiers.len());
    let mut from = 0.0;
    let mut cost = 0.0;
    for t in tiers {
        let to = t.up_to_gb;
        let in_tier = match to {
            Some(b) => (gb.min(b) - from).max(0.0),
            None => (gb - from).max(0.0),
        };
        let c = in_tier * t.per_gb;
        cost += c;
        out.push(TierCost {
            from_gb: from,
            to_gb: to,
            gb: in_tier,
            per_gb: t.per_gb,
            cost: c,
        });
        if let Some(b) = to {
            from = b;
        }
    }
    EgressCost {
        gb,
        tiers: out,
        cost,
    }
}

/// The bill of one month of `usage` at `p`'s prices.
pub fn estimate_month(usage: &MonthlyUsage, p: &ResolvedPricing) -> MonthlyCost {
    let storage_gb = usage.storage_gb.max(0.0);
    let billable = (storage_gb - p.storage.included_gb).max(0.0);
    let rate = p.storage.monthly_rate();
    let storage = StorageCost {
        gb: storage_gb,
        included_gb: p.storage.included_gb,
        billable_gb: billable,
        per_gb_month: rate,
        cost: billable * rate,
    };
    let egress = egress_cost(usage.egress_gb, &p.egress);
    let requests = RequestCost {
        reads: usage.read_requests,
        writes: usage.write_requests,
        per_million_reads: p.requests.per_million_reads,
        per_million_writes: p.requests.per_million_writes,
        cost: usage.read_requests / 1e6 * p.requests.per_million_reads
            + usage.write_requests / 1e6 * p.requests.per_million_writes,
    };
    let fees = FeeCost {
        per_day: p.fees.per_day,
        per_month: p.fees.per_month,
        cost: p.fees.per_day * DAYS_PER_MONTH + p.fees.per_month,
    };
    let total = storage.cost + egress.cost + requests.cost + fees.cost;
    MonthlyCost {
        storage,
        egress,
        requests,
        fees,
        total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn the_builtin_table_is_valid_and_complete() {
        let t = PricingTable::builtin().unwrap();
        for key in [
            "ecr",
            "acr-basic",
            "acr-standard",
            "acr-premium",
            "gcr",
            "ibm",
            "dockerhub",
            "quay",
        ] {
            let p = t.resolve(key, None).unwrap();
            assert!(!p.sources.is_empty() && !p.as_of.is_empty(), "{key}");
        }
    }

    #[test]
    fn ecr_egress_by_hand() {
        let p = PricingTable::builtin()
            .unwrap()
            .resolve("ecr", None)
            .unwrap();
        // 12 TB = 12,288 GB: 100 GB free, 10,140 GB × $0.09 = $912.60,
        // 2,048 GB × $0.085 = $174.08; total $1,086.68.
        let e = egress_cost(12_288.0, &p.egress);
        assert!(close(e.cost, 1086.68), "{}", e.cost);
        assert!(close(e.tiers[1].gb, 10_140.0) && close(e.tiers[2].gb, 2048.0));
        // Boundaries: exactly the free allowance costs nothing; one GB more costs $0.09;
        // exactly 10 TB is 10,140 GB × $0.09 = $912.60.
        assert_eq!(egress_cost(100.0, &p.egress).cost, 0.0);
        assert!(close(egress_cost(101.0, &p.egress).cost, 0.09));
        assert!(close(egress_cost(10_240.0, &p.egress).cost, 912.6));
        // 200 TB = 204,800 GB: $912.60 + 40,960 × $0.085 ($3,481.60) + 102,400 × $0.07
        // ($7,168) + 51,200 × $0.05 ($2,560) = $14,122.20.
        assert!(close(egress_cost(204_800.0, &p.egress).cost, 14_122.2));
    }

    #[test]
    fn regions_override_egress() {
        let t = PricingTable::builtin().unwrap();
        let tokyo = t.resolve("ecr", Some("ap-northeast-1")).unwrap();
        // 1,100 GB: 100 free, 1,000 × $0.114 = $114.
        assert!(close(egress_cost(1100.0, &tokyo.egress).cost, 114.0));
        assert_eq!(tokyo.storage.per_gb_month, 0.10);
        assert!(matches!(
            t.resolve("ecr", Some("mars-1")),
            Err(PricingError::UnknownRegion { .. })
        ));
        assert!(matches!(
            t.resolve("nope", None),
            Err(PricingError::UnknownProvider { .. })
        ));
    }

    #[test]
    fn invalid_tables_are_errors() {
        let base = |tiers: &str| {
            format!(
                "[providers.x]\nname='x'\ncurrency='USD'\nas_of='2025'\nregion='r'\nsources=[]\n\
                 [providers.x.storage]\nper_gb_month=0.1\n[providers.x.egress]\ntiers={tiers}\n"
            )
        };
        assert!(PricingTable::parse(&base("[{ per_gb = 0.1 }]"), "t").is_ok());
        for bad in [
            "[]",
            "[{ up_to_gb = 10, per_gb = 0.1 }]",
            "[{ up_to_gb = 10, per_gb = 0.1 }, { up_to_gb = 5, per_gb = 0.1 }, { per_gb = 0.0 }]",
            "[{ per_gb = -1.0 }]",
            "[{ per_gb = 0.1 }, { per_gb = 0.1 }]",
        ] {
            assert!(PricingTable::parse(&base(bad), "t").is_err(), "{bad}");
        }
        assert!(matches!(
            PricingTable::parse("providers = 3", "t"),
            Err(PricingError::Parse { .. })
        ));
        assert!(PricingTable::parse(&(base("[{ per_gb = 0.1 }]") + "bogus = 1\n"), "t").is_err());
    }
}
