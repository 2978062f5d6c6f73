//! Command-line flags, hand-rolled like the agent's: flat `--flag value` (or
//! `--flag=value`) pairs, each flag read once, unknown flags refused; plus the duration
//! syntax (`500ms`, `30s`, `2m`, bare seconds) used by both binaries.

use std::time::Duration;

use crate::error::{Error, Result};

/// Parsed `--flag value` pairs; [`Flags::finish`] refuses any flag nobody asked for.
#[derive(Debug)]
pub struct Flags {
    pairs: Vec<(String, String)>,
}

impl Flags {
    /// Parses `args` (without the program name or subcommand). `--help`/`-h` yields
    /// `Ok(None)`.
    pub fn parse(args: &[String]) -> Result<Option<Flags>> {
        let mut pairs = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            if a == "--help" || a == "-h" {
                return Ok(None);
            }
            let Some(flag) = a.strip_prefix("--") else {
                return Err(Error::Config(format!("unexpected argument {a:?}")));
            };
            let (k, v) = match flag.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => {
                    let v = it
                        .next()
                        .ok_or_else(|| Error::Config(format!("--{flag} needs a value")))?;
                    (flag.to_owned(), v.clone())
                }
            };
            if pairs.iter().any(|(seen, _)| *seen == k) {
                return Err(Error::Config(format!("--{k} given twice")));
            }
            pairs.push((k, v));
        }
        Ok(Some(Flags { pairs }))
    }

    /// Takes `--name`'s value, if given.
    pub fn take(&mut self, name: &str) -> Option<String> {
        let i = self.pairs.iter().position(|(k, _)| k == name)?;
        Some(self.pairs.remove(i).1)
    }

    /// Takes `--name`, else the environment variable `env` (empty counts as unset).
    pub fn take_or_env(&mut self, name: &str, env: &str) -> Option<String> {
        self.take(name)
            .or_else(|| std::env::var(env).ok().filter(|v| !v.is_empty()))
    }

    /// Takes `--name` parsed with `FromStr`.
    pub fn take_parsed<T: std::str::FromStr>(&mut self, name: &str) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        self.take(name)
            .map(|v| {
                v.parse()
                    .map_err(|e| Error::Config(format!("--{name} {v:?}: {e}")))
            })
            .transpose()
    }

    /// Takes `--name` as a duration ([`parse_duration`]).
    pub fn take_duration(&mut self, name: &str) -> Result<Option<Duration>> {
        self.take(name)
            .map(|v| parse_duration(&v).map_err(|e| Error::Config(format!("--{name}: {e}"))))
            .transpose()
    }

    /// Fails if a flag was given that no one took.
    pub fn finish(self) -> Result<()> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, _)) => Err(Error::Config(format!("unknown flag --{k}"))),
        }
    }
}

/// Parses `250ms`, `30s`, `2m`, `1h` or bare seconds (`30`, `0.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 500ms, 30s, 2m)"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_are_taken_once_and_unknown_ones_refused() {
        let mut f = Flags::parse(&args(&["--pod", "w-0", "--step-ms=5"]))
            .unwrap()
            .unwrap();
        assert_eq!(f.take("pod").as_deref(), Some("w-0"));
        assert_eq!(f.take_parsed::<u64>("step-ms").unwrap(), Some(5));
        f.finish().unwrap();

        let f = Flags::parse(&args(&["--bogus", "1"])).unwrap().unwrap();
        assert!(f.finish().unwrap_err().to_string().contains("--bogus"));
        assert!(Flags::parse(&args(&["--pod"])).is_err());
        assert!(Flags::parse(&args(&["--a", "1", "--a", "2"])).is_err());
        assert!(Flags::parse(&args(&["--help"])).unwrap().is_none());
        let mut f = Flags::parse(&args(&["--step-ms", "x"])).unwrap().unwrap();
        assert!(f.take_parsed::<u64>("step-ms").is_err());
    }

    #[test]
    fn durations_read_like_kubectl_ones() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }
}
