//! The experiment file (`creb-rs run EXPERIMENT.toml`): `[[registry]]` and `[[experiment]]`
//! tables, read into typed specs and checked before anything is sent.
//!
//! Invariants: an unknown key, a key that does not belong to the experiment's kind, a
//! literal `password` and a bad value are all errors that name the file, line and column
//! and the key. Names are unique and usable as directory names. Option values are kept as
//! the text a flag would take (`"1MiB"`, `16`, `"30s"`): the cells are run through the
//! same flag parser as the commands, so every value gets exactly the command's validation
//! (the command layer's `run::cells` checks every cell's flags when the file is loaded). Relative paths
//! (traces, CA certificates, docker config) are relative to the file's directory.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// An error in the experiment file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    pub file: String,
    /// 1-based; 0 when the parser gave no position.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// A flag value as written in the file: a number or a string, passed on as text.
#[derive(Debug, Clone, PartialEq)]
pub struct FlagValue(pub String);

impl<'de> Deserialize<'de> for FlagValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = FlagValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string such as \"1MiB\" or \"30s\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FlagValue, E> {
                Ok(FlagValue(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FlagValue, E> {
                Ok(FlagValue(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<FlagValue, E> {
                Ok(FlagValue(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FlagValue, E> {
                Ok(FlagValue(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One path or several (`ca_cert = "a.pem"` or `ca_cert = ["a.pem", "b.pem"]`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Paths(pub Vec<PathBuf>);

impl<'de> Deserialize<'de> for Paths {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Paths;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path or an array of paths")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Paths, E> {
                Ok(Paths(vec![PathBuf::from(v)]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Paths, A::Error> {
                let mut out = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    out.push(PathBuf::from(p));
                }
                Ok(Paths(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[[registry]]`: where a registry is and how to authenticate. Secrets are never in the
/// file: `password_env` names an environment variable, `password_cmd` a command.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistrySpec {
    /// Used in directory names and tables.
    pub name: String,
    pub url: String,
    /// Put every repository under this prefix (push/pull `repo`, replay `--repo-prefix`).
    #[serde(default)]
    pub repo_prefix: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    /// The password is in this environment variable (read when the run starts).
    #[serde(default)]
    pub password_env: Option<String>,
    /// The password is what this command prints (`sh -c`), e.g. `aws ecr get-login-password`.
    #[serde(default)]
    pub password_cmd: Option<String>,
    /// Refused with a clear message: a secret does not belong in a file.
    #[serde(default)]
    pub password: Option<Spanned<String>>,
    #[serde(default)]
    pub docker_config: Option<PathBuf>,
    #[serde(default)]
    pub anonymous: bool,
    #[serde(default)]
    pub insecure: bool,
    #[serde(default)]
    pub ca_cert: Paths,
    #[serde(default)]
    pub connect_timeout: Option<FlagValue>,
    #[serde(default)]
    pub request_timeout: Option<FlagValue>,
    #[serde(default)]
    pub body_idle_timeout: Option<FlagValue>,
    #[serde(default)]
    pub credential_timeout: Option<FlagValue>,
    /// `--retry` classes, e.g. `"429,5xx"`.
    #[serde(default)]
    pub retry: Option<String>,
    #[serde(default)]
    pub max_retries: Option<FlagValue>,
    #[serde(default)]
    pub backoff: Option<FlagValue>,
}

/// What an experiment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Replay,
    Push,
    Pull,
    /// `creb-rs capacity`: registries compared by the load they sustain.
    Capacity,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Replay => "replay",
            Kind::Push => "push",
            Kind::Pull => "pull",
            Kind::Capacity => "capacity",
        }
    }
}

/// `[[experiment]]`: one workload, run against every registry (or those in `registries`).
/// The options are the command's flags with `_` for `-`; which belong to which kind is
/// checked ([`KEYS`]).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    pub name: String,
    pub kind: Kind,
    /// Repetitions per round (each its own result directory).
    #[serde(default)]
    pub repeat: Option<u32>,
    /// Only these registries (by name); default all.
    #[serde(default)]
    pub registries: Option<Vec<String>>,
    /// `--fail-if` expressions; a cell for which one holds is reported as failed.
    #[serde(default)]
    pub fail_if: Vec<String>,
    /// More flags, passed on verbatim after the ones above.
    #[serde(default)]
    pub extra_args: Vec<String>,
    #[serde(default)]
    pub seed: Option<FlagValue>,
    #[serde(default)]
    pub concurrency: Option<FlagValue>,
    #[serde(default)]
    pub interval: Option<FlagValue>,
    #[serde(default)]
    pub record_requests: Option<bool>,
    /// `--split-by-header`: the response header whose value labels every operation.
    #[serde(default)]
    pub split_by_header: Option<String>,
    // replay
    #[serde(default)]
    pub traces: Option<Paths>,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub speed: Option<FlagValue>,
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub limit_requests: Option<FlagValue>,
    #[serde(default)]
    pub limit_duration: Option<FlagValue>,
    #[serde(default)]
    pub upload: Option<String>,
    #[serde(default)]
    pub max_lateness: Option<FlagValue>,
    #[serde(default)]
    pub grace: Option<FlagValue>,
    #[serde(default)]
    pub session_gap: Option<FlagValue>,
    #[serde(default)]
    pub prewarm_concurrency: Option<FlagValue>,
    #[serde(default)]
    pub shard_by: Option<String>,
    #[serde(default)]
    pub skip_invalid: Option<bool>,
    #[serde(default)]
    pub replay_failed: Option<bool>,
    #[serde(default)]
    pub strict: Option<bool>,
    // replay and push
    #[serde(default)]
    pub chunk_size: Option<FlagValue>,
    #[serde(default)]
    pub manifest_format: Option<String>,
    /// `--compression` of generated layers: `gzip`, `zstd` or `none`.
    #[serde(default)]
    pub compression: Option<String>,
    /// `--compress-ratio`: compressed ÷ uncompressed.
    #[serde(default)]
    pub compress_ratio: Option<FlagValue>,
    // replay and pull
    #[serde(default)]
    pub verify: Option<String>,
    #[serde(default)]
    pub no_verify: Option<bool>,
    // push and pull
    #[serde(default)]
    pub repo: Option<String>,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub images: Option<FlagValue>,
    // push
    #[serde(default)]
    pub layers: Option<FlagValue>,
    #[serde(default)]
    pub layer_size: Option<FlagValue>,
    #[serde(default)]
    pub monolithic: Option<bool>,
    #[serde(default)]
    pub single_post: Option<bool>,
    /// Push new content every round and repetition (the seed is offset by the cell's
    /// number), so a repeated push uploads instead of finding its blobs present. Default on.
    #[serde(default)]
    pub fresh_content: Option<bool>,
    // pull
    #[serde(default)]
    pub all_tags: Option<bool>,
    /// `--unpack`: each image unpacked as a runtime does (`layer_unpack`, `image_ready`).
    #[serde(default)]
    pub unpack: Option<bool>,
    /// `--replica`: replicas watched for each pushed image (`replication`).
    #[serde(default)]
    pub replica: Vec<String>,
    // capacity
    /// `--slo`: what must hold for a load to be sustained.
    #[serde(default)]
    pub slo: Vec<String>,
    #[serde(default)]
    pub step: Option<FlagValue>,
    #[serde(default)]
    pub step_warmup: Option<FlagValue>,
    #[serde(default)]
    pub max_time: Option<FlagValue>,
    #[serde(default)]
    pub max_speed: Option<FlagValue>,
    #[serde(default)]
    pub resolution: Option<FlagValue>,
    /// `--ladder`: speed factors, as the flag takes them (`"1,2,4,8"`).
    #[serde(default)]
    pub ladder: Option<FlagValue>,
}

/// Which option keys each kind takes (keys every kind takes are not listed).
pub const KEYS: &[(&str, &[Kind])] = &[
    ("seed", &[Kind::Replay, Kind::Push, Kind::Capacity]),
    ("traces", &[Kind::Replay, Kind::Capacity]),
    ("mode", &[Kind::Replay]),
    ("speed", &[Kind::Replay, Kind::Capacity]),
    ("phase", &[Kind::Replay, Kind::Capacity]),
    ("limit_requests", &[Kind::Replay, Kind::Capacity]),
    ("limit_duration", &[Kind::Replay, Kind::Capacity]),
    ("upload", &[Kind::Replay, Kind::Capacity]),
    ("max_lateness", &[Kind::Replay, Kind::Capacity]),
    ("grace", &[Kind::Replay, Kind::Capacity]),
    ("session_gap", &[Kind::Replay, Kind::Capacity]),
    ("prewarm_concurrency", &[Kind::Replay, Kind::Capacity]),
    ("shard_by", &[Kind::Replay, Kind::Capacity]),
    ("skip_invalid", &[Kind::Replay, Kind::Capacity]),
    ("replay_failed", &[Kind::Replay, Kind::Capacity]),
    ("strict", &[Kind::Replay, Kind::Capacity]),
    ("chunk_size", &[Kind::Replay, Kind::Push, Kind::Capacity]),
    (
        "manifest_format",
        &[Kind::Replay, Kind::Push, Kind::Capacity],
    ),
    ("compression", &[Kind::Replay, Kind::Push, Kind::Capacity]),
    (
        "compress_ratio",
        &[Kind::Replay, Kind::Push, Kind::Capacity],
    ),
    ("verify", &[Kind::Replay, Kind::Pull, Kind::Capacity]),
    ("no_verify", &[Kind::Replay, Kind::Pull, Kind::Capacity]),
    ("repo", &[Kind::Push, Kind::Pull]),
    ("tag", &[Kind::Push, Kind::Pull]),
    ("images", &[Kind::Push, Kind::Pull]),
    ("layers", &[Kind::Push]),
    ("layer_size", &[Kind::Push]),
    ("monolithic", &[Kind::Push]),
    ("single_post", &[Kind::Push]),
    ("fresh_content", &[Kind::Push]),
    ("all_tags", &[Kind::Pull]),
    ("unpack", &[Kind::Pull, Kind::Replay, Kind::Capacity]),
    ("replica", &[Kind::Push, Kind::Replay]),
    ("slo", &[Kind::Capacity]),
    ("step", &[Kind::Capacity]),
    ("step_warmup", &[Kind::Capacity]),
    ("max_time", &[Kind::Capacity]),
    ("max_speed", &[Kind::Capacity]),
    ("resolution", &[Kind::Capacity]),
    ("ladder", &[Kind::Capacity]),
];

impl ExperimentSpec {
    /// The kind-specific keys this table sets.
    fn keys_set(&self) -> Vec<&'static str> {
        let set: [(&'static str, bool); 40] = [
            ("seed", self.seed.is_some()),
            ("traces", self.traces.is_some()),
            ("mode", self.mode.is_some()),
            ("speed", self.speed.is_some()),
            ("phase", self.phase.is_some()),
            ("limit_requests", self.limit_requests.is_some()),
            ("limit_duration", self.limit_duration.is_some()),
            ("upload", self.upload.is_some()),
            ("max_lateness", self.max_lateness.is_some()),
            ("grace", self.grace.is_some()),
            ("session_gap", self.session_gap.is_some()),
            ("prewarm_concurrency", self.prewarm_concurrency.is_some()),
            ("shard_by", self.shard_by.is_some()),
            ("skip_invalid", self.skip_invalid.is_some()),
            ("replay_failed", self.replay_failed.is_some()),
            ("strict", self.strict.is_some()),
            ("chunk_size", self.chunk_size.is_some()),
            ("manifest_format", self.manifest_format.is_some()),
            ("compression", self.compression.is_some()),
            ("compress_ratio", self.compress_ratio.is_some()),
            ("verify", self.verify.is_some()),
            ("no_verify", self.no_verify.is_some()),
            ("repo", self.repo.is_some()),
            ("tag", self.tag.is_some()),
            ("images", self.images.is_some()),
            ("layers", self.layers.is_some()),
            ("layer_size", self.layer_size.is_some()),
            ("monolithic", self.monolithic.is_some()),
            ("single_post", self.single_post.is_some()),
            ("fresh_content", self.fresh_content.is_some()),
            ("all_tags", self.all_tags.is_some()),
            ("unpack", self.unpack.is_some()),
            ("replica", !self.replica.is_empty()),
            ("slo", !self.slo.is_empty()),
            ("step", self.step.is_some()),
            ("step_warmup", self.step_warmup.is_some()),
            ("max_time", self.max_time.is_some()),
            ("max_speed", self.max_speed.is_some()),
            ("resolution", self.resolution.is_some()),
            ("ladder", self.ladder.is_some()),
        ];
        set.iter().filter(|(_, on)| *on).map(|(k, _)| *k).collect()
    }

    /// Repetitions per round (at least 1).
    pub fn repetitions(&self) -> u32 {
        self.repeat.unwrap_or(1).max(1)
    }
}

/// A validated experiment file.
#[derive(Debug, Clone)]
pub struct ExperimentFile {
    pub path: PathBuf,
    /// The directory relative paths are resolved against.
    pub base_dir: PathBuf,
    /// SHA-256 of the file's text (the checkpoint notices an edited file).
    pub hash: String,
    pub registries: Vec<RegistrySpec>,
    pub experiments: Vec<Experiment>,
}

/// An experiment with the registries it runs against resolved to indices.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub spec: ExperimentSpec,
    pub registries: Vec<usize>,
    /// 1-based line of its `[[experiment]]` table, for messages about it.
    pub line: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    #[serde(default)]
    registry: Vec<Spanned<RegistrySpec>>,
    #[serde(default)]
    experiment: Vec<Spanned<ExperimentSpec>>,
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

/// The byte offset of `key = …` in the table whose header starts at `span` (up to the next
/// table header), or the header's start.
fn key_offset(text: &str, span: &Range<usize>, key: &str) -> usize {
    let start = span.start.min(text.len());
    let mut offset = start;
    for (i, line) in text[start..].split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if i > 0 && trimmed.starts_with('[') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key) {
            if rest.trim_start().starts_with('=') {
                return offset + (line.len() - trimmed.len());
            }
        }
        offset += line.len();
    }
    start
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ExperimentFile {
    /// Reads and validates an experiment file.
    pub fn load(path: &Path) -> Result<ExperimentFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.display().to_string(),
            line: 0,
            column: 0,
            message: format!("cannot read the experiment file: {e}"),
        })?;
        let base_dir = path
            .parent()
            .map(Path::to_path_buf)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        ExperimentFile::parse(&text, path, &base_dir)
    }

    /// Parses `text` (read from `path`); relative paths resolve against `base_dir`.
    #[allow(clippy::too_many_lines)]
    pub fn parse(text: &str, path: &Path, base_dir: &Path) -> Result<ExperimentFile, ConfigError> {
        let file = path.display().to_string();
        let at = |offset: usize, message: String| {
            let (line, column) = line_col(text, offset);
            ConfigError {
                file: file.clone(),
                line,
                column,
                message,
            }
        };
        let spec: FileSpec = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            let mut message = e.message().trim().to_owned();
            if let Some(cut) = message.find(", expected one of") {
                // The list of every key is long; the docs have it, by kind.
                message.truncate(cut);
                message.push_str(" (the keys are in docs/experiments.md)");
            }
            if message.starts_with("missing field") {
                message.push_str(" in this table");
            }
            at(offset, message)
        })?;
        if spec.registry.is_empty() {
            return Err(at(
                0,
                "no [[registry]] table: name at least one registry".into(),
            ));
        }
        if spec.experiment.is_empty() {
            return Err(at(
                0,
                "no [[experiment]] table: name at least one experiment".into(),
            ));
        }

        let mut names = BTreeSet::new();
        let mut registries = Vec::new();
        for spanned in &spec.registry {
            let span = spanned.span();
            let r = spanned.get_ref();
            let key_at = |key: &str, message: String| at(key_offset(text, &span, key), message);
            check_registry(r, &mut names, &key_at)?;
            let mut r = r.clone();
            r.docker_config = r.docker_config.map(|p| base_dir.join(p));
            r.ca_cert = Paths(r.ca_cert.0.iter().map(|p| base_dir.join(p)).collect());
            registries.push(r);
        }

        let mut names = BTreeSet::new();
        let mut experiments = Vec::new();
        for spanned in &spec.experiment {
            let span = spanned.span();
            let e = spanned.get_ref();
            let key_at = |key: &str, message: String| at(key_offset(text, &span, key), message);
            let regs =
                check_experiment(e, &mut names, &registries, &key_at, &|m| at(span.start, m))?;
            let mut e = e.clone();
            e.traces = e
                .traces
                .map(|t| Paths(t.0.iter().map(|p| base_dir.join(p)).collect()));
            experiments.push(Experiment {
                spec: e,
                registries: regs,
                line: line_col(text, span.start).0,
            });
        }
        use sha2::Digest as _;
        Ok(ExperimentFile {
            path: path.to_path_buf(),
            base_dir: base_dir.to_path_buf(),
            hash: format!("sha256:{}", hex::encode(sha2::Sha256::digest(text))),
            registries,
            experiments,
        })
    }
}

/// A registry table's own rules: a name that can name a directory, used once; credentials
/// only by reference (never a password in the file), each with its counterpart.
fn check_registry(
    r: &RegistrySpec,
    names: &mut BTreeSet<String>,
    key_at: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if !valid_name(&r.name) {
        return Err(key_at(
            "name",
            format!("registry name '{}' must be letters, digits, '-', '_' or '.' (it names directories)", r.name),
        ));
    }
    if !names.insert(r.name.clone()) {
        return Err(key_at(
            "name",
            format!("registry name '{}' is used twice", r.name),
        ));
    }
    check_credentials(r, key_at)
}

/// A registry's credentials: by reference only (an environment variable or a command), a
/// password with a username and the other way round, none when anonymous.
fn check_credentials(
    r: &RegistrySpec,
    key_at: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if let Some(p) = &r.password {
        return Err(key_at(
            "password",
            format!(
                "registry '{}': a password is not accepted in the file{}; name an environment variable with password_env or a command with password_cmd",
                r.name,
                if p.get_ref().is_empty() { "" } else { " (remove it, and change it if the file was shared)" }
            ),
        ));
    }
    if r.password_env.is_some() && r.password_cmd.is_some() {
        return Err(key_at(
            "password_cmd",
            format!(
                "registry '{}': password_env and password_cmd exclude each other",
                r.name
            ),
        ));
    }
    if let Some(var) = &r.password_env {
        if !valid_env_name(var) {
            return Err(key_at(
                "password_env",
                format!("registry '{}': password_env takes the name of an environment variable, not '{var}'", r.name),
            ));
        }
    }
    if (r.password_env.is_some() || r.password_cmd.is_some()) && r.username.is_none() {
        return Err(key_at(
            if r.password_env.is_some() {
                "password_env"
            } else {
                "password_cmd"
            },
            format!("registry '{}': a password needs a username", r.name),
        ));
    }
    if r.username.is_some() && r.password_env.is_none() && r.password_cmd.is_none() {
        return Err(key_at(
            "username",
            format!(
                "registry '{}': username needs password_env or password_cmd",
                r.name
            ),
        ));
    }
    if r.anonymous && (r.username.is_some() || r.docker_config.is_some()) {
        return Err(key_at(
            "anonymous",
            format!(
                "registry '{}': anonymous excludes username and docker_config",
                r.name
            ),
        ));
    }
    Ok(())
}

/// An experiment table's own rules: a name that can name a directory, used once; only the
/// keys of its kind, and the ones its kind needs; registries that exist. The registries it
/// runs on, by index.
#[allow(clippy::too_many_lines)]
fn check_experiment(
    e: &ExperimentSpec,
    names: &mut BTreeSet<String>,
    registries: &[RegistrySpec],
    key_at: &dyn Fn(&str, String) -> ConfigError,
    table_at: &dyn Fn(String) -> ConfigError,
) -> Result<Vec<usize>, ConfigError> {
    if !valid_name(&e.name) {
        return Err(key_at(
            "name",
            format!("experiment name '{}' must be letters, digits, '-', '_' or '.' (it names directories)", e.name),
        ));
    }
    if !names.insert(e.name.clone()) {
        return Err(key_at(
            "name",
            format!("experiment name '{}' is used twice", e.name),
        ));
    }
    for key in e.keys_set() {
        let kinds = KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(&[][..], |(_, kinds)| *kinds);
        if !kinds.contains(&e.kind) {
            let takes: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
            return Err(key_at(
                key,
                format!(
                    "experiment '{}': '{key}' is a {} option, not one of kind = \"{}\"",
                    e.name,
                    takes.join("/"),
                    e.kind.name()
                ),
            ));
        }
    }
    if e.repeat == Some(0) {
        return Err(key_at(
            "repeat",
            format!("experiment '{}': repeat must be at least 1", e.name),
        ));
    }
    let required: &[(&str, bool)] = match e.kind {
        Kind::Replay => &[("traces", e.traces.as_ref().is_some_and(|t| !t.0.is_empty()))],
        Kind::Push => &[
            ("layers", e.layers.is_some()),
            ("layer_size", e.layer_size.is_some()),
        ],
        Kind::Pull => &[("repo", e.repo.is_some())],
        Kind::Capacity => &[
            ("traces", e.traces.as_ref().is_some_and(|t| !t.0.is_empty())),
            ("slo", !e.slo.is_empty()),
        ],
    };
    for (key, present) in required {
        if !present {
            return Err(table_at(format!(
                "experiment '{}': kind = \"{}\" needs '{key}'",
                e.name,
                e.kind.name()
            )));
        }
    }
    let regs = match &e.registries {
        None => (0..registries.len()).collect(),
        Some(list) => {
            let mut out = Vec::new();
            for name in list {
                match registries.iter().position(|r| &r.name == name) {
                    Some(i) if !out.contains(&i) => out.push(i),
                    Some(_) => {}
                    None => {
                        return Err(key_at(
                            "registries",
                            format!("experiment '{}': no [[registry]] is named '{name}'", e.name),
                        ))
                    }
                }
            }
            if out.is_empty() {
                return Err(key_at(
                    "registries",
                    format!("experiment '{}': registries is empty", e.name),
                ));
            }
            out
        }
    };
    Ok(regs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ExperimentFile, ConfigError> {
        ExperimentFile::parse(text, Path::new("x.toml"), Path::new("/base"))
    }

    const GOOD: &str = r#"
[[registry]]
name = "plain"
url = "http://127.0.0.1:5000"

[[registry]]
name = "auth"
url = "http://127.0.0.1:5001"
username = "bench"
password_env = "BENCH_PASSWORD"
repo_prefix = "creb"
ca_cert = "ca.pem"

[[experiment]]
name = "replay-small"
kind = "replay"
traces = ["t.json"]
mode = "stress"
concurrency = 4
limit_requests = "10k"

[[experiment]]
name = "push"
kind = "push"
layers = 2
layer_size = "64KiB"
repeat = 2
registries = ["auth"]
"#;

    #[test]
    fn a_good_file_parses_with_paths_resolved() {
        let f = parse(GOOD).unwrap();
        assert_eq!(f.registries.len(), 2);
        assert_eq!(
            f.registries[1].ca_cert.0,
            vec![PathBuf::from("/base/ca.pem")]
        );
        assert_eq!(f.experiments.len(), 2);
        let replay = &f.experiments[0];
        assert_eq!(replay.spec.kind, Kind::Replay);
        assert_eq!(replay.registries, vec![0, 1]);
        assert_eq!(
            replay.spec.traces.as_ref().unwrap().0,
            vec![PathBuf::from("/base/t.json")]
        );
        assert_eq!(replay.spec.concurrency, Some(FlagValue("4".into())));
        assert_eq!(replay.line, 14);
        assert_eq!(f.experiments[1].registries, vec![1]);
        assert_eq!(f.experiments[1].spec.repetitions(), 2);
        assert!(f.hash.starts_with("sha256:"));
    }

    #[test]
    fn unknown_keys_name_their_line() {
        let text = GOOD.replace("mode = \"stress\"", "mode = \"stress\"\ntrace_files = 1");
        let e = parse(&text).unwrap_err();
        assert_eq!((e.line, e.column), (19, 1), "{e}");
        assert!(e.message.contains("trace_files"), "{e}");
        assert!(e.to_string().starts_with("x.toml:19:1: "), "{e}");
    }

    #[test]
    fn a_key_of_another_kind_is_refused_at_its_line() {
        let text = GOOD.replace("layers = 2", "layers = 2\n  speed = 2");
        let e = parse(&text).unwrap_err();
        assert_eq!((e.line, e.column), (26, 3), "{e}");
        assert!(
            e.message.contains("'speed' is a replay/capacity option"),
            "{e}"
        );
        let text = GOOD.replace("layers = 2", "layers = 2\n  ladder = \"1,2\"");
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("'ladder' is a capacity option"), "{e}");
    }

    #[test]
    fn literal_passwords_are_refused() {
        let text = GOOD.replace(
            "password_env = \"BENCH_PASSWORD\"",
            "password = \"hunter2\"",
        );
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, 10, "{e}");
        assert!(e.message.contains("password_env"), "{e}");
        assert!(!e.to_string().contains("hunter2"));
    }

    #[test]
    fn bad_tables_are_refused() {
        for (from, to, needle) in [
            ("name = \"push\"", "name = \"plain\"\nx=1", "unknown field"),
            ("name = \"auth\"", "name = \"plain\"", "used twice"),
            ("name = \"push\"", "name = \"a/b\"", "directories"),
            ("kind = \"push\"", "kind = \"build\"", "unknown variant"),
            ("layers = 2\n", "", "needs 'layers'"),
            (
                "registries = [\"auth\"]",
                "registries = [\"nope\"]",
                "no [[registry]]",
            ),
            ("password_env = \"BENCH_PASSWORD\"", "", "username needs"),
            (
                "password_env = \"BENCH_PASSWORD\"",
                "password_env = \"A B\"",
                "environment variable",
            ),
            ("repeat = 2", "repeat = 0", "at least 1"),
            (
                "concurrency = 4",
                "concurrency = true",
                "number or a string",
            ),
        ] {
            let text = GOOD.replace(from, to);
            assert_ne!(text, GOOD, "{from}");
            let e = parse(&text).unwrap_err();
            assert!(e.message.contains(needle), "{from} → {e}");
            assert!(e.line > 0, "{e}");
        }
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_col("ab\ncé=x", 6), (2, 3));
        assert_eq!(line_col("", 5), (1, 1));
    }
}
