//! Scenarios described in files: `rdma-fabric run --file incast.toml`.
//!
//! A file is a flat TOML table whose keys are `rdma-fabric run`'s long flag
//! names, plus `scenario` for the scenario's name:
//!
//! ```toml
//! scenario = "incast"
//! fanin = 16
//! pfc = "on"
//! dcqcn = "off"
//! buffer-kb = 300
//! json = true
//! ```
//!
//! The file becomes the flags it names, placed before the command line's
//! own, so one parser checks both, and a flag on the command line overrides
//! the file's value for it (`--file incast.toml --fanin 32`).

/// Why a scenario file could not be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScenarioFileError {
    #[error("{0}: {1}")]
    Read(String, String),
    #[error("{0}: not TOML: {1}")]
    Toml(String, String),
    #[error("{0}: `{1}` must be a string, a number or true/false (it is a {2})")]
    Value(String, String, &'static str),
    #[error("{0}: no `scenario = \"NAME\"` (see `rdma-fabric list`)")]
    NoScenario(String),
}

/// The flags `text` (a scenario file named `name`) stands for: the
/// scenario's name first, then `--key value` for each other key, in key
/// order (`--key` alone for `true`; nothing for `false`).
pub fn to_args(name: &str, text: &str) -> Result<Vec<String>, ScenarioFileError> {
    let table: toml::Table =
        text.parse().map_err(|e: toml::de::Error| ScenarioFileError::Toml(name.into(), e.message().into()))?;
    let mut scenario = None;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let v = match value {
            toml::Value::String(s) => Some(s.clone()),
            toml::Value::Integer(i) => Some(i.to_string()),
            toml::Value::Float(f) => Some(f.to_string()),
            toml::Value::Boolean(true) => None,
            toml::Value::Boolean(false) => continue,
            other => return Err(ScenarioFileError::Value(name.into(), key.clone(), other.type_str())),
        };
        if key == "scenario" {
            scenario = Some(v.ok_or_else(|| ScenarioFileError::Value(name.into(), key.clone(), "boolean"))?);
            continue;
        }
        flags.push(format!("--{key}"));
        flags.extend(v);
    }
    let scenario = scenario.ok_or_else(|| ScenarioFileError::NoScenario(name.into()))?;
    Ok([scenario].into_iter().chain(flags).collect())
}

/// Reads `path` and returns its flags ([`to_args`]).
pub fn read(path: &std::path::Path) -> Result<Vec<String>, ScenarioFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioFileError::Read(name.clone(), e.to_string()))?;
    to_args(&name, &text)
}

/// Rewrites a command line so that `run --file F` / `compare --file F`
/// (or `--file=F`) reads as `run SCENARIO --flags-of-F ...`: the file's
/// flags first, the command line's after them (so they win).
pub fn expand(args: Vec<String>) -> Result<Vec<String>, ScenarioFileError> {
    let Some(sub) = args.iter().position(|a| a == "run" || a == "compare") else { return Ok(args) };
    let mut file = None;
    let mut rest = Vec::new();
    let mut it = args[sub + 1..].iter();
    while let Some(a) = it.next() {
        if a == "--file" {
            file = it.next().cloned().or(Some(String::new()));
        } else if let Some(f) = a.strip_prefix("--file=") {
            file = Some(f.to_string());
        } else {
            rest.push(a.clone());
        }
    }
    let Some(file) = file else { return Ok(args) };
    let mut out = args[..=sub].to_vec();
    out.extend(read(std::path::Path::new(&file))?);
    out.extend(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_become_flags_in_order() {
        let text = "scenario = \"incast\"\nfanin = 16\npfc = \"on\"\nline-rate = 2.5\njson = true\nreroute = false\n";
        assert_eq!(
            to_args("f.toml", text).unwrap(),
            ["incast", "--fanin", "16", "--json", "--line-rate", "2.5", "--pfc", "on"]
        );
    }

    #[test]
    fn bad_files_name_what_is_wrong() {
        assert_eq!(to_args("f", "fanin = 3"), Err(ScenarioFileError::NoScenario("f".into())));
        assert!(matches!(to_args("f", "scenario = "), Err(ScenarioFileError::Toml(..))));
        assert_eq!(
            to_args("f", "scenario = \"incast\"\nflows = [1, 2]"),
            Err(ScenarioFileError::Value("f".into(), "flows".into(), "array"))
        );
        assert!(matches!(read(std::path::Path::new("/nonexistent.toml")), Err(ScenarioFileError::Read(..))));
    }

    #[test]
    fn the_command_line_comes_after_the_file() {
        let dir = std::env::temp_dir().join(format!("scenario-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("x.toml");
        std::fs::write(&f, "scenario = \"incast\"\nfanin = 4\n").unwrap();
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = expand(argv(&["rdma-fabric", "run", "--fanin", "8", "--file", f.to_str().unwrap()])).unwrap();
        assert_eq!(got, argv(&["rdma-fabric", "run", "incast", "--fanin", "4", "--fanin", "8"]));
        let untouched = argv(&["rdma-fabric", "run", "incast"]);
        assert_eq!(expand(untouched.clone()).unwrap(), untouched);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
